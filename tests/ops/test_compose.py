"""docker-compose.yml and the Dockerfile, without a Docker engine.

The structure is checked from the files; then every fleetfix service's command runs as a plain
process with the environment compose gives it, its hosts (postgres, redis, redis-sjc2) mapped to
this machine's PostgreSQL, Redis and a second Redis server, and each must become ready the way its
compose healthcheck says — the healthchecks themselves are run. The agents' reports must reach the
database through their own datacenter's broker, and a host task must reach the sjc2 agent through
sjc2's broker.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
import yaml
from sqlalchemy import select

from api.cli import app as cli
from core.db import Database
from remediator.models import Host
from tests.builders.runtime import wired
from tests.conftest import REPO, RUN_ID, _create_database, _drop_database
from tests.processes import FleetfixProcess, base_env, free_port, wait_until

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
FLEETFIX = sorted(name for name, service in SERVICES.items() if service.get("image") == "fleetfix:latest")
ONE_SHOTS = ("migrate", "inventory")
LONG_RUNNING = [name for name in FLEETFIX if name not in ONE_SHOTS]
DOCKERFILE = (REPO / "Dockerfile").read_text()
SECRET = "s" * 40


def test_compose_has_the_production_topology() -> None:
    assert {"postgres", "redis", "migrate", "api", "worker", "ingester", "scheduler"} <= set(SERVICES)
    commands = {SERVICES[name]["command"][0] for name in FLEETFIX}
    assert {"db", "hosts", "api", "worker", "ingester", "scheduler", "agent"} <= commands
    assert len([name for name in FLEETFIX if SERVICES[name]["command"][0] == "agent"]) >= 3
    group = typer.main.get_command(cli)
    for name in FLEETFIX:
        assert SERVICES[name]["command"][0] in group.commands, name  # type: ignore[attr-defined]


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in SERVICES.items():
        if name in ONE_SHOTS:
            assert service["restart"] == "no", name
            assert "healthcheck" not in service, name
        else:
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name


def test_migrations_run_once_before_anything_uses_the_database() -> None:
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["inventory"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    for name in LONG_RUNNING:
        assert SERVICES[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
        broker_hosts = set(re.findall(r"redis://([a-z0-9-]+):", json.dumps(SERVICES[name]["environment"])))
        for host in broker_hosts:  # every broker it names is up first
            assert SERVICES[name]["depends_on"][host] == {"condition": "service_healthy"}, (name, host)


def test_agents_hold_no_database_credentials() -> None:
    for name in LONG_RUNNING:
        env = SERVICES[name]["environment"]
        if SERVICES[name]["command"][0] == "agent":
            assert "FLEETFIX_DATABASE_URL" not in env, name
        else:
            assert env["FLEETFIX_DATABASE_URL"].startswith("postgresql+psycopg://"), name


def test_images_are_pinned() -> None:
    for name, service in SERVICES.items():
        image = service["image"]
        if image == "fleetfix:latest":
            assert SERVICES["migrate"]["build"] == ".", name  # built once from the Dockerfile
            continue
        tag = image.split(":", 1)[1]
        # a release on a named distribution (15.10-bookworm), never latest or a bare major version
        assert re.match(r"^\d+\.\d+(\.\d+)?-[a-z]+$", tag), f"{name}: {image} is not pinned to a release"


REDIS_SERVICES = [name for name, service in SERVICES.items() if service["image"].startswith("redis:")]


def test_every_redis_writes_each_acknowledged_command_to_disk_first() -> None:
    """Agents drop a report from their spool once XADD answers: Redis must have it on disk by then."""
    assert REDIS_SERVICES
    for name in REDIS_SERVICES:
        command = SERVICES[name]["command"]
        assert command[0] == "redis-server", name
        options = dict(zip(command[1::2], command[2::2], strict=True))
        assert options["--appendonly"] == "yes", name
        assert options["--appendfsync"] == "always", name  # docs/operations.md, "Broker durability"
        # the append-only file lives on a named volume (the image's /data), so a recreated container keeps it
        volumes = [v for v in SERVICES[name]["volumes"] if v.endswith(":/data")]
        assert volumes, name
        assert volumes[0].split(":")[0] in COMPOSE["volumes"], name


def test_an_acknowledged_report_survives_killing_the_compose_redis(tmp_path: Path) -> None:
    """The redis service's own command line, killed with SIGKILL right after XADD answered and started
    again on the same directory: the entry is there."""
    import redis

    port = free_port()
    argv = [*SERVICES["redis"]["command"], "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    url = f"redis://127.0.0.1:{port}/0"

    def up() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
        except (redis.ConnectionError, redis.BusyLoadingError):
            return False

    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(up, 10, f"redis-server on port {port}")
        entry = redis.Redis.from_url(url).xadd("fleetfix:ingest", {"report": "{}"})
        server.kill()
        server.wait(10)
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(up, 10, f"redis-server on port {port} after the kill")
        assert [e[0] for e in redis.Redis.from_url(url).xrange("fleetfix:ingest")] == [entry]
    finally:
        server.kill()
        server.wait(10)


def test_dockerfile_is_multi_stage_pinned_and_runs_unprivileged() -> None:
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, flags=re.M)
    assert base is not None
    assert re.match(r"^python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?$", base.group(1)), base.group(1)
    stages = re.findall(r"^FROM (\S+)", DOCKERFILE, flags=re.M)
    assert stages == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    assert "COPY --from=build /opt/fleetfix /opt/fleetfix" in DOCKERFILE
    user = re.findall(r"^USER (\S+)$", DOCKERFILE, flags=re.M)
    assert len(user) == 1
    assert user[0].split(":")[0] not in ("0", "root")
    uid = user[0].split(":")[0]
    assert f"--uid {uid}" in DOCKERFILE
    assert DOCKERFILE.index("USER ") > DOCKERFILE.rindex("RUN ")  # nothing runs as root after it
    assert re.search(r"^ENTRYPOINT \[\"fleetfix\"\]$", DOCKERFILE, flags=re.M)
    # what the build stage copies is what the package needs
    copied = set(re.findall(r"^COPY (\w+) \1$", DOCKERFILE, flags=re.M))
    pyproject = (REPO / "pyproject.toml").read_text()
    packages = set(re.findall(r'"(\w+)\*"', pyproject.split("[tool.setuptools.packages.find]")[1].split("\n\n")[0]))
    assert copied == packages


def test_the_package_the_image_installs_carries_its_data_files(tmp_path: Path) -> None:
    """The Dockerfile installs the project non-editable: rule packs, templates and migrations must ship."""
    import shutil
    import zipfile

    context = tmp_path / "context"  # exactly what the build stage copies
    context.mkdir()
    for line in re.findall(r"^COPY (?!--)(.+)$", DOCKERFILE, flags=re.M):
        *sources, _target = line.split()
        for source in sources:
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, context / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(REPO / source, context / source)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), "."],
        cwd=context,
        check=True,
        timeout=300,
    )
    [wheel] = (tmp_path / "dist").glob("fleetfix-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = {
        "remediator/default_rules.yaml",
        "remediator/firmware_baselines.yaml",
        "api/web/templates/base.html",
        "api/web/static/fleetfix.css",
        "migrations/script.py.mako",
        "migrations/versions/0001_initial_schema.py",
    }
    assert needed <= names, needed - names


# --- every service's command as a plain process -------------------------------------------------


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message} (the forms this file uses)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"compose would stop: {arg}")
        return arg or ""

    return re.sub(r"\$\{(\w+)(:[-?])?([^}]*)\}", one, value)


class Box:
    """The compose services as processes on this machine."""

    def __init__(self, tmp_path: Path, urls: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.urls = urls  # compose URL -> this machine's
        self.api_port = free_port()
        self.processes: dict[str, FleetfixProcess] = {}

    def local(self, text: str, service: str) -> str:
        for compose_url, url in self.urls.items():
            text = text.replace(compose_url, url)
        text = text.replace("http://127.0.0.1:8000/", f"http://127.0.0.1:{self.api_port}/")
        text = text.replace("/var/lib/fleetfix", str(self.tmp_path / service))
        return text.replace("$$", "$")

    def env(self, service: str) -> dict[str, str]:
        compose_env = {k: str(v) for k, v in SERVICES[service]["environment"].items()}
        env = base_env()
        for key, value in compose_env.items():
            env[key] = self.local(interpolate(value, {"FLEETFIX_SECRET_KEY": SECRET}), service)
        env["FLEETFIX_DATA_DIR"] = str(self.tmp_path / service)  # the image's /var/lib/fleetfix
        env["FLEETFIX_AGENT_STATE_DIR"] = str(self.tmp_path / service / "agent-state")
        if "FLEETFIX_METRICS_DIR" in env:
            env["FLEETFIX_METRICS_DIR"] = str(self.tmp_path / "metrics")  # the shared volume
        if env.get("FLEETFIX_API_HOST") == "0.0.0.0":  # noqa: S104 - replaced by loopback here
            env["FLEETFIX_API_HOST"] = "127.0.0.1"
        env["FLEETFIX_API_PORT"] = str(self.api_port)
        env["HOSTNAME"] = socket.gethostname()  # a container's hostname is its node name
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def command(self, service: str) -> list[str]:
        args = [self.local(str(a), service) for a in SERVICES[service]["command"]]
        for volume in SERVICES[service].get("volumes") or []:
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                args = [str(REPO / source[2:]) if a == target else a for a in args]
        return args

    def run_once(self, service: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "api", *self.command(service)],
            env=self.env(service),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{service} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def start(self, service: str) -> FleetfixProcess:
        (self.tmp_path / service).mkdir(parents=True, exist_ok=True)
        process = FleetfixProcess(self.command(service), self.env(service), self.tmp_path / f"{service}.log")
        self.processes[service] = process
        return process

    def healthy(self, service: str) -> bool:
        test = SERVICES[service]["healthcheck"]["test"]
        argv = (
            ["sh", "-c", self.local(test[1], service)]
            if test[0] == "CMD-SHELL"
            else [self.local(a, service) for a in test[1:]]
        )
        done = subprocess.run(argv, env=self.env(service), capture_output=True, timeout=60)
        return done.returncode == 0

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()


@pytest.fixture
def compose_db() -> Iterator[str]:
    """An empty database: the migrate service builds it."""
    name = f"fleetfix_compose_{RUN_ID}"
    url = _create_database(name)
    yield url
    _drop_database(name)


@pytest.fixture
def box(tmp_path: Path, compose_db: str, redis_url: str, second_redis: str) -> Iterator[Box]:
    urls = {
        SERVICES["migrate"]["environment"]["FLEETFIX_DATABASE_URL"]: compose_db,
        "redis://redis-sjc2:6379/0": second_redis,
        "redis://redis:6379/0": redis_url,
    }
    box = Box(tmp_path, urls)
    try:
        yield box
    finally:
        box.stop()


def hosts_reported(url: str) -> set[str]:
    database = wired(Database(url))
    try:
        with database.sessionmaker() as session:
            return set(session.scalars(select(Host.hostname).where(Host.last_report_at.is_not(None))))
    finally:
        database.dispose()


def test_every_service_command_runs_and_becomes_ready(box: Box, compose_db: str) -> None:
    assert "database at heads" in box.run_once("migrate")
    assert "3 hosts: 3 created" in box.run_once("inventory")
    for service in LONG_RUNNING:
        box.start(service)

    # each becomes ready the way its compose healthcheck says, running the healthcheck itself
    for service in LONG_RUNNING:
        wait_until(lambda s=service: box.healthy(s), 90, f"{service}'s healthcheck", box.processes[service])
    ready = httpx.get(f"http://127.0.0.1:{box.api_port}/readyz", timeout=10).json()
    assert ready == {"status": "ok", "checks": {"database": "ok", "broker": "ok", "broker:sjc2": "ok"}}
    box.processes["scheduler"].wait_for_output("Sending due task", timeout=60)  # a beat tick

    # the agents' reports arrive, each through its own datacenter's broker and ingester
    agents = {SERVICES[s]["command"][2] for s in LONG_RUNNING if SERVICES[s]["command"][0] == "agent"}
    wait_until(lambda: agents <= hosts_reported(compose_db), 90, f"reports of {sorted(agents)}")
    assert "remediator.stream.started" in box.processes["ingester-sjc2"].output()

    # a host task for an sjc2 host goes to sjc2's broker, where its agent listens
    from core.queue import create_celery
    from remediator import operations

    create_celery(box.urls["redis://redis:6379/0"], datacenter_brokers={"sjc2": box.urls["redis://redis-sjc2:6379/0"]})
    database = wired(Database(compose_db))
    try:
        with database.session() as session:
            operations.set_report_interval(session, "sjc2-sim-001", 3600, actor="test", reason="compose test")
    finally:
        database.dispose()
        create_celery("memory://")  # leave the default app as the other tests expect
    sjc2_agent = next(s for s in LONG_RUNNING if SERVICES[s]["command"][2:] == ["sjc2-sim-001"])
    box.processes[sjc2_agent].wait_for_output("checker.agent.rescheduled", timeout=30)

    # the API's /metrics adds up the counters of every central process sharing the metrics volume
    def accepted() -> float:
        text = httpx.get(f"http://127.0.0.1:{box.api_port}/metrics", timeout=10).text
        found = re.search(r'^fleetfix_reports_total\{outcome="accepted"\} (\S+)$', text, flags=re.M)
        return float(found.group(1)) if found else 0.0

    wait_until(lambda: accepted() >= len(agents), 30, "accepted reports in /metrics")

    # compose sets FLEETFIX_LOG_FORMAT=json: every line every process wrote is a JSON event
    time.sleep(0.5)
    for service, process in box.processes.items():
        for line in process.output().splitlines():
            if line.strip():
                record = json.loads(line)  # raises on any line that is not JSON
                assert record["event"], (service, line)
