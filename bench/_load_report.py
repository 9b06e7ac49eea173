"""What bench/load.py prints: each phase's latencies and statuses, where the CPU went, and the plans of
the ticket queue's queries on the seeded database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, text

from bench._load_traffic import percentile

if TYPE_CHECKING:
    from bench._load_seed import Seeded

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: str) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def cpu_of(api_pid: int, database: str) -> dict[str, dict[int, float]]:
    """CPU seconds so far of each process of the API's process group, and of each PostgreSQL backend
    serving `database`, by pid."""
    found: dict[str, dict[int, float]] = {"api": {}, "db": {}}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            pgrp = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
            if pgrp == api_pid:
                found["api"][int(entry.name)] = _cpu(entry.name)
                continue
            cmdline = (entry / "cmdline").read_bytes()
            if cmdline.startswith(b"postgres: ") and f" {database} ".encode() in cmdline:
                found["db"][int(entry.name)] = _cpu(entry.name)
        except (OSError, IndexError, ValueError):
            continue
    return found


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two readings (a backend that ended in between is not counted)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def print_phase(phase: Any) -> None:
    rec = phase.recorder
    print(f"\n== {phase.name}  ({phase.seconds:.1f} s)")
    print(
        f"   cpu: client {phase.client_cpu_s / phase.seconds:.2f} cores, api {phase.api_cpu_s / phase.seconds:.2f}, "
        f"postgres (this database) {phase.db_cpu_s / phase.seconds:.2f}; the whole machine busy "
        f"{phase.machine_busy_s / phase.seconds:.2f}  of {os.cpu_count()}"
    )
    print(f"   {'kind':<20} {'count':>7} {'per s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  statuses")
    for kind, values in sorted(rec.latencies.items()):
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(rec.statuses[kind].items()))
        print(
            f"   {kind:<20} {len(values):7d} {len(values) / phase.seconds:8.1f} {percentile(values, 0.5) * 1000:8.1f}"
            f" {percentile(values, 0.99) * 1000:8.1f} {max(values) * 1000:8.1f}  {statuses}"
        )


QUERIES = {
    "API list, open in one datacenter (newest first, a page of 100)": (
        "SELECT * FROM tickets WHERE state IN ('open','claimed','in_progress','resolved','verifying') "
        "AND datacenter = :dc ORDER BY id DESC LIMIT 101"
    ),
    "API list, a host's tickets": "SELECT * FROM tickets WHERE hostname = :host ORDER BY id DESC LIMIT 101",
    "API list, closed and 30 days old": (
        "SELECT * FROM tickets WHERE state = 'closed' AND created_at <= now() - interval '30 days' "
        "ORDER BY id DESC LIMIT 101"
    ),
    "API list, a rack's tickets": "SELECT * FROM tickets WHERE rack = :rack ORDER BY id DESC LIMIT 101",
    "queue page, to do in one datacenter (priority, age)": (
        "SELECT * FROM tickets WHERE state IN ('open','claimed','in_progress') AND datacenter = :dc "
        "ORDER BY priority, created_at, id LIMIT 51"
    ),
    "queue page, the part-type filter's choices (a walk of ix_tickets_part_type, api.web.queries)": (
        "WITH RECURSIVE walk(part) AS (SELECT min(part_type) FROM tickets UNION ALL "
        "SELECT (SELECT min(part_type) FROM tickets WHERE part_type > walk.part) FROM walk "
        "WHERE walk.part IS NOT NULL) "
        "SELECT part FROM walk WHERE part IS NOT NULL"
    ),
    "queue page, the datacenter filter's choices": "SELECT DISTINCT datacenter FROM hosts ORDER BY datacenter",
}


def explain_queries(url: str, seeded: Seeded) -> None:
    """EXPLAIN ANALYZE of the queue's queries as the API builds them, on the seeded tables."""
    engine = create_engine(url)
    params = {"dc": seeded.datacenters[0], "host": seeded.hostnames[7], "rack": seeded.racks[3]}
    print(f"\nticket queue queries on {len(seeded.ticket_ids)} tickets (EXPLAIN ANALYZE, warm cache)")
    with engine.connect() as conn:
        for what, sql in QUERIES.items():
            conn.execute(text(sql), params).all()  # warm
            plan = [row[0] for row in conn.execute(text(f"EXPLAIN (ANALYZE, BUFFERS) {sql}"), params)]
            took = next((line.split(":", 1)[1].strip() for line in plan if line.startswith("Execution Time")), "?")
            top = plan[0].split("  (cost")[0].strip()
            scans = [line.strip().split("  (cost")[0].lstrip("-> ") for line in plan if "Scan" in line]
            print(f"  {took:>12}  {what}: {top}; {' / '.join(scans[:3])}")
    engine.dispose()
