"""Group tickets (a rack's cooling, a switch) under the review of the group tickets (findings 2, 3, 4, 5, 7,
8): a switch's resolved ticket is reopened only on errors from after its repair; two hosts reopening one
group ticket at once both succeed on PostgreSQL; a group's request joining its open ticket records the
host and the group's hosts now; a host with no heat never reaches a rack's ticket; a rack's readings are
never cut off by a row limit; every path picks a rack's oldest open ticket. Each failed on the code before."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import Database
from remediator import rack_heat, repairs, switch_errors
from remediator.evaluate import Firing
from remediator.models import Host, Signal
from remediator.signals import SignalValue
from tests.remediator.test_group_tickets import (
    CRC,
    NOW,
    RULES,
    airflow_request,
    cable_request,
    crc_firing,
    database,
    erring,
    host_in,
    hot,
    run_blocked,
)
from ticketing import groups
from ticketing import service as tickets
from ticketing.models import Ticket, TicketEvent
from ticketing.schemas import Resolution

__all__ = ["database"]  # the fixture, imported for the race tests

HOT = {"kind": "temperature", "level": "upper_cr", "status": "cr", "thresholds": {"ucr": 90.0}}


def heat_firing() -> Firing:
    return Firing(RULES["sensor-critical-temperature"], SignalValue("sensor_critical", "CPU2 Temp", 95.0, dict(HOT)))


def rack_ticket(session: Session, at: dt.datetime) -> Ticket:
    first, second = hot(session, "dt-1"), hot(session, "dt-2")
    assert second is not None
    ticket, created = tickets.open_ticket(
        session, rack_heat.grouped(session, first, airflow_request(first)), actor="t", now=at
    )
    assert created
    return ticket


# -- finding 2, the switch's half ------------------------------------------------------------------------


def test_a_resolved_switch_ticket_is_reopened_only_on_errors_after_its_repair(session: Session) -> None:
    """Before: h1 still erring on its own cable after the switch's fix, and h2/h3's signals from before it,
    made three erring hosts: the switch's ticket was reopened."""
    hosts = [erring(session, f"h{n}") for n in range(1, 4)]  # all three erred at NOW
    request = switch_errors.grouped(session, hosts[0], cable_request(hosts[0]), NOW)
    ticket, _ = tickets.open_ticket(session, request, actor="test", now=NOW)
    fixed = NOW + dt.timedelta(minutes=10)
    tickets.claim(session, ticket, actor="user:tech", now=fixed)
    tickets.resolve(session, ticket, Resolution(note="ASIC swapped"), actor="user:tech", now=fixed)
    later = fixed + dt.timedelta(minutes=20)

    def errs_again(host: Host) -> None:
        detail = {**CRC}
        session.add(
            Signal(
                host_id=host.id,
                kind="nic_crc_error_rate",
                subject="ens1f0np0",
                value=400.0,
                detail=detail,
                observed_at=later,
            )
        )
        session.flush()

    errs_again(hosts[0])
    assert repairs.route_detection(session, hosts[0], crc_firing(), later) is None  # its cable: plans as usual
    session.refresh(ticket)
    assert (ticket.state.value, ticket.reopened) == ("resolved", 0)
    errs_again(hosts[1])
    errs_again(hosts[2])  # three hosts err after the fix: the switch's fault returned
    assert repairs.route_detection(session, hosts[2], crc_firing(), later) == (
        f"fault returned after the repair: ticket {ticket.id} reopened"
    )


def test_a_port_s_hour_counted_before_the_switch_s_repair_is_recounted(session: Session) -> None:
    """A host's signal observed after the fix whose hour (its `counted` buckets) lies before it erred only
    before the repair: it does not count toward the switch's erring hosts (remediator.recount)."""
    hosts = [host_in(session, f"h{n}", "r07") for n in range(1, 4)]
    fixed = NOW - dt.timedelta(minutes=5)
    since = (fixed - dt.timedelta(minutes=55)).isoformat()
    start = (fixed - dt.timedelta(minutes=55)).timestamp()
    before = {**CRC, "since": since, "counted_s": 300, "counted": [[start + 300 * i, 40] for i in range(10)]}
    for host in hosts:
        session.add(
            Signal(
                host_id=host.id,
                kind="nic_crc_error_rate",
                subject="ens1f0np0",
                value=400.0,
                detail=before,
                observed_at=NOW,
            )
        )
    session.flush()
    assert len(switch_errors.erring_hosts(session, "ams1", CRC["switch"], NOW)) == 3
    assert switch_errors.erring_hosts(session, "ams1", CRC["switch"], NOW, since=fixed) == []


