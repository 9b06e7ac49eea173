"""Alerts are written with the change they report, and grouped into one message per channel.

In-process on PostgreSQL and SQLite (rolled back after each test); messages go
to the local Slack receiver over HTTP.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from api.settings import CentralSettings
from core import audit
from core.db import Database, utcnow
from core.vocabulary import AlertKind, AlertSeverity
from remediator import ingest, planning, runner
from remediator.models import Host, Remediation
from remediator.rules import load_ruleset
from remediator.tasks import mark_unreachable
from tests.builders.reports import storm_reports
from tests.ticketing.notify.conftest import PUBLIC_URL, SteppingClock, flush_and_deliver, webhook_settings
from ticketing import service as tickets
from ticketing.notify import messages, routing, service
from ticketing.notify.models import AlertDelivery, AlertOutbox, DeliveryState
from ticketing.notify.receiver import SlackReceiver
from ticketing.notify.slack import sender_for
from ticketing.schemas import TicketRequest
from ticketing.settings import AlertRoute

RULES = load_ruleset([])
Enable = Callable[[CentralSettings], CentralSettings]


def outbox(session: Session) -> list[AlertOutbox]:
    return list(session.scalars(select(AlertOutbox).order_by(AlertOutbox.id)))


def ticket_request(hostname: str = "web-7", priority: int = 2) -> TicketRequest:
    return TicketRequest(
        hostname=hostname, datacenter="ams1", part_type="dimm", part="A1", title="DIMM A1 failing", priority=priority
    )


def test_an_alert_is_written_with_its_change_and_rolled_back_with_it(
    session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    alerts_on(webhook_settings(receiver))
    savepoint = session.begin_nested()
    tickets.open_ticket(session, ticket_request("gone-1"), actor="test")
    savepoint.rollback()
    assert outbox(session) == []

    ticket, created = tickets.open_ticket(session, ticket_request("kept-1"), actor="test")
    session.commit()
    assert created
    [row] = outbox(session)
    assert (row.kind, row.object_type, row.object_id, row.delivery_id) == (
        AlertKind.ticket_opened,
        "ticket",
        str(ticket.id),
        None,
    )


def test_with_alerts_off_nothing_is_written(session: Session) -> None:
    tickets.open_ticket(session, ticket_request(), actor="test")
    session.flush()
    assert outbox(session) == []


def test_every_alerting_change_reaches_slack_with_a_link_to_its_page(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    session.add_all([Host(hostname="web-1", datacenter="fra1"), Host(hostname="web-2", datacenter="fra1")])
    # a CE storm: the remediation hands the host to a technician (escalated) with a ticket
    [escalated_id] = ingest.ingest(session, storm_reports("web-1"), ruleset=RULES).remediations
    session.commit()
    runner.advance(session, escalated_id, ruleset=RULES)  # the drain
    runner.advance(session, escalated_id, ruleset=RULES)  # the ticket
    # a remediation that failed (its next rung starts)
    [failing_id] = ingest.ingest(session, storm_reports("web-2"), ruleset=RULES).remediations
    planning.escalate(session, session.get_one(Remediation, failing_id), "step 0 (reboot) failed", RULES, utcnow())
    # a rule's breaker opened, an approval waiting, a host gone silent
    planning.open_breaker(session, "dimm-ce-storm", "3 failures in 1h", utcnow())
    audit.record(
        session,
        actor="system:remediator",
        action="remediator.remediation.awaiting_approval",
        object_type="remediation",
        object_id=failing_id,
        reason="the plan includes a destructive action",
    )
    silent = Host(hostname="web-3", datacenter="fra1", last_report_at=utcnow() - dt.timedelta(hours=1))
    session.add(silent)
    session.commit()
    assert mark_unreachable() >= 1
    session.expire_all()

    kinds = {row.kind for row in outbox(session)}
    assert kinds == set(AlertKind)
    outcomes = flush_and_deliver(db, settings)
    assert {o.state for o in outcomes} == {"sent"}
    # every alert of the window goes to #fleet (fra1, or no datacenter): one message, a part per kind
    [message] = receiver.messages()
    assert message.channel == "#fleet"
    blocks = message.body["blocks"]
    assert blocks[0]["text"]["text"] == "6 alerts in fra1"
    assert message.body["text"] == (
        "6 alerts in fra1: repair ticket opened, remediation failed, remediation handed to a technician, "
        "rule paused by its breaker, remediation waiting for approval, host unreachable (critical)"
    )  # critical: the priority 2 dimm ticket, and the paused rule
    parts = {
        block["text"]["text"].split("\n")[0]: block["text"]["text"] for block in blocks if block["type"] == "section"
    }
    ticket_id = session.scalars(
        select(func.min(AlertOutbox.object_id)).where(AlertOutbox.object_type == "ticket")
    ).one()
    expected_links = {
        "*Repair ticket opened*": f"{PUBLIC_URL}/tickets/{ticket_id}",
        "*Remediation handed to a technician*": f"{PUBLIC_URL}/hosts/web-1#remediation-{escalated_id}",
        "*Remediation failed*": f"{PUBLIC_URL}/hosts/web-2#remediation-{failing_id}",
        "*Rule paused by its breaker*": f"{PUBLIC_URL}/rules#rule-dimm-ce-storm",
        "*Remediation waiting for approval*": f"{PUBLIC_URL}/approvals#approval-{failing_id}",
        "*Host unreachable*": f"{PUBLIC_URL}/hosts/web-3",
    }
    assert set(parts) == set(expected_links)
    assert next(iter(parts)) == "*Repair ticket opened*"  # the most urgent kind leads (the first critical one)
    for part, link in expected_links.items():
        assert f"<{link}|" in parts[part], parts[part]
    assert all(block["type"] != "actions" for block in blocks)  # no single button for many alerts


def test_a_single_alert_is_a_message_with_a_button_to_its_page(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    ticket, _ = tickets.open_ticket(session, ticket_request("web-9", priority=4), actor="test")
    session.commit()
    assert [o.state for o in flush_and_deliver(db, settings)] == ["sent"]
    [message] = receiver.messages()
    blocks = message.body["blocks"]
    assert blocks[0]["text"]["text"] == "Repair ticket opened in ams1"
    assert message.body["text"] == "Repair ticket opened in ams1 (info)"
    link = f"{PUBLIC_URL}/tickets/{ticket.id}"
    assert f"<{link}|" in blocks[1]["text"]["text"]
    assert blocks[-1]["elements"][0]["url"] == link


def test_a_burst_of_500_unreachable_hosts_is_one_message_per_channel(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    long_ago = utcnow() - dt.timedelta(hours=1)
    for i in range(500):
        datacenter = ("ams1", "ams2", "fra1")[i % 5 % 3]
        session.add(Host(hostname=f"node-{i:03d}", datacenter=datacenter, last_report_at=long_ago))
    session.commit()
    assert mark_unreachable() == 500

    outcomes = flush_and_deliver(db, settings)
    unreachable = [m for m in receiver.messages() if "unreachable" in m.body["text"]]
    assert len(unreachable) == 2, [m.body["text"] for m in receiver.messages()]
    ams = session.scalars(select(func.count()).select_from(Host).where(Host.datacenter.like("ams%"))).one()
    by_channel = {m.channel: m.body for m in unreachable}
    assert by_channel["#ams-oncall"]["blocks"][0]["text"]["text"] == f"{ams} hosts unreachable in 2 datacenters"
    assert by_channel["#fleet"]["blocks"][0]["text"]["text"] == f"{500 - ams} hosts unreachable in fra1"
    section = by_channel["#ams-oncall"]["blocks"][1]["text"]["text"]
    assert section.count("• <") == 5
    assert f"…and {ams - 5} more" in section
    assert "By datacenter: ams1: " in section
    assert next(m.path for m in unreachable if m.channel == "#ams-oncall").endswith("notforlogs")  # its own webhook
    assert "sent" in {o.state for o in outcomes}
    assert session.scalar(select(func.count()).select_from(AlertOutbox).where(AlertOutbox.delivery_id.is_(None))) == 0


def test_alerts_during_an_outage_join_the_waiting_message(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))

    def silent(first: int, count: int) -> None:
        for i in range(first, first + count):
            audit.record(
                session, actor="t", action="remediator.host.unreachable", object_type="host", object_id=f"h{i}"
            )
        session.commit()

    clock = SteppingClock()
    silent(0, 10)
    receiver.stop()  # Slack unreachable
    [outcome] = flush_and_deliver(db, settings, clock)
    assert outcome.state == "retry"
    delivery = session.scalars(select(AlertDelivery)).one()
    assert delivery.last_error == "Slack unreachable: Connection refused"

    silent(10, 15)
    with db.session() as flushing:
        result = service.flush(flushing, settings, clock())
    assert result.to_send == []  # no new message: the 15 joined the waiting one
    receiver.start()
    clock.now = delivery.next_attempt_at
    sender, redactor = sender_for(settings)
    assert service.deliver(db, delivery.id, settings, sender, redactor, clock=clock).state == "sent"
    [message] = receiver.messages()
    assert message.body["blocks"][0]["text"]["text"] == "25 hosts unreachable"
    session.expire_all()
    assert (delivery.count, delivery.attempts, delivery.state) == (25, 2, DeliveryState.sent)


def test_a_message_being_sent_takes_no_more_alerts(
    session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    settings = alerts_on(webhook_settings(receiver))
    now = utcnow()
    audit.record(session, actor="t", action="remediator.host.unreachable", object_type="host", object_id="a")
    first = service.flush(session, settings, now).to_send
    session.execute(update(AlertDelivery).values(claimed_until=now + dt.timedelta(seconds=30)))
    audit.record(session, actor="t", action="remediator.host.unreachable", object_type="host", object_id="b")
    second = service.flush(session, settings, now).to_send
    assert len(first) == len(second) == 1
    assert first != second
    counts = session.scalars(select(AlertDelivery.count).order_by(AlertDelivery.id)).all()
    assert counts == [1, 1]


def test_routes_by_datacenter_severity_and_kind(receiver: SlackReceiver) -> None:
    settings = webhook_settings(
        receiver,
        alerts_routes=[
            AlertRoute(channel="#ams-crit", datacenters=["ams*"], severities=["critical"]),
            AlertRoute(channel="#automation", kinds=["rule_paused", "approval_waiting"]),
            AlertRoute(channel="#dc-ops", datacenters=["fra1", "ams*"]),
        ],
    )
    route = routing.route
    assert route(settings, AlertKind.ticket_opened, AlertSeverity.critical, "ams2") == "#ams-crit"
    assert route(settings, AlertKind.ticket_opened, AlertSeverity.warning, "ams2") == "#dc-ops"
    assert route(settings, AlertKind.rule_paused, AlertSeverity.critical, "") == "#automation"
    assert route(settings, AlertKind.host_unreachable, AlertSeverity.warning, "fra1") == "#dc-ops"
    assert route(settings, AlertKind.host_unreachable, AlertSeverity.warning, "sjc1") == "#fleet"  # the default
    assert route(settings, AlertKind.host_unreachable, AlertSeverity.warning, "") == "#fleet"


def test_every_alert_kind_comes_from_an_audit_action_and_a_route_takes_all_by_default() -> None:
    """The kinds and severities are core.vocabulary's, for the settings and the outbox alike."""
    from ticketing.notify.events import ACTIONS

    assert set(ACTIONS.values()) == set(AlertKind)
    everything = AlertRoute(channel="#all")
    assert (everything.kinds, everything.severities) == (list(AlertKind), list(AlertSeverity))
    assert AlertRoute(channel="#crit", kinds=["rule_paused"], severities=["critical"]).kinds == [AlertKind.rule_paused]


