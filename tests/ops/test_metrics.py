"""/metrics, /healthz and /readyz, served by the app on the real databases and brokers.

Counters are read before and after (this process's registry is shared by the whole run), gauges
are exact: they are read from the test's own rolled-back transaction and a flushed Redis db.
Multi-process aggregation is proven with real processes in test_compose.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from api.settings import CentralSettings, load_central_settings
from core.db import Database
from core.queue import NOTIFY_QUEUE, create_celery
from remediator import runner
from remediator.ingest import ingest_batch
from remediator.models import RuleState
from remediator.rules import load_ruleset
from tests.builders.reports import payload, storm_reports
from tests.builders.runtime import rewire, runtime_of, unconnected

RULES = load_ruleset([])
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def test_metrics_count_the_loop_and_read_state_from_the_database(client: TestClient, db: Database) -> None:
    before = scrape(client)
    result = ingest_batch(
        [payload(r) for r in storm_reports("metrics-1")] + [{"schema_version": 1}], database=db, ruleset=RULES
    )
    [remediation_id] = result.remediations
    for _ in ("drain", "ticket"):
        with db.session() as session:
            runner.advance(session, remediation_id, ruleset=RULES)
    after = scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("fleetfix_reports_total", outcome="accepted") == len(storm_reports("metrics-1"))
    assert grew("fleetfix_reports_total", outcome="refused") == 1
    assert grew("fleetfix_ingest_batch_seconds_count") == 1
    assert grew("fleetfix_report_delay_seconds_count") == len(storm_reports("metrics-1"))
    assert grew("fleetfix_signals_total", kind="dimm_ce_rate") >= 2
    assert grew("fleetfix_rule_firings_total", rule="dimm-ce-storm") >= 1
    assert value(after, "fleetfix_database_up") == 1
    assert value(after, "fleetfix_remediations", state="escalated") == 1
    assert value(after, "fleetfix_remediations", state="planned") == 0
    assert value(after, "fleetfix_tickets", state="open") == 1
    assert value(after, "fleetfix_hosts", state="awaiting_repair") == 1
    assert value(after, "fleetfix_rule_breaker_open", rule="dimm-ce-storm") == 0


def test_an_open_breaker_shows(client: TestClient, db: Database) -> None:
    with db.session() as session:
        session.add(RuleState(rule_id="dimm-ce-storm", breaker_open=True, breaker_reason="test"))
    assert value(scrape(client), "fleetfix_rule_breaker_open", rule="dimm-ce-storm") == 1


def test_an_unreachable_database_is_a_gauge_and_not_ready() -> None:
    dead = Database("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with TestClient(create_app(unconnected(dead))) as client:
        assert value(scrape(client), "fleetfix_database_up") == 0
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"] == "error: OperationalError"
    dead.dispose()


@pytest.fixture
def broker_settings(redis_url: str) -> CentralSettings:
    return load_central_settings(broker_url=redis_url, datacenter_brokers={"fra3": "redis://127.0.0.1:1/0"})


def test_queue_depths_come_from_every_broker(db: Database, broker_settings: CentralSettings, redis_url: str) -> None:
    producer = create_celery(redis_url)
    try:
        for _ in range(3):
            producer.send_task("ticketing.notify_nothing", queue=NOTIFY_QUEUE)
    finally:
        create_celery("memory://")
    with TestClient(create_app(rewire(db, settings=broker_settings, celery=producer))) as client:
        samples = scrape(client)
        assert value(samples, "fleetfix_broker_up", broker="central") == 1
        assert value(samples, "fleetfix_queue_messages", broker="central", queue="notify") == 3
        assert value(samples, "fleetfix_queue_messages", broker="central", queue="ingest") == 0
        assert ("fleetfix_queue_messages", (("broker", "central"), ("queue", "stream:ingest"))) in samples
        assert value(samples, "fleetfix_broker_up", broker="fra3") == 0  # a datacenter broker that is down

        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"] == {
            "database": "ok",
            "broker": "ok",
            "broker:fra3": "error: OperationalError",
        }
