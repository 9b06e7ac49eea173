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


def _evaluate(r: Rule, signals: list[SignalValue], memory: dict[str, Any], minute: int) -> list[tuple[str, float]]:
    fired = evaluate(
        [r],
        signals,
        hardware_class="c",
        datacenter="dc",
        labels={},
        memory=memory,
        now=T0 + dt.timedelta(minutes=minute),
    )
    return [(f.signal.subject, f.signal.value) for f in fired]


def port_rule(**when: Any) -> Rule:
    return Rule(
        id="ports",
        description="d",
        when=Condition.model_validate({"signal": "nic_link_flaps", "op": ">=", "value": 3, **when}),
        plan=[Step(action="ticket", params={"part_type": "nic"})],
    )


def test_a_rule_about_devices_fires_for_each_device_in_one_report_worst_first() -> None:
    """Two ports flapping in one report are two faults: firing on the worst alone lost the other, whose events
    the next report does not repeat. A port below the threshold does not fire."""
    signals = [
        SignalValue("nic_link_flaps", "eth0", 4),
        SignalValue("nic_link_flaps", "eth1", 9),
        SignalValue("nic_link_flaps", "eth2", 1),
    ]
    assert _evaluate(port_rule(), signals, {}, 0) == [("eth1", 9), ("eth0", 4)]


def test_a_host_wide_rule_still_fires_once_on_its_highest_signal() -> None:
    """A rule whose ticket is the host's (its subjects are views of one fault) fires once per report."""
    r = Rule(
        id="irqs",
        description="d",
        when=Condition.model_validate({"signal": "isolated_cpu_irq_rate", "op": ">=", "value": 10}),
        plan=[Step(action="ticket", params={"part_type": "host"})],
    )
    signals = [SignalValue("isolated_cpu_irq_rate", "cpu2", 50), SignalValue("isolated_cpu_irq_rate", "cpu3", 80)]
    assert _evaluate(r, signals, {}, 0) == [("cpu3", 80)]


def test_a_fixed_ticket_part_makes_a_device_rule_fire_once() -> None:
    """`part: host` (the heat rules) keys one ticket for the host: one firing, on the highest."""
    r = Rule(
        id="hot",
        description="d",
        when=Condition.model_validate({"signal": "nvme_temperature_warning", "op": ">=", "value": 1}),
        plan=[Step(action="ticket", params={"part_type": "airflow", "part": "host"})],
    )
    signals = [SignalValue("nvme_temperature_warning", "nvme0", 1), SignalValue("nvme_temperature_warning", "nvme1", 2)]
    assert _evaluate(r, signals, {}, 0) == [("nvme1", 2)]


def test_each_device_has_its_own_for_timer() -> None:
    """eth0 holds from minute 0, eth1 from minute 2: with `for: 3m` eth0 fires at minute 3, eth1 at 5; a device
    that stops holding loses its timer, the other keeps its own."""
    r, memory = port_rule(**{"for": "3m"}), {}
    both = [SignalValue("nic_link_flaps", "eth0", 5), SignalValue("nic_link_flaps", "eth1", 5)]
    assert _evaluate(r, both[:1], memory, 0) == []
    assert _evaluate(r, both[:1], memory, 1) == []
    assert _evaluate(r, both, memory, 2) == []
    assert _evaluate(r, both, memory, 3) == [("eth0", 5)]
    assert _evaluate(r, both, memory, 4) == [("eth0", 5)]
    assert _evaluate(r, both[1:], memory, 5) == [("eth1", 5)]  # eth0 stopped: its timer is dropped
    assert set(memory["rules"]["ports"]["since_by"]) == {"eth1"}
    assert _evaluate(r, both, memory, 6) == [("eth1", 5)]  # eth0 starts again from minute 6


def test_a_timer_kept_from_before_goes_to_the_device_it_was_timing() -> None:
    """Memory written when every rule fired once (entry["since"]) keeps timing the worst device after the
    upgrade: the rule fires on it as it would have, and the other device starts its own timer."""
    r = port_rule(**{"for": "3m"})
    memory: dict[str, Any] = {"rules": {"ports": {"since": T0.isoformat()}}}
    both = [SignalValue("nic_link_flaps", "eth0", 5), SignalValue("nic_link_flaps", "eth1", 9)]
    assert _evaluate(r, both, memory, 3) == [("eth1", 9)]
    assert "since" not in memory["rules"]["ports"]
    assert _evaluate(r, both, memory, 6) == [("eth1", 9), ("eth0", 5)]


def test_a_windowed_device_rule_fires_for_each_device_over_its_own_aggregate() -> None:
    """Windows aggregate per device (never two disks added together) and each device that holds fires."""
    r = Rule(
        id="disks",
        description="d",
        when=Condition.model_validate(
            {"signal": "smart_reallocated_growth", "op": ">=", "value": 10, "window": "1h", "aggregate": "sum"}
        ),
        plan=[Step(action="ticket", params={"part_type": "disk"})],
    )
    memory: dict[str, Any] = {}
    growth = [SignalValue("smart_reallocated_growth", d, 6) for d in ("sda", "sdb")]
    growth.append(SignalValue("smart_reallocated_growth", "sdc", 1))
    assert _evaluate(r, growth, memory, 0) == []
    fired = _evaluate(r, growth, memory, 10)
    assert fired == [("sda", 12), ("sdb", 12)]  # sdc's 2 does not hold; ties by name


def test_which_default_rules_fire_per_device() -> None:
    """A rule's tickets say what it is about: nvme-temperature's is the host's airflow (one ticket for a hot
    chassis's drives, not one per drive: review r1, finding 2), the GPU slowdown rules' one ticket for the host's
    GPUs (`part: host`); DIMM, GPU fault, port, disk and CXL rules fire per device."""
    from remediator.parts import fires_per_device
    from remediator.rules import DEFAULT_PACK, load_pack

    pack = {r.id: r for r in load_pack(DEFAULT_PACK).rules}
    once = {"nvme-temperature", "gpu-temperature-slowdown", "gpu-hardware-slowdown", "isolated-core-irqs"}
    each = {"dimm-ce-ppr", "gpu-xid-reset", "nic-carrier-flapping", "disk-smart-failing", "cxl-device-down"}
    assert {rule_id for rule_id in once | each if fires_per_device(pack[rule_id])} == each
