"""The seam between planning and doing: the remediator reaches cyborg only through its Protocol
(cyborg.central.Cyborg), keeps a step's waiting state in typed columns, and sweeps deadlines off an
index of the waiting steps instead of locking every running remediation."""

from __future__ import annotations

import ast
import datetime as dt
import logging
from typing import Any

import pytest
from celery import signature
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from core.db import Database
from core.dispatch import pending_tasks
from core.models import AuditEntry
from cyborg.actions import ACTIONS
from cyborg.central import Done, HandedOver, HostSend, Order, Sighting, Target
from remediator import deadlines, host_results, runner
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import (
    Awaiting,
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    StepState,
)
from remediator.rules import RuleSet
from tests.builders.remediations import fire, remediation_of, rule, ruleset
from tests.builders.reports import T0
from tests.builders.runtime import rewire, wired
from tests.conftest import REPO
from tests.ops.helpers import event_of

DUE = T0 + dt.timedelta(minutes=5)


class ProtocolOnly:
    """Cyborg as the remediator may see it: the Protocol, nothing else. Host actions are handed over
    (a message to the host's queue through `send`), central ones done at once."""

    def __init__(self, *, revives: bool = True) -> None:
        self.revives = revives
        self.orders: list[Order] = []
        self.revived: list[Order] = []

    def runs(self, action: str) -> bool:
        return action in ACTIONS

    def execute(self, order: Order, send: HostSend | None = None) -> Done | HandedOver:
        self.orders.append(order)
        if ACTIONS[order.action].site == "central":
            return Done({"outcome": "succeeded", "by": "protocol-only"})
        assert send is not None
        send(signature("cyborg.run_action", args=[order.action], queue=f"host.{order.target.hostname}"))
        envelope_id = f"e-{order.step}-{order.attempt}"
        return HandedOver("host", DUE, {"envelope_id": envelope_id, "timeout_s": 60}, envelope_id=envelope_id)

    def finish_reimage(self, order: Order) -> dict[str, Any]:
        return {"commands": []}

    def revive(self, order: Order) -> dict[str, Any] | None:
        self.revived.append(order)
        return {"power": "cycle", "commands": [{"argv": ["bmc", "cycle"]}]} if self.revives else None

    def look(self, target: Target) -> Sighting:
        return Sighting("on", "no_answer", None, target.address, [], [])


@pytest.fixture
def protocol_only(db: Database) -> ProtocolOnly:
    fake = ProtocolOnly()
    rewire(db, cyborg=fake)
    return fake


def one_host(session: Session) -> None:
    row = HostInventory(hostname="h0", datacenter="dc1", rack="r1", cluster="c1", labels={"bmc_address": "10.9.0.1"})
    apply_inventory(session, [row], actor="test")


def host_result(remediation: Remediation, step: int, outcome: str = "succeeded") -> dict[str, Any]:
    return {
        "hostname": "h0",
        "remediation_id": remediation.id,
        "step": step,
        "envelope_id": f"e-{step}-1",
        "outcome": outcome,
        "commands": [],
    }


