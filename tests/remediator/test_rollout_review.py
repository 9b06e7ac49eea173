"""What an operator's review of the rollout comparison asked for, through the real ingest path (seed 001, the
erratum-298 kernel): the same observation time on both sides, an old side without hosts on a withdrawn
build, and a patched kernel that must bring the class to its expected score before the rollout goes past its
canary, which a corrected rebuild over a patched class does with no gain (and a class without one: not judged)."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator import host_evaluation, rollouts
from remediator.baselines import parse_baselines
from remediator.ingest import ingest
from remediator.models import Decision, Host, Remediation, RemediationState, Rollout, RolloutState, StepState
from remediator.rules import Comparison, RuleSet, load_ruleset
from tests.builders.reports import T0
from tests.builders.rollouts import opteron_report, opterons
from ticketing.models import Ticket

RULES = load_ruleset([])
RULE = "errata-unpatched-kernel"
CLASS = "legacy-opteron-8356"
STOCK, WITHDRAWN, PATCHED = "2.6.16.60-0.21-smp", "2.6.23.17-amdpatch", "2.6.23.17-amdpatch2"
BASELINES = f"""
version: 1
classes:
  {CLASS}:
    kernels:
      AMD-298:
        release: "{PATCHED}"
        withdrawn: {{"{WITHDRAWN}": "the cputime bug (INFN/CCR-11/01)"}}
"""
BENCH = "fleetfix-cpumem-v1"


@pytest.fixture(autouse=True)
def baselines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: parse_baselines(BASELINES))


def quiet_rules() -> RuleSet:
    """The default pack without the rollout's side-effect rules: only the comparison can halt it."""
    rule = RULES.get(RULE)
    assert rule is not None
    assert rule.safety.rollout is not None
    unwatched = rule.safety.rollout.model_copy(update={"side_effects": []})
    quiet = rule.model_copy(update={"safety": rule.safety.model_copy(update={"rollout": unwatched})})
    return RULES.model_copy(update={"rules": [quiet if r.id == RULE else r for r in RULES.rules]})


def upgrade_canary(session: Session, at: dt.datetime, *, succeeded: bool = False) -> str:
    """The canary's install_kernel went through (and, `succeeded`, its verification too)."""
    remediation = session.scalars(select(Remediation).where(Remediation.rule_id == RULE)).one()
    for step in remediation.steps:
        step.state, step.finished_at = StepState.succeeded, at
    if succeeded:
        remediation.state, remediation.finished_at, remediation.active = RemediationState.succeeded, at, None
    else:
        remediation.state, remediation.settle_until = RemediationState.verifying, at + dt.timedelta(days=1)
    session.flush()
    return session.get_one(Host, remediation.host_id).hostname


def planned(session: Session) -> list[str]:
    query = select(Host.hostname).join(Remediation, Remediation.host_id == Host.id).where(Remediation.rule_id == RULE)
    return sorted(set(session.scalars(query)))


def cputime_result(rollout: Rollout) -> dict:
    [found] = [r for r in rollout.comparison if r["signal"] == "cputime_exceeds_elapsed"]
    return found


def test_old_hosts_are_looked_at_over_the_upgraded_hosts_time_not_the_whole_bake(session: Session) -> None:
    ruleset = quiet_rules()
    names = opterons(session, 10)
    ingest(session, [opteron_report(n, T0) for n in names], ruleset=ruleset)
    # two old hosts showed the anomaly early in the bake, before the canary was upgraded, and not since
    early = T0 + dt.timedelta(minutes=2)
    canary_to_be = planned(session)[0]
    others = [n for n in names if n != canary_to_be]
    ingest(
        session, [opteron_report(n, early, flagged=1 if i < 2 else 0) for i, n in enumerate(others)], ruleset=ruleset
    )
    canary = upgrade_canary(session, T0 + dt.timedelta(hours=6))
    later = T0 + dt.timedelta(hours=8)
    ingest(session, [opteron_report(canary, later, kernel=PATCHED, flagged=1)], ruleset=ruleset)
    ingest(session, [opteron_report(n, later) for n in others], ruleset=ruleset)
    now = later + dt.timedelta(minutes=1)
    rollouts.evaluate(session, ruleset, now)

    rollout = session.scalars(select(Rollout)).one()
    cputime = cputime_result(rollout)
    assert (cputime["not_upgraded"]["checked"], cputime["not_upgraded"]["showing"]) == (9, 0)
    assert cputime["halt"]
    # the canary has had 2 h 1 min since its change; so has each old host: not the 8 h since the bake began
    assert cputime["upgraded"]["host_hours"] == pytest.approx(2.02, abs=0.01)
    assert cputime["not_upgraded"]["host_hours"] == pytest.approx(9 * 2.02, abs=0.05)
    assert rollout.state == RolloutState.halted


