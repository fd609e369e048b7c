"""Argument checks shared by perfkit's wings: bad input fails at the call, naming the argument.

Each check returns the value it accepted and raises ``TypeError`` when the value is not even
of the kind asked for (a string where a number is meant, a list where a callable is) or
``ValueError`` when it is of that kind but not allowed: a number outside the range, NaN or
inf, a bool or a fraction where a count is meant (perfkit's counts have always refused those
with ``ValueError``), an empty collection, an unknown choice. Messages say what is allowed.
It imports nothing from perfkit, so every module uses it, the base modules included: it is
the one argument-check family.

Usage::

    steps = check_int("steps", steps, 1)                    # an int >= 1, not a bool
    share = check_real("share", share, 0, 1)                # a finite number in [0, 1]
    kind = check_choice("kind", kind, ("sleep", "spin"))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def _fail(name: str, v: object, allowed: str) -> None:
    exc = ValueError if isinstance(v, int | float) else TypeError  # bools are ints
    raise exc(f"{name} must be {allowed}, got {v!r}")


def check_int(name: str, v: Any, lo: int = 0, hi: int | None = None) -> int:
    """``v`` if it is an int (not a bool) in ``[lo, hi]`` (no upper bound for ``None``)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        _fail(name, v, f"an int >= {lo}" if hi is None else f"an int in [{lo}, {hi}]")
    return v


def check_real(name: str, v: Any, lo: float = -math.inf, hi: float = math.inf, *,
               lo_open: bool = False, hi_open: bool = False) -> float:
    """``v`` if it is a finite real number (not a bool) in the interval from ``lo`` to ``hi``,
    each end excluded when ``lo_open``/``hi_open``; NaN and inf are always refused."""
    ok = (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
          and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi))
    if not ok:
        if math.isinf(hi):
            where = "" if math.isinf(lo) else f" {'>' if lo_open else '>='} {lo:g}"
        else:
            where = f" in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        _fail(name, v, f"a finite number{where}")
    return v


def check_level(level: Any) -> float:
    """``level`` as a float if it is a confidence in (0, 1), the one message every interval uses."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a confidence in (0, 1), e.g. 0.9, got {level!r}")
    return float(level)


def check_choice(name: str, v: T, choices: Iterable[Any]) -> T:
    """``v`` if it equals one of ``choices`` (a bool never matches a number: True is not 1)."""
    options = tuple(choices)
    if not any(isinstance(v, bool) == isinstance(c, bool) and v == c for c in options):
        listed = ", ".join(map(repr, options))
        raise ValueError(f"{name} must be one of {listed}, got {v!r}")
    return v


def check_items(name: str, v: Any, nonempty: bool = True) -> list[Any]:
    """The items of ``v`` as a new list, if ``v`` is an iterable collection (a list, tuple,
    generator; not a str, bytes or mapping, whose items are rarely what was meant)."""
    if isinstance(v, str | bytes | Mapping) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a list or tuple, got {type(v).__name__}")
    items = list(v)
    if nonempty and not items:
        raise ValueError(f"{name} must hold at least one item, got none")
    return items


def check_callable(name: str, v: T, optional: bool = False) -> T:
    """``v`` if it is callable (or ``None`` when ``optional``)."""
    if not (callable(v) or (optional and v is None)):
        raise TypeError(f"{name} must be {'None or ' if optional else ''}a callable, got "
                        f"{type(v).__name__}")
    return v


def check_type(name: str, v: T, kind: type | tuple[type, ...], optional: bool = False) -> T:
    """``v`` if it is an instance of ``kind`` (or ``None`` when ``optional``)."""
    if not (isinstance(v, kind) or (optional and v is None)):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        names = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
        article = "an" if names[0] in "AEIOUaeiou" else "a"
        raise TypeError(f"{name} must be {article} {names}, got {type(v).__name__}")
    return v


def check_seed(name: str, v: Any) -> int:
    """A generator seed: an int in ``[0, 2**63)``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int in [0, 2**63), got {v!r}")
    if not 0 <= v < 2**63:
        raise ValueError(f"{name} must be an int in [0, 2**63), got {v!r}")
    return v


def check_tensor(name: str, t: Any, dtype: Any = None, floating: bool = False,
                 ndim: int | None = None, numel: int | None = None) -> Any:
    """``t`` if it is a ``torch.Tensor`` of ``dtype`` (or any float dtype if ``floating``) with
    ``ndim`` dimensions and ``numel`` values (any where ``None``)."""
    import torch  # here, so that the checks of plain numbers import nothing heavy

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if floating and not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if numel is not None and t.numel() != numel:
        raise ValueError(f"{name} must hold {numel} value(s), got {t.numel()} (shape {tuple(t.shape)})")
    return t
