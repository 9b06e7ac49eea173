"""Rule evaluation: thresholds, `for` durations and windows, kept in host memory."""

from __future__ import annotations

import datetime as dt
from typing import Any

from remediator.evaluate import evaluate
from remediator.rules import Condition, Rule, Selector, Step
from remediator.signals import SignalValue

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def rule(**when: Any) -> Rule:
    return Rule(
        id="r",
        description="d",
        when=Condition.model_validate({"signal": "dimm_ce_rate", "op": ">=", "value": 10, **when}),
        plan=[Step(action="ticket")],
    )


def run(r: Rule, values: list[float | None], *, every_s: int = 60, **host: Any) -> list[bool]:
    memory: dict[str, Any] = {}
    out = []
    for i, value in enumerate(values):
        signals = [] if value is None else [SignalValue("dimm_ce_rate", "DIMM_A1", value)]
        fired = evaluate(
            [r],
            signals,
            hardware_class=host.get("hardware_class", "c"),
            datacenter=host.get("datacenter", "dc"),
            labels=host.get("labels", {}),
            memory=memory,
            now=T0 + dt.timedelta(seconds=i * every_s),
        )
        out.append(bool(fired))
    return out


def test_threshold() -> None:
    assert run(rule(), [5, 10, 9.9, 50, None]) == [False, True, False, True, False]


def test_for_needs_the_condition_to_hold_that_long() -> None:
    assert run(rule(**{"for": "3m"}), [20, 20, 20, 20, 20]) == [False, False, False, True, True]
    assert run(rule(**{"for": "3m"}), [20, 20, 20, 5, 20, 20, 20, 20]) == [
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        True,
    ]


def test_window_aggregates() -> None:
    # 4 spikes of 3 within a 10-minute window: the sum reaches 12 on the fourth.
    r = rule(window="10m", aggregate="sum")
    assert run(r, [3, None, 3, None, 3, 3]) == [False, False, False, False, False, True]
    # count of sightings
    r = rule(window="5m", aggregate="count", value=3)
    assert run(r, [1, 1, None, None, None, None, None, 1, 1, 1]) == [
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        True,
    ]


def test_a_window_aggregates_each_subject_apart() -> None:
    """Errors on several cores (or sectors on several disks) are not one part's: 6 + 6 + 6 on three
    cores is no core at 18; 18 on one core is, and the firing names that core with its own detail."""
    r = rule(window="1d", aggregate="sum", value=18)
    memory: dict[str, Any] = {}

    def at(minute: int, *signals: SignalValue) -> list[Any]:
        return evaluate(
            [r],
            list(signals),
            hardware_class="c",
            datacenter="dc",
            labels={},
            memory=memory,
            now=T0 + dt.timedelta(minutes=minute),
        )

    spread = [SignalValue("dimm_ce_rate", f"cpu{n}", 6.0, {"scope": "core", "cpu": n}) for n in (3, 4, 5)]
    assert at(0, *spread) == []
    assert at(1, SignalValue("dimm_ce_rate", "cpu5", 6.0, {"scope": "core", "cpu": 5})) == []
    (fired,) = at(2, SignalValue("dimm_ce_rate", "cpu5", 6.0, {"scope": "core", "cpu": 5}))
    assert (fired.signal.subject, fired.signal.value) == ("cpu5", 18.0)
    assert fired.signal.detail["cpu"] == 5
    assert (fired.signal.detail["aggregate"], fired.signal.detail["samples"]) == ("sum", 3)


def test_selector() -> None:
    r = Rule(
        id="r",
        description="d",
        when=Condition(signal="dimm_ce_rate", value=10),
        selector=Selector(datacenter=["ams1"], labels={"role": "db"}),
        plan=[Step(action="ticket")],
    )
    assert run(r, [50], datacenter="ams1", labels={"role": "db"}) == [True]
    assert run(r, [50], datacenter="sjc2", labels={"role": "db"}) == [False]
    assert run(r, [50], datacenter="ams1", labels={"role": "web"}) == [False]


def test_memory_stays_bounded_and_clears() -> None:
    r = rule(window="1d", aggregate="count")
    memory: dict[str, Any] = {}
    for i in range(2000):
        evaluate(
            [r],
            [SignalValue("dimm_ce_rate", "A", 1)],
            hardware_class="c",
            datacenter="d",
            labels={},
            memory=memory,
            now=T0 + dt.timedelta(seconds=i),
        )
    assert len(memory["rules"]["r"]["samples"]) <= 256
    plain = rule()
    memory = {}
    evaluate([plain], [], hardware_class="c", datacenter="d", labels={}, memory=memory, now=T0)
    assert memory == {"rules": {}}
