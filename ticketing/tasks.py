"""Celery tasks of ticketing: copying tickets to the external tracker.

A tracker that is down or slow delays its copy, never a ticket: the task
retries with backoff for as long as it takes (every change queues a sync, and
each sync copies everything not yet copied).
"""

from __future__ import annotations

import logging
import random

from celery import Task, shared_task

from core.queue import NOTIFY_QUEUE
from ticketing import sync
from ticketing.backends import TrackerRejected, TrackerUnavailable
from ticketing.runtime import Ticketing

log = logging.getLogger(__name__)
RETRY_MAX_S = 300


def retry_delay(retries: int) -> float:
    """Exponential backoff with full jitter, capped at RETRY_MAX_S."""
    return random.uniform(0, min(RETRY_MAX_S, 2.0 * 2**retries))  # noqa: S311 - jitter, not a secret


@shared_task(name="ticketing.sync_tracker", queue=NOTIFY_QUEUE, bind=True, max_retries=None)
def sync_tracker(self: Task, ticket_id: int) -> str:
    """Bring the tracker's copy of one ticket up to date."""
    ticketing = Ticketing.of(self.app)
    backend = ticketing.tracker
    if not backend.external:
        return "local"
    database = ticketing.database
    try:
        with database.session() as session:
            link = sync.push(session, ticket_id, backend, public_url=ticketing.settings.effective_public_url)
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
