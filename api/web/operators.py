"""Operators' pages: approvals, rules (mode, breaker reset, the fleet-wide pause) and the audit log.

Changes go through remediator.operations, as the API's do, and carry the
object's version from the page they were made on.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Form, Query, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import RowId, get_ruleset, get_session
from api.pagination import paginate
from api.web import queries
from api.web.common import PageRoute, check_version, flash, page_user, redirect, render
from core.auth import Principal
from core.db import utcnow
from core.errors import NotFound
from core.models import AuditEntry, Role
from remediator import operations, stopping
from remediator.models import Remediation, RemediationState, RuleMode, RuleState

router = APIRouter(route_class=PageRoute, include_in_schema=False)
OPERATOR = page_user(Role.operator)
REASON = Form(..., min_length=1, max_length=1000, description="Why: kept in the audit log.")


# -- approvals --------------------------------------------------------------------------


@router.get("/approvals")
def approvals(request: Request, session: Session = Depends(get_session), _: Principal = Depends(OPERATOR)) -> Response:
    waiting = queries.remediations_in(session, {RemediationState.awaiting_approval})
    return render(
        request,
        "approvals.html",
        {"waiting": waiting, "hostnames": queries.hostnames(session, {r.host_id for r in waiting})},
    )


def locked_remediation(session: Session, remediation_id: int, version: int | None) -> Remediation:
    remediation = session.get(Remediation, remediation_id, with_for_update=True)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    check_version("remediation", remediation_id, remediation.version, version, what=remediation.state.value)
    return remediation


@router.post("/approvals/{remediation_id}/{decision}")
def decide(
    remediation_id: RowId,
    decision: Literal["approve", "cancel"],
    request: Request,
    version: int | None = Form(None),
    reason: str = REASON,
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    locked_remediation(session, remediation_id, version)
    if decision == "approve":
        operations.approve(session, get_ruleset(request), remediation_id, actor=principal.actor, reason=reason)
        session.commit()
    else:  # the API's cancel and abort: remediator.stopping
        stopped = stopping.stop(session, remediation_id, actor=principal.actor, reason=reason, now=utcnow())
        session.commit()
        stopping.revoke(request.app.state.celery, stopped)
    flash(request, f"Remediation {remediation_id} {'approved' if decision == 'approve' else 'cancelled'}.")
    return redirect(request, "/approvals")


# -- rules ------------------------------------------------------------------------------


@router.get("/rules")
def rules(request: Request, session: Session = Depends(get_session), _: Principal = Depends(OPERATOR)) -> Response:
    versions = {s.rule_id: s.version for s in session.scalars(select(RuleState))}
    listed = operations.rules_with_state(session, get_ruleset(request))
    return render(
        request,
        "rules.html",
        {"rules": listed, "versions": versions, "pause": operations.global_pause(session)},
    )


def _lock_rule(session: Session, request: Request, rule_id: str, version: int | None) -> None:
    if get_ruleset(request).get(rule_id) is None:
        raise NotFound(f"rule {rule_id!r} is not in the active rule packs")
    state = session.get(RuleState, rule_id, with_for_update=True)
    check_version("rule", rule_id, state.version if state is not None else 0, version)


@router.post("/rules/{rule_id}/mode")
def change_mode(
    rule_id: str,
    request: Request,
    mode: Literal["active", "shadow", "paused", "pack"] = Form(...),
    version: int | None = Form(None),
    reason: str = REASON,
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    _lock_rule(session, request, rule_id, version)
    new_mode = None if mode == "pack" else RuleMode(mode)
    operations.set_rule_mode(session, get_ruleset(request), rule_id, new_mode, actor=principal.actor, reason=reason)
    session.commit()
    flash(request, f"Rule {rule_id}: {'as its pack says' if new_mode is None else mode}.")
    return redirect(request, "/rules")


@router.post("/rules/{rule_id}/breaker-reset")
def reset_breaker(
    rule_id: str,
    request: Request,
    version: int | None = Form(None),
    reason: str = REASON,
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    _lock_rule(session, request, rule_id, version)
    operations.reset_breaker(session, get_ruleset(request), rule_id, actor=principal.actor, reason=reason)
    session.commit()
    flash(request, f"Rule {rule_id}: breaker closed.")
    return redirect(request, "/rules")


@router.post("/controls/pause")
def set_pause(
    request: Request,
    paused: bool = Form(...),
    reason: str = REASON,
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    operations.set_global_pause(session, paused, actor=principal.actor, reason=reason)
    session.commit()
    flash(request, "All remediation is paused." if paused else "Remediation resumed.")
    return redirect(request, "/rules")


# -- audit log --------------------------------------------------------------------------


@router.get("/audit")
def audit_log(
    request: Request,
    actor: str = Query("", max_length=128),
    action: str = Query("", max_length=64),
    object_type: str = Query("", max_length=64),
    object_id: str = Query("", max_length=64),
    cursor: str | None = Query(None, max_length=500),
    session: Session = Depends(get_session),
    _: Principal = Depends(OPERATOR),
) -> Response:
    """Changes of state, newest first; an action ending in '.' is a prefix (remediator.rule.)."""
    query = select(AuditEntry)
    if actor:
        query = query.where(AuditEntry.actor == actor)
    if action:
        if action.endswith("."):
            query = query.where(AuditEntry.action.startswith(action, autoescape=True))
        else:
            query = query.where(AuditEntry.action == action)
    if object_type:
        query = query.where(AuditEntry.object_type == object_type)
    if object_id:
        query = query.where(AuditEntry.object_id == object_id)
    page = paginate(session, query, AuditEntry.id, cursor=cursor, limit=100, convert=lambda e: e)
    return render(
        request,
        "audit.html",
        {
            "entries": page.items,
            "next_cursor": page.next_cursor,
            "filters": {"actor": actor, "action": action, "object_type": object_type, "object_id": object_id},
        },
    )
