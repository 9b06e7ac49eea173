"""The Celery app factory and the queue layout.

One factory builds the app for every role (embedded, central worker, host
agent); the caller names the task modules to load, so this module imports no
stage package. JSON is the only serialisation; pickle is refused.
"""

from __future__ import annotations

import re
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

INGEST_QUEUE = "ingest"
REMEDIATE_QUEUE = "remediate"
NOTIFY_QUEUE = "notify"
CENTRAL_QUEUES = (INGEST_QUEUE, REMEDIATE_QUEUE, NOTIFY_QUEUE)
HOST_QUEUE_PREFIX = "host."
HOST_TASK_EXPIRES_S = 900
"""A task on a host queue that has not started within this time is dropped,
so a dead host does not pile up work that would run when it comes back."""

INGEST_STREAM = "fleetfix:ingest"
"""Redis Stream of agents' reports (one JSON text per entry, field `report`), read in
batches by `fleetfix ingester`; used when the broker is Redis."""
INGEST_GROUP = "ingesters"

_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-_]{0,252}$")


def host_queue(hostname: str) -> str:
    if not _HOSTNAME.match(hostname):
        raise ValueError(f"not a valid hostname for a queue: {hostname!r}")
    return f"{HOST_QUEUE_PREFIX}{hostname}"


def send_to_host(app: Celery, hostname: str, task: str, *, args: list[Any] | None = None) -> None:
    """Send a task to one host's agent; it expires unstarted after HOST_TASK_EXPIRES_S."""
    app.send_task(task, args=args or [], queue=host_queue(hostname), expires=HOST_TASK_EXPIRES_S)


def create_celery(
    broker_url: str,
    *,
    include: list[str] | tuple[str, ...] = (),
    name: str = "fleetfix",
    extra_queues: tuple[str, ...] = (),
) -> Celery:
    app = Celery(name, broker=broker_url, include=list(include))
    exchange = Exchange("fleetfix", type="direct")
    queues = [Queue(q, exchange, routing_key=q) for q in (*CENTRAL_QUEUES, *extra_queues)]
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=REMEDIATE_QUEUE,
        task_default_exchange="fleetfix",
        task_default_routing_key=REMEDIATE_QUEUE,
        task_queues=queues,
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        timezone="UTC",
        enable_utc=True,
    )
    app.set_current()
    app.set_default()
    return app
