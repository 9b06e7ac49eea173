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
from core.queue import INGEST_QUEUE, create_celery, host_queue, host_signature
from remediator.models import Host, Remediation, RemediationState
from tests.builders.reports import edac_report, payload, storm_reports
from tests.builders.runtime import wired
from tests.conftest import truncate_all
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
    for report in storm_reports("w-1"):  # one message each, in order
        producer.send_task("remediator.ingest_reports", args=[[payload(report)]], queue=INGEST_QUEUE)

    def ticket() -> Ticket | None:
        return query(it_db, lambda s: s.scalars(select(Ticket)).one_or_none())

    found = wait_until(ticket, 30, "a ticket", central_worker)
    assert (found.hostname, found.part_type) == ("w-1", "dimm")
    remediation = query(it_db, lambda s: s.scalars(select(Remediation)).one())
    assert remediation.state == RemediationState.escalated
    assert "remediator.run_remediation" in central_worker.output()


def test_single_report_messages_are_consumed_in_batches(
    central_worker: FleetfixProcess, it_db: str, redis_url: str
) -> None:
    """What agents send: one report per message; the worker stores them a batch per transaction."""
    producer = create_celery(redis_url)
    with producer.producer_or_acquire() as publisher:
        for i in range(600):
            producer.send_task(
                "remediator.ingest_report",
                args=[payload(edac_report(f"agent-{i:04d}"))],
                queue=INGEST_QUEUE,
                producer=publisher,
            )

    def hosts() -> int:
        from sqlalchemy import func

        return query(it_db, lambda s: s.scalar(select(func.count()).select_from(Host)))

    wait_until(lambda: hosts() == 600, 60, "600 hosts", central_worker)
    # Each ingest transaction stamps its whole batch with one received_at.
    from sqlalchemy import distinct, func

    from remediator.models import Report

    transactions = query(it_db, lambda s: s.scalar(select(func.count(distinct(Report.received_at)))))
    assert 0 < transactions <= 600 / 4, transactions


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


def reports_of(url: str, hostname: str) -> int:
    from sqlalchemy import func

    from remediator.models import Report

    # every report counts: a stored observation state plus its repeats
    return query(
        url,
        lambda s: s.scalar(
            select(func.coalesce(func.sum(Report.repeats + 1), 0)).join(Host).where(Host.hostname == hostname)
        ),
    )


def test_agent_reports_and_runs_host_tasks_that_have_not_expired(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path
) -> None:
    env = base_env(
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path / "agent"),
        FLEETFIX_AGENT_STATE_DIR=str(tmp_path / "agent-state"),
        FLEETFIX_REPORT_INTERVAL_S="3600",  # one report at start; the rest only on request
    )
    central = base_env(FLEETFIX_DATABASE_URL=it_db, FLEETFIX_BROKER_URL=redis_url, FLEETFIX_DATA_DIR=str(tmp_path))
    with (
        FleetfixProcess(["ingester"], central, tmp_path / "ingester.log") as ingester,
        FleetfixProcess(["agent", "--hostname", "agent-it-1"], env, tmp_path / "agent.log") as agent,
    ):
        ingester.wait_for_output("remediator.stream.started")
        agent.wait_for_output("ready.")
        wait_until(lambda: reports_of(it_db, "agent-it-1") == 1, 30, "the agent's first report", agent)
        app = create_celery(redis_url)
        queues = app.control.inspect(destination=["agent@agent-it-1"], timeout=5).active_queues() or {}
        assert [q["name"] for q in queues["agent@agent-it-1"]] == ["host.agent-it-1"]

        host_signature(app, "agent-it-1", "checker.run_check_now").apply_async()
        wait_until(lambda: reports_of(it_db, "agent-it-1") == 2, 30, "a report on request", agent)

        stale = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        app.send_task("checker.run_check_now", queue=host_queue("agent-it-1"), expires=stale)
        agent.wait_for_output("Discarding revoked task: checker.run_check_now")
        host_signature(app, "agent-it-1", "checker.run_check_now").apply_async()
        wait_until(lambda: reports_of(it_db, "agent-it-1") == 3, 30, "the next report", agent)
        assert reports_of(it_db, "agent-it-1") == 3  # the expired task ran nothing

        # the central service sets the agent's schedule: every 5 s from now on
        from core.db import Database
        from remediator import operations

        create_celery(redis_url)
        database = wired(Database(it_db))
        with database.session() as session:
            operations.set_report_interval(session, "agent-it-1", 5, actor="test", reason="watch closely")
        database.dispose()
        agent.wait_for_output("checker.agent.rescheduled")
        wait_until(lambda: reports_of(it_db, "agent-it-1") >= 5, 30, "reports every 5 s", agent)


