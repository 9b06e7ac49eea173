"""auth: versions on remediations and rule states, for ETags and If-Match

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("remediations") as batch_op:
        batch_op.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))
    with op.batch_alter_table("rule_states") as batch_op:
        batch_op.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("rule_states") as batch_op:
        batch_op.drop_column("version")
    with op.batch_alter_table("remediations") as batch_op:
        batch_op.drop_column("version")
