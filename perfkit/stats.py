"""The course's statistics, in one place: quantiles, paired ratios, and the uncertainty of a
median or of a ratio of medians, as an :class:`Estimate` that every verdict is judged on.

One definition each, used by ``timing``, ``verdict``, ``profiling``, the jobs and the
notebooks alike:

- **quantile**: linear interpolation between order statistics (numpy's default, "type 7").
- **uncertainty of a median** (one sample) or of ``median(a) / median(b)`` (paired rounds,
  each pair timed back to back so it shared the machine's load): a percentile bootstrap
  (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13) with a fixed seed and
  resample count, so a rerun on the same numbers prints the same interval. It narrows about
  as ``1/sqrt(rounds)``, where the range of single rounds' ratios does not narrow at all.
- every interval is at confidence :data:`LEVEL` (90 %). With about 130 verdicts in a course
  run, a 90 % interval puts a *true* prediction's edge outside it on one side with
  probability at most 5 %: :func:`chance_misses` says how many misses chance alone gives.

The printed point always lies inside its printed interval (a percentile interval of a
discrete statistic can exclude the point; it is widened to hold it, and says so).

Usage::

    est = median_ratio(candidate_times_s, baseline_times_s)   # paired rounds
    print(est)             # 1.02x (90% interval 0.99x-1.05x, 30 rounds)
    judge(prediction, est) # perfkit.verdict: held / missed / inconclusive / disturbed
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["LEVEL", "RESAMPLES", "SEED", "Estimate", "bootstrap", "chance_misses", "exact", "median",
           "median_interval", "median_ratio", "paired_ratios", "quantile", "range_of"]

LEVEL = 0.90       # confidence of every interval the course prints and judges on
RESAMPLES = 2000   # bootstrap resamples: the interval's edges move < 1 % between seeds at this count
SEED = 0           # fixed, so the same numbers always print the same interval


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


def _number(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or math.isnan(v):
        raise TypeError(f"{name} must be a number, got {v!r}")
    return float(v)


def _level(level: object) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a confidence in (0, 1), e.g. 0.9, got {level!r}")
    return float(level)


def _count(name: str, v: object, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return v


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


@dataclass(frozen=True)
class Estimate:
    """A measured figure with its uncertainty: ``low <= value <= high``.

    ``level`` is the interval's confidence (``None`` for an exact count, or for a range of
    repeats that is not a confidence interval); ``n`` the number of rounds or repeats behind
    it; ``method`` says in words how the interval was made, for a verdict's text.
    """

    value: float
    low: float
    high: float
    level: float | None
    n: int
    method: str

    def __post_init__(self) -> None:
        for name in ("value", "low", "high"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise TypeError(f"{name} must be a number, got {v!r}")
        if not self.low <= self.value <= self.high:
            raise ValueError(f"an estimate's value must lie in its interval: low {self.low!r} <= value "
                             f"{self.value!r} <= high {self.high!r}")
        if self.level is not None:
            _level(self.level)
        _count("n", self.n, 1)
        if not isinstance(self.method, str) or not self.method:
            raise ValueError("method must say how the interval was made, e.g. 'bootstrap of the median'")

    @property
    def spread(self) -> tuple[float, float]:
        """``(low, high)``."""
        return (self.low, self.high)

    def describe(self, unit: str = "") -> str:
        """``"90% interval 0.99x-1.05x, 30 rounds"``: the interval and where it comes from."""
        from perfkit.units import si

        if self.low == self.high:
            return "exact" if self.level is None else f"{self.n} round(s): no interval"
        what = f"{self.level:.0%} interval" if self.level is not None else "range"
        return f"{what} {si(self.low, unit)} to {si(self.high, unit)}, {self.method}"

    def scaled(self, k: float) -> Estimate:
        """The same estimate times a positive constant ``k`` (a unit change, a batch ratio)."""
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k < math.inf:
            raise ValueError(f"k must be a finite number > 0, got {k!r}")
        return Estimate(self.value * k, self.low * k, self.high * k, self.level, self.n, self.method)

    def inverse(self) -> Estimate:
        """``1 / value`` with the interval flipped (a speedup from a time ratio); needs ``low > 0``."""
        if self.low <= 0:
            raise ValueError(f"inverse needs an estimate above 0, got low {self.low!r}")
        return Estimate(1 / self.value, 1 / self.high, 1 / self.low, self.level, self.n, self.method)

    def record(self) -> dict:
        """A JSON-able record."""
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.value:.3g} ({self.describe()})"


def exact(value: float, what: str = "exact count") -> Estimate:
    """A figure with no uncertainty (a count, a formula): ``low == value == high``.

    Raises:
        TypeError, ValueError: for a ``value`` that is not a number, or an empty ``what``.
    """
    v = _number("value", value)
    if not isinstance(what, str) or not what:
        raise ValueError(f"what must say what the figure is ('exact count'), got {what!r}")
    return Estimate(v, v, v, None, 1, what)


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
    v = float(np.median(arr)) if value is None else _number("value", value)
    a, b = float(np.quantile(arr, lo)), float(np.quantile(arr, hi))
    how = f"p{lo * 100:.0f}-p{hi * 100:.0f} of {len(arr)} repeats"
    return Estimate(v, min(a, v), max(b, v), None, len(arr), how)


def _interval(boot: np.ndarray, point: float, level: float) -> tuple[float, float, bool]:
    tail = (1 - level) / 2
    lo, hi = (float(v) for v in np.quantile(boot, [tail, 1 - tail]))
    widened = not lo <= point <= hi
    return min(lo, point), max(hi, point), widened


def median_interval(xs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Estimate:
    """The median of ``xs`` with a bootstrap confidence interval of the median.

    Raises:
        TypeError, ValueError: for a bad ``xs``, ``level`` outside (0, 1), ``resamples`` below
            100 or a negative ``seed``.
    """
    arr, level = _values("xs", xs), _level(level)
    _count("resamples", resamples, 100)
    _count("seed", seed, 0)
    point, n = float(np.median(arr)), len(arr)
    if n < 2:
        return Estimate(point, point, point, level, 1, "1 repeat: no interval")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    lo, hi, widened = _interval(np.median(arr[idx], axis=1), point, level)
    how = f"bootstrap of the median of {n} repeats" + (", widened to hold the median" if widened else "")
    return Estimate(point, lo, hi, level, n, how)


def median_ratio(a: Sequence[float], b: Sequence[float], paired: bool = True, level: float = LEVEL,
                 resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """``median(a) / median(b)`` with a bootstrap confidence interval.

    ``paired=True`` (rounds timed back to back, the course's usual design): each round's
    pair ``(a[i], b[i])`` is resampled together, so load that drifted during the run (and hit
    both members of a pair) cancels. ``paired=False`` (two separate runs, of any lengths):
    each side is resampled on its own, and drift between the runs stays in the interval.

    Args:
        a, b: times (or rates); every value > 0; equally long when ``paired``.
        paired: whether ``a[i]`` and ``b[i]`` were measured together.
        level: the interval's confidence.
        resamples, seed: the bootstrap's; fixed so that a rerun prints the same interval.

    Returns:
        An :class:`Estimate` whose ``value`` is the ratio of the medians.

    Raises:
        TypeError, ValueError: for empty sequences (or unequal ones when paired), a value that
            is not a finite number > 0, ``level`` outside (0, 1), ``resamples`` below 100 or
            a negative ``seed``.
    """
    x, y = _values("a", a, positive=True), _values("b", b, positive=True)
    if paired and len(x) != len(y):
        raise ValueError(f"a and b must hold the same number of rounds, got {len(x)} and {len(y)}")
    level = _level(level)
    _count("resamples", resamples, 100)
    _count("seed", seed, 0)
    point, n = float(np.median(x) / np.median(y)), min(len(x), len(y))
    if n < 2:
        return Estimate(point, point, point, level, 1, "1 round: no interval")
    rng = np.random.default_rng(seed)
    ix = rng.integers(0, len(x), size=(resamples, len(x)))
    iy = ix if paired else rng.integers(0, len(y), size=(resamples, len(y)))
    boot = np.median(x[ix], axis=1) / np.median(y[iy], axis=1)
    lo, hi, widened = _interval(boot, point, level)
    how = (f"bootstrap of the median ratio over {n} paired rounds" if paired else
           f"bootstrap of the median ratio of two separate runs ({len(x)} and {len(y)} repeats)")
    return Estimate(point, lo, hi, level, n, how + (", widened to hold the ratio" if widened else ""))


def bootstrap(stat: Callable[..., float], samples: Sequence[Sequence[float]], paired: bool,
              what: str) -> Estimate:
    """``stat(*samples)`` with its percentile-bootstrap interval at :data:`perfkit.LEVEL`.

    Args:
        stat: the figure, computed from numpy arrays, one per sample.
        samples: the measurements it is made of (each non-empty, finite).
        paired: resample one set of indices for all samples (rounds timed together, which
            must then be equally long); else each sample on its own (separate runs).
        what: the unit resampled, for the method text ("steps", "rounds").

    Returns:
        An :class:`Estimate` whose interval holds its value (widened where it did not).

    Raises:
        TypeError, ValueError: for no samples, an empty or non-finite one, unequal
            lengths with ``paired``, or an empty ``what``.
    """
    if not callable(stat):
        raise TypeError(f"stat must be a callable, got {type(stat).__name__}")
    if not isinstance(what, str) or not what:
        raise TypeError(f"what must be a str naming the unit resampled ('rounds'), got {what!r}")
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__") or len(samples) == 0:
        raise ValueError(f"samples must be a non-empty list of sequences, got {samples!r}")
    arrs = [_values("samples entries", s) for s in samples]
    if paired and len({len(a) for a in arrs}) > 1:
        raise ValueError(f"paired samples must be equally long, got lengths {[len(a) for a in arrs]}")
    point, n = float(stat(*arrs)), min(len(a) for a in arrs)
    if n < 2:
        return Estimate(point, point, point, LEVEL, 1, f"1 {what[:-1]}: no interval")
    rng = np.random.default_rng(SEED)
    boot = []
    for _ in range(RESAMPLES):
        shared = rng.integers(0, n, n) if paired else None
        boot.append(stat(*(a[shared if paired else rng.integers(0, len(a), len(a))] for a in arrs)))
    boot_arr = np.asarray(boot, dtype=float)
    lo, hi, widened = _interval(boot_arr[np.isfinite(boot_arr)], point, LEVEL)
    how = f"bootstrap over {n} {what}" + (", widened to hold the value" if widened else "")
    return Estimate(point, lo, hi, LEVEL, n, how)


def chance_misses(n: int, level: float = LEVEL) -> float:
    """How many of ``n`` true predictions a ``level`` interval reports missed by chance alone.

    A prediction is missed when the whole interval lies on one side of its edge; for a true
    prediction whose figure sits right at the edge that happens with probability
    ``(1 - level) / 2``, less when it sits inside. So this is an upper bound: ``n (1 - level) / 2``.
    """
    return _count("n", n, 0) * (1 - _level(level)) / 2
