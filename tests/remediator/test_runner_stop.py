"""One stop path (remediator.stopping): the API's cancel and abort and the web page's cancel all end a plan
the same way — what happens to a step on its host, to a drained host, and to a host a technician holds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.app import create_app
from core.db import Database
from core.models import AuditEntry, Role
from core.settings import Settings
from cyborg.central import CentralCyborg
from cyborg.drivers.bmc import SimulatedBmc
from remediator import deadlines, host_results, planning, runner, stopping
from remediator.models import Awaiting, Host, HostState, Remediation, RemediationState, StepState
from tests.builders.people import bearer
from tests.builders.remediations import fire, plan, result, rule, ruleset, sent_envelopes
from tests.builders.reports import T0
from tests.builders.runtime import rewire
from ticketing import service as tickets
from ticketing.models import Ticket
from ticketing.schemas import TicketRequest


class Control:
    def __init__(self, broker_down: bool) -> None:
        self.broker_down = broker_down
        self.revoked: list[list[str]] = []

    def revoke(self, task_ids: list[str]) -> None:
        if self.broker_down:
            raise OSError("broker down")
        self.revoked.append(list(task_ids))


class Workers:
    """Stands in for the Celery app the API revokes envelopes through."""

    def __init__(self, *, broker_down: bool = False) -> None:
        self.control = Control(broker_down)
        self.conf: dict[str, object] = {}  # no datacenter brokers: host tasks and revokes use this app


@pytest.fixture
def workers() -> Workers:
    return Workers()


@pytest.fixture
def client(db: Database, workers: Workers) -> Iterator[TestClient]:
    app = create_app(rewire(db, celery=workers))
    with TestClient(app, headers=bearer(db, Role.operator)) as test_client:
        yield test_client


def on_its_host(db: Database) -> tuple[int, dict[str, Any]]:
    """A plan whose first step was handed to its host (and not reported yet), its second still pending."""
    with db.session() as session:
        rs, remediation = plan(session, ["tune_error_reporting", "reboot"])
        runner.advance(session, remediation.id, ruleset=rs, now=T0)
        [envelope] = sent_envelopes(session)
        session.commit()
        return remediation.id, envelope


def drain_log(settings: Settings, tmp_path: Path) -> Path:
    """The cluster's drain and undrain hooks append to the file returned."""
    calls = tmp_path / "calls"
    settings.scheduler_hooks = {
        "*": {a: ["/bin/sh", "-c", f'echo "{a} $0" >> {calls}', "{hostname}"] for a in ("drain", "undrain")}
    }
    return calls


def audited(session: Session, action: str) -> list[AuditEntry]:
    return list(session.scalars(select(AuditEntry).where(AuditEntry.action == action).order_by(AuditEntry.id)))


@pytest.mark.parametrize("route", ["cancel", "abort"])
def test_cancel_and_abort_are_one_stop(
    route: str,
    client: TestClient,
    db: Database,
    workers: Workers,
    cyborg_installed: dict[str, Any],
) -> None:
    rid, envelope = on_its_host(db)
    url = f"/api/v1/remediations/{rid}"
    etag = client.get(url).headers["ETag"]
    stopped = client.post(f"{url}/{route}", json={"reason": "wrong host"}, headers={"If-Match": etag})
    assert stopped.status_code == 200, stopped.text
    view = stopped.json()
    assert view["state"] == "cancelled"
    # the step on its host fails as stopped but keeps waiting: the host may be running it
    assert [(s["state"], s["awaiting"]) for s in view["steps"]] == [("failed", "host"), ("skipped", None)]
    assert workers.control.revoked == [[envelope["id"]]]  # after the commit: the envelope not started
    with db.session() as session:
        assert session.scalars(select(Host.state)).one() == HostState.remediating  # held, not released
        [entry] = audited(session, "remediator.remediation.cancel_requested")
        assert (entry.actor, entry.reason) == ("token:test-operator", "wrong host")
        assert entry.detail == {"revoked": [envelope["id"]], "held": True, "step": envelope["step"]}
        # the host finished the step it had: its report is kept, the host released, and nothing more starts
        rs = ruleset(rule(["tune_error_reporting", "reboot"]))
        assert host_results.record_host_result(session, result(envelope), rs, T0) == "late"
        remediation = session.get_one(Remediation, rid)
        assert remediation.steps[0].result["late_report"]["outcome"] == "succeeded"
        assert remediation.steps[0].awaiting is None
        assert session.scalars(select(Host.state)).one() == HostState.in_service
        [released] = audited(session, "remediator.remediation.hold_ended")
        assert released.detail["released"] is True
        assert runner.advance(session, rid, ruleset=rs, now=T0) == RemediationState.cancelled
        session.commit()
    etag = client.get(url).headers["ETag"]
    assert client.post(f"{url}/{route}", json={"reason": "again"}, headers={"If-Match": etag}).status_code == 409


