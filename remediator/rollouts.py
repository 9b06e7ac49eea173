"""Fleet-wide changes in waves: a canary per hardware class, then growing shares, each wave
verified and baked before the next starts; a failure, a side effect or a significant difference in
a compared health signal halts the class's rollout.

A rule with `safety.rollout` (firmware reflashes, patched kernels) fires on every host that needs
the change at once. The first firing for a class and a change creates its `Rollout` row; planning
asks `wave_hold` before it creates each host's remediation, so at any time only the current wave's
hosts have one (they point at the rollout). Wave k covers the first `waves[k]` hosts of the class (a
count, or a share of the class's hosts in the inventory); the next wave starts when every host
started so far has succeeded (its settle period is the verification, out of service) and the last of
them has baked for `bake` back in service, where side effects show, and every `expect: expected` or
`expect: better` comparison says the change brought what it is for, or that it cannot be judged
(`gain_unconfirmed`: the rollout never goes past its canary while one is undecided; `not judged` holds
nothing, so a class without an expected score, or with no host left on the old release, never waits for
ever). A halted or paused rollout starts no one: the hosts not yet upgraded are left alone, and the
upgraded ones keep the change (no automatic rollback: the old release is what the change was for —
an erratum, a firmware bug — and going back is a disruptive step on evidence that may be ambiguous;
the ticket asks the change's owners). An operator resumes it (`resume`). The comparison of health
signals is `remediator.rollout_compare`, run by `evaluate` (the scheduler's
`remediator.evaluate_rollouts`); its halt opens one ticket for the owners.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core import audit
from core.db import serialize_on
from core.errors import Conflict, NotFound
from remediator import rollout_compare, rollout_gain
from remediator.decisions import SYSTEM
from remediator.models import (
    ACTIVE_REMEDIATION_STATES,
    Host,
    Remediation,
    RemediationState,
    Rollout,
    RolloutState,
)
from remediator.rules import Rollout as RolloutConfig
from remediator.rules import Rule, RuleSet, wave_limit
from remediator.signals import SignalValue
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

log = logging.getLogger("remediator.rollouts")
STOPPED = (RolloutState.halted, RolloutState.paused)
EVALUATION_LOCK = "remediator.rollouts"


def change_of(rule: Rule, signal: SignalValue) -> tuple[str, str]:
    """What the rollout puts out, and whose change it is (the halt's ticket goes to them)."""
    detail = signal.detail or {}
    pin = detail.get("patched_kernel")
    if signal.kind == "errata_match" and isinstance(pin, dict) and pin.get("release"):
        return "kernel", f"kernel {pin['release']}"
    if signal.kind == "firmware_below_baseline" and detail.get("baseline"):
        return "firmware", f"{signal.subject.split(':')[0]} {detail['baseline']}"
    return "host", f"{rule.id} {signal.subject}".strip()


def rollout_for(session: Session, rule: Rule, host: Host, signal: SignalValue, now: dt.datetime) -> Rollout:
    """The rollout of this change on the host's class, created by the first firing for it."""
    part_type, change = change_of(rule, signal)
    key = (Rollout.rule_id == rule.id, Rollout.hardware_class == host.hardware_class, Rollout.change == change)
    found = session.scalars(select(Rollout).where(*key)).first()
    if found is not None:
        return found
    assert rule.safety.rollout is not None
    rollout = Rollout(
        rule_id=rule.id,
        hardware_class=host.hardware_class,
        change=change,
        part_type=part_type,
        waves=list(rule.safety.rollout.waves),
        bake_s=rule.safety.rollout.bake_s,
        created_at=now,
    )
    try:
        with session.begin_nested():
            session.add(rollout)
            session.flush()
    except IntegrityError:  # another transaction created it first
        return session.scalars(select(Rollout).where(*key)).one()
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.rollout.created",
        object_type="rollout",
        object_id=rollout.id,
        reason=f"{rule.id} fired on {host.hostname}",
        detail={"rule": rule.id, "hardware_class": host.hardware_class, "change": change},
    )
    return rollout


def members(session: Session, rollout: Rollout) -> list[Remediation]:
    """The remediations its waves started, oldest first (one per host; a cancelled one gave its place up)."""
    return list(
        session.scalars(
            select(Remediation)
            .where(Remediation.rollout_id == rollout.id, Remediation.state != RemediationState.cancelled)
            .order_by(Remediation.created_at, Remediation.id)
        )
    )


def hosts_in_class(session: Session, hardware_class: str) -> int:
    return int(session.scalar(select(func.count()).select_from(Host).where(Host.hardware_class == hardware_class)) or 0)


