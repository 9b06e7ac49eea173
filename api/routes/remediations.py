"""Remediations and their steps; the decision log.

Changes (approve, cancel, abort) take the remediation's ETag in If-Match, so
an operator acting on what they saw a minute ago learns that it moved on.
Cancel and abort are one operation under two names (remediator.stopping).
"""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from api.auth import require
from api.deps import RowId, get_ruleset, get_session
from api.pagination import CURSOR_QUERY, Page, paginate
from api.versioning import check_if_match, set_etag
from core.auth import Principal
from core.db import utcnow
from core.errors import NotFound
from core.models import Role
from remediator import operations, stopping
from remediator import service as remediator
from remediator.models import Decision, Remediation, RemediationState
from remediator.schemas import RemediationOut

router = APIRouter(prefix="/remediations", tags=["remediations"])
ETAG_KIND = "remediation"


class RemediationView(RemediationOut):
    version: int = Field(description="Bumped by every change; the ETag is built from it.")


class Reason(BaseModel):
    reason: str = Field(min_length=1, max_length=1000, description="Why: kept in the audit log.")


class DecisionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: dt.datetime
    host_id: int
    rule_id: str
    outcome: str
    reason: str
    remediation_id: int | None
    subject: str
    value: float | None


def _view(response: Response, remediation: Remediation) -> RemediationView:
    view = RemediationView.model_validate(remediation)
    set_etag(response, ETAG_KIND, view.id, view.version)
    return view


def locked_for_change(session: Session, request: Request, remediation_id: int) -> Remediation:
    """The remediation, row-locked, if the client's If-Match names its current version."""
    remediation = session.get(Remediation, remediation_id, with_for_update=True)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    check_if_match(request, ETAG_KIND, remediation_id, remediation.version)
    return remediation


@router.get("", response_model=Page[RemediationView])
def list_remediations(
    state: RemediationState | None = None,
    rule_id: str | None = None,
    hostname: str | None = None,
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> Page[RemediationView]:
    """Remediations, newest first, with their steps."""
    query = select(Remediation).options(selectinload(Remediation.steps))
    if state is not None:
        query = query.where(Remediation.state == state)
    if rule_id is not None:
        query = query.where(Remediation.rule_id == rule_id)
    if hostname is not None:
        query = query.where(Remediation.host_id == remediator.get_host(session, hostname).id)
    return paginate(session, query, Remediation.id, cursor=cursor, limit=limit, convert=RemediationView.model_validate)


@router.get("/{remediation_id}", response_model=RemediationView)
def get_remediation(
    remediation_id: RowId,
    response: Response,
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> RemediationView:
    """One remediation; its ETag is what approve, cancel and abort take in If-Match."""
    remediation = session.get(Remediation, remediation_id)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    return _view(response, remediation)


@router.post("/{remediation_id}/approve", response_model=RemediationView)
def approve(
    remediation_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RemediationView:
    """Approve one awaiting approval (it then passes the other gates); 409 if it is not waiting."""
    locked_for_change(session, request, remediation_id)
    remediation = operations.approve(
        session, get_ruleset(request), remediation_id, actor=principal.actor, reason=body.reason
    )
    session.commit()
    return _view(response, remediation)


@router.post("/{remediation_id}/cancel", response_model=RemediationView)
def cancel(
    remediation_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RemediationView:
    """Stop an active remediation (the same as abort); 409 if it has finished."""
    return _stop(remediation_id, body, request, response, session, principal)


@router.post("/{remediation_id}/pause", response_model=RemediationView)
def pause(
    remediation_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RemediationView:
    """Hold one remediation between steps (and out of admission) until it is resumed; a step already on
    its host finishes there. 409 if it has finished or is paused already."""
    locked_for_change(session, request, remediation_id)
    remediation = operations.pause(session, remediation_id, actor=principal.actor, reason=body.reason)
    session.commit()
    return _view(response, remediation)


@router.post("/{remediation_id}/resume", response_model=RemediationView)
def resume(
    remediation_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RemediationView:
    """Let a paused remediation go on from where it stopped. 409 if it is not paused."""
    locked_for_change(session, request, remediation_id)
    remediation = operations.resume(
        session, remediation_id, actor=principal.actor, reason=body.reason, ruleset=get_ruleset(request)
    )
    session.commit()
    return _view(response, remediation)


@router.post("/{remediation_id}/abort", response_model=RemediationView)
def abort(
    remediation_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RemediationView:
    """Stop a plan between steps: nothing more starts; an action already on its host finishes there (its
    report is kept) and one not yet started is revoked. The same as cancel; 409 if it has finished."""
    return _stop(remediation_id, body, request, response, session, principal)


def _stop(
    remediation_id: int, body: Reason, request: Request, response: Response, session: Session, principal: Principal
) -> RemediationView:
    locked_for_change(session, request, remediation_id)
    stopped = stopping.stop(session, remediation_id, actor=principal.actor, reason=body.reason, now=utcnow())
    session.commit()
    stopping.revoke(request.app.state.celery, stopped)
    return _view(response, stopped.remediation)


decisions_router = APIRouter(prefix="/decisions", tags=["remediations"])


@decisions_router.get("", response_model=Page[DecisionOut])
def list_decisions(
    hostname: str | None = None,
    rule_id: str | None = None,
    outcome: str | None = None,
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(200, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> Page[DecisionOut]:
    """The decision log, newest first: planned, admitted, held, skipped, shadow, escalated, each with its reason."""
    query = select(Decision)
    if hostname is not None:
        query = query.where(Decision.host_id == remediator.get_host(session, hostname).id)
    if rule_id is not None:
        query = query.where(Decision.rule_id == rule_id)
    if outcome is not None:
        query = query.where(Decision.outcome == outcome)
    return paginate(session, query, Decision.id, cursor=cursor, limit=limit, convert=DecisionOut.model_validate)
