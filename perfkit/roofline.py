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

from perfkit._checks import check_int, check_real

__all__ = ["attainable_flops", "bound", "matmul_bytes", "matmul_flops", "matmul_intensity"]


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of ``(m, k) @ (k, n)``: one multiply and one add per inner-product term."""
    for name, v in (('m', m), ('n', n), ('k', k)):
        check_int(name, v, 1)
    return 2 * m * n * k


def matmul_bytes(m: int, n: int, k: int, bytes_per_element: int = 4) -> int:
    """Minimum bytes moved by ``(m, k) @ (k, n)``: read A and B once, write C once."""
    for name, v in (('m', m), ('n', n), ('k', k), ('bytes_per_element', bytes_per_element)):
        check_int(name, v, 1)
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
    intensity, peak_flops, bandwidth = (float(check_real(name, v, 0, lo_open=True)) for name, v in (
        ("intensity", intensity), ("peak_flops", peak_flops), ("bandwidth", bandwidth)))
    return min(peak_flops, intensity * bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """``"memory"`` below the ridge point ``peak_flops / bandwidth``, else ``"compute"``."""
    intensity, peak_flops, bandwidth = (float(check_real(name, v, 0, lo_open=True)) for name, v in (
        ("intensity", intensity), ("peak_flops", peak_flops), ("bandwidth", bandwidth)))
    return "memory" if intensity < peak_flops / bandwidth else "compute"
