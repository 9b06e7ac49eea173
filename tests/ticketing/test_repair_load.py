"""A resolved DIMM ticket is verified under load (remediator.repair_load): the storm goes through the real
ingest path to its ticket, the technician resolves it, the load test goes to the host as a signed envelope
and its result comes back through remediator.host_results, as a host's would. The ticket closes only after
a pass (or a gap, said on it) and the settle period; a fail reopens it with the findings."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import deadlines, host_results, repair_hold, repair_load, repairs, runner
from remediator.models import LOAD_TEST_RULE, Host, HostState, Remediation, RemediationState
from remediator.policies import held_by_a_stop
from tests.builders.remediations import result, sent_envelopes
from tests.builders.repairs import RULES, SETTLE, at, healthy, host_state, located, repaired, send, storm, ticketed
from ticketing import service as tickets
from ticketing.models import Ticket, TicketState
from ticketing.schemas import Replacement, Resolution, TicketOpen

pytestmark = pytest.mark.usefixtures("remediator_reacts")
SETTLED = 11 + SETTLE.total_seconds() / 60
GAP = "stressapptest is not installed: DIMM CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 is not verified under load"


def resolved(session: Session) -> tuple[Ticket, Remediation, dict[str, Any]]:
    """A CE storm's ticket, resolved at minute 10; its load test handed to the host (the envelope)."""
    ticket = ticketed(session)
    assert session.get_one(Host, _host_id(session)).drained_at is not None
    repaired(session, ticket, at(10))
    ticket = tickets.lock_ticket(session, ticket.id)
    assert ticket.state == TicketState.verifying
    run = session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).one()
    assert (run.state, run.evidence["ticket_id"]) == (RemediationState.planned, ticket.id)
    assert runner.advance(session, run.id, ruleset=RULES, now=at(10)) == RemediationState.running
    [envelope] = [e for e in sent_envelopes(session) if e["action"] == "verify_memory_under_load"]
    assert envelope["params"]["dimm"] == ticket.part
    assert envelope["params"]["seconds"] == 600
    # the drain of the remediation that ticketed it still holds the host: the run names it for the executor
    assert run.evidence["host_drain"]["remediation_id"] == run.id - 1
    assert envelope["timeout_s"] == 1200
    assert host_state(session) == HostState.awaiting_repair  # the run does not take the host from its ticket
    return ticket, run, envelope


def _host_id(session: Session) -> int:
    return session.scalars(select(Host.id).where(Host.hostname == "web-1")).one()


def load_events(ticket: Ticket) -> list[Any]:
    return [e for e in ticket.events if e.kind == "load_test"]


def test_a_pass_and_the_settle_period_close_the_ticket(session: Session, cyborg_installed: dict[str, Any]) -> None:
    ticket, run, envelope = resolved(session)
    send(session, *healthy("web-1", 11, SETTLED))
    assert repairs.settle_repairs(session, now=at(SETTLED)) == {"verifying": 0, "closed": 0, "reopened": 0}
    assert tickets.lock_ticket(session, ticket.id).state == TicketState.verifying  # no verdict yet: it waits

    found = {"verdict": "pass", "failures": [], "gaps": [], "dimm": envelope["params"]["dimm"]}
    found["stressapptest"] = {"status": "PASS", "seconds": 600, "memory_mb": 19660}
    found["stalls"] = {"max_ms": 2.5, "threshold_ms": 100.0}
    assert host_results.record_host_result(session, result(envelope, changed=found), RULES, at(SETTLED)) == "succeeded"
    assert run.state == RemediationState.succeeded
    [event] = load_events(tickets.lock_ticket(session, ticket.id))
    assert event.detail["verdict"] == "pass"
    assert event.detail["stall_max_ms"] == 2.5
    assert event.note.startswith("verified under load: DIMM CPU_SrcID#0_Ha#0_Chan#2_DIMM#0, stressapptest 600 s")

    assert repairs.settle_repairs(session, now=at(SETTLED + 1))["closed"] == 1
    ticket = tickets.lock_ticket(session, ticket.id)
    assert ticket.state == TicketState.closed
    assert ticket.events[-1].note.endswith("; verified under load")
    assert host_state(session) == HostState.in_service
    assert session.get_one(Host, _host_id(session)).drained_at is None  # the ticket's remediation's drain undone