def test_a_waiting_message_made_before_messages_held_several_kinds_keeps_its_count(
    session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    """A message still pending from before the upgrade has no per-kind counts: its alerts are all its kind."""
    settings = alerts_on(webhook_settings(receiver))
    now = utcnow()
    old = AlertDelivery(
        channel="#fleet",
        kind=AlertKind.host_unreachable,
        severity=AlertSeverity.warning,
        count=3,
        digest={
            "examples": [{"object_type": "host", "object_id": "h1", "hostname": "h1", "datacenter": "", "summary": ""}],
            "datacenters": {"": 3},
        },
        first_at=now,
        last_at=now,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(old)
    session.flush()
    tickets.open_ticket(session, ticket_request("web-8", priority=4), actor="test")
    assert service.flush(session, settings, now).to_send == []  # joined the waiting message
    assert old.digest["kinds"] == {"host_unreachable": 3, "ticket_opened": 1}
    body = messages.build(old, PUBLIC_URL)
    assert body["blocks"][0]["text"]["text"] == "4 alerts in ams1"
    parts = [block["text"]["text"] for block in body["blocks"] if block["type"] == "section"]
    assert parts[0].startswith("*3 hosts unreachable*\n• <" + PUBLIC_URL + "/hosts/h1|h1>")
    assert parts[1].startswith("*Repair ticket opened*")
