"""The ticket lifecycle: every change of a ticket's state, and who may make it.

    open -> claimed -> in_progress -> resolved -> verifying -> closed
      ^                                  |            |          |
      +------------- reopened -----------+------------+----------+   (fault returned)
    any open state -> cancelled (with a reason)

Services flush; the caller's transaction commits. Each change is a TicketEvent
and an audit entry (ticketing.history), and is then announced to the
reactions the process's root handed to its Database (`Reactions`): the
remediator starts verification when a ticket is resolved and puts the host
back in service when one is cancelled. Ticketing is a leaf and may not import
the remediator, hence the hand-in (api/runtime.py). A reaction runs in the changing
transaction, after the change is flushed, so the two commit together or not
at all: an error in a reaction propagates out of the transition, and the
boundary, which commits only after the call returns, rolls both back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from core.db import service_of, utcnow
from core.errors import Conflict, Forbidden
from ticketing import replacements
from ticketing.history import record
from ticketing.models import OPEN_TICKET_STATES, Repair, Ticket, TicketEvent, TicketState
from ticketing.queries import find_open
from ticketing.schemas import Resolution

WORK_STATES = frozenset({TicketState.open, TicketState.claimed, TicketState.in_progress})
"""A technician may still take the ticket, work on it or hand it over."""


# -- lifecycle events and the reactions to them -------------------------------------


@dataclass(frozen=True)
class LifecycleEvent:
    """A change of a ticket's lifecycle as reactions see it: made, recorded and flushed, not yet committed.
    `kind` is the history's (opened, claimed, started, resolved, verifying, closed, reopened, cancelled,
    assigned); `before` and `after` are state values ("" before opening)."""

    ticket: Ticket
    kind: str
    actor: str
    at: dt.datetime
    before: str
    after: str


Reaction = Callable[[Session, LifecycleEvent], None]
"""Called with the changing session; it may change rows (a ticket too, through this module), never commit."""


class Reactions(tuple[Reaction, ...]):
    """The reactions of one runtime, in the order they run (`Database.provide(Reactions, ...)`)."""

    __slots__ = ()


def announce(session: Session, event: LifecycleEvent) -> None:
    """Hand a change to every reaction the session's runtime has, in order."""
    for reaction in service_of(session, Reactions) or ():
        reaction(session, event)


# -- the transitions ----------------------------------------------------------------


def check_scope(ticket: Ticket, scope: Collection[str] | None, actor: str) -> None:
    """A technician changes only the tickets of its own datacenters; others' are read-only to it."""
    if scope is not None and ticket.datacenter not in scope:
        where = ticket.datacenter or "no datacenter"
        raise Forbidden(
            f"{actor} works in {', '.join(sorted(scope))}; ticket {ticket.id} is in {where}: read-only to you",
            detail={"datacenter": ticket.datacenter, "yours": sorted(scope)},
        )


def claim(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    note: str = "",
    scope: Collection[str] | None = None,
    now: dt.datetime | None = None,
) -> Ticket:
    """A technician takes an open ticket. Taking one already theirs changes nothing."""
    check_scope(ticket, scope, actor)
    if ticket.state == TicketState.claimed and ticket.assignee == actor:
        return ticket
    _require(ticket, {TicketState.open}, "claim")
    now = now or utcnow()
    ticket.assignee = actor
    ticket.claimed_at = now
    announce(session, _move(session, ticket, TicketState.claimed, actor=actor, kind="claimed", note=note, now=now))
    return ticket


def start(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    note: str = "",
    override: bool = False,
    scope: Collection[str] | None = None,
    now: dt.datetime | None = None,
) -> Ticket:
    """Work begins at the rack. An open ticket is claimed by whoever starts it."""
    check_scope(ticket, scope, actor)
    _require(ticket, {TicketState.open, TicketState.claimed}, "start")
    _require_assignee(ticket, actor, override)
    now = now or utcnow()
    if ticket.assignee is None:
        ticket.assignee = actor
        ticket.claimed_at = now
    announce(session, _move(session, ticket, TicketState.in_progress, actor=actor, kind="started", note=note, now=now))
    return ticket


