"""Celery tasks of the remediator. Each takes ids or JSON, opens its own session,
and is idempotent: a redelivered task finds its work done and does nothing twice.

One file on purpose: every task name that agents, hosts, the scheduler and the API send to the
remediator is declared here, each a thin shell over a function of its stage (the names are a contract
with agents that have no central code).

A task runs with the remediator its app carries (`Remediator.of(self.app)`: the database, the active
rules, cyborg's executor, the host keys), which the process's root built (api/runtime.py)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable
from typing import Any

from celery import Task, current_app, shared_task
from celery.signals import worker_process_init
from celery_batches import Batches, SimpleRequest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from core import audit
from core.db import utcnow
from core.dispatch import send_after_commit
from core.queue import INGEST_QUEUE, REMEDIATE_QUEUE, find
from cyborg.central import message_refused
from remediator import (
    deadlines,
    decisions,
    handoff,
    host_results,
    planning,
    repairs,
    retention,
    rollouts,
    runner,
    stalls,
    unreachable,
)
from remediator.host_evaluation import evaluate_host
from remediator.hostauth import HostKeys, SignedPayload
from remediator.ingest import ingest_batch
from remediator.models import Host, HostState, Remediation, RemediationState, Signal
from remediator.runtime import Remediator
from remediator.schemas import IngestResult

log = logging.getLogger(__name__)


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    # A forked pool child must not share its parent's database sockets.
    remediator = find(current_app, Remediator)
    if remediator is not None:  # a process without the remediator (a host agent) has no database
        remediator.database.engine.dispose(close=False)


INGEST_BATCH = 256
INGEST_FLUSH_S = 0.2


def with_signatures(payloads: list[Any], signatures: list[Any] | None) -> list[Any]:
    """Pair each payload with its signature ({"host", "sig"}, or None for an unsigned one)."""
    if not signatures:
        return payloads
    return [
        SignedPayload(body=p, host=s.get("host"), sig=s.get("sig")) if isinstance(s, dict) else p
        for p, s in zip(payloads, signatures, strict=False)
    ] + payloads[len(signatures) :]


def ingest_payloads(remediator: Remediator, payloads: list[Any], signatures: list[Any] | None = None) -> IngestResult:
    """Ingest a batch with the runtime's database and rules (see remediator.ingest.ingest_batch)."""
    return ingest_batch(
        with_signatures(payloads, signatures),
        database=remediator.database,
        ruleset=remediator.rules.ruleset,
        host_keys=remediator.host_keys,
        require_signed=remediator.settings.signed_reports_required,
    )


@shared_task(
    name="remediator.ingest_reports",
    queue=INGEST_QUEUE,
    autoretry_for=(OperationalError,),
    retry_backoff=2,
    retry_backoff_max=300,
    max_retries=None,
    bind=True,
)
def ingest_reports(self: Task, payloads: list[Any], signatures: list[Any] | None = None) -> dict[str, Any]:
    """A list of reports in one message (agents' sends and catch-up batches, bulk senders, and batches
    handed over after a database outage). Agents with a credential send each report as JSON text
    with `signatures[i] = {"host": …, "sig": …}` (remediator.hostauth).

    While the database is unreachable the task is retried with backoff, for as long as it takes.
    """
    return ingest_payloads(Remediator.of(self.app), payloads, signatures).model_dump(mode="json")


@shared_task(
    name="remediator.ingest_report",
    base=Batches,
    queue=INGEST_QUEUE,
    flush_every=INGEST_BATCH,
    flush_interval=INGEST_FLUSH_S,
    bind=True,
)
def ingest_report(self: Task, requests: list[SimpleRequest]) -> None:
    """One report per message, consumed in batches: one transaction per batch.

    Messages are acknowledged after the batch returns. A batch that meets an
    unreachable database is handed to `ingest_reports`, which retries it.
    """
    payloads = [r.args[0] if r.args else r.kwargs.get("payload") for r in requests]
    signatures = [r.args[1] if len(r.args) > 1 else r.kwargs.get("signature") for r in requests]
    try:
        ingest_payloads(Remediator.of(self.app), payloads, signatures)
    except OperationalError:
        log.warning("remediator.ingest.deferred", extra={"fields": {"reports": len(payloads)}})
        ingest_reports.apply_async(args=[payloads, signatures], countdown=2)


