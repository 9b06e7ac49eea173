"""Prometheus metrics: what each process counts, and one exposition for the processes of a box.

Events (reports ingested and refused, ingest time, signals, rule firings, Slack deliveries) are
counted where they happen. With PROMETHEUS_MULTIPROC_DIR set — the CLI sets it from
FLEETFIX_METRICS_DIR before anything creates a metric, which is when prometheus_client decides —
every process (uvicorn workers, Celery pool children, ingesters) writes its values to files there
and `exposition()` adds them up; without it they live in this process only (tests, `fleetfix up`).
State (remediations and tickets by state, breakers, queue depths) is not counted here: the API
reads it from the database and the broker at scrape time (api.routes.health). The one gauge a
process keeps is when a central worker last finished a task (`watch_worker_tasks`): a worker that
is gone cannot be asked at scrape time, but its last heartbeat can be read.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry()

REPORTS = Counter(
    "fleetfix_reports",
    "Reports that reached ingest, by outcome: accepted; duplicate (its id stored, or its content held by a "
    "stored row of the host); late (accepted after a newer one of its host: stored, its new rows counted; "
    "also counted as accepted); refused (malformed, or stamped ahead of the service's clock); send_full (a delta "
    "report POSTed to /reports/delta that the centre could not rebuild exactly from its base, answered 409: "
    "counted only here, not as refused).",
    ["outcome"],
    registry=REGISTRY,
)
INGEST_BATCH_SECONDS = Histogram(
    "fleetfix_ingest_batch_seconds",
    "Time to validate, store and evaluate one ingest batch (one transaction).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
REPORT_DELAY_SECONDS = Histogram(
    "fleetfix_report_delay_seconds",
    "From a report's capture on its host to the end of its ingest: transport, queueing and ingest.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
SIGNALS = Counter("fleetfix_signals", "Signals derived from reports, by kind.", ["kind"], registry=REGISTRY)
RULE_FIRINGS = Counter(
    "fleetfix_rule_firings",
    "Rules that fired on a host's signals, by rule (each firing is then planned, held, skipped or shadowed).",
    ["rule"],
    registry=REGISTRY,
)
DECISIONS = Counter(
    "fleetfix_decisions",
    "Decisions recorded about firing rules, by outcome (planned, admitted, held, skipped, shadow, escalated); "
    "counted when recorded in the deciding transaction, so a batch retried after a rollback counts again.",
    ["outcome"],
    registry=REGISTRY,
)
WORKER_LAST_TASK = Gauge(
    "fleetfix_worker_last_task_timestamp_seconds",
    "When a central worker process last finished a task from this queue (Unix time). The scheduler sends "
    "remediate a task every 10 s, so an old value there means no worker consumes it.",
    ["queue"],
    registry=REGISTRY,
    multiprocess_mode="max",  # the newest heartbeat of any process on the box, dead ones' included
)
SLACK_DELIVERIES = Counter(
    "fleetfix_slack_deliveries",
    "Slack messages, by outcome: sent, failed (given up), retried.",
    ["outcome"],
    registry=REGISTRY,
)


class IngestOutcome(Protocol):
    @property
    def accepted(self) -> Sequence[object]: ...
    @property
    def duplicates(self) -> Sequence[object]: ...


class CapturedReport(Protocol):
    @property
    def report_id(self) -> object: ...
    @property
    def captured_at(self) -> dt.datetime: ...


def observe_ingest(result: IngestOutcome, reports: Iterable[CapturedReport], seconds: float) -> None:
    """Count one committed ingest batch: accepted and duplicate reports, its time, and how old its
    accepted reports were. (Refusals are counted where they are decided, before the transaction.)"""
    REPORTS.labels("accepted").inc(len(result.accepted))
    REPORTS.labels("duplicate").inc(len(result.duplicates))
    INGEST_BATCH_SECONDS.observe(seconds)
    accepted = set(result.accepted)
    now = dt.datetime.now(dt.UTC)
    for report in reports:
        if report.report_id in accepted:
            REPORT_DELAY_SECONDS.observe(max(0.0, (now - report.captured_at).total_seconds()))


def count_signals(kinds: Iterable[str]) -> None:
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    for kind, count in counts.items():
        SIGNALS.labels(kind).inc(count)


def watch_worker_tasks() -> None:
    """Set WORKER_LAST_TASK each time a task of this Celery worker finishes (the pool children inherit
    the connection across fork). Called by `fleetfix worker` before it starts its pool."""
    from celery.signals import task_postrun

    task_postrun.connect(_task_finished, weak=False)


def _task_finished(sender: object = None, task: object = None, **_: object) -> None:
    request = getattr(task, "request", None)
    delivery = getattr(request, "delivery_info", None) or {}
    queue = delivery.get("routing_key") or getattr(task, "queue", None) or "unknown"
    WORKER_LAST_TASK.labels(str(queue)).set_to_current_time()


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def _box_registry() -> CollectorRegistry:
    """A registry holding this box's counters: every process's in multiprocess mode, else this one's."""
    registry = CollectorRegistry()
    directory = multiprocess_dir()
    if directory:
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]  # untyped in prometheus_client
    else:
        registry.register(REGISTRY)
    return registry


def exposition(*collectors: Collector) -> bytes:
    """The text exposition: this box's counters and `collectors` (read at this scrape)."""
    registry = _box_registry()
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)


def serve(port: int, host: str = "0.0.0.0") -> None:  # noqa: S104 - scraped from outside the pod
    """Serve /metrics from a background thread (worker, ingester and scheduler processes)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=host, registry=_box_registry())
