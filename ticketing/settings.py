"""Ticketing's section of the settings: the external tracker (Jira) tickets are mirrored to, and the Slack
alerts (mode, grouping window, routes by datacenter, severity and kind, webhooks or the bot).

A subclass of the shared section (core.settings): the alerts' URL check reads `environment` (production takes
https:// only) and links use the shared PUBLIC_URL. The central root loads it with the other stages'
sections in one class (api/settings.py); the variables keep their FLEETFIX_ names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from core.settings import ENV_PREFIX, Settings
from core.vocabulary import AlertKind, AlertSeverity


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


class TicketingSettings(Settings):
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

    @model_validator(mode="after")
    def _ticketing_jira_settings(self) -> TicketingSettings:
        if self.ticket_tracker == "jira":
            for name in ("jira_url", "jira_project", "jira_api_token"):
                value = getattr(self, name)
                if not (value.get_secret_value() if isinstance(value, SecretStr) else value):
                    raise ValueError(f"{ENV_PREFIX}{name.upper()} is required when {ENV_PREFIX}TICKET_TRACKER=jira")
            if not self.jira_url.startswith(("http://", "https://")):
                raise ValueError(f"{ENV_PREFIX}JIRA_URL must be an http:// or https:// URL")
        return self

    @model_validator(mode="after")
    def _ticketing_alert_destinations(self) -> TicketingSettings:
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
