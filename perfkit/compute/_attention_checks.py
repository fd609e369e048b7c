"""Argument checks and the accumulation dtype shared by perfkit's attention kernels
(:mod:`perfkit.compute.flash`, :mod:`perfkit.compute.flash_costs`,
:mod:`perfkit.compute.flash_triton`, ring attention): one place, so that every entry point
refuses the same inputs with the same message.

Usage::

    check_qkv(q, k, v)                       # float tensors (..., T, D), alike
    tile = check_tile(tile)                  # a positive power of two
    scale = check_scale(scale, q.shape[-1])  # D ** -0.5 by default, else a finite number
"""

from __future__ import annotations

from typing import Any

import torch

from perfkit._checks import check_int, check_real, check_type

__all__ = ["acc_dtype", "check_qkv", "check_scale", "check_tile"]


def check_tile(tile: Any) -> int:
    """``tile`` if it is a positive power of two (an int), else ``ValueError``/``TypeError``."""
    check_int("tile", tile, 1)
    if tile & (tile - 1):
        raise ValueError(f"tile must be a positive power of two (1, 2, 4, ... 128), got {tile}")
    return tile


def check_qkv(q: Any, k: Any, v: Any, own_dv: bool = False) -> None:
    """Refuse ``q``, ``k``, ``v`` that are not float tensors ``(..., Tq, D)``, ``(..., Tk, D)``,
    ``(..., Tk, D)`` (``Dv`` for ``v`` if ``own_dv``) with the same leading dims, dtype and device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_type(name, t, torch.Tensor)
        if not t.is_floating_point() or t.dim() < 2:
            raise TypeError(f"{name} must be a floating-point tensor (..., T, D), got "
                            f"{t.dtype} of shape {tuple(t.shape)}")
    dv_ok = own_dv or k.shape[-1] == v.shape[-1]
    if (q.shape[:-2], q.shape[-1], k.shape[:-1]) != (k.shape[:-2], k.shape[-1], v.shape[:-1]) or not dv_ok:
        raise ValueError(f"q, k, v must be (..., Tq, D), (..., Tk, D), (..., Tk, D) with the "
                         f"same leading dims and D; got q {tuple(q.shape)}, k {tuple(k.shape)}"
                         f", v {tuple(v.shape)}")
    if len({q.dtype, k.dtype, v.dtype}) > 1 or len({q.device, k.device, v.device}) > 1:
        raise ValueError(f"q, k, v must share dtype and device, got {q.dtype}/{q.device}, "
                         f"{k.dtype}/{k.device}, {v.dtype}/{v.device}")


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulate in fp64 for fp64 inputs, else fp32 (bf16/fp16 tiles round only at the end)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_scale(scale: Any, head_dim: int) -> float:
    """The score scale: ``head_dim ** -0.5`` for ``None``, else ``scale`` if it is a finite
    number (NaN or inf would turn every score, and the output, into NaN)."""
    return head_dim ** -0.5 if scale is None else float(check_real("scale", scale))
