"""A fleet's stored history for bench/backtest.py: simulated hosts' reports through the real ingest.

The rows a backtest reads are the rows ingest stores (one per observation state, repeats counted on
it, a new row each UTC day), so the history is made by `remediator.ingest.ingest()` itself, with an
empty rule set (nothing is planned: only reports, signals and derivation memory are written).
"""

from __future__ import annotations

import datetime as dt
import time

from checker.sim import SimulatedFleet
from core.db import Database
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.payloads import parse_reports
from remediator.rules import load_ruleset

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
BATCH = 256


def seed_history(
    url: str, *, hosts: int, rounds: int, interval_s: int, seed: int = 3, fault_fraction: float = 0.1
) -> tuple[dt.datetime, dt.datetime]:
    """`rounds` reports of every host of a simulated fleet, `interval_s` apart from START, stored through
    ingest; returns the first and last report times. A tenth of the hosts carry a fault (the sim's default),
    so rules fire during the replay."""
    fleet = SimulatedFleet(hosts, seed=seed, fault_fraction=fault_fraction)
    database = Database(url, pool_size=1)
    with database.session() as session:
        apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="bench")
    quiet = load_ruleset([], include_default=False)
    began = time.perf_counter()
    at = START
    for n in range(rounds):
        at = START + dt.timedelta(seconds=n * interval_s)
        texts = [r.model_dump_json() for r in fleet.reports(at, interval_s=interval_s)]
        reports, _ = parse_reports(texts, now=at)
        for i in range(0, len(reports), BATCH):
            with database.session() as session:
                ingest(session, reports[i : i + BATCH], ruleset=quiet, now=at)
        if n % 10 == 9:
            print(f"  seeded {n + 1}/{rounds} rounds ({time.perf_counter() - began:.0f} s)", flush=True)
    database.dispose()
    return START, at
