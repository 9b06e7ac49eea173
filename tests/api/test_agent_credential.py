"""The agent's HTTP fallback against a real `fleetfix api` process: its host token posts its own reports only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from checker.agent.delivery import Delivery
from checker.agent.spool import Spool
from core.auth import issue_token
from core.db import Database
from core.models import Role
from core.queue import create_celery
from remediator.models import Host
from tests.builders.reports import edac_report, payload
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, free_port, wait_until

DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1: delivery falls back to HTTP


@pytest.fixture
def central(integration_pg_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Database]]:
    truncate_all(integration_pg_url)
    port = free_port()
    env = base_env(
        FLEETFIX_DATABASE_URL=integration_pg_url,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path),
        FLEETFIX_API_PORT=str(port),
    )
    database = wired(Database(integration_pg_url))
    with FleetfixProcess(["api"], env, tmp_path / "api.log") as api:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool | None:
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200 or None
            except httpx.TransportError:
                return None

        wait_until(up, 30, "/healthz", api)
        yield base, database
    database.dispose()


def test_host_token_posts_its_own_report_and_not_another_hosts(central: tuple[str, Database], tmp_path: Path) -> None:
    base, database = central
    with database.session() as session:
        _, own = issue_token(session, name="agent-1", role=Role.viewer, hostname="agent-1")
    dead = create_celery(DEAD_BROKER, make_current=False)  # later tests send on the current app
    delivery = Delivery(dead, spool=Spool(tmp_path / "spool-1", 10), fallback_url=base, token=own)
    assert delivery.deliver(payload(edac_report("agent-1"))) == "http"
    # The same credential used for another host's report is refused (403): the report waits in the spool.
    assert delivery.deliver(payload(edac_report("agent-2"))) == "spool"
    # No credential at all (401): spooled too, never lost.
    anonymous = Delivery(dead, spool=Spool(tmp_path / "spool-2", 10), fallback_url=base)
    assert anonymous.deliver(payload(edac_report("agent-3"))) == "spool"
    with database.session() as session:
        assert list(session.scalars(select(Host.hostname))) == ["agent-1"]
