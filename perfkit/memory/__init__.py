"""Memory (modules 04 and 05): model states, saved activations, a training step's anatomy.

ZeRO's model-state formulas and exact counts, the saved-tensor meter, the GPT-2 activation
model with activation checkpointing, and one step's memory measured.

Usage::

    print(zero_model_states(7.5e9, world_size=64, stage=1).total_gb)   # 31.40625
    with SavedTensorMeter(model) as meter:
        loss = model(x).sum()
"""

from perfkit.memory.activations import (
    ActivationEstimate,
    CheckpointedBlock,
    checkpoint_blocks,
    checkpoint_cost_text,
    flop_rule_text,
    gpt2_num_params,
    gpt2_saved_activation_bytes,
    gpt2_step_memory,
    recompute_flop_share,
)
from perfkit.memory.anatomy import (
    StepAnatomy,
    measure_step_anatomy,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
    steady_peak_text,
    trim_heap,
)
from perfkit.memory.claims import (
    CheckpointFiles,
    CheckpointSavings,
    EmptyCacheTiming,
    SequentialCheck,
    SizingRatios,
    ZeroRuleRow,
    advised_zero_stage,
    checkpoint_file_sizes,
    checkpoint_sequential_check,
    checkpointing_savings,
    largest_model_for_stage,
    sizing_ratios,
    time_emptied_cache,
    zero_rule_rows,
)
from perfkit.memory.experiments import (
    CHECKPOINTING,
    blocks_forward,
    gpt2_variant,
    measure_saved,
    train_step,
)
from perfkit.memory.lora import (
    adamw_trainer,
    amdahl_parts,
    forward_backward,
    frozen_twin,
    gpt2_pair,
    lora_bound,
)
from perfkit.memory.model_states import (
    RECIPES,
    LiveModelStates,
    ModelStateBytes,
    ParamCount,
    StateRecipe,
    count_parameters,
    live_model_states,
    optimizer_state_bytes,
    storage_bytes,
    zero_model_states,
    zero_table,
)
from perfkit.memory.saved_tensors import (
    SavedTensorMeter,
    SavedTensorReport,
)

__all__ = [
    "adamw_trainer",
    "amdahl_parts",
    "forward_backward",
    "frozen_twin",
    "gpt2_pair",
    "lora_bound",
    "CHECKPOINTING",
    "blocks_forward",
    "gpt2_variant",
    "measure_saved",
    "train_step",
    "CheckpointFiles",
    "CheckpointSavings",
    "EmptyCacheTiming",
    "SequentialCheck",
    "SizingRatios",
    "ZeroRuleRow",
    "advised_zero_stage",
    "checkpoint_file_sizes",
    "checkpoint_sequential_check",
    "checkpointing_savings",
    "largest_model_for_stage",
    "sizing_ratios",
    "time_emptied_cache",
    "zero_rule_rows",
    "ActivationEstimate",
    "checkpoint_blocks",
    "CheckpointedBlock",
    "count_parameters",
    "live_model_states",
    "LiveModelStates",
    "storage_bytes",
    "gpt2_num_params",
    "gpt2_saved_activation_bytes",
    "gpt2_step_memory",
    "measure_step_anatomy",
    "ModelStateBytes",
    "optimizer_state_bytes",
    "ParamCount",
    "peak_rss_bytes",
    "RECIPES",
    "checkpoint_cost_text",
    "flop_rule_text",
    "recompute_flop_share",
    "reset_peak_rss",
    "rss_bytes",
    "SavedTensorMeter",
    "SavedTensorReport",
    "StateRecipe",
    "StepAnatomy",
    "steady_peak_text",
    "trim_heap",
    "zero_model_states",
    "zero_table",
]
