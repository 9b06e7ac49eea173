"""A failing part never waits behind a host tweak: preemption, tickets beside an active remediation,
and the drain of a person's plan kept within the blast-radius caps."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import EdacState, Observations
from core.db import Database
from remediator import runner
from remediator.ingest import ingest
from remediator.models import Host, HostState, Remediation, RemediationState, StepState
from remediator.rules import Condition, PackSafety, Rule, RuleSafety, RuleSet, Step, load_ruleset
from tests.builders.remediations import decisions, hosts, remediation_of
from tests.builders.reports import LABEL, T0, edac_report
from tests.cyborg.fakes import Script, install_scripted
from ticketing.models import Ticket

DEFAULT = load_ruleset([])


def polling_report(hostname: str, at: dt.datetime, *, ce: int = 0) -> Any:
    """An EDAC report whose polling interval is the kernel's 1 s default (edac-polling-interval fires)."""
    report = edac_report(hostname, ce=ce, at=at)
    edac = report.observations.edac
    assert edac is not None
    # a driver whose poll adds up counters: the design's ~37 s applies to it
    controllers = [c.model_copy(update={"mc_name": "i7 core #0"}) for c in edac.controllers]
    report.observations = Observations(
        edac=EdacState(controllers=controllers, poll_msec=1000),
        identity=report.observations.identity,
    )
    return report


@pytest.fixture
def in_flight(db: Database) -> None:
    """Host actions are handed to the host and stay in flight (as cyborg's dispatch leaves them)."""
    handed_over: Script = lambda _order: None  # noqa: E731
    install_scripted(db, **dict.fromkeys(("tune_error_reporting", "reboot", "reflash_firmware"), handed_over))


def test_a_dimm_storm_gets_its_ticket_while_a_polling_tweak_is_in_flight(session: Session, in_flight: None) -> None:
    """The outside review's case: 30 CE/s on one DIMM was held behind edac-polling-interval."""
    hosts(session, 1)
    ingest(session, [polling_report("h0", T0)], ruleset=DEFAULT)
    tweak = remediation_of(session, "h0")
    assert tweak.rule_id == "edac-polling-interval"
    runner.advance(session, tweak.id, ruleset=DEFAULT, now=T0)
    assert tweak.steps[0].state == StepState.running  # on the host, not back yet
    for minute in (1, 2):
        ingest(session, [polling_report("h0", T0 + dt.timedelta(minutes=minute), ce=1800 * minute)], ruleset=DEFAULT)
    ticket = session.scalars(select(Ticket).where(Ticket.hostname == "h0")).one()
    assert ticket.part == LABEL
    assert ticket.part_type == "dimm"
    assert ticket.remediation_id is None  # opened beside the tweak, which is still active
    assert tweak.state == RemediationState.running
    _outcome, reason = next(d for d in decisions(session, "h0") if d[0] == "ticketed")
    assert reason.startswith(f"ticket {ticket.id}: ticket opened beside remediation {tweak.id} (edac-polling-interval")
    assert "in flight" in reason
    assert ticket.evidence["signal"]["kind"] == "dimm_ce_rate"


def test_a_higher_priority_plan_preempts_one_that_has_not_started(session: Session) -> None:
    hosts(session, 2)
    ingest(session, [polling_report("h0", T0)], ruleset=DEFAULT)
    tweak = remediation_of(session, "h0")
    tweak.state = RemediationState.detected  # still waiting for a gate: nothing ran
    session.flush()
    for minute in (1, 2):
        ingest(session, [polling_report("h0", T0 + dt.timedelta(minutes=minute), ce=1800 * minute)], ruleset=DEFAULT)
    assert tweak.state == RemediationState.cancelled
    assert all(s.state == StepState.skipped for s in tweak.steps)
    storm = remediation_of(session, "h0")
    assert storm.rule_id == "dimm-ce-storm"
    assert "preempts remediation" in storm.reason
    preempted = [d for d in decisions(session, "h0") if d[0] == "preempted"]
    assert preempted
    assert preempted[0][1].startswith("preempted by dimm-ce-storm: preempts remediation")


