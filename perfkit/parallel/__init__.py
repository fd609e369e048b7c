"""Parallelism (modules 02 and 05): data parallelism from scratch and ZeRO around torch.optim.

NaiveDP, BucketedDP and OverlappedDP build DDP's gradient all-reduce step by step;
ZeroOptimizer shards any torch.optim optimizer across ranks: stage 1 its state, stage 2 the
gradients too (BucketReducer reduce-scatters them during backward), stage 3 the parameters
as well, held by a ShardedModule (FSDP: gathered block by block, MixedPrecision optional);
ShardedLossScaler scales fp16 losses with an overflow check every rank agrees on.

Usage::

    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=2, module=model, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()   # step() is collective
    full = opt.state_dict()                        # collective; AdamW's own format
    sharded = ShardedModule(model, blocks=list(model.transformer.h))   # stage 3
    opt3 = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=1e-3)
"""

from perfkit.parallel.buckets import (
    ShardedBucket,
    build_buckets,
    check_param_groups,
    consolidated_state,
    shard_state,
)
from perfkit.parallel.clip import (
    clip_grad_norm_,
    tensor_parallel_pieces,
)
from perfkit.parallel.context import (
    SPLITS,
    RingStats,
    ring_attention,
    segments,
    shard_sequence,
    unshard_sequence,
    waits_after_ready,
)
from perfkit.parallel.context_model import (
    DIAGONALS,
    RingBytes,
    contiguous_imbalance,
    imbalance,
    imbalance_noise_note,
    longest_sequence,
    ring_bytes,
    ring_memory_bytes,
    ring_transfers_s,
    ring_work,
    split_cost_note,
    timed_imbalance,
)
from perfkit.parallel.data_parallel import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    BucketedDP,
    NaiveDP,
    OverlappedDP,
    assign_buckets,
)
from perfkit.parallel.flat import (
    all_gather_flat,
    reduce_scatter_flat,
    shard_range,
)
from perfkit.parallel.gpt import (
    GPT,
    MLP,
    Attention,
    Block,
    Embed,
    GPTConfig,
    Head,
    gpt_loss,
    split_layers,
)
from perfkit.parallel.pipeline import (
    StepRecord,
    average_gradients,
    balance,
    build_stages,
    layer_costs,
    run_schedule,
)
from perfkit.parallel.reducer import (
    BucketReducer,
)
from perfkit.parallel.scaler import (
    ShardedLossScaler,
)
from perfkit.parallel.schedule_notes import (
    band_side,
    between_note,
    busy_note,
    fb_split_note,
    zb_side,
    zb_split_step,
    zb_step_note,
)
from perfkit.parallel.schedules import (
    KINDS,
    SCHEDULES,
    Action,
    Schedule,
    dependencies,
    gpipe,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
    parse_actions,
    zb_h1,
)
from perfkit.parallel.sequence import (
    gather_from_sequence,
    mark_sequence_parallel,
    reduce_scatter_to_sequence,
    scatter_to_sequence,
    sync_sequence_parallel_grads,
)
from perfkit.parallel.sharded_grad import (
    ShardedGradient,
)
from perfkit.parallel.simulate import (
    DEFAULT_COSTS,
    DeadlockError,
    Slot,
    Timeline,
    bubble_formula,
    execution_order,
    peak_in_flight,
    play,
    simulate,
    split_costs,
    stage_costs,
    timeline_from,
    validate,
)
from perfkit.parallel.tensor import (
    ColumnParallelLinear,
    RNGTracker,
    RowParallelLinear,
    copy_to_tp,
    gather_from_tp,
    reduce_from_tp,
    split_to_tp,
    tp_shard,
)
from perfkit.parallel.tp_costs import (
    TPBlockCost,
    block_flops,
    crossover_width,
    region_activation_bytes,
    speedup_crossing,
    sweep_time,
    tp_block_cost,
)
from perfkit.parallel.tp_gpt import (
    TensorParallelGPT,
    check_tp_degree,
    parallelize_gpt,
    sp_synced_values,
    tp_traffic,
)
from perfkit.parallel.tp_notes import (
    bound_text,
    charge_choice,
    charge_dips,
    intercept_note,
    offset_note,
    sweep_charge_note,
)
from perfkit.parallel.tp_overlap import (
    column_region,
)
from perfkit.parallel.vocab import (
    REDUCTIONS,
    VocabParallelEmbedding,
    vocab_parallel_cross_entropy,
)
from perfkit.parallel.zero import (
    ZeroOptimizer,
)
from perfkit.parallel.zero3 import (
    MixedPrecision,
    ShardedModule,
)

__all__ = [
    "ShardedGradient",
    "timed_imbalance", "split_cost_note",
    "SPLITS",
    "RingStats",
    "ring_attention",
    "segments",
    "shard_sequence",
    "unshard_sequence",
    "waits_after_ready",
    "DIAGONALS",
    "RingBytes",
    "contiguous_imbalance",
    "imbalance",
    "imbalance_noise_note",
    "longest_sequence",
    "ring_bytes",
    "ring_memory_bytes",
    "ring_transfers_s",
    "ring_work",
    "Attention",
    "Block",
    "Embed",
    "GPT",
    "GPTConfig",
    "gpt_loss",
    "Head",
    "MLP",
    "split_layers",
    "all_gather_flat",
    "assign_buckets",
    "BucketedDP",
    "BucketReducer",
    "build_buckets",
    "check_param_groups",
    "consolidated_state",
    "MixedPrecision",
    "NaiveDP",
    "OverlappedDP",
    "reduce_scatter_flat",
    "shard_range",
    "shard_state",
    "ShardedBucket",
    "ShardedLossScaler",
    "ShardedModule",
    "ZeroOptimizer",
    # pipeline schedules (module 11)
    "KINDS", "SCHEDULES", "Action", "DeadlockError", "Schedule", "dependencies",
    "band_side", "between_note", "busy_note", "execution_order", "fb_split_note",
    "gpipe", "interleaved_1f1b", "make_schedule", "one_f_one_b",
    "parse_actions", "validate", "zb_h1", "zb_side", "zb_split_step", "zb_step_note",
    "DEFAULT_COSTS", "Slot", "Timeline", "bubble_formula", "peak_in_flight", "play", "simulate",
    "split_costs", "stage_costs",
    "timeline_from",
    "StepRecord", "average_gradients", "balance", "build_stages", "layer_costs", "run_schedule",
    # tensor and sequence parallelism (module 10)
    "ColumnParallelLinear", "RNGTracker", "RowParallelLinear",
    "TensorParallelGPT", "VocabParallelEmbedding", "check_tp_degree", "copy_to_tp",
    "gather_from_sequence", "gather_from_tp", "mark_sequence_parallel", "parallelize_gpt",
    "reduce_from_tp", "reduce_scatter_to_sequence", "scatter_to_sequence", "split_to_tp",
    "sp_synced_values", "sync_sequence_parallel_grads", "tp_shard", "tp_traffic",
    "vocab_parallel_cross_entropy",
    "REDUCTIONS",
    "TPBlockCost", "block_flops", "bound_text",
    "crossover_width", "region_activation_bytes", "speedup_crossing",
    "sweep_time", "tp_block_cost", "charge_choice", "charge_dips", "sweep_charge_note", "intercept_note",
    "offset_note",
    "column_region",
    # gradient clipping over shards; DDP's bucket sizes
    "clip_grad_norm_", "tensor_parallel_pieces", "DDP_BUCKET_CAP_BYTES", "DDP_FIRST_BUCKET_BYTES",
]
