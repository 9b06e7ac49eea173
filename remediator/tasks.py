"""Celery tasks of the remediator. Each takes ids or JSON, opens its own session,
and is idempotent: a redelivered task finds its work done and does nothing twice."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init
from celery_batches import Batches, SimpleRequest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from core import audit
from core.db import get_database, utcnow
from core.dispatch import send_after_commit
from core.queue import INGEST_QUEUE, REMEDIATE_QUEUE
from core.settings import get_settings
from remediator import planning, runner
from remediator.ingest import evaluate_host, ingest_batch
from remediator.models import ACTIVE_REMEDIATION_STATES, Host, HostState, Remediation, RemediationState
from remediator.rules import get_registry
from remediator.schemas import IngestResult
from remediator.signals import SignalValue

log = logging.getLogger(__name__)


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    # A forked pool child must not share its parent's database sockets.
    with contextlib.suppress(RuntimeError):  # no database in this process (a host agent)
        get_database().engine.dispose(close=False)


INGEST_BATCH = 256
INGEST_FLUSH_S = 0.2


def ingest_payloads(payloads: list[Any]) -> IngestResult:
    """Ingest a batch with this process's database and rules (see remediator.ingest.ingest_batch)."""
    return ingest_batch(payloads, database=get_database(), ruleset=get_registry().ruleset)


@shared_task(
    name="remediator.ingest_reports",
    queue=INGEST_QUEUE,
    autoretry_for=(OperationalError,),
    retry_backoff=2,
    retry_backoff_max=300,
    max_retries=None,
)
def ingest_reports(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """A list of reports in one message (bulk senders, and batches handed over after a database outage).

    While the database is unreachable the task is retried with backoff, for as long as it takes.
    """
    return ingest_payloads(payloads).model_dump(mode="json")


@shared_task(
    name="remediator.ingest_report",
    base=Batches,
    queue=INGEST_QUEUE,
    flush_every=INGEST_BATCH,
    flush_interval=INGEST_FLUSH_S,
)
def ingest_report(requests: list[SimpleRequest]) -> None:
    """One report per message (what agents send), consumed in batches: one transaction per batch.

    Messages are acknowledged after the batch returns. A batch that meets an
    unreachable database is handed to `ingest_reports`, which retries it.
    """
    payloads = [r.args[0] if r.args else r.kwargs.get("payload") for r in requests]
    try:
        ingest_payloads(payloads)
    except OperationalError:
        log.warning("remediator.ingest.deferred", extra={"fields": {"reports": len(payloads)}})
        ingest_reports.apply_async(args=[payloads], countdown=2)


@shared_task(name="remediator.run_remediation", queue=REMEDIATE_QUEUE)
def run_remediation(remediation_id: int) -> str:
    """Advance a remediation by one step; queue itself again while steps remain."""
    with get_database().session() as session:
        state = runner.advance(session, remediation_id, ruleset=get_registry().ruleset)
        remediation = session.get_one(Remediation, remediation_id)
        more = state in ACTIVE_REMEDIATION_STATES and any(s.state.value == "pending" for s in remediation.steps)
        if more:
            send_after_commit(session, run_remediation.s(remediation_id).set(queue=REMEDIATE_QUEUE))
    return state.value


@shared_task(name="remediator.mark_unreachable", queue=REMEDIATE_QUEUE)
def mark_unreachable() -> int:
    """Hosts in service that are silent for stale_after_intervals report intervals become unreachable,
    and the rules decide what to do about it (signal `host_unreachable`, value: seconds silent).

    A host that goes silent while it is being remediated (a reboot, a reflash) is left to the
    remediation's own timeouts."""
    settings = get_settings()
    ruleset = get_registry().ruleset
    now = utcnow()
    changed = 0
    with get_database().session() as session:
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
                actor=planning.SYSTEM,
                action="remediator.host.unreachable",
                object_type="host",
                object_id=host.hostname,
                reason=f"no report since {host.last_report_at.isoformat()}",
            )
            signal = SignalValue(
                "host_unreachable", "", silent.total_seconds(), {"last_report_at": str(host.last_report_at)}
            )
            memory = dict(host.memory or {})
            firings = evaluate_host(host, [signal], ruleset, memory, now)
            host.memory = memory
            for firing in firings:
                planning.decide(session, host, firing, ruleset, None, now)
    return changed


@shared_task(name="remediator.admit_waiting", queue=REMEDIATE_QUEUE)
def admit_waiting() -> int:
    """Try again to admit remediations held by a gate (caps, spacing, pause, maintenance)."""
    now = utcnow()
    ruleset = get_registry().ruleset
    admitted = 0
    with get_database().session() as session:
        waiting = session.scalars(
            select(Remediation).where(Remediation.state == RemediationState.detected).order_by(Remediation.id)
        ).all()
        for remediation in waiting:
            admitted += planning.admit(session, remediation, ruleset, now)
    return admitted


@shared_task(name="remediator.settle_verifications", queue=REMEDIATE_QUEUE)
def settle_verifications() -> int:
    """Remediations whose host stayed healthy through the settle period have succeeded."""
    now = utcnow()
    settled = 0
    with get_database().session() as session:
        due = session.scalars(
            select(Remediation).where(Remediation.state == RemediationState.verifying, Remediation.settle_until <= now)
        ).all()
        for remediation in due:
            settled += runner.settle_if_due(session, remediation, now) == RemediationState.succeeded
    return settled


def beat_schedule(report_interval_s: int) -> dict[str, dict[str, Any]]:
    """Periodic tasks; staleness is measured in report intervals, so it is checked once per interval."""
    return {
        "mark-unreachable": {"task": "remediator.mark_unreachable", "schedule": float(report_interval_s)},
        "admit-waiting": {"task": "remediator.admit_waiting", "schedule": 15.0},
        "settle-verifications": {"task": "remediator.settle_verifications", "schedule": 30.0},
    }
