"""Delta reports (checker.wire) rebuilt into full reports from the base the centre holds.

The base is a stored report of the host (remediator.models.Report): stored rows are never rewritten,
so any of them the agent was told of (IngestResult.bases) can be merged onto, and the durable state
costs nothing beyond what ingest already keeps. A base that is not stored (pruned, never stored, the
database rebuilt), or whose sections do not digest as the delta says, is answered with "send full";
nothing is stored from such a delta.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from checker.wire import MalformedDelta, ReportDelta, SendFull, is_delta, rebuild
from core import metrics
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.payloads import nul_at
from remediator.schemas import Refusal

log = logging.getLogger(__name__)
SEND_FULL = "send full"  # how a refusal says the agent should send this report whole (its errors start with it)


def parse_delta(payload: object) -> ReportDelta | Refusal:
    """A delta's envelope validated, or refused naming the field (index 0; the caller sets it)."""
    if (where := nul_at(payload)) is not None:
        return Refusal(index=0, errors=[f"{where}: a NUL character (\\u0000), which the store cannot hold"])
    try:
        return ReportDelta.model_validate(payload)
    except ValidationError as error:
        report_id = payload.get("report_id") if isinstance(payload, dict) else None
        return Refusal(
            index=0,
            report_id=str(report_id) if report_id is not None else None,
            errors=[
                f"delta.{'.'.join(str(p) for p in item['loc']) or 'report'}: {item['msg']}"
                for item in error.errors()[:20]
            ],
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
            "(pruned, or never stored)"
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


def resolve_payload(session: Session, payload: object, *, signer: str | None = None) -> Report | Refusal | None:
    """A payload that is a delta (JSON object or text) as its full report, or refused; None if not a delta.
    A signed delta about another host than its signer is refused before any base is looked up."""
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
    delta = parse_delta(payload)
    if isinstance(delta, Refusal):
        return delta
    if signer is not None and delta.host.hostname != signer:
        problem = f"host {signer!r} may only report for itself, not for {delta.host.hostname!r}"
        return Refusal(index=0, report_id=str(delta.report_id), errors=[problem])
    try:
        return resolve(session, delta)
    except SendFull as refused:
        return Refusal(index=0, report_id=str(delta.report_id), errors=[f"{SEND_FULL}: {refused.reason}"])
    except MalformedDelta as malformed:
        return Refusal(index=0, report_id=str(delta.report_id), errors=malformed.errors)
