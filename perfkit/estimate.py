"""A measured figure with its uncertainty: the record every verdict is judged on, and how it prints.

An :class:`Estimate` holds a value, its interval (``low <= value <= high``), the interval's
confidence and the number of samples behind it. Three kinds of figure share it:

- an interval at a confidence ``level`` (from :mod:`perfkit.stats`). Where the method knows
  the interval's exact coverage, ``coverage`` holds it (at least ``level``: an
  order-statistic interval of 7 samples is their whole range, which covers the median with
  98.4 %), and the interval prints with that coverage ("98% interval"), not the level asked;
- **no interval**: fewer samples than an interval at ``level`` needs (``needs`` says how
  many); ``low == high == value``, and a verdict on it is inconclusive;
- an exact figure (a count, a formula: ``level=None``, ``low == high``) or a plain range of
  repeats (``level=None``, ``low < high``: the spread of single repeats, not a confidence).

It prints the point and its interval at one precision with the point visibly inside
(:func:`perfkit.units.si_interval`), and never an interval of zero width: where tied samples
make one, it says so (``"all 5 samples equal 1.2x"``).

Usage::

    est = Estimate(1.02, 0.99, 1.05, 0.9, 30, "median of 30 paired ratios")
    print(est.text("x"))   # 1.02x (90% interval 0.99x to 1.05x, median of 30 paired ratios)
    est.inverse()          # the same figure as 1 / value, e.g. a speedup from a time ratio
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, replace

from perfkit._checks import check_level
from perfkit.units import printed_beside, printed_interval, si, si_beside, si_interval

__all__ = ["LEVEL", "Estimate", "exact"]


LEVEL = 0.90       # confidence of every interval the course prints and judges on (at least)


def _count(name: str, v: object, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return v


@dataclass(frozen=True)
class Estimate:
    """A measured figure with its uncertainty: ``low <= value <= high``.

    ``level`` is the interval's confidence (``None`` for an exact count, or for a range of
    repeats that is not a confidence interval); ``n`` the number of samples (rounds, repeats)
    behind it; ``method`` says in words how the interval was made, for a verdict's text.
    A zero-width interval at a ``level`` comes from tied samples: its ``method`` then ends in
    "equal" and names them ("all 5 samples equal"), and the value is printed after it.
    ``needs``: set when ``n`` is fewer than an interval at ``level`` needs (that number);
    the estimate then has no interval (``low == high == value``).
    ``coverage``: the interval's exact (or least) coverage where its method knows it, at
    least ``level``; ``None`` where the level is all that is known (a bootstrap's nominal
    level). :attr:`label` prints it, rounded down to a whole percent.
    """

    value: float
    low: float
    high: float
    level: float | None
    n: int
    method: str
    needs: int | None = None
    coverage: float | None = None

    def __post_init__(self) -> None:
        for name in ("value", "low", "high"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise TypeError(f"{name} must be a number, got {v!r}")
        if not self.low <= self.value <= self.high:
            raise ValueError(f"an estimate's value must lie in its interval: low {self.low!r} <= value "
                             f"{self.value!r} <= high {self.high!r}")
        if self.level is not None:
            check_level(self.level)
        _count("n", self.n, 1)
        if not isinstance(self.method, str) or not self.method:
            raise ValueError("method must say how the interval was made, e.g. 'median of 7 samples'")
        if self.needs is not None:
            _count("needs", self.needs, self.n + 1)
            if self.level is None or not self.low == self.value == self.high:
                raise ValueError("needs (the samples an interval needs) goes with a level and no "
                                 "interval: low == value == high")
        if self.coverage is not None:
            c = self.coverage
            if (self.level is None or self.needs is not None or isinstance(c, bool)
                    or not isinstance(c, (int, float)) or not self.level - 1e-9 <= c < 1):
                raise ValueError(f"coverage must lie in [level, 1) and go with an interval at a level, got "
                                 f"coverage {c!r} at level {self.level!r}" + (" without an interval"
                                                                             * (self.needs is not None)))

    @property
    def spread(self) -> tuple[float, float]:
        """``(low, high)``."""
        return (self.low, self.high)

    @property
    def has_interval(self) -> bool:
        """Whether this is a confidence interval (``level`` set, enough samples for it)."""
        return self.level is not None and self.needs is None

    @property
    def confidence(self) -> float | None:
        """The interval's coverage where known (:attr:`coverage`), else its ``level``."""
        return self.coverage if self.coverage is not None else self.level

    @property
    def label(self) -> str:
        """``"98% interval"``: the interval's name with its coverage rounded down to a whole
        percent (so never above the truth), or ``"spread"`` for a range with no confidence."""
        if self.confidence is None:
            return "spread"
        return f"{math.floor(self.confidence * 100 + 1e-9):.0f}% interval"

    def describe(self, unit: str = "") -> str:
        """``"90% interval 0.99x to 1.05x, median of 30 paired ratios"``: the interval and
        where it comes from; never an interval of zero width."""
        if not isinstance(unit, str):
            raise TypeError(f"unit must be a string, got {unit!r}")
        if self.needs is not None:
            return (f"{self.n} sample{'s' * (self.n > 1)}, fewer than the {self.needs} a "
                    f"{self.level:.0%} interval needs: no interval")
        if self.low == self.high:
            if self.level is None:
                return "exact"
            if self.method.endswith(("equal", "equals")):
                return f"{self.method} {si(self.value, unit)}"
            return f"no spread: {self.method}, {self.n} samples"
        _, lo, hi = si_interval(self.value, self.low, self.high, unit)
        # without a level it is a spread the method names (a p10-p90, a min-max), no interval
        return f"{self.label} {lo} to {hi}, {self.method}"

    def point(self, unit: str = "") -> str:
        """The value alone, at :meth:`describe`'s precision (``"0.184x"`` beside ``"0.183x to
        0.196x"``, never ``"0.18x"``): print it, not ``f"{value:.2f}"``, next to the interval."""
        if not isinstance(unit, str):
            raise TypeError(f"unit must be a string, got {unit!r}")
        return (si_interval(self.value, self.low, self.high, unit)[0] if self.low < self.high
                else si(self.value, unit))

    def text(self, unit: str = "") -> str:
        """The value and :meth:`describe`, at one precision: ``"1.02x (90% interval 0.99x to
        1.05x, median of 30 paired ratios)"``."""
        return f"{self.point(unit)} ({self.describe(unit)})"

    def clear_of(self, x: float, unit: str = "") -> str:
        """``"above"`` or ``"below"`` where the interval, as :meth:`text` prints it, lies clear
        of ``x`` on that side; ``""`` where it holds ``x`` or there is no interval. A sentence
        such as "the interval lies above 1x" must hold for the printed ends: ``1.00x to 1.03x``
        does not lie above 1x, though its unrounded low end may; nor does an interval printed as
        ending at 36.7 ms lie below a step of 36.72 ms: ``x`` is rounded as the ends are."""
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"x must be a finite number, got {x!r}")
        if not self.has_interval or self.low == self.high:
            return ""
        lo, hi = printed_interval(self.value, self.low, self.high, unit)
        x = printed_beside(x, self.value, self.low, self.high, unit)  # both at the printed precision
        return "above" if lo > x else "below" if hi < x else ""

    def beside(self, x: float, what: str = "the ratio of the medians", unit: str = "x",
               judged: bool = True) -> str:
        """A sentence, starting with a space, on where another statistic of the same runs,
        ``x``, lies against this interval as printed: ``" The ratio of the medians, 1.15x, lies
        above this 90% interval (1.02x to 1.13x), ..."``. The median of paired rounds' ratios
        and the ratio of two medians agree only where one run's steps are the other's scaled
        by one factor, so this interval does not cover the other statistic; where ``x`` lies
        outside, the sentence says that the verdict judges this interval only (with
        ``judged``; ``judged=False`` where no verdict is judged on it). ``""`` where there is
        no interval.

        Raises:
            ValueError: for an ``x`` that is not finite, or an empty ``what``.
        """
        if not isinstance(what, str) or not what:
            raise ValueError(f"what must name the other estimate ('the ratio of the medians'), got {what!r}")
        side = self.clear_of(x, unit)  # checks x; "above": the interval lies above x
        if not self.has_interval or self.low == self.high:
            return ""
        _, lo, hi = si_interval(self.value, self.low, self.high, unit)
        shown = si_beside(x, self.value, self.low, self.high, unit)  # at the precision compared
        head = f" {what[0].upper()}{what[1:]}, {shown}, lies"
        if not side:
            return f"{head} inside this {self.label} ({lo} to {hi})."
        return (f"{head} {'below' if side == 'above' else 'above'} this {self.label} ({lo} to {hi}), the "
                f"interval of a different statistic ({self.method}), which it does not cover"
                + ("; the verdict judges this interval only." if judged else "."))

    def on_end(self, x: float, unit: str = "") -> str:
        """A note, starting with a space, for an ``x`` that lies inside the interval only as
        printed: outside ``low`` to ``high``, it rounds at the ends' digits onto one of them
        (1.125x beside an interval printed as ending at 1.12x, whose end is 1.1236x). A sentence
        calling such an ``x`` "inside" says so: ``" (on its high end as printed: 1.125x shows as
        1.12x at the interval's digits)"``. ``""`` where ``x`` lies inside unrounded, clear of the
        interval as printed (:meth:`clear_of`), or there is no interval.

        Raises:
            ValueError: for an ``x`` that is not finite.
        """
        if self.clear_of(x, unit) or not self.has_interval or self.low == self.high:
            return ""  # clear_of checks x
        if self.low <= x <= self.high:
            return ""
        end = "high" if x > self.high else "low"
        shown = si_beside(x, self.value, self.low, self.high, unit)
        full = next((t for t in (si(x, unit, d) for d in range(3, 10)) if t != shown), si(x, unit, 10))
        return f" (on its {end} end as printed: {full} shows as {shown} at the interval's digits)"

    def scaled(self, k: float) -> Estimate:
        """The same estimate times a positive constant ``k`` (a unit change, a batch ratio)."""
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k < math.inf:
            raise ValueError(f"k must be a finite number > 0, got {k!r}")
        return replace(self, value=self.value * k, low=self.low * k, high=self.high * k)

    def shifted(self, c: float) -> Estimate:
        """The same estimate plus a constant ``c`` (a gap from a prediction: ``shifted(-p)``)."""
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
            raise ValueError(f"c must be a finite number, got {c!r}")
        return replace(self, value=self.value + c, low=self.low + c, high=self.high + c)

    def inverse(self) -> Estimate:
        """``1 / value`` with the interval flipped (a speedup from a time ratio); needs ``low > 0``."""
        if self.low <= 0:
            raise ValueError(f"inverse needs an estimate above 0, got low {self.low!r}")
        return replace(self, value=1 / self.value, low=1 / self.high, high=1 / self.low)

    def record(self) -> dict:
        """A JSON-able record (``Estimate(**record)`` rebuilds it)."""
        return asdict(self)

    def __str__(self) -> str:
        return self.text()


def exact(value: float, what: str = "exact count") -> Estimate:
    """A figure with no uncertainty (a count, a formula): ``low == value == high``.

    Raises:
        TypeError, ValueError: for a ``value`` that is not a number, or an empty ``what``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise TypeError(f"value must be a number, got {value!r}")
    if not isinstance(what, str) or not what:
        raise ValueError(f"what must say what the figure is ('exact count'), got {what!r}")
    return Estimate(float(value), float(value), float(value), None, 1, what)
