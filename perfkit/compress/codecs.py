"""Gradient compression: sparsifiers and quantisers.

Compressors turn a flat fp32 gradient into a few *payload* tensors (what goes on the
wire) and back. ``Compressed.wire_bytes`` counts every payload byte, indices and scales
included, so compression ratios are exact, not nominal.

* :class:`TopK`: the ``k = ceil(ratio * numel)`` largest magnitudes (the product taken
  exactly on the decimal ``ratio``: 7 of 100 for 0.07), values + int32 indices.
  ``method="exact"`` uses ``torch.topk``; ``method="sampled"`` estimates the threshold from
  a random sample, as in Deep Gradient Compression (Lin et al., 2018), then trims the
  candidates above it to exactly ``k`` with a small exact top-k.
* :class:`RandomK`: ``k`` random coordinates chosen by a seed; only the values travel
  (plus the 8-byte seed), and ranks sharing the seed can all-reduce the values.
* :class:`QSGD`: int8 with stochastic rounding (Alistarh et al., 2017, with a max-norm
  scale): unbiased, ``E[decompress(compress(x))] = x``.
* :class:`Sign`: 1 bit per value with one scale ``mean(|x|)`` (signSGD with a scale,
  as in EF-SignSGD, Karimireddy et al., 2019).

Error feedback around any of them is in :mod:`perfkit.compress.feedback`, the DDP
communication hook that sends gradients through them in :mod:`perfkit.compress.hook`,
their predicted errors and a one-process model of compressed training in
:mod:`perfkit.compress.simulate`.

Usage::

    topk = TopK(0.01)
    c = topk.compress(grad)                         # c.wire_bytes: exact payload bytes
    approx = topk.decompress(c)                     # dense, same shape as grad
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch

from perfkit._checks import check_int, check_real, check_seed, check_tensor
from perfkit.compress import fused as fused_kernels

__all__ = ["Compressed", "Compressor", "QSGD", "RandomK", "Sign", "TopK"]



def _count(ratio: float, numel: int) -> int:
    """``ceil(ratio * numel)`` clamped to ``[1, numel]`` (0 for ``numel == 0``), in exact
    arithmetic on the decimal ``ratio`` reads as: ``0.07 * 100`` is 7, where the binary
    product ``7.000000000000001`` would round up to 8."""
    if not numel:
        return 0
    return min(numel, max(1, math.ceil(Fraction(repr(ratio)) * numel)))


@dataclass

class Compressed:
    """Payload tensors (on the wire) plus what the receiver already knows (shape, dtype)."""

    tensors: tuple[torch.Tensor, ...]
    shape: torch.Size
    dtype: torch.dtype
    meta: dict[str, Any] = field(default_factory=dict)  # small scalars, e.g. a seed

    def __post_init__(self) -> None:
        if not isinstance(self.tensors, tuple) or not all(
                isinstance(t, torch.Tensor) for t in self.tensors):
            raise TypeError(f"tensors must be a tuple of torch.Tensor, got {self.tensors!r}")
        if not isinstance(self.shape, tuple) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in self.shape):
            raise TypeError(f"shape must be a tuple of ints >= 0 (a torch.Size), got "
                            f"{self.shape!r}")
        self.shape = torch.Size(self.shape)
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {self.dtype!r}")
        if not isinstance(self.meta, dict):
            raise TypeError(f"meta must be a dict of scalars, got {type(self.meta).__name__}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def wire_bytes(self) -> int:
        """Bytes of every payload tensor plus 8 per scalar in ``meta``."""
        return sum(t.numel() * t.element_size() for t in self.tensors) + 8 * len(self.meta)


_NONFINITE = ("tensor contains NaN or inf: the gradient diverged upstream (check the learning "
              "rate or loss scaling) before compression")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """Flat view of ``t``; raises on non-tensors and non-float dtypes."""
    return check_tensor("tensor", t, floating=True).detach().reshape(-1)


def _check_finite(flat: torch.Tensor, reduced: torch.Tensor | None = None) -> None:
    """Raise if ``flat`` holds NaN or inf.

    NaN and inf propagate into any sum or max, so one reduction the compressor needs
    anyway (``reduced``; else a sum) detects them; the exact elementwise check runs only
    when that reduction is not finite, which could also be an fp32 overflow.
    """
    if flat.numel():
        r = flat.sum() if reduced is None else reduced
        if not torch.isfinite(r) and not torch.isfinite(flat).all():
            raise ValueError(_NONFINITE)


def flat_finite(t: torch.Tensor) -> torch.Tensor:
    """``t`` flattened to 1-D, if it is a floating tensor holding no NaN or inf."""
    flat = _flat(t)
    _check_finite(flat)
    return flat


class Compressor:
    """Base class: ``compress(t) -> Compressed``, ``decompress(c, out=None) -> tensor``.

    ``summable`` is True when payloads from different ranks can be summed elementwise
    before decompressing (an all-reduce instead of an all-gather). A payload may be a
    view of the input (the identity's is): a caller that changes the input afterwards
    must copy such a payload first. Compressors keep scratch buffers between calls (a
    fresh 64 MB allocation costs page faults comparable to a copy), so one instance must
    not be shared between threads.
    """

    name = "none"
    summable = True

    def __init__(self) -> None:
        self._bufs: dict[str, torch.Tensor] = {}

    def _scratch(self, key: str, numel: int, dtype: torch.dtype, device: torch.device
                 ) -> torch.Tensor:
        b = getattr(self, "_bufs", {}).get(key)
        if b is None or b.numel() != numel or b.dtype != dtype or b.device != device:
            b = torch.empty(numel, dtype=dtype, device=device)
            self._bufs = {**getattr(self, "_bufs", {}), key: b}
        return b

    def compress(self, t: torch.Tensor) -> Compressed:
        """Identity: the dense tensor is its own payload."""
        flat = flat_finite(t)
        return Compressed((flat,), t.shape, t.dtype)

    def decompress(self, c: Compressed, out: torch.Tensor | None = None) -> torch.Tensor:
        """Dense tensor of ``c.shape`` from the payload, written into ``out`` if given
        (without ``out``, the identity's result views the payload)."""
        _check_out(c, out)
        dense = c.tensors[0].view(c.shape)
        return dense if out is None else out.view(c.shape).copy_(dense)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def _pct(ratio: float) -> str:
    return f"{ratio * 100:g}pct".replace(".", "p")


def _check_out(c: Compressed, out: torch.Tensor | None) -> None:
    """``c`` must be a :class:`Compressed`, ``out`` ``None`` or a tensor of ``c.numel`` values."""
    if not isinstance(c, Compressed):
        raise TypeError(f"c must be a Compressed payload, got {type(c).__name__}")
    if out is not None:
        check_tensor("out", out, floating=True)
        if out.numel() != c.numel:
            raise ValueError(f"out must have {c.numel} elements (the payload's), got "
                             f"{out.numel()}")


def _dense(c: Compressed, out: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    if out is None:
        return torch.empty(c.numel, dtype=c.dtype, device=device)
    return out.view(-1)


def _scatter(c: Compressed, values: torch.Tensor, idx: torch.Tensor,
             out: torch.Tensor | None) -> torch.Tensor:
    dense = _dense(c, out, values.device).zero_()
    dense.index_copy_(0, idx.long(), values.to(c.dtype))
    return dense.view(c.shape)


class TopK(Compressor):
    """Keep the ``ceil(ratio * numel)`` largest magnitudes: values (fp32) + int32 indices.

    Args:
        ratio: fraction of values kept, in (0, 1].
        method: ``"exact"`` (``torch.topk`` over every value) or ``"sampled"``: the
            threshold is estimated from ``sample_ratio`` of the values, aiming at 1.5 k
            candidates; an exact top-k over the candidates trims them to ``k``. When the
            sample overshoots (fewer than ``k`` candidates) the exact path runs, so the
            result is the exact top-k set either way; only the time differs.
        sample_ratio: share of the values sampled for the threshold (sampled only).
        seed: seed of the sampling generator (sampled only), an int in [0, 2**63).

    Raises:
        TypeError, ValueError: for an argument of the wrong type or out of range.
    """

    summable = False

    def __init__(self, ratio: float, method: str = "exact", sample_ratio: float = 0.01,
                 seed: int = 0) -> None:
        super().__init__()
        self.ratio = check_real("ratio", ratio, 0, 1, lo_open=True)
        if method not in ("exact", "sampled"):
            raise ValueError(f"method must be 'exact' or 'sampled', got {method!r}")
        self.method = method
        self.sample_ratio = check_real("sample_ratio", sample_ratio, 0, 1, lo_open=True)
        self.gen = torch.Generator().manual_seed(check_seed("seed", seed))
        self.name = f"topk_{_pct(self.ratio)}" + ("_sampled" if method == "sampled" else "")

    def k(self, numel: int) -> int:
        """Values kept from ``numel``: ``ceil(ratio * numel)`` in exact decimal arithmetic,
        at least 1 (0 for an empty tensor)."""
        return _count(self.ratio, check_int("numel", numel))

    def _sampled_indices(self, mag: torch.Tensor, k: int) -> torch.Tensor:
        n = mag.numel()
        s = min(n, max(1000, math.floor(Fraction(repr(self.sample_ratio)) * n)))
        # index_select, not mag[idx]: advanced indexing is ~20x slower for a gather
        sample = torch.index_select(mag, 0, torch.randint(n, (s,), generator=self.gen)
                                    .to(mag.device))  # (s,)
        q = min(s, max(1, -(-3 * k * s // (2 * n))))  # ceil(1.5 k s / n), in integers
        thr = torch.topk(sample, q, sorted=False).values.min()
        cand = (mag >= thr).nonzero().squeeze(1)  # (~1.5 k,)
        if cand.numel() < k:  # the sample overestimated the threshold: exact path
            return torch.topk(mag, k, sorted=False).indices
        best = torch.topk(torch.index_select(mag, 0, cand), k, sorted=False).indices
        return torch.index_select(cand, 0, best)

    def compress(self, t: torch.Tensor) -> Compressed:
        flat = flat_finite(t)
        k = self.k(flat.numel())
        mag = torch.abs(flat, out=self._scratch("mag", flat.numel(), flat.dtype, flat.device))
        if self.method == "exact" or k == flat.numel():
            idx = torch.topk(mag, k, sorted=False).indices
        else:
            idx = self._sampled_indices(mag, k)
        idx_dtype = torch.int32 if flat.numel() < 2**31 else torch.int64
        return Compressed((torch.index_select(flat, 0, idx).float(), idx.to(idx_dtype)),
                          t.shape, t.dtype)

    def decompress(self, c: Compressed, out: torch.Tensor | None = None) -> torch.Tensor:
        _check_out(c, out)
        return _scatter(c, c.tensors[0], c.tensors[1], out)


class RandomK(Compressor):
    """Keep ``ceil(ratio * numel)`` coordinates drawn without replacement from a seed.

    Every call draws a new seed from ``seed``'s sequence, so two instances created with
    the same ``seed`` and called in the same order (one per rank) pick the same
    coordinates: their values can be all-reduced (``summable``).

    Args:
        ratio: fraction of values kept, in (0, 1].
        seed: seed of the sequence of per-call seeds, an int in [0, 2**63).

    Raises:
        TypeError, ValueError: for an argument of the wrong type or out of range.
    """

    summable = True

    def __init__(self, ratio: float, seed: int = 0) -> None:
        super().__init__()
        self.ratio = check_real("ratio", ratio, 0, 1, lo_open=True)
        self.seeds = torch.Generator().manual_seed(check_seed("seed", seed))
        self.name = f"randomk_{_pct(self.ratio)}"

    def k(self, numel: int) -> int:
        """Values kept from ``numel``, as :meth:`TopK.k`."""
        return _count(self.ratio, check_int("numel", numel))

    def _indices(self, numel: int, seed: int, device: torch.device) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randperm(numel, generator=g)[: self.k(numel)].to(device)

    def compress(self, t: torch.Tensor) -> Compressed:
        flat = flat_finite(t)
        seed = int(torch.randint(2**62, (1,), generator=self.seeds))
        idx = self._indices(flat.numel(), seed, flat.device)
        return Compressed((torch.index_select(flat, 0, idx).float(),), t.shape, t.dtype,
                          {"seed": seed})

    def decompress(self, c: Compressed, out: torch.Tensor | None = None) -> torch.Tensor:
        _check_out(c, out)
        idx = self._indices(c.numel, c.meta["seed"], c.tensors[0].device)
        return _scatter(c, c.tensors[0], idx, out)


class QSGD(Compressor):
    """8-bit codes with stochastic rounding: ``code = floor(x * s + u) + 128``,
    ``u ~ U[0, 1)``, ``s = 126.99 / max|x|``; ``1 / s`` travels as one fp32.

    Unbiased for every value: ``E[floor(v + u)] = v``, so ``E[(code - 128) / s] = x``.
    The uniform draws come from a fresh pool of 65,536 per call, tiled over longer
    tensors: each value's rounding is still unbiased, and values 65,536 apart share a
    draw (generating one uniform per value costs more than the rest of the encoding).
    The 0.01 margin below 127 keeps ``x * s + u + 128`` under 256 despite rounding.

    Args:
        seed: seed of the dither generator (give each rank its own), in [0, 2**63).
        fused: encode and decode in one pass each through ``torch.compile``: ``None``
            (default) for tensors of at least :data:`perfkit.compress.FUSED_MIN_NUMEL`
            values, ``True`` always, ``False`` never (see :mod:`perfkit.compress.fused`).
            The default fuses any real model's buckets, so the first large bucket in a
            process compiles: tens of seconds on a 2-core CPU with an empty Inductor cache
            (logged at INFO by ``perfkit.compress`` with the seconds it took), well under
            one from a warm cache. ``fused=False`` or ``PERFKIT_FUSED=0`` never compiles.
    """

    summable = False
    levels = 127
    pool = fused_kernels.DITHER_POOL

    def __init__(self, seed: int = 0, fused: bool | None = None) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(check_seed("seed", seed))
        self.fused = fused_kernels.check_fused(fused)
        self.name = "qsgd"

    def compress(self, t: torch.Tensor) -> Compressed:
        flat = _flat(t)
        n = flat.numel()
        if n:
            lo, hi = torch.aminmax(flat)
            m = torch.maximum(-lo, hi)  # max |x|; NaN and inf propagate into it
        else:
            m = torch.zeros(())
        _check_finite(flat, m)
        s = (self.levels - 0.01) / float(m) if float(m) > 0 else 1.0
        u = torch.rand(min(n, self.pool), generator=self.gen).to(flat.device).add_(128.0)
        codes = fused_kernels.qsgd_encode(flat, u, s, self.fused, self._scratch)
        return Compressed((codes, torch.tensor([1.0 / s], dtype=torch.float32)), t.shape,
                          t.dtype)

    def decompress(self, c: Compressed, out: torch.Tensor | None = None) -> torch.Tensor:
        _check_out(c, out)
        codes, inv_s = c.tensors
        dense = _dense(c, out, codes.device)
        return fused_kernels.qsgd_decode(codes, inv_s.to(codes.device), dense, self.fused).view(c.shape)


class Sign(Compressor):
    """1 bit per value (1 = ``x >= 0``), packed 8 to a byte, and one fp32 scale
    ``mean(|x|)``.

    The bits travel as bit planes (byte ``j`` holds values ``j, j + m, ..., j + 7m`` for
    ``m = n // 8``; see :func:`perfkit.compress.pack_bits`), which keeps the fused kernels'
    loads and stores contiguous. Large tensors encode in one fused pass (bits and
    ``sum |x|`` together) and decode in another; ``fused`` as in :class:`QSGD`.
    """

    summable = False

    def __init__(self, fused: bool | None = None) -> None:
        super().__init__()
        self.fused = fused_kernels.check_fused(fused)
        self.name = "sign"

    def compress(self, t: torch.Tensor) -> Compressed:
        flat = _flat(t)
        packed, l1 = fused_kernels.sign_encode(flat, self.fused, self._scratch)
        _check_finite(flat, l1)
        scale = (l1 / max(flat.numel(), 1)).reshape(1).float()
        return Compressed((packed, scale), t.shape, t.dtype)

    def decompress(self, c: Compressed, out: torch.Tensor | None = None) -> torch.Tensor:
        _check_out(c, out)
        packed, scale = c.tensors
        dense = _dense(c, out, packed.device)
        return fused_kernels.sign_decode(packed, scale.to(packed.device), dense,
                                 self.fused).view(c.shape)
