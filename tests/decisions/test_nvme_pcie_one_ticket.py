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
from ticketing import opening
from ticketing.schemas import TicketRequest

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


def test_the_drive_s_warning_raises_its_function_s_ticket(session: Session, tmp_path: Path) -> None:
    """Review r4, finding 2: a drive to replace (nvme-critical-warning, priority 2) added to its function's
    corrected-errors ticket (priority 4) left that ticket at 4 with its 'PCIe corrected errors' title."""
    host = nvme_host(tmp_path)
    register(session, host)
    run(session, host, [host.cycle(0)])
    set_files(host, NVME__aer_dev_correctable=correctable(150, 140))
    run(session, host, [host.cycle(10)])
    assert open_tickets(session, host) == [("pcie_device", BDF)]
    ((ticket_id, priority),) = [(t.id, t.priority) for t in tickets_of(session, host.hostname)]
    assert priority == 4
    drive(host, critical_warning=4)
    run(session, host, [host.cycle(20)])
    assert open_tickets(session, host) == [("pcie_device", BDF)]
    (ticket,) = tickets_of(session, host.hostname)
    assert (ticket.id, ticket.priority) == (ticket_id, 2)
    # the drive's title is another part type's (its disk's): added to the function's, not put in its place
    # (review r7, finding 2)
    assert ticket.title.startswith("PCIe corrected errors")
    assert f"; also: nvme-critical-warning: Replace NVMe {SERIAL}: critical warning 4" in ticket.title
    (raised,) = [e for e in ticket.events if e.detail.get("previous_priority") == 4]
    assert raised.detail["previous_title"].startswith("PCIe corrected errors")  # what it was stays on record
    # a less urgent detection later never lowers it
    set_files(host, NVME__aer_dev_correctable=correctable(400, 390))
    run(session, host, [host.cycle(90)])
    assert tickets_of(session, host.hostname)[0].priority == 2


def test_the_drive_s_warning_and_its_function_s_errors_in_one_report_are_one_ticket(
    session: Session, tmp_path: Path
) -> None:
    """Review r4, finding 3: both names firing in one report opened two tickets (the function's beside the
    drive's remediation, the drive's by the runner), neither looking for the other; they then stayed split."""
    host = nvme_host(tmp_path)
    register(session, host)
    run(session, host, [host.cycle(0)])
    set_files(host, NVME__aer_dev_correctable=correctable(150, 140))
    drive(host, critical_warning=4)
    run(session, host, [host.cycle(10)])
    (only,) = open_tickets(session, host)
    (ticket,) = tickets_of(session, host.hostname)
    assert (ticket.priority, ticket.holds_host) == (2, True)  # the drive's: replace it, the host held
    other = f"disk:{SERIAL}" if only == ("pcie_device", BDF) else f"pcie_device:{BDF}"
    assert other in ticket.evidence["linked_parts"]
    set_files(host, NVME__aer_dev_correctable=correctable(300, 290))
    run(session, host, [host.cycle(20)])
    assert open_tickets(session, host) == [only]  # and stays one


def test_an_in_service_function_ticket_takes_the_drive_that_holds_the_host(session: Session, tmp_path: Path) -> None:
    """Review r4, finding 3: a function's ticket that leaves the host in service (pcie-aer-uncorrected-in-service,
    pcie-link-downtrained) let a rule that holds the host plan a second ticket of its own. The plan still runs
    (route_detection leaves it to planning), its ticket step goes to the function's ticket and holds the host."""
    host = nvme_host(tmp_path)
    register(session, host)
    run(session, host, [host.cycle(0)])
    request = TicketRequest(
        hostname=host.hostname,
        part_type="pcie_device",
        part=BDF,
        title=f"PCIe link of {BDF} downtrained",
        priority=4,
        holds_host=False,
    )
    in_service, _created = opening.open_ticket(session, request, actor="test")
    drive(host, critical_warning=4)
    run(session, host, [host.cycle(10)])
    assert open_tickets(session, host) == [("pcie_device", BDF)]
    session.refresh(in_service)
    assert (in_service.priority, in_service.holds_host) == (2, True)
    assert f"disk:{SERIAL}" in in_service.evidence["linked_parts"]


