"""Each admission gate alone (a remediation it refuses, one it lets through) and the order admit() asks them in.

The reasons are what a waiting remediation shows (its held_reason and decision), compared byte for byte.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy.orm import Session

from core.errors import Conflict, NotFound
from remediator import planning, safety
from remediator.models import Control, Host, MaintenanceWindow, Remediation, RemediationState
from remediator.rules import PackSafety, Rule, RuleSafety, RuleSet, Step
from remediator.safety import AdmissionContext, OnRefusal
from tests.builders.policies import EVIDENCE, host, rule
from tests.builders.reports import T0


def detected(session: Session, on: Host, plan: Sequence[str], of: Rule | None = None) -> Remediation:
    of = of or rule(plan)
    made = planning.create(session, on, of, [Step(action=a) for a in plan], EVIDENCE, "test", 0, None, T0)
    assert made is not None
    return made


def admission(session: Session, remediation: Remediation, of: Rule | None = None, **limits: Any) -> AdmissionContext:
    on = session.get_one(Host, remediation.host_id)
    return AdmissionContext(session, on, remediation, of, PackSafety(**{"spacing": 0, **limits}), T0)


def out_of_service(session: Session, name: str, plan: Sequence[str] = ("reboot",), *, ago_s: int = 0) -> None:
    """Another host of the rack with an admitted disruptive remediation, started ago_s seconds before T0."""
    started = detected(session, host(session, name), plan)
    started.state, started.admitted_at = RemediationState.planned, T0 - dt.timedelta(seconds=ago_s)
    session.flush()


def test_the_admission_gates_are_asked_in_this_order() -> None:
    assert [(g.name, g.on_refusal) for g in safety.ADMISSION_GATES] == [
        ("global_pause", OnRefusal.hold),
        ("maintenance_window", OnRefusal.hold),
        ("cooldown", OnRefusal.hold),
        ("drain_past_caps", OnRefusal.skip_drain),
        ("caps", OnRefusal.hold),
        ("spacing", OnRefusal.hold),
        ("approval", OnRefusal.await_approval),
    ]


def test_global_pause(session: Session) -> None:
    waiting = detected(session, host(session), ["reboot"])
    assert safety.GlobalPauseGate().check(admission(session, waiting)) is None
    session.add(Control(key="global_pause", value={"paused": True, "reason": "bad rollout"}, updated_by="alice"))
    session.flush()
    assert safety.GlobalPauseGate().check(admission(session, waiting)) == "global pause by alice: bad rollout"


def test_maintenance_window(session: Session) -> None:
    waiting = detected(session, host(session), ["reboot"])
    ends = T0 + dt.timedelta(hours=2)
    session.add(MaintenanceWindow(scope="rack", value="r2", starts_at=T0, ends_at=ends, reason="PDU"))
    session.flush()
    assert safety.MaintenanceGate().check(admission(session, waiting)) is None  # another rack
    session.add(MaintenanceWindow(scope="rack", value="r1", starts_at=T0, ends_at=ends, reason="PDU"))
    session.flush()
    assert safety.MaintenanceGate().check(admission(session, waiting)) == (
        f"maintenance window on rack r1 until {ends.isoformat()}"
    )


def test_cooldown(session: Session) -> None:
    h0 = host(session)
    cooling = rule(safety=RuleSafety(cooldown="1d", settle=0))
    done = detected(session, h0, ["reboot"])
    done.state, done.finished_at = RemediationState.succeeded, T0 - dt.timedelta(hours=1)
    session.flush()
    waiting = detected(session, h0, ["reboot"])
    assert safety.CooldownGate().check(admission(session, waiting, cooling)) is None  # its reboot never started
    done.steps[0].started_at = T0 - dt.timedelta(hours=2)
    session.flush()
    assert safety.CooldownGate().check(admission(session, waiting, rule())) is None  # the rule has none
    assert safety.CooldownGate().check(admission(session, waiting, cooling)) == (
        f"cooldown: host last remediated at {done.finished_at.isoformat()}, "
        f"until {(done.finished_at + dt.timedelta(days=1)).isoformat()}"
    )
    waiting.previous_id = done.id  # an escalation: the same fault, still there
    assert safety.CooldownGate().check(admission(session, waiting, cooling)) is None
    waiting.previous_id = None
    waiting.state = RemediationState.cancelled
    session.flush()
    ticket = detected(session, h0, ["drain", "ticket"])  # a ticket is not work on the host
    assert safety.CooldownGate().check(admission(session, ticket, cooling)) is None


def test_a_remediation_that_did_nothing_on_the_host_starts_no_cooldown(session: Session) -> None:
    """A ticket-only plan that finished, and a reboot preempted before it started, leave the host free for the
    next fix; a reboot that ran does not."""
    h0 = host(session)
    cooling = rule(safety=RuleSafety(cooldown="1d", settle=0))
    ticketed = detected(session, h0, ["ticket"])
    ticketed.state, ticketed.finished_at = RemediationState.succeeded, T0 - dt.timedelta(hours=1)
    ticketed.steps[0].started_at = T0 - dt.timedelta(hours=1)
    preempted = detected(session, h0, ["reboot"])
    preempted.state, preempted.finished_at = RemediationState.cancelled, T0 - dt.timedelta(minutes=30)
    session.flush()
    ran = detected(session, h0, ["reboot"])
    ran.state, ran.finished_at = RemediationState.cancelled, T0 - dt.timedelta(minutes=10)
    session.flush()
    waiting = detected(session, h0, ["restore_cmci"])
    assert safety.CooldownGate().check(admission(session, waiting, cooling)) is None
    ran.steps[0].started_at = T0 - dt.timedelta(minutes=20)  # cancelled by a person after its reboot began
    session.flush()
    assert safety.CooldownGate().check(admission(session, waiting, cooling)) == (
        f"cooldown: host last remediated at {ran.finished_at.isoformat()}, "
        f"until {(ran.finished_at + dt.timedelta(days=1)).isoformat()}"
    )


def test_drain_past_caps(session: Session) -> None:
    out_of_service(session, "h1")
    h0 = host(session)
    reboot = detected(session, h0, ["reboot"])
    assert safety.DrainPastCapsGate().check(admission(session, reboot, caps={"rack": 1})) is None  # not a person's
    reboot.state = RemediationState.cancelled
    session.flush()
    drain = detected(session, h0, ["drain", "ticket"])
    assert safety.DrainPastCapsGate().check(admission(session, drain, caps={"rack": 2})) is None
    assert safety.DrainPastCapsGate().check(admission(session, drain, caps={"rack": 1})) == (
        "rack cap reached (1 of 1 hosts out)"
    )


def test_caps(session: Session) -> None:
    out_of_service(session, "h1")
    h0 = host(session)
    tune = detected(session, h0, ["tune_error_reporting"])
    assert safety.CapsGate().check(admission(session, tune, caps={"rack": 1})) is None  # not disruptive
    tune.state = RemediationState.cancelled
    session.flush()
    drain = detected(session, h0, ["drain", "ticket"])
    assert safety.CapsGate().check(admission(session, drain, caps={"rack": 1})) is None  # drain_past_caps' case
    drain.state = RemediationState.cancelled
    session.flush()
    reboot = detected(session, h0, ["reboot"])
    assert safety.CapsGate().check(admission(session, reboot, caps={"rack": 2})) is None
    assert (
        safety.CapsGate().check(admission(session, reboot, caps={"rack": 1})) == "rack cap reached (1 of 1 hosts out)"
    )


def test_spacing(session: Session) -> None:
    out_of_service(session, "h1", ago_s=120)
    h0 = host(session)
    drain = detected(session, h0, ["drain", "ticket"])
    assert safety.SpacingGate().check(admission(session, drain, caps={"rack": 5}, spacing="10m")) is None
    drain.state = RemediationState.cancelled
    session.flush()
    reboot = detected(session, h0, ["reboot"])
    assert safety.SpacingGate().check(admission(session, reboot, caps={"rack": 5}, spacing="1m")) is None
    assert safety.SpacingGate().check(admission(session, reboot, caps={"rack": 5}, spacing="10m")) == (
        "spacing: a disruptive start in rack r1 120s ago (spacing 600s)"
    )


def test_approval(session: Session) -> None:
    h0 = host(session)
    reboot = detected(session, h0, ["reboot"])
    assert safety.ApprovalGate().check(admission(session, reboot, rule())) is None
    asks = rule(safety=RuleSafety(cooldown=0, settle=0, requires_approval=True))
    assert safety.ApprovalGate().check(admission(session, reboot, asks)) == safety.APPROVAL_REASON
    reboot.state = RemediationState.cancelled
    session.flush()
    reimage = detected(session, h0, ["reimage"])
    assert safety.ApprovalGate().check(admission(session, reimage, None)) == safety.APPROVAL_REASON  # destructive
    assert safety.APPROVAL_REASON == "waiting for approval: the plan includes a destructive action"
    reimage.approved_by = "user:bob"
    assert safety.ApprovalGate().check(admission(session, reimage, rule())) is None


def test_approve_is_the_one_approver_and_refuses_what_it_cannot_approve(session: Session) -> None:
    h0 = host(session)
    rs = RuleSet(rules=[rule(["reimage"])], safety=PackSafety(spacing=0))
    with pytest.raises(NotFound, match="remediation 999999 does not exist"):
        planning.approve(session, 999999, actor="user:bob", ruleset=rs, now=T0)
    waiting = detected(session, h0, ["reimage"], rs.rules[0])
    with pytest.raises(Conflict, match="is detected, not awaiting approval"):
        planning.approve(session, waiting.id, actor="user:bob", ruleset=rs, now=T0)
    assert planning.admit(session, waiting, rs, T0) is False
    assert (waiting.state, waiting.held_reason) == (RemediationState.awaiting_approval, safety.APPROVAL_REASON)
    planning.approve(session, waiting.id, actor="user:bob", ruleset=rs, now=T0)
    assert (waiting.state, waiting.approved_by, waiting.held_reason) == (RemediationState.planned, "user:bob", "")
