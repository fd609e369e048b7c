"""The course's statistics, in one place: quantiles, paired ratios, and the uncertainty of a
median, of a ratio, or of any figure, as an :class:`~perfkit.estimate.Estimate` that every
verdict is judged on.

One definition each, used by ``timing``, ``verdict``, ``profiling``, the jobs and the
notebooks alike:

- **quantile**: linear interpolation between order statistics (numpy's default, "type 7").
- **a median** (:func:`median_interval`), **a paired ratio** (:func:`median_ratio`: the median
  of the rounds' ratios ``a[i] / b[i]``, each pair timed back to back so it shared the
  machine's load) and **any figure computed per round** (:func:`per_round`): the
  distribution-free order-statistic interval (:mod:`perfkit.order_stats`). Its coverage is
  exact at any number of samples, and it always holds the median.
- **the ratio of two separate runs' medians**: each run's order-statistic interval at
  ``sqrt(level)`` (the runs are independent, so both hold together with probability
  ``level``), and the ratio of their far ends (:func:`of_medians` for any figure of several
  runs' medians).
- **a maximum or a largest gap** over several figures (:func:`largest`): each figure's
  interval at ``joint_level(k)`` (Bonferroni), and the largest of the ends. A bootstrap
  misjudges an extreme (a resample cannot exceed the sample's own largest value).
- **any other figure from many samples** (a share of sums over steps): a percentile
  bootstrap (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13), only from
  :data:`BOOTSTRAP_MIN` samples up, with a fixed seed and resample count.

**Minimum samples.** :data:`MIN_SAMPLES` (5) is the fewest samples (paired rounds, repeats)
that give an interval at :data:`LEVEL` (90 %): the widest order-statistic interval,
``[min, max]``, covers the median with ``1 - 2 / 2**n``, 93.8 % for 5 samples and only 87.5 %
for 4. With fewer, an estimate has no interval (``needs`` is set) and a verdict on it is
inconclusive; it says "3 samples, fewer than the 5 a 90% interval needs". Two separate runs
need 6 samples each (each at ``sqrt(0.9)`` = 94.9 %).

Every interval is at confidence :data:`LEVEL` or more. An order-statistic interval can only
end on a sample, so its coverage moves in steps with ``n``: the narrowest symmetric one (the
``k``-th smallest to the ``k``-th largest sample; an asymmetric pair can be narrower) reaching 90 %
covers 93.8 % at 5 samples, 98.4 % at 7 ([min, max]; the next pair in, 87.5 %) and 90.1 % at
30. The estimate carries that exact coverage (``Estimate.coverage``; for separate runs the
product of theirs, for a largest figure Bonferroni's sum) and prints it, rounded down:
"98% interval", not the 90 % asked. With about 130 verdicts in a course run, an interval
of at least 90 % puts a true tolerance's edge outside it on one side with probability at most
5 %: :func:`chance_misses` says how many misses chance alone gives.

Usage::

    est = median_ratio(candidate_times_s, baseline_times_s)   # paired rounds
    print(est)             # 1.02 (90% interval 0.99 to 1.05, median of 30 paired ratios): 90.1 % exact
    judge(prediction, est) # perfkit.verdict: held / missed / inconclusive / disturbed
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from perfkit._checks import check_level
from perfkit.estimate import LEVEL, Estimate, exact
from perfkit.joint import chance_misses, joint_coverage, joint_level, largest
from perfkit.order_stats import median_bounds, min_samples

__all__ = ["BOOTSTRAP_MIN", "LEVEL", "MIN_SAMPLES", "RESAMPLES", "SEED", "Estimate", "bootstrap",
           "chance_misses", "exact", "joint_coverage", "joint_level", "largest", "median", "median_interval",
           "median_ratio", "min_samples", "of_medians", "paired_ratios", "per_round", "quantile", "range_of"]

MIN_SAMPLES = min_samples(LEVEL)   # 5: [min, max] of 5 covers the median 93.8 %, of 4 only 87.5 %
RESAMPLES = 2000   # bootstrap resamples: the interval's edges move < 1 % between seeds at this count
SEED = 0           # fixed, so the same numbers always print the same interval
# Below 20 samples a 90 % percentile bootstrap covers well under 90 %. Simulated (600 draws,
# 1000 resamples) for the mean of lognormal(0, 0.5) times: 0.77 at 5 samples, 0.81 at 10,
# 0.84-0.86 at 15-20, 0.88 at 30. Fewer samples: no interval (judge a median instead).
BOOTSTRAP_MIN = 20


def _values(name: str, xs: object, positive: bool = False) -> np.ndarray:
    """``xs`` as a 1-d float array of finite numbers (> 0 with ``positive``), at least one."""
    if isinstance(xs, (str, bytes)) or not hasattr(xs, "__len__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(xs).__name__}")
    if len(xs) == 0:
        raise ValueError(f"{name} must hold at least one number, got none")
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name} must hold numbers, got {x!r}")
    arr = np.asarray(xs, dtype=float).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must hold finite numbers, got {arr[~np.isfinite(arr)][0]!r}")
    if positive and np.any(arr <= 0):
        raise ValueError(f"{name} must hold numbers > 0 (times, rates), got {arr[arr <= 0][0]!r}")
    return arr




def quantile(xs: Sequence[float], q: float) -> float:
    """Quantile ``q`` in [0, 1] of ``xs`` by linear interpolation between order statistics.

    Raises:
        TypeError: if ``xs`` is not a sequence of numbers or ``q`` is not a number.
        ValueError: for an empty ``xs``, a NaN or inf in it, or ``q`` outside [0, 1].
    """
    arr = _values("xs", xs)
    if isinstance(q, bool) or not isinstance(q, (int, float)):
        raise TypeError(f"q must be a number in [0, 1], got {q!r}")
    if not 0 <= q <= 1:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    return float(np.quantile(arr, q))


def median(xs: Sequence[float]) -> float:
    """The median of ``xs`` (the mean of the middle two for an even count)."""
    return float(np.median(_values("xs", xs)))


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``a[i] / b[i]`` for rounds timed back to back (each pair shared the machine's load).

    Raises:
        ValueError: for unequal lengths, empty sequences or a value that is not > 0.
    """
    x, y = _values("a", a, positive=True), _values("b", b, positive=True)
    if len(x) != len(y):
        raise ValueError(f"a and b must hold the same number of rounds, got {len(x)} and {len(y)}")
    return [float(v) for v in x / y]


