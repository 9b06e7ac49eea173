"""The host leaves its workload scheduler before the first disruptive action of a plan, and comes
back once the fix is verified.

A plan may name `drain` and `undrain` steps itself (to place them); when it does not, `advance`
drains the host through the cluster's hook just before the first disruptive step, and the host is
undrained when the remediation has stayed healthy through its settle period — or, for a plan that
ended in a ticket, when the repair's verification returns the host to service. The hooks run through
cyborg (remediator.handoff); what each ran is kept in the remediation's evidence (`drain`,
`undrain`), next to the steps' own logs. A cluster with no hook records a no-op. A drain that fails
fails the step it guarded (nothing disruptive ran); an undrain that fails is an audit entry and an
error log for a person, the host stays as it is.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from cyborg.central import Done, Order, StepFailed
from remediator import handoff
from remediator.actions import ACTIONS
from remediator.decisions import SYSTEM
from remediator.models import LOAD_TEST_RULE, Host, Remediation, RemediationStep, StepState

log = logging.getLogger(__name__)


def run_scheduler_hook(
    session: Session, host: Host, remediation_id: int, action: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the cluster's `action` hook (drain or undrain) through cyborg; raises StepFailed with the log."""
    order = Order(handoff.target_of(host), remediation_id, None, 0, action, dict(params or {}))
    outcome = handoff.cyborg(session).execute(order)
    if not isinstance(outcome, Done):  # a hook runs here, start to end
        raise StepFailed(f"{action}: the scheduler's hook did not finish here")
    return outcome.result


def run_step(
    session: Session, host: Host, remediation: Remediation, step: RemediationStep, now: dt.datetime
) -> dict[str, Any]:
    """A plan's own `drain` or `undrain` step."""
    if step.action == "drain":
        return drain(session, host, remediation, step, now)
    outcome = run_scheduler_hook(session, host, remediation.id, step.action, step.params)
    remediation.evidence = {**(remediation.evidence or {}), "undrain": {"at": now.isoformat(), **outcome}}
    host.drained_at = None
    return outcome


def _plan_has(remediation: Remediation, action: str) -> bool:
    return any(s.action == action for s in remediation.steps)


def ensure_drained(
    session: Session, host: Host, remediation: Remediation, step: RemediationStep, now: dt.datetime
) -> None:
    """Drain before the plan's first disruptive step, unless the plan drains by itself or already did."""
    if not ACTIONS[step.action].disruptive or _plan_has(remediation, "drain"):
        return
    if "drain" in (remediation.evidence or {}):
        return
    try:
        drain(session, host, remediation, step, now)
    except StepFailed as error:
        raise StepFailed(f"drain before {step.action} failed: {error}", error.detail) from None


def drain(
    session: Session, host: Host, remediation: Remediation, step: RemediationStep, now: dt.datetime
) -> dict[str, Any]:
    """Take the host out of its scheduler for this remediation (a plan's `drain` step, or before its first
    disruptive step): recorded in its evidence, and the host counts against the caps until it is undrained."""
    outcome = run_scheduler_hook(session, host, remediation.id, "drain", {"dry_run": step.params.get("dry_run", False)})
    remediation.evidence = {
        **(remediation.evidence or {}),
        "drain": {"at": now.isoformat(), "before_step": step.index, **outcome},
    }
    host.drained_at = host.drained_at or now
    return outcome


def undrain(session: Session, host: Host, remediation: Remediation, now: dt.datetime) -> bool:
    """Put a host that this remediation drained back into its scheduler; True if there was anything to do."""
    evidence = dict(remediation.evidence or {})
    drained = evidence.get("drain")
    if not drained or "undrain" in evidence:
        return False
    if "skipped" in drained:  # no hook: nothing to call, but the host no longer counts as out
        host.drained_at = None
        return False
    if any(s.action == "undrain" and s.state == StepState.succeeded for s in remediation.steps):
        return False
    try:
        outcome = run_scheduler_hook(session, host, remediation.id, "undrain")
    except StepFailed as error:
        evidence["undrain"] = {"at": now.isoformat(), "error": str(error), **error.detail}
        remediation.evidence = evidence
        audit.record(
            session,
            actor=SYSTEM,
            action="remediator.host.undrain_failed",
            object_type="host",
            object_id=host.hostname,
            reason=str(error),
            detail={"remediation_id": remediation.id},
        )
        log.error("remediator.host.undrain_failed", extra={"fields": {"host": host.hostname, "error": str(error)}})
        return True
    evidence["undrain"] = {"at": now.isoformat(), **outcome}
    remediation.evidence = evidence
    host.drained_at = None
    return True


def undrain_after_repair(session: Session, host: Host, now: dt.datetime) -> bool:
    """A repaired host back in service: undrain what its last remediation drained. A repair's load test
    (remediator.repair_load) drains only a host nothing drained; those that drained nothing are passed over
    for the remediation before them, which did."""
    recent = session.scalars(
        select(Remediation).where(Remediation.host_id == host.id).order_by(Remediation.id.desc()).limit(10)
    ).all()
    last = next((r for r in recent if "drain" in (r.evidence or {}) or r.rule_id != LOAD_TEST_RULE), None)
    return last is not None and undrain(session, host, last, now)
