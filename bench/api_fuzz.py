"""The REST API fuzzed through its own OpenAPI schema, against a running `fleetfix api` on PostgreSQL.

    .venv/bin/python bench/api_fuzz.py [--examples 120] [--negative 40] [--seed 1]

A database of its own (bench_api_fuzz_<pid> on the machine's PostgreSQL, 127.0.0.1:5432, dropped at
the end) is migrated, seeded with a little of everything (hosts, reports, a remediation and its
ticket, from the simulated fleet through the real ingest path), and a token of each role is issued.
`fleetfix api` serves it as a real process. schemathesis reads /openapi.json from it and, for every
operation, generates `--examples` valid requests and `--negative` invalid ones (hypothesis); each is
sent once with each role's token, and every response is checked:

- not a 5xx (`not_a_server_error`);
- its body and content type are what the schema declares for its status
  (`response_schema_conformance`, `content_type_conformance`).

Prints cases, requests, statuses, failures (the first few in full), the run's rate, and the
machine's ceiling for the same client: `/healthz` fetched as fast as one client can. Exits 1 on
any failure. tests/api/test_schema_fuzz.py runs the same checks in-process at a smaller count
in `make test`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.auth import issue_token  # noqa: E402
from core.db import Database, utcnow  # noqa: E402
from core.models import Role  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
CHECKS = [st_checks.not_a_server_error, st_checks.response_schema_conformance, st_checks.content_type_conformance]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env_for(url: str, port: int, data_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFIX_")}
    env.update(
        FLEETFIX_DATABASE_URL=url,
        FLEETFIX_DATA_DIR=data_dir,
        FLEETFIX_API_PORT=str(port),
        FLEETFIX_BROKER_URL="redis://127.0.0.1:6379/10",
    )
    return env


def seed_database(url: str) -> dict[Role, dict[str, str]]:
    """A little of everything through the real ingest path, and a token per role."""
    from checker.sim import SimulatedFleet
    from remediator.ingest import ingest
    from remediator.rules import load_ruleset

    database = Database(url)
    fleet = SimulatedFleet(12, seed=3, fault_fraction=0.5)
    ruleset = load_ruleset([])
    start = utcnow() - dt.timedelta(minutes=10)
    with database.session() as session:
        for minute in range(6):
            ingest(session, fleet.reports(start + dt.timedelta(minutes=minute)), ruleset=ruleset)
        headers = {}
        for role in Role:
            _, raw = issue_token(session, name=f"fuzz-{role.value}", role=role)
            headers[role] = {"Authorization": f"Bearer {raw}"}
    database.dispose()
    return headers


def ceiling(base: str, seconds: float = 5.0) -> float:
    """Requests per second one client gets from /healthz: the server's and client's own floor."""
    count, end = 0, time.monotonic() + seconds
    with httpx.Client(base_url=base) as client:
        while time.monotonic() < end:
            client.get("/healthz")
            count += 1
    return count / seconds


def last_the_credentials(operation: schemathesis.APIOperation) -> bool:
    """Token and user operations run last: a fuzzed DELETE /tokens/{id} or PATCH /users/{id} may revoke or
    demote the tokens the run uses, and every request after it would only test the 401."""
    return any(part in operation.path for part in ("/tokens", "/users"))


def fuzz(base: str, headers: dict[Role, dict[str, str]], examples: dict[GenerationMode, int], at: int) -> int:
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    operations = sorted((result.ok() for result in schema.get_all_operations()), key=last_the_credentials)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    cases = 0
    started = time.monotonic()
    for operation in operations:
        for mode, count in examples.items():
            if count <= 0:
                continue

            @seed(at)
            @settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: schemathesis.Case) -> None:
                nonlocal cases
                cases += 1
                for role, auth in headers.items():
                    response = case.call(base_url=base, headers=auth)
                    statuses[response.status_code] += 1
                    try:
                        case.validate_response(response, checks=CHECKS, headers=auth)
                    except AssertionError as error:
                        failures.append(f"{role.value} {case.method} {case.formatted_path}: {str(error)[:600]}")

            with contextlib.suppress(Unsatisfiable):  # an operation without parameters has no invalid request
                run()
    elapsed = time.monotonic() - started
    requests = sum(statuses.values())
    print(f"operations      {len(operations)}")
    print(f"cases           {cases}  ({requests} requests: each case once per role, {len(headers)} roles)")
    print(f"statuses        {dict(sorted(statuses.items()))}  (401s: negative cases that drop the credentials)")
    print(f"5xx             {sum(n for code, n in statuses.items() if code >= 500)}")
    print(f"failures        {len(failures)}")
    for line in failures[:10]:
        print(f"  {line}")
    print(f"elapsed         {elapsed:.1f} s, {requests / elapsed:.0f} requests/s")
    return len(failures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=120, help="valid requests per operation")
    parser.add_argument("--negative", type=int, default=40, help="invalid requests per operation")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    name = f"bench_api_fuzz_{os.getpid()}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            port = free_port()
            env = env_for(url, port, data_dir)
            subprocess.run([sys.executable, "-m", "api", "db", "upgrade"], env=env, check=True, capture_output=True)
            headers = seed_database(url)
            log = Path(data_dir) / "api.log"
            with log.open("w") as out:
                api = subprocess.Popen([sys.executable, "-m", "api", "api"], env=env, stdout=out, stderr=out)
                try:
                    base = f"http://127.0.0.1:{port}"
                    for _ in range(150):
                        try:
                            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                                break
                        except httpx.TransportError:
                            time.sleep(0.2)
                    print(f"ceiling         {ceiling(base):.0f} requests/s (/healthz, one client)")
                    failed = fuzz(
                        base,
                        headers,
                        {GenerationMode.POSITIVE: args.examples, GenerationMode.NEGATIVE: args.negative},
                        args.seed,
                    )
                finally:
                    api.terminate()
                    api.wait(15)
            server_errors = [line for line in log.read_text(errors="replace").splitlines() if "Traceback" in line]
            print(f"tracebacks in the server's log: {len(server_errors)}")
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    print(f"load average at end: {os.getloadavg()}")
    return 1 if failed or server_errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
