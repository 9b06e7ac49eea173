"""web sessions kept on the server, so signing out ends a session everywhere its cookie went

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22 18:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import core.db

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", core.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_web_sessions_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_web_sessions"),
    )
    op.create_index("ix_web_sessions_user_id", "web_sessions", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_web_sessions_user_id", table_name="web_sessions")
    op.drop_table("web_sessions")
