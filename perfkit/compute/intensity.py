"""Where a whole training step sits on the roofline: its counted FLOPs and bytes, and what
bounds it, computed from the machine's measured ceilings and the step's measured time.

A phase breakdown says forward + backward dominate a step; it does not say the step is
*compute-bound*. The roofline (Williams, Waterman and Patterson, 2009) does: a step of
arithmetic intensity ``I`` (FLOPs per byte moved) can run at most at
``min(peak, I x bandwidth)``; below the ridge point ``peak / bandwidth`` the memory roof is
the lower one. And a step is bound by a roof only when it runs near it: one that reaches a
small share of the roof above it is held back by neither, but by per-operator costs
(dispatch, Python, launches).

The bytes are counted as eager PyTorch moves them: every operator reads its inputs and
writes its outputs once (views move nothing). That is the traffic without cache reuse
between operators, so the intensity is a lower bound and the memory roof the lowest the
step can see; FLOPs are counted by ``torch.utils.flop_counter`` (matmuls, convolutions,
attention).

Usage::

    count = count_ops(lambda: models.train_steps(workload, 1))     # one step, counted
    where = step_roofline(count, stats.median_interval(step_times_s), hw.cached_limits())
    print(where.bound, where.mfu, where.of_roof)   # "memory", 4% (interval), 35% of its roof
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import flop_registry

from perfkit import roofline
from perfkit._checks import check_callable, check_int, check_items, check_real, check_type
from perfkit.ceilings import cached_copy_bytes
from perfkit.compute.flops import cpu_attention_formulas
from perfkit.hw import MachineLimits, credited_dram
from perfkit.stats import Estimate

__all__ = ["NEAR_ROOF", "OpCount", "OpRecord", "StepRoofline", "cache_fit_bytes", "cache_on_threads",
           "count_ops", "count_phases", "dram_on_threads", "roofline_s", "step_roofline"]

NEAR_ROOF = 0.5  # a step runs "at" a roof when it reaches at least half of it


@dataclass(frozen=True)
class OpCount:
    """FLOPs and bytes one call of a function does, and how many operators it ran.

    Attributes:
        flops: FLOPs counted by ``torch.utils.flop_counter`` (matmuls, convolutions, attention).
        bytes: bytes its operators read and write, each operator's inputs and outputs once.
        ops: operators that ran (views excluded: they move no data).
    """

    flops: int
    bytes: int
    ops: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (0 when nothing moved)."""
        return self.flops / self.bytes if self.bytes else 0.0


def _touched(t: torch.Tensor) -> int:
    """Bytes a tensor spans: a broadcast (stride-0) dimension is read once, not per index."""
    return t.element_size() * math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0)


def _distinct_bytes(tree: object) -> int:
    """Bytes of the distinct tensors in ``tree`` (one passed twice is read once)."""
    seen = {(t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride())): t
            for t in tree_leaves(tree) if isinstance(t, torch.Tensor)}
    return sum(_touched(t) for t in seen.values())


@dataclass(frozen=True)
class OpRecord:
    """One operator call: its name (``"mm.default"``), FLOPs and bytes read plus written."""

    name: str
    flops: int
    bytes: int


# torch's counter has the GPU attention kernels' formulas, not the CPU one's (torch 2.13): the
# CPU's are counted as counted_flops counts them (a causal mask's unmasked entries only)
_CPU_ATTENTION = cpu_attention_formulas()


def _shape(x: object) -> object:
    return x.shape if isinstance(x, torch.Tensor) else x


def _flops(func, args: tuple, kwargs: dict, out: object) -> int:  # noqa: ANN001 - an OpOverload
    if func._overloadpacket in _CPU_ATTENTION:  # the formulas take shapes, as FlopCounterMode passes them
        return int(_CPU_ATTENTION[func._overloadpacket](*tree_map(_shape, args), **tree_map(_shape, kwargs)))
    formula = flop_registry.get(func._overloadpacket)
    return 0 if formula is None else int(formula(*args, **kwargs, out_val=out))


