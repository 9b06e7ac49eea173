"""The audit log: who changed what, when and why."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import AwareDatetime, BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import require
from api.deps import get_session
from api.pagination import CURSOR_QUERY, Page, paginate
from core.auth import Principal
from core.models import AuditEntry, Role

router = APIRouter(prefix="/audit", tags=["audit"])


class AuditOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: dt.datetime
    actor: str
    action: str
    object_type: str
    object_id: str
    reason: str
    detail: dict[str, Any]


@router.get("", response_model=Page[AuditOut])
def list_audit(
    actor: str | None = Query(None, description="user:<name>, token:<name>, host:<name>, system:<component> …"),
    action: str | None = Query(
        None, description="An action (ticketing.ticket.claimed), or a prefix ending in '.' (remediator.rule.)."
    ),
    object_type: str | None = None,
    object_id: str | None = None,
    since: AwareDatetime | None = Query(None, description="Only entries at or after this time (with a zone)."),
    cursor: str | None = CURSOR_QUERY,
    limit: int = Query(100, ge=1, le=1000),
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
) -> Page[AuditOut]:
    """Changes of state, newest first."""
    query = select(AuditEntry)
    if actor is not None:
        query = query.where(AuditEntry.actor == actor)
    if action is not None:
        if action.endswith("."):
            query = query.where(AuditEntry.action.startswith(action, autoescape=True))
        else:
            query = query.where(AuditEntry.action == action)
    if object_type is not None:
        query = query.where(AuditEntry.object_type == object_type)
    if object_id is not None:
        query = query.where(AuditEntry.object_id == object_id)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    return paginate(session, query, AuditEntry.id, cursor=cursor, limit=limit, convert=AuditOut.model_validate)
