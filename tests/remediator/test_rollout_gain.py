"""`expect: expected`: a rollout's upgraded hosts judged against their class's expected benchmark score, on
seed 001's figures (INFN/CCR-11/01, HEP-SPEC06 per core per GHz)."""

from __future__ import annotations

import pytest

from remediator.rollout_compare import Sides, verdict
from remediator.rollout_gain import Expectation
from remediator.rules import Comparison, load_ruleset

CLASS = "legacy-opteron-8356"
EXPECTED = Comparison(signal="benchmark_score", measure="median", worse="lower", expect="expected", min_change="20%")
OPTERON = Expectation(CLASS, "fleetfix-cpumem-v1", 3.65, "INFN/CCR-11/01 Tabella 1")
PATCHED = [3.727, 3.70, 3.69]  # Tabella 4's patched kernel, and hosts like it
WORKAROUND = [1.66, 1.733, 1.798]  # the BIOS workaround (Tabelle 1 and 4)


def baked(upgraded: list[float], others: list[float], *, done: bool = True) -> Sides:
    return Sides(
        {f"new-{i}": v for i, v in enumerate(upgraded)}, {f"old-{i}": v for i, v in enumerate(others)}, baked=done
    )


def test_stock_to_patched_reaches_the_expected_score() -> None:
    result = verdict(EXPECTED, baked([3.727], WORKAROUND), OPTERON)
    assert (result["gain"], result["halt"]) == ("met", False)
    assert result["expected_score"] == {
        "benchmark": "fleetfix-cpumem-v1",
        "score": 3.65,
        "within": 0.2,
        "limit": 2.92,
        "source": "INFN/CCR-11/01 Tabella 1",
    }
    assert result["why"] == (
        f"median 3.727 of 1 upgraded against {CLASS}'s expected 3.65 fleetfix-cpumem-v1 (+2.1%; at least 2.92, "
        "80% of it, expected): the class performs as expected"
    )


def test_patched_to_the_corrected_rebuild_goes_on_without_a_gain_or_an_old_side() -> None:
    # the source's second step: the corrected build over the first patched one, 3.7 before and after
    assert verdict(EXPECTED, baked([3.70], PATCHED), OPTERON)["gain"] == "met"
    # every other host on the withdrawn first build: no old side at all
    alone = verdict(EXPECTED, baked([3.70], []), OPTERON)
    assert (alone["gain"], alone["halt"]) == ("met", False)


def test_a_build_that_leaves_the_workaround_on_halts() -> None:
    for score in (1.70, 2.013):  # the workaround; 2.6.32.12 without AMD's patch (Tabella 4)
        result = verdict(EXPECTED, baked([score], WORKAROUND), OPTERON)
        assert (result["gain"], result["halt"]) == ("missing", True)
        assert result["why"].endswith("the change did not bring the expected performance")
    assert verdict(EXPECTED, baked([1.70], WORKAROUND), OPTERON)["change"] == pytest.approx(1.7 / 3.65 - 1, abs=1e-4)


def test_the_healthy_spread_passes_and_the_verdict_waits_for_the_bake() -> None:
    assert verdict(EXPECTED, baked([3.382, 3.4], []), OPTERON)["gain"] == "met"  # the seed's lowest healthy host
    waiting = verdict(EXPECTED, baked([1.70], WORKAROUND, done=False), OPTERON)
    assert (waiting["gain"], waiting["halt"]) == (None, False)
    assert waiting["why"].endswith("decided once every upgraded host has baked")
    none_yet = verdict(EXPECTED, baked([], WORKAROUND), OPTERON)
    assert (none_yet["gain"], none_yet["halt"]) == (None, False)
    assert none_yet["why"].startswith("no upgraded host has a fleetfix-cpumem-v1 score since its change")


def test_a_class_without_an_expected_score_is_not_judged() -> None:
    result = verdict(EXPECTED, baked([1.70], WORKAROUND), Expectation(CLASS))
    assert (result["gain"], result["halt"]) == ("not judged", False)
    assert result["why"] == (
        f"{CLASS} has no expected benchmark_score configured (firmware_baselines.yaml, performance.expected): "
        "not judged"
    )
    assert result["expected_score"]["score"] is None


def test_the_pack_format_and_the_errata_rollout() -> None:
    with pytest.raises(ValueError, match="expect: expected compares medians"):
        Comparison(signal="benchmark_score", expect="expected")
    with pytest.raises(ValueError, match="judges benchmark_score"):
        Comparison(signal="kernel_event_count", measure="median", expect="expected")
    with pytest.raises(ValueError, match="min_change below 100%"):
        Comparison(signal="benchmark_score", measure="median", expect="expected", min_change="100%")
    rule = load_ruleset([]).get("errata-unpatched-kernel")
    assert rule is not None
    assert rule.safety.rollout is not None
    [gain] = [c for c in rule.safety.rollout.compare if c.expect != "no_worse"]
    assert (gain.signal, gain.measure, gain.worse, gain.expect, gain.min_change) == (
        "benchmark_score",
        "median",
        "lower",
        "expected",
        0.2,
    )
