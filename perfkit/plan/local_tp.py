"""Tensor parallelism on this machine: the plain GPT that TP splits, what a rank holds, the
all-reduces of its step, and the planner's step and memory with those counts.

:func:`tp_rank_params` and :func:`tp_allreduces` count what :mod:`perfkit.parallel.tp_gpt`
builds and runs, independently of the planner (the course's tiny GPT makes 13 all-reduces per
step: 4 per block, the embedding's, the head's and the vocabulary-parallel loss's 3; its
LayerNorms, position table and row-parallel biases stay whole on every rank), and
:func:`tp_step_time` and :func:`tp_memory` price them; the planner's own terms
(:func:`perfkit.plan.step_time`, :func:`perfkit.plan.memory_model.stage_params`) count the
same, which the tests check call by call. :func:`tp_prediction` fits the one efficiency on
DDP's step of the same model (:mod:`perfkit.jobs.tp_plan` times both in the same rounds) and
prices the all-reduces on the link measured there (:func:`rounds_link`). :func:`tp_step_split`
splits a measured TP step (:mod:`perfkit.jobs.tp_plan`'s ``step`` task) into parts that add up
to it: the all-reduces with every rank present, and the rest, in which a rank computes; the
time one rank waits at a call for the other lies inside that rest, never a third part.

Usage::

    link = rounds_link(rec["link"]["sizes"], rec["link"]["times_s"])     # tp_plan's step task
    p = tp_prediction(local_cluster(hw.cached_limits(), link), median(rec["times_s"]["ddp"]), link)
    print(p.time.total_s, p.time.terms["tensor-parallel"], tp_memory(p.model, p.layout, 16))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfkit import stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta, ring_allreduce_time
from perfkit.memory.model_states import zero_model_states
from perfkit.plan.cluster import Cluster
from perfkit.plan.layout import Layout
from perfkit.plan.local import fit_step_efficiency, ring_step, tiny_gpt2_spec
from perfkit.plan.memory_model import MemoryBreakdown, memory_per_gpu
from perfkit.plan.model import ModelSpec
from perfkit.plan.step_time import StepTime, step_time

__all__ = ["TP_LAYOUTS", "TPPrediction", "plain_gpt_spec", "rounds_link", "tp_allreduces",
           "tp_memory", "tp_prediction", "tp_rank_params", "tp_step_split", "tp_step_time"]

# perfkit.jobs.tp_plan's layouts: TP timed at 2 processes; DP x TP at 4 (2 cores: memory only)
TP_LAYOUTS = {"tp": Layout(tp=2), "dp_tp": Layout(dp=2, tp=2)}


def plain_gpt_spec(vocab_size: int = 1024, block_size: int = 64, n_embd: int = 64,
                   n_layer: int = 2, n_head: int = 2) -> ModelSpec:
    """:class:`perfkit.parallel.gpt.GPT` as a :class:`ModelSpec`: :func:`tiny_gpt2_spec`'s
    block (separate q, k, v of the same sizes), with an untied output layer.

    Raises:
        ValueError: for a size below 1 or ``n_embd`` not divisible by ``n_head``.
    """
    return replace(tiny_gpt2_spec(vocab_size, block_size, n_embd, n_layer, n_head),
                   name="plain GPT", tied=False)


def _check_tp_layout(model: ModelSpec, layout: Layout) -> None:
    check_type("model", model, ModelSpec)
    check_type("layout", layout, Layout)
    if (layout.pp, layout.cp, layout.sp, layout.recompute) != (1, 1, False, "none"):
        raise ValueError(f"layout must be DP x TP alone (pp, cp of 1, no sp, no recompute), got "
                         f"{layout.label()}")
    if model.heads % layout.tp or model.vocab % layout.tp:
        raise ValueError(f"layout.tp ({layout.tp}) must divide the heads ({model.heads}) and the "
                         f"vocabulary ({model.vocab})")


def tp_rank_params(model: ModelSpec, tp: int) -> int:
    """Parameters one rank holds when :func:`perfkit.parallel.tp_gpt.parallelize_gpt` splits
    ``model`` ``tp`` ways: the weights, the column-parallel biases and both vocabulary
    matrices split; the LayerNorms, the position table and the two row-parallel biases per
    block (added after the all-reduce) whole on every rank: the count of
    :func:`perfkit.plan.memory_model.stage_params` at ``pp = 1``.

    Raises:
        TypeError, ValueError: for a ``model`` that is not a ModelSpec, a ``tp`` below 1 or
            one that does not divide the heads and the vocabulary.
    """
    _check_tp_layout(model, Layout(tp=check_int("tp", tp, 1)))
    whole = (model.layers * (2 * model.norm_params + (2 * model.hidden if model.bias else 0))
             + model.norm_params + model.positions * model.hidden)
    return (model.num_params - whole) // tp + whole


def tp_allreduces(model: ModelSpec, layout: Layout) -> dict[str, tuple[int, float]]:
    """The all-reduces of one micro-batch of :func:`~perfkit.parallel.tp_gpt.parallelize_gpt`'s
    model (no SP), as :func:`perfkit.parallel.tp_gpt.tp_traffic` counts them: ``"activations"``,
    4 per block of its ``(b, s, h)`` output and 2 more (the embedding's forward, the head's
    input in backward); ``"loss"``, the vocabulary-parallel cross-entropy's 3 of ``b s`` fp32
    numbers (max, sum of exponentials, target logit).

    Returns:
        ``{name: (calls, bytes of each buffer)}``; empty for ``tp == 1``.

    Raises:
        TypeError, ValueError: for a layout other than DP x TP, or a ``tp`` that does not
            divide the heads and the vocabulary.
    """
    _check_tp_layout(model, layout)
    if layout.tp == 1:
        return {}
    tokens = layout.micro_batch * model.seq
    return {"activations": (4 * model.layers + 2, float(tokens * model.hidden * model.act_bytes)),
            "loss": (3, float(tokens * 4))}


def tp_step_time(model: ModelSpec, layout: Layout, cluster: Cluster, global_batch: int,
                 recipe: str = "fp32_adam", grad_bytes: float = 4.0) -> StepTime:
    """:func:`step_time` with its tensor-parallel term counted as the run: every all-reduce of
    :func:`tp_allreduces`, a 2-step-per-rank ring on the cluster's link, nothing hidden (a
    CPU's cores run the collectives). The planner's own term now counts the same calls (the
    blocks', the embedding's, the head's and the loss's): the two agree, and this function
    checks it call by call.

    Raises:
        TypeError, ValueError: as :func:`step_time` and :func:`tp_allreduces`.
    """
    t = step_time(model, layout, cluster, global_batch, recipe, grad_bytes)
    per_mb = sum(n * ring_allreduce_time(b, layout.tp, cluster.intra)
                 for n, b in tp_allreduces(model, layout).values())
    terms = {**t.terms, "tensor-parallel": max(layout.micro_batches(global_batch), 1) * per_mb}
    total = sum(terms.values())
    others = {k: v for k, v in terms.items() if k != "matmul"}
    limiter = "compute" if terms["matmul"] > total / 2 else max(others, key=others.get)
    k = t.total_s / total   # throughput and MFU scale with 1 / step
    return replace(t, terms=terms, total_s=total, tokens_per_s=t.tokens_per_s * k, mfu=t.mfu * k,
                   hfu=t.hfu * k, limiter=limiter)


def tp_memory(model: ModelSpec, layout: Layout, global_batch: int,
              recipe: str = "fp32_adam") -> MemoryBreakdown:
    """:func:`memory_per_gpu` with the model states of :func:`tp_rank_params` (ZeRO's formula
    over ``dp``); the activations are the planner's (Korthikanti et al.'s count).

    Raises:
        TypeError, ValueError: as :func:`memory_per_gpu` and :func:`tp_rank_params`.
    """
    _check_tp_layout(model, layout)
    mem = memory_per_gpu(model, layout, global_batch, recipe)
    st = zero_model_states(tp_rank_params(model, layout.tp), layout.dp, layout.zero, recipe)
    return replace(mem, params=st.params, grads=st.grads, optimizer=st.optimizer)


def rounds_link(sizes: Sequence[float], times: Sequence[Sequence[float]]) -> AlphaBeta:
    """One ring step of the link, from 2-process all-reduces of ``sizes`` bytes timed in a
    job's rounds (``times[i]``: the seconds of size ``i``, one per round).

    Each size counts at its mean, not its median: a step pays every all-reduce it makes, and
    on a shared machine some of them wait for a rank the OS took off its core for a time
    slice (milliseconds against a fraction of one); a median over the rounds hides those
    calls, a sum of calls does not. The means give the ring step as :func:`local_link`'s
    sweep does (:func:`perfkit.plan.local.ring_step`).

    Raises:
        TypeError, ValueError: for sizes and times that do not pair up, fewer than two
            distinct sizes, or a time that is not > 0.
    """
    check_items("sizes", sizes)
    rows = check_items("times", times)
    if len(rows) != len(sizes):
        raise ValueError(f"times must hold one list per size ({len(sizes)}), got {len(rows)}")
    means = [sum(check_items(f"times[{i}]", r)) / len(r) for i, r in enumerate(rows)]
    return ring_step(list(sizes), means)


@dataclass(frozen=True)
class TPPrediction:
    """TP's step on this machine: the model, the efficiency fitted on DDP's step, the link,
    the layout (the global batch whole on every rank) and :func:`tp_step_time`'s prediction."""

    model: ModelSpec
    efficiency: float
    link: AlphaBeta
    layout: Layout
    time: StepTime