def test_a_fail_reopens_the_ticket_with_the_findings(session: Session, cyborg_installed: dict[str, Any]) -> None:
    ticket, run, envelope = resolved(session)
    found = {
        "verdict": "fail",
        "failures": ["new EDAC errors during the run: mc0_ce +12"],
        "gaps": [],
        "dimm": envelope["params"]["dimm"],
        "edac_new": {"mc0_ce": 12},
        "kernel_log_new": ["EDAC MC0: 12 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"],
        "stalls": {"max_ms": 140.0, "threshold_ms": 100.0},
    }
    report = result(envelope, "failed", changed=found)
    assert host_results.record_host_result(session, report, RULES, at(20)) == "failed"
    assert run.state == RemediationState.failed
    ticket = tickets.lock_ticket(session, ticket.id)
    assert (ticket.state, ticket.reopened, ticket.assignee) == (TicketState.open, 1, None)
    [event] = load_events(ticket)
    assert (event.detail["verdict"], event.detail["edac_new"]) == ("fail", {"mc0_ce": 12})
    assert event.detail["dimm"] == "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"
    assert event.detail["stall_max_ms"] == 140.0
    reopened = ticket.events[-1]
    assert reopened.kind == "reopened"
    assert "verification under load failed" in reopened.note
    assert reopened.detail["kernel_log_new"]
    assert reopened.detail["repairs_returned"]
    assert host_state(session) == HostState.awaiting_repair  # still the technician's
    assert session.get_one(Host, _host_id(session)).drained_at is not None


def test_a_gap_is_said_on_the_ticket_which_closes_on_the_settle_alone(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    ticket, _run, envelope = resolved(session)
    report = result(envelope, "failed", error=f"verification gap: {GAP}", changed={"verdict": "gap", "gap": GAP})
    assert host_results.record_host_result(session, report, RULES, at(15)) == "failed"
    [event] = load_events(tickets.lock_ticket(session, ticket.id))
    assert event.detail["verdict"] == "gap"
    assert event.note.startswith(f"NOT verified under load: {GAP}")
    send(session, *healthy("web-1", 11, SETTLED))
    assert repairs.settle_repairs(session, now=at(SETTLED))["closed"] == 1
    closed = tickets.lock_ticket(session, ticket.id)
    assert closed.state == TicketState.closed
    assert "NOT verified under load" in closed.events[-1].note
    assert host_state(session) == HostState.in_service


def test_memory_bounded_by_the_cgroup_is_a_gap_not_a_pass(session: Session, cyborg_installed: dict[str, Any]) -> None:
    ticket, _run, envelope = resolved(session)
    bounded = "only 2048 MB of the 19660 MB asked for tested: the agent's cgroup caps it (MemoryMax= of its unit)"
    found = {"verdict": "pass", "failures": [], "gaps": [bounded]}
    host_results.record_host_result(session, result(envelope, changed=found), RULES, at(15))
    [event] = load_events(tickets.lock_ticket(session, ticket.id))
    assert event.detail["verdict"] == "gap"
    assert bounded in event.note


def test_a_host_that_never_starts_the_test_is_a_gap_at_its_deadline(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    ticket, run, _envelope = resolved(session)
    step = run.steps[0]
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, RULES, step.deadline + dt.timedelta(seconds=1)) == 1
    [event] = load_events(tickets.lock_ticket(session, ticket.id))
    assert event.detail["verdict"] == "gap"
    assert "never started verify_memory_under_load" in event.note
    assert host_state(session) == HostState.awaiting_repair  # no power cycle, no ticket of its own


def test_a_host_silent_under_load_fails_at_its_deadline(session: Session, cyborg_installed: dict[str, Any]) -> None:
    ticket, run, envelope = resolved(session)
    started = {k: envelope[k] for k in ("hostname", "remediation_id", "step")} | {"envelope_id": envelope["id"]}
    assert host_results.record_host_started(session, started, at(11)) == "started"
    step = run.steps[0]
    assert step.deadline is not None
    deadlines.check_deadlines(session, RULES, step.deadline + dt.timedelta(seconds=1))
    ticket = tickets.lock_ticket(session, ticket.id)
    assert ticket.state == TicketState.open
    assert "went silent under load" in load_events(ticket)[0].note


def test_an_operator_stopping_the_run_leaves_a_gap(session: Session, cyborg_installed: dict[str, Any]) -> None:
    ticket, run, _envelope = resolved(session)
    run.state = RemediationState.cancelled  # as remediator.stopping ends it; its step no longer counts
    send(session, *healthy("web-1", 11, SETTLED))
    assert repairs.settle_repairs(session, now=at(SETTLED))["closed"] == 1
    events = load_events(tickets.lock_ticket(session, ticket.id))
    assert events[0].detail["verdict"] == "gap"
    assert "ended cancelled with no verdict" in events[0].note


@pytest.mark.parametrize("part_type", ["disk", "psu"])
def test_other_parts_close_on_the_settle_alone(session: Session, part_type: str) -> None:
    located(session)
    send(session, *healthy("web-1", 0, 2, boot="boot-1"))
    ticket_id, _ = repairs.open_by_hand(
        session, TicketOpen(hostname="web-1", part_type=part_type, part="PSU1", title="replace it"), actor="user:op"
    )
    ticket = tickets.lock_ticket(session, ticket_id)
    tickets.claim(session, ticket, actor="user:alice", now=at(5))
    resolution = Resolution(replacements=[Replacement(old_serial="OLD1", new_serial="NEW1")], note="swapped")
    tickets.resolve(session, tickets.lock_ticket(session, ticket_id), resolution, actor="user:alice", now=at(10))
    assert session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).first() is None
    send(session, *healthy("web-1", 11, SETTLED, boot="boot-1"))
    assert repairs.settle_repairs(session, now=at(SETTLED))["closed"] == 1
    assert not load_events(tickets.lock_ticket(session, ticket_id))
    assert repair_load.wanted(tickets.lock_ticket(session, ticket_id).part_type) is False


