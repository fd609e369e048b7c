"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): linears, embedding and loss split
over a process group, built from the weights of an unsplit model.

Two conjugate autograd operators carry all the communication: :func:`copy_to_tp` (Megatron's
*f*: identity forward, all-reduce backward) enters a column-parallel region, whose ranks
then compute disjoint output columns; :func:`reduce_from_tp` (*g*: all-reduce forward,
identity backward) leaves a row-parallel region, whose ranks each hold a partial sum. A
transformer block is ``f, Column, local work, Row, g`` twice: two all-reduces forward, two
backward. The vocabulary's split (embedding and loss) is :mod:`perfkit.parallel.vocab`.
:class:`RNGTracker` keeps a second, per-rank random stream for dropout inside split regions,
so replicated regions draw the same masks as the unsplit model.

Usage (inside a worker; ``lin`` an ``nn.Linear`` built identically on every rank)::

    col = ColumnParallelLinear.from_linear(lin, group)        # (B, T, C) -> (B, T, out / t)
    row = RowParallelLinear.from_linear(lin2, group)          # (B, T, in / t) -> (B, T, out)
    y = row(F.gelu(col(x)))                                   # equals lin2(gelu(lin(x)))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfkit._checks import check_callable, check_int, check_seed, check_tensor, check_type

__all__ = ["ColumnParallelLinear", "RNGTracker", "RowParallelLinear", "copy_to_tp",
           "gather_from_tp", "reduce_from_tp", "split_to_tp", "tp_shard"]


