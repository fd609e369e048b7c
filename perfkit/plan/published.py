"""The planner held against published runs: Megatron-LM's Table 1 and llm-foundry's benchmarks.

Each row of :mod:`perfkit.plan.runs_data` becomes a :class:`PublishedRun`: the model
(:class:`ModelSpec`), the layout its source reports, the cluster (datasheet GPU; the
network its source names, else :func:`named_cluster`'s default), the global batch and the
reported throughput in tokens/s per GPU (Megatron's TFLOP/s are turned into tokens/s with
their own FLOP count, which includes recomputation: :meth:`ModelSpec.megatron_flops_per_token`).
:func:`fit_efficiency` fits one achievable matmul efficiency per GPU type, on at most two
rows of each of its tables (the two whose reported MFU lies nearest the table's median);
every other row is a prediction. Beside it, :func:`compare` reports the baseline that predicts the fitted
rows' mean MFU (in model FLOPs) for every row: a planner that does not beat it explains nothing.

Usage::

    rows = megatron_runs() + foundry_runs()
    result = compare(rows)
    print(result.median_error, result.baseline_median_error, result.worst)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfkit import stats
from perfkit._checks import check_choice, check_items, check_real, check_type
from perfkit.memory.model_states import StateRecipe
from perfkit.plan.cluster import ATTENTION_EFFICIENCY, Cluster, named_cluster
from perfkit.plan.framework import MEGATRON_LM_2021, Framework
from perfkit.plan.layout import Layout
from perfkit.plan.model import ModelSpec
from perfkit.plan.runs_data import (
    FOUNDRY_COMMIT,
    FOUNDRY_EARLY_STOP,
    FOUNDRY_FLASH2,
    FOUNDRY_ROWS,
    FOUNDRY_TABLES,
    MEGATRON_HEADS,
    MEGATRON_ROWS,
    MPT_SHAPES,
)
from perfkit.plan.search import TIE_BAND, plan
from perfkit.plan.step_time import step_time

__all__ = ["Comparison", "LayoutRank", "PublishedRun", "RowResult", "compare", "fit_efficiency",
           "fit_rows", "foundry_runs", "layout_ranks", "megatron_runs", "predict"]

MEGATRON_SOURCE = "Narayanan et al. 2021 (arXiv 2104.04473) Table 1, via NVIDIA/Megatron-LM README"


@dataclass(frozen=True)
class PublishedRun:
    """One published run: what the planner is given and what the source reported.

    Attributes:
        table: the source table (one efficiency is fitted per table).
        label: model and size as the source names them.
        model, layout, cluster, global_batch: the run.
        reported_tokens_per_gpu: tokens/s per GPU, as reported or converted.
        reported_mfu: the source's utilisation, in its own FLOP accounting (a share).
        flops_per_token: that accounting's FLOPs per token.
        source: the paper and table, or repository, commit and file.
        reduce_bytes: bytes per gradient element in the data-parallel reduction (the
            run's reduce dtype: fp32 under Composer's ``DEFAULT`` mixed precision).
        framework: the :class:`Framework` the run used, where the planner holds one
            (``None``: any option, bf16 weights and gradients with fp32 Adam).
        attention: the fused attention kernel, a key of :data:`ATTENTION_EFFICIENCY`
            (``""``: none, the scores kept as Megatron-LM's 2021 code did).
    """

    table: str
    label: str
    model: ModelSpec
    layout: Layout
    cluster: Cluster
    global_batch: int
    reported_tokens_per_gpu: float
    reported_mfu: float
    flops_per_token: float
    source: str
    reduce_bytes: float = 2.0
    framework: Framework | None = None
    attention: str = ""

    @property
    def model_mfu(self) -> float:
        """The reported utilisation in model FLOPs (no recomputation): Megatron-LM's Table 1
        counts the recomputed forward, so its rows are scaled by
        ``megatron_model_flops_per_token / megatron_flops_per_token``; llm-foundry's MFU already is."""
        if self.table != "megatron":
            return self.reported_mfu
        return self.reported_mfu * self.model.megatron_model_flops_per_token() / self.flops_per_token

    @property
    def recipe(self) -> StateRecipe | str:
        """The model-state recipe: the framework's, else ``"mixed_adam"``."""
        return "mixed_adam" if self.framework is None else self.framework.recipe

    def settings(self) -> dict[str, object]:
        """What the source sets per row, by name: a row differs from another in these."""
        lay = self.layout
        return {"GPUs": lay.gpus, "micro-batch": lay.micro_batch, "global batch": self.global_batch,
                "sequence": self.model.seq, "ZeRO stage": lay.zero, "recomputation": lay.recompute,
                "gradient reduce bytes": self.reduce_bytes, "attention kernel": self.attention}


def megatron_runs() -> list[PublishedRun]:
    """Table 1's ten runs: GPT with vocabulary 51,200, sequence 2048, learned positions and
    dropout, full recomputation, fp16; TP = min(MP, 8), PP = MP / TP; A100 80GB, 8 per node;
    gradients all-reduced after the backward (``Cluster.ddp_after_backward``: Megatron-LM's
    local DDP at the paper's time, NVIDIA/Megatron-LM@a8d172b3 megatron/training.py); the
    framework :data:`perfkit.plan.framework.MEGATRON_LM_2021` (no ZeRO, SP or CP; 20 bytes
    per parameter; stages that divide the layers). Heads come from the paper's Table 1
    (:data:`MEGATRON_HEADS`); the table gives no micro-batch size or interleaving:
    :func:`predict` takes the planner's best."""
    out = []
    for name, h, layers, _billions, mp, gpus, batch, tflops, pct, _agg in MEGATRON_ROWS:
        model = ModelSpec(f"GPT {name}", layers=layers, hidden=h, heads=MEGATRON_HEADS[name], ffn=4 * h,
                          vocab=51200, seq=2048, dropout=True, flash=False, positions=2048,
                          source=MEGATRON_SOURCE)
        tp = min(mp, 8)
        lay = Layout(dp=gpus // mp, tp=tp, pp=mp // tp, recompute="full")
        per_token = model.megatron_flops_per_token()
        out.append(PublishedRun("megatron", f"GPT {name} on {gpus}", model, lay,
                                replace(named_cluster("a100-80gb"), ddp_after_backward=True),
                                batch, tflops * 1e12 / per_token,
                                pct / 100, per_token, MEGATRON_SOURCE, framework=MEGATRON_LM_2021))
    return out


def foundry_runs(tables: Sequence[str] = tuple(FOUNDRY_TABLES)) -> list[PublishedRun]:
    """llm-foundry's BF16 rows: MPT (GELU MLP of 4h, no dropout, FlashAttention, learned
    positions: the reported parameter count grows with the sequence), FSDP (``FULL_SHARD``:
    ZeRO-3, ``SHARD_GRAD_OP``: ZeRO-2) over all GPUs, gradients reduced in fp32 under the
    ``DEFAULT`` mixed precision and in bf16 under ``PURE``, activation checkpointing as full
    recomputation (with PyTorch 2.1's early stop in :data:`FOUNDRY_EARLY_STOP`'s tables). A100
    tables name a 1600 Gb/s node interconnect (200 Gb/s per GPU); the H100 tables name none
    (400 Gb/s per GPU assumed). FSDP overlaps as Composer configures it by default
    (``Cluster.dp_overlap = "composer"``, :data:`perfkit.plan.overlap.OVERLAP_RULES`). The MPT
    yamls ask for ``attn_impl: triton``, the Triton port of FlashAttention of 2022-23, as fast
    as the first generation (FlashAttention-2's paper compares both); the rows of
    :data:`~perfkit.plan.runs_data.FOUNDRY_FLASH2` ran FlashAttention-2. Each at its
    generation's stated shares of the peak, forward and backward
    (:data:`perfkit.plan.cluster.ATTENTION_EFFICIENCY`, not fitted)."""
    out = []
    src = f"mosaicml/llm-foundry@{FOUNDRY_COMMIT[:8]} scripts/train/benchmarking/README.md"
    for table, name, seq, gpus, mfu, mb, _acc, gbs, tok_gpu, mp, shard, ckpt, n in FOUNDRY_ROWS:
        if table not in tables:
            continue
        layers, d, heads, ratio, vocab = MPT_SHAPES[name]
        model = ModelSpec(f"MPT {name}", layers=layers, hidden=d, heads=heads, ffn=ratio * d,
                          vocab=vocab, seq=seq, positions=seq, source=src)
        lay = Layout(dp=gpus, zero=3 if shard == "FULL_SHARD" else 2, micro_batch=mb,
                     recompute="full" if ckpt else "none",
                     early_stop=bool(ckpt and table in FOUNDRY_EARLY_STOP))
        gpu = "h100-sxm" if table.startswith("h100") else table
        kernel = (f"flash{2 if name in FOUNDRY_FLASH2.get(table, ()) else 1}-"
                  f"{'h100' if gpu == 'h100-sxm' else 'a100'}")
        fwd, bwd = ATTENTION_EFFICIENCY[kernel]
        cluster = named_cluster(gpu, attention_efficiency=fwd, attention_backward_efficiency=bwd)
        # the README's own count: 6 x every parameter (embeddings too) + 12 L d s per token
        per_token = 6 * n + 12 * layers * d * seq
        out.append(PublishedRun(table, f"MPT {name} s={seq} on {gpus}", model, lay,
                                replace(cluster, dp_overlap="composer"), gbs, float(tok_gpu), mfu / 100,
                                per_token, f"{src}, {FOUNDRY_TABLES[table]}", 4.0 if mp == "DEFAULT" else 2.0,
                                attention=kernel))
    return out


def predict(run: PublishedRun, efficiency: float) -> float:
    """Predicted tokens/s per GPU at ``efficiency``: the row's layout; where the source left
    the micro-batch size and interleaving open (Megatron), the fastest of micro-batches
    1, 2, 4, 8 and interleaving 1, 2, 4 that divide the batch and the layers.

    Raises:
        TypeError, ValueError: for a ``run`` that is not a :class:`PublishedRun` or an
            ``efficiency`` outside (0, 1].
    """
    check_type("run", run, PublishedRun)
    cluster = run.cluster.with_efficiency(efficiency)
    lays = [run.layout]
    if run.table == "megatron":
        lay, m = run.layout, run.model
        lays = [replace(lay, micro_batch=b, interleave=v) for b in (1, 2, 4, 8) for v in (1, 2, 4)
                if run.global_batch % (lay.dp * b) == 0 and m.layers % (lay.pp * v) == 0
                and (v == 1 or (lay.pp > 1 and (run.global_batch // (lay.dp * b)) % lay.pp == 0))]
    best = min(step_time(run.model, lay, cluster, run.global_batch, run.recipe,
                         grad_bytes=run.reduce_bytes).total_s for lay in lays)
    return run.global_batch * run.model.seq / best / run.layout.gpus


def fit_rows(runs: Sequence[PublishedRun], table: str, count: int = 2) -> list[PublishedRun]:
    """The ``count`` rows of ``table`` (at most 2) whose reported MFU lies nearest the
    table's median, first in source order on ties: the rows an efficiency is fitted on.

    Raises:
        ValueError: for a ``count`` outside 1-2 or a table with no rows.
    """
    if count not in (1, 2):
        raise ValueError(f"count must be 1 or 2 (at most two rows per table are fitted), got {count!r}")
    rows = [r for r in runs if r.table == table]
    if not rows:
        raise ValueError(f"table {table!r} has no rows")
    mid = stats.median([r.reported_mfu for r in rows])
    return sorted(rows, key=lambda r: abs(r.reported_mfu - mid))[:count]


def fit_efficiency(rows: Sequence[PublishedRun]) -> float:
    """The efficiency at which the planner's mean log error over ``rows`` is zero (bisection:
    the prediction grows with the efficiency), clipped to [0.05, 1].

    Raises:
        TypeError, ValueError: for an empty ``rows`` or items that are not runs.
    """
    rows = [check_type(f"rows[{i}]", r, PublishedRun) for i, r in enumerate(check_items("rows", rows))]

    def err(e: float) -> float:
        return sum(math.log(predict(r, e) / r.reported_tokens_per_gpu) for r in rows)

    lo, hi = 0.05, 1.0
    if err(hi) < 0:
        return hi
    if err(lo) > 0:
        return lo
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if err(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class RowResult:
    """One row: reported, predicted by the planner and by the constant-MFU baseline."""

    run: PublishedRun
    fitted: bool
    predicted: float  # tokens/s per GPU
    baseline: float  # tokens/s per GPU

    @property
    def error(self) -> float:
        """``predicted / reported - 1``."""
        return self.predicted / self.run.reported_tokens_per_gpu - 1

    @property
    def baseline_error(self) -> float:
        """``baseline / reported - 1``."""
        return self.baseline / self.run.reported_tokens_per_gpu - 1


@dataclass(frozen=True)
class Comparison:
    """Every row's result, and the fitted figures per table."""

    rows: list[RowResult]
    efficiency: dict[str, float]
    baseline_mfu: dict[str, float]

    def _held_out(self) -> list[RowResult]:
        return [r for r in self.rows if not r.fitted]

    @property
    def median_error(self) -> float:
        """Median of ``|error|`` over the rows not fitted."""
        return stats.median([abs(r.error) for r in self._held_out()])

    @property
    def baseline_median_error(self) -> float:
        """The constant-MFU baseline's median ``|error|`` over the same rows."""
        return stats.median([abs(r.baseline_error) for r in self._held_out()])

    @property
    def worst(self) -> RowResult:
        """The held-out row with the largest ``|error|``."""
        return max(self._held_out(), key=lambda r: abs(r.error))

    def within(self, tolerance: float) -> float:
        """Share of held-out rows with ``|error| <= tolerance``."""
        held = self._held_out()
        return sum(abs(r.error) <= tolerance for r in held) / len(held)


_CALIBRATIONS = ("gpu", "chip", "other_tables")


def compare(runs: Sequence[PublishedRun], fit_count: int = 2, calibrate: str = "gpu") -> Comparison:
    """Fit an efficiency on :func:`fit_rows` of each table, predict every row, and the baseline.

    Args:
        runs: the published rows.
        fit_count: rows fitted per table (1 or 2).
        calibrate: which tables share a fitted figure. ``"gpu"``: one per GPU type (Megatron-LM's
            table and llm-foundry's A100-80GB table share one, as do the two H100 tables; the
            A100-40GB table, alone on its type, gets its own, so its held-out rows are judged
            within the table that fitted them). ``"chip"``: one per chip (the same peak FLOP/s:
            the A100-40GB and 80GB share one). ``"other_tables"``: each table's rows predicted
            from the figure fitted on the other tables of its chip only, none of its own rows
            fitted: the cross-table error.

    The baseline predicts each row at the same fitted rows' mean MFU in model FLOPs
    (:attr:`PublishedRun.model_mfu`: one count for every source), each row's tokens/s per GPU
    ``mfu * peak / model_flops_per_token``. ``Comparison.efficiency``
    and ``baseline_mfu`` are keyed by table (the figure its rows were predicted with).

    Raises:
        TypeError, ValueError: for an empty ``runs``, a bad ``fit_count``, an unknown
            ``calibrate``, or (``"other_tables"``) a table alone on its chip.
    """
    runs = [check_type(f"runs[{i}]", r, PublishedRun) for i, r in enumerate(check_items("runs", runs))]
    check_real("fit_count", fit_count, 1, 2)
    check_choice("calibrate", calibrate, _CALIBRATIONS)
    key = (lambda r: r.cluster.gpu.name) if calibrate == "gpu" else (lambda r: r.cluster.gpu.peak_flops)
    eff, base, rows = {}, {}, []
    for group in dict.fromkeys(key(r) for r in runs):
        mine = [r for r in runs if key(r) == group]
        tables = list(dict.fromkeys(r.table for r in mine))
        if calibrate == "other_tables" and len(tables) < 2:
            raise ValueError(f"calibrate='other_tables' needs two tables per chip; {tables[0]!r} is "
                             "alone on its chip")
        for fitted_on in ([[t for t in tables if t != u] for u in tables] if calibrate == "other_tables"
                          else [tables]):
            predicted = [u for u in tables if u not in fitted_on] or tables
            fit = [f for t in fitted_on for f in fit_rows(mine, t, fit_count)]
            e, b = fit_efficiency(fit), sum(r.model_mfu for r in fit) / len(fit)
            eff.update(dict.fromkeys(predicted, e))
            base.update(dict.fromkeys(predicted, b))
            for r in (r for r in mine if r.table in predicted):
                rows.append(RowResult(r, any(r is f for f in fit), predict(r, e),
                                      b * r.reported_mfu / r.model_mfu * r.cluster.gpu.peak_flops
                                      / r.flops_per_token))
    order = {t: i for i, t in enumerate(dict.fromkeys(r.table for r in runs))}
    rows.sort(key=lambda x: order[x.run.table])  # stable: each table in source order
    return Comparison(rows, eff, base)


@dataclass(frozen=True)
class LayoutRank:
    """Where a published (TP, PP) falls among the planner's layouts of the same run."""

    label: str
    published: tuple[int, int]
    ranked: list[tuple[int, int]]  # distinct (TP, PP), fastest first
    published_over_best: float  # predicted step time of the published (TP, PP) over the best
    tolerance: float
    why: str = ""  # why the published (TP, PP)'s best layout loses to the best (Plan.why_not)

    @property
    def rank(self) -> int | None:
        """1 for the best; ``None`` if the published layout does not fit."""
        return self.ranked.index(self.published) + 1 if self.published in self.ranked else None

    @property
    def ok(self) -> bool:
        """Among the three best, or within ``tolerance`` of the best (a tie it cannot resolve)."""
        r = self.rank
        return r is not None and (r <= 3 or self.published_over_best <= 1 + self.tolerance)


def layout_ranks(cmp: Comparison, table: str = "megatron") -> list[LayoutRank]:
    """For each row of ``table``: the planner's distinct (TP, PP) ranked by their best layout
    at the table's fitted efficiency, with the row's software held: its framework
    (:attr:`PublishedRun.framework`; Megatron-LM 2021: no ZeRO, SP or CP, 20 bytes per
    parameter and a flattened gradient copy, even pipeline stages) and its recomputation,
    SP, ZeRO stage and CP. The tolerance is :data:`~perfkit.plan.search.TIE_BAND`, the
    planner's error on the ratio of two published rows of one model (not of one row).

    Raises:
        ValueError: for a table ``cmp`` has no rows of.
    """
    check_type("cmp", cmp, Comparison)
    rows = [r for r in cmp.rows if r.run.table == table]
    if not rows:
        raise ValueError(f"table {table!r} has no rows in cmp")
    out = []
    for r in (x.run for x in rows):
        p = plan(r.model, r.cluster.with_efficiency(cmp.efficiency[table]), r.layout.gpus,
                 r.global_batch, fixed={"recompute": r.layout.recompute, "sp": r.layout.sp,
                                        "zero": r.layout.zero, "cp": r.layout.cp},
                 framework=r.framework)
        best: dict[tuple[int, int], float] = {}
        for c in p.best:
            best.setdefault((c.layout.tp, c.layout.pp), c.time.total_s)
        ranked = sorted(best, key=best.get)
        pub = (r.layout.tp, r.layout.pp)
        over = best[pub] / best[ranked[0]] if pub in best else math.inf
        at = next((i for i, c in enumerate(p.best) if (c.layout.tp, c.layout.pp) == pub), 0)
        out.append(LayoutRank(r.label, pub, ranked, over, TIE_BAND, p.why_not(at) if at else ""))
    return out

