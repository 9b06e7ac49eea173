"""Rollouts: fleet-wide changes going through a hardware class in waves, their comparison, halt and resume.

A halt or resume takes the rollout's ETag in If-Match (its version), as a rule's changes do.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from api.auth import require
from api.deps import RowId, get_session
from api.versioning import check_if_match, set_etag
from core.auth import Principal
from core.db import utcnow
from core.errors import NotFound
from core.models import Role
from remediator import rollout_view, rollouts
from remediator.models import Rollout

router = APIRouter(prefix="/rollouts", tags=["rollouts"])
ETAG_KIND = "rollout"


class RolloutOut(BaseModel):
    id: int
    rule_id: str
    hardware_class: str
    change: str = Field(description="What goes out, e.g. 'kernel 2.6.23.17-amdpatch2' or 'bios 2.10.2'.")
    part_type: str = Field(description="Whose change it is: the halt's ticket has this part type.")
    state: Literal["running", "halted", "paused", "completed"]
    waves: list[str | int]
    current_wave: int = Field(description="0: the canary.")
    bake_s: float
    hosts_started: int
    hosts_in_class: int
    halt_reason: str
    halted_at: dt.datetime | None
    halted_by: str
    resumed_at: dt.datetime | None
    ticket_id: int | None = Field(description="The ticket the last halt opened for the change's owners.")
    created_at: dt.datetime
    updated_at: dt.datetime
    version: int = Field(description="Bumped by every change; the ETag is built from it.")


class WaveHost(BaseModel):
    hostname: str
    remediation_id: int
    state: Literal["started", "verifying", "baking", "succeeded", "failed"]
    started_at: dt.datetime
    finished_at: dt.datetime | None


class Wave(BaseModel):
    index: int
    size: str | int = Field(description="As the rule gives it: a count or a share of the class, cumulative.")
    hosts_covered: int
    hosts: list[WaveHost]
    counts: dict[str, int]


class RolloutDetail(RolloutOut):
    waves_detail: list[Wave]
    comparison: list[dict[str, Any]] = Field(
        description="Per compared signal: each side's hosts checked and showing it (or its median), host-hours, "
        "the old side's hosts excluded for a withdrawn release, the test, its p-value and support (significant or "
        "none), an expected gain or score (met, missing, not judged), whether it halts and why (docs/rules.md, "
        "Rollouts)."
    )
    compared_at: dt.datetime | None


class Reason(BaseModel):
    reason: str = Field(min_length=1, max_length=1000)


def _detail(session: Session, rollout: Rollout, response: Response) -> RolloutDetail:
    set_etag(response, ETAG_KIND, rollout.id, rollout.version)
    return RolloutDetail(**rollout_view.detail(session, rollout, utcnow()))


def _locked(session: Session, request: Request, rollout_id: int) -> Rollout:
    rollout = session.get(Rollout, rollout_id, with_for_update=True)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    check_if_match(request, ETAG_KIND, rollout_id, rollout.version)
    return rollout


@router.get("", response_model=list[RolloutOut])
def list_rollouts(
    state: Literal["running", "halted", "paused", "completed"] | None = Query(None),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> list[RolloutOut]:
    """Every rollout, newest first."""
    return [RolloutOut(**row) for row in rollout_view.listing(session, state)]


@router.get("/{rollout_id}", response_model=RolloutDetail)
def get_rollout(
    rollout_id: RowId,
    response: Response,
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> RolloutDetail:
    """One rollout: its waves with their hosts, and the last comparison of its health signals."""
    rollout = session.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    return _detail(session, rollout, response)


@router.post("/{rollout_id}/halt", response_model=RolloutDetail)
def halt_rollout(
    rollout_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RolloutDetail:
    """Stop starting hosts (the rollout is `paused`); 409 unless it is running."""
    _locked(session, request, rollout_id)
    rollout = rollouts.pause(session, rollout_id, actor=principal.actor, reason=body.reason, now=utcnow())
    session.commit()
    return _detail(session, rollout, response)


@router.post("/{rollout_id}/resume", response_model=RolloutDetail)
def resume_rollout(
    rollout_id: RowId,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RolloutDetail:
    """Let a halted or paused rollout go on (its comparisons look at nothing older); 409 otherwise."""
    _locked(session, request, rollout_id)
    rollout = rollouts.resume(session, rollout_id, actor=principal.actor, reason=body.reason, now=utcnow())
    session.commit()
    return _detail(session, rollout, response)