def test_a_stop_while_the_host_runs_a_reboot_keeps_it_drained_until_its_report(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    calls = drain_log(settings, tmp_path)
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)  # drained, then handed to the host
    [envelope] = sent_envelopes(session)
    step = remediation.steps[0]
    stopping.stop(session, remediation.id, actor="user:ops", reason="wrong host", now=T0)
    host = session.get_one(Host, remediation.host_id)
    # out of service and drained (the caps count it) while the host may be rebooting
    assert (host.state, step.state, step.awaiting) == (HostState.remediating, StepState.failed, Awaiting.host)
    assert host.drained_at is not None
    assert calls.read_text().split() == ["drain", "h0"]
    # the host says it started: its deadline becomes the action's budget, as for a step not stopped
    started = {**result(envelope), "accepted_at": T0.isoformat()}
    assert host_results.record_host_started(session, started, T0) == "started"
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, rs, step.deadline - dt.timedelta(seconds=1)) == 0
    assert host.state == HostState.remediating
    # its report: released, undrained
    assert host_results.record_host_result(session, result(envelope), rs, T0) == "late"
    assert (host.state, host.drained_at, step.awaiting) == (HostState.in_service, None, None)
    assert calls.read_text().split() == ["drain", "h0", "undrain", "h0"]
    assert remediation.evidence["undrain"]["outcome"] == "succeeded"
    assert session.scalars(select(Ticket)).all() == []


def test_a_firing_while_a_stop_holds_the_host_is_held_until_the_hold_ends(
    session: Session,
    cyborg_installed: dict[str, Any],
) -> None:
    """The host may still be mid-reboot or mid-flash: no new plan starts on it (the review's find)."""
    from remediator.models import Decision

    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    stopping.stop(session, remediation.id, actor="user:ops", reason="wrong rule", now=T0)
    assert fire(session, "h0", rs, T0 + dt.timedelta(hours=1)) == []
    decision = session.scalars(select(Decision).order_by(Decision.id.desc())).first()
    assert decision is not None
    assert (decision.outcome, decision.reason) == (
        "held",
        "host is held: a stopped remediation's step may still be running on it",
    )
    host = session.get_one(Host, remediation.host_id)
    assert host_results.record_host_result(session, result(envelope, "failed"), rs, T0) == "late"
    assert host.state == HostState.awaiting_repair  # the failed action: a person looks
    assert [t.part_type for t in session.scalars(select(Ticket))] == ["host"]