def test_a_reopen_abandons_the_run_and_the_next_resolve_starts_its_own(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    ticket, run, envelope = resolved(session)
    assert send(session, *storm("web-1", 20, boot="boot-2")) == []  # the fault returned while verifying
    assert tickets.lock_ticket(session, ticket.id).state == TicketState.open
    assert run.state == RemediationState.cancelled
    assert run.steps[0].awaiting is not None  # handed to the host: it may still run there, so it holds the host
    late = result(envelope, changed={"verdict": "pass", "failures": [], "gaps": []})
    assert host_results.record_host_result(session, late, RULES, at(25)) == "late"  # it decides nothing now
    assert run.steps[0].awaiting is None
    repaired(session, ticket, at(30))
    runs = session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).all()
    assert [r.state for r in runs] == [RemediationState.cancelled, RemediationState.planned]
    assert not load_events(tickets.lock_ticket(session, ticket.id))


def test_a_host_nothing_drained_is_drained_for_the_run_and_undrained_at_the_close(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    located(session)
    send(session, *healthy("web-1", 0, 2, boot="boot-1"))
    request = TicketOpen(hostname="web-1", part_type="dimm", part="CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", title="pull it")
    ticket_id, _ = repairs.open_by_hand(session, request, actor="user:op")
    host = session.get_one(Host, _host_id(session))
    assert (host.state, host.drained_at) == (HostState.awaiting_repair, None)
    tickets.claim(session, tickets.lock_ticket(session, ticket_id), actor="user:alice", now=at(5))
    resolution = Resolution(replacements=[Replacement(old_serial="OLD1", new_serial="NEW1")], note="swapped")
    tickets.resolve(session, tickets.lock_ticket(session, ticket_id), resolution, actor="user:alice", now=at(10))
    run = session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).one()
    runner.advance(session, run.id, ruleset=RULES, now=at(10))
    assert "drain" in run.evidence
    assert host.drained_at == at(10)
    [envelope] = [e for e in sent_envelopes(session) if e["action"] == "verify_memory_under_load"]
    found = {"verdict": "pass", "failures": [], "gaps": []}
    host_results.record_host_result(session, result(envelope, changed=found), RULES, at(20))
    send(session, *healthy("web-1", 11, SETTLED, boot="boot-1"))
    assert repairs.settle_repairs(session, now=at(SETTLED))["closed"] == 1
    assert host.drained_at is None


