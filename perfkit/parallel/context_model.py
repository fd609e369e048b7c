"""Ring attention's counts: per-rank work (tile FLOPs), bytes sent, memory, longest sequence.

A causal split into ``P`` contiguous pieces gives rank ``r`` ``r`` full key blocks and one
diagonal block: with the diagonal's upper half skipped the busiest rank does ``(2P-1)/P``
times the mean work, ``2P/(P+1)`` when the diagonal block is computed whole. The zig-zag
split (rank ``i`` holds chunks ``i`` and ``2P-1-i``) pairs a short row with a long one, so
every rank does the same work. Bytes: each forward sends ``(P-1)/P`` of the full K and V;
backward sends them again plus the dK/dV accumulators ``P`` times. Memory: a rank holds
``T/P`` rows of Q, K, V, O (and, training, dO and dQ) plus two K/V blocks in flight (training:
K, V, dK, dV in hand and arriving), so beyond ``P = 1`` the longest sequence in a budget grows
linearly with ``P``; from ``P = 1`` to 2 it gains less, since one process has no blocks in flight.
The blocks in flight are this implementation's: it sends a stacked copy of K and V (one message
per step), which an implementation sending K and V from their own buffers would not hold.
Time: :func:`ring_transfers_s` counts the transfers of one forward + backward as the ring
posts and waits for them.

Usage::

    work = ring_work(4096, 4, "zigzag", tile=64)       # tile FLOPs per rank (per head, D=1)
    print(imbalance(work), ring_bytes(1, 8, 4096, 64, 4).forward)
    print(longest_sequence(2**30, 4, batch=1, heads=8, head_dim=64, training=True))
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from perfkit._checks import check_choice, check_int, check_items, check_real, check_type
from perfkit.compute.flash import check_tile, tile_pairs
from perfkit.parallel.context import segments
from perfkit.stats import Estimate, per_round
from perfkit.units import si

__all__ = ["DIAGONALS", "RingBytes", "contiguous_imbalance", "imbalance", "imbalance_noise_note",
           "longest_sequence", "ring_bytes", "ring_memory_bytes", "ring_transfers_s", "ring_work",
           "split_cost_note", "timed_imbalance"]

DIAGONALS = ("tiles", "half", "full")


def ring_work(seq_len: int, world: int, split: str, tile: int = 64, head_dim: int = 1,
              causal: bool = True, diagonal: str = "tiles") -> list[int]:
    """Forward matmul FLOPs (``4 D`` per score computed, one batch-head) each rank does.

    Args:
        seq_len, world, split: the sequence, the ranks and how it is split.
        tile: FlashAttention tile size.
        head_dim: ``D``.
        causal: causal attention (else every rank does ``T^2/P`` scores).
        diagonal: how a (query piece, key piece) block that straddles the diagonal counts:
            ``"tiles"``: the tiles the kernel computes (tiles above the diagonal skipped,
            diagonal tiles whole); ``"half"``: half the block; ``"full"``: the whole block.

    Returns:
        FLOPs per rank, rank order.

    Raises:
        ValueError, TypeError: for bad sizes, an unknown ``split`` or ``diagonal``, a
            sequence not divisible as the split needs.
    """
    check_tile(tile)
    check_int("head_dim", head_dim, 1)
    check_type("causal", causal, bool)
    check_choice("diagonal", diagonal, DIAGONALS)
    segs = [segments(seq_len, r, world, split) for r in range(world)]
    out = []
    for r in range(world):
        cells = 0
        for qs, qn in segs[r]:
            for ks, kn in (piece for src in segs for piece in src):
                if not causal or ks + kn - 1 <= qs:
                    cells += qn * kn  # wholly below the diagonal (or not causal)
                elif ks > qs + qn - 1:
                    continue  # wholly above: skipped
                elif diagonal == "tiles":
                    cells += sum((i1 - i0) * (j1 - j0) for i0, i1, j0, j1, _ in
                                 tile_pairs(qn, kn, tile, True, qs, ks))
                else:
                    cells += qn * kn // (2 if diagonal == "half" else 1)
        out.append(4 * head_dim * cells)
    return out


def imbalance(work: list[int] | list[float]) -> float:
    """The busiest rank's work over the mean: what the slowest rank costs the step."""
    items = [check_real(f"work[{i}]", w) for i, w in enumerate(check_items("work", work))]
    if min(items) < 0 or sum(items) == 0:
        raise ValueError(f"work must be non-negative with a positive sum, got {items}")
    return max(items) * len(items) / sum(items)


def contiguous_imbalance(world: int, diagonal: str = "half") -> float:
    """The formula: ``(2P-1)/P`` with the diagonal's upper half skipped, ``2P/(P+1)`` without."""
    check_int("world", world, 1)
    check_choice("diagonal", diagonal, ("half", "full"))
    return (2 * world - 1) / world if diagonal == "half" else 2 * world / (world + 1)


