"""A layout of a training run: DP x TP x PP x CP, ZeRO stage, micro-batches, recomputation.

:class:`Layout` holds the degrees and choices; :func:`layout_problems` lists every reason a
layout cannot run a model on a cluster with a global batch (degrees that do not multiply to
the GPU count, heads not divisible by TP, a batch too small for the pipeline, ...), and
:func:`check_layout` raises them as one ``ValueError``. Ranks are placed TP innermost (inside
a node, on NVLink), then CP, then PP, then DP outermost, as Megatron-LM places them.

Pipeline stages need not divide the layers: :meth:`Layout.stage_layers` splits ``L`` blocks
over ``p`` stages evenly when it can, and otherwise gives the extra blocks to the middle
stages, so that the first stage (which also holds the embedding) and the last (the output
layer and the loss) carry fewer, as Megatron-LM's ``--decoder-first-pipeline-num-layers`` /
``--decoder-last-pipeline-num-layers`` and DeepSpeed's parameter-balanced partition let a run
do. ``Layout(stages=(...))`` states a split explicitly. The bubble, step time and memory follow
the heaviest stage.

Usage::

    lay = Layout(dp=16, tp=8, pp=4, micro_batch=1, recompute="selective", sp=True)
    check_layout(model, lay, gpus=512, global_batch=1024)
    print(lay.micro_batches(1024), lay.bubble_fraction(1024))
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit._checks import check_choice, check_int, check_type
from perfkit.plan.model import RECOMPUTE, ModelSpec

__all__ = ["SCHEDULES", "Layout", "check_layout", "layout_problems"]

SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Layout:
    """Degrees and choices of one layout.

    Attributes:
        dp, tp, pp, cp: data-, tensor-, pipeline- and context-parallel degrees (>= 1).
        zero: ZeRO stage 0-3 over the data-parallel (and context-parallel) ranks.
        micro_batch: sequences per micro-batch per data-parallel replica.
        interleave: model chunks per pipeline stage (``v`` of the interleaved schedule).
        recompute: ``"none"``, ``"selective"`` (attention scores), ``"full"`` (blocks) or
            ``"op"`` (torchtitan's op-level selective checkpointing: every second matmul of a
            block rerun, :meth:`perfkit.plan.model.ModelSpec.op_matmuls`).
        early_stop: full recomputation through PyTorch's non-reentrant checkpoint (2.1 and
            later, on by default), which stops rerunning a block once the last tensor its
            backward needs is back: the block's last matmul, the MLP's down-projection, is not
            rerun unless a dropout after it keeps a mask (Megatron's own recomputation reruns
            it). Only with ``recompute="full"``.
        sp: sequence parallelism beside tensor parallelism.
        schedule: ``"1f1b"`` (PipeDream-Flush) or ``"gpipe"`` (all forwards first).
        stages: blocks per pipeline stage, first to last (``()``: :meth:`stage_layers`'s
            default split); ``pp`` entries, each >= 1, summing to the model's layers.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 0
    micro_batch: int = 1
    interleave: int = 1
    recompute: str = "none"
    sp: bool = False
    schedule: str = "1f1b"
    early_stop: bool = False
    stages: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for k in ("dp", "tp", "pp", "cp", "micro_batch", "interleave"):
            check_int(k, getattr(self, k), 1)
        check_int("zero", self.zero, 0, 3)
        check_choice("recompute", self.recompute, RECOMPUTE)
        check_type("sp", self.sp, bool)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_type("early_stop", self.early_stop, bool)
        if self.early_stop and self.recompute != "full":
            raise ValueError(f"early_stop applies to full recomputation only, got "
                             f"recompute={self.recompute!r}")
        check_type("stages", self.stages, tuple)
        if self.stages:
            for i, n in enumerate(self.stages):
                check_int(f"stages[{i}]", n, 1)
            if len(self.stages) != self.pp:
                raise ValueError(f"stages must give one block count per pipeline stage: "
                                 f"{len(self.stages)} entries for pp={self.pp}")
            if self.interleave > 1:
                raise ValueError("stages (an uneven split) goes with interleave=1: the "
                                 "interleaved schedule splits the layers into equal chunks")

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Blocks on each pipeline stage, first to last: ``stages`` if given; else ``L / p``
        each when ``p`` divides ``L``; else ``floor(L / p)`` each with the ``L mod p`` extra
        blocks on the middle stages first (the ends hold the embedding and the output layer),
        then on the first stage: 30 blocks on 4 stages -> ``(7, 8, 8, 7)``, 9 on 2 -> ``(5, 4)``.

        Raises:
            ValueError: for fewer layers than stages, or ``stages`` that do not sum to ``layers``.
        """
        check_int("layers", layers, 1)
        if self.stages:
            if sum(self.stages) != layers:
                raise ValueError(f"stages {self.stages} sum to {sum(self.stages)} blocks, not the "
                                 f"model's {layers} layers")
            return self.stages
        if layers < self.pp:
            raise ValueError(f"{layers} layers cannot fill {self.pp} pipeline stages")
        q, r = divmod(layers, self.pp)
        split = [q] * self.pp
        order = list(range(1, self.pp - 1)) + [0, self.pp - 1]  # middles, then first, then last
        for i in order[:r]:
            split[i] += 1
        return tuple(split)

    @property
    def gpus(self) -> int:
        """``dp * tp * pp * cp``."""
        return self.dp * self.tp * self.pp * self.cp

    def micro_batches(self, global_batch: int) -> int:
        """Micro-batches per replica and step, ``m = B / (dp * b)`` (rounded down)."""
        return global_batch // (self.dp * self.micro_batch)

    def bubble_fraction(self, global_batch: int) -> float:
        """Idle share of the pipeline over the ideal time: ``(p - 1) / (v m)``
        (Narayanan et al. 2021, sections 2.2.1 and 2.2.2)."""
        m = max(self.micro_batches(global_batch), 1)
        return (self.pp - 1) / (self.interleave * m)

    def sends_per_micro_batch(self) -> int:
        """Point-to-point sends the busiest rank issues per micro-batch, forward and backward.

        The ``p v`` virtual stages have ``p v - 1`` boundaries, each crossed once forward and
        once backward per micro-batch. A middle rank sends from every chunk both ways:
        ``2 v``. The first rank's first chunk sends no gradient back and the last rank's last
        chunk no activation on, so with ``p = 2`` each rank sends ``2 v - 1``. No pipeline: 0.
        """
        if self.pp == 1:
            return 0
        return 2 * self.interleave - (1 if self.pp == 2 else 0)

    def in_flight(self, global_batch: int, stage: int = 0) -> float:
        """Micro-batches whose activations ``stage`` holds at once, in units of one
        micro-batch of all its layers: ``min(p - stage, m)`` for 1F1B (the first stage holds
        the most), times ``1 + (p - 1) / (p v)`` when interleaved (Korthikanti et al. 2022,
        section 4.2.3); ``m`` for GPipe."""
        m = max(self.micro_batches(global_batch), 1)
        check_int("stage", stage, 0, self.pp - 1)
        if self.schedule == "gpipe":
            return float(m)
        base = float(min(self.pp - stage, m))
        if self.interleave > 1:
            base *= 1 + (self.pp - 1) / (self.pp * self.interleave)
        return base

    def label(self) -> str:
        """A short name: ``dp16 tp8 pp4 z1 mb1 v2 sel sp`` (``full es``: full recomputation
        with early stop)."""
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        parts += [f"cp{self.cp}"] if self.cp > 1 else []
        parts += [f"z{self.zero}", f"mb{self.micro_batch}"]
        parts += [f"v{self.interleave}"] if self.interleave > 1 else []
        parts += {"none": [], "selective": ["sel"], "full": ["full"], "op": ["op"]}[self.recompute]
        parts += ["es"] if self.early_stop else []
        parts += ["sp"] if self.sp else []
        parts += ["gpipe"] if self.schedule == "gpipe" else []
        parts += ["stages " + "-".join(map(str, self.stages))] if self.stages else []
        return " ".join(parts)


def layout_problems(model: ModelSpec, layout: Layout, gpus: int, global_batch: int) -> list[str]:
    """Every reason the planner rejects ``layout`` for ``model`` on ``gpus`` with ``global_batch``
    sequences: each one a layout that cannot run, but for fewer micro-batches than pipeline
    stages, which run with a large bubble and are rejected as the planner's policy.

    Args:
        model: the :class:`ModelSpec`.
        layout: the :class:`Layout`.
        gpus: GPUs in the run (>= 1).
        global_batch: sequences per optimizer step (>= 1).

    Returns:
        Sentences, empty when the layout is valid.

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or below 1.
    """
    check_type("model", model, ModelSpec)
    check_type("layout", layout, Layout)
    check_int("gpus", gpus, 1)
    check_int("global_batch", global_batch, 1)
    lay, out = layout, []
    if lay.gpus != gpus:
        out.append(f"dp x tp x pp x cp = {lay.dp} x {lay.tp} x {lay.pp} x {lay.cp} = {lay.gpus} "
                   f"is not the GPU count {gpus}")
    if model.heads % lay.tp:  # (fewer key/value heads than tp are copied, as Megatron does)
        out.append(f"heads ({model.heads}) are not divisible by tp ({lay.tp})")
    if model.ffn % lay.tp:
        out.append(f"the MLP width ({model.ffn}) is not divisible by tp ({lay.tp})")
    if lay.interleave > 1 and model.layers % (lay.pp * lay.interleave):
        out.append(f"layers ({model.layers}) are not divisible by pp x interleave "
                   f"({lay.pp} x {lay.interleave}): the interleaved schedule needs equal chunks")
    if model.layers < lay.pp:
        out.append(f"{model.layers} layers cannot fill {lay.pp} pipeline stages")
    if lay.stages and sum(lay.stages) != model.layers:
        out.append(f"stages {lay.stages} sum to {sum(lay.stages)} blocks, not the model's "
                   f"{model.layers} layers")
    if lay.interleave > 1 and lay.pp == 1:
        out.append("interleave > 1 needs a pipeline (pp > 1)")
    if model.seq % (2 * lay.cp if lay.cp > 1 else 1):
        out.append(f"the sequence ({model.seq}) is not divisible by 2 x cp ({2 * lay.cp}): "
                   "ring attention balances the causal mask over 2 cp chunks")
    if lay.sp and lay.tp == 1:
        out.append("sequence parallelism needs tp > 1")
    if global_batch % (lay.dp * lay.micro_batch):
        out.append(f"the global batch ({global_batch}) is not a multiple of dp x micro_batch "
                   f"({lay.dp} x {lay.micro_batch})")
    m = global_batch // (lay.dp * lay.micro_batch)
    if lay.pp > 1 and m < lay.pp:
        out.append(f"the batch is too small for the pipeline: {m} micro-batch(es) per replica "
                   f"for {lay.pp} stages (the planner asks for at least {lay.pp}: fewer run, but "
                   f"idle {(lay.pp - 1) / (m + lay.pp - 1):.0%} of the step in the bubble)")
    if lay.pp > 1 and lay.interleave > 1 and m % lay.pp:
        out.append(f"the interleaved schedule needs micro-batches ({m}) divisible by pp ({lay.pp})")
    return out


def check_layout(model: ModelSpec, layout: Layout, gpus: int, global_batch: int) -> Layout:
    """``layout`` if :func:`layout_problems` finds nothing.

    Raises:
        ValueError: naming every problem found.
    """
    problems = layout_problems(model, layout, gpus, global_batch)
    if problems:
        raise ValueError(f"layout {layout.label()}: " + "; ".join(problems))
    return layout