def _aliases(func, args: tuple, out: object) -> bool:  # noqa: ANN001 - an OpOverload
    """A view in all but name (``_unsafe_view``): no argument written, every output an input's storage."""
    ins = {t.untyped_storage().data_ptr() for t in tree_leaves(args) if isinstance(t, torch.Tensor)}
    outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    return (not func._schema.is_mutable and bool(outs)
            and all(t.untyped_storage().data_ptr() in ins for t in outs))


class _OpCounter(TorchDispatchMode):
    """Records every operator that moves data, with its FLOPs and bytes, under the current phase.

    A dispatch mode sits below autograd, so it sees the backward's operators as well.
    """

    def __init__(self) -> None:
        super().__init__()
        self.phase = "other"
        self.records: dict[str, list[OpRecord]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not (func.is_view or _aliases(func, args, out)):  # a view moves no bytes
            # reads and writes apart: an in-place op reads its tensor and writes it back
            moved = _distinct_bytes((args, kwargs)) + _distinct_bytes(out)
            name = func.__name__  # "mm.default"
            self.records.setdefault(self.phase, []).append(
                OpRecord(name, _flops(func, args, kwargs, out), moved))
        return out


class _PhaseSwitch:
    """A stand-in for :class:`perfkit.profiling.StepMonitor`: ``phase(name)`` labels the ops run inside it."""

    def __init__(self, counter: _OpCounter) -> None:
        self._counter = counter

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        outer, self._counter.phase = self._counter.phase, name
        try:
            yield
        finally:
            self._counter.phase = outer

    def step(self, samples: int = 0, tokens: int = 0) -> None:
        """Nothing to do at a step's end (the monitor protocol of :func:`perfkit.models.train_steps`)."""


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn`` once and count its FLOPs, the bytes its operators move, and the operators.

    FLOPs follow ``torch.utils.flop_counter``'s formulas (matmuls, convolutions, attention,
    the CPU's fused attention included). Run it after a warm-up: a first call's one-time work
    (allocations, lazy init) is counted like any other.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    check_callable("fn", fn)
    with _OpCounter() as counter:
        fn()
    ops = [r for rs in counter.records.values() for r in rs]
    return OpCount(sum(r.flops for r in ops), sum(r.bytes for r in ops), len(ops))


def count_phases(run: Callable[[object], object]) -> dict[str, list[OpRecord]]:
    """Run ``run(monitor)`` once and record each operator under the phase it ran in.

    ``monitor`` has ``phase(name)`` and ``step()``, like a StepMonitor, so a training loop
    that takes one labels its own ops: ``count_phases(lambda m: train_steps(wl, 1, monitor=m))``.
    Operators outside every phase are recorded under ``"other"``; a nested phase takes them
    from its parent.

    Returns:
        Phase name -> its :class:`OpRecord` list, in the order the ops ran.

    Raises:
        TypeError: if ``run`` is not callable.
    """
    check_callable("run", run)
    with _OpCounter() as counter:
        run(_PhaseSwitch(counter))
    return counter.records


def cache_fit_bytes(limits: MachineLimits) -> int:
    """The most counted bytes an op may move and still run at the cache's bandwidth in
    :func:`roofline_s`: twice the largest copy buffer notebook 00's sweep saw served by the cache
    (:func:`perfkit.ceilings.cached_copy_bytes`; a copy of ``N`` bytes moves ``2N``); without such a
    copy, half the last-level cache the operating system reports (a virtual machine's can be its
    host's); ``-1`` for limits without a cache figure (no op fits).

    Raises:
        TypeError: for ``limits`` that are not :class:`perfkit.hw.MachineLimits`.
    """
    check_type("limits", limits, MachineLimits)
    if not limits.cache_bytes_per_s:
        return -1
    seen = cached_copy_bytes(limits)  # the cache notebook 00's copies really saw
    return 2 * seen if seen else (limits.llc_bytes or 0) // 2


def dram_on_threads(limits: MachineLimits, threads: int | None) -> float | None:
    """The DRAM roof of ``threads`` intra-op threads, in counted bytes per second: the fastest
    copy or ``x + y`` of the DRAM ceiling's buffers (:attr:`MachineLimits.dram_nbytes`) that the
    limits keep on that thread count (each point's fastest tenth; an add credited at most 9/8 of
    the copy, :func:`perfkit.hw.credited_dram`), never above the all-core DRAM ceiling. ``None``
    for ``threads`` ``None`` (all cores, or a GPU) or where none was measured on those threads.

    Raises:
        TypeError, ValueError: for limits that are not :class:`MachineLimits` or a ``threads`` below 1.
    """
    return None if _thread_roof_args(limits, threads) is None else _dram_on(limits, threads)


def _thread_roof_args(limits: MachineLimits, threads: int | None) -> int | None:
    """The argument checks :func:`dram_on_threads` and :func:`cache_on_threads` share: ``threads``
    (``None`` for all cores), once ``limits`` is :class:`MachineLimits` and ``threads`` at least 1."""
    check_type("limits", limits, MachineLimits)
    return None if threads is None else check_int("threads", threads, 1)


def _dram_on(limits: MachineLimits, threads: int) -> float | None:
    """:func:`dram_on_threads` on checked arguments."""
    pts = [p for p in limits.copy_points if p.threads == threads and p.nbytes == limits.dram_nbytes]
    if not pts:
        return None
    best = max(pts, key=lambda p: p.best_bytes_per_s)
    rate, _ = credited_dram(best.best_bytes_per_s, best.source or best.where, pts, limits.dram_nbytes)
    return min(rate, limits.copy_bytes_per_s)


def cache_on_threads(limits: MachineLimits, threads: int | None) -> float | None:
    """The cache roof of ``threads`` intra-op threads, in counted bytes per second: the fastest copy
    (fastest tenth) on that thread count of a buffer the sweep saw served by the cache (at most
    :func:`perfkit.ceilings.cached_copy_bytes`), never above the all-core cache ceiling. ``None``
    for ``threads`` ``None``, limits without a cache figure, or no such copy on those threads.

    Raises:
        TypeError, ValueError: for limits that are not :class:`MachineLimits` or a ``threads`` below 1.
    """
    return None if _thread_roof_args(limits, threads) is None else _cache_on(limits, threads)


def _cache_on(limits: MachineLimits, threads: int) -> float | None:
    """:func:`cache_on_threads` on checked arguments."""
    seen = cached_copy_bytes(limits)
    rates = [p.best_bytes_per_s for p in limits.copy_points
             if p.op == "copy" and p.threads == threads and seen and p.nbytes <= seen]
    return min(max(rates), limits.cache_bytes_per_s) if rates and limits.cache_bytes_per_s else None


def roofline_s(ops: list[OpRecord], limits: MachineLimits, dtype: str = "float32",
               cache: bool = True, threads: int | None = None, thread_bandwidths: bool = False) -> float:
    """Seconds ``ops`` take if each runs at its roof: the sum of ``max(FLOPs / peak, bytes / bandwidth)``.

    Each op on its own roof, not the sum's: a memory-bound op next to a compute-bound one does
    not hide under it (eager ops run one after the other).

    Args:
        ops: :class:`OpRecord` s (e.g. one phase of :func:`count_phases`).
        limits: the machine's measured ceilings; dtype: whose matmul peak applies.
        cache: an op whose counted bytes are at most :func:`cache_fit_bytes` (twice the largest
            copy buffer the sweep saw served by the cache) moves them at the cache's measured
            bandwidth (``limits.cache_bytes_per_s``), the fastest it can; the others, and every op
            with ``False`` or limits without a cache figure, at DRAM's (``copy_bytes_per_s``).
        threads: the intra-op threads the ops ran on: the matmul ceiling measured on them
            (:meth:`perfkit.hw.MachineLimits.peak_flops`); ``None``, all cores'.
        thread_bandwidths: ``True``: the DRAM and cache bandwidths measured on ``threads`` too
            (:func:`dram_on_threads`, :func:`cache_on_threads`), each where the limits hold it,
            else all cores'; ``False`` (the default): the bandwidths measured on all cores, beside
            the compute roof of ``threads``.

    Raises:
        TypeError: for ``ops`` that are not a list of OpRecords, ``limits`` of another type,
            or a ``cache`` or ``thread_bandwidths`` that is not a bool.
        ValueError: for a ``dtype`` the limits did not measure, or ``threads`` below 1.
    """
    for i, r in enumerate(check_items("ops", ops, nonempty=False)):
        check_type(f"ops[{i}]", r, OpRecord)
    check_type("limits", limits, MachineLimits)
    check_type("cache", cache, bool)
    check_type("thread_bandwidths", thread_bandwidths, bool)
    peak, dram = limits.peak_flops(dtype, threads), limits.copy_bytes_per_s
    in_cache = limits.cache_bytes_per_s
    if thread_bandwidths:  # each where measured on the threads, else all cores'
        dram = (_dram_on(limits, threads) if threads is not None else None) or dram  # threads: checked above
        in_cache = (_cache_on(limits, threads) if threads is not None else None) or in_cache
    fits = cache_fit_bytes(limits) if cache else -1

    def bw(nbytes: int) -> float:
        return in_cache if nbytes <= fits else dram
    return math.fsum(max(r.flops / peak, r.bytes / bw(r.bytes)) for r in ops)


@dataclass(frozen=True)
class StepRoofline:
    """A step placed on this machine's roofline.

    Attributes:
        intensity: the step's FLOPs per byte (:attr:`OpCount.intensity`).
        ridge: the machine's ridge point, peak FLOP/s over DRAM bandwidth (FLOP/byte).
        roof: ``"memory"`` below the ridge, ``"compute"`` at or above it: the lower roof.
        attainable: the roofline's FLOP/s at this intensity, ``min(peak, I x bandwidth)``.
        mfu: achieved FLOP/s over the peak (an Estimate from the step times).
        of_roof: achieved FLOP/s over ``attainable`` (an Estimate).
        bound: ``"compute"`` or ``"memory"`` when the step reaches :data:`NEAR_ROOF` of
            its roof (the whole interval), ``"neither"`` when it stays below it (the whole
            interval), ``"undecided"`` when the interval straddles :data:`NEAR_ROOF`.
    """

    intensity: float
    ridge: float
    roof: str
    attainable: float
    mfu: Estimate
    of_roof: Estimate
    bound: str


def step_roofline(count: OpCount, step_s: Estimate, limits: MachineLimits,
                  dtype: str = "float32") -> StepRoofline:
    """Place a step of ``count`` FLOPs and bytes, timed at ``step_s``, on the roofline.

    Args:
        count: the step's :class:`OpCount` (FLOPs > 0, bytes > 0).
        step_s: the step time in seconds, with its interval (e.g.
            :func:`perfkit.stats.median_interval` of step times); low > 0.
        limits: this machine's measured ceilings (:func:`perfkit.hw.cached_limits`).
        dtype: whose matmul ceiling applies.

    Returns:
        A :class:`StepRoofline`.

    Raises:
        TypeError: for arguments of another type.
        ValueError: for a count with no FLOPs or bytes, or a step time not above 0.
    """
    check_type("count", count, OpCount)
    check_type("step_s", step_s, Estimate)
    check_type("limits", limits, MachineLimits)
    if count.flops <= 0 or count.bytes <= 0:
        raise ValueError(f"count must have FLOPs and bytes > 0, got {count.flops} FLOPs and "
                         f"{count.bytes} bytes")
    check_real("step_s.low", step_s.low, 0, lo_open=True)
    peak, bw = limits.peak_flops(dtype), limits.copy_bytes_per_s
    attainable = roofline.attainable_flops(count.intensity, peak, bw)
    rate = step_s.inverse().scaled(count.flops)  # FLOP/s, interval flipped from the time's
    mfu, of_roof = rate.scaled(1 / peak), rate.scaled(1 / attainable)
    roof = roofline.bound(count.intensity, peak, bw)
    bound = (roof if of_roof.low >= NEAR_ROOF else "neither" if of_roof.high < NEAR_ROOF else "undecided")
    return StepRoofline(count.intensity, peak / bw, roof, attainable, mfu, of_roof, bound)