@dataclass(frozen=True)
class RingBytes:
    """Bytes one rank sends per ring attention call: ``forward`` (K/V blocks) and
    ``backward`` (K/V blocks again, plus the dK/dV accumulators in the accumulation dtype)."""

    forward: int
    backward: int


def _size(dtype: torch.dtype) -> int:
    check_type("dtype", dtype, torch.dtype)
    return torch.empty((), dtype=dtype).element_size()


def ring_bytes(batch: int, heads: int, seq_len: int, head_dim: int, world: int,
               dtype: torch.dtype = torch.float32) -> RingBytes:
    """Bytes :func:`perfkit.parallel.context.ring_attention` sends per rank (exact); none
    on one rank, whose blocks and accumulators never leave it.

    Raises:
        ValueError: for a non-positive size or ``seq_len`` not divisible by ``world``.
    """
    for name, n in (("batch", batch), ("heads", heads), ("head_dim", head_dim)):
        check_int(name, n, 1)
    segments(seq_len, 0, world, "contiguous")
    block = 2 * batch * heads * (seq_len // world) * head_dim  # K and V values per rank
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    kv = (world - 1) * block * _size(dtype)
    return RingBytes(kv, kv + (world if world > 1 else 0) * block * _size(acc))


def ring_transfers_s(world: int, single_s: float, pair_s: float) -> float:
    """Seconds the transfers of one ring forward + backward take alone, counted as
    :func:`perfkit.parallel.context.ring_attention` posts and waits for them.

    Forward waits for one K/V block at each of its ``P - 1`` steps. Backward, at each of its
    first ``P - 1`` steps, posts a K/V block and then that step's dK/dV block and waits for
    both at once: they travel together, so they cost one exchange of two blocks
    (``pair_s``, timed that way), not two exchanges one after the other. At its last step it
    waits for the dK/dV block alone (the K/V block's bytes in fp32, ``single_s``). In all
    ``P single_s + (P - 1) pair_s``; nothing for one process.

    Args:
        world: ``P``, the ranks of the ring (>= 1).
        single_s: seconds of one block's exchange alone (send to the next rank, receive from
            the previous), > 0.
        pair_s: seconds of two blocks' exchange alone, posted and waited for together, > 0.

    Raises:
        ValueError, TypeError: for a ``world`` below 1 or a time not > 0.
    """
    check_int("world", world, 1)
    check_real("single_s", single_s, 0, lo_open=True)
    check_real("pair_s", pair_s, 0, lo_open=True)
    return world * single_s + (world - 1) * pair_s if world > 1 else 0.0


def ring_memory_bytes(batch: int, heads: int, seq_len: int, head_dim: int, world: int,
                      dtype: torch.dtype = torch.float32, training: bool = False) -> int:
    """A rank's attention memory in the ring, at its peak.

    Forward (``training=False``): its Q, K, V and O, the K/V block in hand and the one
    arriving (``8 D`` values per local row), and the fp32 log-sum-exp. The block in hand is,
    at the first step, the stacked copy of the rank's own K and V that
    :func:`perfkit.parallel.context.ring_attention` sends as one message; an implementation
    sending K and V from their own buffers would hold ``2 D`` less per row (``6 D`` forward).
    Training: backward's peak, which adds dO and dQ to the saved Q, K, V and O, and passes the
    dK/dV accumulators round with their K/V block, so a rank holds K, V, dK and dV in hand and
    arriving (``6 D + 8 D = 14 D`` values per local row), the log-sum-exp and
    ``rowsum(dO * O)`` (4 bytes each).
    ``world=1`` is plain FlashAttention on one process, with no blocks in flight: ``4 D`` per
    row forward (Q, K, V, O), ``8 D`` training (dO, dQ, dK, dV besides).

    Raises:
        ValueError, TypeError: for a non-positive size, ``seq_len`` not divisible by
            ``world``, or a ``training`` that is not a bool.
    """
    for name, n in (("batch", batch), ("heads", heads), ("head_dim", head_dim)):
        check_int(name, n, 1)
    check_type("training", training, bool)
    segments(seq_len, 0, world, "contiguous")
    rows = batch * heads * (seq_len // world)
    if training:
        per_row, fp32 = (14 if world > 1 else 8) * head_dim, 8
    else:
        per_row, fp32 = (8 if world > 1 else 4) * head_dim, 4
    return rows * (per_row * _size(dtype) + fp32)


def longest_sequence(budget_bytes: int, world: int, batch: int = 1, heads: int = 8,
                     head_dim: int = 64, dtype: torch.dtype = torch.float32,
                     multiple: int | None = None, training: bool = False) -> int:
    """The longest sequence (a multiple of ``multiple``, default ``2P``) whose
    :func:`ring_memory_bytes` (forward, or with ``training`` backward's peak) fits
    ``budget_bytes`` per rank; 0 if none does.

    Raises:
        ValueError, TypeError: for a non-positive budget or size, or a ``training`` that is
            not a bool.
    """
    check_int("budget_bytes", budget_bytes, 1)
    check_int("world", world, 1)
    step = check_int("multiple", multiple, 1) if multiple is not None else 2 * world
    one = ring_memory_bytes(batch, heads, step, head_dim, world, dtype, training)  # linear in T
    return (budget_bytes // one) * step


def timed_imbalance(per_rank_s: list[list[float]]) -> Estimate:
    """The busiest rank's seconds over the ranks' mean, per round (what a round waits for at
    its next collective), as the median over rounds with its order-statistic interval
    (:func:`perfkit.stats.per_round`; ``per_rank_s[r][i]``: rank ``r``'s seconds in round
    ``i``, rounds timed together on every rank). A bootstrap of the busiest rank's median
    would misjudge a maximum over a handful of rounds; a median over rounds is judged exactly.

    Raises:
        ValueError, TypeError: for no ranks, or ranks with different round counts.
    """
    ranks = check_items("per_rank_s", per_rank_s)

    def stat(*seconds: float) -> float:  # one round: every rank's seconds
        return max(seconds) * len(seconds) / sum(seconds)

    return per_round(stat, ranks, what="rounds")


def imbalance_noise_note(per_rank_s: list[list[float]], timed: Estimate, counted: float) -> str:
    """Beside :func:`timed_imbalance`'s figure: that a round's busiest rank over the mean is at
    least 1 by construction, so the ranks' noise alone lifts it; the same ratio of the ranks'
    medians (``per_rank_s[r][i]`` as there), against ``counted`` (the split's counted work);
    and, where ``timed``'s interval as printed lies above ``counted``, that this alone does not
    show more imbalance than counted. A sentence.

    Raises:
        TypeError, ValueError: for no ranks, a rank with no rounds, ``timed`` not an
            :class:`~perfkit.estimate.Estimate`, or ``counted`` not a finite number.
    """
    meds = [statistics.median(check_items(f"per_rank_s[{i}]", r))
            for i, r in enumerate(check_items("per_rank_s", per_rank_s))]
    check_type("timed", timed, Estimate)
    counted = check_real("counted", counted)
    of_medians = max(meds) * len(meds) / sum(meds)
    text = (f"A round's busiest rank over the mean is at least 1 by construction, so noise between the ranks "
            f"alone lifts it; the ranks' medians, the busier over their mean, give {of_medians:.3f}x, "
            f"against {counted:.3f}x counted")
    if timed.clear_of(counted, "x") == "above":
        text += (f"; the round figure's {timed.label} lying above {counted:.3f}x does not by itself show "
                 "more imbalance than counted")
    return text + "."


def split_cost_note(base_s: list[list[float]], other_s: list[list[float]], seq_len: int, tile: int = 64,
                    base: str = "contiguous", other: str = "zigzag") -> str:
    """What evening the ranks' work cost and bought: two splits (names as :func:`ring_work`
    takes them) of a causal sequence of ``seq_len`` in tiles of ``tile``, each timed as
    ``per_rank_s[r][i]`` (rank ``r``'s compute seconds in round ``i``). Compares the ranks'
    medians summed (the compute the split ran in all) and the busier rank's median (what a step
    waits for), ``other`` against ``base``, beside the two splits' tile FLOPs as counted. A
    sentence starting with a space.

    Raises:
        TypeError, ValueError: for no ranks, a rank with no rounds, times not numbers > 0, or
            sizes or split names :func:`ring_work` refuses.
    """
    meds = []
    for name, split in (("base_s", base_s), ("other_s", other_s)):
        ranks = check_items(name, split)
        meds.append([statistics.median(check_real(f"{name}[{r}][{i}]", t, 0, lo_open=True)
                                       for i, t in enumerate(check_items(f"{name}[{r}]", xs)))
                     for r, xs in enumerate(ranks)])
    b_work, o_work = (sum(ring_work(seq_len, len(m), s, tile=tile)) for m, s in zip(meds, (base, other)))
    (b_sum, o_sum), (b_max, o_max) = (sum(m) for m in meds), (max(m) for m in meds)
    same = "the same tile FLOPs" if b_work == o_work else f"{o_work / b_work:.3f}x the tile FLOPs"
    text = (f" For {same} the {other} split's ranks' median compute sums to {si(o_sum, 's')}, "
            f"{o_sum / b_sum:.2f}x the {base} split's {si(b_sum, 's')}; its busier rank's median, "
            f"{si(o_max, 's')}, is {o_max / b_max:.2f}x the {base} split's {si(b_max, 's')}")
    if o_max >= b_max:
        return text + ": evening the work did not shorten the busier rank in this run."
    text += f": evening the work shortened the busier rank by {1 - o_max / b_max:.0%}"
    return text + (f", though the {other} split spent more compute time in all (this run does not time where "
                   "the extra went)." if round(o_sum / b_sum, 2) > 1 else ".")
