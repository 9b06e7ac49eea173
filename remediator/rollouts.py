"""Fleet-wide changes in waves: a canary per hardware class, then growing shares, each wave
verified and baked before the next starts; a failure or a side effect halts the rollout.

A rule with `safety.rollout` (firmware reflashes, patched kernels) fires on every host that
needs the change at once; planning asks `wave_hold` before it creates each host's remediation,
so at any time only the current wave's hosts have one. Wave k of a hardware class covers the
first `waves[k]` hosts of the class (a count, or a share of the class's hosts in the inventory);
the next wave starts when every host started so far has succeeded (its settle period is the
verification, out of service) and the last of them has baked for `bake` back in service, where
side effects show. A remediation of the rollout that fails (its step failed, or the fault came
back while verifying) or a side effect on one of its hosts while it is verified or bakes (a rule
named in `side_effects` fires there: a panic after a new kernel) opens the rule's breaker: the
rollout halts, the hosts not yet started are left alone, and an operator resets the breaker once
the cause is understood (docs/rules.md).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from remediator.models import ACTIVE_REMEDIATION_STATES, Host, Remediation, RemediationState
from remediator.rules import Rule, RuleSet, wave_limit


def wave_hold(session: Session, host: Host, rule: Rule, now: dt.datetime) -> str | None:
    """Why this host must wait for a later wave of the rule's rollout, or None when it may start."""
    rollout = rule.safety.rollout
    if rollout is None:
        return None
    cls = host.hardware_class
    rows = session.execute(
        select(Remediation.host_id, Remediation.state, Remediation.finished_at)
        .join(Host, Host.id == Remediation.host_id)
        .where(
            Remediation.rule_id == rule.id,
            Host.hardware_class == cls,
            Remediation.state != RemediationState.cancelled,
        )
    ).all()
    started = {host_id for host_id, _, _ in rows}
    if host.id in started:
        return None  # already part of the rollout: its own ladder decides
    in_class = int(session.scalar(select(func.count()).select_from(Host).where(Host.hardware_class == cls)) or 0)
    active = {host_id for host_id, state, _ in rows if state in ACTIVE_REMEDIATION_STATES}
    done = [finished for _, state, finished in rows if state == RemediationState.succeeded and finished]
    baked_at = max(done) + dt.timedelta(seconds=rollout.bake_s) if done else None
    for index, wave in enumerate(rollout.waves):
        limit = min(wave_limit(wave, in_class), in_class)
        name = "the canary" if index == 0 else f"wave {index + 1} of {len(rollout.waves)}"
        if len(started) < limit:
            return None
        if index == len(rollout.waves) - 1:
            return f"rollout: all {limit} hosts of {cls} its waves cover have started"
        if active:
            return f"rollout: {name} ({len(started)} of {in_class} {cls} hosts) is still being verified"
        if baked_at is not None and now < baked_at:
            return f"rollout: {name} ({len(started)} of {in_class} {cls} hosts) bakes until {baked_at.isoformat()}"
    return None


def halted_by(rule: Rule, remediation: Remediation) -> bool:
    """Whether this remediation's failure halts its rule's rollout (its first rung: the change itself)."""
    return rule.safety.rollout is not None and remediation.rung == 0


def baking(session: Session, host: Host, rule: Rule, ruleset: RuleSet, now: dt.datetime) -> Remediation | None:
    """The host's remediation of a rollout, if `rule` firing on it now is one of that rollout's side
    effects: while it is being verified, or within its bake after it succeeded."""
    watching = [
        r.id for r in ruleset.rules if r.safety.rollout is not None and rule.id in r.safety.rollout.side_effects
    ]
    if not watching:
        return None
    last = session.scalars(
        select(Remediation)
        .where(Remediation.host_id == host.id, Remediation.rule_id.in_(watching))
        .order_by(Remediation.id.desc())
        .limit(1)
    ).first()
    if last is None:
        return None
    theirs = ruleset.get(last.rule_id)
    rollout = theirs.safety.rollout if theirs is not None else None
    if rollout is None:
        return None
    if last.state == RemediationState.verifying:
        return last
    if last.state == RemediationState.succeeded and last.finished_at is not None:
        return last if now - last.finished_at <= dt.timedelta(seconds=rollout.bake_s) else None
    return None
