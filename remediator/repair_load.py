"""A repaired DIMM verified under load: the load test a DIMM ticket's resolve runs, owned by the ticket.

Resolving a DIMM ticket (docs/tickets.md, "Verification under load") creates a run: a remediation row
(`rule_id` LOAD_TEST_RULE, the ticket's id in its evidence) with one step, `verify_memory_under_load`.
It is a remediation so that the host action takes cyborg's one signed path and its result, start
notice, refusal and deadline are matched to the step like any other (remediator.handoff,
host_results, deadlines); the runner, the result and the deadline sweep hand such a run here instead
of planning, escalating or settling it, so the host keeps its `awaiting_repair` state and its drain,
and the ticket, not the remediation, decides:

- pass: an event on the ticket; it closes once its settle period passed too (repairs._settle);
- fail: the ticket reopens with the findings (which DIMM, new CE/UE counts, kernel-log lines, stalls);
- gap (stressapptest missing, memory bounded by the agent's cgroup, the test could not start, the host
  refused it or never started it): an event saying the repair was NOT verified under load and why; the
  ticket then closes on its settle period alone;
- started and silent past its deadline: fail when the host has not reported since it started (it
  hung or died under load), a gap when it kept reporting (the result was lost).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

from celery import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.dispatch import send_after_commit
from core.errors import Conflict
from core.queue import REMEDIATE_QUEUE
from cyborg.actions import DIMM_PATTERN
from cyborg.central import StepFailed
from remediator import draining, handoff, repair_hold
from remediator.decisions import SYSTEM, finish
from remediator.models import (
    ACTIVE_REMEDIATION_STATES,
    LOAD_TEST_RULE,
    Host,
    Remediation,
    RemediationState,
    RemediationStep,
    StepState,
)
from remediator.runtime import Remediator
from ticketing import lifecycle, queries

log = logging.getLogger(__name__)
LOAD_TEST_ACTION = "verify_memory_under_load"
LOAD_TEST_PART_TYPES = frozenset({"dimm"})
EVENT = "load_test"
"""The ticket event that records a run's verdict (detail: verdict, run, findings)."""
CLOSE_NOTES = {
    "pass": "verified under load",
    "gap": "NOT verified under load (see the load-test event): closed on the settle period alone",
}
"""What a DIMM ticket's close says of its load test (a fail reopened it instead)."""
TIMEOUT_MARGIN_S = 600
"""The step's time budget beyond stressapptest's own seconds: the stall probe's margin and the readings."""
MIN_COVERAGE_PERCENT = 50
"""The share of MemAvailable a run must test to pass (the action's default); lowered to the share asked for when
FLEETFIX_REPAIR_LOAD_TEST_MEMORY_PERCENT is below it (a floor it could never reach is refused by the action)."""
DIMM_KEYS = ("label", "mc", "entry", "location", "ce", "ue")
COVERAGE_KEYS = ("tested_mb", "available_mb", "total_mb", "percent_of_available", "min_percent", "scope", "cpus")


def owned(remediation: Remediation | None) -> bool:
    """Whether the remediation is a ticket's load-test run."""
    return remediation is not None and remediation.rule_id == LOAD_TEST_RULE


def wanted(part_type: str) -> bool:
    """Whether a ticket for this part type is verified under load too."""
    return part_type in LOAD_TEST_PART_TYPES


