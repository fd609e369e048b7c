"""LoRA (Hu et al., 2021) on the tiny GPT-2 with ``peft``: the models, their training steps,
and the parts of a full step that LoRA removes (an Amdahl bound on its step time).

A step of a LoRA model still runs the whole forward and the backward through every layer
(the input gradients); it skips the frozen weights' gradients and their optimizer update.
:func:`frozen_twin` times the first part alone: a copy whose only trainable tensors are the
``c_attn`` biases, so backward reaches every block without computing a weight gradient.

Usage::

    full, lora = gpt2_pair(dict(n_embd=64, n_layer=2, n_head=2), rank=8)
    step, opt = adamw_trainer(lora, torch.randint(0, 1024, (8, 64)))   # (B, T) token ids
    step()
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from perfkit._checks import check_int, check_items, check_real, check_tensor, check_type
from perfkit.timing import Measurement

__all__ = ["amdahl_parts", "forward_backward", "frozen_twin", "gpt2_pair", "lora_bound", "adamw_trainer"]


def gpt2_pair(model_kw: Mapping[str, int], rank: int, vocab_size: int = 1024, block_size: int = 64,
              targets: Sequence[str] = ("c_attn",)) -> tuple[nn.Module, nn.Module]:
    """The tiny GPT-2 and a LoRA-wrapped copy with the same initial weights (seed 0).

    GPT-2's linear layers are transformers' ``Conv1D`` (weight stored (in, out)), hence
    ``fan_in_fan_out=True``; ``lora_alpha = 2 r``, no dropout.

    Raises:
        TypeError, ValueError: for ``model_kw`` that is not a mapping, a ``rank`` below 1 or
            no ``targets``.
    """
    from peft import LoraConfig, get_peft_model

    from perfkit.models import tiny_gpt2

    check_type("model_kw", model_kw, Mapping)
    check_int("rank", rank, 1)
    targets = check_items("targets", list(targets))
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # peft: a renamed API
    torch.manual_seed(0)
    full = tiny_gpt2(vocab_size=vocab_size, block_size=block_size, **model_kw)
    torch.manual_seed(0)
    lora = get_peft_model(tiny_gpt2(vocab_size=vocab_size, block_size=block_size, **model_kw),
                          LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                     target_modules=targets, fan_in_fan_out=True))
    return full, lora


def adamw_trainer(model: nn.Module, ids: torch.Tensor, lr: float = 1e-3
               ) -> tuple[Callable[[], None], torch.optim.Optimizer]:
    """A full training step (forward, backward, AdamW over the trainable parameters) on
    ``ids`` (B, T), and its optimizer.

    Raises:
        TypeError, ValueError: for a ``model`` that is not a module, ``ids`` not 2-D, or
            ``lr`` not a finite number > 0.
    """
    check_type("model", model, nn.Module)
    check_tensor("ids", ids, ndim=2)
    check_real("lr", lr, 0, lo_open=True)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    return step, opt


def forward_backward(model: nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    """Forward and backward only (no optimizer step) on ``ids`` (B, T).

    Raises:
        TypeError, ValueError: for a ``model`` that is not a module or ``ids`` not 2-D.
    """
    check_type("model", model, nn.Module)
    check_tensor("ids", ids, ndim=2)

    def run() -> None:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
    return run


def frozen_twin(model: nn.Module) -> nn.Module:
    """A copy of a GPT-2 whose only trainable tensors are each block's ``c_attn`` bias:
    backward reaches every block (the input gradients) and computes no weight gradient.

    Raises:
        TypeError: for a ``model`` that is not a GPT-2 module (no ``transformer.h`` blocks).
    """
    if not isinstance(model, nn.Module) or not hasattr(getattr(model, "transformer", None), "h"):
        raise TypeError(f"model must be a GPT-2 module (with transformer.h), got {type(model).__name__}")
    twin = copy.deepcopy(model).requires_grad_(False)
    for block in twin.transformer.h:
        block.attn.c_attn.bias.requires_grad_(True)
    return twin


def amdahl_parts(step: Any, fwd_bwd: Any, frozen: Any) -> dict[str, float]:
    """Seconds of a full step's parts from three interleaved measurements (``.times_s``,
    ``.median_s``): the full step, its forward + backward, and :func:`frozen_twin`'s.

    Each part is a difference of two medians (the frozen twin's; the forward + backward's
    less it; the step's less the forward + backward's), so the parts add up to the step's
    median exactly; a median of per-round differences would not (medians do not add).

    Returns:
        ``{"forward + input-gradient backward", "weight gradients", "optimizer step"}`` in s;
        a difference can come out below 0 when it is smaller than the noise.

    Raises:
        TypeError, ValueError: for an argument that is not a Measurement, or rounds of
            unequal count (the three must come from one interleaved run).
    """
    for name, m in (("step", step), ("fwd_bwd", fwd_bwd), ("frozen", frozen)):
        check_type(name, m, Measurement)
    if not len(step.times_s) == len(fwd_bwd.times_s) == len(frozen.times_s):
        raise ValueError("step, fwd_bwd and frozen must hold the same number of rounds")
    return {"forward + input-gradient backward": frozen.median_s,
            "weight gradients": fwd_bwd.median_s - frozen.median_s,
            "optimizer step": step.median_s - fwd_bwd.median_s}


def lora_bound(parts: Mapping[str, float], step_s: float, trainable_ratio: float) -> float:
    """The LoRA step over the full step if it removed the weight gradients and the frozen
    share ``1 - trainable_ratio`` of the optimizer step and added nothing (a lower bound);
    parts below 0 count as 0.

    Raises:
        TypeError, ValueError: for ``parts`` without :func:`amdahl_parts`' keys, ``step_s``
            not a finite number > 0, or ``trainable_ratio`` outside [0, 1].
    """
    check_type("parts", parts, Mapping)
    for key in ("weight gradients", "optimizer step"):
        if key not in parts:
            raise ValueError(f"parts must hold {key!r} (amdahl_parts' keys), got {sorted(parts)}")
    check_real("step_s", step_s, 0, lo_open=True)
    check_real("trainable_ratio", trainable_ratio, 0, 1)
    removed = max(parts["weight gradients"], 0) + max(parts["optimizer step"], 0) * (1 - trainable_ratio)
    return max(1 - removed / step_s, 0.0)