def wave_hold(
    session: Session, host: Host, rule: Rule, signal: SignalValue, now: dt.datetime
) -> tuple[str | None, Rollout | None]:
    """Why this host must wait for a later wave of the rule's rollout (None when it may start), and the
    rollout a remediation planned now belongs to."""
    config = rule.safety.rollout
    if config is None:
        return None, None
    rollout = rollout_for(session, rule, host, signal, now)
    started = members(session, rollout)
    if host.id in {m.host_id for m in started}:
        return None, None  # already part of the rollout: its own ladder decides
    cls = host.hardware_class
    if rollout.state in STOPPED:
        return (
            f"rollout {rollout.id} of {rollout.change} on {cls} is {rollout.state.value}: {rollout.halt_reason}",
            None,
        )
    in_class = hosts_in_class(session, cls)
    active = [m for m in started if m.state in ACTIVE_REMEDIATION_STATES]
    done = [m.finished_at for m in started if m.state == RemediationState.succeeded and m.finished_at]
    baked_at = max(done) + dt.timedelta(seconds=rollout.bake_s) if done else None
    for index, wave in enumerate(rollout.waves or config.waves):
        limit = min(wave_limit(wave, in_class), in_class)
        name = "the canary" if index == 0 else f"wave {index + 1} of {len(rollout.waves)}"
        if len(started) < limit:
            waiting = gain_unconfirmed(rollout, config) if index > 0 else None
            if waiting is not None:
                return f"rollout: {name} of {rollout.change} on {cls} waits: {waiting}", None
            rollout.current_wave = max(rollout.current_wave, index)
            return None, rollout
        if index == len(rollout.waves) - 1:
            return f"rollout: all {limit} hosts of {cls} its waves cover have started", None
        if active:
            return f"rollout: {name} ({len(started)} of {in_class} {cls} hosts) is still being verified", None
        if baked_at is not None and now < baked_at:
            return (
                f"rollout: {name} ({len(started)} of {in_class} {cls} hosts) bakes until {baked_at.isoformat()}",
                None,
            )
    return None, rollout


def gain_unconfirmed(rollout: Rollout, config: RolloutConfig) -> str | None:
    """Why the next wave must wait for an `expect: expected` or `better` comparison (None: every one said
    `met` or `not judged`)."""
    for spec in config.compare:
        if spec.expect not in rollout_gain.EXPECTATIONS:
            continue
        found = next(
            (
                r
                for r in rollout.comparison or []
                if r.get("expect") == spec.expect
                and r.get("signal") == spec.signal
                and r.get("subject_pattern") == spec.subject_pattern
            ),
            None,
        )
        if found is None or found.get("gain") not in rollout_gain.LETS_GO:
            why = found.get("why") if found is not None else "not compared yet"
            what = "performance" if spec.expect == "expected" else "gain"
            return f"the expected {what} of {spec.signal} is not confirmed ({why})"
    return None


def halt(session: Session, rollout: Rollout, reason: str, *, actor: str, now: dt.datetime) -> None:
    """Stop starting hosts: `halted` by the system (a failure, a side effect, a comparison), `paused` by a person."""
    if rollout.state in STOPPED:
        return
    rollout.state = RolloutState.halted if actor == SYSTEM else RolloutState.paused
    rollout.halt_reason, rollout.halted_at, rollout.halted_by = reason[:4000], now, actor
    if actor == SYSTEM:
        rollout.ticket_id = None  # evaluate() opens this halt's ticket (or adds to the one still open)
    audit.record(
        session,
        actor=actor,
        action="remediator.rollout.halted",
        object_type="rollout",
        object_id=rollout.id,
        reason=reason,
        detail={"rule": rollout.rule_id, "hardware_class": rollout.hardware_class, "change": rollout.change},
    )
    log.warning(
        "remediator.rollout.halted",
        extra={"fields": {"rollout": rollout.id, "change": rollout.change, "class": rollout.hardware_class}},
    )


def halt_for(session: Session, remediation: Remediation, reason: str, now: dt.datetime) -> bool:
    """A failure or side effect on a host of a rollout halts that rollout; False when it belongs to none."""
    rollout = session.get(Rollout, remediation.rollout_id) if remediation.rollout_id is not None else None
    if rollout is None:
        return False
    halt(session, rollout, f"rollout halted: {reason}", actor=SYSTEM, now=now)
    return True


def resume(session: Session, rollout_id: int, *, actor: str, reason: str, now: dt.datetime) -> Rollout:
    """An operator lets a halted or paused rollout go on; comparisons look at nothing before now."""
    rollout = session.get(Rollout, rollout_id, with_for_update=True)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    if rollout.state not in STOPPED:
        raise Conflict(f"rollout {rollout_id} is {rollout.state.value}, not halted or paused")
    previous = rollout.halt_reason
    rollout.state, rollout.resumed_at, rollout.halt_reason = RolloutState.running, now, ""
    audit.record(
        session,
        actor=actor,
        action="remediator.rollout.resumed",
        object_type="rollout",
        object_id=rollout.id,
        reason=reason,
        detail={"halt_reason": previous, "ticket_id": rollout.ticket_id},
    )
    return rollout


