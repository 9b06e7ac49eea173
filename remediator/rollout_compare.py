"""A rollout's health signals compared between its upgraded hosts and the class's hosts not yet upgraded.

Each `compare` entry of the rule's rollout names a signal kind. Over the same window — the bake
(`now - bake`, and never before the rollout was last resumed) — an upgraded host is looked at from
the moment its change succeeded, every other host of the class over the whole window:

- **share** (counts: panics, lockups, the cputime anomaly, CE rates): a host shows the signal when
  its highest value in the window reaches `at_least`. The upgraded side differs when the signal
  shows on `min_hosts` or more upgraded hosts and on none of the others (it appears only on the
  new release: the source's case, one canary with a cputime none of the old hosts had), or when
  Fisher's exact test says the upgraded side shows it more often at `alpha`.
- **median** (scores: a benchmark per core per GHz): the host's latest value. The upgraded side
  differs when its median is worse by `min_change` or more and either every upgraded value is worse
  than every other one, or the Mann-Whitney test says so at `alpha`.

No verdict is given before `min_baseline` hosts not yet upgraded have reported in the window (a
side with no hosts cannot show that something is new). The rule and why: docs/rules.md, "Rollouts".
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from remediator.models import Host, Remediation, RemediationStep, Rollout, Signal, StepState
from remediator.rollout_stats import fisher_greater, mann_whitney_less, median
from remediator.rules import Comparison

NOT_THE_CHANGE = frozenset({"drain", "undrain", "ticket"})
EXAMPLES = 5


def upgraded_hosts(session: Session, rollout: Rollout) -> dict[int, dt.datetime]:
    """The rollout's hosts whose change went through (its step succeeded), and when: host id -> time."""
    rows = session.execute(
        select(Remediation.host_id, func.min(RemediationStep.finished_at))
        .join(RemediationStep, RemediationStep.remediation_id == Remediation.id)
        .where(
            Remediation.rollout_id == rollout.id,
            RemediationStep.state == StepState.succeeded,
            RemediationStep.action.not_in(NOT_THE_CHANGE),
            RemediationStep.finished_at.is_not(None),
        )
        .group_by(Remediation.host_id)
    ).all()
    return {host_id: at for host_id, at in rows if at is not None}


@dataclass
class Sides:
    """Per host of each side, the value that counts (None: reported in the window, no such signal)."""

    upgraded: dict[str, float | None]
    others: dict[str, float | None]


def _values(session: Session, spec: Comparison, host_ids: list[int], since: dt.datetime) -> dict[int, float]:
    """The host's highest value (share) or latest value (median) of the signal since `since`."""
    if not host_ids:
        return {}
    where = [Signal.host_id.in_(host_ids), Signal.kind == spec.signal, Signal.observed_at >= since]
    if spec.subject_pattern:
        where.append(Signal.subject.contains(spec.subject_pattern, autoescape=True))
    if spec.measure == "share":
        rows = session.execute(select(Signal.host_id, func.max(Signal.value)).where(*where).group_by(Signal.host_id))
        return {host_id: float(value) for host_id, value in rows}
    latest: dict[int, tuple[dt.datetime, float]] = {}
    for host_id, at, value in session.execute(select(Signal.host_id, Signal.observed_at, Signal.value).where(*where)):
        if host_id not in latest or at > latest[host_id][0]:
            latest[host_id] = (at, float(value))
    return {host_id: value for host_id, (_, value) in latest.items()}


def gather(session: Session, rollout: Rollout, spec: Comparison, since: dt.datetime) -> Sides:
    upgraded_at = upgraded_hosts(session, rollout)
    hosts = session.execute(
        select(Host.id, Host.hostname, Host.last_report_at).where(Host.hardware_class == rollout.hardware_class)
    ).all()
    names = {host_id: hostname for host_id, hostname, _ in hosts}
    sides = Sides({}, {})
    by_start: dict[dt.datetime, list[int]] = defaultdict(list)
    for host_id, _, last_report_at in hosts:
        start = max(since, upgraded_at[host_id]) if host_id in upgraded_at else since
        if last_report_at is not None and last_report_at >= start:
            by_start[start].append(host_id)
    for start, ids in by_start.items():
        found = _values(session, spec, ids, start)
        for host_id in ids:
            side = sides.upgraded if host_id in upgraded_at else sides.others
            side[names[host_id]] = found.get(host_id)
    if spec.measure == "median" or spec.population == "with_signal":
        sides.upgraded = {k: v for k, v in sides.upgraded.items() if v is not None}
        sides.others = {k: v for k, v in sides.others.items() if v is not None}
    return sides


