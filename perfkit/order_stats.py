"""Distribution-free confidence intervals for a median, from order statistics (the sign test).

Sort ``n`` independent draws of any continuous distribution. Each draw falls below the
population median with probability 1/2, so the number below it is Binomial(n, 1/2), and the
``k``-th smallest and the ``k``-th largest draw bracket the median with probability

    coverage(n, k) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)

whatever the distribution (Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*,
3rd ed., sec. 3.6; the interval that inverts the sign test). With ties (discrete data) the
closed interval covers at least as often. It always holds the sample median, and it is exact
at any ``n``: no large-sample approximation, unlike a bootstrap, whose intervals over a
handful of repeats collapse onto one or two values ("0.501 to 0.501") and cover less than
they claim.

The price is a minimum ``n``: the widest interval, ``[min, max]``, covers with
``1 - 2 / 2**n``, so a two-sided 90 % interval needs ``n >= 5`` (93.8 %; four draws give
only 87.5 %), 95 % needs 6 and 99 % needs 8 (:func:`min_samples`).

Usage::

    min_samples(0.9)                             # 5
    median_bounds([1.2, 1.0, 1.1, 1.3, 0.9], 0.9)   # (0.9, 1.3, 1, 0.9375): k = 1, [min, max]
    sign_coverage(9, 2)                          # 0.961: [2nd smallest, 2nd largest] of 9
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfkit._checks import check_int, check_items, check_real

__all__ = ["median_bounds", "min_samples", "sign_coverage"]


def sign_coverage(n: int, k: int) -> float:
    """The probability that the ``k``-th smallest and ``k``-th largest of ``n`` independent
    draws bracket the median: ``1 - 2 P(Binomial(n, 1/2) <= k - 1)``, computed exactly.

    Raises:
        ValueError: for ``n`` < 1, or ``k`` outside ``1 <= k <= (n + 1) / 2`` (the ``k``-th
            smallest must not lie above the ``k``-th largest).
    """
    check_int("n", n, 1)
    check_int("k", k, 1, (n + 1) // 2)
    below = sum(math.comb(n, j) for j in range(k))  # outcomes with at most k - 1 draws below
    return 1.0 - 2.0 * below / 2.0 ** n


def min_samples(level: float) -> int:
    """The fewest draws whose ``[min, max]`` covers the median with probability ``level``:
    the smallest ``n`` with ``1 - 2 / 2**n >= level`` (5 at 90 %).

    Raises:
        ValueError: for ``level`` outside (0, 1).
    """
    check_real("level", level, 0, 1, lo_open=True, hi_open=True)
    n = 1
    while sign_coverage(n, 1) < level:
        n += 1
    return n


def median_bounds(xs: Sequence[float], level: float) -> tuple[float, float, int, float]:
    """The order-statistic interval of the median of ``xs`` at confidence ``level``.

    Picks the largest ``k`` (the narrowest symmetric pair: the ``k``-th smallest and ``k``-th
    largest value; an asymmetric pair can be narrower, and is not used) whose coverage is still
    ``>= level``.

    Args:
        xs: independent draws (finite numbers), at least :func:`min_samples` of ``level``.
        level: the confidence asked for, in (0, 1).

    Returns:
        ``(low, high, k, coverage)``: the ``k``-th smallest and ``k``-th largest value, and the
        interval's exact coverage (``>= level``).

    Raises:
        TypeError: if ``xs`` is not a list of numbers.
        ValueError: for a NaN or inf in ``xs``, ``level`` outside (0, 1), or fewer values
            than ``min_samples(level)``.
    """
    values = sorted(check_real("xs entries", x) for x in check_items("xs", xs))
    need = min_samples(level)
    n = len(values)
    if n < need:
        raise ValueError(f"xs must hold at least {need} values for a {level:.0%} interval of the "
                         f"median, got {n}")
    k = 1
    while k + 1 <= (n + 1) // 2 and sign_coverage(n, k + 1) >= level:
        k += 1
    return values[k - 1], values[n - k], k, sign_coverage(n, k)
