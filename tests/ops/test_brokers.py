"""Brokers past one Redis: a datacenter with its own broker, and RabbitMQ as that broker.

Real processes throughout: the central side's broker is the machine's Redis; datacenter sjc2's is
RabbitMQ (a vhost of this run's own). An agent of sjc2 reports through it as Celery tasks (the
Redis stream exists only on Redis), `fleetfix worker --datacenter sjc2` consumes them, and a host
task sent from the central side reaches the agent through sjc2's broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, select

from core.db import Database
from core.queue import CENTRAL_QUEUES, create_celery, host_signature, queue_depths
from remediator.models import Host
from remediator.models import Report as ReportRow
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, wait_until


def reports_of(url: str, hostname: str) -> int:
    database = wired(Database(url))
    try:
        with database.sessionmaker() as session:
            return int(
                session.scalar(
                    select(func.coalesce(func.sum(ReportRow.repeats + 1), 0))
                    .join(Host)
                    .where(Host.hostname == hostname)
                )
            )
    finally:
        database.dispose()


def test_agent_and_worker_of_a_datacenter_on_rabbitmq(
    integration_pg_url: str, redis_url: str, amqp_url: str, tmp_path: Path
) -> None:
    truncate_all(integration_pg_url)
    brokers = json.dumps({"sjc2": amqp_url})
    central = base_env(
        FLEETFIX_DATABASE_URL=integration_pg_url,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATACENTER_BROKERS=brokers,
        FLEETFIX_DATA_DIR=str(tmp_path / "central"),
    )
    agent_env = base_env(
        FLEETFIX_BROKER_URL=amqp_url,
        FLEETFIX_DATA_DIR=str(tmp_path / "agent"),
        FLEETFIX_AGENT_STATE_DIR=str(tmp_path / "agent-state"),
        FLEETFIX_AGENT_DRIVER="simulated",
        FLEETFIX_REPORT_INTERVAL_S="3600",  # one report at start, the rest on request
    )
    with (
        FleetfixProcess(
            ["worker", "--datacenter", "sjc2", "--concurrency", "1"], central, tmp_path / "worker.log"
        ) as worker,
        FleetfixProcess(["agent", "--hostname", "sjc2-rmq-1"], agent_env, tmp_path / "agent.log") as agent,
    ):
        worker.wait_for_output("ready.", timeout=60)
        assert "amqp://" in worker.output()  # it consumes sjc2's broker, not BROKER_URL
        agent.wait_for_output("ready.", timeout=60)
        wait_until(lambda: reports_of(integration_pg_url, "sjc2-rmq-1") >= 1, 60, "the agent's first report", agent)

        # the central side, on Redis, reaches the sjc2 host through sjc2's broker
        app = create_celery(redis_url, datacenter_brokers={"sjc2": amqp_url})
        try:
            host_signature(app, "sjc2-rmq-1", "checker.run_check_now", datacenter="sjc2").apply_async()
        finally:
            create_celery("memory://")
        wait_until(lambda: reports_of(integration_pg_url, "sjc2-rmq-1") >= 2, 60, "a report on request", agent)

        # queue depths read from RabbitMQ, as /metrics reports them
        depths = queue_depths(amqp_url)
        assert set(depths) == set(CENTRAL_QUEUES)
        assert all(count >= 0 for count in depths.values())


def test_an_unknown_datacenter_is_refused_by_name(tmp_path: Path) -> None:
    env = base_env(
        FLEETFIX_BROKER_URL="redis://127.0.0.1:6379/0",
        FLEETFIX_DATACENTER_BROKERS='{"sjc2": "amqp://guest:guest@127.0.0.1:5672//"}',
        FLEETFIX_DATA_DIR=str(tmp_path),
    )
    for command in (["worker", "--datacenter", "fra9"], ["ingester", "--datacenter", "fra9"]):
        done = subprocess.run(
            [sys.executable, "-m", "api", *command], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert "--datacenter fra9: FLEETFIX_DATACENTER_BROKERS names no such datacenter (sjc2)" in done.stderr


def test_a_datacenter_broker_must_be_a_real_broker_url(tmp_path: Path) -> None:
    env = base_env(FLEETFIX_DATACENTER_BROKERS='{"sjc2": "memory://"}', FLEETFIX_DATA_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "api", "worker"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "FLEETFIX_DATACENTER_BROKERS" in done.stderr
    assert "sjc2: must be a redis://, rediss://, amqp:// or amqps:// URL" in done.stderr
