"""An abandoned load test still on its host (remediator.repair_load): held out and drained until it ends.

A DIMM ticket cancelled or reopened while its load test runs abandons the run (repair_load.abandon), but the
step already handed to the host is not recalled: stressapptest may still take most of the host's memory. The
step keeps waiting (failed, `awaiting` set, as remediator.stopping leaves a stopped step), the host is neither
released nor undrained meanwhile (`in_flight`), and its late result or its deadline ends the hold (`end_hold`),
after which the caller releases the host (remediator.repairs.release_host).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from remediator import handoff
from remediator.decisions import SYSTEM
from remediator.models import LOAD_TEST_RULE, Host, Remediation, RemediationState, RemediationStep, StepState


def rebooted_under_load(host: Host, step: RemediationStep) -> str | None:
    """How the host shows it restarted after it started the step (a panic under load: a UE on the repaired
    DIMM), or None: it has reported since from a boot id other than the one it said it started in (its start
    notice's; without one, the boot it reported from when the step was sent, as remediator.deadlines reads it)."""
    result = step.result or {}
    before = result.get("boot_id_started") or result.get("boot_id_sent")
    if step.accepted_at is None or not isinstance(before, str) or host.boot_id in (None, before):
        return None
    if host.last_report_at is None or host.last_report_at <= step.accepted_at:
        return None
    return f"it started in boot {before} and reports from boot {host.boot_id} since"


def in_flight(session: Session, host: Host) -> bool:
    """Whether an abandoned load test may still run on the host (handed over, no result, deadline not swept):
    stressapptest takes most of its memory, so the host is neither released nor undrained meanwhile."""
    waiting = (
        select(RemediationStep.id)
        .join(Remediation, Remediation.id == RemediationStep.remediation_id)
        .where(
            Remediation.host_id == host.id,
            Remediation.rule_id == LOAD_TEST_RULE,
            Remediation.state == RemediationState.cancelled,
            RemediationStep.state == StepState.failed,
            RemediationStep.awaiting.is_not(None),
        )
    )
    return session.scalars(waiting.limit(1)).first() is not None


def end_hold(session: Session, run: Remediation, step: RemediationStep, now: dt.datetime, reason: str) -> Host:
    """An abandoned run's step has ended on the host (its late result came, or its deadline passed): it waits
    no more, and decides nothing (the result is kept on the step). Returns the host, for the caller to release
    it (remediator.repairs.release_host: back in service unless a ticket holds it)."""
    handoff.stop_waiting(step)
    run.evidence = {**(run.evidence or {}), "hold_ended": {"at": now.isoformat(), "reason": reason}}
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.repair.load_test_hold_ended",
        object_type="remediation",
        object_id=run.id,
        reason=reason,
        detail={"ticket_id": (run.evidence or {}).get("ticket_id"), "step": step.index},
    )
    return session.get_one(Host, run.host_id)
