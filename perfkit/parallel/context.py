"""Ring attention (context parallelism): the sequence split over P ranks, K/V passed round.

Each rank holds ``T/P`` queries, keys and values. Attention over the whole sequence is P
steps: compute the local queries against the key/value block in hand, while that block goes
to the next rank and the previous rank's arrives (``dist.batch_isend_irecv``, so the transfer
hides behind the compute); partial results merge by their log-sum-exp
(:func:`perfkit.compute.flash.merge_partials`). Backward passes the blocks round again, each
with the ``dK``/``dV`` accumulated for it, which end back at their owner after P transfers
(Liu et al. 2023, "Ring Attention"; torchtitan's context parallelism, through PyTorch's
``context_parallel``, rotates K/V the same way). Causal attention splits the sequence zig-zag:
rank ``i`` holds chunks ``i`` and ``2P-1-i`` of ``2P``, so every rank computes the same number
of tiles (:mod:`perfkit.parallel.context_model`).

Llama 3's context parallelism (Llama Team, "The Llama 3 Herd of Models", 2024, section 3.3.2)
uses the same zig-zag split into ``2 x CP`` chunks but no ring: each rank all-gathers the whole
K and V, then computes its local queries against them. The all-gather is exposed, not hidden
behind compute; the paper accepts that because grouped-query attention makes K and V much
smaller than Q, and because any mask (its document mask) is simple once a rank holds every key.
The ring here differs: it overlaps each block's transfer with the previous block's compute and
holds two K/V blocks at a time, where the all-gather holds the whole sequence's K and V.

Usage (inside a worker, every rank)::

    q, k, v = (shard_sequence(x, rank, world, "zigzag") for x in (q_full, k_full, v_full))
    out = ring_attention(q, k, v, causal=True, split="zigzag")   # collective
    out.sum().backward()
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_choice, check_int, check_real, check_type
from perfkit.compute.flash import (
    attention_backward_tiles,
    attention_forward_tiles,
    check_qkv,
    check_tile,
    merge_partials,
)
from perfkit.timing import Timer

__all__ = ["SPLITS", "RingStats", "ring_attention", "segments", "shard_sequence",
           "unshard_sequence", "waits_after_ready"]

SPLITS = ("contiguous", "zigzag")


def segments(seq_len: int, rank: int, world: int, split: str) -> list[tuple[int, int]]:
    """The ``(start, length)`` pieces of the sequence that ``rank`` holds, in local order.

    ``contiguous``: one piece of ``T/P``; ``zigzag``: chunks ``rank`` and ``2P-1-rank`` of
    ``2P`` equal chunks (the first near the start, the second near the end).

    Raises:
        ValueError: if ``seq_len`` is not divisible by ``P`` (contiguous) or ``2P``
            (zigzag), or ``rank`` is outside ``[0, world)``.
    """
    check_int("world", world, 1)
    check_int("rank", rank, 0, world - 1)
    check_int("seq_len", seq_len, 1)
    check_choice("split", split, SPLITS)
    parts = world if split == "contiguous" else 2 * world
    if seq_len % parts:
        raise ValueError(f"seq_len must be divisible by {parts} ({'P' if parts == world else '2P'}"
                         f" for the {split} split over P={world} ranks), got {seq_len}")
    c = seq_len // parts
    if split == "contiguous":
        return [(rank * c, c)]
    return [(rank * c, c), ((2 * world - 1 - rank) * c, c)]


def shard_sequence(x: torch.Tensor, rank: int, world: int, split: str = "contiguous",
                   dim: int = -2) -> torch.Tensor:
    """The part of the full sequence ``x`` (sequence along ``dim``) that ``rank`` holds.

    Raises:
        TypeError, ValueError: for an ``x`` that is not a tensor, a ``dim`` it does not have,
            and the errors of :func:`segments`.
    """
    check_type("x", x, torch.Tensor)
    check_int("dim", dim, -x.dim(), x.dim() - 1)
    pieces = [x.narrow(dim, s, n) for s, n in segments(x.shape[dim], rank, world, split)]
    return torch.cat(pieces, dim).contiguous()


def unshard_sequence(parts: list[torch.Tensor], split: str = "contiguous",
                     dim: int = -2) -> torch.Tensor:
    """The full sequence from every rank's part (``parts[r]`` from rank ``r``).

    Raises:
        TypeError, ValueError: for no parts, a part that is not a tensor, parts that differ
            in shape or dtype (every rank holds as many rows), or a ``dim`` they do not have.
    """
    world = len(parts)
    check_int("len(parts)", world, 1)
    for r, part in enumerate(parts):
        check_type(f"parts[{r}]", part, torch.Tensor)
        if part.shape != parts[0].shape or part.dtype != parts[0].dtype:
            raise ValueError(f"parts must share one shape and dtype, got parts[0] "
                             f"{tuple(parts[0].shape)} {parts[0].dtype} and parts[{r}] "
                             f"{tuple(part.shape)} {part.dtype}")
    check_int("dim", dim, -parts[0].dim(), parts[0].dim() - 1)
    seq_len = sum(p.shape[dim] for p in parts)
    out = torch.empty(*parts[0].shape[:dim % parts[0].dim()], seq_len,
                      *parts[0].shape[dim % parts[0].dim() + 1:], dtype=parts[0].dtype)
    for rank, part in enumerate(parts):
        at = 0
        for s, n in segments(seq_len, rank, world, split):
            out.narrow(dim, s, n).copy_(part.narrow(dim, at, n))
            at += n
    return out


@dataclass
class RingStats:
    """What ring attention calls on this rank did; each call adds to it.

    Attributes:
        sent_forward, sent_backward: bytes this rank sent (K/V blocks; backward also the
            dK/dV accumulators, in the accumulation dtype).
        compute_s: seconds spent computing tiles and merging.
        wait_s: seconds spent waiting for transfers after the compute was done: the part of
            the communication that did not hide behind it.
        steps: ring steps run (P per forward, P per backward).
        waits: per wait, ``(posted, entered, left)`` on the host's monotonic clock
            (``time.perf_counter``, one clock for the processes of a machine; on CUDA it sees
            launches, not transfers): when this rank last posted a message, entered the wait
            and left it (:func:`waits_after_ready`).
    """

    sent_forward: int = 0
    sent_backward: int = 0
    compute_s: float = 0.0
    wait_s: float = 0.0
    steps: int = 0
    waits: list[tuple[float, float, float]] = field(default_factory=list)


def waits_after_ready(waits: Sequence[Sequence[Sequence[float]]]) -> list[float]:
    """Per rank of a ring, the seconds its waits lasted after both of its neighbours had posted
    the messages waited for and the rank itself was there: the transfers' own part, without
    the time a neighbour was still computing (late, descheduled) before it sent.

    Every rank runs the same sequence of posts and waits, so wait ``k`` of rank ``r`` waits for
    the messages its neighbours posted last before their own wait ``k``.

    Args:
        waits: ``waits[r][k] = (posted, entered, left)`` of rank ``r`` (:attr:`RingStats.waits`).

    Returns:
        One sum per rank, seconds (each wait counted from ``max(entered, neighbours' posted)``).

    Raises:
        ValueError: for ranks with different numbers of waits, or a wait not of three times.
    """
    n = len(waits)
    if n == 0 or len({len(w) for w in waits}) != 1:
        raise ValueError(f"waits must hold the same number of waits for every rank, got "
                         f"{[len(w) for w in waits]}")
    if any(len(x) != 3 for w in waits for x in w):
        raise ValueError("each wait must be (posted, entered, left)")
    out = []
    for r, own in enumerate(waits):
        nbrs = (waits[(r - 1) % n], waits[(r + 1) % n])
        out.append(sum(max(0.0, left - max(entered, *(nb[k][0] for nb in nbrs)))
                       for k, (_p, entered, left) in enumerate(own)))
    return out


class _Ring:
    """The ring's neighbours and its timed block exchange."""

    def __init__(self, group: Any, timeout_s: float, stats: RingStats | None,
                 device: torch.device) -> None:
        self.group, self.stats, self.device = group, stats, device
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        peer = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
        self.next, self.prev = peer((self.rank + 1) % self.world), peer((self.rank - 1) % self.world)
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.posted = 0.0

    def start(self, buf: torch.Tensor, tag: int) -> tuple[torch.Tensor, list]:
        """Send ``buf`` to the next rank and receive the previous rank's into a new buffer."""
        recv = torch.empty_like(buf)
        ops = [dist.P2POp(dist.isend, buf, self.next, self.group, tag),
               dist.P2POp(dist.irecv, recv, self.prev, self.group, tag)]
        reqs = dist.batch_isend_irecv(ops)
        self.posted = time.perf_counter()
        return recv, reqs

    def wait(self, reqs: list) -> None:
        entered = time.perf_counter()
        with Timer(self.device) as t:
            for req in reqs:
                req.wait(self.timeout)  # a missing peer fails here after timeout_s, never hangs
        left = time.perf_counter()
        if self.stats is not None:  # on the CPU, the wait's own two readings: the part of it
            # waits_after_ready counts then never exceeds it (the Timer's would, by its overhead)
            self.stats.wait_s += left - entered if self.device.type == "cpu" else t.elapsed_s
            self.stats.waits.append((self.posted, entered, left))

    def compute(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, its seconds added to the stats, with one more step counted."""
        with Timer(self.device) as t:
            out = fn(*args)
        if self.stats is not None:
            self.stats.compute_s += t.elapsed_s
            self.stats.steps += 1
        return out


def _block_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_segs: list,
                   k_segs: list, scale: float, causal: bool, tile: int
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(O, L)`` of the local queries against one rank's key block, ``None`` if all masked."""
    o_parts, lse_parts, seen = [], [], False
    qa = 0
    for qs, qn in q_segs:
        o, lse = None, None
        ka = 0
        for ks, kn in k_segs:
            if not causal or ks <= qs + qn - 1:  # a key piece after every query is skipped
                part = attention_forward_tiles(q[..., qa:qa + qn, :], k[..., ka:ka + kn, :],
                                               v[..., ka:ka + kn, :], scale, causal, tile,
                                               qs, ks)
                o, lse = part if o is None else merge_partials(o, lse, *part)
            ka += kn
        if o is None:
            acc = torch.float64 if q.dtype == torch.float64 else torch.float32
            o = torch.zeros((*q.shape[:-2], qn, q.shape[-1]), dtype=acc, device=q.device)
            lse = torch.full(o.shape[:-1], float("-inf"), dtype=acc, device=q.device)
        else:
            seen = True
        o_parts.append(o)
        lse_parts.append(lse)
        qa += qn
    return (torch.cat(o_parts, -2), torch.cat(lse_parts, -1)) if seen else None


def _block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                    lse: torch.Tensor, delta: torch.Tensor, q_segs: list, k_segs: list,
                    scale: float, causal: bool, tile: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dQ, dK, dV)`` contributions of one key block (accumulation dtype); ``lse`` and
    ``delta`` are those of the whole attention, so the blocks' contributions add up."""
    acc = lse.dtype
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    dk = torch.zeros(k.shape, dtype=acc, device=q.device)
    dv = torch.zeros(v.shape, dtype=acc, device=q.device)
    qa = 0
    for qs, qn in q_segs:
        ka = 0
        for ks, kn in k_segs:
            if not causal or ks <= qs + qn - 1:
                qi, ki, vi = q[..., qa:qa + qn, :], k[..., ka:ka + kn, :], v[..., ka:ka + kn, :]
                g = attention_backward_tiles(qi, ki, vi, do[..., qa:qa + qn, :],
                                             lse[..., qa:qa + qn], delta[..., qa:qa + qn],
                                             scale, causal, tile, qs, ks)
                dq[..., qa:qa + qn, :] += g[0]
                dk[..., ka:ka + kn, :] += g[1]
                dv[..., ka:ka + kn, :] += g[2]
            ka += kn
        qa += qn
    return dq, dk, dv


class RingAttention(torch.autograd.Function):
    """Ring attention's forward and backward on this rank's part of the sequence."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                split: str, tile: int, scale: float, group: Any, timeout_s: float,
                stats: RingStats | None) -> torch.Tensor:
        ring = _Ring(group, timeout_s, stats, q.device)
        seq_len = q.shape[-2] * ring.world
        segs = [segments(seq_len, r, ring.world, split) for r in range(ring.world)]
        kv = torch.stack([k, v]).contiguous()  # (2, ..., T/P, D): one message per step
        o = lse = None
        for step in range(ring.world):
            src = (ring.rank - step) % ring.world
            if step < ring.world - 1:  # the next block travels while this one is computed
                nxt, reqs = ring.start(kv, 0)
                if stats is not None:
                    stats.sent_forward += kv.numel() * kv.element_size()
            part = ring.compute(_block_forward, q, kv[0], kv[1], segs[ring.rank], segs[src],
                                scale, causal, tile)
            if part is not None:
                o, lse = part if o is None else merge_partials(o, lse, *part)
            if step < ring.world - 1:
                ring.wait(reqs)
                kv = nxt
        out = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, tile, scale, group, timeout_s, stats, segs)
        return out

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        causal, tile, scale, group, timeout_s, stats, segs = ctx.args
        ring = _Ring(group, timeout_s, stats, q.device)
        delta = (do.to(lse.dtype) * out.to(lse.dtype)).sum(-1)  # rowsum(dO * O), (..., T/P)
        dq = torch.zeros(q.shape, dtype=lse.dtype, device=q.device)
        kv = torch.stack([k, v]).contiguous()
        dkv = torch.zeros(kv.shape, dtype=lse.dtype, device=q.device)  # for the block in hand
        for step in range(ring.world):
            src = (ring.rank - step) % ring.world
            if step < ring.world - 1:
                nxt, reqs = ring.start(kv, 0)
                if stats is not None:
                    stats.sent_backward += kv.numel() * kv.element_size()
            g = ring.compute(_block_backward, q, kv[0], kv[1], do, lse, delta,
                             segs[ring.rank], segs[src], scale, causal, tile)
            dq += g[0]
            dkv[0] += g[1]
            dkv[1] += g[2]
            if ring.world == 1:  # the block and its accumulators never left home
                break
            # the accumulators follow their block; after P moves they are home, complete
            arrived, dreqs = ring.start(dkv, 1)
            if stats is not None:
                stats.sent_backward += dkv.numel() * dkv.element_size()
            ring.wait(dreqs if step == ring.world - 1 else [*reqs, *dreqs])
            dkv = arrived  # only now: the buffer sent must live until its send completes
            if step < ring.world - 1:
                kv = nxt
        return (dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype),
                None, None, None, None, None, None, None)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   split: str = "contiguous", tile: int = 64, scale: float | None = None,
                   group: Any = None, timeout_s: float = 60.0,
                   stats: RingStats | None = None) -> torch.Tensor:
    """Attention over the whole sequence from this rank's part of it, with autograd.

    Warning:
        Collective: every rank of ``group`` must call it (forward, and backward when a
        gradient flows) with parts of the same shape, or the ring waits until ``timeout_s``.

    Args:
        q, k, v: this rank's part ``(..., T/P, D)``, as :func:`shard_sequence` cuts it.
        causal: causal attention over absolute positions.
        split: how the sequence was split, ``"contiguous"`` or ``"zigzag"``.
        tile: FlashAttention tile size (a positive power of two).
        scale: score scale, default ``D ** -0.5``.
        group: process group (default: WORLD).
        timeout_s: how long each transfer may wait for a peer.
        stats: a :class:`RingStats` to add bytes sent and seconds to.

    Returns:
        This rank's part of the output, ``(..., T/P, D)``.

    Raises:
        TypeError, ValueError: for bad tensors, a ``tile`` that is not a positive power of two,
            an unknown ``split``, a sequence not divisible as the split needs, a ``scale``
            that is not a finite number, a ``timeout_s`` that is not a finite number > 0.
    """
    check_qkv(q, k, v)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (self-attention parts), got "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    check_tile(tile)
    check_type("causal", causal, bool)
    check_choice("split", split, SPLITS)
    check_real("timeout_s", timeout_s, 0, lo_open=True)
    check_type("stats", stats, RingStats, optional=True)
    check_type("group", group, dist.ProcessGroup, optional=True)
    world = dist.get_world_size(group)
    segments(q.shape[-2] * world, 0, world, split)  # the local length must split evenly
    if split == "zigzag" and q.shape[-2] % 2:
        raise ValueError(f"zigzag needs a sequence divisible by 2P; the local part has "
                         f"{q.shape[-2]} rows (odd)")
    scale = q.shape[-1] ** -0.5 if scale is None else float(check_real("scale", scale))
    return RingAttention.apply(q, k, v, causal, split, tile, scale, group, timeout_s, stats)
