"""Raw reports and signals are kept for a window: daily partitions on PostgreSQL, deletes on SQLite."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from core.db import Database
from remediator import retention
from remediator.ingest import ingest
from remediator.models import Host, Signal
from remediator.models import Report as ReportRow
from remediator.rules import load_ruleset
from tests.builders.reports import edac_report

RULES = load_ruleset([])
NOW = dt.datetime(2026, 3, 20, 10, 30, tzinfo=dt.UTC)


def day(offset: int, hour: int = 12) -> dt.datetime:
    return dt.datetime.combine(NOW.date() + dt.timedelta(days=offset), dt.time(hour), tzinfo=dt.UTC)


def stored(session: Session) -> list[tuple[dt.datetime, int]]:
    rows = session.execute(select(ReportRow.captured_at, ReportRow.repeats).order_by(ReportRow.captured_at))
    return [(at, repeats) for at, repeats in rows]


def test_a_repeat_extends_a_row_within_its_day_and_starts_a_new_row_the_next_day(session: Session) -> None:
    times = [day(0, 22), day(0, 23), day(1, 0), day(1, 1)]
    for at in times:
        ingest(session, [edac_report(ce=5, at=at)], ruleset=RULES)
    # Same observations throughout: one row a day, each extended by the day's repeats.
    assert stored(session) == [(day(0, 22), 1), (day(1, 0), 1)]
    host = session.scalars(select(Host)).one()
    assert host.last_stored_at == day(1, 0)


def test_pruning_keeps_the_window_and_every_hosts_current_state(db: Database, session: Session) -> None:
    for offset in (-40, -31, -29, 0):
        ingest(session, [edac_report(ce=50 + offset, at=day(offset))], ruleset=RULES)
    # A host silent for longer than the window (powered off, waiting for a part) keeps its last report.
    ingest(session, [edac_report("quiet-1", ce=0, at=day(-35))], ruleset=RULES)
    pruned = retention.maintain(db, now=NOW, retention_days=30)
    assert pruned.cutoff == day(-30, 0)
    assert stored(session) == [(day(-35), 0), (day(-29), 0), (day(0), 0)]
    assert session.scalar(select(func.count()).select_from(Host)) == 2
    assert session.scalar(select(func.count()).select_from(Signal).where(Signal.observed_at < pruned.cutoff)) == 0


def test_a_row_seen_again_within_the_window_is_kept_whatever_its_first_day(db: Database, session: Session) -> None:
    """Rows stored before the one-row-a-day rule may span days: what counts is when it was last seen."""
    ingest(session, [edac_report(ce=5, at=day(-40))], ruleset=RULES)
    ingest(session, [edac_report(ce=9, at=day(-1))], ruleset=RULES)
    old = session.scalars(select(ReportRow).where(ReportRow.captured_at == day(-40))).one()
    old.last_captured_at = day(-2)  # as a row from before migration 0004 could be
    session.flush()
    retention.maintain(db, now=NOW, retention_days=30)
    assert [at for at, _ in stored(session)] == [day(-40), day(-1)]


def test_ended_web_sessions_are_pruned(db: Database, session: Session) -> None:
    from core import auth
    from core.models import Role, User, WebSession

    user = User(username="u1", role=Role.viewer, password_hash="x")
    session.add(user)
    session.flush()
    live = auth.start_web_session(session, user, ttl_s=3600)
    stale = auth.start_web_session(session, user, ttl_s=3600)
    session.get_one(WebSession, stale).expires_at = NOW - dt.timedelta(seconds=1)
    session.get_one(WebSession, live).expires_at = NOW + dt.timedelta(hours=1)
    session.flush()
    retention.maintain(db, now=NOW, retention_days=30)
    session.expire_all()
    assert session.scalars(select(WebSession.id)).all() == [live]


def test_dry_run_reports_and_changes_nothing(db: Database, session: Session) -> None:
    ingest(session, [edac_report(ce=5, at=day(-40))], ruleset=RULES)
    ingest(session, [edac_report(ce=9, at=day(0))], ruleset=RULES)
    pruned = retention.maintain(db, now=NOW, retention_days=30, dry_run=True)
    assert pruned.rows_deleted == 1
    assert len(stored(session)) == 2
    assert retention.partitions(session).keys().isdisjoint(pruned.partitions_created)


def test_postgresql_drops_whole_partitions_and_moves_rows_out_of_default(db: Database, session: Session) -> None:
    if db.engine.dialect.name != "postgresql":
        # SQLite has no partitions: the same window is kept by deleting rows (the tests above).
        assert retention.partitions(session) == {}
        return
    # Reports dated on days that have no partition land in the DEFAULT partition...
    ingest(session, [edac_report("pg-1", ce=5, at=day(-1))], ruleset=RULES)
    ingest(session, [edac_report("pg-1", ce=9, at=day(0))], ruleset=RULES)
    where = "SELECT tableoid::regclass::text FROM reports ORDER BY captured_at"
    assert session.execute(text(where)).scalars().all() == ["reports_default", "reports_default"]
    # ...and move into today's partition when it is created; the coming days get theirs ahead.
    pruned = retention.maintain(db, now=NOW, retention_days=30)
    today = retention.partition_name(NOW.date())
    assert today in pruned.partitions_created
    assert len(pruned.partitions_created) == retention.DAYS_AHEAD + 1
    assert pruned.rows_moved == 1
    assert session.execute(text(where)).scalars().all() == ["reports_default", today]
    compression = "SELECT attcompression FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) AND attname = 'body'"
    assert session.execute(text(compression), {"t": today}).scalar() in ("l", "p")  # LZ4 if the server has it
    assert (
        session.execute(text(compression), {"t": today}).scalar()
        == session.execute(text(compression), {"t": "reports"}).scalar()
    )
    # A month later the host has reported again; today's partition holds nothing to keep and is dropped whole.
    later = NOW + dt.timedelta(days=31)
    ingest(session, [edac_report("pg-1", ce=20, at=later)], ruleset=RULES)
    again = retention.maintain(db, now=later, retention_days=30)
    assert today in again.partitions_dropped
    assert today not in retention.partitions(session)
    assert [at for at, _ in stored(session)] == [later]
    assert session.execute(text(where)).scalars().all() == [retention.partition_name(later.date())]


def test_db_prune_command_dry_run(tmp_path: object) -> None:
    from pathlib import Path

    from migrations import upgrade

    url = f"sqlite:///{Path(str(tmp_path)) / 'prune.db'}"
    upgrade(url)
    done = subprocess.run(
        [sys.executable, "-m", "api", "db", "prune", "--dry-run", "--days", "7"],
        env={"FLEETFIX_DATABASE_URL": url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "would" in done.stdout
    assert "report rows deleted: 0; signals deleted: 0" in done.stdout
