"""Celery tasks of the Slack alerts, on the notify queue: a periodic flush and one delivery per message.

Both take ids, open their own sessions and are idempotent: a duplicate flush
finds nothing pending, a duplicate delivery finds its message sent or claimed.
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from core.db import utcnow
from core.dispatch import send_after_commit
from core.queue import NOTIFY_QUEUE
from ticketing.notify import service
from ticketing.runtime import Ticketing
from ticketing.settings import TicketingSettings


@shared_task(name="ticketing.notify.flush", queue=NOTIFY_QUEUE, bind=True)
def flush_alerts(self: Task) -> int:
    """Group the pending alerts into messages and send the new ones."""
    ticketing = Ticketing.of(self.app)
    settings = ticketing.settings
    if settings.alerts_mode == "off":
        return 0
    with ticketing.database.session() as session:
        result = service.flush(session, settings, utcnow())
        for delivery_id in result.to_send:
            send_after_commit(session, deliver_alert.s(delivery_id).set(queue=NOTIFY_QUEUE))
    return result.grouped


@shared_task(name="ticketing.notify.deliver", queue=NOTIFY_QUEUE, bind=True, max_retries=None)
def deliver_alert(self: Task, delivery_id: int) -> str:
    """Post one message; on a 429, a 5xx or an unreachable Slack, retry later without holding the worker."""
    ticketing = Ticketing.of(self.app)
    sender, redactor = ticketing.sender
    outcome = service.deliver(ticketing.database, delivery_id, ticketing.settings, sender, redactor)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.state


def beat_schedule(settings: TicketingSettings) -> dict[str, dict[str, Any]]:
    """The flush runs once per grouping window (nothing when alerts are off)."""
    if settings.alerts_mode == "off":
        return {}
    return {
        "alerts-flush": {
            "task": "ticketing.notify.flush",
            "schedule": float(settings.alerts_window_s),
            "options": {"queue": NOTIFY_QUEUE},
        }
    }
