"""Reading tickets and the repair history: look-ups, row locks, the filtered lists the API and pages page
through, and the repair statistics. Nothing here changes a ticket."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session, selectinload

from core.errors import NotFound
from ticketing.models import OPEN_TICKET_STATES, Repair, Ticket, TicketState, TrackerLink
from ticketing.schemas import RepairStat


def find_open(session: Session, dedup_key: str) -> Ticket | None:
    return session.scalars(select(Ticket).where(Ticket.open_key == dedup_key)).one_or_none()


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


def group_tickets(session: Session, groups: list[tuple[str, str | None, str, str | None]]) -> list[Ticket]:
    """The tickets neither closed nor cancelled of each group (datacenter, rack or None, part type, part or
    None), read without a lock, in id order (remediator.group_locks judges which it must lock)."""
    if not groups:
        return []
    matches = []
    for datacenter, rack, part_type, part in groups:
        match = [Ticket.datacenter == datacenter, Ticket.part_type == part_type]
        match += [Ticket.rack == rack] if rack is not None else []
        match += [Ticket.part == part] if part is not None else []
        matches.append(and_(*match))
    query = select(Ticket).where(or_(*matches), Ticket.state.not_in((TicketState.closed, TicketState.cancelled)))
    return list(session.scalars(query.order_by(Ticket.id)))


def lock_tickets(session: Session, ticket_ids: list[int]) -> list[int]:
    """Lock the tickets in id order (one statement); returns the ids locked."""
    if not ticket_ids:
        return []
    query = select(Ticket.id).where(Ticket.id.in_(sorted(set(ticket_ids)))).order_by(Ticket.id).with_for_update()
    return list(session.scalars(query))


def tracker_link(session: Session, ticket_id: int) -> TrackerLink | None:
    return session.get(TrackerLink, ticket_id)


def open_tickets_of_host(session: Session, hostname: str) -> list[Ticket]:
    return list(
        session.scalars(
            select(Ticket).where(Ticket.hostname == hostname, Ticket.state.in_(OPEN_TICKET_STATES)).order_by(Ticket.id)
        )
    )


def open_ticket_of_rack(session: Session, datacenter: str, rack: str, part_type: str) -> Ticket | None:
    """The oldest open ticket of a rack's part type (a rack's cooling: one ticket for the rack's hosts), of
    whichever episode: every path takes the oldest (ticketing.groups.ticket_of_group), so a database from
    before group keys that holds two sends every detection to the same one (migration 0015 cancels the
    other)."""
    query = select(Ticket).where(
        Ticket.datacenter == datacenter,
        Ticket.rack == rack,
        Ticket.part_type == part_type,
        Ticket.state.in_(OPEN_TICKET_STATES),
    )
    return session.scalars(query.order_by(Ticket.id).limit(1)).first()


def holding_tickets_of_host(session: Session, hostname: str) -> list[Ticket]:
    """The open tickets that keep the host out of service (`holds_host`): those for the owners of a
    workload, kernel, configuration, class or change leave it working and are not among them."""
    return [ticket for ticket in open_tickets_of_host(session, hostname) if ticket.holds_host]


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
