"""From a firing rule to an admitted remediation, every decision recorded with its reason.

decide(): a rule fired on a host. The decision policies (`remediator.policies`, in their declared
order) skip it (rule paused, breaker open or tripping), hold it (the host already has an active
remediation or awaits repair, a rollout wave), record it only (shadow), or let it through: a
remediation is created in `detected` — a rung further when the fault returns after a fix, or
straight to a ticket when the host flaps.

admit(): a `detected` remediation may start when every admission gate allows it (global pause,
maintenance windows, cooldown, concurrency caps and spacing for disruptive plans, approval);
otherwise it waits, and `remediator.admit_waiting` retries. Admission holds a database lock, so
caps hold under concurrency. approve() is the one way a waiting remediation is approved.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery import current_app
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from checker.schemas import Report
from core import audit, metrics
from core.db import serialize_on
from core.dispatch import send_after_commit
from core.errors import Conflict, NotFound
from core.queue import REMEDIATE_QUEUE
from remediator import draining, policies, preemption, rollouts, safety
from remediator.actions import ACTIONS
from remediator.decisions import SYSTEM, finish, record, render_template, template_values
from remediator.evaluate import Firing
from remediator.evidence import dimm_aliases
from remediator.models import Host, HostState, Remediation, RemediationState, RemediationStep, StepState
from remediator.policies import ladder_end
from remediator.rules import Rule, RuleSet, Step
from remediator.safety import OnRefusal, open_breaker


def decide(
    session: Session, host: Host, firing: Firing, ruleset: RuleSet, report: Report | None, now: dt.datetime
) -> Remediation | None:
    """Walk the decision policies in order: the first that stops the firing says what is recorded; past the
    last one a remediation is planned."""
    metrics.RULE_FIRINGS.labels(firing.rule.id).inc()
    context = policies.FiringContext(
        session, host, firing, ruleset, report, now, escalate=lambda r, why: escalate(session, r, why, ruleset, now)
    )
    for policy in policies.DECISION_POLICIES:
        if policy.under_admission_lock:
            context.hold_admission_lock()
        stop = policy.check(context)
        if stop is not None:
            if stop.decision is not None:
                _record_firing(context, stop.decision, stop.reason)
            return stop.remediation
    return _plan(context)


def _plan(context: policies.FiringContext) -> Remediation | None:
    """Every policy let the firing through: preempt the host's active remediation if the verdict says so,
    create the remediation and try to admit it now."""
    session, host, rule, now = context.session, context.host, context.rule, context.now
    if context.verdict == "preempt" and context.active is not None:
        preemption.preempt(session, context.active, host, f"preempted by {rule.id}: {context.why}", now)
        context.reason += f"; {context.why}"
    evidence = signal_evidence(context.firing, context.report)
    remediation = create(
        session,
        host,
        rule,
        context.steps,
        evidence,
        context.reason,
        context.rung,
        context.previous,
        now,
        rollout_id=context.rollout_id,
    )
    if remediation is None:
        return None
    _record_firing(context, "planned", context.reason, remediation_id=remediation.id)
    admit(session, remediation, context.ruleset, now)
    return remediation


def _record_firing(context: policies.FiringContext, outcome: str, reason: str, **extra: Any) -> None:
    signal = context.signal
    record(
        context.session,
        context.host,
        context.rule.id,
        outcome,
        reason,
        subject=signal.subject,
        value=signal.value,
        now=context.now,
        **extra,
    )


def takes_capacity(steps: list[Step]) -> bool:
    """A plan that restarts the host or takes it out of its scheduler counts against the caps."""
    return any(ACTIONS[s.action].disruptive or s.action == "drain" for s in steps)


def signal_evidence(firing: Firing, report: Report | None) -> dict[str, Any]:
    signal = firing.signal
    return {
        "signal": {"kind": signal.kind, "subject": signal.subject, "value": signal.value, "detail": signal.detail},
        "report_id": str(report.report_id) if report else None,
        "rule": {"id": firing.rule.id, "description": firing.rule.description},
    }


def _with_dimm_aliases(session: Session, host: Host, step: Step, subject: str) -> Step:
    """A hard_ppr step of a DIMM signal carries the DIMM's other names (remediator.evidence.dimm_aliases):
    the host repairs only GHES records naming one of them, and on skx/i10nm boards the firmware names the
    DIMM by its SMBIOS locator, not by the EDAC label the signal's subject is."""
    if step.action != "hard_ppr" or "locations" in step.params:
        return step
    aliases = dimm_aliases(session, host, subject)
    return step.model_copy(update={"params": {**step.params, "locations": aliases[:8]}}) if aliases else step


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
    *,
    rollout_id: int | None = None,
) -> Remediation | None:
    signal = evidence["signal"]
    values = template_values(host.hostname, rule.id, signal["subject"], signal["value"], signal.get("detail"))
    steps = [_with_dimm_aliases(session, host, step, signal["subject"]) for step in steps]
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
        rollout_id=rollout_id,
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
    """Move a detected remediation to planned if every admission gate allows it now (walked in their declared
    order, under the admission lock: the first refusal holds it, or sends it to wait for approval)."""
    if remediation.state != RemediationState.detected:
        return False
    if remediation.paused_by is not None:
        return False  # an operator holds it (operations.pause); resuming admits it
    host = session.get_one(Host, remediation.host_id)
    admission = safety.AdmissionContext(
        session, host, remediation, ruleset.get(remediation.rule_id), ruleset.safety, now
    )
    serialize_on(session, safety.ADMISSION_LOCK)
    for gate in safety.ADMISSION_GATES:
        refusal = gate.check(admission)
        if refusal is None:
            continue
        if gate.on_refusal is OnRefusal.skip_drain:
            _leave_in_service(session, host, remediation, refusal, now)
            continue
        if gate.on_refusal is OnRefusal.await_approval:
            _await_approval(session, host, remediation, refusal)
        elif remediation.held_reason != refusal:
            remediation.held_reason = refusal
            record(session, host, remediation.rule_id, "held", refusal, remediation_id=remediation.id, now=now)
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


def _await_approval(session: Session, host: Host, remediation: Remediation, reason: str) -> None:
    remediation.state = RemediationState.awaiting_approval
    remediation.held_reason = reason
    record(session, host, remediation.rule_id, "held", reason, remediation_id=remediation.id)
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.remediation.awaiting_approval",
        object_type="remediation",
        object_id=remediation.id,
        reason=reason,
        detail={"rule_id": remediation.rule_id, "hostname": host.hostname},
    )


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


def approve(
    session: Session, remediation_id: int, *, actor: str, ruleset: RuleSet, now: dt.datetime, reason: str = ""
) -> Remediation:
    """The one approver (operations.approve, the API and the pages come here): a person lets a remediation
    waiting for approval go on, and it is admitted at once if the other gates allow it."""
    remediation = session.get(Remediation, remediation_id)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state != RemediationState.awaiting_approval:
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
        why = f"remediation {remediation.id} on {host.hostname}: {reason}"
        if not rollouts.halt_for(session, remediation, why, now):  # one that began before rollouts had rows
            open_breaker(session, rule.id, f"rollout halted: {why}", now)
    steps = rule.rung(remediation.rung + 1) if rule is not None else None
    if steps is None:
        steps = ladder_end(rule) if rule is not None else [Step(action="ticket", params={"part_type": "host"})]
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
