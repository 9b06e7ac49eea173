"""Tickets under concurrency: two transactions on one PostgreSQL database, one of them made to wait
on the other's row or key lock, as two workers (or an ingester and the scheduler) would.

The waiting side runs in a thread; the test lets the other side commit only once PostgreSQL shows
the wait (pg_stat_activity), so the interleaving is the same on every run.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from core.db import Database, utcnow
from remediator import repairs
from remediator.evaluate import Firing
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, HostState
from remediator.rules import load_ruleset
from remediator.signals import SignalValue
from tests.builders.reports import LABEL
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from ticketing import service as tickets
from ticketing.models import Repair, Ticket, TicketState
from ticketing.schemas import Replacement, Resolution, TicketRequest

RULES = load_ruleset([])
NOW = utcnow().replace(microsecond=0)
SETTLE = dt.timedelta(minutes=30)


@pytest.fixture
def database(integration_pg_url: str, celery_app: object) -> Iterator[Database]:
    truncate_all(integration_pg_url)
    built = wired(Database(integration_pg_url))
    yield built
    built.dispose()


def add_hosts(session: Session, *hostnames: str) -> None:
    apply_inventory(
        session, [HostInventory(hostname=h, datacenter="ams1", rack="R1-01") for h in hostnames], actor="test"
    )


def dimm_request(hostname: str) -> TicketRequest:
    return TicketRequest(hostname=hostname, datacenter="ams1", part_type="dimm", part=LABEL, title="Replace DIMM")


def verifying_ticket(session: Session, hostname: str) -> Ticket:
    """A DIMM ticket whose repair is being verified (from NOW until NOW + SETTLE)."""
    ticket, _ = tickets.open_ticket(session, dimm_request(hostname), actor="system:remediator", now=NOW)
    tickets.claim(session, ticket, actor="user:alice", now=NOW)
    resolution = Resolution(replacements=[Replacement(old_serial="1A2B3C4D", new_serial="77AA88BB")], note="swap")
    tickets.resolve(session, ticket, resolution, actor="user:alice", now=NOW)
    tickets.begin_verification(session, ticket, actor="system:remediator", settle=SETTLE, now=NOW)
    return ticket


def waiting_on_a_lock(database: Database) -> int:
    with database.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def run_blocked(database: Database, work: Callable[[], Any], release: Callable[[], None]) -> Any:
    """Run `work` in a thread until PostgreSQL shows it waiting on a lock, then `release`; its result."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 20
    while waiting_on_a_lock(database) == 0:
        assert thread.is_alive(), f"the work finished without waiting: {outcome}"
        assert time.monotonic() < deadline, "the work never waited on the lock"
        time.sleep(0.05)
    release()
    thread.join(30)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_closed_ticket_reopening_while_a_new_one_opens_adds_the_detection_to_the_winner(
    database: Database,
) -> None:
    with database.session() as session:
        add_hosts(session, "web-1")
        old = verifying_ticket(session, "web-1")
        tickets.close(session, old, actor="system:remediator", reason="verified", now=NOW + SETTLE)
        old_id = old.id
    # another worker opens a ticket for the same part and has not committed yet
    other = database.sessionmaker()
    winner, created = tickets.open_ticket(
        other, dimm_request("web-1"), actor="system:remediator", now=NOW + dt.timedelta(hours=1)
    )
    assert created
    winner_id = winner.id
    rule = RULES.get("dimm-ce-storm")
    assert rule is not None
    firing = Firing(rule, SignalValue("dimm_ce_rate", LABEL, 50.0, {}))

    def ingest_sees_the_fault_again() -> str | None:
        with database.session() as session:
            host = session.scalars(select(Host).where(Host.hostname == "web-1")).one()
            return repairs.route_detection(session, host, firing, NOW + dt.timedelta(hours=3))

    try:
        reason = run_blocked(database, ingest_sees_the_fault_again, other.commit)
    finally:
        other.close()
    assert reason == f"ticket {winner_id} (open) holds this part: detection added"
    with database.session() as session:
        old = tickets.get_ticket(session, old_id)
        assert (old.state, old.reopened, old.open_key) == (TicketState.closed, 0, None)
        assert [r.returned_at for r in old.repairs] == [None]  # the repair did not fail: nothing reopened
        winner = tickets.get_ticket(session, winner_id)
        assert (winner.state, winner.detections) == (TicketState.open, 2)
        assert winner.events[-1].kind == "detected_again"


def test_a_ticket_reopened_while_settling_is_left_alone_and_the_others_close(database: Database) -> None:
    with database.session() as session:
        add_hosts(session, "web-1", "web-2")
        first, second = verifying_ticket(session, "web-1"), verifying_ticket(session, "web-2")
        ids = first.id, second.id
        for host in session.scalars(select(Host)):
            host.state = HostState.awaiting_repair
            host.last_report_at = NOW + SETTLE + dt.timedelta(minutes=1)  # healthy through the settle period
    # an ingest of web-1 (host, then ticket locked) reopens the first ticket: the fault returned
    ingest = database.sessionmaker()
    ingest.scalars(select(Host).where(Host.hostname == "web-1").with_for_update()).one()
    reopened = tickets.lock_ticket(ingest, ids[0])
    tickets.reopen(ingest, reopened, actor="system:remediator", reason="fault returned", now=NOW + SETTLE)
    ingest.flush()

    def scheduler_settles() -> dict[str, int]:
        with database.session() as session:
            return repairs.settle_repairs(session, now=NOW + SETTLE + dt.timedelta(minutes=2))

    try:
        counts = run_blocked(database, scheduler_settles, ingest.commit)
    finally:
        ingest.close()
    assert counts == {"verifying": 0, "closed": 1, "reopened": 0}
    with database.session() as session:
        states = {t.hostname: t.state for t in session.scalars(select(Ticket))}
        assert states == {"web-1": TicketState.open, "web-2": TicketState.closed}
        hosts = {h.hostname: h.state for h in session.scalars(select(Host))}
        assert hosts == {"web-1": HostState.awaiting_repair, "web-2": HostState.in_service}
        repaired = {
            r.hostname: (r.verified_at is not None, r.returned_at is not None) for r in session.scalars(select(Repair))
        }
        assert repaired == {"web-1": (False, True), "web-2": (True, False)}
