"""Collective communication, measured: all-reduce, reduce-scatter, all-gather, broadcast.

Bandwidth is reported the way nccl-tests reports it (``doc/PERFORMANCE.md`` there):

* ``algbw = nbytes / time``: ``nbytes`` is the whole buffer (the all-reduce tensor, the
  all-gather *output*, the reduce-scatter *input*, the broadcast tensor);
* ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for
  all-gather and reduce-scatter, ``1`` for broadcast. busbw is what each link carries in
  the bandwidth-optimal (ring) algorithm, so it is comparable across ops and world sizes,
  and with the hardware's link bandwidth.

The latency-bandwidth ("alpha-beta", Hockney) model ``t(n) = alpha + n / bandwidth`` is
fitted to a sweep by :func:`fit_alpha_beta`. :func:`ring_all_reduce` builds the ring
all-reduce (Patarasuk and Yuan, 2009) from point-to-point ``isend``/``irecv``: a
reduce-scatter then an all-gather, ``2(n-1)`` steps each moving ``1/n`` of the data.

Usage (inside a worker started by :func:`perfkit.dist.launch`)::

    ctx = perfkit.dist.init_worker()
    points = sweep(["all_reduce"], [1 << 10, 1 << 20])    # list[CollectivePoint]
    fit = fit_alpha_beta([p.nbytes for p in points], [p.time_s for p in points])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from perfkit.timing import benchmark

__all__ = [
    "OPS",
    "AlphaBeta",
    "CollectivePoint",
    "all_gather_single",
    "benchmark_collective",
    "bus_factor",
    "fit_alpha_beta",
    "reduce_scatter_single",
    "ring_all_reduce",
    "ring_allreduce_time",
    "sweep",
]

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw/algbw factor for ``op`` on ``world_size`` ranks.

    Raises:
        ValueError: for an unknown ``op`` or ``world_size < 1``.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    n = world_size
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_gather": (n - 1) / n, "broadcast": 1.0}[op]


# torch 2.13 deprecates the *_tensor names for *_single; older torch only has the former.
_RS = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_AG = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_single(output: torch.Tensor, input: torch.Tensor, group=None,
                          async_op: bool = False):
    """Sum ``input`` (``world_size * output.numel()`` elements) over ranks; keep this
    rank's slice in ``output``. Uses ``reduce_scatter_single`` where torch has it, else
    ``reduce_scatter_tensor``.

    Warning:
        Collective: every rank of ``group`` must call it with the same sizes.
    """
    return _RS(output, input, group=group, async_op=async_op)


def all_gather_single(output: torch.Tensor, input: torch.Tensor, group=None,
                      async_op: bool = False):
    """Concatenate every rank's ``input`` into ``output`` (``world_size * input.numel()``).
    Uses ``all_gather_single`` where torch has it, else ``all_gather_into_tensor``.

    Warning:
        Collective: every rank of ``group`` must call it with the same sizes.
    """
    return _AG(output, input, group=group, async_op=async_op)


@dataclass(frozen=True)
class CollectivePoint:
    """One measured collective: ``time_s`` is the slowest rank's median, in seconds."""

    op: str
    nbytes: int
    world_size: int
    time_s: float
    algbw: float  # bytes/s
    busbw: float  # bytes/s


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
        A :class:`CollectivePoint`.

    Raises:
        ValueError: for an unknown ``op`` or ``nbytes < 1``.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be an int >= 1, got {nbytes!r}")
    n = dist.get_world_size(group)
    if device is None:
        device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    device = torch.device(device)
    fn = _collective_fn(op, nbytes, group, device)
    actual = max(n, nbytes // 4 // n * n) * 4  # bytes
    number = max(1, min(64, (1 << 20) // actual))  # ~1 MiB per timed repetition
    dist.barrier(group=group)
    m = benchmark(fn, warmup=warmup, repeat=repeat, device=device, number=number)
    t = torch.tensor([m.median_s], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    time_s = float(t.item())
    algbw = actual / time_s
    return CollectivePoint(op, actual, n, time_s, algbw, algbw * bus_factor(op, n))


def sweep(ops: Sequence[str], sizes: Sequence[int], group=None, warmup: int = 2,
          repeat: int = 5) -> list[CollectivePoint]:
    """:func:`benchmark_collective` for every op in ``ops`` and size in ``sizes`` (bytes).

    Warning:
        Collective: every rank of ``group`` must call it with the same arguments.
    """
    if not ops or not sizes:
        raise ValueError("ops and sizes must be non-empty")
    return [benchmark_collective(op, s, group, warmup, repeat) for op in ops for s in sizes]


# --- the alpha-beta model ---------------------------------------------------------------


@dataclass(frozen=True)
class AlphaBeta:
    """``t(n) = alpha_s + n / bandwidth``: start-up latency (s) and bandwidth (bytes/s)."""

    alpha_s: float
    bandwidth: float

    def predict(self, nbytes: float) -> float:
        """Predicted seconds for an ``nbytes`` message."""
        return self.alpha_s + nbytes / self.bandwidth

    @property
    def half_bandwidth_bytes(self) -> float:
        """Message size that reaches half the asymptotic bandwidth (``alpha * bandwidth``)."""
        return self.alpha_s * self.bandwidth


def fit_alpha_beta(nbytes: Sequence[float], times_s: Sequence[float]) -> AlphaBeta:
    """Fit ``t = alpha + beta * n`` by least squares on *relative* errors.

    Sizes span five orders of magnitude; an ordinary fit would be decided by the largest
    messages alone and give a meaningless alpha. Weighting each residual by ``1/t`` makes
    every point count as a relative error. Both coefficients are kept positive.

    Args:
        nbytes: message sizes in bytes (at least two distinct).
        times_s: measured seconds, same length, all > 0.

    Returns:
        An :class:`AlphaBeta`.

    Raises:
        ValueError: for mismatched lengths, fewer than two distinct sizes, or times <= 0.
    """
    if len(nbytes) != len(times_s):
        raise ValueError(f"nbytes and times_s differ in length: {len(nbytes)} vs {len(times_s)}")
    if len(set(nbytes)) < 2:
        raise ValueError("nbytes needs at least two distinct sizes to fit alpha and beta")
    if any(t <= 0 or not math.isfinite(t) for t in times_s):
        raise ValueError("times_s must all be finite and > 0")
    n = torch.tensor(nbytes, dtype=torch.float64)
    t = torch.tensor(times_s, dtype=torch.float64)
    a = torch.stack([1 / t, n / t], dim=1)  # rows: (1, n) / t
    sol = torch.linalg.lstsq(a, torch.ones_like(t).unsqueeze(1)).solution.squeeze(1)
    alpha, beta = float(sol[0]), float(sol[1])
    if beta <= 0:  # latency-only data: no measurable bandwidth term
        beta = 1e-18
    if alpha <= 0:  # refit bandwidth alone through the origin
        alpha = 0.0
        beta = float(((n / t) @ torch.ones_like(t)) / ((n / t) @ (n / t)))
    return AlphaBeta(alpha_s=alpha, bandwidth=1.0 / beta)


def ring_allreduce_time(nbytes: float, world_size: int, link: AlphaBeta) -> float:
    """Ring all-reduce time: ``2(n-1)`` steps, each one message of ``nbytes / n`` bytes.

    ``link`` describes one point-to-point step (from a 2-rank fit: a 2-rank ring does two
    steps of half the buffer, so ``link.alpha_s = fit.alpha_s / 2`` and the bandwidth is
    the same). Returns seconds.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if world_size == 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * link.predict(nbytes / world_size)


# --- ring all-reduce from point-to-point messages ---------------------------------------


def ring_all_reduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place with a ring of ``isend``/``irecv``.

    The flat tensor is split into ``n`` chunks with ``tensor_split`` (sizes may differ
    by one element, so any ``numel`` works). Reduce-scatter: at step ``s`` rank ``r``
    sends chunk ``(r - s) % n`` to its right neighbour and adds the chunk
    ``(r - s - 1) % n`` arriving from its left; after ``n - 1`` steps it holds the full
    sum of chunk ``(r + 1) % n``. All-gather: ``n - 1`` more steps pass the finished
    chunks around the ring. Each rank sends ``2 (n-1)/n`` of the buffer in total, the
    all-reduce busbw factor.

    Warning:
        Collective: every rank of ``group`` must call it with a tensor of the same shape
        and dtype, or the ring deadlocks until the process group's timeout.

    Args:
        tensor: a contiguous tensor, modified in place.
        group: process group (default: WORLD).

    Returns:
        ``tensor``, now holding the sum over ranks.

    Raises:
        ValueError: if ``tensor`` is not contiguous.
        TypeError: if ``tensor`` is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous (call .contiguous() first)")
    n = dist.get_world_size(group)
    if n == 1:
        return tensor
    rank = dist.get_rank(group)
    peer = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    right, left = peer((rank + 1) % n), peer((rank - 1) % n)
    chunks = tensor.view(-1).tensor_split(n)  # views into tensor, sizes differ by <= 1
    buf = torch.empty_like(chunks[0])  # the largest chunk is the first

    def exchange(send_idx: int, recv_idx: int) -> torch.Tensor:
        out = buf[: chunks[recv_idx].numel()]
        reqs = []
        # both sides know every chunk's size, so empty chunks are skipped symmetrically
        if chunks[send_idx].numel():
            reqs.append(dist.isend(chunks[send_idx], right, group=group))
        if out.numel():
            reqs.append(dist.irecv(out, left, group=group))
        for req in reqs:
            req.wait()
        return out

    for s in range(n - 1):  # reduce-scatter
        recv_idx = (rank - s - 1) % n
        chunks[recv_idx].add_(exchange((rank - s) % n, recv_idx))
    for s in range(n - 1):  # all-gather
        recv_idx = (rank - s) % n
        chunks[recv_idx].copy_(exchange((rank + 1 - s) % n, recv_idx))
    return tensor
