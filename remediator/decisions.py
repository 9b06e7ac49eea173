"""The decision log and the small operations every stage of planning shares: recording a decision
once, finishing a remediation, finding a host's active one, and filling title templates.

planning, preemption and the runner all use these; keeping them here lets those modules call
each other without import cycles.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit, metrics
from core.db import utcnow
from remediator.models import ACTIVE_REMEDIATION_STATES, Decision, Host, Remediation, RemediationState

log = logging.getLogger("remediator.planning")
SYSTEM = "system:remediator"


def active_remediation(session: Session, host_id: int) -> Remediation | None:
    return session.scalars(
        select(Remediation).where(Remediation.host_id == host_id, Remediation.active.is_(True))
    ).one_or_none()


DECIDED_KEPT = 128  # rule-and-subject keys of a host whose last decision is remembered


def record(
    session: Session,
    host: Host,
    rule_id: str,
    outcome: str,
    reason: str,
    *,
    remediation_id: int | None = None,
    subject: str = "",
    value: float | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Record a decision, once: the same outcome and reason for the same host, rule and subject is not repeated
    (a rule about devices fires for each: two ports held beside one another are two decisions, recorded once
    each, not alternately every report). The last DECIDED_KEPT keys are remembered, the newest last."""
    memory = dict(host.memory or {})
    last: dict[str, str] = dict(memory.get("decided", {}))
    key = f"{outcome}:{reason}"
    slot = f"{rule_id} {subject}" if subject else rule_id
    if last.get(slot) == key:
        return
    last.pop(slot, None)
    last[slot] = key
    while len(last) > DECIDED_KEPT:
        del last[next(iter(last))]
    memory["decided"] = last
    host.memory = memory
    session.add(
        Decision(
            at=now or utcnow(),
            host_id=host.id,
            rule_id=rule_id,
            outcome=outcome,
            reason=reason,
            remediation_id=remediation_id,
            subject=subject,
            value=value,
        )
    )
    metrics.DECISIONS.labels(outcome).inc()
    log.info(
        f"remediator.decision.{outcome}",
        extra={"fields": {"host": host.hostname, "rule": rule_id, "reason": reason, "remediation": remediation_id}},
    )


_TEMPLATE_FIELD = re.compile(r"\{(\w+(?:\.\w+)?)(?::([^{}]*))?\}")
_DETAIL_TEXT_MAX = 120


def template_values(hostname: str, rule_id: str, subject: str, value: float, detail: Any) -> dict[str, Any]:
    """What a title template may name: {subject}, {value}, {hostname}, {rule}, and {detail.KEY} for each
    scalar in the signal's detail. Detail text comes from the host (a process name, a sensor name), so
    it is cut to one line of at most 120 characters."""
    values: dict[str, Any] = {"subject": subject, "value": value, "hostname": hostname, "rule": rule_id}
    for key, item in (detail or {}).items() if isinstance(detail, dict) else ():
        if isinstance(item, bool) or item is None:
            values[f"detail.{key}"] = str(item)
        elif isinstance(item, int | float):
            values[f"detail.{key}"] = item
        elif isinstance(item, str):
            text = "".join(ch if ch.isprintable() else " " for ch in item)
            values[f"detail.{key}"] = text[:_DETAIL_TEXT_MAX]
    return values


def render_template(template: str, values: dict[str, Any]) -> str:
    """Fill {name} and {name:spec} from values; nothing else is interpreted."""

    def fill(match: re.Match[str]) -> str:
        name, spec = match.group(1), match.group(2) or ""
        if name not in values:
            return match.group(0)
        try:
            return format(values[name], spec)
        except (ValueError, TypeError):
            return str(values[name])

    return _TEMPLATE_FIELD.sub(fill, template)


def finish(session: Session, remediation: Remediation, state: RemediationState, reason: str, now: dt.datetime) -> None:
    remediation.state = state
    remediation.finished_at = None if state in ACTIVE_REMEDIATION_STATES else now
    audit.record(
        session,
        actor=SYSTEM,
        action=f"remediator.remediation.{state.value}",
        object_type="remediation",
        object_id=remediation.id,
        reason=reason,
    )
