"""Settings: embedded defaults, production by environment, refusals that name the variable, and the split into
sections (the shared one in core, each stage's in the stage, their union in the central root)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from api.settings import SECTIONS, CentralSettings, load_central_settings
from core.settings import CONFIG_FILE_ENV, Settings, SettingsError, known_names, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("FLEETFIX_") and not key.startswith("FLEETFIX_TEST_"):
            monkeypatch.delenv(key)


def test_defaults_are_the_embedded_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_DATA_DIR", str(tmp_path))
    settings = load_central_settings()
    assert settings.embedded
    assert settings.broker_url == "memory://"
    assert settings.effective_database_url == f"sqlite:///{tmp_path.resolve() / 'fleetfix.db'}"
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8000)


def test_production_urls_need_no_code_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_DATABASE_URL", "postgresql+psycopg://fleetfix@db/fleetfix")
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "redis://redis:6379/0")
    settings = load_central_settings()
    assert not settings.embedded
    assert settings.effective_database_url == "postgresql+psycopg://fleetfix@db/fleetfix"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("FLEETFIX_API_PORT", "eighty"),
        ("FLEETFIX_API_PORT", "70000"),
        ("FLEETFIX_DATABASE_URL", "mysql://x"),
        ("FLEETFIX_DATABASE_URL", "postgresql://no-driver/db"),
        ("FLEETFIX_BROKER_URL", "kafka://x"),
        ("FLEETFIX_LOG_LEVEL", "LOUD"),
    ],
)
def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=variable):
        load_central_settings()


def test_unknown_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_DATABSE_URL", "sqlite:///typo.db")
    with pytest.raises(SettingsError, match="FLEETFIX_DATABSE_URL: unknown setting"):
        load_central_settings()


def test_production_refuses_placeholder_secret_and_memory_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_ENVIRONMENT", "production")
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "redis://r:6379/0")
    with pytest.raises(SettingsError, match="FLEETFIX_SECRET_KEY"):
        load_central_settings()
    monkeypatch.setenv("FLEETFIX_SECRET_KEY", "x" * 40)
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "memory://")
    with pytest.raises(SettingsError, match="FLEETFIX_BROKER_URL"):
        load_central_settings()


def test_toml_file_and_environment_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "fleetfix.toml"
    config.write_text('api_port = 9100\nlog_level = "DEBUG"\nrules_paths = ["/etc/fleetfix/rules"]\n')
    monkeypatch.setenv("FLEETFIX_CONFIG", str(config))
    monkeypatch.setenv("FLEETFIX_LOG_LEVEL", "WARNING")
    settings = load_central_settings()
    assert settings.api_port == 9100
    assert settings.log_level == "WARNING"  # the environment wins over the file
    assert settings.rules_paths == [Path("/etc/fleetfix/rules")]


def test_toml_unknown_key_and_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "fleetfix.toml"
    config.write_text("api_prot = 1\n")
    monkeypatch.setenv("FLEETFIX_CONFIG", str(config))
    with pytest.raises(SettingsError, match="FLEETFIX_API_PROT"):
        load_central_settings()
    monkeypatch.setenv("FLEETFIX_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(SettingsError, match="no such file"):
        load_central_settings()


def test_every_field_is_described() -> None:
    undescribed = [name for name, field in CentralSettings.model_fields.items() if not field.description]
    assert undescribed == []


def test_cli_stops_on_a_bad_setting_naming_it(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "FLEETFIX_API_PORT": "not-a-port", "FLEETFIX_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "api", "db", "upgrade"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "FLEETFIX_API_PORT" in done.stderr
    assert not (tmp_path / "fleetfix.db").exists()


STAGES = {
    "RemediatorSettings": "remediator.settings",
    "TicketingSettings": "ticketing.settings",
    "CyborgSettings": "cyborg.central.settings",
}


def declared(section: type[Settings]) -> set[str]:
    """The fields a section's own class body declares (not those it inherits from the shared section)."""
    return set(inspect.get_annotations(section))


def test_each_setting_is_declared_once_in_its_own_section() -> None:
    """A stage's setting is changed in the stage: core.settings declares only the shared ones, each stage's
    section lives in the stage's package, and the root's class declares none of its own."""
    assert SECTIONS[0] is Settings
    assert {section.__name__: section.__module__ for section in SECTIONS[1:]} == STAGES
    owners: dict[str, list[str]] = {}
    for section in SECTIONS:
        assert issubclass(CentralSettings, section)
        for name in declared(section):
            owners.setdefault(name, []).append(section.__name__)
    assert {name: found for name, found in owners.items() if len(found) > 1} == {}
    assert set(owners) == set(CentralSettings.model_fields)
    assert declared(CentralSettings) == set()
    shared = declared(Settings)
    assert {"ticket_tracker", "slack_bot_token", "bmc_username", "scheduler_hooks", "rules_paths"}.isdisjoint(shared)
    assert {"database_url", "broker_url", "environment", "secret_key", "report_interval_s", "hostname"} <= shared


def test_the_unknown_name_check_sees_the_union_of_the_sections() -> None:
    union = {f"FLEETFIX_{name.upper()}" for section in SECTIONS for name in declared(section)}
    assert known_names(CentralSettings) == union | {CONFIG_FILE_ENV}
    assert known_names(Settings) == {f"FLEETFIX_{name.upper()}" for name in declared(Settings)} | {CONFIG_FILE_ENV}


def test_a_stages_setting_is_read_centrally_and_unknown_to_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The central root loads every section; the agent's root (checker/agent/cli.py) loads the shared one alone,
    so a stage's variable is not the agent's: it is refused there as any unknown name is."""
    monkeypatch.setenv("FLEETFIX_REPORT_RETENTION_DAYS", "7")
    monkeypatch.setenv("FLEETFIX_TICKET_TRACKER", "local")
    monkeypatch.setenv("FLEETFIX_BMC_USERNAME", "ipmi-admin")
    central = load_central_settings()
    assert (central.report_retention_days, central.ticket_tracker, central.bmc_username) == (7, "local", "ipmi-admin")
    with pytest.raises(SettingsError, match="FLEETFIX_BMC_USERNAME: unknown setting"):
        load_settings(Settings)
    monkeypatch.delenv("FLEETFIX_BMC_USERNAME")
    monkeypatch.delenv("FLEETFIX_REPORT_RETENTION_DAYS")
    monkeypatch.delenv("FLEETFIX_TICKET_TRACKER")
    assert type(load_settings(Settings)) is Settings


def test_a_sections_check_reads_the_shared_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticketing's alert URL check depends on the shared ENVIRONMENT: production takes https:// only."""
    monkeypatch.setenv("FLEETFIX_ALERTS_MODE", "webhook")
    monkeypatch.setenv("FLEETFIX_SLACK_WEBHOOK_URL", "http://hooks.example.net/fleet")
    assert load_central_settings().alerts_mode == "webhook"
    monkeypatch.setenv("FLEETFIX_ENVIRONMENT", "production")
    monkeypatch.setenv("FLEETFIX_SECRET_KEY", "x" * 40)
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "redis://r:6379/0")
    with pytest.raises(SettingsError, match="FLEETFIX_SLACK_WEBHOOK_URL must be an https:// URL") as bad:
        load_central_settings()
    assert "hooks.example.net" not in str(bad.value)
