"""Fixtures for the Slack alerts: a local Slack receiver, settings pointing at it, the outbox on."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.settings import CentralSettings
from core.db import Database, utcnow
from tests.builders.runtime import rewire
from ticketing.notify import service
from ticketing.notify.receiver import SlackReceiver
from ticketing.notify.slack import sender_for
from ticketing.settings import AlertRoute

PUBLIC_URL = "https://fleet.example.net"
WEBHOOK_SECRET = "whsec0FLEETFIXnotforlogs"
AMS_WEBHOOK_SECRET = "whsec1AMSnotforlogs"
BOT_TOKEN = "xoxb-1111-2222-notforlogs"


@pytest.fixture
def receiver() -> Iterator[SlackReceiver]:
    with SlackReceiver(token=BOT_TOKEN) as running:
        yield running


def webhook_settings(receiver: SlackReceiver, **overrides: Any) -> CentralSettings:
    """Webhook mode: critical and warning alerts of ams* datacenters to #ams-oncall (its own webhook),
    the rest to #fleet through the default webhook."""
    values: dict[str, Any] = {
        "alerts_mode": "webhook",
        "public_url": PUBLIC_URL,
        "slack_channel": "#fleet",
        "slack_webhook_url": receiver.add_webhook("#fleet", WEBHOOK_SECRET),
        "alerts_routes": [
            AlertRoute(
                channel="#ams-oncall",
                datacenters=["ams*"],
                severities=["warning", "critical"],
                webhook_url=receiver.add_webhook("#ams-oncall", AMS_WEBHOOK_SECRET),
            )
        ],
    }
    values.update(overrides)
    return CentralSettings(**values)


def bot_settings(receiver: SlackReceiver, **overrides: Any) -> CentralSettings:
    values: dict[str, Any] = {
        "alerts_mode": "bot",
        "public_url": PUBLIC_URL,
        "slack_channel": "#fleet",
        "slack_bot_token": BOT_TOKEN,
        "slack_api_url": receiver.api_url,
        "alerts_routes": [AlertRoute(channel="#ams-oncall", datacenters=["ams*"], severities=["critical"])],
    }
    values.update(overrides)
    return CentralSettings(**values)


@pytest.fixture
def alerts_on(request: pytest.FixtureRequest) -> Callable[[CentralSettings], CentralSettings]:
    """Turn the outbox on with these settings: the runtime of the test's database (if it has one) built again
    with them, as a process's root builds it; the runtime, and the outbox with it, ends with that database."""

    def enable(settings: CentralSettings) -> CentralSettings:
        if "db" in request.fixturenames:
            rewire(request.getfixturevalue("db"), settings=settings)
        return settings

    return enable


class SteppingClock:
    """Real time, moved on by `step` at every reading: back-to-back sends keep Slack's per-channel pace."""

    def __init__(self, step: dt.timedelta = dt.timedelta(seconds=2)) -> None:
        self.now = utcnow()
        self.step = step

    def __call__(self) -> dt.datetime:
        self.now += self.step
        return self.now


def flush_and_deliver(
    db: Database, settings: CentralSettings, clock: SteppingClock | None = None
) -> list[service.Outcome]:
    """One flush, then every message it made sent once, as the notify workers would."""
    clock = clock or SteppingClock()
    with db.session() as session:
        result = service.flush(session, settings, clock())
    sender, redactor = sender_for(settings)
    return [service.deliver(db, i, settings, sender, redactor, clock=clock) for i in result.to_send]
