"""Service settings: FLEETFIX_* environment variables over an optional TOML file.

`Settings` is the shared section: what every process reads (database, broker and its TLS, data
directory, logging, environment, the signing secret, the API, metrics) and what the host agent needs
(report interval, hostname). Each stage declares its own section as a subclass of it, in the stage
(remediator/settings.py, ticketing/settings.py, cyborg/central/settings.py), so a stage's setting is
changed there; a process's root loads the sections it runs with in one class (api/settings.py for the
central processes, this one alone for the agent) through `load_settings`, which refuses every FLEETFIX_*
name that class does not declare.

The defaults are the embedded mode (SQLite in the data directory, an in-process
broker, the UI on 127.0.0.1:8000); pointing the two URLs at PostgreSQL and Redis
is the production mode with no code change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, TypeVar, get_args

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from core.vocabulary import MIN_PASSWORD_LENGTH, REPORT_INTERVAL_MAX_S, REPORT_INTERVAL_MIN_S

ENV_PREFIX = "FLEETFIX_"
CONFIG_FILE_ENV = "FLEETFIX_CONFIG"
OTHER_PREFIXES = (f"{ENV_PREFIX}TEST_", f"{ENV_PREFIX}AGENT_")
"""Variables read elsewhere: the test harness's, and the host agent's own settings."""
PLACEHOLDER_SECRET = "change-me-in-production"  # noqa: S105 - the value production refuses


class SettingsError(Exception):
    """A setting has a bad value; the message names the variable."""


class Settings(BaseSettings):
    """The shared section. A stage's section subclasses it (and so reads the shared fields it needs, such as
    `environment`); a root's class subclasses the sections it loads."""

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
        description="Signing secret (web sessions). Production needs 32+ random characters.",
    )
    report_interval_s: int = Field(
        60,
        ge=REPORT_INTERVAL_MIN_S,
        le=REPORT_INTERVAL_MAX_S,
        description="How often agents run the check cycle and report, in seconds.",
    )
    api_shared_concurrency: int = Field(
        4,
        ge=1,
        le=1000,
        description=(
            "Requests other than report intake and the probes that an API process serves at once; the rest wait "
            "without a thread or a database connection, so intake keeps its share (api/lanes.py)."
        ),
    )
    api_shared_queue: int = Field(
        200, ge=0, le=100_000, description="Requests that may wait for the shared lane per process; past it, 503."
    )
    max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        le=1_073_741_824,
        description="Largest request body the API reads, except report submission: beyond it, 413 before reading.",
    )
    max_report_body_bytes: int = Field(
        2_097_152,
        ge=65_536,
        le=1_073_741_824,
        description="Largest body of POST /api/v1/reports and /reports/delta (an agent bounds a report at 1 MB; JSON "
        "escaping adds some).",
    )
    max_batch_body_bytes: int = Field(
        16_777_216,
        ge=65_536,
        le=4_294_967_296,
        description="Largest body of POST /api/v1/reports/batch: 16 reports at the agent's 1 MB bound, "
        "about 1,100 at a typical 14 KB.",
    )
    hostname: str = Field(
        "",
        description="This host's name for the agent (host.<hostname> queue). Empty: the system hostname.",
    )
    admin_password: SecretStr = Field(
        SecretStr(""),
        description=(
            "fleetfix up only: password of the admin account it creates on first start. Empty: one is generated, "
            "printed once and kept in DATA_DIR/admin-password (mode 0600). Other modes create no account."
        ),
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    log_format: Literal["json", "text"] = Field("text", description="json for structured logs in production.")
    datacenter_brokers: dict[str, str] = Field(
        default_factory=dict,
        description=(
            'One broker per datacenter, JSON: {"ams1": "redis://broker.ams1:6379/0"}. Agents of a datacenter use '
            "its broker as their BROKER_URL; `worker --datacenter DC` and `ingester --datacenter DC` consume it, "
            "and host tasks go to the host's datacenter's broker. Empty: one broker for everything."
        ),
    )
    broker_tls_ca_file: Path | None = Field(
        None, description="CA bundle that verifies the broker's certificate (rediss:// and amqps:// URLs)."
    )
    broker_tls_cert_file: Path | None = Field(
        None, description="Client certificate presented to the broker (TLS client authentication)."
    )
    broker_tls_key_file: Path | None = Field(None, description="Private key of BROKER_TLS_CERT_FILE.")
    metrics_dir: Path | None = Field(
        None,
        description=(
            "Directory where the central processes on one box keep their Prometheus counters, so the API's "
            "/metrics adds them up (prometheus_client multiprocess mode). Empty: DATA_DIR/metrics."
        ),
    )
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="worker, ingester and scheduler also serve /metrics on this port (0: only the API serves it).",
    )

    @field_validator("database_url")
    @classmethod
    def _database_url_dialect(cls, value: str) -> str:
        if value and not value.startswith(("sqlite", "postgresql")):
            raise ValueError("must be a sqlite:// or postgresql+psycopg:// URL")
        if value.startswith("postgresql://") or value.startswith("postgres://"):
            raise ValueError("name the driver: postgresql+psycopg://…")
        return value

    @field_validator("admin_password")
    @classmethod
    def _admin_password_length(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value() and len(value.get_secret_value()) < MIN_PASSWORD_LENGTH:
            raise ValueError(f"at least {MIN_PASSWORD_LENGTH} characters (or empty: generate one)")
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, value: str) -> str:
        if not value.startswith(("memory://", "redis://", "rediss://", "amqp://", "amqps://")):
            raise ValueError("must be memory://, redis://, rediss://, amqp:// or amqps://")
        return value

    @field_validator("datacenter_brokers")
    @classmethod
    def _datacenter_broker_schemes(cls, value: dict[str, str]) -> dict[str, str]:
        for datacenter, url in value.items():
            if not url.startswith(("redis://", "rediss://", "amqp://", "amqps://")):
                raise ValueError(f"{datacenter}: must be a redis://, rediss://, amqp:// or amqps:// URL, not {url!r}")
        return value

    @model_validator(mode="after")
    def _broker_tls_files(self) -> Settings:
        for name in ("broker_tls_ca_file", "broker_tls_cert_file", "broker_tls_key_file"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{ENV_PREFIX}{name.upper()}: no such file {str(path)!r}")
        if (self.broker_tls_cert_file is None) != (self.broker_tls_key_file is None):
            raise ValueError(f"{ENV_PREFIX}BROKER_TLS_CERT_FILE and {ENV_PREFIX}BROKER_TLS_KEY_FILE go together")
        return self

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
    def effective_metrics_dir(self) -> Path:
        return self.metrics_dir or self.data_dir / "metrics"

    def broker_for(self, datacenter: str | None) -> str:
        """The broker of a datacenter (DATACENTER_BROKERS), or BROKER_URL when it has none of its own."""
        if datacenter:
            return self.datacenter_brokers.get(datacenter, self.broker_url)
        return self.broker_url

    @property
    def broker_tls(self) -> dict[str, str]:
        """TLS files for the broker connection, as core.queue.create_celery takes them."""
        files = {
            "ca_certs": self.broker_tls_ca_file,
            "certfile": self.broker_tls_cert_file,
            "keyfile": self.broker_tls_key_file,
        }
        return {key: str(path) for key, path in files.items() if path is not None}

    @property
    def embedded(self) -> bool:
        return self.broker_url.startswith("memory://")


S = TypeVar("S", bound=Settings)


def known_names(model: type[Settings]) -> frozenset[str]:
    """The FLEETFIX_* names a settings class reads (with FLEETFIX_CONFIG): load_settings refuses any other."""
    return frozenset({f"{ENV_PREFIX}{name.upper()}" for name in model.model_fields} | {CONFIG_FILE_ENV})


def _types_in(annotation: object) -> Iterator[object]:
    yield annotation
    for arg in get_args(annotation):
        yield from _types_in(arg)


def secret_names(model: type[BaseModel]) -> frozenset[str]:
    """Fields whose values an error message never repeats: the secret key, and every field of the settings or of
    the models they hold (an alert route's webhook) that is a SecretStr."""
    names = {"secret_key"}
    for name, field in model.model_fields.items():
        for kind in _types_in(field.annotation):
            if kind is SecretStr:
                names.add(name)
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                names |= secret_names(kind)
    return frozenset(names)


def _redacted(value: object, secrets: frozenset[str], secret: bool = False) -> object:
    if secret:
        return "**********"
    if isinstance(value, dict):
        return {key: _redacted(item, secrets, key in secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item, secrets) for item in value]
    return value


def _describe(error: ValidationError, secrets: frozenset[str]) -> str:
    lines = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        name = f"{ENV_PREFIX}{field.upper()}" if field else "settings"
        name += "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"][1:])
        shown = _redacted(item.get("input"), secrets, any(part in secrets for part in item["loc"]))
        lines.append(f"{name}: {item['msg']} (got {shown!r})")
    return "; ".join(lines)


def load_settings(model: type[S], /, **overrides: object) -> S:
    """Build `model` (the shared section alone, or a root's sections in one class) from the environment and
    FLEETFIX_CONFIG, or raise SettingsError. A FLEETFIX_* name that none of its sections declares is refused."""
    config_file = os.environ.get(CONFIG_FILE_ENV)
    if config_file and not Path(config_file).is_file():
        raise SettingsError(f"{CONFIG_FILE_ENV}: no such file {config_file!r}")
    known = known_names(model)
    unknown = sorted(
        key
        for key in os.environ
        if key.startswith(ENV_PREFIX) and key not in known and not key.startswith(OTHER_PREFIXES)
    )
    if unknown:
        raise SettingsError(f"{unknown[0]}: unknown setting (known: {', '.join(sorted(known))})")
    try:
        return model(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(_describe(error, secret_names(model))) from error
    except ValueError as error:  # a malformed TOML file
        raise SettingsError(f"{CONFIG_FILE_ENV} {config_file!r}: {error}") from error
