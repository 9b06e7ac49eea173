"""Sending a message to Slack through slack_sdk: an incoming webhook or a bot token.

Both clients are built with no retry handlers of their own (the deliver task
retries, with backoff, without holding a worker) and a short timeout, and log
through a logger that never formats their debug lines (slack_sdk puts the
webhook URL in them) and masks any secret that still reaches a message.
Error codes: https://api.slack.com/messaging/webhooks#handling_errors and
https://api.slack.com/methods/chat.postMessage#errors; rate limits (HTTP 429
with Retry-After): https://api.slack.com/apis/rate-limits.
"""

from __future__ import annotations

import http.client
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from urllib.error import URLError

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from ticketing.notify.routing import Destination
from ticketing.settings import TicketingSettings

SEND_TIMEOUT_S = 5
"""A Slack that does not answer holds a worker this long at most."""
DEFAULT_RETRY_AFTER_S = 30.0
RETRYABLE_API_ERRORS = frozenset(
    {"ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
_CODE = re.compile(r"^[a-z0-9_]{1,64}$")
MASK = "**********"


class DeliveryError(Exception):
    """Slack did not take the message. `reason` never holds a URL or a token."""

    def __init__(self, reason: str, *, retry_after: float | None = None, permanent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.permanent = permanent


class Sender(Protocol):
    def send(self, destination: Destination, message: dict[str, Any]) -> None:
        """Post one message, or raise DeliveryError."""


class Redactor(logging.Filter):
    """Masks known secrets in a record's text (the last guard; the clients are kept from logging them)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.mask(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def secrets_of(settings: TicketingSettings) -> list[str]:
    values = [settings.slack_webhook_url.get_secret_value(), settings.slack_bot_token.get_secret_value()]
    values += [r.webhook_url.get_secret_value() for r in settings.alerts_routes if r.webhook_url is not None]
    return [v for v in values if v]


def sdk_logger(redactor: Redactor) -> logging.Logger:
    """slack_sdk's logger: WARNING and up only, secrets masked."""
    logger = logging.getLogger("ticketing.notify.slack_sdk")
    logger.setLevel(logging.WARNING)  # slack_sdk builds its URL-bearing debug lines only below INFO
    for old in [f for f in logger.filters if isinstance(f, Redactor)]:
        logger.removeFilter(old)
    logger.addFilter(redactor)
    return logger


def _code(text: str | None) -> str:
    text = (text or "").strip()
    return text if _CODE.match(text) else ""


def _retry_after(headers: Mapping[str, Any] | None) -> float:
    for key, value in (headers or {}).items():
        if key.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) else value
            try:
                return max(1.0, float(raw))
            except (TypeError, ValueError):
                break
    return DEFAULT_RETRY_AFTER_S


def refusal(status: int, code: str, headers: Mapping[str, Any] | None) -> DeliveryError:
    """What an error response means: 429 and 5xx (and Slack's transient codes) are worth retrying."""
    reason = f"{code} (HTTP {status})" if code else f"HTTP {status}"
    if status == 429 or code in ("ratelimited", "rate_limited"):
        return DeliveryError(reason, retry_after=_retry_after(headers))
    if status >= 500 or code in RETRYABLE_API_ERRORS:
        return DeliveryError(reason)
    return DeliveryError(reason, permanent=True)


def unreachable(error: Exception) -> DeliveryError:
    cause = error.reason if isinstance(error, URLError) else error
    detail = getattr(cause, "strerror", None) or type(cause).__name__
    return DeliveryError(f"Slack unreachable: {detail}")


CONNECTION_ERRORS = (URLError, OSError, http.client.HTTPException)


class WebhookSender:
    """Incoming webhooks: one URL per channel; a 200 with body `ok` is success."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def send(self, destination: Destination, message: dict[str, Any]) -> None:
        if destination.webhook_url is None or not destination.webhook_url.get_secret_value():
            raise DeliveryError(f"no webhook for channel {destination.channel}", permanent=True)
        client = WebhookClient(
            url=destination.webhook_url.get_secret_value(),
            timeout=SEND_TIMEOUT_S,
            logger=self.logger,
            retry_handlers=[],
        )
        try:
            response = client.send_dict(message)
        except CONNECTION_ERRORS as error:
            raise unreachable(error) from None
        if response.status_code != 200:
            raise refusal(response.status_code, _code(response.body), response.headers)


class BotSender:
    """chat.postMessage with a bot token, to the channel the route names."""

    def __init__(self, settings: TicketingSettings, logger: logging.Logger) -> None:
        self.client = WebClient(
            token=settings.slack_bot_token.get_secret_value(),
            base_url=settings.slack_api_url,
            timeout=SEND_TIMEOUT_S,
            logger=logger,
            retry_handlers=[],
        )

    def send(self, destination: Destination, message: dict[str, Any]) -> None:
        try:
            self.client.chat_postMessage(
                channel=destination.channel, text=message["text"], blocks=message["blocks"], unfurl_links=False
            )
        except SlackApiError as error:
            response = error.response
            raise refusal(response.status_code, _code(str(response.get("error", ""))), response.headers) from None
        except CONNECTION_ERRORS as error:
            raise unreachable(error) from None


def sender_for(settings: TicketingSettings) -> tuple[Sender, Redactor]:
    redactor = Redactor(secrets_of(settings))
    logger = sdk_logger(redactor)
    if settings.alerts_mode == "bot":
        return BotSender(settings, logger), redactor
    return WebhookSender(logger), redactor
