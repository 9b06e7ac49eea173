"""Remediations and their steps."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from api.deps import get_session
from remediator import service as remediator
from remediator.schemas import RemediationOut

router = APIRouter(prefix="/remediations", tags=["remediations"])


@router.get("", response_model=list[RemediationOut])
def list_remediations(
    limit: int = Query(100, ge=1, le=1000), session: Session = Depends(get_session)
) -> list[RemediationOut]:
    return [RemediationOut.model_validate(r) for r in remediator.list_remediations(session, limit=limit)]
