"""Each decision policy alone (a firing it stops, one it lets through) and the order decide() walks them in.

The reasons are the decision log's words, compared byte for byte: the pages, the API and the docs show them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import planning, policies, safety
from remediator.evaluate import Firing
from remediator.models import Decision, Host, HostState, Remediation, RemediationState, RuleMode, RuleState
from remediator.policies import FiringContext, Stop
from remediator.rules import Breaker, Condition, PackSafety, Rollout, Rule, RuleSafety, RuleSet, Rung, Step
from remediator.signals import SignalValue
from tests.builders.policies import EVIDENCE, host, rule
from tests.builders.reports import LABEL, T0
from tests.conftest import REPO
from ticketing.models import Ticket
from ticketing.schemas import TicketRequest
from ticketing.service import open_ticket


def remediation(
    session: Session, on: Host, of: Rule, state: RemediationState, *, finished_at: dt.datetime | None = None
) -> Remediation:
    made = planning.create(session, on, of, list(of.plan), EVIDENCE, "test", 0, None, T0)
    assert made is not None
    made.state, made.finished_at = state, finished_at
    session.flush()
    return made


class Escalations(list[tuple[int, str]]):
    """Stands in for planning.escalate: what a policy asked to escalate, and why."""

    def __call__(self, remediation: Remediation, why: str) -> Remediation | None:
        self.append((remediation.id, why))
        return remediation


def firing(session: Session, on: Host, of: Rule, ruleset: RuleSet | None = None) -> FiringContext:
    return FiringContext(
        session,
        on,
        Firing(of, SignalValue("dimm_ce_rate", LABEL, 100.0)),
        ruleset or RuleSet(rules=[of], safety=PackSafety(spacing=0)),
        None,
        T0,
        escalate=Escalations(),
    )


def shaped(context: FiringContext, steps: list[str], reason: str = "the reason") -> FiringContext:
    """A firing as the policies before the one under test left it: its plan and reason known."""
    context.steps, context.reason = [Step(action=a) for a in steps], reason
    return context


def test_the_decision_policies_run_in_this_order_with_the_breaker_under_the_admission_lock() -> None:
    assert [p.name for p in policies.DECISION_POLICIES] == [
        "rollout_side_effect",  # first: nothing that stops a firing may hide a rollout's side effect
        "rule_paused",
        "breaker_open",
        "part_ticketed",
        "fault_returned_while_verifying",
        "returned_fault",
        "ppr_under_bmc_rate",  # shapes the plan returned_fault chose (the Redfish rules' review, finding 4)
        "host_busy",
        "rollout_wave",
        "breaker_opened_meanwhile",
        "breaker_trips",
        "flapping",
        "shadow",
    ]
    locked = [p.name for p in policies.DECISION_POLICIES if p.under_admission_lock]
    assert locked == ["breaker_opened_meanwhile", "breaker_trips"]


def test_the_rules_doc_lists_the_policies_and_gates_in_their_order() -> None:
    doc = (REPO / "docs" / "rules.md").read_text()
    text = doc[doc.index("## What happens when a rule fires") :]
    for registry in (policies.DECISION_POLICIES, safety.ADMISSION_GATES):
        where = [text.find(f"`{p.name}`") for p in registry]
        assert -1 not in where, [p.name for p in registry]
        assert where == sorted(where)


def test_rule_paused(session: Session) -> None:
    h0 = host(session)
    assert policies.RulePaused().check(firing(session, h0, rule())) is None
    session.add(RuleState(rule_id="test-rule", mode=RuleMode.paused))
    assert policies.RulePaused().check(firing(session, h0, rule())) == Stop("skipped", "rule paused")


def test_breaker_open(session: Session) -> None:
    h0 = host(session)
    state = RuleState(rule_id="test-rule", breaker_open=False)
    session.add(state)
    assert policies.BreakerOpen().check(firing(session, h0, rule())) is None
    state.breaker_open, state.breaker_reason = True, "fired on 40 hosts"
    assert policies.BreakerOpen().check(firing(session, h0, rule())) == Stop(
        "skipped", "breaker open: fired on 40 hosts"
    )


def test_part_ticketed(session: Session) -> None:
    h0 = host(session)
    assert policies.PartTicketed().check(firing(session, h0, rule())) is None
    request = TicketRequest(hostname="h0", part_type="dimm", part=LABEL, title="DIMM", evidence={})
    ticket, _ = open_ticket(session, request, actor="test", now=T0)
    shadowed = rule().model_copy(update={"mode": "shadow"})
    assert policies.PartTicketed().check(firing(session, h0, shadowed)) is None  # shadow changes no ticket
    stop = policies.PartTicketed().check(firing(session, h0, rule()))
    assert stop == Stop("held", f"ticket {ticket.id} ({ticket.state.value}) holds this part: detection added")


def test_fault_returned_while_verifying(session: Session) -> None:
    h0 = host(session)
    other = remediation(session, h0, rule(rule_id="other"), RemediationState.verifying)
    context = firing(session, h0, rule())
    assert policies.FaultReturnedWhileVerifying().check(context) is None
    assert context.escalate == []
    other.state, other.finished_at = RemediationState.succeeded, T0
    session.flush()
    verifying = remediation(session, h0, rule(), RemediationState.verifying)
    context = firing(session, h0, rule())
    why = "fault returned while verifying: dimm_ce_rate 100"
    assert policies.FaultReturnedWhileVerifying().check(context) == Stop(None, why, verifying)
    assert context.escalate == [(verifying.id, why)]


def skips(session: Session, context: FiringContext, active: Remediation) -> str | None:
    """The reason the policy skipped the firing for (recorded with the remediation's id), or None when it
    escalated instead."""
    outcome = policies.FaultReturnedWhileVerifying().check(context)
    assert outcome is not None
    assert outcome.decision is None
    if context.escalate:
        assert context.escalate == [(active.id, "fault returned while verifying: dimm_ce_rate 100")]
        return None
    session.flush()
    decision = session.scalars(select(Decision).order_by(Decision.id.desc())).first()
    assert decision is not None
    assert (decision.outcome, decision.reason) == ("skipped", outcome.reason)
    assert decision.remediation_id == active.id
    return outcome.reason


def test_a_report_made_before_the_fix_finished_is_not_a_returned_fault(session: Session) -> None:
    """The chaos bench's find: ingest 35 s behind stored reports the hosts made before their fix ended, and the
    fix was failed as 'fault returned while verifying' and handed to a technician. For a step the host ran
    without restarting, the report's time and the step's end are both the host's clock; a report from before
    the end is skipped (recorded with the remediation's id), one after it escalates."""
    from tests.builders.observations import report

    h0 = host(session)
    tune = rule(["tune_error_reporting"])
    verifying = remediation(session, h0, tune, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=11)  # central clock: the result was stored a minute later
    step.result = {"outcome": "succeeded", "finished_at": (T0 + dt.timedelta(minutes=10)).isoformat()}
    session.flush()

    stale = firing(session, h0, tune)
    stale.report = report(T0 + dt.timedelta(minutes=9, seconds=50))
    reason = skips(session, stale, verifying)
    assert reason == (
        "report captured at 2026-03-01T12:09:50+00:00, before the fix finished at 2026-03-01T12:10:00+00:00:"
        " not evidence that the fault returned"
    )

    fresh = firing(session, h0, tune)
    fresh.report = report(T0 + dt.timedelta(minutes=10, seconds=30))  # before the central clock's end: host's wins
    assert skips(session, fresh, verifying) is None


def test_a_central_only_end_time_never_skips(session: Session) -> None:
    """A step that ended on the central clock only (no host stamp in its result) is never compared with a
    report's host-clock time: ingest backlog or skew would hide reports made after the fix."""
    from tests.builders.observations import report

    h0 = host(session)
    tune = rule(["tune_error_reporting"])
    verifying = remediation(session, h0, tune, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at, step.result = T0 + dt.timedelta(minutes=10), {"outcome": "succeeded"}
    session.flush()
    stale = firing(session, h0, tune)
    stale.report = report(T0 + dt.timedelta(minutes=9))
    assert skips(session, stale, verifying) is None

    for n, central in enumerate(("undrain", "power_cycle"), start=1):  # central steps, a central-clock stamp
        other = rule([central])
        again = remediation(session, host(session, f"h{n}"), other, RemediationState.verifying)
        [step] = again.steps
        step.finished_at = T0 + dt.timedelta(minutes=10)
        step.result = {"outcome": "succeeded", "finished_at": step.finished_at.isoformat()}
        session.flush()
        late = firing(session, session.get_one(Host, again.host_id), other)
        late.report = report(T0 + dt.timedelta(minutes=9))
        assert skips(session, late, again) is None


def test_a_host_stamp_far_from_the_central_end_is_not_trusted(session: Session) -> None:
    """A host clock stepped (an RTC ahead before NTP) stamps the step's end far from when it was stored:
    beyond MAX_CLOCK_SKEW it is not trusted, and the firing counts."""
    from remediator.payloads import MAX_CLOCK_SKEW
    from tests.builders.observations import report

    h0 = host(session)
    tune = rule(["repair_irq_affinity"])
    verifying = remediation(session, h0, tune, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=10)
    ahead = step.finished_at + MAX_CLOCK_SKEW + dt.timedelta(hours=1)
    step.result = {"outcome": "succeeded", "finished_at": ahead.isoformat()}
    session.flush()
    made_after = firing(session, h0, tune)
    made_after.report = report(step.finished_at + dt.timedelta(minutes=30))  # after the fix, before the stamp
    assert skips(session, made_after, verifying) is None

    step.result = {"outcome": "succeeded", "finished_at": (step.finished_at + MAX_CLOCK_SKEW).isoformat()}
    session.flush()
    within = firing(session, h0, tune)
    within.report = report(step.finished_at + dt.timedelta(minutes=1))
    assert skips(session, within, verifying) is not None


def test_a_report_from_the_new_boot_is_after_the_reboot_whatever_its_time(session: Session) -> None:
    """The agent reports from the new boot before its worker stamps the reboot's result (resume() runs at
    worker_ready), and a clock may step at boot: a report from the boot the reboot verified is after the fix,
    even stamped before the result's end; with no boot id to tell by, the firing counts too."""
    from tests.builders.observations import report

    h0 = host(session)
    reboot = rule(["reboot"])
    verifying = remediation(session, h0, reboot, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=10)
    step.result = {
        "outcome": "succeeded",
        "changed": {"completed_across_restart": True},
        "verified": {"boot_id": "boot-2"},
        "finished_at": (T0 + dt.timedelta(minutes=10)).isoformat(),
    }
    session.flush()
    first = firing(session, h0, reboot)
    first.report = report(T0 + dt.timedelta(minutes=9, seconds=55), boot="boot-2")
    assert skips(session, first, verifying) is None

    unknown = firing(session, h0, reboot)  # the boot it left is not in the result: never skipped
    unknown.report = report(T0 + dt.timedelta(minutes=5), boot="boot-1")
    assert skips(session, unknown, verifying) is None


def test_a_report_from_the_old_boot_is_skipped(session: Session) -> None:
    """A reinstall records the boot it left (`boot_id_before`) and the one its host came back in
    (`reports_from`): a late report from the old boot is skipped, whatever its time; one from the new boot, or
    from a boot after it, counts."""
    from tests.builders.observations import report

    h0 = host(session)
    reimage = rule(["reimage"])
    verifying = remediation(session, h0, reimage, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=10)
    step.result = {"outcome": "succeeded", "boot_id_before": "boot-1", "reports_from": "boot-2"}
    session.flush()
    old = firing(session, h0, reimage)
    old.report = report(T0 + dt.timedelta(minutes=20), boot="boot-1")
    assert skips(session, old, verifying) == (
        "report from boot boot-1, before the fix restarted the host: not evidence that the fault returned"
    )
    for boot in ("boot-2", "boot-3"):
        later = firing(session, h0, reimage)
        later.report = report(T0 + dt.timedelta(minutes=1), boot=boot)
        assert skips(session, later, verifying) is None


def test_rollout_side_effect(session: Session) -> None:
    h0 = host(session)
    reflash = rule(["reflash_firmware"], rule_id="reflash").model_copy(
        update={"safety": RuleSafety(rollout=Rollout(side_effects=["test-rule"], bake="1d"))}
    )
    rs = RuleSet(rules=[reflash, rule()], safety=PackSafety(spacing=0))
    context = firing(session, h0, rule(), rs)
    assert policies.RolloutSideEffect().check(context) is None
    assert context.escalate == []  # no rollout on the host: nothing to halt
    verifying = remediation(session, h0, reflash, RemediationState.verifying)
    context = firing(session, h0, rule(), rs)
    assert policies.RolloutSideEffect().check(context) is None  # the firing itself goes on
    what = "side effect of reflash on h0: test-rule fired (dimm_ce_rate 100)"
    assert context.escalate == [(verifying.id, what)]
    verifying.state, verifying.finished_at = RemediationState.succeeded, T0 - dt.timedelta(hours=1)
    session.flush()
    assert policies.RolloutSideEffect().check(firing(session, h0, rule(), rs)) is None
    state = session.get_one(RuleState, "reflash")  # baking, not active: the rollout halts
    assert (state.breaker_open, state.breaker_reason) == (True, f"rollout halted: {what}")


def test_returned_fault(session: Session) -> None:
    h0 = host(session)
    laddered = rule(escalation=[Rung(plan=[Step(action="hard_ppr")])])
    context = firing(session, h0, laddered)
    assert policies.ReturnedFault().check(context) is None
    assert (context.rung, context.previous, [s.action for s in context.steps]) == (0, None, ["reboot"])
    assert context.reason == f"test-rule: dimm_ce_rate 100 on {LABEL}"
    fixed = remediation(session, h0, laddered, RemediationState.succeeded, finished_at=T0 - dt.timedelta(days=2))
    context = firing(session, h0, laddered)
    assert policies.ReturnedFault().check(context) is None
    assert (context.rung, context.previous, [s.action for s in context.steps]) == (1, fixed, ["hard_ppr"])
    assert (
        context.reason
        == f"test-rule: dimm_ce_rate 100 on {LABEL}; fault returned after remediation {fixed.id} succeeded"
    )
    fixed.rung = 1  # past the last rung a person decides
    context = firing(session, h0, laddered)
    policies.ReturnedFault().check(context)
    assert [(s.action, s.params["part_type"]) for s in context.steps] == [("ticket", "dimm")]
    fixed.finished_at = T0 - policies.REOPEN_WITHIN - dt.timedelta(seconds=1)  # too long ago: a new fault
    context = firing(session, h0, laddered)
    policies.ReturnedFault().check(context)
    assert (context.rung, context.previous) == (0, None)


def test_host_busy(session: Session) -> None:
    h0 = host(session)
    context = shaped(firing(session, h0, rule()), ["reboot"])
    assert policies.HostBusy().check(context) is None
    assert context.verdict == ""
    h0.state = HostState.awaiting_repair
    assert policies.HostBusy().check(shaped(firing(session, h0, rule()), ["reboot"])) == Stop(
        "held", "host is awaiting_repair"
    )
    h0.state = HostState.maintenance
    shadowed = rule(["ticket"]).model_copy(update={"mode": "shadow"})
    assert policies.HostBusy().check(shaped(firing(session, h0, shadowed), ["ticket"])) == Stop(
        "shadow", "would open a ticket (host is maintenance)"
    )
    h0.state = HostState.in_service
    active = remediation(session, h0, rule(rule_id="other", priority=4), RemediationState.running)
    context = shaped(firing(session, h0, rule(priority=4)), ["reboot"])
    assert policies.HostBusy().check(context) == Stop(
        "held", f"remediation {active.id} (other, priority 4) is active (priority 4 does not outrank 4)"
    )
    context = shaped(firing(session, h0, rule(priority=2)), ["reboot"])
    assert policies.HostBusy().check(context) is None  # it preempts: planned past the last policy
    assert (context.verdict, context.why) == (
        "preempt",
        f"preempts remediation {active.id} (other, priority 4): priority 2 before 4, nothing disruptive started",
    )


def test_host_busy_opens_a_persons_ticket_beside_what_holds_the_host(session: Session) -> None:
    h0 = host(session)
    h0.state = HostState.awaiting_repair
    stop = policies.HostBusy().check(shaped(firing(session, h0, rule(["ticket"])), ["ticket"]))
    assert stop is not None
    assert stop.decision == "ticketed"
    assert stop.reason.endswith(": host is awaiting_repair")


def test_rollout_wave(session: Session) -> None:
    canary, second = host(session, "h0", hardware_class="skx"), host(session, "h1", hardware_class="skx")
    reflash = rule(["reflash_firmware"], rule_id="reflash").model_copy(
        update={"safety": RuleSafety(rollout=Rollout(waves=[1, 2]))}
    )
    assert policies.RolloutWave().check(firing(session, second, rule())) is None  # no rollout
    starting = firing(session, canary, reflash)
    assert policies.RolloutWave().check(starting) is None  # the canary starts, in its class's rollout
    assert starting.rollout_id is not None
    remediation(session, canary, reflash, RemediationState.verifying).rollout_id = starting.rollout_id
    session.flush()
    assert policies.RolloutWave().check(firing(session, second, reflash)) == Stop(
        "held", "rollout: the canary (1 of 2 skx hosts) is still being verified"
    )
    returned = firing(session, second, reflash)
    returned.previous = canary  # any remediation: a returned fault is the host's own ladder
    assert policies.RolloutWave().check(returned) is None


def test_breaker_opened_meanwhile(session: Session) -> None:
    h0 = host(session)
    assert policies.BreakerOpenedMeanwhile().check(firing(session, h0, rule())) is None
    session.add(RuleState(rule_id="test-rule", breaker_open=True, breaker_reason="fired on 40 hosts"))
    session.flush()
    assert policies.BreakerOpenedMeanwhile().check(firing(session, h0, rule())) == Stop(
        "skipped", "breaker open: fired on 40 hosts"
    )


def test_breaker_trips(session: Session) -> None:
    h0, h1 = host(session, "h0"), host(session, "h1")
    remediation(session, h1, rule(), RemediationState.running)
    assert policies.BreakerTrips().check(firing(session, h0, rule())) is None
    assert session.get(RuleState, "test-rule") is None
    tight = rule(safety=RuleSafety(cooldown=0, settle=0, breaker=Breaker(max_hosts=1)))
    tripped = "fired on 2 hosts in datacenter dc1 within 3600s (max 1)"
    assert policies.BreakerTrips().check(firing(session, h0, tight)) == Stop("skipped", f"breaker tripped: {tripped}")
    state = session.get_one(RuleState, "test-rule")
    assert (state.breaker_open, state.breaker_reason) == (True, tripped)


def test_flapping(session: Session) -> None:
    h0 = host(session)
    rs = RuleSet(rules=[rule()], safety=PackSafety(spacing=0, flap_max=1))
    context = shaped(firing(session, h0, rule(), rs), ["reboot"])
    assert policies.Flapping().check(context) is None
    assert [s.action for s in context.steps] == ["reboot"]
    remediation(session, h0, rule(), RemediationState.succeeded, finished_at=T0)
    context = shaped(firing(session, h0, rule(), rs), ["drain", "ticket"])
    policies.Flapping().check(context)
    assert [s.action for s in context.steps] == ["drain", "ticket"]  # already a person's
    context = shaped(firing(session, h0, rule(), rs), ["reboot"])
    assert policies.Flapping().check(context) is None
    assert context.steps == policies.FLAP_TICKET
    assert context.reason == "the reason; host remediated 1 times within 7d: flapping"


def test_shadow(session: Session) -> None:
    h0 = host(session)
    assert policies.Shadow().check(shaped(firing(session, h0, rule()), ["reboot"])) is None
    shadowed = rule().model_copy(update={"mode": "shadow"})
    context = shaped(firing(session, h0, shadowed), ["drain", "reboot"])
    assert policies.Shadow().check(context) == Stop("shadow", "would plan drain, reboot: the reason")
    session.add(RuleState(rule_id="test-rule", mode=RuleMode.shadow))  # an operator's override
    context = shaped(firing(session, h0, rule()), ["reboot"])
    context.verdict, context.why = "preempt", "preempts remediation 7"
    assert policies.Shadow().check(context) == Stop("shadow", "would plan reboot: the reason (preempts remediation 7)")


def test_the_admission_lock_is_taken_once_per_firing(session: Session, monkeypatch: Any) -> None:
    taken: list[str] = []
    monkeypatch.setattr(policies, "serialize_on", lambda _session, name: taken.append(name))
    context = firing(session, host(session), rule())
    context.hold_admission_lock()
    context.hold_admission_lock()
    assert taken == ["remediator.admission"]


def test_a_host_step_that_did_not_restart_is_told_by_time_not_by_its_boot(session: Session) -> None:
    """Every host result carries the boot it ran in (`boot_id_before`), restarting or not. A fix that did not
    restart the host leaves it in that boot, so every later report comes from it too: judged by boot id, each
    would be 'before the fix' and a fault that came back while verifying would never count. A non-restarting
    action is told by the host's clock; a report from the same boot made after the fix escalates."""
    from tests.builders.observations import report

    h0 = host(session)
    repair = rule(["repair_irq_affinity"])
    verifying = remediation(session, h0, repair, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=10)
    step.result = {  # as cyborg.host.executor reports it and remediator.host_results keeps it
        "outcome": "succeeded",
        "changed": {"cpu2": "0-1"},
        "boot_id_before": "boot-1",
        "finished_at": (T0 + dt.timedelta(minutes=10)).isoformat(),
    }
    session.flush()
    after = firing(session, h0, repair)
    after.report = report(T0 + dt.timedelta(minutes=20), boot="boot-1")
    assert skips(session, after, verifying) is None
    before = firing(session, h0, repair)
    before.report = report(T0 + dt.timedelta(minutes=9), boot="boot-1")
    assert skips(session, before, verifying) is not None


def test_a_dry_run_of_a_restarting_action_is_told_by_time(session: Session) -> None:
    """A dry run of a reboot says `restarting` and restarts nothing (no verified boot): judged by boot id,
    every later report would be 'before the fix' and a fault that came back would never count."""
    from tests.builders.observations import report

    h0 = host(session)
    reboot = rule(["reboot"])
    verifying = remediation(session, h0, reboot, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=10)
    step.result = {
        "outcome": "succeeded",
        "changed": {"via": "reboot", "restarting": True},
        "verified": {},
        "boot_id_before": "boot-1",
        "finished_at": (T0 + dt.timedelta(minutes=10)).isoformat(),
    }
    session.flush()
    after = firing(session, h0, reboot)
    after.report = report(T0 + dt.timedelta(minutes=20), boot="boot-1")
    assert skips(session, after, verifying) is None


def test_a_reboot_credited_by_the_hosts_reports_skips_a_late_report_from_the_boot_it_left(session: Session) -> None:
    """remediator.deadlines completes a reboot whose result was lost on a report from another boot; it keeps
    the boot the host left, so a report from that boot stored late is not a returned fault."""
    from tests.builders.observations import report

    h0 = host(session)
    reboot = rule(["reboot"])
    verifying = remediation(session, h0, reboot, RemediationState.verifying)
    [step] = verifying.steps
    step.finished_at = T0 + dt.timedelta(minutes=10)
    step.result = {"outcome": "succeeded", "boot_id_before": "boot-1", "reports_from": "boot-2", "result_missing": "…"}
    session.flush()
    old = firing(session, h0, reboot)
    old.report = report(T0 + dt.timedelta(minutes=20), boot="boot-1")
    assert skips(session, old, verifying) is not None
    new = firing(session, h0, reboot)
    new.report = report(T0 + dt.timedelta(minutes=20), boot="boot-2")
    assert skips(session, new, verifying) is None


def test_a_decision_is_recorded_once_per_rule_and_subject() -> None:
    """A rule about devices fires for each: two ports held beside one another are two decisions, each recorded
    once, not alternately every report (the last decision was kept per rule only); the keys are bounded."""
    from remediator.decisions import DECIDED_KEPT, record

    class Rows(list[Decision]):
        def add(self, row: Decision) -> None:
            self.append(row)

    rows, held = Rows(), Host(hostname="h1", memory={})
    for subject in ("eth0", "eth1", "eth0", "eth1", "eth0"):
        record(rows, held, "nic-carrier-flapping", "held", "remediation 1 is active", subject=subject, now=T0)  # type: ignore[arg-type]
    assert [r.subject for r in rows] == ["eth0", "eth1"]
    record(rows, held, "nic-carrier-flapping", "planned", "fired", subject="eth0", now=T0)  # type: ignore[arg-type]
    assert [(r.subject, r.outcome) for r in rows][-1] == ("eth0", "planned")
    for n in range(DECIDED_KEPT + 10):
        record(rows, held, "page-ce-soft-offline", "held", "x", subject=f"0x{n:x}000", now=T0)  # type: ignore[arg-type]
    assert len(held.memory["decided"]) == DECIDED_KEPT
    assert "page-ce-soft-offline 0x0000" not in held.memory["decided"]  # the oldest went first


def test_another_devices_firing_while_one_is_verified_is_not_that_fix_failing(session: Session) -> None:
    """dimm-ce-ppr repaired DIMM A and verifies it; DIMM B fires the same rule: A's fix did not fail (escalating
    it ticketed the repaired DIMM with A's evidence), and B is not A's fault returning (review r1, finding 4). A
    rule whose ladder acts on the whole host (a reboot) judges every device's firing as the fix not holding, as
    before (review r8, finding 3)."""
    ppr = rule(["hard_ppr"])
    h0 = host(session)
    verifying = remediation(session, h0, ppr, RemediationState.verifying)  # on LABEL

    def on(of: Rule, subject: str) -> FiringContext:
        return FiringContext(
            session,
            h0,
            Firing(of, SignalValue("dimm_ce_rate", subject, 100.0)),
            RuleSet(rules=[of], safety=PackSafety(spacing=0)),
            None,
            T0,
            escalate=Escalations(),
        )

    other_dimm = on(ppr, "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0")
    assert policies.FaultReturnedWhileVerifying().check(other_dimm) is None
    assert other_dimm.escalate == []
    rebooting = on(rule(), "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0")  # the builders' rule reboots the host
    assert policies.FaultReturnedWhileVerifying().check(rebooting) is not None
    verifying.state, verifying.finished_at = RemediationState.succeeded, T0
    session.flush()
    assert policies.returned_fault(session, h0, ppr, T0, other_dimm.signal.subject) is None
    assert policies.returned_fault(session, h0, ppr, T0, LABEL) == verifying


def test_one_gpu_under_its_two_names_is_one_part(session: Session) -> None:
    """gpu_xid names a GPU `gpu2 00000000:3B:00.0` when nvidia-smi lists it and `0000:3b:00.0` when it does not
    (around exactly the faults the rules fix): the same GPU's Xid while its reset verifies is the reset failing,
    and after a success its fault returning (review r8, finding 1)."""
    xid = Rule(
        id="gpu-xid-reset",
        description="d",
        when=Condition(signal="gpu_xid", value=1),
        plan=[Step(action="reset_gpu")],
        escalation=[Rung(plan=[Step(action="ticket", params={"part_type": "gpu"})])],
    )
    h0 = host(session)
    evidence = {"signal": {"subject": "gpu2 00000000:3B:00.0", "value": 1.0}}
    made = planning.create(session, h0, xid, list(xid.plan), evidence, "t", 0, None, T0)
    assert made is not None
    made.state = RemediationState.verifying
    session.flush()
    bare = FiringContext(
        session,
        h0,
        Firing(xid, SignalValue("gpu_xid", "0000:3b:00.0", 1.0, {"code": 119})),
        RuleSet(rules=[xid], safety=PackSafety(spacing=0)),
        None,
        T0,
        escalate=Escalations(),
    )
    assert policies.FaultReturnedWhileVerifying().check(bare) is not None  # escalates: the reset did not hold
    made.state, made.finished_at = RemediationState.succeeded, T0
    session.flush()
    assert policies.returned_fault(session, h0, xid, T0, "0000:3b:00.0") == made
    assert policies.returned_fault(session, h0, xid, T0, "gpu1 00000000:3B:00.0") == made  # an index shift
    assert policies.returned_fault(session, h0, xid, T0, "0000:65:00.0") is None


def test_a_device_held_behind_the_same_rule_on_another_device_gets_its_ticket_when_its_signal_is_an_event(
    session: Session,
) -> None:
    """GPU A is being reset (gpu-xid-reset); GPU B logs its own Xid in the same report: the Xid is not repeated,
    so holding B lost its fault (review r1, finding 3). B gets the rule's ticket beside A's reset. A level signal
    (a DIMM's CE rate) is held: it fires again once the host is free, and keeps its automated fix."""
    xid = Rule(
        id="gpu-xid-reset",
        description="d",
        when=Condition(signal="gpu_xid", value=1),
        plan=[Step(action="reset_gpu")],
        escalation=[
            Rung(plan=[Step(action="ticket", params={"part_type": "gpu", "title": "GPU {subject}: the reset failed"})])
        ],
    )
    h0 = host(session)
    made = planning.create(
        session, h0, xid, list(xid.plan), {"signal": {"subject": "0000:17:00.0", "value": 1.0}}, "t", 0, None, T0
    )
    assert made is not None
    context = FiringContext(
        session,
        h0,
        Firing(xid, SignalValue("gpu_xid", "0000:65:00.0", 1.0, {"code": 119})),
        RuleSet(rules=[xid], safety=PackSafety(spacing=0)),
        None,
        T0,
        escalate=Escalations(),
    )
    context.steps = list(xid.plan)
    stop = policies.HostBusy().check(context)
    assert stop is not None
    assert stop.decision == "ticketed"
    assert "gpu_xid is not repeated" in stop.reason
    tickets = session.scalars(select(Ticket).where(Ticket.hostname == "h0")).all()
    assert [(t.part_type, t.part) for t in tickets] == [("gpu", "0000:65:00.0")]
    # its own title: the rule's last ticket says a reset failed, and none was tried on this GPU
    assert tickets[0].title.startswith("h0 0000:65:00.0: gpu-xid-reset (gpu_xid 1) while gpu-xid-reset runs on 0000:17")
    level = firing(session, h0, rule(rule_id="gpu-xid-reset"))  # the same rule id, a level signal's firing
    level.steps = [Step(action="reboot")]
    assert policies.HostBusy().check(level) == Stop("held", level.why)


def _xid_rule(rule_id: str, plan: list[Step], **when: Any) -> Rule:
    return Rule(
        id=rule_id,
        description="d",
        when=Condition.model_validate({"signal": "gpu_xid", "value": 1, **when}),
        plan=plan,
        escalation=[Rung(plan=[Step(action="ticket", params={"part_type": "gpu", "title": "GPU {subject}"})])],
    )


def _busy(session: Session, h0: Host, of: Rule, subject: str, plan: list[Step]) -> FiringContext:
    context = FiringContext(
        session,
        h0,
        Firing(of, SignalValue("gpu_xid", subject, 1.0, {"code": 48})),
        RuleSet(rules=[of], safety=PackSafety(spacing=0)),
        None,
        T0,
        escalate=Escalations(),
    )
    context.steps = plan
    return context


def test_whatever_holds_an_event_firing_it_gets_a_ticket_unless_the_hold_covers_its_device(
    session: Session,
) -> None:
    """Review r8: an Xid held behind ANOTHER rule's fix on another GPU, or on a host awaiting repair, is lost
    too: a ticket (finding 2); held as before behind a plan that will reboot or power-cycle the host (it covers
    this GPU: finding 3), behind a plan on this very GPU under another name (finding 1), in maintenance, and for
    a rule with a window (it re-fires from its samples: finding 4)."""
    reset = _xid_rule("gpu-xid-reset", [Step(action="reset_gpu")])
    dbe = _xid_rule("gpu-xid-dbe", [Step(action="reset_gpu")])
    h0 = host(session)
    made = planning.create(
        session,
        h0,
        reset,
        list(reset.plan),
        {"signal": {"subject": "gpu0 00000000:17:00.0", "value": 1.0}},
        "t",
        0,
        None,
        T0,
    )
    assert made is not None
    other_rule = _busy(session, h0, dbe, "0000:65:00.0", list(dbe.plan))
    stop = policies.HostBusy().check(other_rule)
    assert stop is not None
    assert stop.decision == "ticketed"
    same_gpu = _busy(session, h0, dbe, "0000:17:00.0", list(dbe.plan))  # gpu0's reset runs on it
    assert policies.HostBusy().check(same_gpu) == Stop("held", same_gpu.why)
    windowed = _xid_rule("gpu-xid-repeated", [Step(action="reset_gpu")], window="1h", aggregate="count")
    counted = _busy(session, h0, windowed, "0000:b3:00.0", list(windowed.plan))
    assert policies.HostBusy().check(counted) == Stop("held", counted.why)
    made.state, made.finished_at = RemediationState.cancelled, T0
    reboot = _xid_rule("gpu-xid-reboot", [Step(action="drain"), Step(action="reboot")])
    rebooting = planning.create(
        session, h0, reboot, list(reboot.plan), {"signal": {"subject": "0000:17:00.0", "value": 1.0}}, "t", 0, None, T0
    )
    assert rebooting is not None
    session.flush()
    covered = _busy(session, h0, dbe, "0000:65:00.0", list(dbe.plan))
    assert policies.HostBusy().check(covered) == Stop("held", covered.why)
    rebooting.state, rebooting.finished_at = RemediationState.cancelled, T0
    session.flush()
    for state, decision in ((HostState.awaiting_repair, "ticketed"), (HostState.maintenance, "held")):
        h0.state = state
        waiting = _busy(session, h0, dbe, "0000:ca:00.0", list(dbe.plan))
        stop = policies.HostBusy().check(waiting)
        assert stop is not None
        assert stop.decision == decision, (state, stop)
