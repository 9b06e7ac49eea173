"""The fleetfix-agent distribution (deploy/agent/): what a host installs.

The quick tests hold its pyproject to the root one and to constraints.txt, and its list of `core`
modules to what the host side imports. The slow ones (marked `package`) build its wheel from a copy
of the sources, install it into a fresh virtual environment with the locked versions (pip as this
machine configures it: its cache, then the package index), and check that nothing central is
installed or importable, that every module it ships imports, and that `fleetfix-agent` runs: its
help (the same as `fleetfix agent`'s), a check cycle over a snapshot, and a real agent on Redis
sending its first report.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.samples import rich_snapshot
from checker.schemas import CollectorStatus, Report
from core.queue import INGEST_STREAM
from tests.conftest import REDIS_URL, REPO, RUN_ID
from tests.processes import base_env, wait_until

AGENT = REPO / "deploy" / "agent"
ROOT_PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
AGENT_PROJECT = tomllib.loads((AGENT / "pyproject.toml").read_text())
SHIPPED_CORE = set(AGENT_PROJECT["tool"]["setuptools"]["py-modules"])
CENTRAL_IMPORTS = (
    "api", "remediator", "ticketing", "migrations", "core.db", "core.models", "core.auth", "core.metrics",
    "sqlalchemy", "fastapi", "starlette", "uvicorn", "alembic", "psycopg", "jinja2", "mako", "argon2",
    "itsdangerous", "prometheus_client", "slack_sdk", "celery_batches", "multipart", "yaml", "cyborg.central",
)  # fmt: skip
"""What a host must not be able to import: the central packages, and what only they use."""


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(spec).name) for spec in requirements}


def locked() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_the_agent_distribution_is_a_part_of_the_full_one() -> None:
    root, agent = ROOT_PROJECT["project"], AGENT_PROJECT["project"]
    assert (agent["version"], agent["requires-python"]) == (root["version"], root["requires-python"])
    assert set(agent["dependencies"]) <= set(root["dependencies"])  # the same ranges, a subset of them
    assert agent["scripts"] == {"fleetfix-agent": root["scripts"]["fleetfix-agent"]}
    pins = locked()
    for spec in agent["dependencies"]:
        requirement = Requirement(spec)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)]), (spec, "constraints.txt")


def _core_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        found |= {m for m in modules if m.startswith("core.") and (REPO / f"{m.replace('.', '/')}.py").is_file()}
    return found


def test_the_agent_distribution_ships_every_core_module_the_host_side_imports() -> None:
    sources = [*(REPO / "checker").rglob("*.py"), *(REPO / "cyborg").rglob("*.py")]
    sources += [REPO / f"{module.replace('.', '/')}.py" for module in SHIPPED_CORE]
    imported = set().union(*(_core_imports(path) for path in sources))
    assert imported <= SHIPPED_CORE, f"add to deploy/agent/pyproject.toml's py-modules: {imported - SHIPPED_CORE}"


# -- the distribution built and installed --------------------------------------------------------


def run(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with only the fleetfix-agent wheel and its locked dependencies."""
    work = tmp_path_factory.mktemp("agent-package")
    sources = work / "src"  # a copy: building in place would leave build/ and egg-info in the checkout
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for part in ("deploy/agent", "checker", "cyborg", "core"):
        shutil.copytree(REPO / part, sources / part, ignore=ignore)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(sources / "deploy/agent"),
         "-w", str(work / "dist")], 300)  # fmt: skip
    (wheel,) = (work / "dist").glob("fleetfix_agent-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], 120)
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "-c", str(REPO / "constraints.txt"), str(wheel)], 600)  # fmt: skip
    return venv


def agent_env(**settings: str) -> dict[str, str]:
    env = base_env(COLUMNS="100", **settings)  # help text wraps the same way in both commands
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.package
def test_nothing_central_is_installed(agent_venv: Path) -> None:
    listed = run([sys.executable, "-m", "pip", "--python", str(agent_venv / "bin" / "python"), "list",
                  "--format", "json"], 120)  # fmt: skip
    installed = {canonicalize_name(d["name"]): d["version"] for d in json.loads(listed.stdout)}
    central = names(ROOT_PROJECT["project"]["dependencies"]) - names(AGENT_PROJECT["project"]["dependencies"])
    central |= {"starlette", "psycopg-binary", "mako", "fleetfix"}
    assert not central & set(installed), central & set(installed)
    pins = locked()
    unpinned = {name: version for name, version in installed.items() if name != "fleetfix-agent"}
    assert {name: pins.get(name) for name in unpinned} == unpinned  # every one at constraints.txt's version


IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
shipped = []
for top in ("checker", "cyborg", "core"):
    shipped.append(top)
    for info in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        if not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
            shipped.append(info.name)
refused = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        refused.append(name)
print(json.dumps({"shipped": shipped, "refused": refused, "file": importlib.import_module("checker").__file__}))
"""


@pytest.mark.package
def test_every_shipped_module_imports_and_nothing_central_does(agent_venv: Path, tmp_path: Path) -> None:
    done = run([str(agent_venv / "bin" / "python"), "-I", "-c", IMPORT_EVERYTHING, *CENTRAL_IMPORTS], 120,
               cwd=tmp_path, env=agent_env())  # fmt: skip
    found = json.loads(done.stdout)
    assert found["file"].startswith(str(agent_venv))  # the installed copy, not the checkout
    assert found["refused"] == list(CENTRAL_IMPORTS)
    in_checkout = {
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for top in ("checker", "cyborg")
        for path in (REPO / top).rglob("*.py")
        if path.name != "__main__.py" and not path.is_relative_to(REPO / "cyborg" / "central")
    }
    assert set(found["shipped"]) == in_checkout | SHIPPED_CORE | {"core"}


def help_text(argv: list[str], cwd: Path) -> list[str]:
    done = run(argv, 60, cwd=cwd, env=agent_env())
    lines = [line.rstrip() for line in done.stdout.splitlines()]
    return [line for line in lines if line and "Usage:" not in line]  # the usage line names the program


@pytest.mark.package
def test_the_agent_command_has_the_host_side_commands_with_the_same_options(agent_venv: Path, tmp_path: Path) -> None:
    command = str(agent_venv / "bin" / "fleetfix-agent")
    top = "\n".join(help_text([command, "--help"], tmp_path))
    for name in ("run", "check", "snapshot", "report-schema"):
        assert f" {name} " in top, name
    for agent_name, full_name in (("run", "agent"), ("check", "check"), ("snapshot", "snapshot")):
        mine = help_text([command, agent_name, "--help"], tmp_path)
        full = help_text([sys.executable, "-m", "api", full_name, "--help"], REPO)
        assert mine == full, agent_name
    schema = run([command, "report-schema"], 60, cwd=tmp_path, env=agent_env())
    assert json.loads(schema.stdout) == Report.model_json_schema()


@pytest.mark.package
def test_the_agent_command_runs_a_check_cycle_over_a_snapshot(agent_venv: Path, tmp_path: Path) -> None:
    snap = rich_snapshot(tmp_path / "snap").directory
    done = run([str(agent_venv / "bin" / "fleetfix-agent"), "check", "--snapshot", str(snap), "--format", "json"],
               120, cwd=tmp_path, env=agent_env())  # fmt: skip
    report = Report.model_validate_json(done.stdout)
    assert report.host.hostname == "snap-host"
    assert {collector.status for collector in report.collectors.values()} == {CollectorStatus.ok}
    assert report.observations.disks is not None


@pytest.fixture
def stream() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.mark.package
@pytest.mark.redis
def test_the_installed_agent_reports_through_redis(agent_venv: Path, tmp_path: Path, stream: redis.Redis) -> None:
    hostname = f"package-agent-{RUN_ID}"
    env = agent_env(FLEETFIX_BROKER_URL=REDIS_URL, FLEETFIX_REPORT_INTERVAL_S="3600")
    log_path = tmp_path / "agent.log"
    argv = [str(agent_venv / "bin" / "fleetfix-agent"), "run", "--hostname", hostname]
    with log_path.open("w") as log:
        proc = subprocess.Popen([*argv, "--state-dir", str(tmp_path / "state")], cwd=tmp_path, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:

        def sent() -> list[bytes]:
            if proc.poll() is not None:
                raise AssertionError(f"exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            entries = stream.xrange(INGEST_STREAM)
            return [i for i, fields in entries if json.loads(fields[b"report"])["host"]["hostname"] == hostname]

        mine = wait_until(sent, 60, f"{hostname}'s report on {INGEST_STREAM}")
        # The check loop starts before the worker, so its first report may come first.
        wait_until(lambda: f"agent@{hostname} ready." in log_path.read_text(), 60, "the worker ready")
        assert "Traceback" not in log_path.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    stream.xdel(INGEST_STREAM, *mine)  # nobody here consumes it
