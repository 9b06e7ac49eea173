"""Remediations whose next run was lost: found by age, and run again.

A remediation moves on one `remediator.run_remediation` task at a time, each queueing the next. A
worker killed while it holds that task (or between committing a step and sending the next task)
leaves the remediation `planned` or `running` with its next step pending and nothing queued: the
Redis transport hands an unacknowledged task to another worker only after its visibility timeout,
an hour by default, and a task never sent is never handed on (bench/chaos.py found both). The
scheduler's sweep re-sends the run for any remediation whose next step is pending and which has not
changed for STALL_S. A run sent twice is harmless: `runner.advance` takes the remediation's row lock,
so the second finds the step done (or waiting on its host) and the remediation further on.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.models import RUNNABLE_REMEDIATION_STATES, Remediation
from remediator.runner import has_next

STALL_S = 300  # well past a busy queue's delay; well short of the transport's hour


def stalled(session: Session, now: dt.datetime, *, after_s: float = STALL_S) -> list[int]:
    """Ids of remediations with a pending next step (or verification due) unchanged for `after_s`."""
    candidates = session.scalars(
        select(Remediation)
        .where(
            Remediation.state.in_(RUNNABLE_REMEDIATION_STATES),
            Remediation.paused_by.is_(None),
            Remediation.updated_at < now - dt.timedelta(seconds=after_s),
        )
        .order_by(Remediation.id)
        .limit(500)
    ).all()
    return [r.id for r in candidates if has_next(r)]
