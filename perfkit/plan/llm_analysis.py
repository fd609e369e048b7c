"""llm-analysis (Cheng Li, PyPI ``llm-analysis==0.2.2``) on the published rows, beside the planner.

llm-analysis estimates a training step from FLOPs alone: per micro-batch, ``3x`` a forward's
FLOPs (``+1x``, the head included, with full recomputation; ``+4 b s^2 h L`` with selective), with attention
counted as the full ``4 b s^2 h`` per layer (no causal halving), plus the logits'
``2 b s h V``, divided over the ``tp x pp`` GPUs at ``flops_efficiency x peak``; its memory
model (ZeRO stages, recomputation, FlashAttention, dropout masks) decides whether a
micro-batch fits. It has no pipeline bubble, no tensor-, data-parallel or ZeRO-3
communication and no memory-bound term in the step (its HBM efficiency only enters its
forward-latency breakdown). Here every row's configs are built in code from the
:class:`perfkit.plan.published.PublishedRun` (nothing reaches the Hugging Face hub) and run
at the SAME efficiency the planner fitted for the row's table.

Install beside the course's pins (its metadata asks for ``transformers<5``, which it only
uses for ``AutoConfig`` lookups this module never makes): :data:`LLM_ANALYSIS_INSTALL`.

Usage::

    cmp = compare(megatron_runs() + foundry_runs())
    out = compare_llm_analysis(cmp)
    print(out["overall"]["median"], out["overall"]["planner_median"], out["modelled"])
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from perfkit import stats
from perfkit._checks import check_real, check_type
from perfkit.plan.published import Comparison, PublishedRun

__all__ = ["LLM_ANALYSIS_HBM_EFFICIENCY", "LLM_ANALYSIS_INSTALL", "LLM_ANALYSIS_VERSION",
           "LlmAnalysisPrediction", "compare_llm_analysis", "llm_analysis_inputs", "predict_llm_analysis"]

LLM_ANALYSIS_VERSION = "0.2.2"
# fire: its command line only (0.7 drops the ``pipes`` module Python 3.13 removed); --no-deps:
# its metadata pins transformers<5 and huggingface-hub<0.15, which it needs only for hub lookups
LLM_ANALYSIS_INSTALL = ('pip install "fire==0.7.1" && '
                        f'pip install --no-deps "llm-analysis=={LLM_ANALYSIS_VERSION}"')
# llm-analysis's default (constant.HBM_MEMORY_EFFICIENCY): left as it is, since its training
# step time never reads it (only the forward-latency breakdown does)
LLM_ANALYSIS_HBM_EFFICIENCY = 1.0


def _lla() -> tuple[ModuleType, ModuleType]:
    """llm-analysis's ``analysis`` and ``config`` modules, imported on first use: importing
    them imports transformers (about 2 s), which ``import perfkit`` must not pay."""
    try:
        from llm_analysis import analysis, config
    except ImportError as e:
        raise ImportError(f"llm-analysis is not installed; install it with: {LLM_ANALYSIS_INSTALL} "
                          f"(`make setup` does)") from e
    return analysis, config


@contextmanager
def _quiet(analysis: ModuleType) -> Iterator[None]:
    """Silence llm-analysis's logger (it logs its configs and warnings to stderr at every call)."""
    log = analysis.logger
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        log.setLevel(level)


@dataclass(frozen=True)
class LlmAnalysisPrediction:
    """llm-analysis's prediction for one row.

    Attributes:
        label: the row's label.
        table: the row's table.
        tokens_per_gpu: predicted tokens/s per GPU, ``None`` where llm-analysis cannot model
            the row (``reason`` says why).
        reason: why there is no prediction ("" when there is one).
        reported: the source's tokens/s per GPU.
    """

    label: str
    table: str
    tokens_per_gpu: float | None
    reason: str
    reported: float

    @property
    def error(self) -> float | None:
        """``predicted / reported - 1`` (``None`` without a prediction)."""
        return None if self.tokens_per_gpu is None else self.tokens_per_gpu / self.reported - 1


