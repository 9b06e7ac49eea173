"""Report submission over HTTP, for tools that do not speak Celery, and the stored reports.

A host's own credential may submit only reports whose `host.hostname` is its
own; operator tokens (tools, importers) may submit for any host.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from api.auth import Forbidden, require
from api.deps import get_ruleset, get_session
from api.pagination import CURSOR_QUERY, Page, paginate
from checker.schemas import Report
from checker.wire import MalformedDelta, ReportDelta, SendFull
from core.auth import Principal
from core.db import utcnow
from core.errors import Conflict, InvalidInput, NotFound, SendFullReport
from core.models import Role
from remediator import service as remediator
from remediator import wire
from remediator.ingest import ingest
from remediator.models import Report as StoredReport
from remediator.payloads import from_the_future, nul_at, parse_reports
from remediator.rules import RuleSet
from remediator.schemas import IngestResult, Refusal

log = logging.getLogger(__name__)
router = APIRouter(prefix="/reports", tags=["reports"])
submitter = require(Role.operator, hosts=True)


def _not_its_own(principal: Principal, hostname: str) -> str | None:
    if principal.is_host and principal.hostname != hostname:
        return f"{principal.name} may only submit its own reports, not {hostname}'s"
    return None


@router.post("", response_model=IngestResult)
def submit_report(
    report: Report,
    session: Session = Depends(get_session),
    principal: Principal = Depends(submitter),
    ruleset: RuleSet = Depends(get_ruleset),
) -> IngestResult:
    """One report; a malformed one is refused with a 422 naming the field, another host's with a 403."""
    refusal = _not_its_own(principal, report.host.hostname)
    if refusal is not None:
        raise Forbidden(refusal, detail={"credential": principal.hostname, "report": report.host.hostname})
    problem = from_the_future(report, utcnow())
    if problem is not None:
        raise InvalidInput(problem, detail=[{"field": "body.captured_at", "message": problem}])
    if (where := nul_at(report.model_dump(mode="json"))) is not None:
        message = f"body.{where}: a NUL character (\\u0000), which the store cannot hold"
        raise InvalidInput(message, detail=[{"field": f"body.{where}", "message": "a NUL character"}])
    result = ingest(session, [report], ruleset=ruleset)
    if result.refused:  # its id is another host's stored report
        raise Conflict(result.refused[0].errors[0], detail={"report_id": str(report.report_id)})
    session.commit()
    return result


@router.post("/delta", response_model=IngestResult)
def submit_delta(
    delta: ReportDelta,
    session: Session = Depends(get_session),
    principal: Principal = Depends(submitter),
    ruleset: RuleSet = Depends(get_ruleset),
) -> IngestResult:
    """One report as a delta against a stored report of its host (docs/report-schema.md, "Delta reports").

    Rebuilt into the full report and ingested as one. A 409 `send_full` answers a delta the centre cannot
    rebuild exactly (its base is not stored, a digest differs): nothing is stored, and the agent sends
    the report in full. A patch that does not fit its base, or a changed or patched section that does
    not validate, is a 422 naming `patched.<section>.<path>` or `changed.<section>.<field>`."""
    refusal = _not_its_own(principal, delta.host.hostname)
    if refusal is not None:
        raise Forbidden(refusal, detail={"credential": principal.hostname, "report": delta.host.hostname})
    try:
        report = wire.resolve(session, delta)
    except SendFull as refused:
        raise SendFullReport(refused.reason, detail={"report_id": str(delta.report_id)}) from None
    except MalformedDelta as malformed:
        message = "; ".join(malformed.errors[:5])
        raise InvalidInput(
            message, detail=[{"field": e.split(":")[0], "message": e} for e in malformed.errors]
        ) from None
    return submit_report(report, session=session, principal=principal, ruleset=ruleset)


