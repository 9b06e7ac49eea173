"""Test harness: the machine's real PostgreSQL and Redis, and SQLite beside them.

Per run, fresh PostgreSQL databases are created and built by the real
migrations: one for tests that run in a rolled-back transaction, one for
integration tests whose worker processes need committed rows. If PostgreSQL
or Redis cannot be reached the run stops at once and says how to start them.

The tests mirror the packages: tests/core, tests/checker, tests/remediator, tests/cyborg,
tests/ticketing (tests/ticketing/notify for ticketing/notify), tests/api (tests/web for api/web),
tests/migrations. What stays at this level drives the whole system or the suite itself, not one
package: test_loop (report to ticket through every stage in-process), test_workers (real worker
and agent processes on real Redis and PostgreSQL), test_embedded (`fleetfix up` as one process),
test_docs (the README, compose file and docs against the code), test_quality (the static checks)
and test_harness (the run stopping when a service is down). tests/decisions (the default pack's
decision table through snapshots and ingest) and tests/ops (deployment) are whole-system too.

Builders of domain objects live in tests/builders/; a test module never imports another.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from api.settings import CentralSettings
from core.db import Base, Database, make_engine
from core.queue import create_celery
from migrations import upgrade

PG_ADMIN_URL = os.environ.get("FLEETFIX_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("FLEETFIX_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
START_POSTGRES = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
START_REDIS = (
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no '
    "--dir /var/lib/redis --logfile /var/log/redis/ci.log"
)
REPO = Path(__file__).resolve().parent.parent


def require_services(pg_url: str = PG_ADMIN_URL, redis_url: str = REDIS_URL) -> None:
    """Exit the run (non-zero, not a skip) when a service the suite needs is down."""
    try:
        engine = create_engine(pg_url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as error:
        pytest.exit(
            f"PostgreSQL is not reachable at {make_url(pg_url).render_as_string(hide_password=True)} "
            f"({type(error).__name__}). Start it with:\n  {START_POSTGRES}\n"
            "or point FLEETFIX_TEST_DATABASE_URL at a server where this user may CREATE DATABASE.",
            returncode=3,
        )
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping()
    except Exception as error:
        pytest.exit(
            f"Redis is not reachable at {redis_url} ({type(error).__name__}). Start it with:\n  {START_REDIS}\n"
            "or point FLEETFIX_TEST_REDIS_URL at a running Redis.",
            returncode=3,
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    require_services()
    # The test database of Redis is this run's: messages a killed earlier run left in its queues
    # (tasks for rows that no longer exist, queue depths that are not this run's) go first.
    redis.Redis.from_url(REDIS_URL).flushdb()


def _create_database(name: str) -> str:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _drop_database(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


RUN_ID = uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def celery_app():  # type: ignore[no-untyped-def]
    """An app on the in-process broker, so code under test that sends tasks after a commit can."""
    return create_celery("memory://", include=("remediator.tasks",))


@pytest.fixture(autouse=True)
def _current_celery_app_restored(celery_app: Any) -> Iterator[None]:
    """Whatever app a test made current (a dead broker's, a real Redis'), the next test starts
    from the in-process one: code that sends after a commit uses the current app."""
    yield
    celery_app.set_current()
    celery_app.set_default()


@pytest.fixture(autouse=True)
def _capacity_class_cache_cleared() -> None:
    """The class-median cache (remediator/capacity_class.py) holds host ids of a database every test rolls
    back: a class cached by one test must not stand for another test's class of the same name."""
    from remediator import capacity_class

    capacity_class.clear_cache()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    name = f"fleetfix_test_{RUN_ID}"
    url = _create_database(name)
    upgrade(url)
    yield url
    _drop_database(name)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'fleetfix.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def engines(pg_url: str, sqlite_url: str) -> Iterator[dict[str, Engine]]:
    built = {"postgresql": make_engine(pg_url), "sqlite": make_engine(sqlite_url)}
    yield built
    for engine in built.values():
        engine.dispose()


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest, engines: dict[str, Engine], celery_app: object) -> Iterator[Database]:
    """A Database whose every session runs inside one transaction that is rolled back after the test, inside
    a central runtime as a process's root builds one (tests/builders/runtime.py): the in-process app's tasks
    and the database's sessions find it; cyborg's executor runs the scheduler's hooks only, as in a process
    that started no worker."""
    from tests.builders.runtime import central

    engine = engines[request.param]
    with engine.connect() as connection:
        transaction = connection.begin()
        database = Database.bound_to(engine, connection)
        central(database, celery_app)
        try:
            yield database
        finally:
            transaction.rollback()


@pytest.fixture
def session(db: Database) -> Iterator[Session]:
    with db.sessionmaker() as session:
        yield session


@pytest.fixture(scope="session")
def integration_pg_url() -> Iterator[str]:
    """A database for tests whose worker processes must see committed rows."""
    name = f"fleetfix_it_{RUN_ID}"
    url = _create_database(name)
    upgrade(url)
    yield url
    _drop_database(name)


def truncate_all(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    return REDIS_URL


def samples_dir() -> Path:
    """The shared corpus of real tool outputs, read in place."""
    value = os.environ.get("FLEETFIX_TEST_SAMPLES")
    if not value or not Path(value).is_dir():
        pytest.fail(
            "FLEETFIX_TEST_SAMPLES must name the folder of real tool outputs (the sibling shared/fixtures); "
            f"got {value!r}"
        )
    return Path(value)


# Cyborg's central executor as a worker installs it, on settings of the test's own: the hand-off tests
# of tests/cyborg (test_handoff, test_lost_results, test_security) and of tests/remediator
# (test_draining, test_runner_stop) share these.


@pytest.fixture
def settings(tmp_path: Path) -> CentralSettings:
    """Settings of the test's own (the action signing key in its temporary directory)."""
    return CentralSettings(data_dir=tmp_path, scheduler_hooks={})


@pytest.fixture
def cyborg_installed(settings: CentralSettings, db: Database) -> dict[str, Any]:
    """The test's runtime as a worker's root builds it: cyborg's executor runs every action; a test may
    script actions into the dict it returns."""
    from cyborg.central import CentralCyborg
    from tests.builders.runtime import rewire
    from tests.cyborg.fakes import ScriptedCyborg

    scripted = ScriptedCyborg(CentralCyborg(settings))
    rewire(db, settings=settings, cyborg=scripted)
    return scripted.scripts