def two_rules(low_plan: list[str], high_plan: list[str], *, high_priority: int = 1) -> RuleSet:
    """`low` fires on a moderate CE rate, `high` on a storm of the same DIMM."""
    no_wait = RuleSafety(cooldown=0, settle=3600)
    low = Rule(
        id="low",
        description="low",
        when=Condition(signal="dimm_ce_rate", value=0.01, below=10),
        plan=[Step(action=a) for a in low_plan],
        priority=4,
        safety=no_wait,
    )
    high = Rule(
        id="high",
        description="high",
        when=Condition(signal="dimm_ce_rate", value=10),
        plan=[Step(action=a, params={"part_type": "dimm"} if a == "ticket" else {}) for a in high_plan],
        priority=high_priority,
        safety=no_wait,
    )
    return RuleSet(rules=[low, high], safety=PackSafety(spacing=0))


def moderate_then_storm(session: Session, rs: RuleSet, hostname: str = "h0") -> None:
    ingest(session, [edac_report(hostname, ce=0, at=T0)], ruleset=rs)
    ingest(session, [edac_report(hostname, ce=60, at=T0 + dt.timedelta(minutes=1))], ruleset=rs)


def storm(session: Session, rs: RuleSet, hostname: str = "h0") -> None:
    ingest(session, [edac_report(hostname, ce=6000, at=T0 + dt.timedelta(minutes=2))], ruleset=rs)


def test_a_started_disruptive_step_is_not_preempted_and_a_host_plan_waits(session: Session) -> None:
    rs = two_rules(["reboot"], ["reimage"])
    hosts(session, 1)
    moderate_then_storm(session, rs)
    low = remediation_of(session, "h0")
    low.steps[0].state = StepState.succeeded  # the reboot ran: verifying now
    low.state = RemediationState.verifying
    session.flush()
    storm(session, rs)
    assert low.state == RemediationState.verifying
    assert remediation_of(session, "h0").id == low.id
    held = [r for o, r in decisions(session, "h0") if o == "held"]
    assert held == [f"remediation {low.id} (low, priority 4) is active (it has started reboot (step 0))"]


def test_equal_priority_does_not_preempt(session: Session) -> None:
    rs = two_rules(["tune_error_reporting"], ["reboot"], high_priority=4)
    hosts(session, 1)
    moderate_then_storm(session, rs)
    low = remediation_of(session, "h0")
    storm(session, rs)
    assert low.state in (RemediationState.planned, RemediationState.detected)
    assert remediation_of(session, "h0").id == low.id


def test_a_ticket_opens_for_a_host_that_awaits_another_repair(session: Session) -> None:
    rs = two_rules(["tune_error_reporting"], ["ticket"])
    hosts(session, 1)
    ingest(session, [edac_report("h0", ce=0, at=T0)], ruleset=rs)
    host = session.scalars(select(Host).where(Host.hostname == "h0")).one()
    host.state = HostState.awaiting_repair  # a disk ticket holds it
    session.flush()
    ingest(session, [edac_report("h0", ce=60, at=T0 + dt.timedelta(minutes=1))], ruleset=rs)
    assert session.scalars(select(Remediation)).all() == []  # the tweak waits for the repair
    storm(session, rs)
    ticket = session.scalars(select(Ticket).where(Ticket.hostname == "h0")).one()
    assert (ticket.part_type, ticket.part) == ("dimm", LABEL)
    assert ("held", "host is awaiting_repair") in decisions(session, "h0")


