"""Argument checks shared by perfkit.compress's public functions, and exact counts.

Every check raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value) with a
message that names the argument and says what is allowed.

Usage::

    ratio = check_ratio(ratio)                    # a float in (0, 1]
    k = count(ratio, numel)                       # ceil(ratio * numel), exactly
    flat = check_tensor("codes", codes, dtype=torch.uint8, ndim=1)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TypeVar

import torch

T = TypeVar("T")


def check_int(name: str, v: object, lo: int = 0, hi: int | None = None) -> int:
    """``v`` if it is an int (not a bool) in ``[lo, hi]``; else ``TypeError``/``ValueError``."""
    rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int {rng}, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be an int {rng}, got {v!r}")
    return v


def check_seed(name: str, v: object) -> int:
    """A generator seed: an int in ``[0, 2**63)``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int in [0, 2**63), got {v!r}")
    if not 0 <= v < 2**63:
        raise ValueError(f"{name} must be an int in [0, 2**63), got {v!r}")
    return v


def check_positive(name: str, v: object) -> float:
    """``v`` as a float if it is a finite real number > 0 (not a bool)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"{name} must be a finite number > 0, got {v!r}")
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def check_ratio(ratio: object, name: str = "ratio") -> float:
    """``ratio`` as a float if it is a real number in (0, 1] (not a bool, not NaN)."""
    if isinstance(ratio, bool) or not isinstance(ratio, int | float):
        raise TypeError(f"{name} must be a number in (0, 1], got {ratio!r}")
    if not 0 < ratio <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {ratio!r}")
    return float(ratio)


def count(ratio: float, numel: int) -> int:
    """``ceil(ratio * numel)`` clamped to ``[1, numel]`` (0 for ``numel == 0``), in exact
    arithmetic on the decimal ``ratio`` reads as: ``0.07 * 100`` is 7, where the binary
    product ``7.000000000000001`` would round up to 8."""
    if not numel:
        return 0
    return min(numel, max(1, math.ceil(Fraction(repr(ratio)) * numel)))


def check_tensor(name: str, t: object, dtype: torch.dtype | None = None,
                 floating: bool = False, ndim: int | None = None) -> torch.Tensor:
    """``t`` if it is a tensor of ``dtype`` (or any float dtype if ``floating``) with
    ``ndim`` dimensions (any if ``None``)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if floating and not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    return t


def check_callable(name: str, v: T) -> T:
    """``v`` if it is ``None`` or callable."""
    if v is not None and not callable(v):
        raise TypeError(f"{name} must be None or a callable, got {v!r}")
    return v


def check_scalar_tensor(name: str, t: object) -> torch.Tensor:
    """``t`` if it is a float tensor of one value (a scale travelling with a payload)."""
    check_tensor(name, t, floating=True)
    if t.numel() != 1:
        raise ValueError(f"{name} must hold one value, got shape {tuple(t.shape)}")
    return t


def check_flat_out(out: object, n: int) -> torch.Tensor:
    """``out`` if it is a 1-D float tensor of ``n`` values."""
    check_tensor("out", out, floating=True, ndim=1)
    if out.numel() != n:
        raise ValueError(f"out must hold {n} values, got {out.numel()}")
    return out


def check_packed(packed: object, n: int) -> torch.Tensor:
    """``packed`` if it is 1-D uint8 with the ``ceil(n / 8)`` bytes of ``n`` sign bits."""
    check_tensor("packed", packed, dtype=torch.uint8, ndim=1)
    if packed.numel() != -(-n // 8):
        raise ValueError(f"packed must hold ceil({n} / 8) = {-(-n // 8)} bytes, got "
                         f"{packed.numel()}")
    return packed
