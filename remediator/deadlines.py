"""Steps whose host went quiet: the deadline sweep (`remediator.check_step_deadlines`, every 10 s).

The sweep reads the waiting steps off their index (`ix_remediation_steps_waiting`: steps whose
`awaiting` is set) and locks only the remediations with one that is due: a host's step past its
deadline, or a reinstall whose host may have reported from its new image. A step whose remediation
ended while it was out (preempted) no longer waits once it is due; one stopped while in flight ends
its host's hold at its deadline, or at a reinstall's first report (remediator.stopping). Then, per
step (docs/cyborg.md):

- a reboot whose host has reported from another boot than the one it started the step in (or was in
  when the step was sent) is done at its deadline though its result never came (a worker killed holding
  it): the restart is the whole fix; another restarting action in that case goes to a person (a ticket),
  not a power cycle: the host came back, and nothing says the action took;
- a reinstall whose host reported under a new boot id is done (its boot device set back to disk);
- a host action the host never said it started fails and escalates, as an expired envelope does:
  the plan's next rung decides (nothing ran there that a power cycle could finish);
- a started action that restarts the host gets one cold power cycle through the BMC and a new
  deadline (its agent reports the restart when it comes back);
- otherwise the host goes to a person: a ticket, not the next rung (nothing automated reaches a
  dead host).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session

from core import audit
from cyborg.actions import ACTIONS
from cyborg.central import deadline_grace
from remediator import decisions, handoff, planning, repair_hold, repair_load, repairs, stopping
from remediator.handoff import locked, order_of, stop_waiting
from remediator.models import (
    Awaiting,
    Host,
    HostState,
    Remediation,
    RemediationState,
    RemediationStep,
    StepState,
)
from remediator.rules import RuleSet, Step
from remediator.runner import complete_step

DONE_BY_A_RESTART = frozenset({"reboot"})
"""Host actions a new boot proves done when their result is lost: the restart is the whole fix. Not
install_kernel, reflash_firmware or hard_ppr: a host that restarted for another reason (a crash, a person,
a hard PPR's firmware-first stalls tripping the watchdog) has a new boot and none of their effect, and
reporting left firmware-first after a hard PPR cut short would hide the errors verification looks for."""


def due(now: dt.datetime) -> Select[int]:
    """The remediations with a waiting step to look at now, read off the index of waiting steps alone."""
    return select(RemediationStep.remediation_id).where(
        RemediationStep.awaiting.is_not(None),
        or_(
            RemediationStep.awaiting == Awaiting.first_report,
            and_(RemediationStep.awaiting == Awaiting.host, RemediationStep.deadline <= now),
        ),
    )


def check_deadlines(session: Session, ruleset: RuleSet, now: dt.datetime) -> int:
    """Steps waiting on a host past their deadline; reinstalls whose host reported from the new image."""
    handled = 0
    for remediation_id in sorted(set(session.scalars(due(now)).all())):
        remediation = locked(session, remediation_id)
        if remediation is None:
            continue
        step = next((s for s in remediation.steps if s.awaiting), None)
        if step is None:
            continue  # moved on since it was read
        if stopping.held(step) and repair_load.owned(remediation):  # abandoned by its ticket: let go at its deadline
            if step.deadline is not None and now >= step.deadline:
                why = f"no result by {step.deadline.isoformat()}"
                host = repair_hold.end_hold(session, remediation, step, now, why)
                repairs.release_host(session, host, now, reason=f"abandoned load test {remediation.id}: {why}")
                handled += 1
            continue
        if stopping.held(step):
            handled += _check_held(session, remediation, step, now)
            continue
        if remediation.state != RemediationState.running:
            stop_waiting(step)  # it ended while the step was out: nothing will act on the step now
            continue
        if repair_load.owned(remediation):  # a repaired DIMM's load test: no power cycle, no rung
            handled += repair_load.past_deadline(session, remediation, step, now)
            continue
        handled += _check_step(session, remediation, step, ruleset, now)
    return handled


def _check_step(
    session: Session, remediation: Remediation, step: RemediationStep, ruleset: RuleSet, now: dt.datetime
) -> int:
    result: dict[str, Any] = dict(step.result)
    host = session.get_one(Host, remediation.host_id)
    if step.awaiting == Awaiting.first_report and _from_new_image(host, result):
        finished = handoff.cyborg(session).finish_reimage(order_of(host, remediation, step))
        result.update(
            {k: v for k, v in finished.items() if k != "commands"},
            outcome="succeeded",
            reports_from=host.boot_id,
            commands=result.get("commands", []) + finished["commands"],
        )
        complete_step(step, result, now)
        planning.queue_run(session, remediation)
        return 1
    if step.deadline is None or now < step.deadline:
        return 0
    if step.awaiting == Awaiting.host and (came_back := _came_back_in(host, step, result)) is not None:
        missing = _result_missing(session, remediation, step, host, result, came_back)
        if step.action in DONE_BY_A_RESTART:
            complete_step(step, {**result, **missing, "outcome": "succeeded"}, now)
            planning.queue_run(session, remediation)
            return 1
        # up in another boot, but nothing says the kernel, firmware or PPR took: a person checks; no power
        # cycle of a host that came back
        _fail(step, {**result, **missing}, f"no result from {host.hostname} by {step.deadline.isoformat()}", now)
        reason = (
            f"no result for {step.action} (step {step.index}); {host.hostname} restarted since (boot {came_back}):"
            f" check whether {step.action} took"
        )
        escalate_to_ticket(session, remediation, reason, ruleset, now)
        return 1
    if step.awaiting == Awaiting.host and step.accepted_at is None:
        # The host never said it started: nothing ran there that a power cycle could finish. The
        # plan's next rung decides, as when the host refuses an expired envelope.
        reason = f"step {step.index} ({step.action}) was not started by {host.hostname} before its envelope expired"
        _fail(step, result, f"not started by {host.hostname} by {step.deadline.isoformat()}", now)
        planning.escalate(session, remediation, reason, ruleset, now)
        return 1
    if step.awaiting == Awaiting.host and step.power_cycled_at is None:
        cycled = handoff.cyborg(session).revive(order_of(host, remediation, step))
        if cycled is not None:
            step.power_cycled_at = now
            step.result = {**result, "power_cycled": {"at": now.isoformat(), **cycled}}
            timeout = int(result.get("timeout_s", 900))
            step.deadline = now + dt.timedelta(seconds=timeout) + deadline_grace(timeout)
            audit.record(
                session,
                actor=decisions.SYSTEM,
                action="cyborg.host.power_cycled",
                object_type="remediation",
                object_id=remediation.id,
                reason=f"no report from {host.hostname} for step {step.index} ({step.action}) by its deadline",
                detail={"host": host.hostname, **{k: v for k, v in cycled.items() if k != "commands"}},
            )
            if "error" not in cycled:
                return 1
            result = dict(step.result)
    what = "first report from the new image" if step.action == "reimage" else "result"
    _fail(step, result, f"no {what} from {host.hostname} by {step.deadline.isoformat()}", now)
    spec = ACTIONS.get(step.action)
    if spec is None or spec.restarts:  # and no report from another boot since it was sent
        reason = f"did not come back after {step.action} (step {step.index})"
    else:  # a host alive may have run it and lost the result on the way: not "did not come back"
        reason = f"no result for {step.action} (step {step.index}) by its deadline: check what it did on the host"
    escalate_to_ticket(session, remediation, reason, ruleset, now)
    return 1


def _check_held(session: Session, remediation: Remediation, step: RemediationStep, now: dt.datetime) -> int:
    """A step stopped while in flight (remediator.stopping): its host is held until it reports or its
    deadline passes. A reinstall's boot device goes back to disk first, whichever comes."""
    result: dict[str, Any] = dict(step.result)
    host = session.get_one(Host, remediation.host_id)
    reported = step.awaiting == Awaiting.first_report and _from_new_image(host, result)
    restarted = False
    if not reported and (step.deadline is None or now < step.deadline):
        return 0
    if step.awaiting == Awaiting.first_report:
        finished = handoff.cyborg(session).finish_reimage(order_of(host, remediation, step))
        step.result = {
            **result,
            "finish_reimage": {k: v for k, v in finished.items() if k != "commands"},
            "commands": result.get("commands", []) + finished["commands"],
        }
        if reported:
            step.result["reports_from"] = host.boot_id
        released = reported
    elif (came_back := _came_back_in(host, step, result)) is not None:
        step.result = {**result, **_result_missing(session, remediation, step, host, result, came_back)}
        restarted = True
        released = step.action in DONE_BY_A_RESTART  # the others: nothing verifies a stopped plan's step
    else:
        # never started by the host: its envelope expired long before this deadline and the host refuses an
        # expired one, so nothing runs there (a lost start notice is the one case this misreads)
        released = step.accepted_at is None
    if released and step.awaiting == Awaiting.first_report:
        reason = f"{host.hostname} reported from its new image after a stop (step {step.index})"
    elif released and restarted:
        reason = f"{host.hostname} restarted for step {step.index} ({step.action}) after a stop: its result never came"
    elif restarted:
        reason = (
            f"no result for step {step.index} ({step.action}) after a stop; {host.hostname} restarted since:"
            f" check whether {step.action} took"
        )
    elif released:
        reason = f"{host.hostname} never started step {step.index} ({step.action}) after a stop: let go"
    else:
        what = "first report from the new image" if step.action == "reimage" else "result"
        reason = f"no {what} from {host.hostname} for step {step.index} ({step.action}) after a stop"
    stopping.end_hold(session, remediation, step, now, released=released, reason=reason)
    return 1


def _came_back_in(host: Host, step: RemediationStep, result: dict[str, Any]) -> str | None:
    """The boot a host that restarts for its action has reported from since, when it is not the one the
    host said it started the step in (`boot_id_started`, from its start notice) or, without that notice,
    the one it reported from when the step was sent: None when there is none, or when this sweep's own
    power cycle restarted the host. Told by boot id alone (the host stamps its reports with its own clock)."""
    spec = ACTIONS.get(step.action)
    if spec is None or spec.site != "host" or not spec.restarts or step.power_cycled_at is not None:
        return None
    before = result.get("boot_id_started") or result.get("boot_id_sent")
    if not isinstance(before, str) or host.boot_id is None or host.boot_id == before:
        return None
    return host.boot_id


def _result_missing(
    session: Session,
    remediation: Remediation,
    step: RemediationStep,
    host: Host,
    result: dict[str, Any],
    came_back: str,
) -> dict[str, Any]:
    """The host's result never came (a worker killed while it held the message keeps it from every other
    worker until the broker's visibility timeout, an hour on Redis), but its reports show it restarted:
    what the step's result gets (the boot it left, so a late report from that boot is told apart as made
    before), and the audit that says so. The result, if it comes, is kept as `late_report`."""
    left = result.get("boot_id_started") or result.get("boot_id_sent")
    missing = (
        f"no result from {host.hostname} by {step.deadline.isoformat() if step.deadline else 'its deadline'};"
        f" it has reported from boot {came_back} since it was in boot {left} for this step"
    )
    audit.record(
        session,
        actor=decisions.SYSTEM,
        action="cyborg.result.missing",
        object_type="remediation",
        object_id=remediation.id,
        reason=missing,
        detail={
            "host": host.hostname,
            "step": step.index,
            "action": step.action,
            "envelope_id": result.get("envelope_id"),
        },
    )
    return {"boot_id_before": left, "reports_from": came_back, "result_missing": missing}


def _from_new_image(host: Host, result: dict[str, Any]) -> bool:
    since = dt.datetime.fromisoformat(result["since"])
    return host.last_report_at is not None and host.last_report_at > since and host.boot_id != result["boot_id_before"]


def _fail(step: RemediationStep, result: dict[str, Any], error: str, now: dt.datetime) -> None:
    step.result = {**result, "error": error}
    step.state = StepState.failed
    step.finished_at = now
    stop_waiting(step)


def escalate_to_ticket(
    session: Session, remediation: Remediation, reason: str, ruleset: RuleSet, now: dt.datetime
) -> Remediation | None:
    """The host is gone: no automated rung will reach it. A person, with the evidence."""
    rule = ruleset.get(remediation.rule_id)
    if rule is None:
        return planning.escalate(session, remediation, reason, ruleset, now)
    decisions.finish(session, remediation, RemediationState.failed, reason, now)
    host = session.get_one(Host, remediation.host_id)
    host.state = HostState.in_service
    session.flush()
    steps = [Step(action="ticket", params={"part_type": "host", "title": f"{host.hostname}: {reason}"})]
    ticket = planning.create(
        session, host, rule, steps, remediation.evidence, f"{remediation.reason}; {reason}",
        remediation.rung + 1, remediation, now,
    )  # fmt: skip
    if ticket is not None:
        decisions.record(session, host, rule.id, "escalated", reason, remediation_id=ticket.id, now=now)
        planning.admit(session, ticket, ruleset, now)
    return ticket
