"""A rollout's health signals compared between its upgraded hosts and the class's hosts not yet upgraded.

Each `compare` entry of the rule's rollout names a signal kind. Within the bake (`now - bake`, and
never before the rollout was last resumed) an upgraded host is looked at from the moment its change
succeeded. For a **share** the hosts not yet upgraded are looked at over the same time per host: the
upgraded hosts' mean time since their change (so a host on either side has had the same host-hours to
show a signal; over the whole bake the old side would have had longer, which leans toward not halting).
A **median** is of levels (each host's latest value), which a longer window does not inflate: both
sides take the latest value within the bake. A host not yet upgraded whose latest report runs a release
its class lists as withdrawn (its `errata_match` says `withdrawn`: remediator/firmware_baselines.yaml,
`kernels.*.withdrawn`) is left out of the old side, and counted as excluded: it already shows the side
effect the change may bring back, and is not the healthy baseline the change is judged against.

- **share** (counts: panics, lockups, the cputime anomaly, CE rates): a host shows the signal when
  its highest value in the window reaches `at_least`. The upgraded side differs when the signal
  shows on `min_hosts` or more upgraded hosts and on none of the others (it appears only on the
  new release: the source's case, one canary with a cputime none of the old hosts had), or when
  Fisher's exact test says the upgraded side shows it more often at `alpha`. A halt the test does
  not support (one canary: p is at least 1/(hosts compared)) says so: "no statistical support", the
  hosts on each side, and that an operator should judge.
- **median** (scores: a benchmark per core per GHz): the host's latest value. The upgraded side
  differs when its median is worse by `min_change` or more and either every upgraded value is worse
  than every other one (said to have no statistical support when the test does not give it), or the
  Mann-Whitney test says so at `alpha`.
- **expect: expected** and **expect: better** (a median): what the change is for, judged on the upgraded
  hosts once baked (remediator/rollout_gain.py): their median must reach the class's expected score, or
  beat the not-yet-upgraded hosts' median; else the rollout halts. Until then the next wave waits for it
  (remediator/rollouts.py, `wave_hold`); a check that cannot be judged says so and holds nothing.

No verdict is given before `min_baseline` hosts not yet upgraded have reported in the window (a
side with no hosts cannot show that something is new). The rule and why: docs/rules.md, "Rollouts".
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from remediator import rollout_gain
from remediator.models import Host, Remediation, RemediationStep, Rollout, Signal, StepState
from remediator.rollout_gain import Expectation
from remediator.rollout_stats import fisher_greater, mann_whitney_less, median
from remediator.rules import Comparison

NOT_THE_CHANGE = frozenset({"drain", "undrain", "ticket"})
EXAMPLES = 5
WITHDRAWN_FROM = "errata_match"  # its detail says `withdrawn` when the host's kernel is one its class withdrew
HOUR = 3600.0


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
    excluded: dict[str, str] = field(default_factory=dict)  # hosts left out of the old side -> why
    upgraded_hours: float = 0.0  # host-hours each side was looked at
    others_hours: float = 0.0
    baked: bool = False  # every upgraded host's bake since its change is over, and the window is a whole bake


def on_withdrawn_release(session: Session, host_ids: list[int]) -> dict[int, str]:
    """The hosts whose latest report runs a release their class lists as withdrawn -> that release."""
    if not host_ids:
        return {}
    rows = session.execute(
        select(Signal.host_id, Signal.detail)
        .join(Host, (Host.id == Signal.host_id) & (Signal.observed_at == Host.last_report_at))
        .where(Signal.host_id.in_(host_ids), Signal.kind == WITHDRAWN_FROM)
    )
    return {
        host_id: f"{detail.get('kernel') or 'its release'} is withdrawn"
        for host_id, detail in rows
        if isinstance(detail, dict) and detail.get("withdrawn")
    }


def _values(
    session: Session, spec: Comparison, host_ids: list[int], since: dt.datetime, subject: str | None = None
) -> dict[int, float]:
    """The host's highest value (share) or latest value (median) of the signal since `since` (`subject`: only
    that subject, the benchmark an expected score is for)."""
    if not host_ids:
        return {}
    where = [Signal.host_id.in_(host_ids), Signal.kind == spec.signal, Signal.observed_at >= since]
    if subject is not None:
        where.append(Signal.subject == subject)
    elif spec.subject_pattern:
        where.append(Signal.subject.contains(spec.subject_pattern, autoescape=True))
    if spec.measure == "share":
        rows = session.execute(select(Signal.host_id, func.max(Signal.value)).where(*where).group_by(Signal.host_id))
        return {host_id: float(value) for host_id, value in rows}
    latest: dict[int, tuple[dt.datetime, float]] = {}
    for host_id, at, value in session.execute(select(Signal.host_id, Signal.observed_at, Signal.value).where(*where)):
        if host_id not in latest or at > latest[host_id][0]:
            latest[host_id] = (at, float(value))
    return {host_id: value for host_id, (_, value) in latest.items()}


def gather(
    session: Session,
    rollout: Rollout,
    spec: Comparison,
    since: dt.datetime,
    now: dt.datetime,
    subject: str | None = None,
) -> Sides:
    upgraded_at = upgraded_hosts(session, rollout)
    hosts = session.execute(
        select(Host.id, Host.hostname, Host.last_report_at).where(Host.hardware_class == rollout.hardware_class)
    ).all()
    names = {host_id: hostname for host_id, hostname, _ in hosts}
    never = dt.datetime.min.replace(tzinfo=dt.UTC)  # a host that never reported counts on no side
    reported = {host_id: last_report_at or never for host_id, _, last_report_at in hosts}
    starts = {host_id: max(since, at) for host_id, at in upgraded_at.items() if host_id in names}
    ups = [h for h, start in starts.items() if reported[h] >= start]
    others_since = since
    if spec.measure == "share" and ups:  # the same host-hours per host on both sides
        mean_s = sum((now - starts[h]).total_seconds() for h in ups) / len(ups)
        others_since = max(since, now - dt.timedelta(seconds=mean_s))
    downs = [h for h in names if h not in starts and reported[h] >= others_since]
    withdrawn = on_withdrawn_release(session, downs)
    downs = [h for h in downs if h not in withdrawn]
    sides = Sides(
        {},
        {},
        excluded={names[h]: why for h, why in sorted(withdrawn.items(), key=lambda kv: names[kv[0]])},
        upgraded_hours=round(sum((now - starts[h]).total_seconds() for h in ups) / HOUR, 2),
        others_hours=round(len(downs) * (now - others_since).total_seconds() / HOUR, 2),
        baked=bool(starts)
        and now - since >= dt.timedelta(seconds=rollout.bake_s)  # a resume shortens the window: not yet
        and all(upgraded_at[h] + dt.timedelta(seconds=rollout.bake_s) <= now for h in starts),
    )
    by_start: dict[dt.datetime, list[int]] = defaultdict(list)
    for host_id in ups:
        by_start[starts[host_id]].append(host_id)
    for host_id in downs:
        by_start[others_since].append(host_id)
    for start, ids in by_start.items():
        found = _values(session, spec, ids, start, subject)
        for host_id in ids:
            side = sides.upgraded if host_id in starts else sides.others
            side[names[host_id]] = found.get(host_id)
    if spec.measure == "median" or spec.population == "with_signal":
        sides.upgraded = {k: v for k, v in sides.upgraded.items() if v is not None}
        sides.others = {k: v for k, v in sides.others.items() if v is not None}
    return sides


def _showing(values: dict[str, float | None], spec: Comparison) -> list[str]:
    """Hosts whose value is on the bad side of `at_least` (reaching it; for worse: lower, not reaching it)."""
    reach = sorted(host for host, value in values.items() if value is not None and value >= spec.at_least)
    return reach if spec.worse == "higher" else sorted(set(values) - set(reach))


def _hosts(count: int) -> str:
    return "one host" if count == 1 else f"{count} hosts"


def unsupported(p: float, alpha: float, hosts: int, test: str) -> str:
    """What a halt without statistical support says (the fail-safe of a small upgraded side)."""
    return (
        f"{_hosts(hosts)}, no statistical support ({test} p {p:.2g} > {alpha}): halted as a precaution, "
        "not a significant difference; an operator should judge"
    )


def verdict(spec: Comparison, sides: Sides, expected: Expectation | None = None) -> dict[str, Any]:
    """The comparison of one signal: each side's numbers, the test, and whether it halts the rollout
    (`expected`: the class's expected score, for `expect: expected`)."""
    result: dict[str, Any] = {
        "signal": spec.signal,
        "subject_pattern": spec.subject_pattern,
        "measure": spec.measure,
        "worse": spec.worse,
        "expect": spec.expect,
        "upgraded": {"checked": len(sides.upgraded), "host_hours": sides.upgraded_hours},
        "not_upgraded": {
            "checked": len(sides.others),
            "host_hours": sides.others_hours,
            "excluded": len(sides.excluded),
            "excluded_examples": [f"{host}: {why}" for host, why in list(sides.excluded.items())[:EXAMPLES]],
        },
        "test": None,
        "p_value": None,
        "support": None,
        "halt": False,
    }
    n1, n2 = len(sides.upgraded), len(sides.others)
    ups = [v for v in sides.upgraded.values() if v is not None]
    downs = [v for v in sides.others.values() if v is not None]
    if spec.measure != "share":  # a median is of levels: the time looked at is not part of it
        del result["upgraded"]["host_hours"], result["not_upgraded"]["host_hours"]
    if spec.measure == "share":
        bad, others_bad = _showing(sides.upgraded, spec), _showing(sides.others, spec)
        result["upgraded"].update(showing=len(bad), examples=bad[:EXAMPLES])
        result["not_upgraded"].update(showing=len(others_bad), examples=others_bad[:EXAMPLES])
    else:
        result["upgraded"].update(median=median(ups) if ups else None)
        result["not_upgraded"].update(median=median(downs) if downs else None)
        worst = sorted(sides.upgraded.items(), key=lambda kv: kv[1] or 0.0, reverse=spec.worse == "higher")
        result["upgraded"]["examples"] = [host for host, _ in worst[:EXAMPLES]]
    if spec.expect == "expected":  # the old side is shown, not needed
        return rollout_gain.expected_verdict(spec, result, ups, sides.baked, expected or Expectation("its class"))
    if spec.expect == "better":
        result.update(gain=None, expected_gain=spec.min_change)
    if n1 == 0:
        result["why"] = "no upgraded host has reported since its change"
        return result
    if spec.expect == "better":
        return rollout_gain.better_verdict(spec, result, ups, downs, sides.baked)
    if n2 < spec.min_baseline:
        result["why"] = f"{n2} hosts not yet upgraded reported in the window (at least {spec.min_baseline} needed)"
        return result
    if spec.measure == "share":
        return _share_verdict(spec, result, n1, n2)
    return _median_verdict(spec, result, sides)


def _share_verdict(spec: Comparison, result: dict[str, Any], n1: int, n2: int) -> dict[str, Any]:
    a, c = result["upgraded"]["showing"], result["not_upgraded"]["showing"]
    p = fisher_greater(a, n1, c, n2)
    significant = p <= spec.alpha
    result.update(test="Fisher's exact, one-sided", p_value=round(p, 6))
    if a >= spec.min_hosts and c == 0:
        counts = f"on {a} of {n1} upgraded hosts and none of the {n2} not yet upgraded"
        support = f"p {p:.2g} ≤ {spec.alpha}" if significant else unsupported(p, spec.alpha, a, "Fisher")
        result.update(halt=True, support="significant" if significant else "none", why=f"{counts}: {support}")
    elif a >= spec.min_hosts and a * n2 > c * n1 and significant:
        result.update(
            halt=True,
            support="significant",
            why=f"{a} of {n1} upgraded vs {c} of {n2} not yet upgraded: p {p:.2g} ≤ {spec.alpha}",
        )
    else:
        result["why"] = f"{a} of {n1} upgraded vs {c} of {n2} not yet upgraded: p {p:.2g}, no significant difference"
    return result


def _oriented(spec: Comparison, values: list[float]) -> list[float]:
    """Values turned so that lower is worse."""
    return [v if spec.worse == "lower" else -v for v in values]


def _median_verdict(spec: Comparison, result: dict[str, Any], sides: Sides) -> dict[str, Any]:
    ups = [v for v in sides.upgraded.values() if v is not None]
    downs = [v for v in sides.others.values() if v is not None]
    sign = 1.0 if spec.worse == "higher" else -1.0
    # Oriented so that lower is worse: Mann-Whitney asks whether the upgraded scores tend to be lower.
    p = mann_whitney_less(_oriented(spec, ups), _oriented(spec, downs))
    up_median, down_median = median(ups), median(downs)
    change = sign * (up_median - down_median) / abs(down_median) if down_median else 0.0
    separated = max(_oriented(spec, ups)) < min(_oriented(spec, downs))
    result.update(test="Mann-Whitney U, one-sided", p_value=round(p, 6), change=round(change, 4))
    relative = (up_median - down_median) / abs(down_median) if down_median else 0.0  # as measured, not oriented
    moved = f"median {up_median:.4g} of {len(ups)} upgraded vs {down_median:.4g} of {len(downs)} ({relative:+.1%})"
    if change >= spec.min_change and (separated or p <= spec.alpha):
        if p <= spec.alpha:
            because = f"p {p:.2g} ≤ {spec.alpha}"
        else:
            because = "every upgraded host worse than every other: " + unsupported(
                p, spec.alpha, len(ups), "Mann-Whitney"
            )
        result.update(halt=True, support="significant" if p <= spec.alpha else "none", why=f"{moved}: {because}")
    else:
        result["why"] = f"{moved}: p {p:.2g}, below the {spec.min_change:.0%} that matters or not significant"
    return result


def judgement(halting: list[dict[str, Any]]) -> dict[str, str]:
    """What the ticket says beyond the table: a halt no test supports, a gain or the expected performance the
    change did not bring."""
    said: dict[str, str] = {}
    weak = [r for r in halting if r.get("support") == "none"]
    if weak:
        said["statistical_support"] = (
            "none: "
            + "; ".join(
                f"{r['signal']}: {r['upgraded']['checked']} upgraded and {r['not_upgraded']['checked']} not yet "
                f"upgraded hosts compared ({r['why']})"
                for r in weak
            )
            + ". The rollout halted as a precaution, not on a significant difference: an operator should "
            "judge whether the change caused it."
        )
    missing = [r for r in halting if r.get("gain") == "missing"]
    if missing:
        said["expected_gain"] = (
            "missing: "
            + "; ".join(f"{r['signal']}: {r['why']}" for r in missing)
            + (
                ". The change did not bring what it is for (a patched kernel that leaves a firmware workaround "
                "on): check the build before resuming (a resumed rollout is judged again on the scores of a whole "
                "bake after the resume)."
            )
        )
    return said


def halt_reason(change: str, halting: list[dict[str, Any]]) -> str:
    worse = "; ".join(f"{r['signal']}: {r['why']}" for r in halting if r.get("gain") != "missing")
    no_gain = "; ".join(f"{r['signal']}: {r['why']}" for r in halting if r.get("gain") == "missing")
    parts = [
        f"side effect on {change}: {worse}" if worse else "",
        f"no gain from {change}: {no_gain}" if no_gain else "",
    ]
    return " | ".join(p for p in parts if p)


def compare(session: Session, rollout: Rollout, specs: list[Comparison], now: dt.datetime) -> list[dict[str, Any]]:
    """Every compared signal of the rollout, as of now."""
    since = now - dt.timedelta(seconds=rollout.bake_s)
    if rollout.resumed_at is not None and rollout.resumed_at > since:
        since = rollout.resumed_at
    results = []
    for spec in specs:
        expected = None
        if spec.expect == "expected":
            expected = rollout_gain.expectation(session, rollout.hardware_class, spec)
        sides = gather(session, rollout, spec, since, now, expected.benchmark if expected is not None else None)
        results.append({**verdict(spec, sides, expected), "since": since.isoformat()})
    return results
