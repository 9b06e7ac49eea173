"""One collector's CPU per check cycle: the median process CPU time of a cycle running only it, less
that of a cycle running none (boot id, machine id, the report model). Shared by the collector benches."""

from __future__ import annotations

import statistics
import time

from checker.collectors.base import HostAccess
from checker.cycle import Collector, run_cycle
from checker.schemas import Report


def median_cpu_ms(host: HostAccess, name: str, collect: Collector, runs: int) -> tuple[float, Report]:
    """(CPU ms per cycle, the last warm-up cycle's report) after three warm-up cycles."""
    only = {name: collect}
    for _ in range(3):
        report = run_cycle(host, hostname="bench", collectors=only)
    with_it, without = [], []
    for _ in range(runs):
        c = time.process_time()
        run_cycle(host, hostname="bench", collectors=only)
        with_it.append(time.process_time() - c)
        c = time.process_time()
        run_cycle(host, hostname="bench", collectors={})
        without.append(time.process_time() - c)
    return (statistics.median(with_it) - statistics.median(without)) * 1000, report
