"""What tensor parallelism costs and saves per transformer block: compute split ``t`` ways
against the all-reduces it adds, and the activations sequence parallelism divides by ``t``.

A block's matmuls do ``72 N C^2 + 12 N T C`` FLOPs forward and backward (``N = B * T`` tokens,
width ``C``: 12 C^2 weights at 6 FLOPs per weight and token, plus attention's scores and
weighted sums), all split ``t`` ways. Tensor parallelism adds 4 all-reduces of ``N * C``
values per block; by the ring model each costs ``2 (t - 1)`` steps of ``N C / t`` values.
Compute grows as ``C^2`` and communication as ``C``, so TP pays above a crossover width and
costs time below it (Megatron-LM keeps TP inside a node for this reason).

A bound on the speedup needs a floor under the communication, not a model of it: a fit's
intercept is what its line charges a call of no bytes, and calls at a block's sizes can take a
fraction of it. :func:`sweep_time` reads a call's time off the sweep that measured such calls.
:func:`speedup_crossing` reads where measured speedups cross 1x, the width the crossover
predicts.

Usage::

    link = AlphaBeta(alpha_s=30e-6, bandwidth=2e9)             # one ring step, from a fit
    cost = tp_block_cost(1024, t=2, tokens=8 * 512, seq=512, flops_per_s=1e11, link=link)
    width = crossover_width(2, 8 * 512, 512, 1e11, link)        # TP pays above this width
    call = sweep_time([2**16, 2**18], [5e-4, 6e-4], 2**17)     # 5.5e-4 s, read off a sweep
    where = speedup_crossing([256, 512], [[0.8, 0.9, 0.85], [1.2, 1.3, 1.25]])  # an Estimate, or None
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfkit import stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta, ring_allreduce_time
from perfkit.estimate import Estimate

__all__ = ["TPBlockCost", "block_flops", "crossover_width", "region_activation_bytes", "speedup_crossing",
           "sweep_time", "tp_block_cost"]

REACH = 16.0   # an interval end is not read further than this factor beyond the widths timed


def block_flops(width: int, tokens: int, seq: int) -> float:
    """Matmul FLOPs of one block's forward and backward: ``72 N C^2 + 12 N T C``.

    Raises:
        ValueError: for a width, token count or sequence length below 1.
    """
    for name, v in (("width", width), ("tokens", tokens), ("seq", seq)):
        check_real(name, v, 1)
    return 72.0 * tokens * width**2 + 12.0 * tokens * seq * width


@dataclass(frozen=True)
class TPBlockCost:
    """One block's forward and backward, unsplit and split ``t`` ways (seconds)."""

    width: float
    t: int
    compute_s: float        # the unsplit block's matmuls
    comm_s: float           # 4 all-reduces of N * C values
    split_compute_s: float  # compute_s / t

    @property
    def tp_s(self) -> float:
        """The split block's time, communication not overlapped: ``compute / t + comm``."""
        return self.split_compute_s + self.comm_s

    @property
    def speedup(self) -> float:
        """Unsplit time over split time: above 1, tensor parallelism pays."""
        return self.compute_s / self.tp_s


def tp_block_cost(width: float, t: int, tokens: int, seq: int, flops_per_s: float,
                  link: AlphaBeta, dtype_bytes: int = 4) -> TPBlockCost:
    """The model's times for one block at ``width`` on ``t`` ranks.

    Args:
        width: ``C`` (a float, so that the crossover can be searched continuously).
        t: the tensor-parallel degree.
        tokens: ``N = B * T`` per step; seq: ``T``, for attention's ``N T C`` term.
        flops_per_s: the matmul rate one rank reaches (``perfkit.hw`` limits).
        link: one ring step's alpha and bandwidth (a 2-rank all-reduce fit with half its
            alpha, see :func:`perfkit.comm.alpha_beta.ring_allreduce_time`).
        dtype_bytes: bytes per activation value.

    Raises:
        TypeError, ValueError: for an argument out of its range, named.
    """
    check_int("t", t, 1)
    check_real("flops_per_s", flops_per_s, 0, lo_open=True)
    check_type("link", link, AlphaBeta)
    check_int("dtype_bytes", dtype_bytes, 1)
    compute = block_flops(width, tokens, seq) / flops_per_s
    comm = 4 * ring_allreduce_time(tokens * width * dtype_bytes, t, link)
    return TPBlockCost(float(width), t, compute, comm, compute / t)