def test_old_hosts_on_a_withdrawn_build_do_not_dilute_the_old_side(session: Session) -> None:
    ruleset = quiet_rules()
    names = opterons(session, 8)
    stock, withdrawn = names[:6], names[6:]
    # the stock hosts first: the canary is one of them
    ingest(session, [opteron_report(n, T0) for n in stock], ruleset=ruleset)
    ingest(session, [opteron_report(n, T0, kernel=WITHDRAWN, flagged=1) for n in withdrawn], ruleset=ruleset)
    canary = upgrade_canary(session, T0 + dt.timedelta(minutes=10))
    assert canary in stock
    later = T0 + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(canary, later, kernel=PATCHED, flagged=1)], ruleset=ruleset)
    ingest(session, [opteron_report(n, later) for n in stock if n != canary], ruleset=ruleset)
    # they already show the side effect the new build brings back: 1 of 1 against 2 of 7 would be p 0.375
    ingest(session, [opteron_report(n, later, kernel=WITHDRAWN, flagged=1) for n in withdrawn], ruleset=ruleset)
    rollouts.evaluate(session, ruleset, later + dt.timedelta(minutes=1))

    rollout = session.scalars(select(Rollout)).one()
    cputime = cputime_result(rollout)
    side = cputime["not_upgraded"]
    assert (side["checked"], side["showing"]) == (5, 0)
    assert side["excluded"] == 2
    assert side["excluded_examples"] == [f"{n}: {WITHDRAWN} is withdrawn" for n in withdrawn]
    assert cputime["halt"]
    assert cputime["support"] == "none"  # one canary: 1 of 1 against 0 of 5 is p 1/6
    assert rollout.state == RolloutState.halted
    ticket = session.get_one(Ticket, rollout.ticket_id)
    assert "one host, no statistical support (Fisher p 0.17 > 0.01)" in ticket.title
    assert "an operator should judge" in ticket.evidence["statistical_support"]


def expecting(monkeypatch: pytest.MonkeyPatch, *, release: str = PATCHED, expected: float | None = 3.65) -> None:
    """The class's baselines with its expected benchmark score (None: the class configures none) and `release`
    as its erratum build (the first patched build withdrawn)."""
    performance = f"\n    performance: {{expected: {{{BENCH}: {expected}}}}}" if expected is not None else ""
    text = BASELINES.replace(f'release: "{PATCHED}"', f'release: "{release}"') + performance
    monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: parse_baselines(text))


STOCK_SCORES = [1.66, 1.733, 1.798, 1.70, 1.75, 1.68, 1.72, 1.79]  # the BIOS workaround (Tabelle 1 and 4)
PATCHED_SCORES = [3.727, 3.70, 3.56, 3.68, 3.62, 3.75, 3.66, 3.71]  # patched hosts, 3.4-3.9 (Tabelle 1 and 4)
NEXT_BUILD = "2.6.23.17-amdpatch3"


def scored_class(
    session: Session,
    ruleset: RuleSet,
    canary_score: float,
    *,
    kernel: str = STOCK,
    scores: list[float] = STOCK_SCORES,
    to: str = PATCHED,
) -> tuple[Rollout, str, list[str]]:
    """Eight Opterons on `kernel` scoring `scores` per core per GHz; the canary gets the build `to`, succeeds,
    and scores `canary_score` a day later (after its bake), the others their own again."""
    names = opterons(session, 8)
    ingest(
        session,
        [opteron_report(n, T0, kernel=kernel, score=s) for n, s in zip(names, scores, strict=True)],
        ruleset=ruleset,
    )
    canary = upgrade_canary(session, T0 + dt.timedelta(minutes=30), succeeded=True)
    others = [(n, s) for n, s in zip(names, scores, strict=True) if n != canary]
    after_bake = T0 + dt.timedelta(days=1, hours=1)
    ingest(session, [opteron_report(canary, after_bake, kernel=to, score=canary_score)], ruleset=ruleset)
    ingest(session, [opteron_report(n, after_bake, kernel=kernel, score=s) for n, s in others], ruleset=ruleset)
    return session.scalars(select(Rollout)).one(), canary, [n for n, _ in others]


