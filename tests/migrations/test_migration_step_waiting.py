"""Migration 0012 on a database with remediations in it, on PostgreSQL and SQLite: a step's waiting state
moves out of its result JSON into typed columns, and back on a downgrade."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import JSON, Boolean, DateTime, Engine, Integer, MetaData, String, Table, Text, create_engine, text

from migrations import alembic_config, check, upgrade

SENT = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)

STEPS: dict[str, tuple[str, dict[str, Any]]] = {
    # a host action on its way, started by its host
    "on_host": (
        "running",
        {
            "awaiting": "host",
            "envelope_id": "e-1",
            "timeout_s": 900,
            "sent_at": SENT.isoformat(),
            "expires_at": (SENT + dt.timedelta(minutes=5)).isoformat(),
            "deadline": (SENT + dt.timedelta(minutes=16)).isoformat(),
            "accepted_at": (SENT + dt.timedelta(seconds=3)).isoformat(),
        },
    ),
    # a reinstall waiting for its host's first report from the new image
    "reimage": (
        "running",
        {
            "awaiting": "first_report",
            "boot_id_before": "b-1",
            "since": SENT.isoformat(),
            "deadline": (SENT + dt.timedelta(hours=2)).isoformat(),
            "commands": [],
        },
    ),
    # done: power-cycled once, its start notice carrying no timestamp the central side could read
    "cycled": (
        "failed",
        {
            "envelope_id": "e-3",
            "sent_at": SENT.isoformat(),
            "deadline": (SENT + dt.timedelta(minutes=31)).isoformat(),
            "accepted_at": "x",
            "power_cycled": {"at": (SENT + dt.timedelta(minutes=16)).isoformat(), "power": "cycle", "commands": []},
            "error": "no result from h1 by …",
        },
    ),
    "ticket": ("succeeded", {"ticket_id": 4, "created": True}),
}


def filled(table: Table, **values: Any) -> dict[str, Any]:
    """A row for `table` as 0011 has it: the values given, and a plain one for every other required column."""
    plain = {Integer: 0, String: "", Text: "", Boolean: False, JSON: {}, DateTime: SENT}
    row = dict(values)
    for column in table.columns:
        if column.name in row or column.nullable or column.primary_key or column.server_default is not None:
            continue
        row[column.name] = next(v for kind, v in plain.items() if isinstance(column.type, kind))
    return row


def seed(engine: Engine) -> dict[str, int]:
    tables = MetaData()
    tables.reflect(engine, only=["hosts", "remediations", "remediation_steps"])
    hosts, remediations, steps = (tables.tables[n] for n in ("hosts", "remediations", "remediation_steps"))
    ids = {}
    with engine.begin() as conn:
        conn.execute(hosts.insert().values(filled(hosts, id=1, hostname="h1", state="remediating")))
        conn.execute(remediations.insert().values(filled(remediations, id=1, host_id=1, state="running")))
        for index, (name, (state, result)) in enumerate(STEPS.items()):
            row = filled(steps, id=index + 1, remediation_id=1, index=index, action=name, state=state, result=result)
            conn.execute(steps.insert().values(row))
            ids[name] = index + 1
    return ids


def columns(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT action, awaiting, deadline, accepted_at, power_cycled_at, result FROM remediation_steps "
                "ORDER BY id"
            )
        ).all()
    return {action: (awaiting, *(_utc(v) for v in times), _doc(result)) for action, awaiting, *times, result in rows}


def _utc(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _doc(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_waiting_state_moves_into_columns_and_back(dialect: str, tmp_path: Path) -> None:
    from tests.conftest import _create_database, _drop_database

    name = f"fleetfix_waiting_{uuid.uuid4().hex[:8]}"
    url = _create_database(name) if dialect == "postgresql" else f"sqlite:///{tmp_path / 'waiting.db'}"
    engine = create_engine(url)
    try:
        upgrade(url, "0011")
        seed(engine)
        upgrade(url)
        check(url)
        after = columns(engine)
        on_host, reimage, cycled, ticket = (after[n] for n in STEPS)
        assert on_host[:5] == (
            "host",
            SENT + dt.timedelta(minutes=16),
            SENT + dt.timedelta(seconds=3),
            None,
            {k: v for k, v in STEPS["on_host"][1].items() if k not in ("awaiting", "deadline", "accepted_at")},
        )
        assert reimage[:4] == ("first_report", SENT + dt.timedelta(hours=2), None, None)
        assert set(reimage[4]) == {"boot_id_before", "since", "commands"}
        # a finished step waits for nothing; an unreadable start notice still counts as a start (sent_at)
        assert cycled[:4] == (None, SENT + dt.timedelta(minutes=31), SENT, SENT + dt.timedelta(minutes=16))
        assert cycled[4]["power_cycled"]["power"] == "cycle"  # the record, with its log, stays
        assert not {"accepted_at", "deadline"} & set(cycled[4])
        assert ticket == (None, None, None, None, {"ticket_id": 4, "created": True})

        command.downgrade(alembic_config(url), "0011")
        before = columns_0011(engine)
        assert before["on_host"]["awaiting"] == "host"
        assert _utc(before["on_host"]["deadline"]) == SENT + dt.timedelta(minutes=16)
        assert _utc(before["cycled"]["accepted_at"]) == SENT  # what the columns held
        assert before["ticket"] == {"ticket_id": 4, "created": True}
        upgrade(url)  # and up again: the same columns
        assert columns(engine)["on_host"][:3] == on_host[:3]
    finally:
        engine.dispose()
        if dialect == "postgresql":
            _drop_database(name)


def columns_0011(engine: Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT action, result FROM remediation_steps ORDER BY id")).all()
    return {action: _doc(result) for action, result in rows}
