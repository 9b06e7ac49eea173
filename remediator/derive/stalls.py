"""CPU stalls from the agent's stall probe (the report's `stalls` section, checker/agent/stallprobe.py).

Seed 000: an SMI stalls every core for hundreds of milliseconds per logging event; a CMCI, or the
EDAC poll, stalls one. So the probe's all-core stalls and one CPU's own are told apart here:
- `cpu_stall`, subject `all-cores`: stalls every probed CPU saw at once; value the longest (ms);
  subject `cpuN`: a CPU with stalls of its own (more than the all-core ones); value its largest (ms,
  which may be an all-core one). Detail: total_ms, count, interval_s, cpus, coincident.
- `all_core_stalls`, subject `host`: how many all-core stalls of LONG_STALL_MS or more the interval
  held that may be SMIs (emitted when there was one): measured ones, so every stall of LONG_STALL_MS +
  period or more counts, a shorter one only when the probe's wake-up fell early enough in it
  (`counts_all_from_ms`). Its subject is the SMI counter's (`smi_rate`), so the tickets of both land
  on one host ticket (the dedup key is host, part type and part). `smi_evidence` says whether
  MSR_SMI_COUNT moved around each stall (`smis_around`, over `smis_span_s`: about a second before it
  to just after, or its 10 s window when finer reads are missing) or the host has no counter to
  confirm them.
  With one CPU probed it is a gap instead: value 0, `coincidence_unknown: true` and why (`one_cpu`),
  so nobody reads "no all-core stalls" as "no SMI stalls".
- `all_core_stalls_not_smi`, subject the cause: the long all-core stalls something else explains,
  counted per cause (`not_smi_cause`, first match wins): `hypervisor` (the CPU's hypervisor flag: a
  VM, whose vCPUs the hypervisor deschedules together); then a stall the SMI counter moved around is
  an SMI suspect whatever else went on (SMM time is charged to the running task, so an SMI storm can
  itself throttle the probe's cgroup; `all_core_stalls` says so in `also_present`); only with the
  counter flat or absent: `steal` (steal time on the probed CPUs in the stall's window), `throttled`
  (the probe's own cgroup hit its CPU quota in that window: the agent's threads stopped, not the
  host), `smi-counter-flat` (bare metal, MSR_SMI_COUNT readable and still around the stall on the
  one CPU it is read on: real all-core stalls, but not SMIs), `saturated` (no SMI counter, and the
  load was at least one runnable task per CPU: the probe's nice-10 threads may simply have waited,
  or an SMI stopped them: ambiguous, so its own low-priority ticket).
Every detail also says what the probe could see (`period_ms`, `active_share`, `sees`): a measured
length is a lower bound (the stall began at most one period before the wake-up was due), a stall
shorter than the period is seen only when it covers a wake-up, and a duty-cycled probe is blind
outside its active share. A state per report, no memory: the probe already summed its windows, and
read the SMI counter around each stall itself (the `smi_rate` signal spans report to report and
is derived after this one).
"""

from __future__ import annotations

from typing import Any

from checker.schemas import CoincidentStall, Stalls
from remediator.signals import SignalValue

LONG_STALL_MS = 100.0  # "hundreds of milliseconds" per SMI (seed 000); below it, scheduler and VM noise
SATURATED_LOAD_PER_CPU = 1.0  # a runnable task per CPU on average: a nice-10 thread may wait its turn
NOT_SMI_WHY = {
    "hypervisor": "a VM (the CPU's hypervisor flag): the hypervisor deschedules its vCPUs together",
    "steal": "the hypervisor took the probed CPUs (steal time) in the stall's window",
    "throttled": "the agent's own cgroup hit its CPU quota in the stall's window: the probe stopped, not the host",
    "smi-counter-flat": "MSR_SMI_COUNT did not move around the stall: a real all-core stall, but not an SMI",
    "saturated": "no SMI counter, and a runnable task per CPU or more: the probe's nice-10 threads may have waited",
}
MAX_CPU_SIGNALS = 8
MAX_LISTED = 10


def sees(stalls: Stalls) -> str:
    """What the probe could see over the interval, said on the evidence so that it does not overclaim."""
    period = f"{stalls.period_ms:g} ms"
    sure = f"{stalls.period_ms + stalls.threshold_ms:g} ms"
    when = "" if stalls.active_share >= 1 else " while it was awake"
    awake = (
        "awake all the interval"
        if stalls.active_share >= 1
        else f"awake {stalls.active_share:.0%} of the interval (stalls in the rest are not seen)"
    )
    return (
        f"wake-ups every {period}, {awake}: every stall of {sure} or more{when} is seen, one shorter than "
        f"{period} only when it covers a wake-up (about length / {period} of them); a length is a lower bound, "
        f"the stall may have lasted up to {period} longer"
    )


def not_smi_cause(stall: CoincidentStall, stalls: Stalls) -> str | None:
    """What explains an all-core stall other than an SMI (module doc), or None: an SMI suspect."""
    if stalls.hypervisor:
        return "hypervisor"
    if stall.smis_around:  # SMM time is charged to the running task: an SMI storm can itself throttle the probe
        return None
    if stall.window_steal_ms:
        return "steal"
    if stall.window_throttled_ms:
        return "throttled"
    if stall.smis_around == 0:
        return "smi-counter-flat"
    if stall.smis_around is None and (stall.window_load_per_cpu or 0.0) >= SATURATED_LOAD_PER_CPU:
        return "saturated"
    return None


