"""A kernel rollout halts on a side effect its canary shows and the hosts not yet upgraded do not (seed 001:
the first patched erratum-298 build reported ~22 Msec of cputime), through the real ingest path: one
ticket for the kernel's owners with the comparison, and the rest of the class left alone. Noise on both
sides halts nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import host_evaluation, rollouts
from remediator.baselines import parse_baselines
from remediator.decisions import SYSTEM
from remediator.ingest import ingest
from remediator.models import Host, Remediation, RemediationState, Rollout, RolloutState, StepState
from remediator.rules import load_ruleset
from tests.builders.reports import T0
from tests.builders.rollouts import opteron_report, opterons
from ticketing.models import Ticket

RULES = load_ruleset([])
RULE = "errata-unpatched-kernel"
CLASS = "legacy-opteron-8356"
STOCK, FIRST_BUILD = "2.6.16.60-0.21-smp", "2.6.23.17-amdpatch"
# The class configured with the first patched build, as INFN had it before the cputime bug showed.
BASELINES = f"""
version: 1
classes:
  {CLASS}:
    kernels:
      AMD-298: {{release: "{FIRST_BUILD}"}}
"""


@pytest.fixture(autouse=True)
def first_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: parse_baselines(BASELINES))


def upgrade_canary(session: Session, at: dt.datetime) -> tuple[Remediation, str]:
    """The canary's install_kernel went through; it is being verified on the new build."""
    remediation = session.scalars(select(Remediation).where(Remediation.rule_id == RULE)).one()
    for step in remediation.steps:
        step.state, step.finished_at = StepState.succeeded, at
    remediation.state, remediation.settle_until = RemediationState.verifying, at + dt.timedelta(days=1)
    session.flush()
    return remediation, session.get_one(Host, remediation.host_id).hostname


def planned_hosts(session: Session) -> list[str]:
    query = select(Host.hostname).join(Remediation, Remediation.host_id == Host.id).where(Remediation.rule_id == RULE)
    return sorted(set(session.scalars(query)))  # the canary may have its escalation too


def test_a_cputime_side_effect_on_the_canary_halts_the_rollout_with_one_ticket(session: Session) -> None:
    names = opterons(session)
    ingest(session, [opteron_report(n, T0) for n in names], ruleset=RULES)
    rollout = session.scalars(select(Rollout)).one()
    assert (rollout.change, rollout.part_type, rollout.hardware_class) == (f"kernel {FIRST_BUILD}", "kernel", CLASS)
    assert len(planned_hosts(session)) == 1
    _, canary = upgrade_canary(session, T0 + dt.timedelta(minutes=10))
    others = [n for n in names if n != canary]

    later = T0 + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(canary, later, kernel=FIRST_BUILD, flagged=2)], ruleset=RULES)
    ingest(session, [opteron_report(n, later) for n in others], ruleset=RULES)
    rollouts.evaluate(session, RULES, later + dt.timedelta(minutes=1))

    session.refresh(rollout)
    assert rollout.state == RolloutState.halted
    assert rollout.halted_by == SYSTEM
    [cputime] = [r for r in rollout.comparison if r["signal"] == "cputime_exceeds_elapsed"]
    assert cputime["halt"]
    assert {k: cputime["upgraded"][k] for k in ("checked", "showing", "examples")} == {
        "checked": 1,
        "showing": 1,
        "examples": [canary],
    }
    assert cputime["support"] == "none"  # one canary: Fisher's p is 0.1, a precaution, not a significant difference
    assert (cputime["not_upgraded"]["checked"], cputime["not_upgraded"]["showing"]) == (9, 0)
    tickets = session.scalars(select(Ticket).where(Ticket.part_type == "kernel", Ticket.part == rollout.change)).all()
    assert [t.id for t in tickets] == [rollout.ticket_id]
    [ticket] = tickets
    assert ticket.hostname == canary
    assert ticket.priority == 2
    assert ticket.title.startswith(f"Rollout of kernel {FIRST_BUILD} on {CLASS} halted: cputime_exceeds_elapsed")
    assert ticket.evidence["rollout"]["id"] == rollout.id
    assert any(r["signal"] == "cputime_exceeds_elapsed" and r["halt"] for r in ticket.evidence["comparison"])
    assert "one host, no statistical support" in ticket.title
    judged = ticket.evidence["statistical_support"]
    assert judged.startswith("none: cputime_exceeds_elapsed: 1 upgraded and 9 not yet upgraded hosts compared")
    assert judged.endswith("an operator should judge whether the change caused it.")

    # The rest of the class keeps its kernel: nobody else gets the build, however often they fire.
    ingest(session, [opteron_report(n, T0 + dt.timedelta(days=3)) for n in others], ruleset=RULES)
    assert planned_hosts(session) == [canary]
    rollouts.evaluate(session, RULES, T0 + dt.timedelta(days=3, minutes=1))
    assert session.scalars(select(Ticket.id).where(Ticket.part == rollout.change)).all() == [rollout.ticket_id]


