"""Keeping raw reports and signals for a window, and no longer.

On PostgreSQL the reports table is partitioned by UTC day on captured_at
(migration 0004): `maintain()` creates the partitions for the coming days
and drops those wholly older than the window — dropping a partition frees
its space at once, where DELETE leaves dead rows for VACUUM. Rows in the
DEFAULT partition (a report dated outside every partition, e.g. replayed
from an agent's spool after a long outage) are moved into the partition
that is created for their day, and deleted by age like SQLite's rows.

On SQLite, rows older than the window are deleted.

Kept past the window: a row seen again within it (rows stored before the
one-row-a-day rule may span days; a partition holding one is pruned row by
row instead of dropped), and every host's current state — a host silent
for longer than the window (powered off, waiting for a part) keeps its last
report, so its evidence and its next repeat have something to refer to.
Signals are deleted by age on both. Tickets, remediations, decisions and
the audit log are kept: they are the record of what was done and why.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import delete, func, select, text, tuple_
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from core.db import Database
from core.models import WebSession
from remediator.models import Host, Signal
from remediator.models import Report as ReportRow

log = logging.getLogger(__name__)

DAYS_AHEAD = 7
DELETE_CHUNK = 10_000
_PARTITION = re.compile(r"^reports_(\d{8})$")


@dataclass
class Pruned:
    cutoff: dt.datetime
    partitions_created: list[str] = field(default_factory=list)
    partitions_dropped: list[str] = field(default_factory=list)
    rows_deleted: int = 0
    signals_deleted: int = 0
    rows_moved: int = 0


def cutoff_for(now: dt.datetime, retention_days: int) -> dt.datetime:
    """Rows captured before the start of this UTC day are past the window."""
    day = (now - dt.timedelta(days=retention_days)).astimezone(dt.UTC).date()
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def partition_name(day: dt.date) -> str:
    return f"reports_{day:%Y%m%d}"


def partitions(session: Session) -> dict[str, dt.date]:
    """The reports table's daily partitions, by name (empty on SQLite)."""
    if session.get_bind().dialect.name != "postgresql":
        return {}
    names = session.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'reports'"
        )
    ).scalars()
    found = {}
    for name in names:
        match = _PARTITION.match(name)
        if match:
            found[name] = dt.datetime.strptime(match.group(1), "%Y%m%d").date()
    return found


def create_partition(session: Session, day: dt.date) -> int:
    """Make the partition for `day`, moving in any rows of that day that the DEFAULT partition holds.

    Returns the number of rows moved. Runs in the caller's transaction: the
    new table is filled before it is attached, so no report is ever without
    a place to go.
    """
    name = partition_name(day)
    low = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    high = low + dt.timedelta(days=1)
    session.execute(
        text(f"CREATE TABLE {name} (LIKE reports INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMPRESSION)")
    )
    # `name` and the bounds are built from a date above, never from input.
    moved_rows = "DELETE FROM reports_default WHERE captured_at >= :low AND captured_at < :high RETURNING *"
    move = f"WITH moved AS ({moved_rows}) INSERT INTO {name} SELECT * FROM moved"  # noqa: S608
    moved = cast(CursorResult[Any], session.execute(text(move), {"low": low, "high": high})).rowcount
    bounds = f"FROM ('{low.isoformat()}') TO ('{high.isoformat()}')"
    session.execute(text(f"ALTER TABLE reports ATTACH PARTITION {name} FOR VALUES {bounds}"))
    return max(moved or 0, 0)


