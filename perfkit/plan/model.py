"""A transformer's shape for the planner: parameters, FLOPs per token and saved activations.

A :class:`ModelSpec` is what the planner needs to know of a decoder-only transformer: layers,
width, heads (and key/value heads for grouped-query attention), MLP width (GELU, or SwiGLU's
three matrices as in Llama), vocabulary and sequence length. Model FLOPs follow the PaLM
count (:func:`perfkit.compute.flops.gpt_train_flops`: ``6 N + 12 L h s`` per token), the FLOPs
the GPUs run split the weight matmuls from what a fused causal attention kernel runs
(``7 L h s``, FlashAttention-2's count); activations
follow Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*
(MLSys 2023), section 4, term by term, so that SwiGLU, grouped-query attention, a fused
attention kernel (no ``s x s`` scores kept) and models without dropout get their own terms.

Usage::

    m = ModelSpec("gpt-1.7b", layers=24, hidden=2304, heads=18, ffn=4 * 2304, vocab=51200, seq=2048)
    print(m.num_params, m.model_flops_per_token(), m.attention_flops_per_token("full"))
    print(m.activation_bytes_per_layer(micro_batch=1, tp=8, sp=True, recompute="selective"))
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from perfkit._checks import check_choice, check_int, check_type
from perfkit.compute.flops import gpt_train_flops

__all__ = ["RECOMPUTE", "ModelSpec", "model_from_config"]

# "op": torchtitan's op-level selective checkpointing (ModelSpec.op_matmuls), beside Korthikanti
# et al.'s selective recomputation (attention's scores only) and full recomputation
RECOMPUTE = ("none", "selective", "full", "op")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape (what the planner's formulas need).

    Attributes:
        name: a label.
        layers, hidden, heads, ffn, vocab, seq: ``L``, ``h``, ``a``, the MLP width ``f``,
            ``V`` and the sequence length ``s``.
        kv_heads: key/value heads (grouped-query attention); ``None`` means ``heads``.
        gated: SwiGLU MLP (three ``h x f`` matrices, Llama) instead of GELU (two).
        dropout: dropout after attention and MLP (GPT-3/Megatron 2021 kept masks of it).
        flash: a fused attention kernel that keeps no ``a s^2`` scores for backward.
        tied: the output layer shares the token embedding's weights.
        positions: rows of a learned position embedding (0 for rotary or ALiBi).
        bias: the linear layers have biases (GPT-2; Llama and MPT have none).
        act_bytes: bytes per activation element (2: bf16/fp16).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq: int
    kv_heads: int | None = None
    gated: bool = False
    dropout: bool = False
    flash: bool = True
    tied: bool = True
    positions: int = 0
    bias: bool = False
    act_bytes: int = 2
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        for k in ("layers", "hidden", "heads", "ffn", "vocab", "seq"):
            check_int(k, getattr(self, k), 1)
        check_int("positions", self.positions, 0)
        check_choice("act_bytes", self.act_bytes, (1, 2, 4))
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        kv = check_int("kv_heads", self.kv, 1)
        if self.heads % kv:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv_heads ({kv})")
        for k in ("gated", "dropout", "flash", "tied", "bias"):
            check_type(k, getattr(self, k), bool)

    @cached_property
    def kv(self) -> int:
        """Key/value heads."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @cached_property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values): ``kv_heads * hidden / heads``."""
        return self.kv * self.hidden // self.heads

    # --- parameters and FLOPs -------------------------------------------------------------

    @cached_property
    def norm_params(self) -> int:
        """One norm's parameters: LayerNorm's weight and bias ``2h``; Llama-style (gated)
        models use RMSNorm, a weight only, ``h``."""
        return self.hidden if self.gated else 2 * self.hidden

    @cached_property
    def layer_params(self) -> int:
        """Parameters of one block: Q and O ``2h^2``, K and V ``2 h kv_dim``, the MLP
        ``2 h f`` (``3 h f`` gated), two norms and, where the model has them, biases."""
        h, f = self.hidden, self.ffn
        return (2 * h * h + 2 * h * self.kv_dim + (3 if self.gated else 2) * h * f
                + 2 * self.norm_params + self.bias_params)

    @cached_property
    def bias_params(self) -> int:
        """Biases of one block's linear layers: Q, K, V ``h + 2 kv_dim``, the output ``h``,
        the MLP ``f`` (``2f`` gated) and ``h`` (GPT-2: ``9h``); 0 without biases."""
        f = self.ffn * (2 if self.gated else 1)
        return 3 * self.hidden + 2 * self.kv_dim + f if self.bias else 0

    @cached_property
    def embedding_params(self) -> int:
        """Token (and position) embedding, and the output layer when it is not tied."""
        return (self.vocab * (1 if self.tied else 2) + self.positions) * self.hidden

    @cached_property
    def num_params(self) -> int:
        """All parameters (final norm included)."""
        return self.layers * self.layer_params + self.embedding_params + self.norm_params

    @cached_property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: blocks and the output layer
        (embedding lookups do no FLOPs)."""
        per_layer = self.layer_params - 2 * self.norm_params - self.bias_params
        return self.layers * per_layer + self.vocab * self.hidden

    @lru_cache(maxsize=1 << 16)  # noqa: B019 -- specs are frozen; a search asks thousands of times
    def model_flops_per_token(self) -> float:
        """Model FLOPs of one trained token, PaLM's count: ``6 N + 12 L h s``
        (:func:`perfkit.compute.flops.gpt_train_flops`; llm-foundry's MFU uses it too)."""
        return float(gpt_train_flops(self.matmul_params, self.layers, self.hidden, self.seq, 1))

    @lru_cache(maxsize=1 << 16)  # noqa: B019
    def dense_flops_per_token(self, recompute: str = "none", early_stop: bool = False) -> float:
        """FLOPs of the weight matmuls per trained token: ``6 N`` (forward ``2 N``, backward
        ``4 N``); full recomputation runs the blocks' forward again, ``8`` per block parameter,
        but not the output layer's (checkpointing wraps blocks: Megatron's eq. 3 counts the
        logits ``6 h V``, and FSDP's checkpoint wrapper wraps each block). With ``early_stop``
        (PyTorch's non-reentrant checkpoint) the rerun leaves out
        :attr:`early_stop_skipped_params`."""
        check_choice("recompute", recompute, RECOMPUTE)
        check_type("early_stop", early_stop, bool)
        if recompute == "op":  # the forward of the matmuls op-level checkpointing does not keep
            rerun = self.layers * sum(i * o for i, o in self.op_matmuls()[1])
            return 6.0 * self.block_matmul_params + 2.0 * rerun + self.head_flops_per_token
        if recompute != "full":
            return 6.0 * self.block_matmul_params + self.head_flops_per_token
        rerun = self.block_matmul_params - (self.early_stop_skipped_params if early_stop else 0)
        return 6.0 * self.block_matmul_params + 2.0 * rerun + self.head_flops_per_token

    @property
    def early_stop_skipped_params(self) -> int:
        """Weights whose forward matmul an early-stopping recomputation does not rerun, all
        layers: each block's MLP down-projection (``f h``), its last matmul, whose output
        backward never needs; none when a dropout after it keeps a mask from that output.
        ``tests/unit/test_plan.py`` counts PyTorch's recomputed FLOPs against it."""
        return 0 if self.dropout else self.layers * self.ffn * self.hidden

    def op_matmuls(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """A block's weight matmuls as ``(in, out)`` widths: those whose outputs torchtitan's
        op-level selective checkpointing keeps, and those it reruns in backward.

        Its policy (torchtitan ``_apply_ac_to_transformer_block``, ``_custom_policy``) saves the
        output of every op in its save list (``aten.mm``, the SDPA kernels, ``reduce_scatter``)
        "except every second mm", counted per block: of Q, K, V, O, the MLP's up (and gate) and
        down matmuls in forward order it keeps the 1st, 3rd, 5th and 7th (Q, V, the MLP's first
        matmul and, gated, its down-projection) and reruns the others (K, O, the gate or the
        down-projection). Everything outside the list (norms, rotary, the MLP's activation,
        unfused attention) is rerun from those and the block's input."""
        h, k, f = self.hidden, self.kv_dim, self.ffn
        mlp = [(h, f), (h, f), (f, h)] if self.gated else [(h, f), (f, h)]
        order = [(h, h), (h, k), (h, k), (h, h), *mlp]
        return order[0::2], order[1::2]

    @cached_property
    def block_matmul_params(self) -> int:
        """:attr:`matmul_params` of the blocks alone (the output layer's ``h V`` left out)."""
        return self.matmul_params - self.vocab * self.hidden

    @cached_property
    def head_flops_per_token(self) -> float:
        """The output layer's FLOPs per trained token: ``6 h V``, never recomputed."""
        return 6.0 * self.vocab * self.hidden

    @lru_cache(maxsize=1 << 16)  # noqa: B019
    def attention_flops_per_token(self, recompute: str = "none") -> float:
        """FLOPs the attention kernels run per token (scores ``Q K^T`` and ``P V``), all layers.

        Unfused attention (Megatron 2021: a batched matmul, a masked softmax, another) computes
        the whole ``s x s`` square: ``4 h s`` per layer forward, twice that backward, and the
        forward again under selective or full recomputation. A fused causal kernel
        (FlashAttention) skips the tiles above the diagonal, so it runs half the square, and its
        backward recomputes ``Q K^T`` from the saved log-sum-exp: 2.5x the forward's FLOPs
        (Dao 2023, FlashAttention-2, section 4.1, which counts both the same way). That is
        ``(2 + 5) h s`` per layer, ``2 h s`` more under full recomputation, and nothing more
        under selective recomputation (the kernel never kept the scores).
        """
        return sum(self.attention_flops_split(recompute))

    def attention_flops_split(self, recompute: str = "none") -> tuple[float, float]:
        """:meth:`attention_flops_per_token` as (forward passes, backward pass): the forward's
        FLOPs (twice with recomputation that reruns it) and the backward's. A fused kernel's
        passes run at different shares of the peak
        (:attr:`perfkit.plan.cluster.Cluster.attention_backward_efficiency`)."""
        check_choice("recompute", recompute, RECOMPUTE)
        fwd = 4.0 * self.layers * self.hidden * self.seq  # the whole square, Q K^T and P V
        if self.flash:
            half = fwd / 2  # causal: only the tiles on or below the diagonal
            return half * (2 if recompute == "full" else 1), 2.5 * half
        return fwd * (2 if recompute != "none" else 1), 2 * fwd

    def hardware_flops_per_token(self, recompute: str = "none", early_stop: bool = False) -> float:
        """FLOPs the GPUs run per token: :meth:`dense_flops_per_token` +
        :meth:`attention_flops_per_token`. For an unfused model this is PaLM's count plus
        what recomputation adds (``2 N + 4 L h s`` full, ``4 L h s`` selective); a fused
        causal kernel runs ``7 L h s`` of PaLM's ``12 L h s``."""
        return self.dense_flops_per_token(recompute, early_stop) + self.attention_flops_per_token(recompute)

    def megatron_flops_per_token(self) -> float:
        """Narayanan et al. (2021), eq. 3, per token: ``96 l h^2 (1 + s/6h + V/16lh)``, with
        full recomputation counted (four passes); their Table 1's TFLOP/s use it."""
        n, h, s, v = self.layers, self.hidden, self.seq, self.vocab
        return 96 * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))

    def megatron_model_flops_per_token(self) -> float:
        """:meth:`megatron_flops_per_token` without the recomputed forward (three passes):
        ``72 l h^2 (1 + s/6h + V/12lh)``, Narayanan et al. (2021), appendix; with ``N = 12 l h^2 + V h``
        it is PaLM's ``6 N + 12 l h s``, the count MFU uses."""
        n, h, s, v = self.layers, self.hidden, self.seq, self.vocab
        return 72 * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))

    # --- activations: Korthikanti et al. 2022, section 4 ----------------------------------

    @lru_cache(maxsize=1 << 16)  # noqa: B019
    def activation_bytes_per_layer(self, micro_batch: int, tp: int = 1, sp: bool = False,
                                   recompute: str = "none", cp: int = 1) -> float:
        """Bytes one block keeps for backward, per GPU.

        Korthikanti et al. count, for GPT with ``b`` sequences of ``s`` tokens in 16-bit:
        attention ``11 sbh + 5 a s^2 b``, MLP ``19 sbh``, norms ``4 sbh``: ``34 sbh + 5 a s^2 b``.
        Term by term (bytes): QKV input ``2sbh``, Q and K ``2sbh + 2 sb k``, scores' softmax
        ``2as^2b``, its dropout mask ``as^2b`` and output ``2as^2b``, V ``2 sb k``, the
        output projection's input ``2sbh``, two dropout masks ``sbh`` each; MLP input
        ``2sbh`` and ``2 sbf`` per ``f``-wide tensor it keeps (GELU: its input and output;
        SwiGLU: gate, its SiLU, up, and the product: four); norms' inputs ``2 sbh`` each
        (``k`` is the key width, ``h`` without grouped-query attention). Tensor parallelism
        splits what lies between its collectives (``/t``); the norms' inputs, the two linear
        inputs and the dropout masks (``10 sbh``) stay whole unless sequence parallelism
        splits them too. Selective recomputation drops the ``s^2`` terms; a fused attention
        kernel never keeps them (it keeps its output and a log-sum-exp, ``4 a s b`` bytes in
        fp32, with ``2sbh`` more for its output). Full recomputation keeps the block's input,
        ``2 sbh`` (``/t`` with sequence parallelism). Op-level checkpointing (``"op"``,
        :meth:`op_matmuls`) keeps the block's input (``/t`` with SP), the kept matmuls' outputs
        (``/t``; a gated MLP's down-projection output is the row-parallel matmul's partial sum
        before its reduction: whole) and a fused attention kernel's output and log-sum-exp
        (unfused attention is rerun). Context parallelism divides ``s``.

        Args:
            micro_batch: ``b``, sequences per micro-batch (>= 1).
            tp: tensor-parallel degree ``t`` (>= 1).
            sp: sequence parallelism (splits the ``10 sbh`` by ``t``).
            recompute: ``"none"``, ``"selective"``, ``"full"`` or ``"op"``.
            cp: context-parallel degree (divides the sequence each GPU holds).

        Returns:
            Bytes per GPU (a float: ``s/cp`` may not be whole in a sweep).

        Raises:
            ValueError: for a size below 1 or an unknown ``recompute``.
        """
        check_int("micro_batch", micro_batch, 1)
        check_int("tp", tp, 1)
        check_int("cp", cp, 1)
        check_type("sp", sp, bool)
        check_choice("recompute", recompute, RECOMPUTE)
        d = self.act_bytes / 2  # the paper counts 2-byte elements
        s, b, h, f, a, k = self.seq / cp, micro_batch, self.hidden, self.ffn, self.heads, self.kv_dim
        sbh = s * b * h
        if recompute == "full":
            return d * 2 * sbh / (tp if sp else 1)
        if recompute == "op":
            outs = [o for _, o in self.op_matmuls()[0]]
            row = outs.pop() if self.gated else 0  # the down-projection's output, whole
            kept = sum(2 * s * b * o for o in outs) + (2 * sbh if self.flash else 0)
            lse = 4 * a * s * b if self.flash else 0.0  # bytes, fp32
            return d * (2 * sbh / (tp if sp else 1) + 2 * s * b * row + kept / tp) + lse / tp
        masks = 2 * sbh if self.dropout else 0  # bytes: two 1-byte dropout masks
        whole = 4 * sbh + 2 * sbh + 2 * sbh + masks  # two norms' inputs, QKV and MLP inputs
        split = (2 * sbh + 2 * s * b * k) + 2 * s * b * k + 2 * sbh  # Q, K; V; proj input
        split += (4 if self.gated else 2) * 2 * s * b * f  # the MLP's f-wide tensors
        scores = 0.0  # bytes, whatever the element size of the rest
        if self.flash:
            split += 2 * sbh  # the kernel's output
            scores = 4 * a * s * b  # its log-sum-exp, fp32
        elif recompute == "none":  # softmax output; with dropout its output and 1-byte mask
            scores = (2 * d + ((2 * d + 1) if self.dropout else 0)) * a * s * s * b
        return d * (whole / (tp if sp else 1) + split / tp) + scores / tp

    def logits_bytes(self, micro_batch: int, tp: int = 1, cp: int = 1) -> float:
        """The fp32 logits the cross-entropy keeps on the last stage: ``4 s b V / t`` bytes."""
        return 4 * self.seq / cp * micro_batch * self.vocab / tp

    def with_seq(self, seq: int) -> ModelSpec:
        """The same model at another sequence length."""
        return replace(self, seq=check_int("seq", seq, 1))


