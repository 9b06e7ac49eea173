"""Running an admitted remediation: one step at a time, then verification.

advance() runs the next pending step under a row lock, so two deliveries of
the same task cannot both run it; a step already running when its worker died
is run again only if its action is idempotent, otherwise the remediation is
escalated. After the last step the host must stay healthy for the rule's
settle period (`verifying`); the same fault firing meanwhile escalates it.
A ticket step hands the host to a technician (`escalated`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import utcnow
from core.errors import NotFound
from remediator import planning
from remediator.actions import ACTIONS
from remediator.models import Host, HostState, Remediation, RemediationState, RemediationStep, StepState
from remediator.rules import RuleSet
from remediator.service import evidence_bundle
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

log = logging.getLogger(__name__)

StepExecutor = Callable[[Session, Host, Remediation, RemediationStep], dict[str, Any] | None]
"""Carries out a host action. Returns the step's result when it finished here,
or None when it was handed to the host and will report back (cyborg)."""


def _scheduler_hook(_session: Session, host: Host, _remediation: Remediation, step: RemediationStep) -> dict[str, Any]:
    """drain/undrain call the cluster's scheduler hook; with none configured there is nothing to drain."""
    return {"skipped": f"no {step.action} hook configured for cluster {host.cluster or '(none)'}"}


EXECUTORS: dict[str, StepExecutor] = {"drain": _scheduler_hook, "undrain": _scheduler_hook}
"""Central executors by action; cyborg registers the host actions and the configured drain hooks."""


class StepFailed(Exception):
    pass


def advance(
    session: Session, remediation_id: int, *, ruleset: RuleSet, now: dt.datetime | None = None
) -> RemediationState:
    now = now or utcnow()
    remediation = session.scalars(
        select(Remediation).where(Remediation.id == remediation_id).with_for_update()
    ).one_or_none()
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in (RemediationState.planned, RemediationState.running):
        return remediation.state
    host = session.get_one(Host, remediation.host_id)
    step = next((s for s in remediation.steps if s.state in (StepState.pending, StepState.running)), None)
    if step is None:
        return _verify(session, remediation, ruleset, now)
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
        ticket_id, created = _open_ticket(session, host, remediation, step)
        step.state = StepState.succeeded
        step.finished_at = now
        step.result = {"ticket_id": ticket_id, "created": created}
        planning.finish(session, remediation, RemediationState.escalated, f"ticket {ticket_id} for a technician", now)
        host.state = HostState.awaiting_repair
        return remediation.state
    executor = EXECUTORS.get(step.action)
    try:
        if executor is None:
            raise StepFailed(f"no executor for action {step.action!r}")
        result = executor(session, host, remediation, step)
    except StepFailed as error:
        step.state = StepState.failed
        step.finished_at = now
        step.result = {"error": str(error)}
        planning.escalate(session, remediation, f"step {step.index} ({step.action}) failed: {error}", ruleset, now)
        return remediation.state
    if result is not None:
        complete_step(session, remediation, step, result, now)
    return remediation.state


def complete_step(
    session: Session, remediation: Remediation, step: RemediationStep, result: dict[str, Any], now: dt.datetime
) -> None:
    step.state = StepState.succeeded
    step.finished_at = now
    step.result = result


def _verify(session: Session, remediation: Remediation, ruleset: RuleSet, now: dt.datetime) -> RemediationState:
    """Every step done: the host must now stay healthy for the settle period."""
    rule = ruleset.get(remediation.rule_id)
    settle = rule.safety.settle_s if rule else 0
    remediation.state = RemediationState.verifying
    remediation.settle_until = now + dt.timedelta(seconds=settle)
    if settle == 0:
        return settle_if_due(session, remediation, now)
    return remediation.state


def settle_if_due(session: Session, remediation: Remediation, now: dt.datetime) -> RemediationState:
    if remediation.state != RemediationState.verifying or remediation.settle_until is None:
        return remediation.state
    if now < remediation.settle_until:
        return remediation.state
    planning.finish(session, remediation, RemediationState.succeeded, "healthy through the settle period", now)
    host = session.get_one(Host, remediation.host_id)
    host.state = HostState.in_service
    return remediation.state


def _open_ticket(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> tuple[int, bool]:
    params = step.params
    request = TicketRequest(
        hostname=host.hostname,
        datacenter=host.datacenter,
        rack=host.rack,
        part_type=str(params.get("part_type", "host")),
        part=remediation.subject,
        title=str(params.get("title", remediation.reason)),
        priority=int(params.get("priority", 3)),
        remediation_id=remediation.id,
        evidence=evidence_bundle(session, host, remediation),
    )
    ticket, created = tickets.open_ticket(session, request, actor=planning.SYSTEM)
    return ticket.id, created
