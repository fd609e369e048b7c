"""FlashAttention-2 from scratch in PyTorch: query and key tiles, an online softmax, recompute.

Attention's forward never holds the ``(T, T)`` score matrix: for each query tile it walks the
key tiles keeping a running row maximum ``m``, a running sum ``l`` and an unnormalised output,
rescaling them by ``exp(m_old - m_new)`` whenever the maximum grows (Milakov and Gimelshein's
online softmax; FlashAttention, Dao et al. 2022; FlashAttention-2, Dao 2023). Only the output
``O`` and the log-sum-exp ``L = m + log l`` are saved; backward recomputes each tile's scores
from ``Q``, ``K`` and ``L``. Causal masking skips every tile above the diagonal. Positions are
absolute (``q_start``, ``k_start``), so the same tiles serve ring attention's blocks
(:mod:`perfkit.parallel.context`), whose partial results :func:`merge_partials` combines.

Usage::

    out = flash_attention(q, k, v, causal=True, tile=64)     # q, k, v: (B, H, T, D)
    out.sum().backward()
    print(flash_flops(1, 1, 1024, 64, causal=True, tile=64).backward)   # flash_costs
"""

from __future__ import annotations

from typing import Any

import torch

from perfkit._checks import check_int, check_real, check_seed, check_type
from perfkit.compute._attention_checks import acc_dtype, check_qkv, check_scale, check_tile
from perfkit.compute.flash_costs import (  # re-exported: the counts of what this module runs
    AttentionFlops,
    eager_saved_bytes,
    flash_flops,
    flash_saved_bytes,
    length_terms,
)

__all__ = [
    "AttentionFlops", "FlashAttention", "attention_backward_tiles", "attention_forward_tiles",
    "check_qkv", "check_tile", "eager_attention", "eager_saved_bytes", "errors_against_float64",
    "flash_attention", "flash_flops", "flash_saved_bytes", "length_terms", "merge_partials",
    "reference_attention", "tile_kind", "tile_pairs",
]

NEG_INF = float("-inf")


def tile_kind(q0: int, q1: int, k0: int, k1: int, causal: bool) -> str:
    """How a tile of queries at positions ``[q0, q1)`` and keys ``[k0, k1)`` is computed:
    ``"skip"`` (causal, every key after every query: the tile is all masked), ``"full"`` (no key
    after any query) or ``"masked"`` (it straddles the diagonal). ``TypeError``/``ValueError``
    for a non-bool ``causal`` or a range that is not ints ``0 <= start < stop``."""
    for name, lo, hi in (("q", q0, q1), ("k", k0, k1)):
        check_int(f"{name}0", lo, 0)
        check_int(f"{name}1", hi, lo + 1)
    check_type("causal", causal, bool)
    return _kind(q0, q1, k0, k1, causal)


def _kind(q0: int, q1: int, k0: int, k1: int, causal: bool) -> str:
    if not causal or k1 - 1 <= q0:
        return "full"
    return "skip" if k0 > q1 - 1 else "masked"


def tile_pairs(tq: int, tk: int, tile: int, causal: bool, q_start: int = 0,
               k_start: int = 0) -> list[tuple[int, int, int, int, str]]:
    """The ``(i0, i1, j0, j1, kind)`` tiles a pass computes (skipped ones left out);
    ``i``/``j`` index the local query/key rows, the last tiles shorter when ``tile`` does
    not divide the length. Raises ``TypeError``/``ValueError`` for a bad argument."""
    for name, n in (("tq", tq), ("tk", tk), ("q_start", q_start), ("k_start", k_start)):
        check_int(name, n, 0)
    check_tile(tile)
    check_type("causal", causal, bool)
    out = []
    for i0 in range(0, tq, tile):
        i1 = min(i0 + tile, tq)
        for j0 in range(0, tk, tile):
            j1 = min(j0 + tile, tk)
            kind = _kind(q_start + i0, q_start + i1, k_start + j0, k_start + j1, causal)
            if kind != "skip":
                out.append((i0, i1, j0, j1, kind))
    return out


