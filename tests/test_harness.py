"""The suite itself: with PostgreSQL or Redis down the run fails at once with a
message saying how to start it; it never skips quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("FLEETFIX_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:1/test", "pg_ctlcluster"),
        ("FLEETFIX_TEST_REDIS_URL", "redis://127.0.0.1:1/0", "redis-server --daemonize yes"),
    ],
)
def test_missing_service_fails_the_run(variable: str, value: str, message: str) -> None:
    import os

    env = {**os.environ, variable: value}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/remediator/test_signals.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert "not reachable" in done.stdout + done.stderr
    assert message in done.stdout + done.stderr
    assert "passed" not in done.stdout
