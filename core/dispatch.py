"""Sending Celery tasks only after the database commit they depend on.

On rollback the task is dropped: a worker never looks for a row that was
never written (the pattern of warehouse's WarehouseTask.apply_async). Kept
apart from core.queue so the host agent can build a Celery app without
importing SQLAlchemy.
"""

from __future__ import annotations

from typing import Any

from celery import Signature
from sqlalchemy import event
from sqlalchemy.orm import Session

_PENDING = "fleetfix.pending_tasks"


def send_after_commit(session: Session, signature: Signature) -> None:
    """Queue a task to be sent when this session's transaction commits."""
    session.info.setdefault(_PENDING, []).append(signature)


@event.listens_for(Session, "after_commit")
def _send_pending(session: Session) -> None:
    pending: list[Signature] = session.info.pop(_PENDING, [])
    for signature in pending:
        signature.apply_async()


@event.listens_for(Session, "after_rollback")
def _drop_pending(session: Session) -> None:
    session.info.pop(_PENDING, None)


def pending_tasks(session: Session) -> list[Any]:
    """What would be sent on commit (for tests and logging)."""
    return list(session.info.get(_PENDING, []))
