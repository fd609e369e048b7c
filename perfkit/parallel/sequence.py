"""Sequence parallelism (Korthikanti et al. 2022): the regions tensor parallelism replicates
(LayerNorm, dropout, residual adds) split along the sequence instead.

Under plain tensor parallelism every rank holds the whole ``(B, T, C)`` activation between
blocks' split regions. Sequence parallelism keeps ``(B, T / t, C)`` there: the f operator's
identity becomes an all-gather along the sequence (:func:`gather_from_sequence`, whose
backward reduce-scatters) and the g operator's all-reduce a reduce-scatter
(:func:`reduce_scatter_to_sequence`, whose backward all-gathers). An all-reduce is a
reduce-scatter followed by an all-gather, so the bytes on the wire are the same, while the
activations saved by LayerNorm and dropout, and the masks, shrink by ``t``. Parameters used
in the split regions (LayerNorm, the row-parallel biases, positions) then see only ``T / t``
tokens on each rank: :func:`sync_sequence_parallel_grads` all-reduces their gradients.

Usage (inside a worker, ``x`` of shape ``(B, T / t, C)``)::

    full = gather_from_sequence(x, group)              # (B, T, C): enter a split region
    y = reduce_scatter_to_sequence(partial, group)     # (B, T / t, C): leave it
    sync_sequence_parallel_grads(model, group)         # after backward, before the step
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import check_tensor, check_type

__all__ = ["gather_from_sequence", "mark_sequence_parallel",
           "reduce_scatter_to_sequence", "scatter_to_sequence", "sync_sequence_parallel_grads"]

SEQUENCE_PARALLEL_ATTR = "sequence_parallel"   # Megatron's flag on such parameters
SEQ_DIM = 1                                    # activations are (B, T, C)


def _check_x(x: Any, group: Any) -> None:
    check_tensor("x", x, floating=True)
    check_type("group", group, dist.ProcessGroup, optional=True)
    if x.dim() < 2:
        raise ValueError(f"x must be (B, T, ...) with the sequence on dim 1, got shape "
                         f"{tuple(x.shape)}")


def _chunks(x: torch.Tensor, t: int) -> list[torch.Tensor]:
    if x.shape[SEQ_DIM] % t:
        raise ValueError(f"the sequence length ({x.shape[SEQ_DIM]}) must be divisible by the "
                         f"tensor-parallel degree {t}")
    return [c.contiguous() for c in x.chunk(t, dim=SEQ_DIM)]


def _all_gather(x: torch.Tensor, group: Any) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=SEQ_DIM)


def _reduce_scatter(x: torch.Tensor, group: Any) -> torch.Tensor:
    parts = _chunks(x, dist.get_world_size(group))
    out = torch.empty_like(parts[0])
    dist.reduce_scatter(out, parts, op=dist.ReduceOp.SUM, group=group)
    return out


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return _all_gather(x, group)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        # the split region after the gather computed partial gradients on each rank
        return _reduce_scatter(g, ctx.group), None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return _reduce_scatter(x, group)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_gather(g, ctx.group), None


class _Scatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return _chunks(x, dist.get_world_size(group))[dist.get_rank(group)]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_gather(g, ctx.group), None


def gather_from_sequence(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """``(B, T / t, C)`` to ``(B, T, C)`` by an all-gather; backward reduce-scatters.

    Warning:
        Collective, forward and backward: every rank of ``group`` must call it.
    """
    _check_x(x, group)
    return _Gather.apply(x, group)


def reduce_scatter_to_sequence(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Partial ``(B, T, C)`` sums to this rank's summed ``(B, T / t, C)``; backward all-gathers.

    Warning:
        Collective, forward and backward: every rank of ``group`` must call it.

    Raises:
        ValueError: if ``T`` is not divisible by the group's size.
    """
    _check_x(x, group)
    return _ReduceScatter.apply(x, group)


def scatter_to_sequence(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """A replicated ``(B, T, C)`` to this rank's ``(B, T / t, C)`` (no communication);
    backward all-gathers (collective).

    Raises:
        ValueError: if ``T`` is not divisible by the group's size.
    """
    _check_x(x, group)
    return _Scatter.apply(x, group)


def mark_sequence_parallel(module: nn.Module | nn.Parameter) -> Any:
    """Flag a parameter, or every parameter of a module, as used on a sequence slice
    (replicated over the group, its gradient partial); returns ``module``.

    Raises:
        TypeError: if ``module`` is neither an ``nn.Module`` nor an ``nn.Parameter``.
    """
    check_type("module", module, (nn.Module, nn.Parameter))
    for p in [module] if isinstance(module, nn.Parameter) else module.parameters():
        setattr(p, SEQUENCE_PARALLEL_ATTR, True)
    return module


def sync_sequence_parallel_grads(model: nn.Module, group: Any = None) -> int:
    """Sum over ``group`` the gradients of the parameters :func:`mark_sequence_parallel`
    flagged, in one all-reduce of their concatenation; returns the elements reduced.

    Each rank saw ``T / t`` of the tokens, so the sum is the unsplit model's gradient.

    Warning:
        Collective: every rank of ``group`` must call it after backward.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module`` or ``group`` not a process group.
    """
    check_type("model", model, nn.Module)
    check_type("group", group, dist.ProcessGroup, optional=True)
    grads = [p.grad for p in model.parameters()
             if getattr(p, SEQUENCE_PARALLEL_ATTR, False) and p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(part.view_as(g))
    return flat.numel()
