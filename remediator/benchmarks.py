"""Performance outliers within a hardware class: our own method for single-host drift (a BIOS setting, a
thermal or power limit, a technician's change), and the class-level check against an expected score that
seed 001's case needs (remediator.benchmark_class).

Seed 001 (INFN/CCR-11/01) found the erratum-298 BIOS workaround by comparing across CPU models and
platforms, not within a class: the whole Opteron 8356 class was slow ("questi hanno prestazioni scarse nel
loro complesso"), 1.66-1.73 HEP-SPEC06 per core per GHz against 3.4-3.9 elsewhere (Tabella 1). A
within-class median moves with the class, so this check cannot see that case; the class check can.

A host's latest score of one benchmark is compared with the latest scores of the other hosts of its
hardware class for the same benchmark, taken the same way (the same clock source and method version:
never across benchmark names, nor a score divided by a nominal clock with one divided by a current one),
by the modified z-score of Iglewicz and Hoaglin, "How to Detect and Handle Outliers" (ASQC Basic
References in Quality Control vol. 16, 1993): M = 0.6745 (x - median) / MAD, an outlier beyond |M| > 3.5.
Robust: one slow host cannot drag the median or the MAD the way it drags a mean and a standard deviation.
The MAD is taken as at least MAD_FLOOR of the median (the benchmark's own repeatability), which also
settles a MAD of 0. With fewer than MIN_CLASS_HOSTS hosts scored there is no judgement. Scores come from
the agent's report or from the API (a user's own benchmark); both land as `benchmark_score` signals.

The host's own score is kept in its derivation memory (memory["benchmark"]), so it is judged on every
report until the score is LOOKBACK old: a class whose other hosts' scores arrived after this host's
still gets its verdict. The class's scores are read with one bounded query and cached briefly.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import benchmark_class, planning
from remediator.host_evaluation import baselines_of, evaluate_host
from remediator.models import Host, Signal
from remediator.rules import RuleSet
from remediator.signals import SignalValue

SCORE, OUTLIER = "benchmark_score", "benchmark_outlier"
Z_FACTOR = 0.6745  # the 0.75 quantile of the standard normal: makes the MAD comparable to a standard deviation
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's cut-off; the rule may ask for more (its `value`)
MIN_CLASS_HOSTS = 5
MAD_FLOOR = 0.02  # of the median: a benchmark repeats to a few per cent (docs/agent.md), so a class whose MAD is
# smaller than that (five hosts that happened to agree) does not make a host 3 % off an outlier
LOOKBACK = dt.timedelta(days=30)  # a score older than this says nothing about the host now
MAX_CLASS_ROWS = 20_000  # the newest score rows read per class and benchmark
CACHE_S = 60.0
SAMPLE = 40  # class scores carried on the signal, for the chart and the ticket
UNKNOWN_CLASS = "unknown"  # hosts nobody classified are never compared


Basis = tuple[str | None, int | None]
"""How a score was taken: (clock_source, method_version). Scores of another basis are never compared: a
score divided by cpuinfo's current clock is not one divided by cpufreq's nominal clock. A user's score
through the API says neither (None, None) and is compared with other such scores."""


def basis_of(detail: dict[str, Any] | None) -> Basis:
    detail = detail or {}
    version = detail.get("method_version")
    return detail.get("clock_source"), int(version) if isinstance(version, int | float) else None


@dataclass
class ClassScores:
    scores: dict[int, float]  # host id -> its latest score
    truncated: bool
    expires: float
    stats: tuple[float, float] | None = None  # (median, MAD) of `scores`, once computed


_cache: dict[tuple[str, str, Basis], ClassScores] = {}


def clear_cache() -> None:
    _cache.clear()


def class_scores(
    session: Session, hardware_class: str, name: str, now: dt.datetime, basis: Basis = (None, None)
) -> ClassScores:
    """The latest score of each host of the class for this benchmark taken on this basis (the newest
    MAX_CLASS_ROWS rows of the benchmark; a host whose latest score has another basis is left out)."""
    key = (hardware_class, name, basis)
    cached = _cache.get(key)
    if cached is not None and cached.expires > time.monotonic():
        return cached
    rows = session.execute(
        select(Signal.host_id, Signal.value, Signal.detail)
        .join(Host, Host.id == Signal.host_id)
        .where(
            Host.hardware_class == hardware_class,
            Signal.kind == SCORE,
            Signal.subject == name,
            Signal.observed_at >= now - LOOKBACK,
        )
        .order_by(Signal.observed_at.desc(), Signal.id.desc())
        .limit(MAX_CLASS_ROWS)
    ).all()
    scores: dict[int, float] = {}
    seen: set[int] = set()
    for host_id, value, detail in rows:
        if host_id in seen:
            continue
        seen.add(host_id)
        if basis_of(detail) == basis:  # the host's latest score, if it was taken the same way
            scores[host_id] = float(value)
    entry = ClassScores(scores, len(rows) >= MAX_CLASS_ROWS, time.monotonic() + CACHE_S)
    _cache[key] = entry
    return entry


def median_mad(values: list[float]) -> tuple[float, float]:
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    at = {"min": 0.0, "p10": 0.1, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p90": 0.9, "max": 1.0}
    return {name: round(ordered[round(q * (len(ordered) - 1))], 4) for name, q in at.items()}


def sample_of(values: list[float], size: int = SAMPLE) -> list[float]:
    """At most `size` scores, evenly spread over the sorted ones (the extremes kept)."""
    ordered = sorted(values)
    if len(ordered) <= size:
        return [round(v, 4) for v in ordered]
    step = (len(ordered) - 1) / (size - 1)
    return [round(ordered[round(i * step)], 4) for i in range(size)]


@dataclass(frozen=True)
class Judgement:
    """How one score stands in its class: `deviations` below the median (negative above), or why none."""

    name: str
    score: float
    n: int
    median: float | None = None
    mad: float | None = None
    deviations: float | None = None
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def judge(
    session: Session,
    host: Host,
    name: str,
    score: float,
    now: dt.datetime,
    errata: list[str],
    basis: Basis = (None, None),
) -> Judgement:
    """The modified z-score of `score` among the latest scores of the host's class taken on the same basis
    (its own replaced by this). The class's median and MAD are computed once per cache fill and again only
    when a host's score changes."""
    if host.hardware_class == UNKNOWN_CLASS:
        return Judgement(name, score, 0, reason="the host has no hardware class: not compared")
    entry = class_scores(session, host.hardware_class, name, now, basis)
    if entry.scores.get(host.id) != score:  # this host's latest, not stored yet: the cache learns it at once
        entry.scores[host.id] = score
        entry.stats = None
    values = list(entry.scores.values())
    if entry.stats is None:
        entry.stats = median_mad(values)
    median, mad = entry.stats
    if len(values) < MIN_CLASS_HOSTS:
        reason = f"{len(values)} hosts of {host.hardware_class} scored on {name}: fewer than {MIN_CLASS_HOSTS}"
        return Judgement(name, score, len(values), reason=reason)
    # The floor also settles a MAD of 0 (half the class or more on one score), where Iglewicz and Hoaglin's
    # M divides by zero; a median of 0 as well means every score is 0: nothing stands out.
    spread = max(mad, MAD_FLOOR * abs(median))
    deviations = Z_FACTOR * (median - score) / spread if spread > 0 else 0.0
    detail = {
        "score": round(score, 4),
        "class_median": round(median, 4),
        "mad": round(mad, 4),
        "mad_floor": round(MAD_FLOOR * abs(median), 4),
        "n": len(values),
        "hardware_class": host.hardware_class,
        "clock_source": basis[0],
        "method_version": basis[1],
        "below_median_pct": round(100 * (median - score) / median, 1) if median else None,
        "threshold": OUTLIER_Z,
        "quantiles": quantiles(values),
        "sample": sample_of(values),
        "truncated": entry.truncated,
        "errata": bool(errata),
        "errata_ids": errata,
        "method": "modified z-score, Iglewicz & Hoaglin 1993: 0.6745 (median - x) / max(MAD, 2% of the median)",
    }
    return Judgement(name, score, len(values), median, mad, round(deviations, 3), detail=detail)


