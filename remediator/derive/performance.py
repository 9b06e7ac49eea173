"""The benchmark score a report carries (the agent's own run, about once a day): `benchmark_score`.

Whether it is an outlier in its hardware class needs the other hosts' scores, so that judgement is
made where the database is (remediator.benchmarks), not here.
"""

from __future__ import annotations

from checker.schemas import BenchmarkResult
from remediator.signals import SignalValue


def benchmark_signals(result: BenchmarkResult | None) -> list[SignalValue]:
    if result is None:
        return []
    detail = {
        "unit": result.unit,
        "method_version": result.method_version,
        "duration_s": result.duration_s,
        "cpu": result.cpu,
        "ghz": result.ghz,
        "clock_source": result.clock_source,
        "ran_at": result.ran_at.isoformat(),
        "parts": dict(result.parts),
        "conditions": dict(result.conditions),
        "source": "agent",
    }
    return [SignalValue("benchmark_score", result.name, result.score, detail)]