def crossover_width(t: int, tokens: int, seq: int, flops_per_s: float, link: AlphaBeta,
                    dtype_bytes: int = 4, hi: float = 2.0**20) -> float | None:
    """The width at which the split block is as fast as the unsplit one (speedup 1): above
    it tensor parallelism pays. ``None`` for ``t == 1``, or if it does not pay below ``hi``.

    The speedup grows with the width (compute ``C^2``, communication ``C``), so bisection
    finds the one crossing.

    Raises:
        TypeError, ValueError: as :func:`tp_block_cost`.
    """
    def pays(w: float) -> bool:
        return tp_block_cost(w, t, tokens, seq, flops_per_s, link, dtype_bytes).speedup >= 1.0

    if t == 1 or not pays(hi):
        tp_block_cost(1.0, t, tokens, seq, flops_per_s, link, dtype_bytes)   # checks
        return None
    lo = 1.0
    if pays(lo):
        return lo
    for _ in range(100):   # relative precision far below a percent
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if pays(mid) else (mid, hi)
    return hi


def sweep_time(nbytes: Sequence[float], times_s: Sequence[float], size: float) -> float:
    """Seconds one call of ``size`` bytes took in a measured sweep: linear in ``log(size)``
    between the two measured sizes around it; outside the sweep, the nearest size's time.

    This is what the calls near ``size`` were measured to take, not a model across every
    size: an alpha-beta fit charges each call its intercept, fitted over the whole sweep, and
    a fit that overcharges the sizes a block sends turns "at most ``U / (U / t + comm)``" into
    a figure below the real bound (notebook 10, section 5).

    Args:
        nbytes: the sweep's sizes in bytes (each > 0, all distinct, any order).
        times_s: seconds per call at each size, same length (each > 0).
        size: the bytes of the call to read off (> 0).

    Raises:
        TypeError: if ``nbytes`` or ``times_s`` is not a list of numbers.
        ValueError: for empty or mismatched lists, a repeated size, or a size or time not > 0.
    """
    xs, ts = check_items("nbytes", nbytes), check_items("times_s", times_s)
    if len(xs) != len(ts):
        raise ValueError(f"nbytes and times_s differ in length: {len(xs)} vs {len(ts)}")
    for name, vs in (("nbytes", xs), ("times_s", ts)):
        for i, v in enumerate(vs):
            check_real(f"{name}[{i}]", v, 0, lo_open=True)
    if len(set(xs)) != len(xs):
        raise ValueError(f"nbytes must hold distinct sizes, got {sorted(xs)}")
    check_real("size", size, 0, lo_open=True)
    pts = sorted(zip(xs, ts))
    if size <= pts[0][0]:
        return float(pts[0][1])
    for (x0, t0), (x1, t1) in zip(pts, pts[1:]):
        if size <= x1:
            f = math.log(size / x0) / math.log(x1 / x0)   # 0 at x0, 1 at x1
            return float(t0 + f * (t1 - t0))
    return float(pts[-1][1])


def _crossing(ws: list[float], ys: list[float]) -> float:
    """Where ``ys`` (one per width in ``ws``, ascending) first rises through 1, linear in log
    width between the widths around it; past the widths, along the end segment if that rises
    toward 1; at most :data:`REACH` beyond them either way."""
    lo_w, hi_w = ws[0] / REACH, ws[-1] * REACH
    logs = [math.log(w) for w in ws]

    def along(i: int) -> float:   # the line through points i and i + 1, at y = 1
        if ys[i + 1] <= ys[i]:
            return hi_w if ys[i + 1] < 1 else lo_w
        return math.exp(logs[i] + (1 - ys[i]) / (ys[i + 1] - ys[i]) * (logs[i + 1] - logs[i]))

    if ys[0] >= 1:
        x = along(0) if len(ws) > 1 else lo_w
    else:
        i = next((i for i in range(len(ws) - 1) if ys[i] < 1 <= ys[i + 1]), None)
        x = along(i) if i is not None else along(len(ws) - 2) if len(ws) > 1 else hi_w
    return min(max(x, lo_w), hi_w)


