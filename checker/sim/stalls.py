"""The stall probe on a virtual host, and its verification under load (stressapptest).

The probe watches up to two housekeeping CPUs (never the isolated ones), waking every 100 ms, as the
real one does by default; like it, it sees a stall only when the stall covers a wake-up, and measures
it from the wake-up that was due (`sampled`: a stall of L ms reads as L less up to one period, and one
shorter than the period is missed in proportion). Every host shows small stalls on one CPU at a time
(timer and scheduler noise, well under the 5 ms threshold) and, with corrected errors arriving, the
EDAC poll's or a CMCI's few milliseconds on the CPU that handled them, of which the probe catches a
few. Two faults stall every core at once, as SMIs do (seed 000):
- `smi_stalls`: the firmware takes long SMIs, 150-400 ms each, about 30 an hour, with no error
  behind them (each one moves MSR_SMI_COUNT too);
- `smi_storm` (checker/sim/smi.py): many short SMIs, a few ms each, all-core but below the rule's
  100 ms.
A third stalls every core as long as `smi_stalls` with no SMI: `stalls_not_smi` (Intel hosts, whose
MSR_SMI_COUNT shows it stood still; a kernel or power-management stall). Each all-core stall carries
what the probe saw around it (checker/agent/stallwitness.py): the SMIs counted from its last read of
MSR_SMI_COUNT before the stall (0-1 s earlier) to the one right after (its own SMI, if it was one,
the storm's, and the baseline's one a minute by chance; null on AMD), and over its 10 s window no
steal and no throttling (bare metal, an agent within its quota), and the load.
`verify_memory_under_load` passes on a healthy, drained host; a DIMM whose PPR did not take
(`dimm_ce_moderate` left in place) shows new CEs under load, named per DIMM; `smi_stalls` fails it on
the stall threshold. Gaps: a host the centre did not confirm drained (nothing runs), a host without
stressapptest (`verify_tool_missing`), one whose agent is refused a scope (`verify_scope_refused`: the
test runs bounded in the agent's cgroup).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import TYPE_CHECKING, Any

from checker.schemas import CoincidentStall, CollectorRun, CollectorStatus, CpuStalls, Stalls
from checker.sim.smi import BASELINE_SMI_PER_S, STORM_SMI_PER_S

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import VirtualHost

PERIOD_MS, THRESHOLD_MS = 100.0, 5.0
SMI_SAMPLE_S = 1.0  # the probe's reads of MSR_SMI_COUNT (checker/agent/stallwitness.py)
PROBE_CPU_SHARE = 0.001  # of the interval: what bench/stall_probe.py measured at 100 ms on two CPUs
LONG_SMI_PER_HOUR = 30.0
LONG_SMI_MS = (150.0, 400.0)
SHORT_SMI_MS = (1.5, 8.0)
MAX_PENDING = 256
CE_FAULTS = ("dimm_ce_storm", "dimm_ce_moderate", "cmci_storm")
AGENT_CGROUP_ROOM_MB = 329  # four fifths of what MemoryMax=512M leaves an agent using 100 MB (tests/cyborg)


def probed_cpus(host: VirtualHost) -> list[int]:
    housekeeping = [c for c in range(host.hardware.logical_cpus) if c not in host.isolated]
    return sorted({housekeeping[0], housekeeping[len(housekeeping) // 2]}) if housekeeping else []


def progress(host: VirtualHost, fault: Fault, now: dt.datetime, elapsed: float) -> None:
    """smi_stalls: long all-core stalls over `elapsed` seconds (each an SMI the counter counts)."""
    fault.carry += LONG_SMI_PER_HOUR / 3600 * elapsed
    count = int(fault.carry)
    fault.carry -= count
    host.smi_count += count
    for _ in range(min(count, MAX_PENDING)):
        at = now - dt.timedelta(seconds=host.rng.uniform(0, max(elapsed, 1.0)))
        host.stalls_pending.append((at, round(host.rng.uniform(*LONG_SMI_MS), 1)))


def sampled(side: random.Random, ms: float) -> float | None:
    """A stall of `ms` as the probe measures it: from the wake-up that fell in it, or None (no wake-up did)."""
    late = side.uniform(0, PERIOD_MS)  # where in the stall the wake-up was due
    return round(ms - late, 2) if late < ms else None


def stalls_state(host: VirtualHost, now: dt.datetime, interval_s: int) -> Stalls | None:
    cpus = probed_cpus(host)
    if not cpus:
        return None
    rng = host.rng
    long_stalls = sorted(s for s in host.stalls_pending if s[0] <= now)
    host.stalls_pending = [s for s in host.stalls_pending if s[0] > now]
    events = [(at, ms, -1.0) for at, ms in long_stalls]  # (at, length, its SMIs: -1 one of its own, else a rate)
    if host.has("smi_storm"):
        for _ in range(rng.randrange(8, 24)):
            at = now - dt.timedelta(seconds=rng.uniform(0, interval_s))
            events.append((at, round(rng.uniform(*SHORT_SMI_MS), 2), STORM_SMI_PER_S))
    if host.has("stalls_not_smi"):
        expected = LONG_SMI_PER_HOUR / 3600 * interval_s
        for _ in range(int(expected) + (rng.random() < expected % 1)):
            at = now - dt.timedelta(seconds=rng.uniform(0, interval_s))
            events.append((at, round(rng.uniform(*LONG_SMI_MS), 1), 0.0))
    events.sort()
    side = random.Random(f"{host.hostname}:{now.isoformat()}")  # the probe's sampling, apart from the host's draws
    seen = [(at, ms, smis) for at, length, smis in events if (ms := sampled(side, length)) is not None]

    def around(ms: float, own: float) -> tuple[int | None, float | None]:
        """The probe's reads of MSR_SMI_COUNT around a stall: the last one (every SMI_SAMPLE_S) before it
        and the one right after; a baseline SMI falls in that span by chance."""
        if not host.hardware.intel:
            return None, None
        span = round(side.uniform(0, SMI_SAMPLE_S) + ms / 1000, 3)
        expected = (BASELINE_SMI_PER_S + max(own, 0.0)) * span
        return int(own < 0) + int(expected) + (side.random() < expected % 1), span

    load = round(rng.uniform(0.1, 0.7), 3)
    errors_arriving = any(f.kind in CE_FAULTS for f in host.faults)
    polled = cpus[0] if errors_arriving else None  # the EDAC poll and CMCIs land on one CPU
    figures = []
    for cpu in cpus:
        noise = round(rng.uniform(0.05, 1.2), 3)
        over = [ms for _, ms, _ in seen if ms >= THRESHOLD_MS]
        worst = max([noise, *(ms for _, ms, _ in seen)])
        if cpu == polled:  # a few ms each, dozens an interval: the probe sees those that cover a wake-up
            lengths = [rng.uniform(THRESHOLD_MS, 12.0) for _ in range(rng.randrange(1, 4))]
            lengths += [side.uniform(THRESHOLD_MS, 12.0) for _ in range(side.randrange(10, 40))]
            own = [ms for ms in (sampled(side, length) for length in lengths) if ms is not None]
            over += [ms for ms in own if ms >= THRESHOLD_MS]
            worst = max([worst, *own])
        figures.append(
            CpuStalls(
                cpu=cpu,
                max_ms=worst,
                total_ms=round(sum(over), 3),
                count=len(over),
                wakeups=int(interval_s * 1000 / PERIOD_MS),
            )
        )
    coincident = [
        CoincidentStall(
            at=at,
            ms=ms,
            smis_around=smis_span[0],
            smis_span_s=smis_span[1],
            window_steal_ms=0.0,
            window_throttled_ms=0.0,
            window_load_per_cpu=load,
        )
        for at, ms, smis in seen
        if ms >= THRESHOLD_MS and len(cpus) > 1
        for smis_span in [around(ms, smis)]
    ]
    counted = int(host.smi_count) - host.probe_smi_seen if host.probe_smi_seen is not None else None
    host.probe_smi_seen = int(host.smi_count)
    return Stalls(
        started_at=now - dt.timedelta(seconds=interval_s),
        ended_at=now,
        interval_s=float(interval_s),
        period_ms=PERIOD_MS,
        threshold_ms=THRESHOLD_MS,
        cpus=figures,
        coincident=coincident[:64],
        coincident_count=len(coincident),
        probe_cpu_s=round(interval_s * PROBE_CPU_SHARE, 4),
        hypervisor=False,
        steal_ms=0.0,
        throttled_ms=0.0,
        smis=counted if host.hardware.intel and counted is not None and counted >= 0 else None,
        one_cpu=None if len(cpus) > 1 else f"the agent found one housekeeping CPU to probe ({cpus[0]})",
    )


def collector_run(host: VirtualHost) -> CollectorRun:
    if probed_cpus(host):
        return CollectorRun(status=CollectorStatus.ok, duration_ms=0.2)
    return CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason="every CPU is isolated")


def verify_memory_under_load(host: VirtualHost, params: dict[str, Any]) -> dict[str, Any]:
    """What the real action finds (cyborg/drivers/memtest.py), from the virtual host's faults and the centre's
    drain confirmation (`drained`, which the envelope always carries: absent is not drained)."""
    seconds = int(params.get("seconds", 300))
    threshold = float(params.get("stall_threshold_ms", 100.0))
    dimm = params.get("dimm")
    what = f"DIMM {dimm}" if dimm else "the host's memory"
    if not params.get("drained", False):
        gap = f"host not drained: load test not run ({what} not verified: no scheduler drain confirmed by the centre)"
        return {"verdict": "gap", "gap": gap, "failures": [], "dimm": dimm}
    if host.has("verify_tool_missing"):
        gap = (
            f"stressapptest is not installed: {what} is not verified under load "
            "(install the Debian package stressapptest)"
        )
        return {"verdict": "gap", "gap": gap, "failures": [f"verification gap: {gap}"], "dimm": dimm}
    coverage, gaps = _coverage(host, params)
    failures, edac_new, erred = _errors_under_load(host, seconds, dimm)
    worst = round(host.rng.uniform(*LONG_SMI_MS), 1) if host.has("smi_stalls") else round(host.rng.uniform(0.5, 4.0), 2)
    if worst >= threshold:
        failures.append(f"a {worst:.0f} ms stall on the probed CPUs (threshold {threshold:g} ms)")
    found = {
        "verdict": "fail" if failures else ("gap" if gaps else "pass"),
        "failures": failures,
        "gaps": gaps,
        "dimm": dimm,
        "coverage": coverage,
        "stressapptest": {
            "status": "PASS",
            "hardware_incidents": 0,
            "errors": 0,
            "seconds": seconds,
            "memory_mb": coverage["tested_mb"],
        },
        "edac_new": edac_new,
        "dimms_erred": erred,
        "edac_unplaced": {},
        "dimm_erred": any(d["label"] == dimm for d in erred) if dimm in {d.label for d in host.dimms} else None,
        "stalls": {"max_ms": worst, "threshold_ms": threshold, "cpus": probed_cpus(host)},
    }
    if found["verdict"] == "gap":
        found["gap"] = "; ".join(gaps)
    return found


def _coverage(host: VirtualHost, params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The memory tested: its share of MemAvailable (nine tenths of the DIMMs on a drained host) in a scope of
    its own; under `verify_scope_refused` in the agent's cgroup, as a real host without the polkit rule."""
    total = sum(d.size_mb for d in host.dimms)
    available = total * 9 // 10
    wanted = available * int(params.get("memory_percent", 60)) // 100
    tested = min(wanted, int(params.get("max_memory_mb") or wanted))
    floor = int(params.get("min_coverage_percent", 50))
    gaps: list[str] = []
    scope: str | None = "fleetfix-memtest-0123456789ab"
    if host.has("verify_scope_refused"):
        scope = None
        unit = "/sys/fs/cgroup/system.slice/fleetfix-agent.service"
        gaps.append(
            "ran inside the agent's own cgroup (systemd-run --scope refused: Failed to start transient scope unit: "
            "Access denied; see docs/agent.md, the polkit rule)"
        )
        gaps.append(
            f"only {AGENT_CGROUP_ROOM_MB} MB of the {tested} MB asked for tested: the agent's cgroup caps it "
            f"({unit}/memory.max; MemoryMax= of its unit)"
        )
        gaps.append(f"the load was throttled to 50% of one CPU ({unit}/cpu.max; CPUQuota= of its unit)")
        tested = AGENT_CGROUP_ROOM_MB
    share = round(100 * tested / available, 1) if available else 0.0
    if tested < available * floor // 100:
        gaps.append(f"only {tested} MB of {available} MB available tested ({share}%, below the {floor}% a pass needs)")
    coverage = {
        "tested_mb": tested,
        "available_mb": available,
        "total_mb": total,
        "percent_of_available": share,
        "min_percent": floor,
        "scope": scope,
        "cpus": [c for c in range(host.hardware.logical_cpus) if c not in host.isolated],
        "notes": [],
    }
    return coverage, gaps


