"""Running an admitted remediation: one step at a time, then verification.

advance() runs the next pending step under a row lock, so two deliveries of
the same task cannot both run it; a step already running when its worker died
is run again only if its action is idempotent, otherwise the remediation is
escalated. After the last step the host must stay healthy for the rule's
settle period (`verifying`); the same fault firing meanwhile escalates it.
A ticket step hands the host to a technician (`escalated`).

Host actions go to cyborg (docs/cyborg.md): `dispatch_to_host` signs an envelope and sends it on
host.<hostname> when the transaction commits; the step stays `running`, awaiting the host, until
the host's result (`record_host_result`) or refusal (`record_refusal`) comes back, or its deadline
passes (`check_deadlines`: a cold power cycle through the BMC for an action that restarts the
host, else a ticket). Power cycle and reimage run here through the BMC, drain and undrain through
the cluster's scheduler hooks. `abort` stops a plan between steps.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from celery import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.db import utcnow
from core.dispatch import send_after_commit
from core.errors import Conflict, NotFound
from core.queue import REMEDIATE_QUEUE, host_signature
from core.settings import get_settings
from cyborg import central as cyborg
from cyborg.actions import ACTIONS as CYBORG_ACTIONS
from cyborg.actions import ActionRefused, timeout_of
from cyborg.commands import ActionContext, ActionFailed, LiveSystem
from cyborg.drivers.bmc import Bmc, IpmitoolBmc
from cyborg.drivers.reach import LiveReach, Reach
from cyborg.envelope import KeyMaterialError
from remediator import decisions, draining, planning
from remediator.actions import ACTIONS
from remediator.models import Host, HostState, Remediation, RemediationState, RemediationStep, StepState
from remediator.rules import RuleSet, Step
from remediator.service import evidence_bundle, ticket_title
from ticketing import service as tickets
from ticketing.schemas import TicketRequest

log = logging.getLogger(__name__)

StepExecutor = Callable[[Session, Host, Remediation, RemediationStep], dict[str, Any] | None]
"""Carries out a host action. Returns the step's result when it finished here,
or None when it was handed to the host and will report back (cyborg)."""


class StepFailed(Exception):
    def __init__(self, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.detail = detail or {}


def _scheduler_hook(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> dict[str, Any]:
    """drain/undrain steps call the cluster's scheduler hook; with none configured there is nothing to drain."""
    try:
        if step.action == "drain":
            return draining.drain(host, remediation, step, utcnow())
        outcome = draining.run_scheduler_hook(host, remediation.id, step.action, step.params)
    except draining.DrainFailed as error:
        raise StepFailed(str(error), error.detail) from None
    remediation.evidence = {**(remediation.evidence or {}), "undrain": {"at": utcnow().isoformat(), **outcome}}
    host.drained_at = None
    return outcome


EXECUTORS: dict[str, StepExecutor] = {"drain": _scheduler_hook, "undrain": _scheduler_hook}
"""Central executors by action; `install_cyborg` registers the host actions, power cycle and reimage."""


