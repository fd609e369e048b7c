"""QSGD's and Sign's encode/decode kernels, eager and fused, side by side.

Eager PyTorch runs one kernel per operator, and each kernel streams its operands from
memory and writes its result back. QSGD's eager encode is three passes (the dithered
affine map into a float scratch, the cast to uint8, after the max), so it moves about 17
bytes per fp32 value where one pass moves 9. The fused kernels are the same arithmetic
written as one expression and handed to ``torch.compile`` (Inductor emits one C++/OpenMP
loop on CPU, one Triton kernel on CUDA):

=============  ================================  ============================
bytes/value    eager (read + written)            fused
=============  ================================  ============================
QSGD encode    max 4, dither 4+4, cast 4+1: 17   max 4, quantise 4+1: 9
QSGD decode    cast 1+4, affine 4+4: 13          1+4: 5
Sign encode    abs 4+4, sum 4, >= 4+1,           4 + 1/8
               pack 1+1/8: 18.1
Sign decode    widen 1/8+1, gather 1+4: 6.1      (the same eager gather)
=============  ================================  ============================

(:data:`BYTES_PER_VALUE` holds these counts; a copy moves 8.) Sign's decode is one gather
from a 256 x 8 table of ``+-scale`` in both paths.

``fused`` selects the path: ``None`` (the default) fuses tensors of at least
:data:`FUSED_MIN_NUMEL` values, ``True`` always fuses, ``False`` never does. The first
fused call per dtype and device compiles (seconds; later processes reuse Inductor's disk
cache). If compiling fails (no C++ compiler, no Triton) the default path warns once and
stays eager on that device type; ``fused=True`` raises. ``PERFKIT_FUSED=0`` makes the
default eager. Both paths compute the same expressions, so bits and codes agree except
where ``x * s + u`` rounds differently in the last bit (a code then differs by one).

Usage::

    codes = qsgd_encode(x, pool_plus_128, s)        # uint8 codes, one pass when fused
    qsgd_decode(codes, 1 / s, out)                  # out = (codes - 128) / s
    packed, l1 = sign_encode(x)                     # sign bits 8 to a byte, sum |x|
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["BYTES_PER_VALUE", "DITHER_POOL", "FUSED_MIN_NUMEL", "pack_bits", "qsgd_decode",
           "qsgd_encode", "sign_decode", "sign_encode", "use_fused"]

FUSED_MIN_NUMEL = 1 << 20
"""Below this many values the eager passes run mostly in cache and a call's fixed cost
dominates, so the default stays eager there (and small buckets never compile)."""

BYTES_PER_VALUE: dict[str, dict[str, dict[str, float]]] = {
    "qsgd": {"eager": {"encode": 17, "decode": 13}, "fused": {"encode": 9, "decode": 5}},
    "sign": {"eager": {"encode": 18.125, "decode": 6.125},
             "fused": {"encode": 4.125, "decode": 6.125}},
}
"""Bytes each path reads plus writes per fp32 value (the table above): the memory model
that predicts a path's time as ``bytes * numel / copy bandwidth``."""

DITHER_POOL = 1 << 16
"""QSGD draws this many uniforms per call and tiles them over longer tensors."""

_BIT_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)  # bit i = value i
_BYTE_BITS = torch.arange(256).unsqueeze(1).bitwise_and(_BIT_WEIGHTS.long()).ne(0)  # (256, 8)
_broken: dict[str, str] = {}  # device type -> why compiling failed there


Scratch = Callable[[str, int, torch.dtype, torch.device], torch.Tensor]


def _fresh(key: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(numel, dtype=dtype, device=device)


def use_fused(fused: bool | None, t: torch.Tensor) -> bool:
    """Resolve a ``fused`` argument for tensor ``t`` (see the module docstring).

    Raises:
        TypeError: ``fused`` is not ``None``, ``True`` or ``False``.
        RuntimeError: ``fused=True`` on a device type where compiling already failed.
    """
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"fused must be None (auto), True or False, got {fused!r}")
    dev = t.device.type
    if fused is True:
        if dev in _broken:
            raise RuntimeError(f"fused=True, but torch.compile failed on {dev}: {_broken[dev]}")
        return True
    return (fused is None and t.numel() >= FUSED_MIN_NUMEL and dev not in _broken
            and os.environ.get("PERFKIT_FUSED", "1") not in ("0", "false"))


