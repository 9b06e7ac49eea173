"""Tasks an agent runs for the central service on its own host.host.<hostname> queue."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery import Task, shared_task

from core.queue import find
from core.vocabulary import REPORT_INTERVAL_MAX_S, REPORT_INTERVAL_MIN_S

if TYPE_CHECKING:
    from checker.agent.worker import CheckLoop

log = logging.getLogger(__name__)


def check_loop(app: Any) -> CheckLoop:
    """The check loop the agent's root (run_agent) handed to the app."""
    from checker.agent.worker import CheckLoop

    loop = find(app, CheckLoop)
    if loop is None:
        raise RuntimeError("no check loop in this process: not an agent")
    return loop


@shared_task(name="checker.run_check_now", bind=True)
def run_check_now(self: Task) -> str:
    """Run a check cycle now and send the report (the central side re-checks after a fix)."""
    return str(check_loop(self.app).once())


@shared_task(name="checker.set_report_interval", bind=True)
def set_report_interval(self: Task, interval_s: int) -> int:
    """Follow the schedule the central service sets: run the check cycle every `interval_s` seconds."""
    loop = check_loop(self.app)
    if not REPORT_INTERVAL_MIN_S <= int(interval_s) <= REPORT_INTERVAL_MAX_S:
        raise ValueError(
            f"report interval {interval_s!r} s is outside {REPORT_INTERVAL_MIN_S}..{REPORT_INTERVAL_MAX_S}"
        )
    loop.reschedule(int(interval_s))
    log.info("checker.agent.rescheduled", extra={"fields": {"interval_s": int(interval_s)}})
    return int(interval_s)
