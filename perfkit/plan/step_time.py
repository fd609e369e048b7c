"""Step time of a layout on a cluster, term by term, each from the link it crosses.

One micro-batch on one pipeline stage costs its matmul FLOPs at the cluster's achievable
rate (attention's at its kernel's own, forward and backward), the memory-bound work around
them (each saved activation byte written and read forward and back, :data:`MEM_PASSES`, and
the last stage's cross-entropy kernel by kernel, :func:`loss_passes`, at HBM bandwidth),
tensor parallelism's four all-reduces per block (six with full recomputation; sequence
parallelism's reduce-scatter + all-gather pairs move the same bytes), the embedding's and the
output layer's, and the vocabulary-parallel loss's three small ones and the part of
context parallelism's K/V ring that attention's own compute does not hide. The pipeline
runs ``m + (p - 1) / v`` such slots (the bubble, Narayanan et al. 2021), plus the
stage-to-stage sends. Data parallelism's gradient all-reduce (ZeRO 1-2: reduce-scatter +
all-gather, the same bytes on a ring; on gloo a reduce-scatter is a whole all-reduce,
``Cluster.full_reduce_scatter``), in 25 MiB buckets (ZeRO-2: block by block, as FSDP wraps
them, ``Cluster.zero2_per_block``), hides behind the last micro-batch's backward; ZeRO-2,
whose ranks keep only their gradient shard, reduce-scatters every micro-batch's gradients
(DeepSpeed's stage 2 and FSDP's ``SHARD_GRAD_OP`` under accumulation; ZeRO-1 keeps whole
gradients and reduces them once); ZeRO-3 gathers weights twice and reduce-scatters gradients
for every micro-batch, block by block.
What of these collectives hides behind compute follows the framework
(``cluster.dp_overlap``, :mod:`perfkit.plan.overlap`): chunk by chunk beside the last
micro-batch's backward (reductions) and the first's forward (gathers; ZeRO-3: every
micro-batch's), one chunk always exposed, never more hidden than that compute; nothing on a
CPU, whose cores run the collectives. ``cluster.sharded_hidden``, where given, overrides it for
ZeRO-2 and ZeRO-3 with a share of the compute. Collectives are rings
(:func:`perfkit.comm.alpha_beta.ring_allreduce_time`) inside a node on NVLink and across nodes
on the network, hierarchically where a group spans both. The optimizer step streams the local
shard's states once.

Usage::

    t = step_time(model, layout, named_cluster("a100-80gb", efficiency=0.55), global_batch=512)
    print(t.total_s, t.mfu, t.limiter, t.terms)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfkit._checks import check_int, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta, ring_allreduce_time
from perfkit.comm.traffic import ring_factor
from perfkit.memory.model_states import RECIPES, StateRecipe
from perfkit.plan.cluster import Cluster
from perfkit.plan.layout import Layout
from perfkit.plan.memory_model import BUCKET_BYTES, stage_params
from perfkit.plan.model import ModelSpec
from perfkit.plan.overlap import exposed_time

if TYPE_CHECKING:
    from perfkit.plan.local import CollectiveCost

__all__ = ["MEM_PASSES", "StepTime", "flags_sent", "group_allreduce_time", "loss_passes", "ring_priced",
           "step_time", "utilisation_words"]

MEM_PASSES = 4  # each saved byte: written forward, read backward, its gradient written and read


def loss_passes(act_bytes: int) -> float:
    """HBM traffic of the cross-entropy, in passes over its fp32 logits (``4 s b V`` bytes).

    PyTorch's ``cross_entropy`` on fp32 logits, kernel by kernel: log-softmax reads the logits
    and writes its output (2 passes); in backward, ``nll_loss`` writes the dense gradient (1),
    log-softmax's backward reads its output and that gradient and writes its own (3): 6
    passes. A 16-bit model adds the casts, up (read ``act_bytes``, write 4 per logit) and back
    down for the gradient: ``2 (act_bytes + 4) / 4`` passes, 3 for bf16. The head's matmul
    reads and writes its 16-bit tensors as every matmul does, at the matmul's rate.

    Args:
        act_bytes: bytes per activation element of the model (1, 2 or 4).

    Returns:
        Passes over ``4 s b V`` bytes: 9 for a 16-bit model, 6 for an fp32 one.
    """
    return 6.0 + (2 * (act_bytes + 4) / 4 if act_bytes < 4 else 0.0)


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds of one optimizer step by term, and what they give.

    Attributes:
        terms: seconds on the critical path by name (they add up to ``total_s``).
        total_s: the step.
        tokens_per_s: ``global_batch * seq / total_s``.
        mfu: model FLOPs (PaLM's count, no recomputation) per second over the GPUs' peak.
        hfu: the FLOPs run (recomputation included) over the peak.
        limiter: the largest term other than the matmuls, or ``"compute"`` if the matmuls
            take more than half the step.
    """

    terms: dict[str, float]
    total_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    limiter: str
    detail: dict[str, float] = field(default_factory=dict)

    @property
    def collectives_s(self) -> float:
        """Seconds of the terms a collective or a send pays (:data:`perfkit.plan.COLLECTIVE_TERMS`)."""
        from perfkit.plan.readings import COLLECTIVE_TERMS  # readings imports this module's importers

        return sum(v for k, v in self.terms.items() if k in COLLECTIVE_TERMS)

    def terms_beside(self, best: StepTime) -> list[str]:
        """The two terms that cost this step most against ``best`` (each above 0.5 % of its step),
        then, where some terms cost less, "offset by" the two that cost least: a term larger than
        the whole difference is named with what offsets it (ZeRO-3 collectives +0.28 s, offset
        by tensor-parallel -0.205 s, on a step 0.075 s slower)."""
        check_type("best", best, StepTime)
        diffs = sorted(((self.terms.get(k, 0.0) - best.terms[k], k) for k in best.terms), reverse=True)
        worse = [f"{k} +{d:.3g} s" for d, k in diffs if d > 0.005 * best.total_s][:2]
        better = [f"{k} {d:+.3g} s" for d, k in diffs[::-1] if d < -0.005 * best.total_s][:2]
        return worse + (["offset by " + ", ".join(better)] if worse and better else [])

    def tokens_per_s_per_gpu(self, gpus: int) -> float:
        """Throughput per GPU."""
        return self.tokens_per_s / check_int("gpus", gpus, 1)


