"""Memory pages after the review (rules page-ce-soft-offline, dimm-offlined-pages): a second page is its own
weak cell, not the first one's fault coming back; page offlines neither hold other rules nor count for the
flap guard; an offlined page counts again only from its offline; the escalation's title says what may have
happened; and the negative cases (a grain above a page, an AMD record, a RAS_CEC host). Registered into
tests/decisions/cases.py's CASES.

The rows are tests/decisions/cases_pages.py's (the real sb_edac corrected error of
kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log, repeated, its times and the other pages ours); the AMD
machine-check row is the Ice Lake record of tests/builders/rasdaemon.py with an AMD vendor and no bank name,
as a rasdaemon built without bank names stores an SMCA UMC error (ours: the corpus has no such row). The
RAS_CEC line is cec.c's pr_info with the "RAS: " prefix of drivers/ras (ours, in the kernel's wording).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator import planning
from remediator.models import (
    Decision,
    Host,
    Remediation,
    RemediationState,
    RemediationStep,
    Signal,
    StepState,
)
from tests.builders.rasdaemon import icelake_row
from tests.decisions.cases import case
from tests.decisions.cases_pages import LABEL, OFFSET, PAGE, Rows, offlined_earlier, stamp
from tests.decisions.harness import RULES, T0, Expect, SnapHost, remediations, run, to_ticket
from ticketing.models import Ticket

RULE = "page-ce-soft-offline"
SECOND = PAGE + 0x10000
THIRD = PAGE + 0x20000
ESCALATION_TITLE = r"not offlined, or still correcting afterwards: see the step"
GRAIN_INSERT = (
    "INSERT INTO mc_event (id, timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer,"
    " lower_layer, address, grain, syndrome, driver_detail) VALUES (?, ?, 1, 'Corrected', 'memory read error', ?,"
    " 0, 2, 0, -1, ?, ?, 0, '')"
)
AMD_MCE_INSERT = (
    "INSERT INTO mce_record (id, timestamp, mcgcap, mcgstatus, status, addr, misc, tsc, walltime, cpu, cpuid, apicid,"
    " socketid, bank, cpuvendor, bank_name, error_msg, mcgstatus_msg, mcistatus_msg, mc_location)"
    " VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 2, ?, ?, '', ?, ?)"
)


def page_of(host: SnapHost, subject: int) -> Callable[[Session], list[Remediation]]:
    def found(session: Session) -> list[Remediation]:
        return [r for r in remediations(session, host.hostname) if r.subject == f"0x{subject:x}"]

    return found


def first_report_and_boot(host: SnapHost, rows: Rows, address: int, before: int) -> tuple[list[Report], str]:
    """`before` errors on the page over the morning, then the agent's first report (its boot id)."""
    for n in range(before):
        rows.add(-300 + 10 * n, address=address + OFFSET)
    reports = [host.cycle(0)]
    boot_id = reports[0].host.boot_id
    assert boot_id is not None
    return reports, boot_id


@case("a second page erring after the first was offlined is offlined too: not the first's fault returning", RULE)
def second_page(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports, boot_id = first_report_and_boot(host, rows, SECOND, 6)
    offlined_earlier(host, boot_id, [PAGE])
    rows.add(5, address=SECOND + OFFSET, count=4)
    reports.append(host.cycle(10))

    def offlines_the_second(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        (second,) = page_of(host, SECOND)(session)
        assert (second.rung, [s.action for s in second.steps]) == (0, ["soft_offline_page"]), second.reason
        assert "fault returned" not in second.reason

    return host, reports, Expect(RULE, "soft_offline_page", also=offlines_the_second)


def settling(host: SnapHost, boot_id: str) -> None:
    """The first page's offline succeeded ten minutes ago and settles for its hour."""

    def add(session: Session) -> None:
        host_id = session.scalar(select(Host.id).where(Host.hostname == host.hostname))
        at = T0 - dt.timedelta(minutes=10)
        detail = {"dimm": LABEL, "page": f"0x{PAGE:x}", "mc": 0, "label": LABEL, "top_layer": 2, "middle_layer": 0}
        remediation = Remediation(
            host_id=host_id,
            rule_id=RULE,
            state=RemediationState.verifying,
            subject=f"0x{PAGE:x}",
            reason="page corrected errors",
            evidence={"signal": {"kind": "page_ce_count", "subject": f"0x{PAGE:x}", "value": 10.0, "detail": detail}},
            settle_until=at + dt.timedelta(hours=1),
            created_at=at - dt.timedelta(minutes=1),
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
                    "changed": {"address": f"0x{PAGE:x}", "offlined": True, "already_offlined": False},
                },
            )
        )
        session.add(remediation)
        session.flush()

    host.setup.append(add)