def _showing(values: dict[str, float | None], spec: Comparison) -> list[str]:
    """Hosts whose value is on the bad side of `at_least` (reaching it; for worse: lower, not reaching it)."""
    reach = sorted(host for host, value in values.items() if value is not None and value >= spec.at_least)
    return reach if spec.worse == "higher" else sorted(set(values) - set(reach))


def verdict(spec: Comparison, sides: Sides) -> dict[str, Any]:
    """The comparison of one signal: each side's numbers, the test, and whether it halts the rollout."""
    result: dict[str, Any] = {
        "signal": spec.signal,
        "subject_pattern": spec.subject_pattern,
        "measure": spec.measure,
        "worse": spec.worse,
        "upgraded": {"checked": len(sides.upgraded)},
        "not_upgraded": {"checked": len(sides.others)},
        "test": None,
        "p_value": None,
        "halt": False,
    }
    n1, n2 = len(sides.upgraded), len(sides.others)
    if spec.measure == "share":
        bad, others_bad = _showing(sides.upgraded, spec), _showing(sides.others, spec)
        result["upgraded"].update(showing=len(bad), examples=bad[:EXAMPLES])
        result["not_upgraded"].update(showing=len(others_bad), examples=others_bad[:EXAMPLES])
    else:
        ups = [v for v in sides.upgraded.values() if v is not None]
        downs = [v for v in sides.others.values() if v is not None]
        result["upgraded"].update(median=median(ups) if ups else None)
        result["not_upgraded"].update(median=median(downs) if downs else None)
        worst = sorted(sides.upgraded.items(), key=lambda kv: kv[1] or 0.0, reverse=spec.worse == "higher")
        result["upgraded"]["examples"] = [host for host, _ in worst[:EXAMPLES]]
    if n1 == 0:
        result["why"] = "no upgraded host has reported since its change"
        return result
    if n2 < spec.min_baseline:
        result["why"] = f"{n2} hosts not yet upgraded reported in the window (at least {spec.min_baseline} needed)"
        return result
    if spec.measure == "share":
        return _share_verdict(spec, result, n1, n2)
    return _median_verdict(spec, result, sides)


def _share_verdict(spec: Comparison, result: dict[str, Any], n1: int, n2: int) -> dict[str, Any]:
    a, c = result["upgraded"]["showing"], result["not_upgraded"]["showing"]
    p = fisher_greater(a, n1, c, n2)
    result.update(test="Fisher's exact, one-sided", p_value=round(p, 6))
    if a >= spec.min_hosts and c == 0:
        result.update(halt=True, why=f"on {a} of {n1} upgraded hosts and none of the {n2} not yet upgraded")
    elif a >= spec.min_hosts and a * n2 > c * n1 and p <= spec.alpha:
        result.update(halt=True, why=f"{a} of {n1} upgraded vs {c} of {n2} not yet upgraded: p {p:.2g} ≤ {spec.alpha}")
    else:
        result["why"] = f"{a} of {n1} upgraded vs {c} of {n2} not yet upgraded: p {p:.2g}, no significant difference"
    return result


def _median_verdict(spec: Comparison, result: dict[str, Any], sides: Sides) -> dict[str, Any]:
    ups = [v for v in sides.upgraded.values() if v is not None]
    downs = [v for v in sides.others.values() if v is not None]
    sign = 1.0 if spec.worse == "higher" else -1.0
    # Oriented so that lower is worse: Mann-Whitney asks whether the upgraded scores tend to be lower.
    p = mann_whitney_less([-sign * v for v in ups], [-sign * v for v in downs])
    up_median, down_median = median(ups), median(downs)
    change = sign * (up_median - down_median) / abs(down_median) if down_median else 0.0
    separated = max(-sign * v for v in ups) < min(-sign * v for v in downs)
    result.update(test="Mann-Whitney U, one-sided", p_value=round(p, 6), change=round(change, 4))
    moved = f"median {up_median:.4g} vs {down_median:.4g} ({change:+.1%})"
    if change >= spec.min_change and (separated or p <= spec.alpha):
        because = "every upgraded host worse than every other" if separated else f"p {p:.2g} ≤ {spec.alpha}"
        result.update(halt=True, why=f"{moved}: {because}")
    else:
        result["why"] = f"{moved}: p {p:.2g}, below the {spec.min_change:.0%} that matters or not significant"
    return result


def compare(session: Session, rollout: Rollout, specs: list[Comparison], now: dt.datetime) -> list[dict[str, Any]]:
    """Every compared signal of the rollout, as of now."""
    since = now - dt.timedelta(seconds=rollout.bake_s)
    if rollout.resumed_at is not None and rollout.resumed_at > since:
        since = rollout.resumed_at
    return [{**verdict(spec, gather(session, rollout, spec, since)), "since": since.isoformat()} for spec in specs]
