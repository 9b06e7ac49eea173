"""Real Celery workers consuming from real Redis, against real PostgreSQL.

No eager mode: each test starts `fleetfix worker` / `fleetfix agent` as a
process and sends tasks through the broker the way production does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Producer
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import make_engine
from core.queue import INGEST_QUEUE, create_celery
from remediator.models import Host, Remediation, RemediationState
from tests.conftest import truncate_all
from tests.factories import T0, edac_report, payload
from tests.processes import FleetfixProcess, base_env, wait_until
from ticketing.models import Ticket


@pytest.fixture
def it_db(integration_pg_url: str) -> str:
    truncate_all(integration_pg_url)
    return integration_pg_url


@pytest.fixture
def central_worker(it_db: str, redis_url: str, tmp_path: Path) -> Iterator[FleetfixProcess]:
    env = base_env(FLEETFIX_DATABASE_URL=it_db, FLEETFIX_BROKER_URL=redis_url, FLEETFIX_DATA_DIR=str(tmp_path))
    with FleetfixProcess(["worker", "--concurrency", "1"], env, tmp_path / "worker.log") as worker:
        worker.wait_for_output("ready.")
        yield worker


def query(url: str, fn):  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            return fn(session)
    finally:
        engine.dispose()


def test_reports_through_redis_become_a_ticket(central_worker: FleetfixProcess, it_db: str, redis_url: str) -> None:
    producer = create_celery(redis_url)
    producer.send_task(
        "remediator.ingest_reports", args=[[payload(edac_report("w-1", ce=0, at=T0))]], queue=INGEST_QUEUE
    )
    later = T0 + dt.timedelta(seconds=60)
    producer.send_task(
        "remediator.ingest_reports", args=[[payload(edac_report("w-1", ce=4800, at=later))]], queue=INGEST_QUEUE
    )

    def ticket() -> Ticket | None:
        return query(it_db, lambda s: s.scalars(select(Ticket)).one_or_none())

    found = wait_until(ticket, 30, "a ticket", central_worker)
    assert (found.hostname, found.part_type) == ("w-1", "dimm")
    remediation = query(it_db, lambda s: s.scalars(select(Remediation)).one())
    assert remediation.state == RemediationState.escalated
    assert "remediator.run_remediation" in central_worker.output()


def test_pickle_is_refused_by_the_worker(central_worker: FleetfixProcess, it_db: str, redis_url: str) -> None:
    with Connection(redis_url) as conn:
        producer = Producer(conn.channel(), exchange=Exchange("fleetfix", type="direct"), routing_key=INGEST_QUEUE)
        producer.publish(
            [[payload(edac_report("pickled-1"))], {}, {}],
            serializer="pickle",
            headers={"task": "remediator.ingest_reports", "id": "pickle-1", "lang": "py"},
        )
    producer_app = create_celery(redis_url)
    producer_app.send_task("remediator.ingest_reports", args=[[payload(edac_report("json-1"))]], queue=INGEST_QUEUE)
    wait_until(
        lambda: query(it_db, lambda s: s.scalars(select(Host).where(Host.hostname == "json-1")).one_or_none()),
        30,
        "the JSON report",
        central_worker,
    )
    assert query(it_db, lambda s: s.scalars(select(Host).where(Host.hostname == "pickled-1")).one_or_none()) is None
    central_worker.wait_for_output("Refusing to deserialize untrusted content of type pickle")


def test_agent_consumes_its_host_queue_and_reports(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path
) -> None:
    env = base_env(
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path / "agent"),
        FLEETFIX_REPORT_INTERVAL_S="5",
    )
    with FleetfixProcess(["agent", "--hostname", "agent-it-1"], env, tmp_path / "agent.log") as agent:
        agent.wait_for_output("ready.")
        host = wait_until(
            lambda: query(it_db, lambda s: s.scalars(select(Host).where(Host.hostname == "agent-it-1")).one_or_none()),
            30,
            "the agent's first report",
            agent,
        )
        assert host.last_report_at is not None
        app = create_celery(redis_url)
        queues = app.control.inspect(destination=["agent@agent-it-1"], timeout=5).active_queues() or {}
        assert [q["name"] for q in queues["agent@agent-it-1"]] == ["host.agent-it-1"]
