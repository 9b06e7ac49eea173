"""One file on purpose: every test runs the same hand-off (a plan, its signed envelopes, the host's
answers) to a different end, with the fixtures of tests/conftest.py (cyborg's executor as a worker
installs it) and the helpers of tests/builders/remediations.py.

The hand-off to cyborg, on PostgreSQL and SQLite: a host step is signed and sent at commit and waits
for its host; results, refusals and silence move the plan on, escalate it, or hand the host to a
person; a stop ends a plan between steps."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.dispatch import pending_tasks
from core.models import AuditEntry
from core.settings import Settings
from cyborg.central import CentralCyborg, signer_for
from cyborg.drivers.bmc import SimulatedBmc
from remediator import deadlines, host_results, planning, runner, stopping
from remediator.models import Awaiting, Host, HostState, RemediationState, StepState
from tests.builders.remediations import plan, remediation_of, result, sent_envelopes
from tests.builders.reports import T0
from tests.builders.runtime import rewire
from ticketing.models import Ticket


def test_a_host_step_is_signed_sent_and_waits_for_its_host(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    rs, remediation = plan(session, ["tune_error_reporting", "reboot"])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[0]
    assert (step.state, step.awaiting) == (StepState.running, Awaiting.host)
    [signature] = [s for s in pending_tasks(session) if s.task == "cyborg.run_action"]
    assert signature.options["queue"] == "host.h0"
    assert signature.options["task_id"] == step.result["envelope_id"]
    now = dt.datetime.now(dt.UTC)
    envelope = signer_for(settings).verifier().open(signature.args[0], hostname="h0", now=now)
    assert (envelope.action, envelope.params, envelope.step) == ("tune_error_reporting", {"edac_poll_s": 37}, 0)
    # a redelivered run_remediation neither repeats nor escalates the step; nothing more is queued
    assert runner.advance(session, remediation.id, ruleset=rs, now=T0) == RemediationState.running
    assert len(sent_envelopes(session)) == 1
    assert not runner.has_next(remediation)

    started = host_results.record_host_started(
        session, {**result(json.loads(signature.args[0]["payload"])), "accepted_at": "x"}, T0
    )
    assert started == "started"
    assert (step.accepted_at, step.deadline) == (T0, T0 + dt.timedelta(seconds=120 + 12))

    done = host_results.record_host_result(session, result(json.loads(signature.args[0]["payload"])), rs, T0)
    assert done == "succeeded"
    assert step.state == StepState.succeeded
    assert step.result["commands"][0]["argv"][1] == "tune_error_reporting"
    assert step.awaiting is None
    assert [s.task for s in pending_tasks(session)][-1] == "remediator.run_remediation"
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert sent_envelopes(session)[-1]["action"] == "reboot"


def test_results_that_do_not_match_a_sent_envelope_change_nothing(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    rs, remediation = plan(session, ["tune_error_reporting"])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    forged = result({**envelope, "id": "00000000-0000-4000-8000-000000000000"})
    assert host_results.record_host_result(session, forged, rs, T0) == "unmatched"
    assert remediation.steps[0].state == StepState.running
    actions = session.scalars(select(AuditEntry.action)).all()
    assert "cyborg.result.unmatched" in actions


def test_a_failed_host_step_escalates(session: Session, cyborg_installed: dict[str, Any]) -> None:
    rs, remediation = plan(session, ["tune_error_reporting"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    assert host_results.record_host_result(session, result(envelope, "timed_out"), rs, T0) == "timed_out"
    assert remediation.state == RemediationState.failed
    assert remediation.steps[0].result["error"] == "it broke"
    assert remediation_of(session, "h0").steps[0].action == "ticket"


def test_refusals_are_audited_and_fail_only_the_step_they_name(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    rs, remediation = plan(session, ["tune_error_reporting"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    refusal = {
        "hostname": "h0",
        "code": "bad_signature",
        "reason": "forged",
        "remediation_id": remediation.id,
        "step": 0,
        "envelope_id": "not-the-one-sent",
        "action": "reboot",
    }
    assert host_results.record_refusal(session, refusal, rs, T0) == "recorded"
    assert remediation.steps[0].state == StepState.running  # a forgery says nothing about the real plan
    real = {**refusal, "code": "expired", "reason": "expired at …", "envelope_id": envelope["id"], "verified": True}
    assert host_results.record_refusal(session, real, rs, T0) == "failed"
    assert remediation.state == RemediationState.failed
    refused = session.scalars(select(AuditEntry).where(AuditEntry.action == "cyborg.envelope.refused")).all()
    assert [e.reason.split(":")[0] for e in refused] == ["bad_signature", "expired"]


def test_a_host_that_does_not_come_back_is_power_cycled_then_handed_to_a_person(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    from checker.sim.standalone import standalone_host

    rs, remediation = plan(session, ["reboot"], escalation=[["reimage"]])
    virtual = standalone_host("h0")
    virtual.down = True
    booted: list[str] = []
    rewire(session, cyborg=CentralCyborg(settings, bmc=SimulatedBmc({"h0": virtual}, on_boot=booted.append)))
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[0]
    [envelope] = sent_envelopes(session)
    started = host_results.record_host_started(session, {**result(envelope), "accepted_at": T0.isoformat()}, T0)
    assert started == "started"
    deadline = step.deadline
    assert deadline is not None
    assert deadlines.check_deadlines(session, rs, deadline - dt.timedelta(seconds=1)) == 0
    assert deadlines.check_deadlines(session, rs, deadline + dt.timedelta(seconds=1)) == 1
    assert step.result["power_cycled"]["power"] == "cycle"
    assert step.power_cycled_at == deadline + dt.timedelta(seconds=1)
    assert (virtual.down, booted) == (False, ["h0"])
    assert step.state == StepState.running  # its agent, started again, reports the reboot it did
    assert step.deadline is not None
    later = step.deadline + dt.timedelta(seconds=1)
    assert deadlines.check_deadlines(session, rs, later) == 1
    assert step.state == StepState.failed
    assert remediation.state == RemediationState.failed
    person = remediation_of(session, "h0")
    assert [s.action for s in person.steps] == ["ticket"]  # not the reimage rung: nothing reaches a dead host
    assert "did not come back after reboot" in person.reason
    runner.advance(session, person.id, ruleset=rs, now=later)
    assert session.scalars(select(Ticket)).one().remediation_id == person.id


def test_without_a_bmc_address_a_silent_host_goes_straight_to_a_ticket(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    rs, remediation = plan(session, ["reboot"])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    host_results.record_host_started(session, {**result(envelope), "accepted_at": T0.isoformat()}, T0)
    deadline = remediation.steps[0].deadline
    assert deadline is not None
    deadlines.check_deadlines(session, rs, deadline + dt.timedelta(seconds=1))
    assert "power_cycled" not in remediation.steps[0].result
    assert remediation.steps[0].power_cycled_at is None
    assert [s.action for s in remediation_of(session, "h0").steps] == ["ticket"]


def test_power_cycle_and_reimage_go_through_the_bmc(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    from checker.sim.standalone import standalone_host

    virtual = standalone_host("h0", faults=["soft_lockups"])
    rewire(session, cyborg=CentralCyborg(settings, bmc=SimulatedBmc({"h0": virtual})))
    rs, remediation = plan(session, ["power_cycle", "reimage"], settle=0)
    planning.approve(session, remediation.id, actor="test", ruleset=rs, now=T0)  # reimage is destructive
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.steps[0].state == StepState.succeeded
    assert remediation.steps[0].result["commands"][0]["argv"] == ["simulated BMC (ipmi): power_cycle"]
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[1]
    assert step.awaiting == Awaiting.first_report
    assert deadlines.check_deadlines(session, rs, T0 + dt.timedelta(minutes=1)) == 0  # no report from the new image yet
    host = session.get_one(Host, remediation.host_id)
    host.boot_id, host.last_report_at = virtual.boot_id, dt.datetime.now(dt.UTC)
    assert deadlines.check_deadlines(session, rs, dt.datetime.now(dt.UTC)) == 1
    assert step.state == StepState.succeeded
    argv = [c["argv"][0] for c in step.result["commands"]]
    assert argv == [
        "simulated BMC (ipmi): bootdev pxe",
        "simulated BMC (ipmi): reimage",
        "simulated BMC (ipmi): bootdev disk",
    ]


def test_a_stop_ends_the_plan_between_steps(session: Session, cyborg_installed: dict[str, Any]) -> None:
    rs, remediation = plan(session, ["tune_error_reporting", "reboot"])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    stopped = stopping.stop(session, remediation.id, actor="user:ops", reason="wrong host", now=T0)
    assert stopped.revoke == [envelope["id"]]
    assert remediation.state == RemediationState.cancelled
    assert [s.state for s in remediation.steps] == [StepState.failed, StepState.skipped]
    assert session.get_one(Host, remediation.host_id).state == HostState.remediating  # held: the step is out
    # the host finished the step it had: the report is kept, the host is let go, nothing more starts
    assert host_results.record_host_result(session, result(envelope), rs, T0) == "late"
    assert session.get_one(Host, remediation.host_id).state == HostState.in_service
    assert remediation.steps[0].result["late_report"]["outcome"] == "succeeded"
    assert runner.advance(session, remediation.id, ruleset=rs, now=T0) == RemediationState.cancelled
    assert len(sent_envelopes(session)) == 1
    from core.errors import Conflict

    with pytest.raises(Conflict):
        stopping.stop(session, remediation.id, actor="user:ops", reason="again", now=T0)


def test_pinned_targets_come_from_the_evidence_the_class_baselines_put_there(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    rs, remediation = plan(session, ["reflash_firmware"], escalation=[["ticket"]])
    remediation.steps[0].params = {"component": "bmc"}
    remediation.evidence = {
        "signal": {
            "kind": "firmware_below_baseline",
            "subject": "bmc",
            "detail": {"current": "1.27", "baseline": "1.60"},
        }
    }
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [first] = sent_envelopes(session)
    assert first["params"] == {"targets": [{"component": "bmc", "version": "1.60"}]}


def test_the_patched_kernel_comes_from_the_errata_signal(session: Session, cyborg_installed: dict[str, Any]) -> None:
    rs, kernel = plan(session, ["install_kernel"], escalation=[["ticket"]])
    kernel.steps[0].params = {"erratum": "AMD-298"}
    kernel.evidence = {
        "signal": {
            "kind": "errata_match",
            "subject": "AMD-298",
            "detail": {"configured": True, "patched_kernel": {"release": "2.6.23.17-amdpatch2", "package": None}},
        }
    }
    runner.advance(session, kernel.id, ruleset=rs, now=T0)
    assert sent_envelopes(session)[-1]["params"] == {"release": "2.6.23.17-amdpatch2", "erratum": "AMD-298"}


def test_a_kernel_no_class_configures_is_refused_not_guessed(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    rs, kernel = plan(session, ["install_kernel"], escalation=[["ticket"]])
    kernel.steps[0].params = {"erratum": "AMD-298"}
    kernel.evidence = {
        "signal": {
            "kind": "errata_match",
            "subject": "AMD-298",
            "value": 1.0,
            "detail": {"configured": False, "patched_kernel": None},
        }
    }
    runner.advance(session, kernel.id, ruleset=rs, now=T0)
    assert sent_envelopes(session) == []
    assert "no patched kernel configured for 'AMD-298'" in kernel.steps[0].result["error"]


def test_a_plan_cyborg_cannot_pin_fails_with_the_reason(session: Session, cyborg_installed: dict[str, Any]) -> None:
    rs, remediation = plan(session, ["reflash_firmware"], escalation=[["ticket"]])
    remediation.steps[0].params = {"component": "bios"}
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.state == RemediationState.failed
    assert "no pinned version" in remediation.steps[0].result["error"]
    assert sent_envelopes(session) == []


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def test_drain_and_undrain_run_the_clusters_hooks(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings, tmp_path: Path
) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.scheduler_hooks = {
            "c1": {"drain": ["/bin/echo", "drained", "{hostname}", "{remediation_id}"]},
            "*": {"undrain": f"http://127.0.0.1:{server.server_address[1]}/undrain"},
        }
        rs, remediation = plan(session, ["drain", "undrain"], settle=0)
        runner.advance(session, remediation.id, ruleset=rs, now=T0)
        drained = remediation.steps[0].result
        assert remediation.steps[0].state == StepState.succeeded, (remediation.state, drained)
        assert drained["argv"] == ["/bin/echo", "drained", "h0", str(remediation.id)]
        assert drained["commands"][0]["output"] == f"drained h0 {remediation.id}"
        runner.advance(session, remediation.id, ruleset=rs, now=T0)
        assert _Receiver.bodies[-1] == {
            "hostname": "h0",
            "cluster": "c1",
            "remediation_id": remediation.id,
            "action": "undrain",
        }
        assert remediation.steps[1].result["status"] == 204
    finally:
        server.shutdown()


def test_a_failing_hook_fails_its_step_with_the_command_log(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {"*": {"drain": ["/bin/sh", "-c", "echo scheduler says no >&2; exit 3"]}}
    rs, remediation = plan(session, ["drain", "reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[0]
    assert step.state == StepState.failed
    assert "exited 3: scheduler says no" in step.result["error"]
    assert step.result["commands"][0]["exit_status"] == 3
    assert remediation.state == RemediationState.failed
    assert sent_envelopes(session) == []  # the reboot never went out


def test_an_unknown_plan_stays_a_ticket_when_cyborg_is_not_installed(session: Session, settings: Settings) -> None:
    """Without cyborg (a process that did not start a worker), host actions fail as before."""
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.steps[0].result["error"] == "no executor for action 'reboot'"
    assert "drain" not in remediation.evidence  # failed before anything ran


def test_a_disruptive_plan_drains_first_and_undrains_after_the_settle_period(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings, tmp_path: Path
) -> None:
    """A plan that names no drain step still takes the host out of its scheduler before the first
    disruptive action, and puts it back only once the fix has held."""
    calls = tmp_path / "calls"
    settings.scheduler_hooks = {
        "*": {
            "drain": ["/bin/sh", "-c", f'echo "drain $0" >> {calls}', "{hostname}"],
            "undrain": ["/bin/sh", "-c", f'echo "undrain $0" >> {calls}', "{hostname}"],
        }
    }
    done: list[str] = []

    def central_reboot(order: Any) -> dict[str, Any]:
        done.append(f"{order.action} after {calls.read_text().split()}")
        return {"outcome": "succeeded"}

    cyborg_installed["reboot"] = central_reboot
    rs, remediation = plan(session, ["tune_error_reporting", "reboot"], settle=600)
    remediation.steps[0].state = StepState.succeeded  # the non-disruptive step is not what this is about
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert done == ["reboot after ['drain', 'h0']"]  # drained before, not after
    assert remediation.evidence["drain"]["before_step"] == 1
    assert remediation.evidence["drain"]["argv"][0] == "/bin/sh"
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert remediation.state == RemediationState.verifying
    assert "undrain" not in remediation.evidence  # not before the settle period is over
    runner.settle_if_due(session, remediation, T0 + dt.timedelta(seconds=601))
    assert remediation.state == RemediationState.succeeded
    assert calls.read_text().split() == ["drain", "h0", "undrain", "h0"]
    assert remediation.evidence["undrain"]["outcome"] == "succeeded"


def test_a_failing_drain_hook_fails_the_step_before_anything_disruptive_runs(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    settings.scheduler_hooks = {"*": {"drain": ["/bin/false"]}}
    ran: list[str] = []
    cyborg_installed["reboot"] = lambda *_: ran.append("reboot") or {"outcome": "succeeded"}
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    assert ran == []
    assert remediation.state == RemediationState.failed
    assert remediation.steps[0].result["error"].startswith("drain before reboot failed")


def test_the_boot_a_host_action_ran_in_is_kept_with_its_result(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    """So that a report from that boot, stored after the reboot's result, is told apart as made before the
    fix (remediator/before_fix.py) instead of failing it."""
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    verified = {"boot_id": "boot-2"}
    report = result(envelope, boot_id_before="boot-1", verified=verified, finished_at=T0.isoformat())
    assert host_results.record_host_result(session, report, rs, T0) == "succeeded"
    assert remediation.steps[0].result["boot_id_before"] == "boot-1"
    assert remediation.steps[0].result["verified"] == verified