def tp_prediction(cluster: Cluster, ddp_step_s: float, link: AlphaBeta,
                  model: ModelSpec | None = None, batch: int = 8) -> TPPrediction:
    """TP over the cluster's processes with DDP's global batch (``processes * batch``
    sequences, whole on every rank), predicted from DDP's step of the same model measured in
    the same rounds (the one fitted figure) and the link measured there.

    Args:
        cluster: this machine (:func:`perfkit.plan.cluster.local_cluster`); its link is
            replaced by ``link``.
        ddp_step_s: DDP's measured step, s (> 0), ``batch`` sequences per process.
        link: one ring step (:func:`rounds_link`).
        model: the model (default :func:`plain_gpt_spec`).
        batch: sequences per process under DDP (>= 1).

    Returns:
        A :class:`TPPrediction`.

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or out of range.
    """
    check_type("cluster", cluster, Cluster)
    check_real("ddp_step_s", ddp_step_s, 0, lo_open=True)
    check_type("link", link, AlphaBeta)
    model, n = model or plain_gpt_spec(), cluster.gpus_per_node
    gb = n * check_int("batch", batch, 1)
    here = replace(cluster, intra=link, inter=link)
    eff = fit_step_efficiency(model, Layout(dp=n, micro_batch=batch), here, gb, ddp_step_s)
    lay = Layout(tp=n, micro_batch=gb)
    return TPPrediction(model, eff, link, lay, tp_step_time(model, lay, here.with_efficiency(eff), gb))


