"""Rules: what is active, operator overrides, breakers, and how well repairs work."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from api.deps import get_session
from remediator import operations
from remediator.models import RuleMode
from remediator.rules import get_registry

router = APIRouter(prefix="/rules", tags=["rules"])


class RuleOut(BaseModel):
    id: str
    description: str
    priority: int
    when: dict[str, Any]
    plan: list[str]
    escalation: list[list[str]]
    pack_mode: str
    mode: str = Field(description="Effective mode: the operator's override, else the pack's.")
    breaker_open: bool
    breaker_reason: str
    breaker_opened_at: dt.datetime | None


class ModeChange(BaseModel):
    mode: Literal["active", "shadow", "paused", "pack"] = Field(description="'pack' removes the override.")
    reason: str = Field(min_length=1, max_length=1000)


class Reason(BaseModel):
    reason: str = Field(min_length=1, max_length=1000)


class Effectiveness(BaseModel):
    rule: str
    plan: str
    total: int
    succeeded: int
    failed: int
    escalated: int
    cancelled: int
    returned_within_30d: int
    success_rate: float | None
    return_rate: float | None


@router.get("", response_model=list[RuleOut])
def list_rules(session: Session = Depends(get_session)) -> list[RuleOut]:
    return [RuleOut(**r) for r in operations.rules_with_state(session, get_registry().ruleset)]


@router.get("/effectiveness", response_model=list[Effectiveness])
def effectiveness(session: Session = Depends(get_session)) -> list[Effectiveness]:
    return [Effectiveness(**row) for row in operations.effectiveness(session)]


@router.post("/{rule_id}/mode", response_model=RuleOut)
def change_mode(rule_id: str, change: ModeChange, session: Session = Depends(get_session)) -> RuleOut:
    ruleset = get_registry().ruleset
    mode = None if change.mode == "pack" else RuleMode(change.mode)
    operations.set_rule_mode(session, ruleset, rule_id, mode, actor="api", reason=change.reason)
    session.commit()
    return next(RuleOut(**r) for r in operations.rules_with_state(session, ruleset) if r["id"] == rule_id)


@router.post("/{rule_id}/breaker/reset", response_model=RuleOut)
def reset_breaker(rule_id: str, body: Reason, session: Session = Depends(get_session)) -> RuleOut:
    ruleset = get_registry().ruleset
    operations.reset_breaker(session, ruleset, rule_id, actor="api", reason=body.reason)
    session.commit()
    return next(RuleOut(**r) for r in operations.rules_with_state(session, ruleset) if r["id"] == rule_id)