def test_noise_on_both_sides_halts_nothing(session: Session) -> None:
    names = opterons(session, 12)
    ingest(session, [opteron_report(n, T0) for n in names], ruleset=RULES)
    _, canary = upgrade_canary(session, T0 + dt.timedelta(minutes=10))
    others = [n for n in names if n != canary]
    later = T0 + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(canary, later, kernel=FIRST_BUILD)], ruleset=RULES)
    # two old hosts show the anomaly (a clock oddity, a restored checkpoint), the canary does not
    ingest(session, [opteron_report(n, later, flagged=1 if i < 2 else 0) for i, n in enumerate(others)], ruleset=RULES)
    rollouts.evaluate(session, RULES, later + dt.timedelta(minutes=1))
    rollout = session.scalars(select(Rollout)).one()
    assert rollout.state == RolloutState.running
    [cputime] = [r for r in rollout.comparison if r["signal"] == "cputime_exceeds_elapsed"]
    assert not cputime["halt"]
    assert cputime["not_upgraded"]["showing"] == 2
    assert session.scalars(select(Ticket).where(Ticket.part == rollout.change)).first() is None


def test_an_operator_resumes_and_older_evidence_no_longer_counts(session: Session) -> None:
    names = opterons(session)
    ingest(session, [opteron_report(n, T0) for n in names], ruleset=RULES)
    _, canary = upgrade_canary(session, T0 + dt.timedelta(minutes=10))
    later = T0 + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(canary, later, kernel=FIRST_BUILD, flagged=1)], ruleset=RULES)
    ingest(session, [opteron_report(n, later) for n in names if n != canary], ruleset=RULES)
    rollouts.evaluate(session, RULES, later)
    rollout = session.scalars(select(Rollout)).one()
    assert rollout.state == RolloutState.halted
    resumed_at = later + dt.timedelta(hours=1)
    rollouts.resume(session, rollout.id, actor="user:olga", reason="the jobs were a checkpoint restore", now=resumed_at)
    rollouts.evaluate(session, RULES, resumed_at + dt.timedelta(minutes=1))
    assert rollout.state == RolloutState.running
    with pytest.raises(Exception, match="not halted or paused"):
        rollouts.resume(session, rollout.id, actor="user:olga", reason="again", now=resumed_at)


def test_the_comparison_halts_what_no_side_effect_rule_watches(session: Session) -> None:
    rule = RULES.get(RULE)
    assert rule is not None
    assert rule.safety.rollout is not None
    unwatched = rule.safety.rollout.model_copy(update={"side_effects": []})
    quiet = rule.model_copy(update={"safety": rule.safety.model_copy(update={"rollout": unwatched})})
    ruleset = RULES.model_copy(update={"rules": [quiet if r.id == RULE else r for r in RULES.rules]})
    names = opterons(session)
    ingest(session, [opteron_report(n, T0) for n in names], ruleset=ruleset)
    remediation, canary = upgrade_canary(session, T0 + dt.timedelta(minutes=10))
    later = T0 + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(canary, later, kernel=FIRST_BUILD, flagged=1)], ruleset=ruleset)
    ingest(session, [opteron_report(n, later) for n in names if n != canary], ruleset=ruleset)
    rollout = session.scalars(select(Rollout)).one()
    assert rollout.state == RolloutState.running
    assert remediation.state == RemediationState.verifying
    assert rollouts.evaluate(session, ruleset, later + dt.timedelta(minutes=1))["halted"] == 1
    assert rollout.state == RolloutState.halted
    assert rollout.halt_reason == (
        f"side effect on kernel {FIRST_BUILD}: cputime_exceeds_elapsed: on 1 of 1 upgraded hosts and none of the 9 "
        "not yet upgraded: one host, no statistical support (Fisher p 0.1 > 0.01): halted as a precaution, not a "
        "significant difference; an operator should judge"
    )
    assert remediation.state == RemediationState.verifying  # the upgraded canary keeps its kernel: no rollback
    assert session.get_one(Ticket, rollout.ticket_id).hostname == canary