NOW = T0 + dt.timedelta(days=1, hours=1, minutes=1)


def expectation_of(rollout: Rollout, expect: str = "expected") -> dict:
    [found] = [r for r in rollout.comparison if r.get("expect") == expect]
    return found


def next_wave(session: Session, ruleset: RuleSet, others: list[str], kernel: str, score: float) -> list[str]:
    """The hosts planned once the hosts not yet upgraded report again after the comparison."""
    ingest(session, [opteron_report(n, NOW, kernel=kernel, score=score) for n in others], ruleset=ruleset)
    return planned(session)


def test_stock_to_the_patched_kernel_reaches_the_expected_score_and_goes_past_its_canary(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    expecting(monkeypatch)
    rollout, canary, others = scored_class(session, RULES, 3.727)  # 2.6.23.17 with AMD's patch (Tabella 4)
    # the canary has baked, but the wave waits for the comparison to confirm the class performs as expected
    assert planned(session) == [canary]
    held = session.scalars(select(Decision.reason).where(Decision.rule_id == RULE, Decision.outcome == "held")).all()
    assert any("the expected performance of benchmark_score is not confirmed (not compared yet)" in r for r in held)
    rollouts.evaluate(session, RULES, NOW)
    found = expectation_of(rollout)
    assert (found["gain"], found["halt"], rollout.state) == ("met", False, RolloutState.running)
    assert found["why"].startswith(f"median 3.727 of 1 upgraded against {CLASS}'s expected 3.65 {BENCH} (+2.1%")
    assert len(next_wave(session, RULES, others, STOCK, 1.7)) == 2  # wave 2 started


@pytest.mark.parametrize("old", [WITHDRAWN, PATCHED])
def test_the_corrected_rebuild_over_a_patched_class_goes_on_without_a_gain(
    session: Session, monkeypatch: pytest.MonkeyPatch, old: str
) -> None:
    """The source's second step: the corrected build over the first patched one (withdrawn: no host is left on
    the old side), and the demo's: a rebuild over the corrected build (the old side scores as the canary)."""
    to = PATCHED if old == WITHDRAWN else NEXT_BUILD
    expecting(monkeypatch, release=to)
    rollout, _, others = scored_class(session, RULES, 3.70, kernel=old, scores=PATCHED_SCORES, to=to)
    rollouts.evaluate(session, RULES, NOW)
    assert (expectation_of(rollout)["gain"], rollout.state) == ("met", RolloutState.running)
    assert not any(r["halt"] for r in rollout.comparison)
    assert len(next_wave(session, RULES, others, old, 3.7)) == 2


def test_a_build_that_leaves_the_workaround_on_halts_at_its_canary_with_one_ticket(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    expecting(monkeypatch)
    rollout, canary, others = scored_class(session, RULES, 1.70)  # the TLB still off: 1.66 before, 1.70 after
    rollouts.evaluate(session, RULES, NOW)
    found = expectation_of(rollout)
    assert (found["gain"], found["halt"]) == ("missing", True)
    assert rollout.state == RolloutState.halted
    assert rollout.halt_reason.startswith(f"no gain from kernel {PATCHED}: benchmark_score: median 1.7 of 1 upgraded")
    assert rollout.halt_reason.endswith(
        "(-53.4%; at least 2.92, 80% of it, expected): the change did not bring the expected performance"
    )
    [ticket] = session.scalars(select(Ticket).where(Ticket.part == rollout.change)).all()
    assert (ticket.id, ticket.hostname, ticket.part_type) == (rollout.ticket_id, canary, "kernel")
    assert "the change did not bring the expected performance" in ticket.title
    assert ticket.evidence["expected_gain"].startswith("missing: benchmark_score: median 1.7")
    ingest(session, [opteron_report(n, NOW + dt.timedelta(days=2), score=1.7) for n in others], ruleset=RULES)
    assert planned(session) == [canary]  # the rollout never went past its canary


def test_a_class_without_an_expected_score_is_not_judged_and_goes_on(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    expecting(monkeypatch, expected=None)
    rollout, _, others = scored_class(session, RULES, 1.70)  # would have halted against an expected score
    rollouts.evaluate(session, RULES, NOW)
    found = expectation_of(rollout)
    assert (found["gain"], found["halt"], rollout.state) == ("not judged", False, RolloutState.running)
    assert found["why"] == (
        f"{CLASS} has no expected benchmark_score configured (firmware_baselines.yaml, performance.expected): "
        "not judged"
    )
    assert len(next_wave(session, RULES, others, STOCK, 1.7)) == 2


def better_rules() -> RuleSet:
    """The default pack with `expect: better` (+50 %) in place of `expect: expected` on the errata rollout."""
    rule = RULES.get(RULE)
    assert rule is not None
    assert rule.safety.rollout is not None
    better = Comparison(signal="benchmark_score", measure="median", worse="lower", expect="better", min_change="50%")
    compare = [better if c.expect == "expected" else c for c in rule.safety.rollout.compare]
    rollout = rule.safety.rollout.model_copy(update={"compare": compare})
    changed = rule.model_copy(update={"safety": rule.safety.model_copy(update={"rollout": rollout})})
    return RULES.model_copy(update={"rules": [changed if r.id == RULE else r for r in RULES.rules]})


def test_expect_better_with_no_host_left_on_the_old_side_is_not_judged_not_a_wait_for_ever(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    ruleset = better_rules()
    expecting(monkeypatch)
    # every other host runs the withdrawn first build: left out of the old side, nothing to be better than
    rollout, _, others = scored_class(session, ruleset, 3.70, kernel=WITHDRAWN, scores=PATCHED_SCORES)
    rollouts.evaluate(session, ruleset, NOW)
    found = expectation_of(rollout, "better")
    assert (found["gain"], found["halt"]) == ("not judged", False)
    assert found["not_upgraded"]["excluded"] == 7
    assert found["why"].endswith("the gain cannot be compared, not judged")
    assert len(next_wave(session, ruleset, others, WITHDRAWN, 3.7)) == 2


def test_a_resume_does_not_waive_the_expected_performance(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    expecting(monkeypatch)
    rollout, canary, others = scored_class(session, RULES, 1.70)
    rollouts.evaluate(session, RULES, NOW)
    assert rollout.state == RolloutState.halted
    resumed = NOW + dt.timedelta(hours=1)
    rollouts.resume(session, rollout.id, actor="olga", reason="the build is the right one", now=resumed)
    # the canary's score since the resume is judged a whole bake after it, not at once: the next wave waits
    ingest(
        session, [opteron_report(canary, resumed + dt.timedelta(minutes=5), kernel=PATCHED, score=1.70)], ruleset=RULES
    )
    rollouts.evaluate(session, RULES, resumed + dt.timedelta(minutes=10))
    found = expectation_of(rollout)
    assert (found["gain"], found["halt"], rollout.state) == (None, False, RolloutState.running)
    assert found["why"].endswith("decided once every upgraded host has baked")
    later = resumed + dt.timedelta(minutes=20)
    ingest(session, [opteron_report(n, later, score=1.7) for n in others], ruleset=RULES)
    assert planned(session) == [canary]
    held = session.scalars(select(Decision.reason).where(Decision.rule_id == RULE, Decision.outcome == "held")).all()
    assert any("the expected performance of benchmark_score is not confirmed (median 1.7" in r for r in held)
    # a bake after the resume the same score is judged again: halted again, on the same open ticket
    rollouts.evaluate(session, RULES, resumed + dt.timedelta(days=1, minutes=1))
    assert (expectation_of(rollout)["gain"], rollout.state) == ("missing", RolloutState.halted)
    [ticket] = session.scalars(select(Ticket).where(Ticket.part == rollout.change)).all()
    assert ticket.id == rollout.ticket_id
