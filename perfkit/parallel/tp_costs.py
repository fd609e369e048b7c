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
from perfkit.units import si

__all__ = ["TPBlockCost", "block_flops", "bound_text", "crossover_width", "intercept_note", "offset_note",
           "region_activation_bytes", "speedup_crossing", "sweep_time", "tp_block_cost"]

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
    ``level ** (1 / 2)`` (two widths set each end, timed in separate runs, as
    :func:`perfkit.stats.of_medians` takes them): the low end where the curve through the
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
    each = [stats.median_interval(r, level ** 0.5) for r in rs]
    meds = [e.value for e in each]
    if not any(a < 1 <= b for a, b in zip(meds, meds[1:])):
        return None
    i = next(j for j, (a, b) in enumerate(zip(meds, meds[1:])) if a < 1 <= b)  # the widths it lies between
    point = _crossing(ws, meds)
    n = min(e.n for e in each)
    how = "where the widths' median speedups cross 1x, linear in log width"
    if not all(e.has_interval for e in each):
        return Estimate(point, point, point, level, n, how,
                        needs=max(e.needs for e in each if e.needs is not None))
    low, high = _crossing(ws, [e.high for e in each]), _crossing(ws, [e.low for e in each])
    return Estimate(point, min(low, point), max(high, point), level, n,
                    how + f", from the two widths it lies between, C = {ws[i]:g} and {ws[i + 1]:g}, each at "
                    f"least {level ** 0.5:.1%}, together at the coverage printed",
                    coverage=stats.joint_coverage(each[i:i + 2], independent=True))


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


def bound_text(value: float, low: float, high: float, unit: str = "x") -> str:
    """A figure and the range its inputs' intervals move it over, each at 3 significant digits:
    ``"1.34x (1.33x to 1.35x)"``, or ``"1.96x"`` alone where the range does not show at that
    precision (no extra digits to part two ends that differ by less than the figure's own
    precision, which the inputs held fixed do not have).

    Raises:
        TypeError, ValueError: for numbers not finite, or ``low > high``.
    """
    value, low, high = (check_real(n, v) for n, v in (("value", value), ("low", low), ("high", high)))
    if low > high:
        raise ValueError(f"low must be <= high, got {low!r} > {high!r}")
    v, lo, hi = (si(x, unit) for x in (value, low, high))
    return v if lo == hi == v else f"{v} ({lo} to {hi})"


def charge_choice(widths: Sequence[float], sweep_s: Sequence[float], fit_s: Sequence[float]) -> str:
    """Which way charging the sweep's calls, not the fit's line, moves each width's bound
    ``U / (U / t + comm)``: where the sweep charged more, the bound is lower (stricter) than the
    fit's line would make it; where less, higher. One clause, from the two charges.

    Raises:
        TypeError, ValueError: for lists that are not numbers > 0 or differ in length.
    """
    ws, ss = check_items("widths", widths), check_items("sweep_s", sweep_s)
    fs = check_items("fit_s", fit_s)
    if not len(ws) == len(ss) == len(fs):
        raise ValueError(f"widths, sweep_s and fit_s differ in length: {len(ws)}, {len(ss)}, {len(fs)}")
    for name, vs in (("sweep_s", ss), ("fit_s", fs)):
        for i, v in enumerate(vs):
            check_real(f"{name}[{i}]", v, 0, lo_open=True)
    parts = []
    for how, effect, keep in (("more than", "lower, stricter, than the fit's would be", lambda r: r > 1),
                              ("less than", "higher than the fit's would be", lambda r: r < 1),
                              ("the same as", "the fit's", lambda r: r == 1)):
        rs = [(w, s / f) for w, s, f in zip(ws, ss, fs) if keep(s / f)]
        if rs:
            lo, hi = min(r for _, r in rs), max(r for _, r in rs)
            span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"
            at = ", ".join(f"{w:g}" for w, _ in rs)
            parts.append(f"{how} the fit's line at C = {at} ({span}: the bound there {effect})")
    return "the sweep charged a block's call " + "; ".join(parts)


def offset_note(ceiling: float, rate: float, fit_s: Sequence[float], sweep_s: Sequence[float],
                beyond_s: Sequence[float], short: bool = False) -> str:
    """Why a crossover prediction judged against the measured crossing need not have any input
    right: the prediction's compute rate ``ceiling`` against the blocks' measured ``rate``
    (FLOP/s), the fit's line ``fit_s`` against the sweep's calls ``sweep_s`` at the blocks'
    sizes (s per call), and ``beyond_s``, each split block's time above its floor ``U / t +
    comm`` (s), which the model leaves out. A rate above the measured one and a line above the
    calls put the model's crossover higher (``U`` smaller, ``comm`` larger); time beyond the
    floor puts the measured crossing higher. Where the model's inputs push it up and the omitted
    time pushes the crossing up, the sentence says the two offset. A sentence; ``""`` where
    nothing is off. ``short``: a headline's clause instead, naming what was off and that agreement
    does not confirm it.

    Raises:
        TypeError, ValueError: for rates or times not > 0 (``beyond_s`` any finite number), or
            ``fit_s`` and ``sweep_s`` of different lengths.
    """
    r = check_real("ceiling", ceiling, 0, lo_open=True) / check_real("rate", rate, 0, lo_open=True)
    fs, ss = check_items("fit_s", fit_s), check_items("sweep_s", sweep_s)
    if len(fs) != len(ss):
        raise ValueError(f"fit_s and sweep_s differ in length: {len(fs)}, {len(ss)}")
    over = [check_real(f"fit_s[{i}]", f, 0, lo_open=True) / check_real(f"sweep_s[{i}]", x, 0, lo_open=True)
            for i, (f, x) in enumerate(zip(fs, ss))]
    beyond = [check_real(f"beyond_s[{i}]", b) for i, b in enumerate(check_items("beyond_s", beyond_s))]
    up, down = [], []
    if f"{r:.2f}" != "1.00":
        (up if r > 1 else down).append(f"its compute rate ({r:.2f}x the measured rate)")
    if over and (min(over) > 1 or max(over) < 1):
        span = f"{min(over):.2f}x" if f"{min(over):.2f}" == f"{max(over):.2f}" else \
            f"{min(over):.2f}x to {max(over):.2f}x"
        (up if min(over) > 1 else down).append(f"the fit's line ({span} what the sweep's calls took at the "
                                               "blocks' sizes)")
    if short:
        off = up + down + ([f"the split blocks {si(min(beyond), 's')} to {si(max(beyond), 's')} above their "
                            "floor"] if beyond and min(beyond) > 0 else [])
        return f"; the model's inputs were off, {', '.join(off)}: errors that can offset, so a match " \
            "does not confirm them" if off else ""
    said = [(" and ".join(xs), way) for xs, way in ((up, "higher"), (down, "lower")) if xs]
    text = "".join(f" {x[0].upper()}{x[1:]} put the model's crossover {way} than this run's measurements "
                   "would." for x, way in said)
    if beyond and min(beyond) > 0:
        text += (f" The split blocks ran {si(min(beyond), 's')} to {si(max(beyond), 's')} above their floor "
                 "U / t + comm, time the model leaves out, which puts the measured crossing higher")
        text += (": the two errors move the gap between prediction and measurement opposite ways, so the "
                 "verdict shows how far they cancel at these widths, not that any input was right."
                 if up and not down else ".")
    return text


