"""Tickets for a group of hosts with one shared cause (a rack's cooling, a switch): keyed by the group, found
for a later detection like a host's ticket is, and the hosts they have heard from.

A host's ticket is keyed `hostname:part_type:part` (docs/tickets.md); a group's by its scope instead
(`rack ams1/r12:rack_airflow:rack r12`, `datacenter ams1:switch:switch ams1-r07-tor1`), so the unique
`open_key` refuses a second open ticket of the group even when two hosts' ingests race: the loser's
detection goes to the winner's (ticketing.opening.open_ticket). Keyed by the first reporting host, two
hosts of one rack reporting at once opened two tickets (review of issue 16, M2). A scope holds a space,
which no hostname does (RFC 1123 names are letters, digits, hyphens and dots), so a group's key never
collides with a host's. Tickets opened before group keys (keyed by their first host) keep their key: the
callers reuse an open ticket's own key (remediator.rack_heat.grouped, remediator.switch_errors.grouped).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ticketing.models import OPEN_TICKET_STATES, Ticket, TicketState
from ticketing.schemas import TicketRequest

WORKING_STATES = frozenset({TicketState.open, TicketState.claimed, TicketState.in_progress})
"""Nobody has said the cause is fixed yet (ticketing.lifecycle.WORK_STATES): only these go stale."""
HEARD_FROM_HOSTS = 100
"""Hosts a group's ticket remembers in `heard_from`: the bound of the group's own host list
(remediator.rack_heat.MAX_HOSTS, remediator.switch_errors.MAX_HOSTS; a test holds them equal)."""
QUIET_AFTER = dt.timedelta(hours=2)
"""A group's ticket nobody has fixed that went this long without a detection was quiet: its fault returned
(a comment says so when a detection joins it). remediator.rack_heat.FRESH_WITHIN, the heat window plus the
hour within which detections are one (a test holds them equal): a rack hot for hours is never quiet."""
HEARD_FROM_SUBJECTS = 32
"""Subjects (sensors, packages, ports) remembered per host: a dual-socket host lists a handful of
temperature sensors and packages, a NIC a few ports."""
MAX_TICKETS = 50
"""How many of its hosts' own tickets a group's ticket lists (`host_tickets`, merged by joined)."""


def rack_scope(datacenter: str, rack: str) -> str:
    return f"rack {datacenter}/{rack}"


def datacenter_scope(datacenter: str) -> str:
    return f"datacenter {datacenter}"


def group_key(scope: str, part_type: str, part: str) -> str:
    """A group's dedup key: a host's (`hostname:part_type:part`) with the group's scope for the host."""
    return f"{scope}:{part_type}:{part}"


def ticket_of_group(
    session: Session,
    *,
    datacenter: str,
    part_type: str,
    now: dt.datetime,
    rack: str | None = None,
    part: str | None = None,
    reopen_window: dt.timedelta | None = None,
) -> Ticket | None:
    """The group ticket a detection belongs to, as ticketing.opening.ticket_for_detection finds a host's: the
    open one (resolved and being verified among them), whatever its age, else one closed within
    `reopen_window` (the cause came back after the repair; None: closed ones never match). Which of them a
    detection may join (an old open one only when the group is at fault as a group again, a resolved one only
    on what came after the repair) is the caller's (remediator.rack_heat.open_rack_ticket,
    remediator.switch_errors.switch_ticket_for), so the route and the ticket request (their `grouped`) pick
    the same ticket. The OLDEST open one: a database from before group keys can hold two for one group, and
    every path must pick the same (queries.open_ticket_of_rack; migration 0015 cancels the others)."""
    query = select(Ticket).where(
        Ticket.datacenter == datacenter, Ticket.part_type == part_type, Ticket.state != TicketState.cancelled
    )
    if rack is not None:
        query = query.where(Ticket.rack == rack)
    if part is not None:
        query = query.where(Ticket.part == part)
    opened = session.scalars(query.where(Ticket.state.in_(OPEN_TICKET_STATES)).order_by(Ticket.id).limit(1)).first()
    if opened is not None or reopen_window is None:
        return opened
    candidates = session.scalars(query.order_by(Ticket.id.desc()).limit(20)).all()
    return next(
        (
            t
            for t in candidates
            if t.state == TicketState.closed and t.closed_at is not None and now - t.closed_at <= reopen_window
        ),
        None,
    )


def quiet_for(ticket: Ticket, now: dt.datetime) -> dt.timedelta | None:
    """How long a group's ticket nobody has fixed yet went without a detection, when longer than QUIET_AFTER:
    the group's fault returned to an old ticket (a comment says so); else None."""
    last = ticket.last_detected_at or ticket.created_at
    if ticket.state not in WORKING_STATES or last is None:
        return None
    last = last if last.tzinfo else last.replace(tzinfo=dt.UTC)
    quiet = now - last
    return quiet if quiet > QUIET_AFTER else None


def how_long(span: dt.timedelta) -> str:
    days = span.total_seconds() / 86400
    return f"{days:.0f} days" if days >= 1.5 else f"{span.total_seconds() / 3600:.0f} hours"