def _dispatch(fused: bool | None, t: torch.Tensor, compiled: Callable[[], object],
              eager: Callable[[], object]):
    """Run ``compiled()`` when :func:`use_fused` says so, else ``eager()``; a
    failed compile is recorded for ``t``'s device type, warned about once, and (unless
    ``fused=True``) answered by the eager kernel."""
    if use_fused(fused, t):
        try:
            with torch.no_grad():
                return compiled()
        except Exception as e:  # compile errors surface on the first call
            if fused is True:
                raise RuntimeError(f"fused=True, but torch.compile failed on {t.device.type}: "
                                   f"{e}") from e
            _broken[t.device.type] = f"{type(e).__name__}: {str(e)[:200]}"
            warnings.warn(f"perfkit.fused: torch.compile failed on {t.device.type} "
                          f"({_broken[t.device.type]}); using the eager kernels", stacklevel=3)
    return eager()


def _compile(fn: Callable) -> Callable:
    """``torch.compile(fn)`` with one graph for every size, built on the first call."""
    cache: list[Callable] = []

    def run(*args):
        if not cache:
            cache.append(torch.compile(fn, dynamic=True, fullgraph=True))
        return cache[0](*args)
    return run


# --- QSGD ---------------------------------------------------------------------------------


def _qsgd_encode_eager(flat, pool, s, codes, scratch):
    n, p = flat.numel(), pool.numel()
    rows = n // p
    v = scratch("v", n, torch.float32, flat.device)
    # v = pool + s * x, the pool broadcast over rows of p values: (rows, p), then the tail
    torch.add(pool.expand(rows, p), flat[: rows * p].view(rows, p), alpha=float(s),
              out=v[: rows * p].view(rows, p))
    torch.add(pool[: n - rows * p], flat[rows * p:], alpha=float(s), out=v[rows * p:])
    codes.copy_(v)  # v in [1, 256): the cast's truncation is the floor


def _qsgd_encode_fused(flat, pool, s, codes):
    # a constant modulus, not ``% pool.numel()``: a symbolic one is an integer division
    # per value and made this kernel 10x slower (``& (DITHER_POOL - 1)``: 1.5x slower)
    i = torch.arange(flat.numel(), device=flat.device) % DITHER_POOL
    codes.copy_((flat.float() * s + pool[i]).to(torch.uint8))


def qsgd_encode(flat: torch.Tensor, pool: torch.Tensor, s: float,
                fused: bool | None = None, scratch: Scratch | None = None) -> torch.Tensor:
    """uint8 codes ``floor(flat[i] * s + pool[i % DITHER_POOL])``.

    Args:
        flat: 1-D float tensor with ``|flat| * s < 127``.
        pool: ``(min(len(flat), DITHER_POOL),)`` fp32 uniforms in [0, 1) already shifted
            by 128, on ``flat``'s device.
        s: the scale (a float; the fused kernel takes it as a 0-dim tensor so a new
            scale does not recompile).
        fused: the path, see the module docstring.
        scratch: ``scratch(key, numel, dtype, device) -> tensor`` for the eager path's
            temporary (a compressor's reusable buffers: a fresh 64 MB allocation costs
            page faults comparable to a pass over it); default: allocate each call.
    Returns:
        A new uint8 tensor of ``flat``'s length.
    """
    if pool.numel() != min(flat.numel(), DITHER_POOL):
        raise ValueError(f"pool must hold min(len(flat), {DITHER_POOL}) = "
                         f"{min(flat.numel(), DITHER_POOL)} values, got {pool.numel()}")
    codes = torch.empty(flat.numel(), dtype=torch.uint8, device=flat.device)
    if flat.numel():
        s_t = torch.tensor(s, dtype=torch.float32, device=flat.device)
        _dispatch(fused, flat, lambda: _QSGD_ENCODE(flat, pool, s_t, codes),
                  lambda: _qsgd_encode_eager(flat, pool, s_t, codes, scratch or _fresh))
    return codes


def _qsgd_decode_eager(codes, inv_s, out):
    out.copy_(codes)  # uint8 -> float
    torch.add(-128.0 * float(inv_s), out, alpha=float(inv_s), out=out)


def _qsgd_decode_fused(codes, inv_s, out):
    out.copy_((codes.to(torch.float32) - 128.0) * inv_s)


