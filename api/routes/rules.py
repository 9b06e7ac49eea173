"""Rules: what is active, operator overrides, breakers, and how well repairs work.

A rule's changes (mode, breaker reset) take its ETag in If-Match; the version
is that of its runtime state row (0 while it has none).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import require
from api.deps import get_ruleset, get_session
from api.versioning import check_if_match, set_etag
from core.auth import Principal
from core.errors import NotFound
from core.models import Role
from remediator import operations
from remediator.models import RuleMode, RuleState
from remediator.rules import RuleSet

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
    version: int = Field(description="Version of the rule's runtime state; the ETag is built from it.")


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


ETAG_KIND = "rule"


def _rule(session: Session, ruleset: RuleSet, rule_id: str, response: Response | None = None) -> RuleOut:
    for row in operations.rules_with_state(session, ruleset):
        if row["id"] == rule_id:
            state = session.get(RuleState, rule_id)
            rule = RuleOut(**row, version=state.version if state is not None else 0)
            if response is not None:
                set_etag(response, ETAG_KIND, rule_id, rule.version)
            return rule
    raise NotFound(f"rule {rule_id!r} is not in the active rule packs")


def _locked_for_change(session: Session, request: Request, rule_id: str) -> None:
    if get_ruleset(request).get(rule_id) is None:
        raise NotFound(f"rule {rule_id!r} is not in the active rule packs")
    state = session.get(RuleState, rule_id, with_for_update=True)
    check_if_match(request, ETAG_KIND, rule_id, state.version if state is not None else 0)


@router.get("", response_model=list[RuleOut])
def list_rules(
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
    ruleset: RuleSet = Depends(get_ruleset),
) -> list[RuleOut]:
    """Active rules with their effective mode and breaker state."""
    versions = {s.rule_id: s.version for s in session.scalars(select(RuleState))}
    return [RuleOut(**r, version=versions.get(r["id"], 0)) for r in operations.rules_with_state(session, ruleset)]


@router.get("/effectiveness", response_model=list[Effectiveness])
def effectiveness(
    session: Session = Depends(get_session), _: Principal = Depends(require(Role.viewer))
) -> list[Effectiveness]:
    """Per rule and plan: how often it succeeded, and how often the fault came back within 30 days."""
    return [Effectiveness(**row) for row in operations.effectiveness(session)]


@router.get("/{rule_id}", response_model=RuleOut)
def get_rule(
    rule_id: str,
    response: Response,
    session: Session = Depends(get_session),
    _: Principal = Depends(require(Role.viewer)),
    ruleset: RuleSet = Depends(get_ruleset),
) -> RuleOut:
    """One rule; its ETag is what mode changes and breaker resets take in If-Match."""
    return _rule(session, ruleset, rule_id, response)


@router.post("/{rule_id}/mode", response_model=RuleOut)
def change_mode(
    rule_id: str,
    change: ModeChange,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RuleOut:
    """Pause, shadow or resume a rule, or hand it back to its pack's mode."""
    _locked_for_change(session, request, rule_id)
    mode = None if change.mode == "pack" else RuleMode(change.mode)
    operations.set_rule_mode(session, get_ruleset(request), rule_id, mode, actor=principal.actor, reason=change.reason)
    session.commit()
    return _rule(session, get_ruleset(request), rule_id, response)


@router.post("/{rule_id}/breaker/reset", response_model=RuleOut)
def reset_breaker(
    rule_id: str,
    body: Reason,
    request: Request,
    response: Response,
    session: Session = Depends(get_session),
    principal: Principal = Depends(require(Role.operator)),
) -> RuleOut:
    """Close a tripped breaker; 409 if it is not open."""
    _locked_for_change(session, request, rule_id)
    operations.reset_breaker(session, get_ruleset(request), rule_id, actor=principal.actor, reason=body.reason)
    session.commit()
    return _rule(session, get_ruleset(request), rule_id, response)