def test_scheduler_marks_silent_hosts_unreachable(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path
) -> None:
    engine = make_engine(it_db)
    with Session(engine) as session, session.begin():
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
        session.add(Host(hostname="silent-1", last_report_at=long_ago, report_interval_s=60))
        session.add(Host(hostname="fresh-1", last_report_at=dt.datetime.now(dt.UTC), report_interval_s=60))
    engine.dispose()
    env = base_env(
        FLEETFIX_DATABASE_URL=it_db,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path / "beat"),
        FLEETFIX_REPORT_INTERVAL_S="5",
    )
    with FleetfixProcess(["scheduler"], env, tmp_path / "beat.log") as beat:

        def state_of(name: str) -> str:
            return query(it_db, lambda s: s.scalars(select(Host.state).where(Host.hostname == name)).one())

        # unreachable; a worker looks from outside: no BMC address is configured and the name does not
        # answer a ping, so nothing proves the host is hung and nothing is power-cycled: a person
        wait_until(lambda: state_of("silent-1") == "awaiting_repair", 40, "silent-1 handed to a person", beat)
        assert state_of("fresh-1") == "in_service"
        chain = query(
            it_db,
            lambda s: [
                (r.rule_id, [step.action for step in r.steps], r.state.value, r.evidence["signal"]["detail"]["verdict"])
                for r in s.scalars(select(Remediation).order_by(Remediation.id))
            ],
        )
        assert chain == [("host-unreachable-unconfirmed", ["ticket"], "escalated", "unconfirmed")]
        assert "Sending due task mark-unreachable" in beat.output()


def test_api_process_serves_against_postgresql_and_redis(it_db: str, redis_url: str, tmp_path: Path) -> None:
    import httpx

    from tests.processes import free_port

    port = free_port()
    env = base_env(
        FLEETFIX_DATABASE_URL=it_db,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path),
        FLEETFIX_API_PORT=str(port),
    )
    with FleetfixProcess(["api"], env, tmp_path / "api.log") as api:
        base = f"http://127.0.0.1:{port}"

        def ready() -> dict[str, object] | None:
            try:
                response = httpx.get(f"{base}/readyz", timeout=2)
            except httpx.TransportError:
                return None
            return response.json() if response.status_code == 200 else None

        body = wait_until(ready, 30, "/readyz", api)
        assert body["checks"] == {"database": "ok", "broker": "ok"}
        from core.auth import issue_token
        from core.models import Role

        with Session(make_engine(it_db)) as session, session.begin():
            _, raw = issue_token(session, name="it", role=Role.operator)
        auth = {"Authorization": f"Bearer {raw}"}
        assert httpx.post(f"{base}/api/v1/reports", json=payload(edac_report("api-1"))).status_code == 401
        posted = httpx.post(f"{base}/api/v1/reports", json=payload(edac_report("api-1")), headers=auth)
        assert posted.status_code == 200
        hosts = httpx.get(f"{base}/api/v1/hosts", headers=auth).json()["items"]
        assert [h["hostname"] for h in hosts] == ["api-1"]
