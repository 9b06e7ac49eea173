"""Liveness, readiness and Prometheus metrics.

/healthz says the process answers; /readyz that the database and every broker (the central one and
each datacenter's) can be reached; /metrics adds to the counters of this box's processes
(core.metrics) the state read at this scrape: remediations, tickets and hosts by state, open tickets
by datacenter, rule breakers, and queue depths and the ingest stream's lag read from the brokers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from sqlalchemy import func, select, text

from api.deps import get_runtime
from core import metrics
from core.db import Database
from core.queue import check_broker, ingest_lag_s, queue_depths
from core.settings import Settings

if TYPE_CHECKING:
    from remediator.rules import RuleRegistry

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
CENTRAL = "central"


def brokers(settings: Settings) -> dict[str, str]:
    """Every broker this deployment uses, by name: `central` and one per datacenter."""
    named = {CENTRAL: settings.broker_url}
    named.update(settings.datacenter_brokers)
    return named


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    settings: Settings = request.app.state.settings
    checks: dict[str, str] = {}
    try:
        with request.app.state.database.sessionmaker() as session:
            session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as error:
        checks["database"] = f"error: {type(error).__name__}"
    if request.app.state.celery is not None and not settings.embedded:
        for name, url in brokers(settings).items():
            key = "broker" if name == CENTRAL else f"broker:{name}"
            try:
                check_broker(url, tls=settings.broker_tls, timeout=PROBE_TIMEOUT_S)
                checks[key] = "ok"
            except Exception as error:
                checks[key] = f"error: {type(error).__name__}"
    ready = all(v == "ok" for v in checks.values())
    if not ready:
        log.warning("api.readiness.failed", extra={"fields": checks})
    return JSONResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
    )


class StateCollector:
    """Gauges read at scrape time: cheap COUNT … GROUP BY queries and the brokers' queue depths."""

    def __init__(self, database: Database, settings: Settings, rules: RuleRegistry) -> None:
        self.database = database
        self.settings = settings
        self.rules = rules

    def collect(self) -> Iterator[Metric]:
        yield from self._database_state()
        if not self.settings.embedded:
            yield from self._queues()

    def _database_state(self) -> Iterator[Metric]:
        from remediator.models import Host, HostState, Remediation, RemediationState, RuleState
        from ticketing.models import OPEN_TICKET_STATES, Ticket, TicketState

        up = GaugeMetricFamily("fleetfix_database_up", "1 when the database answered this scrape.")
        try:
            with self.database.sessionmaker() as session:
                counted: dict[str, dict[object, int]] = {
                    "remediations": dict(
                        session.execute(select(Remediation.state, func.count()).group_by(Remediation.state)).all()
                    ),
                    "tickets": dict(session.execute(select(Ticket.state, func.count()).group_by(Ticket.state)).all()),
                    "hosts": dict(session.execute(select(Host.state, func.count()).group_by(Host.state)).all()),
                }
                breakers = dict(session.execute(select(RuleState.rule_id, RuleState.breaker_open)).all())
                # one row per datacenter, through ix_tickets_state_priority's leading column
                open_by_datacenter = session.execute(
                    select(Ticket.datacenter, func.count())
                    .where(Ticket.state.in_(OPEN_TICKET_STATES))
                    .group_by(Ticket.datacenter)
                ).all()
        except Exception as error:
            log.warning("api.metrics.database_failed", extra={"fields": {"error": f"{type(error).__name__}: {error}"}})
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        states = {"remediations": RemediationState, "tickets": TicketState, "hosts": HostState}
        for what, enum in states.items():
            family = GaugeMetricFamily(f"fleetfix_{what}", f"{what.capitalize()} by state.", labels=["state"])
            for state in enum:
                family.add_metric([state.value], counted[what].get(state, 0))
            yield family
        breaker = GaugeMetricFamily(
            "fleetfix_rule_breaker_open",
            "1 while a rule's circuit breaker is open (it plans nothing).",
            labels=["rule"],
        )
        for rule in self.rules.ruleset.rules:
            breakers.setdefault(rule.id, False)
        for rule_id, is_open in sorted(breakers.items()):
            breaker.add_metric([rule_id], 1 if is_open else 0)
        yield breaker
        open_tickets = GaugeMetricFamily(
            "fleetfix_open_tickets",
            "Tickets not yet closed or cancelled (open, claimed, in progress, resolved, verifying), by datacenter.",
            labels=["datacenter"],
        )
        for datacenter, count in sorted(open_by_datacenter, key=lambda row: row[0] or ""):
            open_tickets.add_metric([datacenter or "unknown"], count)
        yield open_tickets

    def _queues(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("fleetfix_broker_up", "1 when the broker answered this scrape.", labels=["broker"])
        depth = GaugeMetricFamily(
            "fleetfix_queue_messages",
            "Messages waiting in a queue (stream:ingest: the Redis ingest stream's entries; "
            "stream:ingest:pending: read but not yet acknowledged).",
            labels=["broker", "queue"],
        )
        lag = GaugeMetricFamily(
            "fleetfix_ingest_lag_seconds",
            "How long the oldest report still in a Redis broker's ingest stream has waited (0: none waits).",
            labels=["broker"],
        )
        for name, url in brokers(self.settings).items():
            try:
                depths = queue_depths(url, tls=self.settings.broker_tls, timeout=PROBE_TIMEOUT_S)
                waited = ingest_lag_s(url, tls=self.settings.broker_tls, timeout=PROBE_TIMEOUT_S)
            except Exception as error:
                log.warning(
                    "api.metrics.broker_failed",
                    extra={"fields": {"broker": name, "error": f"{type(error).__name__}: {error}"}},
                )
                up.add_metric([name], 0)
                continue
            up.add_metric([name], 1)
            for queue, count in depths.items():
                depth.add_metric([name, queue], count)
            if waited is not None:
                lag.add_metric([name], waited)
        yield up
        yield depth
        yield lag


@router.get("/metrics", include_in_schema=False)
def prometheus_metrics(request: Request) -> Response:
    """Prometheus text exposition (scrape it from inside the network; it carries no secrets)."""
    runtime = get_runtime(request)
    body = metrics.exposition(StateCollector(runtime.database, runtime.settings, runtime.remediator.rules))
    return Response(body, media_type=metrics.CONTENT_TYPE)
