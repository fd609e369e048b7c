"""Memory per GPU of a layout: model states by ZeRO stage, activations in flight, buffers.

Model states are ZeRO's formulas (:func:`perfkit.memory.model_states.zero_model_states`)
applied to the parameters of the most loaded pipeline stage, split by tensor parallelism and
sharded over the data- and context-parallel ranks (Megatron-LM's distributed optimizer shards
over both). Activations are :meth:`ModelSpec.activation_bytes_per_layer` (Korthikanti et al.
2022) times the stage's layers times the micro-batches in flight (:meth:`Layout.in_flight`);
the last stage adds the fp32 logits, and full recomputation adds one block's activations
while it is rebuilt. Buffers: ZeRO-3 holds two gathered blocks (one computing, one
prefetched), ZeRO 0-2 two gradient buckets, or, in a framework that copies all its gradients
after the backward (``grad_copy_bytes``: Megatron-LM 2021's local DDP flattens them for the
all-reduce, :mod:`perfkit.plan.framework`), what that copy needs beyond the activations the
backward has freed by then.

Two terms depend on the framework a run used, so they are arguments, not defaults:

* ``loss_copies``: fp32 logits-sized tensors alive at the loss's peak. A fused cross-entropy
  that works in place keeps one (the default). PyTorch's ``F.cross_entropy`` on fp32 logits
  (torchtitan's loss) peaks at three in its backward: log-softmax keeps its output for
  backward (``_log_softmax_backward_data(grad, result, ...)`` in pytorch/pytorch
  tools/autograd/derivatives.yaml), ``nll_loss``'s backward writes a dense gradient of the same
  shape, and log-softmax's backward writes its input's gradient while both are alive.
* ``unsharded_with_pp``: ZeRO-3 under a pipeline keeping each stage's gathered 16-bit weights
  and its unsharded gradients (``unsharded_grad_bytes`` per element, fp32 when FSDP reduces in
  fp32) for the whole step. torchtitan's default is ``reshard_after_forward = not
  pp_enabled`` ("to avoid per-microbatch all-gathers", torchtitan parallelize.py), and
  ``torch.distributed.pipelining``'s ``backward_maybe_with_nosync`` turns FSDP's gradient
  reduce-scatter off for every micro-batch but the last, so the gradients accumulate unsharded.

What a run's allocator reports (torchtitan's "Memory (GiB)" is the caching allocator's
maximum reserved memory) adds fragmentation on top of these tensors: :mod:`perfkit.plan.memory_runs`
holds both against published figures. :func:`as_built` sets a perfkit run's own count beside
ZeRO's formula, as context: perfkit's optimizer was written to that formula.

Usage::

    mem = memory_per_gpu(model, Layout(dp=8, tp=8, zero=1, recompute="selective", sp=True), 512)
    print(mem.total / 1e9, mem.as_dict())
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from perfkit._checks import check_int, check_real, check_type
from perfkit.memory.model_states import StateRecipe, zero_model_states
from perfkit.plan.layout import Layout
from perfkit.plan.model import ModelSpec
from perfkit.units import si
from perfkit.verdict import Prediction

__all__ = ["BUCKET_BYTES", "MemoryBreakdown", "as_built", "memory_per_gpu", "stage_params"]

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket (25 MiB); two are in flight


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU by kind (the most loaded GPU)."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def model_states(self) -> float:
        """Parameters, gradients and optimizer state."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> float:
        """All of it."""
        return self.model_states + self.activations + self.buffers

    def table_gb(self) -> tuple[float, float, float, float]:
        """``(total, model states, activations, buffers)`` in GB at 0.1 GB, as a table prints them
        so that the parts add up to the total as printed: each part rounded down to 0.1 GB, then
        the tenths the total's rounding leaves over given to the parts with the largest
        remainders (the largest-remainder rule), so no part moves by more than 0.1 GB and none
        prints below 0."""
        parts = (self.model_states, self.activations, self.buffers)
        tenths = [math.floor(x / 1e8) for x in parts]
        left = round(sum(parts) / 1e8) - sum(tenths)
        for i in sorted(range(3), key=lambda i: parts[i] / 1e8 - tenths[i], reverse=True)[:left]:
            tenths[i] += 1
        return (sum(tenths) / 10, *(t / 10 for t in tenths))

    def as_dict(self) -> dict[str, float]:
        """``{kind: bytes}`` with the total."""
        return {**asdict(self), "total": self.total}


