"""Stopping a remediation: the one way an operator ends an active plan (the API's cancel and abort, the
web page's cancel).

Nothing more starts: pending steps are skipped, and the remediation is `cancelled`. A step handed
over and not reported yet fails as stopped; its envelope is revoked after the commit (`revoke`),
best-effort, and bounded by its expiry in any case. An action the host already started finishes
there (a reflash cut in the middle is worse than one finished), so such a step keeps waiting
(`awaiting`, `deadline`) and its host is held: out of service and drained, counted by the caps,
until the step ends (`end_hold`):

- its result comes (remediator.host_results, kept as `late_report`): succeeded, the host is
  released; anything else, it waits for a person (`awaiting_repair`) with a ticket for the host;
- its deadline passes with no result (remediator.deadlines): a ticket, as for a failed result, if the
  host had said it started; if it never did, the envelope expired unstarted and the host is released;
- a reinstall stopped while waiting for the new image's first report: when that report comes, or
  the deadline passes, its boot device is set back to disk first (`finish_reimage`), then the host
  is released (it reported) or ticketed (it did not).

With no step in flight the host is released at once (`release_host`): back in service, and out of
the drain this remediation put it in, unless a technician holds it (an open ticket for the host):
then it stays out, and drained, until that repair is verified, as when a remediation settles. A
stop cancels no ticket: a ticket is a person's work, cancelled on its own (docs/tickets.md); a
remediation that opened one has ended already (escalated) and cannot be stopped.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from celery import Celery
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.errors import Conflict, NotFound
from core.queue import host_app
from remediator import draining
from remediator.decisions import SYSTEM, finish
from remediator.evidence import evidence_bundle, ticket_title
from remediator.handoff import locked, stop_waiting
from remediator.models import (
    ACTIVE_REMEDIATION_STATES,
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    StepState,
)
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stopped:
    remediation: Remediation
    revoke: list[str]
    """Envelope ids of steps that were on their way to the host: revoke them once the stop is committed."""


def stop(session: Session, remediation_id: int, *, actor: str, reason: str, now: dt.datetime) -> Stopped:
    """Stop an active remediation (see the module); 409 (Conflict) if it has ended."""
    remediation = locked(session, remediation_id)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in ACTIVE_REMEDIATION_STATES:
        raise Conflict(f"remediation {remediation_id} is {remediation.state.value}; only an active one can be stopped")
    revoke = []
    held: RemediationStep | None = None
    for step in remediation.steps:
        if step.state == StepState.pending:
            step.state = StepState.skipped
            step.result = {"skipped": f"stopped by {actor}"}
        elif step.state == StepState.running:
            result = dict(step.result or {})
            if result.get("envelope_id"):
                revoke.append(str(result["envelope_id"]))
            step.state = StepState.failed
            step.finished_at = now
            if step.awaiting is not None:
                # The host may be running it: the step keeps waiting, for its report or its deadline.
                held = step
                error = f"stopped by {actor} while in flight; the host is held until its report or deadline"
            else:
                error = f"stopped by {actor} while in flight; the host's report is kept"
            step.result = {**result, "error": error}
    finish(session, remediation, RemediationState.cancelled, f"cancelled by {actor}: {reason}", now)
    detail: dict[str, Any] = {"revoked": revoke}
    if held is None:
        release_host(session, remediation, now)
    else:
        detail.update(held=True, step=held.index)
    audit.record(
        session,
        actor=actor,
        action="remediator.remediation.cancel_requested",
        object_type="remediation",
        object_id=remediation_id,
        reason=reason,
        detail=detail,
    )
    session.flush()
    return Stopped(remediation, revoke)


def held(step: RemediationStep) -> bool:
    """Whether `step` was stopped while in flight and still waits: its host is held until it ends."""
    return step.state == StepState.failed and step.awaiting is not None


def end_hold(
    session: Session, remediation: Remediation, step: RemediationStep, now: dt.datetime, *, released: bool, reason: str
) -> int | None:
    """A step stopped in flight has ended: its report came, or its deadline passed. `released`: the host
    did its action; it is released as a stop with nothing in flight releases it. Otherwise a person
    looks: the host waits for repair, with a ticket. Audited; returns the ticket's id, if one opened."""
    stop_waiting(step)
    host = session.get_one(Host, remediation.host_id)
    ticket_id = None
    if released:
        release_host(session, remediation, now)
    else:
        evidence = evidence_bundle(session, host, remediation)
        request = TicketRequest(
            hostname=host.hostname,
            datacenter=host.datacenter,
            rack=host.rack,
            part_type="host",
            part=remediation.subject,
            title=ticket_title(f"{host.hostname}: {reason}", evidence),
            remediation_id=remediation.id,
            evidence=evidence,
        )
        ticket, _ = tickets.open_ticket(session, request, actor=SYSTEM, now=now)
        ticket_id = ticket.id
        if host.state == HostState.remediating and not taken_over(session, remediation):
            host.state = HostState.awaiting_repair  # out, and drained, until the repair is verified
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.remediation.hold_ended",
        object_type="remediation",
        object_id=remediation.id,
        reason=reason,
        detail={"step": step.index, "released": released, "ticket_id": ticket_id, "host_state": host.state.value},
    )
    return ticket_id


def taken_over(session: Session, remediation: Remediation) -> bool:
    """Whether another remediation is active on the host now (one opened while a stopped step held it):
    the host is that one's, and ending the hold leaves its state and drain alone."""
    others = select(Remediation.id).where(
        Remediation.host_id == remediation.host_id,
        Remediation.state.in_(ACTIVE_REMEDIATION_STATES),
        Remediation.id != remediation.id,
    )
    return session.scalars(others.limit(1)).first() is not None


def release_host(session: Session, remediation: Remediation, now: dt.datetime) -> None:
    """Back in service and undrained, unless a technician holds the host (an open ticket that holds it)."""
    host = session.get_one(Host, remediation.host_id)
    if host.state != HostState.remediating or taken_over(session, remediation):
        return  # this remediation does not hold it (unreachable, in maintenance, another's): left as it is
    if tickets.holding_tickets_of_host(session, host.hostname):
        host.state = HostState.awaiting_repair  # a technician holds it: out, and drained, until the repair
        return
    host.state = HostState.in_service
    draining.undrain(session, host, remediation, now)


def revoke(app: Celery | None, stopped: Stopped) -> None:
    """After the commit: ask the workers to drop the envelopes not yet started. Best-effort: a broadcast
    that only the workers online hear, sent on the broker the host's agent listens on (its datacenter's,
    when DATACENTER_BROKERS names one); the envelope's expiry bounds the rest (docs/cyborg.md)."""
    if not stopped.revoke or app is None:
        return
    try:
        host_app(app, stopped.remediation.datacenter).control.revoke(stopped.revoke)
    except Exception:  # the stop stands; a host that still runs it sends a report that is kept as late
        log.warning("remediator.abort.revoke_failed", extra={"fields": {"remediation": stopped.remediation.id}})
