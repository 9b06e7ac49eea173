"""Sending Celery tasks only after the database commit they depend on.

On rollback the task is dropped: a worker never looks for a row that was
never written (the pattern of warehouse's WarehouseTask.apply_async). Kept
apart from core.queue so the host agent can build a Celery app without
importing SQLAlchemy.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Signature
from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

_PENDING = "fleetfix.pending_tasks"
log = logging.getLogger(__name__)


def send_after_commit(session: Session, signature: Signature) -> None:
    """Queue a task to be sent when this session's outermost transaction commits.

    Queued inside a SAVEPOINT that is rolled back, the task is dropped with it.
    """
    session.info.setdefault(_PENDING, []).append((session.get_nested_transaction(), signature))


# Session's after_commit and after_rollback also fire when a SAVEPOINT is released or
# rolled back (begin_nested); a task must wait for the outermost commit, or a worker
# could look for a row before it is there.


@event.listens_for(Session, "after_commit")
def _send_pending(session: Session) -> None:
    if session.get_nested_transaction() is not None:
        return  # a SAVEPOINT was released; the transaction goes on
    pending: list[tuple[Any, Signature]] = session.info.pop(_PENDING, [])
    for _savepoint, signature in pending:
        try:
            signature.apply_async()
        except Exception as error:  # kombu's OperationalError, redis-py's, sockets' OSError
            # The change is committed and stays so; failing the caller now would report an error
            # for work that was done. The periodic sweeps pick up what the task would have started.
            log.error(
                "core.dispatch.send_failed",
                extra={"fields": {"task": signature.task, "args": _short(signature.args), "error": repr(error)}},
            )


@event.listens_for(Session, "after_soft_rollback")
def _drop_pending(session: Session, previous_transaction: SessionTransaction) -> None:
    pending: list[tuple[Any, Signature]] = session.info.get(_PENDING, [])
    if not pending:
        return
    if previous_transaction.nested:
        session.info[_PENDING] = [(sp, sig) for sp, sig in pending if sp is not previous_transaction]
    elif session.get_nested_transaction() is None:
        session.info.pop(_PENDING, None)


def _short(args: Any) -> str:
    text = repr(args)
    return text if len(text) <= 200 else text[:200] + "…"


def pending_tasks(session: Session) -> list[Any]:
    """What would be sent on commit (for tests and logging)."""
    return [signature for _savepoint, signature in session.info.get(_PENDING, [])]
