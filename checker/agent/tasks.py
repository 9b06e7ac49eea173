"""Tasks an agent runs for the central service on its own host.host.<hostname> queue."""

from __future__ import annotations

import logging

from celery import shared_task

from checker.agent import state
from core.vocabulary import REPORT_INTERVAL_MAX_S, REPORT_INTERVAL_MIN_S

log = logging.getLogger(__name__)


@shared_task(name="checker.run_check_now")
def run_check_now() -> str:
    """Run a check cycle now and send the report (the central side re-checks after a fix)."""
    loop = state.check_loop
    if loop is None:
        raise RuntimeError("no check loop in this process: not an agent")
    return str(loop.once())


@shared_task(name="checker.set_report_interval")
def set_report_interval(interval_s: int) -> int:
    """Follow the schedule the central service sets: run the check cycle every `interval_s` seconds."""
    loop = state.check_loop
    if loop is None:
        raise RuntimeError("no check loop in this process: not an agent")
    if not REPORT_INTERVAL_MIN_S <= int(interval_s) <= REPORT_INTERVAL_MAX_S:
        raise ValueError(
            f"report interval {interval_s!r} s is outside {REPORT_INTERVAL_MIN_S}..{REPORT_INTERVAL_MAX_S}"
        )
    loop.reschedule(int(interval_s))
    log.info("checker.agent.rescheduled", extra={"fields": {"interval_s": int(interval_s)}})
    return int(interval_s)
