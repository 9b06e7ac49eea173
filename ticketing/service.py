"""Ticket operations: opening with dedup, detections, the lifecycle, queries and repair history.

Services flush; the caller's transaction commits. Every change of state is a
TicketEvent and an audit entry (who, what, when, why), and queues a sync to
the external tracker that leaves only when the transaction commits.

    open -> claimed -> in_progress -> resolved -> verifying -> closed
      ^                                  |            |          |
      +------------- reopened -----------+------------+----------+   (fault returned)
    any open state -> cancelled (with a reason)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from celery import current_app
from sqlalchemy import Select, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload
from sqlalchemy.orm.attributes import set_committed_value

from core import audit
from core.db import utcnow
from core.dispatch import pending_tasks, send_after_commit
from core.errors import Conflict, Forbidden, NotFound
from core.queue import NOTIFY_QUEUE
from ticketing.models import OPEN_TICKET_STATES, Repair, Ticket, TicketEvent, TicketState, TrackerLink
from ticketing.schemas import RepairStat, Resolution, TicketRequest

SYNC_TASK = "ticketing.sync_tracker"
DETECTION_EVERY = dt.timedelta(hours=1)
"""Detections of the same fault closer together than this are one detection (rules fire every report)."""
MAX_DETECTIONS_KEPT = 50
WORK_STATES = frozenset({TicketState.open, TicketState.claimed, TicketState.in_progress})
"""A technician may still take the ticket, work on it or hand it over."""


# -- opening and detections ---------------------------------------------------------


def find_open(session: Session, dedup_key: str) -> Ticket | None:
    return session.scalars(select(Ticket).where(Ticket.open_key == dedup_key)).one_or_none()


def open_ticket(
    session: Session, request: TicketRequest, *, actor: str, now: dt.datetime | None = None
) -> tuple[Ticket, bool]:
    """Open a ticket, or add this detection to the open one for the same host and part.

    Returns the ticket and whether it was created. Safe under concurrency: the
    unique open_key decides, and the loser adds to the winner's ticket.
    """
    now = now or utcnow()
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
            evidence={"frozen_at": now.isoformat(), **request.evidence},
            created_at=now,
            last_detected_at=now,
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
            _record(
                session,
                ticket,
                actor=actor,
                kind="opened",
                note=request.title,
                detail={"dedup_key": key, "remediation_id": request.remediation_id},
                now=now,
            )
            return ticket, True
    _add_detection(
        session,
        lock_ticket(session, existing.id),
        actor=actor,
        note=request.title,
        detail={"remediation_id": request.remediation_id, "signals": request.evidence.get("signals", [])[:5]},
        now=now,
    )
    return existing, False


def note_detection(
    session: Session, ticket: Ticket, *, actor: str, note: str, detail: dict[str, Any], now: dt.datetime
) -> bool:
    """The fault was seen again on a ticket still open; returns False when it is the same detection
    (within DETECTION_EVERY of the last one), which changes nothing."""
    if _same_detection(ticket, now):
        return False  # the common case while a fault lasts: no lock taken
    ticket = lock_ticket(session, ticket.id)  # the latest count and time: concurrent ingests take turns
    if _same_detection(ticket, now):
        return False
    _add_detection(session, ticket, actor=actor, note=note, detail=detail, now=now)
    return True


def _same_detection(ticket: Ticket, now: dt.datetime) -> bool:
    return ticket.last_detected_at is not None and abs(now - ticket.last_detected_at) < DETECTION_EVERY


def _add_detection(
    session: Session, ticket: Ticket, *, actor: str, note: str, detail: dict[str, Any], now: dt.datetime
) -> None:
    """Count a detection on a ticket the caller has locked, without moving its version: the fault firing
    again while a technician works on the part must not turn their resolve into a 412 (only lifecycle
    changes move the ETag). An UPDATE statement rather than a change to the mapped object, because the
    ORM bumps the version on every flush of the object."""
    kept = list((ticket.evidence or {}).get("detections", []))[-(MAX_DETECTIONS_KEPT - 1) :]
    evidence = {**(ticket.evidence or {}), "detections": [*kept, {"at": now.isoformat(), **detail}]}
    session.execute(
        update(Ticket)
        .where(Ticket.id == ticket.id)
        .values(detections=Ticket.detections + 1, last_detected_at=now, evidence=evidence),
        execution_options={"synchronize_session": False},
    )
    # the loaded object follows the row without becoming dirty (a flush would bump the version)
    set_committed_value(ticket, "detections", ticket.detections + 1)
    set_committed_value(ticket, "last_detected_at", now)
    set_committed_value(ticket, "evidence", evidence)
    _record(session, ticket, actor=actor, kind="detected_again", note=note, detail=detail, now=now, audit_it=False)


def ticket_for_detection(
    session: Session,
    hostname: str,
    part: str,
    *,
    part_types: Collection[str],
    now: dt.datetime,
    reopen_window: dt.timedelta,
) -> Ticket | None:
    """The ticket a detection of `part` on `hostname` belongs to: an open one, else one closed within
    `reopen_window` (the fault came back after the repair).

    Only tickets of one of `part_types` match (the dedup key is host, part type and part): a host-level
    firing with an empty subject must not land on a PSU ticket that was opened with an empty part."""
    candidates = session.scalars(
        select(Ticket)
        .where(
            Ticket.hostname == hostname,
            Ticket.part_type.in_(sorted(part_types)),
            Ticket.part == part,
            Ticket.state != TicketState.cancelled,
        )
        .order_by(Ticket.id.desc())
        .limit(20)
    ).all()
    for ticket in candidates:
        if ticket.state in OPEN_TICKET_STATES:
            return ticket
    for ticket in candidates:
        if (
            ticket.state == TicketState.closed
            and ticket.closed_at is not None
            and now - ticket.closed_at <= reopen_window
        ):
            return ticket
    return None


# -- reads --------------------------------------------------------------------------


def get_ticket(session: Session, ticket_id: int) -> Ticket:
    ticket = session.scalars(
        select(Ticket)
        .where(Ticket.id == ticket_id)
        .options(selectinload(Ticket.events), selectinload(Ticket.repairs))
        .execution_options(populate_existing=True)
    ).one_or_none()
    if ticket is None:
        raise NotFound(f"ticket {ticket_id} does not exist")
    return ticket


def lock_ticket(session: Session, ticket_id: int) -> Ticket:
    """The ticket, locked until the transaction ends: two writers take turns, the second sees the first's change."""
    ticket = session.scalars(
        select(Ticket).where(Ticket.id == ticket_id).with_for_update().execution_options(populate_existing=True)
    ).one_or_none()
    if ticket is None:
        raise NotFound(f"ticket {ticket_id} does not exist")
    return ticket