@router.post("/batch", response_model=IngestResult)
def submit_batch(
    payloads: list[dict[str, Any]] = Body(..., max_length=5000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(submitter),
    ruleset: RuleSet = Depends(get_ruleset),
) -> IngestResult:
    """Many reports; each malformed one, or one of another host, is listed in `refused`; the rest are stored."""
    parsed, refused = parse_reports(payloads)
    refused_at = {r.index for r in refused}
    kept: list[tuple[int, Report]] = []
    for report, index in zip(parsed, indexes_of(payloads, refused_at), strict=True):
        refusal = _not_its_own(principal, report.host.hostname)
        if refusal is None:
            kept.append((index, report))
        else:
            refused.append(Refusal(index=index, report_id=str(report.report_id), errors=[f"host.hostname: {refusal}"]))
    result, failed = ingest_each_alone(session, kept, ruleset)
    session.commit()
    at_index = {report.report_id: index for index, report in kept}
    clashes = [r.model_copy(update={"index": at_index.get(uuid.UUID(r.report_id), -1)}) for r in result.refused]
    result.refused = sorted([*refused, *failed, *clashes], key=lambda r: r.index)
    return result


def indexes_of(payloads: list[dict[str, Any]], refused_at: set[int]) -> list[int]:
    return [i for i in range(len(payloads)) if i not in refused_at]


def ingest_each_alone(
    session: Session, items: list[tuple[int, Report]], ruleset: RuleSet
) -> tuple[IngestResult, list[Refusal]]:
    """Store the batch in one savepoint; if anything but the database being down goes wrong, each report
    again in its own, so one that trips a bug or a value the database cannot store (a NUL in a string
    on PostgreSQL) fails alone and is listed, and the others are stored (as the broker path does)."""
    try:
        with session.begin_nested():
            return ingest(session, [r for _, r in items], ruleset=ruleset), []
    except OperationalError:
        raise
    except Exception:
        log.warning("api.reports.batch_isolated", extra={"fields": {"reports": len(items)}}, exc_info=True)
        # Rows loaded in the savepoint stay in the session unexpired; SQLite may hand their ids to new rows.
        session.expire_all()
    result, failed = IngestResult(), []
    for index, report in items:
        try:
            with session.begin_nested():
                one = ingest(session, [report], ruleset=ruleset)
        except OperationalError:
            raise
        except Exception as error:
            session.expire_all()
            log.exception("api.reports.report_failed", extra={"fields": {"report_id": str(report.report_id)}})
            reason = (str(error).strip().splitlines() or [""])[0][:300]
            failed.append(
                Refusal(
                    index=index,
                    report_id=str(report.report_id),
                    errors=[f"not stored: {type(error).__name__}: {reason}"],
                )
            )
            continue
        result.accepted += one.accepted
        result.duplicates += one.duplicates
        result.remediations += one.remediations
        result.refused += one.refused
        result.bases += one.bases
    return result, failed


class StoredReportOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    host_id: int
    captured_at: dt.datetime
    last_captured_at: dt.datetime
    repeats: int
    received_at: dt.datetime
    schema_version: int


class StoredReportDetail(StoredReportOut):
    body: dict[str, Any]


@router.get("", response_model=Page[StoredReportOut])
def list_reports(
    hostname: str | None = None,
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> Page[StoredReportOut]:
    """Stored reports, newest capture first: one row per distinct observation state of a host."""
    query = select(StoredReport)
    if hostname is not None:
        query = query.where(StoredReport.host_id == remediator.get_host(session, hostname).id)
    return paginate(
        session,
        query,
        (StoredReport.captured_at, StoredReport.id),
        cursor=cursor,
        limit=limit,
        convert=StoredReportOut.model_validate,
    )


@router.get("/{report_id}", response_model=StoredReportDetail)
def get_report(
    report_id: uuid.UUID, session: Session = Depends(get_session), _: Principal = Depends(require(Role.viewer))
) -> StoredReportDetail:
    """One stored report with its body as the host sent it."""
    stored = session.scalars(select(StoredReport).where(StoredReport.id == report_id)).first()
    if stored is None:
        raise NotFound(f"report {report_id} is not stored (a repeat of an earlier state is kept in that row)")
    return StoredReportDetail.model_validate(stored)
