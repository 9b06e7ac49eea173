"""Machine checks: rasdaemon's mce_record table when rasdaemon runs, else mcelog's /var/log/mcelog
(read from where the last cycle stopped), and `mcelog --client`'s per-DIMM memory error counters.

Each record gets its error class (memory controller, cache, bus/interconnect, internal) from the
decoder's words or the architectural MCA code in MCi_STATUS.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from checker.collectors.context import Context, ParseFailed, Unavailable, command_failure
from checker.collectors.rasdaemon import RAS_DB, new_rows, tables_of
from checker.parsers.mce import parse_mcelog, parse_mcelog_client_memory
from checker.parsers.rasdaemon import parse_mce_record_rows
from checker.schemas import MAX_EVENTS, MceMemoryCounter, MceRecord

MCELOG_FILE = "/var/log/mcelog"
MCELOG_CLIENT = ["mcelog", "--client"]
MCELOG_READ_BYTES = 4 * 1024 * 1024


def collect(ctx: Context) -> None:
    cursor = ctx.state.get("mce")
    sources: list[str] = []
    records = _from_rasdaemon(ctx, cursor)
    if records is not None:
        sources.append("rasdaemon")
    else:
        records = _from_mcelog_file(ctx, cursor)
        if records is not None:
            sources.append("mcelog-file")
    client = ctx.run(MCELOG_CLIENT, 10.0)
    if client.returncode == 0 and client.stdout.strip():
        counters = ctx.take(parse_mcelog_client_memory(client.stdout), "mcelog --client", client.stdout)
        ctx.observations.mce_memory = [
            MceMemoryCounter(
                socket=c.socket,
                channel=c.channel,
                dimm=c.dimm,
                corrected_total=c.corrected_total,
                corrected_24h=c.corrected_24h,
                uncorrected_total=c.uncorrected_total,
                uncorrected_24h=c.uncorrected_24h,
            )
            for c in counters[:512]
        ]
        sources.append("mcelog-client")
    elif not client.missing and sources:
        ctx.problem(command_failure(client))
    if not sources:
        reason = "" if client.missing else f"; {command_failure(client)}"
        raise Unavailable(f"no machine-check source: no rasdaemon mce_record table, no {MCELOG_FILE}{reason}")
    if records is not None:
        ctx.observations.mce = records
    ctx.source = "+".join(sources)
    ctx.state.stage("mce", cursor)


def _from_rasdaemon(ctx: Context, cursor: dict[str, Any]) -> list[MceRecord] | None:
    conn = ctx.host.open_sqlite(RAS_DB)
    if conn is None:
        return None
    try:
        if "mce_record" not in tables_of(conn):
            return None
        after = cursor.get("rasdaemon_id")
        rows, total, top = new_rows(conn, "mce_record", after if isinstance(after, int) else 0)
    except sqlite3.DatabaseError as error:
        raise ParseFailed(f"rasdaemon database {RAS_DB}: {error}") from error
    finally:
        conn.close()
    if total > len(rows):
        ctx.problem(f"{total} new mce_record rows; only the newest {len(rows)} kept")
    cursor["rasdaemon_id"] = top
    return ctx.take(parse_mce_record_rows(rows), "mce_record", repr(rows[:3]))


def _from_mcelog_file(ctx: Context, cursor: dict[str, Any]) -> list[MceRecord] | None:
    offset = cursor.get("offset") if cursor.get("inode") is not None else 0
    piece = ctx.host.read_from(MCELOG_FILE, offset if isinstance(offset, int) else 0, MCELOG_READ_BYTES)
    if piece is None:
        return None
    if cursor.get("inode") not in (None, piece.inode):
        piece = ctx.host.read_from(MCELOG_FILE, 0, MCELOG_READ_BYTES) or piece  # rotated: a new file
    text = piece.text
    end = piece.end
    if text and not text.endswith("\n"):
        # mcelog may be writing a record now: stop at the last whole line, read the rest next time.
        cut = text.rfind("\n") + 1
        end -= len(text[cut:].encode("utf-8"))
        text = text[:cut]
    cursor.update(inode=piece.inode, offset=end)
    if not text.strip():
        return []
    parsed = parse_mcelog(text)
    records = ctx.take(parsed, MCELOG_FILE, text)
    if len(records) >= MAX_EVENTS:
        ctx.problem(f"only the newest {MAX_EVENTS} records of {MCELOG_FILE} kept")
    return records
