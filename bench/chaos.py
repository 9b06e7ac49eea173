"""Failure: a fleet reporting through the production topology while its parts are killed (issue 13).

    .venv/bin/python bench/chaos.py [--hosts 2000] [--rounds 12] [--interval 15]

Starts its own PostgreSQL 15 (initdb + pg_ctl) and its own Redis (append-only file, appendfsync
always) on free ports, `fleetfix db upgrade`, then as processes: `fleetfix api` (production
settings), two `fleetfix ingester`, `fleetfix worker`, `fleetfix scheduler`. N simulated hosts
(checker/sim, a tenth of them with a fault) report every `--interval` seconds as agents do: signed
with their own credential into the Redis ingest stream, and a few over HTTP with their token
(`POST /api/v1/reports`); a report counts as acknowledged when XADD returned an id or the API
answered 200 naming it. Agents keep what was not acknowledged and send it again (so does this).
The faulty hosts' cyborg executors run in this process (simulated driver, journal on disk), as a
Celery worker on their host.<name> queues, sharing the virtual hosts the reports come from.

While the fleet reports, in this order:
  1. kill -9 an ingester while it holds read, unacknowledged entries (mid-batch); a new one starts;
  2. kill -9 the worker (and its pool) while it holds unacknowledged tasks; it is started again;
  3. PostgreSQL crash-restart (`pg_ctl restart -m immediate`);
  4. kill -9 Redis while reports are being added, and start it again on the same append-only file.
After each, a probe report of a reserved host is published and the time until it is stored is the
time to recover. At the end the stream is drained (a dead consumer's entries are claimed after the
ingesters' 60 s) and the database is compared with what was acknowledged.

Every report is made distinct (a line in one collector's `problems`, which no deriver reads), so
each is its own stored row and "stored" is "its id is in the reports table"; without that, a
report equal to its predecessor only adds to that row's `repeats`, and a late one equal to a
stored state is dropped as held by it — counted, but not by id.

Exits 1 if an acknowledged report is not stored, a remediation or ticket is duplicated, or a
non-idempotent host action ran more than once for one envelope or one step.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._databases import issue_host_tokens  # noqa: E402
from bench._services import OwnPostgres, OwnRedis, Service, fleetfix_env, free_port  # noqa: E402
from checker.sim import SimulatedFleet, VirtualHost  # noqa: E402
from core.db import Database  # noqa: E402
from core.queue import INGEST_GROUP, INGEST_STREAM, create_celery, host_queue  # noqa: E402
from core.signing import report_key, sign_report  # noqa: E402
from cyborg.actions import lookup  # noqa: E402
from cyborg.envelope import generate_keypair, load_verifier  # noqa: E402
from cyborg.host.executor import CeleryReporter, HostExecutor  # noqa: E402
from cyborg.host.journal import JOURNAL_FILE, Journal, JournalEntry  # noqa: E402
from remediator.inventory import HostInventory, apply_inventory  # noqa: E402

REPORT_INTERVAL_S = 60  # what the reports say; the central side marks a host unreachable after 3 of them
SECRET = "chaos-bench-" + "k" * 32


@dataclass
class Acked:
    host: str
    path: str  # stream or http
    at: float


@dataclass
class Fault:
    name: str
    at: float = 0.0
    detail: str = ""
    probe_acked: float | None = None
    probe_stored: float | None = None


@dataclass
class Run:
    """What the fleet was told is stored, and what the host executors did."""

    acked: dict[uuid.UUID, Acked] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    resent: int = 0  # sends repeated after an error (agents' spool)
    round: int = 0
    round_share: float = 0.0  # how much of the current round is published
    executions: list[tuple[str, int, int, int, str, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class CountingExecutor(HostExecutor):
    """The real executor; every time it starts the driver for an envelope is written down."""

    run: Run

    def _execute(self, entry: JournalEntry, action: Any, params: Any) -> dict[str, Any]:
        with self.run.lock:
            self.run.executions.append(
                (
                    entry.id,
                    entry.remediation_id,
                    entry.step,
                    entry.attempt,
                    entry.action,
                    lookup(entry.action).idempotent,
                )
            )
        return super()._execute(entry, action, params)


def distinct_report(host: VirtualHost, now: dt.datetime, seq: int) -> tuple[uuid.UUID, dict[str, Any]]:
    report = host.report(now, interval_s=REPORT_INTERVAL_S).model_dump(mode="json")
    collector = next(iter(report["collectors"]))
    report["collectors"][collector]["problems"].append(f"chaos bench: report {seq} of {host.hostname}")
    return uuid.UUID(report["report_id"]), report


class Publisher:
    """The fleet's agents: each round every host reports; what fails is sent again until acknowledged."""

    def __init__(
        self,
        run: Run,
        fleet: list[VirtualHost],
        lock: threading.RLock,
        redis_url: str,
        api: str,
        tokens: dict[str, str],
        http_hosts: set[str],
    ) -> None:
        self.run = run
        self.hosts = fleet
        self.lock = lock
        self.client = redis.Redis.from_url(redis_url, socket_timeout=10)
        self.http = httpx.Client(base_url=api, timeout=30)
        self.tokens = tokens
        self.keys = {name: report_key(token) for name, token in tokens.items()}
        self.http_hosts = http_hosts
        self.seq = 0

    def report(self, host: VirtualHost) -> tuple[uuid.UUID, dict[str, Any]]:
        with self.lock:
            self.seq += 1
            return distinct_report(host, dt.datetime.now(dt.UTC), self.seq)

    def xadd_until_acked(self, batch: list[tuple[uuid.UUID, str, str]]) -> None:
        while True:
            try:
                pipe = self.client.pipeline(transaction=False)
                for _, hostname, body in batch:
                    pipe.xadd(
                        INGEST_STREAM,
                        {"report": body, "host": hostname, "sig": sign_report(self.keys[hostname], body.encode())},
                    )
                pipe.execute()
                break
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                self.run.resent += len(batch)
                time.sleep(0.5)
        now = time.monotonic()
        with self.run.lock:
            for report_id, hostname, _ in batch:
                self.run.acked.setdefault(report_id, Acked(hostname, "stream", now))

    def post_until_acked(self, report_id: uuid.UUID, hostname: str, report: dict[str, Any]) -> None:
        headers = {"Authorization": f"Bearer {self.tokens[hostname]}"}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                response = self.http.post("/api/v1/reports", json=report, headers=headers)
            except httpx.HTTPError:
                response = None
            if response is not None and response.status_code == 200:
                body = response.json()
                if str(report_id) in [*body["accepted"], *body["duplicates"]]:
                    with self.run.lock:
                        self.run.acked.setdefault(report_id, Acked(hostname, "http", time.monotonic()))
                    return
            if response is not None and response.status_code in (403, 409, 422):
                self.run.refused.append(f"{report_id}: {response.status_code} {response.text[:200]}")
                return
            self.run.resent += 1
            time.sleep(0.5)
        self.run.refused.append(f"{report_id}: not acknowledged over HTTP within 300 s")

    def publish_round(self) -> None:
        batch: list[tuple[uuid.UUID, str, str]] = []
        for index, host in enumerate(self.hosts):
            self.run.round_share = index / len(self.hosts)
            if not host.reporting:
                continue
            report_id, report = self.report(host)
            if host.hostname in self.http_hosts:
                self.post_until_acked(report_id, host.hostname, report)
                continue
            batch.append((report_id, host.hostname, orjson.dumps(report).decode()))
            if len(batch) >= 100:
                self.xadd_until_acked(batch)
                batch = []
        if batch:
            self.xadd_until_acked(batch)