def sweep_charge_note(nbytes: Sequence[float], times_s: Sequence[float], size: float, fit_s: float,
                      unsplit_s: float, t: int, measured: float | None = None, calls: int = 4) -> str:
    """What set a bound's communication charge at one width: the sweep's time for a call of
    ``size`` bytes (:func:`sweep_time`), against the sizes timed beside it and the fit's line
    ``fit_s``, and the bound ``U / (U / t + calls x fit_s)`` the fit's line would give, with
    where ``measured`` (a speedup) lies against it. Sentences, for a verdict's explanation.

    Raises:
        TypeError, ValueError: as :func:`sweep_time`, or for ``fit_s``, ``unsplit_s`` not > 0,
            ``t`` or ``calls`` not >= 1.
    """
    call = sweep_time(nbytes, times_s, size)
    check_real("fit_s", fit_s, 0, lo_open=True)
    check_real("unsplit_s", unsplit_s, 0, lo_open=True)
    check_int("t", t, 1)
    check_int("calls", calls, 1)
    pts = sorted(zip(nbytes, times_s))
    at = next((i for i, (x, _) in enumerate(pts) if x == size), None)
    if at is not None:
        beside = pts[max(at - 1, 0):at] + pts[at + 1:at + 2]
        above = [tb for _, tb in beside if call > tb]
        two = len(beside) == 2
        rank = ("above both sizes" if two and len(above) == 2 else "below both sizes" if two and not above
                else "between the sizes" if two else "against the size")
        where = f"the sweep's median at that size, {rank} timed beside it"
    else:
        beside = [p for p in pts if p[0] < size][-1:] + [p for p in pts if p[0] > size][:1]
        where = "read off the sweep between the sizes timed around it" if len(beside) == 2 else \
            "the nearest size's time, outside the sweep"
    near = "; ".join(f"{si(x, 'B')}: {si(tx, 's')}" for x, tx in beside)
    alt = unsplit_s / (unsplit_s / t + calls * fit_s)
    text = (f"Each of the {calls} calls ({si(size, 'B')}) was charged {si(call, 's')}, {where} ({near}), "
            f"{call / fit_s:.2f}x the fit's line ({si(fit_s, 's')}); charged the fit's line, the bound "
            f"would be {alt:.2f}x")
    if measured is None:
        return text + "."
    check_real("measured", measured, 0, lo_open=True)
    if measured <= alt:
        return text + (f", which the measured {measured:.3g}x lies under: the sweep's charge at this size "
                       "decided it.")
    return text + (f", which the measured {measured:.3g}x crosses too: the block's calls cost less than "
                   "either charge, or its half-size matmuls ran faster per FLOP than the whole block's (this "
                   "run does not time them apart).")


def intercept_note(nbytes: Sequence[float], times_s: Sequence[float], alpha_s: float) -> str:
    """Where a fit's intercept ``alpha_s`` (what its line charges a call of no bytes) lies
    against the sweep it was fitted to: a call timed faster than the intercept bounds the fixed
    cost of a call below it, so the intercept is then the fit's, not a latency of the library.
    One clause, from the sweep's own times.

    Raises:
        TypeError, ValueError: as :func:`sweep_time`, or for ``alpha_s`` not >= 0.
    """
    sweep_time(nbytes, times_s, 1.0)   # checks the sweep
    check_real("alpha_s", alpha_s, 0)
    under = sorted((t, x) for x, t in zip(nbytes, times_s) if t < alpha_s)
    if not under:
        return (f"every size timed took more than the fit's intercept, {si(alpha_s, 's')}: the sweep does "
                "not contradict it as a fixed cost per call")
    fastest, at = under[0]
    sizes = ", ".join(si(x, "B") for x in sorted(x for _, x in under))
    return (f"sizes timed below the fit's intercept, {si(alpha_s, 's')}: {sizes}; the fastest, {si(at, 'B')} "
            f"in {si(fastest, 's')}, puts a call's fixed cost on this run at most that, "
            f"{fastest / alpha_s:.2f}x the intercept: the intercept is the fit's, not a latency of the "
            "library")
