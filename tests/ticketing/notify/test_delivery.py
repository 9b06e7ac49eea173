"""Sending messages through slack_sdk to the local receiver: both modes, Block Kit payloads,
Slack's errors (429 with Retry-After, 5xx, connection refused, refusals), pace, and secrets kept out
of logs, errors and the API."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.app import create_app
from api.settings import CentralSettings, load_central_settings
from core import audit
from core.db import Database, utcnow
from core.models import Role
from core.settings import SettingsError
from tests.builders.people import bearer
from tests.builders.runtime import rewire
from tests.ticketing.notify.conftest import (
    AMS_WEBHOOK_SECRET,
    BOT_TOKEN,
    PUBLIC_URL,
    WEBHOOK_SECRET,
    SteppingClock,
    bot_settings,
    flush_and_deliver,
    webhook_settings,
)
from ticketing import service as tickets
from ticketing.notify import service
from ticketing.notify.models import AlertDelivery, DeliveryState
from ticketing.notify.receiver import SlackReceiver
from ticketing.notify.slack import sender_for
from ticketing.schemas import TicketRequest

Enable = Callable[[CentralSettings], CentralSettings]
PARTS = itertools.count()


def open_ticket(session: Session, datacenter: str = "ams1", priority: int = 1, hostname: str = "db-4") -> int:
    """A new ticket (a new part each time: a second detection of the same part opens none)."""
    request = TicketRequest(
        hostname=hostname,
        datacenter=datacenter,
        part_type="disk",
        part=f"S3Z9NX0K-{next(PARTS)}",
        title="Disk S3Z9NX0K <reallocated sectors> & pending",
        priority=priority,
    )
    ticket, _ = tickets.open_ticket(session, request, actor="test")
    session.commit()
    return ticket.id


def two_messages(db: Database, session: Session, settings: CentralSettings, now: dt.datetime) -> tuple[int, int]:
    """Two messages for #fleet: an alert flushed while the channel's first message is being sent
    cannot join it, so it starts the second."""
    open_ticket(session, datacenter="sjc1")
    with db.session() as flushing:
        [first] = service.flush(flushing, settings, now).to_send
        flushing.execute(update(AlertDelivery).values(claimed_until=now + service.CLAIM))
        flushing.commit()
    audit.record(session, actor="t", action="remediator.host.unreachable", object_type="host", object_id="sjc-9")
    session.commit()
    with db.session() as flushing:
        [second] = service.flush(flushing, settings, now).to_send
        flushing.execute(update(AlertDelivery).values(claimed_until=None))
        flushing.commit()
    return first, second


def delivery(session: Session) -> AlertDelivery:
    """The newest message."""
    session.expire_all()
    return session.scalars(select(AlertDelivery).order_by(AlertDelivery.id.desc()).limit(1)).one()


def test_webhook_message_is_block_kit_with_a_link_to_the_page(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    ticket_id = open_ticket(session)
    assert [o.state for o in flush_and_deliver(db, settings)] == ["sent"]
    [message] = receiver.messages()
    assert message.channel == "#ams-oncall"
    assert message.path.endswith(AMS_WEBHOOK_SECRET)  # the route's own webhook
    link = f"{PUBLIC_URL}/tickets/{ticket_id}"
    assert message.body["text"] == "Repair ticket opened in ams1 (critical)"
    header, section, context, actions = message.body["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": "Repair ticket opened in ams1"}}
    assert section["text"] == {
        "type": "mrkdwn",
        "text": f"• <{link}|ticket {ticket_id} (db-4)> · ams1 — "
        "Disk S3Z9NX0K &lt;reallocated sectors&gt; &amp; pending",
    }
    assert context["elements"][0]["text"].startswith(":red_circle: critical · ")
    assert actions["elements"][0]["url"] == link
    assert "channel" not in message.body  # a webhook fixes its channel


def test_bot_mode_posts_to_the_routed_channel_with_the_token(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(bot_settings(receiver))
    open_ticket(session, datacenter="ams3", priority=1)
    open_ticket(session, datacenter="ams3", priority=4, hostname="db-5")  # info: not the on-call's
    assert sorted(o.state for o in flush_and_deliver(db, settings)) == ["sent", "sent"]
    by_channel = {m.channel: m for m in receiver.messages()}
    assert set(by_channel) == {"#ams-oncall", "#fleet"}
    oncall = by_channel["#ams-oncall"]
    assert oncall.path == "/api/chat.postMessage"
    assert oncall.headers["authorization"] == f"Bearer {BOT_TOKEN}"
    assert oncall.body["channel"] == "#ams-oncall"
    assert oncall.body["blocks"][0]["text"]["text"] == "Repair ticket opened in ams3"
    assert by_channel["#fleet"].body["text"] == "Repair ticket opened in ams3 (info)"


def test_a_rate_limit_is_waited_out_for_as_long_as_slack_asks(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    clock = SteppingClock(dt.timedelta(0))
    for settings in (webhook_settings(receiver), bot_settings(receiver)):
        alerts_on(settings)
        receiver.received.clear()
        open_ticket(session)
        receiver.fail_next(1, 429, "rate_limited", retry_after=7)
        clock.now += dt.timedelta(seconds=2)
        [outcome] = flush_and_deliver(db, settings, clock)
        assert outcome == service.Outcome("retry", 7.0)
        assert delivery(session).next_attempt_at == clock.now + dt.timedelta(seconds=7)
        sender, redactor = sender_for(settings)
        clock.now += dt.timedelta(seconds=3)  # too early: wait the rest, send nothing
        assert service.deliver(db, delivery(session).id, settings, sender, redactor, clock=clock).retry_in == 4.0
        clock.now += dt.timedelta(seconds=4)
        assert service.deliver(db, delivery(session).id, settings, sender, redactor, clock=clock).state == "sent"
        assert [r.status for r in receiver.received] == [429, 200]
        session.execute(update(AlertDelivery).values(state=DeliveryState.sent))  # done with it
        session.commit()


def test_server_errors_and_an_unreachable_slack_back_off_then_deliver(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    open_ticket(session)
    receiver.fail_next(1, 503, "service_unavailable")
    clock = SteppingClock(dt.timedelta(0))
    [outcome] = flush_and_deliver(db, settings, clock)
    assert outcome.state == "retry"
    assert 1.0 <= (outcome.retry_in or 0) <= 2.0
    assert delivery(session).last_error == "service_unavailable (HTTP 503)"
    receiver.stop()
    sender, redactor = sender_for(settings)
    clock.now = delivery(session).next_attempt_at
    outcome = service.deliver(db, delivery(session).id, settings, sender, redactor, clock=clock)
    assert outcome.state == "retry"
    assert 1.0 <= (outcome.retry_in or 0) <= 4.0
    assert delivery(session).last_error == "Slack unreachable: Connection refused"
    receiver.start()
    clock.now = delivery(session).next_attempt_at
    assert service.deliver(db, delivery(session).id, settings, sender, redactor, clock=clock).state == "sent"
    assert (delivery(session).attempts, delivery(session).last_error) == (3, "")
    assert len(receiver.messages()) == 1


def test_a_refusal_no_retry_can_fix_fails_the_message(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable, caplog: pytest.LogCaptureFixture
) -> None:
    settings = alerts_on(webhook_settings(receiver, slack_webhook_url=f"{receiver.url}/services/T0/B0/revoked"))
    open_ticket(session, datacenter="sjc1")
    assert [o.state for o in flush_and_deliver(db, settings)] == ["failed"]
    assert (delivery(session).state, delivery(session).last_error) == (DeliveryState.failed, "no_service (HTTP 404)")
    [record] = [r for r in caplog.records if r.getMessage() == "ticketing.notify.failed"]
    assert record.levelno == logging.ERROR
    assert record.fields["channel"] == "#fleet"  # type: ignore[attr-defined]


def test_a_message_is_sent_once_and_a_channel_gets_one_message_a_second(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    now = utcnow()
    first, second = two_messages(db, session, settings, now)
    sender, redactor = sender_for(settings)
    assert service.deliver(db, first, settings, sender, redactor, clock=lambda: now).state == "sent"
    assert service.deliver(db, first, settings, sender, redactor, clock=lambda: now).state == "done"  # a duplicate
    paced = service.deliver(db, second, settings, sender, redactor, clock=lambda: now + dt.timedelta(seconds=0.25))
    assert paced == service.Outcome("retry", 0.75)
    later = now + dt.timedelta(seconds=1)
    assert service.deliver(db, second, settings, sender, redactor, clock=lambda: later).state == "sent"
    assert len(receiver.messages("#fleet")) == 2


def test_a_channel_keeps_its_pace_while_another_worker_is_sending_to_it(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    """A second worker's message for the channel waits while the first is on its way (claimed, not yet sent):
    the storm bench saw two messages reach #fleet 1 ms apart from two notify workers."""
    settings = alerts_on(webhook_settings(receiver))
    now = utcnow()
    first, second = two_messages(db, session, settings, now)
    sender, redactor = sender_for(settings)
    meanwhile: list[service.Outcome] = []

    class Concurrent:
        def send(self, destination: object, message: object) -> None:  # the other worker, mid-send
            meanwhile.append(service.deliver(db, second, settings, sender, redactor, clock=lambda: now))
            sender.send(destination, message)  # type: ignore[arg-type]

    assert service.deliver(db, first, settings, Concurrent(), redactor, clock=lambda: now).state == "sent"  # type: ignore[arg-type]
    assert [o.state for o in meanwhile] == ["retry"]
    assert len(receiver.messages("#fleet")) == 1