def _unmodelled(run: PublishedRun) -> str:
    """Why llm-analysis 0.2.2 cannot model ``run`` ("" if it can)."""
    m, lay = run.model, run.layout
    if lay.cp > 1:
        return f"context parallelism (cp={lay.cp}): llm-analysis has none"
    if m.gated or m.ffn != 4 * m.hidden:
        return (f"MLP of width {m.ffn}{' (SwiGLU)' if m.gated else ''}: llm-analysis counts "
                f"16 b s h^2 MLP FLOPs per layer (a 4h GELU MLP) whatever the width")
    if m.act_bytes != 2:
        return f"{8 * m.act_bytes}-bit activations: llm-analysis's training peak is the 16-bit one"
    if run.global_batch % (lay.dp * lay.micro_batch):
        return (f"global batch {run.global_batch} is not a whole number of micro-batches of "
                f"{lay.micro_batch} on {lay.dp} replicas")
    return ""


def llm_analysis_inputs(run: PublishedRun, efficiency: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """llm-analysis's constructor and ``training()`` arguments for ``run``, built in code.

    The GPU from ``run.cluster`` (datasheet peak, HBM bandwidth, memory, NVLink and network
    bandwidth per GPU, NVLink start-up latency); the model from ``run.model`` (heads, key/value
    heads, MLP width, sequence as its maximum); the layout (tp, pp, dp, sequence parallelism,
    ZeRO stage, micro-batch, gradient accumulation = micro-batches per step, recomputation
    level, FlashAttention, dropout); bf16/fp16 weights and activations (``w16a16e16``).

    Args:
        run: a published row.
        efficiency: the matmul efficiency, in (0, 1]: llm-analysis's ``flops_efficiency``.

    Returns:
        ``(init_kwargs, training_kwargs)`` for ``LLMAnalysis(**init).training(**training)``.

    Raises:
        ImportError: when llm-analysis is not installed (the message names :data:`LLM_ANALYSIS_INSTALL`).
        TypeError, ValueError: for a ``run`` that is not a :class:`PublishedRun`, an
            ``efficiency`` outside (0, 1], or a row llm-analysis cannot model (the reason).
    """
    check_type("run", run, PublishedRun)
    check_real("efficiency", efficiency, 0, 1, lo_open=True)
    reason = _unmodelled(run)
    if reason:
        raise ValueError(f"llm-analysis cannot model {run.label!r}: {reason}")
    analysis, config = _lla()
    m, lay, c = run.model, run.layout, run.cluster
    model = config.ModelConfig(name=m.name, num_layers=m.layers, n_head=m.heads, hidden_dim=m.hidden,
                               vocab_size=m.vocab, max_seq_len=m.seq, num_key_value_heads=m.kv,
                               ffn_embed_dim=m.ffn, model_type="gpt")
    # llm-analysis multiplies mem_per_GPU_in_GB by 1024**3: pass GiB so the bytes are the datasheet's
    gpu = config.GPUConfig(name=c.gpu.name, mem_per_GPU_in_GB=c.gpu.memory_bytes / 1024**3,
                           hbm_bandwidth_in_GB_per_sec=c.gpu.hbm_bytes_per_s / 1e9,
                           intra_node_bandwidth_in_GB_per_sec=c.intra.bandwidth / 1e9,
                           intra_node_min_message_latency=c.intra.alpha_s,
                           peak_fp16_TFLOPS=c.gpu.peak_flops / 1e12,
                           inter_node_bandwidth_in_GB_per_sec=c.inter.bandwidth / 1e9)
    par = config.ParallelismConfig(tp_size=lay.tp, pp_size=lay.pp, dp_size=lay.dp,
                                   sp_size=lay.tp if lay.sp else 1)
    init = {"model_config": model, "gpu_config": gpu, "dtype_config": config.DtypeConfig(),
            "parallelism_config": par, "flops_efficiency": efficiency}
    level = {"none": "NONE", "selective": "SELECTIVE", "full": "FULL"}[lay.recompute]
    training = {"batch_size_per_gpu": lay.micro_batch,
                "gradient_accumulation_steps": run.global_batch // (lay.dp * lay.micro_batch),
                "seq_len": m.seq, "activation_recomputation": analysis.ActivationRecomputation[level],
                "ds_zero": analysis.DSZeRO(lay.zero), "flash_attn": m.flash,
                "softmax_dropout": m.dropout, "mlp_gated_linear_units": m.gated,
                # its default saves LayerNorm inputs in fp32; the planner (Korthikanti's count)
                # and MPT's low_precision_layernorm keep them in the activations' dtype
                "layernorm_dtype_bytes": m.act_bytes}
    return init, training


def predict_llm_analysis(run: PublishedRun, efficiency: float) -> LlmAnalysisPrediction:
    """llm-analysis's tokens/s per GPU for ``run`` at ``efficiency`` (quiet).

    Rows it cannot model get ``tokens_per_gpu=None`` and the reason: context parallelism, an
    MLP other than 4h GELU, non-16-bit activations, a batch that is no whole number of
    micro-batches, or a micro-batch its memory model says does not fit (it refuses those:
    ``batch_size_per_gpu must be <= max_batch_size_per_gpu``).

    Args:
        run: a published row.
        efficiency: the planner's fitted efficiency for the row's table, in (0, 1].

    Returns:
        A :class:`LlmAnalysisPrediction`.

    Raises:
        ImportError: when llm-analysis is not installed (the message names :data:`LLM_ANALYSIS_INSTALL`).
        TypeError, ValueError: for a ``run`` that is not a :class:`PublishedRun` or an
            ``efficiency`` outside (0, 1].
    """
    check_type("run", run, PublishedRun)
    check_real("efficiency", efficiency, 0, 1, lo_open=True)
    analysis, _ = _lla()
    reason = _unmodelled(run)
    if reason:
        return LlmAnalysisPrediction(run.label, run.table, None, reason, run.reported_tokens_per_gpu)
    init, training = llm_analysis_inputs(run, efficiency)
    with _quiet(analysis):
        try:
            out = analysis.LLMAnalysis(**init).training(**training)
        except AssertionError as e:  # llm-analysis states its refusals as assertions
            return LlmAnalysisPrediction(run.label, run.table, None, f"llm-analysis refused: {e}",
                                         run.reported_tokens_per_gpu)
    tokens = out["global_batch_size"] * out["seq_len"] / out["latency_per_iter"] / out["total_num_gpus"]
    return LlmAnalysisPrediction(run.label, run.table, tokens, "", run.reported_tokens_per_gpu)


def _summary(triples: list[tuple[float, float, float]]) -> dict[str, float | int | None]:
    """Median and worst ``|error|`` of llm-analysis, of the planner and of the constant-MFU
    baseline over the same rows (``(llm-analysis, planner, baseline)`` per row)."""
    if not triples:
        return {"modelled": 0, "median": None, "worst": None, "planner_median": None, "planner_worst": None,
                "baseline_median": None, "baseline_worst": None}
    theirs, ours, base = ([abs(t[i]) for t in triples] for i in range(3))
    return {"modelled": len(triples), "median": stats.median(theirs), "worst": max(theirs),
            "planner_median": stats.median(ours), "planner_worst": max(ours),
            "baseline_median": stats.median(base), "baseline_worst": max(base)}


def _own_efficiency(cmp: Comparison, table: str, preds: dict[int, LlmAnalysisPrediction]) -> float | None:
    """The efficiency at which llm-analysis's mean log error over the fitted rows of
    ``table``'s GPU type is zero (:func:`perfkit.plan.published.compare`'s rule: one figure
    per GPU type, :func:`~perfkit.plan.published.fit_efficiency`'s criterion), clipped to
    [0.05, 1]: its prediction is proportional to the efficiency (FLOPs over ``efficiency x peak``)."""
    gpu = next(r.run.cluster.gpu.name for r in cmp.rows if r.run.table == table)
    logs = [math.log(preds[i].tokens_per_gpu / r.run.reported_tokens_per_gpu)
            for i, r in enumerate(cmp.rows) if r.fitted and r.run.cluster.gpu.name == gpu
            and preds[i].tokens_per_gpu is not None]
    if not logs:
        return None
    return min(1.0, max(0.05, cmp.efficiency[table] * math.exp(-sum(logs) / len(logs))))


def compare_llm_analysis(cmp: Comparison) -> dict[str, Any]:
    """llm-analysis on ``cmp``'s rows at ``cmp.efficiency[table]``, beside the planner.

    Beside that (the question: the same fitted efficiency), ``"own_fit"`` holds
    llm-analysis refitted on the same fitted rows with the planner's criterion, since its
    efficiency has to absorb every term it leaves out (communication, bubbles, memory-bound
    kernels) while the planner's is a matmul efficiency. Refitted, llm-analysis is a constant
    utilisation in its own FLOP count, which charges full recomputation a whole forward more
    (``4/3`` of the step without it) at the same rate; the constant-MFU baseline of
    :func:`~perfkit.plan.published.compare` is a constant utilisation in each source's count:
    llm-foundry's MFU leaves recomputation out, Megatron-LM's Table 1 counts its forward (four
    passes), and on the A100-80GB type one figure averages rows of both. Where published
    llm-foundry runs with recomputation reach about the MFU
    of those without, the first errs by up to that ``4/3`` between the two kinds of row and the
    second does not: ``own_fit["by_recompute"]`` shows it, table by table.

    Args:
        cmp: :func:`perfkit.plan.published.compare`'s result.

    Returns:
        ``{"version", "hbm_efficiency", "held_out", "modelled", "tables": {table: summary},
        "overall": summary, "rows": [...], "own_fit": {"efficiency", "tables", "overall"}}``:
        a summary holds llm-analysis's ``median`` and ``worst`` ``|error|`` over the held-out
        rows it modelled, the planner's (``planner_median``, ``planner_worst``) and the
        constant-MFU baseline's (``baseline_median``, ``baseline_worst``) over the SAME rows,
        and ``modelled``; ``own_fit["by_recompute"]`` maps each table to the median signed
        error of the refitted llm-analysis per recomputation (``"none"``, ``"full"``) over its
        held-out rows; each row (fitted ones too, flagged) holds ``table``,
        ``label``, ``fitted``, ``reported``, ``planner``, ``llm_analysis`` (tokens/s per GPU
        or ``None``), ``error``, ``planner_error``, ``own_fit`` (tokens/s per GPU at the
        refitted efficiency, or ``None``) and ``reason``.

    Raises:
        ImportError: when llm-analysis is not installed (the message names :data:`LLM_ANALYSIS_INSTALL`).
        TypeError: for a ``cmp`` that is not a :class:`Comparison`.
    """
    check_type("cmp", cmp, Comparison)
    _lla()
    preds = {i: predict_llm_analysis(r.run, cmp.efficiency[r.run.table]) for i, r in enumerate(cmp.rows)}
    own = {t: _own_efficiency(cmp, t, preds) for t in cmp.efficiency}
    rows, same, refit, split = [], {}, {}, {}
    for i, r in enumerate(cmp.rows):
        p, e = preds[i], own[r.run.table]
        q = predict_llm_analysis(r.run, e) if e is not None and p.tokens_per_gpu is not None else None
        rows.append({"table": r.run.table, "label": r.run.label, "fitted": r.fitted,
                     "reported": r.run.reported_tokens_per_gpu, "planner": r.predicted,
                     "llm_analysis": p.tokens_per_gpu, "error": p.error,
                     "planner_error": r.error, "own_fit": q and q.tokens_per_gpu, "reason": p.reason})
        if not r.fitted and p.error is not None:
            same.setdefault(r.run.table, []).append((p.error, r.error, r.baseline_error))
            if q is not None and q.error is not None:
                refit.setdefault(r.run.table, []).append((q.error, r.error, r.baseline_error))
                split.setdefault(r.run.table, {}).setdefault(r.run.layout.recompute, []).append(q.error)

    def summaries(pairs: dict[str, list[tuple[float, ...]]]) -> tuple[dict[str, Any], dict[str, Any]]:
        every = [x for v in pairs.values() for x in v]
        return {t: _summary(pairs.get(t, [])) for t in cmp.efficiency}, _summary(every)

    tables, overall = summaries(same)
    own_tables, own_overall = summaries(refit)
    by_recompute = {t: {rc: stats.median(e) for rc, e in sorted(v.items())} for t, v in split.items()}
    return {"version": LLM_ANALYSIS_VERSION, "hbm_efficiency": LLM_ANALYSIS_HBM_EFFICIENCY,
            "held_out": sum(not r.fitted for r in cmp.rows), "modelled": overall["modelled"],
            "tables": tables, "overall": overall, "rows": rows,
            "own_fit": {"efficiency": own, "tables": own_tables, "overall": own_overall,
                        "by_recompute": by_recompute}}
