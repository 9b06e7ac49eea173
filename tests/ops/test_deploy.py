"""deploy/: the host agent's systemd unit and config file, and the Kubernetes manifests.

The unit is checked by systemd itself (`systemd-analyze verify`, which reports unknown keys and
bad values), the config file by loading it as the agent would, and the manifests by building them
with `kubectl kustomize` (offline) and reading what they run.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from api.cli import app as cli
from api.settings import CentralSettings
from checker.agent.cli import app as agent_cli
from checker.agent.config import load_agent_config
from core.settings import Settings, SettingsError, known_names, load_settings
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
AGENT_COMMAND = Path(sys.executable).parent / "fleetfix-agent"  # the root distribution installs it too


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; it checks deploy/ (Debian: apt-get install {name})")
    return path


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "fleetfix-agent.service")
    return parser


def test_systemd_accepts_the_agent_unit(tmp_path: Path) -> None:
    text = (DEPLOY / "fleetfix-agent.service").read_text()
    local = tmp_path / "fleetfix-agent.service"  # verify needs the ExecStart binary to exist
    local.write_text(text.replace("/opt/fleetfix-agent/bin/fleetfix-agent", str(AGENT_COMMAND)))
    done = subprocess.run([tool("systemd-analyze"), "verify", str(local)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # unknown keys and bad values are only warnings: none allowed


def test_the_agent_runs_unprivileged_with_only_the_capabilities_it_needs() -> None:
    service = unit()["Service"]
    assert service["User"] == service["Group"] == "fleetfix"
    # The fleetfix-agent distribution's command (deploy/agent/), installed in a virtual environment of its own.
    assert service["ExecStart"].split() == ["/opt/fleetfix-agent/bin/fleetfix-agent", "run"]
    assert "run" in typer.main.get_command(agent_cli).commands  # type: ignore[attr-defined]
    assert service["Restart"] == "on-failure"
    ambient = set(service["AmbientCapabilities"].split())
    assert ambient == set(service["CapabilityBoundingSet"].split())
    assert ambient == {"CAP_SYSLOG", "CAP_DAC_READ_SEARCH", "CAP_SYS_RAWIO", "CAP_SYS_ADMIN"}
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["StateDirectory"] == "fleetfix-agent"
    assert service["CPUAffinity"]  # housekeeping cores
    sysusers = (DEPLOY / "fleetfix.sysusers.conf").read_text()
    assert "u fleetfix - " in sysusers
    assert "/var/lib/fleetfix-agent" in sysusers


def test_the_agent_config_file_loads_as_the_agent_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = unit()["Service"]["EnvironmentFile"]
    assert env_file == "/etc/fleetfix/agent.env"
    for key in list(os.environ):
        if key.startswith("FLEETFIX_") and not key.startswith("FLEETFIX_TEST_"):
            monkeypatch.delenv(key)
    (tmp_path / "broker-ca.pem").write_text("a CA bundle\n")
    (tmp_path / "agent.token").write_text("ff_host_token_for_the_test\n")
    (tmp_path / "agent.token").chmod(0o600)
    placeholders = []
    for line in (DEPLOY / "agent.env").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.split("=", 1)
        if "CHANGE-ME" in value:
            placeholders.append(name)
            value = value.replace("CHANGE-ME", "x" * 40)
        monkeypatch.setenv(name, value.replace("/etc/fleetfix/", f"{tmp_path}/"))
    assert placeholders == ["FLEETFIX_BROKER_URL", "FLEETFIX_SECRET_KEY"]
    settings = load_settings(Settings)  # the shared section: what the agent reads
    assert settings.environment == "production"
    assert settings.broker_url.startswith("rediss://")
    assert settings.broker_tls == {"ca_certs": str(tmp_path / "broker-ca.pem")}
    config = load_agent_config()
    assert config.cpus == ""  # the housekeeping CPUs, found at start (checker/agent/worker.py)
    assert config.cpu_set == set()


def test_the_example_secret_key_is_refused_until_it_is_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_ENVIRONMENT", "production")
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("FLEETFIX_SECRET_KEY", "CHANGE-ME")
    with pytest.raises(SettingsError, match="FLEETFIX_SECRET_KEY"):
        load_settings(Settings)


def manifests() -> list[dict[str, Any]]:
    built = subprocess.run(
        [tool("kubectl"), "kustomize", str(DEPLOY / "kubernetes")], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def test_kubernetes_manifests_run_real_commands_unprivileged() -> None:
    docs = manifests()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("Job", "fleetfix-migrate"), ("Deployment", "fleetfix-api"), ("Deployment", "fleetfix-worker")} <= kinds
    assert {("Deployment", "fleetfix-ingester"), ("Deployment", "fleetfix-scheduler")} <= kinds
    commands = typer.main.get_command(cli).commands  # type: ignore[attr-defined]
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    known = known_names(CentralSettings)
    assert set(config["data"]) <= known, set(config["data"]) - known
    run = {}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for container in pod["containers"]:
            assert container["args"][0] in commands, container["args"]
            assert container["image"].endswith(":0.1.0")  # pinned, never latest
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            for variable in container.get("env", []):
                assert variable["name"] in known, variable
            run[doc["metadata"]["name"]] = container["args"]
    assert run["fleetfix-migrate"] == ["db", "upgrade"]
    assert run["fleetfix-worker-sjc2"][:3] == ["worker", "--datacenter", "sjc2"]
    scheduler = next(d for d in docs if d["metadata"]["name"] == "fleetfix-scheduler")
    assert scheduler["spec"]["replicas"] == 1  # two beats would send every periodic task twice
    assert scheduler["spec"]["strategy"]["type"] == "Recreate"
    api = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "fleetfix-api")
    probes = api["spec"]["template"]["spec"]["containers"][0]
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_the_agents_intake_api_has_a_core_of_its_own_and_no_other_traffic() -> None:
    """deploy/kubernetes/api-intake.yaml: one uvicorn worker per pod with a whole core (request = limit, so
    sign-ins and pages on fleetfix-api cannot take its CPU), and a selector fleetfix-api's Service never
    matches (docs/reliability.md, "Load")."""
    docs = manifests()
    intake = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "fleetfix-api-intake")
    [container] = intake["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["api", "--workers", "1"]
    resources = container["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "1"
    labels = intake["spec"]["template"]["metadata"]["labels"]
    api_service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "fleetfix-api")
    assert not set(api_service["spec"]["selector"].items()) <= set(labels.items())
    intake_service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "fleetfix-api-intake")
    assert set(intake_service["spec"]["selector"].items()) <= set(labels.items())