def test_the_remediator_reaches_cyborg_only_through_the_protocol(session: Session, protocol_only: ProtocolOnly) -> None:
    rs = ruleset(rule(["tune_error_reporting", "power_cycle"]))
    one_host(session)
    [rid] = fire(session, "h0", rs)
    remediation = session.get_one(Remediation, rid)
    runner.advance(session, rid, ruleset=rs, now=T0)
    [order] = protocol_only.orders
    assert order.target == Target("h0", "dc1", "c1", {"bmc_address": "10.9.0.1"})
    assert (order.remediation_id, order.step, order.attempt, order.action) == (rid, 0, 1, "tune_error_reporting")
    assert order.evidence["signal"]["kind"] == remediation.evidence["signal"]["kind"]
    step = remediation.steps[0]
    assert (step.state, step.awaiting, step.deadline) == (StepState.running, Awaiting.host, DUE)
    # what was sent, and the boot its host was in (a restart since shows in its reports); the waiting is in columns
    assert step.result == {"envelope_id": "e-0-1", "timeout_s": 60, "boot_id_sent": "boot-1"}
    assert "host.h0" in [s.options.get("queue") for s in pending_tasks(session)]  # sent when this commits
    dispatched = session.scalars(select(AuditEntry).where(AuditEntry.action == "cyborg.action.dispatched")).one()
    assert dispatched.detail["envelope_id"] == "e-0-1"

    assert host_results.record_host_result(session, host_result(remediation, 0), rs, T0) == "succeeded"
    assert (step.state, step.awaiting) == (StepState.succeeded, None)
    runner.advance(session, rid, ruleset=rs, now=T0)
    assert remediation.steps[1].result == {"outcome": "succeeded", "by": "protocol-only"}
    # the drain before the disruptive step is cyborg's to carry out as well
    assert [(o.action, o.step) for o in protocol_only.orders] == [
        ("tune_error_reporting", 0),
        ("drain", None),
        ("power_cycle", 1),
    ]
    assert remediation.evidence["drain"]["by"] == "protocol-only"


@pytest.mark.parametrize("revives", [True, False])
def test_a_silent_host_is_revived_through_the_protocol_at_most_once(
    session: Session, protocol_only: ProtocolOnly, revives: bool
) -> None:
    protocol_only.revives = revives
    rs = ruleset(rule(["reboot"], escalation=[["reimage"]]))
    one_host(session)
    [rid] = fire(session, "h0", rs)
    remediation = session.get_one(Remediation, rid)
    runner.advance(session, rid, ruleset=rs, now=T0)
    step = remediation.steps[0]
    assert host_results.record_host_started(session, {**host_result(remediation, 0), "accepted_at": "x"}, T0)
    assert (step.accepted_at, step.deadline) == (T0, T0 + dt.timedelta(seconds=60 + 6))
    late = T0 + dt.timedelta(minutes=2)
    assert deadlines.check_deadlines(session, rs, late) == 1
    assert [o.action for o in protocol_only.revived] == ["reboot"]
    if revives:
        assert (step.state, step.power_cycled_at) == (StepState.running, late)
        commands = [{"argv": ["bmc", "cycle"]}]
        assert step.result["power_cycled"] == {"at": late.isoformat(), "power": "cycle", "commands": commands}
        cycled = session.scalars(select(AuditEntry).where(AuditEntry.action == "cyborg.host.power_cycled")).one()
        assert cycled.detail == {"host": "h0", "power": "cycle"}
        assert step.deadline == late + dt.timedelta(seconds=66)
        assert deadlines.check_deadlines(session, rs, late + dt.timedelta(minutes=5)) == 1
        assert len(protocol_only.revived) == 1  # once per step
    assert step.state == StepState.failed
    assert [s.action for s in remediation_of(session, "h0").steps] == ["ticket"]  # a person, not the reimage


def test_no_log_event_of_cyborg_is_emitted_outside_cyborg() -> None:
    """Audit entries named cyborg.* are rows the remediator writes; the log lines are cyborg's own."""
    found = []
    for path in (REPO / "remediator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            is_log = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "debug", "info", "warning", "error", "exception", "critical"
            )  # fmt: skip
            if is_log and (event_of(node) or "").startswith("cyborg."):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_a_refusal_is_logged_by_cyborg(session: Session, caplog: pytest.LogCaptureFixture) -> None:
    refusal = {"hostname": "h9", "code": "expired", "reason": "too late", "verified": False}
    with caplog.at_level(logging.WARNING):
        assert host_results.record_refusal(session, refusal, RuleSet(rules=[]), T0) == "recorded"
    [record] = [r for r in caplog.records if r.message == "cyborg.envelope.refused"]
    assert record.name.startswith("cyborg.")


# -- the deadline sweep ------------------------------------------------------------------------