def tp_step_split(step_s: Sequence[float], compute_s: Sequence[float], transfer_s: Sequence[float],
                  skew_s: Sequence[float], calls: int, comm_pred_s: float, compute_pred_s: float) -> str:
    """The TP step's median in parts that add up: the all-reduces with both ranks present
    (``transfer_s``), the rest, and against the same step with its all-reduces skipped
    (``compute_s``) how much longer that rest ran; then the model's charge for the calls.

    Args:
        step_s, compute_s, transfer_s, skew_s: per round, seconds (``skew_s``: from the first
            rank's arrival at each call to the last one's, summed over the calls).
        calls: all-reduces per step.
        comm_pred_s, compute_pred_s: the model's charge for the calls and for the rest.
    """
    for name, xs in (("step_s", step_s), ("compute_s", compute_s), ("transfer_s", transfer_s),
                     ("skew_s", skew_s)):
        check_items(name, xs)
    ms = {k: stats.median(v) * 1e3 for k, v in (("step", step_s), ("alone", compute_s),
                                                  ("present", transfer_s), ("apart", skew_s))}
    step, alone, present, apart = ms["step"], ms["alone"], ms["present"], ms["apart"]
    rest, pred = step - present, comm_pred_s * 1e3
    longer = rest - alone
    out = (f"Of the {step:.1f} ms step, its {calls} all-reduces held both ranks {present:.1f} ms; in the "
           f"other {rest:.1f} ms a rank computed or waited for the other")
    if apart <= rest:
        out += (f" (one rank's {apart:.1f} ms of waiting for the other lie inside those, beside the other's "
                "compute: no third part)")
    out += (f". With its all-reduces skipped the step took {alone:.1f} ms (predicted "
            f"{compute_pred_s * 1e3:.1f}): ")
    if longer >= 0:
        out += (f"the all-reduces cost the step {present:.1f} ms of transfer and {longer:.1f} ms more "
                "outside them (longer compute and waiting for the other rank, which this split does not "
                f"tell apart), {present + longer:.1f} ms in all")
    else:
        out += (f"the compute inside the TP step took {-longer:.1f} ms less (the two steps met different "
                f"load), so only the transfer's {present:.1f} ms can be set against the model")
    near = abs(round(pred, 1) - round(present, 1)) <= 0.1 + 1e-9  # one step of the printed 0.1 ms
    verdict = (f"as printed, within 0.1 ms of the transfer's {present:.1f} ms" + (
               f", and nothing for the {longer:.1f} ms outside them" if longer >= 0.05 else "") if near
               else "less than the transfer alone" if pred < present
               else "more than the transfer" if longer < 0
               else "more than both" if pred > present + longer
               else "more than the transfer and less than both, so it covers part of the time outside them")
    return out + f". The model charges them {pred:.1f} ms: {verdict}." + _parts_offset(
        alone, compute_pred_s * 1e3, present + longer if longer >= 0 else None, pred)


def _parts_offset(alone: float, alone_pred: float, comm: float | None, comm_pred: float) -> str:
    """Each part's error, predicted less measured (ms), where the parts add up to the step, and
    whether they offset: a step predicted within its tolerance by two errors of opposite sign
    does not validate either part. ``""`` where the parts do not add up (``comm`` None)."""
    if comm is None or alone <= 0 or comm <= 0:
        return ""
    e_c, e_m = alone_pred - alone, comm_pred - comm
    said = (f" Part by part, predicted less measured: the compute {e_c:+.1f} ms ({e_c / alone:+.0%}), the "
            f"all-reduces {e_m:+.1f} ms ({e_m / comm:+.0%})")
    if round(e_c, 1) * round(e_m, 1) < 0:
        return (said + f": errors of opposite sign, which offset: the step's {e_c + e_m:+.1f} ms is smaller "
                "than the larger part's, so the step's verdict tests their sum, not each part.")
    return said + f"; the step's {e_c + e_m:+.1f} ms is their sum."
