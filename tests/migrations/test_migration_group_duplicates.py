"""Migration 0015 on a database holding duplicate open tickets for one rack's cooling and for one switch (the
group tickets older code keyed by their first host), on PostgreSQL and SQLite: the most advanced of each group
stays open (a repair done, then one under way, then the oldest: second review of repair-reopen, finding 3),
the others are cancelled as its duplicates with a comment on it naming their assignees, their hosts and
heard_from merged into its evidence; other tickets are untouched."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, MetaData, create_engine, text

from migrations import check, upgrade
from tests.migrations.test_migration_step_waiting import filled

TICKETS = (  # id, dedup_key, part_type, rack, part, state, assignee
    (1, "h1:rack_airflow:rack r12", "rack_airflow", "r12", "rack r12", "claimed", "alice"),
    (2, "h2:rack_airflow:rack r12", "rack_airflow", "r12", "rack r12", "open", None),
    (3, "h3:rack_airflow:rack r13", "rack_airflow", "r13", "rack r13", "open", None),  # another rack
    (4, "h4:switch:switch tor1", "switch", "r07", "switch tor1", "open", None),
    (5, "h5:switch:switch tor1", "switch", "r08", "switch tor1", "verifying", "bob"),  # its repair is done
    (6, "h6:rack_airflow:rack r12", "rack_airflow", "r12", "rack r12", "closed", None),  # closed: not a duplicate
    (7, "h7:airflow:host", "airflow", "r12", "host", "open", None),  # a host's own
    (
        8,
        "h8:rack_airflow:rack r12",
        "rack_airflow",
        "r12",
        "rack r12",
        "in_progress",
        "carol",
    ),  # under way too: the older is kept
)
EVIDENCE: dict[int, dict[str, Any]] = {
    4: {
        "switch_errors": {"hosts": [{"hostname": "h4", "ports": {"p0": 3}}]},
        "heard_from": [{"host": "h4", "subjects": ["p0"]}],
    },
    5: {
        "switch_errors": {"hosts": [{"hostname": "h5", "ports": {"p1": 9}}]},
        "heard_from": [{"host": "h5", "subjects": ["p1"]}],
    },
}


def seed(engine: Engine) -> None:
    tables = MetaData()
    tables.reflect(engine, only=["tickets"])
    tickets = tables.tables["tickets"]
    with engine.begin() as conn:
        for ticket_id, key, part_type, rack, part, state, assignee in TICKETS:
            open_key = None if state == "closed" else key
            row = filled(
                tickets,
                id=ticket_id,
                dedup_key=key,
                open_key=open_key,
                hostname=key.split(":")[0],
                datacenter="ams1",
                rack=rack,
                part_type=part_type,
                part=part,
                state=state,
                assignee=assignee,
                evidence=EVIDENCE.get(ticket_id, {}),
                version=3,
            )
            conn.execute(tickets.insert().values(row))


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_duplicate_open_group_tickets_are_cancelled_but_the_most_advanced(dialect: str, tmp_path: Path) -> None:
    from tests.conftest import _create_database, _drop_database

    name = f"fleetfix_groups_{uuid.uuid4().hex[:8]}"
    url = _create_database(name) if dialect == "postgresql" else f"sqlite:///{tmp_path / 'groups.db'}"
    engine = create_engine(url)
    try:
        upgrade(url, "0014")
        seed(engine)
        upgrade(url, "0015")
        upgrade(url)  # the later revisions (0016: pending power-cycle steps only) leave tickets as they are
        check(url)
        with engine.connect() as conn:
            states = conn.execute(text("SELECT id, state, open_key IS NULL, version FROM tickets ORDER BY id")).all()
            found = conn.execute(text("SELECT ticket_id, actor, kind, note FROM ticket_events ORDER BY id")).all()
            evidence_of_5 = conn.execute(text("SELECT evidence FROM tickets WHERE id = 5")).scalar_one()
        assert [tuple(row) for row in states] == [
            (1, "claimed", False, 3),
            (2, "cancelled", True, 4),
            (3, "open", False, 3),
            (4, "cancelled", True, 4),
            (5, "verifying", False, 3),
            (6, "closed", True, 3),
            (7, "open", False, 3),
            (8, "cancelled", True, 4),
        ]
        kept = "one open ticket per group (the most advanced is kept)"
        assert [tuple(row) for row in found] == [
            (2, "system:migration", "cancelled", f"duplicate of #1: {kept}"),
            (8, "system:migration", "cancelled", f"duplicate of #1: {kept}"),
            (
                1,
                "system:migration",
                "comment",
                "#2, #8 (assigned to carol) cancelled as duplicates of this ticket: one open ticket per group",
            ),
            (4, "system:migration", "cancelled", f"duplicate of #5: {kept}"),
            (5, "system:migration", "comment", "#4 cancelled as duplicates of this ticket: one open ticket per group"),
        ]
        evidence = json.loads(str(evidence_of_5)) if isinstance(evidence_of_5, str) else evidence_of_5
        assert [h["hostname"] for h in evidence["switch_errors"]["hosts"]] == ["h4", "h5"]
        assert evidence["heard_from"] == [{"host": "h4", "subjects": ["p0"]}, {"host": "h5", "subjects": ["p1"]}]
    finally:
        engine.dispose()
        if dialect == "postgresql":
            _drop_database(name)
