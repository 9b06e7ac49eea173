"""One file on purpose: each safety gate is driven through the same rule, ruleset and firing helpers
(tests/builders/remediations.py), in the order a remediation meets them.

Safety gates and the remediation state machine, driven by reports."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import Database
from core.models import AuditEntry
from remediator import planning, runner
from remediator.decisions import finish
from remediator.ingest import ingest
from remediator.models import (
    Control,
    Host,
    HostState,
    MaintenanceWindow,
    Remediation,
    RemediationState,
    RuleMode,
    RuleState,
    StepState,
)
from remediator.rules import Breaker, Condition, PackSafety, Rule, RuleSafety, RuleSet, Step
from tests.builders.remediations import decisions, fire, hosts, remediation_of, rule, ruleset
from tests.builders.reports import T0, edac_report
from tests.builders.runtime import wired
from ticketing.models import Ticket


@pytest.fixture
def executors(db: Database) -> dict[str, Any]:
    """Actions that succeed at once, as a simulated host would (a worker installs cyborg's real executor)."""
    from tests.cyborg.fakes import install_scripted

    done = {name: (lambda *_: {"ok": True}) for name in ("reboot", "hard_ppr", "reimage", "tune_error_reporting")}
    return install_scripted(db, **done).scripts


def test_rack_cap_holds_the_second_disruptive_remediation(session: Session) -> None:
    rs = ruleset(rule(["reboot"]))
    hosts(session, 2)
    fire(session, "h0", rs)
    fire(session, "h1", rs)
    assert remediation_of(session, "h0").state == RemediationState.planned
    second = remediation_of(session, "h1")
    assert second.state == RemediationState.detected
    assert second.held_reason == "rack cap reached (1 of 1 hosts out)"
    assert ("held", "rack cap reached (1 of 1 hosts out)") in decisions(session, "h1")
    first = remediation_of(session, "h0")
    finish(session, first, RemediationState.succeeded, "done", T0)
    assert planning.admit(session, second, rs, T0 + dt.timedelta(minutes=5)) is True
    assert second.state == RemediationState.planned


def test_non_disruptive_plans_are_not_capped(session: Session) -> None:
    rs = ruleset(rule(["tune_error_reporting"], breaker=Breaker(max_percent=100)))
    hosts(session, 3)
    for name in ("h0", "h1", "h2"):
        fire(session, name, rs)
    assert {remediation_of(session, n).state for n in ("h0", "h1", "h2")} == {RemediationState.planned}


def test_percentage_cap_of_a_datacenter(session: Session) -> None:
    rs = ruleset(rule(["reboot"], breaker=Breaker(max_percent=100)), caps={"datacenter": "10%"})
    for rack in range(4):
        hosts(session, 5, rack=f"r{rack}", prefix=f"h{rack}-")
    for rack in range(4):
        fire(session, f"h{rack}-0", rs)
    states = [remediation_of(session, f"h{rack}-0").state for rack in range(4)]
    assert states.count(RemediationState.planned) == 2  # 10% of 20 hosts
    held = remediation_of(session, "h2-0")
    assert held.held_reason == "datacenter cap reached (2 of 2 hosts out)"


def test_spacing_between_starts_in_a_rack(session: Session) -> None:
    rs = ruleset(rule(["reboot"]), caps={"rack": 5}, spacing="10m")
    hosts(session, 2)
    fire(session, "h0", rs)
    fire(session, "h1", rs, at=T0 + dt.timedelta(minutes=2))
    assert remediation_of(session, "h1").held_reason.startswith("spacing:")


def test_breaker_opens_and_later_firings_are_skipped(session: Session) -> None:
    rs = ruleset(rule(["tune_error_reporting"], breaker=Breaker(max_hosts=3, max_percent=100)))
    hosts(session, 6)
    for i in range(6):
        fire(session, f"h{i}", rs)
    planned = session.scalars(select(Remediation)).all()
    assert len(planned) == 3
    state = session.get_one(RuleState, "test-rule")
    assert state.breaker_open
    assert "fired on 4 hosts" in state.breaker_reason
    assert decisions(session, "h3")[-1][0] == "skipped"
    assert decisions(session, "h5")[-1] == ("skipped", f"breaker open: {state.breaker_reason}")
    assert session.scalars(select(AuditEntry).where(AuditEntry.action == "remediator.rule.breaker_opened")).one()


def test_shadow_and_paused_rules_run_nothing(session: Session) -> None:
    shadow = ruleset(rule(["reboot"]).model_copy(update={"mode": "shadow"}))
    hosts(session, 2)
    assert fire(session, "h0", shadow) == []
    assert decisions(session, "h0") == [
        ("shadow", "would plan reboot: test-rule: dimm_ce_rate 100 on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0")
    ]
    session.add(RuleState(rule_id="test-rule", mode=RuleMode.paused))
    assert fire(session, "h1", ruleset(rule(["reboot"]))) == []
    assert decisions(session, "h1") == [("skipped", "rule paused")]
    assert session.scalars(select(Remediation)).all() == []


def test_global_pause_and_maintenance_hold(session: Session) -> None:
    rs = ruleset(rule(["tune_error_reporting"]))
    hosts(session, 2)
    session.add(Control(key="global_pause", value={"paused": True, "reason": "bad rollout"}, updated_by="alice"))
    fire(session, "h0", rs)
    assert remediation_of(session, "h0").held_reason == "global pause by alice: bad rollout"
    session.get_one(Control, "global_pause").value = {"paused": False}
    session.add(
        MaintenanceWindow(scope="rack", value="r1", starts_at=T0, ends_at=T0 + dt.timedelta(hours=2), reason="PDU")
    )
    fire(session, "h1", rs)
    held = remediation_of(session, "h1")
    assert held.held_reason.startswith("maintenance window on rack r1 until")
    assert planning.admit(session, held, rs, T0 + dt.timedelta(hours=3)) is True


def test_destructive_plan_waits_for_approval(session: Session) -> None:
    rs = ruleset(rule(["reimage"]))
    hosts(session, 1)
    fire(session, "h0", rs)
    waiting = remediation_of(session, "h0")
    assert waiting.state == RemediationState.awaiting_approval
    # The wait is on the audit log too (what Slack's approval alert is made from).
    from core.models import AuditEntry

    [entry] = session.scalars(
        select(AuditEntry).where(AuditEntry.action == "remediator.remediation.awaiting_approval")
    ).all()
    assert (entry.object_id, entry.reason) == (str(waiting.id), waiting.held_reason)
    planning.approve(session, waiting.id, actor="user:bob", ruleset=rs, now=T0 + dt.timedelta(minutes=2))
    assert waiting.state == RemediationState.planned
    assert waiting.approved_by == "user:bob"


def test_failed_step_escalates_down_the_ladder_to_a_ticket(session: Session) -> None:
    rs = ruleset(rule(["reboot"], escalation=[["hard_ppr"]]))  # no executors registered: every action fails
    hosts(session, 1)
    [first_id] = fire(session, "h0", rs)
    runner.advance(session, first_id, ruleset=rs, now=T0)
    first = session.get_one(Remediation, first_id)
    assert first.state == RemediationState.failed
    second = remediation_of(session, "h0")
    assert (second.rung, second.previous_id, second.steps[0].action) == (1, first_id, "hard_ppr")
    runner.advance(session, second.id, ruleset=rs, now=T0)
    last = remediation_of(session, "h0")
    assert (last.rung, last.steps[0].action) == (2, "ticket")
    runner.advance(session, last.id, ruleset=rs, now=T0)
    assert last.state == RemediationState.escalated
    assert session.scalars(select(Ticket)).one().remediation_id == last.id


def test_success_needs_the_settle_period_and_a_returning_fault_escalates(
    session: Session, executors: dict[str, Any]
) -> None:
    rs = ruleset(rule(["reboot"], escalation=[["reimage"]], settle="30m"))
    hosts(session, 1)
    [rid] = fire(session, "h0", rs)
    runner.advance(session, rid, ruleset=rs, now=T0)  # the reboot
    assert runner.advance(session, rid, ruleset=rs, now=T0) == RemediationState.verifying
    remediation = session.get_one(Remediation, rid)
    assert runner.settle_if_due(session, remediation, T0 + dt.timedelta(minutes=10)) == RemediationState.verifying
    # the same fault during the settle period: the fix did not hold
    ingest(session, [edac_report("h0", ce=9000, at=T0 + dt.timedelta(minutes=5))], ruleset=rs)
    assert remediation.state == RemediationState.failed
    nxt = remediation_of(session, "h0")
    assert (nxt.rung, nxt.state) == (1, RemediationState.awaiting_approval)  # reimage needs approval


def test_settled_success_then_fault_returning_reopens_on_the_next_rung(
    session: Session, executors: dict[str, Any]
) -> None:
    rs = ruleset(rule(["reboot"], escalation=[["hard_ppr"]], settle="10m"))
    hosts(session, 1)
    [rid] = fire(session, "h0", rs)
    runner.advance(session, rid, ruleset=rs, now=T0)
    runner.advance(session, rid, ruleset=rs, now=T0)
    remediation = session.get_one(Remediation, rid)
    assert runner.settle_if_due(session, remediation, T0 + dt.timedelta(minutes=11)) == RemediationState.succeeded
    host = session.get_one(Host, remediation.host_id)
    assert host.state == HostState.in_service
    fire(session, "h0", rs, at=T0 + dt.timedelta(days=2))
    reopened = remediation_of(session, "h0")
    assert (reopened.rung, reopened.previous_id) == (1, rid)
    assert "fault returned after remediation" in reopened.reason


def test_cooldown_holds_a_new_remediation_of_a_recently_fixed_host(session: Session, executors: dict[str, Any]) -> None:
    other = Rule(
        id="other",
        description="d",
        when=Condition(signal="dimm_ue", value=1),
        plan=[Step(action="reboot")],
        safety=RuleSafety(cooldown="1d", settle=0),
    )
    rs = RuleSet(rules=[rule(["reboot"]), other], safety=PackSafety(spacing=0))
    hosts(session, 1)
    [rid] = fire(session, "h0", rs)
    runner.advance(session, rid, ruleset=rs, now=T0)
    runner.advance(session, rid, ruleset=rs, now=T0)
    assert session.get_one(Remediation, rid).state == RemediationState.succeeded
    ingest(session, [edac_report("h0", ce=6000, ue=1, at=T0 + dt.timedelta(hours=1))], ruleset=rs)
    held = remediation_of(session, "h0")
    assert held.rule_id == "other"
    assert held.held_reason.startswith("cooldown: host last remediated at")


def test_flapping_host_goes_to_a_person(session: Session, executors: dict[str, Any]) -> None:
    rs = ruleset(rule(["tune_error_reporting"], cooldown=0), flap_max=2)
    hosts(session, 1)
    for day in range(2):
        at = T0 + dt.timedelta(days=40 * day)  # far apart: not a returning fault, just a frequent one
        [rid] = fire(session, "h0", rs, at=at)
        runner.advance(session, rid, ruleset=rs, now=at)
        runner.advance(session, rid, ruleset=rs, now=at)
    rs = ruleset(rule(["tune_error_reporting"], cooldown=0), flap_max=2, flap_window="100d")
    fire(session, "h0", rs, at=T0 + dt.timedelta(days=81))
    last = remediation_of(session, "h0")
    assert [s.action for s in last.steps] == ["ticket"]
    assert "flapping" in last.reason


def test_interrupted_non_idempotent_step_is_not_run_twice(session: Session, executors: dict[str, Any]) -> None:
    rs = ruleset(rule(["reboot", "tune_error_reporting"], escalation=[["ticket"]]))
    hosts(session, 1)
    [rid] = fire(session, "h0", rs)
    remediation = session.get_one(Remediation, rid)
    remediation.steps[0].state = StepState.running  # the worker died mid-reboot
    remediation.state = RemediationState.running
    runner.advance(session, rid, ruleset=rs, now=T0)
    assert remediation.state == RemediationState.failed
    assert remediation.steps[0].result == {"error": "interrupted while running; not safe to run twice"}
    assert remediation_of(session, "h0").steps[0].action == "ticket"


def test_caps_hold_under_concurrent_admission(integration_pg_url: str, celery_app: object) -> None:
    """Two workers admitting at the same instant: the database lock lets exactly one through."""
    from core.db import Database
    from tests.conftest import truncate_all

    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    rs = ruleset(rule(["reboot"]))
    with database.session() as session:
        hosts(session, 2)
        ids = []
        for name in ("h0", "h1"):
            host = session.scalars(select(Host).where(Host.hostname == name)).one()
            r = planning.create(
                session,
                host,
                rs.rules[0],
                list(rs.rules[0].plan),
                {"signal": {"subject": "d", "value": 1.0, "kind": "k", "detail": {}}},
                "race",
                0,
                None,
                T0,
            )
            assert r is not None
            ids.append(r.id)
    barrier = threading.Barrier(2)
    results: dict[int, bool] = {}

    def admit(rid: int) -> None:
        with database.session() as session:
            remediation = session.get_one(Remediation, rid)
            barrier.wait()
            results[rid] = planning.admit(session, remediation, rs, T0)

    threads = [threading.Thread(target=admit, args=(rid,)) for rid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    database.dispose()
    assert sorted(results.values()) == [False, True]


def storm_in_two_transactions(url: str, first_hosts: int) -> Database:
    """Five hosts, a rule whose breaker allows 3: a first transaction ingests a CE storm on h0.. (first_hosts
    of them) and holds its commit until a second one, ingesting the storm on the next host, waits on its
    lock; then the first commits and the second finishes. Returns the database to look at."""
    from sqlalchemy import text

    from tests.conftest import truncate_all

    truncate_all(url)
    database = wired(Database(url, pool_size=3))
    rs = ruleset(rule(["tune_error_reporting"], breaker=Breaker(max_hosts=3, max_percent=100)))
    later = T0 + dt.timedelta(seconds=60)
    with database.session() as session:
        hosts(session, 5)
        ingest(session, [edac_report(f"h{i}", ce=0, at=T0) for i in range(5)], ruleset=rs)
    first = database.sessionmaker()
    ingest(first, [edac_report(f"h{i}", ce=6000, at=later) for i in range(first_hosts)], ruleset=rs)

    def second() -> None:
        with database.session() as session:
            ingest(session, [edac_report(f"h{first_hosts}", ce=6000, at=later)], ruleset=rs)

    thread = threading.Thread(target=second)
    thread.start()
    with database.session() as probe:  # wait until the second transaction waits on the first's lock
        for _ in range(300):
            if probe.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")):
                break
            threading.Event().wait(0.05)
    first.commit()
    first.close()
    thread.join(30)
    return database


def test_breaker_holds_under_concurrent_ingest(integration_pg_url: str, celery_app: object) -> None:
    """Two ingest transactions firing one rule at once: the second counts the first's hosts before it plans
    (the breaker is counted under the admission lock), so the breaker's limit is never overshot."""
    database = storm_in_two_transactions(integration_pg_url, 3)
    with database.session() as session:
        planned = session.scalars(select(Remediation.host_id)).all()
        state = session.get(RuleState, "test-rule")
        assert len(planned) == 3
        assert state is not None
        assert state.breaker_open
    database.dispose()


def test_a_remediation_whose_run_was_lost_is_run_again_after_a_while(session: Session) -> None:
    """A worker killed holding run_remediation left a planned remediation with nothing queued (bench/chaos.py:
    the transport hands the task on only after an hour). The sweep finds it once it has not changed for
    STALL_S, not before; paused, waiting-on-host and finished ones are not touched."""
    from remediator.stalls import STALL_S, stalled

    rs = ruleset(rule(["tune_error_reporting"]))
    hosts(session, 2)
    [planned] = fire(session, "h0", rs)
    remediation = session.get_one(Remediation, planned)
    assert remediation.state == RemediationState.planned
    session.flush()
    changed = remediation.updated_at
    assert stalled(session, changed + dt.timedelta(seconds=STALL_S - 5)) == []
    assert stalled(session, changed + dt.timedelta(seconds=STALL_S + 5)) == [planned]
    remediation.paused_by = "operator:test"
    session.flush()
    assert stalled(session, remediation.updated_at + dt.timedelta(seconds=STALL_S + 5)) == []
    remediation.paused_by = None
    remediation.state = RemediationState.succeeded
    session.flush()
    assert stalled(session, remediation.updated_at + dt.timedelta(seconds=STALL_S + 5)) == []


def test_a_breaker_opened_by_a_concurrent_ingest_is_opened_once(integration_pg_url: str, celery_app: object) -> None:
    """The first transaction trips the breaker while the second waits on the admission lock; the second then
    finds it open and skips, rather than tripping it again: one breaker_opened entry, one Slack alert (the
    storm bench's "2 rules paused by their breakers" for one rule)."""
    database = storm_in_two_transactions(integration_pg_url, 4)  # the first trips at h3
    with database.session() as session:
        opened = session.scalars(select(AuditEntry).where(AuditEntry.action == "remediator.rule.breaker_opened"))
        assert len(opened.all()) == 1
        assert ("skipped", "breaker open") in {(o, r.split(":")[0]) for o, r in decisions(session, "h4")}
    database.dispose()
