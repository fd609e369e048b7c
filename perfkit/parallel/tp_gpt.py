"""A :class:`~perfkit.parallel.gpt.GPT` split by tensor parallelism (Megatron-LM's layout),
optionally with sequence parallelism, and the exact count of what it communicates.

Per block: ``q``, ``k``, ``v`` and ``fc`` column-parallel (heads and MLP columns split), the
two output projections row-parallel, so each block runs two f/g pairs: two all-reduces of
``B * T * C`` elements forward and two backward (with sequence parallelism: an all-gather and
a reduce-scatter of the same size for each). The embedding and the vocabulary-parallel loss
split the vocabulary. Parameter names are the unsplit model's, so :meth:`TensorParallelGPT.shard`
says which slice of each unsplit parameter a rank holds.

Usage (inside a worker; the same seed on every rank, so every rank builds the same GPT)::

    torch.manual_seed(0); tp = parallelize_gpt(GPT(cfg), group, sequence_parallel=True)
    loss = tp.loss(idx, targets); loss.backward(); tp.sync_grads(); opt.step()
    assert tp_traffic(cfg, *idx.shape, t=2, sequence_parallel=True).calls  # per step
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfkit._checks import check_int, check_type
from perfkit.comm.traffic import Traffic
from perfkit.parallel.gpt import GPT, Attention, Block, Embed, GPTConfig, Head
from perfkit.parallel.sequence import (
    gather_from_sequence,
    mark_sequence_parallel,
    reduce_scatter_to_sequence,
    sync_sequence_parallel_grads,
)
from perfkit.parallel.tensor import ColumnParallelLinear, RNGTracker, RowParallelLinear, copy_to_tp
from perfkit.parallel.tp_overlap import column_region
from perfkit.parallel.vocab import VocabParallelEmbedding, vocab_parallel_cross_entropy

__all__ = ["TensorParallelGPT", "check_tp_degree", "parallelize_gpt", "tp_traffic"]


def check_tp_degree(cfg: GPTConfig, t: int) -> None:
    """Refuse a degree ``t`` that does not split the heads or the vocabulary (``t``
    dividing ``n_head`` divides ``n_embd`` and the MLP's ``4 * n_embd`` too).

    Raises:
        TypeError: if ``cfg`` is not a GPTConfig.
        ValueError: naming the size that ``t`` does not divide.
    """
    check_type("cfg", cfg, GPTConfig)
    check_int("t", t, 1)
    for what, n in (("n_head", cfg.n_head), ("vocab_size", cfg.vocab_size)):
        if n % t:
            raise ValueError(f"{what} ({n}) must be divisible by the tensor-parallel degree {t}")


class _Dropout(nn.Module):
    """Dropout on the default stream (replicated region) or on the tracker's (split region)."""

    def __init__(self, p: float, rng: RNGTracker | None) -> None:
        super().__init__()
        self.p, self.rng = p, rng

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.rng is None:
            return F.dropout(x, self.p)
        with self.rng.fork():
            return F.dropout(x, self.p)


class _Embed(nn.Module):
    def __init__(self, e: Embed, group: Any, sp: bool, rng: RNGTracker | None) -> None:
        super().__init__()
        self.group, self.sp = group, sp
        self.wte = VocabParallelEmbedding.from_embedding(
            e.wte, group, reduce=reduce_scatter_to_sequence if sp else None)
        self.wpe = mark_sequence_parallel(e.wpe) if sp else e.wpe
        self.drop = _Dropout(e.drop.p, rng if sp else None)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)                                  # (B, T, C) or (B, T / t, C)
        lo = dist.get_rank(self.group) * x.shape[1] if self.sp else 0
        return self.drop(x + self.wpe(torch.arange(lo, lo + x.shape[1], device=idx.device)))


