"""The API under mixed traffic from many clients (issue 13): report intake, the ticket queue, ticket pages
and sign-ins, with 100,000 tickets stored; sign-in and oversized-body floods must not starve intake.

    .venv/bin/python bench/load.py [--tickets 100000] [--clients 100] [--seconds 40] [--intake-replica]

Needs the machine's PostgreSQL (127.0.0.1:5432; a database of its own, bench_load_<pid>, dropped at the
end) and Redis (127.0.0.1:6379, db 13 by default; it must be empty, and is emptied at the end). Starts
`fleetfix api --workers 2` as a real process in production mode (PostgreSQL, Redis, an https PUBLIC_URL:
TLS ends at a proxy, so requests come over plain http with X-Forwarded-Proto/-For, which uvicorn trusts
from 127.0.0.1). Every figure is measured in this run; the client runs on the same machine. The reports
of a-c are sent from a forked process of their own (--one-process: from the same one as the rest).

ceiling   the same client on GET /healthz (no database) and GET /api/v1/me (a token lookup)
a-max     report POSTs alone, closed loop (clients/2 senders): the most intake this box does
a         report POSTs alone, open loop at --load of a-max: the baseline latency
b         a + the ticket queue (API and page) and ticket pages (API and page): clients/2 readers, each
          pausing --think s (mean) between requests
c         a + a sign-in flood (clients/2: wrong passwords and unknown names from spoofed addresses,
          plus a few people signing in) + an oversized-body flood (clients/4)
Pass: in c, intake p99 <= 3 x a's and intake throughput >= 0.5 x a's; no 5xx anywhere; every
oversized body answered (413, or 401); those the API refuses before reading with p99 <= 1 s.

--intake-replica: the topology of deploy/kubernetes/api-intake.yaml. A second `fleetfix api --workers 1`
on a port of its own takes every report (the warm-up, a-max, a-c), as agents' FLEETFIX_AGENT_FALLBACK_URL
would point at it; the ceilings, readers and floods go to the main API. Each is pinned to cores of its
own (sched_setaffinity: the replica the last core, the API the rest) as an emulation of the CPU a pod's
limit gives it; the client and the reports' sender share the main API's cores (the load comes from
elsewhere), PostgreSQL and Redis are not pinned (bench/_load_topology.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import _load_traffic as traffic  # noqa: E402
from bench._databases import create_database, drop_database  # noqa: E402
from bench._load_oversized import oversized  # noqa: E402
from bench._load_report import cpu_of, cpu_used, explain_queries, print_phase, verdict  # noqa: E402
from bench._load_seed import PASSWORD, Seeded, migrate, seed  # noqa: E402
from bench._load_topology import ApiProcess, base_env, cores_busy, describe, start_apis  # noqa: E402
from core.settings import Settings  # noqa: E402


def _client_usage() -> float:
    """CPU seconds of this process and of the report processes it has joined (not the API: never waited for)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class Phase:
    name: str
    seconds: float
    recorder: traffic.Recorder
    client_cpu_s: float
    api_cpu_s: float
    db_cpu_s: float
    machine_busy_s: float = 0.0  # every process of the box, from /proc/stat
    intake_cpu_s: float | None = None  # the intake replica's processes (--intake-replica)
    cores_busy_s: list[float] = field(default_factory=list)  # each core's busy time (--intake-replica)


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting on I/O) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Run:
    def __init__(
        self, args: argparse.Namespace, seeded: Seeded, api: ApiProcess, intake: ApiProcess | None, database: str
    ) -> None:
        self.args = args
        self.seeded = seeded
        self.base = api.base
        self.intake_base = intake.base if intake is not None else api.base  # where the reports go
        self.groups = {"api": api.pid} | ({"intake": intake.pid} if intake is not None else {})
        self.database = database
        self.reporter = traffic.Reporter(seeded.fleet, seeded.host_tokens)
        self.catalogue = traffic.Catalogue(
            seeded.datacenters, seeded.racks, seeded.hostnames, seeded.ticket_ids, seeded.open_ticket_ids
        )
        self.report_clients = max(1, args.clients // 2)
        defaults = Settings.model_fields
        self.limits = {
            "report": int(defaults["max_report_body_bytes"].default),
            "body": int(defaults["max_body_bytes"].default),
        }
        self.phases: dict[str, Phase] = {}

    async def measured(self, name: str, seconds: float, body: Callable[[traffic.Recorder, float], object]) -> Phase:
        recorder = traffic.Recorder()
        client_before, busy_before, cores_before = _client_usage(), machine_busy(), cores_busy()
        processes = cpu_of(self.groups, self.database)
        began = time.perf_counter()
        await body(recorder, began + seconds)  # type: ignore[misc]
        elapsed = time.perf_counter() - began
        client_after, busy_after, cores_after = _client_usage(), machine_busy(), cores_busy()
        after = cpu_of(self.groups, self.database)
        client_cpu = client_after - client_before
        api_cpu, db_cpu = (cpu_used(processes[k], after[k]) for k in ("api", "db"))
        phase = Phase(name, elapsed, recorder, client_cpu, api_cpu, db_cpu, busy_after - busy_before)
        if "intake" in self.groups:
            phase.intake_cpu_s = cpu_used(processes["intake"], after["intake"])
            phase.cores_busy_s = [b - a for a, b in zip(cores_before, cores_after, strict=False)]
        self.phases[name] = phase
        print_phase(phase)
        return phase

    async def main(self) -> None:
        clients = self.args.clients
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(traffic.client(self.base, clients * 2))
            intake = http  # the reports' client: the main API's, or the intake replica's
            if self.intake_base != self.base:
                intake = await stack.enter_async_context(traffic.client(self.intake_base, self.report_clients * 2))
            ceiling = self.args.ceiling_seconds

            async def healthz(rec: traffic.Recorder, until: float) -> None:
                await traffic.closed_loop(
                    clients, until, lambda _: traffic.timed(rec, "healthz", http.get("/healthz", headers=traffic.PROXY))
                )

            token = self.seeded.host_tokens[self.seeded.hostnames[0]]
            me_headers = {"Authorization": f"Bearer {token}", **traffic.PROXY}

            async def me(rec: traffic.Recorder, until: float) -> None:
                await traffic.closed_loop(
                    clients, until, lambda _: traffic.timed(rec, "me", http.get("/api/v1/me", headers=me_headers))
                )

            await self.measured("ceiling: GET /healthz", ceiling, healthz)
            await self.measured("ceiling: GET /api/v1/me", ceiling, me)

            # every host's first report, unmeasured: later ones are a steady fleet's
            warm = traffic.Recorder()
            hosts = len(self.seeded.hostnames)

            async def first_reports() -> None:
                while self.reporter.next < hosts:
                    await self.reporter.post(intake, warm)

            await asyncio.gather(*(first_reports() for _ in range(self.report_clients)))
            print(f"\nwarm-up: every host's first report ({hosts}): statuses {dict(warm.statuses['report'])}")

            async def saturate(rec: traffic.Recorder, until: float) -> None:
                await traffic.closed_loop(self.report_clients, until, lambda _: self.reporter.post(intake, rec))

            top = await self.measured("a-max: reports alone, closed loop", self.args.seconds, saturate)
            capacity = len(top.recorder.latencies["report"]) / top.seconds
            rate = max(1.0, capacity * self.args.load)
            print(f"\noffered intake from here on: {rate:.0f} reports/s ({self.args.load:.2f} x a-max)")

            async def reports(rec: traffic.Recorder, until: float) -> None:
                if self.args.one_process:
                    await traffic.open_loop(
                        rate, self.report_clients, until, lambda due: self.reporter.post(intake, rec, due)
                    )
                else:
                    await traffic.reports_elsewhere(
                        self.reporter, self.intake_base, rate, self.report_clients, until, rec
                    )

            await self.measured("a: reports alone, open loop", self.args.seconds, reports)
            readers = max(4, clients - self.report_clients)
            cookies = await self.sign_in_technicians(http, readers)

            async def mixed(rec: traffic.Recorder, until: float) -> None:
                rng = random.Random(5)
                token = self.seeded.viewer_token

                async def read(i: int) -> None:
                    cookie, dc = cookies[i]
                    pick = rng.random()
                    if pick < 0.3:
                        await traffic.queue_api(http, rec, token, rng, self.catalogue)
                    elif pick < 0.5:
                        await traffic.ticket_api(http, rec, token, rng, self.catalogue)
                    elif pick < 0.8:
                        await traffic.queue_page(http, rec, cookie, rng, self.catalogue, dc)
                    else:
                        await traffic.ticket_page(http, rec, cookie, rng, self.catalogue)
                    await asyncio.sleep(self.args.think * rng.uniform(0.5, 1.5))  # a person reads what came

                await asyncio.gather(reports(rec, until), traffic.closed_loop(readers, until, read))

            await self.measured("b: reports + queue and ticket pages", self.args.seconds, mixed)

            async def floods(rec: traffic.Recorder, until: float) -> None:
                await asyncio.gather(
                    reports(rec, until),
                    self.login_flood(http, rec, until, max(1, clients // 2)),
                    self.people_signing_in(http, rec, until, 4),
                    self.body_flood(rec, until, max(1, clients // 4)),
                )

            await self.measured("c: reports + sign-in flood + oversized bodies", self.args.seconds, floods)

    async def sign_in_technicians(self, http: httpx.AsyncClient, count: int) -> list[tuple[str, str]]:
        setup = traffic.Recorder()
        cookies = []
        for i in range(count):
            username, dc = self.seeded.technicians[i % len(self.seeded.technicians)]
            cookie = await traffic.signed_in(http, setup, username, PASSWORD, f"192.168.10.{i % 250 + 1}")
            cookies.append((cookie, dc))
        return cookies

    async def login_flood(self, http: httpx.AsyncClient, rec: traffic.Recorder, until: float, tasks: int) -> None:
        """Wrong passwords for real accounts and guesses at names that do not exist, each from a different
        address (a botnet behind the proxy): the per-address backoff never engages, so every unknown name
        costs a full Argon2 check."""
        rng = random.Random(9)
        forms = []
        for i in range(tasks):
            form = await traffic.login_form(http, rec, f"10.1.{i // 250}.{i % 250 + 1}")
            if form is not None:
                forms.append(form)

        async def guess(i: int) -> None:
            address = f"10.{rng.randrange(2, 250)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            real = rng.random() < 0.5
            username = rng.choice(self.seeded.victims) if real else f"guess-{rng.getrandbits(24):06x}"
            await traffic.sign_in(
                http, rec, "login wrong", forms[i % len(forms)], username, secrets.token_hex(8), address
            )

        await traffic.closed_loop(tasks, until, guess)

    async def people_signing_in(self, http: httpx.AsyncClient, rec: traffic.Recorder, until: float, tasks: int) -> None:
        """Technicians signing in during the flood, from their own addresses, then opening the queue."""

        async def person(i: int) -> None:
            username, _ = self.seeded.technicians[i % len(self.seeded.technicians)]
            address = f"192.168.20.{i + 1}"
            form = await traffic.login_form(http, rec, address)
            if form is None:
                return
            _, cookie = await traffic.sign_in(http, rec, "login ok", form, username, PASSWORD, address)
            if cookie is not None:
                headers = {"Cookie": f"{traffic.SESSION_COOKIE}={cookie}", **traffic.PROXY}
                await traffic.timed(rec, "queue page", http.get("/queue", headers=headers))

        await traffic.closed_loop(tasks, until, person)

    async def body_flood(self, rec: traffic.Recorder, until: float, tasks: int) -> None:
        rng = random.Random(11)
        token = self.seeded.host_tokens[self.seeded.hostnames[-1]]
        await traffic.closed_loop(tasks, until, lambda _: oversized(self.base, rec, rng, token, self.limits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=100_000)
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=100, help="concurrent clients; half of them send reports")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each measured phase")
    parser.add_argument("--ceiling-seconds", type=float, default=10.0)
    parser.add_argument("--load", type=float, default=0.5, help="offered intake in a-c, as a fraction of a-max")
    parser.add_argument("--think", type=float, default=0.5, help="mean pause of a reader in b between requests")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers (deploy/kubernetes/api.yaml: 2)")
    parser.add_argument("--redis-db", type=int, default=13)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="FLEETFIX_NAME=VALUE",
        help="a setting for the API process (repeatable), e.g. FLEETFIX_DATABASE_POOL_SIZE=20",
    )
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="send the reports of a-c from the readers' and floods' process (default: a forked process of their own)",
    )
    parser.add_argument(
        "--intake-replica",
        action="store_true",
        help="send every report to a second `fleetfix api --workers 1` (deploy/kubernetes/api-intake.yaml), "
        "each API pinned to cores of its own: an emulation of the pods' CPU limits on this machine",
    )
    args = parser.parse_args()
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} cores; load average at start {_load()}")
    print("(other benchmarks may be running on this machine at the same time: compare the load averages)")
    print(
        f"tickets {args.tickets}, hosts {args.hosts}, clients {args.clients}, {args.seconds:g} s a phase, "
        f"api workers {args.workers}"
    )
    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    broker = redis.Redis.from_url(redis_url)
    if broker.dbsize():
        raise SystemExit(f"{redis_url} is not empty (another run?): pass --redis-db with an unused number")
    name = f"bench_load_{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix="fleetfix-load-"))
    apis: list[ApiProcess] = []
    try:
        env = base_env(
            FLEETFIX_ENVIRONMENT="production",
            FLEETFIX_SECRET_KEY=secrets.token_urlsafe(32),
            FLEETFIX_PUBLIC_URL="https://fleetfix.bench.invalid",
            FLEETFIX_BROKER_URL=redis_url,
            FLEETFIX_DATA_DIR=str(workdir / "data"),
            FLEETFIX_ACTION_KEY_FILE=str(workdir / "action-key.pem"),
            FLEETFIX_LOG_LEVEL="WARNING",
            FLEETFIX_LOG_FORMAT="json",
        )
        began = time.perf_counter()
        url = create_database(name)
        migrate(url, env)
        print(f"\ndatabase {name}: migrated in {time.perf_counter() - began:.1f} s")
        seeded = seed(url, hosts=args.hosts, tickets=args.tickets)
        print("seeded: " + ", ".join(f"{what} {s:.1f} s" for what, s in seeded.timings.items()))
        print(f"  {args.tickets} tickets ({len(seeded.open_ticket_ids)} not closed), {args.hosts} hosts with tokens")
        subprocess.run(
            [sys.executable, "-m", "api", "keys", "generate", str(workdir / "action-key.pem")],
            env=env,
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        env.update(FLEETFIX_DATABASE_URL=url)
        env.update(dict(setting.split("=", 1) for setting in args.setting))
        if args.setting:
            print(f"api settings: {' '.join(args.setting)}")
        api, intake = start_apis(args, env, workdir, apis)
        if intake is not None and api.cores:
            # The load comes from elsewhere (agents, browsers): the client and the reports' sender, forked
            # from it later, stay off the replica's core, as they would be off its node.
            os.sched_setaffinity(0, api.cores)
            print(f"  the client and the reports' sender pinned to cpu {describe(api.cores)}, with the api")
        run = Run(args, seeded, api, intake, name)
        asyncio.run(run.main())
        if intake is not None:
            cores = f"cpu {describe(intake.cores or set())}; the rest to the api, cpu {describe(api.cores or set())}"
            print(f"\ntopology: every report to the intake replica ({cores}); pinned: an emulation of CPU limits")
        passed = verdict(run.phases)
        explain_queries(url, seeded)
        for process in apis:
            tail = [line for line in process.tail_lines() if '"ERROR"' in line or "Traceback" in line]
            print(f"\n{process.name} log: {len(tail)} error lines" + ("; first: " + tail[0][:600] if tail else ""))
        print(f"\nload average at end {_load()}")
        print("PASS" if passed else "FAIL")
    finally:
        for process in apis:
            process.stop()
        drop_database(name)
        broker.flushdb()
        shutil.rmtree(workdir, ignore_errors=True)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"


if __name__ == "__main__":
    main()
