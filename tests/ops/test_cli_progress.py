"""Progress of long CLI work (core/progress.py): `fleetfix db prune`, `fleetfix hosts import` and
`fleetfix snapshot` show a rich display on a terminal, and print exactly what they printed before plus
a summary line when their output goes to a file or a pipe.

The commands run as real processes (their output really is not a terminal); the terminal case gives
the process a pseudo-terminal for stderr.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from checker.agent.cli import app as agent_cli
from core.progress import Tracker, tracked
from remediator.models import Host, Signal

ESCAPE = "\x1b"
CSV = "hostname,datacenter,rack\nweb-1,ams1,r1\nweb-2,ams1,r2\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A fleetfix on an SQLite database of its own, migrated."""
    environment = {"PATH": "/usr/bin:/bin", "FLEETFIX_DATA_DIR": str(tmp_path), "COLUMNS": "120", "TERM": "xterm"}
    migrate = subprocess.run(
        [sys.executable, "-m", "api", "db", "upgrade"], env=environment, capture_output=True, text=True, check=False
    )
    assert migrate.returncode == 0, migrate.stderr
    return environment


def fleetfix(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "api", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


def test_hosts_import_prints_its_lines_and_a_true_summary_and_no_progress(env: dict[str, str], tmp_path: Path) -> None:
    inventory = tmp_path / "inv.csv"
    inventory.write_text(CSV)
    first = fleetfix(env, "hosts", "import", str(inventory))
    lines = first.stdout.splitlines()
    assert lines[0] == "2 hosts: 2 created, 0 updated"  # the line it printed before
    assert re.fullmatch(
        rf"imported {re.escape(str(inventory))} in \d+\.\d s: 2 rows, 2 created, 0 updated, 0 unchanged", lines[1]
    )
    assert len(lines) == 2
    assert first.stderr == ""
    assert ESCAPE not in first.stdout + first.stderr

    inventory.write_text(CSV.replace("web-2,ams1,r2", "web-2,ams1,r9") + "web-3,sjc2,r1\n")
    second = fleetfix(env, "hosts", "import", str(inventory)).stdout.splitlines()
    assert second[0] == "3 hosts: 1 created, 1 updated"
    assert second[1].endswith(": 3 rows, 1 created, 1 updated, 1 unchanged")


def test_db_prune_prints_its_lines_and_a_true_summary(env: dict[str, str], tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    engine = create_engine(f"sqlite:///{tmp_path / 'fleetfix.db'}")
    with Session(engine) as session, session.begin():
        host = Host(hostname="old-1")
        session.add(host)
        session.flush()
        for days_ago in (40, 35, 31, 1):
            session.add(Signal(host_id=host.id, kind="dimm_ce_rate", observed_at=now - dt.timedelta(days=days_ago)))
    engine.dispose()

    dry = fleetfix(env, "db", "prune", "--dry-run", "--days", "30").stdout.splitlines()
    assert dry[1:4] == [
        "  partitions created: none",
        "  partitions dropped: none",
        "  report rows deleted: 0; signals deleted: 3",
    ]
    assert re.fullmatch(
        r"dry run in \d+\.\d s, nothing changed; it would be: 0 partitions created, 0 dropped, "
        r"0 report rows and 3 signals deleted",
        dry[4],
    )
    done = fleetfix(env, "db", "prune", "--days", "30")
    lines = done.stdout.splitlines()
    assert lines[0].endswith("(did):")
    assert len(lines) == 5
    assert re.fullmatch(
        r"pruned in \d+\.\d s: 0 partitions created, 0 dropped, 0 report rows and 3 signals deleted", lines[4]
    )
    assert ESCAPE not in done.stdout + done.stderr
    again = fleetfix(env, "db", "prune", "--days", "30").stdout.splitlines()
    assert again[4].endswith(
        ": 0 partitions created, 0 dropped, 0 report rows and 0 signals deleted"
    )  # the 1-day-old one stays


def test_on_a_terminal_the_progress_shows_on_stderr_and_stdout_is_the_same(env: dict[str, str], tmp_path: Path) -> None:
    inventory = tmp_path / "inv.csv"
    inventory.write_text(CSV)
    controller, terminal = pty.openpty()
    shown = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other end closed
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    done = subprocess.run(
        [sys.executable, "-m", "api", "hosts", "import", str(inventory)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=terminal,
        text=True,
        timeout=120,
        check=False,
    )
    os.close(terminal)
    reader.join(10)
    os.close(controller)
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == "2 hosts: 2 created, 0 updated"
    assert ESCAPE not in done.stdout
    text = shown.decode(errors="replace")
    assert "importing inv.csv" in text  # the display, on the terminal
    assert ESCAPE in text


def test_the_snapshot_command_prints_only_its_summary_when_not_a_terminal(tmp_path: Path) -> None:
    snap = tmp_path / "here"
    result = CliRunner().invoke(agent_cli, ["snapshot", str(snap), "--hostname", "this-host"])
    assert result.exit_code == 0, result.output
    [line] = result.output.splitlines()
    match = re.fullmatch(rf"snapshot of this-host in {re.escape(str(snap))}: (\d+) files, (\d+) commands \(.+\)", line)
    assert match, line
    assert int(match.group(1)) > 0
    assert (snap / "root").is_dir()
    assert int(match.group(2)) == len(json.loads((snap / "commands.json").read_text()))
    assert ESCAPE not in result.output


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_display_is_drawn_only_for_a_terminal() -> None:
    quiet = io.StringIO()
    with tracked("working", total=3, stream=quiet) as progress:
        progress.advance()
        progress.stage("storing")
    assert type(progress) is Tracker
    assert quiet.getvalue() == ""

    terminal = _Terminal()
    with tracked("working", total=3, stream=terminal) as progress:
        progress.advance(3)
    assert type(progress) is not Tracker
    assert "working" in terminal.getvalue()
