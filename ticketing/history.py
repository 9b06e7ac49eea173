"""Recording a change of a ticket: its own history (a TicketEvent), the audit log, and a sync to the
external tracker that leaves only when the transaction commits. Opening and the lifecycle both record here."""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery import current_app
from sqlalchemy.orm import Session

from core import audit
from core.dispatch import pending_tasks, send_after_commit
from core.queue import NOTIFY_QUEUE
from ticketing.models import Ticket, TicketEvent

SYNC_TASK = "ticketing.sync_tracker"


def record(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    kind: str,
    note: str,
    now: dt.datetime,
    detail: dict[str, Any] | None = None,
    audit_it: bool = True,
) -> TicketEvent:
    """The ticket's own history, the audit log, and a sync to the tracker once this transaction commits."""
    event = TicketEvent(ticket=ticket, actor=actor, kind=kind, note=note[:4000], detail=detail or {}, at=now)
    session.add(event)
    if audit_it:
        audit.record(
            session,
            actor=actor,
            action=f"ticketing.ticket.{kind}",
            object_type="ticket",
            object_id=ticket.id,
            reason=note,
            detail=detail,
        )
    session.flush()
    sync_after_commit(session, ticket.id)
    return event


def sync_after_commit(session: Session, ticket_id: int) -> None:
    """One sync per ticket and transaction, however many changes it made."""
    for signature in pending_tasks(session):
        if signature.task == SYNC_TASK and list(signature.args) == [ticket_id]:
            return
    send_after_commit(session, current_app.signature(SYNC_TASK, args=[ticket_id], queue=NOTIFY_QUEUE))
