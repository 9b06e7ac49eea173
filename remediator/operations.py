"""What operators do to the remediator: rule modes, breaker resets, the global
pause, approvals, holding one remediation, and how well repairs work. Each change
is in the audit log with who and why. Stopping a remediation is remediator.stopping."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from celery import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.db import utcnow
from core.dispatch import send_after_commit
from core.errors import Conflict, InvalidInput, NotFound
from core.queue import host_signature
from core.vocabulary import REPORT_INTERVAL_MAX_S, REPORT_INTERVAL_MIN_S
from remediator import planning, safety
from remediator.models import (
    ACTIVE_REMEDIATION_STATES,
    RUNNABLE_REMEDIATION_STATES,
    Control,
    Decision,
    Host,
    Remediation,
    RemediationState,
    RuleMode,
    RuleState,
)
from remediator.rules import RuleSet

RETURN_WINDOW = dt.timedelta(days=30)


def rules_with_state(session: Session, ruleset: RuleSet) -> list[dict[str, Any]]:
    states = {s.rule_id: s for s in session.scalars(select(RuleState))}
    out = []
    for rule in ruleset.rules:
        state = states.get(rule.id)
        out.append(
            {
                "id": rule.id,
                "description": rule.description,
                "priority": rule.priority,
                "when": rule.when.model_dump(by_alias=True),
                "plan": [s.action for s in rule.plan],
                "escalation": [[s.action for s in rung.plan] for rung in rule.escalation],
                "pack_mode": rule.mode,
                "mode": safety.effective_mode(rule, state).value,
                "breaker_open": bool(state and state.breaker_open),
                "breaker_reason": state.breaker_reason if state else "",
                "breaker_opened_at": state.breaker_opened_at if state else None,
            }
        )
    return out


def _state(session: Session, ruleset: RuleSet, rule_id: str) -> RuleState:
    if ruleset.get(rule_id) is None:
        raise NotFound(f"rule {rule_id!r} is not in the active rule packs")
    state = session.get(RuleState, rule_id)
    if state is None:
        state = RuleState(rule_id=rule_id)
        session.add(state)
    return state


def set_rule_mode(
    session: Session, ruleset: RuleSet, rule_id: str, mode: RuleMode | None, *, actor: str, reason: str
) -> RuleState:
    """Pause, resume (None: back to the pack's mode) or shadow a rule."""
    state = _state(session, ruleset, rule_id)
    before = state.mode.value if state.mode else None
    state.mode = mode
    state.updated_by = actor
    audit.record(
        session,
        actor=actor,
        action="remediator.rule.mode_changed",
        object_type="rule",
        object_id=rule_id,
        reason=reason,
        detail={"from": before, "to": mode.value if mode else None},
    )
    session.flush()
    return state


def reset_breaker(session: Session, ruleset: RuleSet, rule_id: str, *, actor: str, reason: str) -> RuleState:
    state = _state(session, ruleset, rule_id)
    if not state.breaker_open:
        raise Conflict(f"the breaker of rule {rule_id!r} is not open")
    previous = state.breaker_reason
    state.breaker_open = False
    state.breaker_reason = ""
    state.breaker_opened_at = None
    state.updated_by = actor
    audit.record(
        session,
        actor=actor,
        action="remediator.rule.breaker_reset",
        object_type="rule",
        object_id=rule_id,
        reason=reason,
        detail={"was": previous},
    )
    session.flush()
    return state


def global_pause(session: Session) -> dict[str, Any]:
    control = session.get(Control, safety.GLOBAL_PAUSE)
    value = dict(control.value) if control else {"paused": False}
    return {
        **value,
        "updated_by": control.updated_by if control else "",
        "updated_at": control.updated_at if control else None,
    }


def set_global_pause(session: Session, paused: bool, *, actor: str, reason: str) -> dict[str, Any]:
    control = session.get(Control, safety.GLOBAL_PAUSE)
    if control is None:
        control = Control(key=safety.GLOBAL_PAUSE)
        session.add(control)
    control.value = {"paused": paused, "reason": reason}
    control.updated_by = actor
    audit.record(
        session,
        actor=actor,
        action="remediator.fleet.paused" if paused else "remediator.fleet.resumed",
        object_type="control",
        object_id=safety.GLOBAL_PAUSE,
        reason=reason,
    )
    session.flush()
    return global_pause(session)


def approve(session: Session, ruleset: RuleSet, remediation_id: int, *, actor: str, reason: str = "") -> Remediation:
    return planning.approve(session, remediation_id, actor=actor, ruleset=ruleset, now=utcnow(), reason=reason)


def pause(session: Session, remediation_id: int, *, actor: str, reason: str) -> Remediation:
    """Hold one remediation: no step starts (and it is not admitted) until it is resumed. A step
    already handed to its host finishes there; its result is kept."""
    remediation = _active(session, remediation_id, "paused")
    if remediation.paused_by is not None:
        raise Conflict(f"remediation {remediation_id} is already paused ({remediation.held_reason})")
    remediation.paused_by = actor
    remediation.held_reason = f"paused by {actor}: {reason}"
    audit.record(
        session,
        actor=actor,
        action="remediator.remediation.paused",
        object_type="remediation",
        object_id=remediation_id,
        reason=reason,
    )
    session.flush()
    return remediation


def resume(session: Session, remediation_id: int, *, actor: str, reason: str, ruleset: RuleSet) -> Remediation:
    """Let a paused remediation go on from where it stopped (or be admitted, if it was waiting)."""
    remediation = _active(session, remediation_id, "resumed")
    if remediation.paused_by is None:
        raise Conflict(f"remediation {remediation_id} is not paused")
    remediation.paused_by = None
    remediation.held_reason = ""
    audit.record(
        session,
        actor=actor,
        action="remediator.remediation.resumed",
        object_type="remediation",
        object_id=remediation_id,
        reason=reason,
    )
    if remediation.state == RemediationState.detected:
        planning.admit(session, remediation, ruleset, utcnow())
    elif remediation.state in RUNNABLE_REMEDIATION_STATES:
        planning.queue_run(session, remediation)
    session.flush()
    return remediation


def _active(session: Session, remediation_id: int, verb: str) -> Remediation:
    remediation = session.get(Remediation, remediation_id)
    if remediation is None:
        raise NotFound(f"remediation {remediation_id} does not exist")
    if remediation.state not in ACTIVE_REMEDIATION_STATES:
        raise Conflict(f"remediation {remediation_id} is {remediation.state.value}; only an active one can be {verb}")
    return remediation


def decisions(
    session: Session,
    *,
    host_id: int | None = None,
    rule_id: str | None = None,
    limit: int = 200,
    before_id: int | None = None,
) -> list[Decision]:
    """Newest first; `before_id` pages on: the decisions older than that one."""
    query = select(Decision).order_by(Decision.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(Decision.id < before_id)
    if host_id is not None:
        query = query.where(Decision.host_id == host_id)
    if rule_id is not None:
        query = query.where(Decision.rule_id == rule_id)
    return list(session.scalars(query))


def effectiveness(session: Session) -> list[dict[str, Any]]:
    """Per rule and plan: how often it succeeded, and how often the fault came back within 30 days."""
    every = session.scalars(select(Remediation).order_by(Remediation.host_id, Remediation.id)).all()
    by_host_rule: dict[tuple[int, str], list[Remediation]] = defaultdict(list)
    for remediation in every:
        by_host_rule[(remediation.host_id, remediation.rule_id)].append(remediation)
    finished = [r for r in every if r.state not in ACTIVE_REMEDIATION_STATES]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for remediation in finished:
        plan = "+".join(s.action for s in remediation.steps) or "-"
        row = rows.setdefault(
            (remediation.rule_id, plan),
            {
                "rule": remediation.rule_id,
                "plan": plan,
                "total": 0,
                "succeeded": 0,
                "failed": 0,
                "escalated": 0,
                "cancelled": 0,
                "returned_within_30d": 0,
            },
        )
        row["total"] += 1
        row[remediation.state.value] = row.get(remediation.state.value, 0) + 1
        if remediation.state == RemediationState.succeeded and remediation.finished_at is not None:
            later = [
                r
                for r in by_host_rule[(remediation.host_id, remediation.rule_id)]
                if r.id > remediation.id and r.created_at - remediation.finished_at <= RETURN_WINDOW
            ]
            if later:
                row["returned_within_30d"] += 1
    for row in rows.values():
        row["success_rate"] = round(row["succeeded"] / row["total"], 3) if row["total"] else None
        row["return_rate"] = round(row["returned_within_30d"] / row["succeeded"], 3) if row["succeeded"] else None
    return sorted(rows.values(), key=lambda r: (r["rule"], r["plan"]))


def set_report_interval(session: Session, hostname: str, interval_s: int, *, actor: str, reason: str) -> Host:
    """Set how often a host's agent runs its check cycle; the agent is told on its own queue."""
    if not REPORT_INTERVAL_MIN_S <= interval_s <= REPORT_INTERVAL_MAX_S:
        raise InvalidInput(
            f"interval_s: {interval_s} is outside {REPORT_INTERVAL_MIN_S}..{REPORT_INTERVAL_MAX_S} seconds"
        )
    host = session.scalars(select(Host).where(Host.hostname == hostname)).one_or_none()
    if host is None:
        raise NotFound(f"host {hostname!r} is not known")
    before = host.report_interval_s
    host.report_interval_s = interval_s
    audit.record(
        session,
        actor=actor,
        action="remediator.host.interval_changed",
        object_type="host",
        object_id=hostname,
        reason=reason,
        detail={"from": before, "to": interval_s},
    )
    send_after_commit(
        session,
        host_signature(
            current_app, hostname, "checker.set_report_interval", args=[interval_s], datacenter=host.datacenter
        ),
    )
    session.flush()
    return host
