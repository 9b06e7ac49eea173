"""CPU stalls from the agent's stall probe (the report's `stalls` section, checker/agent/stallprobe.py).

Seed 000: an SMI stalls every core for hundreds of milliseconds per logging event; a CMCI, or the
EDAC poll, stalls one. So the probe's all-core stalls and one CPU's own are told apart here:
- `cpu_stall`, subject `all-cores`: stalls every probed CPU saw at once; value the longest (ms);
  subject `cpuN`: a CPU with stalls of its own (more than the all-core ones); value its largest (ms,
  which may be an all-core one). Detail: total_ms, count, interval_s, cpus, coincident.
- `all_core_stalls`, subject `host`: how many all-core stalls of LONG_STALL_MS or more the interval
  held (emitted when there was one). Its subject is the SMI counter's (`smi_rate`), so the tickets
  of both land on one host ticket (the dedup key is host, part type and part).
A state per report, no memory: the probe already summed its windows since the previous report.
"""

from __future__ import annotations

from checker.schemas import Stalls
from remediator.signals import SignalValue

LONG_STALL_MS = 100.0  # "hundreds of milliseconds" per SMI (seed 000); below it, scheduler and VM noise
MAX_CPU_SIGNALS = 8
MAX_LISTED = 10


def stall_signals(stalls: Stalls | None) -> list[SignalValue]:
    if stalls is None or not stalls.cpus:
        return []
    cpus = [c.cpu for c in stalls.cpus]
    base = {"interval_s": stalls.interval_s, "cpus": cpus, "threshold_ms": stalls.threshold_ms}
    signals: list[SignalValue] = []
    if stalls.coincident_count:
        lengths = [s.ms for s in stalls.coincident]
        detail = {
            **base,
            "total_ms": round(sum(lengths), 3),
            "count": stalls.coincident_count,
            "coincident": True,
            "at": [s.at.isoformat() for s in stalls.coincident[:MAX_LISTED]],
        }
        signals.append(SignalValue("cpu_stall", "all-cores", max(lengths, default=0.0), detail))
        long = [ms for ms in lengths if ms >= LONG_STALL_MS]
        if long:
            signals.append(
                SignalValue(
                    "all_core_stalls",
                    "host",
                    float(len(long)),
                    {
                        **base,
                        "long_ms": LONG_STALL_MS,
                        "max_ms": max(long),
                        "stalls_ms": long[:MAX_LISTED],
                        "at": [s.at.isoformat() for s in stalls.coincident if s.ms >= LONG_STALL_MS][:MAX_LISTED],
                    },
                )
            )
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
