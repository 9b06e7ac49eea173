"""Running an admitted remediation: one step at a time, then verification.

advance() runs the next pending step under a row lock, so two deliveries of
the same task cannot both run it; a step already running when its worker died
is run again only if its action is idempotent, otherwise the remediation is
escalated. After the last step the host must stay healthy for the rule's
settle period (`verifying`); the same fault firing meanwhile escalates it.
A ticket step hands the host to a technician (`escalated`), or, with `in_service: true`, leaves it
working and tells the owners of its software, configuration or class.

Every other step is cyborg's to carry out (remediator.handoff, docs/cyborg.md): a central one
finishes here, a host action (or a reinstall) is handed over and the step waits; what the host
says back is remediator.host_results', its silence remediator.deadlines'. The plan's drain and
undrain steps, and the drain before its first disruptive step, are remediator.draining's.
Stopping a plan is remediator.stopping's.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import utcnow
from core.dispatch import send_after_commit
from core.errors import NotFound
from core.queue import REMEDIATE_QUEUE
from cyborg.central import SCHEDULER_ACTIONS, HostFoundOff, StepFailed
from remediator import (
    decisions,
    draining,
    fan_tickets,
    handoff,
    linked_parts,
    planning,
    rack_heat,
    repair_load,
    switch_errors,
)
from remediator.actions import ACTIONS
from remediator.evidence import evidence_bundle, ticket_title
from remediator.gpu_parts import ticket_part
from remediator.models import (
    RUNNABLE_REMEDIATION_STATES,
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    StepState,
)
from remediator.ppr_verification import ppr_verification
from remediator.rules import RuleSet
from ticketing import service as tickets
from ticketing.schemas import TicketRequest


def advance(
    session: Session, remediation_id: int, *, ruleset: RuleSet, now: dt.datetime | None = None
) -> RemediationState:
    now = now or utcnow()
    remediation = session.scalars(
        select(Remediation).where(Remediation.id == remediation_id).with_for_update()
    ).one_or_none()
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in RUNNABLE_REMEDIATION_STATES:
        return remediation.state
    if remediation.paused_by is not None:
        return remediation.state  # held by an operator: nothing starts until operations.resume
    host = session.get_one(Host, remediation.host_id)
    if repair_load.owned(remediation):  # a repaired DIMM's load test: its ticket decides, not the plan
        return repair_load.advance(session, remediation, host, now)
    step = next((s for s in remediation.steps if s.state in (StepState.pending, StepState.running)), None)
    if step is None:
        return _verify(session, remediation, ruleset, now)
    if step.state == StepState.running and step.awaiting is not None:
        return remediation.state  # handed to the host (or waiting for its first report): it reports back
    if step.state == StepState.running and not ACTIONS[step.action].idempotent:
        step.state = StepState.failed
        step.result = {"error": "interrupted while running; not safe to run twice"}
        planning.escalate(session, remediation, f"step {step.index} ({step.action}) was interrupted", ruleset, now)
        return remediation.state
    remediation.state = RemediationState.running
    remediation.current_step = step.index
    step.state = StepState.running
    step.attempts += 1
    step.started_at = step.started_at or now
    session.flush()
    if step.action == "ticket":
        ticket_id, created = _open_ticket(session, host, remediation, step, now)
        step.state = StepState.succeeded
        step.finished_at = now
        step.result = {"ticket_id": ticket_id, "created": created}
        if leaves_host_in_service(step.params):  # for owners of software, configuration, a class: it works on
            why = f"ticket {ticket_id} for its owners"
            decisions.finish(session, remediation, RemediationState.escalated, why, now)
            _release(session, host, remediation, now)
            return remediation.state
        decisions.finish(session, remediation, RemediationState.escalated, f"ticket {ticket_id} for a technician", now)
        host.state = HostState.awaiting_repair
        return remediation.state
    try:
        if not handoff.cyborg(session).runs(step.action):
            raise StepFailed(f"no executor for action {step.action!r}")
        draining.ensure_drained(session, host, remediation, step, now)
        if step.action in SCHEDULER_ACTIONS:
            result: dict[str, Any] | None = draining.run_step(session, host, remediation, step, now)
        else:
            result = handoff.start(session, host, remediation, step)
    except HostFoundOff as error:
        step.state = StepState.failed
        step.finished_at = now
        step.result = {**error.detail, "error": str(error), "found_off": True}
        step.started_at = None  # nothing was sent: no work on the host for the next rule's cooldown (safety.cooldown)
        _found_off(session, host, remediation, step, now)
        return remediation.state
    except StepFailed as error:
        step.state = StepState.failed
        step.finished_at = now
        step.result = {**error.detail, "error": str(error)}
        planning.escalate(session, remediation, f"step {step.index} ({step.action}) failed: {error}", ruleset, now)
        return remediation.state
    if result is not None:
        complete_step(step, result, now)
    return remediation.state


def _found_off(session: Session, host: Host, remediation: Remediation, step: RemediationStep, now: dt.datetime) -> None:
    """A power cycle found the host off and was not to turn it on (cyborg's HostFoundOff): there was no power
    cycle, so the rule's next rung (a GPU part "after a cold power cycle", a hung host "after a power cycle")
    would tell a technician something false (review r2 finding 6). The remediation ends; the host, which is
    off, is probed as a silent host now (remediator.unreachable): its `powered_off` verdict is the
    host-powered-off rule's (turn it on; a person if it stays off), as for any host found off."""
    why = (
        f"step {step.index} ({step.action}) found the host off and did not turn it on: handed to the silent-host probe"
    )
    for later in remediation.steps:
        if later.state == StepState.pending:
            later.state = StepState.skipped
            later.result = {"skipped": why}
    # cancelled, not failed: the fix was never tried, so neither a rollout nor a breaker counts it against the rule
    decisions.finish(session, remediation, RemediationState.cancelled, why, now)
    draining.undrain(session, host, remediation, now)  # nothing goes on with the host here
    host.state = HostState.unreachable
    send_after_commit(
        session, current_app.signature("remediator.probe_silent_host", args=[host.hostname], queue=REMEDIATE_QUEUE)
    )


def complete_step(step: RemediationStep, result: dict[str, Any], now: dt.datetime) -> None:
    step.state = StepState.succeeded
    step.finished_at = now
    step.result = result
    handoff.stop_waiting(step)


def has_next(remediation: Remediation) -> bool:
    """Whether run_remediation should run again now: a step is pending next, or every step is done and
    verification is due — not while a step waits on its host (the host's result queues the next run),
    nor while an operator holds it (resuming queues the next run)."""
    if remediation.state not in RUNNABLE_REMEDIATION_STATES or remediation.paused_by:
        return False
    step = next((s for s in remediation.steps if s.state in (StepState.pending, StepState.running)), None)
    return step is None or step.state == StepState.pending


def _verify(session: Session, remediation: Remediation, ruleset: RuleSet, now: dt.datetime) -> RemediationState:
    """Every step done: the host must now stay healthy for the settle period."""
    rule = ruleset.get(remediation.rule_id)
    settle = rule.safety.settle_s if rule else 0
    remediation.state = RemediationState.verifying
    remediation.settle_until = now + dt.timedelta(seconds=settle)
    if settle == 0:
        return settle_if_due(session, remediation, now, ruleset)
    return remediation.state


def silent_since_fix(session: Session, remediation: Remediation) -> bool:
    """A fix for a silent host worked only if the host reported again after its last step."""
    if ((remediation.evidence or {}).get("signal") or {}).get("kind") != "host_unreachable":
        return False
    finished = [s.finished_at for s in remediation.steps if s.finished_at is not None]
    host = session.get_one(Host, remediation.host_id)
    return bool(finished) and (host.last_report_at is None or host.last_report_at <= max(finished))


def settle_if_due(
    session: Session, remediation: Remediation, now: dt.datetime, ruleset: RuleSet | None = None
) -> RemediationState:
    if remediation.state != RemediationState.verifying or remediation.settle_until is None:
        return remediation.state
    if now < remediation.settle_until:
        return remediation.state
    if ruleset is not None and silent_since_fix(session, remediation):
        planning.escalate(session, remediation, "the host did not report again after the fix", ruleset, now)
        return remediation.state
    if ruleset is not None and (why := ppr_verification(session, remediation)) is not None:
        planning.escalate(session, remediation, why, ruleset, now)
        return remediation.state
    decisions.finish(session, remediation, RemediationState.succeeded, "healthy through the settle period", now)
    _release(session, session.get_one(Host, remediation.host_id), remediation, now)
    return remediation.state


def leaves_host_in_service(params: dict[str, Any]) -> bool:
    """Whether a ticket step leaves its host in service (`in_service: true`, checked on load)."""
    return params.get("in_service") is True


def _release(session: Session, host: Host, remediation: Remediation, now: dt.datetime) -> None:
    """The remediation is done with the host: back in service and undrained, unless a ticket holds it."""
    if tickets.holding_tickets_of_host(session, host.hostname):
        # A technician holds the host (a ticket opened by hand while this ran): it stays out of
        # service, and drained, until that repair is verified. A ticket for owners does not hold it.
        host.state = HostState.awaiting_repair
        return
    host.state = HostState.in_service
    draining.undrain(session, host, remediation, now)


def _open_ticket(
    session: Session, host: Host, remediation: Remediation, step: RemediationStep, now: dt.datetime
) -> tuple[int, bool]:
    params = step.params
    evidence = evidence_bundle(session, host, remediation)
    named = str(params.get("part") or "")  # filled at planning; a detail the signal lacked: the subject
    named = "" if "{" in named else named
    request = TicketRequest(
        hostname=host.hostname,
        datacenter=host.datacenter,
        rack=host.rack,
        part_type=str(params.get("part_type", "host")),
        part=named or ticket_part(str(params.get("part_type", "host")), remediation.subject),
        title=ticket_title(str(params.get("title", remediation.reason)), evidence),
        priority=int(params.get("priority", 3)),
        remediation_id=remediation.id,
        evidence=evidence,
        holds_host=not leaves_host_in_service(params),
    )
    request = rack_heat.grouped(session, host, request)  # several hot hosts of a rack: the rack's ticket
    request = switch_errors.grouped(session, host, request, host.last_report_at)  # CRC behind one switch
    request = fan_tickets.rekeyed(session, request, (remediation.evidence or {}).get("signal"))  # a lost redundancy
    linked = linked_parts.onto_linked_ticket(
        session, host, request, rule=remediation.rule_id, actor=decisions.SYSTEM, now=now
    )
    if linked is not None:  # an NVMe drive's other name has its open ticket: one drive, one ticket (review r4, 3)
        return linked.id, False
    # rung 0's title is the rule's own, no fix tried before it: it may retitle the part's ticket (review r7, 2)
    ticket, created = tickets.open_ticket(session, request, actor=decisions.SYSTEM, own_title=remediation.rung == 0)
    return ticket.id, created