def start(session: Session, ticket_id: int, host: Host, now: dt.datetime) -> Remediation | None:
    """A resolved DIMM ticket's run, created and queued for a worker (the resolve may come through the API,
    whose executor runs no host action). None, with a gap event, when another remediation is active on
    the host (one per host: the database's constraint)."""
    ticket = queries.lock_ticket(session, ticket_id)
    busy = session.scalars(
        select(Remediation).where(Remediation.host_id == host.id, Remediation.active.is_(True))
    ).one_or_none()
    if busy is not None:
        record_gap(session, ticket.id, f"remediation {busy.id} ({busy.rule_id}) is active on the host", None, now)
        return None
    if repair_hold.in_flight(session, host):  # an earlier resolve's run, abandoned, may still load the host
        record_gap(
            session, ticket.id, "an abandoned load test may still run on the host (no result, no deadline)", None, now
        )
        return None
    settings = Remediator.in_session(session).settings
    params: dict[str, Any] = {
        "seconds": settings.repair_load_test_s,
        "memory_percent": settings.repair_load_test_memory_percent,
        "min_coverage_percent": min(MIN_COVERAGE_PERCENT, settings.repair_load_test_memory_percent),
        "stall_threshold_ms": settings.repair_load_test_stall_ms,
        "timeout_s": settings.repair_load_test_s + TIMEOUT_MARGIN_S,
    }
    dimm = _dimm_of(ticket.part, ticket.evidence or {})
    if dimm is not None:
        params["dimm"] = dimm
    run = Remediation(
        host_id=host.id,
        rule_id=LOAD_TEST_RULE,
        state=RemediationState.planned,
        subject=ticket.part,
        reason=f"ticket {ticket.id} resolved: {ticket.part or 'the host'} verified under load",
        evidence={"ticket_id": ticket.id, "part": (ticket.evidence or {}).get("part")},
        datacenter=host.datacenter,
        cluster=host.cluster,
        rack=host.rack,
        admitted_at=now,
        created_at=now,
    )
    run.steps.append(RemediationStep(index=0, action=LOAD_TEST_ACTION, params=params))
    session.add(run)
    session.flush()
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.repair.load_test_started",
        object_type="ticket",
        object_id=ticket.id,
        reason=f"{LOAD_TEST_ACTION} on {host.hostname} ({dimm or 'the host memory'}): remediation {run.id}",
        detail={"remediation_id": run.id, "params": params},
    )
    # as planning.queue_run does (planning imports the policies, which import this module through repairs)
    send_after_commit(
        session, current_app.signature("remediator.run_remediation", args=[run.id], queue=REMEDIATE_QUEUE)
    )
    return run


def _dimm_of(ticket_part: str, evidence: dict[str, Any]) -> str | None:
    """The DIMM for the record: the slot's locator when the evidence is certain of it, else the ticket's part."""
    part = evidence.get("part") or {}
    locator = part.get("locator") if isinstance(part, dict) and part.get("certain") else None
    for name in (locator, ticket_part):
        if isinstance(name, str) and re.fullmatch(DIMM_PATTERN, name):
            return name
    return None


def advance(session: Session, run: Remediation, host: Host, now: dt.datetime) -> RemediationState:
    """The runner's turn (remediator.runner.advance hands a run here): drain the host if nothing did, then
    hand the step to cyborg. A step that cannot start is a gap on the ticket, not an escalation."""
    step = run.steps[0]
    if step.state != StepState.pending:
        return run.state  # handed over (its result, refusal or deadline comes here), or done
    run.state = RemediationState.running
    step.state = StepState.running
    step.attempts += 1
    step.started_at = now
    session.flush()
    try:
        if not handoff.cyborg(session).runs(step.action):
            raise StepFailed(f"no executor for action {step.action!r}")
        holding = _holding_drain(session, host)
        if holding is not None:  # the drain of the remediation that ticketed it still holds the host
            run.evidence = {**(run.evidence or {}), "host_drain": holding}
        else:  # a ticket opened by hand: stressapptest takes most of the host, which must leave its scheduler
            draining.drain(session, host, run, step, now)
        handoff.start(session, host, run, step)
    except StepFailed as error:
        step.state = StepState.failed
        step.finished_at = now
        step.result = {**error.detail, "error": str(error)}
        conclude(session, run, step, now)
    return run.state


