"""Tasks an agent runs for the central service on its own host.host.<hostname> queue."""

from __future__ import annotations

from celery import shared_task

from checker.agent import state


@shared_task(name="checker.run_check_now")
def run_check_now() -> str:
    """Run a check cycle now and send the report (the central side re-checks after a fix)."""
    loop = state.check_loop
    if loop is None:
        raise RuntimeError("no check loop in this process: not an agent")
    return str(loop.once())