def start_host_executors(
    run: Run,
    redis_url: str,
    hosts: list[VirtualHost],
    lock: threading.RLock,
    tokens: dict[str, str],
    public_key: Path,
    state: Path,
) -> Any:
    """Cyborg on the faulty hosts: a Celery worker in this process on their host.<name> queues."""
    from celery.worker import WorkController

    import cyborg.host.tasks  # noqa: F401 - registers cyborg.run_action
    from cyborg.drivers.simulated import SimulatedDriver
    from cyborg.host import runtime

    app = create_celery(redis_url)
    verifier = load_verifier(public_key)
    CountingExecutor.run = run
    for host in hosts:
        directory = state / host.hostname
        directory.mkdir(parents=True)
        runtime.install(
            CountingExecutor(
                host.hostname,
                verifier=verifier,
                driver=SimulatedDriver(host, lock=lock),
                journal=Journal(directory / JOURNAL_FILE),
                reporter=CeleryReporter(app, hostname=host.hostname, token=tokens[host.hostname]),
            )
        )
    controller = WorkController(
        app=app,
        pool="threads",
        concurrency=4,
        queues=[host_queue(h.hostname) for h in hosts],
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        hostname="hosts@chaos",
    )
    threading.Thread(target=controller.start, name="host-executors", daemon=True).start()
    return controller


