"""QSGD's and Sign's encode/decode kernels, eager and fused, side by side.

Eager PyTorch runs one kernel per operator, and each kernel streams its operands from
memory and writes its result back. QSGD's eager encode is three passes (the dithered
affine map into a float scratch, the cast to uint8, after the max), so it moves about 17
bytes per fp32 value where one pass moves 9. The fused kernels are the same arithmetic
written as one expression and handed to ``torch.compile`` (Inductor emits one C++/OpenMP
loop on CPU, one Triton kernel on CUDA):

=============  ===================================  ==========================
bytes/value    eager (read + written)               fused
=============  ===================================  ==========================
QSGD encode    max 4, dither 4+4, cast 4+1: 17      max 4, quantise 4+1: 9
QSGD decode    cast 1+4, affine 4+4: 13             1+4: 5
Sign encode    abs 4+4, sum 4, >= 4+1,              4 + 1/8 packed
               pack 8 planes (shift, or) 5: 22
Sign decode    unpack 8 planes (shift, and,         1/8 packed + 4
               widen) 1+1+1+1+1+4, affine 4+4: 17
=============  ===================================  ==========================

(:data:`BYTES_PER_VALUE` holds these counts; a copy moves 8.) The model counts every byte
as memory traffic, although the eager sign steps on single planes (arrays of n/8 bytes)
stay in the caches where n/8 bytes fit in them (at 2^24 values a plane is 2 MB).

``fused`` selects the path: ``None`` (the default) fuses tensors of at least
:data:`FUSED_MIN_NUMEL` values, ``True`` always fuses, ``False`` never does. The first
fused call per dtype and device compiles: tens of seconds on a 2-core CPU with an empty
Inductor cache (logged at INFO by ``perfkit.compress`` with the seconds it took), well under
one when a later process loads it from the disk cache (:mod:`perfkit.compress.isa_compile`).
If compiling fails (no C++ compiler, no Triton) the default path warns once and stays eager
on that device type; ``fused=True`` raises. ``PERFKIT_FUSED=0`` makes the
default eager. Both paths compute the same expressions, so bits and codes agree except
where ``x * s + u`` rounds differently in the last bit (a code then differs by one).

Usage::

    codes = qsgd_encode(x, pool_plus_128, s)        # uint8 codes, one pass when fused
    qsgd_decode(codes, 1 / s, out)                  # out = (codes - 128) / s
    packed, l1 = sign_encode(x)                     # sign bits 8 to a byte, sum |x|
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import torch

from perfkit._checks import check_callable, check_int, check_real, check_tensor
from perfkit.compress.isa_compile import compile_for_isa

__all__ = ["BYTES_PER_VALUE", "DITHER_POOL", "FUSED_MIN_NUMEL", "WRITTEN_PER_VALUE", "check_fused",
           "pack_bits", "qsgd_decode", "qsgd_encode", "sign_decode", "sign_encode", "unpack_bits",
           "use_fused"]

FUSED_MIN_NUMEL = 1 << 20
"""The default fuses from this many values up. On a 2-core CPU, QSGD's fused round trip
was 1.08x eager's time at 2^18 values, 0.97x at 2^20 and 0.71x at 2^22 (smaller tensors
stay in the caches, where the extra eager passes cost little); sign's fused path won from
2^14, but one threshold keeps small buckets from paying a compile at all."""

BYTES_PER_VALUE: dict[str, dict[str, dict[str, float]]] = {
    "qsgd": {"eager": {"encode": 17, "decode": 13}, "fused": {"encode": 9, "decode": 5}},
    "sign": {"eager": {"encode": 22, "decode": 17},
             "fused": {"encode": 4.125, "decode": 4.125}},
}
"""Bytes each path reads plus writes per fp32 value (the table above): the memory model
that predicts a path's time as ``bytes * numel / copy bandwidth``."""

