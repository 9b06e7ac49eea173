"""rollouts as rows: one per rule, hardware class and change, and the remediations its waves started

A rule with `safety.rollout` went in waves computed on the fly from its remediations; a halt was
the rule's breaker. A rollout now has a row (`rollouts`: its change, state, waves, bake, the halt's
reason and ticket, the last comparison of its health signals) and its hosts are the remediations
that point at it (`remediations.rollout_id`). Remediations started before this revision point at
none: a rollout under way when it is applied begins again at its canary with the next firing
(its hosts already changed no longer fire).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import core.db

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("running", "halted", "paused", "completed")


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.String(length=128), nullable=False),
        sa.Column("hardware_class", sa.String(length=64), nullable=False),
        sa.Column("change", sa.String(length=256), nullable=False),
        sa.Column("part_type", sa.String(length=32), nullable=False),
        sa.Column(
            "state",
            sa.Enum(*STATES, name="rollout_state", native_enum=False, create_constraint=True, length=32),
            nullable=False,
        ),
        sa.Column("waves", core.db.JSONDoc, nullable=False),
        sa.Column("bake_s", sa.Double(), nullable=False),
        sa.Column("current_wave", sa.Integer(), nullable=False),
        sa.Column("halt_reason", sa.Text(), nullable=False),
        sa.Column("halted_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("halted_by", sa.String(length=128), nullable=False),
        sa.Column("resumed_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("ticket_id", sa.Integer(), nullable=True),
        sa.Column("comparison", core.db.JSONDoc, nullable=False),
        sa.Column("compared_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollouts")),
        sa.UniqueConstraint(
            "rule_id", "hardware_class", "change", name=op.f("uq_rollouts_rule_id_hardware_class_change")
        ),
    )
    with op.batch_alter_table("remediations") as batch:
        batch.add_column(sa.Column("rollout_id", sa.Integer(), nullable=True))
        batch.create_index(batch.f("ix_remediations_rollout_id"), ["rollout_id"], unique=False)
        batch.create_foreign_key(
            batch.f("fk_remediations_rollout_id_rollouts"), "rollouts", ["rollout_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.drop_constraint(batch.f("fk_remediations_rollout_id_rollouts"), type_="foreignkey")
        batch.drop_index(batch.f("ix_remediations_rollout_id"))
        batch.drop_column("rollout_id")
    op.drop_table("rollouts")
