"""The fast backtest gives the hits of the host-by-host replay it replaced, on a simulated fleet's history.

The history is stored through the real ingest into a PostgreSQL database of this module's own (committed:
the replay's worker processes read it on their own connections): a simulated fleet with faults on half its
hosts, so the default pack fires several rules; repeats of some hosts' states (a report that says what the
previous one said, stored as a repeat on its row); and one host whose correctable errors stop, so a
windowed rule and a `for` rule go on being judged from their kept samples and timers on reports that carry
no signal of theirs (what the fast replay's rule narrowing must not skip).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from checker.sim import SimulatedFleet
from core.db import Database
from migrations import upgrade
from remediator.backtest import BacktestResult, backtest
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.rules import RuleSet, load_ruleset
from tests.builders.backtest_reference import reference_backtest
from tests.builders.reports import edac_report
from tests.conftest import RUN_ID, _create_database, _drop_database

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
ROUNDS = 14
PACK = """\
version: 1
rules:
  - id: ce-seen-in-5m
    description: any DIMM CE rate within the last five minutes (a window outliving the errors)
    when: {signal: dimm_ce_rate, op: ">=", value: 1, window: 5m}
    plan: [{action: ticket}]
  - id: ce-held-2m
    description: a CE rate of 1/s held for two minutes (a timer)
    when: {signal: dimm_ce_rate, op: ">=", value: 1, for: 2m}
    plan: [{action: ticket}]
"""


def at(minutes: float) -> dt.datetime:
    return START + dt.timedelta(minutes=minutes)


def store_history(url: str) -> None:
    fleet = SimulatedFleet(36, seed=5, fault_fraction=0.5)
    database = Database(url, pool_size=1)
    with database.session() as session:
        apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="test")
    quiet = load_ruleset([], include_default=False)
    for n in range(ROUNDS):
        reports = fleet.reports(at(n))
        # every third host says the same again 20 s later: a repeat on the stored row, not a new row
        again = [r.model_copy(update={"report_id": uuid.uuid4(), "captured_at": at(n + 1 / 3)}) for r in reports[::3]]
        with database.session() as session:
            ingest(session, reports + again, ruleset=quiet, now=at(n + 0.5))
        # a host whose errors grow for four minutes, then stop; its machine id (read by no deriver) moves, so
        # each report is a new stored state and the replay sees every minute, not just a repeat's first and last
        window = edac_report("bt-window", ce=100 * min(n, 4) * 60, at=at(n))
        window = window.model_copy(update={"host": window.host.model_copy(update={"machine_id": f"m{n}"})})
        with database.session() as session:
            ingest(session, [window], ruleset=quiet, now=at(n))
    database.dispose()


@pytest.fixture(scope="module")
def history_url() -> Iterator[str]:
    name = f"fleetfix_backtest_{RUN_ID}"
    url = _create_database(name)
    upgrade(url)
    store_history(url)
    yield url
    _drop_database(name)


@pytest.fixture(scope="module")
def ruleset(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    pack = tmp_path_factory.mktemp("packs") / "pack.yaml"
    pack.write_text(PACK)
    return load_ruleset([Path(pack)])


def hits_of(result: BacktestResult) -> list[tuple[object, ...]]:
    return [(h.rule_id, h.hostname, h.first_at, h.last_at, h.firings, h.subject, h.peak) for h in result.hits]


@pytest.mark.parametrize("since", [at(-60), at(ROUNDS / 2)], ids=["all", "second-half"])
@pytest.mark.parametrize("workers", [1, 2])
def test_same_hits_as_the_host_by_host_replay(
    history_url: str, ruleset: RuleSet, since: dt.datetime, workers: int
) -> None:
    database = Database(history_url, pool_size=1)
    with database.sessionmaker() as session:
        reference = reference_backtest(session, ruleset, since)
    with database.sessionmaker() as session:
        fast = backtest(session, ruleset, since, workers=workers)
    database.dispose()
    assert (fast.hosts, fast.rows, fast.reports) == (reference.hosts, reference.rows, reference.reports)
    assert hits_of(fast) == hits_of(reference)
    # the comparison means something: the history replays repeats and fires several rules
    assert reference.reports > reference.rows
    assert len({h.rule_id for h in reference.hits}) >= 5


def test_kept_samples_and_timers_are_judged_on_reports_without_their_signal(history_url: str, ruleset: RuleSet) -> None:
    """bt-window's errors stop at minute 4; its window rule keeps firing from the samples it kept until they
    age out, on reports that carry no dimm_ce_rate at all, and its timer is reset by the first such report."""
    database = Database(history_url, pool_size=1)
    with database.sessionmaker() as session:
        result = backtest(session, ruleset, at(-60))
    database.dispose()
    grouped = {(h.rule_id, h.hostname): h for h in result.hits}
    window = grouped[("ce-seen-in-5m", "bt-window")]
    assert (window.first_at, window.last_at) == (at(1), at(9))  # the last rate at minute 4, kept for 5 minutes
    held = grouped[("ce-held-2m", "bt-window")]
    assert (held.first_at, held.last_at) == (at(3), at(4))  # held from minute 1: fires at 3 and 4, then resets
