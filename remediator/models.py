"""Tables the remediator owns: hosts, raw reports, per-host counter state, signals,
remediations and their steps, rollouts."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, literal_column, text
from sqlalchemy.orm import Mapped, mapped_column, relationship, validates

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
    last_stored_at: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="captured_at of that row (its partition key)."
    )
    last_digest: Mapped[str | None] = mapped_column(String(64), default=None)
    boot_id: Mapped[str | None] = mapped_column(String(64), default=None)
    report_interval_s: Mapped[int] = mapped_column(default=60)
    drained_at: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="Set while fleetfix holds the host out of its workload scheduler: it counts against the caps."
    )
    memory: Mapped[dict[str, Any]] = mapped_column(
        default=dict, doc="What signal derivation keeps between reports: last counters, cursors, rule timers."
    )
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Report(Base):
    """A raw report, stored once per distinct observation state of a host.

    Most reports say nothing new: one whose observations match the host's
    previous report only moves that row's `last_captured_at` and `repeats`,
    within one UTC day; the first report of a day is stored again even if it
    says the same, so no row spans more than a day and pruning by age never
    removes a host's current state.

    Rows are kept for `report_retention_days` (remediator.retention). On
    PostgreSQL the table is partitioned by day on `captured_at`, so pruning
    drops whole partitions, and `body` is compressed with LZ4 when it is
    TOASTed. The primary key includes `captured_at` because a partitioned
    table's unique keys must include the partition key.
    """

    __tablename__ = "reports"
    __table_args__ = (Index("ix_reports_host_captured", "host_id", "captured_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, doc="The report_id of the first report of this state.")
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    captured_at: Mapped[dt.datetime] = mapped_column(primary_key=True)
    last_captured_at: Mapped[dt.datetime] = mapped_column(index=True)
    repeats: Mapped[int] = mapped_column(default=0, doc="Later reports that said the same.")
    digest: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    schema_version: Mapped[int] = mapped_column()
    body: Mapped[dict[str, Any]] = mapped_column()


class Signal(Base):
    """A derived fact about a host: a rate, a delta, a match. Stored when it says something."""

    __tablename__ = "signals"
    __table_args__ = (
        Index("ix_signals_host_kind_at", "host_id", "kind", "observed_at"),
        Index("ix_signals_observed_at", "observed_at"),  # pruning by age
    )

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
RUNNABLE_REMEDIATION_STATES = frozenset({RemediationState.planned, RemediationState.running})
"""Admitted and not yet verifying: the runner starts its next step, or its verification once every step is done."""
LOAD_TEST_RULE = "repair-load-test"
"""The rule id of a resolved DIMM ticket's load-test run (remediator.repair_load): no rule pack has it, the
ticket owns the run."""


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
    rung: Mapped[int] = mapped_column(default=0, doc="0: the rule's plan; n: the n-th escalation rung.")
    previous_id: Mapped[int | None] = mapped_column(default=None, doc="The remediation this one escalates from.")
    disruptive: Mapped[bool] = mapped_column(default=False, doc="Counts against concurrency caps while admitted.")
    datacenter: Mapped[str] = mapped_column(String(64), default="")
    cluster: Mapped[str] = mapped_column(String(64), default="")
    rack: Mapped[str] = mapped_column(String(64), default="")
    admitted_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    approved_by: Mapped[str | None] = mapped_column(String(128), default=None)
    settle_until: Mapped[dt.datetime | None] = mapped_column(default=None)
    held_reason: Mapped[str] = mapped_column(Text, default="", doc="Why it is waiting, while it waits.")
    paused_by: Mapped[str | None] = mapped_column(
        String(128), default=None, doc="Set while an operator holds it: no step starts until resumed."
    )
    rollout_id: Mapped[int | None] = mapped_column(
        ForeignKey("rollouts.id", ondelete="SET NULL"),
        default=None,
        index=True,
        doc="The rollout whose wave started it (its rule's first rung only).",
    )
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    version: Mapped[int] = mapped_column(
        default=1,
        server_default="1",
        onupdate=literal_column("version", Integer) + 1,
        doc="Bumped by every update (ETag).",
    )

    steps: Mapped[list[RemediationStep]] = relationship(
        back_populates="remediation", order_by="RemediationStep.index", cascade="all, delete-orphan"
    )

    @validates("state")
    def _state_sets_active(self, _key: str, state: RemediationState) -> RemediationState:
        self.active = True if state in ACTIVE_REMEDIATION_STATES else None
        return state

    @property
    def signal(self) -> dict[str, Any] | None:
        """The signal that justified it (kind, subject, value, detail), from its evidence."""
        found = (self.evidence or {}).get("signal")
        return found if isinstance(found, dict) else None


class StepState(enum.StrEnum):
    pending = "pending"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    skipped = "skipped"


class Awaiting(enum.StrEnum):
    """What a running step that was handed over waits for."""

    host = "host"  # the host's result (or refusal) for the envelope it was sent
    first_report = "first_report"  # a reinstall: the host's first report from its new image


_WAITING = text("awaiting IS NOT NULL")


class RemediationStep(Base):
    __tablename__ = "remediation_steps"
    __table_args__ = (
        UniqueConstraint("remediation_id", "index"),
        # The deadline sweep reads the waiting steps only (a handful, whatever the history): by what they
        # wait for, and the host's ones by deadline.
        Index("ix_remediation_steps_waiting", "awaiting", "deadline", postgresql_where=_WAITING, sqlite_where=_WAITING),
    )

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
    awaiting: Mapped[Awaiting | None] = mapped_column(
        enum_column(Awaiting, "step_awaiting"),
        default=None,
        doc="Set while the running step waits on what it was handed to; NULL otherwise.",
    )
    deadline: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="When a waiting step is acted on if nothing came (remediator.check_step_deadlines)."
    )
    accepted_at: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="When the host's notice that it started the step arrived (taken once)."
    )
    power_cycled_at: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="When the step's silent host was power-cycled through its BMC (once per step)."
    )

    remediation: Mapped[Remediation] = relationship(back_populates="steps")


class RuleMode(enum.StrEnum):
    active = "active"
    shadow = "shadow"  # decide and record, run nothing
    paused = "paused"  # decide nothing


class RuleState(Base):
    """Runtime state of a rule, set by operators and by its circuit breaker."""

    __tablename__ = "rule_states"

    rule_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    mode: Mapped[RuleMode | None] = mapped_column(
        enum_column(RuleMode, "rule_mode"), default=None, doc="NULL: as the rule pack says."
    )
    breaker_open: Mapped[bool] = mapped_column(default=False)
    breaker_reason: Mapped[str] = mapped_column(Text, default="")
    breaker_opened_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    updated_by: Mapped[str] = mapped_column(String(128), default="")
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(
        default=1,
        server_default="1",
        onupdate=literal_column("version", Integer) + 1,
        doc="Bumped by every update (ETag).",
    )


class RolloutState(enum.StrEnum):
    running = "running"
    halted = "halted"  # by a failure, a side effect or a compared signal: an operator resumes it
    paused = "paused"  # by an operator
    completed = "completed"


class Rollout(Base):
    """A fleet-wide change (a patched kernel, a firmware baseline) going through one hardware class in waves.

    Created when its rule first fires on a host of the class for this change; its hosts are the
    remediations that point at it (`Remediation.rollout_id`), in the order they started.
    """

    __tablename__ = "rollouts"
    __table_args__ = (UniqueConstraint("rule_id", "hardware_class", "change"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    rule_id: Mapped[str] = mapped_column(String(128))
    hardware_class: Mapped[str] = mapped_column(String(64))
    change: Mapped[str] = mapped_column(String(256), doc="What goes out: 'kernel 2.6.23.17-amdpatch2', 'bios 2.10.2'.")
    part_type: Mapped[str] = mapped_column(String(32), doc="Whose change it is (the halt's ticket): kernel, firmware.")
    state: Mapped[RolloutState] = mapped_column(
        enum_column(RolloutState, "rollout_state"), default=RolloutState.running
    )
    waves: Mapped[list[Any]] = mapped_column(default=list, doc="The rule's waves when the rollout began.")
    bake_s: Mapped[float] = mapped_column(default=86400.0)
    current_wave: Mapped[int] = mapped_column(default=0, doc="0: the canary.")
    halt_reason: Mapped[str] = mapped_column(Text, default="")
    halted_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    halted_by: Mapped[str] = mapped_column(String(128), default="")
    resumed_at: Mapped[dt.datetime | None] = mapped_column(
        default=None, doc="Comparisons look at nothing older (the evidence of the last halt was judged)."
    )
    ticket_id: Mapped[int | None] = mapped_column(default=None, doc="The ticket its last halt opened.")
    comparison: Mapped[list[Any]] = mapped_column(default=list, doc="The last comparison of its health signals.")
    compared_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    version: Mapped[int] = mapped_column(
        default=1,
        server_default="1",
        onupdate=literal_column("version", Integer) + 1,
        doc="Bumped by every update (ETag).",
    )


class Decision(Base):
    """Every decision about a firing rule, with its reason: planned, held, skipped, shadowed, escalated."""

    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_host_at", "host_id", "at"), Index("ix_decisions_rule_at", "rule_id", "at"))

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    rule_id: Mapped[str] = mapped_column(String(128))
    outcome: Mapped[str] = mapped_column(String(32), doc="planned, admitted, held, skipped, shadow, escalated.")
    reason: Mapped[str] = mapped_column(Text)
    remediation_id: Mapped[int | None] = mapped_column(default=None)
    subject: Mapped[str] = mapped_column(String(256), default="")
    value: Mapped[float | None] = mapped_column(default=None)


class MaintenanceWindow(Base):
    """While a window is open, nothing disruptive starts on the hosts it covers."""

    __tablename__ = "maintenance_windows"

    id: Mapped[int] = mapped_column(primary_key=True)
    scope: Mapped[str] = mapped_column(String(16), doc="host, rack, cluster, datacenter or fleet.")
    value: Mapped[str] = mapped_column(String(253), default="", doc="The host, rack … it covers; empty for fleet.")
    starts_at: Mapped[dt.datetime] = mapped_column()
    ends_at: Mapped[dt.datetime] = mapped_column()
    reason: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(128), default="")


class Control(Base):
    """Fleet-wide switches, e.g. the global pause of all remediation."""

    __tablename__ = "controls"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(default=dict)
    updated_by: Mapped[str] = mapped_column(String(128), default="")
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
