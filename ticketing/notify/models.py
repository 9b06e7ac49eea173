"""The alert outbox and the Slack messages made from it.

An `alert_outbox` row is written in the transaction of the change it reports
(so it is never lost and never sent for a change that was rolled back); the
flush groups pending rows into `alert_deliveries`, one Slack message per
channel per window, which the deliver task sends and retries.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from core.db import Base, utcnow
from core.models import enum_column
from core.vocabulary import AlertKind, AlertSeverity


class DeliveryState(enum.StrEnum):
    pending = "pending"
    sent = "sent"
    failed = "failed"


class AlertOutbox(Base):
    """One event worth telling people about, waiting to be grouped into a message."""

    __tablename__ = "alert_outbox"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[AlertKind] = mapped_column(enum_column(AlertKind, "alert_kind"))
    object_type: Mapped[str] = mapped_column(String(64), doc="host, remediation, ticket, rule.")
    object_id: Mapped[str] = mapped_column(String(253))
    actor: Mapped[str] = mapped_column(String(128), default="")
    summary: Mapped[str] = mapped_column(Text, default="", doc="The audit entry's reason.")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    delivery_id: Mapped[int | None] = mapped_column(
        ForeignKey("alert_deliveries.id", ondelete="CASCADE"),
        default=None,
        index=True,
        doc="NULL while pending; then the message it went into.",
    )


class AlertDelivery(Base):
    """One Slack message: every alert for one channel in a window, counted (per kind in `digest`)."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        Index("ix_alert_deliveries_state_next", "state", "next_attempt_at"),
        Index("ix_alert_deliveries_channel_sent", "channel", "sent_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    channel: Mapped[str] = mapped_column(String(80))
    kind: Mapped[AlertKind] = mapped_column(
        enum_column(AlertKind, "alert_kind"), doc="The most urgent kind in the message (its first part)."
    )
    severity: Mapped[AlertSeverity] = mapped_column(enum_column(AlertSeverity, "alert_severity"))
    count: Mapped[int] = mapped_column(default=0)
    digest: Mapped[dict[str, Any]] = mapped_column(
        default=dict, doc="What the message shows: a few examples of each kind, counts per kind and per datacenter."
    )
    first_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    state: Mapped[DeliveryState] = mapped_column(
        enum_column(DeliveryState, "alert_delivery_state"), default=DeliveryState.pending
    )
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    claimed_until: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="Set while a worker is sending it, so two never send the same message."
    )
    last_error: Mapped[str] = mapped_column(Text, default="", doc="Never holds a URL or a token.")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[dt.datetime | None] = mapped_column(default=None)
