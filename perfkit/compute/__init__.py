"""Compute (module 06): FLOPs and MFU, torch.compile's cost, kernels and shapes, throughput.

Model FLOPs and MFU, precision and compile trade-offs, bytes moved by elementwise chains
and attention, matmul shapes, the largest batch in a memory budget, tokens/s per setting.

Usage::

    flops = gpt_train_flops(n_params, n_layer, d_model, seq_len, tokens)
    print(mfu(flops, step_s, cached_limits()))
    print(measure_compile(fn, x).break_even_calls)
"""

from perfkit.compute.budget import (
    BatchSearch,
    BudgetProbe,
    OOMProbe,
    largest_batch,
)
from perfkit.compute.claims_precision import (
    AttentionKeep,
    GradientFlush,
    PrecisionTiming,
    autocast_activation_ratio,
    gradient_flush,
    kdim_attention_check,
    predicted_skips,
    scaler_first_update,
    time_precision_step,
)
from perfkit.compute.claims_speed import (
    ActivationTiming,
    ChannelsLastCheck,
    CompileTiming,
    ConvTiming,
    ThreadTiming,
    channels_last_check,
    mlp_step,
    speedup_estimate,
    time_activations,
    time_compile,
    time_grouped_conv,
    time_thread_counts,
)
from perfkit.compute.claims_ultra import (
    Setting,
    SwitchTiming,
    UltraTiming,
    setting_step,
    switches,
    time_switches,
    time_ultra,
)
from perfkit.compute.compiling import (
    CompileRecord,
    GraphReport,
    cold_compile_cost,
    graph_breaks,
    measure_compile,
)
from perfkit.compute.flops import (
    PRECISIONS,
    GPTShape,
    Speedup,
    compare,
    gpt2_shape,
    gpt_train_flops,
    make_train_step,
    mfu,
    precision_dtype,
)
from perfkit.compute.intensity import (
    NEAR_ROOF,
    OpCount,
    StepRoofline,
    count_ops,
    step_roofline,
)
from perfkit.compute.kernels import (
    AttentionPoint,
    ChainBytes,
    ShapePoint,
    activation_bytes,
    attention_matrix_bytes,
    attention_sweep,
    elementwise_chain_bytes,
    matmul_shape_sweep,
    pad_to_multiple,
)
from perfkit.compute.throughput import (
    StepBench,
    ThroughputPoint,
)

__all__ = [
    "NEAR_ROOF",
    "OpCount",
    "StepRoofline",
    "count_ops",
    "step_roofline",
    "Setting",
    "SwitchTiming",
    "UltraTiming",
    "setting_step",
    "switches",
    "time_switches",
    "time_ultra",
    "AttentionKeep",
    "GradientFlush",
    "PrecisionTiming",
    "autocast_activation_ratio",
    "gradient_flush",
    "kdim_attention_check",
    "predicted_skips",
    "scaler_first_update",
    "time_precision_step",
    "ActivationTiming",
    "ChannelsLastCheck",
    "CompileTiming",
    "ConvTiming",
    "ThreadTiming",
    "channels_last_check",
    "mlp_step",
    "speedup_estimate",
    "time_activations",
    "time_compile",
    "time_grouped_conv",
    "time_thread_counts",
    "activation_bytes",
    "attention_matrix_bytes",
    "attention_sweep",
    "cold_compile_cost",
    "AttentionPoint",
    "BatchSearch",
    "BudgetProbe",
    "ChainBytes",
    "compare",
    "CompileRecord",
    "elementwise_chain_bytes",
    "gpt2_shape",
    "gpt_train_flops",
    "GPTShape",
    "graph_breaks",
    "GraphReport",
    "largest_batch",
    "make_train_step",
    "matmul_shape_sweep",
    "measure_compile",
    "mfu",
    "OOMProbe",
    "pad_to_multiple",
    "precision_dtype",
    "PRECISIONS",
    "ShapePoint",
    "Speedup",
    "StepBench",
    "ThroughputPoint",
]
