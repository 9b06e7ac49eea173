"""The outlier judgement over real ingest: a score is judged on every report of the boot it was taken in, with
the class's median and MAD (floored at 2 % of the median), and not after a reboot."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import BenchmarkResult, HostIdentity, Observations, Report
from remediator import benchmarks
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Signal
from remediator.rules import load_ruleset

RULES = load_ruleset([])
T0 = dt.datetime(2026, 9, 1, 3, 0, tzinfo=dt.UTC)


def report(hostname: str, minute: int, *, score: float | None = None, boot: str = "b1") -> Report:
    at = T0 + dt.timedelta(minutes=minute)
    bench = None
    if score is not None:
        bench = BenchmarkResult(name="fleetfix-cpumem-v1", score=score, duration_s=0.1, ran_at=at)
    return Report(
        host=HostIdentity(hostname=hostname, boot_id=boot), captured_at=at, observations=Observations(benchmark=bench)
    )


def outliers(session: Session) -> list[tuple[str, float]]:
    rows = session.execute(
        select(Signal.report_id, Signal.value).where(Signal.kind == "benchmark_outlier").order_by(Signal.id)
    ).all()
    return [(str(r), v) for r, v in rows]


def test_judged_on_every_report_of_its_boot_and_not_after_a_reboot(session: Session) -> None:
    benchmarks.clear_cache()
    names = [f"c{i}" for i in range(6)]
    apply_inventory(session, [HostInventory(hostname=n, hardware_class="cls") for n in names], actor="test")
    slow = report("c0", 0, score=40.0)
    assert ingest(session, [slow], ruleset=RULES).accepted  # alone in its class so far: no judgement
    assert outliers(session) == []
    ingest(
        session,
        [report(n, 1, score=s) for n, s in zip(names[1:], [80.0, 80.5, 81.0, 79.5, 80.2], strict=True)],
        ruleset=RULES,
    )
    later = report("c0", 2)  # no new score: the kept one is judged now that the class has five more
    ingest(session, [later], ruleset=RULES)
    [(report_id, value)] = outliers(session)
    assert report_id == str(later.report_id)
    assert value == round(0.6745 * (80.1 - 40.0) / (0.02 * 80.1), 3)  # median 80.1; the MAD (0.5) under its floor
    ingest(session, [report("c0", 3, boot="b2")], ruleset=RULES)  # rebooted: the score predates this boot
    assert len(outliers(session)) == 1


def test_a_host_within_a_few_per_cent_is_no_outlier_even_in_a_tight_class(session: Session) -> None:
    benchmarks.clear_cache()
    names = [f"t{i}" for i in range(6)]
    apply_inventory(session, [HostInventory(hostname=n, hardware_class="tight") for n in names], actor="test")
    scores = [80.0, 80.0, 80.0, 80.0, 80.0, 77.0]  # MAD 0: the floor, not a division by zero
    ingest(session, [report(n, 0, score=s) for n, s in zip(names, scores, strict=True)], ruleset=RULES)
    assert outliers(session) == []


EXPECTING = """version: 1
classes:
  slow:
    performance:
      expected: {fleetfix-cpumem-v1: 3.65}
      source: simulated fleet
"""


def test_a_bad_expected_score_is_refused_with_its_file_and_line() -> None:
    from remediator.baselines import BaselinesError, parse_baselines

    bad = EXPECTING.replace("3.65", "-1")
    with pytest.raises(BaselinesError, match=r"^b\.yaml:5: classes\.slow\.performance\.expected\.fleetfix-cpumem-v1: "):
        parse_baselines(bad, "b.yaml")
    with pytest.raises(
        BaselinesError,
        match=r"^b\.yaml:5: classes\.slow\.performance\.expected\.fleetfix-cpumem-v1: Input should be a valid number",
    ):
        parse_baselines(EXPECTING.replace("3.65", "fast"), "b.yaml")
    with pytest.raises(BaselinesError, match=r"b\.yaml:6: classes\.slow\.performance\.expect: Extra"):
        parse_baselines(EXPECTING.replace("      source", "      expect: 1\n      source"), "b.yaml")


def test_a_slow_class_signals_once_on_its_lowest_host_and_not_when_at_its_expected_score(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remediator import host_evaluation
    from remediator.baselines import parse_baselines

    monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: parse_baselines(EXPECTING))
    benchmarks.clear_cache()
    names = [f"s{i}" for i in range(5)]
    apply_inventory(session, [HostInventory(hostname=n, hardware_class="slow") for n in names], actor="test")
    ingest(
        session,
        [report(n, 0, score=s) for n, s in zip(names, [1.66, 1.7, 1.73, 1.66, 1.68], strict=True)],
        ruleset=RULES,
    )
    ingest(session, [report(n, 1) for n in names], ruleset=RULES)  # every host's kept score judged again
    rows = session.execute(
        select(Host.hostname, Signal.subject, Signal.value)
        .join(Host, Host.id == Signal.host_id)
        .where(Signal.kind == "benchmark_class_below_expected")
    ).all()
    assert {(h, s) for h, s, _ in rows} == {("s0", "slow")}  # one host of the class carries it
    assert {v for _, _, v in rows} == {round(100 * (3.65 - 1.68) / 3.65, 1)}
    benchmarks.clear_cache()
    ingest(session, [report(n, 2, score=3.6) for n in names], ruleset=RULES)  # the class fixed: 1.4 % under
    benchmarks.clear_cache()  # (the cache lives a minute: the next report after it)
    ingest(session, [report(n, 3) for n in names], ruleset=RULES)
    later = select(Signal.id).where(
        Signal.kind == "benchmark_class_below_expected", Signal.observed_at == T0 + dt.timedelta(minutes=3)
    )
    assert session.execute(later).all() == []
    at_first = select(Signal.id).where(
        Signal.kind == "benchmark_class_below_expected", Signal.observed_at == T0 + dt.timedelta(minutes=1)
    )
    assert len(session.execute(at_first).all()) == 1  # the same query finds the slow class's