def stage_params(model: ModelSpec, layout: Layout) -> float:
    """Parameters one GPU of the most loaded stage holds before ZeRO: the stage's blocks and,
    on the first stage, the embedding (the last holds the output layer, or a copy of the tied
    embedding; a middle stage of an uneven split may hold more blocks and no vocabulary, see
    :meth:`Layout.stage_layers`). Tensor parallelism splits the weight matrices, the
    column-parallel biases and the vocabulary; the norms, the position table and the two
    row-parallel biases of a block (added after its all-reduce) stay whole on every rank, as
    Megatron and :mod:`perfkit.parallel.tp_gpt` keep them."""
    whole = 2 * model.norm_params + (2 * model.hidden if model.bias else 0)  # per block
    vocab = model.embedding_params - model.positions * model.hidden
    ends = model.positions * model.hidden + model.norm_params  # whole on an end stage

    def held(blocks: int, end: bool) -> float:
        return ((blocks * (model.layer_params - whole) + (vocab if end else 0)) / layout.tp
                + blocks * whole + (ends if end else 0))

    split = layout.stage_layers(model.layers)
    return max(held(n, i in (0, len(split) - 1)) for i, n in enumerate(split))


def memory_per_gpu(model: ModelSpec, layout: Layout, global_batch: int,
                   recipe: str | StateRecipe = "mixed_adam", weight_bytes: float | None = None,
                   loss_copies: float = 1.0, unsharded_with_pp: bool = False,
                   unsharded_grad_bytes: float = 4.0, grad_copy_bytes: float = 0.0) -> MemoryBreakdown:
    """Predicted bytes on the most loaded GPU.

    Args:
        model: the :class:`ModelSpec`.
        layout: the :class:`Layout` (checked by the caller, :func:`check_layout`).
        global_batch: sequences per step (>= 1); sets the micro-batches in flight.
        recipe: a :data:`perfkit.memory.model_states.RECIPES` name or recipe
            (``"mixed_adam"``: 2 + 2 + 12 bytes per parameter).
        weight_bytes: bytes per parameter of the gathered copy ZeRO-3 holds (default: the
            recipe's ``param_bytes``).
        loss_copies: fp32 logits-sized tensors alive at the loss's peak (>= 1; 3 for PyTorch's
            ``F.cross_entropy`` on fp32 logits, see the module's docstring).
        unsharded_with_pp: ZeRO-3 with a pipeline keeps the stage's gathered weights and
            unsharded gradients all step (torchtitan's default; only with ``zero=3`` and
            ``pp > 1``).
        unsharded_grad_bytes: bytes per element of those unsharded gradients (> 0; 4 when FSDP
            reduces in fp32).
        grad_copy_bytes: bytes per parameter of a copy of the gradients made after the
            backward, once the activations are freed (>= 0; 2 for Megatron-LM 2021's flattened
            fp16 gradients), in place of the buckets: the peak is the larger of the backward's
            and the states' plus that copy. ZeRO 0-2 only.

    Returns:
        A :class:`MemoryBreakdown`.

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or out of range.
    """
    check_type("model", model, ModelSpec)
    check_type("layout", layout, Layout)
    check_int("global_batch", global_batch, 1)
    check_real("loss_copies", loss_copies, 1)
    check_type("unsharded_with_pp", unsharded_with_pp, bool)
    check_real("unsharded_grad_bytes", unsharded_grad_bytes, 0, lo_open=True)
    check_real("grad_copy_bytes", grad_copy_bytes, 0)
    lay = layout
    psi = stage_params(model, lay)
    states = zero_model_states(psi, lay.dp * lay.cp, lay.zero, recipe)
    wb = states.recipe.param_bytes if weight_bytes is None else check_real(
        "weight_bytes", weight_bytes, 0, lo_open=True)
    split = lay.stage_layers(model.layers)
    per_layer = model.activation_bytes_per_layer(lay.micro_batch, lay.tp, lay.sp, lay.recompute,
                                                 lay.cp)
    # the last stage: the fp32 logits (loss_copies of them at the loss's peak), and the final
    # norm's input (split by SP) and the output layer's input (whole), one (b, s, h) tensor each
    bsh = lay.micro_batch * model.seq / lay.cp * model.hidden * model.act_bytes
    head = (loss_copies * model.logits_bytes(lay.micro_batch, lay.tp, lay.cp)
            + bsh * (1 + (1 / lay.tp if lay.sp else 1)))
    # stage i holds its blocks' activations for in_flight(i) micro-batches (the first the most),
    # the last stage one micro-batch and the head's tensors: the most loaded stage counts
    acts = max(lay.in_flight(global_batch, i) * n * per_layer + (head if i == lay.pp - 1 else 0)
               for i, n in enumerate(split))
    if lay.recompute in ("full", "op"):  # one block rebuilt at a time in backward
        rebuilt = model.activation_bytes_per_layer(lay.micro_batch, lay.tp, lay.sp, "none", lay.cp)
        acts += rebuilt - (per_layer if lay.recompute == "op" else 0)  # "op" kept part of it
    if lay.zero == 3:
        buffers = 2 * model.layer_params / lay.tp * wb  # gathered: computing + prefetched
        if unsharded_with_pp and lay.pp > 1:  # the whole stage gathered, gradients unsharded
            buffers = psi * (wb + unsharded_grad_bytes)
    elif grad_copy_bytes:  # allocated once the backward has freed the activations
        buffers = max(0.0, grad_copy_bytes * psi - acts)
    else:
        buffers = 2 * BUCKET_BYTES if lay.dp * lay.cp > 1 else 0.0
    return MemoryBreakdown(states.params, states.grads, states.optimizer, acts, buffers)


