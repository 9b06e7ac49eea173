"""The remediator's operations: ingest reports, derive signals, plan and advance remediations.

Services flush; the task or request that calls them owns the transaction.
Tasks are sent only after that transaction commits (core.queue.send_after_commit).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from celery import current_app
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from checker.schemas import Report
from core import audit
from core.db import utcnow
from core.dispatch import send_after_commit
from core.errors import NotFound
from core.queue import REMEDIATE_QUEUE
from remediator.models import (
    ACTIVE_REMEDIATION_STATES,
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    Signal,
    StepState,
)
from remediator.models import Report as ReportRow
from remediator.rules import Rule, matching_rules
from remediator.signals import SignalValue
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

log = logging.getLogger(__name__)
SYSTEM = "system:remediator"


# -- planning ---------------------------------------------------------------------


def active_remediation(session: Session, host_id: int) -> Remediation | None:
    return session.scalars(
        select(Remediation).where(Remediation.host_id == host_id, Remediation.active.is_(True))
    ).one_or_none()


def plan_from_rules(
    session: Session, host: Host, report: Report, signals: list[SignalValue], rules: list[Rule]
) -> Remediation | None:
    fired = matching_rules(
        rules, signals, hardware_class=host.hardware_class, datacenter=host.datacenter, labels=host.labels
    )
    if not fired:
        return None
    rule, signal = fired[0]
    held = None
    if host.state in (HostState.awaiting_repair, HostState.maintenance):
        held = f"host is {host.state.value}"
    elif active_remediation(session, host.id) is not None:
        held = "a remediation is already active"
    if held:
        log.info("remediator.decision.held", extra={"fields": {"host": host.hostname, "rule": rule.id, "reason": held}})
        return None
    return plan_remediation(session, host, rule, signal, report)


_TEMPLATE_FIELD = re.compile(r"\{(\w+)(?::([^{}]*))?\}")


def render_template(template: str, values: dict[str, Any]) -> str:
    """Fill {name} and {name:spec} from values; nothing else is interpreted."""

    def fill(match: re.Match[str]) -> str:
        name, spec = match.group(1), match.group(2) or ""
        if name not in values:
            return match.group(0)
        try:
            return format(values[name], spec)
        except (ValueError, TypeError):
            return str(values[name])

    return _TEMPLATE_FIELD.sub(fill, template)


def plan_remediation(
    session: Session, host: Host, rule: Rule, signal: SignalValue, report: Report | None
) -> Remediation | None:
    """Create a planned remediation; None if the database says one is already active."""
    values = {"subject": signal.subject, "value": signal.value, "hostname": host.hostname, "rule": rule.id}
    subject = signal.subject or host.hostname
    reason = f"{rule.id}: {signal.kind} {signal.value:.3g} on {subject} ({rule.when.op} {rule.when.value:g})"
    remediation = Remediation(
        host_id=host.id,
        rule_id=rule.id,
        state=RemediationState.planned,
        subject=signal.subject,
        reason=reason,
        evidence={
            "signal": {"kind": signal.kind, "subject": signal.subject, "value": signal.value, "detail": signal.detail},
            "report_id": str(report.report_id) if report else None,
            "rule": {"id": rule.id, "description": rule.description},
        },
        steps=[
            RemediationStep(
                index=i,
                action=step.action,
                params={
                    "priority": rule.priority,
                    **{k: render_template(v, values) if isinstance(v, str) else v for k, v in step.params.items()},
                },
            )
            for i, step in enumerate(rule.plan)
        ],
    )
    try:
        with session.begin_nested():
            session.add(remediation)
            session.flush()
    except IntegrityError:  # another worker planned one for this host first
        return None
    host.state = HostState.remediating
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.remediation.planned",
        object_type="remediation",
        object_id=remediation.id,
        reason=reason,
        detail={"host": host.hostname, "rule": rule.id},
    )
    send_after_commit(
        session, current_app.signature("remediator.run_remediation", args=[remediation.id], queue=REMEDIATE_QUEUE)
    )
    log.info(
        "remediator.remediation.planned",
        extra={"fields": {"host": host.hostname, "rule": rule.id, "remediation": remediation.id}},
    )
    return remediation


# -- running a plan ---------------------------------------------------------------


def _finish(session: Session, remediation: Remediation, state: RemediationState, reason: str) -> None:
    remediation.state = state
    remediation.finished_at = None if state in ACTIVE_REMEDIATION_STATES else utcnow()
    audit.record(
        session,
        actor=SYSTEM,
        action=f"remediator.remediation.{state.value}",
        object_type="remediation",
        object_id=remediation.id,
        reason=reason,
    )


def advance(session: Session, remediation_id: int) -> RemediationState:
    """Run the next pending step of a remediation; safe to call again for the same step.

    The row is locked for the duration (SELECT … FOR UPDATE on PostgreSQL, the
    write lock on SQLite), so two deliveries of the same task do not both run it.
    """
    remediation = session.scalars(
        select(Remediation).where(Remediation.id == remediation_id).with_for_update()
    ).one_or_none()
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in ACTIVE_REMEDIATION_STATES or remediation.state == RemediationState.awaiting_approval:
        return remediation.state
    host = session.get_one(Host, remediation.host_id)
    step = next((s for s in remediation.steps if s.state in (StepState.pending, StepState.running)), None)
    if step is None:
        _finish(session, remediation, RemediationState.succeeded, "all steps done")
        host.state = HostState.in_service
        return remediation.state
    remediation.state = RemediationState.running
    remediation.current_step = step.index
    step.state = StepState.running
    step.attempts += 1
    step.started_at = step.started_at or utcnow()
    if step.action == "ticket":
        ticket_id, created = _ticket_step(session, host, remediation, step)
        step.state = StepState.succeeded
        step.finished_at = utcnow()
        step.result = {"ticket_id": ticket_id, "created": created}
        _finish(session, remediation, RemediationState.escalated, f"ticket {ticket_id} for a technician")
        host.state = HostState.awaiting_repair
    else:
        # Host actions are carried out by cyborg on the host's own queue; until
        # an executor is registered for an action, the step cannot run.
        step.state = StepState.failed
        step.finished_at = utcnow()
        step.result = {"error": f"no executor for action {step.action!r}"}
        _finish(session, remediation, RemediationState.failed, f"step {step.index} ({step.action}) has no executor")
        host.state = HostState.in_service
    session.flush()
    return remediation.state


def _ticket_step(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> tuple[int, bool]:
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
    ticket, created = tickets.open_ticket(session, request, actor=SYSTEM)
    return ticket.id, created


def evidence_bundle(session: Session, host: Host, remediation: Remediation) -> dict[str, Any]:
    """What the technician needs, frozen when the ticket opens."""
    recent = session.scalars(
        select(Signal)
        .where(Signal.host_id == host.id, Signal.subject == remediation.subject)
        .order_by(Signal.observed_at.desc())
        .limit(50)
    ).all()
    latest = session.scalars(
        select(ReportRow).where(ReportRow.host_id == host.id).order_by(ReportRow.captured_at.desc()).limit(1)
    ).one_or_none()
    part: dict[str, Any] | None = None
    if latest is not None:
        dimms = ((latest.body.get("observations") or {}).get("identity") or {}).get("dimms") or []
        part = next((d for d in dimms if d.get("locator") and d["locator"] in remediation.subject), None)
    return {
        "location": {
            "datacenter": host.datacenter,
            "row": host.row,
            "rack": host.rack,
            "slot": host.slot,
            "hardware_class": host.hardware_class,
        },
        "part": part,
        "reason": remediation.reason,
        "rule": remediation.rule_id,
        "signals": [
            {"kind": s.kind, "value": s.value, "at": s.observed_at.isoformat(), "detail": s.detail} for s in recent
        ],
    }


# -- reads ------------------------------------------------------------------------


def list_hosts(session: Session, *, datacenter: str | None = None, limit: int = 500) -> list[Host]:
    query = select(Host).order_by(Host.hostname).limit(limit)
    if datacenter:
        query = query.where(Host.datacenter == datacenter)
    return list(session.scalars(query))


def get_host(session: Session, hostname: str) -> Host:
    host = session.scalars(select(Host).where(Host.hostname == hostname)).one_or_none()
    if host is None:
        raise NotFound(f"host {hostname!r} is not known")
    return host


def host_signals(session: Session, host_id: int, *, limit: int = 200) -> list[Signal]:
    return list(
        session.scalars(
            select(Signal).where(Signal.host_id == host_id).order_by(Signal.observed_at.desc()).limit(limit)
        )
    )


def list_remediations(session: Session, *, host_id: int | None = None, limit: int = 100) -> list[Remediation]:
    query = select(Remediation).options(selectinload(Remediation.steps)).order_by(Remediation.id.desc()).limit(limit)
    if host_id is not None:
        query = query.where(Remediation.host_id == host_id)
    return list(session.scalars(query))
