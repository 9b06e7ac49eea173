"""Safety gates: whether a remediation may start now, and the rule's circuit breaker.

Each gate returns None (pass) or the reason it holds, in words an operator
reads in the decision log ("held: rack cap reached (1 of 1)"). The admission
gates are small objects asked in the order `ADMISSION_GATES` declares
(`planning.admit` walks them), each testable alone. Caps are counted under
`core.db.serialize_on`, so two workers cannot both see room for one more and
both start.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from core import audit
from remediator import preemption
from remediator.actions import ACTIONS
from remediator.decisions import SYSTEM
from remediator.models import (
    Control,
    Host,
    MaintenanceWindow,
    Remediation,
    RemediationState,
    RemediationStep,
    RuleMode,
    RuleState,
)
from remediator.rules import PackSafety, Rule, cap_limit

log = logging.getLogger("remediator.planning")  # the breaker's log lines keep the logger they had in planning
ADMISSION_LOCK = "remediator.admission"
ADMITTED_STATES = (RemediationState.planned, RemediationState.running, RemediationState.verifying)
GLOBAL_PAUSE = "global_pause"
APPROVAL_REASON = "waiting for approval: the plan includes a destructive action"


def rule_state(session: Session, rule_id: str) -> RuleState | None:
    return session.get(RuleState, rule_id)


def effective_mode(rule: Rule, state: RuleState | None) -> RuleMode:
    if state is not None and state.mode is not None:
        return state.mode
    return RuleMode(rule.mode)


def global_pause(session: Session) -> str | None:
    control = session.get(Control, GLOBAL_PAUSE)
    if control is not None and control.value.get("paused"):
        return f"global pause by {control.updated_by}: {control.value.get('reason', '')}".strip()
    return None


def maintenance(session: Session, host: Host, now: dt.datetime) -> str | None:
    scopes = [
        ("fleet", ""),
        ("datacenter", host.datacenter),
        ("cluster", host.cluster),
        ("rack", host.rack),
        ("host", host.hostname),
    ]
    window = session.scalars(
        select(MaintenanceWindow)
        .where(
            MaintenanceWindow.starts_at <= now,
            MaintenanceWindow.ends_at > now,
            or_(*[(MaintenanceWindow.scope == s) & (MaintenanceWindow.value == v) for s, v in scopes]),
        )
        .limit(1)
    ).first()
    if window is None:
        return None
    where = window.scope if window.scope == "fleet" else f"{window.scope} {window.value}"
    return f"maintenance window on {where} until {window.ends_at.isoformat()}"


def _scope_filter(scope: str, host: Host) -> list[Any]:
    if scope == "rack":
        return [Remediation.datacenter == host.datacenter, Remediation.rack == host.rack]
    if scope == "cluster":
        return [Remediation.cluster == host.cluster]
    if scope == "datacenter":
        return [Remediation.datacenter == host.datacenter]
    return []


def _hosts_in_scope(session: Session, scope: str, host: Host) -> int:
    query = select(func.count()).select_from(Host)
    if scope == "rack":
        query = query.where(Host.datacenter == host.datacenter, Host.rack == host.rack)
    elif scope == "cluster":
        query = query.where(Host.cluster == host.cluster)
    elif scope == "datacenter":
        query = query.where(Host.datacenter == host.datacenter)
    return int(session.scalar(query) or 0)


def _host_filter(scope: str, host: Host) -> list[Any]:
    if scope == "rack":
        return [Host.datacenter == host.datacenter, Host.rack == host.rack]
    if scope == "cluster":
        return [Host.cluster == host.cluster]
    if scope == "datacenter":
        return [Host.datacenter == host.datacenter]
    return []


def caps(session: Session, host: Host, safety: PackSafety) -> str | None:
    """The first scope whose cap is reached: hosts out of service because of fleetfix — an admitted
    disruptive remediation, or drained and waiting for a technician — other than this one."""
    for scope in ("rack", "cluster", "datacenter", "fleet"):
        cap = safety.caps.get(scope)
        if cap is None or (scope == "cluster" and not host.cluster):
            continue
        limit = cap_limit(cap, _hosts_in_scope(session, scope, host))
        working = set(
            session.scalars(
                select(Remediation.host_id).where(
                    Remediation.disruptive.is_(True),
                    Remediation.state.in_(ADMITTED_STATES),
                    *_scope_filter(scope, host),
                )
            )
        )
        drained = set(session.scalars(select(Host.id).where(Host.drained_at.is_not(None), *_host_filter(scope, host))))
        out = len((working | drained) - {host.id})
        if out >= limit:
            return f"{scope} cap reached ({out} of {limit} hosts out)"
    return None


def spacing(session: Session, host: Host, safety: PackSafety, now: dt.datetime) -> str | None:
    if not safety.spacing_s:
        return None
    last = session.scalar(
        select(func.max(Remediation.admitted_at)).where(Remediation.disruptive.is_(True), *_scope_filter("rack", host))
    )
    if last is not None and (now - last).total_seconds() < safety.spacing_s:
        ago = int((now - last).total_seconds())
        return f"spacing: a disruptive start in rack {host.rack} {ago}s ago (spacing {int(safety.spacing_s)}s)"
    return None


PAGE_ONLY_ACTIONS = ("soft_offline_page",)
"""Actions on one memory page of many: neither work on the host for cooldowns nor a remediation for the flap
guard (each offlined page is its own weak cell; many on one DIMM are rule dimm-offlined-pages' to judge)."""


def cooldown(session: Session, host: Host, rule: Rule, now: dt.datetime) -> str | None:
    """A host is left alone for the rule's cooldown after a remediation that did work on it finished: one with
    a step other than a ticket that started. A ticket is not work done on the host, and neither is a
    remediation cancelled (preempted, or by a person) before anything started: counting those held a
    higher-priority fix back for a day behind a ticket that was only planned. Nor is soft-offlining a memory
    page (PAGE_ONLY_ACTIONS): one 4 KiB page moved does not change what another fix of the host would meet,
    and counting it held a DIMM's PPR back for a day behind a weak cell's offline."""
    if not rule.safety.cooldown_s:
        return None
    since = now - dt.timedelta(seconds=rule.safety.cooldown_s)
    worked = (
        select(RemediationStep.id)
        .where(
            RemediationStep.remediation_id == Remediation.id,
            RemediationStep.action.not_in(("ticket", *PAGE_ONLY_ACTIONS)),
            RemediationStep.started_at.is_not(None),
        )
        .exists()
    )
    recent = session.scalar(
        select(func.max(Remediation.finished_at)).where(
            Remediation.host_id == host.id,
            Remediation.finished_at >= since,
            Remediation.state != RemediationState.escalated,  # ended in a ticket: the fault is a person's now
            worked,
        )
    )
    if recent is not None:
        until = recent + dt.timedelta(seconds=rule.safety.cooldown_s)
        return f"cooldown: host last remediated at {recent.isoformat()}, until {until.isoformat()}"
    return None


def flapping(session: Session, host: Host, safety: PackSafety, now: dt.datetime) -> int:
    """Remediations of this host within the flap window (a person decides past flap_max), leaving out those
    whose every step was a page's soft offline."""
    since = now - dt.timedelta(seconds=safety.flap_window_s)
    page_only = (
        select(RemediationStep.id)
        .where(RemediationStep.remediation_id == Remediation.id, RemediationStep.action.in_(PAGE_ONLY_ACTIONS))
        .exists()
    )
    other = (
        select(RemediationStep.id)
        .where(RemediationStep.remediation_id == Remediation.id, RemediationStep.action.not_in(PAGE_ONLY_ACTIONS))
        .exists()
    )
    return int(
        session.scalar(
            select(func.count())
            .select_from(Remediation)
            .where(Remediation.host_id == host.id, Remediation.created_at >= since, ~(page_only & ~other))
        )
        or 0
    )


def breaker_trips(session: Session, host: Host, rule: Rule, now: dt.datetime) -> str | None:
    """Whether planning one more for this rule would exceed its breaker (counting this host)."""
    breaker = rule.safety.breaker
    since = now - dt.timedelta(seconds=breaker.window_s)
    scope_filter = [Remediation.datacenter == host.datacenter] if breaker.scope == "datacenter" else []
    hosts = set(
        session.scalars(
            select(Remediation.host_id)
            .where(Remediation.rule_id == rule.id, Remediation.created_at >= since, *scope_filter)
            .distinct()
        )
    )
    hosts.add(host.id)
    in_scope = _hosts_in_scope(session, breaker.scope, host)
    percent = 100.0 * len(hosts) / max(1, in_scope)
    where = f"datacenter {host.datacenter}" if breaker.scope == "datacenter" else "the fleet"
    if len(hosts) > breaker.max_hosts:
        return f"fired on {len(hosts)} hosts in {where} within {int(breaker.window_s)}s (max {breaker.max_hosts})"
    if len(hosts) >= breaker.min_hosts and percent > breaker.max_percent:
        return (
            f"fired on {percent:.1f}% of {where} ({len(hosts)} of {in_scope}) within "
            f"{int(breaker.window_s)}s (max {breaker.max_percent:g}%)"
        )
    return None


def open_breaker(session: Session, rule_id: str, reason: str, now: dt.datetime) -> None:
    state = session.get(RuleState, rule_id)
    if state is None:
        state = RuleState(rule_id=rule_id)
        session.add(state)
    state.breaker_open = True
    state.breaker_reason = reason
    state.breaker_opened_at = now
    state.updated_by = SYSTEM
    audit.record(
        session,
        actor=SYSTEM,
        action="remediator.rule.breaker_opened",
        object_type="rule",
        object_id=rule_id,
        reason=reason,
    )
    log.warning("remediator.rule.breaker_opened", extra={"fields": {"rule": rule_id, "reason": reason}})


# The admission gates, in the order planning.admit asks them


@dataclass
class AdmissionContext:
    session: Session
    host: Host
    remediation: Remediation
    rule: Rule | None
    """None when the rule has left the active packs since the remediation was created."""
    limits: PackSafety
    now: dt.datetime

    @cached_property
    def for_a_person(self) -> bool:
        """A plan that only hands the host to a person (a ticket, maybe a drain first)."""
        return preemption.person_only([s.action for s in self.remediation.steps])


class OnRefusal(enum.Enum):
    hold = "hold"
    """The remediation waits in `detected` with the reason; remediator.admit_waiting retries it."""
    await_approval = "await_approval"
    """It waits in `awaiting_approval` for a person (planning.approve)."""
    skip_drain = "skip_drain"
    """A person's plan never waits: it goes on without its drain, and the host stays in service."""


class AdmissionGate(ABC):
    name: ClassVar[str]
    on_refusal: ClassVar[OnRefusal] = OnRefusal.hold

    @abstractmethod
    def check(self, admission: AdmissionContext) -> str | None:
        """None when the gate lets the remediation through (or does not apply to it); else the reason."""


class GlobalPauseGate(AdmissionGate):
    name = "global_pause"

    def check(self, admission: AdmissionContext) -> str | None:
        return global_pause(admission.session)


class MaintenanceGate(AdmissionGate):
    name = "maintenance_window"

    def check(self, admission: AdmissionContext) -> str | None:
        return maintenance(admission.session, admission.host, admission.now)


class CooldownGate(AdmissionGate):
    """Not for an escalation (the same fault, still there), nor a plan of a person's: a ticket is not work on
    the host."""

    name = "cooldown"

    def check(self, admission: AdmissionContext) -> str | None:
        rule = admission.rule
        if rule is None or admission.remediation.previous_id is not None or admission.for_a_person:
            return None
        return cooldown(admission.session, admission.host, rule, admission.now)


class DrainPastCapsGate(AdmissionGate):
    """A person's plan that drains never waits: with the caps full its ticket opens and the host stays in
    service until a technician takes it."""

    name = "drain_past_caps"
    on_refusal = OnRefusal.skip_drain

    def check(self, admission: AdmissionContext) -> str | None:
        if not (admission.remediation.disruptive and admission.for_a_person):
            return None
        return caps(admission.session, admission.host, admission.limits)


class CapsGate(AdmissionGate):
    """Blast radius: hosts fleetfix has out per rack, cluster, datacenter and fleet."""

    name = "caps"

    def check(self, admission: AdmissionContext) -> str | None:
        if not admission.remediation.disruptive or admission.for_a_person:
            return None
        return caps(admission.session, admission.host, admission.limits)


class SpacingGate(AdmissionGate):
    """Between disruptive starts in one rack."""

    name = "spacing"

    def check(self, admission: AdmissionContext) -> str | None:
        if not admission.remediation.disruptive or admission.for_a_person:
            return None
        return spacing(admission.session, admission.host, admission.limits, admission.now)


class ApprovalGate(AdmissionGate):
    """A destructive plan, or one of a rule that asks for it, waits for a person's approval."""

    name = "approval"
    on_refusal = OnRefusal.await_approval

    def check(self, admission: AdmissionContext) -> str | None:
        if admission.remediation.approved_by is not None:
            return None
        return APPROVAL_REASON if needs_approval(admission.rule, admission.remediation) else None


ADMISSION_GATES: tuple[AdmissionGate, ...] = (
    GlobalPauseGate(),
    MaintenanceGate(),
    CooldownGate(),
    DrainPastCapsGate(),
    CapsGate(),
    SpacingGate(),
    ApprovalGate(),
)
"""Every one passed (or only skipped a drain): the remediation is admitted (planning.admit)."""


def needs_approval(rule: Rule | None, remediation: Remediation) -> bool:
    if rule is not None and rule.safety.requires_approval:
        return True
    return any(ACTIONS[s.action].destructive for s in remediation.steps if s.action in ACTIONS)
