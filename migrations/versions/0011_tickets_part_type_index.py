"""tickets indexed by part type: the queue's part-type filter reads its choices off the index

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 18:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_tickets_part_type", "tickets", ["part_type"])


def downgrade() -> None:
    op.drop_index("ix_tickets_part_type", table_name="tickets")