def test_a_step_whose_remediation_ended_while_it_was_out_stops_waiting_when_due(session: Session) -> None:
    """A remediation preempted while its step was on the host: once that step is due nothing acts on it (no
    power cycle, no ticket), and it leaves the index; a report that comes after is kept as late."""
    [rid] = waiting_steps(session, 1, deadline=DUE)
    remediation = session.get_one(Remediation, rid)
    remediation.state = RemediationState.cancelled
    step = remediation.steps[0]
    assert deadlines.check_deadlines(session, RuleSet(rules=[]), DUE - dt.timedelta(seconds=1)) == 0
    assert step.awaiting == Awaiting.host  # not due yet: its result would still count
    assert deadlines.check_deadlines(session, RuleSet(rules=[]), DUE + dt.timedelta(seconds=1)) == 0
    assert (step.state, step.awaiting, step.power_cycled_at) == (StepState.running, None, None)
    assert session.scalars(deadlines.due(DUE + dt.timedelta(days=1))).all() == []


def waiting_steps(session: Session, count: int, *, deadline: dt.datetime) -> list[int]:
    """Running remediations, each with a step handed to its host that is due at `deadline`."""
    apply_inventory(session, [HostInventory(hostname=f"w{i}", datacenter="dc1") for i in range(count)], actor="t")
    ids = []
    for host in session.scalars(select(Host).where(Host.hostname.like("w%")).order_by(Host.id)).all():
        host.state = HostState.remediating
        remediation = Remediation(host_id=host.id, rule_id="gone", state=RemediationState.running, evidence={})
        remediation.steps = [
            RemediationStep(
                index=0,
                action="reboot",
                state=StepState.running,
                attempts=1,
                result={"envelope_id": f"e-{host.hostname}", "timeout_s": 900},
                awaiting=Awaiting.host,
                deadline=deadline,
            )
        ]
        session.add(remediation)
        session.flush()
        ids.append(remediation.id)
    return ids


def test_the_deadline_sweep_reads_the_waiting_steps_off_their_index(db: Database, session: Session) -> None:
    """Whatever the planner prefers for tables this small, the sweep's query is one the partial index of
    waiting steps serves: with sequential scans turned off, it is the index the plan reads."""
    waiting_steps(session, 3, deadline=DUE)
    query = deadlines.due(DUE).compile(dialect=session.get_bind().dialect, compile_kwargs={"literal_binds": True})
    if db.dialect == "postgresql":
        session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(session.execute(text(f"EXPLAIN {query}")).scalars())
    else:
        plan = "\n".join(str(row[-1]) for row in session.execute(text(f"EXPLAIN QUERY PLAN {query}")))
    assert "ix_remediation_steps_waiting" in plan, plan
    if db.dialect == "postgresql":  # the host steps are read by their deadline, not filtered after reading
        assert any("Index Cond" in line and "deadline <=" in line for line in plan.splitlines()), plan


@pytest.mark.postgres
def test_the_deadline_sweep_locks_only_the_remediations_that_are_due(integration_pg_url: str) -> None:
    """Two running remediations wait on their hosts, one past its deadline: while the sweep's transaction
    handles that one, another transaction can still lock the other (the sweep never touched it)."""
    from tests.conftest import truncate_all

    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    try:
        with database.sessionmaker() as session:
            due_id, not_due_id = waiting_steps(session, 2, deadline=DUE)
            session.get_one(Remediation, not_due_id).steps[0].deadline = DUE + dt.timedelta(hours=1)
            session.commit()
        sweep = database.sessionmaker()
        lock = "SELECT id FROM remediations WHERE id = :id FOR UPDATE NOWAIT"
        try:
            assert deadlines.check_deadlines(sweep, RuleSet(rules=[]), DUE + dt.timedelta(seconds=1)) == 1
            with database.sessionmaker() as other:
                assert other.execute(text(lock), {"id": not_due_id}).scalar_one() == not_due_id
                other.rollback()
                with pytest.raises(OperationalError, match="could not obtain lock"):
                    other.execute(text(lock), {"id": due_id})
                other.rollback()
        finally:
            sweep.rollback()
            sweep.close()
    finally:
        database.dispose()
