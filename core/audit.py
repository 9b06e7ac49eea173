"""Recording changes of state in the audit log (the caller's transaction commits it).

Listeners see every entry as it is recorded, in the recording transaction: the
Slack alerts' outbox is one (ticketing.notify), so an alert is written with
the change it reports and rolled back with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from core.models import AuditEntry

AuditListener = Callable[[Session, AuditEntry], None]
"""Called with the session and the new entry; it may add rows to the session, never commit or do I/O."""

_listeners: list[AuditListener] = []


def add_listener(listener: AuditListener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: AuditListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


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
    for listener in tuple(_listeners):
        listener(session, entry)
    return entry