def wait_for(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
        except Exception:  # not up yet
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def consumer_of(service: Service) -> str:
    return f"{socket.gethostname()}-{service.pid}"  # remediator.stream: host name and main thread id


def stored(url: str, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    engine = create_engine(url)
    found: set[uuid.UUID] = set()
    with engine.connect() as conn:
        for start in range(0, len(ids), 5000):
            rows = conn.execute(text("SELECT id FROM reports WHERE id = ANY(:ids)"), {"ids": ids[start : start + 5000]})
            found.update(row[0] for row in rows)
    engine.dispose()
    return found


class Chaos:
    """The faults, injected while the publisher runs, each followed by a probe report."""

    def __init__(
        self,
        run: Run,
        pg: OwnPostgres,
        broker: OwnRedis,
        url: str,
        services: dict[str, Service],
        probe: Publisher,
        probe_host: VirtualHost,
        rounds: int,
    ) -> None:
        self.run, self.pg, self.broker, self.url = run, pg, broker, url
        self.services = services
        self.probe, self.probe_host = probe, probe_host
        self.faults: list[Fault] = []
        share = max(1, rounds // 5)
        self.schedule = [
            (share, self.kill_ingester),
            (2 * share, self.kill_worker),
            (3 * share, self.crash_postgres),
            (4 * share, self.kill_redis),
        ]
        self.thread = threading.Thread(target=self._run, name="chaos", daemon=True)
        self.error: BaseException | None = None
        self.worker_held: list[str] = []

    def _run(self) -> None:
        try:
            for at_round, inject in self.schedule:
                while self.run.round < at_round or self.run.round_share < 0.3:
                    time.sleep(0.05)
                fault = inject()
                self.faults.append(fault)
                self.measure_recovery(fault)
        except BaseException as error:
            self.error = error

    def measure_recovery(self, fault: Fault) -> None:
        report_id, report = self.probe.report(self.probe_host)
        self.probe.xadd_until_acked([(report_id, self.probe_host.hostname, orjson.dumps(report).decode())])
        fault.probe_acked = time.monotonic()
        with self.run.lock:
            self.run.acked.pop(report_id, None)  # probes are counted among the reports as well, below
            self.run.acked[report_id] = Acked(self.probe_host.hostname, "probe", fault.probe_acked)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if stored(self.url, [report_id]):
                    fault.probe_stored = time.monotonic()
                    return
            except Exception as error:  # the database is restarting
                logging.getLogger(__name__).info("bench.probe.retried", extra={"error": str(error)[:200]})
            time.sleep(0.1)

    def kill_ingester(self) -> Fault:
        victim = self.services["ingester-1"]
        client = redis.Redis.from_url(self.broker.url)
        name, held = consumer_of(victim), 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # mid-batch: it has read entries it has not acknowledged
            consumers = {c["name"].decode(): c["pending"] for c in client.xinfo_consumers(INGEST_STREAM, INGEST_GROUP)}
            held = int(consumers.get(name, 0))
            if held:
                break
            time.sleep(0.01)
        fault = Fault("kill -9 ingester", time.monotonic(), f"held {held} unacknowledged entries")
        victim.kill()
        time.sleep(1)  # a supervisor's restart delay
        self.services["ingester-3"] = Service("ingester-3", ["ingester"], victim.env, victim.logs).start()
        return fault

    def kill_worker(self) -> Fault:
        client = redis.Redis.from_url(self.broker.url)
        held = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # kombu keeps a delivered, unacknowledged task in `unacked`
            held = int(client.hlen("unacked"))
            if held:
                break
            time.sleep(0.01)
        fault = Fault("kill -9 worker", time.monotonic(), f"{held} unacknowledged tasks on the broker")
        self.worker_held = held_tasks(client)
        self.services["worker"].kill()
        time.sleep(1)
        self.services["worker"].start()
        return fault

    def crash_postgres(self) -> Fault:
        fault = Fault("PostgreSQL crash-restart", time.monotonic(), "pg_ctl restart -m immediate")
        started = time.monotonic()
        self.pg.crash_restart()
        fault.detail += f", back in {time.monotonic() - started:.1f} s"
        return fault

    def kill_redis(self) -> Fault:
        client = redis.Redis.from_url(self.broker.url)
        before = int(client.xlen(INGEST_STREAM))
        fault = Fault("kill -9 Redis", time.monotonic())
        self.broker.kill()
        time.sleep(1)
        started = time.monotonic()
        self.broker.start()
        after = int(redis.Redis.from_url(self.broker.url).xlen(INGEST_STREAM))
        fault.detail = (
            f"stream {before} -> {after} entries after AOF replay, back in {time.monotonic() - started:.1f} s"
        )
        return fault


def held_tasks(client: redis.Redis) -> list[str]:
    """Tasks kombu's Redis transport holds as delivered and not acknowledged (its `unacked` hash)."""
    held = []
    for raw in client.hvals("unacked"):
        message = orjson.loads(raw)[0]
        held.append(f"{message['headers']['task']}{message['headers'].get('argsrepr', '')}")
    return sorted(held)


def metric(api: str, name: str) -> dict[str, float]:
    values: dict[str, float] = collections.defaultdict(float)
    for line in httpx.get(f"{api}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + "{"):
            label = line[line.index("{") + 1 : line.index("}")]
            values[label] += float(line.rsplit(" ", 1)[1])
    return values


def drain(run: Run, url: str, broker: OwnRedis, timeout: float) -> float:
    """Until every acknowledged report is stored and the stream holds nothing; returns seconds waited."""
    client = redis.Redis.from_url(broker.url)
    started = time.monotonic()
    ids = list(run.acked)
    while time.monotonic() - started < timeout:
        missing = set(ids) - stored(url, ids)
        ids = list(missing)
        if not ids and client.xlen(INGEST_STREAM) == 0:
            break
        time.sleep(1)
    return time.monotonic() - started


def settle(url: str, broker: OwnRedis, timeout: float) -> None:
    """Until remediations stop moving: no task waiting on `remediate` and the active count unchanged."""
    client = redis.Redis.from_url(broker.url)
    engine = create_engine(url)
    last, calm, deadline = None, 0, time.monotonic() + timeout
    while time.monotonic() < deadline and calm < 10:
        with engine.connect() as conn:
            now = conn.execute(text("SELECT count(*), max(updated_at) FROM remediations WHERE active")).one()
        calm = calm + 1 if now == last and client.llen("remediate") == 0 else 0
        last = now
        time.sleep(2)
    engine.dispose()


def figures(run: Run, url: str, api: str, faults: list[Fault], started: float) -> int:
    """Prints the tables; returns how many problems (loss, duplication) were found."""
    problems = 0
    acked = dict(run.acked)
    found = stored(url, list(acked))
    lost = [rid for rid in acked if rid not in found]
    engine = create_engine(url)
    with engine.connect() as conn:
        rows, repeats = conn.execute(text("SELECT count(*), coalesce(sum(repeats), 0) FROM reports")).one()
        remediations = conn.execute(
            text(
                "SELECT r.id, h.hostname, r.rule_id, r.subject, r.rung, r.previous_id, r.state::text,"
                " r.evidence->>'report_id', r.created_at, r.held_reason, r.updated_at"
                " FROM remediations r JOIN hosts h ON h.id = r.host_id"
            )
        ).all()
        tickets = conn.execute(text("SELECT id, dedup_key, remediation_id, state::text, created_at FROM tickets")).all()
        counted = conn.execute(
            text(
                "SELECT ticket_id, detail->>'remediation_id' AS rem, count(*) FROM ticket_events"
                " WHERE kind IN ('opened', 'detected_again') AND detail->>'remediation_id' IS NOT NULL"
                " GROUP BY 1, 2 HAVING count(*) > 1"
            )
        ).all()
    engine.dispose()
    by_path = collections.Counter(a.path for a in acked.values())
    outcomes = metric(api, "fleetfix_reports_total")
    print("\nreports")
    print(
        f"  acknowledged            {len(acked):8d}  (stream {by_path['stream']}, http {by_path['http']}, "
        f"probes {by_path['probe']}); sent again after an error: {run.resent}"
    )
    print(f"  stored (id in reports)  {len(found):8d}  rows in reports {rows}, repeats {repeats}")
    print(f"  lost                    {len(lost):8d}  {' '.join(map(str, lost[:5]))}")
    print(f"  refused                 {len(run.refused):8d}  {run.refused[:3]}")
    print(
        "  ingest outcomes (/metrics, all processes): "
        + ", ".join(f"{k.split('=')[1].strip(chr(34))} {v:.0f}" for k, v in sorted(outcomes.items()))
    )
    problems += len(lost) + len(run.refused)

    bounds = [started, *(f.at for f in faults), float("inf")]
    phases = ["before faults", *(f"after {f.name}" for f in faults)]
    wall = time.time() - time.monotonic()  # database times are wall-clock

    def phase_of(created: dt.datetime) -> str:
        return next(p for p, hi in zip(phases, bounds[1:], strict=False) if created.timestamp() - wall < hi)

    same_firing = collections.Counter((r[1], r[2], r[7]) for r in remediations if r[4] == 0 and r[7])
    same_escalation = collections.Counter(r[5] for r in remediations if r[5] is not None)
    dup_firings = {k: n for k, n in same_firing.items() if n > 1}
    dup_escalations = {k: n for k, n in same_escalation.items() if n > 1}
    repeated = collections.Counter((r[1], r[2], r[3]) for r in remediations)
    same_ticket = collections.Counter((t[1], t[2]) for t in tickets if t[2] is not None)
    dup_tickets = {k: n for k, n in same_ticket.items() if n > 1}
    open_keys = collections.Counter(t[1] for t in tickets if t[3] not in ("closed", "cancelled"))
    dup_open = {k: n for k, n in open_keys.items() if n > 1}
    print("\nremediations and tickets, by when they were created")
    print(f"  {'phase':<34} {'remediations':>12} {'tickets':>8}")
    for phase in phases:
        print(
            f"  {phase:<34} {sum(phase_of(r[8]) == phase for r in remediations):12d}"
            f" {sum(phase_of(t[4]) == phase for t in tickets):8d}"
        )
    states = collections.Counter(r[6] for r in remediations)
    print(f"  remediation states at the end: {dict(sorted(states.items()))}")
    for r in [r for r in remediations if r[6] in ("detected", "planned", "running")][:6]:
        print(
            f"    still {r[6]:<8} #{r[0]} {r[1]} {r[2]}, last change {r[10]:%H:%M:%S}: {r[9][:100] or 'no reason held'}"
        )
    print(f"  one firing (host, rule, report) planned twice:        {len(dup_firings)} {list(dup_firings)[:3]}")
    print(f"  one remediation escalated twice:                      {len(dup_escalations)}")
    print(
        f"  (host, rule, subject) with more than one remediation: "
        f"{sum(n > 1 for n in repeated.values())} (escalation rungs and re-fires after an end; not duplicates)"
    )
    print(f"  tickets opened twice by one remediation:              {len(dup_tickets)} {list(dup_tickets)[:3]}")
    print(f"  open tickets sharing a dedup key (host, part):        {len(dup_open)}")
    print(f"  a remediation's detection counted twice on a ticket:  {len(counted)} {counted[:3]}")
    problems += len(dup_firings) + len(dup_escalations) + len(dup_tickets) + len(dup_open) + len(counted)

    per_envelope = collections.Counter(e[0] for e in run.executions)
    per_step = collections.defaultdict(set)
    for envelope, remediation, step, _attempt, _action, idempotent in run.executions:
        if not idempotent:
            per_step[(remediation, step)].add(envelope)
    twice = {e: n for e, n in per_envelope.items() if n > 1}
    twice_bad = [e for e in run.executions if e[0] in twice and not e[5]]
    steps_twice = {k: v for k, v in per_step.items() if len(v) > 1}
    actions = collections.Counter(e[4] for e in run.executions)
    print("\nhost actions (cyborg executors of the faulty hosts, simulated driver, journal on disk)")
    print(f"  envelopes run {len(per_envelope)}, driver starts {len(run.executions)}: {dict(actions)}")
    print(f"  envelopes whose driver started more than once: {len(twice)} (non-idempotent: {len(twice_bad)})")
    print(f"  non-idempotent steps run under two envelopes:  {len(steps_twice)} {list(steps_twice.items())[:3]}")
    problems += len(twice_bad) + len(steps_twice)

    print("\nfaults and recovery (probe: a report published right after the fault, until it is stored)")
    for fault in faults:
        recovered = f"{fault.probe_stored - fault.at:6.1f} s" if fault.probe_stored else "  never"
        print(f"  {fault.name:<26} recovered in {recovered}   {fault.detail}")
        if not fault.probe_stored:
            problems += 1
    return problems


def inject_lockups(fleet: SimulatedFleet, count: int) -> list[str]:
    """Soft lockups every 10 s on `count` healthy hosts, one a rack (the rack cap is one host out): the
    default pack's soft-lockups rule plans a warm reboot on each, so non-idempotent host actions run
    while the faults are injected. Never the last host, which stays healthy as the probe."""
    chosen: list[str] = []
    racks: set[str] = set()
    for host in fleet.hosts[:-1]:
        if len(chosen) >= count:
            break
        if host.faults or host.rack in racks:
            continue
        fault = fleet.fault("soft_lockups")
        fault.per_hour = 360.0
        host.inject(fault)
        racks.add(host.rack)
        chosen.append(host.hostname)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=12, help="reports per host")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds from one round's start to the next")
    parser.add_argument("--fault-fraction", type=float, default=0.1)
    parser.add_argument("--http-hosts", type=int, default=40, help="hosts that report over HTTP, not the stream")
    parser.add_argument(
        "--reboots",
        type=int,
        default=8,
        help="hosts (one a rack) given soft lockups every 10 s: soft-lockups plans a reboot, a non-idempotent action",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, databases)")
    args = parser.parse_args()
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores; load average at start {os.getloadavg()}")
    print("own PostgreSQL 15 (fsync on) and Redis (appendonly yes, appendfsync always) on free ports")
    work = Path(tempfile.mkdtemp(prefix="fleetfix-chaos-"))
    work.chmod(0o755)  # PostgreSQL runs as its own user below it
    logging.basicConfig(filename=work / "bench.log", level=logging.WARNING)
    pg, broker = OwnPostgres(work / "postgres"), OwnRedis(work / "redis")
    services: dict[str, Service] = {}
    controller = None
    problems = 1
    began = time.monotonic()
    try:
        pg.start()
        broker.start()
        url = pg.create_database("fleetfix")
        generate_keypair(work / "action-key.pem", work / "action-key.pub")
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        env = fleetfix_env(
            FLEETFIX_ENVIRONMENT="production",
            FLEETFIX_SECRET_KEY=SECRET,
            FLEETFIX_DATABASE_URL=url,
            FLEETFIX_BROKER_URL=broker.url,
            FLEETFIX_DATA_DIR=str(work / "data"),
            FLEETFIX_PUBLIC_URL="https://fleetfix.example.net",
            FLEETFIX_API_PORT=str(port),
            FLEETFIX_ACTION_KEY_FILE=str(work / "action-key.pem"),
            FLEETFIX_LOG_FORMAT="json",
            FLEETFIX_LOG_LEVEL="INFO",
            FLEETFIX_REPORT_INTERVAL_S=str(REPORT_INTERVAL_S),
        )
        with (work / "db-upgrade.log").open("w") as log:
            subprocess.run(
                [sys.executable, "-m", "api", "db", "upgrade"], env=env, cwd=REPO, check=True, stdout=log, stderr=log
            )
        fleet = SimulatedFleet(args.hosts + 1, seed=13, fault_fraction=args.fault_fraction)
        lockups = inject_lockups(fleet, args.reboots)
        probe_host = next(h for h in reversed(fleet.hosts) if not h.faults)
        hosts = [h for h in fleet.hosts if h is not probe_host]
        database = Database(url, pool_size=1)
        with database.session() as session:
            apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="bench")
        database.dispose()
        tokens = issue_host_tokens(url, (h.hostname for h in fleet.hosts))
        logs = work / "logs"
        logs.mkdir()
        for name, command in [
            ("api", ["api"]),
            ("ingester-1", ["ingester"]),
            ("ingester-2", ["ingester"]),
            ("worker", ["worker", "--concurrency", "2"]),
            ("scheduler", ["scheduler"]),
        ]:
            services[name] = Service(name, command, env, logs).start()
        wait_for(lambda: httpx.get(f"{api}/readyz", timeout=2).status_code == 200, 60, "the API's /readyz")
        client = redis.Redis.from_url(broker.url)
        wait_for(lambda: len(client.xinfo_consumers(INGEST_STREAM, INGEST_GROUP)) >= 2, 60, "two ingesters")
        faulty = [h for h in hosts if h.faults]
        lock = threading.RLock()
        run = Run()
        controller = start_host_executors(
            run, broker.url, faulty, lock, tokens, work / "action-key.pub", work / "hosts"
        )
        http_hosts = {h.hostname for h in hosts if not h.faults}
        http_hosts = set(sorted(http_hosts)[: args.http_hosts])
        publisher = Publisher(run, hosts, lock, broker.url, api, tokens, http_hosts)
        chaos = Chaos(
            run,
            pg,
            broker,
            url,
            services,
            Publisher(run, [], lock, broker.url, api, tokens, set()),
            probe_host,
            args.rounds,
        )
        print(f"soft lockups every 10 s on {len(lockups)} hosts in distinct racks (soft-lockups: a warm reboot)")
        print(
            f"hosts {len(hosts)} ({len(faulty)} with a fault, {len(http_hosts)} over HTTP) + 1 probe host; "
            f"{args.rounds} rounds every {args.interval:.0f} s; scratch {work}"
        )
        started = time.monotonic()
        chaos.thread.start()
        for n in range(args.rounds):
            run.round, run.round_share = n, 0.0
            round_began = time.monotonic()
            publisher.publish_round()
            print(
                f"  round {n:2d}: published in {time.monotonic() - round_began:5.1f} s "
                f"(acknowledged so far {len(run.acked)})",
                flush=True,
            )
            time.sleep(max(0.0, args.interval - (time.monotonic() - round_began)))
        run.round = args.rounds + 1
        chaos.thread.join(600)
        if chaos.error is not None:
            raise chaos.error
        waited = drain(run, url, broker, 600)
        print(f"stream drained {waited:.0f} s after the last round")
        settle(url, broker, 180)
        problems = figures(run, url, api, chaos.faults, started)
        left = held_tasks(redis.Redis.from_url(broker.url))
        print("\ntasks the killed worker held when it died (kombu `unacked`):", ", ".join(chaos.worker_held) or "none")
        print(f"still delivered and unacknowledged at the end: {len(left)}", ", ".join(left[:8]))
        print(
            "  (the Redis transport gives them to another worker only after its visibility_timeout, 3600 s unless set)"
        )
    finally:
        if controller is not None:
            controller.stop(in_sighandler=False)
        for service in services.values():
            service.stop()
        broker.stop()
        pg.stop()
        if not args.keep and problems == 0:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        print(f"\nran {time.monotonic() - began:.0f} s; load average at end {os.getloadavg()}")
        print(f"scratch directory (logs): {work}" if work.exists() else "scratch directory removed")
    print("RESULT:", "no loss, no duplication" if problems == 0 else f"{problems} problem(s) found")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