WRITTEN_PER_VALUE: dict[str, dict[str, float]] = {"qsgd": {"fused": 1 + 4}, "sign": {"fused": 1 / 8 + 4}}
"""Of those, the bytes each fused path writes per fp32 value (codes or packed bits, then the
decoded fp32 values): with write-allocate, a store through the cache reads its line first."""

DITHER_POOL = 1 << 16
"""QSGD draws this many uniforms per call and tiles them over longer tensors."""

# device type -> why compiling failed there. Process-wide on purpose: whether a C++
# compiler or Triton works is a fact about the process, not about one compressor, and
# every compressor should fall back (and warn) once, not once per instance.
_broken: dict[str, str] = {}


Scratch = Callable[[str, int, torch.dtype, torch.device], torch.Tensor]


def _fresh(key: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(numel, dtype=dtype, device=device)


def check_fused(fused: object) -> bool | None:
    """Return ``fused`` if it is ``None``, ``True`` or ``False``; else raise ``TypeError``."""
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"fused must be None (auto), True or False, got {fused!r}")
    return fused


def use_fused(fused: bool | None, t: torch.Tensor) -> bool:
    """Resolve a ``fused`` argument for tensor ``t`` (see the module docstring).

    Raises:
        TypeError: ``fused`` is not ``None``, ``True`` or ``False``; ``t`` is not a tensor.
        RuntimeError: ``fused=True`` on a device type where compiling already failed.
    """
    check_fused(fused)
    check_tensor("t", t)
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
            warnings.warn(f"perfkit.compress.fused: torch.compile failed on {t.device.type} "
                          f"({_broken[t.device.type]}); using the eager kernels", stacklevel=3)
    return eager()


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


def _qsgd_encode_fused(x2, pool, s, codes2):
    # (rows, DITHER_POOL) with the pool broadcast over rows: contiguous loads, no index
    # arithmetic (an ``arange % DITHER_POOL`` gather over the flat tensor ran 1.3x slower)
    codes2.copy_((x2.float() * s + pool).to(torch.uint8))