@shared_task(name="remediator.run_remediation", queue=REMEDIATE_QUEUE, bind=True)
def run_remediation(self: Task, remediation_id: int) -> str:
    """Advance a remediation by one step; queue itself again while steps remain."""
    remediator = Remediator.of(self.app)
    with remediator.database.session() as session:
        state = runner.advance(session, remediation_id, ruleset=remediator.rules.ruleset)
        remediation = session.get_one(Remediation, remediation_id)
        # Not while a step waits on its host: the host's result queues the next run.
        if runner.has_next(remediation):
            send_after_commit(session, run_remediation.s(remediation_id).set(queue=REMEDIATE_QUEUE))
    return state.value


@shared_task(name="remediator.mark_unreachable", queue=REMEDIATE_QUEUE, bind=True)
def mark_unreachable(self: Task) -> int:
    """Hosts in service that are silent for stale_after_intervals report intervals become unreachable;
    each is then looked at from outside (`probe_silent_host`: BMC power state, ping) before the rules
    decide what to do about it.

    A host that goes silent while it is being remediated (a reboot, a reflash) is left to the
    remediation's own timeouts."""
    remediator = Remediator.of(self.app)
    settings = remediator.settings
    now = utcnow()
    changed = 0
    with remediator.database.session() as session:
        hosts = session.scalars(select(Host).where(Host.state == HostState.in_service)).all()
        for host in hosts:
            if host.last_report_at is None:
                continue
            silent = now - host.last_report_at
            if silent <= dt.timedelta(seconds=host.report_interval_s * settings.stale_after_intervals):
                continue
            host.state = HostState.unreachable
            changed += 1
            audit.record(
                session,
                actor=decisions.SYSTEM,
                action="remediator.host.unreachable",
                object_type="host",
                object_id=host.hostname,
                reason=f"no report since {host.last_report_at.isoformat()}",
            )
            send_after_commit(session, probe_silent_host.s(host.hostname).set(queue=REMEDIATE_QUEUE))
    return changed


@shared_task(name="remediator.probe_silent_host", queue=REMEDIATE_QUEUE, bind=True)
def probe_silent_host(self: Task, hostname: str) -> str:
    """Look at a silent host from outside (remediator/unreachable.py) and let the rules decide.
    Returns the verdict, or what made the probe moot (the host reported meanwhile)."""
    remediator = Remediator.of(self.app)
    ruleset = remediator.rules.ruleset
    with remediator.database.session() as session:
        host = session.scalars(select(Host).where(Host.hostname == hostname)).one_or_none()
        if host is None or host.state != HostState.unreachable:
            return "moot"
        target = handoff.target_of(host)
    seen = unreachable.probe(target, remediator.cyborg)  # no transaction held
    now = utcnow()
    with remediator.database.session() as session:
        host = session.scalars(select(Host).where(Host.hostname == hostname).with_for_update()).one_or_none()
        if host is None or host.state != HostState.unreachable:
            return "moot"  # it reported while we looked
        stale_s = host.report_interval_s * remediator.settings.stale_after_intervals
        seen = unreachable.with_rack(seen, host.rack, unreachable.rack_silent(session, host, now, stale_s))
        seen = unreachable.with_network(seen, unreachable.network_suspect(session, host))
        signal = unreachable.unreachable_signal(host, seen, now)
        session.add(
            Signal(
                host_id=host.id,
                kind=signal.kind,
                subject=signal.subject,
                value=signal.value,
                detail=signal.detail,
                observed_at=now,
            )
        )
        memory = dict(host.memory or {})
        firings = evaluate_host(host, [signal], ruleset, memory, now)
        host.memory = memory
        session.flush()
        for firing in firings:
            planning.decide(session, host, firing, ruleset, None, now)
    return seen.verdict


@shared_task(name="remediator.admit_waiting", queue=REMEDIATE_QUEUE, bind=True)
def admit_waiting(self: Task) -> int:
    """Try again to admit remediations held by a gate (caps, spacing, pause, maintenance)."""
    remediator = Remediator.of(self.app)
    now = utcnow()
    ruleset = remediator.rules.ruleset
    admitted = 0
    with remediator.database.session() as session:
        waiting = session.scalars(
            select(Remediation).where(Remediation.state == RemediationState.detected).order_by(Remediation.id)
        ).all()
        for remediation in waiting:
            admitted += planning.admit(session, remediation, ruleset, now)
    return admitted


