"""CXL tiers as TPP needs them: NUMA balancing's memory-tiering bit, and interleave weights from the hardware
class's configuration (validated with file:line), never a constant."""

from __future__ import annotations

import pytest

from remediator.baselines import BaselinesError, parse_baselines
from remediator.derive.tiers import kernel_has_tiering_mode, tier_signals
from tests.builders.observations import of, tiers

CONFIGURED = parse_baselines(
    "version: 1\nclasses:\n  cxl-a:\n    tiering:\n      interleave: {dram: 4, cxl: 1}\n      source: measured\n"
)


def test_a_bad_tiering_configuration_is_refused_with_its_line() -> None:
    text = "version: 1\nclasses:\n  cxl-a:\n    tiering:\n      interleave: {dram: 0, cxl: 1}\n"
    with pytest.raises(BaselinesError, match=r"^tiers\.yaml:5: classes\.cxl-a\.tiering\.interleave\.dram: "):
        parse_baselines(text, "tiers.yaml")
    with pytest.raises(BaselinesError, match=r"tiers\.yaml:5: classes\.cxl-a\.tiering\.interleave\.hbm: Extra"):
        parse_baselines(
            "version: 1\nclasses:\n  cxl-a:\n    tiering:\n      interleave: {dram: 4, cxl: 1, hbm: 2}\n", "tiers.yaml"
        )


@pytest.mark.parametrize(
    ("weights", "signal"),
    [
        ({"0": 1, "1": 1}, "interleave_weights_mismatch"),
        ({"0": 5, "1": 1}, "interleave_weights_mismatch"),  # 5:1 is not this class's ratio
        ({"0": 4, "1": 1}, None),
        ({}, None),  # a kernel without weighted interleave: nothing to set
    ],
)
def test_weights_are_judged_against_the_class(weights: dict[str, int], signal: str | None) -> None:
    found = tier_signals(tiers(1, weights=weights), "6.9.0", CONFIGURED.for_class("cxl-a"), "cxl-a")
    assert [s.kind for s in found] == ([signal] if signal else [])
    if signal:
        assert found[0].detail["configured"] == {"0": 4, "1": 1}
        assert found[0].detail["current"] == weights


def test_a_class_without_configuration_gets_only_the_known_bad_1_to_1() -> None:
    (found,) = tier_signals(tiers(1, weights={"0": 1, "1": 1}), "6.9.0", None, "cxl-b")
    assert (found.kind, found.detail["configured"], found.detail["hardware_class"]) == (
        "interleave_weights_default",
        False,
        "cxl-b",
    )
    assert tier_signals(tiers(1, weights={"0": 5, "1": 1}), "6.9.0", None, "cxl-b") == []  # no ratio assumed


@pytest.mark.parametrize(
    ("mode", "kernel", "wanted", "supported"),
    [
        (0, "6.1.0-28-amd64", 2, True),
        (1, "5.18.0", 3, True),
        (1, "5.15.0-91-generic", 3, False),
        (1, "2.6.32-754.el6.x86_64", 3, False),
        (1, None, 3, None),
        (None, "6.1.0", 2, False),  # no sysctl: a kernel built without NUMA balancing
    ],
)
def test_numa_balancing_without_the_tiering_bit(
    mode: int | None, kernel: str | None, wanted: int, supported: bool | None
) -> None:
    (found,) = of(
        tier_signals(tiers(1, weights={}, numa_balancing=mode), kernel, None, "x"), "numa_balancing_tiering_off"
    )
    assert (found.detail["current"], found.detail["wanted"], found.detail["supported"]) == (mode, wanted, supported)


def test_numa_balancing_with_the_bit_or_without_a_cxl_node_says_nothing() -> None:
    for mode in (2, 3):
        assert tier_signals(tiers(1, weights={}, numa_balancing=mode), "6.1.0", None, "x") == []
    assert tier_signals(tiers(0, weights={}, numa_balancing=0), "6.1.0", None, "x") == []
    assert kernel_has_tiering_mode("6.10.0") is True
    assert kernel_has_tiering_mode("5.9.0") is False
