"""The Redis ingest stream: batches per transaction, at-least-once delivery, nothing lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from core.db import Database
from core.queue import INGEST_GROUP, INGEST_STREAM, create_celery
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.rules import RuleRegistry
from remediator.stream import StreamIngester, publish_report
from tests.builders.reports import edac_report
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, wait_until


@pytest.fixture
def it_database(integration_pg_url: str, celery_app: object) -> Iterator[Database]:
    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    yield database
    database.dispose()


@pytest.fixture
def client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def publish(client: redis.Redis, count: int, prefix: str = "s") -> None:
    for i in range(count):
        publish_report(client, edac_report(f"{prefix}-{i:04d}").model_dump_json())


def stored(database: Database) -> tuple[int, int]:
    with Session(database.engine) as session:
        hosts = session.scalar(select(func.count()).select_from(Host)) or 0
        batches = session.scalar(select(func.count(distinct(ReportRow.received_at)))) or 0
    return hosts, batches


def pending(client: redis.Redis) -> int:
    return int(client.xpending(INGEST_STREAM, INGEST_GROUP)["pending"])


def test_batches_are_ingested_and_acknowledged(it_database: Database, client: redis.Redis, redis_url: str) -> None:
    publish(client, 1200)
    ingester = StreamIngester(redis_url, it_database, RuleRegistry(), batch=500, block_ms=100)
    ingester.ensure_group()
    assert [ingester.run_once() for _ in range(4)] == [500, 500, 200, 0]
    assert stored(it_database) == (1200, 3)  # three transactions
    assert client.xlen(INGEST_STREAM) == 0
    assert pending(client) == 0


def test_a_dead_consumers_batch_is_claimed_and_stored_once(
    it_database: Database, client: redis.Redis, redis_url: str
) -> None:
    publish(client, 50)
    dying = StreamIngester(redis_url, it_database, RuleRegistry(), consumer="dying", batch=50, block_ms=100)
    dying.ensure_group()
    dying.backlog = False
    assert len(dying._read()) == 50  # read, then the process dies before committing
    assert pending(client) == 50
    survivor = StreamIngester(redis_url, it_database, RuleRegistry(), consumer="survivor", claim_idle_s=0)
    assert survivor.run_once() == 50
    assert stored(it_database)[0] == 50
    assert pending(client) == 0
    # the dying consumer comes back and reads its old pending list: nothing is left, nothing is stored twice
    dying.backlog = True
    assert dying.run_once() == 0
    with Session(it_database.engine) as session:
        assert session.scalar(select(func.count()).select_from(ReportRow)) == 50


def test_database_outage_leaves_entries_pending_until_it_is_back(
    it_database: Database, client: redis.Redis, redis_url: str
) -> None:
    publish(client, 20)
    down = Database("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    ingester = StreamIngester(redis_url, down, RuleRegistry(), block_ms=100)
    ingester.stopping.set()  # do not wait out the back-off in a test
    ingester.ensure_group()
    assert ingester.run_once() == 0
    assert pending(client) == 20
    ingester.database = it_database
    assert ingester.run_once() == 20  # the pending backlog first
    assert stored(it_database)[0] == 20
    assert pending(client) == 0
    down.dispose()


def test_malformed_entries_are_refused_not_stuck(it_database: Database, client: redis.Redis, redis_url: str) -> None:
    publish_report(client, '{"schema_version": 1, "host": {}}')
    publish_report(client, "not json at all")
    publish(client, 3)
    ingester = StreamIngester(redis_url, it_database, RuleRegistry(), block_ms=100)
    ingester.ensure_group()
    assert ingester.run_once() == 5
    assert stored(it_database)[0] == 3
    assert pending(client) == 0


def test_ingester_process(integration_pg_url: str, client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    truncate_all(integration_pg_url)
    env = base_env(
        FLEETFIX_DATABASE_URL=integration_pg_url, FLEETFIX_BROKER_URL=redis_url, FLEETFIX_DATA_DIR=str(tmp_path)
    )
    with FleetfixProcess(["ingester"], env, tmp_path / "ingester.log") as ingester:
        ingester.wait_for_output("remediator.stream.started")
        publish(client, 300, prefix="p")
        database = Database(integration_pg_url)
        wait_until(lambda: stored(database)[0] == 300 or None, 30, "300 hosts", ingester)
        database.dispose()
        ingester.stop()
        assert ingester.proc.returncode == 0
    memory_only = base_env(FLEETFIX_DATA_DIR=str(tmp_path))
    with FleetfixProcess(["ingester"], memory_only, tmp_path / "refused.log") as refused:
        refused.proc.wait(30)
        assert refused.proc.returncode == 2
        assert "needs a Redis broker" in refused.output()
    create_celery("memory://")  # leave the default app as the other tests expect


def test_ingester_survives_its_stream_vanishing(it_database: Database, client: redis.Redis, redis_url: str) -> None:
    """Redis restarted without persistence: the stream and the group are gone; the ingester goes on."""
    ingester = StreamIngester(redis_url, it_database, RuleRegistry(), block_ms=100)
    ingester.ensure_group()
    client.delete(INGEST_STREAM)
    publish(client, 3)  # a new stream, without the group
    runner = threading.Thread(target=ingester.run)
    runner.start()
    try:
        wait_until(lambda: stored(it_database)[0] == 3 or None, 20, "the reports after the stream vanished")
    finally:
        ingester.stop()
        runner.join(10)
    assert not runner.is_alive()
