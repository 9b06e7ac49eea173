"""whether a ticket holds its host out of service: `tickets.holds_host`

Every open ticket kept its host out of service (`awaiting_repair`) until it closed. A ticket for a
part a technician replaces should; one for the owners of a workload, a kernel, a configuration, a
hardware class or a change, while the host keeps doing its job, should not. Existing tickets hold
their host (as they did), except those a rollout's halt opened for the change's owners, which never
took it out.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tickets") as batch:
        batch.add_column(sa.Column("holds_host", sa.Boolean(), server_default=sa.true(), nullable=False))
    tickets = sa.table("tickets", sa.column("id", sa.Integer()), sa.column("holds_host", sa.Boolean()))
    rollouts = sa.table("rollouts", sa.column("ticket_id", sa.Integer()))
    halt_tickets = sa.select(rollouts.c.ticket_id).where(rollouts.c.ticket_id.is_not(None))
    op.execute(tickets.update().where(tickets.c.id.in_(halt_tickets)).values(holds_host=False))


def downgrade() -> None:
    with op.batch_alter_table("tickets") as batch:
        batch.drop_column("holds_host")