def advance(
    session: Session, remediation_id: int, *, ruleset: RuleSet, now: dt.datetime | None = None
) -> RemediationState:
    now = now or utcnow()
    remediation = session.scalars(
        select(Remediation).where(Remediation.id == remediation_id).with_for_update()
    ).one_or_none()
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in (RemediationState.planned, RemediationState.running):
        return remediation.state
    if remediation.paused_by is not None:
        return remediation.state  # held by an operator: nothing starts until operations.resume
    host = session.get_one(Host, remediation.host_id)
    step = next((s for s in remediation.steps if s.state in (StepState.pending, StepState.running)), None)
    if step is None:
        return _verify(session, remediation, ruleset, now)
    if step.state == StepState.running and awaiting(step):
        return remediation.state  # handed to the host (or waiting for its first report): it reports back
    if step.state == StepState.running and not ACTIONS[step.action].idempotent:
        step.state = StepState.failed
        step.result = {"error": "interrupted while running; not safe to run twice"}
        planning.escalate(session, remediation, f"step {step.index} ({step.action}) was interrupted", ruleset, now)
        return remediation.state
    remediation.state = RemediationState.running
    remediation.current_step = step.index
    step.state = StepState.running
    step.attempts += 1
    step.started_at = step.started_at or now
    session.flush()
    if step.action == "ticket":
        ticket_id, created = _open_ticket(session, host, remediation, step)
        step.state = StepState.succeeded
        step.finished_at = now
        step.result = {"ticket_id": ticket_id, "created": created}
        decisions.finish(session, remediation, RemediationState.escalated, f"ticket {ticket_id} for a technician", now)
        host.state = HostState.awaiting_repair
        return remediation.state
    executor = EXECUTORS.get(step.action)
    try:
        if executor is None:
            raise StepFailed(f"no executor for action {step.action!r}")
        try:
            draining.ensure_drained(host, remediation, step, now)
        except draining.DrainFailed as error:
            raise StepFailed(str(error), error.detail) from None
        result = executor(session, host, remediation, step)
    except StepFailed as error:
        step.state = StepState.failed
        step.finished_at = now
        step.result = {**error.detail, "error": str(error)}
        planning.escalate(session, remediation, f"step {step.index} ({step.action}) failed: {error}", ruleset, now)
        return remediation.state
    if result is not None:
        complete_step(session, remediation, step, result, now)
    return remediation.state


def complete_step(
    session: Session, remediation: Remediation, step: RemediationStep, result: dict[str, Any], now: dt.datetime
) -> None:
    step.state = StepState.succeeded
    step.finished_at = now
    step.result = result


def _verify(session: Session, remediation: Remediation, ruleset: RuleSet, now: dt.datetime) -> RemediationState:
    """Every step done: the host must now stay healthy for the settle period."""
    rule = ruleset.get(remediation.rule_id)
    settle = rule.safety.settle_s if rule else 0
    remediation.state = RemediationState.verifying
    remediation.settle_until = now + dt.timedelta(seconds=settle)
    if settle == 0:
        return settle_if_due(session, remediation, now, ruleset)
    return remediation.state


def silent_since_fix(session: Session, remediation: Remediation) -> bool:
    """A fix for a silent host worked only if the host reported again after its last step."""
    if ((remediation.evidence or {}).get("signal") or {}).get("kind") != "host_unreachable":
        return False
    finished = [s.finished_at for s in remediation.steps if s.finished_at is not None]
    host = session.get_one(Host, remediation.host_id)
    return bool(finished) and (host.last_report_at is None or host.last_report_at <= max(finished))


def settle_if_due(
    session: Session, remediation: Remediation, now: dt.datetime, ruleset: RuleSet | None = None
) -> RemediationState:
    if remediation.state != RemediationState.verifying or remediation.settle_until is None:
        return remediation.state
    if now < remediation.settle_until:
        return remediation.state
    if ruleset is not None and silent_since_fix(session, remediation):
        planning.escalate(session, remediation, "the host did not report again after the fix", ruleset, now)
        return remediation.state
    decisions.finish(session, remediation, RemediationState.succeeded, "healthy through the settle period", now)
    host = session.get_one(Host, remediation.host_id)
    if tickets.open_tickets_of_host(session, host.hostname):
        # A technician holds the host (a ticket opened by hand while this ran): it stays out of
        # service, and drained, until that repair is verified.
        host.state = HostState.awaiting_repair
        return remediation.state
    host.state = HostState.in_service
    draining.undrain(session, host, remediation, now)
    return remediation.state


