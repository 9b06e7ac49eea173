"""host-powered-off steps planned before `if_off`: say `if_off: power_on`

A power_cycle step refuses a host the BMC says is off unless its params say otherwise (`if_off`, commit
e8c1a3c, issue 19). A step copies its params from the rule when its remediation is planned
(remediator/planning.py), so a host-powered-off remediation planned before that change and not yet run (held
by admission caps during a rack's power event, paused by an operator, waiting for approval) holds a
power_cycle step without `if_off`: after the upgrade it would refuse the very host the rule is there to turn
on, and escalate to "was off and did not come back" (review r2 finding 5). This gives each pending
power_cycle step of a host-powered-off remediation `if_off: power_on`, as the rule now says. Data only; a
step that already names an `if_off` is left as it is; a second run changes nothing. Steps of other rules
keep the refusing default, as their rules do now. An operator pack that overrides host-powered-off by id
must say `if_off: power_on` itself (docs/operations.md, "Upgrades").

Downgrade changes nothing: the code of the revision before this one reads `if_off` as this one does.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import core.db

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RULE = "host-powered-off"

remediations = sa.table("remediations", sa.column("id", sa.Integer()), sa.column("rule_id", sa.String()))
steps = sa.table(
    "remediation_steps",
    sa.column("id", sa.Integer()),
    sa.column("remediation_id", sa.Integer()),
    sa.column("action", sa.String()),
    sa.column("state", sa.String()),
    sa.column("params", core.db.JSONDoc),
)


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(steps.c.id, steps.c.params)
        .join(remediations, remediations.c.id == steps.c.remediation_id)
        .where(remediations.c.rule_id == RULE, steps.c.action == "power_cycle", steps.c.state == "pending")
        .order_by(steps.c.id)
    ).all()
    for step_id, params in rows:
        params = dict(params or {})
        if "if_off" in params:
            continue
        bind.execute(steps.update().where(steps.c.id == step_id).values(params={**params, "if_off": "power_on"}))


def downgrade() -> None:
    pass
