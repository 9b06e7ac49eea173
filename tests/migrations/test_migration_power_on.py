"""Migration 0016 on a database with remediations in it, on PostgreSQL and SQLite: a pending power_cycle step
of a host-powered-off remediation planned before `if_off` gets `if_off: power_on` (review r2 finding 5); a
step that ran, another rule's step, and a step that names its own `if_off` are left as they were."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, MetaData, create_engine, text

from cyborg.actions import ACTIONS, PowerCycleParams
from migrations import alembic_config, check, upgrade
from tests.migrations.test_migration_step_waiting import filled

STEPS: list[tuple[str, str, str, dict[str, Any]]] = [  # rule, step action, step state, params as planned
    ("host-powered-off", "power_cycle", "pending", {"priority": 2}),  # planned before if_off: turned on
    ("host-powered-off", "power_cycle", "pending", {}),
    ("host-powered-off", "power_cycle", "succeeded", {"priority": 2}),  # ran already: history stays
    ("host-powered-off", "power_cycle", "pending", {"if_off": "refuse"}),  # someone's own choice
    ("host-hung", "power_cycle", "pending", {"priority": 2}),  # a hung host keeps the refusing default
    ("host-powered-off", "ticket", "pending", {"part_type": "host"}),
]


def seed(engine: Engine) -> None:
    tables = MetaData()
    tables.reflect(engine, only=["hosts", "remediations", "remediation_steps"])
    hosts, remediations, steps = (tables.tables[n] for n in ("hosts", "remediations", "remediation_steps"))
    with engine.begin() as conn:
        conn.execute(hosts.insert().values(filled(hosts, id=1, hostname="h1", state="unreachable")))
        for n, (rule, action, state, params) in enumerate(STEPS, start=1):
            conn.execute(
                remediations.insert().values(filled(remediations, id=n, host_id=1, rule_id=rule, state="detected"))
            )
            row = filled(steps, id=n, remediation_id=n, index=0, action=action, state=state, params=params)
            conn.execute(steps.insert().values(row))


def params(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT params FROM remediation_steps ORDER BY id")).scalars().all()
    return [json.loads(p) if isinstance(p, str) else dict(p) for p in rows]


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_pending_host_powered_off_steps_turn_the_host_on(dialect: str, tmp_path: Path) -> None:
    from tests.conftest import _create_database, _drop_database

    name = f"fleetfix_power_on_{uuid.uuid4().hex[:8]}"
    url = _create_database(name) if dialect == "postgresql" else f"sqlite:///{tmp_path / 'power_on.db'}"
    engine = create_engine(url)
    try:
        upgrade(url, "0015")
        seed(engine)
        upgrade(url, "0016")
        after = params(engine)
        assert after == [
            {"priority": 2, "if_off": "power_on"},
            {"if_off": "power_on"},
            {"priority": 2},
            {"if_off": "refuse"},
            {"priority": 2},
            {"part_type": "host"},
        ]
        parsed = ACTIONS["power_cycle"].parse(after[0])  # what cyborg's executor makes of it
        assert isinstance(parsed, PowerCycleParams)
        assert parsed.if_off == "power_on"
        upgrade(url, "head")
        check(url)
        command.downgrade(alembic_config(url), "0015")
        upgrade(url, "0016")  # a second run changes nothing
        assert params(engine) == after
    finally:
        engine.dispose()
        if dialect == "postgresql":
            _drop_database(name)
