"""The vocabulary split over a tensor-parallel group (Megatron-LM): the embedding's rows and
the output logits' columns, so that the ``(B, T, V)`` logits are never gathered.

:class:`VocabParallelEmbedding` looks up the ids a rank owns, writes zeros for the others,
and the g operator (:func:`perfkit.parallel.tensor.reduce_from_tp`) sums the ranks' rows.
:func:`vocab_parallel_cross_entropy` is ``F.cross_entropy`` over logits split by columns:
the row maximum, the sum of exponentials and the target's logit are all-reduced, ``B * T``
numbers each, in place of an all-gather of ``B * T * V``. Both refuse ids outside the
vocabulary as their torch counterparts do: an id no rank owns would otherwise look up a zero
row, or count a loss of ``log(sum exp)``, silently. The loss keeps ``F.cross_entropy``'s
``ignore_index`` (-100, the usual padding label) and ``reduction``.

Usage (inside a worker; ``emb`` an ``nn.Embedding`` built identically on every rank)::

    wte = VocabParallelEmbedding.from_embedding(emb, group)      # (B, T) ids -> (B, T, C)
    logits = lm_head(h)                                          # (B, T, V / t), this rank's
    loss = vocab_parallel_cross_entropy(logits, targets, rank * V // t, group, vocab_size=V)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import check_callable, check_choice, check_int, check_tensor, check_type
from perfkit.parallel.tensor import reduce_from_tp, tp_shard

__all__ = ["REDUCTIONS", "VocabParallelEmbedding", "vocab_parallel_cross_entropy"]

REDUCTIONS = ("mean", "sum", "none")   # F.cross_entropy's


def _vocab_size(vocab_size: int | None, start: int, rows: int, group: Any,
                device: torch.device) -> int:
    """The whole vocabulary ``V``: ``vocab_size`` when given (checked against this rank's
    ids), else the largest ``start + rows`` over the group (one all-reduce of one int)."""
    if vocab_size is not None:
        check_int("vocab_size", vocab_size, 1)
        if start + rows > vocab_size:
            raise ValueError(f"vocab_size ({vocab_size}) must cover this rank's ids "
                             f"[{start}, {start + rows}) (vocab_start + its {rows} rows)")
        return vocab_size
    end = torch.tensor([start + rows], dtype=torch.int64, device=device)
    dist.all_reduce(end, op=dist.ReduceOp.MAX, group=group)
    return int(end.item())


def _id_range(ids: torch.Tensor) -> tuple[int, int]:
    """``(min, max)`` of ``ids`` (one host read: two numbers)."""
    lo, hi = torch.aminmax(ids)
    return int(lo), int(hi)


class VocabParallelEmbedding(nn.Module):
    """An embedding whose rows (the vocabulary) are split: each rank looks up the ids it
    owns, writes zeros for the others, and the g operator sums the ranks' rows.

    Args:
        weight: ``(V / t, C)`` this rank's rows, the ids ``[vocab_start, vocab_start + V / t)``.
        vocab_start: the first id this rank holds.
        group: the tensor-parallel group (``None``: WORLD).
        reduce: replaces the all-reduce (sequence parallelism passes a reduce-scatter).
        vocab_size: ``V``, the whole vocabulary; ``None`` asks the group (collective: an
            all-reduce of the largest id held).

    Raises:
        TypeError, ValueError: for a weight that is not a 2-D floating tensor, a
            ``vocab_start`` that is not an int >= 0, a ``reduce`` that is not callable, or a
            ``vocab_size`` that does not cover this rank's rows. In forward: ``TypeError``
            for ids that are not int64/int32, ``IndexError`` (as ``nn.Embedding``) for an id
            outside ``[0, V)``.
    """

    def __init__(self, weight: torch.Tensor, vocab_start: int, group: Any = None,
                 reduce: Any = None, vocab_size: int | None = None) -> None:
        check_tensor("weight", weight, floating=True, ndim=2)
        check_int("vocab_start", vocab_start, 0)
        check_callable("reduce", reduce, optional=True)
        check_type("group", group, dist.ProcessGroup, optional=True)
        super().__init__()
        self.weight = nn.Parameter(weight)   # (V / t, C)
        self.vocab_start, self.group = vocab_start, group
        self.vocab_size = _vocab_size(vocab_size, vocab_start, weight.shape[0], group,
                                      weight.device)
        self.reduce = reduce or reduce_from_tp

    @classmethod
    def from_embedding(cls, emb: nn.Embedding, group: Any = None,
                       reduce: Any = None) -> VocabParallelEmbedding:
        """This rank's rows of ``emb``.

        Raises:
            TypeError: if ``emb`` is not an ``nn.Embedding``.
            ValueError: if its vocabulary is not divisible by the group's size.
        """
        check_type("emb", emb, nn.Embedding)
        lo, hi = tp_shard(emb.num_embeddings, group, "vocab_size")
        rows = nn.Parameter(emb.weight[lo:hi].detach().clone(), requires_grad=emb.weight.requires_grad)
        return cls(rows, lo, group, reduce, emb.num_embeddings)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        check_type("idx", idx, torch.Tensor)
        if idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"idx must hold integer ids (torch.int64 or torch.int32), got "
                            f"{idx.dtype}")
        if idx.numel():   # the same ids on every rank: every rank raises, none waits
            lo, hi = _id_range(idx)
            if lo < 0 or hi >= self.vocab_size:
                raise IndexError(f"idx must hold ids in [0, {self.vocab_size}) (the "
                                 f"vocabulary), got ids from {lo} to {hi}")
        local = idx - self.vocab_start
        outside = (local < 0) | (local >= self.weight.shape[0])
        y = nn.functional.embedding(local.masked_fill(outside, 0), self.weight)   # (B, T, C)
        return self.reduce(y.masked_fill(outside.unsqueeze(-1), 0.0), self.group)


class _VocabParallelCE(torch.autograd.Function):
    """Per-token cross-entropy of vocabulary-split logits ``(N, V / t)``; ignored tokens 0."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, start: int,
                ignore_index: int, group: Any) -> torch.Tensor:
        # float64 stays float64; half types are computed in float32 (Megatron's reason:
        # exp() and the sum of V values lose too much in 8 or 11 bits of mantissa)
        acc = torch.promote_types(logits.dtype, torch.float32)
        x = logits.to(acc)                               # (N, V / t)
        m = x.max(dim=-1).values                         # (N,) local maxima
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        z = x - m.unsqueeze(-1)                          # shifted: exp() cannot overflow
        e = z.exp()
        sum_exp = e.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        ignored = target == ignore_index
        local = target - start
        outside = (local < 0) | (local >= x.shape[-1]) | ignored
        local = local.masked_fill(outside, 0)
        picked = z.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=group)             # the owner's target logit
        ctx.save_for_backward(e.div_(sum_exp.unsqueeze(-1)), local, outside, ignored)
        ctx.dtype = logits.dtype
        return (sum_exp.log() - picked).masked_fill(ignored, 0.0)   # (N,) per-token loss

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        softmax, local, outside, ignored = ctx.saved_tensors
        grad = softmax.clone()                           # d loss / d logit = p - onehot
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, local] -= (~outside).to(grad.dtype)
        g = g.masked_fill(ignored, 0.0)                  # an ignored token has no gradient
        return (grad * g.unsqueeze(-1)).to(ctx.dtype), None, None, None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                                 vocab_start: int, group: Any = None, ignore_index: int = -100,
                                 reduction: str = "mean",
                                 vocab_size: int | None = None) -> torch.Tensor:
    """``F.cross_entropy`` of vocabulary-split logits, the full logits never gathered.

    Three all-reduces of ``N = B * T`` numbers each (max, sum of exponentials, target
    logit) in place of an all-gather of ``N * V`` logits. Computed in the logits' dtype
    (float32 for half types, whose loss comes back in float32).

    Args:
        logits: ``(B, T, V / t)`` this rank's columns, the vocabulary ids
            ``[vocab_start, vocab_start + V / t)``; ranks may hold different widths.
        targets: ``(B, T)`` int64 ids in ``[0, V)``, or ``ignore_index``; the same on
            every rank.
        vocab_start: the first id this rank holds.
        group: the tensor-parallel group.
        ignore_index: a target that counts for nothing (no loss, no gradient), as in
            ``F.cross_entropy``.
        reduction: ``"mean"`` over the targets not ignored (NaN if every one is, as
            torch), ``"sum"``, or ``"none"`` (a ``(B, T)`` loss, 0 where ignored).
        vocab_size: ``V``; ``None`` asks the group (one more all-reduce, of one int).

    Warning:
        Collective: every rank of ``group`` must call it.

    Raises:
        TypeError: for ``logits`` not floating point or ``targets`` not int64.
        ValueError: if ``logits`` and ``targets`` disagree on ``(B, T)``, ``logits`` has no
            column, for a negative ``vocab_start``, an unknown ``reduction``, a
            ``vocab_size`` that does not cover this rank's columns, or a target outside
            ``[0, V)`` that is not ``ignore_index`` (checked on every rank alike, before
            any loss collective).
    """
    check_tensor("logits", logits, floating=True)
    check_tensor("targets", targets, dtype=torch.int64)
    check_int("vocab_start", vocab_start, 0)
    check_int("ignore_index", ignore_index, -(2**63))
    check_choice("reduction", reduction, REDUCTIONS)
    check_type("group", group, dist.ProcessGroup, optional=True)
    if logits.dim() == 0 or logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} "
                         "must agree on (B, T)")
    v = logits.shape[-1]
    if v == 0:
        raise ValueError("logits must hold at least one vocabulary column on every rank")
    vocab = _vocab_size(vocab_size, vocab_start, v, group, logits.device)
    counted = targets != ignore_index
    if targets.numel():
        lo, hi = _id_range(targets.masked_fill(~counted, 0))
        if lo < 0 or hi >= vocab:
            raise ValueError(f"targets must be ids in [0, {vocab}) or ignore_index "
                             f"({ignore_index}), got ids from {lo} to {hi}")
    loss = _VocabParallelCE.apply(logits.reshape(-1, v), targets.reshape(-1), vocab_start,
                                  ignore_index, group)
    if reduction == "none":
        return loss.view(targets.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / counted.sum()
