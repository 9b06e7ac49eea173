"""Memory pages (rules page-ce-soft-offline, dimm-offlined-pages), registered into tests/decisions/cases.py's CASES.

The rows are rasdaemon mc_event rows (ras-record.c's columns) carrying the real corrected error of
kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log: EDAC MC0, CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel 2
slot 0), page 0x849923 offset 0x380, grain 32 bytes (rasdaemon's `grain` holds grain_bits, 5). The
repetitions, their times and the other pages are ours: the corpus has one such line, not a day of them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from cyborg.actions import ACTIONS as CYBORG_ACTIONS
from cyborg.central.issuing import resolve_params
from remediator.models import Host, Remediation, RemediationState, RemediationStep, Signal, StepState
from tests.decisions.cases import case
from tests.decisions.harness import T0, Expect, SnapHost
from ticketing.models import Ticket

LABEL = "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"
PAGE = 0x849923000
OFFSET = 0x380
MC_INSERT = (
    "INSERT INTO mc_event (id, timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer,"
    " lower_layer, address, grain, syndrome, driver_detail) VALUES (?, ?, 1, ?, 'memory read error', ?, 0, 2, 0,"
    " -1, ?, 5, 0, 'area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0')"
)


def stamp(minute: float) -> str:
    return (T0 + dt.timedelta(minutes=minute)).strftime("%Y-%m-%d %H:%M:%S +0000")


class Rows:
    """The host's rasdaemon database, filled as errors arrive."""

    def __init__(self, host: SnapHost) -> None:
        self.host = host
        self.next_id = 1
        self.host.snap.rasdaemon().close()

    def add(self, minute: float, address: int = PAGE + OFFSET, err_type: str = "Corrected", count: int = 1) -> None:
        conn = self.host.snap.rasdaemon()
        rows = [(self.next_id + i, stamp(minute), err_type, LABEL, address) for i in range(count)]
        conn.executemany(MC_INSERT, rows)
        conn.commit()
        conn.close()
        self.next_id += count


