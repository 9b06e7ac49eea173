"""Fleet-wide switches: the global pause of all remediation."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from api.auth import require
from api.deps import get_session
from core.auth import Principal
from core.models import Role
from remediator import operations

router = APIRouter(prefix="/controls", tags=["controls"])


class PauseOut(BaseModel):
    paused: bool
    reason: str = ""
    updated_by: str = ""
    updated_at: dt.datetime | None = None


class PauseChange(BaseModel):
    paused: bool
    reason: str = Field(min_length=1, max_length=1000)


@router.get("/pause", response_model=PauseOut)
def get_pause(session: Session = Depends(get_session), _: Principal = Depends(require(Role.viewer))) -> PauseOut:
    return PauseOut(**operations.global_pause(session))


@router.put("/pause", response_model=PauseOut)
def set_pause(
    change: PauseChange, session: Session = Depends(get_session), principal: Principal = Depends(require(Role.operator))
) -> PauseOut:
    """Pause (or resume) all remediation in the fleet; nothing new starts while paused."""
    result = operations.set_global_pause(session, change.paused, actor=principal.actor, reason=change.reason)
    session.commit()
    return PauseOut(**result)