def speedup_crossing(widths: Sequence[float], ratios: Sequence[Sequence[float]],
                     level: float = stats.LEVEL) -> Estimate | None:
    """The width at which measured speedups cross 1x: what a model's crossover width predicts.

    Each width's speedup is the median of its rounds' ``ratios`` (unsplit over split, paired).
    The crossing is read between the first two adjacent widths whose medians straddle 1x,
    linear in log width. Its interval comes from each width's median interval at
    ``level ** (1 / k)`` for ``k`` widths (timed in separate runs, as
    :func:`perfkit.stats.of_medians` takes them; every width can set an end, since an end is
    read where its curve first crosses 1x, so all ``k`` hold together with the product of
    their coverages, at least ``level``): the low end where the curve through the
    intervals' high ends crosses 1x, the high end where the one through their low ends does,
    each read past the widths timed along the end segment when that rises, and at most
    :data:`REACH` times beyond them (an end that would reach further stops there).

    Args:
        widths: the widths timed, ascending.
        ratios: per width, its rounds' speedups (each > 0).
        level: the interval's confidence.

    Returns:
        An :class:`perfkit.estimate.Estimate` of the crossing width, without an interval where a
        width has too few rounds; ``None`` where no two adjacent widths' medians straddle 1x
        (the speedups cross outside the widths timed, or not at all).

    Raises:
        TypeError, ValueError: for fewer than 2 widths, widths not ascending and > 0, ratios not
            one non-empty list of positive numbers per width, or ``level`` outside (0, 1).
    """
    ws = [check_real(f"widths[{i}]", w, 0, lo_open=True) for i, w in enumerate(check_items("widths", widths))]
    if len(ws) < 2 or any(b <= a for a, b in zip(ws, ws[1:])):
        raise ValueError(f"widths must hold 2 or more ascending widths, got {ws}")
    rs = check_items("ratios", ratios)
    if len(rs) != len(ws):
        raise ValueError(f"ratios must hold one list per width ({len(ws)}), got {len(rs)}")
    check_real("level", level, 0, 1, lo_open=True, hi_open=True)
    each = [stats.median_interval(r, level ** (1 / len(rs))) for r in rs]
    meds = [e.value for e in each]
    if not any(a < 1 <= b for a, b in zip(meds, meds[1:])):
        return None
    point = _crossing(ws, meds)
    n = min(e.n for e in each)
    how = "where the widths' median speedups cross 1x, linear in log width"
    if not all(e.has_interval for e in each):
        return Estimate(point, point, point, level, n, how,
                        needs=max(e.needs for e in each if e.needs is not None))
    low, high = _crossing(ws, [e.high for e in each]), _crossing(ws, [e.low for e in each])
    return Estimate(point, min(low, point), max(high, point), level, n,
                    how + f", each of the {len(ws)} widths' intervals at least {level ** (1 / len(ws)):.1%}, "
                    "all together at the coverage printed (any width can set an end)",
                    coverage=stats.joint_coverage(each, independent=True))


def region_activation_bytes(batch: int, seq: int, width: int, t: int = 1,
                            sequence_parallel: bool = False, dropout: bool = True,
                            dtype_bytes: int = 4, mask_bytes: int = 4) -> int:
    """Bytes one block's LayerNorm and residual-dropout regions save for backward, per rank.

    Each LayerNorm saves its ``(B, T, C)`` input and an fp32 mean and inverse deviation per
    token; each residual dropout its ``(B, T, C)`` mask, ``mask_bytes`` per value (PyTorch's
    CPU dropout keeps a mask of the input's dtype, its fused CUDA kernel a bool one: 1).
    Tensor parallelism replicates these regions on every rank; sequence parallelism splits
    them along ``T``.

    Raises:
        ValueError: for sizes below 1, or a ``T`` that ``t`` does not divide under sequence
            parallelism.
    """
    for name, v in (("batch", batch), ("seq", seq), ("width", width), ("t", t),
                    ("dtype_bytes", dtype_bytes), ("mask_bytes", mask_bytes)):
        check_int(name, v, 1)
    if sequence_parallel and seq % t:
        raise ValueError(f"seq ({seq}) must be divisible by t ({t}) under sequence parallelism")
    tokens = batch * (seq // t if sequence_parallel else seq)
    norms = 2 * (tokens * width * dtype_bytes + 2 * tokens * 4)   # input, mean and rstd fp32
    masks = 2 * tokens * width * mask_bytes if dropout else 0
    return norms + masks
