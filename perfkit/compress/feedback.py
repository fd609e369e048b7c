"""Error feedback: keep what a compressor did not send and add it to the next gradient.

Seide et al. (2014) and Stich et al. (2018): ``residual += grad``; send
``compress(residual)``; ``residual -= decompress(sent)``. Nothing is lost, only delayed:
summed over steps, what was sent plus the residual equals what came in (up to fp32
rounding). This is what makes biased compressors (top-k, sign) converge.

A residual belongs to one tensor (one ``key``). A DDP bucket concatenates several
parameters' gradients, and DDP rebuilds its buckets after the first step (parameters
change places, and buckets), so :meth:`ErrorFeedback.compress_parts` keeps one residual
per part (per parameter) and lays them out in whatever order the caller's tensor has.

Usage::

    ef = ErrorFeedback(TopK(0.01))
    c = ef.compress(grad, key="layer1")             # c.wire_bytes: exact payload bytes
    approx = ef.decompress(c)                       # dense, same shape as grad
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace

import torch

from perfkit._checks import check_int
from perfkit.compress.codecs import Compressed, Compressor, flat_finite

__all__ = ["ErrorFeedback"]


def _aliases(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` share memory (a view of the other, or both of one buffer)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


class ErrorFeedback(Compressor):
    """Wrap a compressor; add what it dropped last time (per key) before compressing.

    ``residuals[key]`` is a flat tensor, the part of the gradients given under ``key``
    that was not sent yet: summed over calls, sent + residual = given (up to fp32
    rounding). It views a buffer shared with the other parts of its last
    :meth:`compress_parts` call, so read it or change it in place, but do not rebind it.
    Payloads never view a residual: one that would (the identity's payload *is* its
    input) is copied before the residual is updated, so ``ErrorFeedback(Compressor())``
    sends every gradient whole and keeps zero residuals.

    Args:
        inner: the compressor whose dropped share is fed back; not an ``ErrorFeedback``.

    Raises:
        TypeError: ``inner`` is not a :class:`~perfkit.compress.Compressor`, or is an
            ``ErrorFeedback``.
    """

    def __init__(self, inner: Compressor) -> None:
        if not isinstance(inner, Compressor) or isinstance(inner, ErrorFeedback):
            raise TypeError(f"inner must be a (non-ErrorFeedback) Compressor, got {inner!r}")
        super().__init__()
        self.inner = inner
        self.summable = inner.summable
        self.name = inner.name + "_ef"
        self.residuals: dict[Hashable, torch.Tensor] = {}
        # keys in order -> (their numels, the flat buffer their residuals view): the
        # residual of a multi-part tensor is one contiguous buffer, gathered once per layout
        self._layouts: dict[tuple, tuple[tuple[int, ...], torch.Tensor]] = {}

    def compress(self, t: torch.Tensor, key: Hashable = 0) -> Compressed:
        """Compress ``t`` plus ``residuals[key]``; keep what was not sent in ``residuals[key]``.

        A residual of another size, dtype or device than ``t`` starts again from zero.

        Raises:
            TypeError: ``t`` is not a floating-point tensor, ``key`` is not hashable.
            ValueError: ``t`` holds NaN or inf.
        """
        flat = flat_finite(t)
        return self._compress(flat, t.shape, (_hashable(key, "key"),), (flat.numel(),))

    def compress_parts(self, t: torch.Tensor, keys: Sequence[Hashable],
                       numels: Sequence[int]) -> Compressed:
        """Compress ``t``, the concatenation of parts of ``numels`` values, each part with
        its own residual ``residuals[keys[i]]``.

        A part's residual follows its key wherever the part sits in ``t``: pass a DDP
        bucket as ``compress_parts(bucket.buffer(), bucket.parameters(), [p.numel() for p
        in bucket.parameters()])`` and each parameter keeps its own residual when DDP
        reorders or regroups its buckets. The parts' residuals are one contiguous buffer
        per layout, so a step costs no gather or scatter; a new layout (DDP's rebuild, once)
        copies them into a new buffer.

        Raises:
            TypeError: as :meth:`compress`, or ``keys``/``numels`` of the wrong type.
            ValueError: ``keys`` and ``numels`` of different lengths, repeated keys, a
                negative numel, or numels that do not sum to ``t.numel()``.
        """
        flat = flat_finite(t)
        if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
            raise TypeError(f"keys must be a sequence of hashable keys, got {keys!r}")
        if not isinstance(numels, Sequence):
            raise TypeError(f"numels must be a sequence of ints >= 0, got {numels!r}")
        keys = tuple(_hashable(k, "keys[i]") for k in keys)
        numels = tuple(check_int("numels[i]", n) for n in numels)
        if len(keys) != len(numels) or len(set(keys)) != len(keys):
            raise ValueError(f"keys must be distinct, one per entry of numels: got {len(keys)} "
                             f"keys ({len(set(keys))} distinct) and {len(numels)} numels")
        if sum(numels) != flat.numel():
            raise ValueError(f"numels must sum to t.numel() = {flat.numel()}, got {sum(numels)}")
        return self._compress(flat, t.shape, keys, numels)

    def _residual(self, keys: tuple, numels: tuple[int, ...], like: torch.Tensor
                  ) -> torch.Tensor:
        """The flat residual of ``keys`` laid out in this order, which ``residuals[key]``
        views; built from the keys' current residuals (zero for new ones) when new."""
        numels_buf = self._layouts.get(keys)
        if numels_buf is not None:
            old_numels, buf = numels_buf
            if old_numels == numels and buf.dtype == like.dtype and buf.device == like.device:
                return buf
        parts = []
        for k, n in zip(keys, numels, strict=True):
            r = self.residuals.get(k)
            if r is None or r.numel() != n or r.dtype != like.dtype or r.device != like.device:
                r = torch.zeros(n, dtype=like.dtype, device=like.device)
            parts.append(r)
        buf = torch.cat(parts) if parts else torch.zeros_like(like)  # (sum numels,)
        # a layout sharing a key with this one no longer owns that key's residual
        self._layouts = {ks: v for ks, v in self._layouts.items() if set(ks).isdisjoint(keys)}
        self._layouts[keys] = (numels, buf)
        self.residuals.update(zip(keys, buf.split(numels), strict=True))
        return buf

    def _compress(self, flat: torch.Tensor, shape: torch.Size, keys: tuple,
                  numels: tuple[int, ...]) -> Compressed:
        res = self._residual(keys, numels, flat)
        res.add_(flat)  # (n,): the corrected gradient
        c = self.inner.compress(res.view(shape))
        # the identity's payload is res itself, which the update below would zero
        c = replace(c, tensors=tuple(p.clone() if _aliases(p, res) else p for p in c.tensors))
        sent = self.inner.decompress(c, out=self._scratch("sent", res.numel(), res.dtype,
                                                          res.device))
        res.sub_(sent.reshape(-1))
        return c

    def decompress(self, c: Compressed, out: torch.Tensor | None = None) -> torch.Tensor:
        """The inner compressor's :meth:`~perfkit.compress.Compressor.decompress`."""
        return self.inner.decompress(c, out)


def _hashable(key: object, name: str) -> Hashable:
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"{name} must be hashable (a name, a tuple, a tensor), got "
                        f"{type(key).__name__}") from None
    return key
