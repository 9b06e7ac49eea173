"""The hand-off to cyborg: the remediator decides what a step is, cyborg carries it out.

Every action goes through one executor, `cyborg.central.Cyborg`. A host action is signed and queued
for the host when the step's transaction commits; the step stays `running` and waits (`awaiting`
and `deadline`, columns of the step) for the host's result or refusal (remediator.host_results) or
for its deadline (remediator.deadlines). A reinstall waits the same way for the host's first report
from the new image. A central action (BMC power cycle, the scheduler's hooks, an agent restart)
finishes here. The executor is the one the process's root built (remediator.runtime): a central
worker's carries out every action; the API's and the ingesters' run only the scheduler's drain and
undrain hooks, and any other action fails there as having no executor.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.dispatch import send_after_commit
from cyborg.central import Cyborg, Done, Order, Target
from remediator.decisions import SYSTEM
from remediator.models import Awaiting, Host, Remediation, RemediationStep
from remediator.runtime import Remediator


def cyborg(session: Session) -> Cyborg:
    """The executor of the runtime whose unit of work `session` is."""
    return Remediator.in_session(session).cyborg


def target_of(host: Host) -> Target:
    hardware_class = "" if host.hardware_class in (None, "unknown") else host.hardware_class  # Host's default
    return Target(host.hostname, host.datacenter, host.cluster, dict(host.labels or {}), hardware_class)


def order_of(host: Host, remediation: Remediation, step: RemediationStep) -> Order:
    """The step as cyborg is asked to carry it out."""
    return Order(
        target_of(host),
        remediation.id,
        step.index,
        step.attempts,
        step.action,
        dict(step.params),
        dict(remediation.evidence or {}),
    )


def start(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> dict[str, Any] | None:
    """Have cyborg carry out the step: its result when it finished here, None when it was handed over and
    waits (a host message goes out when this transaction commits). Raises cyborg's StepFailed."""
    outcome = cyborg(session).execute(
        order_of(host, remediation, step), lambda signature: send_after_commit(session, signature)
    )
    if isinstance(outcome, Done):
        return outcome.result
    step.awaiting = Awaiting(outcome.awaits)
    step.deadline = outcome.deadline
    step.result = dict(outcome.record)
    if outcome.awaits == "first_report":
        step.result["boot_id_before"] = host.boot_id  # the new image reports under another boot id
    else:
        step.result["boot_id_sent"] = host.boot_id  # a restart since shows as another (remediator.deadlines)
    if outcome.envelope_id is not None:
        audit.record(
            session,
            actor=SYSTEM,
            action="cyborg.action.dispatched",
            object_type="remediation",
            object_id=remediation.id,
            detail={
                "host": host.hostname,
                "step": step.index,
                "action": step.action,
                "envelope_id": outcome.envelope_id,
            },
        )
    return None


def stop_waiting(step: RemediationStep) -> None:
    """The step no longer waits: nothing it was handed over for moves it on, and no deadline acts on it.
    Its deadline is kept, as the record of when it was due."""
    step.awaiting = None


def locked(session: Session, remediation_id: Any) -> Remediation | None:
    """The remediation, row-locked, if `remediation_id` is one (a host's message may claim anything)."""
    if not isinstance(remediation_id, int):
        return None
    return session.scalars(select(Remediation).where(Remediation.id == remediation_id).with_for_update()).one_or_none()
