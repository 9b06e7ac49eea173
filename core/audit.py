"""Recording changes of state in the audit log (the caller's transaction commits it)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from core.models import AuditEntry


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    object_type: str,
    object_id: object,
    reason: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    entry = AuditEntry(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        reason=reason,
        detail=detail or {},
    )
    session.add(entry)
    return entry
