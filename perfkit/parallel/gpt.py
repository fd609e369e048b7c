"""A plain GPT built from ``nn.Linear``, the model that tensor, sequence and pipeline parallelism split.

``transformers``' GPT-2 fuses query, key and value into one ``Conv1D``, which neither
Megatron-style splitting by heads nor PyTorch's DTensor plans (``ColwiseParallel`` works on
``nn.Linear`` and ``nn.Embedding``) can take as is. This GPT has the same computation (pre-norm
blocks, causal attention, a 4x tanh-GELU MLP, learned positions) with separate ``q``, ``k``,
``v`` projections, and is written as a flat list of layers (embedding, blocks, head) that a
pipeline cuts into stages. Attention infers its local head count from the projection's width,
so a block whose projections were split by heads runs unchanged.

Usage::

    model = GPT(GPTConfig(vocab_size=256, block_size=32, n_embd=64, n_layer=4, n_head=4))
    loss = gpt_loss(model(idx), targets)                     # idx, targets: (B, T) int64
    stages = split_layers(model.layers(), [2, 2, 2])          # 6 layers -> 3 stages
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from perfkit._checks import check_int, check_real

__all__ = ["GPTConfig", "Embed", "Attention", "MLP", "Block", "Head", "GPT", "gpt_loss",
           "split_layers"]


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of a :class:`GPT`; ``dropout`` applies to embeddings, attention and residuals."""

    vocab_size: int = 256
    block_size: int = 64
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_embd", "n_layer", "n_head"):
            check_int(name, getattr(self, name), 1)
        check_real("dropout", self.dropout, 0.0, 1.0, hi_open=True)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


class Embed(nn.Module):
    """Token plus learned position embeddings, then dropout: ``(B, T)`` ids to ``(B, T, C)``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[-1], device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))


class Attention(nn.Module):
    """Causal self-attention with separate ``q``, ``k``, ``v`` and output ``proj`` linears.

    The number of heads is the projection's output width over ``head_dim``, so after ``q``,
    ``k`` and ``v`` are split by heads (column-parallel) each rank attends with its own heads.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        c = cfg.n_embd
        self.head_dim = c // cfg.n_head
        self.q, self.k, self.v, self.proj = (nn.Linear(c, c) for _ in range(4))
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (lin(x).view(b, t, -1, self.head_dim).transpose(1, 2)
                   for lin in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """``fc`` (C to 4C), tanh GELU, ``proj`` (4C to C)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + drop1(attn(ln1(x)))``, then ``x + drop2(mlp(ln2(x)))``.

    One dropout module per branch, not one called twice: a module called twice in a forward
    breaks the module tracker of ``torch.distributed.tensor.debug.CommDebugMode`` (torch 2.13).
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn, self.mlp = Attention(cfg), MLP(cfg)
        self.drop1, self.drop2 = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.ln1(x)))
        return x + self.drop2(self.mlp(self.ln2(x)))


class Head(nn.Module):
    """Final LayerNorm and the (untied) projection to the vocabulary: ``(B, T, C)`` to logits."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))


class GPT(nn.Module):
    """``Embed``, ``n_layer`` :class:`Block` s and a :class:`Head`; weights drawn with std 0.02.

    Args:
        cfg: the sizes. Seed ``torch.manual_seed`` before building to get the same weights on
            every rank (tensor and pipeline parallelism split one model built identically).
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.head = Head(cfg)
        for m in self.modules():   # GPT-2's initialisation, so outputs are O(1) at any width
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def layers(self) -> list[nn.Module]:
        """The model as a flat list a pipeline cuts: ``[embed, *blocks, head]``."""
        return [self.embed, *self.blocks, self.head]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.dim() != 2 or idx.shape[1] > self.cfg.block_size:
            raise ValueError(f"idx must be (B, T) with T <= block_size {self.cfg.block_size}, "
                             f"got shape {tuple(idx.shape)}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def gpt_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``(B, T, V)`` logits against ``(B, T)`` targets."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} "
                         "must agree on (B, T)")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def split_layers(layers: Sequence[nn.Module], sizes: Sequence[int]) -> list[nn.Sequential]:
    """Cut a list of layers into consecutive stages of ``sizes[i]`` layers each.

    Raises:
        ValueError: if a size is not a positive int or the sizes do not add up to the layers.
    """
    sizes = list(sizes)
    if not sizes:
        raise ValueError("sizes must name at least one stage")
    for i, s in enumerate(sizes):
        check_int(f"sizes[{i}]", s, 1)
    if sum(sizes) != len(layers):
        raise ValueError(f"sizes {sizes} add up to {sum(sizes)}, but there are {len(layers)} layers")
    out, start = [], 0
    for s in sizes:
        out.append(nn.Sequential(*layers[start:start + s]))
        start += s
    return out
