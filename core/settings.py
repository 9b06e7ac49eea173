"""One file for now: every FLEETFIX_* variable is a field of the one Settings class; splitting it by
stage is a change of its own.

Service settings: FLEETFIX_* environment variables over an optional TOML file.

The defaults are the embedded mode (SQLite in the data directory, an in-process
broker, the UI on 127.0.0.1:8000); pointing the two URLs at PostgreSQL and Redis
is the production mode with no code change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from core.vocabulary import (
    MIN_PASSWORD_LENGTH,
    REPORT_INTERVAL_MAX_S,
    REPORT_INTERVAL_MIN_S,
    AlertKind,
    AlertSeverity,
)

ENV_PREFIX = "FLEETFIX_"
CONFIG_FILE_ENV = "FLEETFIX_CONFIG"
OTHER_PREFIXES = (f"{ENV_PREFIX}TEST_", f"{ENV_PREFIX}AGENT_")
"""Variables read elsewhere: the test harness's, and the host agent's own settings."""
PLACEHOLDER_SECRET = "change-me-in-production"  # noqa: S105 - the value production refuses


class SettingsError(Exception):
    """A setting has a bad value; the message names the variable."""


class AlertRoute(BaseModel):
    """Where Slack alerts of some datacenters, severities and kinds go (docs/alerts.md); the first match wins."""

    model_config = ConfigDict(extra="forbid")

    channel: str = Field(
        min_length=1,
        max_length=80,
        description="Bot mode: the channel posted to. Webhook mode: its name in logs (the webhook fixes the channel).",
    )
    datacenters: list[str] = Field(default_factory=lambda: ["*"], description="Glob patterns (ams*); * matches all.")
    severities: list[AlertSeverity] = Field(default_factory=lambda: list(AlertSeverity))
    kinds: list[AlertKind] = Field(default_factory=lambda: list(AlertKind))
    webhook_url: SecretStr | None = Field(None, description="Webhook mode: this route's incoming webhook.")


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
        description="Signing secret (web sessions). Production needs 32+ random characters.",
    )
    report_interval_s: int = Field(
        60,
        ge=REPORT_INTERVAL_MIN_S,
        le=REPORT_INTERVAL_MAX_S,
        description="How often agents run the check cycle and report, in seconds.",
    )
    stale_after_intervals: int = Field(
        3, ge=2, le=100, description="A host with no report for this many intervals is unreachable."
    )
    require_signed_reports: bool | None = Field(
        None,
        description=(
            "Refuse reports (and cyborg's results, starts and refusals) from the broker that no host credential "
            "signed. Empty: on in production, off in development."
        ),
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
        description="Largest body of POST /api/v1/reports (an agent bounds a report at 1 MB; JSON escaping adds some).",
    )
    max_batch_body_bytes: int = Field(
        16_777_216,
        ge=65_536,
        le=4_294_967_296,
        description="Largest body of POST /api/v1/reports/batch: 16 reports at the agent's 1 MB bound, "
        "about 1,100 at a typical 14 KB.",
    )
    report_retention_days: int = Field(
        30,
        ge=1,
        le=3650,
        description="Raw reports and signals older than this many days are pruned (hourly, by the scheduler).",
    )
    rules_paths: list[Path] = Field(
        default_factory=list,
        description="Rule-pack YAML files or directories loaded after the built-in default pack.",
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
    alerts_mode: Literal["off", "webhook", "bot"] = Field(
        "off",
        description=(
            "Slack alerts: off, webhook (incoming webhooks: SLACK_WEBHOOK_URL and routes' own) or bot "
            "(chat.postMessage with SLACK_BOT_TOKEN)."
        ),
    )
    alerts_window_s: int = Field(
        30, ge=5, le=3600, description="Alerts of one kind for one channel within this window become one message."
    )
    alerts_routes: list[AlertRoute] = Field(
        default_factory=list,
        description=(
            'Routes by datacenter, severity and kind, JSON: [{"datacenters": ["ams*"], "severities": ["critical"], '
            '"channel": "#ams-oncall"}]; the first match wins, else SLACK_CHANNEL (docs/alerts.md).'
        ),
    )
    slack_webhook_url: SecretStr = Field(
        SecretStr(""),
        description="Webhook mode: the incoming webhook for alerts no route takes. Never logged or shown.",
    )
    slack_bot_token: SecretStr = Field(
        SecretStr(""), description="Bot mode: the bot token (xoxb-…). Never logged or shown."
    )
    slack_channel: str = Field(
        "", description="Where alerts no route takes go (bot mode: required; webhook mode: its name in logs)."
    )
    slack_api_url: str = Field(
        "https://slack.com/api/", description="Bot mode: the Slack Web API base URL (a proxy, or a local receiver)."
    )
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

    ticket_settle_s: int = Field(
        1800,
        ge=0,
        le=7 * 86400,
        description=(
            "After a technician resolves a ticket, the host must keep reporting this long without the fault "
            "before the ticket closes and the host goes back in service."
        ),
    )
    ticket_reopen_window_s: int = Field(
        30 * 86400,
        ge=0,
        le=365 * 86400,
        description="The same fault on the same host and part within this long after closing reopens the ticket.",
    )
    ticket_tracker: Literal["local", "jira"] = Field(
        "local", description="Where tickets are mirrored: local (fleetfix only) or jira (JIRA_* settings)."
    )
    jira_url: str = Field("", description="Jira base URL, e.g. https://example.atlassian.net (REST API v2).")
    jira_project: str = Field("", description="Jira project key the issues are created in, e.g. OPS.")
    jira_user: str = Field(
        "", description="Jira user (Cloud: the account e-mail, basic auth). Empty: the token is a bearer token."
    )
    jira_api_token: SecretStr = Field(
        SecretStr(""), description="Jira API token or personal access token. Never logged or shown by the API."
    )
    jira_issue_type: str = Field("Task", description="Issue type of the issues fleetfix creates.")
    jira_transitions: dict[str, str] = Field(
        default_factory=dict,
        description=(
            'Ticket state to the Jira transition (or target status) name, JSON: {"resolved": "Done"}. '
            "Unset states use Jira's default workflow names (docs/tickets.md)."
        ),
    )

    # -- cyborg: actions on hosts (docs/cyborg.md) --
    action_key_file: Path | None = Field(
        None,
        description=(
            "Ed25519 private key (PEM) that signs host action envelopes (`fleetfix keys generate`); agents hold "
            "its public key. Empty: DATA_DIR/action-signing-key.pem, created on first use in development."
        ),
    )
    action_expires_s: int = Field(
        300,
        ge=30,
        le=86400,
        description=(
            "An action envelope no host started within this many seconds is refused by the host (short: an "
            "aborted envelope whose revoke did not reach the host cannot start long after)."
        ),
    )
    bmc_address_template: str = Field(
        "",
        description=(
            "A host's BMC address for out-of-band power control (cold power cycle, reimage), e.g. "
            "{hostname}-ipmi.mgmt. A host's `bmc_address` label wins. Empty: only hosts with that label."
        ),
    )
    bmc_username: str = Field("", description="IPMI user on the BMCs.")
    bmc_password_file: Path | None = Field(
        None, description="File holding the BMC password; ipmitool reads it with -f (never on a command line)."
    )
    scheduler_hooks: dict[str, dict[str, str | list[str]]] = Field(
        default_factory=dict,
        description=(
            'Drain/undrain/restart_agent hooks by cluster (* for any), JSON: {"*": {"drain": '
            '["/usr/local/bin/sched", "drain", "{hostname}"], "undrain": "https://sched.example/undrain", '
            '"restart_agent": ["ssh", "{hostname}", "systemctl", "restart", "fleetfix-agent"]}}: an argv template, '
            "or a URL that is POSTed JSON. Unset: drain and undrain are recorded no-ops; an agent restart fails "
            "(and a ticket follows)."
        ),
    )

    @field_validator("scheduler_hooks")
    @classmethod
    def _hook_shapes(cls, value: dict[str, dict[str, str | list[str]]]) -> dict[str, dict[str, str | list[str]]]:
        for cluster, hooks in value.items():
            for name, hook in hooks.items():
                if name not in ("drain", "undrain", "restart_agent"):
                    raise ValueError(f"{cluster}: {name!r} is not a hook (drain, undrain, restart_agent)")
                if isinstance(hook, str) and not hook.startswith(("http://", "https://")):
                    raise ValueError(f"{cluster}.{name}: a string hook is an http(s) URL; a command is an argv list")
                if isinstance(hook, list) and not (hook and all(isinstance(part, str) and part for part in hook)):
                    raise ValueError(f"{cluster}.{name}: an argv list of non-empty strings")
        return value

    @property
    def effective_action_key_file(self) -> Path:
        return self.action_key_file or self.data_dir / "action-signing-key.pem"

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
    def _jira_settings(self) -> Settings:
        if self.ticket_tracker == "jira":
            for name in ("jira_url", "jira_project", "jira_api_token"):
                value = getattr(self, name)
                if not (value.get_secret_value() if isinstance(value, SecretStr) else value):
                    raise ValueError(f"{ENV_PREFIX}{name.upper()} is required when {ENV_PREFIX}TICKET_TRACKER=jira")
            if not self.jira_url.startswith(("http://", "https://")):
                raise ValueError(f"{ENV_PREFIX}JIRA_URL must be an http:// or https:// URL")
        return self

    @model_validator(mode="after")
    def _alert_destinations(self) -> Settings:
        if self.alerts_mode == "off":
            return self
        hooks = {
            f"ALERTS_ROUTES[{i}].webhook_url": (route.channel, route.webhook_url.get_secret_value())
            for i, route in enumerate(self.alerts_routes)
            if route.webhook_url is not None
        }
        if self.alerts_mode == "webhook":
            if not self.slack_webhook_url.get_secret_value():
                raise ValueError(f"{ENV_PREFIX}SLACK_WEBHOOK_URL is required when {ENV_PREFIX}ALERTS_MODE=webhook")
            urls = {name: url for name, (_, url) in hooks.items()}
            urls["SLACK_WEBHOOK_URL"] = self.slack_webhook_url.get_secret_value()
            for name, (channel, _url) in hooks.items():
                if len({u for c, u in hooks.values() if c == channel}) > 1:
                    raise ValueError(f"{ENV_PREFIX}{name}: channel {channel!r} has two different webhooks")
        else:
            if not (self.slack_bot_token.get_secret_value() and self.slack_channel):
                raise ValueError(
                    f"{ENV_PREFIX}SLACK_BOT_TOKEN and {ENV_PREFIX}SLACK_CHANNEL are required when "
                    f"{ENV_PREFIX}ALERTS_MODE=bot"
                )
            for name in hooks:
                raise ValueError(f"{ENV_PREFIX}{name}: bot mode posts with SLACK_BOT_TOKEN, not webhooks")
            urls = {"SLACK_API_URL": self.slack_api_url}
        schemes = ("https://",) if self.environment == "production" else ("https://", "http://")
        for name, url in urls.items():
            if not url.startswith(schemes):
                raise ValueError(f"{ENV_PREFIX}{name} must be an {' or '.join(schemes)} URL")
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
    def signed_reports_required(self) -> bool:
        if self.require_signed_reports is not None:
            return self.require_signed_reports
        return self.environment == "production"

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


SECRET_SETTINGS = frozenset(
    {"secret_key", "webhook_url", *(n for n, f in Settings.model_fields.items() if f.annotation is SecretStr)}
)
"""Values an error message never repeats (the settings and route fields that hold credentials)."""


def _redacted(value: object, secret: bool = False) -> object:
    if secret:
        return "**********"
    if isinstance(value, dict):
        return {key: _redacted(item, key in SECRET_SETTINGS) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        name = f"{ENV_PREFIX}{field.upper()}" if field else "settings"
        name += "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"][1:])
        shown = _redacted(item.get("input"), any(part in SECRET_SETTINGS for part in item["loc"]))
        lines.append(f"{name}: {item['msg']} (got {shown!r})")
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
