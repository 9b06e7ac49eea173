"""Group tickets (a rack's cooling, a switch) under the review of issue 16: one ticket per group whichever
host asks first, also when two hosts' ingests race (M2); a switch ticket closed within the reopen window is
reopened (M1's switch half); the hosts a ticket heard from outlive its last 50 detections (S6)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from core.db import Database
from remediator import rack_heat, repairs, switch_errors
from remediator.evaluate import Firing
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Signal
from remediator.rules import load_ruleset
from remediator.signals import SignalValue
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from ticketing import groups
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import Resolution, TicketRequest

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
RULES = {rule.id: rule for rule in load_ruleset([]).rules}
SWITCH = "ams1-r07-tor1"
CRC = {"scope": "one-port", "rising": True, "over_allowance": True, "switch": SWITCH, "switch_port": "Ethernet1"}


def host_in(session: Session, hostname: str, rack: str = "r12") -> Host:
    apply_inventory(session, [HostInventory(hostname=hostname, datacenter="ams1", rack=rack)], actor="test")
    return session.scalars(select(Host).where(Host.hostname == hostname)).one()


def hot(session: Session, hostname: str, rack: str = "r12") -> Host:
    """A host of the rack whose CPU sensor is past its upper critical threshold (a heat rule's own)."""
    host = host_in(session, hostname, rack)
    detail = {"kind": "temperature", "level": "upper_cr", "status": "cr", "thresholds": {"ucr": 90.0}}
    session.add(
        Signal(host_id=host.id, kind="sensor_critical", subject="CPU2 Temp", value=95.0, detail=detail, observed_at=NOW)
    )
    session.flush()
    return host


def erring(session: Session, hostname: str) -> Host:
    """A host whose port facing SWITCH counts rising CRC errors over its allowance."""
    host = host_in(session, hostname, "r07")
    session.add(
        Signal(
            host_id=host.id, kind="nic_crc_error_rate", subject="ens1f0np0", value=400.0, detail=CRC, observed_at=NOW
        )
    )
    session.flush()
    return host


def airflow_request(host: Host) -> TicketRequest:
    return TicketRequest(
        hostname=host.hostname,
        datacenter=host.datacenter,
        rack=host.rack,
        part_type="airflow",
        part="host",
        title=f"Airflow check of {host.hostname}",
        holds_host=False,
    )


def cable_request(host: Host) -> TicketRequest:
    return TicketRequest(
        hostname=host.hostname,
        datacenter="ams1",
        rack=host.rack,
        part_type="nic",
        part="ens1f0np0",
        title=f"CRC errors on {host.hostname} ens1f0np0",
        evidence={"part": {"interface": "ens1f0np0", "switch": SWITCH}},
        holds_host=False,
    )


def crc_firing() -> Firing:
    return Firing(RULES["nic-crc-errors"], SignalValue("nic_crc_error_rate", "ens1f0np0", 400.0, dict(CRC)))


# -- M2: one ticket per group, keyed by the group ------------------------------------------------------


def test_two_hosts_of_a_rack_ask_for_the_rack_s_one_ticket(session: Session) -> None:
    """Before: the rack's ticket was keyed by the first host that asked (`dt-1:rack_airflow:rack r12`), so
    two hosts asking before either saw the other's ticket asked for two tickets."""
    first, second = hot(session, "dt-1"), hot(session, "dt-2")
    asked = [rack_heat.grouped(session, host, airflow_request(host)) for host in (first, second)]
    assert {request.dedup_key for request in asked} == {"rack ams1/r12:rack_airflow:rack r12"}
    opened = [tickets.open_ticket(session, request, actor="test", now=NOW) for request in asked]
    assert [created for _, created in opened] == [True, False]
    (ticket,) = session.scalars(select(Ticket).where(Ticket.part_type == "rack_airflow")).all()
    assert (ticket.hostname, ticket.detections) == ("dt-1", 2)
    # another rack of the datacenter, and the same rack name in another datacenter, are other groups
    other = hot(session, "dt-3", rack="r13")
    hot(session, "dt-4", rack="r13")
    assert rack_heat.grouped(session, other, airflow_request(other)).dedup_key == "rack ams1/r13:rack_airflow:rack r13"
    assert groups.rack_scope("fra1", "r12") != groups.rack_scope("ams1", "r12")


def test_a_rack_ticket_opened_under_its_first_host_s_key_still_takes_the_rack(session: Session) -> None:
    """Tickets opened before group keys are keyed by their first host: a later request reuses that key
    (no second ticket for the rack), and the hosts its `detections` name are still heard from."""
    first, second = hot(session, "dt-1"), hot(session, "dt-2")
    old = rack_heat.grouped(session, first, airflow_request(first)).model_copy(update={"group_key": ""})
    ticket, created = tickets.open_ticket(session, old, actor="test", now=NOW)
    assert created
    assert ticket.dedup_key == "dt-1:rack_airflow:rack r12"
    again = rack_heat.grouped(session, second, airflow_request(second))
    assert again.dedup_key == ticket.dedup_key
    assert tickets.open_ticket(session, again, actor="test", now=NOW)[0].id == ticket.id
    legacy = {"detections": [{"host": "dt-7", "subject": "CPU1 Temp"}]}
    assert rack_heat.has_heard_from(legacy, "dt-7", "CPU1 Temp")
    assert not rack_heat.has_heard_from(legacy, "dt-7", "CPU2 Temp")
    assert switch_errors.has_heard_from(legacy, "dt-7")


def test_hosts_behind_one_switch_ask_for_the_switch_s_one_ticket(session: Session) -> None:
    hosts = [erring(session, f"h{n}") for n in range(1, 5)]
    asked = [switch_errors.grouped(session, host, cable_request(host), NOW) for host in hosts]
    assert {request.dedup_key for request in asked} == {f"datacenter ams1:switch:switch {SWITCH}"}
    opened = [tickets.open_ticket(session, request, actor="test", now=NOW)[1] for request in asked]
    assert opened == [True, False, False, False]


@pytest.fixture
def database(integration_pg_url: str, celery_app: object) -> Iterator[Database]:
    truncate_all(integration_pg_url)
    built = wired(Database(integration_pg_url))
    yield built
    built.dispose()


def run_blocked(database: Database, work: Callable[[], Any], release: Callable[[], None]) -> Any:
    """Run `work` in a thread until PostgreSQL shows it waiting on a lock, then `release`; its result
    (tests/ticketing/test_races.py's way)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 20
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    while True:
        with database.engine.connect() as connection:
            if connection.execute(text(query)).scalar_one():
                break
        assert thread.is_alive(), f"the work finished without waiting: {outcome}"
        assert time.monotonic() < deadline, "the work never waited on the lock"
        time.sleep(0.05)
    release()
    thread.join(30)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_two_ingests_of_one_rack_at_once_open_one_ticket(database: Database) -> None:
    """Two transactions (two ingest workers), each with one hot host of the rack, open the rack's ticket at
    once: neither sees the other's uncommitted ticket, so both ask to open one. The unique open key makes
    the second wait and then add its detection to the first's. Before: two rack tickets, no wait."""
    with database.session() as session:
        hot(session, "dt-1")
        hot(session, "dt-2")

    def open_for(session: Session, hostname: str) -> tuple[int, bool]:
        host = session.scalars(select(Host).where(Host.hostname == hostname)).one()
        request = rack_heat.grouped(session, host, airflow_request(host))
        ticket, created = tickets.open_ticket(session, request, actor="system:remediator", now=NOW)
        return ticket.id, created

    first = database.sessionmaker()
    try:
        first_id, first_created = open_for(first, "dt-1")

        def second() -> tuple[int, bool]:
            with database.session() as session:
                return open_for(session, "dt-2")

        second_id, second_created = run_blocked(database, second, first.commit)
    finally:
        first.close()
    assert (first_created, second_created, second_id) == (True, False, first_id)
    with database.session() as session:
        (ticket,) = session.scalars(select(Ticket).where(Ticket.part_type == "rack_airflow")).all()
        assert (ticket.id, ticket.detections) == (first_id, 2)


# -- M1's switch half: a closed switch ticket is reopened like a host's ---------------------------------


def test_a_switch_ticket_closed_within_the_window_is_reopened(session: Session) -> None:
    """Before: only open switch tickets were found, so the switch erring again the day after its ticket
    closed opened a new ticket instead of reopening it (a host's ticket is reopened within the window)."""
    hosts = [erring(session, f"h{n}") for n in range(1, 4)]
    request = switch_errors.grouped(session, hosts[0], cable_request(hosts[0]), NOW)
    ticket, _ = tickets.open_ticket(session, request, actor="test", now=NOW - dt.timedelta(days=1))
    repaired_and_closed(session, ticket, NOW - dt.timedelta(hours=20))
    reason = repairs.route_detection(session, hosts[1], crc_firing(), NOW)
    assert reason == f"fault returned after the repair: ticket {ticket.id} reopened"
    session.refresh(ticket)
    assert (ticket.state.value, ticket.reopened) == ("open", 1)
    # closed longer ago than the window (30 days by default): another fault, the rules plan for it as usual
    repaired_and_closed(session, ticket, NOW - dt.timedelta(days=31))
    assert repairs.route_detection(session, hosts[2], crc_firing(), NOW) is None
    session.refresh(ticket)
    assert (ticket.state.value, ticket.reopened) == ("closed", 1)


def repaired_and_closed(session: Session, ticket: Ticket, at: dt.datetime) -> None:
    tickets.claim(session, ticket, actor="user:tech", now=at)
    tickets.resolve(session, ticket, Resolution(note="port 1 moved to a spare ASIC"), actor="user:tech", now=at)
    tickets.begin_verification(session, ticket, actor="system:remediator", settle=dt.timedelta(hours=1), now=at)
    tickets.close(session, ticket, actor="system:remediator", reason="verified", now=at + dt.timedelta(hours=1))


# -- S6: the hosts heard from outlive the last 50 detections ---------------------------------------------


def test_a_host_heard_from_before_the_last_50_detections_is_no_news(session: Session) -> None:
    """Before: whether a switch ticket had heard from a host was read from its last 50 detections; after 50
    detections from other hosts, a host seen long ago was news again and its every report a new detection."""
    hosts = [erring(session, f"h{n:02d}") for n in range(1, 56)]
    request = switch_errors.grouped(session, hosts[0], cable_request(hosts[0]), NOW)
    ticket, _ = tickets.open_ticket(session, request.model_copy(update={"evidence": {}}), actor="test", now=NOW)
    for host in hosts[1:53]:  # 52 new hosts, each news: one detection each
        repairs.route_detection(session, host, crc_firing(), NOW)
    session.refresh(ticket)
    assert ticket.detections == 53
    assert len(ticket.evidence["detections"]) == tickets.MAX_DETECTIONS_KEPT  # h02 is no longer among them
    assert "h02" not in {d["host"] for d in ticket.evidence["detections"]}
    assert switch_errors.has_heard_from(ticket.evidence, "h02")
    repairs.route_detection(session, hosts[1], crc_firing(), NOW)  # h02 again, within the hour: the same
    session.refresh(ticket)
    assert ticket.detections == 53
    repairs.route_detection(session, hosts[53], crc_firing(), NOW)  # h54: never heard from, news
    session.refresh(ticket)
    assert ticket.detections == 54


def test_heard_from_is_bounded_by_the_group_s_host_list() -> None:
    evidence: dict[str, Any] = {}
    for n in range(groups.HEARD_FROM_HOSTS + 1):
        evidence = groups.with_source(evidence, f"h{n}", "CPU2 Temp")
    evidence = groups.with_source(evidence, "h1", "package 0")  # heard again: the most recent, a new subject
    heard = groups.heard_from(evidence)
    assert len(evidence["heard_from"]) == groups.HEARD_FROM_HOSTS
    assert "h0" not in heard  # the oldest went first
    assert evidence["heard_from"][-1] == {"host": "h1", "subjects": ["CPU2 Temp", "package 0"]}
    assert rack_heat.has_heard_from(evidence, "h1", "package 0")
    assert not rack_heat.has_heard_from(evidence, "h1", "package 1")
    assert groups.HEARD_FROM_HOSTS == rack_heat.MAX_HOSTS == switch_errors.MAX_HOSTS
