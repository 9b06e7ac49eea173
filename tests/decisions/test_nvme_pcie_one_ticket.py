"""An NVMe drive is one part under two names (issue 16 leftovers): its PCIe function's ticket (pcie-aer-*,
pcie-link-*) and its disk's ticket (SMART, NVMe rules) were two tickets that only named each other; now a
detection of one name whose other name has an open ticket goes on that ticket, with its own evidence beside
the ticket's (`linked_parts`). Both orders. The host is the corpus's real PCI tree (tests/decisions/cases_pcie:
a Micron NVMe at 0000:01:00.0 below root port 00:02.1) with the real Samsung 970 EVO's smartctl answer as
/dev/nvme0, whose controller's sysfs device resolves to that function."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.models import Decision
from tests.decisions.cases import SAMSUNG_NVME, nvme_log, smart_json
from tests.decisions.cases_os import realpaths
from tests.decisions.cases_pcie import NVME, correctable, pcie_host, set_files
from tests.decisions.harness import SnapHost, register, remediations, run, tickets_of, to_ticket

BDF = "0000:01:00.0"
SERIAL = "S466NX0M776250H"  # the sample's serial_number


def nvme_host(tmp: Path, *, critical_warning: int = 0, linked: bool = True) -> SnapHost:
    host = pcie_host(tmp)
    if linked:
        realpaths(host, {"/sys/class/nvme/nvme0/device": f"/sys/devices/{NVME}"})
    return drive(host, critical_warning)


def drive(host: SnapHost, critical_warning: int) -> SnapHost:
    return host.disks(
        {"/dev/nvme0": ("nvme", "NVMe", smart_json(SAMSUNG_NVME, nvme_log(critical_warning=critical_warning)))}
    )


def open_tickets(session: Session, host: SnapHost) -> list[tuple[str, str]]:
    for remediation in remediations(session, host.hostname):
        to_ticket(session, remediation)
    return [(t.part_type, t.part) for t in tickets_of(session, host.hostname) if t.state.value != "cancelled"]


def reasons(session: Session, rule: str) -> list[str]:
    return list(session.scalars(select(Decision.reason).where(Decision.rule_id == rule)).all())


def test_the_disk_s_ticket_first_then_its_pcie_function_s_errors(session: Session, tmp_path: Path) -> None:
    host = nvme_host(tmp_path, critical_warning=4)
    register(session, host)
    run(session, host, [host.cycle(0)])  # the AER counters' baseline; the drive's critical warning
    assert open_tickets(session, host) == [("disk", SERIAL)]
    set_files(host, NVME__aer_dev_correctable=correctable(150, 140))
    run(session, host, [host.cycle(10)])
    assert "pcie-aer-corrected" not in {r.rule_id for r in remediations(session, host.hostname)}
    assert open_tickets(session, host) == [("disk", SERIAL)]  # one part, one ticket
    (ticket,) = tickets_of(session, host.hostname)
    detected = [(d.get("rule"), d.get("linked_part")) for d in ticket.evidence["detections"]]
    assert ("pcie-aer-corrected", f"pcie_device:{BDF}") in detected
    pcie = ticket.evidence["linked_parts"][f"pcie_device:{BDF}"]
    assert (pcie["rule"], pcie["part"]["bdf"], pcie["part"]["device"]) == ("pcie-aer-corrected", BDF, "NVMe")
    assert pcie["part"]["related_part"]["serial"] == SERIAL
    assert ticket.evidence["part"]["pci_address"] == BDF  # the disk's own evidence names its function
    assert any("holds the same part as pcie_device:0000:01:00.0" in r for r in reasons(session, "pcie-aer-corrected"))


def test_the_pcie_function_s_ticket_first_then_its_disk_s_warning(session: Session, tmp_path: Path) -> None:
    host = nvme_host(tmp_path)
    register(session, host)
    run(session, host, [host.cycle(0)])
    set_files(host, NVME__aer_dev_correctable=correctable(150, 140))
    run(session, host, [host.cycle(10)])
    assert open_tickets(session, host) == [("pcie_device", BDF)]
    drive(host, critical_warning=4)
    run(session, host, [host.cycle(20)])
    assert "nvme-critical-warning" not in {r.rule_id for r in remediations(session, host.hostname)}
    assert open_tickets(session, host) == [("pcie_device", BDF)]
    (ticket,) = tickets_of(session, host.hostname)
    disk = ticket.evidence["linked_parts"][f"disk:{SERIAL}"]
    assert (disk["rule"], disk["part"]["serial"], disk["part"]["pci_address"]) == ("nvme-critical-warning", SERIAL, BDF)
    assert disk["smart"]["nvme_critical_warning"] == 4
    assert ticket.evidence["part"]["related_part"]["part_type"] == "disk"


def test_without_the_drive_s_pci_address_each_name_keeps_its_own_ticket(session: Session, tmp_path: Path) -> None:
    host = nvme_host(tmp_path, critical_warning=4, linked=False)  # sysfs did not say: nothing links them
    register(session, host)
    run(session, host, [host.cycle(0)])
    set_files(host, NVME__aer_dev_correctable=correctable(150, 140))
    run(session, host, [host.cycle(10)])
    assert sorted(open_tickets(session, host)) == [("disk", SERIAL), ("pcie_device", BDF)]