def qsgd_decode(codes: torch.Tensor, inv_s: torch.Tensor, out: torch.Tensor,
                fused: bool | None = None) -> torch.Tensor:
    """``out = (codes - 128) * inv_s`` for a flat ``out`` of ``codes``' length; returns it."""
    if codes.numel():
        inv = inv_s.reshape(()).to(torch.float32)
        _dispatch(fused, codes, lambda: _QSGD_DECODE(codes, inv, out),
                  lambda: _qsgd_decode_eager(codes, inv, out))
    return out


# --- Sign ---------------------------------------------------------------------------------


def pack_bits(bits: torch.Tensor, use_numpy: bool = True) -> torch.Tensor:
    """Pack a flat bool tensor 8 to a byte, value ``i`` of each group in bit ``i``; the
    last byte is padded with zeros. ``use_numpy`` (CPU tensors only) uses
    ``numpy.packbits`` (a vectorised loop, ~50x faster than the fallback); otherwise the
    (n/8, 8) bit matrix is weighted by powers of two and summed."""
    n = bits.numel()
    if use_numpy:
        return torch.from_numpy(np.packbits(bits.numpy(), bitorder="little"))
    pad = torch.zeros(math.ceil(n / 8) * 8, dtype=torch.uint8, device=bits.device)
    pad[:n] = bits
    return (pad.view(-1, 8) * _BIT_WEIGHTS.to(bits.device)).sum(1, dtype=torch.uint8)


def _sign_encode_eager(flat, scratch):
    mag = torch.abs(flat, out=scratch("mag", flat.numel(), flat.dtype, flat.device))
    l1 = mag.sum().double()  # NaN and inf propagate into it
    bits = torch.ge(flat, 0, out=scratch("bits", flat.numel(), torch.bool, flat.device))
    return pack_bits(bits, use_numpy=flat.device.type == "cpu"), l1


def _sign_encode_fused(x8, packed):
    bits = (x8[:, 0] >= 0).to(torch.int32)
    mag = x8[:, 0].float().abs()
    for k in range(1, 8):
        bits = bits | ((x8[:, k] >= 0).to(torch.int32) << k)
        mag = mag + x8[:, k].float().abs()
    packed.copy_(bits.to(torch.uint8))
    return mag.sum(dtype=torch.float64)


def _sign_encode_split(flat):
    """The fused kernel on whole bytes, the eager one on the last ``n % 8`` values."""
    full = flat.numel() // 8
    packed = torch.empty(math.ceil(flat.numel() / 8), dtype=torch.uint8, device=flat.device)
    l1 = _SIGN_ENCODE(flat[: full * 8].view(full, 8), packed[:full])
    if flat.numel() > full * 8:
        tail, tail_l1 = _sign_encode_eager(flat[full * 8:], _fresh)
        packed[full:] = tail
        l1 = l1 + tail_l1
    return packed, l1


def sign_encode(flat: torch.Tensor, fused: bool | None = None,
                scratch: Scratch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sign bits (1 for ``x >= 0``) packed 8 to a byte, value ``i`` of a group in bit
    ``i``, and ``sum(|flat|)`` as a 0-dim fp64 tensor (NaN or inf if ``flat`` has any).
    ``scratch`` supplies the eager path's two temporaries (see :func:`qsgd_encode`)."""
    return _dispatch(fused, flat, lambda: _sign_encode_split(flat),
                     lambda: _sign_encode_eager(flat, scratch or _fresh))


def sign_decode(packed: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out[i] = +scale`` where bit ``i`` is set, else ``-scale``; ``out`` flat, returned.

    One gather: each packed byte selects a row of a 256 x 8 table of ``+-scale``.
    """
    sc = scale.to(out.dtype).reshape(())
    lut = torch.where(_BYTE_BITS.to(packed.device), sc, -sc)  # (256, 8)
    full = out.numel() // 8
    torch.index_select(lut, 0, packed[:full].long(), out=out[: full * 8].view(full, 8))
    if out.numel() > full * 8:  # the last, partly used byte
        out[full * 8:] = lut[packed[full].long(), : out.numel() - full * 8]
    return out


_QSGD_ENCODE = _compile(_qsgd_encode_fused)
_QSGD_DECODE = _compile(_qsgd_decode_fused)
_SIGN_ENCODE = _compile(_sign_encode_fused)
