"""Settings: embedded defaults, production by environment, refusals that name the variable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("FLEETFIX_") and not key.startswith("FLEETFIX_TEST_"):
            monkeypatch.delenv(key)


def test_defaults_are_the_embedded_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.embedded
    assert settings.broker_url == "memory://"
    assert settings.effective_database_url == f"sqlite:///{tmp_path.resolve() / 'fleetfix.db'}"
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8000)


def test_production_urls_need_no_code_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_DATABASE_URL", "postgresql+psycopg://fleetfix@db/fleetfix")
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "redis://redis:6379/0")
    settings = load_settings()
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
        load_settings()


def test_unknown_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_DATABSE_URL", "sqlite:///typo.db")
    with pytest.raises(SettingsError, match="FLEETFIX_DATABSE_URL: unknown setting"):
        load_settings()


def test_production_refuses_placeholder_secret_and_memory_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETFIX_ENVIRONMENT", "production")
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "redis://r:6379/0")
    with pytest.raises(SettingsError, match="FLEETFIX_SECRET_KEY"):
        load_settings()
    monkeypatch.setenv("FLEETFIX_SECRET_KEY", "x" * 40)
    monkeypatch.setenv("FLEETFIX_BROKER_URL", "memory://")
    with pytest.raises(SettingsError, match="FLEETFIX_BROKER_URL"):
        load_settings()


def test_toml_file_and_environment_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "fleetfix.toml"
    config.write_text('api_port = 9100\nlog_level = "DEBUG"\nrules_paths = ["/etc/fleetfix/rules"]\n')
    monkeypatch.setenv("FLEETFIX_CONFIG", str(config))
    monkeypatch.setenv("FLEETFIX_LOG_LEVEL", "WARNING")
    settings = load_settings()
    assert settings.api_port == 9100
    assert settings.log_level == "WARNING"  # the environment wins over the file
    assert settings.rules_paths == [Path("/etc/fleetfix/rules")]


def test_toml_unknown_key_and_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "fleetfix.toml"
    config.write_text("api_prot = 1\n")
    monkeypatch.setenv("FLEETFIX_CONFIG", str(config))
    with pytest.raises(SettingsError, match="FLEETFIX_API_PROT"):
        load_settings()
    monkeypatch.setenv("FLEETFIX_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(SettingsError, match="no such file"):
        load_settings()


def test_every_field_is_described() -> None:
    from core.settings import Settings

    undescribed = [name for name, field in Settings.model_fields.items() if not field.description]
    assert undescribed == []


def test_cli_stops_on_a_bad_setting_naming_it(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "FLEETFIX_API_PORT": "not-a-port", "FLEETFIX_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "api", "db", "upgrade"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "FLEETFIX_API_PORT" in done.stderr
    assert not (tmp_path / "fleetfix.db").exists()
