"""A ticket page's other changes: cancel and reassign (operators), comment (technicians).

Each is the API's own call (api/routes/tickets.py): the same role, the same
ticketing.lifecycle function (which checks the state and a technician's
datacenter, and writes the ticket's history and the audit log), and the same
version rule: cancel and reassign need the version the page was made from, a
comment only adds to the history and is checked only when a version is sent.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.deps import RowId, get_session
from api.web.common import PageRoute, check_version, describe_errors, error_page, flash, page_user, redirect
from core import accounts
from core.auth import Principal
from core.models import Role
from ticketing import lifecycle
from ticketing.models import OPEN_TICKET_STATES, Ticket
from ticketing.queries import lock_ticket
from ticketing.schemas import AssignIn, CancelIn, CommentIn

router = APIRouter(route_class=PageRoute, include_in_schema=False)


def locked_ticket(session: Session, ticket_id: int, version: int | None) -> Ticket:
    """The ticket, row-locked, if the form was made from its current version."""
    ticket = lock_ticket(session, ticket_id)
    last = ticket.events[-1] if ticket.events else None
    what = f"{last.kind} by {last.actor}" if last is not None else ""
    check_version("ticket", ticket_id, ticket.version, version, what=what)
    return ticket


def assignees(session: Session) -> list[str]:
    """Suggestions for the reassign form: active people who can work a ticket, as the audit log names them.
    The API takes any name; so does the form (a <datalist>, not a fixed list)."""
    return [
        f"user:{u.username}" for u in accounts.list_users(session) if u.active and u.role.rank >= Role.technician.rank
    ]


def permissions(ticket: Ticket, principal: Principal, *, ours: bool) -> dict[str, bool]:
    """Which of these forms the page shows; the services refuse the rest whatever sends them."""
    operator = principal.role.rank >= Role.operator.rank
    technician = principal.role.rank >= Role.technician.rank and not principal.is_host
    return {
        "may_cancel": operator and ticket.state in OPEN_TICKET_STATES,
        "may_assign": operator and ticket.state in lifecycle.WORK_STATES,
        "may_comment": technician and ours,
    }


@router.post("/tickets/{ticket_id}/cancel")
def cancel(
    ticket_id: RowId,
    request: Request,
    version: int | None = Form(None),
    reason: str = Form("", max_length=4000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.operator)),
) -> Response:
    """Give the ticket up, with a reason (the host goes back in service unless something else holds it)."""
    try:
        body = CancelIn(reason=reason)
    except ValidationError as error:
        return error_page(request, 422, "Reason: " + describe_errors(error).removeprefix("reason: "))
    ticket = locked_ticket(session, ticket_id, version)
    lifecycle.cancel(session, ticket, actor=principal.actor, reason=body.reason)
    session.commit()
    flash(request, f"Ticket {ticket_id} cancelled.")
    return redirect(request, f"/tickets/{ticket_id}")


@router.post("/tickets/{ticket_id}/assign")
def assign(
    ticket_id: RowId,
    request: Request,
    version: int | None = Form(None),
    assignee: str = Form("", max_length=64),
    reason: str = Form("", max_length=4000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.operator)),
) -> Response:
    """Hand the ticket to someone (an open one becomes claimed by them), with a reason."""
    try:
        body = AssignIn(assignee=assignee, reason=reason)
    except ValidationError as error:
        return error_page(request, 422, describe_errors(error))
    ticket = locked_ticket(session, ticket_id, version)
    lifecycle.assign(session, ticket, actor=principal.actor, assignee=body.assignee, reason=body.reason)
    session.commit()
    flash(request, f"Ticket {ticket_id} is now {body.assignee}'s.")
    return redirect(request, f"/tickets/{ticket_id}")


@router.post("/tickets/{ticket_id}/comment")
def add_comment(
    ticket_id: RowId,
    request: Request,
    version: int | None = Form(None),
    comment: str = Form("", max_length=4000, description="The API's `note` (a form apart from the resolve note)."),
    session: Session = Depends(get_session),
    principal: Principal = Depends(page_user(Role.technician)),
) -> Response:
    """A note in the ticket's history, in any state (another datacenter's ticket: refused, as in the API)."""
    try:
        body = CommentIn(note=comment)
    except ValidationError as error:
        return error_page(request, 422, "Comment: " + describe_errors(error).removeprefix("note: "))
    ticket = locked_ticket(session, ticket_id, version) if version is not None else lock_ticket(session, ticket_id)
    lifecycle.comment(session, ticket, actor=principal.actor, note=body.note, scope=principal.datacenters)
    session.commit()
    flash(request, f"Comment added to ticket {ticket_id}.")
    return redirect(request, f"/tickets/{ticket_id}#history")
