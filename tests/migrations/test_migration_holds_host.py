"""Migration 0014 on a database with tickets in it, on PostgreSQL and SQLite: every ticket holds its host
as before, except a halted rollout's ticket for the change's owners; and down again."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, MetaData, create_engine, text

from migrations import alembic_config, check, upgrade
from tests.migrations.test_migration_step_waiting import filled


def seed(engine: Engine) -> None:
    tables = MetaData()
    tables.reflect(engine, only=["tickets", "rollouts"])
    tickets, rollouts = tables.tables["tickets"], tables.tables["rollouts"]
    with engine.begin() as conn:
        for ticket_id, part_type in ((1, "dimm"), (2, "kernel")):
            conn.execute(
                tickets.insert().values(filled(tickets, id=ticket_id, hostname="h1", part_type=part_type, state="open"))
            )
        row = filled(rollouts, id=1, state="halted", ticket_id=2, waves=[1, "100%"], comparison=[], bake_s=0.0)
        conn.execute(rollouts.insert().values(row))


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_existing_tickets_hold_their_host_but_a_rollouts_does_not(dialect: str, tmp_path: Path) -> None:
    from tests.conftest import _create_database, _drop_database

    name = f"fleetfix_holds_{uuid.uuid4().hex[:8]}"
    url = _create_database(name) if dialect == "postgresql" else f"sqlite:///{tmp_path / 'holds.db'}"
    engine = create_engine(url)
    try:
        upgrade(url, "0013")
        seed(engine)
        upgrade(url, "0014")
        with engine.connect() as conn:
            held = dict(conn.execute(text("SELECT part_type, holds_host FROM tickets ORDER BY id")).all())
        assert held == {"dimm": True, "kernel": False}
        upgrade(url, "head")  # the later revisions (0015: data only) leave these tickets as 0014 set them
        check(url)
        with engine.connect() as conn:
            assert dict(conn.execute(text("SELECT part_type, holds_host FROM tickets ORDER BY id")).all()) == held
        command.downgrade(alembic_config(url), "0013")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM tickets")).scalar() == 2
    finally:
        engine.dispose()
        if dialect == "postgresql":
            _drop_database(name)