def _scores(qi: torch.Tensor, kj: torch.Tensor, scale: float, kind: str, qpos: int,
            kpos: int) -> torch.Tensor:
    s = (qi @ kj.transpose(-1, -2)) * scale  # (..., bq, bk)
    if kind == "masked":
        rows = torch.arange(qpos, qpos + s.shape[-2]).unsqueeze(1)
        cols = torch.arange(kpos, kpos + s.shape[-1]).unsqueeze(0)
        s = s.masked_fill((cols > rows).to(s.device), NEG_INF)
    return s


def attention_forward_tiles(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                            causal: bool = False, tile: int = 64, q_start: int = 0,
                            k_start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2's forward over tiles, without autograd: ``(O, L)``.

    Args:
        q, k, v: ``(..., Tq, D)``, ``(..., Tk, D)``, ``(..., Tk, Dv)``.
        scale: multiplies the scores (usually ``D ** -0.5``).
        causal: query at position ``p`` sees keys at positions ``<= p``.
        tile: query and key tile size.
        q_start, k_start: absolute position of the first query and key row.

    Returns:
        ``O`` ``(..., Tq, Dv)`` and the log-sum-exp ``L`` ``(..., Tq)`` in the accumulation dtype
        (fp64 for fp64 inputs, else fp32); a row with every key masked gets ``O = 0``, ``L = -inf``.

    Raises:
        TypeError, ValueError: as :func:`flash_attention`, or for a negative start or a
            ``scale`` that is not a finite number.
    """
    check_qkv(q, k, v, own_dv=True)
    check_real("scale", scale)
    pairs = tile_pairs(q.shape[-2], k.shape[-2], tile, causal, q_start, k_start)  # checks the rest
    acc = acc_dtype(q.dtype)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=acc, device=q.device)
    lse = torch.full(q.shape[:-1], NEG_INF, dtype=acc, device=q.device)
    for i0, i1 in sorted({(p[0], p[1]) for p in pairs}):  # FA2: one query tile at a time
        qi = q[..., i0:i1, :].to(acc)
        m = torch.full(qi.shape[:-1], NEG_INF, dtype=acc, device=q.device)  # running max
        total = torch.zeros_like(m)  # running sum of exp(s - m)
        oi = qi.new_zeros((*qi.shape[:-1], v.shape[-1]))  # unnormalised output (..., bq, Dv)
        for _, _, j0, j1, kind in (p for p in pairs if p[0] == i0):
            s = _scores(qi, k[..., j0:j1, :].to(acc), scale, kind, q_start + i0, k_start + j0)
            m_new = torch.maximum(m, s.amax(-1))
            # a row masked so far has max -inf: shift by 0 instead, so exp(-inf - -inf) is no NaN
            shift = torch.where(m_new == NEG_INF, 0.0, m_new)
            p = torch.exp(s - shift.unsqueeze(-1))  # (..., bq, bk)
            alpha = torch.exp(m - shift)  # rescales what was summed under the stale max
            total = alpha * total + p.sum(-1)
            oi = alpha.unsqueeze(-1) * oi + p @ v[..., j0:j1, :].to(acc)
            m = m_new
        seen = total > 0
        total = torch.where(seen, total, 1.0)
        o[..., i0:i1, :] = torch.where(seen.unsqueeze(-1), oi / total.unsqueeze(-1), 0.0)
        lse[..., i0:i1] = torch.where(seen, m + torch.log(total), NEG_INF)
    return o, lse


def attention_backward_tiles(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             do: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor,
                             scale: float, causal: bool = False, tile: int = 64,
                             q_start: int = 0, k_start: int = 0
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2's backward: ``(dQ, dK, dV)`` recomputed tile by tile from ``L``.

    ``P = exp(S - L)`` is rebuilt per tile, so nothing ``T x T`` was kept. ``lse`` and
    ``delta = rowsum(dO * O)`` are those of the *whole* attention (all key blocks), which
    lets ring attention call this once per key block and add the results.

    Returns:
        ``dQ``, ``dK``, ``dV`` in the accumulation dtype, shaped as ``q``, ``k``, ``v``.

    Raises:
        TypeError, ValueError: as :func:`attention_forward_tiles`, or for ``do``, ``lse``,
            ``delta`` not shaped ``(..., Tq, Dv)``, ``(..., Tq)``, ``(..., Tq)``.
    """
    check_qkv(q, k, v, own_dv=True)
    check_real("scale", scale)
    rows = q.shape[:-1]
    for name, t, shape in (("do", do, (*rows, v.shape[-1])), ("lse", lse, rows), ("delta", delta, rows)):
        if check_type(name, t, torch.Tensor).shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    pairs = tile_pairs(q.shape[-2], k.shape[-2], tile, causal, q_start, k_start)  # checks the rest
    acc = acc_dtype(q.dtype)
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    dk = torch.zeros(k.shape, dtype=acc, device=q.device)
    dv = torch.zeros(v.shape, dtype=acc, device=q.device)
    lse = torch.where(lse == NEG_INF, 0.0, lse.to(acc))  # all-masked rows: every p is 0 anyway
    do, delta = do.to(acc), delta.to(acc)
    for j0, j1 in sorted({(p[2], p[3]) for p in pairs}):  # FA2: one key tile at a time
        kj, vj = k[..., j0:j1, :].to(acc), v[..., j0:j1, :].to(acc)
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for i0, i1, _, _, kind in (p for p in pairs if p[2] == j0):
            qi = q[..., i0:i1, :].to(acc)
            s = _scores(qi, kj, scale, kind, q_start + i0, k_start + j0)
            p = torch.exp(s - lse[..., i0:i1].unsqueeze(-1))  # (..., bq, bk), recomputed
            doi = do[..., i0:i1, :]
            dvj += p.transpose(-1, -2) @ doi
            ds = p * (doi @ vj.transpose(-1, -2) - delta[..., i0:i1].unsqueeze(-1))
            dq[..., i0:i1, :] += (ds @ kj) * scale
            dkj += (ds.transpose(-1, -2) @ qi) * scale
        dk[..., j0:j1, :] = dkj
        dv[..., j0:j1, :] = dvj
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """``torch.autograd.Function`` whose forward saves ``Q, K, V, O, L`` and nothing ``T x T``."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                tile: int, scale: float) -> torch.Tensor:
        o, lse = attention_forward_tiles(q, k, v, scale, causal, tile)
        o = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.tile, ctx.scale = causal, tile, scale
        return o

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple:
        q, k, v, o, lse = ctx.saved_tensors
        delta = (do.to(lse.dtype) * o.to(lse.dtype)).sum(-1)  # (..., Tq): rowsum(dO * O)
        dq, dk, dv = attention_backward_tiles(q, k, v, do, lse, delta, ctx.scale, ctx.causal, ctx.tile)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    tile: int = 64, scale: float | None = None) -> torch.Tensor:
    """Attention ``softmax(Q K^T * scale) V`` by FlashAttention-2's tiles, with autograd.

    Args:
        q, k, v: ``(..., Tq, D)``, ``(..., Tk, D)``, ``(..., Tk, D)``, one float dtype.
        causal: query ``i`` sees keys ``j <= i`` (top-left aligned, as SDPA's ``is_causal``).
        tile: tile size, a positive power of two; lengths need not be multiples of it.
        scale: score scale, default ``D ** -0.5``.

    Returns:
        ``(..., Tq, D)`` in the inputs' dtype.

    Raises:
        TypeError, ValueError: for non-tensors, mismatched shapes, dtypes or devices, a bad
            ``tile``, or a ``scale`` that is not a finite number (NaN there is NaN everywhere).
    """
    check_qkv(q, k, v)  # tile and causal: attention_forward_tiles checks them
    return FlashAttention.apply(q, k, v, causal, tile, check_scale(scale, q.shape[-1]))


def merge_partials(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor,
                   lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine attention over two disjoint key sets from their ``(O, L)`` partials.

    ``L = log(e^La + e^Lb)`` is computed shifted by the larger one (no overflow for large
    logits); each ``O`` is weighted by ``e^(L_x - L)``. A row that saw no key on either
    side (``La = Lb = -inf``) stays ``O = 0``, ``L = -inf``, with no NaN.

    Returns:
        The merged ``(O, L)``.

    Raises:
        TypeError, ValueError: for non-tensors, or shapes that are not ``(..., T, D)``, ``(..., T)``.
    """
    for name, t in (("o_a", o_a), ("lse_a", lse_a), ("o_b", o_b), ("lse_b", lse_b)):
        check_type(name, t, torch.Tensor)
    if o_a.shape != o_b.shape or lse_a.shape != lse_b.shape or o_a.shape[:-1] != lse_a.shape:
        raise ValueError(f"o_a, o_b must be (..., T, D) and lse_a, lse_b (..., T) alike, got "
                         f"{[tuple(t.shape) for t in (o_a, o_b, lse_a, lse_b)]}")
    m = torch.maximum(lse_a, lse_b)
    shift = torch.where(m == NEG_INF, 0.0, m)
    total = torch.exp(lse_a - shift) + torch.exp(lse_b - shift)
    lse = torch.where(total > 0, shift + torch.log(torch.where(total > 0, total, 1.0)), NEG_INF)
    safe = torch.where(lse == NEG_INF, 0.0, lse)
    w_a = torch.where(lse_a == NEG_INF, 0.0, torch.exp(lse_a - safe)).unsqueeze(-1)
    w_b = torch.where(lse_b == NEG_INF, 0.0, torch.exp(lse_b - safe)).unsqueeze(-1)
    return w_a * o_a + w_b * o_b, lse


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """Attention op by op, as a model written plainly does it: keeps ``softmax(S)`` (T x T).
    Raises ``TypeError``/``ValueError`` as :func:`flash_attention`."""
    check_qkv(q, k, v)
    check_type("causal", causal, bool)
    scale = check_scale(scale, q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale  # (..., Tq, Tk)
    if causal:
        mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(mask, NEG_INF)
    return torch.softmax(s, dim=-1) @ v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, q_start: int = 0, k_start: int = 0
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(O, L)`` in float64 from the full score matrix, positions absolute; all-masked rows
    give ``O = 0``, ``L = -inf``. The yardstick the tiles are tested against. Raises
    ``TypeError``/``ValueError`` as :func:`eager_attention`, or for a negative start."""
    check_qkv(q, k, v)
    check_type("causal", causal, bool)
    check_int("q_start", q_start, 0)
    check_int("k_start", k_start, 0)
    scale = check_scale(scale, q.shape[-1])
    q, k, v = q.double(), k.double(), v.double()
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        rows = torch.arange(q_start, q_start + q.shape[-2]).unsqueeze(1)
        cols = torch.arange(k_start, k_start + k.shape[-2]).unsqueeze(0)
        s = s.masked_fill((cols > rows).to(s.device), NEG_INF)
    lse = torch.logsumexp(s, -1)
    p = torch.where(lse.unsqueeze(-1) == NEG_INF, 0.0, torch.exp(s - lse.unsqueeze(-1)))
    return p @ v, lse


def errors_against_float64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           causal: bool = False, tile: int = 64, seed: int = 0
                           ) -> dict[str, float]:
    """Max abs differences of :func:`flash_attention`'s ``O, dQ, dK, dV`` (in the inputs'
    dtype) from float64 attention, for one random output gradient drawn with ``seed``.

    Raises:
        TypeError, ValueError: as :func:`flash_attention` does, or for a bad ``seed``.
    """
    check_qkv(q, k, v)
    check_seed("seed", seed)
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    exact = [x.detach().double().requires_grad_() for x in (q, k, v)]
    out = flash_attention(*leaves, causal=causal, tile=tile)
    ref, _ = reference_attention(*exact, causal=causal)
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    mine = (out, *torch.autograd.grad(out, leaves, do.to(out.dtype)))
    theirs = (ref, *torch.autograd.grad(ref, exact, do))
    return {name: (a.double() - b).abs().max().item()
            for name, a, b in zip(("O", "dQ", "dK", "dV"), mine, theirs)}
