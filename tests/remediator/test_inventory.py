"""Inventory CSV: where hosts stand, refused row by row with line numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.inventory import InventoryError, apply_inventory, parse_csv
from remediator.models import Host

CSV = """\
hostname,hardware_class,datacenter,row,rack,slot,cluster,labels
web-001,compute-skx-2s,ams1,r01,ams1-rack001,U12,web,role=web;tier=1
db-001,storage-epyc-1s,sjc2,r04,sjc2-rack040,U3,db,
"""


def test_parse_and_apply(session: Session) -> None:
    rows = parse_csv(CSV)
    assert rows[0].labels == {"role": "web", "tier": "1"}
    assert apply_inventory(session, rows, actor="test") == (2, 0)
    host = session.scalars(select(Host).where(Host.hostname == "web-001")).one()
    assert (host.datacenter, host.rack, host.slot) == ("ams1", "ams1-rack001", "U12")
    moved = parse_csv(CSV.replace("U12", "U14"))
    assert apply_inventory(session, moved, actor="test") == (0, 1)
    assert host.slot == "U14"


def test_bad_rows_named_by_line() -> None:
    text = CSV + "bad host!,x,ams1,,,,,\nweb-002,x,ams1,,,,,noequals\n"
    with pytest.raises(InventoryError) as caught:
        parse_csv(text, source="inv.csv")
    message = str(caught.value)
    assert "inv.csv:4: hostname" in message
    assert "inv.csv:5: labels" in message


def test_a_host_on_two_lines_is_refused_with_both_lines() -> None:
    with pytest.raises(InventoryError) as caught:
        parse_csv(CSV + "web-001,compute-skx-2s,ams1,r01,ams1-rack001,U14,web,\n", source="inv.csv")
    assert str(caught.value) == "inv.csv:4: hostname: 'web-001' is also on line 2"


def test_apply_refuses_a_host_twice_and_changes_nothing(session: Session) -> None:
    from core.errors import InvalidInput

    rows = parse_csv(CSV)
    with pytest.raises(InvalidInput, match=r"2\.hostname: 'web-001' is also row 0"):
        apply_inventory(session, [*rows, rows[0]], actor="test")
    assert session.scalars(select(Host)).all() == []


def test_unknown_column_refused() -> None:
    with pytest.raises(InventoryError, match="unknown column"):
        parse_csv("hostname,colour\nweb-1,red\n")


def test_cli_import(tmp_path: Path) -> None:
    csv_file = tmp_path / "inv.csv"
    csv_file.write_text(CSV)
    env = {"PATH": "/usr/bin:/bin", "FLEETFIX_DATA_DIR": str(tmp_path)}
    migrate = subprocess.run([sys.executable, "-m", "api", "db", "upgrade"], env=env, capture_output=True, text=True)
    assert migrate.returncode == 0, migrate.stderr
    done = subprocess.run(
        [sys.executable, "-m", "api", "hosts", "import", str(csv_file)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "2 hosts: 2 created, 0 updated" in done.stdout
    csv_file.write_text("hostname\n-bad\n")
    bad = subprocess.run(
        [sys.executable, "-m", "api", "hosts", "import", str(csv_file)], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert f"{csv_file}:2: hostname" in bad.stderr