def test_a_failed_late_report_after_a_stop_opens_a_ticket(
    session: Session,
    cyborg_installed: dict[str, Any],
) -> None:
    rs, remediation = plan(session, ["reboot"], escalation=[["reimage"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    stopping.stop(session, remediation.id, actor="user:ops", reason="change freeze", now=T0)
    outcome = host_results.record_host_result(session, result(envelope, "failed", error="flash verify"), rs, T0)
    assert outcome == "late"
    step = remediation.steps[0]
    assert (step.result["late_report"]["outcome"], step.awaiting) == ("failed", None)
    host = session.get_one(Host, remediation.host_id)
    assert host.state == HostState.awaiting_repair  # a person looks; still drained
    assert host.drained_at is not None
    [ticket] = session.scalars(select(Ticket)).all()
    assert (ticket.hostname, ticket.part_type, ticket.remediation_id) == ("h0", "host", remediation.id)
    assert "flash verify" in ticket.title
    assert session.scalars(select(Remediation)).all() == [remediation]  # no next rung: the plan was stopped
    [ended] = audited(session, "remediator.remediation.hold_ended")
    assert ended.detail == {
        "step": step.index,
        "released": False,
        "ticket_id": ticket.id,
        "host_state": "awaiting_repair",
    }
    # a second copy of the report (a redelivery) opens nothing more
    assert host_results.record_host_result(session, result(envelope, "failed"), rs, T0) == "late"
    assert len(session.scalars(select(Ticket)).all()) == 1


def test_a_stopped_step_whose_host_never_reports_is_ticketed_at_its_deadline(
    session: Session,
    cyborg_installed: dict[str, Any],
) -> None:
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    step = remediation.steps[0]
    started = {**result(envelope), "accepted_at": T0.isoformat()}
    assert host_results.record_host_started(session, started, T0) == "started"  # the host began the reboot
    due = step.deadline
    assert due is not None
    stopping.stop(session, remediation.id, actor="user:ops", reason="change freeze", now=T0)
    assert (step.state, step.awaiting, step.deadline) == (StepState.failed, Awaiting.host, due)
    assert deadlines.check_deadlines(session, rs, due - dt.timedelta(seconds=1)) == 0
    assert session.scalars(select(Ticket)).all() == []
    assert deadlines.check_deadlines(session, rs, due + dt.timedelta(seconds=1)) == 1
    assert (step.awaiting, step.deadline, step.power_cycled_at) == (None, due, None)  # no power cycle: it was stopped
    host = session.get_one(Host, remediation.host_id)
    assert host.state == HostState.awaiting_repair
    assert host.drained_at is not None
    [ticket] = session.scalars(select(Ticket)).all()
    assert (ticket.part_type, ticket.remediation_id) == ("host", remediation.id)
    assert session.scalars(select(Remediation)).all() == [remediation]  # no escalation rung
    assert deadlines.check_deadlines(session, rs, due + dt.timedelta(hours=1)) == 0  # once


def test_a_stopped_step_the_host_never_started_lets_the_host_go_at_its_deadline(
    session: Session,
    cyborg_installed: dict[str, Any],
) -> None:
    """Its envelope expired long before the deadline, and a host refuses an expired envelope: nothing runs
    there, so no technician is sent to a healthy host."""
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[0]
    due = step.deadline
    assert due is not None
    stopping.stop(session, remediation.id, actor="user:ops", reason="change freeze", now=T0)
    assert deadlines.check_deadlines(session, rs, due + dt.timedelta(seconds=1)) == 1
    host = session.get_one(Host, remediation.host_id)
    assert (host.state, host.drained_at) == (HostState.in_service, None)
    assert session.scalars(select(Ticket)).all() == []


@pytest.mark.parametrize("reports", [True, False])
def test_a_reimage_stopped_before_its_first_report_boots_from_disk_before_the_host_is_let_go(
    reports: bool,
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
) -> None:
    from checker.sim.standalone import standalone_host

    virtual = standalone_host("h0", faults=["soft_lockups"])
    rewire(session, cyborg=CentralCyborg(settings, bmc=SimulatedBmc({"h0": virtual})))
    rs, remediation = plan(session, ["power_cycle", "reimage"], settle=0)
    planning.approve(session, remediation.id, actor="test", ruleset=rs, now=T0)  # reimage is destructive
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[1]
    assert step.awaiting == Awaiting.first_report
    stopping.stop(session, remediation.id, actor="user:ops", reason="wrong host", now=T0)
    host = session.get_one(Host, remediation.host_id)
    assert (host.state, step.state, step.awaiting) == (HostState.remediating, StepState.failed, Awaiting.first_report)
    assert deadlines.check_deadlines(session, rs, T0 + dt.timedelta(minutes=1)) == 0  # installing: held
    assert step.deadline is not None
    if reports:
        host.boot_id, host.last_report_at = virtual.boot_id, dt.datetime.now(dt.UTC)
        when = dt.datetime.now(dt.UTC)
    else:
        when = step.deadline + dt.timedelta(seconds=1)
    assert deadlines.check_deadlines(session, rs, when) == 1
    argv = [c["argv"][0] for c in step.result["commands"]]
    assert argv == [
        "simulated BMC (ipmi): bootdev pxe",
        "simulated BMC (ipmi): reimage",
        "simulated BMC (ipmi): bootdev disk",
    ]
    assert (step.state, step.awaiting) == (StepState.failed, None)
    tickets_opened = session.scalars(select(Ticket)).all()
    if reports:
        assert host.state == HostState.in_service
        assert tickets_opened == []
    else:
        assert host.state == HostState.awaiting_repair
        assert [t.part_type for t in tickets_opened] == ["host"]


def test_a_host_a_technician_holds_stays_out_and_drained_when_its_remediation_is_stopped(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    calls = drain_log(settings, tmp_path)
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)  # drained, then handed to the host
    [envelope] = sent_envelopes(session)
    host = session.get_one(Host, remediation.host_id)
    tickets.open_ticket(
        session,
        TicketRequest(hostname=host.hostname, part_type="psu", part="PSU2", title="PSU2 hums", evidence={}),
        actor="user:tech",
    )
    stopped = stopping.stop(session, remediation.id, actor="user:ops", reason="the PSU first", now=T0)
    assert stopped.revoke == [envelope["id"]]
    assert remediation.state == RemediationState.cancelled
    assert host.state == HostState.remediating  # held while the reboot may run
    # the reboot's report: released as a stop releases, to the technician who holds the host
    assert host_results.record_host_result(session, result(envelope), rs, T0) == "late"
    assert host.state == HostState.awaiting_repair
    assert host.drained_at is not None
    assert calls.read_text().split() == ["drain", "h0"]  # not undrained: the repair's verification will
    [ticket] = session.scalars(select(Ticket)).all()
    assert ticket.state.value == "open"  # a stop cancels no ticket


def test_a_stopped_remediation_that_drained_its_host_undrains_it(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
    tmp_path: Path,
) -> None:
    """Nothing in flight (the drain done, the reboot not handed over yet): released at once."""
    calls = drain_log(settings, tmp_path)
    rs, remediation = plan(session, ["drain", "reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert [s.state for s in remediation.steps] == [StepState.succeeded, StepState.pending]
    stopping.stop(session, remediation.id, actor="user:ops", reason="wrong host", now=T0)
    host = session.get_one(Host, remediation.host_id)
    assert (host.state, host.drained_at) == (HostState.in_service, None)
    assert calls.read_text().split() == ["drain", "h0", "undrain", "h0"]
    assert remediation.evidence["undrain"]["outcome"] == "succeeded"
    [entry] = audited(session, "remediator.remediation.cancel_requested")
    assert entry.detail == {"revoked": []}


def test_a_failed_revoke_leaves_the_stop_standing(caplog: pytest.LogCaptureFixture) -> None:
    stopped = stopping.Stopped(Remediation(id=7), ["e-1"])
    stopping.revoke(Workers(broker_down=True), stopped)  # type: ignore[arg-type]
    assert [r.message for r in caplog.records] == ["remediator.abort.revoke_failed"]
    stopping.revoke(None, stopped)  # no broker (the API without one): nothing to do