def _errors_under_load(
    host: VirtualHost, seconds: int, dimm: str | None
) -> tuple[list[str], dict[str, int], list[dict[str, Any]]]:
    """The CEs and UEs the faulty DIMMs log under load, per controller and per DIMM, as EDAC counts them."""
    edac_new: dict[str, int] = {}
    erred: list[dict[str, Any]] = []
    for fault in host.faults:
        if fault.kind in CE_FAULTS or fault.kind == "dimm_ue":
            sim_dimm = host.dimms[fault.dimm_index]
            new = max(1, int(max(fault.ce_per_s, 0.5) * seconds)) if fault.kind != "dimm_ue" else 1
            kind = "ue" if fault.kind == "dimm_ue" else "ce"
            key = f"mc{sim_dimm.mc}_{kind}"
            edac_new[key] = edac_new.get(key, 0) + new
            if fault.kind == "dimm_ue":
                sim_dimm.ue_count += 1
            else:
                sim_dimm.ce_count += new
            entry = {"label": sim_dimm.label or None, "mc": sim_dimm.mc, "entry": sim_dimm.name}
            entry |= {"location": sim_dimm.location or None, "ce": 0, "ue": 0, kind: new}
            erred.append(entry)
    failures: list[str] = []
    if erred:
        named = ", ".join(
            f"{d['label']} (mc{d['mc']}/{d['entry']}) " + " ".join(f"+{d[k]} {k.upper()}" for k in ("ce", "ue") if d[k])
            for d in erred
        )
        failures.append(f"new EDAC errors during the run on {named}")
        labels = {d.label for d in host.dimms}
        if dimm in labels and not any(d["label"] == dimm for d in erred):
            failures.append(f"not the DIMM verified ({dimm}): another DIMM erred under load")
    return failures, edac_new, erred
