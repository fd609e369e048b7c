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

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from perfkit import roofline
from perfkit._checks import check_callable, check_real, check_type
from perfkit.hw import MachineLimits
from perfkit.stats import Estimate

__all__ = ["NEAR_ROOF", "OpCount", "StepRoofline", "count_ops", "step_roofline"]

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


class _ByteCounter(TorchDispatchMode):
    """Adds up, per operator, the bytes of its distinct tensor inputs and outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        out = func(*args, **(kwargs or {}))
        if not func.is_view:  # a view shares its input's storage: no bytes move
            # reads and writes apart: an in-place op reads its tensor and writes it back
            self.bytes += _distinct_bytes((args, kwargs)) + _distinct_bytes(out)
            self.ops += 1
        return out


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn`` once and count its FLOPs, the bytes its operators move, and the operators.

    Run it after a warm-up: a first call's one-time work (allocations, lazy init) is counted
    like any other.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    check_callable("fn", fn)
    with FlopCounterMode(display=False) as flops, _ByteCounter() as moved:
        fn()
    return OpCount(int(flops.get_total_flops()), moved.bytes, moved.ops)


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