@shared_task(name="remediator.settle_verifications", queue=REMEDIATE_QUEUE, bind=True)
def settle_verifications(self: Task) -> int:
    """Remediations whose host stayed healthy through the settle period have succeeded (a fix for a silent
    host, only if the host reported again; otherwise it escalates)."""
    remediator = Remediator.of(self.app)
    now = utcnow()
    ruleset = remediator.rules.ruleset
    settled = 0
    with remediator.database.session() as session:
        due = session.scalars(
            select(Remediation).where(Remediation.state == RemediationState.verifying, Remediation.settle_until <= now)
        ).all()
        for remediation in due:
            settled += runner.settle_if_due(session, remediation, now, ruleset) == RemediationState.succeeded
    return settled


@shared_task(name="remediator.settle_repairs", queue=REMEDIATE_QUEUE, bind=True)
def settle_repairs(self: Task) -> dict[str, int]:
    """Repair tickets: close those whose host reported without the fault through the settle period."""
    remediator = Remediator.of(self.app)
    with remediator.database.session() as session:
        return repairs.settle_repairs(session, now=utcnow())


@shared_task(name="remediator.evaluate_rollouts", queue=REMEDIATE_QUEUE, bind=True)
def evaluate_rollouts(self: Task) -> dict[str, int]:
    """Rollouts: compare their upgraded and not-yet-upgraded hosts' health signals, halt on a difference."""
    remediator = Remediator.of(self.app)
    with remediator.database.session() as session:
        return rollouts.evaluate(session, remediator.rules.ruleset, utcnow())


@shared_task(name="remediator.maintain_reports", queue=REMEDIATE_QUEUE, bind=True)
def maintain_reports(self: Task) -> dict[str, Any]:
    """Create the coming days' report partitions and prune reports and signals past the retention window."""
    remediator = Remediator.of(self.app)
    pruned = retention.maintain(
        remediator.database, now=utcnow(), retention_days=remediator.settings.report_retention_days
    )
    return {
        "cutoff": pruned.cutoff.isoformat(),
        "created": pruned.partitions_created,
        "dropped": pruned.partitions_dropped,
        "rows_deleted": pruned.rows_deleted,
        "signals_deleted": pruned.signals_deleted,
    }


def open_host_message(
    session: Session, task: str, report: Any, signature: Any, *, keys: HostKeys, required: bool
) -> tuple[dict[str, Any], str | None] | None:
    """A cyborg message from a host (result, start, refusal) and the host whose credential signed it.

    Agents with a credential send the report's JSON text and `{"host", "sig"}` (core.signing, as
    reports are signed); the signature must hold for a live credential of that host. Unsigned
    messages (a dict) pass only while signatures are not required (FLEETFIX_REQUIRE_SIGNED_REPORTS).
    Anything else is refused, audited as `cyborg.message.refused`, and None is returned."""
    claimed = signature.get("host") if isinstance(signature, dict) else None
    problem: str
    if isinstance(signature, dict) and isinstance(report, str):
        sig = signature.get("sig")
        payload = SignedPayload(body=report, host=claimed, sig=sig)
        if isinstance(claimed, str) and isinstance(sig, str) and keys.verify(payload):
            try:
                parsed = json.loads(report)
            except ValueError as error:
                parsed, problem = None, f"signed text is not JSON: {error}"
            else:
                problem = "signed text is not a JSON object"
            if isinstance(parsed, dict):
                return parsed, claimed
        else:
            problem = f"signature does not match any live credential of host {claimed!r}"
    elif signature is None and isinstance(report, dict):
        if not required:
            return report, None
        claimed = report.get("hostname")
        problem = "unsigned: signatures are required (FLEETFIX_REQUIRE_SIGNED_REPORTS)"
    else:
        problem = f"not a cyborg message: {type(report).__name__} with {type(signature).__name__}"
    host = str(claimed) if claimed is not None else None
    message_refused(task, host, problem)
    audit.record(
        session,
        actor=f"host:{host}",
        action="cyborg.message.refused",
        object_type="host",
        object_id=host,
        reason=problem,
        detail={"task": task},
    )
    return None