def _errata_now(signals: list[SignalValue], memory: dict[str, Any], from_report: bool) -> list[str]:
    """The errata this host's CPU matches: from a report's signals (kept), else as the last report said."""
    state = memory.setdefault("benchmark", {})
    if from_report:
        state["errata"] = sorted({s.subject for s in signals if s.kind == "errata_match"})
    return list(state.get("errata", []))


def remember(
    memory: dict[str, Any], name: str, score: float, at: dt.datetime, boot_id: str | None, basis: Basis = (None, None)
) -> None:
    scores = memory.setdefault("benchmark", {}).setdefault("scores", {})
    kept = {"score": score, "at": at.isoformat(), "boot": boot_id, "clock_source": basis[0], "method_version": basis[1]}
    scores[name] = kept


def outlier_signals(
    session: Session,
    host: Host,
    signals: list[SignalValue],
    memory: dict[str, Any],
    now: dt.datetime,
    *,
    boot_id: str | None,
    from_report: bool = True,
) -> list[SignalValue]:
    """`benchmark_outlier` for each benchmark whose latest score of this host lies OUTLIER_Z or more robust
    deviations below its class median. New scores among `signals` are remembered first. A score taken in an
    earlier boot is not judged: a new kernel or BIOS setting (the errata fix, a technician's) may have
    changed what it measured, and the next run will say."""
    for signal in signals:
        if signal.kind == SCORE:
            remember(memory, signal.subject, signal.value, now, boot_id, basis_of(signal.detail))
    scores = (memory.get("benchmark") or {}).get("scores") or {}
    if not scores:
        return []  # a host never scored keeps its memory as it was
    errata = _errata_now(signals, memory, from_report)
    baseline = baselines_of(host).for_class(host.hardware_class)
    found: list[SignalValue] = []
    below: list[benchmark_class.Shortfall] = []
    for name, kept in sorted(scores.items()):
        at = dt.datetime.fromisoformat(kept["at"])
        if now - at > LOOKBACK or (from_report and kept.get("boot") != boot_id):
            continue
        basis = basis_of(kept)
        verdict = judge(session, host, name, float(kept["score"]), now, errata, basis)
        if verdict.deviations is not None and verdict.deviations >= OUTLIER_Z:
            found.append(SignalValue(OUTLIER, name, verdict.deviations, {**verdict.detail, "scored_at": kept["at"]}))
        if benchmark_class.expected_of(baseline, name) is not None and host.hardware_class != UNKNOWN_CLASS:
            entry = class_scores(session, host.hardware_class, name, now, basis)  # the cache judge just filled
            shortfall = benchmark_class.below_expected(host, name, entry.scores, baseline, errata, basis)
            if shortfall is not None:
                below.append(shortfall)
    if found and errata:  # the errata rules act on this host: their evidence carries what the slowness costs
        slow = [{k: s.detail[k] for k in ("score", "class_median", "n", "below_median_pct")} for s in found]
        for signal in signals:
            if signal.kind == "errata_match":
                signal.detail["benchmark"] = [
                    {"name": s.subject, "deviations": s.value, **d} for s, d in zip(found, slow, strict=True)
                ]
    return found + benchmark_class.class_signals(host, below, signals)