def pause(session: Session, rollout_id: int, *, actor: str, reason: str, now: dt.datetime) -> Rollout:
    """An operator stops a running rollout (the API's and the page's halt)."""
    rollout = session.get(Rollout, rollout_id, with_for_update=True)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    if rollout.state != RolloutState.running:
        raise Conflict(f"rollout {rollout_id} is {rollout.state.value}, not running")
    halt(session, rollout, f"paused by {actor}: {reason}", actor=actor, now=now)
    return rollout


def _ticket_host(session: Session, rollout: Rollout, halting: list[dict[str, Any]]) -> Host | None:
    """The host the halt's ticket names: the first upgraded host showing the difference, else the rollout's
    host whose failure or side effect halted it (its latest)."""
    for result in halting:
        for hostname in result["upgraded"].get("examples") or []:
            host = session.scalars(select(Host).where(Host.hostname == hostname)).first()
            if host is not None:
                return host
    latest = members(session, rollout)
    return session.get(Host, latest[-1].host_id) if latest else None


def _open_ticket(session: Session, rollout: Rollout, results: list[dict[str, Any]], now: dt.datetime) -> int | None:
    """One ticket for the change's owners, with the comparison as its evidence (None: no host to name)."""
    halting = [r for r in results if r["halt"]]
    host = _ticket_host(session, rollout, halting)
    if host is None:
        return None
    what = "; ".join(
        f"{r['signal']}{' ' + r['subject_pattern'] if r['subject_pattern'] else ''}: {r['why']}" for r in halting
    )
    request = TicketRequest(
        hostname=host.hostname,
        datacenter=host.datacenter,
        rack=host.rack,
        part_type=rollout.part_type,
        part=rollout.change,
        title=f"Rollout of {rollout.change} on {rollout.hardware_class} halted: "
        f"{what or rollout.halt_reason.removeprefix('rollout halted: ')}",
        priority=2,
        holds_host=False,  # for the change's owners: the upgraded host keeps its job
        evidence={
            "rollout": {
                "id": rollout.id,
                "rule": rollout.rule_id,
                "hardware_class": rollout.hardware_class,
                "change": rollout.change,
                "waves": rollout.waves,
                "current_wave": rollout.current_wave,
                "halt_reason": rollout.halt_reason,
            },
            "comparison": results,
            "note": "The hosts not yet upgraded are left alone and the upgraded ones keep the change: "
            "decide on a corrected build or a rollback, then resume the rollout.",
            **rollout_compare.judgement(halting),
        },
    )
    ticket, _ = tickets.open_ticket(session, request, actor=SYSTEM, now=now)
    return ticket.id


def evaluate(session: Session, ruleset: RuleSet, now: dt.datetime) -> dict[str, int]:
    """Compare every running or halted rollout's health signals; halt a running one on a difference, and
    open the one ticket of a halt the system made (here, or a failure or side effect at ingest)."""
    serialize_on(session, EVALUATION_LOCK)  # two schedulers' runs take turns: one halt, one ticket
    counts = {"compared": 0, "halted": 0, "completed": 0, "tickets": 0}
    rollouts = session.scalars(select(Rollout).where(Rollout.state != RolloutState.completed).order_by(Rollout.id))
    for rollout in list(rollouts):
        rule = ruleset.get(rollout.rule_id)
        config = rule.safety.rollout if rule is not None else None
        if config is None:
            continue
        results = rollout_compare.compare(session, rollout, list(config.compare), now) if config.compare else []
        rollout.comparison, rollout.compared_at = results, now
        counts["compared"] += 1
        halting = [r for r in results if r["halt"]]
        if rollout.state == RolloutState.running and halting:
            halt(session, rollout, rollout_compare.halt_reason(rollout.change, halting), actor=SYSTEM, now=now)
            counts["halted"] += 1
        elif rollout.state == RolloutState.running and _complete(session, rollout, now):
            rollout.state = RolloutState.completed
            counts["completed"] += 1
        if rollout.state == RolloutState.halted and rollout.ticket_id is None:
            rollout.ticket_id = _open_ticket(session, rollout, results, now)
            counts["tickets"] += rollout.ticket_id is not None
    session.flush()
    return counts


def _complete(session: Session, rollout: Rollout, now: dt.datetime) -> bool:
    """Every host its last wave covers has started, none is active, and the last success has baked."""
    started = members(session, rollout)
    in_class = hosts_in_class(session, rollout.hardware_class)
    if not started or len(started) < min(wave_limit(rollout.waves[-1], in_class), in_class):
        return False
    if any(m.state in ACTIVE_REMEDIATION_STATES for m in started):
        return False
    done = [m.finished_at for m in started if m.finished_at]
    return bool(done) and now >= max(done) + dt.timedelta(seconds=rollout.bake_s)


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
