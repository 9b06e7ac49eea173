"""A host's result that never reaches the central side: a central worker killed while it holds the
`remediator.step_result` message keeps it from every other worker until Redis' visibility timeout (an
hour), long after the step's deadline. For an action that restarts the host, the host's own reports tell
the restart happened (another boot id than when the step was sent): the deadline completes the step on
that evidence instead of power-cycling a host that came back, and the result, when it comes, is kept.
Nothing else is credited that way: a non-restarting action, a host still in its old boot, a restart this
sweep caused by its power cycle."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import AuditEntry
from core.settings import Settings
from cyborg.central import CentralCyborg
from cyborg.drivers.bmc import SimulatedBmc
from remediator import deadlines, host_results, runner, stopping
from remediator.models import Host, Remediation, RemediationState, StepState
from remediator.rules import RuleSet
from tests.builders.remediations import plan, remediation_of, result, sent_envelopes
from tests.builders.reports import T0
from tests.builders.runtime import rewire


def sent(
    session: Session, actions: list[str], *, started: str | None = "boot-1", params: dict[str, Any] | None = None
) -> tuple[RuleSet, Remediation, list[str]]:
    """A plan on h0 (booted as boot-1) whose first step (with `params`) went to the host; `started`: the boot
    the host said it began in (None: no start notice came). Returns the ruleset, the remediation and the
    hosts the simulated BMC power-cycled (filled as it does)."""
    rs, remediation = plan(session, actions, escalation=[["reimage"]])
    if params:
        rule = rs.rules[0]
        steps = [rule.plan[0].model_copy(update={"params": params}), *rule.plan[1:]]
        rs = rs.model_copy(update={"rules": [rule.model_copy(update={"plan": steps})]})
        for step in remediation.steps[:1]:
            step.params = params
    session.get_one(Host, remediation.host_id).boot_id = "boot-1"
    session.flush()
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [envelope] = sent_envelopes(session)
    if started is not None:
        notice = {**result(envelope), "accepted_at": T0.isoformat(), "boot_id": started}
        host_results.record_host_started(session, notice, T0)
    return rs, remediation, []


def with_bmc(session: Session, settings: Settings, cycled: list[str]) -> None:
    from checker.sim.standalone import standalone_host

    bmc = SimulatedBmc({"h0": standalone_host("h0")}, on_boot=cycled.append)
    rewire(session, cyborg=CentralCyborg(settings, bmc=bmc))


def reboots_into(session: Session, remediation: Remediation, boot: str | None) -> None:
    session.get_one(Host, remediation.host_id).boot_id = boot
    session.flush()


def test_a_reboot_whose_result_was_lost_is_done_by_the_hosts_reports(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    rs, remediation, cycled = sent(session, ["reboot", "tune_error_reporting"])
    with_bmc(session, settings, cycled)
    step = remediation.steps[0]
    assert step.result["boot_id_sent"] == "boot-1"
    assert step.deadline is not None
    reboots_into(session, remediation, "boot-2")
    assert deadlines.check_deadlines(session, rs, step.deadline - dt.timedelta(seconds=1)) == 0  # its result may come
    due = step.deadline + dt.timedelta(seconds=1)
    assert deadlines.check_deadlines(session, rs, due) == 1
    assert (step.state, cycled) == (StepState.succeeded, [])  # no power cycle of a host that came back
    assert step.result["outcome"] == "succeeded"
    assert step.result["reports_from"] == "boot-2"
    assert step.result["boot_id_before"] == "boot-1"  # a late report from it is told apart as made before
    assert "reported from boot boot-2 since it was in boot boot-1 for this step" in step.result["result_missing"]
    assert remediation.state == RemediationState.running
    assert runner.has_next(remediation)  # the plan goes on to its next step
    audit = session.scalars(select(AuditEntry).where(AuditEntry.action == "cyborg.result.missing")).one()
    assert audit.object_id == str(remediation.id)

    [envelope] = sent_envelopes(session)[:1]
    late = result(envelope, boot_id_before="boot-1", verified={"boot_id": "boot-2"})
    assert host_results.record_host_result(session, late, rs, due + dt.timedelta(hours=1)) == "late"
    assert step.state == StepState.succeeded
    assert step.result["late_report"]["verified"] == {"boot_id": "boot-2"}


def test_a_reboot_whose_start_notice_was_lost_too_is_done_by_the_reports(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    """The killed worker may hold the start notice as well: without the evidence the step would fail as
    never started and the plan's next rung (here a reinstall) would run on a host that rebooted fine."""
    rs, remediation, cycled = sent(session, ["reboot"], started=None)
    with_bmc(session, settings, cycled)
    step = remediation.steps[0]
    assert step.accepted_at is None
    assert step.deadline is not None
    reboots_into(session, remediation, "boot-2")
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert step.state == StepState.succeeded
    assert remediation_of(session, "h0").id == remediation.id  # no reinstall planned


