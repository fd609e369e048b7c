"""Collective communication, measured: all-reduce, reduce-scatter, all-gather, broadcast.

Bandwidth is reported the way nccl-tests reports it (``doc/PERFORMANCE.md`` there):

* ``algbw = nbytes / time``: ``nbytes`` is the whole buffer (the all-reduce tensor, the
  all-gather *output*, the reduce-scatter *input*, the broadcast tensor);
* ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for
  all-gather and reduce-scatter, ``1`` for broadcast. busbw is what each link carries in
  the bandwidth-optimal (ring) algorithm, so it is comparable across ops and world sizes,
  and with the hardware's link bandwidth.

The alpha-beta model fitted to such a sweep is in :mod:`perfkit.comm.alpha_beta`, the ring
all-reduce built from point-to-point messages in :mod:`perfkit.comm.ring`.

Usage (inside a worker started by :func:`perfkit.dist.launch`)::

    ctx = perfkit.dist.init_worker()
    points = sweep(["all_reduce"], [1 << 10, 1 << 20])    # list[CollectivePoint]
    print([(p.nbytes, p.busbw) for p in points])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from perfkit import stats
from perfkit._checks import check_choice, check_int, check_items, check_real, check_type
from perfkit.estimate import Estimate
from perfkit.timing import benchmark, resolve_device
from perfkit.units import si

__all__ = [
    "OPS",
    "CollectivePoint",
    "all_gather_single",
    "benchmark_collective",
    "bus_factor",
    "busbw_fall_text",
    "busbw_share",
    "gloo_reduce_scatter_text",
    "isolated_times",
    "peak_busbw_text",
    "medians_against_pairs",
    "reduce_scatter_single",
    "sweep",
]

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw/algbw factor for ``op`` on ``world_size`` ranks.

    Raises:
        ValueError: for an unknown ``op`` or ``world_size < 1``.
    """
    check_choice("op", op, OPS)
    n = check_int("world_size", world_size, 1)
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_gather": (n - 1) / n, "broadcast": 1.0}[op]


