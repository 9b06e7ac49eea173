"""Service settings: FLEETFIX_* environment variables over an optional TOML file.

The defaults are the embedded mode (SQLite in the data directory, an in-process
broker, the UI on 127.0.0.1:8000); pointing the two URLs at PostgreSQL and Redis
is the production mode with no code change.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

ENV_PREFIX = "FLEETFIX_"
CONFIG_FILE_ENV = "FLEETFIX_CONFIG"
OTHER_PREFIXES = (f"{ENV_PREFIX}TEST_", f"{ENV_PREFIX}AGENT_")
"""Variables read elsewhere: the test harness's, and the host agent's own settings."""
PLACEHOLDER_SECRET = "change-me-in-production"  # noqa: S105 - the value production refuses


class SettingsError(Exception):
    """A setting has a bad value; the message names the variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        validate_default=True,
    )

    environment: Literal["development", "production"] = Field(
        "development",
        description="development allows placeholder secrets; production refuses them.",
    )
    data_dir: Path = Field(
        Path("./var"),
        description="Directory for the embedded database, spools and beat schedule.",
    )
    database_url: str = Field(
        "",
        description=(
            "SQLAlchemy URL. Empty means SQLite at DATA_DIR/fleetfix.db; production uses "
            "postgresql+psycopg://user@host/db."
        ),
    )
    database_pool_size: int = Field(5, ge=1, le=200, description="PostgreSQL pool size.")
    broker_url: str = Field(
        "memory://",
        description=(
            "Celery broker. memory:// is in-process (embedded mode); redis://host:6379/0 or amqp://… in production."
        ),
    )
    api_host: str = Field("127.0.0.1", description="Address the API and web UI listen on.")
    api_port: int = Field(8000, ge=1, le=65535, description="Port the API and web UI listen on.")
    public_url: str = Field(
        "",
        description="Base URL people use to reach the UI (links in tickets and alerts). Empty: http://API_HOST:API_PORT.",
    )
    secret_key: str = Field(
        PLACEHOLDER_SECRET,
        min_length=16,
        description="Signing secret (web sessions, host action envelopes). Production needs 32+ random characters.",
    )
    report_interval_s: int = Field(
        60, ge=5, le=3600, description="How often agents run the check cycle and report, in seconds."
    )
    stale_after_intervals: int = Field(
        3, ge=2, le=100, description="A host with no report for this many intervals is unreachable."
    )
    rules_paths: list[Path] = Field(
        default_factory=list,
        description="Rule-pack YAML files or directories loaded after the built-in default pack.",
    )
    hostname: str = Field(
        "",
        description="This host's name for the agent (host.<hostname> queue). Empty: the system hostname.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    log_format: Literal["json", "text"] = Field("text", description="json for structured logs in production.")

    @field_validator("database_url")
    @classmethod
    def _database_url_dialect(cls, value: str) -> str:
        if value and not value.startswith(("sqlite", "postgresql")):
            raise ValueError("must be a sqlite:// or postgresql+psycopg:// URL")
        if value.startswith("postgresql://") or value.startswith("postgres://"):
            raise ValueError("name the driver: postgresql+psycopg://…")
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, value: str) -> str:
        if not value.startswith(("memory://", "redis://", "rediss://", "amqp://", "amqps://")):
            raise ValueError("must be memory://, redis://, rediss://, amqp:// or amqps://")
        return value

    @model_validator(mode="after")
    def _production_secrets(self) -> Settings:
        if self.environment == "production":
            if self.secret_key == PLACEHOLDER_SECRET or len(self.secret_key) < 32:
                raise ValueError(f"{ENV_PREFIX}SECRET_KEY must be set to 32+ random characters in production")
            if self.broker_url.startswith("memory://"):
                raise ValueError(f"{ENV_PREFIX}BROKER_URL: the in-process broker is for the embedded mode only")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'fleetfix.db').resolve()}"

    @property
    def effective_public_url(self) -> str:
        return self.public_url.rstrip("/") or f"http://{self.api_host}:{self.api_port}"

    @property
    def embedded(self) -> bool:
        return self.broker_url.startswith("memory://")


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        name = f"{ENV_PREFIX}{field.upper()}" if field else "settings"
        lines.append(f"{name}: {item['msg']} (got {item.get('input')!r})")
    return "; ".join(lines)


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment and FLEETFIX_CONFIG, or raise SettingsError."""
    config_file = os.environ.get(CONFIG_FILE_ENV)
    if config_file and not Path(config_file).is_file():
        raise SettingsError(f"{CONFIG_FILE_ENV}: no such file {config_file!r}")
    known = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields} | {CONFIG_FILE_ENV}
    unknown = sorted(
        key
        for key in os.environ
        if key.startswith(ENV_PREFIX) and key not in known and not key.startswith(OTHER_PREFIXES)
    )
    if unknown:
        raise SettingsError(f"{unknown[0]}: unknown setting (known: {', '.join(sorted(known))})")
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(_describe(error)) from error
    except ValueError as error:  # a malformed TOML file
        raise SettingsError(f"{CONFIG_FILE_ENV} {config_file!r}: {error}") from error


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
