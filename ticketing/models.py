"""Repair tickets, their history, the parts technicians replaced, and links to external trackers."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, text, true
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
"""Every state but closed and cancelled: the ticket holds its dedup key (one per host and part)."""


class Ticket(Base):
    __tablename__ = "tickets"
    __table_args__ = (
        # One open ticket per host and part: `open_key` holds the dedup key
        # while the ticket is open and NULL after; unique ignores NULLs.
        UniqueConstraint("open_key"),
        Index("ix_tickets_state_priority", "state", "priority"),
        Index("ix_tickets_datacenter", "datacenter", "rack"),
        Index("ix_tickets_part_type", "part_type"),  # the queue's filter choices: a walk of the index
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
    holds_host: Mapped[bool] = mapped_column(
        default=True,
        server_default=true(),
        doc="While open, it keeps the host out of service (awaiting_repair): a part a technician replaces. False "
        "for a ticket to the owners of a workload, kernel, configuration, class or change: the host keeps working.",
    )
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="Frozen at opening; later detections append.")
    detections: Mapped[int] = mapped_column(default=1)
    reopened: Mapped[int] = mapped_column(
        default=0, server_default=text("0"), doc="Times verification failed or the fault returned after closing."
    )
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    claimed_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    resolved_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    verify_started_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    verify_until: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="The host must keep reporting without the fault until then."
    )
    last_detected_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    closed_at: Mapped[dt.datetime | None] = mapped_column(default=None)

    events: Mapped[list[TicketEvent]] = relationship(
        back_populates="ticket", order_by="TicketEvent.id", cascade="all, delete-orphan"
    )
    repairs: Mapped[list[Repair]] = relationship(
        back_populates="ticket", order_by="Repair.id", cascade="all, delete-orphan"
    )

    # The ORM bumps `version` on every UPDATE and refuses one whose version moved
    # underneath it (StaleDataError): the ETag two technicians race on.
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


class Repair(Base):
    """One part a technician replaced, and whether its fault came back: the repair history."""

    __tablename__ = "ticket_repairs"
    __table_args__ = (Index("ix_ticket_repairs_part", "part_type", "vendor", "model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"), index=True)
    hostname: Mapped[str] = mapped_column(String(253))
    datacenter: Mapped[str] = mapped_column(String(64), default="")
    part_type: Mapped[str] = mapped_column(String(32))
    part: Mapped[str] = mapped_column(String(256), default="", doc="Where it sits: DIMM label, disk device, PSU id.")
    vendor: Mapped[str] = mapped_column(String(128), default="", doc="Of the part taken out.")
    model: Mapped[str] = mapped_column(String(128), default="", doc="Part number or disk model of the part taken out.")
    old_serial: Mapped[str] = mapped_column(String(128))
    new_serial: Mapped[str] = mapped_column(String(128))
    note: Mapped[str] = mapped_column(Text, default="")
    replaced_by: Mapped[str] = mapped_column(String(128))
    replaced_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    verified_at: Mapped[dt.datetime | None] = mapped_column(default=None, doc="Its ticket closed after verification.")
    returned_at: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="The same fault came back on the same host and part."
    )

    ticket: Mapped[Ticket] = relationship(back_populates="repairs")


class TrackerLink(Base):
    """Where a ticket stands in the external tracker: its issue and the last event pushed there.

    Kept off the ticket row so that syncing never changes the ticket's version
    (and so never invalidates a technician's ETag)."""

    __tablename__ = "ticket_tracker_links"

    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"), primary_key=True)
    tracker: Mapped[str] = mapped_column(String(32))
    external_key: Mapped[str | None] = mapped_column(String(64), default=None, doc="e.g. the Jira issue key OPS-12.")
    external_url: Mapped[str] = mapped_column(String(512), default="")
    synced_event_id: Mapped[int] = mapped_column(default=0, doc="Events up to this id are in the tracker.")
    synced_state: Mapped[str] = mapped_column(String(32), default="")
    attempts: Mapped[int] = mapped_column(default=0, doc="Failed attempts since the last success.")
    last_error: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