HostMessageHandler = Callable[[Session, dict[str, Any], str | None], str]


def _host_message(remediator: Remediator, task: str, report: Any, signature: Any, record: HostMessageHandler) -> str:
    """Open a host's message (open_host_message) and hand it, with its signer, to remediator.host_results."""
    with remediator.database.session() as session:
        opened = open_host_message(
            session,
            task,
            report,
            signature,
            keys=remediator.host_keys,
            required=remediator.settings.signed_reports_required,
        )
        if opened is None:
            return "refused"
        return record(session, *opened)


@shared_task(name="remediator.step_result", queue=REMEDIATE_QUEUE, bind=True)
def step_result(self: Task, report: dict[str, Any] | str, signature: dict[str, Any] | None = None) -> str:
    """A host's result for a cyborg action (sent by the host's agent, by name; signed: see open_host_message)."""
    remediator = Remediator.of(self.app)
    ruleset, now = remediator.rules.ruleset, utcnow()
    return _host_message(
        remediator,
        "remediator.step_result",
        report,
        signature,
        lambda session, body, signer: host_results.record_host_result(session, body, ruleset, now, signer=signer),
    )


@shared_task(name="remediator.step_started", queue=REMEDIATE_QUEUE, bind=True)
def step_started(self: Task, report: dict[str, Any] | str, signature: dict[str, Any] | None = None) -> str:
    """A host began a cyborg action: its deadline now counts from here (once)."""
    remediator = Remediator.of(self.app)
    now = utcnow()
    return _host_message(
        remediator,
        "remediator.step_started",
        report,
        signature,
        lambda session, body, signer: host_results.record_host_started(session, body, now, signer=signer),
    )


@shared_task(name="remediator.action_refused", queue=REMEDIATE_QUEUE, bind=True)
def action_refused(self: Task, report: dict[str, Any] | str, signature: dict[str, Any] | None = None) -> str:
    """A host refused an action envelope (forged, tampered, replayed, expired, not allowed, no journal)."""
    remediator = Remediator.of(self.app)
    ruleset, now = remediator.rules.ruleset, utcnow()
    return _host_message(
        remediator,
        "remediator.action_refused",
        report,
        signature,
        lambda session, body, signer: host_results.record_refusal(session, body, ruleset, now, signer=signer),
    )


@shared_task(name="remediator.redrive_stalled", queue=REMEDIATE_QUEUE, bind=True)
def redrive_stalled(self: Task) -> int:
    """Run again the remediations whose next run was lost (remediator.stalls)."""
    remediator = Remediator.of(self.app)
    with remediator.database.session() as session:
        ids = stalls.stalled(session, utcnow())
        for remediation_id in ids:
            log.warning("remediator.remediation.redriven", extra={"fields": {"remediation": remediation_id}})
            send_after_commit(session, run_remediation.s(remediation_id).set(queue=REMEDIATE_QUEUE))
    return len(ids)


@shared_task(name="remediator.check_step_deadlines", queue=REMEDIATE_QUEUE, bind=True)
def check_step_deadlines(self: Task) -> int:
    """Host actions past their deadline (power cycle, then a ticket), reinstalls that reported back."""
    remediator = Remediator.of(self.app)
    with remediator.database.session() as session:
        return deadlines.check_deadlines(session, remediator.rules.ruleset, utcnow())


def beat_schedule(report_interval_s: int) -> dict[str, dict[str, Any]]:
    """Periodic tasks; staleness is measured in report intervals, so it is checked once per interval."""
    return {
        "mark-unreachable": {"task": "remediator.mark_unreachable", "schedule": float(report_interval_s)},
        "admit-waiting": {"task": "remediator.admit_waiting", "schedule": 15.0},
        "check-step-deadlines": {"task": "remediator.check_step_deadlines", "schedule": 10.0},
        "redrive-stalled": {"task": "remediator.redrive_stalled", "schedule": 60.0},
        "settle-verifications": {"task": "remediator.settle_verifications", "schedule": 30.0},
        "settle-repairs": {"task": "remediator.settle_repairs", "schedule": 30.0},
        "evaluate-rollouts": {"task": "remediator.evaluate_rollouts", "schedule": 60.0},
        "maintain-reports": {"task": "remediator.maintain_reports", "schedule": 3600.0},
    }
