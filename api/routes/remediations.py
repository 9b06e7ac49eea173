"""Remediations and their steps."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from api.deps import get_session
from remediator import operations
from remediator import service as remediator
from remediator.rules import get_registry
from remediator.schemas import RemediationOut

router = APIRouter(prefix="/remediations", tags=["remediations"])


@router.get("", response_model=list[RemediationOut])
def list_remediations(
    limit: int = Query(100, ge=1, le=1000), session: Session = Depends(get_session)
) -> list[RemediationOut]:
    return [RemediationOut.model_validate(r) for r in remediator.list_remediations(session, limit=limit)]


class Reason(BaseModel):
    reason: str = Field(min_length=1, max_length=1000)


class DecisionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    at: dt.datetime
    host_id: int
    rule_id: str
    outcome: str
    reason: str
    remediation_id: int | None
    subject: str
    value: float | None


@router.post("/{remediation_id}/approve", response_model=RemediationOut)
def approve(remediation_id: int, session: Session = Depends(get_session)) -> RemediationOut:
    remediation = operations.approve(session, get_registry().ruleset, remediation_id, actor="api")
    session.commit()
    return RemediationOut.model_validate(remediation)


@router.post("/{remediation_id}/cancel", response_model=RemediationOut)
def cancel(remediation_id: int, body: Reason, session: Session = Depends(get_session)) -> RemediationOut:
    remediation = operations.cancel(session, remediation_id, actor="api", reason=body.reason)
    session.commit()
    return RemediationOut.model_validate(remediation)


decisions_router = APIRouter(prefix="/decisions", tags=["remediations"])


@decisions_router.get("", response_model=list[DecisionOut])
def list_decisions(
    hostname: str | None = None,
    rule_id: str | None = None,
    limit: int = Query(200, ge=1, le=1000),
    session: Session = Depends(get_session),
) -> list[DecisionOut]:
    host_id = remediator.get_host(session, hostname).id if hostname else None
    found = operations.decisions(session, host_id=host_id, rule_id=rule_id, limit=limit)
    return [DecisionOut.model_validate(d) for d in found]
