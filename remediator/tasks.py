"""Celery tasks of the remediator. Each takes ids or JSON, opens its own session,
and is idempotent: a redelivered task finds its work done and does nothing twice."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init
from sqlalchemy import select

from core import audit
from core.db import get_database, utcnow
from core.dispatch import send_after_commit
from core.queue import INGEST_QUEUE, REMEDIATE_QUEUE
from core.settings import get_settings
from remediator import service
from remediator.models import ACTIVE_REMEDIATION_STATES, Host, HostState, Remediation
from remediator.rules import get_registry

log = logging.getLogger(__name__)


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    # A forked pool child must not share its parent's database sockets.
    with contextlib.suppress(RuntimeError):  # no database in this process (a host agent)
        get_database().engine.dispose(close=False)


@shared_task(name="remediator.ingest_reports", queue=INGEST_QUEUE)
def ingest_reports(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """Store and evaluate a batch of reports; malformed ones are refused one by one."""
    reports, refused = service.parse_reports(payloads)
    for refusal in refused:
        log.warning(
            "remediator.report.refused",
            extra={"fields": {"index": refusal.index, "report_id": refusal.report_id, "errors": refusal.errors}},
        )
    with get_database().session() as session:
        result = service.ingest(session, reports, rules=get_registry().rules)
    result.refused = refused
    return result.model_dump(mode="json")


@shared_task(name="remediator.run_remediation", queue=REMEDIATE_QUEUE)
def run_remediation(remediation_id: int) -> str:
    """Advance a remediation by one step; queue itself again while steps remain."""
    with get_database().session() as session:
        state = service.advance(session, remediation_id)
        remediation = session.get_one(Remediation, remediation_id)
        more = state in ACTIVE_REMEDIATION_STATES and any(s.state.value == "pending" for s in remediation.steps)
        if more:
            send_after_commit(session, run_remediation.s(remediation_id).set(queue=REMEDIATE_QUEUE))
    return state.value


@shared_task(name="remediator.mark_unreachable", queue=REMEDIATE_QUEUE)
def mark_unreachable() -> int:
    """Hosts silent for stale_after_intervals report intervals become unreachable."""
    settings = get_settings()
    now = utcnow()
    changed = 0
    with get_database().session() as session:
        hosts = session.scalars(select(Host).where(Host.state.in_([HostState.in_service, HostState.remediating]))).all()
        for host in hosts:
            if host.last_report_at is None:
                continue
            limit = dt.timedelta(seconds=host.report_interval_s * settings.stale_after_intervals)
            if now - host.last_report_at > limit:
                host.state = HostState.unreachable
                changed += 1
                audit.record(
                    session,
                    actor=service.SYSTEM,
                    action="remediator.host.unreachable",
                    object_type="host",
                    object_id=host.hostname,
                    reason=f"no report since {host.last_report_at.isoformat()}",
                )
    return changed


def beat_schedule(report_interval_s: int) -> dict[str, dict[str, Any]]:
    """Periodic tasks; staleness is measured in report intervals, so it is checked once per interval."""
    return {"mark-unreachable": {"task": "remediator.mark_unreachable", "schedule": float(report_interval_s)}}