_KEYS = {  # ModelSpec field: config names, first match wins (GPT-2, Llama/Mistral, MPT, GPT-NeoX)
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "ffn": ("intermediate_size", "n_inner", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "seq": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
    "kv_heads": ("num_key_value_heads",),
}


def model_from_config(config: Any, seq: int | None = None, name: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a transformers config object, its dict, or a ``config.json`` path.

    Llama-style configs (``hidden_act`` ``silu`` with an ``intermediate_size``:
    Llama, Mistral, Qwen2) get a gated MLP and their ``num_key_value_heads``; GPT-2 and MPT
    configs a GELU MLP of ``n_inner`` (default ``4 h``, MPT: ``expansion_ratio h``) and GPT-2
    its learned positions. Nothing is downloaded.

    Args:
        config: a ``transformers.PretrainedConfig``, a mapping, or a path to a JSON file.
        seq: the training sequence length (default: the config's maximum).
        name: a label (default: the config's ``model_type`` or the file name).

    Returns:
        A :class:`ModelSpec`.

    Raises:
        TypeError: for a ``config`` of another kind.
        ValueError: for a file that is not JSON, or a config missing layers, width or heads.
    """
    source = ""
    if isinstance(config, str | os.PathLike):
        path = Path(config)
        try:
            cfg = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"config must be a readable JSON file, got {str(path)!r}: {e}") from e
        source, name = str(path), name or path.stem
    elif hasattr(config, "to_dict"):
        cfg = config.to_dict()
    elif isinstance(config, dict):
        cfg = dict(config)
    else:
        raise TypeError(f"config must be a transformers config, a dict or a JSON path, got "
                        f"{type(config).__name__}")
    got: dict[str, Any] = {}
    for fld, names in _KEYS.items():
        got[fld] = next((cfg[n] for n in names if cfg.get(n) is not None), None)
    missing = [k for k in ("layers", "hidden", "heads", "vocab") if got[k] is None]
    if missing:
        raise ValueError(f"config lacks {missing} (looked for {[_KEYS[k] for k in missing]})")
    h = got["hidden"]
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "gelu")))
    gated = act in ("silu", "swiglu") and "intermediate_size" in cfg
    ffn = got["ffn"] or int(cfg.get("expansion_ratio", 4) * h)
    gpt2 = cfg.get("model_type") == "gpt2"
    return ModelSpec(
        name=name or str(cfg.get("model_type", "model")), layers=got["layers"], hidden=h,
        heads=got["heads"], ffn=ffn, vocab=got["vocab"], seq=seq or got["seq"] or 2048,
        kv_heads=got["kv_heads"], gated=gated, dropout=False, flash=True,
        tied=bool(cfg.get("tie_word_embeddings", True)),
        positions=int(got["seq"] or 0) if gpt2 else 0, bias=gpt2, source=source)