def range_of(xs: Sequence[float], value: float | None = None, lo: float = 0.1, hi: float = 0.9) -> Estimate:
    """The ``lo``-``hi`` quantile range of repeats, around ``value`` (default: their median).

    This is the spread of *single* repeats, not the uncertainty of their median: use it to
    show how much one repeat varies; judge with :func:`median_interval` or
    :func:`median_ratio`. ``value`` outside the range widens it to hold the value.

    Raises:
        TypeError, ValueError: for a bad ``xs``, a ``value`` that is not a number, or
            quantiles outside ``0 <= lo <= hi <= 1``.
    """
    arr = _values("xs", xs)
    for name, q, low in (("lo", lo, 0.0), ("hi", hi, lo)):
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not low <= q <= 1:
            raise ValueError(f"{name} must be a finite number in [{low:g}, 1], got {q!r}")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or math.isnan(value)):
        raise TypeError(f"value must be a number, got {value!r}")
    v = float(np.median(arr)) if value is None else float(value)
    a, b = float(np.quantile(arr, lo)), float(np.quantile(arr, hi))
    how = f"p{lo * 100:.0f}-p{hi * 100:.0f} of {len(arr)} repeats"
    return Estimate(v, min(a, v), max(b, v), None, len(arr), how)


def _no_interval(point: float, n: int, level: float, method: str, need: int | None = None) -> Estimate:
    return Estimate(point, point, point, level, n, method, needs=need or min_samples(level))


def _tied(arr: np.ndarray, point: float, what: str) -> str:
    """The method text of a zero-width interval: how many of ``arr`` equal its median."""
    same = int(np.sum(arr == point))
    return f"all {len(arr)} {what} equal" if same == len(arr) else f"{same} of {len(arr)} {what} equal"


def _median_estimate(arr: np.ndarray, level: float, what: str) -> Estimate:
    """The median of ``arr`` with its order-statistic interval, or none below the minimum."""
    point, n = float(np.median(arr)), len(arr)
    if n < min_samples(level):
        return _no_interval(point, n, level, f"median of {n} {what}")
    lo, hi, _, cover = median_bounds([float(v) for v in arr], level)
    if lo == hi:
        return Estimate(point, point, point, level, n, _tied(arr, point, what), coverage=cover)
    return Estimate(point, lo, hi, level, n, f"median of {n} {what}", coverage=cover)


def median_interval(xs: Sequence[float], level: float = LEVEL) -> Estimate:
    """The median of ``xs`` with its distribution-free (order-statistic) confidence interval.

    Fewer than ``min_samples(level)`` values (5 at 90 %) give no interval.

    Raises:
        TypeError, ValueError: for a bad ``xs`` or ``level`` outside (0, 1).
    """
    return _median_estimate(_values("xs", xs), check_level(level), "samples")


