"""What a rollout's change is for, judged on its upgraded hosts: a `compare` entry with `expect: expected` or
`expect: better` (remediator/rollout_compare.py gathers the sides; docs/rules.md, "Rollouts").

- **expected** (a benchmark_score median): once every upgraded host has baked, their median must reach the
  class's expected score (remediator/firmware_baselines.yaml, `performance.expected`) within `min_change`
  (worse: lower, at least `expected * (1 - min_change)`), else the rollout halts. That is what seed 001
  checked: after the patched kernel the Opteron 8356 class scored "in line with" the B3 CPUs and the B2 hosts
  without the BIOS workaround (INFN/CCR-11/01, Tabella 4 against Tabella 1), and its conclusion is
  performance in line with the project's (section 5), not merely better than before. It needs no hosts on the
  old release, so the source's second step (the corrected build over the first patched one, a sign check that
  brings no gain: both keep the TLB on) goes on, as does a class already patched once. A class without an
  expected score for the benchmark is **not judged**, and says so.
- **better** (a median): the upgraded median must beat the not-yet-upgraded one by `min_change`. Without
  `min_baseline` old hosts with a value once decided (every host upgraded or on a withdrawn release), it is
  **not judged**.

A verdict is decided once every upgraded host has baked and the window is a whole bake (a resume shortens it:
the scores since the resume are judged a bake later, so a resume does not waive the check). Until then the
next wave waits (remediator/rollouts.py, `gain_unconfirmed`); `met` and `not judged` let it go, `missing`
halts it. Without any upgraded host's score the next wave waits: nothing about the change is known yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.host_evaluation import baselines_of
from remediator.models import Host
from remediator.rollout_stats import mann_whitney_less, median
from remediator.rules import Comparison

EXPECTATIONS = ("better", "expected")
MET, MISSING, NOT_JUDGED = "met", "missing", "not judged"
LETS_GO = (MET, NOT_JUDGED)  # the next wave may start on these


@dataclass(frozen=True)
class Expectation:
    """The class's expected score for the compared benchmark (score None: the class configures none)."""

    hardware_class: str
    benchmark: str | None = None
    score: float | None = None
    source: str | None = None


def expectation(session: Session, hardware_class: str, spec: Comparison) -> Expectation:
    """The class's expected score of the benchmark the entry names (its `subject_pattern`; without one, the
    first by name the class expects), from the baselines in force (the built-in file, the operator's over it)."""
    host = session.scalars(select(Host).where(Host.hardware_class == hardware_class).order_by(Host.id).limit(1)).first()
    baseline = baselines_of(host).for_class(hardware_class) if host is not None else None
    performance = baseline.performance if baseline is not None else None
    if performance is None:
        return Expectation(hardware_class)
    names = sorted(n for n in performance.expected if not spec.subject_pattern or spec.subject_pattern in n)
    if not names:
        return Expectation(hardware_class)
    return Expectation(hardware_class, names[0], performance.expected[names[0]], performance.source)


def _limit(spec: Comparison, score: float) -> float:
    return score * (1 - spec.min_change) if spec.worse == "lower" else score * (1 + spec.min_change)


def expected_verdict(
    spec: Comparison, result: dict[str, Any], ups: list[float], decided: bool, expected: Expectation
) -> dict[str, Any]:
    """expect: expected — the upgraded median within `min_change` of the class's expected score, once baked."""
    score = expected.score
    limit = _limit(spec, score) if score is not None else None
    result.update(
        gain=None,
        expected_score={
            "benchmark": expected.benchmark,
            "score": score,
            "within": spec.min_change,
            "limit": round(limit, 4) if limit is not None else None,
            "source": expected.source,
        },
    )
    if score is None or limit is None:
        which = f" matching {spec.subject_pattern!r}" if spec.subject_pattern else ""
        result.update(
            gain=NOT_JUDGED,
            why=f"{expected.hardware_class} has no expected {spec.signal}{which} configured "
            "(firmware_baselines.yaml, performance.expected): not judged",
        )
        return result
    if not ups:
        result["why"] = f"no upgraded host has a {expected.benchmark} score since its change: decided once they have"
        return result
    up_median = median(ups)
    change = (up_median - score) / score
    bound = (
        f"at least {limit:.4g}, {1 - spec.min_change:.0%}"
        if spec.worse == "lower"
        else f"at most {limit:.4g}, {1 + spec.min_change:.0%}"
    )
    moved = (
        f"median {up_median:.4g} of {len(ups)} upgraded against {expected.hardware_class}'s expected {score:.4g} "
        f"{expected.benchmark} ({change:+.1%}; {bound} of it, expected)"
    )
    result["change"] = round(change, 4)
    reached = up_median >= limit if spec.worse == "lower" else up_median <= limit
    if not decided:
        result["why"] = f"{moved}: decided once every upgraded host has baked"
    elif reached:
        result.update(gain=MET, why=f"{moved}: the class performs as expected")
    else:
        result.update(gain=MISSING, halt=True, why=f"{moved}: the change did not bring the expected performance")
    return result


def better_verdict(
    spec: Comparison, result: dict[str, Any], ups: list[float], downs: list[float], decided: bool
) -> dict[str, Any]:
    """expect: better — the upgraded median better than the others' by `min_change`, once baked."""
    if len(downs) < spec.min_baseline:
        needed = f"at least {spec.min_baseline} needed"
        counted = f"{len(downs)} hosts not yet upgraded have a value in the window ({needed})"
        if decided:
            result.update(gain=NOT_JUDGED, why=f"{counted}: the gain cannot be compared, not judged")
        else:
            result["why"] = f"{counted}: decided once every upgraded host has baked"
        return result
    sign = 1.0 if spec.worse == "lower" else -1.0  # oriented so that higher is better
    up, down = [sign * v for v in ups], [sign * v for v in downs]
    up_median, down_median = median(up), median(down)
    gain = (up_median - down_median) / abs(down_median) if down_median else 0.0
    p = mann_whitney_less(down, up)  # that the old side tends to be worse: shown, not required
    result.update(test="Mann-Whitney U, one-sided", p_value=round(p, 6), change=round(gain, 4))
    medians = (
        f"median {result['upgraded']['median']:.4g} of {len(ups)} upgraded vs "
        f"{result['not_upgraded']['median']:.4g} of {len(downs)} not yet upgraded"
    )
    moved = f"{medians} ({gain:+.1%}; at least +{spec.min_change:.0%} expected)"
    if not decided:
        result["why"] = f"{moved}: decided once every upgraded host has baked"
    elif gain >= spec.min_change:
        result.update(gain=MET, why=f"{moved}: the expected gain")
    else:
        result.update(gain=MISSING, halt=True, why=f"{moved}: the change did not bring the expected gain")
    return result
