"""One column-parallel region as one autograd function: the input's communication done once
for several linears, the backward's communication overlapped with the weight gradients, and,
under sequence parallelism, the gathered input recomputed instead of kept (Megatron-LM's
``LinearWithGradAccumulationAndAsyncCommunication``, Korthikanti et al. 2022, section 4.2.2).

In backward a column-parallel region needs two things: the input gradient, ``sum_i g_i W_i``,
which must be all-reduced (TP) or reduce-scattered (SP) over the group, and the weight
gradients ``g_i^T x``. The second does not depend on the first's communication, so the
collective is started asynchronously and the weight gradients are computed while it runs.
Under SP the region's input is the all-gathered ``(B, T, C)``; keeping it costs ``1 - 1/t`` of
it in memory per region, recomputing it costs one more all-gather in backward.

Usage (inside a worker; ``q``, ``k``, ``v`` ColumnParallelLinear modules of one group)::

    q, k, v = column_region(x, [lin_q, lin_k, lin_v], group)              # TP
    h, = column_region(x, [lin_fc], group, sequence_parallel=True, keep_gathered=False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from perfkit._checks import check_items, check_tensor, check_type
from perfkit.parallel.sequence import gather_from_sequence
from perfkit.parallel.tensor import ColumnParallelLinear

__all__ = ["column_region"]


class _ColumnRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, sp: bool, keep: bool, n: int,
                *params: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        full = gather_from_sequence(x, group) if sp else x        # (B, T, C)
        weights, biases = params[:n], params[n:]
        ctx.group, ctx.sp, ctx.keep, ctx.n = group, sp, keep, n
        ctx.has_bias = [b is not None for b in biases]
        ctx.save_for_backward(full if (keep or not sp) else x, *weights)
        return tuple(F.linear(full, w, b) for w, b in zip(weights, biases, strict=True))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        saved, *weights = ctx.saved_tensors
        full = saved if (ctx.keep or not ctx.sp) else gather_from_sequence(saved, ctx.group)
        grad_in = sum(g @ w for g, w in zip(grads, weights, strict=True))   # (B, T, C), partial
        if ctx.sp:
            t = dist.get_world_size(ctx.group)
            parts = [c.contiguous() for c in grad_in.chunk(t, dim=1)]
            grad_x = torch.empty_like(parts[0])
            work = dist.reduce_scatter(grad_x, parts, group=ctx.group, async_op=True)
        else:
            grad_x = grad_in.contiguous()
            work = dist.all_reduce(grad_x, group=ctx.group, async_op=True)
        # while the collective runs: the weight and bias gradients, which do not need it
        flat = full.reshape(-1, full.shape[-1])                            # (N, C)
        grad_w = [g.reshape(-1, g.shape[-1]).T @ flat for g in grads]      # (out / t, C)
        grad_b = [g.reshape(-1, g.shape[-1]).sum(0) if has else None
                  for g, has in zip(grads, ctx.has_bias, strict=True)]
        work.wait()
        return (grad_x, None, None, None, None, *grad_w, *grad_b)


def column_region(x: torch.Tensor, linears: Sequence[ColumnParallelLinear], group: Any = None,
                  sequence_parallel: bool = False,
                  keep_gathered: bool = True) -> tuple[torch.Tensor, ...]:
    """Apply several column-parallel linears to one input, as one region.

    Forward: under ``sequence_parallel`` one all-gather of ``x`` along the sequence, else
    nothing (f's identity); then each linear. Backward: one all-reduce (TP) or
    reduce-scatter (SP) of the summed input gradient, started before and waited for after the
    weight gradients; with ``keep_gathered=False`` one more all-gather to recompute the input.

    Args:
        x: ``(B, T, C)`` (TP) or ``(B, T / t, C)`` (SP) activations.
        linears: ColumnParallelLinear modules (their own input handling is bypassed).
        group: the tensor-parallel group; sequence_parallel, keep_gathered: as above.

    Returns:
        One ``(B, T, out / t)`` output per linear.

    Warning:
        Collective, forward (under SP) and backward: every rank of ``group`` must call it.

    Raises:
        TypeError: for an ``x`` that is not a floating tensor or a linear that is not a
            ColumnParallelLinear.
        ValueError: for no linears, or a bad ``x`` shape.
    """
    check_tensor("x", x, floating=True)
    linears = check_items("linears", linears)
    for i, lin in enumerate(linears):
        check_type(f"linears[{i}]", lin, ColumnParallelLinear)
    if x.dim() != 3:
        raise ValueError(f"x must be (B, T, C), got shape {tuple(x.shape)}")
    params = [lin.weight for lin in linears] + [lin.bias for lin in linears]
    return _ColumnRegion.apply(x, group, bool(sequence_parallel), bool(keep_gathered),
                               len(linears), *params)