class _Region:
    """How a block's column-parallel regions run: module by module (``fused=False``) or as
    one :func:`~perfkit.parallel.tp_overlap.column_region` (backward overlapped, and under
    SP the gathered input kept or recomputed)."""

    group: Any
    sp: bool
    fused: bool = False
    keep_gathered: bool = True

    def columns(self, x: torch.Tensor, linears: list[ColumnParallelLinear]) -> list[torch.Tensor]:
        if self.fused:
            return list(column_region(x, linears, self.group, self.sp, self.keep_gathered))
        # one f (or all-gather) for all the region's columns: one collective, not several
        x = gather_from_sequence(x, self.group) if self.sp else copy_to_tp(x, self.group)
        return [lin(x) for lin in linears]


class _Attention(_Region, nn.Module):
    def __init__(self, a: Attention, group: Any, sp: bool, rng: RNGTracker | None) -> None:
        super().__init__()
        self.group, self.sp, self.head_dim, self.p, self.rng = group, sp, a.head_dim, a.dropout, rng
        self.q, self.k, self.v = (ColumnParallelLinear.from_linear(getattr(a, n), group,
                                                                   input_is_parallel=True)
                                  for n in "qkv")
        self.proj = RowParallelLinear.from_linear(
            a.proj, group, reduce=reduce_scatter_to_sequence if sp else None)
        if sp and self.proj.bias is not None:
            mark_sequence_parallel(self.proj.bias)   # added on T / t tokens; weight is split

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = self.columns(x, [self.q, self.k, self.v])
        b, t, _ = outs[0].shape
        q, k, v = (o.view(b, t, -1, self.head_dim).transpose(1, 2)
                   for o in outs)                      # (B, heads / t, T, D)
        p = self.p if self.training else 0.0
        if p and self.rng is not None:
            with self.rng.fork():   # the heads are split: each rank its own mask
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class _MLP(_Region, nn.Module):
    def __init__(self, m: nn.Module, group: Any, sp: bool) -> None:
        super().__init__()
        self.group, self.sp = group, sp
        self.fc = ColumnParallelLinear.from_linear(m.fc, group, input_is_parallel=True)
        self.proj = RowParallelLinear.from_linear(
            m.proj, group, reduce=reduce_scatter_to_sequence if sp else None)
        if sp and self.proj.bias is not None:
            mark_sequence_parallel(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (h,) = self.columns(x, [self.fc])                  # (B, T, 4C / t)
        return self.proj(F.gelu(h, approximate="tanh"))


class _Block(nn.Module):
    def __init__(self, b: Block, group: Any, sp: bool, rng: RNGTracker | None) -> None:
        super().__init__()
        self.ln1, self.ln2 = b.ln1, b.ln2
        if sp:
            mark_sequence_parallel(self.ln1), mark_sequence_parallel(self.ln2)
        self.attn, self.mlp = _Attention(b.attn, group, sp, rng), _MLP(b.mlp, group, sp)
        self.drop1, self.drop2 = (_Dropout(d.p, rng if sp else None) for d in (b.drop1, b.drop2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.ln1(x)))
        return x + self.drop2(self.mlp(self.ln2(x)))


class _Head(nn.Module):
    def __init__(self, h: Head, group: Any, sp: bool) -> None:
        super().__init__()
        self.group, self.sp = group, sp
        self.ln_f = mark_sequence_parallel(h.ln_f) if sp else h.ln_f
        self.lm_head = ColumnParallelLinear.from_linear(h.lm_head, group, input_is_parallel=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_f(x)
        x = gather_from_sequence(x, self.group) if self.sp else copy_to_tp(x, self.group)
        return self.lm_head(x)                             # (B, T, V / t): never gathered


class TensorParallelGPT(nn.Module):
    """What :func:`parallelize_gpt` returns: a GPT whose forward gives this rank's
    ``(B, T, V / t)`` logits; :meth:`loss` is the vocabulary-parallel cross-entropy."""

    def __init__(self, model: GPT, group: Any, sequence_parallel: bool,
                 rng: RNGTracker | None, overlap: bool = False,
                 keep_gathered: bool = True) -> None:
        check_type("model", model, GPT)
        check_type("rng", rng, RNGTracker, optional=True)
        for name, flag in (("sequence_parallel", sequence_parallel), ("overlap", overlap),
                           ("keep_gathered", keep_gathered)):
            check_type(name, flag, bool)   # a truthy "no" would silently mean yes
        if not keep_gathered and not sequence_parallel:
            raise ValueError("keep_gathered=False needs sequence_parallel=True (without it "
                             "there is no gathered input to recompute)")
        super().__init__()
        self.cfg, self.group, self.sequence_parallel = model.cfg, group, sequence_parallel
        sp = sequence_parallel
        self.embed = _Embed(model.embed, group, sp, rng)
        self.blocks = nn.ModuleList(_Block(b, group, sp, rng) for b in model.blocks)
        for region in (m for b in self.blocks for m in (b.attn, b.mlp)):
            region.fused, region.keep_gathered = overlap or not keep_gathered, keep_gathered
        self.head = _Head(model.head, group, sp)
        self.vocab_start = self.head.lm_head.weight.shape[0] * dist.get_rank(group)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over every token, equal on every rank (collective)."""
        return vocab_parallel_cross_entropy(self(idx), targets, self.vocab_start, self.group,
                                            vocab_size=self.cfg.vocab_size)

    def sync_grads(self) -> int:
        """After backward: sum the sequence-split parameters' gradients over the group
        (nothing to do without sequence parallelism); returns the elements reduced.

        Warning:
            Collective: every rank of the group must call it.
        """
        return sync_sequence_parallel_grads(self, self.group) if self.sequence_parallel else 0

    def shard(self, name: str) -> tuple[int, int, int] | None:
        """``(dim, start, stop)`` of the unsplit parameter ``name`` that this rank holds, or
        ``None`` when it holds all of it (LayerNorms, positions, row-parallel biases)."""
        module_name, _, attr = name.rpartition(".")
        mod = self.get_submodule(module_name)
        rank = dist.get_rank(self.group)
        if isinstance(mod, (ColumnParallelLinear, VocabParallelEmbedding)):
            n = getattr(mod, attr).shape[0]
            return 0, rank * n, (rank + 1) * n
        if isinstance(mod, RowParallelLinear) and attr == "weight":
            n = mod.weight.shape[1]
            return 1, rank * n, (rank + 1) * n
        return None


def parallelize_gpt(model: GPT, tp_group: Any = None, sequence_parallel: bool = False,
                    rng: RNGTracker | None = None, overlap: bool = False,
                    keep_gathered: bool = True) -> TensorParallelGPT:
    """Split ``model`` (built identically on every rank) over ``tp_group``.

    Args:
        model: the unsplit GPT; its LayerNorms and positions are shared, not copied.
        tp_group: the tensor-parallel group (``None``: WORLD).
        sequence_parallel: split the LayerNorm and dropout regions along the sequence.
        rng: the tracker for dropout in split regions; needed when ``model.cfg.dropout > 0``.
        overlap: run each column-parallel region as one autograd function whose backward
            collective overlaps the weight gradients (:mod:`perfkit.parallel.tp_overlap`).
        keep_gathered: under SP, keep each region's all-gathered input for backward (the
            default), or keep only this rank's slice and all-gather it again in backward.

    Raises:
        TypeError: if ``model`` is not a GPT, ``rng`` not an RNGTracker, or a flag not a bool.
        ValueError: if the group's size does not divide the heads or the vocabulary, if
            dropout is on without an ``rng``, or for ``keep_gathered=False`` without SP.
    """
    check_type("model", model, GPT)
    check_type("rng", rng, RNGTracker, optional=True)
    check_type("tp_group", tp_group, dist.ProcessGroup, optional=True)
    check_tp_degree(model.cfg, dist.get_world_size(tp_group))
    if model.cfg.dropout > 0 and rng is None:
        raise ValueError("rng must be an RNGTracker when dropout > 0 (split regions draw "
                         "their masks from it)")
    return TensorParallelGPT(model, tp_group, sequence_parallel, rng, overlap, keep_gathered)


def sp_synced_values(cfg: GPTConfig) -> int:
    """Elements of the one all-reduce that :meth:`TensorParallelGPT.sync_grads` runs per step
    under sequence parallelism: the gradients of the parameters used on a sequence slice.

    Those are each block's two LayerNorms (weight and bias, ``2 C`` each) and two row-parallel
    biases (``C`` each), the final LayerNorm and the whole position table (``block_size x C``).
    Megatron-LM all-reduces the same kind of parameters (marked ``sequence_parallel``) in
    ``finalize_model_grads``, but not its position table: with learned positions Megatron-core
    all-reduces the word embeddings, adds the positions on the whole sequence and then scatters,
    so the position gradient arrives whole on every rank. This model reduce-scatters the
    embedding's output and adds each slice's positions after, so its table joins the sum. The
    count grows with the width (and the table with ``block_size``), not with the tokens per step.

    Raises:
        TypeError: if ``cfg`` is not a :class:`GPTConfig`.
    """
    check_type("cfg", cfg, GPTConfig)
    return (6 * cfg.n_layer + 2 + cfg.block_size) * cfg.n_embd


def tp_traffic(cfg: GPTConfig, batch: int, seq: int, t: int, sequence_parallel: bool = False,
               blocks_only: bool = False, dtype_bytes: int = 4,
               keep_gathered: bool = True) -> Traffic:
    """Calls and buffer bytes per collective of one training step (forward, backward,
    :meth:`TensorParallelGPT.sync_grads`) of :func:`parallelize_gpt`'s model; the counts
    :func:`perfkit.comm.traffic.count_traffic` measures, exactly.

    Each block moves 4 payloads of ``batch * seq * n_embd`` elements: all-reduces, or with
    sequence parallelism as many all-gathers and reduce-scatters each. The embedding and the
    head add one each; the loss all-reduces 3 x ``batch * seq`` fp32 numbers; sequence
    parallelism all-reduces the gradients of the sequence-split parameters once.

    Args:
        blocks_only: count one block's forward and backward only.
        keep_gathered: ``False``: under SP each block all-gathers its two regions' inputs
            again in backward (``parallelize_gpt(..., keep_gathered=False)``).

    Raises:
        TypeError, ValueError: for a bad ``cfg``, a ``t`` that does not divide it, or a flag
            that is not a bool.
    """
    check_tp_degree(cfg, t)
    for name, flag in (("sequence_parallel", sequence_parallel), ("blocks_only", blocks_only),
                       ("keep_gathered", keep_gathered)):
        check_type(name, flag, bool)
    for name, v in (("batch", batch), ("seq", seq), ("dtype_bytes", dtype_bytes)):
        check_int(name, v, 1)
    payload = batch * seq * cfg.n_embd * dtype_bytes      # bytes of one (B, T, C) activation
    n = 4 if blocks_only else 4 * cfg.n_layer + 2          # blocks, embedding, head
    if not sequence_parallel:
        calls, nbytes = {"all_reduce": n}, {"all_reduce": n * payload}
    else:
        calls = {"all_gather": n, "reduce_scatter": n}
        nbytes = {"all_gather": n * payload, "reduce_scatter": n * payload}
        if not keep_gathered:   # the recomputed inputs: 2 regions per block
            extra = 2 * (1 if blocks_only else cfg.n_layer)
            calls["all_gather"] += extra
            nbytes["all_gather"] += extra * payload
    if not blocks_only:
        sync = sp_synced_values(cfg)
        calls["all_reduce"] = calls.get("all_reduce", 0) + 3 + (1 if sequence_parallel else 0)
        nbytes["all_reduce"] = (nbytes.get("all_reduce", 0) + 3 * batch * seq * 4
                                + (sync * dtype_bytes if sequence_parallel else 0))
    return Traffic(calls, nbytes)
