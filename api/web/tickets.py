"""The technician's pages: the ticket queue, a ticket, and its claim / start / resolve forms.

Every change is one call of ticketing.lifecycle, as in the API (the
remediator's reaction, such as verification after a resolve, runs inside it).
Forms carry the ticket's version: a form made from an older version is
refused with a message, never applied.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request, Response
from pydantic import ValidationError
from sqlalchemy import Select
from sqlalchemy.orm import Session

from api.deps import RowId, get_session
from api.pagination import paginate
from api.web import charts, queries
from api.web.common import (
    PageRoute,
    describe_errors,
    flash,
    is_htmx,
    local_path,
    page_user,
    redirect,
    render,
)
from api.web.ticket_actions import assignees, locked_ticket, permissions
from core.auth import Principal
from core.errors import FleetfixError, NotFound
from core.models import Role, User
from remediator import repair_load
from remediator import service as remediator
from ticketing import lifecycle
from ticketing.models import Ticket, TicketState
from ticketing.queries import get_ticket, ticket_query
from ticketing.schemas import Replacement, Resolution

router = APIRouter(route_class=PageRoute, include_in_schema=False)

STATE_CHOICES: dict[str, list[TicketState]] = {
    "": [TicketState.open, TicketState.claimed, TicketState.in_progress],
    "open": [TicketState.open],
    "claimed": [TicketState.claimed, TicketState.in_progress],
    "verifying": [TicketState.resolved, TicketState.verifying],
    "closed": [TicketState.closed],
    "cancelled": [TicketState.cancelled],
}
STATE_LABELS = {
    "": "to do (open, claimed, in progress)",
    "open": "open",
    "claimed": "claimed or in progress",
    "verifying": "resolved, being verified",
    "closed": "closed",
    "cancelled": "cancelled",
}
AGE_CHOICES = {"": None, "1h": 3600, "4h": 4 * 3600, "1d": 86400, "3d": 3 * 86400, "7d": 7 * 86400}
PAGE_SIZE = 50


def _sort_key(sort: str) -> list[Any]:
    # Oldest first within a priority: the ticket that waited longest is done first.
    if sort == "age":
        return [Ticket.created_at, Ticket.id]
    return [Ticket.priority, Ticket.created_at, Ticket.id]


def _user(session: Session, principal: Principal) -> User | None:
    return session.get(User, principal.user_id) if principal.user_id is not None else None


@router.get("/queue")
def queue(
    request: Request,
    datacenter: str | None = Query(None, max_length=64, description="Absent: the technician's own; empty: all."),
    rack: str = Query("", max_length=64),
    part_type: str = Query("", max_length=32),
    priority: str = Query("", pattern="^[1-5]?$", description="1-5; empty: any."),
    age: str = Query("", pattern="^(|1h|4h|1d|3d|7d)$"),
    state: str = Query("", pattern="^(|open|claimed|verifying|closed|cancelled)$"),
    mine: bool = False,
    sort: str = Query("priority", pattern="^(priority|age)$"),
    cursor: str | None = Query(None, max_length=500),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    """Tickets to do, the technician's datacenter first, most urgent and oldest at the top."""
    user = _user(session, principal)
    if datacenter is None:
        datacenter = (user.datacenter if user is not None else None) or ""
    older = AGE_CHOICES[age]
    query: Select[tuple[Ticket]] = ticket_query(
        states=STATE_CHOICES[state],
        datacenter=datacenter or None,
        rack=rack or None,
        part_type=part_type or None,
        priorities=[int(priority)] if priority else None,
        assignee=principal.actor if mine else None,
        created_before=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=older) if older else None,
    )
    page = paginate(
        session, query, _sort_key(sort), cursor=cursor, limit=PAGE_SIZE, convert=lambda t: t, descending=False
    )
    filters = {
        "datacenter": datacenter,
        "rack": rack,
        "part_type": part_type,
        "priority": int(priority) if priority else "",
        "age": age,
        "state": state,
        "mine": mine,
        "sort": sort,
    }
    return render(
        request,
        "queue.html",
        {
            "tickets": page.items,
            "next_url": _next_url(filters, page.next_cursor),
            "filters": filters,
            "datacenters": queries.datacenters(session),
            "part_types": queries.ticket_part_types(session),
            "states": STATE_LABELS,
            "ages": [a for a in AGE_CHOICES if a],
            "user": user,
            "back": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        },
    )