def median_ratio(a: Sequence[float], b: Sequence[float], paired: bool = True,
                 level: float = LEVEL) -> Estimate:
    """The ratio of ``a`` to ``b`` with a distribution-free confidence interval.

    ``paired=True`` (rounds timed back to back, the course's usual design): the median of
    the rounds' ratios ``a[i] / b[i]`` with its order-statistic interval; load that hit
    both members of a pair cancels in their ratio. ``paired=False`` (two separate runs, of
    any lengths): ``median(a) / median(b)``, between the ratios of the runs' median
    intervals' far ends (:func:`of_medians`); drift between the runs stays in it.

    Args:
        a, b: times (or rates); every value > 0; equally long when ``paired``.
        paired: whether ``a[i]`` and ``b[i]`` were measured together.
        level: the interval's confidence.

    Returns:
        An :class:`Estimate`; with fewer than ``min_samples(level)`` pairs (5 at 90 %), or
        fewer than ``min_samples(sqrt(level))`` samples in a separate run (6), no interval.

    Raises:
        TypeError, ValueError: for empty sequences (or unequal ones when paired), a value that
            is not a finite number > 0, or ``level`` outside (0, 1).
    """
    x, y = _values("a", a, positive=True), _values("b", b, positive=True)
    if paired and len(x) != len(y):
        raise ValueError(f"a and b must hold the same number of rounds, got {len(x)} and {len(y)}")
    level = check_level(level)
    if paired:
        return _median_estimate(x / y, level, "paired ratios")
    return of_medians(lambda ma, mb: ma / mb, [x, y], [True, False], level,
                      "ratio of the medians of two separate runs")


def of_medians(f: Callable[..., float], samples: Sequence[Sequence[float]], rising: Sequence[bool],
               level: float = LEVEL, what: str = "figure of separate runs' medians") -> Estimate:
    """``f`` of several *independent* samples' medians (separate runs), for an ``f`` that
    rises or falls with each median, with a distribution-free interval.

    Each median gets its order-statistic interval at ``level ** (1/k)`` (``k`` samples): the
    runs are independent, so all ``k`` hold together with probability ``level``, and then
    ``f`` lies between its values at the intervals' far ends. Samples timed together (paired
    rounds) are not independent: use :func:`per_round`.

    Args:
        f: the figure, from one median per sample.
        samples: the runs' measurements (finite numbers).
        rising: per sample, whether ``f`` grows with that median (``False``: it shrinks).
        level: the interval's confidence.
        what: what the figure is, for the method text.

    Returns:
        An :class:`Estimate` (no interval while a run holds fewer than
        ``min_samples(level ** (1/k))`` samples: 6 for two runs at 90 %).

    Raises:
        TypeError, ValueError: for a ``f`` that is not callable, no samples, a bad sample,
            ``rising`` not one bool per sample (or one that ``f`` contradicts: lower at the
            high ends than at the low ones), or ``level`` outside (0, 1).
    """
    if not callable(f):
        raise TypeError(f"f must be a callable, got {type(f).__name__}")
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__") or len(samples) == 0:
        raise ValueError(f"samples must be a non-empty list of sequences, got {samples!r}")
    if (not hasattr(rising, "__len__") or len(rising) != len(samples)
            or not all(isinstance(r, bool) for r in rising)):
        raise ValueError(f"rising must hold one bool per sample ({len(samples)}), got {rising!r}")
    arrs = [_values("samples entries", a) for a in samples]
    each = check_level(level) ** (1 / len(arrs))
    ests = [_median_estimate(a, each, "samples") for a in arrs]
    point, n = float(f(*(e.value for e in ests))), min(len(a) for a in arrs)
    how = f"{what} ({' and '.join(str(len(a)) for a in arrs)} samples)"
    if any(e.needs for e in ests):
        return _no_interval(point, n, level, how, min_samples(each))
    lo = float(f(*(e.low if up else e.high for e, up in zip(ests, rising, strict=True))))
    hi = float(f(*(e.high if up else e.low for e, up in zip(ests, rising, strict=True))))
    if lo > hi:
        raise ValueError(f"rising must say which way f moves with each median, got {list(rising)}: f at "
                         f"the ends it names runs from {lo:.6g} down to {hi:.6g}")
    cover = math.prod(e.confidence for e in ests)  # independent runs: every interval holds at once
    if lo == hi:
        return Estimate(point, point, point, level, n, f"{what}: every run's middle samples tie, "
                        "every figure within reach equals", coverage=cover)
    return Estimate(point, min(lo, point), max(hi, point), level, n, how, coverage=cover)


