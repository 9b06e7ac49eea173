"""A repair that did not hold is news: a reopened ticket alerts like a new one, saying why it reopened.

In-process on PostgreSQL and SQLite (rolled back after each test); the message goes to the local
Slack receiver over HTTP.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.settings import CentralSettings
from core.db import Database, utcnow
from core.vocabulary import AlertKind
from tests.ticketing.notify.conftest import PUBLIC_URL, flush_and_deliver, webhook_settings
from ticketing import service as tickets
from ticketing.notify.models import AlertOutbox
from ticketing.notify.receiver import SlackReceiver
from ticketing.schemas import Replacement, Resolution, TicketRequest

Enable = Callable[[CentralSettings], CentralSettings]


def test_a_reopened_ticket_alerts_with_the_reason(
    db: Database, session: Session, receiver: SlackReceiver, alerts_on: Enable
) -> None:
    now = utcnow()
    ticket, _ = tickets.open_ticket(
        session,
        TicketRequest(hostname="web-7", datacenter="fra1", part_type="dimm", part="A1", title="DIMM A1", priority=2),
        actor="system:remediator",
        now=now,
    )
    tickets.claim(session, ticket, actor="user:alice", now=now)
    resolution = Resolution(replacements=[Replacement(old_serial="S1", new_serial="S2")], note="swap")
    tickets.resolve(session, ticket, resolution, actor="user:alice", now=now)
    tickets.begin_verification(session, ticket, actor="system:remediator", settle=dt.timedelta(minutes=30), now=now)
    session.commit()
    settings = alerts_on(webhook_settings(receiver))  # on from here: only the reopening alerts

    reason = "fault returned while verifying the repair: dimm-ce-storm: dimm_ce_rate 50 on A1"
    tickets.reopen(session, ticket, actor="system:remediator", reason=reason, now=now + dt.timedelta(minutes=5))
    session.commit()
    [row] = session.scalars(select(AlertOutbox)).all()
    assert (row.kind, row.object_type, row.object_id, row.summary) == (
        AlertKind.ticket_opened,
        "ticket",
        str(ticket.id),
        reason,
    )
    assert {o.state for o in flush_and_deliver(db, settings)} == {"sent"}
    [message] = receiver.messages()
    assert message.body["blocks"][0]["text"]["text"] == "Repair ticket opened in fra1"
    section = message.body["blocks"][1]["text"]["text"]
    assert f"{PUBLIC_URL}/tickets/{ticket.id}" in section
    assert "fault returned while verifying the repair" in section
    assert "critical" in message.body["text"]  # priority 2, as when it was first opened