def test_a_name_with_its_own_open_ticket_goes_there_not_to_its_other_name_s(session: Session, tmp_path: Path) -> None:
    """Review r7, finding 8: both names had open tickets (the disk's in service, the function's holding the
    host); the runner looked up the linked ticket before the request's own, so the drive's critical warning
    went to the function's ticket and the disk's own ticket never took its priority or the hold."""
    host = nvme_host(tmp_path)
    register(session, host)
    run(session, host, [host.cycle(0)])

    def by_hand(part_type: str, part: str, title: str, priority: int, holds: bool) -> int:
        request = TicketRequest(
            hostname=host.hostname, part_type=part_type, part=part, title=title, priority=priority, holds_host=holds
        )
        ticket, _created = opening.open_ticket(session, request, actor="test")
        return int(ticket.id)

    disk_id = by_hand("disk", SERIAL, f"NVMe {SERIAL} media errors", 4, False)
    pcie_id = by_hand("pcie_device", BDF, f"PCIe errors on {BDF}", 3, True)
    drive(host, critical_warning=4)
    run(session, host, [host.cycle(10)])
    open_tickets(session, host)
    tickets = {t.id: t for t in tickets_of(session, host.hostname)}
    assert (tickets[disk_id].priority, tickets[disk_id].holds_host) == (2, True)
    assert tickets[pcie_id].priority == 3  # the other name's ticket is not the request's
    assert f"disk:{SERIAL}" not in (tickets[pcie_id].evidence.get("linked_parts") or {})


def _pci_address(host: SnapHost) -> str | None:
    report = host.cycle(0)
    (disk,) = [d for d in report.observations.disks or [] if d.protocol == "NVMe"]
    return disk.pci_address


def test_a_namespace_links_to_the_controller_it_sits_on_and_only_with_the_drive_s_serial(tmp_path: Path) -> None:
    """Review r4, finding 9: the link took a namespace's number for its controller's (native multipath: nvme0n1
    can sit on controller nvme1) and never compared serials, so a drive could share a ticket with another
    drive's PCIe function."""
    same = nvme_host(tmp_path / "same")
    same.file("/sys/class/nvme/nvme0/serial", f"{SERIAL}\n")
    assert _pci_address(same) == BDF  # the controller's serial is the drive's: linked
    other = nvme_host(tmp_path / "other")
    other.file("/sys/class/nvme/nvme0/serial", "S4EWNX0R123456\n")  # another drive behind nvme0
    assert _pci_address(other) is None
    # a namespace on controller nvme1: nvme1's function, not nvme0's
    namespace = pcie_host(tmp_path / "namespace")
    realpaths(
        namespace,
        {
            "/sys/block/nvme0n1/device": "/sys/devices/pci0000:00/0000:00:02.1/0000:01:00.0/nvme/nvme1",
            "/sys/class/nvme/nvme1/device": f"/sys/devices/{NVME}",
            "/sys/class/nvme/nvme0/device": "/sys/devices/pci0000:00/0000:00:03.1/0000:02:00.0",
        },
    )
    namespace.disks({"/dev/nvme0n1": ("nvme", "NVMe", smart_json(SAMSUNG_NVME, nvme_log(critical_warning=0)))})
    assert _pci_address(namespace) == BDF
    # a namespace of a multipath subsystem: no one controller, no link
    shared = pcie_host(tmp_path / "shared")
    realpaths(shared, {"/sys/block/nvme0n1/device": "/sys/devices/virtual/nvme-subsystem/nvme-subsys0"})
    shared.disks({"/dev/nvme0n1": ("nvme", "NVMe", smart_json(SAMSUNG_NVME, nvme_log(critical_warning=0)))})
    assert _pci_address(shared) is None