def _qsgd_encode_split(flat, pool, s, codes, scratch):
    """The fused kernel on whole rows of ``DITHER_POOL`` values, the eager one on the rest."""
    rows = flat.numel() // DITHER_POOL
    body = rows * DITHER_POOL
    if rows:
        _QSGD_ENCODE(flat[:body].view(rows, DITHER_POOL), pool, s,
                     codes[:body].view(rows, DITHER_POOL))
    if body < flat.numel():
        _qsgd_encode_eager(flat[body:], pool[: flat.numel() - body], s, codes[body:], scratch)


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

    Raises:
        TypeError, ValueError: for arguments of the wrong type, dtype, shape or range.
    """
    check_tensor("flat", flat, floating=True, ndim=1)
    check_tensor("pool", pool, dtype=torch.float32, ndim=1)
    s = float(check_real("s", s, 0, lo_open=True))
    check_fused(fused)
    scr = check_callable("scratch", scratch, optional=True) or _fresh
    if pool.numel() != min(flat.numel(), DITHER_POOL):
        raise ValueError(f"pool must hold min(len(flat), {DITHER_POOL}) = "
                         f"{min(flat.numel(), DITHER_POOL)} values, got {pool.numel()}")
    codes = torch.empty(flat.numel(), dtype=torch.uint8, device=flat.device)
    if flat.numel():
        s_t = torch.tensor(s, dtype=torch.float32, device=flat.device)
        _dispatch(fused, flat, lambda: _qsgd_encode_split(flat, pool, s_t, codes, scr),
                  lambda: _qsgd_encode_eager(flat, pool, s_t, codes, scr))
    return codes


def _qsgd_decode_eager(codes, inv_s, out):
    out.copy_(codes)  # uint8 -> float
    torch.add(-128.0 * float(inv_s), out, alpha=float(inv_s), out=out)


def _qsgd_decode_fused(codes, inv_s, out):
    out.copy_((codes.to(torch.float32) - 128.0) * inv_s)


def qsgd_decode(codes: torch.Tensor, inv_s: torch.Tensor, out: torch.Tensor,
                fused: bool | None = None) -> torch.Tensor:
    """``out = (codes - 128) * inv_s`` for a flat ``out`` of ``codes``' length; returns it.

    Raises:
        TypeError, ValueError: ``codes`` not flat uint8, ``inv_s`` not one float, ``out``
            not a flat float tensor of ``codes``' length, ``fused`` not None/True/False.
    """
    check_tensor("codes", codes, dtype=torch.uint8, ndim=1)
    check_tensor("inv_s", inv_s, floating=True, numel=1)
    check_tensor("out", out, floating=True, ndim=1, numel=codes.numel())
    check_fused(fused)
    if codes.numel():
        inv = inv_s.reshape(()).to(torch.float32)
        _dispatch(fused, codes, lambda: _QSGD_DECODE(codes, inv, out),
                  lambda: _qsgd_decode_eager(codes, inv, out))
    return out


# --- Sign ---------------------------------------------------------------------------------
#
# Wire format, bit planes: for n values and m = n // 8, byte j < m holds the signs of values
# j, j + m, ..., j + 7m in bits 0..7 (1 for x >= 0), so plane k is the slice
# [k m, (k + 1) m) of the flat tensor; the last n % 8 values fill bits 0.. of one more
# byte. Planes keep every load and store of the fused kernels contiguous: packing eight
# consecutive values per byte needs eight strided loads per byte, and that kernel ran 1.6x
# slower.


def _planes(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t``'s first ``8 (n // 8)`` values as an (8, m) view of planes, and the tail."""
    m = t.numel() // 8
    return t[: 8 * m].view(8, m), t[8 * m:]


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Pack a flat bool tensor in Sign's bit-plane layout (above): ``ceil(n / 8)`` bytes.

    Raises:
        TypeError, ValueError: ``bits`` is not a 1-D bool tensor.
    """
    check_tensor("bits", bits, dtype=torch.bool, ndim=1)
    planes, tail = _planes(bits.view(torch.uint8))
    m = planes.shape[1]
    packed = torch.zeros(m + (tail.numel() > 0), dtype=torch.uint8, device=bits.device)
    for k in range(8):
        packed[:m] |= planes[k] << k
    if tail.numel():
        packed[m] = (tail << torch.arange(tail.numel(), dtype=torch.uint8,
                                          device=bits.device)).sum()
    return packed


def _unpack_into(packed: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Write the bits of ``packed`` (bit-plane layout) into flat ``out`` as 0 / 1."""
    planes, tail = _planes(out)
    m = planes.shape[1]
    for k in range(8):  # (m,) bytes per plane: cheap next to the (8, m) output
        planes[k].copy_((packed[:m] >> k) & 1)
    if tail.numel():
        shifts = torch.arange(tail.numel(), dtype=torch.uint8, device=packed.device)
        tail.copy_((packed[m:].expand(tail.numel()) >> shifts) & 1)
    return out


