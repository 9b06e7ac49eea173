"""The loop, in-process: report -> ingest -> signals -> rule -> remediation -> ticket.

Runs on PostgreSQL and SQLite inside a rolled-back transaction. The Celery
wiring is proven with real workers in test_workers.py.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.dispatch import pending_tasks
from core.models import AuditEntry
from remediator import ingest, payloads, runner
from remediator.models import Host, HostState, Remediation, RemediationState, Signal
from remediator.models import Report as ReportRow
from remediator.rules import load_ruleset
from tests.builders.reports import LABEL, T0, edac_report, payload, storm_reports
from ticketing.models import Ticket, TicketState

RULES = load_ruleset([])


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_first_report_registers_the_host_and_is_stored_once(session: Session) -> None:
    report = edac_report("new-host", ce=5)
    result = ingest.ingest(session, [report], ruleset=RULES)
    assert result.accepted == [report.report_id]
    again = ingest.ingest(session, [report], ruleset=RULES)
    assert again.duplicates == [report.report_id]
    assert again.accepted == []
    assert session.scalar(select(func.count()).select_from(ReportRow)) == 1
    host = session.scalars(select(Host).where(Host.hostname == "new-host")).one()
    assert host.last_report_at == T0


def test_ce_storm_plans_a_remediation_that_opens_a_dimm_ticket(session: Session) -> None:
    ingest.ingest(session, [edac_report(ce=100, at=at(0))], ruleset=RULES)
    first = ingest.ingest(session, [edac_report(ce=100 + 60 * 40, at=at(60))], ruleset=RULES)
    assert first.remediations == []  # one report at 40 CE/s is not yet sustained (for: 30s)
    result = ingest.ingest(session, [edac_report(ce=100 + 120 * 40, at=at(120))], ruleset=RULES)
    [remediation_id] = result.remediations
    rates = session.scalars(select(Signal.value).where(Signal.kind == "dimm_ce_rate")).all()
    assert rates == [40.0, 40.0]
    assert session.scalars(select(Signal.subject).where(Signal.kind == "dimm_ce_rate")).first() == LABEL
    [pending] = pending_tasks(session)
    assert pending.task == "remediator.run_remediation"
    assert pending.args == (remediation_id,) or list(pending.args) == [remediation_id]
    session.commit()

    assert runner.advance(session, remediation_id, ruleset=RULES) == RemediationState.running  # drained first
    assert runner.advance(session, remediation_id, ruleset=RULES) == RemediationState.escalated
    remediation = session.get_one(Remediation, remediation_id)
    assert remediation.active is None
    ticket = session.scalars(select(Ticket)).one()
    assert ticket.part_type == "dimm"
    assert ticket.part == LABEL
    assert ticket.priority == 2
    assert "40.0 CE/s" in ticket.title
    assert ticket.state == TicketState.open
    evidence = ticket.evidence
    # No label map for the host's class: the one DIMM the bank locator fits is a candidate, not a certainty.
    assert (evidence["part"]["certain"], evidence["part"]["serial"]) == (False, None)
    assert [c["serial"] for c in evidence["part"]["candidates"]] == ["1A2B3C4D"]
    assert evidence["signals"][0]["value"] == 40.0
    host = session.get_one(Host, remediation.host_id)
    assert host.state == HostState.awaiting_repair
    actions = set(session.scalars(select(AuditEntry.action)))
    assert {"remediator.remediation.planned", "remediator.remediation.escalated", "ticketing.ticket.opened"} <= actions


def test_advance_twice_does_not_open_a_second_ticket(session: Session) -> None:
    [rid] = ingest.ingest(session, storm_reports(), ruleset=RULES).remediations
    runner.advance(session, rid, ruleset=RULES)
    assert runner.advance(session, rid, ruleset=RULES) == RemediationState.escalated  # a redelivered task
    assert session.scalar(select(func.count()).select_from(Ticket)) == 1


def test_host_awaiting_repair_is_not_remediated_again(session: Session) -> None:
    [rid] = ingest.ingest(session, storm_reports(), ruleset=RULES).remediations
    runner.advance(session, rid, ruleset=RULES)
    later = ingest.ingest(session, [edac_report(ce=20000, at=at(180))], ruleset=RULES)
    assert later.remediations == []
    assert session.scalar(select(func.count()).select_from(Remediation)) == 1


def test_moderate_rate_fires_nothing(session: Session) -> None:
    ingest.ingest(session, [edac_report(ce=0, at=at(0))], ruleset=RULES)
    result = ingest.ingest(session, [edac_report(ce=60, at=at(60))], ruleset=RULES)
    assert result.remediations == []


def test_uncorrectable_error_opens_priority_one_ticket(session: Session) -> None:
    [rid] = ingest.ingest(session, [edac_report(ue=1, at=at(0))], ruleset=RULES).remediations
    remediation = session.get_one(Remediation, rid)
    assert [s.action for s in remediation.steps] == ["drain", "ticket"]
    runner.advance(session, rid, ruleset=RULES)  # drain: no hook configured for this cluster
    assert remediation.steps[0].result == {"skipped": "no drain hook configured for cluster (none)"}
    runner.advance(session, rid, ruleset=RULES)
    ticket = session.scalars(select(Ticket)).one()
    assert ticket.priority == 1
    assert "uncorrectable" in ticket.title


def test_malformed_reports_are_refused_by_field_and_the_rest_stored(session: Session) -> None:
    good = payload(edac_report("good-1"))
    missing_host = payload(edac_report("bad-1"))
    del missing_host["host"]
    negative = payload(edac_report("bad-2"))
    negative["observations"]["edac"]["controllers"][0]["dimms"][0]["ce_count"] = -3
    reports, refused = payloads.parse_reports([missing_host, good, negative, "not a report"])
    assert [r.host.hostname for r in reports] == ["good-1"]
    assert [r.index for r in refused] == [0, 2, 3]
    assert refused[0].errors == ["host: Field required"]
    assert refused[1].errors[0].startswith("observations.edac.controllers.0.dimms.0.ce_count:")
    result = ingest.ingest(session, reports, ruleset=RULES)
    assert len(result.accepted) == 1


def test_rollback_drops_the_tasks_it_would_have_sent(session: Session) -> None:
    ingest.ingest(session, storm_reports(), ruleset=RULES)
    assert len(pending_tasks(session)) == 1
    session.rollback()
    assert pending_tasks(session) == []


def test_second_dimm_ticket_on_same_part_adds_a_detection(session: Session) -> None:
    from ticketing import service as tickets
    from ticketing.schemas import TicketRequest

    request = TicketRequest(hostname="h1", part_type="dimm", part="A1", title="Replace A1")
    first, created = tickets.open_ticket(session, request, actor="test")
    second, created_again = tickets.open_ticket(session, request, actor="test")
    assert created
    assert not created_again
    assert first.id == second.id
    assert second.detections == 2
    assert [e.kind for e in second.events] == ["opened", "detected_again"]
