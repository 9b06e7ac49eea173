"""one open ticket per rack's cooling and per switch: cancel the duplicates older code left

Group tickets (a rack's cooling `rack_airflow`, a switch `switch`) were keyed by the first host that
asked before they were keyed by the group (ticketing.groups): two hosts of a rack asking at once opened
two, and both stayed open (review of issue 16, M2; of the group tickets, finding 8). This keeps one per
group and cancels the others ("duplicate of #N"), with a comment on the kept one naming them and the
technicians they were assigned to. The kept one is the most advanced: a repair done (verifying, resolved),
then one under way (in progress, claimed), then the oldest (second review of repair-reopen, finding 3:
keeping the oldest cancelled the ticket whose repair was done). The cancelled ones' hosts (`rack_heat` or
`switch_errors` `hosts`) and `heard_from` are merged into the kept one's evidence (its version is not moved,
as a detection's is not). Data only; reads the group tickets by part type, updates row by row; a second
run finds no duplicates. Group tickets never hold their hosts (their requests say
`holds_host: False`), so no host waits on a cancelled one. A tracker copy of a cancelled duplicate is not
told here (a migration sends no tasks): its next change, or an operator, closes it there.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 10:00:00
"""

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

import core.db

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTOR = "system:migration"
OPEN_STATES = ("open", "claimed", "in_progress", "resolved", "verifying")
GROUP_PART_TYPES = ("rack_airflow", "switch")
ADVANCED = {"verifying": 0, "resolved": 0, "in_progress": 1, "claimed": 1, "open": 2}
"""Which duplicate is kept: the lowest rank, then the lowest id."""
SECTIONS = ("rack_heat", "switch_errors")  # ticketing.groups.GROUP_SECTIONS
HEARD_FROM_HOSTS = 100  # ticketing.groups.HEARD_FROM_HOSTS (a migration keeps its own copy)
HEARD_FROM_SUBJECTS = 32  # ticketing.groups.HEARD_FROM_SUBJECTS

tickets = sa.table(
    "tickets",
    sa.column("id", sa.Integer()),
    sa.column("datacenter", sa.String()),
    sa.column("rack", sa.String()),
    sa.column("part_type", sa.String()),
    sa.column("part", sa.String()),
    sa.column("state", sa.String()),
    sa.column("assignee", sa.String()),
    sa.column("evidence", core.db.JSONDoc),
    sa.column("open_key", sa.String()),
    sa.column("version", sa.Integer()),
    sa.column("closed_at", core.db.UTCDateTime(timezone=True)),
    sa.column("updated_at", core.db.UTCDateTime(timezone=True)),
)
events = sa.table(
    "ticket_events",
    sa.column("ticket_id", sa.Integer()),
    sa.column("at", core.db.UTCDateTime(timezone=True)),
    sa.column("actor", sa.String()),
    sa.column("kind", sa.String()),
    sa.column("note", sa.Text()),
    sa.column("detail", core.db.JSONDoc),
)


def _group(row: Any) -> tuple[str, str, str]:
    """A rack's cooling is the rack's (its part names the rack too); a switch's is the datacenter's switch."""
    return (row.part_type, row.datacenter, row.rack if row.part_type == "rack_airflow" else row.part)


def _merged(kept: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The kept ticket's evidence with the other's group hosts and heard_from added (the kept one's entries
    win, the other's come first: the kept one's are the more recent), bounded as ticketing.groups bounds them."""
    evidence = dict(kept)
    for section in SECTIONS:
        mine, theirs = kept.get(section), other.get(section)
        if not isinstance(theirs, dict):
            continue
        mine = mine if isinstance(mine, dict) else {}
        hosts = {str(h.get("hostname")): h for h in theirs.get("hosts") or [] if isinstance(h, dict)}
        for entry in mine.get("hosts") or []:
            if isinstance(entry, dict):
                hosts.pop(str(entry.get("hostname")), None)
                hosts[str(entry.get("hostname"))] = entry
        evidence[section] = {**theirs, **mine, "hosts": list(hosts.values())[-HEARD_FROM_HOSTS:]}
    heard: dict[str, list[str]] = {}
    for entry in [*(other.get("heard_from") or []), *(kept.get("heard_from") or [])]:
        if isinstance(entry, dict) and entry.get("host"):
            subjects = heard.pop(str(entry["host"]), [])
            subjects += [str(s) for s in entry.get("subjects") or [] if str(s) not in subjects]
            heard[str(entry["host"])] = subjects[-HEARD_FROM_SUBJECTS:]
    if heard:
        evidence["heard_from"] = [{"host": h, "subjects": s} for h, s in heard.items()][-HEARD_FROM_HOSTS:]
    return evidence


def upgrade() -> None:
    bind = op.get_bind()
    now = dt.datetime.now(dt.UTC)
    rows = bind.execute(
        sa.select(
            tickets.c.id,
            tickets.c.part_type,
            tickets.c.datacenter,
            tickets.c.rack,
            tickets.c.part,
            tickets.c.state,
            tickets.c.assignee,
            tickets.c.evidence,
        )
        .where(tickets.c.part_type.in_(GROUP_PART_TYPES), tickets.c.state.in_(OPEN_STATES))
        .order_by(tickets.c.id)
    ).all()
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for row in rows:
        groups.setdefault(_group(row), []).append(row)
    for members in groups.values():
        if len(members) < 2:
            continue
        keep = min(members, key=lambda r: (ADVANCED.get(r.state, 3), r.id))
        others = [r for r in members if r.id != keep.id]  # by id, as read
        evidence = dict(keep.evidence or {})
        for other in others:
            evidence = _merged(evidence, dict(other.evidence or {}))
            bind.execute(
                tickets.update()
                .where(tickets.c.id == other.id)
                .values(state="cancelled", open_key=None, closed_at=now, updated_at=now, version=tickets.c.version + 1)
            )
            note = f"duplicate of #{keep.id}: one open ticket per group (the most advanced is kept)"
            bind.execute(
                events.insert().values(
                    ticket_id=other.id,
                    at=now,
                    actor=ACTOR,
                    kind="cancelled",
                    note=note,
                    detail={"duplicate_of": keep.id},
                )
            )
        if evidence != (keep.evidence or {}):
            bind.execute(tickets.update().where(tickets.c.id == keep.id).values(evidence=evidence))
        names = ", ".join(f"#{o.id}" + (f" (assigned to {o.assignee})" if o.assignee else "") for o in others)
        bind.execute(
            events.insert().values(
                ticket_id=keep.id,
                at=now,
                actor=ACTOR,
                kind="comment",
                note=f"{names} cancelled as duplicates of this ticket: one open ticket per group",
                detail={"duplicates": [o.id for o in others], "assignees": {str(o.id): o.assignee for o in others}},
            )
        )


def downgrade() -> None:
    """Nothing to undo in the schema; the cancelled duplicates stay cancelled (reopening them would bring
    back the split the upgrade ended)."""
