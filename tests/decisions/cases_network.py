"""The network scenarios (rules nic-crc-errors, nic-carrier-flapping, nic-errors-every-port, and
nic-link-flapping meeting nic-carrier-flapping on one port), registered into tests/decisions/cases.py's CASES.

The host has the two-port ConnectX-6 Dx of our sysfs fixture (tests/checker/fixtures/network: the corpus has
no /sys/class/net tree, `ethtool -S` or `lldpctl`), its `ethtool -S` in mlx5's format, `ethtool -i` in the
format of the corpus's real e1000e answer, and lldpd's answer naming the switch ports. Between cycles the
counters move as the kernel and the PHY would count.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import OURS, listing_to_files, ours, sample
from checker.schemas import Report
from remediator.models import Decision, Remediation
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost, tickets_of
from ticketing.models import Ticket

NET = "/sys/class/net/"
PORTS = {"ens1f0np0": "0000:3b:00.0", "ens1f1np1": "0000:3b:00.1"}
FIRMWARE = "22.36.1010 (MT_0000000359)"
FLAPS = "kernel-log/dmesg-nic-link-flap-and-netdev-watchdog-new-format.log"
NETWORK_RULES = frozenset(
    {"nic-crc-errors", "nic-carrier-flapping", "nic-carrier-flapping-redundant", "nic-errors-every-port"}
)


def ethtool_i(bus: str) -> str:
    """`ethtool -i` of an mlx5 port, in the layout of the corpus's real answer (firmware/ethtool-i-eth0-e1000e.txt)."""
    real = sample("firmware/ethtool-i-eth0-e1000e.txt")
    return (
        real.replace("driver: e1000e", "driver: mlx5_core")
        .replace("firmware-version: 0.5-4", f"firmware-version: {FIRMWARE}")
        .replace("bus-info: 0000:00:1f.6", f"bus-info: {bus}")
    )


class NetHost(SnapHost):
    """The scenario's host with the mlx5 ports; `counters` sets a port's CRC errors and link downs."""

    def __init__(self, tmp: Path, *, rename: dict[str, str] | None = None) -> None:
        super().__init__(tmp)
        self.names = {port: (rename or {}).get(port, port) for port in PORTS}
        listing = ours("network/sysfs-net-mlx5-two-ports.txt")
        lldp = (OURS / "network" / "lldpctl-json-two-ports.json").read_text(encoding="utf-8")
        for port, name in self.names.items():
            listing, lldp = listing.replace(port, name), lldp.replace(port, name)
        self.snap.files(NET, listing_to_files(listing, NET))
        self.snap.command(["lldpctl", "-f", "json"], lldp)
        for port, bus in PORTS.items():
            self.snap.command(["ethtool", "-i", self.names[port]], ethtool_i(bus))
            self.counters(port, crc=0, downs=0)

    def counters(self, port: str, *, crc: int, downs: int, phy_downs: int | None = None) -> NetHost:
        """The port's counters; `phy_downs`: the PHY's own count when it differs from the kernel's."""
        name = self.names[port]
        self.file(f"{NET}{name}/statistics/rx_crc_errors", f"{crc}\n")
        self.file(f"{NET}{name}/carrier_down_count", f"{downs}\n")
        self.file(f"{NET}{name}/carrier_changes", f"{2 * downs}\n")
        stats = f"NIC statistics:\n     rx_crc_errors_phy: {crc}\n     rx_symbol_err_phy: 0\n"
        phy = downs if phy_downs is None else phy_downs
        self.snap.command(["ethtool", "-S", name], stats + f"     link_down_events_phy: {phy}\n")
        return self

    def unplugged(self, port: str) -> NetHost:
        """The port has no link (its cable pulled): the other one is the host's only linked port."""
        name = self.names[port]
        self.file(f"{NET}{name}/operstate", "down\n")
        self.file(f"{NET}{name}/carrier", "0\n")
        return self