def group_allreduce_time(nbytes: float, size: int, stride: int, cluster: Cluster) -> float:
    """A ring all-reduce of ``nbytes`` over ``size`` ranks spaced ``stride`` apart.

    Ranks ``stride`` apart fill ``k = gpus_per_node // stride`` slots of a node (at least 1):
    a group inside one node is one NVLink ring; a group across nodes reduces inside each
    node first and all-reduces ``1/k`` of the buffer across the nodes (NCCL's rings put one
    network hop per node on each of ``k`` parallel rings).

    Returns:
        Seconds (0 for ``size == 1``).
    """
    if size <= 1 or nbytes <= 0:
        return 0.0
    k = max(1, min(size, cluster.gpus_per_node // stride))
    nodes = math.ceil(size / k)
    inside = ring_allreduce_time(nbytes, k, cluster.intra) if k > 1 else 0.0
    across = ring_allreduce_time(nbytes / k, nodes, cluster.inter) if nodes > 1 else 0.0
    return inside + across


def _link(span: int, cluster: Cluster) -> AlphaBeta:
    return cluster.intra if span <= cluster.gpus_per_node else cluster.inter


def step_time(model: ModelSpec, layout: Layout, cluster: Cluster, global_batch: int,
              recipe: str | StateRecipe = "mixed_adam", grad_bytes: float = 2.0) -> StepTime:
    """Predicted step time of ``layout`` (checked by the caller) on ``cluster``.

    Args:
        model: the :class:`ModelSpec`.
        layout: the :class:`Layout`.
        cluster: the :class:`Cluster` (its ``efficiency`` sets the matmul rate).
        global_batch: sequences per optimizer step (>= 1).
        recipe: the model-state recipe (a :data:`perfkit.memory.model_states.RECIPES` name or
            a :class:`~perfkit.memory.model_states.StateRecipe`, e.g. a framework's,
            :mod:`perfkit.plan.framework`): its bytes set the gathered weights and the
            optimizer's traffic.
        grad_bytes: bytes per gradient element in the data-parallel reduction.

    Returns:
        A :class:`StepTime`.

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or out of range.
    """
    check_type("model", model, ModelSpec)
    check_type("layout", layout, Layout)
    check_type("cluster", cluster, Cluster)
    check_int("global_batch", global_batch, 1)
    if not isinstance(recipe, StateRecipe) and (not isinstance(recipe, str) or recipe not in RECIPES):
        raise ValueError(f"recipe must be a StateRecipe or one of {sorted(RECIPES)}, got {recipe!r}")
    r = recipe if isinstance(recipe, StateRecipe) else RECIPES[recipe]
    lay, gpu = layout, cluster.gpu
    m = max(lay.micro_batches(global_batch), 1)
    tokens_mb = lay.micro_batch * model.seq  # tokens of one micro-batch (all its cp shards)
    split = lay.stage_layers(model.layers)
    # matmuls: the FLOPs of one micro-batch on a stage, split over tp x cp GPUs; the weight
    # matmuls at the GEMM rate, the attention kernel's at its own, forward and backward
    # (softmax beside the Tensor Cores). The last stage holds the output layer as well, and
    # an uneven split (Layout.stage_layers) more blocks on the middle stages: the slowest
    # stage sets the pipeline's pace, so each term below is that stage's.
    block = (model.dense_flops_per_token(lay.recompute, lay.early_stop)
             - model.head_flops_per_token) / model.layers
    attn_fwd, attn_bwd = model.attention_flops_split(lay.recompute)
    attn = (attn_fwd / cluster.attention_flops + attn_bwd / cluster.attention_backward_flops) / model.layers
    # a rerun (full, or op-level: every op outside its save list) reads and writes them again
    passes = MEM_PASSES + (2 if lay.recompute in ("full", "op") else 0)
    act = model.activation_bytes_per_layer(lay.micro_batch, lay.tp, lay.sp, "none", lay.cp)
    # the last stage's loss, op by op: see loss_passes
    loss = loss_passes(model.act_bytes) * model.logits_bytes(lay.micro_batch, lay.tp, lay.cp)
    # tensor parallelism: 2 all-reduces forward, 2 backward per block (+2 recomputed), and
    # beside the blocks: the vocabulary-parallel embedding's output (first stage) and the output
    # layer's input gradient (last stage), one (b, s, h) each, and the cross-entropy's 3
    # all-reduces of b s fp32 numbers (max, sum of exponentials, target logit) (an
    # early-stopping rerun ends before the down-projection and its all-reduce)
    msg = tokens_mb / lay.cp * model.hidden * model.act_bytes  # bytes of one block's output
    # (op-level: the rerun output projection's all-reduce, or under SP the two all-gathers the
    # reruns need, the same bytes)
    n_tp = 4 + ((1 if lay.early_stop else 2) if lay.recompute == "full" else 0) + (lay.recompute == "op")
    link = _link(lay.tp, cluster) if lay.tp > 1 else None
    # context parallelism: K and V pass cp - 1 times forward, twice that backward, hidden
    # behind attention's own forward and backward, as its kernel runs them (a fused causal
    # kernel: 7 h s per token and layer, not PaLM's whole square) at that kernel's rates
    cp_layer = 0.0
    if lay.cp > 1:
        kv = 2 * tokens_mb / lay.cp * model.kv_dim * model.act_bytes / lay.tp
        ring = 3 * (lay.cp - 1) * _link(lay.tp * lay.cp, cluster).predict(kv)
        once_fwd, once_bwd = model.attention_flops_split("none")   # the ring runs once forward, once back
        attn_s = ((once_fwd / cluster.attention_flops + once_bwd / cluster.attention_backward_flops)
                  / model.layers * tokens_mb / (lay.cp * lay.tp))
        cp_layer = max(0.0, ring - attn_s) if cluster.overlap else ring

    def stage(n: int, first: bool, last: bool) -> tuple[float, float, float, float]:
        head = model.head_flops_per_token if last else 0.0
        mm = ((n * block + head) / cluster.achievable_flops + n * attn) * tokens_mb / (lay.tp * lay.cp)
        mem = (passes * n * act + (loss if last else 0.0)) / cluster.achievable_bytes_per_s
        t = 0.0
        if link is not None:
            t = ((n * n_tp + first + last) * ring_allreduce_time(msg, lay.tp, link)
                 + (3 * ring_allreduce_time(tokens_mb / lay.cp * 4, lay.tp, link) if last else 0.0))
        return mm, mem, t, n * cp_layer

    parts = [stage(n, i == 0, i == len(split) - 1) for i, n in enumerate(split)]
    matmul, membound, tp, cp = max(parts, key=sum)  # the slowest stage
    layers = split[max(range(len(split)), key=lambda i: sum(parts[i]))]
    slot = matmul + membound + tp + cp  # s: one micro-batch on one stage
    bubble = (lay.pp - 1) / lay.interleave * slot
    p2p = 0.0
    if lay.pp > 1:
        sent = msg / (lay.tp if lay.sp else 1)
        p2p = lay.sends_per_micro_batch() * m * _link(lay.tp * lay.cp * lay.pp, cluster).predict(sent)
    # data parallelism (and ZeRO): gradients are reduced over the dp x cp ranks that hold
    # the same weights; tp x pp ranks lie between two of them
    psi = stage_params(model, lay)
    n, stride = lay.dp * lay.cp, lay.tp * lay.pp
    # gradients go in buckets of BUCKET_BYTES, each a collective with its own start-up
    buckets = max(1, math.ceil(psi * grad_bytes / BUCKET_BYTES))
    if lay.zero == 2 and cluster.zero2_per_block:
        buckets = int(layers) + 1  # FSDP's units: the stage's blocks and its embedding or head
    if lay.zero == 0 and cluster.ddp_after_backward:
        buckets = 1  # one contiguous buffer
    ar = buckets * group_allreduce_time(psi * grad_bytes / buckets, n, stride, cluster)
    # a reduce-scatter is half an all-reduce's ring steps (an all-gather the other half); a
    # backend that reduce-scatters by all-reducing the whole buffer (gloo) pays all of it
    rs_share = 1.0 if cluster.full_reduce_scatter else 0.5
    # the compute to hide behind: a micro-batch's backward (2/3 of its slot) and forward (1/3)
    hide = slot * 2 / 3 if cluster.overlap else 0.0
    fwd = slot / 3 if cluster.overlap else 0.0
    rule, share = cluster.overlap_rule, cluster.sharded_hidden
    dp = zero3 = 0.0
    if lay.zero == 0:  # DDP's all-reduce, bucket by bucket beside the backward
        dp = ar if cluster.ddp_after_backward or not rule.reduce else exposed_time(ar, hide, buckets)
    elif lay.zero == 2 and share is not None:  # stated outright: a share of the backward
        # the last micro-batch's reduce-scatter and the all-gather, then each earlier one's
        dp = (max(0.0, (rs_share + 0.5) * ar - share * hide)
              + (m - 1) * max(0.0, rs_share * ar - share * hide))
    elif lay.zero in (1, 2):  # reduce-scatter beside the backward, all-gather beside the forward
        red, gat = rs_share * ar, 0.5 * ar
        # ZeRO-2 keeps only its gradient shard, so every micro-batch's backward reduce-scatters
        # (ZeRO-1 accumulates whole gradients and reduces once, after the last)
        reductions = m if lay.zero == 2 else 1
        dp = (reductions * (exposed_time(red, hide, buckets) if rule.reduce else red)
              + (exposed_time(gat, fwd, buckets) if lay.zero in rule.gather_stages else gat))
    else:  # per micro-batch and block: all-gather forward and backward, reduce-scatter
        units = int(layers) + 1  # the stage's blocks and its embedding or head
        gather = units * group_allreduce_time(psi / units * r.param_bytes, n, stride, cluster)
        scatter = units * rs_share * group_allreduce_time(psi / units * grad_bytes, n, stride, cluster)
        if share is not None:
            zero3 = m * max(0.0, gather + scatter - (share * slot if cluster.overlap else 0.0))
        elif rule.zero3 == "prefetch":  # gathers beside the forward; gather + scatter beside the backward
            zero3 = m * (exposed_time(gather / 2, fwd, units)
                         + exposed_time(gather / 2 + scatter, hide, units))
        elif rule.zero3 == "post":  # backward gathers issued after each unit's gradients: charged in full
            zero3 = m * (exposed_time(gather / 2, fwd, units) + gather / 2
                         + exposed_time(scatter, hide, units))
        else:
            zero3 = m * (gather + scatter)
    shard = psi / (n if lay.zero >= 1 else 1)
    optimizer = (shard * (2 * r.optimizer_bytes + 2 * r.param_bytes + r.grad_bytes)
                 / cluster.achievable_bytes_per_s)
    terms = {"matmul": m * matmul, "memory-bound": m * membound, "tensor-parallel": m * tp,
             "context-parallel": m * cp, "pipeline bubble": bubble, "pipeline sends": p2p,
             "data-parallel": dp, "ZeRO-3 collectives": zero3, "optimizer": optimizer}
    total = sum(terms.values())
    tokens_s = global_batch * model.seq / total
    peak = lay.gpus * gpu.peak_flops
    others = {k: v for k, v in terms.items() if k != "matmul"}
    limiter = "compute" if terms["matmul"] > total / 2 else max(others, key=others.get)
    return StepTime(terms, total, tokens_s, model.model_flops_per_token() * tokens_s / peak,
                    model.hardware_flops_per_token(lay.recompute, lay.early_stop) * tokens_s / peak,
                    limiter,
                    {"micro_batches": float(m), "slot_s": slot, "dp_allreduce_s": ar})


def flags_sent(sent_bytes: float, world: int, n_tensors: int) -> str:
    """The bytes one rank sent in perfkit's ZeroOptimizer's flags' all-reduce (the ring model), read
    as the float32 flags it reduced: one per parameter tensor (had it a gradient on any rank?), and
    at stage 1 with backward's hooks one more (did a gradient change in place after the hooks read
    it?, :meth:`perfkit.parallel.reducer.BucketReducer.sync`), so one model's stages send different bytes.

    Raises:
        TypeError, ValueError: ``sent_bytes`` not a finite number >= 0, ``world`` < 2, ``n_tensors`` < 1.
    """
    b = check_real("sent_bytes", sent_bytes, 0)
    n = check_int("n_tensors", n_tensors, 1)
    k = round(b / ring_factor("all_reduce", check_int("world", world, 2)) / 4)
    said = (": one per parameter tensor" if k == n else f": one per parameter tensor ({n}) and one more, "
            "stage 1's check that no gradient changed in place after backward's hooks read it"
            if k == n + 1 else f" for {n} parameter tensors")
    return f"{b:,.0f} B sent, {k} float32 flags{said}"


def utilisation_words(t: StepTime, efficiency: float) -> str:
    """Why a planned step's MFU is not the matmul efficiency supplied, in two effects computed from
    ``t``: the terms beside the matmuls take a share of the step (EFU, the FLOPs run, falls from what
    the matmul term alone gives), and MFU counts ``t.mfu / t.hfu`` times the FLOPs run (PaLM's count
    charges attention's whole square; a causal kernel runs less of it, recomputation adds to it).

    Raises:
        TypeError, ValueError: ``t`` not a :class:`StepTime` with a matmul term > 0, ``efficiency``
            not in (0, 1].
    """
    check_type("t", t, StepTime)
    eff = check_real("efficiency", efficiency, 0, 1, lo_open=True)
    mm = check_real("t.terms['matmul']", t.terms.get("matmul", 0.0), 0, lo_open=True)
    alone, k = t.total_s / mm, t.mfu / t.hfu   # the step over its matmul term; MFU's FLOPs over those run
    side = (": PaLM's count charges attention's whole square (12 L h s per token), of which a causal "
            "kernel runs less (7 L h s without recomputation)" if k > 1.0005 else ": recomputation, which "
            "MFU leaves out, adds more than a causal kernel saves of attention" if k < 0.9995 else "")
    return (f"The MFU column is no prediction apart from the efficiency supplied ({eff:.2f}): the matmuls "
            f"run at that share by assumption. {'Two effects set' if side else 'One effect sets'} the best "
            f"layout's MFU at {t.mfu:.1%}. Its other terms take {1 - 1 / alone:.1%} of the step, so its EFU "
            f"(the FLOPs run over the peak) reads {t.hfu:.1%}, not the {t.hfu * alone:.1%} of its matmul "
            f"term alone. And MFU counts {k:.3f}x the FLOPs run{side}. With no other term, MFU would read "
            f"{t.mfu * alone:.1%}.")


def ring_priced(cost: CollectiveCost, ring_predicted_s: float, backend: str = "gloo") -> str:
    """A sentence, starting with a space, on where ``cost``'s predicted difference would lie had the
    model priced each reduce-scatter as NCCL's ring runs it (half an all-reduce's steps and bytes)
    instead of as ``backend`` runs it (a whole all-reduce: gloo has no ring reduce-scatter), against the
    measured interval; ``""`` where the two prices agree or the difference has no interval.

    Args:
        cost: what :func:`collective_cost` read, its ``predicted_s`` at ``backend``'s price.
        ring_predicted_s: the model's difference with every reduce-scatter at the ring's price, s.
        backend: the backend that ran (and whose price ``cost`` carries).

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or not finite.
    """
    from perfkit.plan.local import CollectiveCost  # local imports this module

    check_type("cost", cost, CollectiveCost)
    check_type("backend", backend, str)
    ring = check_real("ring_predicted_s", ring_predicted_s)
    g, nd = cost.gap.scaled(1e3), cost.digits
    if not (g.has_interval and g.low < g.high) or round(ring * 1e3, nd) == round(cost.predicted_s * 1e3, nd):
        return ""

    def where(d_s: float) -> str:
        return {"above": "below", "below": "above"}.get(g.clear_of(d_s * 1e3, "ms"), "inside")

    here, there = where(cost.predicted_s), where(ring)
    return (f" On {backend}, which ran here, a reduce-scatter all-reduces the buffer and keeps its slice, a "
            f"whole all-reduce's bytes, and the model charges it so ({cost.predicted_s * 1e3:.{nd}f} ms "
            f"predicted); priced as NCCL's ring reduce-scatter, half an all-reduce, the predicted difference "
            f"would be {ring * 1e3:.{nd}f} ms, {there} the measured interval "
            f"({g.low:.{nd}f} to {g.high:.{nd}f} ms)"
            + (f": on either price it lies {here} it." if here == there else
               f": where it lies against the interval rests on pricing the reduce-scatter as {backend} "
               "runs it."))