def test_a_ticket_plan_is_not_held_by_the_cooldown(session: Session) -> None:
    rs = load_ruleset([])
    hosts(session, 1)
    ingest(session, [edac_report("h0", ce=0, at=T0)], ruleset=rs)
    host = session.scalars(select(Host).where(Host.hostname == "h0")).one()
    finished = Remediation(
        host_id=host.id,
        rule_id="edac-polling-interval",
        state=RemediationState.succeeded,
        finished_at=T0,
        created_at=T0 - dt.timedelta(minutes=5),
    )
    session.add(finished)
    session.flush()
    for minute in (1, 2):
        ingest(session, [edac_report("h0", ce=1800 * minute, at=T0 + dt.timedelta(minutes=minute))], ruleset=rs)
    storm_plan = remediation_of(session, "h0")
    assert storm_plan.rule_id == "dimm-ce-storm"
    assert storm_plan.state == RemediationState.planned, storm_plan.held_reason


def test_the_drain_of_a_dimm_storm_stays_within_the_rack_cap(session: Session) -> None:
    """Two hosts of one rack storm at once: the first is drained, the second gets its ticket at once but
    stays in service, because a second drained host would exceed the rack cap of 1."""
    rs = load_ruleset([])
    hosts(session, 2)
    for name in ("h0", "h1"):
        ingest(session, [edac_report(name, ce=0, at=T0)], ruleset=rs)
    for minute in (1, 2):
        at = T0 + dt.timedelta(minutes=minute)
        ingest(session, [edac_report(name, ce=1800 * minute, at=at) for name in ("h0", "h1")], ruleset=rs)
    first, second = remediation_of(session, "h0"), remediation_of(session, "h1")
    assert [s.action for s in first.steps] == ["drain", "ticket"]
    assert first.state == RemediationState.planned
    assert first.disruptive
    for remediation in (first, second):
        for _ in remediation.steps:
            runner.advance(session, remediation.id, ruleset=rs, now=T0 + dt.timedelta(minutes=3))
    h0, h1 = (session.scalars(select(Host).where(Host.hostname == n)).one() for n in ("h0", "h1"))
    assert h0.drained_at is not None
    assert h1.drained_at is None
    assert second.steps[0].state == StepState.skipped
    assert second.steps[0].result["skipped"].startswith("not drained: rack cap reached (1 of 1 hosts out)")
    assert second.state == first.state == RemediationState.escalated  # both tickets are open
    tickets = session.scalars(select(Ticket).order_by(Ticket.hostname)).all()
    assert [t.hostname for t in tickets] == ["h0", "h1"]


def test_a_drained_host_waiting_for_repair_counts_against_the_caps(session: Session) -> None:
    rs = load_ruleset([])
    hosts(session, 2)
    drained = session.scalars(select(Host).where(Host.hostname == "h0")).one()
    drained.drained_at, drained.state = T0, HostState.awaiting_repair
    session.flush()
    from remediator import safety

    other = session.scalars(select(Host).where(Host.hostname == "h1")).one()
    assert safety.caps(session, other, rs.safety) == "rack cap reached (1 of 1 hosts out)"
    assert safety.caps(session, drained, rs.safety) is None  # its own drain takes nothing more


def test_two_rules_on_one_part_open_one_ticket(session: Session) -> None:
    """A DIMM's storm fires dimm-ce-storm and, with its kernel's storm line, cmci-storm: one ticket."""
    same = RuleSet(
        rules=[
            Rule(
                id=name,
                description=name,
                when=Condition(signal="dimm_ce_rate", value=10),
                plan=[Step(action="drain"), Step(action="ticket", params={"part_type": "dimm"})],
                priority=2,
            )
            for name in ("first", "second")
        ],
        safety=PackSafety(spacing=0),
    )
    hosts(session, 1)
    ingest(session, [edac_report("h0", ce=0, at=T0)], ruleset=same)
    ingest(session, [edac_report("h0", ce=6000, at=T0 + dt.timedelta(minutes=1))], ruleset=same)
    assert [r.rule_id for r in session.scalars(select(Remediation))] == ["first"]
    assert session.scalars(select(Ticket)).all() == []  # the remediation opens it, not a second one beside
    held = [reason for outcome, reason in decisions(session, "h0") if outcome == "held"]
    first = remediation_of(session, "h0")
    assert held == [f"remediation {first.id} (first, priority 2) opens the ticket for {LABEL}"]
