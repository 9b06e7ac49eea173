"""CXL memory RAS: the CXL memory devices sysfs lists (/sys/bus/cxl/devices/memN: serial, firmware,
capacity) and the new rows of rasdaemon's cxl_* tables, read by id with a cursor per table the way
checker/collectors/rasdaemon.py reads its tables (bounded to MAX_CXL_EVENTS per cycle, newest kept).

Hosts without a CXL memory device report the collector unavailable. Hosts whose rasdaemon records no
CXL events (none running, older than 0.8.0, or built without --enable-cxl: no cxl_* tables) still
list their devices, with `rasdaemon` false and a problem saying why: the kernel log's CXL lines
(checker/parsers/cxl_log.py) are then the only record of their errors, and the centre needs the
devices' serials and PCI functions to name them. On the agent's first read the rows already in the
tables are history of unknown age: only the cursors are taken (`first_sight`), as the centre does
with rasdaemon's other tables.
"""

from __future__ import annotations

import re
import sqlite3
from typing import get_args

from checker.collectors.context import Context, ParseFailed, Unavailable
from checker.collectors.rasdaemon import RAS_DB, new_rows, tables_of
from checker.parsers.cxl import parse_cxl_rows
from checker.sections.cxl import MAX_CXL_DEVICES, MAX_CXL_EVENTS, CxlMemdev, CxlRasState, CxlTable

CXL_DEVICES = "/sys/bus/cxl/devices"
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
TABLES: tuple[CxlTable, ...] = get_args(CxlTable)


def _number(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def memdevs(ctx: Context) -> list[CxlMemdev]:
    names = [n for n in ctx.host.list_dir(CXL_DEVICES) or [] if n.startswith("mem") and n[3:].isdigit()]
    devices = []
    for name in sorted(names, key=lambda n: int(n[3:]))[:MAX_CXL_DEVICES]:
        base = f"{CXL_DEVICES}/{name}"
        firmware = (ctx.host.read_text(f"{base}/firmware_version") or "").strip()
        # memN links to .../0000:34:01.0/0000:35:00.0/mem0: its parent is the PCI function (cxl_pci's device)
        parent = (ctx.host.resolve(base) or "").rstrip("/").rsplit("/", 2)
        bdf = parent[-2] if len(parent) == 3 and _BDF.fullmatch(parent[-2]) else None
        # and the ports above it (root port, switch ports): a CPER record of a port names these, not the memdev
        above = [p for p in reversed(parent[0].split("/")) if _BDF.fullmatch(p)] if bdf else []
        devices.append(
            CxlMemdev(
                memdev=name,
                serial=_number(ctx.host.read_text(f"{base}/serial"), 0),
                firmware=firmware[:128] or None,
                ram_bytes=_number(ctx.host.read_text(f"{base}/ram/size"), 0),
                host=bdf,
                ports=above[:8],
            )
        )
    return devices


def collect(ctx: Context) -> None:
    devices = memdevs(ctx)
    if not devices:
        raise Unavailable(f"no CXL memory devices ({CXL_DEVICES} lists no memN)")
    conn = ctx.host.open_sqlite(RAS_DB)
    try:
        state = _read(ctx, conn) if conn is not None else None
    except sqlite3.DatabaseError as error:
        raise ParseFailed(f"rasdaemon database {RAS_DB}: {error}") from error
    finally:
        if conn is not None:
            conn.close()
    if state is None:
        why = f"no {RAS_DB}" if conn is None else f"{RAS_DB} has no cxl_* table (rasdaemon 0.8.0 on, --enable-cxl)"
        ctx.problem(f"rasdaemon records no CXL events here: {why}; the kernel log is their only record")
        ctx.source = "sysfs"
        state = CxlRasState(rasdaemon=False)
    else:
        ctx.source = "rasdaemon"
    state.devices = devices
    ctx.observations.cxl = state


def _read(ctx: Context, conn: sqlite3.Connection) -> CxlRasState | None:
    present = tables_of(conn) & set(TABLES)
    if not present:
        return None
    cursors = ctx.state.get("cxl")
    state = CxlRasState(first_sight=not cursors)
    room = MAX_CXL_EVENTS
    for table in TABLES:
        if table not in present:
            continue
        after = cursors.get(table, 0)
        rows, total, top = new_rows(conn, table, after if isinstance(after, int) else 0, limit=max(room, 1))
        state.last_ids[table] = top
        if state.first_sight:
            continue
        events = ctx.take(parse_cxl_rows(table, rows), table, repr(rows[:2]))[:room]
        state.truncated += total - len(events)
        state.events += events
        room -= len(events)
    ctx.state.stage("cxl", dict(state.last_ids))
    return state
