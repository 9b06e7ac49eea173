"""From a firing rule to an admitted remediation, every decision recorded with its reason.

decide(): a rule fired on a host. Skip (rule paused, breaker open, cooldown),
hold (the host already has an active remediation or awaits repair), shadow
(record only), or create a remediation in `detected` — escalating a rung when
the fault returns after a fix, or straight to a ticket when the host flaps.

admit(): a `detected` remediation may start when the gates allow it (global
pause, maintenance windows, approval, concurrency caps and spacing for
disruptive plans); otherwise it waits, and `remediator.admit_waiting`
retries. Admission holds a database lock, so caps hold under concurrency.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from celery import current_app
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from checker.schemas import Report
from core import audit, metrics
from core.db import serialize_on
from core.dispatch import send_after_commit
from core.queue import REMEDIATE_QUEUE
from remediator import draining, preemption, repairs, rollouts, safety
from remediator.actions import ACTIONS
from remediator.decisions import SYSTEM, active_remediation, finish, record, render_template, template_values
from remediator.evaluate import Firing
from remediator.models import (
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    RuleMode,
    RuleState,
    StepState,
)
from remediator.rules import Rule, RuleSet, Step

log = logging.getLogger(__name__)
REOPEN_WITHIN = dt.timedelta(days=30)
FLAP_TICKET = [Step(action="ticket", params={"part_type": "host", "title": "Flapping: {hostname} needs a person"})]


def decide(
    session: Session, host: Host, firing: Firing, ruleset: RuleSet, report: Report | None, now: dt.datetime
) -> Remediation | None:
    rule, signal = firing.rule, firing.signal
    metrics.RULE_FIRINGS.labels(rule.id).inc()
    note: dict[str, Any] = {"subject": signal.subject, "value": signal.value, "now": now}
    state = safety.rule_state(session, rule.id)
    mode = safety.effective_mode(rule, state)
    if mode == RuleMode.paused:
        record(session, host, rule.id, "skipped", "rule paused", **note)
        return None
    if state is not None and state.breaker_open:
        record(session, host, rule.id, "skipped", f"breaker open: {state.breaker_reason}", **note)
        return None
    if mode != RuleMode.shadow:  # a part with a ticket: the detection goes to its ticket
        ticketed = repairs.route_detection(session, host, firing, now)
        if ticketed is not None:
            record(session, host, rule.id, "held", ticketed, **note)
            return None
    active = active_remediation(session, host.id)
    if active is not None and active.state == RemediationState.verifying and active.rule_id == rule.id:
        return escalate(
            session, active, f"fault returned while verifying: {signal.kind} {signal.value:.3g}", ruleset, now
        )
    baking = rollouts.baking(session, host, rule, ruleset, now)
    if baking is not None:
        what = f"side effect of {baking.rule_id} on {host.hostname}: {rule.id} fired ({signal.kind} {signal.value:.3g})"
        if baking.active:
            escalate(session, baking, what, ruleset, now)  # the fix did not hold: the next rung, and a halt
            active = active_remediation(session, host.id)
        else:
            open_breaker(session, baking.rule_id, f"rollout halted: {what}", now)
    rung, previous = 0, None
    returned = _returned_fault(session, host, rule, now)
    if returned is not None:
        rung, previous = returned.rung + 1, returned
    steps = rule.rung(rung) or _ladder_end(rule)
    verdict, why = "", ""
    if active is not None:
        verdict, why = preemption.verdict(active, rule, steps, ruleset, signal.subject)
    elif host.state in (HostState.awaiting_repair, HostState.maintenance):  # unreachable hosts are fair game
        verdict = "beside" if preemption.person_only(steps) else "hold"
        why = f"host is {host.state.value}"
    if verdict == "hold":
        record(session, host, rule.id, "held", why, **note)
        return None
    if verdict == "beside":
        if mode == RuleMode.shadow:
            record(session, host, rule.id, "shadow", f"would open a ticket ({why})", **note)
            return None
        ticket_id = preemption.ticket_beside(session, host, firing, steps, report, now)
        record(session, host, rule.id, "ticketed", f"ticket {ticket_id}: {why}", **note)
        return None
    wave = rollouts.wave_hold(session, host, rule, now) if previous is None else None
    if wave is not None:
        record(session, host, rule.id, "held", wave, **note)
        return None
    # Counted under the admission lock, as the caps are: two ingest transactions must not each see room
    # for one more host below the breaker and both plan (the lock is held until commit).
    serialize_on(session, safety.ADMISSION_LOCK)
    opened = session.execute(  # a column query, not the identity map: another transaction may have opened it
        select(RuleState.breaker_reason).where(RuleState.rule_id == rule.id, RuleState.breaker_open.is_(True))
    ).first()
    if opened is not None:
        record(session, host, rule.id, "skipped", f"breaker open: {opened.breaker_reason}", **note)
        return None
    tripped = safety.breaker_trips(session, host, rule, now)
    if tripped is not None:
        open_breaker(session, rule.id, tripped, now)
        record(session, host, rule.id, "skipped", f"breaker tripped: {tripped}", **note)
        return None
    reason = f"{rule.id}: {signal.kind} {signal.value:.3g} on {signal.subject or host.hostname}"
    if previous is not None:
        reason += f"; fault returned after remediation {previous.id} succeeded"
    recent = safety.flapping(session, host, ruleset.safety, now)
    if recent >= ruleset.safety.flap_max and steps[-1].action != "ticket":
        steps = FLAP_TICKET
        reason += f"; host remediated {recent} times within {int(ruleset.safety.flap_window_s / 86400)}d: flapping"
    if mode == RuleMode.shadow:
        planned = ", ".join(s.action for s in steps)
        shadow = f"would plan {planned}: {reason}" + (f" ({why})" if verdict == "preempt" else "")
        record(session, host, rule.id, "shadow", shadow, **note)
        return None
    if verdict == "preempt" and active is not None:
        preemption.preempt(session, active, host, f"preempted by {rule.id}: {why}", now)
        reason += f"; {why}"
    remediation = create(session, host, rule, steps, signal_evidence(firing, report), reason, rung, previous, now)
    if remediation is None:
        return None
    record(session, host, rule.id, "planned", reason, remediation_id=remediation.id, **note)
    admit(session, remediation, ruleset, now)
    return remediation


def _returned_fault(session: Session, host: Host, rule: Rule, now: dt.datetime) -> Remediation | None:
    """The last remediation of this rule on this host, if it succeeded recently: the fault came back."""
    last = session.scalars(
        select(Remediation)
        .where(Remediation.host_id == host.id, Remediation.rule_id == rule.id)
        .order_by(Remediation.id.desc())
        .limit(1)
    ).first()
    if last is None or last.state != RemediationState.succeeded or last.finished_at is None:
        return None
    return last if now - last.finished_at <= REOPEN_WITHIN else None


def takes_capacity(steps: list[Step]) -> bool:
    """A plan that restarts the host or takes it out of its scheduler counts against the caps."""
    return any(ACTIONS[s.action].disruptive or s.action == "drain" for s in steps)


def _ladder_end(rule: Rule) -> list[Step]:
    """Past the last rung a person decides: a ticket."""
    part = "dimm" if rule.when.signal.startswith("dimm") else "host"
    return [Step(action="ticket", params={"part_type": part, "title": f"{rule.id}: automated remediation exhausted"})]


def signal_evidence(firing: Firing, report: Report | None) -> dict[str, Any]:
    signal = firing.signal
    return {
        "signal": {"kind": signal.kind, "subject": signal.subject, "value": signal.value, "detail": signal.detail},
        "report_id": str(report.report_id) if report else None,
        "rule": {"id": firing.rule.id, "description": firing.rule.description},
    }


def create(
    session: Session,
    host: Host,
    rule: Rule,
    steps: list[Step],
    evidence: dict[str, Any],
    reason: str,
    rung: int,
    previous: Remediation | None,
    now: dt.datetime,
) -> Remediation | None:
    signal = evidence["signal"]
    values = template_values(host.hostname, rule.id, signal["subject"], signal["value"], signal.get("detail"))
    remediation = Remediation(
        host_id=host.id,
        rule_id=rule.id,
        state=RemediationState.detected,
        subject=evidence["signal"]["subject"],
        reason=reason,
        evidence=evidence,
        rung=rung,
        previous_id=previous.id if previous else None,
        disruptive=takes_capacity(steps),
        datacenter=host.datacenter,
        cluster=host.cluster,
        rack=host.rack,
        created_at=now,
        steps=[
            RemediationStep(
                index=i,
                action=step.action,
                params={
                    "priority": rule.priority,
                    **{k: render_template(v, values) if isinstance(v, str) else v for k, v in step.params.items()},
                },
            )
            for i, step in enumerate(steps)
        ],
    )
    try:
        with session.begin_nested():
            session.add(remediation)
            session.flush()
    except IntegrityError:  # another worker created one for this host first
        return None
    host.state = HostState.remediating
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.remediation.detected",
        object_type="remediation",
        object_id=remediation.id,
        reason=reason,
        detail={"host": host.hostname, "rule": rule.id, "rung": rung},
    )
    return remediation


def admit(session: Session, remediation: Remediation, ruleset: RuleSet, now: dt.datetime) -> bool:
    """Move a detected remediation to planned if every gate allows it now."""
    if remediation.state != RemediationState.detected:
        return False
    if remediation.paused_by is not None:
        return False  # an operator holds it (operations.pause); resuming admits it
    host = session.get_one(Host, remediation.host_id)
    rule = ruleset.get(remediation.rule_id)
    limits = ruleset.safety
    serialize_on(session, safety.ADMISSION_LOCK)
    reason = safety.global_pause(session) or safety.maintenance(session, host, now)
    for_a_person = preemption.person_only([s.action for s in remediation.steps])
    if reason is None and rule is not None and remediation.previous_id is None and not for_a_person:
        reason = safety.cooldown(session, host, rule, now)  # a ticket is not work on the host: no cooldown
    if reason is None and remediation.disruptive and for_a_person:
        # A person's plan never waits: with the caps full the ticket opens and the host stays in service.
        full = safety.caps(session, host, limits)
        if full is not None:
            _leave_in_service(session, host, remediation, full, now)
    elif reason is None and remediation.disruptive:
        reason = safety.caps(session, host, limits) or safety.spacing(session, host, limits, now)
    if reason is None and remediation.approved_by is None and _needs_approval(rule, remediation):
        remediation.state = RemediationState.awaiting_approval
        remediation.held_reason = "waiting for approval: the plan includes a destructive action"
        record(session, host, remediation.rule_id, "held", remediation.held_reason, remediation_id=remediation.id)
        audit.record(
            session,
            actor=SYSTEM,
            action="remediator.remediation.awaiting_approval",
            object_type="remediation",
            object_id=remediation.id,
            reason=remediation.held_reason,
            detail={"rule_id": remediation.rule_id, "hostname": host.hostname},
        )
        return False
    if reason is not None:
        if remediation.held_reason != reason:
            remediation.held_reason = reason
            record(session, host, remediation.rule_id, "held", reason, remediation_id=remediation.id, now=now)
        return False
    remediation.state = RemediationState.planned
    remediation.admitted_at = now
    remediation.held_reason = ""
    record(session, host, remediation.rule_id, "admitted", "all gates passed", remediation_id=remediation.id, now=now)
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.remediation.planned",
        object_type="remediation",
        object_id=remediation.id,
        reason=remediation.reason,
    )
    queue_run(session, remediation)
    return True


def _leave_in_service(session: Session, host: Host, remediation: Remediation, full: str, now: dt.datetime) -> None:
    """Skip the plan's drain: taking the host out would exceed a blast-radius cap."""
    why = f"not drained: {full}; the host stays in service until a technician takes it"
    for step in remediation.steps:
        if step.action == "drain" and step.state == StepState.pending:
            step.state = StepState.skipped
            step.result = {"skipped": why}
    remediation.disruptive = False
    remediation.evidence = {**(remediation.evidence or {}), "not_drained": why}
    record(session, host, remediation.rule_id, "admitted", why, remediation_id=remediation.id, now=now)


