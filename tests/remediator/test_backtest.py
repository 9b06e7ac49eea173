"""Backtest: stored reports replayed through a rule pack, acting on nothing."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db import Database
from remediator.backtest import backtest
from remediator.ingest import ingest
from remediator.models import Decision, Remediation
from remediator.rules import load_ruleset
from tests.builders.reports import T0, edac_report

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
        session.scalar(select(func.count()).select_from(Remediation)),
        session.scalar(select(func.count()).select_from(Decision)),
    )
    result = backtest(session, load_ruleset([pack]), since=at(-3600))
    assert result.hosts == 2
    assert result.reports == 3 + 2  # bt-1: a state, its last repeat, the change; bt-2: a state and its last repeat
    [hit] = result.by_rule()["ce-above-5"]
    assert (hit.hostname, hit.first_at, hit.peak) == ("bt-1", at(240), 10.0)  # 600 over 60 s, not over 240 s
    assert "dimm-ce-storm" not in result.by_rule()  # one minute at 10/s is not sustained (for: 30s)
    after = (
        session.scalar(select(func.count()).select_from(Remediation)),
        session.scalar(select(func.count()).select_from(Decision)),
    )
    assert after == before


def test_cli_backtest(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "FLEETFIX_DATA_DIR": str(tmp_path)}
    assert subprocess.run([sys.executable, "-m", "api", "db", "upgrade"], env=env, capture_output=True).returncode == 0
    database = Database(f"sqlite:///{tmp_path / 'fleetfix.db'}")
    with database.session() as session:
        store_history(session)
    database.dispose()
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    done = subprocess.run(
        [sys.executable, "-m", "api", "rules", "backtest", str(pack), "--since", "3650d"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "ce-above-5: 1 host(s)" in done.stdout
    assert "bt-1" in done.stdout
    assert "peak 10" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "api", "rules", "backtest", str(pack), "--since", "lately"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "--since 'lately'" in bad.stderr
