"""The stall probe on a virtual host, and its verification under load (stressapptest).

The probe watches up to two housekeeping CPUs (never the isolated ones), sleeping 20 ms at a time.
Every host shows small stalls on one CPU at a time (timer and scheduler noise, well under the 5 ms
threshold) and, with corrected errors arriving, the EDAC poll's or a CMCI's few milliseconds on the
CPU that handled them. Two faults stall every core at once, as SMIs do (seed 000):
- `smi_stalls`: the firmware takes long SMIs, 150-400 ms each, about 30 an hour, with no error
  behind them (each one moves MSR_SMI_COUNT too);
- `smi_storm` (checker/sim/smi.py): many short SMIs, a few ms each, all-core but below the rule's
  100 ms.
`verify_memory_under_load` passes on a healthy host; a DIMM whose PPR did not take (`dimm_ce_moderate`
left in place) shows new CEs under load; `smi_stalls` fails it on the stall threshold; a host of a
class without stressapptest (`verify_tool_missing`) reports the gap.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from checker.schemas import CoincidentStall, CollectorRun, CollectorStatus, CpuStalls, Stalls

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import VirtualHost

PERIOD_MS, THRESHOLD_MS = 20.0, 5.0
LONG_SMI_PER_HOUR = 30.0
LONG_SMI_MS = (150.0, 400.0)
SHORT_SMI_MS = (1.5, 8.0)
MAX_PENDING = 256
CE_FAULTS = ("dimm_ce_storm", "dimm_ce_moderate", "cmci_storm")


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


def stalls_state(host: VirtualHost, now: dt.datetime, interval_s: int) -> Stalls | None:
    cpus = probed_cpus(host)
    if not cpus:
        return None
    rng = host.rng
    long_stalls = sorted(s for s in host.stalls_pending if s[0] <= now)
    host.stalls_pending = [s for s in host.stalls_pending if s[0] > now]
    events = list(long_stalls)
    if host.has("smi_storm"):
        for _ in range(rng.randrange(8, 24)):
            events.append(
                (now - dt.timedelta(seconds=rng.uniform(0, interval_s)), round(rng.uniform(*SHORT_SMI_MS), 2))
            )
        events.sort()
    errors_arriving = any(f.kind in CE_FAULTS for f in host.faults)
    polled = cpus[0] if errors_arriving else None  # the EDAC poll and CMCIs land on one CPU
    figures = []
    for cpu in cpus:
        noise = round(rng.uniform(0.05, 1.2), 3)
        over = [ms for _, ms in events if ms >= THRESHOLD_MS]
        if cpu == polled:
            over += [round(rng.uniform(THRESHOLD_MS, 12.0), 2) for _ in range(rng.randrange(1, 4))]
        worst = max([noise, *(ms for _, ms in events)], default=noise)
        figures.append(
            CpuStalls(
                cpu=cpu,
                max_ms=max(worst, *over) if over else worst,
                total_ms=round(sum(over), 3),
                count=len(over),
                wakeups=int(interval_s * 1000 / PERIOD_MS),
            )
        )
    coincident = [CoincidentStall(at=at, ms=ms) for at, ms in events if ms >= THRESHOLD_MS] if len(cpus) > 1 else []
    return Stalls(
        started_at=now - dt.timedelta(seconds=interval_s),
        ended_at=now,
        interval_s=float(interval_s),
        period_ms=PERIOD_MS,
        threshold_ms=THRESHOLD_MS,
        cpus=figures,
        coincident=coincident[:64],
        coincident_count=len(coincident),
        probe_cpu_s=round(interval_s * 0.0025, 4),
    )


def collector_run(host: VirtualHost) -> CollectorRun:
    if probed_cpus(host):
        return CollectorRun(status=CollectorStatus.ok, duration_ms=0.2)
    return CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason="every CPU is isolated")


def verify_memory_under_load(host: VirtualHost, params: dict[str, Any]) -> dict[str, Any]:
    """What the real action finds (cyborg/drivers/memtest.py), from the virtual host's faults."""
    seconds = int(params.get("seconds", 300))
    threshold = float(params.get("stall_threshold_ms", 100.0))
    dimm = params.get("dimm")
    if host.has("verify_tool_missing"):
        what = f"DIMM {dimm}" if dimm else "the host's memory"
        gap = (
            f"stressapptest is not installed: {what} is not verified under load "
            "(install the Debian package stressapptest)"
        )
        return {"verdict": "gap", "gap": gap, "failures": [f"verification gap: {gap}"], "dimm": dimm}
    failures: list[str] = []
    edac_new: dict[str, int] = {}
    for fault in host.faults:
        if fault.kind in CE_FAULTS or fault.kind == "dimm_ue":
            sim_dimm = host.dimms[fault.dimm_index]
            new = max(1, int(max(fault.ce_per_s, 0.5) * seconds)) if fault.kind != "dimm_ue" else 1
            key = f"mc{sim_dimm.mc}_{'ue' if fault.kind == 'dimm_ue' else 'ce'}"
            edac_new[key] = edac_new.get(key, 0) + new
            if fault.kind == "dimm_ue":
                sim_dimm.ue_count += 1
            else:
                sim_dimm.ce_count += new
    if edac_new:
        failures.append(
            "new EDAC errors during the run: " + ", ".join(f"{k} +{v}" for k, v in sorted(edac_new.items()))
        )
    worst = round(host.rng.uniform(*LONG_SMI_MS), 1) if host.has("smi_stalls") else round(host.rng.uniform(0.5, 4.0), 2)
    if worst >= threshold:
        failures.append(f"a {worst:.0f} ms stall on the probed CPUs (threshold {threshold:g} ms)")
    return {
        "verdict": "fail" if failures else "pass",
        "failures": failures,
        "gaps": [],
        "dimm": dimm,
        "stressapptest": {"status": "PASS", "hardware_incidents": 0, "errors": 0, "seconds": seconds},
        "edac_new": edac_new,
        "stalls": {"max_ms": worst, "threshold_ms": threshold, "cpus": probed_cpus(host)},
    }
