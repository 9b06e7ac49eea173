"""The figures the operators' dashboard and alert rules need, read through /metrics (deploy/grafana,
deploy/prometheus; docs/operations.md): decisions by outcome, open tickets by datacenter, the ingest
stream's lag, and when a real `fleetfix worker` last finished a task.

Counters are compared before and after (the process's registry is shared by the run); gauges are exact:
they come from the test's own rolled-back transaction and its own Redis database.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import CentralSettings, load_central_settings
from core.db import Database
from core.queue import INGEST_STREAM, REMEDIATE_QUEUE, create_celery
from remediator import runner
from remediator.ingest import ingest_batch
from remediator.rules import load_ruleset
from tests.builders.reports import payload, storm_reports
from tests.builders.runtime import rewire, runtime_of
from tests.conftest import truncate_all
from tests.ops.test_metrics import Samples, scrape, value
from tests.processes import FleetfixProcess, base_env, free_port, wait_until
from ticketing.models import Ticket, TicketState

RULES = load_ruleset([])


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(runtime_of(db))) as test_client:
        yield test_client


def test_decisions_are_counted_by_outcome(client: TestClient, db: Database) -> None:
    before = scrape(client)
    result = ingest_batch([payload(r) for r in storm_reports("decided-1")], database=db, ruleset=RULES)
    [remediation_id] = result.remediations
    for _ in ("drain", "ticket"):
        with db.session() as session:
            runner.advance(session, remediation_id, ruleset=RULES)
    after = scrape(client)

    def grew(outcome: str) -> float:
        return value(after, "fleetfix_decisions_total", outcome=outcome) - value(
            before, "fleetfix_decisions_total", outcome=outcome
        )

    assert grew("planned") == 1  # one storm, one plan: a decision is recorded once, not per report
    assert grew("shadow") == 0
    assert grew("held") == 0


def test_open_tickets_are_counted_by_datacenter(client: TestClient, db: Database) -> None:
    with db.session() as session:
        for number, (datacenter, state) in enumerate(
            [
                ("ams1", TicketState.open),
                ("ams1", TicketState.verifying),
                ("ams1", TicketState.closed),
                ("sjc2", TicketState.claimed),
                ("sjc2", TicketState.cancelled),
                ("fra3", TicketState.closed),
                ("", TicketState.in_progress),
            ]
        ):
            session.add(
                Ticket(
                    dedup_key=f"dc-{number}:dimm:A1",
                    hostname=f"dc-{number}",
                    datacenter=datacenter,
                    part_type="dimm",
                    title="test",
                    state=state,
                )
            )
    samples = scrape(client)
    open_tickets = {labels: count for (name, labels), count in samples.items() if name == "fleetfix_open_tickets"}
    assert open_tickets == {
        (("datacenter", "ams1"),): 2,  # open and verifying; the closed one is not counted
        (("datacenter", "sjc2"),): 1,
        (("datacenter", "unknown"),): 1,  # a ticket with no datacenter
    }  # fra3 has only a closed ticket: no series


@pytest.fixture
def broker_settings(redis_url: str) -> CentralSettings:
    return load_central_settings(broker_url=redis_url)


def test_ingest_lag_is_the_age_of_the_oldest_report_in_the_stream(
    db: Database, broker_settings: CentralSettings, redis_url: str
) -> None:
    producer = create_celery(redis_url)
    stream = redis.Redis.from_url(redis_url)
    try:
        with TestClient(create_app(rewire(db, settings=broker_settings, celery=producer))) as client:
            assert value(scrape(client), "fleetfix_ingest_lag_seconds", broker="central") == 0  # nothing waits

            seconds, _ = stream.time()
            stream.xadd(INGEST_STREAM, {"report": "{}"}, id=f"{(int(seconds) - 90) * 1000}-0")
            stream.xadd(INGEST_STREAM, {"report": "{}"}, id=f"{(int(seconds) - 5) * 1000}-0")
            lag = value(scrape(client), "fleetfix_ingest_lag_seconds", broker="central")
            assert 90 <= lag < 100  # the oldest entry's age, not the newest one's

            oldest = stream.xrange(INGEST_STREAM, count=1)[0][0]
            stream.xdel(INGEST_STREAM, oldest)  # what an ingester does once the entry's batch committed
            assert 5 <= value(scrape(client), "fleetfix_ingest_lag_seconds", broker="central") < 15
    finally:
        create_celery("memory://")
        stream.close()


def test_a_real_worker_reports_when_it_last_finished_a_task(
    integration_pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    truncate_all(integration_pg_url)
    port = free_port()
    env = base_env(
        FLEETFIX_DATABASE_URL=integration_pg_url,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path),
        FLEETFIX_METRICS_PORT=str(port),
    )
    producer = create_celery(redis_url)
    try:
        with FleetfixProcess(["worker", "--concurrency", "1"], env, tmp_path / "worker.log") as worker:
            worker.wait_for_output("ready.")
            url = f"http://127.0.0.1:{port}/metrics"
            assert not _worker_samples(url)  # no task finished yet: no heartbeat

            sent_at = time.time()
            producer.send_task("remediator.admit_waiting", queue=REMEDIATE_QUEUE)
            beat = wait_until(lambda: _worker_samples(url), 30, "a heartbeat on the worker's /metrics", worker)
            assert set(beat) == {"remediate"}
            assert sent_at - 1 <= beat["remediate"] <= time.time()
    finally:
        create_celery("memory://")


def _worker_samples(url: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    body = httpx.get(url, timeout=5).text
    samples: Samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    return {
        dict(labels)["queue"]: count
        for (name, labels), count in samples.items()
        if name == "fleetfix_worker_last_task_timestamp_seconds"
    }
