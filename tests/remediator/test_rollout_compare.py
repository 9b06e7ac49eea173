"""The comparison that halts a rollout: exact tests, the evidence floor, and which differences count."""

from __future__ import annotations

import itertools
import math

import pytest

from remediator.rollout_compare import Sides, verdict
from remediator.rollout_stats import fisher_greater, mann_whitney_less, pairs_below
from remediator.rules import Comparison, RuleModel

SHARE = Comparison(signal="cputime_exceeds_elapsed")
SCORE = Comparison(signal="benchmark_score", measure="median", worse="lower", min_change="10%")


def sides(upgraded: list[float | None], others: list[float | None]) -> Sides:
    return Sides({f"new-{i}": v for i, v in enumerate(upgraded)}, {f"old-{i}": v for i, v in enumerate(others)})


def test_fisher_matches_the_hypergeometric_tail() -> None:
    # 1 canary showing it, none of 9 others: only 1 in 10 ways to put the one case on the canary's side
    assert fisher_greater(1, 1, 0, 9) == pytest.approx(0.1)
    # 8 of 10 vs 2 of 40, summed by hand from the hypergeometric probabilities
    total = math.comb(50, 10)
    tail = sum(math.comb(10, x) * math.comb(40, 10 - x) for x in range(8, 11)) / total
    assert fisher_greater(8, 10, 2, 40) == pytest.approx(tail)
    with pytest.raises(ValueError, match="between 0 and the number of hosts checked"):
        fisher_greater(3, 2, 0, 5)


def test_mann_whitney_exact_matches_enumeration() -> None:
    first, second = [1.0, 2.5, 2.5], [2.0, 3.0, 4.0, 2.5]
    observed = pairs_below(first, second)
    values = first + second
    splits = list(itertools.combinations(range(len(values)), len(first)))
    at_least = sum(
        pairs_below([values[i] for i in s], [values[i] for i in range(len(values)) if i not in s])
        >= math.floor(observed)
        for s in splits
    )
    assert mann_whitney_less(first, second) == pytest.approx(at_least / len(splits))
    assert mann_whitney_less([1.0] * 300, [2.0] * 300) < 1e-6  # the normal approximation past EXACT_PAIRS


def test_one_canary_showing_what_no_old_host_shows_halts() -> None:
    result = verdict(SHARE, sides([2.0], [0.0] * 9))
    assert result["halt"]
    assert result["why"] == (
        "on 1 of 1 upgraded hosts and none of the 9 not yet upgraded: one host, no statistical support "
        "(Fisher p 0.1 > 0.01): halted as a precaution, not a significant difference; an operator should judge"
    )
    assert result["support"] == "none"
    assert result["test"] == "Fisher's exact, one-sided"
    assert result["p_value"] == pytest.approx(0.1)


def test_several_upgraded_hosts_showing_what_no_old_host_shows_is_significant() -> None:
    result = verdict(SHARE, sides([1.0, 2.0, 1.0], [0.0] * 10))
    assert result["halt"]
    assert result["support"] == "significant"
    assert result["why"] == "on 3 of 3 upgraded hosts and none of the 10 not yet upgraded: p 0.0035 ≤ 0.01"


def test_noise_on_both_sides_does_not_halt() -> None:
    assert not verdict(SHARE, sides([1.0, 0, 0, 0, 0], [1.0] * 4 + [0.0] * 36))["halt"]
    assert not verdict(SHARE, sides([1.0], [1.0] * 3 + [0.0] * 37))["halt"]  # p 0.098: one in ten by chance


def test_a_significant_difference_halts_even_when_old_hosts_show_some() -> None:
    result = verdict(SHARE, sides([1.0] * 8 + [0.0] * 2, [1.0] * 2 + [0.0] * 38))
    assert result["halt"]
    assert result["p_value"] < 0.01


def test_no_verdict_without_enough_old_hosts_or_any_upgraded_one() -> None:
    assert verdict(SHARE, sides([5.0], [0.0, 0.0]))["why"].startswith("2 hosts not yet upgraded reported")
    assert not verdict(SHARE, sides([5.0], [0.0, 0.0]))["halt"]
    assert verdict(SHARE, sides([], [0.0] * 9))["why"] == "no upgraded host has reported since its change"


def test_hosts_with_no_signal_count_as_not_showing_it() -> None:
    result = verdict(Comparison(signal="kernel_event_count", subject_pattern="panic"), sides([1.0], [None] * 5))
    assert result["halt"]
    assert result["not_upgraded"]["checked"] == 5