@case("a second page erring while the first settles waits for it: the first is not escalated in its name", RULE)
def second_page_while_settling(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports, boot_id = first_report_and_boot(host, rows, SECOND, 6)
    settling(host, boot_id)
    rows.add(5, address=SECOND + OFFSET, count=4)
    reports.append(host.cycle(10))

    def first_still_settles(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        (first,) = page_of(host, PAGE)(session)
        assert first.state == RemediationState.verifying, first.reason
        assert page_of(host, SECOND)(session) == []  # held until the first settles, then planned
        held = session.scalars(
            select(Decision.reason).join(Host, Host.id == Decision.host_id).where(Decision.outcome == "held")
        ).all()
        assert any("is active" in reason for reason in held), held

    return host, reports, Expect(RULE, never_actions=frozenset({"ticket"}), also=first_still_settles)


def unrelated_fix(host: SnapHost) -> None:
    """A CPU core taken offline two days ago: one remediation of the host within the flap window."""

    def add(session: Session) -> None:
        host_id = session.scalar(select(Host.id).where(Host.hostname == host.hostname))
        at = T0 - dt.timedelta(days=2)
        remediation = Remediation(
            host_id=host_id,
            rule_id="mce-cpu-core-corrected",
            state=RemediationState.succeeded,
            subject="cpu5",
            reason="core corrected errors",
            created_at=at,
            finished_at=at + dt.timedelta(minutes=5),
        )
        remediation.steps.append(
            RemediationStep(index=0, action="offline_cpu", state=StepState.succeeded, started_at=at, finished_at=at)
        )
        session.add(remediation)
        session.flush()

    host.setup.append(add)


@case("one unrelated fix this week and two pages offlined: the third page is offlined, not a flap ticket", RULE)
def third_page_past_an_unrelated_fix(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports, boot_id = first_report_and_boot(host, rows, THIRD, 6)
    unrelated_fix(host)
    offlined_earlier(host, boot_id, [PAGE, SECOND])
    rows.add(5, address=THIRD + OFFSET, count=4)
    reports.append(host.cycle(10))

    def offlines_the_third(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        (third,) = page_of(host, THIRD)(session)
        assert [s.action for s in third.steps] == ["soft_offline_page"], third.reason
        assert "flapping" not in third.reason

    return (
        host,
        reports,
        Expect(RULE, "soft_offline_page", never_actions=frozenset({"ticket"}), also=offlines_the_third),
    )


def fail_the_offline(why: str) -> Callable[[Session, SnapHost], None]:
    """The host answers that the step failed: the runner escalates it (runner.run_step's StepFailed)."""

    def then(session: Session, host: SnapHost) -> None:
        (planned,) = page_of(host, PAGE)(session)
        step = planned.steps[0]
        step.state, step.finished_at, step.result = StepState.failed, T0 + dt.timedelta(minutes=81), {"error": why}
        planning.escalate(session, planned, f"step 0 (soft_offline_page) failed: {why}", RULES, T0)
        session.flush()

    return then


@case("the page's offline refused at the cap of poisoned pages: the ticket says not offlined, or still erring", RULE)
def offline_refused(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports, _ = first_report_and_boot(host, rows, PAGE, 6)
    rows.add(5, count=4)
    reports.append(host.cycle(10))

    def says_see_the_step(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        (first, escalation) = sorted(page_of(host, PAGE)(session), key=lambda r: r.id)
        assert first.steps[0].action == "soft_offline_page"
        assert (first.state, escalation.rung) == (RemediationState.failed, 1)
        opened = to_ticket(session, escalation)
        assert opened is not None
        assert ESCALATION_TITLE in opened.title, opened.title
        assert "still corrects errors after its soft offline" not in opened.title

    refused = "refused: dt-host-01 has 64 poisoned pages already, the cap is 64"
    return host, reports, Expect(RULE, also=says_see_the_step, then=fail_the_offline(refused))


def page_signal_values(session: Session, host: SnapHost, subject: int) -> list[float]:
    query = (
        select(Signal.value)
        .join(Host, Host.id == Signal.host_id)
        .where(Host.hostname == host.hostname, Signal.kind == "page_ce_count", Signal.subject == f"0x{subject:x}")
    )
    return list(session.scalars(query))


@case("a patrol scrubber's hit on a page offlined an hour ago: counted from the offline, nothing fires", RULE)
def scrubber_hit_after_offline(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports, boot_id = first_report_and_boot(host, rows, PAGE, 10)  # the ten that had it offlined
    offlined_earlier(host, boot_id, [PAGE])
    rows.add(5)  # the scrubber reads the poisoned cell once
    reports.append(host.cycle(10))

    def only_the_offline(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert [r.rung for r in page_of(host, PAGE)(session)] == [0]  # the inserted offline, no escalation
        assert page_signal_values(session, host, PAGE)[-1:] in ([], [1.0])

    return host, reports, Expect(RULE, never_actions=frozenset({"ticket"}), also=only_the_offline)


@case("ten new errors on a page after its offline: the page's own fault returned, its ticket opens", RULE)
def ten_new_after_offline(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    reports, boot_id = first_report_and_boot(host, rows, PAGE, 10)
    offlined_earlier(host, boot_id, [PAGE])
    rows.add(5, count=10)
    reports.append(host.cycle(10))

    def escalates(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        escalation = next(r for r in page_of(host, PAGE)(session) if r.rung == 1)
        assert "fault returned" in escalation.reason
        opened = to_ticket(session, escalation)
        assert opened is not None
        assert ESCALATION_TITLE in opened.title, opened.title

    return host, reports, Expect(RULE, also=escalates)


@case("ten errors on one page with a grain of 16 KiB: the page is not certain, nothing offlined", None)
def grain_above_a_page(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.rasdaemon().close()
    reports = [host.cycle(0)]
    conn = host.snap.rasdaemon()
    conn.executemany(GRAIN_INSERT, [(n, stamp(n), LABEL, PAGE + OFFSET, 14) for n in range(1, 13)])
    conn.commit()
    conn.close()
    reports.append(host.cycle(15))
    return host, reports, Expect(None, never=frozenset({RULE}))


def amd_row(row_id: int, minute: float) -> tuple[object, ...]:
    fields = list(icelake_row(row_id))
    fields[1] = stamp(minute)
    fields[13] = ""  # bank_name: none
    fields[14] = "Corrected error, no action required."  # error_msg without the bank's words
    return tuple(fields)


@case("an AMD machine check naming no UMC bank, ten on one page: a normalised address, nothing offlined", None)
def amd_record_without_bank_name(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.rasdaemon().close()
    reports = [host.cycle(0)]
    conn = host.snap.rasdaemon()
    conn.executemany(AMD_MCE_INSERT, [amd_row(n, n) for n in range(1, 13)])
    conn.commit()
    conn.close()
    reports.append(host.cycle(15))
    return host, reports, Expect(None, never=frozenset({RULE}))


@case("a host running the kernel's CE collector (RAS_CEC): its errors never reach rasdaemon, nothing fires", None)
def ras_cec_host(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.snap.rasdaemon().close()
    host.kernel_log("[    1.234567] RAS: Correctable Errors collector initialized.\n")
    reports = [host.cycle(0), host.cycle(30)]
    return host, reports, Expect(None, never=frozenset({RULE, "dimm-offlined-pages"}))


@case("three pages of a DIMM offlined, its ticket open, a fourth page erring: added to that ticket, no second", None)
def one_dimm_one_ticket(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    rows = Rows(host)
    fourth = PAGE + 0x40000
    reports, boot_id = first_report_and_boot(host, rows, fourth, 6)
    offlined_earlier(host, boot_id, [PAGE, SECOND, THIRD])

    def fourth_page_later(session: Session, host: SnapHost) -> None:
        (dimm,) = [r for r in remediations(session, host.hostname) if r.rule_id == "dimm-offlined-pages"]
        ticket = to_ticket(session, dimm)
        assert ticket is not None
        assert (ticket.part_type, ticket.part) == ("dimm", LABEL)
        rows.add(15, address=fourth + OFFSET, count=4)  # ten on the fourth page now
        run(session, host, [host.cycle(20)])
        found = session.scalars(select(Ticket).where(Ticket.hostname == host.hostname)).all()
        assert [t.id for t in found] == [ticket.id], [(t.part, t.title) for t in found]
        assert page_of(host, fourth)(session) == []  # its DIMM is a person's now: the detection went to the ticket
        reasons = session.scalars(select(Decision.reason).where(Decision.rule_id == RULE)).all()
        assert any(f"ticket {ticket.id}" in reason for reason in reasons), reasons

    return host, reports, Expect("dimm-offlined-pages", "ticket", then=fourth_page_later)
