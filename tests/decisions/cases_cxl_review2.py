"""The second operator review's CXL scenarios at the decision level (/tmp/r7-cxl2/test_r7.py S1-S4,
turned into cases; rules cxl-device-down, cxl-aer-link-unrecovered), registered into
tests/decisions/cases.py's CASES: a PCIe drain of a memdev's function is never downgraded to a CXL
ticket in service, devices that go down together below one port are one ticket of the port, and a
Memory Module record of lost data before the device's memory came up in this boot drains nothing.

The kernel lines are in the kernel's wording (drivers/cxl/core/pci.c, drivers/cxl/pci.c,
drivers/pci/pcie/aer.c, drivers/pci/pcie/err.c); the rows are the project's own fixtures
(tests/checker/fixtures/cxl, README.md there)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.models import Remediation
from tests.checker.cxl_tree import DEVICES, install
from tests.decisions.cases import case
from tests.decisions.cases_cxl import PEER_POISON, cxl_host
from tests.decisions.cases_cxl_review import ALL_DATA_LOST
from tests.decisions.harness import Expect, SnapHost, tickets_of
from ticketing.models import Ticket

PCIE_RULES = frozenset({"pcie-aer-uncorrected", "pcie-aer-uncorrected-in-service"})
UE_LINES = (
    "[ 5.0] pcieport 0000:34:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:36:00.0\n"
    "[ 5.01] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
    "(Requester ID)\n"
    "[ 5.02] cxl_pci 0000:36:00.0:   device [8086:0d93] error status/mask=00400000/00000000\n"
    "[ 5.03] cxl_pci 0000:36:00.0:    [22] UncorrIntErr\n"
)
# cxl_slot_reset prints the restart BEFORE device_attach(); the attach failed: DISCONNECT, no resume line
RESTART_THEN_FAILED = (
    UE_LINES + "[ 5.1] cxl_pci 0000:36:00.0: mem1: restart CXL.mem after slot reset\n"
    "[ 5.2] pcieport 0000:34:02.0: AER: device recovery failed\n"
)


@case(
    "S1: a non-fatal AER on mem1, 'restart CXL.mem after slot reset', then 'device recovery failed': the PCIe "
    "drain goes to the CXL ticket, recovery outcome unknown",
    "cxl-device-down",
)
def cxl_restart_then_recovery_failed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, tables=False, kernel=RESTART_THEN_FAILED)

    def one_ticket(session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert [t.id for t in tickets_of(session, "dt-host-01")] == [ticket.id]
        reasons = ticket.evidence["signals"][0]["detail"]["reasons"]
        assert any("recovery outcome unknown" in r for r in reasons), reasons
        assert not any(r.startswith("CXL.mem restarted") for r in reasons), reasons
        assert "pcie_aer_uncorrected" in {e["kind"] for e in ticket.evidence["kernel_log"]}

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem1, serial 0x5a17c0df, 0000:36:00\.0 on dt-host-01: uncorrected PCIe error on "
        r"0000:36:00\.0 not recovered \(UncorrIntErr\): drained as pcie-aer-uncorrected would",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=PCIE_RULES | {"cxl-device-error"},
        also=one_ticket,
    )
    return host, reports, expect


@case(
    "S2: mem1's mailbox never ready at probe, later a fatal Surprise Down it can't recover from: a drain, not "
    "the probe ticket in service",
    "cxl-device-down",
)
def cxl_probe_then_fatal(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = (
        "[ 3.0] cxl_pci 0000:36:00.0: timeout awaiting mailbox ready, device state  fatal\n"
        "[ 900.0] pcieport 0000:34:02.0: AER: Uncorrected (Fatal) error received: 0000:36:00.0\n"
        "[ 900.01] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
        "(Requester ID)\n"
        "[ 900.03] cxl_pci 0000:36:00.0:    [5] SDES (First)\n"
        "[ 900.1] cxl_pci 0000:36:00.0: AER: can't recover (no error_detected callback)\n"
        "[ 900.2] pcieport 0000:34:02.0: AER: device recovery failed\n"
    )
    host, reports = cxl_host(tmp, tables=False, kernel=text)

    def probe_said(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        reasons = ticket.evidence["signals"][0]["detail"]["reasons"]
        assert "device status fatal, at probe (mailbox never ready)" in reasons

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem1.* on dt-host-01: uncorrected PCIe error on 0000:36:00\.0 not recovered \(SDES\)",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=PCIE_RULES | {"cxl-device-error"},
        also=probe_said,
    )
    return host, reports, expect


@case(
    "S3: rasdaemon's link-only UE row (Received Poison From Peer) and a fatal AER not recovered: the PCIe drain "
    "goes to ONE CXL link ticket, not cxl-aer-link's in service",
    "cxl-aer-link-unrecovered",
)
def cxl_link_row_and_fatal(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = (
        "[ 5.0] pcieport 0000:34:02.0: AER: Uncorrected (Fatal) error received: 0000:36:00.0\n"
        "[ 5.01] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
        "(Requester ID)\n"
        "[ 5.03] cxl_pci 0000:36:00.0:    [22] UncorrIntErr\n"
        "[ 5.2] pcieport 0000:34:02.0: AER: device recovery failed\n"
    )
    host, reports = cxl_host(tmp, PEER_POISON, kernel=text)

    def one_ticket(session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert [t.id for t in tickets_of(session, "dt-host-01")] == [ticket.id]
        assert "pcie_aer_uncorrected" in {e["kind"] for e in ticket.evidence["kernel_log"]}

    expect = Expect(
        "cxl-aer-link-unrecovered",
        "drain",
        title=r"CXL link of mem1 \(serial 0x5a17c0df, 0000:36:00\.0\) on dt-host-01: uncorrectable Received Poison "
        r"From Peer and uncorrected PCIe error on 0000:36:00\.0 not recovered \(UncorrIntErr\)",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=PCIE_RULES | {"cxl-aer-link", "cxl-aer-uncorrectable"},
        also=one_ticket,
    )
    return host, reports, expect


def _under_one_switch(host: SnapHost) -> None:
    """mem0 and mem1 below one root port through a switch: 0000:34:02.0 (root port) -> 0000:35:00.0 (upstream
    switch port) -> 0000:36:01.0 / 0000:36:02.0 (downstream ports) -> 0000:37:00.0 (mem0), 0000:38:00.0 (mem1)."""
    base = "/sys/devices/pci0000:34/0000:34:02.0/0000:35:00.0"
    links = {
        f"{DEVICES}/mem0": f"{base}/0000:36:01.0/0000:37:00.0/mem0",
        f"{DEVICES}/mem1": f"{base}/0000:36:02.0/0000:38:00.0/mem1",
    }
    (host.snap.directory / "realpaths.json").write_text(json.dumps(links))


@case(
    "S4: a fatal Surprise Down at root port 0000:34:02.0, then mem0 and mem1 below it both frozen: ONE drain "
    "and ticket of the port, leading with the port and its link, listing both devices",
    "cxl-device-down",
)
def cxl_port_fatal_both_frozen(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    install(host.snap, tables=False)
    _under_one_switch(host)
    first = host.cycle(0)
    host.kernel_log(
        "[ 5.0] pcieport 0000:34:00.0: AER: Uncorrected (Fatal) error received: 0000:34:02.0\n"
        "[ 5.01] pcieport 0000:34:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
        "(Receiver ID)\n"
        "[ 5.03] pcieport 0000:34:02.0:    [5] SDES (First)\n"
        "[ 5.1] cxl_pci 0000:37:00.0: mem0: frozen state error detected, disable CXL.mem\n"
        "[ 5.11] cxl_pci 0000:38:00.0: mem1: frozen state error detected, disable CXL.mem\n"
    )
    reports = [first, host.cycle(1)]

    def one_port_ticket(session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert [t.id for t in tickets_of(session, "dt-host-01")] == [ticket.id]
        candidates = ticket.evidence["part"]["candidates"]
        assert candidates[0].startswith("the port 0000:34:02.0 and its link"), candidates
        assert [c for c in candidates if c.startswith("below it:")] == [
            "below it: CXL memory mem0, serial 0x5a17c0de, 0000:37:00.0",
            "below it: CXL memory mem1, serial 0x5a17c0df, 0000:38:00.0",
        ]
        events = ticket.evidence["kernel_log"]
        assert sorted(e["kind"] for e in events) == ["cxl_mem_disabled", "cxl_mem_disabled", "pcie_aer_uncorrected"]
        assert {e["subject"] for e in events} == {"0000:34:02.0", "0000:37:00.0", "0000:38:00.0"}

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory below port 0000:34:02\.0 \(2 devices down: mem0, serial 0x5a17c0de, 0000:37:00\.0; "
        r"mem1, serial 0x5a17c0df, 0000:38:00\.0\) on dt-host-01: 2 devices down at once under one port, "
        r"CXL\.mem disabled \(frozen state error\)",
        part_type="cxl_memory",
        part="0000:34:02.0",
        never=PCIE_RULES,
        also=one_port_ticket,
    )
    return host, reports, expect


@case(
    "an uncorrectable AER on mem1 after `cxl disable-memdev`: a drain labelled 'no memory in use', not lost memory",
    "cxl-device-down",
)
def cxl_disabled_memdev_uncorrectable(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = (
        "[ 7.0] pcieport 0000:34:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:36:00.0\n"
        "[ 7.01] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Requester ID)\n"
        "[ 7.1] cxl_pci 0000:36:00.0: mem1: memdev disabled, abort error handling\n"
    )
    host, reports = cxl_host(tmp, tables=False, kernel=text)

    def not_lost(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        detail = ticket.evidence["signals"][0]["detail"]
        assert (detail["memory_lost"], detail["disabled_uncorrectable"]) == (False, True)

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem1.* on dt-host-01: uncorrectable PCIe error on a memdev already disabled \(no memory "
        r"in use\)",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=PCIE_RULES,
        also=not_lost,
    )
    return host, reports, expect


@case(
    "after a reboot a CXL device's first Memory Module record says All Data Lost (no Normal before it this boot): "
    "a service ticket, no drain",
    "cxl-health-service",
)
def cxl_health_data_lost_at_boot(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, ALL_DATA_LOST)
    expect = Expect(
        "cxl-health-service",
        "ticket",
        title=r"Service CXL memory mem1 \(serial 0x5a17c0df\) on dt-host-01: media All Data Lost before its memory "
        r"was in use this boot",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"cxl-health-data-lost"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "mem0 and mem1 under different root ports both frozen in one report: two faults, a drain and ticket for one "
    "and a ticket beside it for the other (a rule fired once, on its highest signal, and the other's events were "
    "consumed)",
    "cxl-device-down",
)
def cxl_two_devices_down_under_two_ports(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(
        tmp,
        tables=False,
        kernel="[ 5.1] cxl_pci 0000:35:00.0: mem0: frozen state error detected, disable CXL.mem\n"
        "[ 5.11] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n",
    )

    def both_ticketed(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert ticket is not None
        tickets = {t.part: t for t in tickets_of(session, "dt-host-01")}
        assert set(tickets) == {"0x5a17c0de", "0x5a17c0df"}, sorted(tickets)
        other = next(t for part, t in tickets.items() if part != ticket.part)
        assert other.remediation_id is None  # opened beside the drain of the first, not held behind it
        assert other.part_type == "cxl_memory"
        assert other.holds_host
        assert other.evidence["signal"]["kind"] == "cxl_device_down"

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem[01], serial .* on dt-host-01: CXL\.mem disabled",
        part_type="cxl_memory",
        never=PCIE_RULES,
        also=both_ticketed,
    )
    return host, reports, expect
