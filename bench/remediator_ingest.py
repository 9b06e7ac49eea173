"""Ingest throughput and report-to-ticket latency at fleet scale, beside this machine's ceiling.

    .venv/bin/python bench/remediator_ingest.py [--hosts 10000] [--rounds 3]

Needs the machine's PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379, db 8).
Prints figures; asserts nothing. Every figure is measured in this run:

1. service:   remediator.ingest.ingest() in batches of 256, steady state (hosts known),
              against a bare COPY of the same report rows into a scratch table (the ceiling).
2. celery:    single-report Celery messages pre-loaded into Redis, drained by a real
              `fleetfix worker --queues ingest,remediate --concurrency 2`, against the same ceiling.
3. stream:    the same reports pre-loaded into the Redis ingest stream, each signed with its
              host's credential as agents do, drained by two `fleetfix ingester` processes (one
              per core) that require signatures, against the same ceiling.
4. latency:   reports published to the stream at a steady rate while some hosts have a DIMM CE
              storm (ingesters + a remediate worker running); time from publishing the report that
              causes a ticket (its host's last one sent before the ticket) to the ticket's creation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
from sqlalchemy import create_engine, select, text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from api.runtime import build_central  # noqa: E402
from api.settings import load_central_settings  # noqa: E402
from bench._databases import create_database, drop_database, issue_host_tokens  # noqa: E402
from checker.sim import SimulatedFleet  # noqa: E402
from core.db import Database  # noqa: E402
from core.process import tune_gc  # noqa: E402
from core.queue import INGEST_QUEUE, INGEST_STREAM, create_celery  # noqa: E402
from core.signing import report_key, sign_report  # noqa: E402
from migrations import upgrade  # noqa: E402
from remediator.ingest import ingest  # noqa: E402
from remediator.inventory import HostInventory, apply_inventory  # noqa: E402
from remediator.payloads import parse_reports  # noqa: E402
from remediator.rules import load_ruleset  # noqa: E402
from ticketing.models import Ticket  # noqa: E402

REDIS = "redis://127.0.0.1:6379/8"
BATCH = 256


def fresh_database(name: str) -> str:
    url = create_database(name)
    upgrade(url)
    return url


def round_payloads(fleet: SimulatedFleet, at: dt.datetime) -> list[dict]:
    return [r.model_dump(mode="json") for r in fleet.reports(at)]


def round_texts(fleet: SimulatedFleet, at: dt.datetime) -> list[str]:
    """Reports as agents send them: JSON text."""
    return [r.model_dump_json() for r in fleet.reports(at)]


def copy_ceiling(url: str, payloads: list[dict]) -> float:
    """Reports/s of a bare COPY of the same rows the ingest stores (id, host, times, digest, body)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS copy_ceiling (LIKE reports INCLUDING DEFAULTS)"))
        conn.execute(text("ALTER TABLE copy_ceiling DROP CONSTRAINT IF EXISTS copy_ceiling_host_id_fkey"))
    rows = [
        (uuid.uuid4(), 1, p["captured_at"], p["captured_at"], 0, "x" * 64, p["captured_at"], 1, json.dumps(p))
        for p in payloads
    ]
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        started = time.perf_counter()
        for start in range(0, len(rows), BATCH):
            with cursor.copy(
                "COPY copy_ceiling (id, host_id, captured_at, last_captured_at, repeats, digest, received_at,"
                " schema_version, body) FROM STDIN"
            ) as copy:
                for row in rows[start : start + BATCH]:
                    copy.write_row(row)
            raw.commit()
        elapsed = time.perf_counter() - started
    finally:
        raw.close()
        engine.dispose()
    return len(payloads) / elapsed


def register_inventory(url: str, fleet: SimulatedFleet) -> None:
    """Where each host stands, as `fleetfix hosts import` would set it."""
    database = Database(url, pool_size=1)
    with database.session() as session:
        apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="bench")
    database.dispose()


_credentials: dict[str, bytes] = {}


def host_credentials(url: str, fleet: SimulatedFleet) -> dict[str, bytes]:
    """A credential per host, as `fleetfix tokens issue --host` makes them; returns each host's signing key."""
    if _credentials:
        return _credentials
    tokens = issue_host_tokens(url, (h.hostname for h in fleet.hosts))
    _credentials.update({name: report_key(token) for name, token in tokens.items()})
    return _credentials


