"""Tables the remediator owns: hosts, raw reports, per-host counter state, signals,
remediations and their steps."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, event
from sqlalchemy.orm import Mapped, mapped_column, relationship

from core.db import Base, utcnow
from core.models import enum_column


class HostState(enum.StrEnum):
    in_service = "in_service"
    remediating = "remediating"
    awaiting_repair = "awaiting_repair"  # an open ticket; out of service
    unreachable = "unreachable"
    maintenance = "maintenance"


class Host(Base):
    __tablename__ = "hosts"
    __table_args__ = (Index("ix_hosts_location", "datacenter", "rack"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(253), unique=True)
    machine_id: Mapped[str | None] = mapped_column(String(64), default=None)
    hardware_class: Mapped[str] = mapped_column(String(64), default="unknown", index=True)
    datacenter: Mapped[str] = mapped_column(String(64), default="unknown")
    row: Mapped[str] = mapped_column(String(32), default="")
    rack: Mapped[str] = mapped_column(String(64), default="")
    slot: Mapped[str] = mapped_column(String(32), default="", doc="Rack unit (U) position.")
    cluster: Mapped[str] = mapped_column(String(64), default="")
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[HostState] = mapped_column(enum_column(HostState, "host_state"), default=HostState.in_service)
    last_report_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    last_report_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    last_stored_report_id: Mapped[uuid.UUID | None] = mapped_column(
        default=None, doc="The reports row that holds the latest observation state."
    )
    last_digest: Mapped[str | None] = mapped_column(String(64), default=None)
    boot_id: Mapped[str | None] = mapped_column(String(64), default=None)
    report_interval_s: Mapped[int] = mapped_column(default=60)
    memory: Mapped[dict[str, Any]] = mapped_column(
        default=dict, doc="What signal derivation keeps between reports: last counters, cursors, rule timers."
    )
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Report(Base):
    """A raw report, stored once per distinct observation state of a host.

    Most reports say nothing new: one whose observations match the host's
    previous report only moves that row's `last_captured_at` and `repeats`.
    Rows are kept for a window (pruned by age) for audit and backtest; on
    PostgreSQL the large `body` is TOASTed, which compresses it.
    """

    __tablename__ = "reports"
    __table_args__ = (Index("ix_reports_host_captured", "host_id", "captured_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, doc="The report_id of the first report of this state.")
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    captured_at: Mapped[dt.datetime] = mapped_column()
    last_captured_at: Mapped[dt.datetime] = mapped_column(index=True)
    repeats: Mapped[int] = mapped_column(default=0, doc="Later reports that said the same.")
    digest: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    schema_version: Mapped[int] = mapped_column()
    body: Mapped[dict[str, Any]] = mapped_column()


class Signal(Base):
    """A derived fact about a host: a rate, a delta, a match. Stored when it says something."""

    __tablename__ = "signals"
    __table_args__ = (Index("ix_signals_host_kind_at", "host_id", "kind", "observed_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    report_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    kind: Mapped[str] = mapped_column(String(64), doc="dimm_ce_rate, dimm_ue, counter_reset, …")
    subject: Mapped[str] = mapped_column(String(256), default="", doc="What it is about: a DIMM label, a disk.")
    value: Mapped[float] = mapped_column(default=0.0)
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    observed_at: Mapped[dt.datetime] = mapped_column()


class RemediationState(enum.StrEnum):
    detected = "detected"
    planned = "planned"
    awaiting_approval = "awaiting_approval"
    running = "running"
    verifying = "verifying"
    succeeded = "succeeded"
    failed = "failed"
    escalated = "escalated"
    cancelled = "cancelled"

    @property
    def active(self) -> bool:
        return self in ACTIVE_REMEDIATION_STATES


ACTIVE_REMEDIATION_STATES = frozenset(
    {
        RemediationState.detected,
        RemediationState.planned,
        RemediationState.awaiting_approval,
        RemediationState.running,
        RemediationState.verifying,
    }
)


class Remediation(Base):
    __tablename__ = "remediations"
    __table_args__ = (
        # At most one active remediation per host, enforced by the database:
        # `active` is true while the state is active and NULL after, and a
        # unique index ignores NULLs on both PostgreSQL and SQLite.
        UniqueConstraint("host_id", "active"),
        Index("ix_remediations_state", "state"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    rule_id: Mapped[str] = mapped_column(String(128))
    state: Mapped[RemediationState] = mapped_column(enum_column(RemediationState, "remediation_state"))
    active: Mapped[bool | None] = mapped_column(
        doc="True while the state is active, NULL after; derived from state on every flush."
    )
    subject: Mapped[str] = mapped_column(String(256), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    current_step: Mapped[int] = mapped_column(default=0)
    shadow: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)

    steps: Mapped[list[RemediationStep]] = relationship(
        back_populates="remediation", order_by="RemediationStep.index", cascade="all, delete-orphan"
    )


@event.listens_for(Remediation, "before_insert")
@event.listens_for(Remediation, "before_update")
def _derive_active(_mapper: object, _connection: object, remediation: Remediation) -> None:
    remediation.active = True if remediation.state in ACTIVE_REMEDIATION_STATES else None


class StepState(enum.StrEnum):
    pending = "pending"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    skipped = "skipped"


class RemediationStep(Base):
    __tablename__ = "remediation_steps"
    __table_args__ = (UniqueConstraint("remediation_id", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    remediation_id: Mapped[int] = mapped_column(ForeignKey("remediations.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column()
    action: Mapped[str] = mapped_column(String(64), doc="A cyborg action name, or 'ticket'.")
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[StepState] = mapped_column(enum_column(StepState, "step_state"), default=StepState.pending)
    attempts: Mapped[int] = mapped_column(default=0)
    started_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    result: Mapped[dict[str, Any]] = mapped_column(default=dict, doc="Outcome, ticket id, command log.")

    remediation: Mapped[Remediation] = relationship(back_populates="steps")
