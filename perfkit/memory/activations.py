"""Activation memory of a transformers GPT-2 LM: the per-operation model and checkpointing.

Counts, op by op, the bytes a ``GPT2LMHeadModel`` forward pass saves for backward, a
per-layer activation count like that of Korthikanti et al., *Reducing Activation
Recomputation in Large Transformer Models* (MLSys 2023), but for transformers' GPT-2 on
PyTorch's kernels and checked against :class:`perfkit.memory.SavedTensorMeter`. Adds the
ZeRO model states (:func:`perfkit.memory.zero_model_states`) for a whole step, and wraps
blocks in ``torch.utils.checkpoint`` (Chen et al., *Training Deep Nets with Sublinear
Memory Cost*, 2016).

Usage::

    from perfkit.memory.activations import checkpoint_blocks, gpt2_saved_activation_bytes
    print(gpt2_saved_activation_bytes(8, 64, 64, 2, 2, 1024).total)   # bytes
    checkpoint_blocks(gpt2.transformer.h)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from perfkit._checks import check_choice, check_int, check_real, check_type
from perfkit.memory.model_states import zero_model_states

__all__ = [
    "ActivationEstimate",
    "CheckpointedBlock",
    "checkpoint_cost_text",
    "checkpoint_blocks",
    "gpt2_num_params",
    "gpt2_saved_activation_bytes",
    "gpt2_step_memory",
    "recompute_flop_share",
]


# --- activations: the model for transformers' GPT-2 ------------------------------------


@dataclass(frozen=True)
class ActivationEstimate:
    """Predicted bytes saved for backward by a transformers GPT-2 LM forward pass.

    Attributes:
        per_layer: bytes one block saves (with checkpointing: its input only).
        outside_layers: final LayerNorm, log-softmax of the logits, token/position/label
            ids, the attention mask that checkpointed eager blocks keep.
        total: ``n_layer * per_layer + outside_layers``, held from forward to backward.
        recompute_peak: extra bytes over ``total`` at the backward pass's peak with
            checkpointing: one recomputed block's activations but its input (LayerNorm 1
            saves the very storage the checkpoint keeps, already in ``total``), less what
            the backward has already freed when it reaches the last block (the final LayerNorm's, the
            log-softmax and the labels: autograd frees a node's saved tensors once it has
            run); 0 when that is more, and 0 without checkpointing.
    """

    per_layer: int
    outside_layers: int
    total: int
    recompute_peak: int


def gpt2_saved_activation_bytes(
    batch: int, seq_len: int, n_embd: int, n_layer: int, n_head: int, vocab_size: int,
    attention: str = "sdpa", dtype_bytes: int = 4, checkpointing: bool = False,
) -> ActivationEstimate:
    """Bytes a transformers ``GPT2LMHeadModel`` saves for backward, counted op by op.

    With ``B, T, C, H, V`` = batch, sequence, width, heads, vocabulary and the element
    size ``d`` of the model's dtype, one block (dropout 0) saves, in elements:

    * LayerNorm 1 and 2: input and output ``4 BTC``, mean and rstd ``4 BT``;
    * the attention output before ``c_proj``: ``BTC``;
    * MLP: ``c_fc`` output, GELU's ``tanh``, ``1 + tanh`` and ``0.5 x`` terms, and the
      GELU output that ``c_proj`` keeps: ``5 x 4BTC = 20 BTC``;
    * attention, ``"eager"``: contiguous copies of q, k, v ``3 BTC`` and the softmax
      probabilities ``B H T^2``; ``"sdpa"`` (PyTorch's CPU flash kernel): the fused
      q/k/v projection ``3 BTC``, copies of q and of the output ``2 BTC`` and the
      log-sum-exp ``BHT`` (always fp32), and no ``T^2`` term.

    Outside the blocks: the final LayerNorm (``2 BTC + 2 BT``), the fp32 log-softmax of
    the logits (``4 BTV`` bytes, transformers upcasts them), int64 token, position and
    label ids (``8 (2BT + T)`` bytes) and a 4-byte scalar. Checkpointing each block keeps
    only its input (``BTC``), plus, with eager attention, the ``(B, 1, T, T)`` additive
    mask passed to every block, and recomputes one block at a time in the backward pass,
    after the backward has freed what lies outside the blocks but the ids and the mask
    (Chen et al., 2016: the checkpoints plus one segment).
    ``tests/unit/test_activations.py`` checks this count against
    :class:`perfkit.memory.SavedTensorMeter`.

    Args:
        batch, seq_len, n_embd, n_layer, n_head, vocab_size: model and batch shape (>= 1).
        attention: ``"eager"`` or ``"sdpa"`` (transformers' ``attn_implementation``).
        dtype_bytes: element size of the activations (4 fp32, 2 bf16/fp16).
        checkpointing: one checkpoint per block.

    Returns:
        An :class:`ActivationEstimate` in bytes.

    Raises:
        ValueError: for a non-positive size, an unknown ``attention`` or ``dtype_bytes``.
    """
    dims = dict(batch=batch, seq_len=seq_len, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                vocab_size=vocab_size)
    for k, v in dims.items():
        check_int(k, v, 1)
    check_choice("attention", attention, ("eager", "sdpa"))
    check_choice("dtype_bytes", check_int("dtype_bytes", dtype_bytes, 1), (1, 2, 4, 8))
    b, t, c, h, v = batch, seq_len, n_embd, n_head, vocab_size
    btc, bt = b * t * c, b * t
    if attention == "eager":
        full_layer = dtype_bytes * (28 * btc + 4 * bt + b * h * t * t)  # bytes
    else:  # the log-sum-exp is fp32 whatever the dtype
        full_layer = dtype_bytes * (30 * btc + 4 * bt) + 4 * b * h * t
    # freed by the backward before it reaches a block: final LayerNorm, log-softmax, labels, scalar
    freed_first = dtype_bytes * (2 * btc + 2 * bt) + 4 * bt * v + 8 * bt + 4
    outside = freed_first + 8 * (bt + t)  # + token and position ids, kept for the embeddings
    if checkpointing:
        per_layer = dtype_bytes * btc
        if attention == "eager":
            outside += dtype_bytes * b * t * t
        # the recomputed block's LayerNorm 1 saves the checkpointed input itself: counted once
        return ActivationEstimate(per_layer, outside, n_layer * per_layer + outside,
                                  max(0, full_layer - per_layer - freed_first))
    return ActivationEstimate(full_layer, outside, n_layer * full_layer + outside, 0)


def gpt2_num_params(n_embd: int, n_layer: int, vocab_size: int, n_positions: int) -> int:
    """Parameters of a transformers GPT-2 LM (LM head tied to the token embedding).

    Per block: two LayerNorms ``4C``, ``c_attn`` ``3C^2 + 3C``, attention ``c_proj``
    ``C^2 + C``, ``c_fc`` ``4C^2 + 4C``, MLP ``c_proj`` ``4C^2 + C``: ``12 C^2 + 13 C``.
    Plus token and position embeddings ``(V + P) C`` and the final LayerNorm ``2C``.

    Raises:
        ValueError: for a non-positive size.
    """
    for k, v in dict(n_embd=n_embd, n_layer=n_layer, vocab_size=vocab_size,
                     n_positions=n_positions).items():
        check_int(k, v, 1)
    c = n_embd
    return n_layer * (12 * c * c + 13 * c) + (vocab_size + n_positions) * c + 2 * c


def recompute_flop_share(n_embd: int, n_layer: int, vocab_size: int, seq_len: int) -> float:
    """The blocks' forward matmul FLOPs as a share of a whole GPT-2 training step's (forward +
    backward, the backward two matmuls per forward matmul: three forwards' FLOPs): what block
    checkpointing's recompute adds, in steps, where time follows FLOPs.

    Per token, a block's matmuls take ``2 * 12 C^2`` (``c_attn``, attention ``c_proj``, ``c_fc``,
    MLP ``c_proj``) plus ``4 T C`` for the attention scores and their weighted sum (counted over
    the whole ``T x T``, as the eager and math kernels compute it); the tied output layer ``2 C V``,
    not recomputed. Elementwise work, the embeddings and the optimizer are left out. It is 1/3
    only where the blocks are all of the FLOPs; the output layer's share of the forward is
    ``1 - 3 * share``.

    Raises:
        ValueError: for a non-positive size.
    """
    for k, v in dict(n_embd=n_embd, n_layer=n_layer, vocab_size=vocab_size, seq_len=seq_len).items():
        check_int(k, v, 1)
    c = n_embd
    blocks = n_layer * (24 * c * c + 4 * seq_len * c)  # FLOPs per token, forward
    return blocks / (3 * (blocks + 2 * c * vocab_size))


def flop_rule_text(step: Any, recompute: Any, share: float) -> str:
    """Where a checkpointed step, in plain steps, lies against what its FLOPs give (``1 + share``).

    The FLOP figure is a count, not a bound on time: where each operator's fixed cost and memory
    traffic weigh as much as its matmuls, the step can take longer. The sentence says on which
    side of it the step's interval lies, as printed, and, above it, what the recompute timed alone
    took against its FLOP share and what the step added beyond the recompute.

    Args:
        step: the checkpointed step over the plain one (an ``Estimate``: ``value``, ``clear_of``).
        recompute: the blocks' forward timed alone over the plain step (``value``).
        share: :func:`recompute_flop_share`, in (0, 1/3].

    Returns:
        A sentence, starting with a space.
    """
    share = check_real("share", share, 0.0, lo_open=True)
    flops = 1 + share
    head = (f" By its FLOPs the checkpointed step would take {flops:.2f} plain steps (1 plus the blocks' "
            "matmul share; at most 4/3 for any model)")
    side = step.clear_of(flops)
    if side == "above":
        beyond = step.value - 1 - recompute.value
        alone, times = recompute.value, recompute.value / share
        return (f"{head}; its interval lies above that: time did not follow FLOPs. The recompute "
                f"timed alone took {alone:.3f} plain steps, {times:.1f}x its FLOP share, and the step "
                f"added {beyond:+.3f} plain steps beyond it (checkpoint's hooks, the recompute inside "
                "the backward; the verdict below).")
    return head + ("; its interval lies below that." if side == "below" else "; its interval holds that.")


def checkpoint_cost_text(step: Any, vs_floor: Any, medians: float) -> str:
    """What a checkpointed step cost in time, by each statistic, and whether it was more than
    one extra forward of the blocks: judged on ``vs_floor``'s interval, not on the points.

    The median of the paired rounds' ratios (``step``) and the ratio of the two runs' medians
    (``medians``) agree only where one run's steps are the other's scaled by one factor; on a
    loaded machine they can lie far apart, so the sentence names both.

    Args:
        step: the checkpointed step over the plain one (an ``Estimate``: ``value``, ``label``,
            ``describe``).
        vs_floor: the checkpointed step over (plain step + the blocks' forward timed alone),
            an ``Estimate`` (``clear_of``, ``text``).
        medians: the ratio of the checkpointed step's median to the plain step's, > 0.

    Returns:
        A clause, from "for": ``"for a step of 1.80x the plain one by the median of paired
        ratios (...), 1.07x by the ratio of the medians; ..."``.
    """
    medians = check_real("medians", medians, 0.0, lo_open=True)
    side = vs_floor.clear_of(1.0, "x")
    over = f"the checkpointed step over the plain step plus the blocks' forward was {vs_floor.text('x')}"
    head = (f"for a step of {step.point('x')} the plain one by the median of paired ratios "
            f"({step.describe('x')}), {medians:.2f}x by the ratio of the medians; ")
    if side == "above":
        return (f"{head}more than one extra forward timed alone: {over}, its interval above 1x (section 3's "
                "model leaves the rest out: checkpoint's hooks, the recompute inside the backward).")
    if side == "below":
        return f"{head}less than one extra forward timed alone: {over}, its interval below 1x."
    return (f"{head}this run cannot tell whether it took more than one extra forward timed alone: {over}, "
            "its interval holding 1x.")


def gpt2_step_memory(
    n_embd: int, n_layer: int, n_head: int, vocab_size: int, batch: int, seq_len: int,
    precision: str = "fp32", checkpointing: bool = False, attention: str = "sdpa",
) -> dict[str, float]:
    """Predicted bytes of one GPT-2 training step with Adam, by kind (the widget's bar).

    ``precision="fp32"``: fp32 weights, gradients, Adam state and activations
    (:data:`perfkit.memory.RECIPES` ``fp32_adam``). ``"mixed"``: the ZeRO paper's mixed precision, 16-bit
    weights, gradients and activations with fp32 master weights and Adam state
    (``mixed_adam``). ``torch.autocast`` differs from both (fp32 weights, activations
    partly 16-bit); notebook 04 measures how. The position table is sized to ``seq_len``.

    Returns:
        ``{"parameters", "gradients", "optimizer state", "activations", "recompute"}``
        in bytes; ``recompute`` is the backward's peak with checkpointing above ``activations``
        (:attr:`ActivationEstimate.recompute_peak`; 0 without checkpointing).

    Raises:
        ValueError: for an unknown ``precision`` or a bad size (see
            :func:`gpt2_saved_activation_bytes`).
    """
    check_choice("precision", precision, ("fp32", "mixed"))
    # the activations first: their checks name seq_len, which the parameters call n_positions
    act = gpt2_saved_activation_bytes(batch, seq_len, n_embd, n_layer, n_head, vocab_size,
                                      attention, 4 if precision == "fp32" else 2,
                                      checkpointing)
    psi = gpt2_num_params(n_embd, n_layer, vocab_size, seq_len)
    states = zero_model_states(psi, 1, 0, "fp32_adam" if precision == "fp32" else "mixed_adam")
    return {"parameters": states.params, "gradients": states.grads,
            "optimizer state": states.optimizer, "activations": float(act.total),
            "recompute": float(act.recompute_peak)}


# --- activation checkpointing: keep block inputs, recompute the rest -------------------


class CheckpointedBlock(nn.Module):
    """Run ``block`` under ``torch.utils.checkpoint``: keep its inputs, recompute the rest.

    The forward pass saves only what the block receives; the backward pass runs the
    block's forward once more to rebuild its activations, one block at a time.
    """

    def __init__(self, block: nn.Module, use_reentrant: bool = False) -> None:
        super().__init__()
        self.block = check_type("block", block, nn.Module)
        self.use_reentrant = use_reentrant

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, *args, use_reentrant=self.use_reentrant, **kwargs)


def checkpoint_blocks(blocks: nn.ModuleList, use_reentrant: bool = False) -> nn.ModuleList:
    """Wrap every module of ``blocks`` in :class:`CheckpointedBlock`, in place.

    Example: ``checkpoint_blocks(gpt2.transformer.h)``.

    Raises:
        TypeError: if ``blocks`` is not an ``nn.ModuleList``.
    """
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError(f"blocks must be an nn.ModuleList, got {type(blocks).__name__}")
    for i, b in enumerate(blocks):
        if not isinstance(b, CheckpointedBlock):
            blocks[i] = CheckpointedBlock(b, use_reentrant)
    return blocks