def ticket_names_the_port(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
    assert ticket is not None
    part = ticket.evidence["part"]
    assert (part["interface"], part["bus_info"], part["driver"]) == ("ens1f0np0", "0000:3b:00.0", "mlx5_core")
    assert (part["firmware"], part["switch"], part["switch_port"]) == (FIRMWARE, "ams1-r07-tor1", "Ethernet12")
    history = ticket.evidence["counter_history"]  # the port's counters in each stored report, oldest first
    assert len(history) >= 2
    assert history[-1]["rx_crc_errors_phy"] >= history[0]["rx_crc_errors_phy"]
    assert "carrier_down_count" in history[-1]


@case(
    "CRC errors rising on one mlx5 port for an hour: a cable/optic ticket naming NIC and switch port", "nic-crc-errors"
)
def crc_rising(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    reports = []
    for n, minute in enumerate(range(0, 70, 10)):
        host.counters("ens1f0np0", crc=1843 + 60 * n, downs=0)  # 360 an hour: over 3 x 90 at 25 Gb/s
        reports.append(host.cycle(minute))

    def in_service(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        ticket_names_the_port(session, remediation, ticket)
        assert ticket is not None
        assert not ticket.holds_host  # a cable or optic is swapped while the host runs (review M4)

    return (
        host,
        reports,
        Expect(
            "nic-crc-errors",
            "ticket",
            title=r"CRC errors on dt-host-01 ens1f0np0: \d+ in the last hour \(mlx5_core 0000:3b:00.0 firmware "
            r"22.36.1010 .*switch ams1-r07-tor1 port Ethernet12\): check its cable and optic",
            part_type="nic",
            part="ens1f0np0",
            never=frozenset({"nic-errors-every-port"}),
            also=in_service,
        ),
    )


@case("one burst of 500 CRC errors (a re-seat), then none: not rising, no ticket", None)
def crc_burst(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    reports = [host.cycle(0)]
    host.counters("ens1f0np0", crc=500, downs=0)
    reports += [host.cycle(m) for m in (10, 20, 30, 40)]
    return host, reports, Expect(None, never=NETWORK_RULES)


@case("CRC counters drop after a driver reload: a reset, never a rate or a ticket", None)
def crc_reset(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    host.counters("ens1f0np0", crc=90000, downs=0)
    reports = [host.cycle(0)]
    for n, minute in enumerate(range(10, 60, 10)):
        host.counters("ens1f0np0", crc=3 * n, downs=0)  # counting from zero again, slowly
        reports.append(host.cycle(minute))
    return host, reports, Expect(None, never=NETWORK_RULES)


@case(
    "both ports of the NIC rising together: the NIC, its slot or the host, with candidates, no cable ticket",
    "nic-errors-every-port",
)
def every_port(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    reports = []
    for n, minute in enumerate(range(0, 70, 10)):
        host.counters("ens1f0np0", crc=60 * n, downs=0).counters("ens1f1np1", crc=50 * n, downs=0)
        reports.append(host.cycle(minute))

    def candidates(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.part == "0000:3b:00"
        part = ticket.evidence["part"]
        assert part["ambiguous"]
        assert [p["interface"] for p in part["ports"]] == ["ens1f0np0", "ens1f1np1"]
        assert part["candidates"][0].startswith("the NIC at 0000:3b:00 (mlx5_core")

    return (
        host,
        reports,
        Expect(
            "nic-errors-every-port",
            "ticket",
            title="NIC errors on every port of dt-host-01",
            part_type="nic",
            never=frozenset({"nic-crc-errors"}),
            also=candidates,
        ),
    )


@case(
    "an mlx5 port's link went down three times in a day, its bond partner up: a ticket, the host in service",
    "nic-carrier-flapping-redundant",
)
def carrier_flapping_redundant(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    reports = []
    for downs, minute in enumerate((0, 30, 60, 90)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs)
        reports.append(host.cycle(minute))

    def in_service(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        ticket_names_the_port(session, remediation, ticket)
        assert ticket is not None
        assert not ticket.holds_host
        assert ticket.evidence["part"]["bond"] == "bond0"

    return (
        host,
        reports,
        Expect(
            "nic-carrier-flapping-redundant",
            "ticket",
            title=r"Link flapping on dt-host-01 ens1f0np0: 3 link downs in a day \(mlx5_core 0000:3b:00.0.*other link",
            part_type="nic",
            part="ens1f0np0",
            never=frozenset({"nic-carrier-flapping"}),
            also=in_service,
        ),
    )


@case(
    "the host's only linked port went down three times in a day (mlx5 never logs 'Link is Down'): held",
    "nic-carrier-flapping",
)
def carrier_flapping(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp).unplugged("ens1f1np1")
    reports = []
    for downs, minute in enumerate((0, 30, 60, 90)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs)
        reports.append(host.cycle(minute))
    return (
        host,
        reports,
        Expect(
            "nic-carrier-flapping",
            "ticket",
            title=r"Link flapping on dt-host-01 ens1f0np0: 3 link downs in a day \(mlx5_core 0000:3b:00.0",
            part_type="nic",
            part="ens1f0np0",
            also=ticket_names_the_port,
        ),
    )


@case("two link downs in a day: below three, no flapping ticket", None)
def two_flaps(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    reports = []
    for downs, minute in enumerate((0, 30, 60)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs)
        reports.append(host.cycle(minute))
    return host, reports, Expect(None, never=NETWORK_RULES | {"nic-link-flapping"})


@case(
    "the kernel log's 'Link is Down' and the carrier counters on one port: one ticket, not two, and the host "
    "keeps serving on its other link",
    "nic-link-flapping-redundant",
)
def log_and_counters(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp, rename={"ens1f0np0": "eth0"})  # the real log's port
    down = "\n".join(line for line in sample(FLAPS).splitlines() if "Link is" in line) + "\n"
    reports = []
    for downs, minute in enumerate((0, 30, 60, 90)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs)
        host.kernel_log(down)
        reports.append(host.cycle(minute))

    def one_ticket(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        nic = [t for t in tickets_of(session, host.hostname) if t.part_type == "nic"]
        assert [(t.part, t.id) for t in nic] == [("eth0", ticket.id if ticket else None)]
        counted = session.scalars(
            select(Decision.outcome).where(Decision.rule_id == "nic-carrier-flapping-redundant")
        ).all()
        assert counted
        assert set(counted) == {"held"}
        assert not session.scalars(select(Decision).where(Decision.rule_id == "nic-carrier-flapping")).all()
        assert ticket is not None
        assert ticket.evidence["part"]["bus_info"] == "0000:3b:00.0"
        assert not ticket.holds_host  # its bond partner carries the traffic (review: the log's rule held it)
        assert not session.scalars(select(Decision).where(Decision.rule_id == "nic-link-flapping")).all()

    return host, reports, Expect("nic-link-flapping-redundant", "ticket", part_type="nic", part="eth0", also=one_ticket)


@case("the kernel log's 'Link is Down' on the host's only linked port: the ticket holds the host", "nic-link-flapping")
def log_only_link(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp, rename={"ens1f0np0": "eth0"}).unplugged("ens1f1np1")
    down = "\n".join(line for line in sample(FLAPS).splitlines() if "Link is" in line) + "\n"
    reports = []
    for minute in (0, 30, 60):
        host.kernel_log(down)
        reports.append(host.cycle(minute))

    def holds(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.holds_host  # every down cuts the host off
        assert not session.scalars(select(Decision).where(Decision.rule_id == "nic-link-flapping-redundant")).all()

    return host, reports, Expect("nic-link-flapping", "ticket", part_type="nic", part="eth0", also=holds)


@case(
    "both members of the LACP bond went down three times in a day: neither backs the other up, the ticket holds "
    "the host (second review of the Redfish rules, finding 3)",
    "nic-carrier-flapping",
)
def both_bond_members_flapping(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    reports = []
    for downs, minute in enumerate((0, 30, 60, 90)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs)
        host.counters("ens1f1np1", crc=0, downs=downs)
        reports.append(host.cycle(minute))

    def holds(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.holds_host

    return (
        host,
        reports,
        Expect(
            "nic-carrier-flapping",
            "ticket",
            part_type="nic",
            never=frozenset({"nic-carrier-flapping-redundant"}),
            also=holds,
        ),
    )


@case(
    "a port of the LACP bond flaps, the only member of the active aggregator, while its partner is linked in "
    "another aggregator (another switch): bonding reselects the partner's aggregator when the port is down, "
    "so the host keeps a link and stays in service (third review, finding 3)",
    "nic-carrier-flapping-redundant",
)
def bond_partner_outside_aggregator(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = NetHost(tmp)
    host.file(f"{NET}ens1f1np1/bonding_slave/state", "backup\n")
    host.file(f"{NET}ens1f1np1/bonding_slave/ad_aggregator_id", "2\n")
    reports = []
    for downs, minute in enumerate((0, 30, 60, 90)):
        host.counters("ens1f0np0", crc=0, downs=2 + downs)
        reports.append(host.cycle(minute))

    def in_service(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert not ticket.holds_host
        assert "another 802.3ad aggregator" in ticket.title

    expect = Expect(
        "nic-carrier-flapping-redundant",
        "ticket",
        part_type="nic",
        part="ens1f0np0",
        never=frozenset({"nic-carrier-flapping"}),
        also=in_service,
    )
    return host, reports, expect
