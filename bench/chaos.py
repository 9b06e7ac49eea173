"""Failure: a fleet reporting through the production topology while its parts are killed (issue 13).

    .venv/bin/python bench/chaos.py [--hosts 2000] [--rounds 12] [--interval 15] [--reboots 8]

Starts its own PostgreSQL 15 (initdb + pg_ctl) and its own Redis (append-only file, appendfsync
always) on free ports, `fleetfix db upgrade`, then as processes: `fleetfix api` (production
settings), two `fleetfix ingester`, `fleetfix worker`, `fleetfix scheduler`. N simulated hosts
(checker/sim, a tenth of them with a fault) report every `--interval` seconds as agents do: signed
with their own credential into the Redis ingest stream, and a few over HTTP with their token
(`POST /api/v1/reports`); a report counts as acknowledged when XADD returned an id or the API
answered 200 naming it. Agents keep what was not acknowledged and send it again (so does this).

The faulty hosts' cyborg agents run in child processes (bench/_chaos_agents.py: a Celery worker
on their host.<name> queues, the simulated driver, journal and simulated state on disk): one for
the hosts with a fault, and one for each of `--reboots` healthy hosts (one a rack, in racks with
no faulty host) given soft lockups every 10 s in three waves (at the start; one a round from round
`--rounds`/5, each a chance for the worker's kill; after that kill), so the default pack's
soft-lockups rule plans a warm reboot on each, a non-idempotent action. A reboot there spends
`--pre-restart` s before it restarts the host and the simulated downtime after. Every driver
start is appended (fsynced) to a file before the driver runs. What an agent's actions change
reaches the reports the bench sends for that host. The run's blast-radius caps come from a pack
of its own (`--caps`, bench/_chaos_caps.py: the default pack's are full of drains within the
first round), watched so that none is exceeded.

While the fleet reports, in this order (bench/_chaos_faults.py): kill -9 an ingester mid-batch;
kill -9 the worker while it holds the run of a remediation whose reboot step is pending (caught by
a process of its own, bench/_chaos_catch.py); kill -9 a lockup host's agent while its reboot runs
before the restart, and another's while its host is down after the restart was issued (each
started again on the same journal); PostgreSQL crash-restart; kill -9 Redis while reports are
being added. After a fault the time until a probe report is stored (or, for an agent, until its
envelope's step is finished centrally) is the time to recover. Rounds go on past `--rounds` until
the faults are done and the runs the killed worker held have moved (the scheduler re-sends a run
only after remediator.stalls.STALL_S, 300 s), and while remediations settle at the end: hosts
silent for three report intervals would be marked unreachable. Then the stream is drained and the
database is compared with what was acknowledged.

Every report is made distinct (a line in one collector's `problems`, which no deriver reads), so
each is its own stored row and "stored" is "its id is in the reports table".

Exits 1 if an acknowledged report is not stored, a remediation or ticket is duplicated, a cap is
exceeded, or a non-idempotent host action's driver started more than once for one envelope or
one step.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._chaos_agents import AgentProcess, HostSync  # noqa: E402
from bench._chaos_caps import CapWatch, parse_caps, write_pack  # noqa: E402
from bench._chaos_faults import Chaos, held_tasks, stored  # noqa: E402
from bench._chaos_fleet import REPORT_INTERVAL_S, Publisher, Run, give_lockups, lockup_hosts, waves  # noqa: E402
from bench._chaos_report import Scene, figures  # noqa: E402
from bench._databases import issue_host_tokens  # noqa: E402
from bench._services import OwnPostgres, OwnRedis, Service, fleetfix_env, free_port  # noqa: E402
from checker.sim import SimulatedFleet, VirtualHost  # noqa: E402
from core.db import Database  # noqa: E402
from core.queue import INGEST_GROUP, INGEST_STREAM  # noqa: E402
from cyborg.envelope import generate_keypair  # noqa: E402
from remediator.inventory import HostInventory, apply_inventory  # noqa: E402
from remediator.stalls import STALL_S  # noqa: E402

SECRET = "chaos-bench-" + "k" * 32


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


class Tail:
    """Rounds published in a thread after the faulted ones, until stopped."""

    def __init__(self, publisher: Publisher, first: int, interval: float, started: float) -> None:
        self.publisher, self.rounds, self.interval, self.started = publisher, 0, interval, started
        self.first = first
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tail", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            began = time.monotonic()
            self.publisher.publish_round()
            print(
                f"  round {self.first + self.rounds:2d} (+{began - self.started:3.0f} s, while settling): "
                f"published in {time.monotonic() - began:5.1f} s",
                flush=True,
            )
            self.rounds += 1
            self.done.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def stop(self) -> None:
        self.done.set()
        self.thread.join(120)


def settle(url: str, broker: OwnRedis, timeout: float) -> float:
    """Until remediations stop moving: no task waiting on `remediate` and the active count unchanged;
    returns seconds waited."""
    client = redis.Redis.from_url(broker.url)
    engine = create_engine(url)
    began = time.monotonic()
    last, calm, deadline = None, 0, time.monotonic() + timeout
    while time.monotonic() < deadline and calm < 10:
        with engine.connect() as conn:
            now = conn.execute(text("SELECT count(*), max(updated_at) FROM remediations WHERE active")).one()
        calm = calm + 1 if now == last and client.llen("remediate") == 0 else 0
        last = now
        time.sleep(2)
    engine.dispose()
    return time.monotonic() - began


def start_agents(
    work: Path, faulty: list[VirtualHost], lockups: list[VirtualHost], settings: dict[str, Any], args: Any
) -> list[AgentProcess]:
    """The agents' processes: one for the faulty hosts, one per lockup host; waits until each is ready."""
    agents_dir = work / "agents"
    agents_dir.mkdir()
    hosts_file = agents_dir / "hosts.pickle"
    hosts_file.write_bytes(pickle.dumps({h.hostname: h for h in [*faulty, *lockups]}))
    common = {**settings, "hosts": str(hosts_file)}
    agents = [
        AgentProcess(
            "agents-faulty",
            [h.hostname for h in faulty],
            agents_dir,
            {**common, "concurrency": 4, "time_scale": 0.0, "pre_restart_s": 0.0},
        )
    ]
    for host in lockups:
        reboot = {"concurrency": 1, "time_scale": args.downtime_scale, "pre_restart_s": args.pre_restart}
        agents.append(AgentProcess(f"agent-{host.hostname}", [host.hostname], agents_dir, {**common, **reboot}))
    for agent in agents:
        agent.start()
    wait_for(lambda: all(a.ready() for a in agents), 120, "the host agents' processes")
    return agents


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=12, help="reports per host at least (more while faults wait)")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds from one round's start to the next")
    parser.add_argument("--fault-fraction", type=float, default=0.1)
    parser.add_argument("--http-hosts", type=int, default=40, help="hosts that report over HTTP, not the stream")
    parser.add_argument("--reboots", type=int, default=8, help="healthy hosts given soft lockups (a warm reboot each)")
    parser.add_argument(
        "--caps",
        default="rack=1,cluster=10%,datacenter=10%,fleet=5%",
        help="the run's blast-radius caps (a pack's safety section; the default pack's: rack=1,cluster=10%%,"
        "datacenter=2%%,fleet=1%%)",
    )
    parser.add_argument("--pre-restart", type=float, default=3.0, help="seconds a reboot works before it restarts")
    parser.add_argument("--downtime-scale", type=float, default=1.0, help="x the simulated downtime (warm: 7 s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, databases)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    caps = parse_caps(args.caps)
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores; load average at start {os.getloadavg()}")
    print("own PostgreSQL 15 (fsync on) and Redis (appendonly yes, appendfsync always) on free ports")
    work = Path(tempfile.mkdtemp(prefix="fleetfix-chaos-"))
    work.chmod(0o755)  # PostgreSQL runs as its own user below it
    import logging

    logging.basicConfig(filename=work / "bench.log", level=logging.WARNING)
    pg, broker = OwnPostgres(work / "postgres"), OwnRedis(work / "redis")
    services: dict[str, Service] = {}
    agents: list[AgentProcess] = []
    watch: CapWatch | None = None
    problems = 1
    began = time.monotonic()
    try:
        pg.start()
        broker.start()
        url = pg.create_database("fleetfix")
        generate_keypair(work / "action-key.pem", work / "action-key.pub")
        safety = write_pack(work / "bench-safety.yaml", caps)
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
            FLEETFIX_RULES_PATHS=json.dumps([str(work / "bench-safety.yaml")]),
        )
        with (work / "db-upgrade.log").open("w") as log:
            subprocess.run(
                [sys.executable, "-m", "api", "db", "upgrade"], env=env, cwd=REPO, check=True, stdout=log, stderr=log
            )
        fleet = SimulatedFleet(args.hosts + 1, seed=13, fault_fraction=args.fault_fraction)
        probe_host = next(h for h in reversed(fleet.hosts) if not h.faults)
        lockups = lockup_hosts(fleet, args.reboots, probe_host)
        first, second, third = waves(lockups)
        give_lockups(fleet, first)
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
        faulty = [h for h in hosts if h.faults and h not in lockups]
        token_file = work / "host-tokens.json"
        token_file.touch(mode=0o600)
        token_file.write_text(json.dumps({h.hostname: tokens[h.hostname] for h in [*faulty, *lockups]}))
        state = work / "hosts"
        settings = {
            "broker_url": broker.url,
            "public_key": str(work / "action-key.pub"),
            "state": str(state),
            "tokens": str(token_file),
        }
        agents = start_agents(work, faulty, lockups, settings, args)
        lock = threading.RLock()
        run = Run()
        http_hosts = set(sorted(h.hostname for h in hosts if not h.faults and h not in lockups)[: args.http_hosts])
        synced = {h.hostname for h in [*faulty, *lockups]}
        publisher = Publisher(run, hosts, lock, broker.url, api, tokens, http_hosts, HostSync(state), synced)
        probe = Publisher(run, [], lock, broker.url, api, tokens, set())
        chaos = Chaos(run, pg, broker, url, services, agents[1:], state, probe, probe_host, args.rounds)
        watch = CapWatch(url, safety)
        print(f"caps of this run (pack {work / 'bench-safety.yaml'}): {caps}, rack spacing 5 min")
        print(
            f"soft lockups every 10 s on {len(lockups)} healthy hosts, one a rack: {len(first)} at the start, "
            f"{len(second)} one a round from round {chaos.share}, {len(third)} after the worker's kill; "
            f"each host's agent in its own process, a reboot {args.pre_restart:g} s before the restart"
            f" + {7 * args.downtime_scale:g} s down"
        )
        print(
            f"hosts {len(hosts)} ({len(faulty)} with a fault, their agents in one process; {len(http_hosts)} over "
            f"HTTP) + 1 probe host; {args.rounds}+ rounds every {args.interval:.0f} s; scratch {work}"
        )
        started, wall0 = time.monotonic(), time.time()
        chaos.thread.start()
        watch.thread.start()
        n, third_given = 0, False
        while True:
            run.round, run.round_share = n, 0.0
            round_began = time.monotonic()
            if chaos.share <= n < chaos.share + len(second):  # one a round: a chance each for the worker's kill
                give_lockups(fleet, [second[n - chaos.share]])
            if chaos.worker_killed.is_set() and not third_given:
                give_lockups(fleet, third)
                third_given = True
            publisher.publish_round()
            print(
                f"  round {n:2d} (+{time.monotonic() - started:3.0f} s): published in "
                f"{time.monotonic() - round_began:5.1f} s (acknowledged so far {len(run.acked)})",
                flush=True,
            )
            n += 1
            if n >= args.rounds and not chaos.thread.is_alive():
                killed = next((f.wall for f in chaos.faults if f.name == "kill -9 worker"), time.time())
                waiting = chaos.still_waiting()
                if not waiting or time.time() > killed + STALL_S + 180:
                    break
                print(f"    (rounds go on: remediations {waiting} wait since the worker's kill)", flush=True)
            time.sleep(max(0.0, args.interval - (time.monotonic() - round_began)))
        run.round = 10**6
        chaos.thread.join(600)
        if chaos.error is not None:
            raise chaos.error
        # The fleet goes on reporting while remediations settle: silent for 3 report intervals (180 s),
        # hosts would be marked unreachable and planned for, which is no fault of this run's.
        tail = Tail(publisher, n, args.interval, started)
        settled = settle(url, broker, 180)
        tail.stop()
        print(f"remediations settled {settled:.0f} s after the last faulted round ({tail.rounds} more rounds)")
        waited = drain(run, url, broker, 600)
        print(f"stream drained {waited:.0f} s after the last round")
        watch.stop.set()
        scene = Scene(url, api, agents[0].work, state, logs, started, wall0)
        problems = figures(run, scene, chaos.faults, watch, chaos.worker_held_runs)
        left = redis.Redis.from_url(broker.url)
        print("\ntasks the killed worker held when it died (kombu `unacked`):", ", ".join(chaos.worker_held) or "none")
        print(f"still delivered and unacknowledged at the end, central: {', '.join(held_tasks(left)) or 'none'}")
        print(f"  hosts' queues: {', '.join(held_tasks(left, central=False)) or 'none'}")
        print(
            "  (the Redis transport gives them to another worker only after its visibility_timeout, 3600 s unless set)"
        )
    finally:
        if watch is not None:
            watch.stop.set()
        for agent in agents:
            agent.stop()
        for service in services.values():
            service.stop()
        broker.stop()
        pg.stop()
        if not args.keep and problems == 0:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        print(f"\nran {time.monotonic() - began:.0f} s; load average at end {os.getloadavg()}")
        print(f"scratch directory (logs): {work}" if work.exists() else "scratch directory removed")
    print("RESULT:", "no loss, no duplication, no double start" if problems == 0 else f"{problems} problem(s) found")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
