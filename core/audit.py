"""Recording changes of state in the audit log (the caller's transaction commits it).

Listeners see every entry as it is recorded, in the recording transaction: the
Slack alerts' outbox is one (ticketing.notify), so an alert is written with
the change it reports and rolled back with it. A process's root hands its
listeners to its Database (`AuditListeners`), so the entries of a session see
those of the runtime that opened it and no other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from core.db import service_of
from core.models import AuditEntry

AuditListener = Callable[[Session, AuditEntry], None]
"""Called with the session and the new entry; it may add rows to the session, never commit or do I/O."""


class AuditListeners(tuple[AuditListener, ...]):
    """The listeners of one runtime, in the order they run (`Database.provide(AuditListeners, ...)`)."""

    __slots__ = ()


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
    for listener in service_of(session, AuditListeners) or ():
        listener(session, entry)
    return entry
