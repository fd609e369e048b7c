"""Several intervals at once: the level each needs so that all hold together, the coverage
they have together, the largest of several figures, and how many misses chance gives across
many verdicts.

A course run judges about 130 figures, and some figures are made of several intervals: a
ratio of two separate runs' medians, the largest gap over five worker counts. Each interval
covers its figure with its own probability; all of them hold at once with a smaller one.

- **Bonferroni** (any dependence): ``k`` intervals at ``1 - (1 - level) / k`` each
  (:func:`joint_level`) all hold with probability at least ``level``;
  :func:`joint_coverage` gives ``1 - sum(1 - c_i)`` from their exact coverages.
- **Independent figures** (separate runs): all hold with the product of their coverages
  (``joint_coverage(..., independent=True)``).
- **A largest figure** (:func:`largest`): the interval from the largest low end to the
  largest high end holds whenever every figure's interval holds. A bootstrap misjudges an
  extreme (a resample cannot exceed the sample's own largest value).
- **Misses by chance** (:func:`chance_misses`): a true tolerance whose figure sits at its
  edge is reported missed with probability ``(1 - level) / 2``.

Usage::

    each = joint_level(5)                          # 0.98: five intervals, 90 % together
    gap = largest([median_interval(x, each) for x in gaps], absolute=True)
    joint_coverage([a, b], independent=True)       # two separate runs' medians, together
    chance_misses(130)                             # 6.5 misses at most from chance alone
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfkit._checks import check_level
from perfkit.estimate import LEVEL, Estimate

__all__ = ["chance_misses", "joint_coverage", "joint_level", "largest"]


def _check_estimates(estimates: object) -> None:
    """Raise unless ``estimates`` is a non-empty sequence of Estimates, each with a confidence
    level (an Estimate's coverage goes only with a level, so this holds its confidence too)."""
    if isinstance(estimates, (str, bytes)) or not hasattr(estimates, "__len__") or len(estimates) == 0:
        raise ValueError(f"estimates must be a non-empty list of Estimates, got {estimates!r}")
    for e in estimates:
        if not isinstance(e, Estimate):
            raise TypeError(f"estimates must hold perfkit.stats.Estimate, got {type(e).__name__}")
        if e.level is None:
            raise ValueError(f"estimates must each carry a confidence level, got {e.method!r} without one")


def joint_level(k: int, level: float = LEVEL) -> float:
    """The level each of ``k`` intervals needs so that all hold together with probability at
    least ``level``, whatever their dependence (Bonferroni): ``1 - (1 - level) / k``.

    Raises:
        ValueError: for ``k`` < 1 or ``level`` outside (0, 1).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    return 1 - (1 - check_level(level)) / k


def largest(estimates: Sequence[Estimate], absolute: bool = False) -> Estimate:
    """The largest of several figures (of their sizes, with ``absolute``), with an interval
    that holds whenever every figure's own interval holds: from the largest low end to the
    largest high end (for sizes: the largest distance of an interval from 0, to its largest
    size). Its level is Bonferroni's, ``1 - sum(1 - level_i)``: give each figure's interval
    at :func:`joint_level` of their count for a result at :data:`LEVEL`. Its text names the
    least exact coverage of the figures' intervals (an order-statistic interval covers at least
    the level asked: 7 samples asked at 98 % cover 98.4 %), from which the joint coverage it
    prints is computed.

    Raises:
        TypeError: for an entry that is not an :class:`Estimate`.
        ValueError: for no estimates, one without a confidence level, or levels whose
            Bonferroni sum leaves no confidence.
    """
    _check_estimates(estimates)
    level = 1 - sum(1 - e.level for e in estimates)
    if not 0 < level < 1:
        raise ValueError(f"estimates' levels must leave a joint confidence above 0, got {level:.3g}: "
                         "give each at joint_level(len(estimates))")
    size = abs if absolute else (lambda v: v)
    point = max(size(e.value) for e in estimates)
    k, n = len(estimates), min(e.n for e in estimates)
    what = f"largest {'size ' if absolute else ''}of {k} figures"
    if short := [e.needs for e in estimates if e.needs is not None]:
        return Estimate(point, point, point, level, n, what, needs=max(short))
    if absolute:
        lo = max(0.0 if e.low <= 0 <= e.high else min(abs(e.low), abs(e.high)) for e in estimates)
        hi = max(max(abs(e.low), abs(e.high)) for e in estimates)
    else:
        lo, hi = max(e.low for e in estimates), max(e.high for e in estimates)
    cover = joint_coverage(estimates)
    if lo == hi:
        return Estimate(point, point, point, level, n, f"the {what}, each without spread, equals",
                        coverage=cover)
    return Estimate(point, lo, hi, level, n, f"{what}, each at {min(e.confidence for e in estimates):.1%}",
                    coverage=cover)


def joint_coverage(estimates: Sequence[Estimate], independent: bool = False) -> float:
    """The least probability that every one of ``estimates``' intervals holds at once, from
    each one's :attr:`~perfkit.estimate.Estimate.confidence`: their product for
    ``independent`` figures (separate runs), else Bonferroni's ``1 - sum(1 - c_i)`` (any
    dependence; never below 0).

    Raises:
        TypeError, ValueError: for no estimates, an entry that is not an Estimate, or one
            without a confidence level.
    """
    _check_estimates(estimates)
    if independent:
        return math.prod(e.confidence for e in estimates)
    return max(0.0, 1 - sum(1 - e.confidence for e in estimates))


def chance_misses(n: int, level: float = LEVEL) -> float:
    """How many of ``n`` true predictions a ``level`` interval reports missed by chance alone.

    A tolerance is missed when the whole interval lies on one side of its edge; for a true
    prediction whose figure sits right at the edge that happens with probability
    ``(1 - level) / 2``, less when it sits inside. So this is an upper bound: ``n (1 - level) / 2``.
    A bound is missed when the point crosses it (:mod:`perfkit.verdict`): a true bound with
    room to spare is crossed only by noise larger than that room.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    return n * (1 - check_level(level)) / 2