def maintain(
    database: Database,
    *,
    now: dt.datetime,
    retention_days: int,
    dry_run: bool = False,
    on_stage: Callable[[str], None] | None = None,
) -> Pruned:
    """Create the coming days' partitions and prune what is older than the window.

    Each partition created or dropped, and each chunk of deleted rows, is its
    own short transaction: dropping a partition locks the whole reports table,
    so the lock must not be held through the rest of the work. `on_stage` hears
    what is being done before each of those steps (`fleetfix db prune`'s progress).
    """
    stage = on_stage or _quiet
    cutoff = cutoff_for(now, retention_days)
    result = Pruned(cutoff=cutoff)
    with database.session() as session:
        postgres = session.get_bind().dialect.name == "postgresql"
        existing = partitions(session)
    if postgres:
        today = now.astimezone(dt.UTC).date()
        for offset in range(DAYS_AHEAD + 1):
            day = today + dt.timedelta(days=offset)
            if partition_name(day) not in existing:
                result.partitions_created.append(partition_name(day))
                stage(f"creating partition {partition_name(day)}")
                if not dry_run:
                    with database.session() as session:
                        result.rows_moved += create_partition(session, day)
        for name, day in sorted(existing.items(), key=lambda item: item[1]):
            if dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC) > cutoff:
                continue
            stage(f"looking at partition {name}")
            with database.session() as session:
                if _holds_what_is_kept(session, name, cutoff):
                    continue  # its rows are pruned one by one below, the kept ones stay
                result.partitions_dropped.append(name)
                if not dry_run:
                    session.execute(text(f"ALTER TABLE reports DETACH PARTITION {name}"))
                    session.execute(text(f"DROP TABLE {name}"))
    result.rows_deleted = _delete_reports(database, cutoff, dry_run=dry_run, stage=stage)
    result.signals_deleted = _delete_signals(database, cutoff, dry_run=dry_run, stage=stage)
    if not dry_run:
        with database.session() as session:  # web sign-ins past their end are of no use to anyone
            session.execute(delete(WebSession).where(WebSession.expires_at < now))
    log.info(
        "remediator.retention.pruned",
        extra={
            "fields": {
                "cutoff": cutoff.isoformat(),
                "created": result.partitions_created,
                "dropped": result.partitions_dropped,
                "rows_deleted": result.rows_deleted,
                "signals_deleted": result.signals_deleted,
                "rows_moved": result.rows_moved,
                "dry_run": dry_run,
            }
        },
    )
    return result


def _quiet(_: str) -> None:
    pass


def _current_row() -> Any:
    """A report row that is some host's current state (what its next repeat would extend)."""
    return (
        select(Host.id)
        .where(Host.last_stored_report_id == ReportRow.id, Host.last_stored_at == ReportRow.captured_at)
        .exists()
    )


def _prunable() -> Any:
    return ~_current_row()


def _holds_what_is_kept(session: Session, partition: str, cutoff: dt.datetime) -> bool:
    """Whether a partition past the window still holds a row to keep: one seen again within the
    window (a row from before the one-day rule may span days), or a host's current state (a host
    silent for longer than the window keeps its last report)."""
    query = text(
        f"SELECT EXISTS (SELECT 1 FROM {partition} r WHERE r.last_captured_at >= :cutoff"  # noqa: S608
        " OR EXISTS (SELECT 1 FROM hosts h WHERE h.last_stored_report_id = r.id AND h.last_stored_at = r.captured_at))"
    )
    return bool(session.execute(query, {"cutoff": cutoff}).scalar())


def _delete_reports(database: Database, cutoff: dt.datetime, *, dry_run: bool, stage: Callable[[str], None]) -> int:
    """Rows last seen before the window that are no host's current state, in committed chunks."""
    old = (ReportRow.last_captured_at < cutoff) & _prunable()
    stage("counting old report rows" if dry_run else "deleting old report rows")
    if dry_run:
        with database.session() as session:
            return int(session.scalar(select(func.count()).select_from(ReportRow).where(old)) or 0)
    total = 0
    while True:
        with database.session() as session:
            chunk = select(ReportRow.id, ReportRow.captured_at).where(old).limit(DELETE_CHUNK)
            deleted = cast(
                CursorResult[Any],
                session.execute(delete(ReportRow).where(tuple_(ReportRow.id, ReportRow.captured_at).in_(chunk))),
            ).rowcount
        total += deleted
        stage(f"deleting old report rows: {total} so far")
        if deleted < DELETE_CHUNK:
            return total


def _delete_signals(database: Database, cutoff: dt.datetime, *, dry_run: bool, stage: Callable[[str], None]) -> int:
    stage("counting old signals" if dry_run else "deleting old signals")
    if dry_run:
        with database.session() as session:
            return int(session.scalar(select(func.count()).select_from(Signal).where(Signal.observed_at < cutoff)) or 0)
    total = 0
    while True:
        with database.session() as session:
            chunk = select(Signal.id).where(Signal.observed_at < cutoff).limit(DELETE_CHUNK)
            deleted = cast(CursorResult[Any], session.execute(delete(Signal).where(Signal.id.in_(chunk)))).rowcount
        total += deleted
        stage(f"deleting old signals: {total} so far")
        if deleted < DELETE_CHUNK:
            return total
