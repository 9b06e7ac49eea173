"""The operators' own tools in deploy/: the Prometheus alert rules and the Grafana dashboard.

promtool (Debian's `prometheus` package; .ci/run installs it) checks the rules and runs their unit
tests (deploy/prometheus/fleetfix-alerts.test.yml), and parses every dashboard query; every metric
either names must be one the app's /metrics exposes, so neither can drift from the code; every alert
names a section of docs/operations.md that exists.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from api.settings import load_central_settings
from core.db import Database
from core.queue import create_celery
from tests.builders.runtime import rewire
from tests.conftest import REPO

RULES = REPO / "deploy" / "prometheus" / "fleetfix-alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "fleetfix-alerts.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "fleetfix-dashboard.json"
OPERATIONS = REPO / "docs" / "operations.md"
METRIC_NAME = re.compile(r"\bfleetfix_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}


def promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail(
            "promtool is not installed: it checks deploy/prometheus/fleetfix-alerts.yml. Install Debian's "
            "`prometheus` package (apt-get install prometheus), which provides /usr/bin/promtool; .ci/run does."
        )
    return tool


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_the_alert_rules_pass_promtool_check() -> None:
    checked = run_promtool("check", "rules", str(RULES), cwd=REPO)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_each_alert_fires_when_it_should_and_not_otherwise() -> None:
    tested = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    checks = [check for case in cases for check in case["alert_rule_test"]]
    for rule in alert_rules():
        mine = [check for check in checks if check["alertname"] == rule["alert"]]
        assert any(check["exp_alerts"] for check in mine), f"{rule['alert']}: no test where it fires"
        assert any(not check["exp_alerts"] for check in mine), f"{rule['alert']}: no test where it stays quiet"


def test_the_unit_tests_catch_a_changed_threshold(tmp_path: Path) -> None:
    # The rule tests are not vacuous: the same tests against rules whose thresholds moved fail.
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("> 60\n", "> 600\n").replace("> 300)", "> 3000)"))
    tested = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0
    assert "FleetfixIngestLagging" in tested.stdout + tested.stderr
    assert "FleetfixWorkersDown" in tested.stdout + tested.stderr


def test_every_alert_has_a_severity_a_wait_and_a_first_step_in_the_docs() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule.get("for"), f"{rule['alert']}: no `for:`, one scrape would page"
        assert rule["annotations"]["summary"], rule["alert"]
        assert "First step" in rule["annotations"]["description"], rule["alert"]
        runbook = rule["annotations"]["runbook"]
        assert runbook == f"docs/operations.md#{rule['alert'].lower()}", rule["alert"]
        assert runbook.split("#", 1)[1] in anchors, f"{runbook}: no such section in docs/operations.md"


def test_the_dashboard_imports_anywhere_and_its_queries_parse(tmp_path: Path) -> None:
    model = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in model["templating"]["list"] if v["type"] == "datasource"]
    assert variable == {**variable, "name": "datasource", "query": "prometheus"}
    panels = [panel for panel in model["panels"] if panel["type"] != "row"]
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids))
    titles = {panel["title"] for panel in panels}
    for wanted in ("Ingest rate", "Ingest lag", "Decisions by outcome", "Open tickets by datacenter", "Rule breakers"):
        assert wanted in titles
    # promtool parses PromQL in recording rules; Grafana's $__rate_interval stands in as 5m
    rules = [
        {"record": f"dashboard:query_{number}", "expr": expr.replace("$__rate_interval", "5m")}
        for number, expr in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = run_promtool("check", "rules", str(path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def exposed(db: Database, redis_url: str) -> set[str]:
    """Every sample name the app's /metrics can carry (a family's HELP and TYPE are written even before its
    first sample): the app on a real broker, so the broker's families are there too."""
    producer = create_celery(redis_url)
    settings = load_central_settings(broker_url=redis_url)
    try:
        with TestClient(create_app(rewire(db, settings=settings, celery=producer))) as client:
            response = client.get("/metrics")
            assert response.status_code == 200
            families = list(text_string_to_metric_families(response.text))
    finally:
        create_celery("memory://")
    names = {family.name for family in families}
    for family in families:
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def test_every_metric_the_dashboard_and_the_alerts_use_is_exposed(exposed: set[str]) -> None:
    used_by_alerts = {name for rule in alert_rules() for name in METRIC_NAME.findall(rule["expr"])}
    used_by_dashboard = {name for expr in dashboard_queries() for name in METRIC_NAME.findall(expr)}
    assert used_by_alerts
    assert used_by_dashboard
    assert used_by_alerts - exposed == set()
    assert used_by_dashboard - exposed == set()
    assert "fleetfix_no_such_metric" not in exposed  # the check can say no