def _open_ticket(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> tuple[int, bool]:
    params = step.params
    evidence = evidence_bundle(session, host, remediation)
    request = TicketRequest(
        hostname=host.hostname,
        datacenter=host.datacenter,
        rack=host.rack,
        part_type=str(params.get("part_type", "host")),
        part=remediation.subject,
        title=ticket_title(str(params.get("title", remediation.reason)), evidence),
        priority=int(params.get("priority", 3)),
        remediation_id=remediation.id,
        evidence=evidence,
    )
    ticket, created = tickets.open_ticket(session, request, actor=decisions.SYSTEM)
    return ticket.id, created


# -- cyborg: host actions ---------------------------------------------------------------------

AWAITING = "awaiting"


def deadline_grace(timeout_s: int) -> dt.timedelta:
    """Beyond the action's budget: time for the host's report to arrive (5-60 s)."""
    return dt.timedelta(seconds=min(60.0, max(5.0, timeout_s / 10)))


_bmc: Bmc | None = None
_reach: Reach | None = None


def awaiting(step: RemediationStep) -> bool:
    """The step was handed over (to a host, or to a reinstall) and waits for its report."""
    return bool((step.result or {}).get(AWAITING))


def has_next(remediation: Remediation) -> bool:
    """Whether run_remediation should run again now: a step is pending next, or every step is done and
    verification is due — not while a step waits on its host (the host's result queues the next run),
    nor while an operator holds it (resuming queues the next run)."""
    if remediation.state not in (RemediationState.planned, RemediationState.running) or remediation.paused_by:
        return False
    step = next((s for s in remediation.steps if s.state in (StepState.pending, StepState.running)), None)
    return step is None or step.state == StepState.pending


def install_cyborg(bmc: Bmc | None = None, reach: Reach | None = None) -> None:
    """Register cyborg's actions (at worker start). `bmc`: the out-of-band power control to use;
    default: ipmitool with the BMC settings. `reach`: how a silent host is pinged and its agent
    restarted; default: ping and the clusters' restart_agent hooks (the demo passes the fleet's)."""
    global _bmc, _reach
    if bmc is not None:
        _bmc = bmc
    if reach is not None:
        _reach = reach
    for name, action in CYBORG_ACTIONS.items():
        if action.site == "host":
            EXECUTORS[name] = dispatch_to_host
    EXECUTORS["power_cycle"] = _power_cycle
    EXECUTORS["reimage"] = _reimage
    EXECUTORS["restart_agent"] = _restart_agent


def bmc() -> Bmc:
    global _bmc
    if _bmc is None:
        settings = get_settings()
        _bmc = IpmitoolBmc(settings.bmc_username, settings.bmc_password_file)
    return _bmc


def reach() -> Reach:
    global _reach
    if _reach is None:
        _reach = LiveReach(LiveSystem(), get_settings().scheduler_hooks)
    return _reach


def bmc_address(host: Host) -> str | None:
    label = (host.labels or {}).get("bmc_address")
    if label:
        return str(label)
    template = get_settings().bmc_address_template
    return template.replace("{hostname}", host.hostname) if template else None


def _central_context(step: RemediationStep, system: Any) -> ActionContext:
    action = CYBORG_ACTIONS[step.action]
    return ActionContext(system, timeout_s=timeout_of(action, step.params), dry_run=bool(step.params.get("dry_run")))


def dispatch_to_host(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> None:
    """Sign the step's envelope and send it on host.<hostname> when this transaction commits."""
    settings = get_settings()
    action = CYBORG_ACTIONS[step.action]
    now = utcnow()
    try:
        params = cyborg.resolve_params(action, step.params, remediation.evidence or {})
        envelope, message = cyborg.issue(
            cyborg.signer_for(settings),
            hostname=host.hostname,
            remediation_id=remediation.id,
            step=step.index,
            attempt=step.attempts,
            action=action,
            params=params,
            step_params=step.params,
            expires_s=settings.action_expires_s,
            now=now,
        )
    except (ActionRefused, cyborg.SigningKeyMissing, KeyMaterialError) as error:
        raise StepFailed(str(error)) from None
    # Until the host says it started: the envelope's expiry (unstarted, the host refuses it). Then: its budget.
    deadline = envelope.expires_at + deadline_grace(envelope.timeout_s)
    step.result = {
        AWAITING: "host",
        "envelope_id": str(envelope.id),
        "attempt": envelope.attempt,
        "params": params,
        "timeout_s": envelope.timeout_s,
        "sent_at": now.isoformat(),
        "expires_at": envelope.expires_at.isoformat(),
        "deadline": deadline.isoformat(),
    }
    signature = host_signature(
        current_app, host.hostname, "cyborg.run_action", args=[message.model_dump()], datacenter=host.datacenter
    ).set(task_id=str(envelope.id), expires=cyborg.message_expires_s(settings.action_expires_s))
    send_after_commit(session, signature)
    audit.record(
        session,
        actor=decisions.SYSTEM,
        action="cyborg.action.dispatched",
        object_type="remediation",
        object_id=remediation.id,
        detail={"host": host.hostname, "step": step.index, "action": step.action, "envelope_id": str(envelope.id)},
    )


def _power_cycle(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> dict[str, Any]:
    control = bmc()
    ctx = _central_context(step, getattr(control, "system", None))
    try:
        done = control.power_cycle(host.hostname, bmc_address(host), ctx)
    except ActionFailed as error:
        raise StepFailed(f"power cycle through the BMC: {error}", {"commands": ctx.log.as_json()}) from None
    return {"outcome": "succeeded", "changed": done, "commands": ctx.log.as_json()}


def _restart_agent(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> dict[str, Any]:
    """The agent of a host that still answers went silent: start it again (the cluster's hook). The step
    succeeds when the hook ran; verification is the host reporting again before the settle period ends."""
    control = reach()
    ctx = _central_context(step, getattr(control, "system", None))
    try:
        done = control.restart_agent(host.hostname, host.cluster, remediation.id, ctx)
    except ActionFailed as error:
        raise StepFailed(f"agent restart: {error}", {"commands": ctx.log.as_json()}) from None
    return {"outcome": "succeeded", **done, "commands": ctx.log.as_json()}


def _reimage(session: Session, host: Host, remediation: Remediation, step: RemediationStep) -> None:
    """PXE boot and power cycle through the BMC; the step finishes at the host's first report from the new image."""
    control = bmc()
    ctx = _central_context(step, getattr(control, "system", None))
    address = bmc_address(host)
    now = utcnow()
    try:
        control.boot_device(host.hostname, address, "pxe", ctx)
        control.power_cycle(host.hostname, address, ctx)
    except ActionFailed as error:
        raise StepFailed(f"reimage through the BMC: {error}", {"commands": ctx.log.as_json()}) from None
    timeout = timeout_of(CYBORG_ACTIONS["reimage"], step.params)
    step.result = {
        AWAITING: "first_report",
        "boot_id_before": host.boot_id,
        "since": now.isoformat(),
        "deadline": (now + dt.timedelta(seconds=timeout)).isoformat(),
        "commands": ctx.log.as_json(),
    }


def _locked(session: Session, remediation_id: Any) -> Remediation | None:
    if not isinstance(remediation_id, int):
        return None
    return session.scalars(select(Remediation).where(Remediation.id == remediation_id).with_for_update()).one_or_none()


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


def _continue(session: Session, remediation: Remediation) -> None:
    send_after_commit(
        session, current_app.signature("remediator.run_remediation", args=[remediation.id], queue=REMEDIATE_QUEUE)
    )


def _release_host(session: Session, remediation: Remediation) -> None:
    host = session.get_one(Host, remediation.host_id)
    if host.state == HostState.remediating and remediation.state not in (
        RemediationState.planned,
        RemediationState.running,
        RemediationState.verifying,
    ):
        host.state = HostState.in_service
        draining.undrain(session, host, remediation, utcnow())


def record_host_result(
    session: Session, report: dict[str, Any], ruleset: RuleSet, now: dt.datetime, *, signer: str | None = None
) -> str:
    """A host's result for a step it was sent: the step succeeds (the plan goes on) or fails (escalation).
    `signer`: the host whose credential signed it (remediator.tasks checks the signature)."""
    remediation = _locked(session, report.get("remediation_id"))
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
    kept = {k: report.get(k) for k in ("outcome", "error", "changed", "verified", "commands", "driver", "runs")}
    dispatched = {k: v for k, v in (step.result or {}).items() if k != AWAITING}
    audit.record(
        session,
        actor=f"host:{report.get('hostname')}",
        action=f"cyborg.action.{outcome}",
        object_type="remediation",
        object_id=remediation.id,
        reason=str(report.get("error") or ""),
        detail=summary,
    )
    if step.state != StepState.running or not awaiting(step):
        step.result = {**dispatched, "late_report": kept}  # after an abort or a timeout: kept for the record
        return "late"
    step.result = {**dispatched, **kept, "finished_at": report.get("finished_at")}
    step.finished_at = now
    if outcome == "succeeded":
        step.state = StepState.succeeded
        if remediation.state == RemediationState.running:
            _continue(session, remediation)
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
    remediation = _locked(session, report.get("remediation_id"))
    step = _host_step(session, remediation, report, signer)
    if step is None or step.state != StepState.running or (step.result or {}).get(AWAITING) != "host":
        return "ignored"  # a late notice (the result came first) or not ours
    if "accepted_at" in step.result:
        return "ignored"
    timeout = int(step.result.get("timeout_s", 900))
    step.result = {
        **step.result,
        "accepted_at": report.get("accepted_at"),
        "deadline": (now + dt.timedelta(seconds=timeout) + deadline_grace(timeout)).isoformat(),
    }
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
    log.warning("cyborg.envelope.refused", extra={"fields": {"host": hostname, "code": report.get("code")}})
    if report.get("verified") is not True:
        return "recorded"
    remediation = _locked(session, report.get("remediation_id"))
    step = _host_step(session, remediation, report, signer)
    if remediation is None or step is None or step.state != StepState.running or not awaiting(step):
        return "recorded"
    if report.get("code") in ("replayed", "in_flight"):
        return "recorded"  # the host ran it before, or runs it now: its result is (or was) on its way
    step.state = StepState.failed
    step.finished_at = now
    step.result = {
        **{k: v for k, v in step.result.items() if k != AWAITING},
        "error": f"refused: {report.get('reason')}",
    }
    if remediation.state == RemediationState.running:
        reason = f"step {step.index} ({step.action}) refused by the host: {report.get('code')}"
        planning.escalate(session, remediation, reason, ruleset, now)
    return "failed"


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


def check_deadlines(session: Session, ruleset: RuleSet, now: dt.datetime) -> int:
    """Steps waiting on a host past their deadline; reinstalls whose host reported from the new image."""
    waiting = session.scalars(
        select(RemediationStep.remediation_id)
        .join(Remediation)
        .where(Remediation.state == RemediationState.running, RemediationStep.state == StepState.running)
    ).all()
    handled = 0
    for remediation_id in sorted(set(waiting)):
        remediation = _locked(session, remediation_id)
        step = next((s for s in remediation.steps if s.state == StepState.running), None) if remediation else None
        if remediation is None or step is None or not awaiting(step):
            continue
        handled += _check_step(session, remediation, step, ruleset, now)
    return handled


def _check_step(
    session: Session, remediation: Remediation, step: RemediationStep, ruleset: RuleSet, now: dt.datetime
) -> int:
    result = dict(step.result)
    host = session.get_one(Host, remediation.host_id)
    if result[AWAITING] == "first_report":
        since = dt.datetime.fromisoformat(result["since"])
        if host.last_report_at is not None and host.last_report_at > since and host.boot_id != result["boot_id_before"]:
            control = bmc()
            ctx = _central_context(step, getattr(control, "system", None))
            try:
                control.boot_device(host.hostname, bmc_address(host), "disk", ctx)
            except ActionFailed as error:  # the host runs; the next reinstall would PXE again: say so
                result["warning"] = f"boot device not reset: {error}"
            result.pop(AWAITING)
            result.update(
                outcome="succeeded", reports_from=host.boot_id, commands=result["commands"] + ctx.log.as_json()
            )
            complete_step(session, remediation, step, result, now)
            _continue(session, remediation)
            return 1
    if now < dt.datetime.fromisoformat(result["deadline"]):
        return 0
    if result[AWAITING] == "host" and "accepted_at" not in result:
        # The host never said it started: nothing ran there that a power cycle could finish. The
        # plan's next rung decides, as when the host refuses an expired envelope.
        result.pop(AWAITING)
        reason = f"step {step.index} ({step.action}) was not started by {host.hostname} before its envelope expired"
        step.result = {**result, "error": f"not started by {host.hostname} by {result['deadline']}"}
        step.state = StepState.failed
        step.finished_at = now
        planning.escalate(session, remediation, reason, ruleset, now)
        return 1
    action = CYBORG_ACTIONS[step.action]
    control = bmc()
    address = bmc_address(host)
    can_cycle = address is not None or control.name == "simulated"
    if result[AWAITING] == "host" and action.restarts and "power_cycled" not in result and can_cycle:
        ctx = _central_context(step, getattr(control, "system", None))
        try:
            done = control.power_cycle(host.hostname, address, ctx)
        except ActionFailed as error:
            done = {"error": str(error)}
        result["power_cycled"] = {"at": now.isoformat(), **done, "commands": ctx.log.as_json()}
        timeout = int(result.get("timeout_s", 900))
        result["deadline"] = (now + dt.timedelta(seconds=timeout) + deadline_grace(timeout)).isoformat()
        step.result = result
        audit.record(
            session,
            actor=decisions.SYSTEM,
            action="cyborg.host.power_cycled",
            object_type="remediation",
            object_id=remediation.id,
            reason=f"no report from {host.hostname} for step {step.index} ({step.action}) by its deadline",
            detail={"host": host.hostname, **done},
        )
        if "error" not in done:
            return 1
    result.pop(AWAITING)
    what = "first report from the new image" if step.action == "reimage" else "result"
    step.result = {**result, "error": f"no {what} from {host.hostname} by {result['deadline']}"}
    step.state = StepState.failed
    step.finished_at = now
    escalate_to_ticket(session, remediation, f"did not come back after {step.action} (step {step.index})", ruleset, now)
    return 1


def abort(session: Session, remediation_id: int, *, actor: str, reason: str, now: dt.datetime) -> list[str]:
    """Stop a plan between steps: nothing more starts. A step already on the host finishes there (its
    report is kept); an envelope not yet started is revoked. Returns the task ids to revoke after commit."""
    remediation = _locked(session, remediation_id)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in (
        RemediationState.detected,
        RemediationState.planned,
        RemediationState.awaiting_approval,
        RemediationState.running,
        RemediationState.verifying,
    ):
        raise Conflict(f"remediation {remediation_id} is {remediation.state.value}; only an active one can be aborted")
    revoke = []
    for step in remediation.steps:
        if step.state == StepState.pending:
            step.state = StepState.skipped
            step.result = {"skipped": f"aborted by {actor}"}
        elif step.state == StepState.running:
            result = {k: v for k, v in (step.result or {}).items() if k != AWAITING}
            if result.get("envelope_id"):
                revoke.append(str(result["envelope_id"]))
            step.state = StepState.failed
            step.finished_at = now
            step.result = {**result, "error": f"aborted by {actor} while in flight; the host's report is kept"}
    decisions.finish(session, remediation, RemediationState.cancelled, f"aborted by {actor}: {reason}", now)
    _release_host(session, remediation)
    audit.record(
        session,
        actor=actor,
        action="remediator.remediation.aborted",
        object_type="remediation",
        object_id=remediation_id,
        reason=reason,
        detail={"revoked": revoke},
    )
    session.flush()
    return revoke
