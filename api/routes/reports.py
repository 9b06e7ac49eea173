"""Report submission over HTTP, for tools that do not speak Celery."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends
from sqlalchemy.orm import Session

from api.deps import get_session
from checker.schemas import Report
from core.db import utcnow
from core.errors import InvalidInput
from remediator.ingest import from_the_future, ingest, parse_reports
from remediator.rules import get_registry
from remediator.schemas import IngestResult

router = APIRouter(prefix="/reports", tags=["reports"])


@router.post("", response_model=IngestResult)
def submit_report(report: Report, session: Session = Depends(get_session)) -> IngestResult:
    """One report; a malformed one is refused with a 422 naming the field."""
    problem = from_the_future(report, utcnow())
    if problem is not None:
        raise InvalidInput(problem, detail=[{"field": "body.captured_at", "message": problem}])
    result = ingest(session, [report], ruleset=get_registry().ruleset)
    session.commit()
    return result


@router.post("/batch", response_model=IngestResult)
def submit_batch(
    payloads: list[dict[str, Any]] = Body(..., max_length=5000), session: Session = Depends(get_session)
) -> IngestResult:
    """Many reports; each malformed one is listed in `refused`, the rest are stored."""
    reports, refused = parse_reports(payloads)
    result = ingest(session, reports, ruleset=get_registry().ruleset)
    session.commit()
    result.refused = refused
    return result
