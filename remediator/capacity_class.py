"""Lost capacity against the class's median, where neither the host's inventory nor its class's capacity
block says what it should have (remediator/derive/capacity.py has the per-host check; this one needs the
store, so it runs at ingest beside the benchmark class check, remediator/benchmarks.py).

Each host's measures go out as `capacity_inventory` when they change and once a day; a class's median is
taken over its hosts' latest such signal within LOOKBACK. It is used only with MIN_HOSTS or more hosts and
when at least MAJORITY of them sit at the median (within the memory tolerance for memory) and no more than
max(1, MAX_BELOW_SHARE of the class) sit below it. A class split between two configurations (half with 16
DIMMs, half with 8) has no figure to hold a host to; nor has a class part-way through an intended change (a
memory upgrade two thirds done leaves a third "below", a reclaim, an agent rollout that counts another way):
many hosts short of the same median at once is a change of the class, not many broken hosts. A host below
such a median gets `capacity_ambiguous` instead (no rule acts on it, so the split never opens a ticket per
host: give the class a capacity block). All three figures are our own choice: five hosts make one odd host
unable to move the median, two thirds is a clear majority that a half-half split never reaches, and 5 % is
well above the share of a class that loses a part at the same time (a DIMM or disk a week in a thousand).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.capacity_baseline import DEFAULT_MEMORY_TOLERANCE_PCT
from remediator.derive.capacity import (
    INVENTORY,
    MEASURES,
    MEMORY_SLACK_GIB,
    CapacityMemory,
    Expectation,
    configured,
    inventory_of,
    missing_signal,
    one_per_lost_dimm,
)
from remediator.derive.capacity_sel import explain
from remediator.host_evaluation import baselines_of
from remediator.models import Host, Signal
from remediator.signals import SignalValue

AMBIGUOUS = "capacity_ambiguous"
MIN_HOSTS = 5
MAJORITY = 2 / 3
MAX_BELOW_SHARE = 0.05
LOOKBACK = dt.timedelta(days=3)  # hosts send their inventory daily: three days spans a missed day or two
MAX_CLASS_ROWS = 20_000
CACHE_S = 60.0
UNKNOWN_CLASS = "unknown"


@dataclass
class ClassInventories:
    hosts: dict[int, dict[str, Any]]  # host id -> its latest inventory detail
    expires: float
    expectations: dict[str, Expectation | None] = field(default_factory=dict)  # per measure, once per fill


_cache: dict[str, ClassInventories] = {}


def clear_cache() -> None:
    _cache.clear()


def class_inventories(session: Session, hardware_class: str, now: dt.datetime) -> ClassInventories:
    cached = _cache.get(hardware_class)
    if cached is not None and cached.expires > time.monotonic():
        return cached
    rows = session.execute(
        select(Signal.host_id, Signal.detail)
        .join(Host, Host.id == Signal.host_id)
        .where(Host.hardware_class == hardware_class, Signal.kind == INVENTORY, Signal.observed_at >= now - LOOKBACK)
        .order_by(Signal.observed_at.desc(), Signal.id.desc())
        .limit(MAX_CLASS_ROWS)
    ).all()
    hosts: dict[int, dict[str, Any]] = {}
    for host_id, detail in rows:
        hosts.setdefault(host_id, dict(detail or {}))
    entry = ClassInventories(hosts, time.monotonic() + CACHE_S)
    _cache[hardware_class] = entry
    return entry


def _close(a: float, b: float, measure: str) -> bool:
    if measure != "memory":
        return a == b
    return abs(a - b) <= b * DEFAULT_MEMORY_TOLERANCE_PCT / 100 + MEMORY_SLACK_GIB


def median_expectation(measure: str, values: Sequence[float], peers: Sequence[dict[str, Any]]) -> Expectation | None:
    """The class's median as the expectation, or None with too few hosts; `ambiguous` in extra when split."""
    if len(values) < MIN_HOSTS:
        return None
    median = float(statistics.median(values))
    at_median = sum(1 for v in values if _close(v, median, measure))
    share = at_median / len(values)
    below = sum(1 for v in values if v < median and not _close(v, median, measure))
    counts = Counter(values)
    extra: dict[str, Any] = {
        "n": len(values),
        "majority_pct": round(100 * share, 1),
        "below": below,
        "distribution": {f"{v:g}": n for v, n in sorted(counts.items())[:12]},
    }
    if share < MAJORITY or below > max(1, MAX_BELOW_SHARE * len(values)):
        extra["ambiguous"] = True
    slots: tuple[str, ...] = ()
    if measure == "dimms":  # the slots the hosts at the median fill, nearly all of them
        typical = [p.get("dimm_locators") or [] for p in peers if _close(float(p.get("dimms") or 0), median, measure)]
        filled = Counter(loc for locators in typical for loc in locators)
        slots = tuple(sorted(loc for loc, n in filled.items() if typical and n / len(typical) >= MAJORITY))
    tolerance = DEFAULT_MEMORY_TOLERANCE_PCT if measure == "memory" else 0.0
    return Expectation(median, "median", tolerance, slots, extra)


def class_signals(
    session: Session, host: Host, report: Report, memory: dict[str, Any], now: dt.datetime
) -> list[SignalValue]:
    """capacity_missing (or capacity_ambiguous) against the class median, for measures nothing configured."""
    if host.hardware_class == UNKNOWN_CLASS or (
        report.observations.capacity is None and report.observations.identity is None
    ):
        return []
    inventory = inventory_of(report)
    labels = {str(k): str(v) for k, v in (host.labels or {}).items()}
    baseline = baselines_of(host).for_class(host.hardware_class)
    open_measures = [
        m
        for m in MEASURES
        if m in inventory.measures and configured(m, labels, baseline.capacity if baseline else None, inventory) is None
    ]
    if not open_measures:
        return []
    entry = class_inventories(session, host.hardware_class, now)
    if host.id not in entry.hosts:  # a host the store has no inventory of yet counts from its first report
        entry.hosts[host.id] = {**inventory.measures, "dimm_locators": sorted(inventory.dimms)}
        entry.expectations.clear()
    kept_raw = ((memory.get("derive") or {}).get("capacity")) or None
    kept = CapacityMemory.model_validate(kept_raw) if isinstance(kept_raw, dict) else None
    found: list[SignalValue] = []
    for measure in open_measures:
        if measure not in entry.expectations:  # the median moves with the cache, not with each report
            peers = [d for d in entry.hosts.values() if isinstance(d.get(measure), int | float)]
            entry.expectations[measure] = median_expectation(measure, [float(d[measure]) for d in peers], peers)
        expected = entry.expectations[measure]
        if expected is None:
            continue
        seen = inventory.measures[measure]
        signal = missing_signal(measure, seen, expected, inventory, kept, host.hardware_class)
        if signal is None:
            continue
        if expected.extra.get("ambiguous"):
            found.append(
                SignalValue(AMBIGUOUS, measure, signal.value, {**signal.detail, "source": "median (split class)"})
            )
        else:
            found.append(explain(signal, kept, now))  # the SEL's ticket for the same DIMM or CPU has it
    return one_per_lost_dimm(found, dimms_short=kept is not None and "dimms" in kept.short)
