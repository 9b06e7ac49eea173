"""The decision policies: what a rule firing on a host does, in the order `DECISION_POLICIES` declares
(`planning.decide` walks them; `safety.ADMISSION_GATES` then say whether the remediation may start).

Each policy is a small object with a name and a check, testable alone. A check returns None to let
the firing go on, or a Stop: the decision recorded (skipped, held, shadow, ticketed) with the reason
an operator reads in the decision log. Some policies also shape the plan on the way (its rung, a
flapping host's ticket); what comes out of the last one is planned.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from core.db import serialize_on
from remediator import preemption, repairs, rollouts, safety
from remediator.before_fix import before_the_fix
from remediator.decisions import active_remediation, record
from remediator.evaluate import Firing
from remediator.models import (
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    RuleMode,
    RuleState,
    Signal,
    StepState,
)
from remediator.parts import HOST_SCOPE_ACTIONS, acts_on_the_host, fires_per_device, lost_if_held, same_part
from remediator.rules import Rule, RuleSet, Step
from remediator.signals import SignalValue

REOPEN_WITHIN = dt.timedelta(days=30)
FLAP_TICKET = [Step(action="ticket", params={"part_type": "host", "title": "Flapping: {hostname} needs a person"})]


@dataclass
class FiringContext:
    """A rule fired on a host: what the decision policies read, and the plan they shape on the way."""

    session: Session
    host: Host
    firing: Firing
    ruleset: RuleSet
    report: Report | None
    now: dt.datetime
    escalate: Callable[[Remediation, str], Remediation | None]
    """Fail a remediation and start its next rung (planning.escalate, bound to this firing's session)."""
    rung: int = 0
    previous: Remediation | None = None
    """The remediation of this rule that succeeded on this host within REOPEN_WITHIN: the fault came back."""
    steps: list[Step] = field(default_factory=list)
    verdict: str = ""
    """What the firing does about the host's active remediation ("preempt" is the one that goes on)."""
    why: str = ""
    reason: str = ""
    """The planned remediation's reason, grown by the policies."""
    rollout_id: int | None = None
    """The rollout whose wave the planned remediation starts (remediator.rollouts)."""
    _active: Remediation | None = field(default=None, init=False, repr=False)
    _active_loaded: bool = field(default=False, init=False, repr=False)
    _locked: bool = field(default=False, init=False, repr=False)

    @property
    def rule(self) -> Rule:
        return self.firing.rule

    @property
    def signal(self) -> SignalValue:
        return self.firing.signal

    @cached_property
    def state(self) -> RuleState | None:
        return safety.rule_state(self.session, self.rule.id)

    @cached_property
    def mode(self) -> RuleMode:
        return safety.effective_mode(self.rule, self.state)

    @property
    def active(self) -> Remediation | None:
        """The host's active remediation, read when a policy first asks (and again after an escalation)."""
        if not self._active_loaded:
            self._active, self._active_loaded = active_remediation(self.session, self.host.id), True
        return self._active

    def forget_active(self) -> None:
        self._active_loaded = False

    def hold_admission_lock(self) -> None:
        """Take the admission lock (held until commit) once: the breaker is counted under it, as the caps are,
        so two ingest transactions cannot each see room for one more host below the breaker and both plan."""
        if not self._locked:
            serialize_on(self.session, safety.ADMISSION_LOCK)
            self._locked = True


@dataclass(frozen=True)
class Stop:
    """A policy ends the firing here: `decision` (skipped, held, shadow, ticketed) is recorded with `reason`,
    unless it is None (the policy's own action recorded what happened, as an escalation does)."""

    decision: str | None
    reason: str
    remediation: Remediation | None = None


class DecisionPolicy(ABC):
    name: ClassVar[str]
    under_admission_lock: ClassVar[bool] = False
    """The walk takes the admission lock before this policy's check."""

    @abstractmethod
    def check(self, firing: FiringContext) -> Stop | None:
        """None lets the firing go on to the next policy."""


class RulePaused(DecisionPolicy):
    name = "rule_paused"

    def check(self, firing: FiringContext) -> Stop | None:
        return Stop("skipped", "rule paused") if firing.mode == RuleMode.paused else None


class BreakerOpen(DecisionPolicy):
    name = "breaker_open"

    def check(self, firing: FiringContext) -> Stop | None:
        state = firing.state
        if state is not None and state.breaker_open:
            return Stop("skipped", f"breaker open: {state.breaker_reason}")
        return None


class PartTicketed(DecisionPolicy):
    """A part with a ticket: the detection goes to its ticket (not in shadow mode: that would change it)."""

    name = "part_ticketed"

    def check(self, firing: FiringContext) -> Stop | None:
        if firing.mode == RuleMode.shadow:
            return None
        ticketed = repairs.route_detection(firing.session, firing.host, firing.firing, firing.now)
        return Stop("held", ticketed) if ticketed is not None else None


class FaultReturnedWhileVerifying(DecisionPolicy):
    """The same rule fires while its fix is being verified: the fix did not hold, the remediation escalates."""

    name = "fault_returned_while_verifying"

    def check(self, firing: FiringContext) -> Stop | None:
        active, signal = firing.active, firing.signal
        if active is None or active.state != RemediationState.verifying or active.rule_id != firing.rule.id:
            return None
        if per_subject(firing.rule) and not same_part(firing.rule, active.subject, signal.subject):
            return None  # another page erring while one settles is not that page's fault coming back
        skipped = before_the_fix(active, firing.report)
        if skipped is not None:
            # A report the host made before the fix ended (queued behind a backlog, or late) shows the fault the
            # fix was for, not its return; the host's next report is the evidence either way. Recorded here, with
            # the remediation it was about (a Stop's remediation is what decide() returns, not the decision's).
            record(
                firing.session,
                firing.host,
                firing.rule.id,
                "skipped",
                skipped,
                remediation_id=active.id,
                subject=signal.subject,
                value=signal.value,
                now=firing.now,
            )
            return Stop(None, skipped)
        why = f"fault returned while verifying: {signal.kind} {signal.value:.3g}"
        return Stop(None, why, firing.escalate(active, why))


class RolloutSideEffect(DecisionPolicy):
    """A rule named in a rollout's side effects fires on one of its hosts while the change is verified (the
    fix did not hold: the next rung, and a halt) or bakes (the rollout halts). The firing itself goes on.

    Asked before the policies that stop a firing: a canary whose panic goes to the host's open ticket, whose
    panic rule's breaker is open (perhaps because of the rollout itself), or whose panic rule an operator
    paused as too noisy, still halts the rollout; halting only stops more hosts from changing."""

    name = "rollout_side_effect"

    def check(self, firing: FiringContext) -> Stop | None:
        host, rule, signal = firing.host, firing.rule, firing.signal
        baking = rollouts.baking(firing.session, host, rule, firing.ruleset, firing.now)
        if baking is None:
            return None
        what = f"side effect of {baking.rule_id} on {host.hostname}: {rule.id} fired ({signal.kind} {signal.value:.3g})"
        if baking.active:
            firing.escalate(baking, what)  # a failure of the rollout's change: planning.escalate halts it
            firing.forget_active()
        elif not rollouts.halt_for(firing.session, baking, what, firing.now):
            safety.open_breaker(firing.session, baking.rule_id, f"rollout halted: {what}", firing.now)
        return None


class ReturnedFault(DecisionPolicy):
    """Which rung to plan: the next one when the rule's last fix of this host succeeded recently."""

    name = "returned_fault"

    def check(self, firing: FiringContext) -> Stop | None:
        host, rule, signal = firing.host, firing.rule, firing.signal
        previous = returned_fault(firing.session, host, rule, firing.now, signal.subject)
        if previous is not None:
            firing.rung, firing.previous = previous.rung + 1, previous
        firing.steps = rule.rung(firing.rung) or ladder_end(rule)
        firing.reason = f"{rule.id}: {signal.kind} {signal.value:.3g} on {signal.subject or host.hostname}"
        if previous is not None:
            firing.reason += f"; fault returned after remediation {previous.id} succeeded"
        return None


PPR_BMC_RATE = 1.0  # CE/s: dimm-ce-ppr's own ceiling (an SMI per CE during the firmware-first capture)
PPR_BMC_WITHIN = dt.timedelta(hours=2)  # two of the BMC's hourly inventory reads
PPR_BMC_TICKET = Step(
    action="ticket",
    params={
        "part_type": "dimm",
        "title": "DIMM {subject}: the BMC counts 1 CE/s or more on this host, too fast for hard PPR's "
        "firmware-first capture: replace or decide",
    },
)


class PprUnderBmcRate(DecisionPolicy):
    """A hard_ppr plan becomes a ticket when the BMC counted 1 CE/s or more on any of the host's DIMMs within
    two hours (the review of the Redfish rules, finding 4): an EDAC driver that latches one error per channel
    per poll (ie31200) can show dimm-ce-ppr's < 1 CE/s while the BMC counts 20; switching that host to
    firmware-first is one SMI per CE, what the rule's 1 CE/s ceiling exists to prevent."""

    name = "ppr_under_bmc_rate"

    def check(self, firing: FiringContext) -> Stop | None:
        if not any(step.action == "hard_ppr" for step in firing.steps):
            return None
        seen = firing.session.scalars(
            select(Signal.value)
            .where(
                Signal.host_id == firing.host.id,
                Signal.kind == "bmc_dimm_ce_rate",
                Signal.value >= PPR_BMC_RATE,
                Signal.observed_at >= firing.now - PPR_BMC_WITHIN,
            )
            .order_by(Signal.value.desc())
            .limit(1)
        ).first()
        if seen is not None:
            firing.steps = [PPR_BMC_TICKET]
            firing.reason += f"; hard PPR refused: the BMC counted {seen:.1f} CE/s on the host within 2 h"
        return None


class HostBusy(DecisionPolicy):
    """Another remediation is active on the host, or it awaits repair or is in maintenance (unreachable hosts
    are fair game): hold, open the plan's ticket beside it, or go on to preempt it (remediator.preemption)."""

    name = "host_busy"

    def check(self, firing: FiringContext) -> Stop | None:
        host, active = firing.host, firing.active
        if active is not None:
            firing.verdict, firing.why = preemption.verdict(
                active, firing.rule, firing.steps, firing.ruleset, firing.signal.subject
            )
        elif host.state in (HostState.awaiting_repair, HostState.maintenance):
            firing.verdict = "beside" if preemption.person_only(firing.steps) else "hold"
            firing.why = f"host is {host.state.value}"
        elif held_by_a_stop(firing.session, host):
            firing.verdict = "beside" if preemption.person_only(firing.steps) else "hold"
            firing.why = "host is held: a stopped remediation's step may still be running on it"
        if firing.verdict == "hold" and (ticket := ticket_for_a_lost_event(firing)) is not None:
            firing.steps, firing.verdict = [ticket], "beside"
            firing.why += f"; {firing.signal.kind} is not repeated: its ticket is opened now, not held"
        if firing.verdict == "hold":
            return Stop("held", firing.why)
        if firing.verdict != "beside":
            return None
        if firing.mode == RuleMode.shadow:
            return Stop("shadow", f"would open a ticket ({firing.why})")
        ticket_id = preemption.ticket_beside(
            firing.session, host, firing.firing, firing.steps, firing.report, firing.now
        )
        return Stop("ticketed", f"ticket {ticket_id}: {firing.why}")


def ticket_for_a_lost_event(firing: FiringContext) -> Step | None:
    """A device's firing that would be held: a signal counted from events is not repeated in the next report,
    so holding it lost the device's fault (review r1 of per-device firing, finding 3; review r8, finding 2:
    whatever holds it, another rule's plan or a host awaiting repair). Its ticket instead, of the part its
    ladder ends in (the rule's last ticket step's part type, part and in_service, else the ladder's end), with a
    title of its own: that step's title may say a fix failed, and none was tried on this device. Held as
    before: a rule whose firing comes back (a level, a rate, a window: remediator.parts.lost_if_held), a host
    in maintenance (its work makes faults), an active plan on this very part (the GPU under its other name:
    review r8, finding 1), or one with a step on the whole host still to run (a reboot or power cycle fixes, or
    fails to fix, this device too: review r8, finding 3)."""
    active, rule, signal, host = firing.active, firing.rule, firing.signal, firing.host
    if not lost_if_held(rule) or host.state == HostState.maintenance:
        return None
    if active is not None:
        if same_part(rule, active.subject, signal.subject):
            return None
        pending = [step.action for step in active.steps if step.state == StepState.pending]
        if any(action in HOST_SCOPE_ACTIONS for action in pending):
            return None
        why = f"while {active.rule_id} runs on {active.subject or 'the host'}"
    else:
        why = f"while the host is {host.state.value}"
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    tickets = [step for step in steps if step.action == "ticket"]
    last = tickets[-1] if tickets else ladder_end(rule)[0]
    params = {k: v for k, v in last.params.items() if k in ("part_type", "part", "in_service")}
    title = f"{{hostname}} {{subject}}: {rule.id} ({signal.kind} {{value:.3g}}) {why}: not tried, look at it"
    return Step(action="ticket", params={**params, "title": title})


def held_by_a_stop(session: Session, host: Host) -> bool:
    """A stopped remediation's step still waits on the host (remediator.stopping): the action may still be
    running there, so the host is held until that step reports or passes its deadline."""
    waiting = (
        select(RemediationStep.id)
        .join(Remediation, Remediation.id == RemediationStep.remediation_id)
        .where(
            Remediation.host_id == host.id,
            Remediation.state == RemediationState.cancelled,
            RemediationStep.state == StepState.failed,
            RemediationStep.awaiting.is_not(None),
        )
    )
    return session.scalars(waiting.limit(1)).first() is not None


class RolloutWave(DecisionPolicy):
    """A rollout's host outside its current wave waits (a returned fault is the host's own ladder)."""

    name = "rollout_wave"

    def check(self, firing: FiringContext) -> Stop | None:
        if firing.previous is not None:
            return None
        wave, rollout = rollouts.wave_hold(firing.session, firing.host, firing.rule, firing.signal, firing.now)
        firing.rollout_id = rollout.id if rollout is not None else None
        return Stop("held", wave) if wave is not None else None


class BreakerOpenedMeanwhile(DecisionPolicy):
    """The breaker, read again under the lock: another transaction may have opened it since this one began."""

    name = "breaker_opened_meanwhile"
    under_admission_lock = True

    def check(self, firing: FiringContext) -> Stop | None:
        opened = firing.session.execute(  # a column query, not the identity map
            select(RuleState.breaker_reason).where(
                RuleState.rule_id == firing.rule.id, RuleState.breaker_open.is_(True)
            )
        ).first()
        return Stop("skipped", f"breaker open: {opened.breaker_reason}") if opened is not None else None


class BreakerTrips(DecisionPolicy):
    """Planning this host would exceed the rule's breaker: open it (an operator resets it)."""

    name = "breaker_trips"
    under_admission_lock = True

    def check(self, firing: FiringContext) -> Stop | None:
        tripped = safety.breaker_trips(firing.session, firing.host, firing.rule, firing.now)
        if tripped is None:
            return None
        safety.open_breaker(firing.session, firing.rule.id, tripped, firing.now)
        return Stop("skipped", f"breaker tripped: {tripped}")


class Flapping(DecisionPolicy):
    """A host remediated flap_max times within the flap window goes to a person: the plan becomes a ticket."""

    name = "flapping"

    def check(self, firing: FiringContext) -> Stop | None:
        limits = firing.ruleset.safety
        recent = safety.flapping(firing.session, firing.host, limits, firing.now)
        if recent >= limits.flap_max and firing.steps[-1].action != "ticket":
            firing.steps = list(FLAP_TICKET)
            firing.reason += f"; host remediated {recent} times within {int(limits.flap_window_s / 86400)}d: flapping"
        return None


class Shadow(DecisionPolicy):
    """The rule (or an operator's override) is in shadow mode: say what would be planned, run nothing."""

    name = "shadow"

    def check(self, firing: FiringContext) -> Stop | None:
        if firing.mode != RuleMode.shadow:
            return None
        planned = ", ".join(s.action for s in firing.steps)
        preempting = f" ({firing.why})" if firing.verdict == "preempt" else ""
        return Stop("shadow", f"would plan {planned}: {firing.reason}{preempting}")


DECISION_POLICIES: tuple[DecisionPolicy, ...] = (
    RolloutSideEffect(),  # before anything that stops the firing: a pause, an open breaker or ticket must not hide it
    RulePaused(),
    BreakerOpen(),
    PartTicketed(),
    FaultReturnedWhileVerifying(),
    ReturnedFault(),
    PprUnderBmcRate(),  # shapes the plan ReturnedFault chose
    HostBusy(),
    RolloutWave(),
    BreakerOpenedMeanwhile(),
    BreakerTrips(),
    Flapping(),
    Shadow(),
)
"""Past the last one a remediation is planned (planning.decide)."""


PER_SUBJECT_SIGNALS = frozenset({"page_ce_count"})
"""Signals whose subject is one of many like parts a host has (a memory page): a rule on them fixes that
subject only, so a fix "returns" only when the same subject fires again, not when another page errs."""


def per_subject(rule: Rule) -> bool:
    """A rule about one of many like parts: a memory page, and every rule that fires per device
    (remediator.parts.fires_per_device): another DIMM's, GPU's or core's firing while one device's fix is
    verified is not that fix failing (review r1 of per-device firing, finding 4). Not a rule whose ladder acts
    on the whole host (a reboot, a power cycle: gpu-fallen-off-bus): another GPU falling off after the power
    cycle is that fix not holding (a baseboard, a PCIe switch), as before (review r8, finding 3)."""
    return rule.when.signal in PER_SUBJECT_SIGNALS or (fires_per_device(rule) and not acts_on_the_host(rule))


RETURN_SCAN = 32  # a host's remediations of one per-subject rule read to find its part's last one


def returned_fault(
    session: Session, host: Host, rule: Rule, now: dt.datetime, subject: str | None = None
) -> Remediation | None:
    """The last remediation of this rule on this host (on this part, for a per-subject rule: a GPU under either
    of its names, remediator.parts.same_part), if it succeeded recently: the fault came back. A per-subject
    rule's last RETURN_SCAN remediations on the host are read and matched by part."""
    query = (
        select(Remediation)
        .where(Remediation.host_id == host.id, Remediation.rule_id == rule.id)
        .order_by(Remediation.id.desc())
    )
    if subject is not None and per_subject(rule):
        recent = session.scalars(query.limit(RETURN_SCAN)).all()
        last = next((r for r in recent if same_part(rule, r.subject, subject)), None)
    else:
        last = session.scalars(query.limit(1)).first()
    if last is None or last.state != RemediationState.succeeded or last.finished_at is None:
        return None
    return last if now - last.finished_at <= REOPEN_WITHIN else None


def ladder_end(rule: Rule) -> list[Step]:
    """Past the last rung a person decides: a ticket."""
    part = "dimm" if rule.when.signal.startswith("dimm") else "host"
    return [Step(action="ticket", params={"part_type": part, "title": f"{rule.id}: automated remediation exhausted"})]
