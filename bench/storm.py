"""The storm of issue 13: 30% of a datacenter faults at once with 4 workers; the blast-radius caps hold,
the rule's breaker trips, and Slack hears one grouped message per channel, not one per host or per kind.

    .venv/bin/python bench/storm.py [--hosts 1000] [--fraction 0.3] [--workers 4] [--ingest stream]

Needs the machine's PostgreSQL (127.0.0.1:5432; a database of its own, dropped at the end) and
`redis-server` (its own, on a free port). Every process is real: 4 `fleetfix worker --concurrency 1`
(ingest, remediate, notify), 2 `fleetfix ingester` reading the Redis ingest stream as agents' reports
arrive there (`--ingest tasks`: agents' `remediator.ingest_reports` messages to the workers instead),
and `fleetfix scheduler`; Slack is ticketing.notify.receiver.SlackReceiver over real HTTP, in webhook
mode with the default 30 s grouping window.

One datacenter of `--hosts` simulated hosts, 20 to a rack, in the inventory; every host signs its
reports with its own credential and reports every `--interval` seconds with the real clock. After
two quiet rounds a DIMM CE storm (20-80 CE/s) starts on `--fraction` of them at once: the default
pack's dimm-ce-storm rule (drain + ticket, `for: 30s`) fires on all of them in the same round.
The caps count hosts out of service (an admitted disruptive remediation, or drained); a sampler
reads them from the database every 200 ms. Exits 1 if a cap was exceeded or no breaker tripped.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from sqlalchemy import Select, create_engine, func, select
from sqlalchemy.engine import Engine

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._databases import create_database, drop_database, issue_host_tokens  # noqa: E402
from bench._storm_probe import Location, OutOfService  # noqa: E402
from bench._storm_report import RULE, report  # noqa: E402
from checker.sim import SimulatedFleet  # noqa: E402
from core.db import Database, utcnow  # noqa: E402
from core.queue import INGEST_QUEUE, INGEST_STREAM, create_celery  # noqa: E402
from core.signing import report_key, sign_report  # noqa: E402
from migrations import upgrade  # noqa: E402
from remediator.inventory import HostInventory, apply_inventory  # noqa: E402
from remediator.models import Host, Remediation, RuleState  # noqa: E402
from remediator.rules import load_ruleset  # noqa: E402
from ticketing.notify.models import AlertDelivery, AlertOutbox, DeliveryState  # noqa: E402
from ticketing.notify.receiver import SlackReceiver  # noqa: E402

DATACENTER = "ams1"
RACK_SIZE = 20
FAULT = "dimm_ce_storm"
CHANNEL = "#fleet"
WEBHOOK_PATH_END = "storm-bench"  # the last part of the webhook URL (Slack's is a secret)
ALERTS_WINDOW_S = 30  # the default grouping window (FLEETFIX_ALERTS_WINDOW_S)


def one_datacenter(size: int, seed: int) -> SimulatedFleet:
    """The simulated fleet's hosts, all moved into one datacenter: 20 to a rack, a cluster per class."""
    fleet = SimulatedFleet(size, seed=seed, fault_fraction=0.0)
    for index, host in enumerate(fleet.hosts):
        rack_no = index // RACK_SIZE
        latency = host.cluster.endswith("-latency")
        host.hostname = f"{DATACENTER}-{host.hardware.name.split('-')[0]}-{index:05d}"
        host.datacenter = DATACENTER
        host.row = f"r{rack_no // 10 + 1:02d}"
        host.rack = f"{DATACENTER}-rack{rack_no:03d}"
        host.cluster = f"{DATACENTER}-latency" if latency else f"{DATACENTER}-{host.hardware.name}"
    return fleet


def register(url: str, fleet: SimulatedFleet) -> tuple[dict[str, bytes], dict[int, Location]]:
    """The inventory (as `fleetfix hosts import`) and a credential per host (as `fleetfix tokens issue
    --host`); returns each host's signing key, and where each host id stands."""
    database = Database(url, pool_size=1)
    with database.session() as session:
        apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="bench")
    tokens = issue_host_tokens(url, (h.hostname for h in fleet.hosts))
    keys = {name: report_key(token) for name, token in tokens.items()}
    with database.session() as session:
        located = {
            h.id: Location(h.rack, h.cluster, h.datacenter)
            for h in session.scalars(select(Host).where(Host.datacenter == DATACENTER))
        }
    database.dispose()
    return keys, located


