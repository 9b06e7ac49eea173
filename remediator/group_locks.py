"""Lock a batch's group tickets in id order before any of its detections reaches one.

A batch locks its hosts in id order (remediator.ingest.lock_hosts), so two batches never deadlock on hosts. A
group's ticket (a rack's cooling, a switch's errors) is shared by hosts of many batches and was locked when a
detection reached it, in the batch's firing order: two batches reaching the same two group tickets in opposite
orders deadlocked, and PostgreSQL aborted one (retried by its transport, so delayed, not lost). The tickets a
batch's firings may reach are known before any is decided: the racks of hosts that fired an in-service airflow
rule, the switches that NIC rules' ports face. Those still open (being verified among them) are locked here,
in id order; the routes lock them again later, which a transaction that holds the lock passes at once. A
closed one a detection reopens, and a ticket opened during the batch, are locked when reached, as before
(rare: the window is one batch).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from remediator.evaluate import Firing
from remediator.models import Host
from remediator.rack_heat import RACK_PART_TYPE, airflow_in_service
from remediator.switch_errors import SWITCH_PART_TYPE, routes_to_switch
from ticketing import queries


def lock_group_tickets(session: Session, fired: Iterable[tuple[Host, Firing]]) -> list[int]:
    """Lock the open group tickets the batch's firings may reach, in id order; returns their ids."""
    racks: set[tuple[str, str]] = set()
    switches: set[tuple[str, str]] = set()
    for host, firing in fired:
        if host.rack and airflow_in_service(firing.rule):
            racks.add((host.datacenter, host.rack))
        switch = firing.signal.detail.get("switch")
        if switch and routes_to_switch(firing.rule):
            switches.add((host.datacenter, str(switch)))
    groups: list[tuple[str, str | None, str, str | None]] = [
        (dc, rack, RACK_PART_TYPE, None) for dc, rack in sorted(racks)
    ]
    groups += [(dc, None, SWITCH_PART_TYPE, f"switch {switch}") for dc, switch in sorted(switches)]
    return queries.lock_group_tickets(session, groups)
