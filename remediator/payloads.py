"""Agents' payloads into reports: each validated on its own, or refused with the reasons.

A payload is a report as a JSON object or as JSON text; one that does not validate, holds a NUL
character (which PostgreSQL cannot store) or is stamped ahead of the service's clock is refused,
naming the field, and the rest of its batch goes on. Ingest (remediator.ingest) and the report
intake route use it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import orjson
from pydantic import ValidationError

from checker.schemas import Report
from core.db import utcnow
from remediator.schemas import Refusal

MAX_CLOCK_SKEW = dt.timedelta(minutes=5)


def from_the_future(report: Report, now: dt.datetime) -> str | None:
    """A report stamped ahead of the service's clock would make every real report after it look
    stale (reports no newer than the host's latest are not evaluated), so it is refused."""
    ahead = (report.captured_at - now).total_seconds()
    if ahead > MAX_CLOCK_SKEW.total_seconds():
        return f"captured_at: {int(ahead)} s ahead of the service's clock (is the host's clock right?)"
    return None


def parse_reports(payloads: Iterable[object], *, now: dt.datetime | None = None) -> tuple[list[Report], list[Refusal]]:
    """Validate each payload on its own: one malformed report does not sink the batch.

    A payload is a report as a JSON object, or as JSON text (what agents send:
    validating the text directly is cheaper than decoding it to a dict first).
    """
    reports: list[Report] = []
    refused: list[Refusal] = []
    now = now or utcnow()
    for index, payload in enumerate(payloads):
        parsed = parse_one(payload, now)
        if isinstance(parsed, Report):
            reports.append(parsed)
        else:
            refused.append(parsed.model_copy(update={"index": index}))
    return reports, refused


def nul_at(value: object, path: str = "") -> str | None:
    """Where a NUL character sits in a decoded report (its dotted path), or None. PostgreSQL's text and
    jsonb cannot hold one, so a report with one is refused whole, naming the field, on every store."""
    if isinstance(value, str):
        return path or "report" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return where
            if (found := nul_at(item, where)) is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if (found := nul_at(item, f"{path}.{index}" if path else str(index))) is not None:
                return found
    return None


def _nul_refusal(payload: object) -> Refusal | None:
    """A payload holding a NUL: JSON text is searched for its escape first (cheap), decoded only if found."""
    if isinstance(payload, str | bytes):
        marker = "\\u0000" if isinstance(payload, str) else b"\\u0000"
        if marker not in payload:  # type: ignore[operator]
            return None
        try:
            payload = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None  # malformed JSON: validation says so
    where = nul_at(payload)
    if where is None:
        return None
    report_id = payload.get("report_id") if isinstance(payload, dict) else None
    return Refusal(
        index=0,
        report_id=str(report_id) if report_id is not None else None,
        errors=[f"{where}: a NUL character (\\u0000), which the store cannot hold"],
    )


def parse_one(payload: object, now: dt.datetime) -> Report | Refusal:
    """One payload validated: the report, or why it is refused (index 0; the caller sets it)."""
    if (nul := _nul_refusal(payload)) is not None:
        return nul
    try:
        if isinstance(payload, str | bytes):
            report = Report.model_validate_json(payload)
        else:
            report = Report.model_validate(payload)
    except ValidationError as error:
        report_id = payload.get("report_id") if isinstance(payload, dict) else None
        return Refusal(
            index=0,
            report_id=str(report_id) if report_id is not None else None,
            errors=[
                f"{'.'.join(str(p) for p in item['loc']) or 'report'}: {item['msg']}" for item in error.errors()[:20]
            ],
        )
    problem = from_the_future(report, now)
    if problem is not None:
        return Refusal(index=0, report_id=str(report.report_id), errors=[problem])
    return report
