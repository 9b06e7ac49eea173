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
    ("mode", "kernel", "wanted", "supported", "balancing"),
    [
        (0, "6.1.0-28-amd64", 2, True, "off"),  # turned off: the pack tickets it (cxl-numa-balancing-off)
        (1, "5.18.0", 3, True, "normal"),  # the only state the pack writes to
        (1, "5.15.0-91-generic", 3, False, "normal"),
        (1, "2.6.32-754.el6.x86_64", 3, False, "normal"),
        (1, None, 3, None, "normal"),
        (None, "6.1.0", 2, False, "absent"),  # no sysctl: a kernel built without NUMA balancing
    ],
)
def test_numa_balancing_without_the_tiering_bit(
    mode: int | None, kernel: str | None, wanted: int, supported: bool | None, balancing: str
) -> None:
    (found,) = of(
        tier_signals(tiers(1, weights={}, numa_balancing=mode), kernel, None, "x"), "numa_balancing_tiering_off"
    )
    assert (found.detail["current"], found.detail["wanted"], found.detail["supported"]) == (mode, wanted, supported)
    assert found.detail["balancing"] == balancing


def test_a_host_whose_kernel_sets_the_weights_itself_is_left_alone() -> None:
    """weighted_interleave/auto=true (Linux 6.16 on): neither a mismatch with the class nor the 1:1 default."""
    for auto, configured in ((True, CONFIGURED.for_class("cxl-a")), (True, None)):
        state = tiers(1, weights={"0": 1, "1": 1}).model_copy(update={"interleave_auto": auto})
        assert tier_signals(state, "6.16.0", configured, "cxl-a") == []
    manual = tiers(1, weights={"0": 1, "1": 1}).model_copy(update={"interleave_auto": False})
    assert [s.kind for s in tier_signals(manual, "6.16.0", CONFIGURED.for_class("cxl-a"), "cxl-a")] == [
        "interleave_weights_mismatch"
    ]


def test_the_mismatch_says_the_weights_are_per_node_and_what_share_goes_to_cxl() -> None:
    """Two DRAM nodes and one CXL node at the class's 4:1 per node: 4/4/1 sends 1/9 to CXL, not 1/5."""
    state = tiers(1, weights={"0": 1, "1": 1, "2": 1})
    state.nodes.insert(1, state.nodes[0].model_copy(update={"node": 1}))
    state.nodes[2] = state.nodes[2].model_copy(update={"node": 2})
    (found,) = tier_signals(state, "6.9.0", CONFIGURED.for_class("cxl-a"), "cxl-a")
    assert found.detail["configured"] == {"0": 4, "1": 4, "2": 1}
    assert found.detail["cxl_share_pct"] == 11.1
    assert "per-node" in found.detail["meaning"]


def test_numa_balancing_with_the_bit_or_without_a_cxl_node_says_nothing() -> None:
    for mode in (2, 3):
        assert tier_signals(tiers(1, weights={}, numa_balancing=mode), "6.1.0", None, "x") == []
    assert tier_signals(tiers(0, weights={}, numa_balancing=0), "6.1.0", None, "x") == []
    assert kernel_has_tiering_mode("6.10.0") is True
    assert kernel_has_tiering_mode("5.9.0") is False