def _context(stalls: Stalls) -> dict[str, Any]:
    """What else went on over the interval (checker/agent/stallwitness.py); null: not read."""
    return {
        "hypervisor": stalls.hypervisor,
        "steal_ms": stalls.steal_ms,
        "throttled_ms": stalls.throttled_ms,
        "smis": stalls.smis,
    }


def _long_signals(stalls: Stalls, base: dict[str, Any]) -> list[SignalValue]:
    """all_core_stalls (the SMI suspects) and all_core_stalls_not_smi (per cause) of the long ones."""
    long = [s for s in stalls.coincident if s.ms >= LONG_STALL_MS]
    by_cause: dict[str | None, list[CoincidentStall]] = {}
    for stall in long:
        by_cause.setdefault(not_smi_cause(stall, stalls), []).append(stall)
    counts = {cause: len(found) for cause, found in by_cause.items() if cause is not None}
    long_base = {**base, **_context(stalls), "long_ms": LONG_STALL_MS, "not_smi": counts}
    signals = []
    suspects = by_cause.pop(None, [])
    if suspects:
        confirmed = all(s.smis_around for s in suspects)
        evidence = "the SMI counter moved around each" if confirmed else "no SMI counter read to confirm it"
        also = _also_present(suspects)
        if also:
            evidence += f" ({' and '.join(also)} in their windows too)"
        signals.append(
            SignalValue(
                "all_core_stalls",
                "host",
                float(len(suspects)),
                {
                    **long_base,
                    **_listed(suspects),
                    "counts_all_from_ms": LONG_STALL_MS + stalls.period_ms,
                    "smi_counter": "moved" if confirmed else "none",
                    "smi_evidence": evidence,
                    "also_present": also,
                    "coincidence_unknown": False,
                },
            )
        )
    for cause, found in sorted(by_cause.items(), key=lambda item: str(item[0])):
        detail = {**long_base, **_listed(found), "cause": cause, "why": NOT_SMI_WHY[str(cause)]}
        signals.append(SignalValue("all_core_stalls_not_smi", str(cause), float(len(found)), detail))
    return signals


def _also_present(suspects: list[CoincidentStall]) -> list[str]:
    """What else went on in the SMI suspects' windows (steal, throttling): present, but the counter moved."""
    also = []
    if any(s.window_steal_ms for s in suspects):
        also.append("steal")
    if any(s.window_throttled_ms for s in suspects):
        also.append("throttling")
    return also


def _listed(stalls: list[CoincidentStall]) -> dict[str, Any]:
    return {
        "max_ms": max(s.ms for s in stalls),
        "stalls_ms": [s.ms for s in stalls[:MAX_LISTED]],
        "at": [s.at.isoformat() for s in stalls[:MAX_LISTED]],
        "smis_around": [s.smis_around for s in stalls[:MAX_LISTED]],
        "smis_span_s": [s.smis_span_s for s in stalls[:MAX_LISTED]],
    }


def stall_signals(stalls: Stalls | None) -> list[SignalValue]:
    if stalls is None or not stalls.cpus:
        return []
    cpus = [c.cpu for c in stalls.cpus]
    base = {
        "interval_s": stalls.interval_s,
        "cpus": cpus,
        "threshold_ms": stalls.threshold_ms,
        "period_ms": stalls.period_ms,
        "active_share": stalls.active_share,
        "sees": sees(stalls),
    }
    signals: list[SignalValue] = []
    if len(cpus) < 2:
        gap = {**base, **_context(stalls), "coincidence_unknown": True, "one_cpu": stalls.one_cpu or "one CPU probed"}
        signals.append(SignalValue("all_core_stalls", "host", 0.0, gap))
    if stalls.coincident_count:
        lengths = [s.ms for s in stalls.coincident]
        causes = [not_smi_cause(s, stalls) for s in stalls.coincident]
        detail = {
            **base,
            **_context(stalls),
            "total_ms": round(sum(lengths), 3),
            "count": stalls.coincident_count,
            "coincident": True,
            "at": [s.at.isoformat() for s in stalls.coincident[:MAX_LISTED]],
            "not_smi": {c: causes.count(c) for c in sorted({c for c in causes if c is not None})},
        }
        signals.append(SignalValue("cpu_stall", "all-cores", max(lengths, default=0.0), detail))
        signals += _long_signals(stalls, base)
    own = [c for c in stalls.cpus if c.count > stalls.coincident_count]
    for cpu in sorted(own, key=lambda c: -c.max_ms)[:MAX_CPU_SIGNALS]:
        detail = {
            **base,
            "total_ms": cpu.total_ms,
            "count": cpu.count - stalls.coincident_count,
            "coincident": False if len(cpus) > 1 else None,  # one CPU probed: cannot tell
        }
        signals.append(SignalValue("cpu_stall", f"cpu{cpu.cpu}", cpu.max_ms, detail))
    return signals