class Processes:
    """`python -m api ARGS` processes with their output in log files, and a redis-server of our own."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.running: list[tuple[str, subprocess.Popen[bytes]]] = []

    def redis(self) -> str:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = (self.workdir / "redis.log").open("w")
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running.append(("redis", proc))
        client = redis.Redis(port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        return f"redis://127.0.0.1:{port}/0"

    def fleetfix(self, name: str, args: list[str], env: dict[str, str]) -> Path:
        log = self.workdir / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "api", *args],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        self.running.append((name, proc))
        return log

    def alive(self) -> list[str]:
        return [name for name, proc in self.running if proc.poll() is not None]

    def stop(self) -> None:
        for _, proc in reversed(self.running):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in reversed(self.running):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def central_env(url: str, broker: str, workdir: Path, webhook: str, interval: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_")}
    env.update(
        FLEETFIX_DATABASE_URL=url,
        FLEETFIX_BROKER_URL=broker,
        FLEETFIX_DATA_DIR=str(workdir),
        FLEETFIX_PUBLIC_URL="https://fleet.example.net",
        FLEETFIX_REPORT_INTERVAL_S=str(interval),
        FLEETFIX_REQUIRE_SIGNED_REPORTS="true",
        FLEETFIX_ALERTS_MODE="webhook",
        FLEETFIX_SLACK_CHANNEL=CHANNEL,
        FLEETFIX_SLACK_WEBHOOK_URL=webhook,
    )
    return env


def wait_for(what: str, probe: Callable[[], bool], timeout: float, procs: Processes) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        if dead := procs.alive():
            raise SystemExit(f"{', '.join(dead)} exited while waiting for {what}")
        time.sleep(0.2)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


class Agents:
    """Every host's agent: one report per host per round, signed, to the ingest stream (or as
    `remediator.ingest_reports` messages), captured now by the real clock."""

    def __init__(self, fleet: SimulatedFleet, keys: dict[str, bytes], broker: str, mode: str, interval: int) -> None:
        self.fleet, self.keys, self.mode, self.interval = fleet, keys, mode, interval
        self.client = redis.Redis.from_url(broker)
        self.app = create_celery(broker) if mode == "tasks" else None

    def round(self) -> tuple[int, float]:
        began = time.perf_counter()
        reports = self.fleet.reports(utcnow(), interval_s=self.interval)
        pipe = self.client.pipeline(transaction=False)
        for one in reports:
            body = one.model_dump_json()
            hostname = one.host.hostname
            sig = sign_report(self.keys[hostname], body.encode())
            if self.app is None:
                pipe.xadd(INGEST_STREAM, {"report": body, "host": hostname, "sig": sig})
            else:
                signature = {"host": hostname, "sig": sig}
                self.app.send_task("remediator.ingest_reports", args=[[body], [signature]], queue=INGEST_QUEUE)
        pipe.execute()
        return len(reports), time.perf_counter() - began

    def backlog(self) -> int:
        if self.app is None:
            return int(self.client.xlen(INGEST_STREAM))
        return int(self.client.llen(INGEST_QUEUE))


def count(engine: Engine, query: Select[tuple[int]]) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(query) or 0)


def alerts_settled(engine: Engine) -> bool:
    """Every alert is in a message, and every message is sent or failed."""
    with engine.connect() as conn:
        loose = conn.scalar(select(func.count()).select_from(AlertOutbox).where(AlertOutbox.delivery_id.is_(None)))
        done = [DeliveryState.sent, DeliveryState.failed]
        unsent = conn.scalar(select(func.count()).select_from(AlertDelivery).where(AlertDelivery.state.not_in(done)))
    return not loose and not unsent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--fraction", type=float, default=0.3, help="share of the datacenter whose DIMMs storm")
    parser.add_argument("--workers", type=int, default=4, help="`fleetfix worker --concurrency 1` processes")
    parser.add_argument("--ingesters", type=int, default=2, help="`fleetfix ingester` processes (stream mode)")
    parser.add_argument("--ingest", choices=("stream", "tasks"), default="stream")
    parser.add_argument("--interval", type=int, default=10, help="seconds between a host's reports")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-run", type=float, default=360, help="seconds after the storm starts, at most")
    args = parser.parse_args()
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores; load average at start {os.getloadavg()}")
    ruleset = load_ruleset([])
    rule = ruleset.get(RULE)
    assert rule is not None
    breaker = rule.safety.breaker
    plan = " + ".join(s.action for s in rule.plan)
    print(f"pack: default; caps {ruleset.safety.caps}, spacing {ruleset.safety.spacing_s:g}s")
    print(
        f"rule: {RULE} ({plan}); breaker max_hosts {breaker.max_hosts}, max_percent {breaker.max_percent:g}%,"
        f" min_hosts {breaker.min_hosts}, window {breaker.window_s:g}s, scope {breaker.scope}"
    )
    name = f"bench_storm_{os.getpid()}"
    url = create_database(name)
    upgrade(url)
    workdir = Path(tempfile.mkdtemp(prefix="fleetfix-storm-"))
    procs = Processes(workdir)
    receiver = SlackReceiver().start()
    engine = create_engine(url, pool_size=3)
    failed = True
    try:
        fleet = one_datacenter(args.hosts, args.seed)
        keys, located = register(url, fleet)
        racks = len({w.rack for w in located.values()})
        clusters = len({w.cluster for w in located.values()})
        print(f"datacenter {DATACENTER}: {len(located)} hosts in {racks} racks and {clusters} clusters")
        broker = procs.redis()
        env = central_env(url, broker, workdir, receiver.add_webhook(CHANNEL, WEBHOOK_PATH_END), args.interval)
        workers = [procs.fleetfix(f"worker-{n}", ["worker", "--concurrency", "1"], env) for n in range(args.workers)]
        if args.ingest == "stream":
            for n in range(args.ingesters):
                procs.fleetfix(f"ingester-{n}", ["ingester"], env)
        procs.fleetfix("scheduler", ["scheduler"], env)
        wait_for("the workers", lambda: all("ready." in w.read_text(errors="replace") for w in workers), 90, procs)
        agents = Agents(fleet, keys, broker, args.ingest, args.interval)
        ingesters = f"{args.ingesters} ingesters" if args.ingest == "stream" else "the workers' ingest queue"
        print(f"processes: {args.workers} workers (--concurrency 1), {ingesters}, scheduler; Slack receiver")

        # Two quiet rounds: every host known, its counters read once.
        for _ in range(2):
            agents.round()
            time.sleep(args.interval)
        reported = select(func.count()).select_from(Host).where(Host.last_report_at.is_not(None))
        wait_for("the quiet rounds", lambda: count(engine, reported) == len(located), 120, procs)

        rng = random.Random(args.seed)
        storm = rng.sample(fleet.hosts, k=round(len(fleet.hosts) * args.fraction))
        for host in storm:
            host.inject(fleet.fault(FAULT, rng.randrange(len(host.dimms))))
        t0, t0_wall = time.monotonic(), time.time()
        storm_names = {h.hostname for h in storm}
        print(f"t0: a DIMM CE storm on {len(storm)} hosts ({args.fraction:.0%}) at once")
        probe = OutOfService(engine, located, dict(ruleset.safety.caps), t0).start()

        remediations = select(func.count()).select_from(Remediation).where(Remediation.rule_id == RULE)
        open_breakers = select(func.count()).select_from(RuleState).where(RuleState.breaker_open.is_(True))
        quiet_since: float | None = None
        next_round = time.monotonic()
        while time.monotonic() - t0 < args.max_run:
            left = agents.backlog()  # reports of earlier rounds not yet ingested
            sent, took = agents.round()
            now = time.monotonic() - t0
            planned, breakers = count(engine, remediations), count(engine, open_breakers)
            messages = len(receiver.messages())
            print(
                f"t+{now:6.1f}s  {sent} reports published in {took:.1f}s; backlog before it {left};"
                f" {RULE} remediations {planned}; open breakers {breakers}; Slack messages {messages}"
            )
            if dead := procs.alive():
                raise SystemExit(f"{', '.join(dead)} exited")
            # Done once the breaker is open, two alert windows have passed since, and every alert is sent.
            tripped = probe.breaker_seen_at is not None and now - probe.breaker_seen_at > 2 * ALERTS_WINDOW_S + 10
            if tripped and alerts_settled(engine):
                quiet_since = quiet_since or now
                if now - quiet_since >= args.interval:
                    break
            next_round += args.interval
            time.sleep(max(0.0, next_round - time.monotonic()))
        elapsed = time.monotonic() - t0
        probe.stop()
        procs.stop()
        failed = report(engine, probe, storm_names, receiver, t0_wall, elapsed, breaker.max_hosts)
    finally:
        procs.stop()
        receiver.stop()
        engine.dispose()
        drop_database(name)
        if failed:
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        print(f"load average at end {os.getloadavg()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