def as_built(prediction: Prediction, *ranks: Mapping[str, float]) -> str:
    """Model states from ZeRO's formula (``prediction``, bytes) beside the bytes a run of perfkit's
    own optimizer and layers counted (each of ``ranks``: name -> bytes; the largest rank's sum is
    read), as context, not a verdict:
    perfkit shards by that formula by design, so the two agree unless perfkit's code strays from
    it, a check of its bookkeeping, not a prediction of another framework's memory. The text
    gives each part and how far the sum lies from the formula, and says where it strays by
    more than the prediction's tolerance.

    Raises:
        TypeError, ValueError: a ``prediction`` without a positive point value, no rank, or
            parts that are not a non-empty mapping of bytes >= 0.
    """
    check_type("prediction", prediction, Prediction)
    if not ranks:
        raise ValueError("as_built needs at least one rank's parts")
    for parts in ranks:
        check_type("parts", parts, Mapping)
        if not parts:
            raise ValueError("parts must name at least one kind of state")
        for k, v in parts.items():
            check_real(f"parts[{k!r}]", v, 0)
    parts = max(ranks, key=lambda r: sum(r.values()))
    if prediction.value is None or not prediction.value > 0:
        raise ValueError("prediction must have a point value above 0")
    got, u = float(sum(parts.values())), prediction.unit
    off = got / prediction.value - 1
    each = ", ".join(f"{k} {si(v, u)}" for k, v in parts.items())
    said = ("perfkit's code strays from the formula it was written to" if abs(off) > prediction.rel_tol
            else "a check of perfkit's bookkeeping (its code was written to this count), not a prediction")
    return (f"Context, not a verdict ({prediction.model}): {prediction.what}, {si(prediction.value, u)} by "
            f"the formula; counted in the run {si(got, u)} ({each}), {off:+.1%} from it: {said}.")
