"""Repair tickets and their history."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from core.db import Base, utcnow
from core.models import enum_column


class TicketState(enum.StrEnum):
    open = "open"
    claimed = "claimed"
    in_progress = "in_progress"
    resolved = "resolved"
    verifying = "verifying"
    closed = "closed"
    cancelled = "cancelled"


OPEN_TICKET_STATES = frozenset(
    {TicketState.open, TicketState.claimed, TicketState.in_progress, TicketState.resolved, TicketState.verifying}
)


class Ticket(Base):
    __tablename__ = "tickets"
    __table_args__ = (
        # One open ticket per host and part: `open_key` holds the dedup key
        # while the ticket is open and NULL after; unique ignores NULLs.
        UniqueConstraint("open_key"),
        Index("ix_tickets_state_priority", "state", "priority"),
        Index("ix_tickets_datacenter", "datacenter", "rack"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    dedup_key: Mapped[str] = mapped_column(String(512), index=True, doc="host:part, e.g. web-1:dimm:CPU0_DIMM_A1")
    open_key: Mapped[str | None] = mapped_column(String(512), default=None)
    hostname: Mapped[str] = mapped_column(String(253), index=True)
    datacenter: Mapped[str] = mapped_column(String(64), default="")
    rack: Mapped[str] = mapped_column(String(64), default="")
    part_type: Mapped[str] = mapped_column(String(32), doc="dimm, disk, psu, fan, host …")
    part: Mapped[str] = mapped_column(String(256), default="", doc="The part's locator: DIMM label, disk serial.")
    title: Mapped[str] = mapped_column(String(512))
    priority: Mapped[int] = mapped_column(default=3, doc="1 highest … 5 lowest.")
    state: Mapped[TicketState] = mapped_column(enum_column(TicketState, "ticket_state"), default=TicketState.open)
    version: Mapped[int] = mapped_column(default=1, server_default=text("1"))
    assignee: Mapped[str | None] = mapped_column(String(64), default=None)
    remediation_id: Mapped[int | None] = mapped_column(default=None, doc="The remediation that opened it, if any.")
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="Frozen at opening; later detections append.")
    detections: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    closed_at: Mapped[dt.datetime | None] = mapped_column(default=None)

    events: Mapped[list[TicketEvent]] = relationship(
        back_populates="ticket", order_by="TicketEvent.id", cascade="all, delete-orphan"
    )

    __mapper_args__ = {"version_id_col": version}


class TicketEvent(Base):
    __tablename__ = "ticket_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"), index=True)
    at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    actor: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32), doc="opened, detected_again, claimed, comment, resolved …")
    note: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)

    ticket: Mapped[Ticket] = relationship(back_populates="events")