def tracker_link(session: Session, ticket_id: int) -> TrackerLink | None:
    return session.get(TrackerLink, ticket_id)


def open_tickets_of_host(session: Session, hostname: str) -> list[Ticket]:
    return list(
        session.scalars(
            select(Ticket).where(Ticket.hostname == hostname, Ticket.state.in_(OPEN_TICKET_STATES)).order_by(Ticket.id)
        )
    )


def tickets_in(session: Session, state: TicketState | str) -> list[Ticket]:
    return list(session.scalars(select(Ticket).where(Ticket.state == TicketState(state)).order_by(Ticket.id)))


def ticket_query(
    *,
    states: list[TicketState] | None = None,
    open_only: bool = False,
    datacenter: str | None = None,
    rack: str | None = None,
    part_type: str | None = None,
    priorities: list[int] | None = None,
    assignee: str | None = None,
    hostname: str | None = None,
    created_before: dt.datetime | None = None,
    created_after: dt.datetime | None = None,
) -> Select[Any]:
    """Tickets matching every filter given (unordered: the caller pages it)."""
    query = select(Ticket)
    if states:
        query = query.where(Ticket.state.in_(states))
    if open_only:
        query = query.where(Ticket.state.in_(OPEN_TICKET_STATES))
    if datacenter:
        query = query.where(Ticket.datacenter == datacenter)
    if rack:
        query = query.where(Ticket.rack == rack)
    if part_type:
        query = query.where(Ticket.part_type == part_type)
    if priorities:
        query = query.where(Ticket.priority.in_(priorities))
    if assignee:
        query = query.where(Ticket.assignee == assignee)
    if hostname:
        query = query.where(Ticket.hostname == hostname)
    if created_before is not None:
        query = query.where(Ticket.created_at <= created_before)
    if created_after is not None:
        query = query.where(Ticket.created_at >= created_after)
    return query


