"""The class-level benchmark check: a hardware class whose median score is well below the score configured as
expected for it (firmware_baselines.yaml, `performance.expected`), which is seed 001's own case.

INFN/CCR-11/01 (Fabiani, Mazzoni 2011, Tabella 1) compared across CPU models and platforms: the Opteron 8356
(family 16, model 2, stepping 2) class with the BIOS's erratum-298 workaround scored 1.660 and 1.733
HEP-SPEC06 per core per GHz, where an Opteron 2380 scored 3.887, a 2358SE 3.562 and a Supermicro 8356 without
the BIOS patch 3.382. The whole class was slow ("questi hanno prestazioni scarse nel loro complesso"), so a
comparison within it (remediator.benchmarks) shows no outlier: its median moved with it. Only a figure from
outside the class, the expected score, shows it.

SHORTFALL_PCT: the class's median 20 % or more below its expected score. The seed's healthy hosts spread
3.4-3.9 (about 7 % either side of 3.65); its slow class sat 55 % below (1.66 / 3.65 = 0.45). 20 % is about
three times the healthy spread and well short of the seed's case. One finding per class: the signal goes on one
host of the class (the lowest host id among those scored, stable while that host reports) with the class as
its subject, so the rule's ticket (part_type hardware_class, part = the class) is one ticket, not one per host.
A class whose CPU matches an erratum is left to the errata path: each host's `errata_match` carries the
class figure (`class_benchmark`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remediator.signals import SignalValue

if TYPE_CHECKING:
    from remediator.baselines import ClassBaseline
    from remediator.models import Host

KIND = "benchmark_class_below_expected"
SHORTFALL_PCT = 20.0
MIN_HOSTS = 3  # the median of three or more: one odd host cannot make the class look slow


@dataclass(frozen=True)
class Shortfall:
    name: str
    value: float  # per cent below expected
    detail: dict[str, Any]
    representative: bool  # this host carries the class's signal


def expected_of(baseline: ClassBaseline | None, name: str) -> float | None:
    performance = baseline.performance if baseline is not None else None
    return performance.expected.get(name) if performance is not None else None


def below_expected(
    host: Host,
    name: str,
    scores: dict[int, float],
    baseline: ClassBaseline | None,
    errata: list[str],
    basis: tuple[str | None, int | None],
) -> Shortfall | None:
    """The class's shortfall on this benchmark when its median is SHORTFALL_PCT or more below expected."""
    expected = expected_of(baseline, name)
    if expected is None or len(scores) < MIN_HOSTS:
        return None
    median = statistics.median(scores.values())
    shortfall = round(100 * (expected - median) / expected, 1)
    if shortfall < SHORTFALL_PCT:
        return None
    performance = baseline.performance if baseline is not None else None
    detail = {
        "hardware_class": host.hardware_class,
        "benchmark": name,
        "class_median": round(median, 4),
        "expected": expected,
        "shortfall_pct": shortfall,
        "threshold_pct": SHORTFALL_PCT,
        "n": len(scores),
        "min": round(min(scores.values()), 4),
        "max": round(max(scores.values()), 4),
        "clock_source": basis[0],
        "method_version": basis[1],
        "source": performance.source if performance is not None else None,
        "errata": bool(errata),
        "errata_ids": errata,
        "method": "class median against the class's configured expected score (firmware_baselines.yaml)",
    }
    return Shortfall(name, shortfall, detail, representative=host.id == min(scores))


def class_signals(host: Host, found: list[Shortfall], signals: list[SignalValue]) -> list[SignalValue]:
    """The class's signal (on its representative host only), and the class figure on the errata evidence."""
    if not found:
        return []
    for signal in signals:
        if signal.kind == "errata_match":
            signal.detail["class_benchmark"] = [s.detail for s in found]
    worst = max((s for s in found if s.representative), key=lambda s: s.value, default=None)
    if worst is None:
        return []
    detail = {**worst.detail, "representative": host.hostname, "benchmarks": [s.name for s in found]}
    return [SignalValue(KIND, host.hardware_class, worst.value, detail)]
