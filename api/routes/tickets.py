"""Repair tickets."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from api.deps import get_session
from ticketing import service as tickets
from ticketing.models import TicketState
from ticketing.schemas import TicketDetail, TicketOut

router = APIRouter(prefix="/tickets", tags=["tickets"])


@router.get("", response_model=list[TicketOut])
def list_tickets(
    state: TicketState | None = None,
    datacenter: str | None = None,
    hostname: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
) -> list[TicketOut]:
    found = tickets.list_tickets(session, state=state, datacenter=datacenter, hostname=hostname, limit=limit)
    return [TicketOut.model_validate(t) for t in found]


@router.get("/{ticket_id}", response_model=TicketDetail)
def get_ticket(ticket_id: int, session: Session = Depends(get_session)) -> TicketDetail:
    return TicketDetail.model_validate(tickets.get_ticket(session, ticket_id))
