"""Repair tickets and the repair history.

Viewers read; technicians claim, start, comment on and resolve; operators also
open tickets by hand, cancel and reassign. Every change takes the ticket's
ETag in If-Match (412 when it moved on, 428 without) and answers with the new
one; a comment only adds to the history, so If-Match is checked when sent.

Each change is one call of ticketing.lifecycle; what the remediator does about
it (verification after a resolve, the host released after a cancel) is its
reaction, run by ticketing in the same transaction. Opening by hand goes
through the remediator, which gathers the evidence bundle.
"""

from __future__ import annotations

import datetime as dt
import re

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from api.auth import require
from api.deps import RowId, get_session
from api.pagination import CURSOR_QUERY, Page, paginate
from api.versioning import PreconditionFailed, check_if_match, set_etag
from core.auth import Principal
from core.db import utcnow
from core.errors import InvalidInput
from core.models import Role
from remediator import repairs
from ticketing import lifecycle, queries
from ticketing.models import Repair, Ticket, TicketState
from ticketing.schemas import (
    AssignIn,
    CancelIn,
    CommentIn,
    Note,
    RepairOut,
    RepairStat,
    Resolution,
    TicketDetail,
    TicketEventOut,
    TicketOpen,
    TicketOut,
    TrackerOut,
)

router = APIRouter(prefix="/tickets", tags=["tickets"])
repairs_router = APIRouter(prefix="/repairs", tags=["tickets"])
ETAG_KIND = "ticket"
_AGE = re.compile(r"^(\d+)\s*([smhdw]?)$")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(value: str | None, field: str) -> dt.timedelta | None:
    """`90`, `30m`, `12h`, `7d`, `2w`."""
    if value is None or value == "":
        return None
    match = _AGE.match(value.strip())
    if match is None:
        raise InvalidInput(
            f"query.{field}: {value!r} is not an age like 30m, 12h or 7d",
            detail=[{"field": f"query.{field}", "message": "an age: a number of s, m, h, d or w"}],
        )
    return dt.timedelta(seconds=int(match.group(1)) * _AGE_UNITS[match.group(2)])


def _detail(session: Session, response: Response, ticket_id: int) -> TicketDetail:
    ticket = queries.get_ticket(session, ticket_id)
    link = queries.tracker_link(session, ticket_id)
    detail = TicketDetail.model_validate(
        {
            **TicketOut.model_validate(ticket).model_dump(),
            "evidence": ticket.evidence,
            "events": [TicketEventOut.model_validate(e) for e in ticket.events],
            "repairs": [RepairOut.model_validate(r) for r in ticket.repairs],
            "tracker": TrackerOut.model_validate(link) if link is not None else None,
        }
    )
    set_etag(response, ETAG_KIND, ticket.id, ticket.version)
    return detail


def _locked(session: Session, request: Request, ticket_id: int, *, required: bool = True) -> Ticket:
    """The ticket, row-locked, if the client's If-Match names its current version."""
    ticket = queries.lock_ticket(session, ticket_id)
    if required or request.headers.get("if-match") is not None:
        check_if_match(request, ETAG_KIND, ticket_id, ticket.version)
    return ticket


def _commit(session: Session, ticket_id: int) -> None:
    try:
        session.commit()
    except StaleDataError as error:  # a concurrent writer got there between our lock and our flush
        session.rollback()
        raise PreconditionFailed(f"{ETAG_KIND} {ticket_id} changed while you were changing it; reload") from error


def _is_operator(principal: Principal) -> bool:
    return principal.role.rank >= Role.operator.rank


@router.get("", response_model=Page[TicketOut])
def list_tickets(
    state: list[TicketState] | None = Query(None, description="One or more states (repeat the parameter)."),
    open: bool = Query(False, description="Only tickets not closed or cancelled."),
    datacenter: str | None = None,
    rack: str | None = None,
    part_type: str | None = Query(None, description="dimm, disk, psu, fan, host …"),
    priority: list[int] | None = Query(None, description="One or more priorities, 1 (highest) to 5."),
    assignee: str | None = Query(None, description="As the audit log names people (user:alice); `me` for yourself."),
    hostname: str | None = None,
    min_age: str | None = Query(None, description="Opened at least this long ago: 30m, 12h, 7d …"),
    max_age: str | None = Query(None, description="Opened at most this long ago."),
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.viewer)),
) -> Page[TicketOut]:
    """Repair tickets matching every filter given, newest first."""
    now = utcnow()
    older, younger = parse_age(min_age, "min_age"), parse_age(max_age, "max_age")
    query = queries.ticket_query(
        states=state,
        open_only=open,
        datacenter=datacenter,
        rack=rack,
        part_type=part_type,
        priorities=priority,
        assignee=principal.actor if assignee == "me" else assignee,
        hostname=hostname,
        created_before=now - older if older is not None else None,
        created_after=now - younger if younger is not None else None,
    )
    return paginate(session, query, Ticket.id, cursor=cursor, limit=limit, convert=TicketOut.model_validate)