@dataclass(frozen=True)
class Join:
    """A detection joining a group's open ticket: the group's hosts as they are now, merged into the ticket's
    list (`section`'s `hosts`), the title saying the group's state now, and the host (and its subjects) the
    ticket heard from. Without it the ticket kept the picture it opened with: a month-old rack ticket took a
    new heat wave and still named last month's hosts (review of the group tickets, finding 4)."""

    section: str  # the evidence's group part: "rack_heat", "switch_errors"
    hosts: tuple[dict[str, Any], ...]
    title: str
    host: str
    subjects: tuple[str, ...]
    host_tickets: tuple[dict[str, Any], ...] = ()  # the hosts' own tickets now (a rack's: their airflow tickets)


GROUP_SECTIONS = {"rack_heat": ("sensors", "heat"), "switch_errors": ("ports", "CRC errors")}
"""A group ticket's evidence part: where each host lists its subjects, and what returned to the group."""


def join_of(request: TicketRequest) -> Join | None:
    """The Join a group's ticket request carries (remediator.rack_heat.grouped, remediator.switch_errors'),
    None for a host's."""
    if not request.group_key:
        return None
    section = next((name for name in GROUP_SECTIONS if isinstance(request.evidence.get(name), dict)), None)
    if section is None:
        return None
    group = request.evidence[section]
    hosts = tuple(h for h in group.get("hosts") or [] if isinstance(h, dict) and h.get("hostname"))
    host = str(group.get("detected_on") or request.hostname)
    mine = next((h for h in hosts if h["hostname"] == host), {})
    subjects = tuple(str(s) for s in (mine.get(GROUP_SECTIONS[section][0]) or {}))
    own = tuple(t for t in group.get("host_tickets") or [] if isinstance(t, dict))
    return Join(section=section, hosts=hosts, title=request.title, host=host, subjects=subjects, host_tickets=own)


def joined(evidence: dict[str, Any], join: Join) -> dict[str, Any]:
    """The evidence with the join's hosts merged into the group's list (a host listed again: its readings
    now, moved last), bounded by HEARD_FROM_HOSTS (the oldest dropped first), and the host heard from."""
    found = evidence.get(join.section)
    group: dict[str, Any] = found if isinstance(found, dict) else {}
    merged = {str(h.get("hostname")): h for h in group.get("hosts") or [] if isinstance(h, dict)}
    for entry in join.hosts:
        merged.pop(entry["hostname"], None)
        merged[entry["hostname"]] = entry
    hosts = list(merged.values())[-HEARD_FROM_HOSTS:]
    section = {**group, "hosts": hosts, "detected_on": join.host}
    if join.host_tickets:  # a host's own ticket opened since is folded in too (second review, finding 4)
        known = [t for t in group.get("host_tickets") or [] if isinstance(t, dict)]
        ids = {t.get("id") for t in known}
        section["host_tickets"] = [*known, *(t for t in join.host_tickets if t.get("id") not in ids)][-MAX_TICKETS:]
    evidence = {**evidence, join.section: section}
    for subject in join.subjects or (None,):
        evidence = with_source(evidence, join.host, subject)
    return evidence


def returned_note(join: Join, quiet: dt.timedelta) -> str:
    what = GROUP_SECTIONS[join.section][1]
    names = ", ".join(h["hostname"] for h in join.hosts[:10])
    more = f" and {len(join.hosts) - 10} more" if len(join.hosts) > 10 else ""
    return f"{what} returned after {how_long(quiet)} quiet: hosts {names}{more}"


def heard_from(evidence: dict[str, Any] | None) -> dict[str, set[str]]:
    """The hosts (and their subjects) a group's ticket heard from in detections, from its `heard_from` list;
    empty for a ticket opened before the list was kept (its callers read `detections` as well)."""
    found: dict[str, set[str]] = {}
    for entry in (evidence or {}).get("heard_from") or []:
        if isinstance(entry, dict) and entry.get("host"):
            found.setdefault(str(entry["host"]), set()).update(str(s) for s in entry.get("subjects") or [])
    return found


def with_source(evidence: dict[str, Any], host: str, subject: str | None) -> dict[str, Any]:
    """The evidence with this host (and subject) heard from, most recent last. Kept apart from `detections`
    (the last 50 of them, ticketing.opening.MAX_DETECTIONS_KEPT), which dropped a host seen long ago, so the
    host was news again (review of issue 16, S6); bounded by HEARD_FROM_HOSTS, the oldest host dropped first.
    A list, not an object keyed by host: PostgreSQL's JSONB reorders an object's keys, a list keeps its
    order."""
    entries = [e for e in evidence.get("heard_from") or [] if isinstance(e, dict)]
    mine = next((e for e in entries if e.get("host") == host), None)
    subjects = list((mine or {}).get("subjects") or [])
    if subject and subject not in subjects:
        subjects = [*subjects, subject][-HEARD_FROM_SUBJECTS:]
    others = [e for e in entries if e.get("host") != host]
    kept = [*others, {"host": host, "subjects": subjects}][-HEARD_FROM_HOSTS:]
    return {**evidence, "heard_from": kept}
