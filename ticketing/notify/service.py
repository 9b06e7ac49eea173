"""Grouping pending alerts into Slack messages, and sending one message.

flush(): pending outbox rows are routed to a channel and grouped by channel,
whatever their kind: a storm (a breaker trips, tickets open, remediations are
handed over) is one message per channel with a part per kind. A group joins
that channel's unsent message if there is one not being sent right now (so an
outage or a rate limit ends in one message with the total, not a backlog),
else starts a new message.

deliver(): claim the message (a short transaction), post it with no database
transaction open (a slow Slack holds no lock and delays nothing else), then
record the outcome: sent, retry later (429 with its Retry-After, 5xx, Slack
unreachable; exponential backoff with jitter), or failed (a refusal that a
retry cannot fix, or a day of trying). One message per channel per second at
most, Slack's documented pace (https://api.slack.com/apis/rate-limits).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from celery.utils.time import get_exponential_backoff_interval
from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from core import metrics
from core.db import Database, serialize_on, utcnow
from core.vocabulary import AlertSeverity
from ticketing.notify import events, messages, routing
from ticketing.notify.events import Subject
from ticketing.notify.models import AlertDelivery, AlertOutbox, DeliveryState
from ticketing.notify.slack import DeliveryError, Redactor, Sender
from ticketing.settings import TicketingSettings

log = logging.getLogger(__name__)

FLUSH_LIMIT = 5000
"""Outbox rows grouped per flush; a bigger backlog takes several flushes."""
CHANNEL_SPACING = dt.timedelta(seconds=1)
CLAIM = dt.timedelta(seconds=60)
"""How long a sender owns a message; a worker that dies mid-send loses it after this."""
OVERDUE = dt.timedelta(seconds=60)
"""A message this far past its next attempt has lost its task (a broker restart) and is sent again."""
GIVE_UP_AFTER = dt.timedelta(days=1)
KEEP = dt.timedelta(days=14)
"""Sent and failed messages, and the alerts in them, are deleted after this long."""
BACKOFF_FACTOR_S = 2
BACKOFF_MAX_S = 300


@dataclass
class FlushResult:
    grouped: int = 0
    to_send: list[int] = field(default_factory=list)
    """Deliveries whose task must be sent when the flush commits: new ones and overdue ones."""


def _subject_of(row: AlertOutbox, subjects: dict[tuple[str, str], Subject]) -> Subject:
    found = subjects.get((row.object_type, row.object_id))
    if found is not None:
        return found
    hostname = row.object_id if row.object_type == "host" else str((row.detail or {}).get("host", ""))
    return Subject(hostname=hostname)


def _absorb(delivery: AlertDelivery, members: list[tuple[AlertOutbox, Subject, AlertSeverity]]) -> None:
    digest = dict(delivery.digest or {})
    examples = list(digest.get("examples", []))
    datacenters = dict(digest.get("datacenters", {}))
    # a message made before messages held several kinds has no "kinds": all its alerts are its kind
    kinds = dict(digest.get("kinds") or ({delivery.kind.value: delivery.count} if delivery.count else {}))
    for row, subject, severity in members:
        delivery.count += 1
        shown = sum(1 for example in examples if example.get("kind", delivery.kind.value) == row.kind.value)
        if shown < messages.EXAMPLES:
            examples.append(
                messages.example_of(
                    row.object_type, row.object_id, subject.hostname, subject.datacenter, row.summary, row.kind
                )
            )
        kinds[row.kind.value] = kinds.get(row.kind.value, 0) + 1
        datacenters[subject.datacenter] = datacenters.get(subject.datacenter, 0) + 1
        if severity.rank > delivery.severity.rank:
            delivery.severity = severity
            delivery.kind = row.kind  # the message leads with its most urgent kind
        delivery.first_at = min(delivery.first_at, row.created_at)
        delivery.last_at = max(delivery.last_at, row.created_at)
    delivery.digest = {"examples": examples, "datacenters": datacenters, "kinds": kinds}


def flush(session: Session, settings: TicketingSettings, now: dt.datetime) -> FlushResult:
    """Group pending alerts into messages (flushes; the caller commits and sends `to_send`)."""
    serialize_on(session, "ticketing.notify.flush")
    rows = session.scalars(
        select(AlertOutbox).where(AlertOutbox.delivery_id.is_(None)).order_by(AlertOutbox.id).limit(FLUSH_LIMIT)
    ).all()
    result = FlushResult(grouped=len(rows))
    subjects = events.locate(session, {(row.object_type, row.object_id) for row in rows})
    groups: dict[str, list[tuple[AlertOutbox, Subject, AlertSeverity]]] = {}
    for row in rows:
        subject = _subject_of(row, subjects)
        severity = events.severity_of(row.kind, subject)
        channel = routing.route(settings, row.kind, severity, subject.datacenter)
        groups.setdefault(channel, []).append((row, subject, severity))
    for channel, members in groups.items():
        delivery = session.scalars(
            select(AlertDelivery)
            .where(
                AlertDelivery.channel == channel,
                AlertDelivery.state == DeliveryState.pending,
                or_(AlertDelivery.claimed_until.is_(None), AlertDelivery.claimed_until < now),
            )
            .order_by(AlertDelivery.id)
            .limit(1)
            .with_for_update()
        ).first()
        if delivery is None:
            first = members[0][0].created_at
            delivery = AlertDelivery(
                channel=channel,
                kind=members[0][0].kind,
                severity=AlertSeverity.info,
                count=0,
                digest={},
                first_at=first,
                last_at=first,
                next_attempt_at=now,
                created_at=now,
            )
            session.add(delivery)
            session.flush()
            result.to_send.append(delivery.id)
        _absorb(delivery, members)
        for row, _subject, _severity in members:
            row.delivery_id = delivery.id
    overdue = session.scalars(
        select(AlertDelivery.id)
        .where(
            AlertDelivery.state == DeliveryState.pending,
            AlertDelivery.next_attempt_at < now - OVERDUE,
            or_(AlertDelivery.claimed_until.is_(None), AlertDelivery.claimed_until < now),
        )
        .order_by(AlertDelivery.id)
        .limit(100)
    ).all()
    result.to_send.extend(i for i in overdue if i not in result.to_send)
    session.execute(
        delete(AlertDelivery).where(AlertDelivery.state != DeliveryState.pending, AlertDelivery.created_at < now - KEEP)
    )
    session.flush()
    if rows:
        log.info(
            "ticketing.notify.grouped",
            extra={"fields": {"alerts": len(rows), "messages": len(groups), "new": len(result.to_send)}},
        )
    return result


@dataclass(frozen=True)
class Outcome:
    state: str
    """sent, failed, retry, busy (another worker is sending it), done (nothing to do)."""
    retry_in: float | None = None


def backoff_s(attempts: int) -> float:
    """2, 4, 8 … up to 300 s after the 1st, 2nd, 3rd … failed attempt, with full jitter (Celery's own helper)."""
    return max(1.0, float(get_exponential_backoff_interval(BACKOFF_FACTOR_S, attempts - 1, BACKOFF_MAX_S, True)))


def deliver(
    database: Database,
    delivery_id: int,
    settings: TicketingSettings,
    sender: Sender,
    redactor: Redactor,
    *,
    clock: Callable[[], dt.datetime] = utcnow,
) -> Outcome:
    """Send one message if it is due and nobody else is sending it; commits its own transactions."""
    now = clock()
    with database.session() as session:
        delivery = session.get(AlertDelivery, delivery_id, with_for_update=True)
        if delivery is None or delivery.state != DeliveryState.pending:
            return Outcome("done")
        if delivery.claimed_until is not None and delivery.claimed_until > now:
            return Outcome("busy")
        if delivery.next_attempt_at > now:
            return Outcome("retry", (delivery.next_attempt_at - now).total_seconds())
        # The channel's pace is decided by one worker at a time, and a message another worker has claimed
        # and not yet sent counts as sent now: without both, parallel workers post to a channel at once.
        serialize_on(session, f"alerts-channel:{delivery.channel}")
        last_sent = session.scalar(
            select(func.max(AlertDelivery.sent_at)).where(AlertDelivery.channel == delivery.channel)
        )
        in_flight = session.scalar(
            select(func.count()).where(
                AlertDelivery.channel == delivery.channel,
                AlertDelivery.id != delivery.id,
                AlertDelivery.state == DeliveryState.pending,
                AlertDelivery.claimed_until > now,
            )
        )
        if in_flight:
            return Outcome("retry", CHANNEL_SPACING.total_seconds())
        if last_sent is not None and now - last_sent < CHANNEL_SPACING:
            return Outcome("retry", (CHANNEL_SPACING - (now - last_sent)).total_seconds())
        delivery.claimed_until = now + CLAIM
        delivery.attempts += 1
        message = messages.build(delivery, settings.effective_public_url)
        channel, kind, count, attempts, created = (
            delivery.channel,
            delivery.kind,
            delivery.count,
            delivery.attempts,
            delivery.created_at,
        )
    fields: dict[str, object] = {"delivery": delivery_id, "channel": channel, "kind": kind.value, "count": count}
    failure: DeliveryError | None = None
    try:
        sender.send(routing.destination(settings, channel), message)
    except DeliveryError as error:
        failure = error
    now = clock()
    with database.session() as session:
        delivery = session.get_one(AlertDelivery, delivery_id, with_for_update=True)
        delivery.claimed_until = None
        if failure is None:
            delivery.state = DeliveryState.sent
            delivery.sent_at = now
            delivery.last_error = ""
            log.info("ticketing.notify.delivered", extra={"fields": {**fields, "attempts": attempts}})
            metrics.SLACK_DELIVERIES.labels("sent").inc()
            return Outcome("sent")
        reason = redactor.mask(failure.reason)
        delivery.last_error = reason
        if failure.permanent or now - created > GIVE_UP_AFTER:
            delivery.state = DeliveryState.failed
            log.error("ticketing.notify.failed", extra={"fields": {**fields, "attempts": attempts, "error": reason}})
            metrics.SLACK_DELIVERIES.labels("failed").inc()
            return Outcome("failed")
        retry_in = failure.retry_after if failure.retry_after is not None else backoff_s(attempts)
        metrics.SLACK_DELIVERIES.labels("retried").inc()
        delivery.next_attempt_at = now + dt.timedelta(seconds=retry_in)
        log.warning(
            "ticketing.notify.retrying",
            extra={"fields": {**fields, "attempts": attempts, "error": reason, "retry_in_s": round(retry_in, 1)}},
        )
        return Outcome("retry", retry_in)
