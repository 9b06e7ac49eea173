"""An NVMe drive is one part under two names: its PCIe function (the BDF the pcie-aer-* and pcie-link rules'
`pcie_device` tickets are keyed by) and its disk (the serial the SMART and NVMe rules' `disk` tickets are
keyed by). A detection of one name whose other name has an open ticket goes on that ticket, with this
name's evidence kept beside the ticket's own (`linked_parts`): one part to replace, one ticket. Before,
each kept its own ticket and only named the other (`related_part`), and a technician could be sent twice
for one drive (issue 16 leftovers).

The link is the report's: an NVMe disk's `pci_address` in the smart section (checker/collectors/smart.py,
from /sys/class/nvme/<controller>/device), read from the host's latest stored report. Only a ticket still
open for work takes it (open, claimed, in progress): one whose repair is resolved or being verified is
the other name's to reopen by its own rule, never by a detection of another name. A host whose report has
no such address (an older agent, SATA or SAS disks) links nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.parsers.pcie import normal_bdf
from remediator.evidence import part_evidence
from remediator.models import Host
from remediator.models import Report as ReportRow
from ticketing import opening, queries
from ticketing.schemas import TicketRequest

PCIE_PART_TYPES = frozenset({"pcie_device", "pcie"})
DISK_PART_TYPE = "disk"
WORKED_ON = ("open", "claimed", "in_progress")  # ticketing's states of a ticket nobody has resolved yet
EVIDENCE_KEPT = ("part", "smart", "counter_history", "kernel_log")


@dataclass(frozen=True)
class Linked:
    """The open ticket of the part's other name, and this name (part type, part) to keep on it."""

    ticket: Any  # a ticketing Ticket (its models are ticketing's own)
    part_type: str
    part: str

    @property
    def key(self) -> str:
        return f"{self.part_type}:{self.part}"


def _nvme_disks(observations: dict[str, Any]) -> list[dict[str, Any]]:
    disks = observations.get("disks") or []
    return [d for d in disks if isinstance(d, dict) and d.get("protocol") == "NVMe" and d.get("pci_address")]


def other_names(observations: dict[str, Any], part_types: frozenset[str], part: str) -> list[tuple[str, str]]:
    """The other names of this part, as (part type, part) a ticket may be keyed by: for a PCIe function, the
    NVMe disk behind it by serial and by device name (a disk is keyed by its serial, else its device:
    remediator.derive.disks); for an NVMe disk, its PCIe function."""
    found: list[tuple[str, str]] = []
    if part_types & PCIE_PART_TYPES:
        bdf = normal_bdf(part) or part
        for disk in _nvme_disks(observations):
            if disk.get("pci_address") == bdf:
                found += [(DISK_PART_TYPE, str(name)) for name in (disk.get("serial"), disk.get("device")) if name]
    if DISK_PART_TYPE in part_types and part:
        for disk in _nvme_disks(observations):
            if part in (disk.get("serial"), disk.get("device")):
                found.append(("pcie_device", str(disk["pci_address"])))
    return found


def _latest_observations(session: Session, host: Host) -> dict[str, Any]:
    body = session.scalars(
        select(ReportRow.body).where(ReportRow.host_id == host.id).order_by(ReportRow.captured_at.desc()).limit(1)
    ).first()
    return (body or {}).get("observations") or {} if isinstance(body, dict) else {}


def open_linked_ticket(
    session: Session, host: Host, part_types: frozenset[str], part: str, now: dt.datetime
) -> Linked | None:
    """The open ticket of this part's other name (module docstring), or None. Only for a PCIe function or a
    disk: one indexed read of the host's latest report, then of its tickets by part."""
    if not part or not part_types & (PCIE_PART_TYPES | {DISK_PART_TYPE}):
        return None
    for other_type, other_part in other_names(_latest_observations(session, host), part_types, part):
        types = {other_type} | (PCIE_PART_TYPES if other_type in PCIE_PART_TYPES else set())
        ticket = opening.ticket_for_detection(
            session, host.hostname, other_part, part_types=types, now=now, reopen_window=dt.timedelta(0)
        )
        if ticket is not None and ticket.state.value in WORKED_ON:
            part_type = "pcie_device" if part_types & PCIE_PART_TYPES else DISK_PART_TYPE
            return Linked(ticket=ticket, part_type=part_type, part=normal_bdf(part) or part)
    return None


def linked_evidence(session: Session, host: Host, linked: Linked, *, rule: str, reason: str) -> dict[str, Any]:
    """This name's evidence for the other name's ticket: what and where it is (its part, SMART section,
    counters and kernel lines), the rule that saw it."""
    bundle = part_evidence(session, host, linked.part_type, linked.part, reason=reason, rule=rule)
    return {
        "part_type": linked.part_type,
        "part": linked.part,
        "rule": rule,
        **{key: bundle[key] for key in EVIDENCE_KEPT if key in bundle},
    }


def heard_of(ticket: Any, linked: Linked) -> bool:
    """Whether the ticket already keeps this name's evidence: its first detection is news (counted even
    within the hour of the ticket's last detection), the later ones are the ticket's usual detections."""
    return linked.key in ((ticket.evidence or {}).get("linked_parts") or {})


def onto_linked_ticket(
    session: Session, host: Host, request: TicketRequest, *, rule: str, actor: str, now: dt.datetime
) -> Any | None:
    """A plan's ticket for one name of an NVMe drive whose other name has an open ticket: the request goes on
    that ticket as a detection with this name's evidence beside it, raising its priority and holding its host
    when the request asks (review r4, finding 3: the runner and a ticket opened beside a remediation never
    looked, so the drive's critical warning and its AER counters in one report opened two tickets). Returns
    the ticket, or None: no such ticket, open_ticket as usual. A request whose own key has its open ticket
    goes there (review r7, finding 8: an in-service PCIe ticket and a disk ticket both open, the function's
    pcie-aer-uncorrected went to the disk's and its own ticket never held the host)."""
    if queries.find_open(session, request.dedup_key) is not None:
        return None
    linked = open_linked_ticket(session, host, frozenset({request.part_type}), request.part, now)
    if linked is None:
        return None
    ticket, first = linked.ticket, not heard_of(linked.ticket, linked)
    evidence = None
    if first or opening.detection_due(ticket, now):
        evidence = (linked.key, linked_evidence(session, host, linked, rule=rule, reason=request.title))
    opening.note_detection(
        session,
        ticket,
        actor=actor,
        note=request.title,
        detail={"rule": rule, "remediation_id": request.remediation_id, "linked_part": linked.key},
        now=now,
        new_source=first,
        linked=evidence,
        priority=request.priority,
        title=None,  # another name's title (a PCIe function's on its disk's ticket) is added, not put in its place
        also=f"{rule}: {request.title}",
    )
    if request.holds_host and not ticket.holds_host:
        opening.hold_host(session, ticket, actor=actor, now=now)
    return ticket
