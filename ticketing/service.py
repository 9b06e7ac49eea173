"""Ticket operations. Services flush; the caller's transaction commits."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from core import audit
from core.errors import NotFound
from ticketing.models import OPEN_TICKET_STATES, Ticket, TicketEvent, TicketState
from ticketing.schemas import TicketRequest


def find_open(session: Session, dedup_key: str) -> Ticket | None:
    return session.scalars(select(Ticket).where(Ticket.open_key == dedup_key)).one_or_none()


def open_ticket(session: Session, request: TicketRequest, *, actor: str) -> tuple[Ticket, bool]:
    """Open a ticket, or add this detection to the open one for the same host and part.

    Returns the ticket and whether it was created. Safe under concurrency: the
    unique open_key decides, and the loser adds to the winner's ticket.
    """
    key = request.dedup_key
    existing = find_open(session, key)
    if existing is None:
        ticket = Ticket(
            dedup_key=key,
            open_key=key,
            hostname=request.hostname,
            datacenter=request.datacenter,
            rack=request.rack,
            part_type=request.part_type,
            part=request.part,
            title=request.title[:512],
            priority=request.priority,
            remediation_id=request.remediation_id,
            evidence=request.evidence,
        )
        try:
            with session.begin_nested():
                session.add(ticket)
                session.flush()
        except IntegrityError:
            existing = find_open(session, key)
            if existing is None:
                raise
        else:
            session.add(TicketEvent(ticket=ticket, actor=actor, kind="opened", note=request.title[:1000]))
            audit.record(
                session,
                actor=actor,
                action="ticketing.ticket.opened",
                object_type="ticket",
                object_id=ticket.id,
                reason=request.title,
                detail={"dedup_key": key, "remediation_id": request.remediation_id},
            )
            session.flush()
            return ticket, True
    existing.detections += 1
    session.add(
        TicketEvent(
            ticket=existing,
            actor=actor,
            kind="detected_again",
            note=request.title[:1000],
            detail={"remediation_id": request.remediation_id},
        )
    )
    session.flush()
    return existing, False


def get_ticket(session: Session, ticket_id: int) -> Ticket:
    ticket = session.scalars(
        select(Ticket).where(Ticket.id == ticket_id).options(selectinload(Ticket.events))
    ).one_or_none()
    if ticket is None:
        raise NotFound(f"ticket {ticket_id} does not exist")
    return ticket


def list_tickets(
    session: Session,
    *,
    state: TicketState | None = None,
    open_only: bool = False,
    datacenter: str | None = None,
    hostname: str | None = None,
    after_id: int | None = None,
    limit: int = 100,
) -> list[Ticket]:
    query = select(Ticket).order_by(Ticket.id.desc()).limit(limit)
    if state is not None:
        query = query.where(Ticket.state == state)
    if open_only:
        query = query.where(Ticket.state.in_(OPEN_TICKET_STATES))
    if datacenter:
        query = query.where(Ticket.datacenter == datacenter)
    if hostname:
        query = query.where(Ticket.hostname == hostname)
    if after_id is not None:
        query = query.where(Ticket.id < after_id)
    return list(session.scalars(query))
