"""Fixtures of the operations tests: a second Redis (a datacenter's own broker) and RabbitMQ.

RabbitMQ is the alternative broker; when it cannot be reached the run stops with the command that
starts it, as it does for PostgreSQL and Redis (tests/conftest.py). Each run gets its own vhost,
so queues left by one run never reach another.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu.connection import Connection

from tests.conftest import RUN_ID
from tests.processes import free_port, wait_until

AMQP_URL = os.environ.get("FLEETFIX_TEST_AMQP_URL", "")
AMQP_DEFAULT = "amqp://guest:guest@127.0.0.1:5672"
START_RABBITMQ = "rabbitmq-server -detached"


def _amqp_reachable(url: str) -> None:
    try:
        with Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
    except Exception as error:
        pytest.exit(
            f"RabbitMQ is not reachable at {url} ({type(error).__name__}: {error}). Start it with:\n"
            f"  {START_RABBITMQ}\nor point FLEETFIX_TEST_AMQP_URL at a vhost this run may use.",
            returncode=3,
        )


def _rabbitmqctl(*args: str) -> None:
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        pytest.exit(
            "rabbitmqctl is not installed: it creates this run's vhost. Install rabbitmq-server, "
            "or point FLEETFIX_TEST_AMQP_URL at a vhost this run may use.",
            returncode=3,
        )
    subprocess.run([tool, "-q", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def amqp_url() -> Iterator[str]:
    """A RabbitMQ vhost of this run's own (or FLEETFIX_TEST_AMQP_URL as given)."""
    if AMQP_URL:
        _amqp_reachable(AMQP_URL)
        yield AMQP_URL
        return
    _amqp_reachable(f"{AMQP_DEFAULT}//")
    vhost = f"fleetfix-test-{RUN_ID}"
    _rabbitmqctl("add_vhost", vhost)
    _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    try:
        yield f"{AMQP_DEFAULT}/{vhost}"
    finally:
        _rabbitmqctl("delete_vhost", vhost)


@pytest.fixture
def second_redis(tmp_path: Path) -> Iterator[str]:
    """Another Redis server on its own port: a datacenter's broker."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        def up() -> bool:
            try:
                return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
            except redis.ConnectionError:
                return False

        wait_until(up, 10, f"redis-server on port {port}")
        yield url
    finally:
        server.terminate()
        server.wait(10)
