"""The outlier judgement over real ingest: a score is judged on every report of the boot it was taken in, with
the class's median and MAD (floored at 2 % of the median), and not after a reboot."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import BenchmarkResult, HostIdentity, Observations, Report
from remediator import benchmarks
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Signal
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
