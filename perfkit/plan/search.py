"""Enumerate layouts, predict each, reject what does not fit, rank the rest.

:func:`plan` walks DP x TP x PP x CP over the GPU count (TP inside a node, powers of two),
ZeRO stages 0-3, micro-batch sizes, interleaving, recomputation and sequence parallelism;
keeps to what a run's framework offered, where one is given (:mod:`perfkit.plan.framework`:
its ZeRO stages, SP, CP, recomputation, pipeline splits, and its bytes per parameter);
fixes any of them a user constrains; drops invalid layouts (:func:`layout_problems`) and
those whose predicted memory exceeds the GPU's usable memory, with the reason; and ranks the
rest by predicted step time. :meth:`Plan.why_not` says by how much and through which term
each runner-up loses to the best; :meth:`Plan.ties` lists the layouts whose predicted step lies
within :data:`TIE_BAND` of the best's, closer than the planner can tell two layouts apart.

Usage::

    p = plan(model, named_cluster("h100-sxm"), gpus=64, global_batch=512)
    for c in p.best[:3]:
        print(c.layout.label(), c.time.total_s, c.memory.total / 1e9)
    print(p.why_not(1), p.rejected[:3])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from perfkit import stats
from perfkit._checks import check_int, check_real, check_type
from perfkit.memory.model_states import StateRecipe
from perfkit.plan.cluster import Cluster
from perfkit.plan.framework import Framework
from perfkit.plan.layout import Layout, layout_problems
from perfkit.plan.memory_model import MemoryBreakdown, memory_per_gpu
from perfkit.plan.model import RECOMPUTE, ModelSpec
from perfkit.plan.step_time import StepTime, step_time

if TYPE_CHECKING:
    from perfkit.plan.published import Comparison, LayoutRank, RowResult

__all__ = ["TIE_BAND", "TIE_QUANTILE", "Candidate", "PairedError", "Plan", "enumerate_layouts",
           "paired_error", "plan", "published_choices"]

LAYOUT_FIELDS = tuple(f.name for f in fields(Layout))
# The planner's error on the ratio of two step times of one model, over 114 pairs of published
# rows of one model and sequence in one table (23 groups, llm-foundry's tables; the pairs differ
# in GPU count, micro-batch or recomputation only), of |predicted ratio / reported ratio - 1|
# (paired_error below, on compare(megatron_runs() + foundry_runs())). Its median
# is 2.05 %; a predicted order is wrong only where the error exceeds the predicted difference and
# has the opposing sign, so at the median it comes out right about 3 times in 4 if the errors fall
# either way alike (a coin flip only at no difference). Its TIE_QUANTILE (80 %) quantile, 6.10 %,
# rounded, is the predicted difference at and beyond which the order comes out right at least 9
# times in 10 (a unit test recomputes it). Two layouts closer than this tie: the
# planner cannot rank them. For TP, PP or CP no pair differs: the band is carried over to them.
TIE_QUANTILE = 0.8
TIE_BAND = 0.06


def carried_over(a: Layout, b: Layout) -> bool:
    """Whether two layouts differ in TP, PP or CP, where :data:`TIE_BAND` is carried over from pairs of
    published runs that differ in none of them (GPU count, micro-batch or recomputation only)."""
    return (a.tp, a.pp, a.cp) != (b.tp, b.pp, b.cp)


def carried_note(p: Plan) -> str:
    """A sentence (starting with ". ") on how many tied layouts (the runner-up where none ties) differ
    from the best in TP, PP or CP, where the band bounds nothing; ``""`` where none does."""
    n = len(p.ties())
    others = p.best[1:max(n, 2)]
    k = sum(carried_over(p.best[0].layout, c.layout) for c in others)
    which = ((f"all {k} others differ" if k == len(others) else f"{k} of the {len(others)} others differ")
             if n > 1 else "the runner-up differs")
    return (f". The band comes from pairs that differ in GPU count, micro-batch or recomputation only, never "
            f"in TP, PP or CP; {which} from the best in TP, PP or CP, where it is carried over, not "
            "measured: no bound on the planner's error there") if k else ""


@dataclass(frozen=True)
class Candidate:
    """A valid layout with its predictions; ``reason`` is set when it does not fit memory."""

    layout: Layout
    memory: MemoryBreakdown
    time: StepTime
    reason: str = ""


@dataclass(frozen=True)
class Plan:
    """Every layout the planner considered: ranked fits, rejections with their reasons."""

    model: ModelSpec
    cluster: Cluster
    gpus: int
    global_batch: int
    best: list[Candidate]
    rejected: list[tuple[Layout, str]]

    def why_not(self, rank: int) -> str:
        """Why the layout at ``rank`` (1 = the runner-up) loses to the best: the step-time
        difference and the terms that differ most; within :data:`TIE_BAND`, a tie the planner
        cannot resolve.

        Raises:
            ValueError: for a rank outside ``1 .. len(best) - 1``.
        """
        check_int("rank", rank, 1, max(len(self.best) - 1, 1))
        if rank >= len(self.best):
            raise ValueError(f"rank must be below {len(self.best)}: only {len(self.best)} layouts fit")
        a, b = self.best[0].time, self.best[rank].time
        label = self.best[rank].layout.label()
        if b.total_s - a.total_s < 5e-4 * a.total_s:  # printed as +0.0%: say it is a tie
            ma, mb = self.best[0].memory.total / 1e9, self.best[rank].memory.total / 1e9  # GB
            order = (f"listed after it for more memory per GPU ({mb:.1f} GB against {ma:.1f} GB)"
                     if round(mb, 1) > round(ma, 1) else
                     f"memory alike too ({mb:.2f} GB against {ma:.2f} GB): listed in the search's order")
            return (f"{label}: ties with the best (step times within 0.05%: {a.total_s:.4g} s and "
                    f"{b.total_s:.4g} s); {order}")
        worse = b.terms_beside(a)
        tie = (f"; within the planner's {TIE_BAND:.1%} tie band on a difference: a tie it cannot resolve"
               if b.total_s <= a.total_s * (1 + TIE_BAND) else "")
        if not tie and carried_over(self.best[0].layout, self.best[rank].layout):
            tie = (f"; beyond the {TIE_BAND:.1%} tie band, but it differs from the best in TP, PP or CP, "
                   "where the band is carried over from published pairs that differ in none of them: no "
                   "measured bound on this order")
        return (f"{label}: {b.total_s / a.total_s - 1:+.1%} step time "
                f"({', '.join(worse) or 'many small terms'}){tie}")

    def ties(self, band: float = TIE_BAND) -> list[Candidate]:
        """The layouts (the best included) whose predicted step is at most ``1 + band`` times the
        best's: the planner cannot rank them against each other (``band``: its error on the
        ratio of two steps, :data:`TIE_BAND`); empty when nothing fits.

        Raises:
            TypeError, ValueError: for a ``band`` that is not a finite number >= 0.
        """
        band = check_real("band", band, 0)
        if not self.best:
            return []
        edge = self.best[0].time.total_s * (1 + band)
        return [c for c in self.best if c.time.total_s <= edge]


def _pow2(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if (1 << i) <= limit]


def enumerate_layouts(model: ModelSpec, gpus: int, global_batch: int, gpus_per_node: int = 8,
                      fixed: Mapping[str, Any] | None = None,
                      framework: Framework | None = None) -> list[Layout]:
    """Candidate layouts (before the checks): every combination of the search axes.

    TP runs over powers of two up to ``gpus_per_node``; PP over the stage counts up to the
    layers that divide the GPU count; CP over 1, 2, 4, 8 for sequences of 8192 tokens or more;
    micro-batches over powers of two up to 16; interleaving over 1, 2, 4; ZeRO 0-3;
    recomputation none/selective/full (selective only for unfused attention: with a fused
    kernel it is the same layout as none); sequence parallelism on wherever tp > 1 and the
    framework has it (it moves the same bytes and keeps fewer, so a layout without it never
    wins; fix ``sp`` to compare); full recomputation without early stop unless ``early_stop``
    is fixed (PyTorch's checkpoint, whose rerun ends early, then stands for every full
    recomputation). Pipelines whose stage count does not divide the layers are searched with
    :meth:`Layout.stage_layers`'s split (lighter first and last stages). Micro-batches that do
    not divide the batch and interleavings that do not divide the layers are skipped unless
    fixed (then :func:`layout_problems` names them). ``fixed`` pins any :class:`Layout` field.
    A ``framework`` drops the values it did not offer from every axis
    (:meth:`Framework.options`).

    Raises:
        TypeError: for a ``framework`` that is not a :class:`Framework`.
        ValueError: for an unknown field in ``fixed``, or a fixed value ``framework`` does
            not offer.
    """
    check_type("framework", framework, Framework, optional=True)
    fixed = dict(fixed or {})
    bad = sorted(set(fixed) - set(LAYOUT_FIELDS))
    if bad:
        raise ValueError(f"fixed must name Layout fields {LAYOUT_FIELDS}, got {bad}")
    axes = {
        "tp": [t for t in _pow2(gpus_per_node) if gpus % t == 0],
        "pp": [p for p in range(1, model.layers + 1) if gpus % p == 0],  # uneven splits too
        "cp": [c for c in (1, 2, 4, 8) if gpus % c == 0 and (c == 1 or model.seq >= 8192)],
        "zero": [0, 1, 2, 3], "micro_batch": _pow2(16), "interleave": [1, 2, 4],
        # torchtitan's op-level checkpointing ("op") only when asked for: Megatron's selective
        # recomputation and full recomputation bound it on either side
        "recompute": [r for r in RECOMPUTE if r != "op"], "sp": [False, True], "schedule": ["1f1b"],
        "early_stop": [False],
    }
    for k, v in fixed.items():
        if k != "dp":
            axes[k] = [v]
    if framework is not None:
        for k in list(axes):
            axes[k] = framework.options(k, axes[k], model.layers)
            if k in fixed and not axes[k]:
                raise ValueError(f"fixed {k}={fixed[k]!r} is not offered by {framework.name}: "
                                 f"{framework.refusal(k, fixed[k], model.layers)}")
    out = []
    for tp, pp, cp in itertools.product(axes["tp"], axes["pp"], axes["cp"]):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        if "dp" in fixed and fixed["dp"] != dp:
            continue
        for zero, mb, v, rc, sp, sc, es in itertools.product(
                axes["zero"], axes["micro_batch"], axes["interleave"], axes["recompute"],
                axes["sp"], axes["schedule"], axes["early_stop"]):
            if es and rc != "full":
                continue  # early stop is a kind of full recomputation
            if (sp and tp == 1) or (v > 1 and pp == 1) or (zero == 3 and pp > 1):
                continue  # nothing to split, nothing to interleave; ZeRO-3 with a pipeline
            if tp > 1 and not sp and True in axes["sp"]:  # on offer: not fixed off, framework has it
                continue  # SP moves TP's bytes in other collectives and keeps less: it dominates
            if rc == "selective" and model.flash and "recompute" not in fixed:
                continue  # a fused kernel never keeps the scores selective recomputation drops
            if ("micro_batch" not in fixed and global_batch % (dp * mb)) or (
                    "interleave" not in fixed and v > 1 and model.layers % (pp * v)):
                continue  # sizes that cannot split the batch or the layers (unless asked for)
            out.append(Layout(dp, tp, pp, cp, zero, mb, v, rc, sp, sc, es))
    return out


def plan(model: ModelSpec, cluster: Cluster, gpus: int, global_batch: int,
         fixed: Mapping[str, Any] | None = None, recipe: str | StateRecipe = "mixed_adam",
         framework: Framework | None = None) -> Plan:
    """Predict every candidate layout and rank those that fit.

    Args:
        model: the :class:`ModelSpec`.
        cluster: the :class:`Cluster`.
        gpus: GPUs in the run (>= 1).
        global_batch: sequences per optimizer step (>= 1).
        fixed: :class:`Layout` fields to hold (``{"tp": 8, "zero": 1}``).
        recipe: the model-state recipe (a name or a :class:`StateRecipe`).
        framework: the :class:`Framework` the run uses (``None``: any option): only the
            layouts it offers are searched, with its recipe and its copy of the gradients
            after the backward; ``recipe`` must then be left at its default.

    Returns:
        A :class:`Plan` (``best`` may be empty: then ``rejected`` says why).

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or out of range, a ``recipe``
            beside a ``framework``, or a ``fixed`` value the framework does not offer.
    """
    check_type("model", model, ModelSpec)
    check_type("cluster", cluster, Cluster)
    check_int("gpus", gpus, 1)
    check_int("global_batch", global_batch, 1)
    check_type("framework", framework, Framework, optional=True)
    copy = 0.0
    if framework is not None:
        if recipe != "mixed_adam":
            raise ValueError(f"recipe must be left at its default with a framework (its recipe is "
                             f"{framework.recipe.name}), got {recipe!r}")
        recipe, copy = framework.recipe, framework.grad_copy_bytes
    best, rejected = [], []
    layouts = enumerate_layouts(model, gpus, global_batch, cluster.gpus_per_node, fixed, framework)
    if not layouts:  # every size was skipped before its check: check the plainest ones, to say why
        layouts = enumerate_layouts(model, gpus, global_batch, cluster.gpus_per_node,
                                    {"micro_batch": 1, "interleave": 1, **(fixed or {})}, framework)
    for lay in layouts:
        problems = layout_problems(model, lay, gpus, global_batch)
        if problems:
            rejected.append((lay, "; ".join(problems)))
            continue
        mem = memory_per_gpu(model, lay, global_batch, recipe, grad_copy_bytes=copy)
        if mem.total > cluster.usable_memory:
            big = max(("model states", mem.model_states), ("activations", mem.activations),
                      key=lambda kv: kv[1])
            rejected.append((lay, f"needs {mem.total / 1e9:.1f} GB per GPU > "
                             f"{cluster.usable_memory / 1e9:.1f} GB usable ({big[0]} "
                             f"{big[1] / 1e9:.1f} GB)"))
            continue
        best.append(Candidate(lay, mem, step_time(model, lay, cluster, global_batch, recipe)))
    best.sort(key=lambda c: (c.time.total_s, c.memory.total))
    return Plan(model, cluster, gpus, global_batch, best, rejected)


# --- the tie band: the planner's error on a difference of two published rows ----------------------

@dataclass(frozen=True)
class PairedError:
    """The planner's error on the ratio of two rows' throughputs (see :func:`paired_error`).

    Attributes:
        band: the median over pairs of ``|predicted ratio / reported ratio - 1|``.
        p90: the 90th percentile of the same.
        pairs: how many pairs.
        groups: ``"table: model s=seq"`` -> the labels of its rows (two or more each).
        tie: its :data:`~perfkit.plan.search.TIE_QUANTILE` quantile (80 %); the tie band.
        beyond: the shares of the pairs whose error exceeds ``band`` and ``tie``. A predicted
            difference ``d`` orders a pair wrongly only where the error exceeds ``d`` and has the
            opposing sign: where errors fall either way alike, right ``1 - share / 2`` of the
            time (about 3 in 4 at the median, 9 in 10 at the 80th percentile; a coin flip only
            at a predicted difference of 0). See :meth:`right`.
    """

    band: float
    p90: float
    pairs: int
    groups: dict[str, list[str]]
    tie: float
    beyond: tuple[float, float] = (0.5, 0.2)

    def right(self) -> tuple[float, float]:
        """How often a predicted order is right at a predicted difference of ``band`` and of
        ``tie``, where errors fall either way alike: ``1 - share / 2`` for each share of
        :attr:`beyond`."""
        return tuple(1 - b / 2 for b in self.beyond)

    def text(self) -> str:
        """One sentence: the band, its pairs and where they come from."""
        tables = sorted({g.split(":")[0] for g in self.groups})
        return (f"{self.band:.1%}: the median |error| of the predicted ratio of two rows' throughputs over "
                f"{self.pairs} pairs of published rows of one model and sequence in one table "
                f"({len(self.groups)} such groups, in {', '.join(tables)}; they differ in GPU count, "
                f"micro-batch or recomputation only; 90 % of the pairs within {self.p90:.1%}). An order "
                f"comes out wrong only where the error exceeds the predicted difference and has the "
                f"opposing sign; {self.beyond[0]:.0%} of the pairs err by more than {self.band:.1%}, so "
                f"at a predicted difference that small an order is right about {self.right()[0]:.0%} of "
                f"the time if errors fall either way alike (a coin flip only at no difference at all). "
                f"{TIE_QUANTILE:.0%} of the pairs lie within {self.tie:.1%} ({self.beyond[1]:.0%} beyond "
                f"it), at and beyond which an order is right at least {self.right()[1]:.0%} of the time, "
                "for pairs like these, were their errors independent: the tie band. They are not: it is "
                f"one percentile of {self.pairs} pairs that share rows (a row enters every pair of its "
                "group, fitted rows too), with no interval. No pair differs in TP, PP or CP, so for those "
                "choices the band is carried over, not measured")

    def carried(self, tied: Sequence, band: float, ranks: Sequence[LayoutRank] = ()) -> str:
        """Where a tie band ``band`` (the rounded :attr:`tie`) is applied to a shortlist ``tied``
        (layouts with ``tp``, ``pp`` and ``cp``, the best first): how many of the others differ
        from the best in the terms no pair measured, for which the band is carried over; and,
        given ``ranks`` (:func:`~perfkit.plan.layout_ranks`), what the ranking of published
        (TP, PP) choices says of the band there (:func:`published_choices`).

        Raises:
            TypeError, ValueError: ``tied`` empty, ``band`` not a finite number >= 0, ``ranks``
                not of :class:`LayoutRank`.
        """
        band = check_real("band", band, 0)
        checked = published_choices(ranks, band) if ranks else ""
        tied = list(tied)
        if not tied:
            raise ValueError("tied must hold the best layout at least")
        key = [(x.tp, x.pp, x.cp) for x in tied]
        n = sum(k != key[0] for k in key[1:])
        out = (f"{len(tied)} layout{'s lie' if len(tied) > 1 else ' lies'} within {band:.0%} of the best "
               f"(the {TIE_QUANTILE * 100:.0f}th percentile of the pairs' errors, rounded)")
        if len(tied) == 1:
            return out + ": it ranks the best alone"
        out += ": the planner cannot rank them; measure the candidates"
        if n:
            m = len(tied) - 1
            some = ("The other differs" if m == 1 else f"{n} of the {m} others differ" if n < m
                    else f"All {n} others differ")
            out += (f". {some} from the best in TP, PP or CP, where the "
                    f"band is carried over from pairs that differ in none of them: for those it is no bound "
                    "on the planner's error" + (f"; {checked}" if checked else ""))
        return out


def published_choices(ranks: Sequence[LayoutRank], band: float) -> str:
    """What the ranking of published (TP, PP) choices (:func:`~perfkit.plan.layout_ranks`, each
    a layout its authors tuned) says of a tie band ``band`` carried over to TP and PP: the
    choices the planner puts beyond the band from its best, each with its figure, or that it
    puts every ranked one within it. A clause for :meth:`PairedError.carried`.

    Raises:
        TypeError, ValueError: ``ranks`` empty or not of :class:`LayoutRank`, ``band`` not >= 0.
    """
    from perfkit.plan.published import LayoutRank  # published imports this module's plan

    band = check_real("band", band, 0)
    ranks = list(ranks)
    if not ranks:
        raise ValueError("ranks must hold at least one row")
    for i, r in enumerate(ranks):
        check_type(f"ranks[{i}]", r, LayoutRank)
    fit = [r for r in ranks if r.rank is not None]
    out = [r for r in fit if r.published_over_best - 1 > band]
    head = f"section 4 ranks {len(ranks)} published Megatron-LM (TP, PP) choices, tuned by their authors"
    if not out:
        return head + f": the planner puts each of the {len(fit)} it fits within the band of its best"
    return (head + f": the planner puts {len(out)} at " + " and ".join(
        f"{r.published_over_best - 1:+.1%} ({r.label})" for r in out) + " against its best, beyond the band, "
        "so on TP and PP its error may well exceed it")


def paired_error(cmp: Comparison) -> PairedError:
    """The planner's error on a *difference*: for every pair of rows of one model and sequence in
    one table (they differ in GPUs, micro-batch, global batch or recomputation), the predicted
    ratio of their throughputs over the reported one, ``(1 + e_i) / (1 + e_j)``; its median
    distance from 1 (symmetric: ``exp(|log|) - 1``). The fitted efficiency, one per GPU type, and
    the FLOP count of the model are shared by both rows and nearly cancel, so this is the error of
    the terms in which two layouts of one run differ, which is what ranking them needs; the
    median |error| over rows is the error of one run's throughput. Fitted rows count too (the
    fit sets the shared scale only). These pairs differ in data parallelism, micro-batches and
    recomputation, not in tensor or pipeline parallelism, which no table holds two of for one model.

    Raises:
        TypeError, ValueError: ``cmp`` not a :class:`Comparison`, or no two rows of one model,
            sequence and table.
    """
    from perfkit.plan.published import Comparison  # published imports this module's plan

    check_type("cmp", cmp, Comparison)
    groups: dict[str, list[RowResult]] = {}
    for r in cmp.rows:
        groups.setdefault(f"{r.run.table}: {r.run.model.name} s={r.run.model.seq}", []).append(r)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    gaps = [abs(math.log((1 + a.error) / (1 + b.error)))
            for rs in groups.values() for a, b in itertools.combinations(rs, 2)]
    if not gaps:
        raise ValueError("cmp must hold two rows of one model, sequence and table")
    band, tie = stats.median(gaps), stats.quantile(gaps, TIE_QUANTILE)
    return PairedError(math.exp(band) - 1, math.exp(stats.quantile(gaps, 0.9)) - 1, len(gaps),
                       {k: [r.run.label for r in v] for k, v in groups.items()}, math.exp(tie) - 1,
                       tuple(sum(g > q for g in gaps) / len(gaps) for q in (band, tie)))
