"""Which channel an alert goes to: the settings' routes by datacenter, severity and kind."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from pydantic import SecretStr

from core.vocabulary import AlertKind, AlertSeverity
from ticketing.settings import TicketingSettings

DEFAULT_WEBHOOK_CHANNEL = "default"


@dataclass(frozen=True)
class Destination:
    channel: str
    webhook_url: SecretStr | None = None
    """Webhook mode only; SecretStr, so a repr or a log line shows asterisks."""


def default_channel(settings: TicketingSettings) -> str:
    return settings.slack_channel or DEFAULT_WEBHOOK_CHANNEL


def route(settings: TicketingSettings, kind: AlertKind, severity: AlertSeverity, datacenter: str) -> str:
    """The channel of the first route that takes this alert, else the default channel.

    An alert about no datacenter (a rule's breaker) is taken only by routes whose
    datacenter patterns match the empty name, such as `*`."""
    for candidate in settings.alerts_routes:
        if (
            kind in candidate.kinds
            and severity in candidate.severities
            and any(fnmatchcase(datacenter, pattern) for pattern in candidate.datacenters)
        ):
            return candidate.channel
    return default_channel(settings)


def destination(settings: TicketingSettings, channel: str) -> Destination:
    """How to reach a channel now (settings may have changed since the message was grouped)."""
    if settings.alerts_mode == "webhook":
        for candidate in settings.alerts_routes:
            if candidate.channel == channel and candidate.webhook_url is not None:
                return Destination(channel, candidate.webhook_url)
        return Destination(channel, settings.slack_webhook_url)
    return Destination(channel)
