"""The training pieces the tensor-parallel jobs share: a seeded GPT and global batch that
every rank builds alike, a few steps of SGD or AdamW, and the per-parameter comparison of a
split model's slices with the unsplit model.

Usage (inside a worker)::

    ref, ref_losses = train_reference(gpt_config({}), batch=4, steps=5, opt_name="sgd")
    rel, worst, key_bias = worst_rel_diff(split_model, ref)    # this rank's slices
    rel = max_over_ranks(rel)                                   # collective
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit.parallel.gpt import GPT, GPTConfig, gpt_loss

__all__ = ["DATA_SEED", "SEED", "SGD", "global_batch", "gpt_config", "make_optimizer",
           "max_over_ranks", "seeded_gpt", "train", "train_reference", "worst_rel_diff"]

SEED, DATA_SEED = 0, 1                 # the weights' seed; the default stream's, for dropout
SGD = {"lr": 0.1, "momentum": 0.9}


def gpt_config(model: dict[str, Any]) -> GPTConfig:
    """The jobs' small GPT, with ``model``'s sizes over the defaults."""
    kw = {"vocab_size": 64, "block_size": 16, "n_embd": 32, "n_layer": 2, "n_head": 4}
    return GPTConfig(**{**kw, **model})


def seeded_gpt(cfg: GPTConfig) -> GPT:
    """The unsplit GPT from :data:`SEED`: the same weights on every rank."""
    torch.manual_seed(SEED)   # every rank builds the same unsplit weights
    return GPT(cfg)


def global_batch(cfg: GPTConfig, batch: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s ``(idx, targets)``, ``(batch, block_size)`` each, equal on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    idx = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size + 1), generator=g)
    return idx[:, :-1], idx[:, 1:]


def make_optimizer(params: Any, name: str) -> torch.optim.Optimizer:
    """``"sgd"``: SGD with momentum (:data:`SGD`); else AdamW (lr 1e-2)."""
    return torch.optim.SGD(params, **SGD) if name == "sgd" else torch.optim.AdamW(params, lr=1e-2)


def train(loss_fn: Any, params: list[nn.Parameter], cfg: GPTConfig, batch: int, steps: int,
          opt_name: str, after_backward: Any = None) -> list[float]:
    """``steps`` steps of ``loss_fn(idx, targets)``; the default stream seeded alike."""
    opt, losses = make_optimizer(params, opt_name), []
    torch.manual_seed(DATA_SEED)   # replicated dropout: the same stream as the reference
    for step in range(steps):
        loss = loss_fn(*global_batch(cfg, batch, step))
        loss.backward()
        if after_backward is not None:
            after_backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


def train_reference(cfg: GPTConfig, batch: int, steps: int, opt_name: str,
                    model: GPT | None = None) -> tuple[GPT, list[float]]:
    """The unsplit GPT (``model`` or :func:`seeded_gpt`) trained by :func:`train`."""
    ref = model if model is not None else seeded_gpt(cfg)
    losses = train(lambda i, t: gpt_loss(ref(i), t), list(ref.parameters()), cfg, batch,
                   steps, opt_name)
    return ref, losses


def worst_rel_diff(tp: nn.Module, ref: GPT) -> tuple[float, str, float]:
    """The worst per-parameter ``max |p - p_ref| / max |p_ref|`` over this rank's slices,
    its name, and the largest absolute difference of the key biases, left out of the ratio:
    softmax ignores a shift shared by every key, so their gradient is zero in exact
    arithmetic and their values (about 1e-9 from zero) are rounding noise."""
    ref_p, worst, noise = dict(ref.named_parameters()), (0.0, ""), 0.0
    for name, p in tp.named_parameters():
        r = ref_p[name].detach()
        s = tp.shard(name) if hasattr(tp, "shard") else None
        if s is not None:
            r = r.narrow(s[0], s[1], s[2] - s[1])
        p = p.full_tensor() if hasattr(p, "full_tensor") else p
        diff = float((p.detach() - r).abs().max())
        if name.endswith("attn.k.bias"):
            noise = max(noise, diff)
            continue
        worst = max(worst, (diff / max(float(r.abs().max()), 1e-30), name))
    return (*worst, noise)


def max_over_ranks(x: float) -> float:
    """The largest ``x`` over the ranks (collective)."""
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)
