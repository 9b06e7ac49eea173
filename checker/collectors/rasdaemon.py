"""rasdaemon's SQLite database: memory (mc_event), machine-check (mce_record), PCIe AER and
memory-failure records, read incrementally by row id, and the per-DIMM error totals of mc_event.

mc_event is not a source apart from EDAC: rasdaemon writes it from the `ras:mc_event` trace event
that edac_mc_handle_error raises, so it under-counts exactly when EDAC's sysfs counters do (a
corrected error the kernel's CE collector, RAS_CEC, took never reaches EDAC). mce_record comes from
the `mce:mce_record` trace event, raised for every machine check ahead of the decoders: it is the
one that sees what EDAC missed. The database is opened read-only (`file:…?mode=ro`): the agent
never writes it and never creates one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from checker.collectors.context import Context, ParseFailed, Unavailable
from checker.parsers.common import Parsed
from checker.parsers.rasdaemon import (
    parse_aer_event_rows,
    parse_dimm_total_rows,
    parse_mc_event_rows,
    parse_mce_record_rows,
    parse_memory_failure_rows,
)
from checker.schemas import MAX_EVENTS, RasdaemonState

RAS_DB = "/var/lib/rasdaemon/ras-mc_event.db"
TABLES: dict[str, Callable[[list[dict[str, Any]]], Parsed[Any]]] = {
    "mc_event": parse_mc_event_rows,
    "aer_event": parse_aer_event_rows,
    "memory_failure_event": parse_memory_failure_rows,
    "mce_record": parse_mce_record_rows,
}
_LAYOUT = ("err_type", "label", "mc", "top_layer", "middle_layer", "lower_layer")
MAX_DIMM_TOTALS = 512


def tables_of(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def columns_of(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


Rows = list[dict[str, Any]]


def new_rows(conn: sqlite3.Connection, table: str, after: int, limit: int = MAX_EVENTS) -> tuple[Rows, int, int]:
    """Rows with id > after, the newest `limit` of them in id order; how many newer rows there were
    in all; and the highest id in the table. A table whose highest id is below the cursor was
    recreated (rasdaemon's database removed), so it is read from the start."""
    top = conn.execute(f'SELECT MAX(id) FROM "{table}"').fetchone()[0] or 0  # noqa: S608 - table names are constants
    if top < after:
        after = 0
    total = conn.execute(f'SELECT COUNT(*) FROM "{table}" WHERE id > ?', (after,)).fetchone()[0]  # noqa: S608
    cursor = conn.execute(f'SELECT * FROM "{table}" WHERE id > ? ORDER BY id DESC LIMIT ?', (after, limit))  # noqa: S608
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    rows.reverse()
    return rows, total, max(top, after)


def open_database(ctx: Context) -> sqlite3.Connection:
    conn = ctx.host.open_sqlite(RAS_DB)
    if conn is None:
        raise Unavailable(f"rasdaemon is not recording on this host: no {RAS_DB}")
    return conn


def collect(ctx: Context) -> None:
    conn = open_database(ctx)
    ctx.source = "rasdaemon"
    try:
        _collect(ctx, conn)
    except sqlite3.DatabaseError as error:
        raise ParseFailed(f"rasdaemon database {RAS_DB}: {error}") from error
    finally:
        conn.close()


def _collect(ctx: Context, conn: sqlite3.Connection) -> None:
    present = tables_of(conn)
    if not present & set(TABLES):
        raise Unavailable(f"{RAS_DB} has none of the tables {', '.join(TABLES)}")
    cursors = ctx.state.get("rasdaemon")
    state = RasdaemonState()
    for table, parse in TABLES.items():
        if table not in present:
            continue
        after = cursors.get(table, 0)
        rows, total, top = new_rows(conn, table, after if isinstance(after, int) else 0)
        parsed = ctx.take(parse(rows), table, repr(rows[:3]))
        state.truncated += total - len(rows)
        state.last_ids[table] = top
        if table == "mc_event":
            state.memory_events = parsed
            state.last_id = top
        elif table == "aer_event":
            state.aer_events = parsed
        elif table == "mce_record":
            state.mce_records = parsed
        else:
            state.memory_failures = parsed
    if "mc_event" in present and set(_LAYOUT) <= columns_of(conn, "mc_event"):
        group = ", ".join(_LAYOUT)
        cursor = conn.execute(
            f"SELECT {group}, SUM(err_count) AS err_count FROM mc_event GROUP BY {group} ORDER BY {group} LIMIT ?",  # noqa: S608
            (MAX_DIMM_TOTALS,),
        )
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
        state.dimm_totals = ctx.take(parse_dimm_total_rows(rows), "mc_event totals", repr(rows[:3]))
    ctx.state.stage("rasdaemon", {**cursors, **state.last_ids})
    ctx.observations.rasdaemon = state
