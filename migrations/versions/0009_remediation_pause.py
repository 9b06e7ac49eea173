"""an operator can pause one remediation between steps

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22 18:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.add_column(sa.Column("paused_by", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("remediations") as batch:
        batch.drop_column("paused_by")