def test_a_score_far_below_every_old_host_halts_a_small_drop_does_not() -> None:
    # INFN: 1.66 HS06 per core per GHz with the BIOS fix, 3.4-3.9 on comparable hosts
    low = verdict(SCORE, sides([1.66], [3.38, 3.56, 3.73, 3.9, 3.5]))
    assert low["halt"]
    assert low["change"] == pytest.approx((3.56 - 1.66) / 3.56, abs=1e-3)
    assert low["why"].startswith("median 1.66 of 1 upgraded vs 3.56 of 5 (-53.4%): every upgraded host worse")
    assert "one host, no statistical support (Mann-Whitney p 0.17 > 0.01)" in low["why"]
    assert low["support"] == "none"
    many = verdict(SCORE, sides([1.66, 1.73, 1.70, 1.80], [3.38, 3.56, 3.73, 3.9, 3.5, 3.6]))
    assert (many["halt"], many["support"]) == (True, "significant")
    assert not verdict(SCORE, sides([3.3], [3.38, 3.56, 3.73, 3.9, 3.5]))["halt"]  # lowest, but 7% below


def test_the_pack_format_takes_percentages_and_refuses_nonsense() -> None:
    assert SCORE.min_change == pytest.approx(0.1)
    with pytest.raises(ValueError, match="measure"):
        Comparison(signal="x", measure="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        Comparison(signal="x", alpha=0.7)
    assert issubclass(Comparison, RuleModel)


GAIN = Comparison(signal="benchmark_score", measure="median", worse="lower", expect="better", min_change="50%")
# INFN/CCR-11/01 per core per GHz: 1.660, 1.733 (Tabella 1) and 1.798 (Tabella 4) with the BIOS workaround
WORKAROUND = [1.66, 1.733, 1.798]


def baked(upgraded: list[float], others: list[float], *, done: bool = True) -> Sides:
    found = sides(list(upgraded), list(others))
    found.baked = done
    return found


def test_a_patched_kernel_brings_the_expected_gain() -> None:
    result = verdict(GAIN, baked([3.727], WORKAROUND))  # 2.6.23.17 with AMD's patch (Tabella 4)
    assert (result["gain"], result["halt"]) == ("met", False)
    assert result["change"] == pytest.approx(3.727 / 1.733 - 1, abs=1e-3)
    assert result["why"].endswith("(+115.1%; at least +50% expected): the expected gain")


def test_a_kernel_that_leaves_the_workaround_on_brings_no_gain_and_halts() -> None:
    result = verdict(GAIN, baked([2.013], WORKAROUND))  # 2.6.32.12 without AMD's patch (Tabella 4): +16 %
    assert (result["gain"], result["halt"]) == ("missing", True)
    assert result["why"] == (
        "median 2.013 of 1 upgraded vs 1.733 of 3 not yet upgraded (+16.2%; at least +50% expected): "
        "the change did not bring the expected gain"
    )


def test_the_gain_is_decided_only_after_the_bake_and_on_enough_hosts() -> None:
    waiting = verdict(GAIN, baked([2.013], WORKAROUND, done=False))
    assert (waiting["gain"], waiting["halt"]) == (None, False)
    assert waiting["why"].endswith("decided once every upgraded host has baked")
    few = verdict(GAIN, baked([2.013], WORKAROUND[:2], done=False))
    assert (few["gain"], few["halt"]) == (None, False)
    assert verdict(GAIN, baked([], WORKAROUND))["gain"] is None  # nothing known of the change yet: it waits


def test_expect_better_without_old_hosts_is_not_judged_once_baked_never_a_wait_for_ever() -> None:
    # every other host of the class upgraded already or on a withdrawn release: nothing to be better than
    for others in ([], WORKAROUND[:2]):
        result = verdict(GAIN, baked([3.727], others))
        assert (result["gain"], result["halt"]) == ("not judged", False)
        assert result["why"] == (
            f"{len(others)} hosts not yet upgraded have a value in the window (at least 3 needed): the gain cannot "
            "be compared, not judged"
        )


def test_expect_better_is_a_median() -> None:
    with pytest.raises(ValueError, match="expect: better compares medians"):
        Comparison(signal="kernel_event_count", expect="better")
    assert Comparison(signal="x").expect == "no_worse"  # packs without it keep their meaning