SECRETS = (WEBHOOK_SECRET, AMS_WEBHOOK_SECRET, BOT_TOKEN)


def test_the_webhook_and_the_token_never_reach_logs_or_errors(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = SteppingClock(dt.timedelta(minutes=10))  # every message is due, and overdue at the next flush
    for settings in (webhook_settings(receiver), bot_settings(receiver)):
        alerts_on(settings)
        for failure in ((429, "rate_limited"), (500, "internal_error"), (403, "invalid_token")):
            open_ticket(session)
            receiver.fail_next(1, *failure, retry_after=1)
            flush_and_deliver(db, settings, clock)
            session.execute(update(AlertDelivery).values(state=DeliveryState.failed))  # done with it
            session.commit()
        open_ticket(session)
        receiver.stop()
        assert [o.state for o in flush_and_deliver(db, settings, clock)] == ["retry"]
        receiver.start()
        sender, redactor = sender_for(settings)
        logging.getLogger("ticketing.notify.slack_sdk").setLevel(logging.DEBUG)  # someone turns it up
        assert service.deliver(db, delivery(session).id, settings, sender, redactor, clock=clock).state == "sent"
    assert [r.status for r in receiver.received] == [429, 500, 403, 200, 429, 500, 403, 200]
    assert len(receiver.messages()) == 2
    text = caplog.text + " ".join(session.scalars(select(AlertDelivery.last_error)))
    assert "Sending a request" in text  # slack_sdk's debug line, with the URL masked
    for secret in SECRETS:
        assert secret not in text


def test_settings_errors_and_the_api_never_show_them(
    db: Database, receiver: SlackReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = webhook_settings(receiver)
    shown = repr(settings) + settings.model_dump_json() + str(settings.model_dump())
    monkeypatch.setenv("FLEETFIX_ALERTS_MODE", "webhook")
    monkeypatch.setenv("FLEETFIX_SLACK_WEBHOOK_URL", f"ftp://{WEBHOOK_SECRET}")
    with pytest.raises(SettingsError, match="FLEETFIX_SLACK_WEBHOOK_URL must be an https:// or http:// URL") as bad:
        load_central_settings()
    shown += str(bad.value)
    monkeypatch.setenv("FLEETFIX_SLACK_WEBHOOK_URL", f"https://{WEBHOOK_SECRET}")
    monkeypatch.setenv("FLEETFIX_ALERTS_ROUTES", f'[{{"channel": "", "webhook_url": "{AMS_WEBHOOK_SECRET}"}}]')
    with pytest.raises(SettingsError, match=r"FLEETFIX_ALERTS_ROUTES\[0\]\.channel") as bad:
        load_central_settings()
    shown += str(bad.value)
    monkeypatch.setenv("FLEETFIX_ALERTS_MODE", "bot")
    monkeypatch.delenv("FLEETFIX_ALERTS_ROUTES")
    monkeypatch.setenv("FLEETFIX_SLACK_BOT_TOKEN", BOT_TOKEN)
    with pytest.raises(SettingsError, match="FLEETFIX_SLACK_BOT_TOKEN and FLEETFIX_SLACK_CHANNEL are required") as bad:
        load_central_settings()
    shown += str(bad.value)

    app = create_app(rewire(db, settings=settings))
    with TestClient(app, headers=bearer(db, Role.admin), raise_server_exceptions=False) as client:
        schema = client.get("/openapi.json").json()["paths"]
        paths = {path for path, operations in schema.items() if "get" in operations and "{" not in path}
        assert {"/api/v1/hosts", "/api/v1/tickets"} <= paths
        for path in sorted(paths | {"/healthz", "/readyz", "/metrics", "/"}):
            shown += client.get(path).text
    assert "**********" in shown
    for secret in SECRETS:
        assert secret not in shown
