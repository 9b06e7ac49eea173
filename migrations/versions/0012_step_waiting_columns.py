"""a step's waiting state in typed columns, the deadline sweep on an index of the waiting steps

What a running step waits for, its deadline, when its host said it started and when its silent host
was power-cycled were keys of the step's `result` JSON (`awaiting`, `deadline`, `accepted_at`,
`power_cycled.at`); the sweep had to lock every running remediation to read them. They become
columns, the waiting steps a partial index on (`awaiting`, `deadline`). Existing rows are converted: the values are
copied out of the JSON (the `power_cycled` record, with its command log, stays there) and the three
keys that are now columns are taken out of it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 10:00:00
"""

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

import core.db

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MOVED = ("awaiting", "deadline", "accepted_at")
AWAITING = ("host", "first_report")
BATCH = 1000

steps = sa.table(
    "remediation_steps",
    sa.column("id", sa.Integer()),
    sa.column("state", sa.String()),
    sa.column("result", core.db.JSONDoc),
    sa.column("awaiting", sa.String()),
    sa.column("deadline", core.db.UTCDateTime(timezone=True)),
    sa.column("accepted_at", core.db.UTCDateTime(timezone=True)),
    sa.column("power_cycled_at", core.db.UTCDateTime(timezone=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("remediation_steps") as batch:
        batch.add_column(
            sa.Column(
                "awaiting",
                sa.Enum(*AWAITING, name="step_awaiting", native_enum=False, create_constraint=True, length=32),
                nullable=True,
            )
        )
        batch.add_column(sa.Column("deadline", core.db.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("accepted_at", core.db.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("power_cycled_at", core.db.UTCDateTime(timezone=True), nullable=True))
    waiting = sa.text("awaiting IS NOT NULL")
    op.create_index(
        "ix_remediation_steps_waiting",
        "remediation_steps",
        ["awaiting", "deadline"],
        postgresql_where=waiting,
        sqlite_where=waiting,
    )
    bind = op.get_bind()
    now = dt.datetime.now(dt.UTC)
    for row in _rows(bind, _with_waiting_keys(bind.dialect.name)):
        bind.execute(steps.update().where(steps.c.id == row.id).values(**_columns_of(row.state, row.result, now)))


def downgrade() -> None:
    bind = op.get_bind()
    filled = sa.or_(*(steps.c[name].is_not(None) for name in (*MOVED, "power_cycled_at")))
    for row in _rows(bind, filled, steps.c.awaiting, steps.c.deadline, steps.c.accepted_at):
        back = {
            "awaiting": row.awaiting,
            "deadline": row.deadline.isoformat() if row.deadline else None,
            "accepted_at": row.accepted_at.isoformat() if row.accepted_at else None,
        }
        result = {**(row.result or {}), **{k: v for k, v in back.items() if v is not None}}
        bind.execute(steps.update().where(steps.c.id == row.id).values(result=result))
    op.drop_index("ix_remediation_steps_waiting", table_name="remediation_steps")
    with op.batch_alter_table("remediation_steps") as batch:
        batch.drop_constraint(op.f("ck_remediation_steps_step_awaiting"), type_="check")
        for name in ("power_cycled_at", "accepted_at", "deadline", "awaiting"):
            batch.drop_column(name)


def _with_waiting_keys(dialect: str) -> sa.ColumnElement[bool]:
    """Rows whose result holds a key that becomes a column: every step ever handed to a host or a BMC."""
    keys = (*MOVED, "power_cycled")
    if dialect == "postgresql":
        return sa.text("result ?| array[" + ", ".join(f"'{k}'" for k in keys) + "]")
    return sa.or_(*(sa.func.json_extract(steps.c.result, f"$.{k}").is_not(None) for k in keys))


def _rows(bind: sa.Connection, where: sa.ColumnElement[bool], *extra: sa.ColumnElement[Any]) -> Iterator[Any]:
    """The matching rows in id order, a batch at a time (each batch read before it is updated)."""
    last = 0
    while True:
        batch = bind.execute(
            sa.select(steps.c.id, steps.c.state, steps.c.result, *extra)
            .where(where, steps.c.id > last)
            .order_by(steps.c.id)
            .limit(BATCH)
        ).all()
        if not batch:
            return
        yield from batch
        last = batch[-1].id


def _columns_of(state: str, stored: dict[str, Any] | None, now: dt.datetime) -> dict[str, Any]:
    """The columns' values from a step's result, and the result without the keys that moved."""
    result = dict(stored or {})
    awaiting = result.pop("awaiting", None)
    deadline = _when(result.pop("deadline", None))
    claimed = result.pop("accepted_at", None)
    accepted_at = _when(claimed)
    if claimed is not None and accepted_at is None:
        # The host's own word was kept as it came; where it is no timestamp, the start was still taken.
        accepted_at = _when(result.get("sent_at")) or now
    cycled = result.get("power_cycled")
    power_cycled_at = (_when(cycled.get("at")) or now) if isinstance(cycled, dict) else None
    waits = awaiting if state == "running" and awaiting in AWAITING else None
    if waits is not None and deadline is None:
        deadline = now  # a waiting step with no readable deadline: the next sweep decides
    return {
        "result": result,
        "awaiting": waits,
        "deadline": deadline,
        "accepted_at": accepted_at,
        "power_cycled_at": power_cycled_at,
    }


def _when(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