# torch 2.13 deprecates the *_tensor names for *_single; older torch only has the former.
_RS = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_AG = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _check_single(output: torch.Tensor, input: torch.Tensor, group, whole: str) -> None:
    """Both tensors, one dtype, and the ``whole`` one (``"input"`` or ``"output"``) holding
    ``world_size`` times the other's elements; else the backend fails with its own words."""
    for name, t in (("output", output), ("input", input)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    n = dist.get_world_size(group)
    big, small = (input, output) if whole == "input" else (output, input)
    if big.numel() != n * small.numel() or output.dtype != input.dtype:
        raise ValueError(f"{whole} must hold world_size ({n}) times as many elements as the "
                         f"other tensor, of the same dtype; got output {tuple(output.shape)} "
                         f"{output.dtype}, input {tuple(input.shape)} {input.dtype}")


def reduce_scatter_single(output: torch.Tensor, input: torch.Tensor, group=None,
                          async_op: bool = False):
    """Sum ``input`` (``world_size * output.numel()`` elements) over ranks; keep this
    rank's slice in ``output``. Uses ``reduce_scatter_single`` where torch has it, else
    ``reduce_scatter_tensor``.

    Warning:
        Collective: every rank of ``group`` must call it with the same sizes.

    Raises:
        TypeError, ValueError: for non-tensors, or sizes or dtypes that do not match.
    """
    _check_single(output, input, group, "input")
    return _RS(output, input, group=group, async_op=async_op)


def all_gather_single(output: torch.Tensor, input: torch.Tensor, group=None,
                      async_op: bool = False):
    """Concatenate every rank's ``input`` into ``output`` (``world_size * input.numel()``).
    Uses ``all_gather_single`` where torch has it, else ``all_gather_into_tensor``.

    Warning:
        Collective: every rank of ``group`` must call it with the same sizes.

    Raises:
        TypeError, ValueError: for non-tensors, or sizes or dtypes that do not match.
    """
    _check_single(output, input, group, "output")
    return _AG(output, input, group=group, async_op=async_op)


@dataclass(frozen=True)
class CollectivePoint:
    """One measured collective: ``time_s`` is the slowest rank's median, in seconds;
    ``p10_s`` and ``p90_s`` the slowest rank's 10th and 90th percentiles (the spread of
    the repetitions; ``None`` where unknown)."""

    op: str
    nbytes: int
    world_size: int
    time_s: float
    algbw: float  # bytes/s
    busbw: float  # bytes/s
    p10_s: float | None = None
    p90_s: float | None = None


def busbw_share(point: CollectivePoint, bytes_per_s: float, repeat: int) -> Estimate:
    """``point``'s busbw over ``bytes_per_s``, with the range its p10 and p90 repetitions give (the
    spread of one of its ``repeat`` repetitions, not a confidence; none where unknown).

    Raises:
        TypeError, ValueError: for a ``point`` that is not a CollectivePoint, ``bytes_per_s``
            not > 0, or ``repeat`` below 1.
    """
    if not isinstance(point, CollectivePoint):
        raise TypeError(f"point must be a CollectivePoint, got {type(point).__name__}")
    check_real("bytes_per_s", bytes_per_s, 0, lo_open=True)
    check_int("repeat", repeat, 1)
    v = point.busbw / bytes_per_s
    if point.p10_s is None or point.p90_s is None:
        return Estimate(v, v, v, None, repeat, f"median of {repeat} repetitions")
    return Estimate(v, min(v, v * point.time_s / point.p90_s), max(v, v * point.time_s / point.p10_s),
                    None, repeat, f"p10 to p90 of {repeat} repetitions")


def _collective_fn(op: str, nbytes: int, group, device: torch.device) -> Callable[[], object]:
    n = dist.get_world_size(group)
    numel = max(n, nbytes // 4 // n * n)  # fp32 elements, divisible by n for RS/AG
    if op == "all_reduce":
        t = torch.ones(numel, device=device)
        return lambda: dist.all_reduce(t, group=group)
    if op == "broadcast":
        t = torch.ones(numel, device=device)
        src = dist.get_global_rank(group, 0) if group is not None else 0
        return lambda: dist.broadcast(t, src=src, group=group)
    big = torch.ones(numel, device=device)
    small = torch.ones(numel // n, device=device)
    if op == "reduce_scatter":
        return lambda: reduce_scatter_single(small, big, group=group)
    return lambda: all_gather_single(big, small, group=group)


def benchmark_collective(op: str, nbytes: int, group=None, warmup: int = 2, repeat: int = 5,
                         device: torch.device | str | None = None) -> CollectivePoint:
    """Time one collective on an fp32 buffer of (about) ``nbytes`` bytes.

    Each rank times ``repeat`` repetitions after ``warmup`` untimed ones; small messages
    are batched (the same count on every rank, so no rank waits for a call the others
    never make). The reported time is the maximum over ranks of the per-rank medians.

    Warning:
        Collective: every rank of ``group`` must call it with the same arguments.

    Args:
        op: one of :data:`OPS`.
        nbytes: message size in bytes (rounded down to a multiple of ``4 * world_size``).
        group: process group (default: WORLD).
        warmup, repeat: untimed and timed repetitions.
        device: where the buffer lives; ``None`` means CUDA with nccl, else CPU.

    Returns:
        A :class:`CollectivePoint` (median, p10 and p90 of the slowest rank).

    Raises:
        TypeError, ValueError: for an unknown ``op``, ``nbytes < 1``, a negative ``warmup``,
            a ``repeat`` below 1 or a bad ``device``, checked before any collective runs.
    """
    check_choice("op", op, OPS)
    check_int("nbytes", nbytes, 1)
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)
    if device is not None:
        device = resolve_device(device)
    n = dist.get_world_size(group)
    if device is None:
        device = torch.device("cuda" if dist.get_backend(group) == "nccl" else "cpu")
    fn = _collective_fn(op, nbytes, group, device)
    actual = max(n, nbytes // 4 // n * n) * 4  # bytes
    number = max(1, min(64, (1 << 20) // actual))  # ~1 MiB per timed repetition
    dist.barrier(group=group)
    m = benchmark(fn, warmup=warmup, repeat=repeat, device=device, number=number)
    t = torch.tensor([m.median_s, m.p10_s, m.p90_s], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the slowest rank decides
    time_s, p10_s, p90_s = t.tolist()
    algbw = actual / time_s
    return CollectivePoint(op, actual, n, time_s, algbw, algbw * bus_factor(op, n), p10_s, p90_s)


def sweep(ops: Sequence[str], sizes: Sequence[int], group=None, warmup: int = 2,
          repeat: int = 5) -> list[CollectivePoint]:
    """:func:`benchmark_collective` for every op in ``ops`` and size in ``sizes`` (bytes).

    Warning:
        Collective: every rank of ``group`` must call it with the same arguments.

    Raises:
        TypeError, ValueError: for empty or bad ``ops`` or ``sizes`` (each op one of
            :data:`OPS`, each size an int >= 1), checked before the first collective.
    """
    ops, sizes = check_items("ops", ops), check_items("sizes", sizes)
    for i, op in enumerate(ops):
        check_choice(f"ops[{i}]", op, OPS)
    for i, s in enumerate(sizes):
        check_int(f"sizes[{i}]", s, 1)
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)
    return [benchmark_collective(op, s, group, warmup, repeat) for op in ops for s in sizes]


def isolated_times(op: str, sizes: Sequence[int], group=None, gap_s: float = 1e-3,
                   repeat: int = 30, warmup: int = 3, stagger_s: float = 0.0) -> list[list[float]]:
    """Seconds of single ``op`` calls issued as a training step issues them: one at a time,
    each after ``gap_s`` of matmul work, averaged over the ranks.

    :func:`benchmark_collective` batches small messages back to back, so the ranks stay in
    lockstep and gloo's threads stay awake; a step's collectives come one at a time between
    computations, and the ranks arrive apart. Each call here is timed on every rank and the
    times are averaged over the ranks. That mean is what the call adds to a step in which
    every rank computes the same work: the step waits for the last rank's arrival, which is
    the mean rank's compute plus (last arrival - mean arrival), and the mean over ranks of
    (departure - arrival) is exactly the call's own time plus that difference. The slowest
    rank's time (nccl-tests') counts the arrival spread whole, the last rank's time not at
    all. Every call is returned, not a median: a step pays the slow calls too (see
    :func:`perfkit.plan.local_link`, which fits their means).

    Args:
        op: one of :data:`OPS`.
        sizes: buffer sizes in bytes (each >= 1; rounded as :func:`benchmark_collective`).
        group: process group (default: WORLD).
        gap_s: seconds of matmul work before each call (>= 0).
        repeat, warmup: timed and untimed calls per size (>= 1, >= 0).
        stagger_s: rank ``r`` of ``group`` works ``r * stagger_s`` longer before each call
            (>= 0): ranks arriving apart on purpose.

    Returns:
        ``times[i][j]``: call ``j`` of size ``i``, seconds, the same on every rank.

    Warning:
        Collective: every rank of ``group`` must call it with the same arguments.

    Raises:
        TypeError, ValueError: for a bad ``op``, size, ``gap_s``, ``repeat``, ``warmup`` or
            ``stagger_s``, checked before the first collective.
    """
    check_choice("op", op, OPS)
    sizes = check_items("sizes", sizes)
    for i, s in enumerate(sizes):
        check_int(f"sizes[{i}]", s, 1)
    check_real("gap_s", gap_s, 0)
    check_int("repeat", repeat, 1)
    check_int("warmup", warmup, 0)
    check_real("stagger_s", stagger_s, 0)
    gap_s += dist.get_rank(group) * stagger_s
    device = torch.device("cuda" if dist.get_backend(group) == "nccl" else "cpu")
    a = torch.randn(64, 64)
    out = []
    for nbytes in sizes:
        fn = _collective_fn(op, nbytes, group, device)
        own = []
        for j in range(warmup + repeat):
            end = time.perf_counter() + gap_s
            while time.perf_counter() < end:
                a @ a
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if j >= warmup:
                own.append(time.perf_counter() - t0)
        t = torch.tensor(own, dtype=torch.float64, device=device)
        dist.all_reduce(t, group=group)  # the sum over ranks, then their mean
        out.append((t / dist.get_world_size(group)).tolist())
    return out


def busbw_fall_text(points: Sequence[CollectivePoint], below: float = 0.8) -> str:
    """A sentence (starting with a space) where the largest size's busbw lies under ``below`` times
    the sweep's highest busbw, reached at a smaller size: past that size the messages did not
    approach a bandwidth, against the alpha-beta model's large-size claim. ``""`` otherwise.

    Raises:
        TypeError, ValueError: for no points, or one that is not a CollectivePoint.
    """
    pts = sorted((check_type("points[i]", p, CollectivePoint) for p in check_items("points", points)),
                 key=lambda p: p.nbytes)
    top, last = max(pts, key=lambda p: p.busbw), pts[-1]
    if top is last or last.busbw >= below * top.busbw:
        return ""
    return (f" Its busbw falls from {si(top.busbw, 'B/s')} at {si(top.nbytes, 'B')} to "
            f"{si(last.busbw, 'B/s')} at {si(last.nbytes, 'B')} ({last.busbw / top.busbw:.2g}x): past "
            f"{si(top.nbytes, 'B')} larger messages did not approach a bandwidth, against the model; this "
            "run does not measure why.")


def peak_busbw_text(points: Sequence[CollectivePoint], judged: CollectivePoint, bytes_per_s: float,
                    expected: float) -> str:
    """A sentence (starting with a space) on where a sweep's peak busbw lay beside the ``judged``
    point (a verdict's size), each as a share of ``bytes_per_s``, and which side of ``expected``
    (a share) the peak lies: the verdict and the table's peak column then name their own sizes.

    Raises:
        TypeError, ValueError: for no points, one that is not a CollectivePoint, or
            ``bytes_per_s`` or ``expected`` not > 0.
    """
    pts = [check_type("points[i]", p, CollectivePoint) for p in check_items("points", points)]
    check_type("judged", judged, CollectivePoint)
    check_real("bytes_per_s", bytes_per_s, 0, lo_open=True)
    check_real("expected", expected, 0, lo_open=True)
    top = max(pts, key=lambda p: p.busbw)
    if top.busbw <= judged.busbw:
        return f" The judged size, {si(judged.nbytes, 'B')}, is also the sweep's peak busbw."
    share = top.busbw / bytes_per_s
    return (f" The sweep's peak busbw, {si(top.busbw, 'B/s')} at {si(top.nbytes, 'B')} (the table's), is "
            f"{share:.2g} of that rate, {top.busbw / judged.busbw:.2g}x the judged size's, "
            f"{'at or below' if share <= expected else 'above'} the expected {expected:.2g}; the verdict "
            f"judges {si(judged.nbytes, 'B')}"
            + (", the largest size, the model's bandwidth-bound end."
               if judged.nbytes >= max(p.nbytes for p in pts) else "."))


def gloo_reduce_scatter_text(rs_s: float, ar_s: float, nbytes: int, world_size: int,
                             buffer_bytes_per_s: float) -> str:
    """Gloo's reduce-scatter (``rs_s``) against its all-reduce (``ar_s``) of the same ``nbytes``
    input: gloo clones the input, all-reduces the whole clone and copies this rank's slice out
    (PyTorch pull request 118911), so the mechanism predicts one all-reduce plus copying
    ``nbytes + nbytes / world_size`` at ``buffer_bytes_per_s`` (a buffer's bytes copied once per
    second). Says whether that accounts for the measured ratio (within 1.25x of the predicted
    time either way) or how much time it leaves unexplained.

    Raises:
        ValueError: for a time or rate not > 0, ``nbytes`` below 1 or ``world_size`` below 2.
    """
    for name, x in (("rs_s", rs_s), ("ar_s", ar_s), ("buffer_bytes_per_s", buffer_bytes_per_s)):
        check_real(name, x, 0, lo_open=True)
    check_int("nbytes", nbytes, 1)
    check_int("world_size", world_size, 2)
    copies_s = (nbytes + nbytes / world_size) / buffer_bytes_per_s
    predicted = ar_s + copies_s
    text = (": gloo runs no ring reduce-scatter. Its reduce_scatter_tensor all-reduces a copy of the whole "
            "buffer and keeps this rank's slice (PyTorch pull request 118911), so it moves an all-reduce's "
            "bytes, and its busbw curve above (the ring's factor) shows half the bytes it moved; NCCL runs "
            f"the real one. That mechanism predicts one all-reduce plus the two copies ({si(copies_s, 's')} "
            f"at {si(buffer_bytes_per_s, 'B/s')}), {predicted / ar_s:.2f}x the all-reduce")
    if predicted / 1.25 <= rs_s <= 1.25 * predicted:
        return text + f", which accounts for the measured {rs_s / ar_s:.2f}x."
    if rs_s < predicted:
        return text + f"; the measured {rs_s / ar_s:.2f}x is below it, which the mechanism does not explain."
    return text + (f"; the measured {si(rs_s, 's')} leaves {si(rs_s - predicted, 's')} "
                   f"({(rs_s - predicted) / ar_s:.2f} all-reduces' worth) that the mechanism does not "
                   "explain and this run does not measure.")


def medians_against_pairs(a: Sequence[float], b: Sequence[float]) -> str:
    """A clause on ``median(a) / median(b)`` against the median of the paired ratios ``a[i] / b[i]``
    and its interval (:func:`perfkit.stats.median_ratio`). Where it lies outside, it says why they
    can differ: the two agree whenever every round gives the same ratio, and part as the rounds'
    ratios vary (their p10 to p90 is named).

    Raises:
        TypeError, ValueError: as :func:`perfkit.stats.median_ratio`.
    """
    est = stats.median_ratio(a, b)
    rom = stats.median(a) / stats.median(b)
    text = f"the ratio of the two medians is {rom:.3g}x"
    if est.low * (1 - 1e-9) <= rom <= est.high * (1 + 1e-9):
        return text + (", inside that interval" if est.low < est.high else "")
    if est.level is None or est.low == est.high:
        return text + " (the paired ratios give no interval to hold it against)"
    r = stats.paired_ratios(a, b)
    return (text + f", {'below' if rom < est.low else 'above'} that interval: the two answer different "
            "questions (the typical round's ratio, and the ratio of each step's typical time, taken from "
            "different rounds), which agree whenever every round gives the same ratio and part as the ratios "
            "vary: here the rounds' "
            f"ratios ran {stats.quantile(r, 0.1):.2f}x to {stats.quantile(r, 0.9):.2f}x (p10 to p90)")
