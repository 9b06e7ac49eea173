"""Operators acting on remediations outside the approvals page: pause, resume or abort one from its
host's page, approve or cancel several at once, and the decision log per host and per rule.

Each change is the API's own call (api/routes/remediations.py): operations.pause / resume,
stopping.stop then revoke after the commit (the API's abort and cancel), operations.approve; each
carries the remediation's version from the page it was made on, as every form does.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Form, Query, Request, Response
from sqlalchemy.orm import Session

from api.deps import RowId, get_ruleset, get_session
from api.web import queries
from api.web.common import PageRoute, flash, local_path, page_user, redirect, render
from api.web.operators import REASON, locked_remediation
from core.auth import Principal
from core.db import utcnow
from core.errors import FleetfixError, InvalidInput
from core.models import Role
from remediator import operations, stopping
from remediator import service as remediator

router = APIRouter(route_class=PageRoute, include_in_schema=False)
OPERATOR = page_user(Role.operator)
BULK_LIMIT = 100
DECISIONS_PAGE = 200  # decisions a page of the log shows; "Older decisions" pages on by id
"""Remediations one bulk form may carry: a page of approvals, not the whole backlog by accident."""
PAST = {"pause": "paused", "resume": "resumed", "abort": "aborted", "approve": "approved", "cancel": "cancelled"}


def _act(request: Request, session: Session, remediation_id: int, action: str, actor: str, reason: str) -> None:
    """One change, committed; a stop's revocation is sent only after its commit (as the API does)."""
    if action == "pause":
        operations.pause(session, remediation_id, actor=actor, reason=reason)
    elif action == "resume":
        operations.resume(session, remediation_id, actor=actor, reason=reason, ruleset=get_ruleset(request))
    elif action == "approve":
        operations.approve(session, get_ruleset(request), remediation_id, actor=actor, reason=reason)
    else:  # abort, cancel: the API's _stop
        stopped = stopping.stop(session, remediation_id, actor=actor, reason=reason, now=utcnow())
        session.commit()
        stopping.revoke(request.app.state.celery, stopped)
        return
    session.commit()


@router.post("/remediations/{remediation_id}/{action}")
def change(
    remediation_id: RowId,
    action: Literal["pause", "resume", "abort"],
    request: Request,
    version: int | None = Form(None),
    reason: str = REASON,
    back: str = Form("", max_length=2000),
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    """Pause (no step starts until resumed), resume, or abort (nothing more starts) one remediation."""
    locked_remediation(session, remediation_id, version)
    _act(request, session, remediation_id, action, principal.actor, reason)
    flash(request, f"Remediation {remediation_id} {PAST[action]}.")
    return redirect(request, local_path(back, "/approvals") + f"#remediation-{remediation_id}")


@router.post("/approvals/bulk")
def bulk(
    request: Request,
    action: Literal["approve", "cancel"] = Form(...),
    ids: list[str] = Form([], description="id:version of each remediation ticked"),
    reason: str = REASON,
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    """Approve or cancel every ticked remediation, one by one, each against the version it was shown
    at: one that changed meanwhile or cannot be approved is left alone and named, the others go ahead."""
    picked = [_id_version(value) for value in ids[:BULK_LIMIT]]
    if not picked:
        flash(request, "Tick at least one remediation.", "error")
        return redirect(request, "/approvals")
    done: list[int] = []
    refused: list[str] = []
    for remediation_id, version in picked:
        try:
            locked_remediation(session, remediation_id, version)
            _act(request, session, remediation_id, action, principal.actor, reason)
            done.append(remediation_id)
        except FleetfixError as error:
            session.rollback()
            refused.append(f"{remediation_id}: {error.message}")
    if done:
        flash(request, f"{PAST[action].capitalize()}: {', '.join(str(i) for i in sorted(done))}.")
    if refused:
        flash(request, "Left alone: " + " · ".join(refused), "error")
    return redirect(request, "/approvals")


def _id_version(value: str) -> tuple[int, int | None]:
    """'12:3' → (12, 3); a value without a version is refused by the version check, as any form's."""
    head, _, tail = value.partition(":")
    if not head.isdigit():
        raise InvalidInput(f"ids: {value[:40]!r} is not a remediation id")
    return int(head), int(tail) if tail.isdigit() else None


@router.get("/decisions")
def decision_log(
    request: Request,
    hostname: str = Query("", max_length=253),
    rule: str = Query("", max_length=128),
    before: int | None = Query(None, ge=1, description="Page on: the decisions older than this id."),
    session: Session = Depends(get_session),
    _: Principal = Depends(page_user(Role.viewer)),
) -> Response:
    """What the remediator decided and why, newest first, for one host, one rule, or both (the API's
    GET /api/v1/decisions), DECISIONS_PAGE at a time."""
    host = remediator.get_host(session, hostname) if hostname else None
    host_id, rule_id = host.id if host else None, rule or None
    found = operations.decisions(session, host_id=host_id, rule_id=rule_id, limit=DECISIONS_PAGE, before_id=before)
    older = bool(found) and bool(
        operations.decisions(session, host_id=host_id, rule_id=rule_id, limit=1, before_id=found[-1].id)
    )
    return render(
        request,
        "decisions.html",
        {
            "decisions": found,
            "hostnames": queries.hostnames(session, {d.host_id for d in found}),
            "hostname": hostname,
            "rule": rule,
            "before": before,
            "older": found[-1].id if older else None,
        },
    )
