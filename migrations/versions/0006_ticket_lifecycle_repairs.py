"""tickets: lifecycle timestamps, repair history, external tracker links

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import core.db

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tickets") as batch_op:
        batch_op.add_column(sa.Column("reopened", sa.Integer(), server_default=sa.text("0"), nullable=False))
        batch_op.add_column(sa.Column("claimed_at", core.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("resolved_at", core.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("verify_started_at", core.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("verify_until", core.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_detected_at", core.db.UTCDateTime(timezone=True), nullable=True))
    op.create_table(
        "ticket_repairs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("ticket_id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=253), nullable=False),
        sa.Column("datacenter", sa.String(length=64), nullable=False),
        sa.Column("part_type", sa.String(length=32), nullable=False),
        sa.Column("part", sa.String(length=256), nullable=False),
        sa.Column("vendor", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("old_serial", sa.String(length=128), nullable=False),
        sa.Column("new_serial", sa.String(length=128), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("replaced_by", sa.String(length=128), nullable=False),
        sa.Column("replaced_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("verified_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("returned_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["ticket_id"], ["tickets.id"], name=op.f("fk_ticket_repairs_ticket_id_tickets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ticket_repairs")),
    )
    op.create_index("ix_ticket_repairs_part", "ticket_repairs", ["part_type", "vendor", "model"], unique=False)
    op.create_index(op.f("ix_ticket_repairs_replaced_at"), "ticket_repairs", ["replaced_at"], unique=False)
    op.create_index(op.f("ix_ticket_repairs_ticket_id"), "ticket_repairs", ["ticket_id"], unique=False)
    op.create_table(
        "ticket_tracker_links",
        sa.Column("ticket_id", sa.Integer(), nullable=False),
        sa.Column("tracker", sa.String(length=32), nullable=False),
        sa.Column("external_key", sa.String(length=64), nullable=True),
        sa.Column("external_url", sa.String(length=512), nullable=False),
        sa.Column("synced_event_id", sa.Integer(), nullable=False),
        sa.Column("synced_state", sa.String(length=32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("updated_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["ticket_id"], ["tickets.id"], name=op.f("fk_ticket_tracker_links_ticket_id_tickets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("ticket_id", name=op.f("pk_ticket_tracker_links")),
    )


def downgrade() -> None:
    op.drop_table("ticket_tracker_links")
    op.drop_index(op.f("ix_ticket_repairs_ticket_id"), table_name="ticket_repairs")
    op.drop_index(op.f("ix_ticket_repairs_replaced_at"), table_name="ticket_repairs")
    op.drop_index("ix_ticket_repairs_part", table_name="ticket_repairs")
    op.drop_table("ticket_repairs")
    with op.batch_alter_table("tickets") as batch_op:
        batch_op.drop_column("last_detected_at")
        batch_op.drop_column("verify_until")
        batch_op.drop_column("verify_started_at")
        batch_op.drop_column("resolved_at")
        batch_op.drop_column("claimed_at")
        batch_op.drop_column("reopened")
