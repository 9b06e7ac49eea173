"""The agent's side of delta reports (checker.agent.wire_state): only a base the centre named, full when in doubt."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from checker.agent.wire_state import BACKOFF_S, REFUSALS_BEFORE_BACKOFF, WireState
from checker.schemas import Report
from checker.wire import SECTIONS, ReportDelta, SentState, rebuild, sent_state
from tests.builders.reports import T0, edac_report


def named(report: Report, hostname: str = "web-001") -> dict[str, Any]:
    """The centre's answer naming `report` as the host's stored state (IngestResult.bases)."""
    return {"bases": [{"hostname": hostname, "report_id": str(report.report_id)}]}


def cycle(
    agent: WireState, report: Report, answer: dict[str, Any] | None, *, took: bool = True
) -> dict[str, Any] | None:
    delta = agent.prepare(report)
    if took and delta is not None:
        agent.taken()
    if answer is not None:
        agent.answered(answer)
    agent.finish()
    return delta


def at(minutes: int, ce: int = 5) -> Report:
    return edac_report(ce=ce, at=T0 + dt.timedelta(minutes=minutes))


def test_no_delta_before_the_centre_names_a_base_nor_on_the_first_cycle() -> None:
    agent = WireState("web-001", path=None)
    first, second = at(0), at(1)
    assert cycle(agent, first, None) is None  # first cycle, and an answer without bases: an older centre
    assert cycle(agent, second, {"accepted": [str(second.report_id)]}) is None
    assert agent.base is None
    assert cycle(agent, at(2), named(second)) is None  # named now: the next one may be a delta
    third = at(3, ce=7)
    delta = cycle(agent, third, named(second))
    assert delta is not None
    assert rebuild(ReportDelta.model_validate(delta), second.model_dump(mode="json")) == third


def test_a_base_it_never_sent_or_another_hosts_is_not_taken() -> None:
    agent = WireState("web-001", path=None)
    cycle(agent, at(0), named(at(9)))  # a report id it does not hold
    assert agent.base is None
    mine = at(1)
    cycle(agent, mine, named(mine, hostname="web-002"))
    assert agent.base is None


def test_every_nth_cycle_goes_whole() -> None:
    agent = WireState("web-001", path=None, full_every=3)
    base = at(0)
    sent = [cycle(agent, base, named(base))]
    sent += [cycle(agent, at(n), named(base)) for n in range(1, 7)]
    assert [d is not None for d in sent] == [False, True, True, False, True, True, False]


def test_send_full_forgets_the_base() -> None:
    agent = WireState("web-001", path=None)
    base = at(0)
    cycle(agent, base, named(base))
    assert agent.prepare(at(1)) is not None
    agent.refused("HTTP 409: send_full")
    assert agent.base is None
    assert agent.prepare(at(2)) is None


def test_after_a_restart_the_first_report_is_whole_and_the_kept_base_serves_again(tmp_path: Path) -> None:
    path = tmp_path / "wire_base.json"
    agent = WireState("web-001", path=path)
    base = at(0)
    cycle(agent, base, named(base))
    assert path.exists()
    restarted = WireState("web-001", path=path)
    report = at(1)
    assert cycle(restarted, report, named(base)) is None  # whole; the centre still holds the old state
    assert restarted.base == sent_state(base)  # read back from the state directory
    assert restarted.prepare(at(2)) is not None


def test_the_bases_digests_and_values_are_kept_and_stored(tmp_path: Path) -> None:
    """A patch is relative to the base's values, so the agent keeps them (stage 1 kept digests only): the stored
    base is about the report's JSON, written only when the centre names another base."""
    path = tmp_path / "wire_base.json"
    agent = WireState("web-001", path=path)
    base = at(0)
    cycle(agent, base, named(base))
    stored = orjson.loads(path.read_bytes())
    assert set(stored) == {"report_id", "captured_at", "digests", "values", "host"}
    assert set(stored["digests"]) == set(stored["values"]) == set(SECTIONS)
    assert path.stat().st_size < 2 * len(orjson.dumps(base.model_dump(mode="json")))
    assert all(isinstance(kept, SentState) for kept in agent.known.values())
    written = path.stat().st_mtime_ns
    path.touch()
    os.utime(path, ns=(written - 10**9, written - 10**9))
    cycle(agent, at(1), named(base))  # the same base named again: nothing rewritten
    assert path.stat().st_mtime_ns == written - 10**9


def test_an_unreadable_kept_base_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "wire_base.json"
    path.write_text("{not json")
    agent = WireState("web-001", path=path)
    assert not agent.known


def test_deltas_off_means_always_whole_and_nothing_digested() -> None:
    agent = WireState("web-001", path=None, enabled=False)
    base = at(0)
    cycle(agent, base, named(base))
    assert agent.prepare(at(1)) is None
    assert agent.base is None
    assert not agent.known


def test_three_refusals_in_a_row_back_off_deltas_for_an_hour() -> None:
    """A centre (or proxy) that refuses every delta costs one extra POST per cycle for three cycles, then none
    for an hour; a delta taken in between starts the count again."""
    now = [0.0]
    agent = WireState("web-001", path=None, clock=lambda: now[0])
    minute = 0

    def refused_cycle() -> bool:
        nonlocal minute
        minute += 1
        report = at(minute, ce=minute)
        delta = agent.prepare(report)
        if delta is not None:
            agent.refused("HTTP 409: send_full")
        agent.answered(named(report))  # the whole report that followed is stored and named
        agent.finish()
        now[0] += 60
        return delta is not None

    first = at(0)
    cycle(agent, first, named(first))
    assert [refused_cycle() for _ in range(2)] == [True, True]
    cycle(agent, at(50, ce=50), named(at(0)))  # a base it no longer holds: whole
    report = at(51, ce=51)
    cycle(agent, report, named(report))
    assert cycle(agent, at(52, ce=52), None) is not None  # taken: the count starts again
    assert agent.refusals == 0
    assert [refused_cycle() for _ in range(3)] == [True, True, True]
    assert agent.backoff_until == pytest.approx(now[0] - 60 + BACKOFF_S)
    sent = [refused_cycle() for _ in range(59)]
    assert not any(sent)  # whole for the rest of the hour
    now[0] = agent.backoff_until or 0.0
    assert refused_cycle()  # then a delta again
    assert REFUSALS_BEFORE_BACKOFF == 3


def test_a_base_stored_without_values_sends_moved_sections_whole(tmp_path: Path) -> None:
    """A base kept by stage 1 (id, time and digests only) still serves: what moved goes whole, not patched."""
    path = tmp_path / "wire_base.json"
    base = at(0)
    path.write_bytes(
        orjson.dumps(sent_state(base).model_dump(mode="json", include={"report_id", "captured_at", "digests"}))
    )
    agent = WireState("web-001", path=path)
    cycle(agent, at(1), named(base))
    report = at(2, ce=9)
    delta = agent.prepare(report)
    assert delta is not None
    assert list(delta["changed"]) == ["edac"]
    assert delta["patched"] == {}
    assert delta["host"] == base.host.model_dump(mode="json")  # whole: the base's host is not known either
    assert rebuild(ReportDelta.model_validate(delta), base.model_dump(mode="json")) == report