# -- finding 3: two hosts reopen one group ticket at once --------------------------------------------------


@pytest.mark.parametrize("state", ["verifying", "closed"])
def test_two_hosts_reopening_one_rack_ticket_at_once_both_succeed(database: Database, state: str) -> None:
    """Before: ingest B waited on the ticket's row while A reopened it, then failed its own reopen with
    StaleDataError, which nothing caught: B's whole batch rolled back. Now B waits on the ticket's lock,
    sees it open, and adds its detection."""
    with database.session() as session:
        ticket = rack_ticket(session, NOW - dt.timedelta(minutes=30))
        at = NOW - dt.timedelta(minutes=20)
        tickets.claim(session, ticket, actor="user:tech", now=at)
        tickets.resolve(session, ticket, Resolution(note="blanking panels"), actor="user:tech", now=at)
        tickets.begin_verification(session, ticket, actor="system:remediator", settle=dt.timedelta(hours=1), now=at)
        if state == "closed":
            tickets.close(
                session, ticket, actor="system:remediator", reason="verified", now=NOW - dt.timedelta(minutes=10)
            )
        assert ticket.state.value == state
        for name in ("dt-1", "dt-2"):  # both hot again after the repair
            host = session.scalars(select(Host).where(Host.hostname == name)).one()
            session.add(
                Signal(
                    host_id=host.id,
                    kind="sensor_critical",
                    subject="CPU2 Temp",
                    value=95.0,
                    detail=HOT,
                    observed_at=NOW,
                )
            )
        ticket_id = ticket.id
    later = NOW + dt.timedelta(minutes=5)

    def route(session: Session, name: str) -> str | None:
        host = session.scalars(select(Host).where(Host.hostname == name)).one()
        return repairs.route_detection(session, host, heat_firing(), later)

    first = database.sessionmaker()
    try:
        assert route(first, "dt-1") == f"fault returned after the repair: ticket {ticket_id} reopened"

        def second() -> str | None:
            with database.session() as session:
                return route(session, "dt-2")

        assert (
            run_blocked(database, second, first.commit) == f"ticket {ticket_id} (open) holds this part: detection added"
        )
    finally:
        first.close()
    with database.session() as session:
        ticket = session.get(Ticket, ticket_id)
        assert ticket is not None
        assert (ticket.state.value, ticket.reopened) == ("open", 1)
        assert ticket.detections == 2  # opened, reopened: dt-2's within the hour of the reopen is the same one


# -- finding 4, the request's half: a group's request joining its open ticket ------------------------------


def test_a_rack_request_joining_an_old_ticket_records_its_host_and_the_rack_now(session: Session) -> None:
    """Before: the request of a rack's hot host that found the rack's open ticket only counted a detection:
    `heard_from` stayed empty, the hosts and title kept the ticket's first picture."""
    ticket = rack_ticket(session, NOW - dt.timedelta(days=5))
    assert groups.heard_from(ticket.evidence) == {}
    late = hot(session, "dt-3")
    request = rack_heat.grouped(session, late, airflow_request(late))
    assert request.dedup_key == ticket.dedup_key
    again, created = tickets.open_ticket(session, request, actor="test", now=NOW)
    assert (again.id, created) == (ticket.id, False)
    session.refresh(ticket)
    assert groups.heard_from(ticket.evidence) == {"dt-3": {"CPU2 Temp"}}
    assert [h["hostname"] for h in ticket.evidence["rack_heat"]["hosts"]] == ["dt-1", "dt-2", "dt-3"]
    assert ticket.title.startswith("Cooling check of rack r12 (ams1): 3 hosts run hot"), ticket.title
    comments = [e.note for e in session.query(TicketEvent).filter_by(ticket_id=ticket.id, kind="comment")]
    assert comments == ["heat returned after 5 days quiet: hosts dt-1, dt-2, dt-3"]
    # a host's own request (no group key) changes none of it
    own = airflow_request(late).model_copy(update={"part": "CPU2 Temp"})
    tickets.open_ticket(session, own, actor="test", now=NOW)
    session.refresh(ticket)
    assert ticket.detections == 2


# -- finding 5: a host with no heat --------------------------------------------------------------------------


