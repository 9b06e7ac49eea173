"""The tests a rollout's comparison uses, exact and small (no SciPy in the dependencies).

- Fisher's exact test, one-sided, on hosts with and without a signal on each side (a 2x2 table):
  the hypergeometric tail of the upgraded side's count given both margins (R. A. Fisher, Statistical
  Methods for Research Workers, 1934, §21.02; the same p as scipy.stats.fisher_exact(alternative=
  "greater")).
- The Mann-Whitney U test, one-sided, on scores: exact from the Gaussian binomial coefficient
  (the number of arrangements of m and n values with U pairs in order is the coefficient of q^U in
  [m+n choose m]_q; H. B. Mann, D. R. Whitney, Ann. Math. Statist. 18(1), 1947), and from the normal
  approximation with continuity correction past EXACT_PAIRS pairs. Ties count half a pair; the exact
  tail is read at the floor of U, which only makes it larger (conservative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

EXACT_PAIRS = 40_000  # m*n up to this: exact (the polynomial has m*n+1 terms, built in m passes)


def fisher_greater(showing: int, checked: int, others_showing: int, others_checked: int) -> float:
    """P(the first side has `showing` or more of the hosts with the signal), both margins fixed.

    The one-sided p of Fisher's exact test that the first side shows the signal more often."""
    if not (0 <= showing <= checked and 0 <= others_showing <= others_checked):
        raise ValueError("counts must lie between 0 and the number of hosts checked")
    total, with_signal = checked + others_checked, showing + others_showing
    denominator = math.comb(total, checked)
    tail = sum(
        math.comb(with_signal, x) * math.comb(total - with_signal, checked - x)
        for x in range(showing, min(with_signal, checked) + 1)
    )
    return tail / denominator


def _u_counts(m: int, n: int) -> list[int]:
    """How many of the C(m+n, m) arrangements give each U = 0 … m*n (coefficients of [m+n choose m]_q)."""
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, m + 1):
        step = n + i
        for degree in range(size - 1, step - 1, -1):  # times (1 - q^(n+i))
            poly[degree] -= poly[degree - step]
        for degree in range(i, size):  # divided by (1 - q^i)
            poly[degree] += poly[degree - i]
    return poly


def pairs_below(first: Sequence[float], second: Sequence[float]) -> float:
    """U: pairs (x of first, y of second) with x < y, ties counting half."""
    return sum(1.0 if x < y else 0.5 if x == y else 0.0 for x in first for y in second)


def mann_whitney_less(first: Sequence[float], second: Sequence[float]) -> float:
    """One-sided p that the first sample's values tend to be lower than the second's."""
    m, n = len(first), len(second)
    if m == 0 or n == 0:
        return 1.0
    u = pairs_below(first, second)
    if m * n > EXACT_PAIRS:
        sigma = math.sqrt(m * n * (m + n + 1) / 12)
        z = (u - m * n / 2 - 0.5) / sigma
        return 0.5 * math.erfc(z / math.sqrt(2))
    counts = _u_counts(min(m, n), max(m, n))  # U's distribution is the same for (m, n) and (n, m)
    at_least = math.floor(u)
    return sum(counts[at_least:]) / math.comb(m + n, m)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
