"""One way to print a measured number with its unit: SI prefixes, three significant digits.

Used by the verdicts, the command line and the plots alike, so a figure reads the same in
every place it is printed.

Usage::

    si(1.7e11, "FLOP/s")   # '170 GFLOP/s'
    si(3.2e-5, "s")        # '32 µs'
    si(1.234, "x")         # '1.23x'   (ratios and shares take no prefix and no space)
"""

from __future__ import annotations

import math
import re

__all__ = ["si"]

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
             (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
_BARE = {"x", "%"}  # units written against the number, never prefixed
_PLAIN = {"", "x", "%", "pp", "ppm"}  # no prefix below 10^4: a ratio of 0.5 is not '500 mx'
_SMALL = {"s", "B", "FLOP", "FLOP/s", "B/s", "W", "J", "Hz"}  # units that take m, µ, n
_PREFIXED = re.compile(r"^(m|µ|k|M|G|T|Ki|Mi|Gi)(s|B|FLOP|W|J|Hz)(/s)?$")  # 'ms', 'MB': never re-prefixed


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``value`` with an SI prefix and ``digits`` significant digits.

    A ratio (``unit="x"``) or a bare number is never prefixed below 10^4; whole counts below
    10^4 print in full (``si(7) == "7"``). NaN and inf print as themselves.

    Raises:
        TypeError: if ``value`` is not a number or ``unit`` not a string.
        ValueError: if ``digits`` is not an int from 1 to 15.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy scalars
        except (TypeError, ValueError):
            raise TypeError(f"value must be a number, got {value!r}") from None
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a string, got {unit!r}")
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 15:
        raise ValueError(f"digits must be an int from 1 to 15, got {digits!r}")
    unit = unit.strip()
    sep = "" if unit in _BARE else " "
    if value == 0 or not math.isfinite(value):
        return f"{value:g}{sep}{unit}".strip()
    plain = unit in _PLAIN or _PREFIXED.match(unit) is not None
    if (plain and abs(value) < 1e4) or (unit not in _SMALL and 1 <= abs(value) < 1e3) or (
            unit not in _SMALL and not plain and abs(value) < 1):
        if float(value).is_integer() and abs(value) < 1e4:
            return f"{int(value)}{sep}{unit}".strip()
        return f"{value:.{digits}g}{sep}{unit}".strip()
    if plain and unit:  # 12,000 ms stays in ms: a prefix on a prefix reads wrong
        return f"{value:,.0f}{sep}{unit}"
    for scale, p in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{sep}{p}{unit}".strip()
    return f"{value:.{digits}g}{sep}{unit}".strip()