@router.post("", response_model=TicketDetail, status_code=201)
def open_ticket(
    body: TicketOpen,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> TicketDetail:
    """Open a ticket by hand; the evidence bundle is gathered now. If the host and part already
    have an open ticket, this adds a detection to it (200) instead."""
    ticket_id, created = repairs.open_by_hand(session, body, actor=principal.actor)
    session.commit()
    if not created:
        response.status_code = 200
    return _detail(session, response, ticket_id)


@router.get("/{ticket_id}", response_model=TicketDetail)
def get_ticket(
    ticket_id: RowId,
    response: Response,
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> TicketDetail:
    """One ticket with its evidence bundle, history, repairs and tracker link; the ETag for changes."""
    return _detail(session, response, ticket_id)


@router.post("/{ticket_id}/claim", response_model=TicketDetail)
def claim(
    ticket_id: RowId,
    request: Request,
    response: Response,
    body: Note | None = None,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.technician)),
) -> TicketDetail:
    """Take an open ticket (409 if someone else has it)."""
    ticket = _locked(session, request, ticket_id)
    lifecycle.claim(session, ticket, actor=principal.actor, note=body.note if body else "", scope=principal.datacenters)
    _commit(session, ticket_id)
    return _detail(session, response, ticket_id)


@router.post("/{ticket_id}/start", response_model=TicketDetail)
def start(
    ticket_id: RowId,
    request: Request,
    response: Response,
    body: Note | None = None,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.technician)),
) -> TicketDetail:
    """Work begins (claims the ticket if nobody has)."""
    ticket = _locked(session, request, ticket_id)
    lifecycle.start(
        session,
        ticket,
        actor=principal.actor,
        note=body.note if body else "",
        override=_is_operator(principal),
        scope=principal.datacenters,
    )
    _commit(session, ticket_id)
    return _detail(session, response, ticket_id)


@router.post("/{ticket_id}/comments", response_model=TicketDetail, status_code=201)
def comment(
    ticket_id: RowId,
    body: CommentIn,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.technician)),
) -> TicketDetail:
    """Add a note to the ticket's history, in any state."""
    ticket = _locked(session, request, ticket_id, required=False)
    lifecycle.comment(session, ticket, actor=principal.actor, note=body.note, scope=principal.datacenters)
    _commit(session, ticket_id)
    return _detail(session, response, ticket_id)


@router.post("/{ticket_id}/resolve", response_model=TicketDetail)
def resolve(
    ticket_id: RowId,
    body: Resolution,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.technician)),
) -> TicketDetail:
    """Record what was replaced (old and new serials) and a note; the host is then re-checked
    (`verifying`) and the ticket closes once it stays healthy through the settle period."""
    ticket = _locked(session, request, ticket_id)
    lifecycle.resolve(
        session, ticket, body, actor=principal.actor, override=_is_operator(principal), scope=principal.datacenters
    )
    _commit(session, ticket_id)
    return _detail(session, response, ticket_id)


@router.post("/{ticket_id}/cancel", response_model=TicketDetail)
def cancel(
    ticket_id: RowId,
    body: CancelIn,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> TicketDetail:
    """Cancel an open ticket, with a reason; the host goes back in service if nothing else holds it."""
    ticket = _locked(session, request, ticket_id)
    lifecycle.cancel(session, ticket, actor=principal.actor, reason=body.reason)
    _commit(session, ticket_id)
    return _detail(session, response, ticket_id)


@router.post("/{ticket_id}/assign", response_model=TicketDetail)
def assign(
    ticket_id: RowId,
    body: AssignIn,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> TicketDetail:
    """Hand the ticket to someone (or take it from them), with a reason."""
    ticket = _locked(session, request, ticket_id)
    lifecycle.assign(session, ticket, actor=principal.actor, assignee=body.assignee, reason=body.reason)
    _commit(session, ticket_id)
    return _detail(session, response, ticket_id)


@repairs_router.get("/stats", response_model=list[RepairStat])
def repair_stats(
    part_type: str | None = None,
    datacenter: str | None = None,
    since: dt.datetime | None = Query(None, description="Only repairs made at or after this time (ISO 8601)."),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> list[RepairStat]:
    """Per part type, vendor and model: parts replaced, repairs verified, and how often the fault returned."""
    if since is not None and since.tzinfo is None:
        raise InvalidInput(
            "query.since: give a time zone (…Z or +00:00)",
            detail=[{"field": "query.since", "message": "timezone required"}],
        )
    return queries.repair_stats(session, part_type=part_type, datacenter=datacenter, since=since)


@repairs_router.get("", response_model=Page[RepairOut])
def list_repairs(
    part_type: str | None = None,
    hostname: str | None = None,
    returned: bool | None = Query(
        None, description="true: only repairs whose fault came back; false: only those that held."
    ),
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> Page[RepairOut]:
    """Every recorded replacement, newest first."""
    query = queries.repair_query(part_type=part_type, hostname=hostname, returned=returned)
    return paginate(session, query, Repair.id, cursor=cursor, limit=limit, convert=RepairOut.model_validate)