def _holding_drain(session: Session, host: Host) -> dict[str, Any] | None:
    """The `drain` record of the host's latest remediation that drained it and was not undrained since (the
    executor checks it: cyborg.central.issuing.drain_confirmed), with that remediation's id; None if none."""
    if host.drained_at is None:
        return None
    for earlier in session.scalars(
        select(Remediation).where(Remediation.host_id == host.id).order_by(Remediation.id.desc()).limit(10)
    ):
        evidence = earlier.evidence or {}
        if isinstance(evidence.get("drain"), dict):
            return None if "undrain" in evidence else {**evidence["drain"], "remediation_id": earlier.id}
    return None


def conclude(session: Session, run: Remediation, step: RemediationStep, now: dt.datetime) -> str:
    """The step ended (the host's result or refusal, its deadline, a start that failed): the verdict goes to
    the ticket, and the run ends. Returns the verdict: pass, fail or gap."""
    handoff.stop_waiting(step)
    result = dict(step.result or {})
    found = result.get("changed")
    changed: dict[str, Any] = found if isinstance(found, dict) else {}
    verdict = str(changed.get("verdict") or "")
    gaps = [g for g in [changed.get("gap"), *(changed.get("gaps") or [])] if isinstance(g, str) and g]
    if step.state == StepState.succeeded and verdict == "pass" and gaps:
        verdict = "gap"  # what it tested passed, but not all of it was tested
    elif step.state != StepState.succeeded and verdict not in ("fail", "gap"):
        verdict = "gap"  # it could not run: a precondition, a refusal, no start
        gaps.append(f"{step.action} did not run to a verdict: {result.get('error') or step.state.value}")
    elif verdict not in ("pass", "fail", "gap"):
        verdict = "gap"
        gaps.append(f"{step.action} answered with no verdict ({changed.get('verdict')!r})")
    findings = _findings(changed, verdict)
    run.evidence = {**(run.evidence or {}), "verdict": verdict, "findings": findings}
    state = RemediationState.succeeded if verdict == "pass" else RemediationState.failed
    if run.state in ACTIVE_REMEDIATION_STATES:
        finish(session, run, state, f"load test: {verdict}", now)
    ticket = queries.lock_ticket(session, int(run.evidence["ticket_id"]))
    if verdict == "pass":
        note = f"verified under load: {_what(findings)} passed"
        lifecycle.note_check(
            session, ticket, actor=SYSTEM, kind=EVENT, note=note, detail=_detail(run, verdict, findings), now=now
        )
    elif verdict == "gap":
        record_gap(session, ticket.id, "; ".join(gaps) or "no reason given", run, now, findings)
    else:
        _record_fail(session, ticket.id, run, findings, now)
    log.info(
        "remediator.repair.load_test",
        extra={"fields": {"ticket": ticket.id, "remediation": run.id, "verdict": verdict}},
    )
    return verdict


def _what(findings: dict[str, Any]) -> str:
    stress = findings.get("stressapptest") or {}
    dimm = f"DIMM {findings['dimm']}" if findings.get("dimm") else "the host's memory"
    share = (findings.get("coverage") or {}).get("percent_of_available")
    if stress.get("seconds"):
        return (
            f"{dimm}, stressapptest {stress['seconds']} s"
            + (f" over {stress['memory_mb']} MB" if stress.get("memory_mb") else "")
            + (f" ({share}% of MemAvailable)" if share is not None else "")
        )
    return dimm


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _findings(changed: dict[str, Any], verdict: str) -> dict[str, Any]:
    """What goes on the ticket: which DIMM, the new CE/UE counts (per controller, per DIMM, unplaced), whether the
    DIMM verified erred, kernel-log lines, the worst stall, how much memory was tested."""
    stalls = _mapping(changed.get("stalls"))
    coverage = _mapping(changed.get("coverage"))
    erred = [d for d in changed.get("dimms_erred") or [] if isinstance(d, dict)][:20]
    dimm_erred = changed.get("dimm_erred")
    return {
        "verdict": verdict,
        "dimm": changed.get("dimm"),
        "failures": list(changed.get("failures") or [])[:20],
        "edac_new": _mapping(changed.get("edac_new")),
        "dimms_erred": [{k: d[k] for k in DIMM_KEYS if k in d} for d in erred],
        "dimm_erred": dimm_erred if isinstance(dimm_erred, bool) else None,
        "edac_unplaced": _mapping(changed.get("edac_unplaced")),
        "coverage": {k: coverage[k] for k in COVERAGE_KEYS if k in coverage} or None,
        "kernel_log_new": list(changed.get("kernel_log_new") or [])[:20],
        "stall_max_ms": stalls.get("max_ms"),
        "stall_threshold_ms": stalls.get("threshold_ms"),
        "stressapptest": {
            k: v
            for k, v in dict(changed.get("stressapptest") or {}).items()
            if k in ("status", "hardware_incidents", "errors", "seconds", "memory_mb")
        },
    }


