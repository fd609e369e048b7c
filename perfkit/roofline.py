"""The roofline model (Williams, Waterman and Patterson, 2009): FLOPs, bytes, intensity.

Pure arithmetic, no measurement: a matmul's FLOPs and minimum bytes, their ratio (the
arithmetic intensity), and the fastest an operation of that intensity can run under a
compute ceiling and a memory ceiling, ``min(peak_flops, intensity * bandwidth)``.
:mod:`perfkit.hw` measures the two ceilings on this machine.

Usage::

    from perfkit import roofline
    i = roofline.matmul_intensity(1024, 1024, 1024)          # 170.7 FLOP/byte in fp32
    print(roofline.attainable_flops(i, 2e11, 2e10), roofline.bound(i, 2e11, 2e10))
"""

from __future__ import annotations

import math

__all__ = ["attainable_flops", "bound", "matmul_bytes", "matmul_flops", "matmul_intensity"]


def _check_dims(**dims: int) -> None:
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def _positive(name: str, v: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a finite number > 0, got {v!r}")
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of ``(m, k) @ (k, n)``: one multiply and one add per inner-product term."""
    _check_dims(m=m, n=n, k=k)
    return 2 * m * n * k


def matmul_bytes(m: int, n: int, k: int, bytes_per_element: int = 4) -> int:
    """Minimum bytes moved by ``(m, k) @ (k, n)``: read A and B once, write C once."""
    _check_dims(m=m, n=n, k=k, bytes_per_element=bytes_per_element)
    return (m * k + k * n + m * n) * bytes_per_element


def matmul_intensity(m: int, n: int, k: int, bytes_per_element: int = 4) -> float:
    """Arithmetic intensity of a matmul in FLOP/byte (a square fp32 one: ``n / 6``)."""
    return matmul_flops(m, n, k) / matmul_bytes(m, n, k, bytes_per_element)


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline: ``min(peak_flops, intensity * bandwidth)`` in FLOP/s.

    Args:
        intensity: FLOPs per byte moved (> 0).
        peak_flops: compute ceiling in FLOP/s.
        bandwidth: memory ceiling in bytes/s.
    """
    intensity, peak_flops = _positive("intensity", intensity), _positive("peak_flops", peak_flops)
    return min(peak_flops, intensity * _positive("bandwidth", bandwidth))


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """``"memory"`` below the ridge point ``peak_flops / bandwidth``, else ``"compute"``."""
    ridge = _positive("peak_flops", peak_flops) / _positive("bandwidth", bandwidth)
    return "memory" if _positive("intensity", intensity) < ridge else "compute"
