"""One way to print a measured number with its unit: SI prefixes, three significant digits.

Used by the verdicts, the command line and the plots alike, so a figure reads the same in
every place it is printed. A figure with its interval is printed by :func:`si_interval`: the
three numbers at one prefix and one precision, the point visibly inside its interval.

Usage::

    si(1.7e11, "FLOP/s")                 # '170 GFLOP/s'
    si(3.2e-5, "s")                      # '32 µs'
    si(1.234, "x")                       # '1.23x'   (ratios and shares take no prefix and no space)
    si_interval(0.1848, 0.182, 0.212, "x")  # ('0.185x', '0.182x', '0.212x')
"""

from __future__ import annotations

import math
import re

__all__ = ["printed_beside", "printed_interval", "share_range", "si", "si_beside", "si_bound", "si_interval"]

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
             (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
_BARE = {"x", "%"}  # units written against the number, never prefixed
_PLAIN = {"", "x", "%", "pp", "ppm"}  # no prefix below 10^4: a ratio of 0.5 is not '500 mx'
_SMALL = {"s", "B", "FLOP", "FLOP/s", "B/s", "W", "J", "Hz"}  # units that take m, µ, n
_PREFIXED = re.compile(r"^(m|µ|k|M|G|T|Ki|Mi|Gi)(s|B|FLOP|W|J|Hz)(/s)?$")  # 'ms', 'MB': never re-prefixed


def _number(name: str, value: object) -> float:
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(value)  # numpy scalars
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {value!r}") from None
    return value


def _unit(unit: object) -> str:
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a string, got {unit!r}")
    return unit.strip()


def _scale(magnitude: float, unit: str) -> tuple[float, str, bool]:
    """``(scale, prefix, thousands)`` for a number of this ``magnitude`` (> 0) in ``unit``:
    divide by ``scale``, write ``prefix`` before the unit, and group thousands with commas."""
    plain = unit in _PLAIN or _PREFIXED.match(unit) is not None
    if (plain and magnitude < 1e4) or (unit not in _SMALL and 1 <= magnitude < 1e3) or (
            unit not in _SMALL and not plain and magnitude < 1):
        return 1.0, "", False
    if plain and unit:  # 12,000 ms stays in ms: a prefix on a prefix reads wrong
        return 1.0, "", True
    for scale, p in _PREFIXES:
        if magnitude >= scale:
            return scale, p, False
    return 1.0, "", False


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``value`` with an SI prefix and ``digits`` significant digits.

    A ratio (``unit="x"``) or a bare number is never prefixed below 10^4; whole counts below
    10^4 print in full (``si(7) == "7"``). NaN and inf print as themselves.

    Raises:
        TypeError: if ``value`` is not a number or ``unit`` not a string.
        ValueError: if ``digits`` is not an int from 1 to 15.
    """
    value, unit = _number("value", value), _unit(unit)
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 15:
        raise ValueError(f"digits must be an int from 1 to 15, got {digits!r}")
    sep = "" if unit in _BARE else " "
    if value == 0 or not math.isfinite(value):
        return f"{value:g}{sep}{unit}".strip()
    scale, p, thousands = _scale(abs(value), unit)
    if thousands:
        return f"{value:,.0f}{sep}{unit}"
    if scale == 1 and float(value).is_integer() and abs(value) < 1e4:
        return f"{int(value)}{sep}{unit}".strip()
    return f"{value / scale:.{digits}g}{sep}{p}{unit}".strip()


def si_bound(value: float, unit: str = "", side: str = "low") -> str:
    """A bound's edge, printed as :func:`si` prints it, but never past the edge on the side it
    bounds: a lower edge (``side="low"``) never prints above its value, an upper one
    (``"high"``) never below it. Three significant digits where they round the right way,
    else four, else four rounded outward. So 10.05 ms as a lower edge prints "10.05 ms", not
    "10.1 ms" above figures of 10.07 and 10.08 ms that it lies below.

    Raises:
        TypeError, ValueError: as :func:`si`, or for a ``side`` other than "low" and "high".
    """
    if side not in ("low", "high"):
        raise ValueError(f"side must be 'low' or 'high', got {side!r}")
    value, unit = _number("value", value), _unit(unit)
    if value == 0 or not math.isfinite(value):
        return si(value, unit)
    scale, _, thousands = _scale(abs(value), unit)
    if thousands or (scale == 1 and float(value).is_integer() and abs(value) < 1e4):
        return si(value, unit)  # printed in full: no rounding to cross the edge
    x = value / scale
    for digits in (3, 4):
        shown = float(f"{x:.{digits}g}")
        if (shown <= x) if side == "low" else (shown >= x):
            return si(value, unit, digits)
    step = 10.0 ** (math.floor(math.log10(abs(x))) - 3)  # the fourth significant digit's place
    outward = (math.floor if side == "low" else math.ceil)(x / step) * step
    return si(outward * scale, unit, 4)


def si_interval(value: float, low: float, high: float, unit: str = "",
                digits: int = 3) -> tuple[str, str, str]:
    """``value``, ``low`` and ``high`` printed alike: one SI prefix and one number of decimals.

    The decimals start where ``value`` shows ``digits`` significant digits and grow until
    the printed point lies strictly inside the printed interval wherever the numbers do
    (rounding each number to its own precision can print a point outside its interval:
    ``0.18x`` in ``0.182x to 0.212x``), and until an interval of nonzero width prints with
    two different ends. A point on an end (tied samples) prints equal to that end.

    Returns:
        ``(value, low, high)`` as strings, each with its unit.

    Raises:
        TypeError: for a number that is not one, or a ``unit`` that is not a string.
        ValueError: unless ``low <= value <= high``, all finite, and ``digits`` from 1 to 15.
    """
    nums = [_number(name, v) for name, v in (("value", value), ("low", low), ("high", high))]
    unit = _unit(unit)
    scale, power, p, thousands, decimals = _interval_format(nums, unit, digits)
    if scale == 0:
        return (f"0{'' if unit in _BARE else ' '}{unit}".strip(),) * 3
    sep = "" if unit in _BARE else " "
    texts = [f"{x / scale:{',' if thousands else ''}.{decimals}f}" for x in nums]
    while decimals > 0 and all(t.endswith("0") for t in texts):  # 1.20 / 1.10 / 1.30: one digit fewer
        decimals -= 1
        texts = [t[:-1].rstrip(".") if decimals == 0 else t[:-1] for t in texts]
    return tuple(f"{t}{power}{sep}{p}{unit}".strip() for t in texts)


def printed_interval(value: float, low: float, high: float, unit: str = "") -> tuple[float, float]:
    """``low`` and ``high`` as :func:`si_interval` prints them, back in ``unit``: for a
    sentence about the interval (``"it lies above 1x"``) that must hold for the numbers the
    reader sees (``1.00x to 1.03x`` does not lie above 1x).

    Raises:
        TypeError, ValueError: as :func:`si_interval`.
    """
    nums = [_number(name, v) for name, v in (("value", value), ("low", low), ("high", high))]
    scale, _, _, _, decimals = _interval_format(nums, _unit(unit), 3)
    if scale == 0:
        return (0.0, 0.0)
    return tuple(round(x / scale, decimals) * scale for x in nums[1:])


def printed_beside(x: float, value: float, low: float, high: float, unit: str = "") -> float:
    """``x`` rounded as :func:`si_interval` prints the interval ``low`` to ``high``: to compare
    a figure with the interval's printed ends at one precision (a step of 36.72 ms does not lie
    above an interval printed as ending at 36.7 ms).

    Raises:
        TypeError, ValueError: as :func:`si_interval`, or for an ``x`` that is not finite.
    """
    x = _number("x", x)
    if not math.isfinite(x):
        raise ValueError(f"x must be a finite number, got {x!r}")
    nums = [_number(name, v) for name, v in (("value", value), ("low", low), ("high", high))]
    scale, _, _, _, decimals = _interval_format(nums, _unit(unit), 3)
    return x if scale == 0 else round(x / scale, decimals) * scale


def si_beside(x: float, value: float, low: float, high: float, unit: str = "") -> str:
    """``x`` printed with the prefix and decimals :func:`si_interval` prints ``low`` to
    ``high`` with: a figure set beside an interval reads at the precision it is compared at
    (:func:`printed_beside`), so ``1.034x`` beside ``1.016x to 1.030x``, never ``1.03x``.

    Raises:
        TypeError, ValueError: as :func:`printed_beside`.
    """
    x = printed_beside(x, value, low, high, unit)
    nums = [_number(name, v) for name, v in (("value", value), ("low", low), ("high", high))]
    unit = _unit(unit)
    scale, power, p, thousands, decimals = _interval_format(nums, unit, 3)
    if scale == 0:
        return si(x, unit)
    sep = "" if unit in _BARE else " "
    return f"{x / scale:{',' if thousands else ''}.{decimals}f}{power}{sep}{p}{unit}".strip()


def _interval_format(nums: list[float], unit: str, digits: int) -> tuple[float, str, str, bool, int]:
    """:func:`si_interval`'s scale (0 for three zeros), power, prefix, thousands separator and
    decimals for ``[value, low, high]``."""
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 15:
        raise ValueError(f"digits must be an int from 1 to 15, got {digits!r}")
    if not all(math.isfinite(v) for v in nums) or not nums[1] <= nums[0] <= nums[2]:
        raise ValueError(f"low <= value <= high must hold for finite numbers, got value {nums[0]!r}, "
                         f"low {nums[1]!r}, high {nums[2]!r}")
    biggest = max(abs(v) for v in nums)
    if biggest == 0:
        return 0.0, "", "", False, 0
    scale, p, thousands = _scale(biggest, unit)
    power = ""
    if biggest / scale < 1e-3:  # below any prefix (6e-09 ms): one power of ten for all three
        exp = math.floor(math.log10(biggest / scale))
        scale, power = scale * 10.0 ** exp, f"e{exp:+03d}"
    v, lo, hi = (x / scale for x in nums)
    lead = abs(v) if v else biggest / scale  # the point's digits decide the precision
    whole = scale == 1 and all(float(x).is_integer() for x in nums)
    decimals = 0 if whole else max(0, digits - 1 - math.floor(math.log10(lead)))
    while decimals < 15:
        r = [float(f"{x:.{decimals}f}") for x in (v, lo, hi)]  # as printed
        if ((lo == v or r[1] < r[0]) and (v == hi or r[0] < r[2])
                and (lo == hi or r[1] < r[2])):
            break
        decimals += 1
    return scale, power, p, thousands, decimals


def share_range(low: float, high: float) -> str:
    """Two shares as a range, ``"90%-101%"``, or ``"within 0.4% of it"`` where both round to the
    same percent (a range of no width would read as a spread of zero).

    Raises:
        TypeError: for a ``low`` or ``high`` that is not a number.
        ValueError: for a ``low`` above ``high``.
    """
    lo, hi = _number("low", low), _number("high", high)
    if lo > hi:
        raise ValueError(f"low ({lo}) must not be above high ({hi})")
    if f"{lo:.0%}" == f"{hi:.0%}":
        return f"within {max(abs(1 - lo), abs(hi - 1)):.1%} of it"
    return f"{lo:.0%}-{hi:.0%}"
