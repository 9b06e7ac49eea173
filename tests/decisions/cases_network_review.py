"""The network scenarios a review of the class asked for (registered into tests/decisions/cases.py's CASES):
a repair's own link down and training errors, uneven arrival at 60 s reports, reports half an hour apart,
a VF and a BMC NIC beside two erring ports, administrative downs, and transmit timeouts with flapping.
The host is tests/decisions/cases_network.py's, with the two-port ConnectX-6 Dx of our sysfs fixture."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import listing_to_files, ours, sample
from checker.schemas import Report
from remediator.models import Host, HostState, Remediation
from remediator.repairs import settle_repairs
from tests.builders.repairs import repaired
from tests.decisions.cases import case
from tests.decisions.cases_network import FLAPS, NET, NETWORK_RULES, NetHost
from tests.decisions.harness import T0, Expect, SnapHost, remediations, run, tickets_of, to_ticket
from ticketing.models import Ticket


def at(minute: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


@case(
    "a flapping only port repaired: the swap's own link down and 3 training errors close the ticket, no reopen",
    "nic-carrier-flapping",
)
def repair_closes(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review M1: 60 errors every 10 min and a down every 20 min; the swap at minute 72 takes the link down
    once and leaves 3 errors. Before: the report after it gave 4 downs and a rising CRC count, both rules
    fired while the ticket was verified, and route_detection reopened it ('fault returned')."""
    host = NetHost(tmp).unplugged("ens1f1np1")
    reports, crc, downs = [], 0, 0
    for minute in range(0, 70, 10):
        crc += 60
        downs += 1 if minute % 20 == 0 and minute else 0
        host.counters("ens1f0np0", crc=crc, downs=downs)
        reports.append(host.cycle(minute))

    def swap_then_verify(session: Session, snap: SnapHost) -> None:
        first = next(r for r in remediations(session, snap.hostname) if r.subject == "ens1f0np0")
        ticket = to_ticket(session, first)
        assert ticket is not None
        assert ticket.holds_host
        repaired(session, ticket, at(72))
        settle_repairs(session, now=at(72))  # verification starts (the reaction the API installs)
        host.counters("ens1f0np0", crc=crc + 3, downs=downs + 1)
        after = [host.cycle(75)]
        host.counters("ens1f0np0", crc=crc + 3, downs=downs + 1)
        after += [host.cycle(minute) for minute in range(80, 115, 5)]
        run(session, snap, after)
        session.refresh(ticket)
        assert ticket.state.value == "verifying", ticket.state
        assert settle_repairs(session, now=at(115))["closed"] == 1
        session.refresh(ticket)
        assert (ticket.state.value, ticket.reopened) == ("closed", 0)
        state = session.scalars(select(Host.state).where(Host.hostname == snap.hostname)).one()
        assert state != HostState.awaiting_repair

    return host, reports, Expect("nic-carrier-flapping", "ticket", part="ens1f0np0", then=swap_then_verify)


def uneven(total_per_hour: int, n: int, skip: int) -> list[int]:
    """Cumulative counts at 60 s reports: one report in five sees nothing (its share comes later)."""
    counts, total, owed = [], 0, 0
    for i in range(n):
        owed += total_per_hour // 60
        if (i + skip) % 5 != 0:
            total, owed = total + owed, 0
        counts.append(total)
    return counts


@case(
    "two ports at 420 an hour each, uneven at 60 s reports: every-port only, never a cable ticket",
    "nic-errors-every-port",
)
def uneven_every_port(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review M2: before, a report on which one port saw no new error made the other 'one-port'."""
    host = NetHost(tmp)
    reports = []
    for i, (a, b) in enumerate(zip(uneven(420, 80, 0), uneven(420, 80, 2), strict=True)):
        host.counters("ens1f0np0", crc=a, downs=0).counters("ens1f1np1", crc=b, downs=0)
        reports.append(host.cycle(i))

    def every_port_only(session: Session, snap: SnapHost) -> None:
        planned = {r.rule_id for r in remediations(session, snap.hostname)}
        assert planned == {"nic-errors-every-port"}, planned

    return (
        host,
        reports,
        Expect(
            "nic-errors-every-port",
            "ticket",
            part="0000:3b:00",
            never=frozenset({"nic-crc-errors"}),
            then=every_port_only,
        ),
    )


@case("400 CRC errors an hour on one port, reports half an hour apart: a cable ticket all the same", "nic-crc-errors")
def slow_reports(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review M3: before, 'rising' needed three five-minute buckets, which half-hourly reports never fill."""
    host = NetHost(tmp)
    reports = []
    for n, minute in enumerate(range(0, 150, 30)):
        host.counters("ens1f0np0", crc=200 * n, downs=0)
        reports.append(host.cycle(minute))
    return host, reports, Expect("nic-crc-errors", "ticket", part="ens1f0np0", never=NETWORK_RULES - {"nic-crc-errors"})


@case(
    "two erring ports beside a linked VF, representor, BMC USB NIC and ib0: every port, the NIC",
    "nic-errors-every-port",
)
def not_uplinks_beside(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review S3: before, the VF, the representor, the BMC's cdc_ether NIC and ib0 were 'physical' ports
    with a link and no error, so two erring uplinks were never every port (and each was one cable ticket)."""
    host = NetHost(tmp)
    host.snap.files(NET, listing_to_files(ours("network/sysfs-net-not-uplinks.txt"), NET))
    reports = []
    for n, minute in enumerate(range(0, 70, 10)):
        host.counters("ens1f0np0", crc=60 * n, downs=0).counters("ens1f1np1", crc=50 * n, downs=0)
        reports.append(host.cycle(minute))
    return (
        host,
        reports,
        Expect("nic-errors-every-port", "ticket", part="0000:3b:00", never=frozenset({"nic-crc-errors"})),
    )


@case("three carrier downs from MTU and ring changes the PHY never saw: no flapping ticket", None)
def admin_downs(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review S5: before, carrier_down_count came first, and ip link, MTU or ring changes made flaps."""
    host = NetHost(tmp).unplugged("ens1f1np1")
    reports = []
    for downs, minute in enumerate((0, 30, 60, 90)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs, phy_downs=2)
        reports.append(host.cycle(minute))
    return host, reports, Expect(None, never=NETWORK_RULES)


@case(
    "transmit timeouts whose driver resets take the link down: one ticket, the timeouts', no cable ticket",
    "nic-tx-timeouts",
)
def timeouts_and_downs(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review S5: before, the resets' downs made nic-carrier-flapping fire too, and the one ticket they
    shared was titled 'cable, optic and switch port' when the cause is the NIC or its firmware."""
    host = NetHost(tmp, rename={"ens1f0np0": "eth0"}).unplugged("ens1f1np1")
    watchdog = next(line for line in sample(FLAPS).splitlines() if "NETDEV WATCHDOG" in line) + "\n"
    reports = []
    for downs, minute in ((2, 0), (5, 30), (6, 60), (7, 90)):  # the first reset bounced the link three times
        host.counters("ens1f0np0", crc=0, downs=downs)
        if minute:
            host.kernel_log(watchdog)  # one timeout a report: the second makes nic-tx-timeouts' two
        reports.append(host.cycle(minute))

    def one_ticket(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        nic = [t for t in tickets_of(session, host.hostname) if t.part_type == "nic"]
        assert len(nic) == 1
        assert ticket is not None
        assert nic[0].id == ticket.id
        assert "Transmit timeouts" in ticket.title

    return (
        host,
        reports,
        Expect("nic-tx-timeouts", "ticket", part="eth0", never=NETWORK_RULES, also=one_ticket),
    )
