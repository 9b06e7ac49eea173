"""alerts: the Slack alert outbox and the messages grouped from it

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import core.db

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = (
    "ticket_opened",
    "remediation_failed",
    "remediation_escalated",
    "rule_paused",
    "approval_waiting",
    "host_unreachable",
)


def _kind() -> sa.Enum:
    return sa.Enum(*KINDS, name="alert_kind", native_enum=False, create_constraint=True, length=32)


def upgrade() -> None:
    json_doc = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=80), nullable=False),
        sa.Column("kind", _kind(), nullable=False),
        sa.Column(
            "severity",
            sa.Enum(
                "info",
                "warning",
                "critical",
                name="alert_severity",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("digest", json_doc, nullable=False),
        sa.Column("first_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "pending",
                "sent",
                "failed",
                name="alert_delivery_state",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("claimed_until", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
    )
    op.create_index("ix_alert_deliveries_channel_sent", "alert_deliveries", ["channel", "sent_at"], unique=False)
    op.create_index("ix_alert_deliveries_state_next", "alert_deliveries", ["state", "next_attempt_at"], unique=False)
    op.create_table(
        "alert_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", _kind(), nullable=False),
        sa.Column("object_type", sa.String(length=64), nullable=False),
        sa.Column("object_id", sa.String(length=253), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("detail", json_doc, nullable=False),
        sa.Column("created_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["alert_deliveries.id"],
            name=op.f("fk_alert_outbox_delivery_id_alert_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_outbox")),
    )
    op.create_index(op.f("ix_alert_outbox_delivery_id"), "alert_outbox", ["delivery_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alert_outbox_delivery_id"), table_name="alert_outbox")
    op.drop_table("alert_outbox")
    op.drop_index("ix_alert_deliveries_state_next", table_name="alert_deliveries")
    op.drop_index("ix_alert_deliveries_channel_sent", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
