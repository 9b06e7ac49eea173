"""A verification the host could not run (verify_memory_under_load without stressapptest) is a gap: the
step fails, the remediation keeps the gap in its evidence, and the ticket its escalation opens lists it.
Driven through the runner and the host's result as it arrives (remediator.host_results)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import host_results, runner
from remediator.models import Remediation, StepState
from tests.builders.remediations import plan, remediation_of, result, sent_envelopes
from tests.builders.reports import T0
from ticketing.models import Ticket

GAP = "stressapptest is not installed: DIMM DIMM_A1 is not verified under load (install the package stressapptest)"


def test_a_missing_tool_fails_the_step_and_the_ticket_carries_the_gap(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    rs, remediation = plan(session, ["verify_memory_under_load"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    assert envelope["action"] == "verify_memory_under_load"
    report = result(
        envelope, "failed", error=f"verification gap: {GAP}", changed={"verdict": "gap", "gap": GAP, "dimm": "DIMM_A1"}
    )
    assert host_results.record_host_result(session, report, rs, T0) == "failed"
    step = remediation.steps[0]
    assert step.state == StepState.failed
    assert step.result["changed"]["gap"] == GAP
    assert remediation.evidence["gaps"] == [{"step": 0, "action": "verify_memory_under_load", "gap": GAP}]

    escalated = remediation_of(session, "h0")
    assert escalated.id != remediation.id
    runner.advance(session, escalated.id, ruleset=rs, now=T0)
    ticket = session.scalars(select(Ticket).where(Ticket.hostname == "h0")).one()
    assert ticket.evidence["gaps"] == [f"verify_memory_under_load: {GAP}"]
    [attempt] = [a for a in ticket.evidence["remediations"] if a["id"] == remediation.id]
    assert attempt["steps"][0]["result"]["error"] == f"verification gap: {GAP}"


def test_a_passing_verification_records_no_gap(session: Session, cyborg_installed: dict[str, Any]) -> None:
    rs, remediation = plan(session, ["verify_memory_under_load"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    report = result(envelope, changed={"verdict": "pass", "failures": [], "gaps": []})
    assert host_results.record_host_result(session, report, rs, T0) == "succeeded"
    assert "gaps" not in (session.get_one(Remediation, remediation.id).evidence or {})


def test_a_fail_under_load_is_summed_up_on_the_ticket(session: Session, cyborg_installed: dict[str, Any]) -> None:
    """The ticket's evidence says at its top which DIMMs erred under load (`load_tests`), beside the gaps."""
    rs, remediation = plan(session, ["verify_memory_under_load"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    erred = {"label": "DIMM_B1", "mc": 0, "entry": "dimm1", "location": "mc0/dimm1", "ce": 4, "ue": 0}
    found = {
        "verdict": "fail",
        "failures": ["new EDAC errors during the run on DIMM_B1 (mc0/dimm1) +4 CE"],
        "gaps": [],
        "dimm": "DIMM_A1",
        "dimms_erred": [erred],
        "dimm_erred": False,
        "coverage": {"percent_of_available": 61.2},
    }
    assert host_results.record_host_result(session, result(envelope, "failed", changed=found), rs, T0) == "failed"
    escalated = remediation_of(session, "h0")
    runner.advance(session, escalated.id, ruleset=rs, now=T0)
    ticket = session.scalars(select(Ticket).where(Ticket.hostname == "h0")).one()
    assert "gaps" not in ticket.evidence
    assert ticket.evidence["load_tests"] == [
        {
            "remediation_id": remediation.id,
            "verdict": "fail",
            "dimm": "DIMM_A1",
            "dimms_erred": ["DIMM_B1"],
            "dimm_erred": False,
            "percent_tested": 61.2,
        }
    ]