def _detail(run: Remediation | None, verdict: str, findings: dict[str, Any] | None) -> dict[str, Any]:
    return {"verdict": verdict, "remediation_id": run.id if run else None, **(findings or {})}


def record_gap(
    session: Session,
    ticket_id: int,
    why: str,
    run: Remediation | None,
    now: dt.datetime,
    findings: dict[str, Any] | None = None,
) -> None:
    """The repair was NOT verified under load: said on the ticket, never taken for a pass."""
    note = f"NOT verified under load: {why}. The ticket closes on its settle period alone."
    detail = {**_detail(run, "gap", findings), "verdict": "gap", "gap": why[:1000]}
    ticket = queries.lock_ticket(session, ticket_id)
    lifecycle.note_check(session, ticket, actor=SYSTEM, kind=EVENT, note=note, detail=detail, now=now)


def _record_fail(
    session: Session, ticket_id: int, run: Remediation, findings: dict[str, Any], now: dt.datetime
) -> None:
    """The load test found errors or stalls: the ticket goes back to a technician with the findings. When the
    DIMMs that erred do not include the one verified, the note names them first: another DIMM erred."""
    dimm = f"DIMM {findings['dimm']}" if findings.get("dimm") else "the host's memory"
    why = "; ".join(findings.get("failures") or []) or "failed"
    others = [str(d.get("label") or d.get("location")) for d in findings.get("dimms_erred") or []]
    if findings.get("dimm_erred") is False and others:
        why = f"another DIMM erred under load: {', '.join(others)}; {why}"
    detail = _detail(run, "fail", findings)
    ticket = queries.lock_ticket(session, ticket_id)
    lifecycle.note_check(
        session, ticket, actor=SYSTEM, kind=EVENT, note=f"failed under load: {dimm}: {why}", detail=detail, now=now
    )
    if ticket.state.value != "verifying":
        return  # reopened (the fault came back) or cancelled meanwhile: the event is the record
    try:
        lifecycle.reopen(
            session,
            ticket,
            actor=SYSTEM,
            reason=f"verification under load failed: {dimm}: {why}",
            detail=detail,
            now=now,
        )
    except Conflict:  # not for a verifying ticket (it holds its key); kept for the lifecycle's contract
        return


