"""What bench/load.py prints: each phase's latencies and statuses, where the CPU went, the plans of
the ticket queue's queries on the seeded database, and the verdict."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, text

from bench._load_traffic import CLOSED_MID_BODY, percentile

if TYPE_CHECKING:
    from bench._load_seed import Seeded

TICK = os.sysconf("SC_CLK_TCK")

P99_FACTOR = 3.0
THROUGHPUT_FACTOR = 0.5
REFUSAL_P99_S = 1.0
REFUSALS = ("big report", "big anonymous", "anonymous body", "big chunked report", "big login form")
BEFORE_READING = ("big report", "big anonymous", "anonymous body")  # the rest are read up to the cap first


def _cpu(pid: str) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def cpu_of(groups: dict[str, int], database: str) -> dict[str, dict[int, float]]:
    """CPU seconds so far of each process of each API's process group (`groups`: name -> the group's
    leader), and of each PostgreSQL backend serving `database` (under "db"), by pid."""
    found: dict[str, dict[int, float]] = {name: {} for name in [*groups, "db"]}
    by_group = {pgrp: name for name, pgrp in groups.items()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            pgrp = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
            if pgrp in by_group:
                found[by_group[pgrp]][int(entry.name)] = _cpu(entry.name)
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
    client, api, db, machine = (
        x / phase.seconds for x in (phase.client_cpu_s, phase.api_cpu_s, phase.db_cpu_s, phase.machine_busy_s)
    )
    if phase.intake_cpu_s is None:
        print(
            f"   cpu: client {client:.2f} cores, api {api:.2f}, postgres (this database) {db:.2f}; "
            f"the whole machine busy {machine:.2f}  of {os.cpu_count()}"
        )
    else:
        intake = phase.intake_cpu_s / phase.seconds
        cores = ", ".join(f"cpu{i} {busy / phase.seconds:.2f}" for i, busy in enumerate(phase.cores_busy_s))
        print(
            f"   cpu: client {client:.2f} cores, api {api:.2f}, intake replica {intake:.2f}, "
            f"postgres (this database) {db:.2f}; the whole machine busy {machine:.2f} of {os.cpu_count()} ({cores})"
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


def verdict(phases: dict[str, Any]) -> bool:
    """The pass conditions of the module docstring of bench/load.py, each printed with its figures."""
    base = phases["a: reports alone, open loop"].recorder
    flood = phases["c: reports + sign-in flood + oversized bodies"]
    a_phase = phases["a: reports alone, open loop"]
    a_p99 = percentile(base.latencies["report"], 0.99)
    c_p99 = percentile(flood.recorder.latencies["report"], 0.99)
    a_rate = sum(1 for _ in base.latencies["report"]) / a_phase.seconds
    c_ok = flood.recorder.statuses["report"].get("200", 0)
    c_rate = c_ok / flood.seconds
    checks = [
        (
            f"intake p99 under the floods {c_p99 * 1000:.0f} ms <= {P99_FACTOR:g} x a's {a_p99 * 1000:.0f} ms",
            c_p99 <= P99_FACTOR * a_p99,
        ),
        (
            f"intake under the floods {c_rate:.0f}/s (200s) >= {THROUGHPUT_FACTOR:g} x a's {a_rate:.0f}/s",
            c_rate >= THROUGHPUT_FACTOR * a_rate,
        ),
    ]
    errors = sum(p.recorder.server_errors() for p in phases.values())
    transport = sum(p.recorder.transport_errors() for p in phases.values())
    checks.append((f"5xx responses in all phases: {errors} (must be 0)", errors == 0))
    checks.append((f"requests that got no answer (transport errors): {transport} (must be 0)", transport == 0))
    refused = [s for kind in REFUSALS for s in flood.recorder.latencies.get(kind, [])]
    refused_p99 = percentile([s for kind in BEFORE_READING for s in flood.recorder.latencies.get(kind, [])], 0.99)
    wrong = sum(
        n
        for kind in REFUSALS
        for status, n in flood.recorder.statuses.get(kind, {}).items()
        if status not in ("413", "401", CLOSED_MID_BODY)
    )
    cut = sum(flood.recorder.statuses.get(kind, {}).get(CLOSED_MID_BODY, 0) for kind in REFUSALS)
    checks.append(
        (
            f"oversized bodies refused: {len(refused) - wrong}/{len(refused)} (413 or 401; {cut} of them"
            " reset by the server's close while the client still sent, the answer lost)",
            wrong == 0 and bool(refused),
        )
    )
    checks.append(
        (
            f"oversized bodies refused before reading: p99 {refused_p99 * 1000:.0f} ms <= {REFUSAL_P99_S:g} s",
            refused_p99 <= REFUSAL_P99_S,
        )
    )
    print("\nverdict")
    for text_, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {text_}")
    return all(ok for _, ok in checks)
