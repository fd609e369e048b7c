"""How much of data parallelism's collectives hides behind compute, framework by framework.

Frameworks overlap the data-parallel (and ZeRO) collectives with compute in chunks: DDP's
gradient buckets, FSDP's units, Megatron's per-layer buckets, DeepSpeed's reduce buckets. A
chunk's collective can start only when its compute is done (a reduction: once its gradients
exist) or must end before its compute starts (a gather: the weights it needs), and the
collectives run one after another beside the compute. ``k`` equal chunks of ``T`` seconds of
collectives beside ``C`` seconds of compute leave

    exposed = max(T / k, T - C (k - 1) / k)

seconds on the critical path (:func:`exposed_time`): the last reduction (or first gather) can
never hide, and no more can hide than the compute there is. What each framework overlaps is an
:class:`OverlapRule` in :data:`OVERLAP_RULES`, with its source:

* ``"pytorch"``: DDP all-reduces each bucket as its gradients are ready (Li et al., *PyTorch
  Distributed*, VLDB 2020, section 3.2.3: the last bucket's all-reduce follows the backward);
  FSDP (ZeRO-2 ``SHARD_GRAD_OP``, ZeRO-3 ``FULL_SHARD``) prefetches the next unit's all-gather
  while a unit computes and reduce-scatters a unit's gradients beside the next unit's backward
  (Zhao et al., *PyTorch FSDP*, VLDB 2023, section 3.4 and its Figure 5). Its ZeRO-1
  (``ZeroRedundancyOptimizer``) all-gathers the updated shards after the step: not hidden.
* ``"megatron"``: Megatron-core's distributed optimizer with ``overlap_grad_reduce`` ("overlap
  grad all-reduce / reduce-scatter with backward compute") and ``overlap_param_gather``
  ("overlap param all-gather with forward compute"), chunked per transformer layer so that
  "only one DP communication chunk" is exposed (NVIDIA Megatron Bridge, Communication Overlap).
* ``"deepspeed"``: ``overlap_comm`` "attempts to overlap the reduction of the gradients with
  backward computation" (DeepSpeed config-json, zero_optimization); ZeRO-3 prefetches the next
  parameters (``stage3_prefetch_bucket_size``); ZeRO-1/2's all-gather of the updated weights
  follows the step.
* ``"composer"``: PyTorch's FSDP as MosaicML Composer configures it by default
  (``FSDPConfig``: ``backward_prefetch='BACKWARD_POST'``, ``forward_prefetch=False``,
  ``limit_all_gathers=True``; llm-foundry's runs): forward all-gathers run ahead of the compute
  (the CPU issues them early), but in backward the next unit's all-gather is issued only after
  the current unit's gradient computation, which PyTorch's ``BackwardPrefetch`` documentation
  says "enables less overlap" than ``BACKWARD_PRE`` (not none: a CPU running ahead of the GPU
  can still issue it early); the rule takes the end of that range and charges those gathers in
  full, a modelling choice. Reduce-scatters run beside the next unit's backward.
* ``"none"``: nothing hidden (a CPU, whose cores run the collectives, or a framework without
  overlap). :func:`full_charge` tests that premise against paired step measurements.

:func:`micro_batch_overhead` reads llm-foundry's micro-batch sweep for the cost each micro-batch
pays beyond its sequences, beside what the planner charges FSDP's collectives with none hidden.

Usage::

    rule = OVERLAP_RULES["megatron"]
    print(rule.describe(), exposed_time(comm_s=0.3, compute_s=1.0, chunks=40))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfkit._checks import check_int, check_real, check_type
from perfkit.plan.layout import Layout
from perfkit.plan.model import ModelSpec
from perfkit.plan.runs_data import FOUNDRY_MB_SWEEP, FOUNDRY_MB_SWEEP_SOURCE, MPT_SHAPES

if TYPE_CHECKING:
    from perfkit.plan.local import CollectiveCost

__all__ = ["OVERLAP_RULES", "OverlapRule", "exposed_time", "full_charge", "micro_batch_overhead"]


@dataclass(frozen=True)
class OverlapRule:
    """What one framework overlaps, by ZeRO stage.

    Attributes:
        name: the :data:`OVERLAP_RULES` key.
        reduce: the gradient reduction (DDP's all-reduce, ZeRO-1/2's reduce-scatter) runs
            bucket by bucket beside the backward.
        gather_stages: ZeRO stages (1, 2) whose all-gather of the weights runs beside the
            forward, chunk by chunk.
        zero3: ZeRO-3's per-unit collectives: ``"prefetch"`` (all-gathers prefetched forward
            and backward, reduce-scatters beside the backward), ``"post"`` (backward all-gathers
            issued after the unit's gradient computation, less overlap than prefetching: charged
            in full, the model's choice at the end of that range; the rest as ``"prefetch"``) or
            ``"none"``.
        source: where the framework says so.
    """

    name: str
    reduce: bool
    gather_stages: tuple[int, ...]
    zero3: str
    source: str

    def describe(self) -> str:
        """One line: what hides behind what, and the source."""
        if not (self.reduce or self.gather_stages or self.zero3 != "none"):
            return f"{self.name}: no data-parallel collective hides behind compute ({self.source})"
        parts = ["gradient reductions beside the backward"] if self.reduce else []
        if self.gather_stages:
            stages = "/".join(map(str, self.gather_stages))
            parts.append(f"ZeRO-{stages}'s weight all-gathers beside the forward")
        if self.zero3 == "prefetch":
            parts.append("ZeRO-3's gathers prefetched and reduce-scatters beside the backward")
        elif self.zero3 == "post":
            parts.append("ZeRO-3's forward gathers ahead and reduce-scatters beside the backward, "
                         "its backward gathers paid")
        return (f"{self.name}: " + "; ".join(parts) + ", one chunk exposed and no more hidden than "
                f"the compute ({self.source})")


OVERLAP_RULES: dict[str, OverlapRule] = {
    "pytorch": OverlapRule(
        "pytorch", True, (2,), "prefetch",
        "DDP: Li et al., PyTorch Distributed, VLDB 2020, 3.2.3; FSDP: Zhao et al., PyTorch FSDP, "
        "VLDB 2023, 3.4 and Fig. 5"),
    "megatron": OverlapRule(
        "megatron", True, (1, 2), "prefetch",
        "Megatron-core DistributedDataParallelConfig overlap_grad_reduce / overlap_param_gather; "
        "NVIDIA Megatron Bridge docs, Communication Overlap"),
    "deepspeed": OverlapRule(
        "deepspeed", True, (), "prefetch",
        "DeepSpeed config-json zero_optimization.overlap_comm, stage3_prefetch_bucket_size"),
    "composer": OverlapRule(
        "composer", True, (2,), "post",
        "mosaicml/composer FSDPConfig defaults (backward_prefetch BACKWARD_POST, forward_prefetch "
        "False, limit_all_gathers True); Zhao et al., PyTorch FSDP, VLDB 2023, 3.4"),
    "none": OverlapRule("none", False, (), "none", "no overlap: every collective on the critical path"),
}


def exposed_time(comm_s: float, compute_s: float, chunks: int) -> float:
    """Seconds of ``comm_s`` on the critical path when it runs in ``chunks`` equal collectives
    pipelined with ``compute_s`` seconds of compute: ``max(T/k, T - C (k - 1)/k)``.

    Args:
        comm_s: the collectives' total time ``T`` (>= 0).
        compute_s: the compute they may hide behind ``C`` (>= 0).
        chunks: ``k`` (>= 1), the buckets or units.

    Returns:
        Seconds in ``[T/k, T]``.

    Raises:
        TypeError, ValueError: for a negative or non-finite time, or ``chunks`` below 1.
    """
    check_real("comm_s", comm_s, 0)
    check_real("compute_s", compute_s, 0)
    check_int("chunks", chunks, 1)
    return min(comm_s, max(comm_s / chunks, comm_s - compute_s * (chunks - 1) / chunks))


def full_charge(costs: Mapping[str, CollectiveCost], base: str = "DDP") -> str:
    """The ``"none"`` rule's premise, tested: where charging every call each layout made (the
    uncharged ones too) at the model's price per call puts its predicted difference from
    ``base``'s step, against that layout's measured interval (each a
    :class:`~perfkit.plan.local.CollectiveCost` from :func:`~perfkit.plan.local.collective_cost`),
    and how many layouts agree with every call adding its full price to the step. A step verdict
    can hold on its tolerance window with a call left uncharged; this sentence says whether the
    full charge still lies inside what the run measured.

    Raises:
        TypeError, ValueError: ``costs`` empty or not a mapping of ``CollectiveCost``.
    """
    from perfkit.plan.local import CollectiveCost  # local imports this module's step_time

    check_type("costs", costs, Mapping)
    if not costs:
        raise ValueError("costs must name at least one layout")
    side: dict[str, list[str]] = {"above": [], "below": [], "inside": [], "": []}
    said = []
    for name, c in costs.items():
        check_type(f"costs[{name!r}]", c, CollectiveCost)
        full = (c.predicted_s + c.uncharged_s) * 1e3
        ok = c.gap.has_interval and c.gap.low < c.gap.high
        flip = {"above": "below", "below": "above"}   # the interval above the prediction: it lies below
        side[flip.get(c.gap.scaled(1e3).clear_of(full, "ms"), "inside") if ok else ""].append(name)
        d = c.digits   # as collective_cost's sentences print them: the same figures read the same
        iv = f" against {c.gap.low * 1e3:.{d}f} to {c.gap.high * 1e3:.{d}f} ms" if ok else " (no interval)"
        said.append(f"{name} {full:.{d + 1}f} ms{iv}")
    n, k = len(costs) - len(side[""]), len(side["inside"])
    out = (f"Charged for every call each layout made at the model's price (the uncharged ones too), the "
           f"predicted difference from {base}'s step, against the measured interval: {'; '.join(said)}. ")
    if not n:
        return out + "No layout has an interval: this run cannot tell whether the full charge fits."
    out += "It lies " + "; ".join(f"{w} its interval for {' and '.join(side[w])}"
                                  for w in side if w and side[w])
    full_price = " with the model charging every call in full"
    if k == n:
        return out + f": {'this layout agrees' if n == 1 else f'all {n} agree'}{full_price}."
    agree = (f"{k} of the {n} agree{'s' * (k == 1)}" if k else
             f"none of the {n} agrees" if n > 1 else "it does not agree")
    out += f": {agree}{full_price}; "
    if side["above"] and side["below"]:
        out += ("the model's price per call is too high for some layouts' calls and too low for others', so "
                "it does not carry from one layout to another here")
    else:
        w = "above" if side["above"] else "below"
        out += (f"for {' and '.join(side[w])} the step costs {'less' if w == 'above' else 'more'} than "
                "the model's price with every call charged (the calls, or a cost the model leaves out: "
                "this run does not time them apart)")
    return out + ". A step verdict that held on its ±window does not show otherwise."


def micro_batch_overhead() -> dict[str, dict[str, float]]:
    """What one micro-batch costs beyond its sequences, from llm-foundry's micro-batch sweep
    (:data:`perfkit.plan.runs_data.FOUNDRY_MB_SWEEP`), beside the planner's ZeRO-3 collectives.

    Per model, the seconds a GPU spends on one micro-batch (``mb * seq / tokens_per_gpu``) are
    fitted by least squares as ``fixed + per_sequence * mb``, a line through the sweep's two or
    three points of each model (``points``; through two it passes exactly): no interval.
    ``fixed`` is every cost that does not shrink with the micro-batch: FSDP's two all-gathers
    and reduce-scatter per micro-batch if nothing hides them, and beside them kernel launches,
    Python, the allocator and half an optimizer step (the sweep accumulates two micro-batches
    per step). ``planner_collectives_s`` is what
    :func:`~perfkit.plan.step_time.step_time` charges for them per micro-batch with none hidden
    (``Cluster.dp_overlap = "none"``; gradients in fp32, the sweep's ``DEFAULT`` mixed
    precision); a ``fixed`` near 0 would mean FSDP hid them.

    Returns:
        ``{model: {"fixed_s", "per_sequence_s", "points", "planner_collectives_s"}}``.
    """
    from perfkit.plan.cluster import named_cluster  # cluster and step_time import this module
    from perfkit.plan.step_time import step_time

    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r[0] for r in FOUNDRY_MB_SWEEP):
        rows = [r for r in FOUNDRY_MB_SWEEP if r[0] == name]
        xs = [float(r[4]) for r in rows]
        ys = [r[4] * r[1] / r[7] for r in rows]  # seconds per micro-batch per GPU
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
                 / sum((x - mx) ** 2 for x in xs))
        layers, d, heads, ratio, vocab = MPT_SHAPES[name]
        seq, gpus = rows[0][1], rows[0][2]
        model = ModelSpec(f"MPT {name}", layers=layers, hidden=d, heads=heads, ffn=ratio * d,
                          vocab=vocab, seq=seq, positions=seq, source=FOUNDRY_MB_SWEEP_SOURCE)
        lay = Layout(dp=gpus, zero=3, micro_batch=1)
        t = step_time(model, lay, replace(named_cluster("a100-80gb"), dp_overlap="none"), gpus * 2,
                      grad_bytes=4.0)  # DEFAULT: fp32; none hidden
        out[name] = {"fixed_s": my - slope * mx, "per_sequence_s": slope, "points": float(len(rows)),
                     "planner_collectives_s": t.terms["ZeRO-3 collectives"] / t.detail["micro_batches"]}
    return out