def comment(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    note: str,
    scope: Collection[str] | None = None,
    now: dt.datetime | None = None,
) -> TicketEvent:
    """A note on the ticket, in any state; the ticket itself (and its version) does not change, so
    nothing is announced."""
    check_scope(ticket, scope, actor)
    return record(session, ticket, actor=actor, kind="comment", note=note, now=now or utcnow())


def note_check(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    kind: str,
    note: str,
    detail: dict[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> TicketEvent:
    """A check made for the ticket (a repair's load test, remediator.repair_load) enters its history; the
    ticket's state does not change (a failed check reopens it through `reopen`), so nothing is announced."""
    return record(session, ticket, actor=actor, kind=kind, note=note, detail=detail, now=now or utcnow())


def resolve(
    session: Session,
    ticket: Ticket,
    resolution: Resolution,
    *,
    actor: str,
    override: bool = False,
    scope: Collection[str] | None = None,
    now: dt.datetime | None = None,
) -> list[Repair]:
    """The technician is done: each replaced part (old and new serial) enters the repair history.
    Verification (the host re-checked) follows as the remediator's reaction, in this transaction."""
    check_scope(ticket, scope, actor)
    _require(ticket, {TicketState.claimed, TicketState.in_progress}, "resolve")
    _require_assignee(ticket, actor, override)
    now = now or utcnow()
    repairs, detail = replacements.record_repairs(session, ticket, resolution, actor=actor, now=now)
    ticket.resolved_at = now
    event = _move(
        session,
        ticket,
        TicketState.resolved,
        actor=actor,
        kind="resolved",
        note=resolution.note,
        detail=detail,
        now=now,
    )
    announce(session, event)
    return repairs


def extend_verification(session: Session, ticket: Ticket, until: dt.datetime) -> None:
    """Verification lasts until `until` at least (a detection still undecided: remediator.repairs._settle).
    Written without moving the version, like a detection: no one's resolve or close turns into a 412."""
    if ticket.verify_until is not None and ticket.verify_until >= until:
        return
    session.execute(
        update(Ticket).where(Ticket.id == ticket.id).values(verify_until=until),
        execution_options={"synchronize_session": False},
    )
    set_committed_value(ticket, "verify_until", until)


def begin_verification(
    session: Session, ticket: Ticket, *, actor: str, settle: dt.timedelta, now: dt.datetime | None = None
) -> Ticket:
    """The host is being re-checked: it must report without the fault until `verify_until`."""
    _require(ticket, {TicketState.resolved}, "verify")
    now = now or utcnow()
    ticket.verify_started_at = now
    ticket.verify_until = now + settle
    event = _move(
        session,
        ticket,
        TicketState.verifying,
        actor=actor,
        kind="verifying",
        note=f"re-checking the host; closes at {ticket.verify_until.isoformat()} if the fault stays away",
        detail={"verify_until": ticket.verify_until.isoformat()},
        now=now,
    )
    announce(session, event)
    return ticket


def close(session: Session, ticket: Ticket, *, actor: str, reason: str, now: dt.datetime | None = None) -> Ticket:
    """Verification passed: the repairs hold."""
    _require(ticket, {TicketState.verifying}, "close")
    now = now or utcnow()
    ticket.closed_at = now
    for repair in ticket.repairs:
        if repair.returned_at is None and repair.verified_at is None:
            repair.verified_at = now
    announce(session, _move(session, ticket, TicketState.closed, actor=actor, kind="closed", note=reason, now=now))
    return ticket


def reopen(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    reason: str,
    detail: dict[str, Any] | None = None,
    fault_returned: bool = True,
    now: dt.datetime | None = None,
) -> Ticket:
    """Verification failed, or the fault came back after closing. With `fault_returned` the repairs
    count as returned in the repair history (not when the host merely went silent).

    A closed ticket takes its dedup key back only if no other ticket for it is open: a Conflict
    otherwise, also when that ticket was opened concurrently (the unique open_key decides; the
    flush waits for the other transaction), and the caller's transaction goes on unchanged."""
    _require(ticket, {TicketState.resolved, TicketState.verifying, TicketState.closed}, "reopen")
    now = now or utcnow()
    taken = Conflict(
        f"ticket {ticket.id}: another ticket for {ticket.dedup_key} is open", detail={"dedup_key": ticket.dedup_key}
    )
    if ticket.state == TicketState.closed and find_open(session, ticket.dedup_key) is not None:
        raise taken
    try:
        with session.begin_nested():
            returned = [r.id for r in ticket.repairs if r.returned_at is None] if fault_returned else []
            for repair in ticket.repairs:
                if repair.id in returned:
                    repair.returned_at = now
            ticket.reopened += 1
            ticket.detections += 1
            ticket.last_detected_at = now
            ticket.assignee = None
            ticket.claimed_at = ticket.resolved_at = ticket.verify_started_at = None
            ticket.verify_until = ticket.closed_at = None
            event = _move(
                session,
                ticket,
                TicketState.open,
                actor=actor,
                kind="reopened",
                note=reason,
                detail={**(detail or {}), "repairs_returned": returned},
                now=now,
            )
    except IntegrityError as error:  # the unique open_key: a ticket for the key was opened meanwhile
        raise taken from error
    # outside the SAVEPOINT: a reaction's own IntegrityError is not mistaken for the key being taken
    announce(session, event)
    return ticket


def cancel(session: Session, ticket: Ticket, *, actor: str, reason: str, now: dt.datetime | None = None) -> Ticket:
    """An operator gives the ticket up, with a reason (the remediator's reaction: the host goes back in
    service unless another ticket holds it)."""
    _require(ticket, set(OPEN_TICKET_STATES), "cancel")
    now = now or utcnow()
    ticket.closed_at = now
    announce(
        session, _move(session, ticket, TicketState.cancelled, actor=actor, kind="cancelled", note=reason, now=now)
    )
    return ticket


def assign(
    session: Session, ticket: Ticket, *, actor: str, assignee: str, reason: str, now: dt.datetime | None = None
) -> Ticket:
    """An operator hands the ticket to someone (an open one becomes claimed by them)."""
    _require(ticket, set(WORK_STATES), "reassign")
    now = now or utcnow()
    previous = ticket.assignee
    ticket.assignee = assignee
    ticket.claimed_at = now
    state = TicketState.claimed if ticket.state == TicketState.open else ticket.state
    event = _move(
        session,
        ticket,
        state,
        actor=actor,
        kind="assigned",
        note=reason,
        detail={"assignee": assignee, "previous": previous},
        now=now,
    )
    announce(session, event)
    return ticket


def _require(ticket: Ticket, allowed: set[TicketState], action: str) -> None:
    if ticket.state not in allowed:
        names = ", ".join(sorted(s.value for s in allowed))
        raise Conflict(
            f"ticket {ticket.id} is {ticket.state.value}; {action} needs it {names}",
            detail={"state": ticket.state.value, "allowed": sorted(s.value for s in allowed)},
        )


def _require_assignee(ticket: Ticket, actor: str, override: bool) -> None:
    if ticket.assignee is not None and ticket.assignee != actor and not override:
        raise Conflict(
            f"ticket {ticket.id} is assigned to {ticket.assignee}; an operator can reassign it",
            detail={"assignee": ticket.assignee},
        )


def _move(
    session: Session,
    ticket: Ticket,
    state: TicketState,
    *,
    actor: str,
    kind: str,
    note: str,
    now: dt.datetime,
    detail: dict[str, Any] | None = None,
) -> LifecycleEvent:
    """The one place a ticket's state changes: the dedup key follows it, and the change is recorded."""
    before = ticket.state
    ticket.state = state
    ticket.open_key = ticket.dedup_key if state in OPEN_TICKET_STATES else None
    record(
        session,
        ticket,
        actor=actor,
        kind=kind,
        note=note,
        detail={"from": before.value, "to": state.value, **(detail or {})},
        now=now,
    )
    return LifecycleEvent(ticket=ticket, kind=kind, actor=actor, at=now, before=before.value, after=state.value)