def past_deadline(session: Session, run: Remediation, step: RemediationStep, now: dt.datetime) -> int:
    """The deadline sweep's turn (remediator.deadlines hands a run here): no power cycle and no rung, the
    ticket decides. Never started: a gap (its envelope expired unstarted). Started and the host silent
    since: it hung or died under load, a fail. Started and the host still reporting: the result was lost,
    a gap."""
    if step.deadline is None or now < step.deadline:
        return 0
    host = session.get_one(Host, run.host_id)
    started = step.accepted_at
    if started is None:
        error = f"{host.hostname} never started {step.action} before its envelope expired"
        changed: dict[str, Any] = {}
    elif host.last_report_at is None or host.last_report_at <= started:
        error = f"{host.hostname} started {step.action} at {started.isoformat()} and has been silent since"
        changed = {"verdict": "fail", "failures": [f"the host went silent under load (no result by {step.deadline})"]}
    elif (rebooted := repair_hold.rebooted_under_load(host, step)) is not None:
        error = f"{host.hostname} rebooted under load: {rebooted}"
        changed = {
            "verdict": "fail",
            "failures": [f"host rebooted under load ({rebooted}); no result by {step.deadline}"],
        }
    else:
        error = f"no result from {host.hostname} by {step.deadline.isoformat()} though it kept reporting"
        changed = {}
    step.state = StepState.failed
    step.finished_at = now
    step.result = {**(step.result or {}), "error": error, **({"changed": changed} if changed else {})}
    conclude(session, run, step, now)
    return 1


def abandon(session: Session, ticket_id: int, host: Host, why: str, now: dt.datetime) -> None:
    """The ticket was reopened or cancelled: a run of it still under way ends (`cancelled`), so the next
    resolve can start its own. A step already handed to the host is not recalled: it keeps waiting, for its
    result (kept on the step as `late_report`, deciding nothing) or its deadline, and the host is held out and
    drained meanwhile (remediator.repair_hold; remediator.policies.held_by_a_stop), until it ends."""
    for run in session.scalars(
        select(Remediation).where(Remediation.host_id == host.id, Remediation.active.is_(True))
    ).all():
        if not owned(run) or (run.evidence or {}).get("ticket_id") != ticket_id:
            continue
        for step in run.steps:
            if step.state == StepState.pending:
                step.state = StepState.skipped
                step.result = {"skipped": why}
            elif step.state == StepState.running:
                step.state = StepState.failed
                step.finished_at = now
                held = "; the host is held until its result or deadline" if step.awaiting is not None else ""
                step.result = {**(step.result or {}), "error": f"abandoned: {why}{held}"}
        run.evidence = {**(run.evidence or {}), "verdict": "abandoned"}
        finish(session, run, RemediationState.cancelled, f"load test abandoned: {why}", now)


def run_of(session: Session, ticket_id: int, host: Host) -> Remediation | None:
    """The ticket's run for its current verification (created at or after it started), if any."""
    ticket = queries.lock_ticket(session, ticket_id)
    if ticket.verify_started_at is None:
        return None
    runs = session.scalars(
        select(Remediation)
        .where(
            Remediation.host_id == host.id,
            Remediation.rule_id == LOAD_TEST_RULE,
            Remediation.created_at >= ticket.verify_started_at,
        )
        .order_by(Remediation.id.desc())
    ).all()
    return next((r for r in runs if (r.evidence or {}).get("ticket_id") == ticket_id), None)


def holds_close(session: Session, ticket_id: int, host: Host, now: dt.datetime) -> bool:
    """Whether the ticket must not close yet: its run has no verdict. A run that ended with none (an
    operator stopped it, a higher-priority plan preempted it before it started) is a gap, recorded now."""
    if not wanted(queries.lock_ticket(session, ticket_id).part_type):
        return False
    run = run_of(session, ticket_id, host)
    if run is None:
        return False  # resolved before load tests existed, or the host was busy (a gap was recorded)
    if run.state in ACTIVE_REMEDIATION_STATES:
        return True
    if "verdict" not in (run.evidence or {}):
        run.evidence = {**(run.evidence or {}), "verdict": "gap"}
        record_gap(
            session,
            ticket_id,
            f"the load test (remediation {run.id}) ended {run.state.value} with no verdict",
            run,
            now,
        )
    return False


def verdict_of(events: list[Any]) -> dict[str, Any] | None:
    """The latest load-test event of a ticket's history, for the ticket page (its detail), or None."""
    found = [e for e in events if getattr(e, "kind", None) == EVENT]
    return dict(found[-1].detail or {}, at=found[-1].at, note=found[-1].note) if found else None