def submit_score(
    session: Session,
    host: Host,
    name: str,
    score: float,
    *,
    ruleset: RuleSet,
    now: dt.datetime,
    detail: dict[str, Any],
) -> tuple[Signal, Judgement]:
    """A score from outside the agent (POST /api/v1/hosts/{hostname}/benchmarks): stored as `benchmark_score`,
    judged in its class at once, and the rules asked about both signals, as ingest asks about a report's."""
    row = Signal(host_id=host.id, kind=SCORE, subject=name, value=score, detail=detail, observed_at=now)
    session.add(row)
    memory = dict(host.memory or {})
    memory["benchmark"] = dict(memory.get("benchmark") or {})
    signal = SignalValue(SCORE, name, score, detail)
    basis = basis_of(detail)
    remember(memory, name, score, now, host.boot_id, basis)
    errata = _errata_now([signal], memory, from_report=False)
    verdict = judge(session, host, name, score, now, errata, basis)
    signals = [signal]
    if verdict.deviations is not None and verdict.deviations >= OUTLIER_Z:
        outlier = SignalValue(OUTLIER, name, verdict.deviations, {**verdict.detail, "scored_at": now.isoformat()})
        session.add(
            Signal(
                host_id=host.id, kind=OUTLIER, subject=name, value=outlier.value, detail=outlier.detail, observed_at=now
            )
        )
        signals.append(outlier)
    firings = evaluate_host(host, signals, ruleset, memory, now)
    host.memory = memory
    session.flush()
    for firing in firings:  # highest priority first, as ingest decides them
        planning.decide(session, host, firing, ruleset, None, now)
    return row, verdict
