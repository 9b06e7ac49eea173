"""Lock a batch's group tickets in id order before any of its detections writes one.

A batch locks its hosts in id order (remediator.ingest.lock_hosts), so two batches never deadlock on hosts. A
group's ticket (a rack's cooling, a switch's errors) is shared by hosts of many batches and was locked when a
detection reached it, in the batch's firing order: two batches reaching the same two group tickets in opposite
orders deadlocked, and PostgreSQL aborted one (retried by its transport, so delayed, not lost). The tickets a
batch's firings may reach are known before any is decided: the racks of hosts that fired an in-service airflow
rule, the switches that NIC rules' ports face. Of those still open (being verified among them), the ones a
detection of the batch would write are locked here, in id order: one being verified (a reopen or a held
detection is noted), one whose last detection is older than the detection interval, one that has not heard
from a host (or a rack's sensor) of the batch. The rest take a repeat detection, which writes nothing and
takes no lock (ticketing.opening.note_detection): a rack hot for hours does not serialise every batch of its
hosts on its ticket (review r1 of the locks, finding 5). The routes lock them again later, which a transaction
that holds the lock passes at once. A closed one a detection reopens, and a ticket opened during the batch, are
locked when reached, as before (rare: the window is one batch).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from sqlalchemy.orm import Session

from remediator import rack_heat, switch_errors
from remediator.evaluate import Firing
from remediator.models import Host
from remediator.repairs import REVERIFY_STATES
from ticketing import opening, queries

Source = tuple[str, str, dt.datetime, int]  # a host of the batch, its signal's subject, when, its rule's priority


def lock_group_tickets(session: Session, fired: Iterable[tuple[Host, Firing, dt.datetime]]) -> list[int]:
    """Lock the open group tickets the batch's firings would write, in id order; returns their ids."""
    racks: dict[tuple[str, str], set[Source]] = {}
    switches: dict[tuple[str, str], set[Source]] = {}
    for host, firing, at in fired:
        source = (host.hostname, firing.signal.subject, at, firing.rule.priority)
        if host.rack and rack_heat.airflow_in_service(firing.rule):
            racks.setdefault((host.datacenter, host.rack), set()).add(source)
        switch = firing.signal.detail.get("switch")
        if switch and switch_errors.routes_to_switch(firing.rule):
            switches.setdefault((host.datacenter, f"switch {switch}"), set()).add(source)
    groups: list[tuple[str, str | None, str, str | None]] = [
        (dc, rack, rack_heat.RACK_PART_TYPE, None) for dc, rack in sorted(racks)
    ]
    groups += [(dc, None, switch_errors.SWITCH_PART_TYPE, part) for dc, part in sorted(switches)]
    due = []
    for ticket in queries.group_tickets(session, groups):
        rack = ticket.part_type == rack_heat.RACK_PART_TYPE
        sources = (
            racks.get((ticket.datacenter, ticket.rack or ""))
            if rack
            else switches.get((ticket.datacenter, ticket.part))
        )
        if any(_writes(ticket, rack, source) for source in sources or ()):
            due.append(ticket.id)
    return queries.lock_tickets(session, due)


def _writes(ticket: Any, rack: bool, source: Source) -> bool:  # a Ticket (ticketing.queries')
    """Whether this detection would change the ticket (note_detection, a reopen, a more urgent rule raising its
    priority: review r7, finding 6), not repeat a detection."""
    hostname, subject, at, priority = source
    if ticket.state.value in REVERIFY_STATES or opening.detection_due(ticket, at) or priority < ticket.priority:
        return True
    if rack:
        return not rack_heat.has_heard_from(ticket.evidence, hostname, subject)
    return not switch_errors.has_heard_from(ticket.evidence, hostname)