def service_throughput(url: str, fleet: SimulatedFleet, rounds: int, start: dt.datetime) -> tuple[float, int]:
    database = Database(url, pool_size=2)
    ruleset = load_ruleset([])
    # the service's runtime around that database (planning reads the remediator's settings off the session)
    build_central(
        load_central_settings(), database=database, celery=create_celery("memory://", include=("remediator.tasks",))
    )
    # rounds 0 and 1 register the hosts and their first changes; they are not timed
    for warmup in range(2):
        reports, _ = parse_reports(round_texts(fleet, start + dt.timedelta(minutes=warmup)))
        for i in range(0, len(reports), BATCH):
            with database.session() as session:
                ingest(session, reports[i : i + BATCH], ruleset=ruleset)
    tune_gc()  # as `fleetfix ingester` and `fleetfix worker` do at start-up
    total = 0
    elapsed = 0.0
    for n in range(2, rounds + 2):
        payloads = round_texts(fleet, start + dt.timedelta(minutes=n))
        began = time.perf_counter()
        reports, _ = parse_reports(payloads)
        for i in range(0, len(reports), BATCH):
            with database.session() as session:
                ingest(session, reports[i : i + BATCH], ruleset=ruleset)
        elapsed += time.perf_counter() - began
        total += len(payloads)
    database.dispose()
    return total / elapsed, total


CELERY_WORKER = ("worker", "--queues", "ingest,remediate", "--concurrency", "2")