def _rank_size(group: Any) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def tp_shard(n: int, group: Any, what: str) -> tuple[int, int]:
    """``(start, stop)`` of this rank's contiguous ``n / t`` slice of a dimension of size ``n``.

    Raises:
        ValueError: if ``n`` is not divisible by the group's size ``t`` (``what`` names it).
        TypeError: for a ``group`` that is neither ``None`` nor a process group.
    """
    check_int("n", n, 1)
    check_type("group", group, dist.ProcessGroup, optional=True)
    rank, t = _rank_size(group)
    if n % t:
        raise ValueError(f"{what} ({n}) must be divisible by the tensor-parallel degree {t}")
    return rank * (n // t), (rank + 1) * (n // t)


class _CopyToTP(torch.autograd.Function):
    """f: identity forward; backward sums the ranks' partial input gradients."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward (partial sums to the full output); identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g, None


class _GatherLast(torch.autograd.Function):
    """All-gather along the last dimension; backward keeps this rank's slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        rank, t = _rank_size(ctx.group)
        return g.chunk(t, dim=-1)[rank].contiguous(), None


class _SplitLast(torch.autograd.Function):
    """Keep this rank's slice of the last dimension; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        rank, t = _rank_size(group)
        return x.chunk(t, dim=-1)[rank].contiguous()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _GatherLast.apply(g, ctx.group), None


def copy_to_tp(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Megatron's f: ``x`` unchanged forward; its gradient all-reduced over ``group`` backward.

    Warning:
        Collective in backward: every rank of ``group`` must run the backward.
    """
    check_tensor("x", x, floating=True)
    check_type("group", group, dist.ProcessGroup, optional=True)
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Megatron's g: ``x`` all-reduced (summed) over ``group`` forward; gradient unchanged.

    Warning:
        Collective: every rank of ``group`` must call it.
    """
    check_tensor("x", x, floating=True)
    check_type("group", group, dist.ProcessGroup, optional=True)
    return _ReduceFromTP.apply(x, group)


def gather_from_tp(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Concatenate the ranks' last-dimension slices (all-gather); backward splits.

    Warning:
        Collective: every rank of ``group`` must call it.
    """
    check_tensor("x", x, floating=True)
    check_type("group", group, dist.ProcessGroup, optional=True)
    return _GatherLast.apply(x, group)


def split_to_tp(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """This rank's slice of the last dimension; backward all-gathers (collective)."""
    check_tensor("x", x, floating=True)
    check_type("group", group, dist.ProcessGroup, optional=True)
    return _SplitLast.apply(x, group)


def _check_weights(weight: Any, bias: Any, bias_len: int | None, flags: dict,
                   reduce: Any = None) -> None:
    check_tensor("weight", weight, floating=True, ndim=2)
    if bias is not None:
        check_tensor("bias", bias, floating=True, ndim=1, numel=bias_len)
    for name, flag in flags.items():   # a truthy "no" would silently mean yes
        check_type(name, flag, bool)
    check_callable("reduce", reduce, optional=True)


def _copy(dst: torch.Tensor, src: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(src.detach().clone().to(dst.dtype), requires_grad=dst.requires_grad)


def _check_input(x: Any, width: int, what: str) -> None:
    """Refuse an input that is not a floating tensor ``(..., width)``: a wrong width would
    otherwise surface as a matmul error naming no argument, or, after a split, a collective
    of the wrong size."""
    check_tensor("x", x, floating=True)
    if x.dim() == 0 or x.shape[-1] != width:
        raise ValueError(f"x must be (..., {width}) ({what}), got shape {tuple(x.shape)}")


class ColumnParallelLinear(nn.Module):
    """``y = x A^T + b`` with the rows of ``A`` (output features) split over the group.

    Input ``(..., in)`` replicated, output ``(..., out / t)`` (``gather_output=False``) or
    ``(..., out)``. ``input_is_parallel=True`` skips the f operator (sequence parallelism
    has already all-gathered the input, whose backward reduce-scatters it).

    Args:
        weight: ``(out / t, in)`` this rank's rows; bias: ``(out / t,)`` or ``None``.
        group: the tensor-parallel process group (``None``: WORLD).

    Raises:
        TypeError, ValueError: for a weight that is not a 2-D floating tensor, a bias that
            is not a 1-D floating tensor of ``out / t`` values, or flags that are not bools;
            in forward, for an ``x`` that is not a floating tensor of ``in`` features.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, group: Any = None,
                 gather_output: bool = False, input_is_parallel: bool = False) -> None:
        _check_weights(weight, bias, None if bias is None else weight.shape[0],
                       {"gather_output": gather_output, "input_is_parallel": input_is_parallel})
        check_type("group", group, dist.ProcessGroup, optional=True)
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.group, self.gather_output = group, gather_output
        self.input_is_parallel = input_is_parallel

    @classmethod
    def from_linear(cls, linear: nn.Linear, group: Any = None, gather_output: bool = False,
                    input_is_parallel: bool = False) -> ColumnParallelLinear:
        """This rank's rows of ``linear`` (built identically on every rank).

        Raises:
            TypeError: if ``linear`` is not an ``nn.Linear``.
            ValueError: if its ``out_features`` is not divisible by the group's size.
        """
        check_type("linear", linear, nn.Linear)
        lo, hi = tp_shard(linear.out_features, group, "out_features")
        bias = None if linear.bias is None else _copy(linear.bias, linear.bias[lo:hi])
        return cls(_copy(linear.weight, linear.weight[lo:hi]), bias, group, gather_output,
                   input_is_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.weight.shape[1], "in_features")
        if not self.input_is_parallel:
            x = copy_to_tp(x, self.group)
        y = F.linear(x, self.weight, self.bias)   # (..., out / t)
        return gather_from_tp(y, self.group) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """``y = x A^T + b`` with the columns of ``A`` (input features) split over the group.

    Each rank multiplies its ``in / t`` input features into a partial ``(..., out)`` sum; the
    g operator all-reduces them, and the bias is added once, after the reduce (added before,
    it would be counted ``t`` times). ``input_is_parallel=False`` slices a replicated input
    first. ``reduce`` replaces the all-reduce (sequence parallelism passes a reduce-scatter).

    Args:
        weight: ``(out, in / t)`` this rank's columns; bias: ``(out,)`` replicated, or ``None``.
        group: the tensor-parallel process group (``None``: WORLD).

    Raises:
        TypeError, ValueError: for a weight that is not a 2-D floating tensor, a bias that
            is not a 1-D floating tensor of ``out`` values, a non-bool ``input_is_parallel``
            or a ``reduce`` that is not callable; in forward, for an ``x`` that is not a
            floating tensor of ``in / t`` features (``in`` when ``input_is_parallel=False``).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, group: Any = None,
                 input_is_parallel: bool = True, reduce: Any = None) -> None:
        _check_weights(weight, bias, None if bias is None else weight.shape[0],
                       {"input_is_parallel": input_is_parallel}, reduce)
        check_type("group", group, dist.ProcessGroup, optional=True)
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.group, self.input_is_parallel = group, input_is_parallel
        self.reduce = reduce or reduce_from_tp

    @classmethod
    def from_linear(cls, linear: nn.Linear, group: Any = None, input_is_parallel: bool = True,
                    reduce: Any = None) -> RowParallelLinear:
        """This rank's columns of ``linear``; the bias is copied whole.

        Raises:
            TypeError: if ``linear`` is not an ``nn.Linear``.
            ValueError: if its ``in_features`` is not divisible by the group's size.
        """
        check_type("linear", linear, nn.Linear)
        lo, hi = tp_shard(linear.in_features, group, "in_features")
        bias = None if linear.bias is None else _copy(linear.bias, linear.bias)
        return cls(_copy(linear.weight, linear.weight[:, lo:hi]), bias, group,
                   input_is_parallel, reduce)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_is_parallel:
            _check_input(x, self.weight.shape[1], "this rank's in_features / t")
        else:
            _check_input(x, self.weight.shape[1] * dist.get_world_size(self.group),
                         "in_features, replicated")
            x = split_to_tp(x, self.group)
        y = self.reduce(F.linear(x, self.weight), self.group)   # (..., out), summed
        return y if self.bias is None else y + self.bias


class RNGTracker:
    """A second random stream, different on each tensor-parallel rank, for dropout in split
    regions (Megatron's ``model-parallel-rng``).

    Replicated regions keep using the default generator, seeded alike on every rank, so
    they draw the same masks as the unsplit model; :meth:`fork` swaps in this rank's own
    state (seed ``seed + 2718 + rank``, Megatron's offset) and swaps it out again, leaving
    the default stream where it was. CPU stream, or the CUDA one of ``device``.

    Args:
        seed: the run's seed; group: the tensor-parallel group; device: where dropout runs.

    Raises:
        TypeError, ValueError: for a ``seed`` that is not an int in ``[0, 2**63)``.
    """

    def __init__(self, seed: int, group: Any = None, device: torch.device | str = "cpu") -> None:
        check_seed("seed", seed)
        check_type("group", group, dist.ProcessGroup, optional=True)
        self.device = torch.device(device)
        self.rank = dist.get_rank(group)
        gen = torch.Generator(self.device).manual_seed(seed + 2718 + self.rank)
        self._state = gen.get_state()

    def _get(self) -> torch.Tensor:
        if self.device.type == "cuda":
            return torch.cuda.get_rng_state(self.device)
        return torch.get_rng_state()

    def _set(self, state: torch.Tensor) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        else:
            torch.set_rng_state(state)

    @contextlib.contextmanager
    def fork(self) -> Iterator[None]:
        """Run the block on this rank's own stream; the default stream is left untouched."""
        saved = self._get()
        self._set(self._state)
        try:
            yield
        finally:
            self._state = self._get()
            self._set(saved)
