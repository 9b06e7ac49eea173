"""Backtest: stored reports replayed through a rule pack, acting on nothing."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func
from sqlalchemy import select as query
from sqlalchemy.orm import Session

from core.db import Database
from remediator.backtest import backtest
from remediator.ingest import ingest
from remediator.models import Decision, Remediation
from remediator.rules import load_ruleset
from tests.builders.reports import T0, edac_report
from tests.conftest import truncate_all

PACK = """\
version: 1
rules:
  - id: ce-above-5
    description: a lower threshold than the default pack's, to see what it would have hit
    when: {signal: dimm_ce_rate, op: ">=", value: 5}
    plan: [{action: ticket}]
"""


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def store_history(session: Session) -> None:
    quiet = load_ruleset([])
    # four identical reports (stored once, repeated three times), then 600 more CEs in the last minute
    for i in range(4):
        ingest(session, [edac_report("bt-1", ce=100, at=at(60 * i))], ruleset=quiet)
    ingest(session, [edac_report("bt-1", ce=700, at=at(240))], ruleset=quiet)
    # another host that never moves
    for i in range(5):
        ingest(session, [edac_report("bt-2", ce=3, at=at(60 * i))], ruleset=quiet)


def test_replay_uses_the_last_repeat_and_writes_nothing(session: Session, tmp_path: Path) -> None:
    store_history(session)
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    before = (
        session.scalar(query(func.count()).select_from(Remediation)),
        session.scalar(query(func.count()).select_from(Decision)),
    )
    result = backtest(session, load_ruleset([pack]), since=at(-3600))
    assert result.hosts == 2
    assert result.reports == 3 + 2  # bt-1: a state, its last repeat, the change; bt-2: a state and its last repeat
    [hit] = result.by_rule()["ce-above-5"]
    assert (hit.hostname, hit.first_at, hit.peak) == ("bt-1", at(240), 10.0)  # 600 over 60 s, not over 240 s
    assert "dimm-ce-storm" not in result.by_rule()  # one minute at 10/s is not sustained (for: 30s)
    after = (
        session.scalar(query(func.count()).select_from(Remediation)),
        session.scalar(query(func.count()).select_from(Decision)),
    )
    assert after == before


def cli(*args: str, env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "api", *args], env=env, capture_output=True, text=True, **kwargs)


@pytest.fixture
def stored(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An embedded database holding store_history's reports, and a pack with ce-above-5."""
    env = {"PATH": "/usr/bin:/bin", "FLEETFIX_DATA_DIR": str(tmp_path)}
    assert cli("db", "upgrade", env=env).returncode == 0
    database = Database(f"sqlite:///{tmp_path / 'fleetfix.db'}")
    with database.session() as session:
        store_history(session)
    database.dispose()
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    return env, pack


def test_cli_backtest(stored: tuple[dict[str, str], Path]) -> None:
    env, pack = stored
    done = cli("rules", "backtest", str(pack), "--since", "3650d", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar when stderr is no terminal
    lines = done.stdout.splitlines()
    at = lines.index("ce-above-5: 1 host(s)")
    [row] = [line for line in lines[at:] if line.startswith("bt-1 ")]
    assert row.split()[1:] == [at_text(240), at_text(240), "1", "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", "10"]
    assert "bt-2" not in done.stdout  # it never moved: no rule hit it
    assert "dimm-ce-storm" not in done.stdout  # a default-pack rule that hit no host is counted, not listed
    assert lines[-2].startswith("replayed 5 reports (3 stored rows) of 2 hosts since ")
    assert lines[-1].startswith("1 of ")
    assert "rules would have fired, on 1 host(s)" in lines[-1]
    bad = cli("rules", "backtest", str(pack), "--since", "lately", env=env)
    assert bad.returncode == 1
    assert "--since 'lately'" in bad.stderr


def at_text(seconds: float) -> str:
    return at(seconds).isoformat(timespec="seconds")


def test_cli_backtest_writes_json_and_csv(stored: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, pack = stored
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    hits = tmp_path / "hits.csv"
    done = cli("rules", "backtest", str(pack), "--since", "3650d", "--json", str(one), "--csv", str(hits), env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(one.read_text())
    assert (doc["hosts"], doc["rows"], doc["reports"]) == (2, 3, 5)
    rules = {rule["id"]: rule for rule in doc["rules"]}
    assert len(rules) == len(load_ruleset([pack]).rules)  # every rule, hit or not
    assert rules["dimm-ce-storm"] == {"id": "dimm-ce-storm", "hosts": 0, "hits": []}
    assert rules["ce-above-5"]["hits"] == [
        {
            "hostname": "bt-1",
            "first_at": at(240).isoformat(),
            "last_at": at(240).isoformat(),
            "firings": 1,
            "subject": "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
            "peak": 10.0,
        }
    ]
    with hits.open(newline="") as rows:
        assert list(csv.reader(rows)) == [
            ["rule_id", "hostname", "first_at", "last_at", "firings", "subject", "peak"],
            [
                "ce-above-5",
                "bt-1",
                at(240).isoformat(),
                at(240).isoformat(),
                "1",
                "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
                "10.0",
            ],
        ]
    # on SQLite `--workers 2` replays in the one process (its transactions lock the file): the same result
    done = cli("rules", "backtest", str(pack), "--since", "3650d", "--workers", "2", "--json", str(two), env=env)
    assert done.returncode == 0, done.stderr
    assert {**json.loads(two.read_text()), "elapsed_s": 0, "since": 0} == {**doc, "elapsed_s": 0, "since": 0}
    unwritable = cli(
        "rules", "backtest", str(pack), "--since", "3650d", "--csv", str(tmp_path / "no" / "x.csv"), env=env
    )
    assert unwritable.returncode == 2
    assert "x.csv: No such file or directory" in unwritable.stderr


def test_cli_backtest_workers_on_postgresql(integration_pg_url: str, tmp_path: Path) -> None:
    """Two worker processes, started by `python -m api` (which they import again), find what one finds."""
    truncate_all(integration_pg_url)
    database = Database(integration_pg_url)
    with database.session() as session:
        store_history(session)
    database.dispose()
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    env = {"PATH": "/usr/bin:/bin", "FLEETFIX_DATA_DIR": str(tmp_path), "FLEETFIX_DATABASE_URL": integration_pg_url}
    docs = []
    for workers in ("1", "2"):
        out = tmp_path / f"workers-{workers}.json"
        args = ("rules", "backtest", str(pack), "--since", "3650d", "--workers", workers, "--json", str(out))
        done = cli(*args, env=env)
        assert done.returncode == 0, done.stderr
        docs.append({**json.loads(out.read_text()), "elapsed_s": 0, "since": 0})  # run times and clocks differ
    assert docs[0] == docs[1]
    assert (docs[0]["hosts"], docs[0]["reports"]) == (2, 5)
    assert [rule["hosts"] for rule in docs[0]["rules"] if rule["id"] == "ce-above-5"] == [1]


def test_cli_backtest_shows_progress_on_a_terminal(stored: tuple[dict[str, str], Path]) -> None:
    env, pack = stored
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "api", "rules", "backtest", str(pack), "--since", "3650d"],
            env={**env, "TERM": "xterm", "COLUMNS": "120"},
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
        )
        os.close(terminal)
        shown = b""
        while select.select([controller], [], [], 0.5)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0
    assert b"replaying stored reports" in shown
    assert "ce-above-5: 1 host(s)" in done.stdout  # the result still goes to stdout, unmixed
    assert "replaying" not in done.stdout