def start_worker(
    url: str, log: Path, args: tuple[str, ...] = CELERY_WORKER, **settings: str
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_")}
    env.update(
        FLEETFIX_DATABASE_URL=url,
        FLEETFIX_BROKER_URL=REDIS,
        FLEETFIX_DATA_DIR=str(log.parent),
        FLEETFIX_LOG_LEVEL="WARNING",
        **settings,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "api", *args],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def count_reports(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(text("SELECT coalesce(sum(repeats + 1), 0) FROM reports")).scalar_one()
    engine.dispose()
    return int(n)


def drain(url: str, expected: int, baseline: int) -> float:
    """Reports/s from the first stored report until `expected` more are stored."""
    deadline = time.monotonic() + 600
    began = None
    first = 0
    while time.monotonic() < deadline:
        done = count_reports(url) - baseline
        if began is None and done > 0:
            began, first = time.perf_counter(), done
        if done >= expected:
            break
        time.sleep(0.2)
    elapsed = time.perf_counter() - (began or time.perf_counter())
    return (expected - first) / elapsed if elapsed else float("nan")


def celery_throughput(url: str, fleet: SimulatedFleet, start: dt.datetime, workdir: Path) -> tuple[float, int]:
    redis.Redis.from_url(REDIS).flushdb()
    app = create_celery(REDIS)
    baseline = count_reports(url)
    texts = round_texts(fleet, start)
    with app.producer_or_acquire() as producer:
        for text_ in texts:
            app.send_task("remediator.ingest_report", args=[text_], queue=INGEST_QUEUE, producer=producer)
    worker = start_worker(url, workdir / "worker.log")
    try:
        rate = drain(url, len(texts), baseline)
    finally:
        stop(worker)
    return rate, len(texts)


def stream_throughput(url: str, fleet: SimulatedFleet, start: dt.datetime, workdir: Path) -> tuple[float, int]:
    client = redis.Redis.from_url(REDIS)
    client.flushdb()
    baseline = count_reports(url)
    texts = round_texts(fleet, start)
    keys = host_credentials(url, fleet)
    pipe = client.pipeline(transaction=False)
    for i, text_ in enumerate(texts):
        hostname = text_[text_.index('"hostname":"') + 12 :].split('"', 1)[0]
        sig = sign_report(keys[hostname], text_.encode())
        pipe.xadd(INGEST_STREAM, {"report": text_, "host": hostname, "sig": sig})
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()
    ingesters = [
        start_worker(url, workdir / f"ingester-{n}.log", ("ingester",), FLEETFIX_REQUIRE_SIGNED_REPORTS="true")
        for n in range(2)
    ]
    try:
        rate = drain(url, len(texts), baseline)
    finally:
        for proc in ingesters:
            stop(proc)
    return rate, len(texts)


def latency(url: str, fleet: SimulatedFleet, start: dt.datetime, workdir: Path, rate: float) -> list[float]:
    """Two rounds of every host's report into the stream, paced at `rate`/s, while 15 hosts across the
    fleet have a CE storm (more at once in one datacenter would trip the rule's breaker, by design)."""
    client = redis.Redis.from_url(REDIS)
    client.flushdb()
    storm = [h for h in fleet.hosts if not h.faults][:: max(1, len(fleet.hosts) // 15)][:15]
    for host in storm:
        host.inject(fleet.fault("dimm_ce_storm", 0))
    storm_names = {h.hostname for h in storm}
    processes = [
        start_worker(url, workdir / "latency-worker.log", ("worker", "--queues", "remediate", "--concurrency", "1")),
        *[
            start_worker(
                url, workdir / f"latency-ingester-{n}.log", ("ingester",), FLEETFIX_REQUIRE_SIGNED_REPORTS="true"
            )
            for n in range(2)
        ],
    ]
    keys = host_credentials(url, fleet)
    sent_at: dict[str, list[float]] = {name: [] for name in storm_names}
    try:
        time.sleep(3)
        interval = 1.0 / rate
        # Three rounds: without earlier reports of these hosts, the first only sets the counters,
        # the second gives the first rate, and `for: 30s` is met at the third.
        for at in (start, start + dt.timedelta(minutes=1), start + dt.timedelta(minutes=2)):
            texts = [(r.host.hostname, r.model_dump_json()) for r in fleet.reports(at)]
            next_send = time.perf_counter()
            for hostname, text_ in texts:
                now = time.perf_counter()
                if now < next_send:
                    time.sleep(next_send - now)
                next_send += interval
                sig = sign_report(keys[hostname], text_.encode())
                if hostname in storm_names:
                    sent_at[hostname].append(time.time())
                client.xadd(INGEST_STREAM, {"report": text_, "host": hostname, "sig": sig})
        engine = create_engine(url)
        deadline = time.monotonic() + 60
        found: list = []
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                found = conn.execute(
                    select(Ticket.hostname, Ticket.created_at).where(Ticket.hostname.in_(storm_names))
                ).all()
            if len(found) >= len(storm_names):
                break
            time.sleep(0.2)
        engine.dispose()
    finally:
        for proc in processes:
            stop(proc)
    # The report that caused a ticket is the last one of its host sent before the ticket was made.
    return [
        created.timestamp() - max(t for t in sent_at[name] if t <= created.timestamp())
        for name, created in found
        if any(t <= created.timestamp() for t in sent_at.get(name, []))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=2000.0, help="reports/s for the latency run")
    parser.add_argument(
        "--only",
        default="service,celery,stream,latency",
        help="comma-separated parts to run (the COPY ceiling always runs): service, celery, stream, latency",
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores; hosts {args.hosts}; batch {BATCH}")
    name = f"fleetfix_bench_{uuid.uuid4().hex[:8]}"
    url = fresh_database(name)
    workdir = Path(tempfile.mkdtemp(prefix="fleetfix-bench-"))
    try:
        fleet = SimulatedFleet(args.hosts, seed=3, fault_fraction=0.0)
        register_inventory(url, fleet)
        start = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
        sample = round_payloads(fleet, start)[:2000]
        size = statistics.mean(len(json.dumps(p)) for p in sample)
        print(f"report size: {size / 1024:.1f} KiB of JSON (mean of {len(sample)})")
        ceiling = copy_ceiling(url, sample * max(1, min(args.hosts, 10_000) // len(sample)))
        print(f"ceiling  bare COPY of the same rows:            {ceiling:8.0f} reports/s")
        if "service" in parts:
            service, n = service_throughput(url, fleet, args.rounds, start)
            print(
                f"service  ingest() in batches, steady state:    {service:8.0f} reports/s  ({n} reports)"
                f"  = {service / ceiling:.2f} x ceiling"
            )
        later = start + dt.timedelta(minutes=args.rounds + 2)
        if "celery" in parts:
            celery, n = celery_throughput(url, fleet, later, workdir)
            print(
                f"celery   Redis -> worker (2 procs) -> PostgreSQL: {celery:8.0f} reports/s  ({n} reports)"
                f"  = {celery / ceiling:.2f} x ceiling"
            )
        if "stream" in parts:
            stream, n = stream_throughput(url, fleet, later + dt.timedelta(minutes=1), workdir)
            print(
                f"stream   Redis stream -> 2 ingesters -> PostgreSQL: {stream:8.0f} reports/s  ({n} reports)"
                f"  = {stream / ceiling:.2f} x ceiling"
            )
        lat = latency(url, fleet, later + dt.timedelta(minutes=5), workdir, args.rate) if "latency" in parts else None
        if lat is None:
            pass
        elif lat:
            lat.sort()
            p50 = lat[len(lat) // 2]
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            print(
                f"latency  report -> ticket at {args.rate:.0f} reports/s: p50 {p50:.2f} s  p99 {p99:.2f} s"
                f"  ({len(lat)} storm hosts)"
            )
        else:
            print("latency  no ticket was opened: see the worker log in", workdir)
    finally:
        drop_database(name)


if __name__ == "__main__":
    main()
