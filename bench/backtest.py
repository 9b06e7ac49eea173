"""Backtest throughput: stored reports replayed per minute, beside this machine's ceiling, in one run.

    .venv/bin/python bench/backtest.py [--hosts 1000] [--rounds 30] [--workers 2] [--url URL] [--keep]

Needs the machine's PostgreSQL (127.0.0.1:5432). Prints figures; asserts nothing. Every figure is
measured in this run, on the same rows:

1. seed:     a simulated fleet (a tenth of its hosts faulty) reporting every --interval seconds for
             --rounds rounds, stored through remediator.ingest.ingest() (not timed). `--url` replays a
             database seeded before instead; `--keep` leaves this run's database for that.
2. ceiling:  the replay's own streamed SELECT (server-side cursor, bodies as JSON text, ordered by host
             and time) and orjson.loads of every body, nothing else: what reading the history costs
             here, in one process and in --workers processes sharing the hosts as the backtest does.
3. old:      the host-by-host replay the backtest used to be (tests/builders/backtest_reference.py).
4. new:      remediator.backtest.backtest() in one process and in --workers processes.

"stored reports" are stored rows (one per observation state); "replayed" counts a repeated state's last
repeat too. Rates are per minute; ratios are to the ceiling with the same number of processes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._backtest_seed import START, seed_history  # noqa: E402
from bench._databases import create_database, drop_database  # noqa: E402
from core.db import Database  # noqa: E402
from migrations import upgrade  # noqa: E402
from remediator.backtest import BacktestResult, backtest  # noqa: E402
from remediator.backtest_replay import stored_rows  # noqa: E402
from remediator.rules import load_ruleset  # noqa: E402
from tests.builders.backtest_reference import reference_backtest  # noqa: E402

SINCE = START - dt.timedelta(days=1)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def _ceiling_share(url: str, share: int, shares: int) -> int:
    database = Database(url, pool_size=1)
    count = 0
    with database.sessionmaker() as session:
        for row in stored_rows(session, SINCE, share=share, shares=shares):
            orjson.loads(row.body)
            count += 1
    database.dispose()
    return count


def ceiling(url: str, processes: int) -> tuple[float, int]:
    """Seconds to stream and decode every row in `processes` processes, and the rows read."""
    began = time.perf_counter()
    if processes == 1:
        rows = _ceiling_share(url, 0, 1)
    else:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            rows = sum(pool.starmap(_ceiling_share, [(url, n, processes) for n in range(processes)]))
    return time.perf_counter() - began, rows


def timed(run: Callable[[], BacktestResult]) -> tuple[float, BacktestResult]:
    began = time.perf_counter()
    result = run()
    return time.perf_counter() - began, result


def history_facts(url: str) -> dict[str, Any]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows, repeats, hosts = conn.execute(
            text("SELECT count(*), coalesce(sum(repeats), 0), count(DISTINCT host_id) FROM reports")
        ).one()
        sizes = conn.execute(text("SELECT octet_length(body::text) FROM reports LIMIT 2000")).scalars().all()
        version = conn.execute(text("SHOW server_version")).scalar_one()
    engine.dispose()
    return {"rows": rows, "repeats": repeats, "hosts": hosts, "body": statistics.mean(sizes), "pg": version}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--interval", type=int, default=60, help="seconds between a host's reports")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--url", help="replay this database (seeded by an earlier --keep run) instead")
    parser.add_argument("--keep", action="store_true", help="leave this run's database (its URL is printed)")
    parser.add_argument("--skip-old", action="store_true", help="do not time the old host-by-host replay")
    args = parser.parse_args()
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores; {load()}")
    name = None
    url = args.url
    if url is None:
        name = f"fleetfix_bench_backtest_{uuid.uuid4().hex[:8]}"
        url = create_database(name)
        upgrade(url)
        print(f"seeding {args.hosts} hosts x {args.rounds} rounds every {args.interval} s through ingest …")
        began = time.perf_counter()
        seed_history(url, hosts=args.hosts, rounds=args.rounds, interval_s=args.interval)
        print(f"  seeded in {time.perf_counter() - began:.0f} s ({url if args.keep else 'dropped at the end'})")
    try:
        facts = history_facts(url)
        print(
            f"history: {facts['rows']} stored rows ({facts['repeats']} repeats on them) of {facts['hosts']} hosts;"
            f" bodies {facts['body'] / 1024:.1f} KiB of JSON on average; PostgreSQL {facts['pg']}"
        )
        ruleset = load_ruleset([])
        database = Database(url, pool_size=2)
        figures: list[tuple[str, float, int, int, float]] = []  # label, seconds, rows, replayed, ceiling s

        ceilings = {n: ceiling(url, n) for n in sorted({1, args.workers})}
        for n, (seconds, rows) in ceilings.items():
            figures.append((f"ceiling: streamed SELECT + orjson.loads, {n} process(es)", seconds, rows, rows, seconds))
            print(f"  {figures[-1][0]}: {seconds:.1f} s  ({load()})", flush=True)
        if not args.skip_old:
            with database.sessionmaker() as session:
                seconds, result = timed(lambda: reference_backtest(session, ruleset, SINCE))
            figures.append(("old: host by host, 1 process", seconds, result.rows, result.reports, ceilings[1][0]))
            print(f"  {figures[-1][0]}: {seconds:.1f} s  ({load()})", flush=True)
            old_hits = result.hits
        for n in sorted({1, args.workers}):
            with database.sessionmaker() as session:
                seconds, result = timed(functools.partial(backtest, session, ruleset, SINCE, workers=n))
            figures.append((f"new: backtest(), {n} process(es)", seconds, result.rows, result.reports, ceilings[n][0]))
            print(f"  {figures[-1][0]}: {seconds:.1f} s  ({load()})", flush=True)
            if not args.skip_old:
                same = [vars(h) for h in result.hits] == [vars(h) for h in old_hits]
                print(f"    same {len(result.hits)} hits as the old replay: {same}")
        database.dispose()
        print()
        print(f"{'path':<52} {'stored reports/min':>19} {'replayed/min':>13} {'x ceiling':>10}")
        for label, seconds, rows, replayed, ceiling_s in figures:
            per_min = (rows / seconds * 60, replayed / seconds * 60)
            print(f"{label:<52} {per_min[0]:>19,.0f} {per_min[1]:>13,.0f} {ceiling_s / seconds:>10.2f}")
        print(f"target: 1,000,000 stored reports/min; {load()}")
    finally:
        if name is not None and not args.keep:
            drop_database(name)


if __name__ == "__main__":
    main()