def list_tickets(
    session: Session,
    *,
    state: TicketState | None = None,
    open_only: bool = False,
    datacenter: str | None = None,
    hostname: str | None = None,
    limit: int = 100,
) -> list[Ticket]:
    query = ticket_query(
        states=[state] if state else None, open_only=open_only, datacenter=datacenter, hostname=hostname
    )
    return list(session.scalars(query.order_by(Ticket.id.desc()).limit(limit)))


# -- the lifecycle --------------------------------------------------------------------


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
    _move(session, ticket, TicketState.claimed, actor=actor, kind="claimed", note=note, now=now)
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
    _move(session, ticket, TicketState.in_progress, actor=actor, kind="started", note=note, now=now)
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
    """A note on the ticket, in any state; the ticket itself (and its version) does not change."""
    check_scope(ticket, scope, actor)
    return _record(session, ticket, actor=actor, kind="comment", note=note, now=now or utcnow())


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
    Verification (the host re-checked) follows, started by the remediator."""
    check_scope(ticket, scope, actor)
    _require(ticket, {TicketState.claimed, TicketState.in_progress}, "resolve")
    _require_assignee(ticket, actor, override)
    now = now or utcnow()
    known = (ticket.evidence or {}).get("part") or {}
    # A DIMM the remediator could not pin on one slot has no serial but candidates (docs/tickets.md):
    # the old serial says which of them came out, or that none did.
    unconfirmed = known.get("certain") is False
    candidates = [c for c in known.get("candidates") or [] if isinstance(c, dict) and c.get("serial")]
    repairs: list[Repair] = []
    mismatches: list[dict[str, str]] = []
    matched: list[dict[str, Any]] = []
    unmatched: list[dict[str, Any]] = []
    for replacement in resolution.replacements:
        part = replacement.part or ticket.part
        same_part = part == ticket.part
        facts = {"vendor": known.get("vendor"), "model": known.get("model")} if same_part else {}
        if same_part and unconfirmed:
            old = replacement.old_serial.strip().casefold()
            pulled = next((c for c in candidates if str(c["serial"]).strip().casefold() == old), None)
            if pulled is not None:
                facts = {
                    "vendor": pulled.get("manufacturer") or facts["vendor"],
                    "model": pulled.get("part_number") or facts["model"],
                }
                matched.append(
                    {
                        "part": part,
                        "old_serial": replacement.old_serial,
                        "locator": pulled.get("locator"),
                        "bank_locator": pulled.get("bank_locator"),
                    }
                )
            else:
                unmatched.append(
                    {
                        "part": part,
                        "old_serial": replacement.old_serial,
                        "candidate_serials": [str(c["serial"]) for c in candidates],
                    }
                )
        repair = Repair(
            ticket=ticket,
            hostname=ticket.hostname,
            datacenter=ticket.datacenter,
            part_type=ticket.part_type,
            part=part,
            vendor=(replacement.vendor or str(facts.get("vendor") or ""))[:128],
            model=(replacement.model or str(facts.get("model") or ""))[:128],
            old_serial=replacement.old_serial,
            new_serial=replacement.new_serial,
            note=resolution.note,
            replaced_by=actor,
            replaced_at=now,
        )
        session.add(repair)
        repairs.append(repair)
        expected = known.get("serial")
        if same_part and expected and expected != replacement.old_serial:
            mismatches.append({"part": part, "evidence_serial": str(expected), "old_serial": replacement.old_serial})
    ticket.resolved_at = now
    detail: dict[str, Any] = {
        "replacements": [r.model_dump() for r in resolution.replacements],
    }
    if mismatches:
        detail["serial_mismatch"] = mismatches
    if matched:
        detail["serial_matches_candidate"] = matched
    if unmatched:
        detail["serial_matches_no_candidate"] = unmatched
    _move(
        session,
        ticket,
        TicketState.resolved,
        actor=actor,
        kind="resolved",
        note=resolution.note,
        detail=detail,
        now=now,
    )
    return repairs


def begin_verification(
    session: Session, ticket: Ticket, *, actor: str, settle: dt.timedelta, now: dt.datetime | None = None
) -> Ticket:
    """The host is being re-checked: it must report without the fault until `verify_until`."""
    _require(ticket, {TicketState.resolved}, "verify")
    now = now or utcnow()
    ticket.verify_started_at = now
    ticket.verify_until = now + settle
    _move(
        session,
        ticket,
        TicketState.verifying,
        actor=actor,
        kind="verifying",
        note=f"re-checking the host; closes at {ticket.verify_until.isoformat()} if the fault stays away",
        detail={"verify_until": ticket.verify_until.isoformat()},
        now=now,
    )
    return ticket


def close(session: Session, ticket: Ticket, *, actor: str, reason: str, now: dt.datetime | None = None) -> Ticket:
    """Verification passed: the repairs hold."""
    _require(ticket, {TicketState.verifying}, "close")
    now = now or utcnow()
    ticket.closed_at = now
    for repair in ticket.repairs:
        if repair.returned_at is None and repair.verified_at is None:
            repair.verified_at = now
    _move(session, ticket, TicketState.closed, actor=actor, kind="closed", note=reason, now=now)
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
            _move(
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
    return ticket


def cancel(session: Session, ticket: Ticket, *, actor: str, reason: str, now: dt.datetime | None = None) -> Ticket:
    _require(ticket, set(OPEN_TICKET_STATES), "cancel")
    now = now or utcnow()
    ticket.closed_at = now
    _move(session, ticket, TicketState.cancelled, actor=actor, kind="cancelled", note=reason, now=now)
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
    _move(
        session,
        ticket,
        state,
        actor=actor,
        kind="assigned",
        note=reason,
        detail={"assignee": assignee, "previous": previous},
        now=now,
    )
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
) -> None:
    before = ticket.state
    ticket.state = state
    ticket.open_key = ticket.dedup_key if state in OPEN_TICKET_STATES else None
    _record(
        session,
        ticket,
        actor=actor,
        kind=kind,
        note=note,
        detail={"from": before.value, "to": state.value, **(detail or {})},
        now=now,
    )


def _record(
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
    _sync_after_commit(session, ticket.id)
    return event


def _sync_after_commit(session: Session, ticket_id: int) -> None:
    for signature in pending_tasks(session):
        if signature.task == SYNC_TASK and list(signature.args) == [ticket_id]:
            return
    send_after_commit(session, current_app.signature(SYNC_TASK, args=[ticket_id], queue=NOTIFY_QUEUE))


# -- repair history -----------------------------------------------------------------


def repair_stats(
    session: Session,
    *,
    part_type: str | None = None,
    datacenter: str | None = None,
    since: dt.datetime | None = None,
) -> list[RepairStat]:
    """Per part type, vendor and model: parts replaced, verified, and how often the fault returned."""
    replaced = func.count(Repair.id)
    query = (
        select(
            Repair.part_type,
            Repair.vendor,
            Repair.model,
            replaced,
            func.count(Repair.verified_at),
            func.count(Repair.returned_at),
        )
        .group_by(Repair.part_type, Repair.vendor, Repair.model)
        .order_by(replaced.desc(), Repair.part_type, Repair.vendor, Repair.model)
    )
    if part_type:
        query = query.where(Repair.part_type == part_type)
    if datacenter:
        query = query.where(Repair.datacenter == datacenter)
    if since is not None:
        query = query.where(Repair.replaced_at >= since)
    return [
        RepairStat(
            part_type=row[0],
            vendor=row[1],
            model=row[2],
            replaced=row[3],
            verified=row[4],
            returned=row[5],
            return_rate=round(row[5] / row[3], 4) if row[3] else 0.0,
        )
        for row in session.execute(query)
    ]


def repair_query(
    *, part_type: str | None = None, hostname: str | None = None, returned: bool | None = None
) -> Select[Any]:
    query = select(Repair)
    if part_type:
        query = query.where(Repair.part_type == part_type)
    if hostname:
        query = query.where(Repair.hostname == hostname)
    if returned is not None:
        query = query.where(Repair.returned_at.is_not(None) if returned else Repair.returned_at.is_(None))
    return query
