"""reports partitioned by day on PostgreSQL, primary key (id, captured_at); hosts.last_stored_at

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 17:05:00

The table is rebuilt on both dialects (a primary key cannot be changed in
place on a partitioned table, nor at all on SQLite): the new table is
created beside the old one, the rows are copied, the old one is dropped.
On PostgreSQL the new table is partitioned by range of captured_at, one
partition a UTC day, with a DEFAULT partition that catches a report dated
outside every partition (remediator.retention creates partitions ahead and
moves such rows when it does).
"""

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import core.db

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = "id, host_id, captured_at, last_captured_at, repeats, digest, received_at, schema_version, body"
DAYS_AHEAD = 7


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("last_stored_at", core.db.UTCDateTime(timezone=True), nullable=True))
    # Pruning finds old signals by time alone.
    op.create_index("ix_signals_observed_at", "signals", ["observed_at"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgresql()
    else:
        _upgrade_sqlite()
    # Hosts whose last stored row is known get its captured_at; a repeat now matches on both keys.
    op.execute(
        "UPDATE hosts SET last_stored_at = (SELECT r.captured_at FROM reports r WHERE r.id = hosts.last_stored_report_id)"
        " WHERE last_stored_report_id IS NOT NULL"
    )


def _upgrade_postgresql() -> None:
    op.execute("ALTER TABLE reports RENAME TO reports_unpartitioned")
    op.execute("ALTER INDEX pk_reports RENAME TO pk_reports_unpartitioned")
    op.execute("ALTER INDEX ix_reports_host_captured RENAME TO ix_reports_unpartitioned_host_captured")
    op.execute("ALTER INDEX ix_reports_last_captured_at RENAME TO ix_reports_unpartitioned_last_captured_at")
    op.execute(
        """
        CREATE TABLE reports (
            id uuid NOT NULL,
            host_id integer NOT NULL,
            captured_at timestamp with time zone NOT NULL,
            last_captured_at timestamp with time zone NOT NULL,
            repeats integer NOT NULL,
            digest varchar(64) NOT NULL,
            received_at timestamp with time zone NOT NULL,
            schema_version integer NOT NULL,
            body jsonb NOT NULL,
            CONSTRAINT pk_reports PRIMARY KEY (id, captured_at),
            CONSTRAINT fk_reports_host_id_hosts FOREIGN KEY (host_id) REFERENCES hosts (id) ON DELETE CASCADE
        ) PARTITION BY RANGE (captured_at)
        """
    )
    # LZ4 compresses and decompresses several times faster than the default pglz
    # (PostgreSQL 14+, when the server was built with it — Debian's is).
    op.execute(
        """
        DO $$ BEGIN
            ALTER TABLE reports ALTER COLUMN body SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN NULL;
        END $$
        """
    )
    op.execute("CREATE INDEX ix_reports_host_captured ON reports (host_id, captured_at)")
    op.execute("CREATE INDEX ix_reports_last_captured_at ON reports (last_captured_at)")
    op.execute("CREATE TABLE reports_default PARTITION OF reports DEFAULT")
    days = [
        row[0]
        for row in op.get_bind().exec_driver_sql(
            "SELECT DISTINCT (captured_at AT TIME ZONE 'UTC')::date FROM reports_unpartitioned"
            " UNION SELECT (now() AT TIME ZONE 'UTC')::date + i FROM generate_series(0, %s) AS i ORDER BY 1",
            (DAYS_AHEAD,),
        )
    ]
    for day in days:
        name = f"reports_{day:%Y%m%d}"
        # Both bounds are literal UTC instants: `+ interval '1 day'` would be added in the session's
        # time zone, which makes a 23- or 25-hour day across a daylight-saving change.
        after = day + dt.timedelta(days=1)
        op.execute(
            f"CREATE TABLE {name} PARTITION OF reports FOR VALUES"
            f" FROM ('{day.isoformat()} 00:00:00+00') TO ('{after.isoformat()} 00:00:00+00')"
        )
    op.execute(f"INSERT INTO reports ({COLUMNS}) SELECT {COLUMNS} FROM reports_unpartitioned")
    op.execute("DROP TABLE reports_unpartitioned")


def _upgrade_sqlite() -> None:
    op.create_table(
        "reports_new",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("captured_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_captured_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("received_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("body", _json(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name="fk_reports_host_id_hosts", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", "captured_at", name="pk_reports"),
    )
    op.execute(f"INSERT INTO reports_new ({COLUMNS}) SELECT {COLUMNS} FROM reports")
    op.drop_index("ix_reports_last_captured_at", table_name="reports")
    op.drop_index("ix_reports_host_captured", table_name="reports")
    op.drop_table("reports")
    op.rename_table("reports_new", "reports")
    op.create_index("ix_reports_host_captured", "reports", ["host_id", "captured_at"], unique=False)
    op.create_index("ix_reports_last_captured_at", "reports", ["last_captured_at"], unique=False)


def downgrade() -> None:
    op.execute("ALTER TABLE reports RENAME TO reports_by_day")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX pk_reports RENAME TO pk_reports_by_day")
    op.drop_index("ix_reports_host_captured", table_name="reports_by_day")
    op.drop_index("ix_reports_last_captured_at", table_name="reports_by_day")
    op.create_table(
        "reports",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("captured_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_captured_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("received_at", core.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("body", _json(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], name="fk_reports_host_id_hosts", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_reports"),
    )
    # A report id is unique in the old key; the first row of each id is kept.
    op.execute(
        f"INSERT INTO reports ({COLUMNS}) SELECT {COLUMNS} FROM reports_by_day r"
        " WHERE r.captured_at = (SELECT min(captured_at) FROM reports_by_day s WHERE s.id = r.id)"
    )
    op.execute("DROP TABLE reports_by_day" + (" CASCADE" if op.get_bind().dialect.name == "postgresql" else ""))
    op.create_index("ix_reports_host_captured", "reports", ["host_id", "captured_at"], unique=False)
    op.create_index("ix_reports_last_captured_at", "reports", ["last_captured_at"], unique=False)
    op.drop_index("ix_signals_observed_at", table_name="signals")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("last_stored_at")