@case(
    "one page of a DIMM correcting ten errors within a day, the rest of the DIMM quiet: that page soft-offlined",
    "page-ce-soft-offline",
)
def page_soft_offline(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    for hour in range(6, 0, -1):  # six errors over the morning, before the agent first looked
        rows.add(-60 * hour)
    reports = [host.cycle(0)]
    for minute in (20, 40, 60, 80):
        rows.add(minute - 5)
        reports.append(host.cycle(minute))

    def offlines_the_page(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.subject == f"0x{PAGE:x}"
        params = resolve_params(CYBORG_ACTIONS["soft_offline_page"], remediation.steps[0].params, remediation.evidence)
        assert params == {"address": "0x849923000", "max_offlined_pages": 64}
        detail = remediation.evidence["signal"]["detail"]
        assert (detail["dimm"], detail["count_24h"], detail["page_certain"]) == (LABEL, 10, True)

    return (
        host,
        reports,
        Expect(
            "page-ce-soft-offline",
            "soft_offline_page",
            never=frozenset({"dimm-ce-ppr", "mce-memory-corrected"}),
            also=offlines_the_page,
        ),
    )


@case("corrected errors spread over many pages of a DIMM: no page offlined (the DIMM rules' case)", None)
def spread_over_pages(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    rows.add(-300, count=11)  # one page past the threshold ...
    for n in range(1, 16):  # ... but more errors on fifteen others of the same DIMM
        rows.add(-290 + n, address=PAGE + 0x10000 * n + OFFSET, count=2)
    reports = [host.cycle(0)]
    rows.add(5)
    reports.append(host.cycle(10))
    return host, reports, Expect(None, never=frozenset({"page-ce-soft-offline"}))


@case(
    "uncorrected errors on one page: not soft-offlined by us (the kernel hard-offlines it), the DIMM goes",
    "dimm-uncorrectable",
)
def uncorrected_page(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports = [host.cycle(0)]
    rows.add(5, err_type="Uncorrected", count=12)
    reports.append(host.cycle(10))
    return (
        host,
        reports,
        Expect(
            "dimm-uncorrectable",
            "drain",
            never=frozenset({"page-ce-soft-offline"}),
            never_actions=frozenset({"soft_offline_page"}),
        ),
    )


def offlined_earlier(host: SnapHost, boot_id: str, pages: list[int]) -> None:
    """The host soft-offlined these pages of the DIMM earlier in this boot (succeeded steps, as results say)."""

    def add(session: Session) -> None:
        host_id = session.scalar(select(Host.id).where(Host.hostname == host.hostname))
        for n, page in enumerate(pages):
            at = T0 - dt.timedelta(hours=len(pages) - n)
            detail = {"dimm": LABEL, "page": f"0x{page:x}", "mc": 0, "label": LABEL, "top_layer": 2, "middle_layer": 0}
            remediation = Remediation(
                host_id=host_id,
                rule_id="page-ce-soft-offline",
                state=RemediationState.succeeded,
                active=None,
                subject=f"0x{page:x}",
                reason="page corrected errors",
                evidence={
                    "signal": {"kind": "page_ce_count", "subject": f"0x{page:x}", "value": 10.0, "detail": detail}
                },
                finished_at=at,
            )
            remediation.steps.append(
                RemediationStep(
                    index=0,
                    action="soft_offline_page",
                    state=StepState.succeeded,
                    finished_at=at,
                    result={
                        "outcome": "succeeded",
                        "boot_id_before": boot_id,
                        "changed": {"address": f"0x{page:x}", "offlined": True, "already_offlined": False},
                    },
                )
            )
            session.add(remediation)
        session.flush()

    host.setup.append(add)


@case(
    "three pages of one DIMM soft-offlined this boot and a fourth erring: a ticket for the DIMM",
    "dimm-offlined-pages",
)
def dimm_many_pages(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports = [host.cycle(0)]
    rows.add(5, address=PAGE + 0x40000 + OFFSET, count=3)
    reports.append(host.cycle(10))
    boot_id = reports[0].host.boot_id
    assert boot_id is not None
    offlined_earlier(host, boot_id, [PAGE, PAGE + 0x10000, PAGE + 0x20000])

    def no_fourth_offline(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        hostname = Host.hostname == host.hostname
        pages = session.scalars(
            select(Remediation.subject)
            .join(Host, Host.id == Remediation.host_id)
            .where(hostname, Remediation.rule_id == "page-ce-soft-offline")
        ).all()
        assert len(pages) == 3  # the earlier three; the fourth page has 3 errors, below the page rule's 10
        assert ticket is not None
        assert ticket.evidence["part"]["locator"] == "P1-DIMMC1"

    return (
        host,
        reports,
        Expect(
            "dimm-offlined-pages",
            "ticket",
            title=f"DIMM {LABEL} on dt-host-01: 3 pages soft-offlined this boot",
            part_type="dimm",
            serial="45402C24",  # P1-DIMMC1: EDAC 0.2.0 by the x9drt-lab label map
            also=no_fourth_offline,
        ),
    )


@case("pages offlined in an earlier boot are back in use and not the DIMM's count", "page-ce-soft-offline")
def pages_of_an_earlier_boot(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports = [host.cycle(0)]
    rows.add(5, address=PAGE + 0x40000 + OFFSET, count=3)
    reports.append(host.cycle(10))
    earlier = [PAGE, PAGE + 0x10000, PAGE + 0x20000]
    offlined_earlier(host, "a-boot-before-the-dimm-was-replaced", earlier)

    def only_the_earlier_offlines(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        hostname = Host.hostname == host.hostname
        planned = session.scalars(
            select(Remediation.subject).join(Host, Host.id == Remediation.host_id).where(hostname)
        )
        assert sorted(planned) == [f"0x{page:x}" for page in earlier]  # the page with 3 errors is below 10
        kinds = session.scalars(select(Signal.kind).join(Host, Host.id == Signal.host_id).where(hostname)).all()
        assert "page_ce_count" in kinds
        assert "dimm_offlined_pages" not in kinds

    return (
        host,
        reports,
        Expect(
            "page-ce-soft-offline",  # the three of the earlier boot, inserted
            never=frozenset({"dimm-offlined-pages"}),
            also=only_the_earlier_offlines,
        ),
    )