def test_a_host_with_no_heat_is_never_routed_to_its_rack_s_ticket(session: Session) -> None:
    """Before: cxl-health-temperature, an in-service airflow ticket rule, fired on dt-9 (no heat signal at
    all) and went to the rack's fresh ticket as a detection: no ticket of its own. (That rule now tickets
    the CXL device itself, part cxl_memory, and never routes to a rack; an in-service airflow rule stands
    in for it here.)"""
    ticket = rack_ticket(session, NOW)
    firing = Firing(RULES["cpu-package-throttling"], SignalValue("cpu_throttle_percent", "package0", 7.0, {}))
    cool = host_in(session, "dt-9")
    assert repairs.route_detection(session, cool, firing, NOW + dt.timedelta(minutes=10)) is None
    warm = hot(session, "dt-3")  # a hot host of the rack: its airflow detection goes to the rack's ticket
    reason = repairs.route_detection(session, warm, firing, NOW + dt.timedelta(minutes=10))
    assert reason == f"ticket {ticket.id} (open) holds this part: detection added"
    # a CXL device's own temperature is that device's ticket, on a hot host too
    device = Firing(
        RULES["cxl-health-temperature"],
        SignalValue("cxl_health", "SER123", 1.0, {"overheating": True, "memdev": "mem0", "temperature": "Warning"}),
    )
    assert not rack_heat.routes_to_rack(session, warm, device.rule)


# -- finding 7: no silent truncation -------------------------------------------------------------------------


def test_a_rack_s_readings_are_not_cut_off_by_a_row_limit(session: Session) -> None:
    """Before: an hour of 10 hosts reporting every minute with 4 heat rows each passed the 2000-row limit,
    ordered by hostname: dt-09, 25 C hotter than the rest, was missing, so it had no cause of its own and
    was folded into the rack's ticket."""
    hosts = {f"dt-{n:02d}": host_in(session, f"dt-{n:02d}") for n in range(10)}
    rows = []
    for name, host in hosts.items():
        temp = 120.0 if name == "dt-09" else 95.0
        for minute in range(60):
            at = NOW - dt.timedelta(minutes=minute)
            for sensor in ("CPU1 Temp", "CPU2 Temp"):
                rows.append(
                    Signal(
                        host_id=host.id, kind="sensor_critical", subject=sensor, value=temp, detail=HOT, observed_at=at
                    )
                )
            for package in ("package 0", "package 1"):
                rows.append(
                    Signal(
                        host_id=host.id,
                        kind="cpu_throttle_percent",
                        subject=package,
                        value=0.0,
                        detail={},
                        observed_at=at,
                    )
                )
    session.add_all(rows)
    session.flush()
    hottest = hosts["dt-09"]
    assert rack_heat.own_cause(session, hottest) == "it runs 25 C hotter than its rack's other hot hosts"
    assert rack_heat.grouped(session, hottest, airflow_request(hottest)).dedup_key == "dt-09:airflow:host"
    assert rack_heat.grouped(session, hosts["dt-00"], airflow_request(hosts["dt-00"])).part_type == "rack_airflow"
    counted, own = rack_heat.rack_heat_of(session, hottest)
    assert [h["hostname"] for h in counted] == [f"dt-{n:02d}" for n in range(9)]
    assert [h["hostname"] for h in own] == ["dt-09"]


# -- finding 8: the oldest open ticket, everywhere -----------------------------------------------------------


def test_every_path_takes_a_rack_s_oldest_open_ticket(session: Session) -> None:
    """Before: with two open rack tickets keyed the old way (by their first host), the route went to the
    newest and the ticket request to the oldest: both stayed open for good."""
    first, second = hot(session, "dt-1"), hot(session, "dt-2")
    opened = []
    for host in (first, second):
        old = rack_heat.grouped(session, host, airflow_request(host))
        request = old.model_copy(update={"group_key": "", "hostname": host.hostname})
        opened.append(tickets.open_ticket(session, request, actor="test", now=NOW)[0])
    oldest = min(t.id for t in opened)
    third = hot(session, "dt-3")
    assert rack_heat.open_rack_ticket(session, third, NOW).id == oldest
    assert rack_heat.grouped(session, third, airflow_request(third)).dedup_key == "dt-1:rack_airflow:rack r12"
    switches = []
    for host in [erring(session, f"h{n}") for n in range(1, 4)]:
        old = switch_errors.grouped(session, host, cable_request(host), NOW)
        request = old.model_copy(update={"group_key": "", "hostname": host.hostname})
        switches.append(tickets.open_ticket(session, request, actor="test", now=NOW)[0])
    assert switch_errors.open_switch_ticket(session, "ams1", CRC["switch"]).id == min(t.id for t in switches)
