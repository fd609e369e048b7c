"""Zero-bubble's split backward (Qi et al. 2023), as :func:`perfkit.parallel.pipeline.run_schedule`
runs it: ``I`` computes a stage's input gradient (what the previous stage waits for) and
``W`` its ``nn.Linear`` weight gradients (what nobody waits for) later.

While a stage's forward runs, each plain ``nn.Linear`` with a trainable weight is *tapped*:
it computes with detached aliases of its weight and bias and records its input and output.
The weight's gradient through that call is then ``W``'s alone (``dW = gout^T inp``), and
``I`` asks autograd for the input, the tapped outputs and every parameter: a parameter
used only through tapped calls gets nothing there, one also used elsewhere (tied weights,
``F.linear(x, lin.weight)``) gets exactly its other uses' part. Nothing is counted twice
or left out, whatever the stage does with its weights.

Usage (inside the pipeline executor)::

    mods = tap_linears(stage, taps)
    try: y = stage(x)
    finally: untap(mods)
    pending = input_grads(stage, x, y, g, taps)   # I
    weight_grads(pending)                         # W
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["input_grads", "tap_linears", "untap", "weight_grads"]


def _accumulate(q: torch.Tensor, g: torch.Tensor) -> None:
    q.grad = g if q.grad is None else q.grad.add_(g)


def _tapped_linear(mod: nn.Linear, taps: list, input: torch.Tensor) -> torch.Tensor:
    """``mod``'s forward on detached aliases of its weight and bias, recorded for ``W``: the
    weight's gradient through this call is ``W``'s alone, so ``I`` can ask autograd for the
    weight's other uses and count nothing twice. The alias requires grad so that autograd
    keeps ``input`` for it as for the weight itself (the same saved bytes)."""
    bias = None if mod.bias is None else mod.bias.detach()
    out = F.linear(input, mod.weight.detach().requires_grad_(), bias)
    taps.append((mod, input, out))
    return out


def tap_linears(stage: nn.Module, taps: list) -> list[nn.Module]:
    """Run every plain ``nn.Linear`` of ``stage`` with a trainable weight as
    :func:`_tapped_linear` (until :func:`untap`); returns them."""
    mods = [mod for mod in stage.modules()
            if type(mod).forward is nn.Linear.forward and mod.weight.requires_grad]
    for mod in mods:
        mod.forward = functools.partial(_tapped_linear, mod, taps)
    return mods


def untap(mods: list[nn.Module]) -> None:
    """Give the modules :func:`tap_linears` returned their class's forward back."""
    for mod in mods:
        del mod.forward


def input_grads(stage: nn.Module, x: torch.Tensor | None, y: torch.Tensor,
                g: torch.Tensor | None, taps: list) -> list:
    """``I``: the input gradient (into ``x.grad``), every parameter's gradient except what
    flows through the tapped Linears' calls (accumulated now: LayerNorms, embeddings, a tied
    or reused weight's other uses), and each tapped call's output gradient, returned for
    ``W``. The Linears' weight-gradient matmuls are all that is left for ``W``: the split of
    Qi et al., the graph traversed once."""
    params = [q for q in stage.parameters() if q.requires_grad]
    outs = [out for _, _, out in taps]
    wrt = ([x] if x is not None else []) + outs + params
    grads = list(torch.autograd.grad(y, wrt, g, allow_unused=True)) if wrt else []
    if x is not None:
        x.grad = grads.pop(0)
    gouts, rest = grads[:len(outs)], grads[len(outs):]
    for q, gq in zip(params, rest):
        if gq is not None:   # None: used only through tapped calls (W's)
            _accumulate(q, gq)
    return [(mod, inp, go) for (mod, inp, _), go in zip(taps, gouts) if go is not None]


def weight_grads(pending: list) -> None:
    """``W``: each Linear's ``dW = gout^T inp`` and ``db = sum(gout)`` over every position."""
    for mod, inp, gout in pending:
        go = gout.reshape(-1, gout.shape[-1])   # (positions, out)
        _accumulate(mod.weight, go.t() @ inp.detach().reshape(-1, inp.shape[-1]))
        if mod.bias is not None and mod.bias.requires_grad:
            _accumulate(mod.bias, go.sum(0))
