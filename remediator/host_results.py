"""What hosts say about the steps they were sent: results, starts and refusals (docs/cyborg.md).

A message counts only for the step it names, sent the envelope it names, from that step's own host
(`signer`: the host whose credential signed it; remediator.tasks checks the signature). A result
finishes the step (the plan goes on, or escalates); a start puts the step's deadline at its budget,
once; a verified refusal fails the step. Anything else is audited and changes nothing. A result
for a step that no longer waits (stopped, timed out) is kept on it as `late_report`; for a step stopped
while in flight it also ends the host's hold (remediator.stopping.end_hold).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from core import audit
from cyborg.central import deadline_grace, envelope_refused
from remediator import planning, repair_hold, repair_load, repairs, stopping
from remediator.handoff import locked, stop_waiting
from remediator.models import Awaiting, Host, Remediation, RemediationState, RemediationStep, StepState
from remediator.rules import RuleSet


def _host_step(
    session: Session, remediation: Remediation | None, report: dict[str, Any], signer: str | None
) -> RemediationStep | None:
    """The step this message is about: the same index, the envelope id it was sent with, and from the
    remediation's own host. `signer` is the host whose credential signed the message (None: unsigned,
    accepted only where signatures are not required; then the host it names must be the one)."""
    if remediation is None:
        return None
    claimed = report.get("hostname")
    if signer is not None and claimed != signer:
        return None  # a host speaks only for itself
    if session.get_one(Host, remediation.host_id).hostname != (signer or claimed):
        return None
    index, envelope_id = report.get("step"), report.get("envelope_id")
    step = next((s for s in remediation.steps if s.index == index), None)
    if step is None or envelope_id is None or (step.result or {}).get("envelope_id") != envelope_id:
        return None
    return step


def record_host_result(
    session: Session, report: dict[str, Any], ruleset: RuleSet, now: dt.datetime, *, signer: str | None = None
) -> str:
    """A host's result for a step it was sent: the step succeeds (the plan goes on) or fails (escalation)."""
    remediation = locked(session, report.get("remediation_id"))
    step = _host_step(session, remediation, report, signer)
    summary = {k: report.get(k) for k in ("hostname", "envelope_id", "remediation_id", "step", "action", "outcome")}
    if remediation is None or step is None:
        audit.record(
            session,
            actor=f"host:{signer or report.get('hostname')}",
            action="cyborg.result.unmatched",
            object_type="host",
            object_id=signer or report.get("hostname"),
            reason="a result for no step that was sent this envelope from this host",
            detail={**summary, "signer": signer},
        )
        return "unmatched"
    outcome = str(report.get("outcome"))
    kept = {
        k: report.get(k)
        for k in ("outcome", "error", "changed", "verified", "commands", "driver", "runs", "boot_id_before")
    }
    dispatched = dict(step.result or {})
    audit.record(
        session,
        actor=f"host:{report.get('hostname')}",
        action=f"cyborg.action.{outcome}",
        object_type="remediation",
        object_id=remediation.id,
        reason=str(report.get("error") or ""),
        detail=summary,
    )
    if step.state != StepState.running or step.awaiting is None:
        step.result = {**dispatched, "late_report": kept}  # after a stop or a timeout: kept for the record
        if stopping.held(step) and repair_load.owned(remediation):  # its ticket cancelled or reopened meanwhile
            host = repair_hold.end_hold(session, remediation, step, now, f"{step.action} {outcome} after its abandon")
            repairs.release_host(session, host, now, reason=f"abandoned load test {remediation.id} ended ({outcome})")
        elif stopping.held(step) and step.awaiting == Awaiting.host:
            # stopped while the host ran it: the host was held for this report
            error = f": {report.get('error')}" if report.get("error") else ""
            reason = f"step {step.index} ({step.action}) {outcome} on the host after a stop{error}"
            stopping.end_hold(session, remediation, step, now, released=outcome == "succeeded", reason=reason)
        return "late"
    step.result = {**dispatched, **kept, "finished_at": report.get("finished_at")}
    step.finished_at = now
    changed = kept.get("changed")
    found = [changed.get("gap"), *(changed.get("gaps") or [])] if isinstance(changed, dict) else []
    if any(isinstance(gap, str) and gap for gap in found):
        # what the step could not check (a verification tool missing, memory left untested): kept on the
        # remediation, never taken for a pass
        gaps = list((remediation.evidence or {}).get("gaps", []))
        gaps += [{"step": step.index, "action": step.action, "gap": g[:500]} for g in found if isinstance(g, str) and g]
        remediation.evidence = {**(remediation.evidence or {}), "gaps": gaps[-10:]}
    stop_waiting(step)
    if repair_load.owned(remediation):  # a repaired DIMM's load test: the verdict goes to its ticket
        step.state = StepState.succeeded if outcome == "succeeded" else StepState.failed
        repair_load.conclude(session, remediation, step, now)
        return outcome
    if outcome == "succeeded":
        step.state = StepState.succeeded
        if remediation.state == RemediationState.running:
            planning.queue_run(session, remediation)
        return outcome
    step.state = StepState.failed
    if remediation.state == RemediationState.running:
        reason = f"step {step.index} ({step.action}) {outcome} on the host: {report.get('error')}"
        planning.escalate(session, remediation, reason, ruleset, now)
    return outcome