def per_round(stat: Callable[..., float], samples: Sequence[Sequence[float]], what: str = "rounds",
              level: float = LEVEL) -> Estimate:
    """The median over rounds of ``stat`` computed on each round's values, with its
    order-statistic interval: the figure for paired rounds that a bootstrap would misjudge
    at a handful of rounds (a figure of the rounds' medians, a busiest rank).

    Args:
        stat: the figure of one round, from one number per sample (``stat(a[i], b[i], ...)``).
        samples: equally long sequences, entry ``i`` of each measured in round ``i``.
        what: what a round is, for the method text ("rounds").
        level: the interval's confidence.

    Returns:
        An :class:`Estimate` of the median round's figure (no interval with fewer than
        ``min_samples(level)`` rounds).

    Raises:
        TypeError, ValueError: for a ``stat`` that is not callable, no samples, unequal or
            bad ones, a round's figure that is not finite, or ``level`` outside (0, 1).
    """
    if not callable(stat):
        raise TypeError(f"stat must be a callable, got {type(stat).__name__}")
    if not isinstance(what, str) or not what:
        raise TypeError(f"what must be a str naming a round ('rounds'), got {what!r}")
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__") or len(samples) == 0:
        raise ValueError(f"samples must be a non-empty list of sequences, got {samples!r}")
    arrs = [_values("samples entries", s) for s in samples]
    if len({len(a) for a in arrs}) > 1:
        raise ValueError(f"samples must be equally long (one entry per round), got lengths "
                         f"{[len(a) for a in arrs]}")
    figures = np.array([float(stat(*row)) for row in zip(*arrs, strict=True)])
    if not np.all(np.isfinite(figures)):
        raise ValueError(f"stat must give a finite figure for every round, got {figures.tolist()}")
    return _median_estimate(figures, check_level(level), what)


def bootstrap(stat: Callable[..., float], samples: Sequence[Sequence[float]], paired: bool,
              what: str, level: float = LEVEL) -> Estimate:
    """``stat(*samples)`` with its percentile-bootstrap interval, from :data:`BOOTSTRAP_MIN`
    samples up (fewer: no interval). For a figure of sums or means over many steps; judge a
    median with :func:`median_interval` or :func:`per_round`, an extreme with :func:`largest`.

    Args:
        stat: the figure, computed from numpy arrays, one per sample.
        samples: the measurements it is made of (each non-empty, finite).
        paired: resample one set of indices for all samples (rounds timed together, which
            must then be equally long); else each sample on its own (separate runs).
        what: the unit resampled, for the method text ("steps", "rounds").
        level: the interval's confidence.

    Returns:
        An :class:`Estimate` whose interval holds its value (widened where it did not).

    Raises:
        TypeError, ValueError: for no samples, an empty or non-finite one, unequal
            lengths with ``paired``, an empty ``what`` or ``level`` outside (0, 1).
    """
    if not callable(stat):
        raise TypeError(f"stat must be a callable, got {type(stat).__name__}")
    if not isinstance(what, str) or not what:
        raise TypeError(f"what must be a str naming the unit resampled ('rounds'), got {what!r}")
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__") or len(samples) == 0:
        raise ValueError(f"samples must be a non-empty list of sequences, got {samples!r}")
    arrs = [_values("samples entries", s) for s in samples]
    level = check_level(level)
    if paired and len({len(a) for a in arrs}) > 1:
        raise ValueError(f"paired samples must be equally long, got lengths {[len(a) for a in arrs]}")
    point, n = float(stat(*arrs)), min(len(a) for a in arrs)
    if n < BOOTSTRAP_MIN:
        return _no_interval(point, n, level, f"bootstrap over {n} {what}", BOOTSTRAP_MIN)
    rng = np.random.default_rng(SEED)
    boot = []
    for _ in range(RESAMPLES):
        shared = rng.integers(0, n, n) if paired else None
        boot.append(stat(*(a[shared if paired else rng.integers(0, len(a), len(a))] for a in arrs)))
    boot_arr = np.asarray(boot, dtype=float)
    tail = (1 - level) / 2
    lo, hi = (float(v) for v in np.quantile(boot_arr[np.isfinite(boot_arr)], [tail, 1 - tail]))
    if lo == hi == point:
        return Estimate(point, point, point, level, n, f"all {RESAMPLES} resamples over {n} {what} equal")
    how = f"bootstrap over {n} {what}" + (", widened to hold the value" if not lo <= point <= hi else "")
    return Estimate(point, min(lo, point), max(hi, point), level, n, how)