def unpack_bits(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of :func:`pack_bits`: a flat bool tensor of ``n`` values.

    Raises:
        TypeError, ValueError: ``n`` is not an int >= 0, ``packed`` not ``ceil(n / 8)``
            uint8 bytes.
    """
    nbytes = -(-check_int("n", n) // 8)  # ceil(n / 8) bytes of sign bits
    check_tensor("packed", packed, dtype=torch.uint8, ndim=1, numel=nbytes)
    return _unpack_into(packed, torch.empty(n, dtype=torch.bool, device=packed.device))


def _sign_encode_eager(flat, scratch):
    mag = torch.abs(flat, out=scratch("mag", flat.numel(), flat.dtype, flat.device))
    l1 = mag.sum().double()  # NaN and inf propagate into it
    bits = torch.ge(flat, 0, out=scratch("bits", flat.numel(), torch.bool, flat.device))
    return pack_bits(bits), l1


def _sign_encode_fused(x8, packed):
    bits = (x8[0] >= 0).to(torch.int32)  # x8: (8, m) planes
    mag = x8[0].float().abs()
    for k in range(1, 8):
        bits = bits | ((x8[k] >= 0).to(torch.int32) << k)
        mag = mag + x8[k].float().abs()
    packed.copy_(bits.to(torch.uint8))
    return mag.sum(dtype=torch.float64)


def _sign_encode_split(flat):
    """The fused kernel on the planes, the eager one on the last ``n % 8`` values."""
    planes, tail = _planes(flat)
    m = planes.shape[1]
    packed = torch.empty(m + (tail.numel() > 0), dtype=torch.uint8, device=flat.device)
    l1 = _SIGN_ENCODE(planes, packed[:m])
    if tail.numel():
        tail_packed, tail_l1 = _sign_encode_eager(tail, _fresh)
        packed[m:] = tail_packed
        l1 = l1 + tail_l1
    return packed, l1


def sign_encode(flat: torch.Tensor, fused: bool | None = None,
                scratch: Scratch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sign bits (1 for ``x >= 0``) in the bit-plane layout (:func:`pack_bits`) and
    ``sum(|flat|)`` as a 0-dim fp64 tensor (NaN or inf if ``flat`` has any).
    ``scratch`` supplies the eager path's two temporaries (see :func:`qsgd_encode`).

    Raises:
        TypeError, ValueError: ``flat`` is not a 1-D float tensor, ``fused`` not
            None/True/False, ``scratch`` not callable.
    """
    check_tensor("flat", flat, floating=True, ndim=1)
    check_fused(fused)
    scr = check_callable("scratch", scratch, optional=True) or _fresh
    if flat.numel() < 8:  # no whole plane: nothing to fuse
        return _sign_encode_eager(flat, scr)
    return _dispatch(fused, flat, lambda: _sign_encode_split(flat),
                     lambda: _sign_encode_eager(flat, scr))


def _sign_decode_eager(packed, sc, out):
    f = float(sc)
    # 0 / 1, then -f + 2f * bit: exact, and a vectorised add (torch.where with 0-dim
    # tensors for the two values measured 4x slower)
    torch.add(-f, _unpack_into(packed, out), alpha=2 * f, out=out)


def _sign_decode_fused(packed, sc, out8):
    shifts = torch.arange(8, dtype=torch.int32, device=packed.device)
    bits = (packed.to(torch.int32).unsqueeze(0) >> shifts[:, None]) & 1  # (8, m)
    out8.copy_(torch.where(bits == 1, sc, -sc))


def _sign_decode_split(packed, sc, out):
    planes, tail = _planes(out)
    m = planes.shape[1]
    _SIGN_DECODE(packed[:m], sc, planes)
    if tail.numel():
        _sign_decode_eager(packed[m:], sc, tail)


def sign_decode(packed: torch.Tensor, scale: torch.Tensor, out: torch.Tensor,
                fused: bool | None = None) -> torch.Tensor:
    """``out[i] = +scale`` where value ``i``'s bit is set, else ``-scale``; ``out`` flat,
    returned.

    Raises:
        TypeError, ValueError: ``out`` not a 1-D float tensor, ``packed`` not its
            ``ceil(n / 8)`` uint8 bytes, ``scale`` not one float, ``fused`` not None/True/False.
    """
    check_tensor("out", out, floating=True, ndim=1)
    check_tensor("packed", packed, dtype=torch.uint8, ndim=1, numel=-(-out.numel() // 8))
    check_tensor("scale", scale, floating=True, numel=1)
    check_fused(fused)
    sc = scale.to(out.dtype).reshape(())
    if out.numel() < 8:
        _sign_decode_eager(packed, sc, out)
    else:
        _dispatch(fused, out, lambda: _sign_decode_split(packed, sc, out),
                  lambda: _sign_decode_eager(packed, sc, out))
    return out


_QSGD_ENCODE = compile_for_isa(_qsgd_encode_fused)
_QSGD_DECODE = compile_for_isa(_qsgd_decode_fused)
_SIGN_ENCODE = compile_for_isa(_sign_encode_fused)
_SIGN_DECODE = compile_for_isa(_sign_decode_fused)
