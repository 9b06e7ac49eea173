"""Structured logs: JSON lines with stable event names.

Every logging call in the project's packages names its event with a literal stage.object.event
(an f-string may fill in a part, as remediator.decision.{outcome} does), so log pipelines can
match on names that do not change with the data. test_compose.py checks that every line the
services print in JSON mode is a JSON event.
"""

from __future__ import annotations

import ast
import json
import logging
import sys

import pytest

from core.logs import FOREIGN_EVENT, JsonFormatter, TextFormatter, is_event_name, mask_credentials
from tests.conftest import REPO
from tests.ops.helpers import event_of

PACKAGES = ("core", "checker", "remediator", "cyborg", "ticketing", "api")
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def record(logger: str, message: str, **extra: object) -> logging.LogRecord:
    return logging.getLogger(logger).makeRecord(logger, logging.INFO, __file__, 1, message, (), None, extra=extra)


def test_a_fleetfix_event_is_its_name_with_its_fields() -> None:
    line = JsonFormatter().format(
        record("remediator.planning", "remediator.remediation.planned", fields={"host": "h1", "remediation": 7})
    )
    doc = json.loads(line)
    assert doc["event"] == "remediator.remediation.planned"
    assert (doc["host"], doc["remediation"], doc["level"], doc["logger"]) == ("h1", 7, "info", "remediator.planning")
    assert "message" not in doc
    assert isinstance(doc["pid"], int)


def test_other_libraries_text_is_a_message_under_one_event() -> None:
    doc = json.loads(JsonFormatter().format(record("celery.apps.worker", "celery@vm ready.")))
    assert doc["event"] == FOREIGN_EVENT
    assert doc["message"] == "celery@vm ready."


def test_a_field_cannot_overwrite_the_envelope() -> None:
    doc = json.loads(
        JsonFormatter().format(record("x", "api.request.failed", fields={"event": "forged", "level": "x"}))
    )
    assert doc["event"] == "api.request.failed"
    assert (doc["field_event"], doc["field_level"]) == ("forged", "x")


def test_exceptions_are_kept_in_the_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        made = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "checker.cycle.failed", (), sys.exc_info()
        )
    doc = json.loads(JsonFormatter().format(made))
    assert "ValueError: boom" in doc["exc"]


@pytest.mark.parametrize("name", ["Remediator.x.y", "remediator.planned", "remediator remediation planned", "a..b"])
def test_names_that_are_not_events(name: str) -> None:
    assert not is_event_name(name)


def test_every_log_call_names_a_stable_event() -> None:
    problems = []
    calls = 0
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LEVELS
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("log", "logger")
                ):
                    continue
                calls += 1
                name = event_of(node)
                if name is None or not is_event_name(name):
                    problems.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node.args[0])[:80]}")
    assert calls > 20  # the walk found the project's logging
    assert problems == []


SECRET_URLS = [
    (
        "postgresql+psycopg://fleetfix:s3cr%40t@db.internal:5432/fleetfix",
        "postgresql+psycopg://fleetfix:***@db.internal",
    ),
    ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
    ("amqps://agent:pa55@mq.example/fleetfix", "amqps://agent:***@mq.example/fleetfix"),
]


@pytest.mark.parametrize(("url", "masked"), SECRET_URLS)
def test_a_password_in_a_url_never_reaches_a_log_line(url: str, masked: str) -> None:
    secret = url.split(":")[2].split("@")[0]
    for formatter in (JsonFormatter(), TextFormatter("%(message)s")):
        line = formatter.format(record("api.cli", f"connecting to {url}", fields={"broker": url}))
        assert secret not in line
        assert masked in line
    assert mask_credentials("http://example.com/a@b and user@host") == "http://example.com/a@b and user@host"


def test_up_prints_its_database_without_the_password(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """The outside review saw `fleetfix up` print DATABASE_URL with its password."""
    from typer.testing import CliRunner

    from api import cli, embedded

    monkeypatch.setenv("FLEETFIX_DATA_DIR", str(tmp_path))
    # `up` sets the metrics directory for the process; this keeps it from outliving the test
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    monkeypatch.setenv("FLEETFIX_DATABASE_URL", "postgresql+psycopg://fleetfix:hunter2@db.internal:5432/fleetfix")
    monkeypatch.delenv("FLEETFIX_BROKER_URL", raising=False)
    monkeypatch.setattr(embedded, "run_up", lambda *args, **kwargs: None)
    result = CliRunner().invoke(cli.app, ["up"])
    assert "postgresql+psycopg://fleetfix:***@db.internal:5432/fleetfix" in result.output, result.output
    assert "hunter2" not in result.output
