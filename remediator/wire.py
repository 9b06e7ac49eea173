"""Delta reports (checker.wire) rebuilt into full reports from the base the centre holds.

The base is a stored report of the host (remediator.models.Report): stored rows are never rewritten,
so any of them the agent was told of (IngestResult.bases) can be merged onto, and the durable state
costs nothing beyond what ingest already keeps. A base that is not stored (pruned, never stored, the
database rebuilt, another host's), or whose sections do not digest as the delta says, is answered
with "send full"; nothing is stored from such a delta. Stage 1 takes deltas over HTTP only: on the
ingest stream a delta is refused whole (`stream_refusal`), before any base is looked up.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from checker.wire import ReportDelta, SendFull, is_delta, rebuild
from core import metrics
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.schemas import Refusal

log = logging.getLogger(__name__)
STREAM_REFUSAL = (
    "a delta report is taken only by POST /api/v1/reports/delta (stage 1 of issue 17); "
    "send the report whole on the ingest stream"
)


def stream_refusal(payload: object) -> Refusal | None:
    """A delta on the ingest stream (or the Celery task) refused whole, or None: not a delta.

    Stage 1 takes deltas over HTTP only (POST /api/v1/reports/delta): an agent reads no answer from the
    stream, so no base is ever named there, and a delta on it is refused before anything of it is used.
    JSON text is searched for the key first (cheap); decoded (orjson: bounded depth) only if found."""
    if isinstance(payload, str | bytes):
        marker = '"encoding"' if isinstance(payload, str) else b'"encoding"'
        if marker not in payload:  # type: ignore[operator]
            return None
        try:
            payload = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None  # malformed JSON: the full report's validation says so
    if not is_delta(payload):
        return None
    assert isinstance(payload, dict)
    report_id = payload.get("report_id")
    return Refusal(
        index=0,
        report_id=str(report_id)[:64] if report_id is not None else None,
        errors=[f"encoding: {STREAM_REFUSAL}"],
    )


def base_body(session: Session, delta: ReportDelta) -> dict[str, Any]:
    """The stored body the delta names as its base; SendFull when the centre does not hold it."""
    host_id = session.scalars(select(Host.id).where(Host.hostname == delta.host.hostname)).first()
    if host_id is None:
        raise SendFull(f"no state is held for {delta.host.hostname}")
    body: dict[str, Any] | None = session.scalars(
        select(ReportRow.body).where(
            ReportRow.host_id == host_id,
            ReportRow.id == delta.base.report_id,
            ReportRow.captured_at == delta.base.captured_at,
        )
    ).first()
    if body is None:
        raise SendFull(
            f"the base report {delta.base.report_id} of {delta.base.captured_at.isoformat()} is not stored "
            "for this host (pruned, never stored, or another host's)"
        )
    return body


def resolve(session: Session, delta: ReportDelta) -> Report:
    """The full report a delta stands for; SendFull or MalformedDelta when it cannot be rebuilt exactly."""
    try:
        report = rebuild(delta, base_body(session, delta))
    except SendFull as refused:
        metrics.REPORTS.labels("send_full").inc()
        log.info(
            "remediator.delta.send_full",
            extra={
                "fields": {"host": delta.host.hostname, "report_id": str(delta.report_id), "reason": refused.reason}
            },
        )
        raise
    return report