def _next_url(filters: dict[str, Any], cursor: str | None) -> str | None:
    if cursor is None:
        return None
    kept = {name: value for name, value in filters.items() if name != "mine"}
    if filters["mine"]:
        kept["mine"] = "true"
    return "/queue?" + urlencode({**kept, "cursor": cursor})


# -- one ticket -------------------------------------------------------------------------


def _charts(session: Session, ticket: Ticket) -> list[charts.Chart]:
    """The part's CE rate over time (frozen evidence, then what the host said since) and its counters."""
    evidence = ticket.evidence or {}
    rates: dict[str, float] = {}
    for signal in evidence.get("signals") or []:
        if signal.get("kind") == queries.CE_RATE and isinstance(signal.get("value"), int | float):
            rates[str(signal.get("at"))] = float(signal["value"])
    try:
        host = remediator.get_host(session, ticket.hostname)
    except NotFound:
        host = None
    if host is not None and ticket.part:
        for signal in queries.subject_signals(session, host.id, ticket.part):
            if signal.kind == queries.CE_RATE:
                rates[signal.observed_at.isoformat()] = signal.value
    found = []
    rate_points = [(at, value) for text, value in rates.items() if (at := _parse(text)) is not None]
    if rate_points or ticket.part_type == "dimm":
        found.append(charts.line_chart("Correctable errors per second", "CE/s", {ticket.part or "DIMM": rate_points}))
    counters: dict[str, list[tuple[dt.datetime, float]]] = {}
    for row in evidence.get("counter_history") or []:
        at = _parse(row.get("at"))
        for name, value in row.items():
            if at is not None and name not in ("at", "until") and isinstance(value, int | float):
                counters.setdefault(name, []).append((at, float(value)))
    if counters:
        found.append(charts.line_chart("Counters reported by the host", "count", counters))
    return found


def _parse(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _ticket_context(session: Session, ticket: Ticket, principal: Principal) -> dict[str, Any]:
    evidence = ticket.evidence or {}
    mine = ticket.assignee == principal.actor
    is_operator = _is_operator(principal)
    # another datacenter's ticket is read-only to a technician (ticketing.lifecycle.check_scope)
    ours = principal.datacenters is None or ticket.datacenter in principal.datacenters
    return {
        "ticket": ticket,
        "evidence": evidence,
        "location": evidence.get("location") or {},
        "part": evidence.get("part") or {},
        "charts": _charts(session, ticket),
        "sel": evidence.get("sel") or [],
        "kernel_log": evidence.get("kernel_log") or [],
        "smart": evidence.get("smart") or {},
        "attempts": evidence.get("remediations") or [],
        "load_test": repair_load.verdict_of(ticket.events),  # a repaired DIMM's run under load, latest
        "mine": mine,
        "read_only": not ours,
        "may_claim": ours and ticket.state == TicketState.open,
        "may_start": ours and ticket.state == TicketState.claimed and (mine or is_operator),
        "may_resolve": ours
        and ticket.state in (TicketState.claimed, TicketState.in_progress)
        and (mine or is_operator),
        "needs_override": ticket.assignee is not None and not mine,
        **permissions(ticket, principal, ours=ours),  # cancel, reassign, comment (api/web/ticket_actions.py)
        "assignees": assignees(session) if is_operator else [],
        "form": {"old_serial": "", "new_serial": "", "note": ""},
        "form_error": "",
    }


@router.get("/tickets/{ticket_id}")
def ticket_page(
    ticket_id: RowId,
    request: Request,
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    ticket = get_ticket(session, ticket_id)
    return render(request, "ticket.html", _ticket_context(session, ticket, principal))


def _after_change(request: Request, session: Session, ticket_id: int, back: str, message: str) -> Response:
    if is_htmx(request) and request.headers.get("hx-target", "").startswith("ticket-row-"):
        ticket = get_ticket(session, ticket_id)
        return render(request, "_queue_row.html", {"t": ticket, "notice": message, "back": back})
    flash(request, message)
    return redirect(request, local_path(back, f"/tickets/{ticket_id}"))


@router.post("/tickets/{ticket_id}/claim")
def claim(
    ticket_id: RowId,
    request: Request,
    version: int | None = Form(None),
    back: str = Form("", max_length=2000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.technician)),
) -> Response:
    ticket = locked_ticket(session, ticket_id, version)
    lifecycle.claim(session, ticket, actor=principal.actor, scope=principal.datacenters)
    session.commit()
    return _after_change(request, session, ticket_id, back, f"Ticket {ticket_id} is yours.")


@router.post("/tickets/{ticket_id}/start")
def start(
    ticket_id: RowId,
    request: Request,
    version: int | None = Form(None),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.technician)),
) -> Response:
    ticket = locked_ticket(session, ticket_id, version)
    lifecycle.start(
        session, ticket, actor=principal.actor, override=_is_operator(principal), scope=principal.datacenters
    )
    session.commit()
    return _after_change(request, session, ticket_id, "", f"Work on ticket {ticket_id} started.")


