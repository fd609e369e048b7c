"""What ``p.grad`` holds at ZeRO stages 2-3 between backward and the step: a marker that raises.

At stages 2 and 3 backward copies each parameter's gradient into its bucket and the
bucket is reduce-scattered: the rank keeps only its slice, and ``p.grad`` would be
``None``. Then ``torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`` finds no
gradient, returns 0 and clips nothing, and a gradient-norm log reads nothing, both
silently. FSDP2 avoids this by making ``p.grad`` a DTensor holding the rank's shard; here
``p.grad`` is a :class:`ShardedGradient` until :meth:`ZeroOptimizer.step` (or
``zero_grad``) clears it: a tensor of the parameter's shape, dtype and device that owns no
memory, and whose every operation raises an error naming the accessor that works,
:meth:`perfkit.parallel.ZeroOptimizer.clip_grad_norm_`. ``p.grad is None`` stays false,
so code that skips parameters without a gradient does not skip these silently either.

Usage::

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # raises, naming the accessor
    opt.clip_grad_norm_(1.0)                                  # the norm over every rank
    opt.step()                                                # p.grad is None again
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from perfkit._checks import check_choice, check_type

__all__ = ["ShardedGradient"]


class ShardedGradient(torch.Tensor):
    """Stands in ``p.grad`` for a gradient that ZeRO stage ``stage`` holds as slices.

    ``ShardedGradient(param, stage)``: ``param`` a tensor (the marker takes its shape, dtype
    and device), ``stage`` 2 or 3 (ValueError, TypeError otherwise).

    Any torch operation on it raises ``RuntimeError`` (its message names the operation and
    :meth:`ZeroOptimizer.clip_grad_norm_`); ``shape``, ``dtype`` and ``device`` are the
    parameter's, so assigning it as ``p.grad`` passes torch's checks. It holds no bytes
    (``holds_no_bytes``: :func:`perfkit.memory.storage_bytes` counts it as 0).
    """

    holds_no_bytes = True
    stage: int

    @staticmethod
    def __new__(cls, param: torch.Tensor, stage: int) -> ShardedGradient:
        check_type("param", param, torch.Tensor)
        check_choice("stage", stage, (2, 3))
        t = torch.Tensor._make_wrapper_subclass(cls, param.shape, dtype=param.dtype,
                                                device=param.device)
        t.stage = stage
        return t

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        stage = next((a.stage for a in args if isinstance(a, ShardedGradient)), "2-3")
        if func in (torch.ops.aten.add_.Tensor, torch.ops.aten.add.Tensor):  # AccumulateGrad
            raise RuntimeError(
                f"a second backward before step(): ZeRO-{stage} with overlap=True takes one "
                "backward per step() (overlap=False accumulates several); this parameter's "
                ".grad is the ShardedGradient marker the first one left")
        raise RuntimeError(
            f"{func}: this parameter's .grad is a ShardedGradient. ZeRO stage {stage} has "
            "reduce-scattered the gradient into per-rank slices, so no rank holds it whole; "
            "torch.nn.utils.clip_grad_norm_(model.parameters()) would clip nothing. Clip with "
            "ZeroOptimizer.clip_grad_norm_(max_norm) (the norm over every rank), read the "
            "slices with ZeroOptimizer.gradient_tensors() after ZeroOptimizer.sync_grads(), "
            "and call step() or zero_grad() before the next backward.")

    def __repr__(self) -> str:  # type: ignore[override]
        return (f"ShardedGradient(stage={self.stage}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype}): the gradient lives in ZeroOptimizer's slices")


def clear_sharded_gradients(params: Iterable[torch.Tensor]) -> None:
    """Set ``p.grad`` back to ``None`` where it is a :class:`ShardedGradient` marker (the step
    is over, or ``zero_grad`` ran: the marker holds nothing to zero). Internal: called by
    :class:`perfkit.parallel.ZeroOptimizer` and its reducer."""
    for p in params:
        if isinstance(p.grad, ShardedGradient):
            p.grad = None
