"""Rollout pages: every rollout, and one rollout's waves (hosts started, verifying, baking, succeeded and
failed per wave), the comparison of its health signals, its halt and its ticket; operators halt and
resume from it (remediator.rollouts, as the API does), with the version of the page they acted on."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Form, Request, Response
from sqlalchemy.orm import Session

from api.deps import RowId, get_session
from api.web.common import PageRoute, check_version, flash, page_user, redirect, render
from core.auth import Principal
from core.db import utcnow
from core.errors import NotFound
from core.models import Role
from remediator import rollout_view, rollouts
from remediator.models import Rollout

router = APIRouter(route_class=PageRoute, include_in_schema=False)
VIEWER = page_user(Role.viewer)
OPERATOR = page_user(Role.operator)


@router.get("/rollouts")
def rollout_list(request: Request, session: Session = Depends(get_session), _: Principal = Depends(VIEWER)) -> Response:
    return render(request, "rollouts.html", {"rollouts": rollout_view.listing(session)})


@router.get("/rollouts/{rollout_id}")
def rollout_page(
    rollout_id: RowId, request: Request, session: Session = Depends(get_session), _: Principal = Depends(VIEWER)
) -> Response:
    rollout = session.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    return render(request, "rollout.html", {"r": rollout_view.detail(session, rollout, utcnow())})


@router.post("/rollouts/{rollout_id}/{change}")
def change_rollout(
    rollout_id: RowId,
    change: Literal["halt", "resume"],
    request: Request,
    version: int | None = Form(None),
    reason: str = Form(..., min_length=1, max_length=1000, description="Why: kept in the audit log."),
    session: Session = Depends(get_session),
    principal: Principal = Depends(OPERATOR),
) -> Response:
    rollout = session.get(Rollout, rollout_id, with_for_update=True)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    check_version("rollout", rollout_id, rollout.version, version, what=rollout.state.value)
    act = rollouts.pause if change == "halt" else rollouts.resume
    act(session, rollout_id, actor=principal.actor, reason=reason, now=utcnow())
    session.commit()
    flash(request, f"Rollout {rollout_id} {'halted' if change == 'halt' else 'resumed'}.")
    return redirect(request, f"/rollouts/{rollout_id}")
