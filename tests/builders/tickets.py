"""A repair ticket made the way the service makes it: a CE storm on one DIMM through the real ingest path
and the remediation's steps, with the SEL entry, kernel-log line and dmidecode inventory a test gives."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from checker.schemas import DimmInventory, KernelEvent, KernelLogState, Report, SelEntry, SelState
from core.db import Database
from remediator import runner
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import RUNNABLE_REMEDIATION_STATES, Remediation
from tests.builders.reports import LABEL, dimm_inventory_labels, edac_report
from tests.builders.runtime import runtime_of


def field_report(
    hostname: str,
    *,
    at: dt.datetime,
    ce: int,
    sel_raw: str = "",
    kernel_line: str = "",
    event_text: str = "",
    dimms: list[DimmInventory] | None = None,
) -> Report:
    """An EDAC report with, optionally, a SEL entry and a kernel-log event about the DIMM, and the host's
    dmidecode inventory (default: edac_report's one DIMM)."""
    report = edac_report(hostname, at=at, ce=ce)
    if dimms is not None and report.observations.identity is not None:
        report.observations.identity.dimms = dimms
    if sel_raw or event_text:
        report.observations.sel = SelState(
            entries=[
                SelEntry(
                    record_id=7,
                    timestamp=at,
                    sensor_type="Memory",
                    sensor_name="DIMM_A1",
                    event=event_text or "Correctable ECC",
                    direction="asserted",
                    component=LABEL,
                    raw=sel_raw or "7 | Memory | Correctable ECC | Asserted",
                )
            ]
        )
    if kernel_line:
        report.observations.kernel_log = KernelLogState(
            source="kmsg",
            events=[KernelEvent(kind="edac_ce", seq=1, timestamp=at, subject=LABEL, count=1, lines=[kernel_line])],
        )
    return report


def open_dimm_ticket(
    db: Database,
    hostname: str = "web-001",
    *,
    datacenter: str = "ams1",
    rack: str = "ams1-r01",
    start: dt.datetime | None = None,
    sel_raw: str = "",
    kernel_line: str = "",
    hardware_class: str = "unknown",
    dimms: list[DimmInventory] | None = None,
) -> int:
    """A CE storm on one DIMM through the real ingest path and the remediation's steps: the ticket it opens."""
    start = start or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
    ruleset = runtime_of(db).remediator.rules.ruleset
    with db.session() as session:
        apply_inventory(
            session,
            [
                HostInventory(
                    hostname=hostname,
                    hardware_class=hardware_class,
                    datacenter=datacenter,
                    row="r01",
                    rack=rack,
                    slot="U12",
                    labels=dimm_inventory_labels(len(dimms) if dimms is not None else 1),
                )
            ],
            actor="test",
        )
    with db.session() as session:
        reports = [
            field_report(
                hostname,
                at=start + dt.timedelta(seconds=60 * i),
                ce=3000 * i,
                sel_raw=sel_raw if i == 2 else "",
                kernel_line=kernel_line if i == 2 else "",
                dimms=dimms,
            )
            for i in range(3)
        ]
        ingest(session, reports, ruleset=ruleset)
    with db.session() as session:
        remediation_ids = session.scalars(select(Remediation.id).order_by(Remediation.id.desc())).all()
        for remediation_id in remediation_ids:
            for _ in range(4):  # drain, then the ticket
                if runner.advance(session, remediation_id, ruleset=ruleset) not in RUNNABLE_REMEDIATION_STATES:
                    break
    from ticketing import service as tickets

    with db.session() as session:
        [ticket] = tickets.list_tickets(session, hostname=hostname)
        return ticket.id
