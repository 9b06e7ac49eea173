"""The simulated agent's benchmark: a score per core per GHz once a simulated day, by hardware class.

The Opteron 8356 class scores on seed 001's own scale (INFN/CCR-11/01, HEP-SPEC06 per core per GHz):
3.4-3.9 on healthy hosts, 1.66 on a host still on the stock kernel, whose BIOS workaround for erratum
298 disables the TLB (the `errata_unpatched` fault with its `stock` variant; the withdrawn patched build
keeps the TLB on and scores healthy). The other classes' scores are this simulation's own, in the
agent benchmark's unit, spread a few per cent host to host. `slow_host` (a BIOS power profile capping
the clock: nothing in the kernel log, only the benchmark shows it) scores 60 % of its class.
"""

from __future__ import annotations

import datetime as dt
import zlib
from typing import TYPE_CHECKING

from checker.schemas import BenchmarkResult, CollectorRun, CollectorStatus
from checker.sim.hardware import OPTERON_STOCK_KERNEL

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

NAME = "fleetfix-cpumem-v1"  # the agent's benchmark (checker/agent/benchmark.py): the simulated agent stands in
EVERY = dt.timedelta(days=1)
CLASS_SCORE = {  # median score, relative spread (half width)
    "legacy-opteron-8356": (3.65, 0.07),  # 3.4-3.9 (seed 001)
    "compute-skx-2s": (71.0, 0.03),
    "compute-icx-2s": (78.0, 0.03),
    "storage-epyc-1s": (84.0, 0.03),
    "edge-xeon-e": (69.0, 0.03),
    "compute-spr-cxl": (88.0, 0.03),
    "gpu-a100-8x": (80.0, 0.03),
}
TLB_DISABLED = 1.66  # seed 001: per core per GHz with the BIOS's erratum-298 workaround
SLOW_HOST_FACTOR = 0.6
NOMINAL_GHZ = {"legacy-opteron-8356": 2.3}  # the rest from their model names, or their class's nominal clock


def score(host: VirtualHost) -> float:
    hw = host.hardware
    if hw.name == "legacy-opteron-8356" and host.kernel == OPTERON_STOCK_KERNEL:
        return TLB_DISABLED
    median, spread = CLASS_SCORE.get(hw.name, (50.0, 0.03))
    offset = (zlib.crc32(host.hostname.encode()) % 1001) / 1000 * 2 - 1  # -1..1, the same for a host every day
    value = median * (1 + spread * offset)
    return round(value * (SLOW_HOST_FACTOR if host.has("slow_host") else 1.0), 3)


def benchmark(host: VirtualHost, now: dt.datetime) -> tuple[BenchmarkResult | None, CollectorRun | None]:
    """A run when a simulated day has passed since the last (the first report runs one)."""
    if host.benchmark_at is not None and now - host.benchmark_at < EVERY:
        return None, None
    host.benchmark_at = now
    result = BenchmarkResult(
        name=NAME,
        score=score(host),
        duration_s=0.1,
        cpu=0,
        ghz=NOMINAL_GHZ.get(host.hardware.name, 2.0),
        clock_source="cpuinfo model name",
        ran_at=now,
    )
    return result, CollectorRun(status=CollectorStatus.ok, duration_ms=100.0)