def test_a_host_still_in_the_boot_the_step_was_sent_in_is_power_cycled(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    rs, remediation, cycled = sent(session, ["reboot"])
    with_bmc(session, settings, cycled)
    step = remediation.steps[0]
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert (step.state, cycled) == (StepState.running, ["h0"])
    assert "result_missing" not in step.result
    # the host comes back from the power cycle; its result is lost again: the power cycle restarted it, not
    # the action, so that boot is not credited to the reboot
    reboots_into(session, remediation, "boot-2")
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert step.state == StepState.failed
    assert "did not come back after reboot" in remediation_of(session, "h0").reason


def test_a_non_restarting_action_is_never_credited_by_a_new_boot(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    """A new boot says nothing about an IRQ affinity repair: without its result the host goes to a person,
    and the ticket does not claim the host is down."""
    rs, remediation, _ = sent(session, ["repair_irq_affinity"])
    step = remediation.steps[0]
    assert step.deadline is not None
    reboots_into(session, remediation, "boot-2")
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert step.state == StepState.failed
    person = remediation_of(session, "h0")
    assert [s.action for s in person.steps] == ["ticket"]
    assert "no result for repair_irq_affinity (step 0) by its deadline" in person.reason
    assert "did not come back" not in person.reason


def test_a_stopped_reboot_whose_result_was_lost_lets_its_host_go(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    rs, remediation, _ = sent(session, ["reboot"])
    stopping.stop(session, remediation.id, actor="user:ops", reason="change freeze", now=T0)
    step = remediation.steps[0]
    assert stopping.held(step)
    assert step.deadline is not None
    reboots_into(session, remediation, "boot-2")
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert not stopping.held(step)
    assert step.state == StepState.failed  # stopped, as it was; the evidence is kept on it
    assert step.result["reports_from"] == "boot-2"
    ended = session.scalars(select(AuditEntry).where(AuditEntry.action == "remediator.remediation.hold_ended")).one()
    assert ended.detail["released"] is True
    assert ended.detail["ticket_id"] is None
    assert "restarted for step 0 (reboot) after a stop" in ended.reason


def test_a_reboot_started_after_the_host_restarted_on_its_own_is_told_by_the_boot_it_started_in(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    """h0 restarted (boot-1 -> boot-2) before the envelope came, started the reboot in boot-2 and hung: its
    reports from boot-2 are no evidence of the reboot, and it gets its power cycle."""
    rs, remediation, cycled = sent(session, ["reboot"], started="boot-2")
    with_bmc(session, settings, cycled)
    step = remediation.steps[0]
    assert step.result["boot_id_started"] == "boot-2"
    reboots_into(session, remediation, "boot-2")
    assert step.deadline is not None
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert (step.state, cycled) == (StepState.running, ["h0"])


def test_a_hard_ppr_whose_result_was_lost_goes_to_a_person_not_a_power_cycle(
    session: Session, cyborg_installed: dict[str, Any], settings: Settings
) -> None:
    """A new boot says the host restarted, not that the PPR ran or that error reporting is back on CMCI (a
    crash in firmware-first mode restarts it too): a ticket that says so; no power cycle of a host that came
    back, and nothing credited."""
    rs, remediation, cycled = sent(session, ["hard_ppr"], params={"dimm": "CPU0_DIMM_A1"})
    with_bmc(session, settings, cycled)
    step = remediation.steps[0]
    assert step.deadline is not None
    reboots_into(session, remediation, "boot-2")
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    assert (step.state, cycled) == (StepState.failed, [])
    assert step.result["reports_from"] == "boot-2"
    person = remediation_of(session, "h0")
    assert [s.action for s in person.steps] == ["ticket"]
    assert "no result for hard_ppr (step 0); h0 restarted since (boot boot-2): check whether hard_ppr took" in (
        person.reason
    )


def test_a_stopped_hard_ppr_whose_host_restarted_goes_to_a_person(
    session: Session, cyborg_installed: dict[str, Any]
) -> None:
    """A stopped plan is never verified: a restart is no sign the PPR took, so the host is not let go."""
    rs, remediation, _ = sent(session, ["hard_ppr"], params={"dimm": "CPU0_DIMM_A1"})
    stopping.stop(session, remediation.id, actor="user:ops", reason="change freeze", now=T0)
    step = remediation.steps[0]
    assert step.deadline is not None
    reboots_into(session, remediation, "boot-2")
    assert deadlines.check_deadlines(session, rs, step.deadline + dt.timedelta(seconds=1)) == 1
    ended = session.scalars(select(AuditEntry).where(AuditEntry.action == "remediator.remediation.hold_ended")).one()
    assert ended.detail["released"] is False
    assert ended.detail["ticket_id"] is not None
    assert "h0 restarted since: check whether hard_ppr took" in ended.reason