def queue_run(session: Session, remediation: Remediation) -> None:
    """Have a worker advance the remediation once this transaction commits."""
    send_after_commit(
        session, current_app.signature("remediator.run_remediation", args=[remediation.id], queue=REMEDIATE_QUEUE)
    )


def _needs_approval(rule: Rule | None, remediation: Remediation) -> bool:
    if rule is not None and rule.safety.requires_approval:
        return True
    return any(ACTIONS[s.action].destructive for s in remediation.steps if s.action in ACTIONS)


def approve(
    session: Session, remediation_id: int, *, actor: str, ruleset: RuleSet, now: dt.datetime, reason: str = ""
) -> Remediation:
    remediation = session.get_one(Remediation, remediation_id)
    if remediation.state != RemediationState.awaiting_approval:
        from core.errors import Conflict

        raise Conflict(f"remediation {remediation_id} is {remediation.state.value}, not awaiting approval")
    remediation.approved_by = actor
    remediation.state = RemediationState.detected
    audit.record(
        session,
        actor=actor,
        action="remediator.remediation.approved",
        object_type="remediation",
        object_id=remediation_id,
        reason=reason,
    )
    admit(session, remediation, ruleset, now)
    return remediation


def escalate(
    session: Session, remediation: Remediation, reason: str, ruleset: RuleSet, now: dt.datetime
) -> Remediation | None:
    """The remediation failed: finish it and start the next rung of its rule's ladder."""
    finish(session, remediation, RemediationState.failed, reason, now)
    host = session.get_one(Host, remediation.host_id)
    host.state = HostState.in_service
    rule = ruleset.get(remediation.rule_id)
    if rule is not None and rollouts.halted_by(rule, remediation):
        open_breaker(
            session, rule.id, f"rollout halted: remediation {remediation.id} on {host.hostname}: {reason}", now
        )
    steps = rule.rung(remediation.rung + 1) if rule is not None else None
    if steps is None:
        steps = _ladder_end(rule) if rule is not None else [Step(action="ticket", params={"part_type": "host"})]
    if rule is None:
        draining.undrain(session, host, remediation, now)
        return None
    session.flush()
    next_one = create(
        session,
        host,
        rule,
        steps,
        remediation.evidence,
        f"{remediation.reason}; escalated: {reason}",
        remediation.rung + 1,
        remediation,
        now,
    )
    if next_one is not None:
        record(session, host, rule.id, "escalated", reason, remediation_id=next_one.id, now=now)
        admit(session, next_one, ruleset, now)
    else:
        draining.undrain(session, host, remediation, now)  # nothing goes on with the host: it goes back
    return next_one


def open_breaker(session: Session, rule_id: str, reason: str, now: dt.datetime) -> None:
    state = session.get(RuleState, rule_id)
    if state is None:
        state = RuleState(rule_id=rule_id)
        session.add(state)
    state.breaker_open = True
    state.breaker_reason = reason
    state.breaker_opened_at = now
    state.updated_by = SYSTEM
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.rule.breaker_opened",
        object_type="rule",
        object_id=rule_id,
        reason=reason,
    )
    log.warning("remediator.rule.breaker_opened", extra={"fields": {"rule": rule_id, "reason": reason}})