def _is_operator(principal: Principal) -> bool:
    """As in the API: an operator may act on a ticket assigned to someone else."""
    return principal.role.rank >= Role.operator.rank


@router.post("/tickets/{ticket_id}/resolve")
def resolve(
    ticket_id: RowId,
    request: Request,
    version: int | None = Form(None),
    old_serial: str = Form("", max_length=200),
    new_serial: str = Form("", max_length=200),
    note: str = Form("", max_length=5000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.technician)),
) -> Response:
    """Old and new serial of the part replaced (both empty: nothing replaced, e.g. a reseat) and a note."""
    entered = {"old_serial": old_serial, "new_serial": new_serial, "note": note}
    try:
        replacements = [Replacement(old_serial=old_serial, new_serial=new_serial)] if old_serial or new_serial else []
        resolution = Resolution(replacements=replacements, note=note)
    except ValidationError as error:
        return _form_again(request, session, ticket_id, principal, entered, describe_errors(error))
    try:
        ticket = locked_ticket(session, ticket_id, version)
        lifecycle.resolve(
            session,
            ticket,
            resolution,
            actor=principal.actor,
            override=_is_operator(principal),
            scope=principal.datacenters,
        )
    except FleetfixError as error:
        session.rollback()
        return _form_again(request, session, ticket_id, principal, entered, error.message, error.status_code)
    session.commit()
    flash(request, f"Ticket {ticket_id} resolved: the host is being re-checked.")
    return redirect(request, f"/tickets/{ticket_id}")


def _form_again(
    request: Request,
    session: Session,
    ticket_id: int,
    principal: Principal,
    entered: dict[str, str],
    message: str,
    status_code: int = 422,
) -> Response:
    """The ticket page with the resolve form as the technician filled it in, and what is wrong with it."""
    context = _ticket_context(session, get_ticket(session, ticket_id), principal)
    context.update(form=entered, form_error=_friendly(message))
    if is_htmx(request):
        return render(request, "_resolve_form.html", context, status_code=status_code)
    return render(request, "ticket.html", context, status_code=status_code)


def _friendly(message: str) -> str:
    for field, words in (
        ("replacements.0.old_serial", "Old serial"),
        ("replacements.0.new_serial", "New serial"),
        ("replacements.0", "Serials"),
        ("note", "Note"),
    ):
        message = message.replace(field, words)
    return message.replace("Value error, ", "")
