"""The experiments of notebook 04 on a tiny transformers GPT-2: what one forward pass saves
for backward, the checkpointing variants, and the step functions they are timed with.

Each variant starts from the same seed, so "plain", "checkpoint per block" and
"transformers' own switch" hold the same weights and differ only in what autograd keeps.
The recompute that checkpointing adds is timed on its own by :func:`blocks_forward`: every
block's forward on the inputs a plain forward passed it, with autograd recording, which is
what ``torch.utils.checkpoint`` runs again in the backward pass (Chen et al., *Training Deep
Nets with Sublinear Memory Cost*, 2016).

Usage::

    m = gpt2_variant(dict(n_embd=64, n_layer=2), checkpointing=CHECKPOINTING[1])
    ids = torch.randint(0, 1024, (8, 64))                       # (B, T) token ids
    print(measure_saved(m, ids, backward=True).activation_bytes)  # bytes kept for backward
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from perfkit._checks import check_choice, check_tensor, check_type
from perfkit.memory.activations import checkpoint_blocks
from perfkit.memory.saved_tensors import SavedTensorMeter, SavedTensorReport
from perfkit.models import tiny_gpt2

__all__ = ["CHECKPOINTING", "blocks_forward", "gpt2_variant", "measure_saved", "train_step"]

# the three ways notebook 04 runs one model: no checkpointing, torch.utils.checkpoint around
# each block (perfkit.memory.checkpoint_blocks), transformers' own switch
CHECKPOINTING = ("none", "torch.utils.checkpoint per block", "transformers switch")


def _ids(ids: Any) -> torch.Tensor:
    """``ids`` if it is a ``(B, T)`` integer tensor of token ids."""
    check_tensor("ids", ids, ndim=2)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
    return ids


def gpt2_variant(model_kw: Mapping[str, Any], seq: int | None = None, attention: str = "sdpa",
                 dtype: torch.dtype = torch.float32, checkpointing: str = "none",
                 device: torch.device | str = "cpu", seed: int = 0) -> nn.Module:
    """A fresh tiny GPT-2 (:func:`perfkit.models.tiny_gpt2`) in train mode, seeded.

    Args:
        model_kw: ``tiny_gpt2``'s sizes (``vocab_size``, ``block_size``, ``n_embd``, ...).
        seq: the longest sequence it must take; ``block_size`` is raised to it if smaller.
        attention: ``"sdpa"`` or ``"eager"`` (see ``tiny_gpt2``).
        dtype: the parameters' dtype (``torch.bfloat16`` converts the whole model).
        checkpointing: one of :data:`CHECKPOINTING`.
        device: where the model lives.
        seed: ``torch.manual_seed`` before the weights are drawn: equal seeds, equal weights.

    Returns:
        The model.

    Raises:
        TypeError: if ``model_kw`` is not a mapping or ``dtype`` not a torch dtype.
        ValueError: for an unknown ``checkpointing`` or a size ``tiny_gpt2`` rejects.
    """
    check_type("model_kw", model_kw, Mapping)
    check_type("dtype", dtype, torch.dtype)
    check_choice("checkpointing", checkpointing, CHECKPOINTING)
    kw = dict(model_kw)
    if seq is not None:
        kw["block_size"] = max(seq, kw.get("block_size", 64))
    torch.manual_seed(seed)
    m = tiny_gpt2(**kw, attention=attention).to(device=device, dtype=dtype).train()
    if checkpointing == CHECKPOINTING[1]:
        checkpoint_blocks(m.transformer.h)
    elif checkpointing == CHECKPOINTING[2]:
        # renamed activation_checkpointing_enable in transformers 5; older versions have only this
        enable = getattr(m, "activation_checkpointing_enable", None) or m.gradient_checkpointing_enable
        # training keeps no KV cache; left on, transformers turns it off at the first forward
        # with a warning on stderr ("use_cache=True is incompatible with gradient checkpointing")
        m.config.use_cache = False
        # non-reentrant, as checkpoint_blocks: transformers 5's default, not 4.x's
        enable({"use_reentrant": False})
    return m


def measure_saved(model: nn.Module, ids: torch.Tensor, autocast: bool = False,
                  backward: bool = False) -> SavedTensorReport:
    """What one forward pass of ``model`` on ``ids`` saves for backward, counted by storage.

    Args:
        model: a GPT-2 LM (``model(input_ids=, labels=)`` returns a loss).
        ids: ``(B, T)`` token ids, also the labels.
        autocast: run the forward under ``torch.autocast`` in bfloat16 on the ids' device type.
        backward: run the backward inside the meter too. A checkpointed model's recompute
            saves its blocks' tensors through checkpoint's own ``saved_tensors_hooks``, which
            take precedence over the meter's, so those are not counted: the count stays what
            the forward pass left for backward.

    Returns:
        The meter's :class:`~perfkit.memory.SavedTensorReport` (parameters reported apart).

    Raises:
        TypeError: if ``model`` is not an ``nn.Module`` or ``ids`` not an integer tensor.
    """
    check_type("model", model, nn.Module)
    _ids(ids)
    with SavedTensorMeter(model) as meter, torch.autocast(ids.device.type, torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
        if backward:
            loss.backward()
    return meter.report()


def train_step(model: nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    """A callable running one forward + backward of ``model`` on ``ids`` (gradients reset first).

    Raises:
        TypeError: if ``model`` is not an ``nn.Module`` or ``ids`` not a tensor.
    """
    check_type("model", model, nn.Module)
    _ids(ids)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
    return step


def blocks_forward(model: nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    """A callable running every block's forward, autograd recording: what checkpointing recomputes.

    One plain forward of ``model`` on ``ids`` records each block's input (``(B, T, C)``
    hidden states); the callable runs the blocks on those inputs, so it times the blocks
    alone, without the embeddings, the head and the loss.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module`` or ``ids`` not a tensor.
    """
    check_type("model", model, nn.Module)
    _ids(ids)
    blocks = model.transformer.h
    inputs: dict[int, torch.Tensor] = {}
    grab = [b.register_forward_pre_hook(lambda mod, args, i=i: inputs.__setitem__(i, args[0].detach()))
            for i, b in enumerate(blocks)]
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in grab:
            h.remove()
    xs = [inputs[i].requires_grad_() for i in range(len(blocks))]  # the recompute records a graph

    def run() -> None:
        for b, x in zip(blocks, xs):
            b(x)
    return run