def test_a_fail_on_another_dimm_names_it_on_the_ticket(session: Session, cyborg_installed: dict[str, Any]) -> None:
    """The driver's per-DIMM findings (cyborg/drivers/memtest.py) go into the load_test event, and a fail whose
    erring DIMMs do not include the one verified says so first."""
    ticket, _run, envelope = resolved(session)
    other = "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"
    found = {
        "verdict": "fail",
        "failures": [f"new EDAC errors during the run on {other} (mc0/dimm1) +4 CE", "not the DIMM verified"],
        "gaps": [],
        "dimm": envelope["params"]["dimm"],
        "edac_new": {"mc0_ce": 5},
        "dimms_erred": [{"label": other, "mc": 0, "entry": "dimm1", "location": "mc0/dimm1", "ce": 4, "ue": 0}],
        "edac_unplaced": {"mc0_ce_noinfo": 1},
        "dimm_erred": False,
        "coverage": {"tested_mb": 19660, "available_mb": 32768, "percent_of_available": 60.0, "min_percent": 50},
    }
    host_results.record_host_result(session, result(envelope, "failed", changed=found), RULES, at(20))
    ticket = tickets.lock_ticket(session, ticket.id)
    [event] = load_events(ticket)
    assert event.detail["dimms_erred"] == found["dimms_erred"]
    assert (event.detail["dimm_erred"], event.detail["edac_unplaced"]) == (False, {"mc0_ce_noinfo": 1})
    assert event.detail["coverage"]["percent_of_available"] == 60.0
    assert event.note.startswith(f"failed under load: DIMM {ticket.part}: another DIMM erred under load: {other}; ")
    assert ticket.state == TicketState.open


def _started(session: Session, envelope: dict[str, Any], minute: float, boot: str = "boot-1") -> None:
    notice = {k: envelope[k] for k in ("hostname", "remediation_id", "step")} | {"envelope_id": envelope["id"]}
    assert host_results.record_host_started(session, notice | {"boot_id": boot}, at(minute)) == "started"


@pytest.mark.parametrize("ends", ["result", "deadline"])
def test_a_cancel_while_the_test_runs_holds_the_host_until_the_run_ends(
    session: Session, cyborg_installed: dict[str, Any], ends: str
) -> None:
    ticket, run, envelope = resolved(session)
    _started(session, envelope, 11)
    tickets.cancel(session, tickets.lock_ticket(session, ticket.id), actor="user:op", reason="wrong DIMM", now=at(12))
    host = session.get_one(Host, _host_id(session))
    assert run.state == RemediationState.cancelled
    # stressapptest may still run there: not back in service, still drained, and held against new plans
    assert (host.state, host.drained_at is not None) == (HostState.awaiting_repair, True)
    assert repair_hold.in_flight(session, host)
    assert held_by_a_stop(session, host)
    step = run.steps[0]
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, RULES, at(13)) == 0  # its deadline is not due yet
    assert host.state == HostState.awaiting_repair
    if ends == "result":
        late = result(envelope, changed={"verdict": "pass", "failures": [], "gaps": []})
        assert host_results.record_host_result(session, late, RULES, at(20)) == "late"
    else:
        assert deadlines.check_deadlines(session, RULES, step.deadline + dt.timedelta(seconds=1)) == 1
    assert (host.state, host.drained_at) == (HostState.in_service, None)
    assert not repair_hold.in_flight(session, host)
    assert not load_events(tickets.lock_ticket(session, ticket.id))  # the abandoned run decided nothing


def test_a_cancel_before_the_hand_over_releases_the_host_at_once(session: Session) -> None:
    ticket = ticketed(session)
    repaired(session, ticket, at(10))  # the run is planned, not yet handed to the host
    tickets.cancel(session, tickets.lock_ticket(session, ticket.id), actor="user:op", reason="wrong DIMM", now=at(12))
    host = session.get_one(Host, _host_id(session))
    assert (host.state, host.drained_at) == (HostState.in_service, None)


@pytest.mark.parametrize(("boot", "verdict"), [("boot-2", "fail"), ("boot-1", "gap")])
def test_a_reboot_under_load_fails_and_a_lost_result_is_a_gap(
    session: Session, cyborg_installed: dict[str, Any], boot: str, verdict: str
) -> None:
    """The host panicked under load (a UE on the repaired DIMM) and came back reporting from another boot: a
    fail that reopens the ticket. Reporting on from the boot it started in, the result was lost: a gap."""
    ticket, run, envelope = resolved(session)
    _started(session, envelope, 11)
    send(session, *healthy("web-1", 12, 30, boot=boot))
    step = run.steps[0]
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, RULES, step.deadline + dt.timedelta(seconds=1)) == 1
    ticket = tickets.lock_ticket(session, ticket.id)
    [event] = load_events(ticket)
    assert event.detail["verdict"] == verdict
    if verdict == "fail":
        assert "host rebooted under load" in event.note
        assert "started in boot boot-1 and reports from boot boot-2" in event.note
        assert ticket.state == TicketState.open
    else:
        assert "though it kept reporting" in event.note
        assert ticket.state == TicketState.verifying
