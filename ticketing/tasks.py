"""Celery tasks of ticketing: copying tickets to the external tracker.

A tracker that is down or slow delays its copy, never a ticket: the task
retries with backoff for as long as it takes (every change queues a sync, and
each sync copies everything not yet copied).
"""

from __future__ import annotations

import logging
import random

from celery import Task, shared_task

from core.db import get_database
from core.queue import NOTIFY_QUEUE
from core.settings import get_settings
from ticketing import sync
from ticketing.backends import Tracker, TrackerRejected, TrackerUnavailable, make_tracker

log = logging.getLogger(__name__)
RETRY_MAX_S = 300

_tracker: Tracker | None = None


def tracker() -> Tracker:
    """This process's tracker, built once from the settings."""
    global _tracker  # one HTTP client per worker process
    if _tracker is None:
        _tracker = make_tracker(get_settings())
    return _tracker


def retry_delay(retries: int) -> float:
    """Exponential backoff with full jitter, capped at RETRY_MAX_S."""
    return random.uniform(0, min(RETRY_MAX_S, 2.0 * 2**retries))  # noqa: S311 - jitter, not a secret


@shared_task(name="ticketing.sync_tracker", queue=NOTIFY_QUEUE, bind=True, max_retries=None)
def sync_tracker(self: Task, ticket_id: int) -> str:
    """Bring the tracker's copy of one ticket up to date."""
    backend = tracker()
    if not backend.external:
        return "local"
    database = get_database()
    try:
        with database.session() as session:
            link = sync.push(session, ticket_id, backend, public_url=get_settings().effective_public_url)
    except TrackerUnavailable as error:
        with database.session() as session:
            attempts = sync.record_failure(session, ticket_id, backend.name, str(error))
        log.warning(
            "ticketing.tracker.unavailable",
            extra={"fields": {"ticket": ticket_id, "attempts": attempts, "error": str(error)}},
        )
        raise self.retry(exc=error, countdown=retry_delay(self.request.retries)) from error
    except TrackerRejected as error:
        with database.session() as session:
            sync.record_failure(session, ticket_id, backend.name, str(error))
        log.error("ticketing.tracker.rejected", extra={"fields": {"ticket": ticket_id, "error": str(error)}})
        return "rejected"
    return link.external_key or "" if link is not None else "gone"