def record_host_started(
    session: Session, report: dict[str, Any], now: dt.datetime, *, signer: str | None = None
) -> str:
    """The host began the step: from now its deadline is the action's time budget. Taken once: a
    repeated notice (a redelivery, or a host trying to put its deadline off) changes nothing."""
    remediation = locked(session, report.get("remediation_id"))
    step = _host_step(session, remediation, report, signer)
    if step is None or step.awaiting != Awaiting.host or not (step.state == StepState.running or stopping.held(step)):
        return "ignored"  # a late notice (the result came first) or not ours
    if step.accepted_at is not None:
        return "ignored"
    timeout = int(step.result.get("timeout_s", 900))
    step.accepted_at = now
    step.deadline = now + dt.timedelta(seconds=timeout) + deadline_grace(timeout)
    if isinstance(boot := report.get("boot_id"), str):
        # the boot it started in: a restart the step made shows as another (remediator.deadlines)
        step.result = {**step.result, "boot_id_started": boot}
    return "started"


def record_refusal(
    session: Session, report: dict[str, Any], ruleset: RuleSet, now: dt.datetime, *, signer: str | None = None
) -> str:
    """A host refused an envelope. Always audited; it fails a step only if the host refused it after the
    envelope's signature held (`verified`) and it names the envelope that step was sent, from that step's
    host: the ids in a forged or tampered copy are unverified claims and say nothing about the real plan."""
    hostname = signer or report.get("hostname")
    audit.record(
        session,
        actor=f"host:{hostname}",
        action="cyborg.envelope.refused",
        object_type="host",
        object_id=hostname,
        reason=f"{report.get('code')}: {report.get('reason')}",
        detail={
            **{k: report.get(k) for k in ("code", "verified", "envelope_id", "remediation_id", "step", "action", "at")},
            "signer": signer,
        },
    )
    envelope_refused(hostname, report.get("code"))
    if report.get("verified") is not True:
        return "recorded"
    remediation = locked(session, report.get("remediation_id"))
    step = _host_step(session, remediation, report, signer)
    if remediation is None or step is None or step.state != StepState.running or step.awaiting is None:
        return "recorded"
    if report.get("code") in ("replayed", "in_flight"):
        return "recorded"  # the host ran it before, or runs it now: its result is (or was) on its way
    step.state = StepState.failed
    step.finished_at = now
    step.result = {**step.result, "error": f"refused: {report.get('reason')}"}
    stop_waiting(step)
    if repair_load.owned(remediation):  # a repaired DIMM's load test: not verified, said on its ticket
        repair_load.conclude(session, remediation, step, now)
        return "failed"
    if remediation.state == RemediationState.running:
        reason = f"step {step.index} ({step.action}) refused by the host: {report.get('code')}"
        planning.escalate(session, remediation, reason, ruleset, now)
    return "failed"
