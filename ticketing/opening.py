"""Opening tickets, one per host and part: dedup, and detections of a fault that already has its ticket.

The unique `open_key` (the dedup key while the ticket is open) decides between
two openers racing; the loser adds its detection to the winner's ticket.
Opening is the lifecycle's first change and is announced like the others
(ticketing.lifecycle); a detection is not a change of the lifecycle.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from core.db import utcnow
from ticketing.groups import Join, join_of, joined, quiet_for, returned_note, with_source
from ticketing.history import record
from ticketing.lifecycle import LifecycleEvent, announce
from ticketing.models import OPEN_TICKET_STATES, Ticket, TicketState
from ticketing.queries import find_open, lock_ticket
from ticketing.schemas import TicketRequest

LEGACY_PART_TYPES: dict[str, tuple[str, ...]] = {"pcie_device": ("pcie",)}
"""Part types renamed since tickets were opened under the old name: a detection of the new one still
finds the open ticket of the old (its dedup key has the old name), rather than opening a second."""
DETECTION_EVERY = dt.timedelta(hours=1)
"""Detections of the same fault closer together than this are one detection (rules fire every report)."""
MAX_DETECTIONS_KEPT = 50
MAX_TITLE = 512  # the tickets.title column's length


def open_ticket(
    session: Session,
    request: TicketRequest,
    *,
    actor: str,
    now: dt.datetime | None = None,
    own_title: bool = False,
) -> tuple[Ticket, bool]:
    """Open a ticket, or add this detection to the open one for the same host and part.

    Returns the ticket and whether it was created. Safe under concurrency: the
    unique open_key decides, and the loser adds to the winner's ticket. An open
    ticket of the part under its old type's name (LEGACY_PART_TYPES) is the same
    part's: the detection goes to it, as ticket_for_detection's would.

    `own_title`: the request's title is its rule's first plan's (no fix was tried before it, the runner's
    rung 0): a more urgent request of the same part type then retitles the open ticket it lands on; any other
    title is added to the ticket's (raise_priority).
    """
    now = now or utcnow()
    key = request.dedup_key
    existing = find_open(session, key) or _open_under_legacy_type(session, request)
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
            holds_host=request.holds_host,
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
            record(
                session,
                ticket,
                actor=actor,
                kind="opened",
                note=request.title,
                detail={"dedup_key": key, "remediation_id": request.remediation_id},
                now=now,
            )
            opened = LifecycleEvent(ticket=ticket, kind="opened", actor=actor, at=now, before="", after="open")
            announce(session, opened)
            return ticket, True
    locked = lock_ticket(session, existing.id)
    _add_detection(
        session,
        locked,
        actor=actor,
        note=request.title,
        detail={"remediation_id": request.remediation_id, "signals": request.evidence.get("signals", [])[:5]},
        now=now,
        join=join_of(request),  # a group's ticket: its hosts now, and the host it heard from (ticketing.groups)
    )
    if request.holds_host and not locked.holds_host:
        _hold_host(session, locked, actor=actor, now=now)
    if request.priority < locked.priority:  # a group's request names the group: its title is the join's
        # the request's title may be a ladder's end (a beside ticket, a lost event's) or another part type's:
        # it never replaces the ticket's, it is added to it (review r7, finding 2)
        rule = str(request.evidence.get("rule") or "")
        group = join_of(request) is not None
        title = request.title if own_title and not group and request.part_type == locked.part_type else None
        also = None if group or title else (f"{rule}: {request.title}" if rule else request.title)
        raise_priority(session, locked, priority=request.priority, title=title, also=also, actor=actor, now=now)
    return existing, False


def _open_under_legacy_type(session: Session, request: TicketRequest) -> Ticket | None:
    for old in LEGACY_PART_TYPES.get(request.part_type, ()):
        found = find_open(session, request.model_copy(update={"part_type": old}).dedup_key)
        if found is not None:
            return found
    return None


def note_detection(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    note: str,
    detail: dict[str, Any],
    now: dt.datetime,
    new_source: bool = False,
    source: tuple[str, str | None] | None = None,
    join: Join | None = None,
    since: dt.datetime | None = None,
    linked: tuple[str, dict[str, Any]] | None = None,
    priority: int | None = None,
    title: str | None = None,
    also: str | None = None,
) -> bool:
    """The fault was seen again on a ticket still open; returns False when it is the same detection
    (within DETECTION_EVERY of the last one), which changes nothing. `since`: only a detection at or after
    it is the same (a detection held or uncertain after a repair is compared with those since the resolve,
    never with the fault's detections before it: second review of repair-reopen, finding 1c).
    `new_source`: a detection from somewhere the ticket has not heard from yet (another host of a rack's
    ticket) always counts.
    `source`: the (host, subject) a group's ticket remembers it heard from (ticketing.groups.with_source).
    `join`: the group's hosts now, merged into a group ticket's evidence (ticketing.groups.Join).
    `linked`: (key, evidence) of another name of the same part (an NVMe drive's PCIe function beside its
    disk: remediator.linked_parts), kept in the evidence's `linked_parts` under its key.
    `priority`, `title`, `also`: the detecting rule's; a more urgent one (a lower number) raises the ticket's
    priority, even within the hour of the last detection, and gives it `title` or adds `also` to its own
    (raise_priority)."""
    if priority is not None and priority < ticket.priority:
        ticket = lock_ticket(session, ticket.id)
        if priority < ticket.priority:
            raise_priority(session, ticket, priority=priority, title=title, also=also, actor=actor, now=now)
    if _same_detection(ticket, now, since) and not new_source:
        return False  # the common case while a fault lasts: no lock taken
    ticket = lock_ticket(session, ticket.id)  # the latest count and time: concurrent ingests take turns
    if _same_detection(ticket, now, since) and not new_source:
        return False
    _add_detection(
        session, ticket, actor=actor, note=note, detail=detail, now=now, source=source, join=join, linked=linked
    )
    return True


def detection_due(ticket: Ticket, now: dt.datetime) -> bool:
    """Whether a detection at `now` would count (note_detection): not within DETECTION_EVERY of the last."""
    return not _same_detection(ticket, now)


def _same_detection(ticket: Ticket, now: dt.datetime, since: dt.datetime | None = None) -> bool:
    last = ticket.last_detected_at
    if last is None or (since is not None and last < since):
        return False
    return abs(now - last) < DETECTION_EVERY


def regroup(session: Session, ticket: Ticket, *, source: tuple[str, str | None] | None, join: Join | None) -> None:
    """A group's ticket just reopened by a detection takes the group's picture now (its hosts, their own
    tickets, the title) and the host it heard from, as a detection would (second review of repair-reopen,
    finding 4: the reopen kept the picture of before the repair). Written without moving the version."""
    evidence = dict(ticket.evidence or {})
    if source is not None:
        evidence = with_source(evidence, *source)
    values: dict[str, Any] = {"evidence": evidence}
    if join is not None:
        evidence = values["evidence"] = joined(evidence, join)
        values["title"] = join.title[:512]
    session.execute(
        update(Ticket).where(Ticket.id == ticket.id).values(**values),
        execution_options={"synchronize_session": False},
    )
    set_committed_value(ticket, "evidence", evidence)
    if "title" in values:
        set_committed_value(ticket, "title", values["title"])


def _add_detection(
    session: Session,
    ticket: Ticket,
    *,
    actor: str,
    note: str,
    detail: dict[str, Any],
    now: dt.datetime,
    source: tuple[str, str | None] | None = None,
    join: Join | None = None,
    linked: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Count a detection on a ticket the caller has locked, without moving its version: the fault firing
    again while a technician works on the part must not turn their resolve into a 412 (only lifecycle
    changes move the ETag). An UPDATE statement rather than a change to the mapped object, because the
    ORM bumps the version on every flush of the object."""
    kept = list((ticket.evidence or {}).get("detections", []))[-(MAX_DETECTIONS_KEPT - 1) :]
    evidence = {**(ticket.evidence or {}), "detections": [*kept, {"at": now.isoformat(), **detail}]}
    if source is not None:
        evidence = with_source(evidence, *source)
    if linked is not None:
        evidence["linked_parts"] = {**(evidence.get("linked_parts") or {}), linked[0]: linked[1]}
    values: dict[str, Any] = {"detections": Ticket.detections + 1, "last_detected_at": now, "evidence": evidence}
    quiet = quiet_for(ticket, now) if join is not None else None  # before last_detected_at moves
    if join is not None:  # a group's ticket says the group's state now (a title is not a lifecycle change)
        evidence = values["evidence"] = joined(evidence, join)
        values["title"] = join.title[:512]
    session.execute(
        update(Ticket).where(Ticket.id == ticket.id).values(**values),
        execution_options={"synchronize_session": False},
    )
    # the loaded object follows the row without becoming dirty (a flush would bump the version)
    set_committed_value(ticket, "detections", ticket.detections + 1)
    set_committed_value(ticket, "last_detected_at", now)
    set_committed_value(ticket, "evidence", evidence)
    if "title" in values:
        set_committed_value(ticket, "title", values["title"])
    record(session, ticket, actor=actor, kind="detected_again", note=note, detail=detail, now=now, audit_it=False)
    if join is not None and quiet is not None:  # the assignee and the tracker hear the group's fault is back
        record(session, ticket, actor=actor, kind="comment", note=returned_note(join, quiet), now=now)


def hold_host(session: Session, ticket: Ticket, *, actor: str, now: dt.datetime) -> None:
    """A request that holds its host reached an open ticket another way (a linked name's: remediator.linked_parts):
    the ticket holds the host from now on, as open_ticket's existing-ticket path does. Locks the ticket."""
    ticket = lock_ticket(session, ticket.id)
    if not ticket.holds_host:
        _hold_host(session, ticket, actor=actor, now=now)


def _hold_host(session: Session, ticket: Ticket, *, actor: str, now: dt.datetime) -> None:
    """A request that takes the host out of service landed on an open ticket that did not: from now on the
    ticket holds the host (never the other way: a ticket that holds its host is released only by closing).
    Written like a detection, without moving the version, for the same reason."""
    session.execute(
        update(Ticket).where(Ticket.id == ticket.id).values(holds_host=True),
        execution_options={"synchronize_session": False},
    )
    set_committed_value(ticket, "holds_host", True)
    record(
        session,
        ticket,
        actor=actor,
        kind="comment",
        note="now holds the host out of service: a later request asked for it",
        detail={"holds_host": True},
        now=now,
    )


def with_also(title: str, also: str) -> str:
    """A title with another rule's fault added, within the column's MAX_TITLE: the ticket's own title is kept
    whole where it can be, the addition cut with an ellipsis."""
    added = f"; also: {also}"
    if len(title) + len(added) <= MAX_TITLE:
        return title + added
    room = MAX_TITLE - len(title) - 1
    return title[:MAX_TITLE] if room < len("; also: ") + 8 else title + added[:room] + "…"


def raise_priority(
    session: Session,
    ticket: Ticket,
    *,
    priority: int,
    title: str | None,
    actor: str,
    now: dt.datetime,
    also: str | None = None,
) -> None:
    """A more urgent rule's detection reached an open ticket (a linked name's, a fan's critical sensor on its
    slowing ticket): the ticket takes that priority and, when given, that `title` (the caller's to judge: the
    rule's own first ticket for the same part type), else keeps its title with "; also: <also>" added, capped
    (review r7, finding 2: a ladder's end replaced the title, "Replace GPU ... the reset failed" where no reset
    ran, "unreachable after a power cycle" where none was done). The event keeps what it was (review r4,
    finding 2: a p4 'PCIe corrected errors' ticket held a drive to replace at p4). Never lowered. Written like
    a detection, without moving the version: a technician's resolve must not turn into a 412."""
    was_priority, was_title = ticket.priority, ticket.title
    values: dict[str, Any] = {"priority": priority}
    if title and title[:MAX_TITLE] != ticket.title:
        values["title"] = title[:MAX_TITLE]
    elif not title and also and also not in ticket.title:
        values["title"] = with_also(ticket.title, also)
    session.execute(
        update(Ticket).where(Ticket.id == ticket.id).values(**values),
        execution_options={"synchronize_session": False},
    )
    for key, value in values.items():
        set_committed_value(ticket, key, value)
    record(
        session,
        ticket,
        actor=actor,
        kind="comment",
        note=f"priority {was_priority} -> {priority}: {ticket.title}"
        + (f" (was: {was_title})" if "title" in values else ""),
        detail={"priority": priority, "previous_priority": was_priority, "previous_title": was_title},
        now=now,
    )


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
    firing with an empty subject must not land on a PSU ticket that was opened with an empty part.
    A renamed part type also matches its old name (LEGACY_PART_TYPES)."""
    part_types = {*part_types, *(old for new in part_types for old in LEGACY_PART_TYPES.get(new, ()))}
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
