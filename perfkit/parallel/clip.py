"""Gradient clipping by the global norm when each rank holds only part of the gradient.

``torch.nn.utils.clip_grad_norm_`` takes the norm of the gradients it is handed. Under
ZeRO those are not the gradients the optimizer steps: at stage 1 backward has already
reduce-scattered each bucket, so clipping the local gradient changes nothing and its norm
is this rank's own, un-averaged one; at stages 2 and 3 no parameter holds a ``.grad`` after
backward, so torch returns 0 and clips nothing. The norm of a gradient spread over ranks in
disjoint pieces is ``(sum over ranks of sum |g|^p) ** (1/p)``: one all-reduce of one number
(MAX for the inf-norm), as FSDP's ``clip_grad_norm_`` and DeepSpeed's engine do. Tensors
every rank holds whole with the same gradient (ZeRO-3's ``unsharded`` parameters, tensor
parallelism's LayerNorms, positions and row-parallel biases) are added once, after the
all-reduce, not once per rank as Megatron-LM's ``clip_grad_norm_fp32`` also takes care to.
Each tensor's norm is taken in float64, so the sum over ranks loses nothing the order of
the pieces could change; the coefficient is torch's, ``max_norm / (norm + 1e-6)`` capped
at 1, applied by ``torch.nn.utils.clip_grads_with_norm_``.

Usage::

    loss.backward()
    norm = opt.clip_grad_norm_(1.0)            # ZeroOptimizer, any stage; collective
    opt.step()
    split, whole = tensor_parallel_pieces(tp)  # tensor parallelism, after tp.sync_grads()
    norm = clip_grad_norm_(split, 1.0, replicated=whole, process_group=tp.group)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_items, check_type
from perfkit.parallel.tp_gpt import TensorParallelGPT

__all__ = ["clip_grad_norm_", "tensor_parallel_pieces"]


def _tensors(name: str, ts: Any) -> list[torch.Tensor]:
    items = [ts] if isinstance(ts, torch.Tensor) else check_items(name, ts, nonempty=False)
    for i, t in enumerate(items):
        check_type(f"{name}[{i}]", t, torch.Tensor)
    return items


def _local_sum(grads: list[torch.Tensor], p: float, device: torch.device) -> torch.Tensor:
    """``sum |g|^p`` over every element of ``grads`` (``max |g|`` for the inf-norm), float64."""
    acc = torch.zeros((), dtype=torch.float64, device=device)
    for g in grads:
        n = torch.linalg.vector_norm(g, p, dtype=torch.float64).to(device)
        acc = torch.maximum(acc, n) if math.isinf(p) else acc + n**p
    return acc


@torch.no_grad()
def clip_grad_norm_(parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False, *,
                    replicated: Iterable[torch.Tensor] = (),
                    process_group: Any = None) -> torch.Tensor:
    """Scale the gradients of ``parameters`` and ``replicated`` in place so that the norm of
    the whole gradient, over every rank of ``process_group``, is at most ``max_norm``.

    What ``torch.nn.utils.clip_grad_norm_`` does to the unsharded model's gradient: the same
    total norm, the same coefficient, applied to the pieces each rank holds.

    Args:
        parameters: tensors whose ``.grad`` is this rank's piece of the gradient, each
            element of the whole gradient on exactly one rank (ZeRO's slices, tensor
            parallelism's split weights); those without a ``.grad`` are skipped.
        max_norm: the largest norm allowed (a number >= 0; ``math.inf`` only measures).
        norm_type: ``p`` of the p-norm: a number > 0, or ``math.inf``.
        error_if_nonfinite: raise if the total norm is NaN or infinite (on every rank: the
            ranks agree on the total).
        replicated: tensors every rank holds whole, with the same gradient: counted once.
        process_group: the ranks that split the gradient (``None``: WORLD, or this process
            alone when ``torch.distributed`` is not initialised).

    Returns:
        The total norm, a 0-dim tensor in the first gradient's dtype (float32 without any),
        the same on every rank.

    Raises:
        TypeError: for ``parameters`` or ``replicated`` that are not tensors, a ``max_norm``
            or ``norm_type`` that is not a number, a ``process_group`` that is not one, or a
            non-bool ``error_if_nonfinite``.
        ValueError: for a ``max_norm`` or ``norm_type`` out of range (NaN included).
        RuntimeError: with ``error_if_nonfinite``, if the total norm is not finite.

    Warning:
        Collective: every rank of the group must call it, one holding no piece included;
        on a subset of ranks it hangs.
    """
    params = _tensors("parameters", parameters)
    whole = _tensors("replicated", replicated)
    for name, v in (("max_norm", max_norm), ("norm_type", norm_type)):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TypeError(f"{name} must be a number, got {type(v).__name__}")
    if not max_norm >= 0:  # NaN fails too; inf measures without clipping, as in torch
        raise ValueError(f"max_norm must be a number >= 0 (math.inf: measure only), got "
                         f"{max_norm!r}")
    if not norm_type > 0:  # inf allowed: the largest |g|
        raise ValueError(f"norm_type must be a number > 0 or math.inf, got {norm_type!r}")
    check_type("error_if_nonfinite", error_if_nonfinite, bool)
    if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                        f"{type(process_group).__name__}")
    p = float(norm_type)
    distributed = dist.is_available() and dist.is_initialized()
    everything = params + whole
    if everything:
        device = everything[0].device
    elif distributed and dist.get_backend(process_group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())  # NCCL reduces on GPU
    else:
        device = torch.device("cpu")
    grads = [t.grad for t in params if t.grad is not None]
    total = _local_sum(grads, p, device)  # () float64: this rank's pieces
    if distributed and dist.get_world_size(process_group) > 1:
        op = dist.ReduceOp.MAX if math.isinf(p) else dist.ReduceOp.SUM
        dist.all_reduce(total, op=op, group=process_group)
    replicated_grads = [t.grad for t in whole if t.grad is not None]
    once = _local_sum(replicated_grads, p, device)  # the same on every rank: added once
    total = torch.maximum(total, once) if math.isinf(p) else (total + once) ** (1.0 / p)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is {float(total)}"
                           ", so they cannot be clipped; error_if_nonfinite=False would scale "
                           "them by it anyway")
    torch.nn.utils.clip_grads_with_norm_([t for t in everything if t.grad is not None],
                                         max_norm, total)
    first = (grads + replicated_grads)[:1]
    return total.to(first[0].dtype if first else torch.float32)


def tensor_parallel_pieces(model: TensorParallelGPT) -> tuple[list[torch.Tensor],
                                                                list[torch.Tensor]]:
    """``(split, replicated)``: the parameters of ``model`` each rank holds a slice of, and
    those every rank of its group holds whole (LayerNorms, positions, row-parallel biases,
    whose gradients are equal on every rank once :meth:`TensorParallelGPT.sync_grads` ran),
    for :func:`clip_grad_norm_` over ``model.group``.

    Raises:
        TypeError: if ``model`` is not a :class:`perfkit.parallel.TensorParallelGPT`.
    """
    check_type("model", model, TensorParallelGPT)
    split, whole = [], []
    for name, p in model.named_parameters():
        (whole if model.shard(name) is None else split).append(p)
    return split, whole
