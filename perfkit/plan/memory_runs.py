"""The planner's memory model held against published per-GPU memory.

torchtitan's benchmark of Llama 3.1 8B, 70B and 405B on H100s with 96 GB of HBM2e
(pytorch/torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md``, torch 1963fc8,
torchtitan 9dec370, December 2024) reports, for each layout it ran, the largest per-GPU
memory over the run ("Memory (GiB)": torchtitan's metrics log the caching allocator's maximum
reserved memory; for pipelines the maximum over all GPUs). Each row of
:data:`TORCHTITAN_MEMORY_ROWS` is copied from its tables with the layout the table states;
:func:`memory_runs` turns them into :class:`MemoryRun` records (model, :class:`Layout`, global
batch, published bytes, and the framework terms torchtitan's code fixes: PyTorch's
cross-entropy peak and, under a pipeline, unsharded FSDP weights and gradients; see
:mod:`perfkit.plan.memory_model`), and :func:`memory_check` predicts each and reports the
error and whether the layout fits the GPU.

The published figure is reserved memory, the prediction allocated memory
(:data:`PUBLISHED_MEASURE`): reserved holds every allocated byte plus the blocks the allocator
keeps cached, so it bounds the allocated peak from above (:attr:`MemoryResult.at_most_published`),
and the gap between them is not one constant of the allocator. Other published FSDP runs report
peak reserved over peak active from 1.27 to 1.35 (:data:`RESERVED_OVER_ACTIVE_ELSEWHERE`);
torchtitan's figures are 1.06 to 1.29 times the planner's allocated bytes (1.14 and 1.15 for the
eager 8B FSDP rows, 1.06 with ``torch.compile``), so the smallest of those sourced ratios would
overshoot the eager rows by 11 % and the compiled ones by 20 %. No source gives the gap for
these runs, and the planner adds no fragmentation term.

torchtitan's "selective op" checkpointing is the planner's ``recompute="op"`` (every second
matmul of a block rerun, :meth:`perfkit.plan.model.ModelSpec.op_matmuls`), not Korthikanti et
al.'s selective recomputation (attention's scores only). What the planner does not model, each
row says in ``unmodelled``: Float8 linears and ``torch.compile`` (their own buffers and
fusions), AsyncTP's buffers, and the allocator's fragmentation (reserved over allocated memory).

Usage::

    results = memory_check(memory_runs())
    print([(r.run.label, round(r.error, 3), r.fits) for r in results])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfkit._checks import check_items, check_real, check_type
from perfkit.plan.cluster import GPU
from perfkit.plan.layout import Layout
from perfkit.plan.memory_model import MemoryBreakdown, memory_per_gpu
from perfkit.plan.model import ModelSpec

__all__ = ["LLAMA31_SHAPES", "MEMORY_SOURCE", "PUBLISHED_MEASURE", "RESERVED_OVER_ACTIVE_ELSEWHERE",
           "TORCHTITAN_GPU", "TORCHTITAN_MEMORY_ROWS", "MemoryResult", "MemoryRun", "memory_check",
           "memory_runs"]

GIB = 2**30
MEMORY_SOURCE = ("pytorch/torchtitan@31a17bfd benchmarks/llama3_h100_202412_torchtitan.md "
                 "(torch 1963fc8, torchtitan 9dec370, Dec 2024)")

# What "Memory (GiB)" measures: torchtitan@9dec370 train.py logs ``memory:
# {device_mem_stats.max_reserved_gib}GiB``, which torchtitan/metrics.py's
# DeviceMemoryMonitor.get_peak_stats reads from torch.cuda.memory_stats()'s
# "reserved_bytes.all.peak" (beside "active_bytes.all.peak", logged only to TensorBoard/W&B,
# not published). The planner's memory model counts live tensors: allocated bytes.
PUBLISHED_MEASURE = ("the caching allocator's peak reserved bytes (torch.cuda.memory_stats "
                     "reserved_bytes.all.peak; torchtitan@9dec370 train.py logs max_reserved_gib, "
                     "torchtitan/metrics.py get_peak_stats)")

# Peak active and peak reserved memory (GB, per GPU) that other FSDP runs published side by side,
# as their authors printed them: reserved over active is not one constant of the allocator.
# (source, peak active, peak reserved)
RESERVED_OVER_ACTIVE_ELSEWHERE = (
    ("meta-llama/llama-cookbook#41 (was facebookresearch/llama-recipes): Llama-2 7B LoRA, FSDP "
     "pure bf16, 4 A100 40GB, limit_all_gathers=True", 20.20, 27.36),
    ("meta-llama/llama-cookbook#41: the same after dropping the logits before backward", 15.22, 19.36),
    ("meta-llama/llama-cookbook#165: Llama 7B, 8 GPUs, use_cache=True, a prototype per-parameter "
     "FSDP (its author: the existing FSDP behaves alike)", 14.93, 19.52),
)

# torchtitan/models/llama/__init__.py's llama3_configs (dim, n_layers, n_heads, n_kv_heads,
# ffn_dim_multiplier, multiple_of), with model.py's FeedForward width: 2/3 of 4 dim, times the
# multiplier, rounded up to multiple_of; vocabulary 128,256 (the Llama 3 tokenizer), untied.
# name: (layers, hidden, heads, kv_heads, ffn)
LLAMA31_SHAPES = {
    "8B": (32, 4096, 32, 8, 14336),
    "70B": (80, 8192, 64, 8, 28672),
    "405B": (126, 16384, 128, 8, 53248),
}

# The benchmark's "Hardware": H100s with 96 GB of HBM2e at 2.4 TB/s; the peak is "between SXM
# and NVL" and not known (only memory is used here: the SXM peak is a placeholder).
TORCHTITAN_GPU = GPU("H100 96GB HBM2e (Grand Teton)", 989e12, 96e9, 2.4e12, 450e9,
                     MEMORY_SOURCE + ", Hardware")

# (table, technique, model, sequence, fsdp, tp, pp, cp, local batch, activation checkpointing,
#  schedule, GiB). Local batch: sequences per data-parallel rank and step; under a pipeline
# torchtitan splits it into pipeline_parallel_microbatches, whose default is the number of
# stages (torchtitan config_manager.py). Tables 2, 4, 5, 6 ran with torch.compile and Float8;
# Tables 5 and 6 with AsyncTP too (their headings).
TORCHTITAN_MEMORY_ROWS = (
    ("Table 1", "FSDP", "8B", 8192, 8, 1, 1, 1, 2, "selective op", "", 82.4),
    ("Table 1", "FSDP + torch.compile", "8B", 8192, 8, 1, 1, 1, 2, "selective op", "", 77.0),
    ("Table 1", "FSDP + torch.compile + Float8", "8B", 8192, 8, 1, 1, 1, 2, "selective op", "", 76.8),
    ("Table 2", "FSDP 8, CP 1", "8B", 32768, 8, 1, 1, 1, 1, "full", "", 83.9),
    ("Table 2", "FSDP 4, CP 2", "8B", 65536, 4, 1, 1, 2, 1, "full", "", 84.2),
    ("Table 2", "FSDP 2, CP 4", "8B", 131072, 2, 1, 1, 4, 1, "full", "", 84.0),
    ("Table 2", "FSDP 1, CP 8", "8B", 262144, 1, 1, 1, 8, 1, "full", "", 84.5),
    ("Table 3", "FSDP", "8B", 8192, 128, 1, 1, 1, 2, "selective op", "", 67.0),
    ("Table 3", "FSDP + torch.compile", "8B", 8192, 128, 1, 1, 1, 2, "selective op", "", 62.0),
    ("Table 3", "FSDP + torch.compile + Float8", "8B", 8192, 128, 1, 1, 1, 2, "selective op", "", 61.8),
    ("Table 4", "2D", "70B", 8192, 32, 8, 1, 1, 16, "full", "", 71.9),
    ("Table 4", "2D + AsyncTP", "70B", 8192, 32, 8, 1, 1, 16, "full", "", 67.6),
    ("Table 5", "1F1B", "405B", 8192, 8, 8, 8, 1, 32, "full", "1F1B", 82.5),
    ("Table 5", "Interleaved 1F1B", "405B", 8192, 8, 8, 8, 1, 32, "full", "Interleaved 1F1B", 72.7),
    ("Table 6", "FSDP 8, CP 1", "405B", 32768, 8, 8, 8, 1, 8, "full", "1F1B", 75.3),
    ("Table 6", "FSDP 4, CP 2", "405B", 65536, 4, 8, 8, 2, 8, "full", "1F1B", 75.9),
    ("Table 6", "FSDP 2, CP 4", "405B", 131072, 2, 8, 8, 4, 8, "full", "1F1B", 77.1),
    ("Table 6", "FSDP 1, CP 8", "405B", 262144, 1, 8, 8, 8, 8, "full", "1F1B", 84.9),
)

# torchtitan's loss: F.cross_entropy on the logits cast to fp32 (torchtitan components/loss.py):
# three fp32 logits-sized tensors at its backward's peak (perfkit.plan.memory_model)
TORCH_CROSS_ENTROPY_COPIES = 3.0


@dataclass(frozen=True)
class MemoryRun:
    """One published per-GPU memory figure and the run it belongs to.

    Attributes:
        table, label: where in the source, and the row's name there.
        model, layout, global_batch: the run.
        published_bytes: the figure (bytes; the source's GiB times 2**30).
        gpu: the GPU it ran on (its memory decides whether the layout fits).
        loss_copies, unsharded_with_pp: the framework terms of
            :func:`perfkit.plan.memory_model.memory_per_gpu`.
        unmodelled: what the run used that the planner has no term for ("" if nothing).
        source: the document and table.
    """

    table: str
    label: str
    model: ModelSpec
    layout: Layout | None
    global_batch: int
    published_bytes: float
    gpu: GPU
    loss_copies: float
    unsharded_with_pp: bool
    unmodelled: str
    source: str


def _llama(name: str, seq: int) -> ModelSpec:
    layers, h, heads, kv, ffn = LLAMA31_SHAPES[name]
    return ModelSpec(f"Llama 3.1 {name}", layers=layers, hidden=h, heads=heads, ffn=ffn,
                     vocab=128256, seq=seq, kv_heads=kv, gated=True, dropout=False, flash=True,
                     tied=False, positions=0, source="torchtitan llama3_configs")


def memory_runs() -> list[MemoryRun]:
    """:data:`TORCHTITAN_MEMORY_ROWS` as :class:`MemoryRun` records.

    FSDP is ZeRO-3 over the FSDP and CP ranks (torchtitan shards over both); its TP is Megatron's
    with sequence parallelism on the norms; "full" is full recomputation of every block; a
    pipeline's micro-batches are torchtitan's default, one per stage. The interleaved row's
    stages per rank are not in the source, and 126 layers split into no equal chunks, so it has
    no layout (``layout is None``): the planner's interleaved schedule needs equal chunks.
    """
    out = []
    for table, label, name, seq, fsdp, tp, pp, cp, local, ac, schedule, gib in TORCHTITAN_MEMORY_ROWS:
        model = _llama(name, seq)
        missing = []
        both = table in ("Table 2", "Table 4", "Table 5", "Table 6")  # compile + Float8 throughout
        if both or "compile" in label:
            missing.append("torch.compile's fusions")
        if both or "Float8" in label:
            missing.append("Float8 linears' casts")
        if "AsyncTP" in label or table in ("Table 5", "Table 6"):  # their headings name AsyncTP
            missing.append("AsyncTP's symmetric-memory buffers")
        lay: Layout | None = None
        if schedule == "Interleaved 1F1B":
            missing.append("interleaved stages per rank (not stated; 126 layers in no equal chunks)")
        else:
            micro = local // pp if pp > 1 else local  # one micro-batch per stage under a pipeline
            lay = Layout(dp=fsdp, tp=tp, pp=pp, cp=cp, zero=3, micro_batch=micro,
                         recompute="full" if ac == "full" else "op", sp=tp > 1)
        missing.append("allocator fragmentation (reserved over allocated)")
        seq_note = f" s={seq}" if table in ("Table 2", "Table 6") else ""  # the tables' varied column
        out.append(MemoryRun(table, f"{name} {label}{seq_note}", model, lay, fsdp * local, gib * GIB,
                             TORCHTITAN_GPU, TORCH_CROSS_ENTROPY_COPIES, pp > 1, "; ".join(missing),
                             f"{MEMORY_SOURCE}, {table}"))
    return out


@dataclass(frozen=True)
class MemoryResult:
    """One published figure against the planner's prediction."""

    run: MemoryRun
    predicted: MemoryBreakdown | None  # None where the run has no layout the planner can state

    @property
    def error(self) -> float | None:
        """``predicted / published - 1`` (``None`` without a prediction)."""
        return None if self.predicted is None else self.predicted.total / self.run.published_bytes - 1

    @property
    def at_most_published(self) -> bool | None:
        """The prediction (allocated bytes) does not exceed the published figure (reserved bytes,
        which hold every allocated one): the bound a model of live tensors must keep
        (``None`` without a prediction)."""
        return None if self.predicted is None else self.predicted.total <= self.run.published_bytes

    @property
    def fits(self) -> bool | None:
        """The prediction fits the GPU's whole memory (the run did train)."""
        return None if self.predicted is None else self.predicted.total <= self.run.gpu.memory_bytes


def memory_check(runs: Sequence[MemoryRun], loss_copies: float | None = None) -> list[MemoryResult]:
    """Predict every run's per-GPU memory (:func:`memory_per_gpu`, the most loaded GPU).

    Args:
        runs: the published figures (:func:`memory_runs`).
        loss_copies: override every run's ``loss_copies`` (>= 1; ``None``: each run's own), to
            see what the loss's term explains.

    Returns:
        One :class:`MemoryResult` per run, in order.

    Raises:
        TypeError, ValueError: for an empty ``runs``, items that are not runs, or a bad
            ``loss_copies``.
    """
    runs = [check_type(f"runs[{i}]", r, MemoryRun) for i, r in enumerate(check_items("runs", runs))]
    if loss_copies is not None:
        check_real("loss_copies", loss_copies, 1)
    out = []
    for r in runs:
        mem = None
        if r.layout is not None:
            mem = memory_per_gpu(r.model, r.layout, r.global_batch,
                                 loss_copies=r.loss_copies if loss_copies is None else loss_copies,
                                 unsharded_with_pp=r.unsharded_with_pp)
        out.append(MemoryResult(r, mem))
    return out
