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
    assert result["why"] == "on 1 of 1 upgraded hosts and none of the 9 not yet upgraded"
    assert result["test"] == "Fisher's exact, one-sided"
    assert result["p_value"] == pytest.approx(0.1)


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
    assert low["why"].endswith("every upgraded host worse than every other")
    assert not verdict(SCORE, sides([3.3], [3.38, 3.56, 3.73, 3.9, 3.5]))["halt"]  # lowest, but 7% below


def test_the_pack_format_takes_percentages_and_refuses_nonsense() -> None:
    assert SCORE.min_change == pytest.approx(0.1)
    with pytest.raises(ValueError, match="measure"):
        Comparison(signal="x", measure="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        Comparison(signal="x", alpha=0.7)
    assert issubclass(Comparison, RuleModel)
