"""Planning at scale (module 13): choose the layout of a run on a cluster you cannot try.

A model (:mod:`perfkit.plan.model`), a cluster (:mod:`perfkit.plan.cluster`), a layout
(:mod:`perfkit.plan.layout`); memory per GPU (:mod:`perfkit.plan.memory_model`) and step time
(:mod:`perfkit.plan.step_time`) of each; the search (:mod:`perfkit.plan.search`), held to
what a run's framework offered (:mod:`perfkit.plan.framework`); published runs
to hold it against (:mod:`perfkit.plan.published`) and published per-GPU memory
(:mod:`perfkit.plan.memory_runs`); which collectives hide behind compute, framework by
framework (:mod:`perfkit.plan.overlap`); this machine (:mod:`perfkit.plan.local`);
checkpoints, failures and the effective training time left (:mod:`perfkit.plan.failures`);
the ``perfkit plan`` command (:mod:`perfkit.plan.command`).

Usage::

    p = plan(model_from_config("config.json"), named_cluster("h100-sxm"), gpus=64, global_batch=512)
    print(report_text(p))
    print(compare(megatron_runs()).median_error)
"""

from perfkit.plan.cluster import (
    ASSUMED_LATENCY_S,
    ATTENTION_EFFICIENCY,
    GPU,
    GPUS,
    MEMORY_EFFICIENCY,
    Cluster,
    local_cluster,
    named_cluster,
)
from perfkit.plan.command import (
    add_parser,
    header_lines,
    parse_tokens,
    report_json,
    report_text,
    run,
)
from perfkit.plan.failures import (
    DEFAULT_RESTART_S,
    LLAMA3_EFFECTIVE_TRAINING,
    LLAMA3_FAILURES,
    LLAMA3_GPU_FAILURES_PER_YEAR,
    LLAMA3_STORAGE_BYTES_PER_S,
    FailurePlan,
    add_failure_arguments,
    checkpoint_bytes,
    failure_lines,
    failure_options,
    failure_plan,
    llama3_check,
)
from perfkit.plan.framework import (
    MEGATRON_LM_2021,
    MEGATRON_LM_2021_FP16,
    Framework,
    framework_problems,
)
from perfkit.plan.layout import (
    SCHEDULES,
    Layout,
    check_layout,
    layout_problems,
)
from perfkit.plan.llm_analysis import (
    LLM_ANALYSIS_HBM_EFFICIENCY,
    LLM_ANALYSIS_INSTALL,
    LLM_ANALYSIS_VERSION,
    LlmAnalysisPrediction,
    compare_llm_analysis,
    llm_analysis_inputs,
    predict_llm_analysis,
)
from perfkit.plan.local import (
    COURSE_LAYOUTS,
    LINK_METHOD,
    LINK_SIZES,
    CoursePredictions,
    course_predictions,
    fit_step_efficiency,
    link_cache_path,
    local_link,
    pipeline_prediction,
    ring_step,
    step_spans,
    tiny_gpt2_spec,
)
from perfkit.plan.local_tp import (
    TP_LAYOUTS,
    TPPrediction,
    plain_gpt_spec,
    rounds_link,
    tp_allreduces,
    tp_memory,
    tp_prediction,
    tp_rank_params,
    tp_step_time,
)
from perfkit.plan.memory_model import (
    BUCKET_BYTES,
    MemoryBreakdown,
    memory_per_gpu,
    stage_params,
)
from perfkit.plan.memory_runs import (
    LLAMA31_SHAPES,
    MEMORY_SOURCE,
    TORCHTITAN_GPU,
    TORCHTITAN_MEMORY_ROWS,
    MemoryResult,
    MemoryRun,
    memory_check,
    memory_runs,
)
from perfkit.plan.model import (
    RECOMPUTE,
    ModelSpec,
    model_from_config,
)
from perfkit.plan.overlap import (
    OVERLAP_RULES,
    OverlapRule,
    exposed_time,
)
from perfkit.plan.published import (
    Comparison,
    LayoutRank,
    PublishedRun,
    RowResult,
    compare,
    fit_efficiency,
    fit_rows,
    foundry_runs,
    layout_ranks,
    megatron_runs,
    micro_batch_overhead,
    predict,
)
from perfkit.plan.runs_data import (
    FOUNDRY_COMMIT,
    FOUNDRY_EARLY_STOP,
    FOUNDRY_MB_SWEEP,
    FOUNDRY_MB_SWEEP_SOURCE,
    FOUNDRY_ROWS,
    FOUNDRY_TABLES,
    MEGATRON_HEADS,
    MEGATRON_ROWS,
    MPT_SHAPES,
)
from perfkit.plan.search import (
    Candidate,
    Plan,
    enumerate_layouts,
    plan,
)
from perfkit.plan.step_time import (
    MEM_PASSES,
    StepTime,
    group_allreduce_time,
    loss_passes,
    step_time,
)

__all__ = [
    "add_failure_arguments",
    "add_parser",
    "ASSUMED_LATENCY_S",
    "ATTENTION_EFFICIENCY",
    "MEMORY_EFFICIENCY",
    "BUCKET_BYTES",
    "Candidate",
    "check_layout",
    "Cluster",
    "compare",
    "compare_llm_analysis",
    "Comparison",
    "checkpoint_bytes",
    "course_predictions",
    "CoursePredictions",
    "COURSE_LAYOUTS",
    "DEFAULT_RESTART_S",
    "enumerate_layouts",
    "failure_lines",
    "failure_options",
    "failure_plan",
    "FailurePlan",
    "fit_efficiency",
    "fit_rows",
    "fit_step_efficiency",
    "Framework",
    "framework_problems",
    "FOUNDRY_COMMIT",
    "FOUNDRY_EARLY_STOP",
    "FOUNDRY_MB_SWEEP",
    "FOUNDRY_MB_SWEEP_SOURCE",
    "FOUNDRY_ROWS",
    "foundry_runs",
    "FOUNDRY_TABLES",
    "GPU",
    "GPUS",
    "group_allreduce_time",
    "Layout",
    "LayoutRank",
    "layout_problems",
    "layout_ranks",
    "link_cache_path",
    "llama3_check",
    "LLAMA3_EFFECTIVE_TRAINING",
    "LLAMA3_FAILURES",
    "LLAMA3_GPU_FAILURES_PER_YEAR",
    "LLAMA3_STORAGE_BYTES_PER_S",
    "llm_analysis_inputs",
    "LLM_ANALYSIS_HBM_EFFICIENCY",
    "LLM_ANALYSIS_INSTALL",
    "LLM_ANALYSIS_VERSION",
    "LlmAnalysisPrediction",
    "LINK_METHOD",
    "LINK_SIZES",
    "local_cluster",
    "local_link",
    "loss_passes",
    "MEGATRON_HEADS",
    "MEGATRON_LM_2021",
    "MEGATRON_LM_2021_FP16",
    "MEGATRON_ROWS",
    "megatron_runs",
    "micro_batch_overhead",
    "MEM_PASSES",
    "LLAMA31_SHAPES",
    "MEMORY_SOURCE",
    "memory_check",
    "memory_per_gpu",
    "memory_runs",
    "MemoryBreakdown",
    "MemoryResult",
    "MemoryRun",
    "TORCHTITAN_GPU",
    "TORCHTITAN_MEMORY_ROWS",
    "model_from_config",
    "ModelSpec",
    "MPT_SHAPES",
    "named_cluster",
    "OVERLAP_RULES",
    "OverlapRule",
    "exposed_time",
    "parse_tokens",
    "Plan",
    "pipeline_prediction",
    "plain_gpt_spec",
    "plan",
    "ring_step",
    "predict",
    "predict_llm_analysis",
    "PublishedRun",
    "RECOMPUTE",
    "rounds_link",
    "report_json",
    "report_text",
    "header_lines",
    "RowResult",
    "run",
    "SCHEDULES",
    "stage_params",
    "step_time",
    "step_spans",
    "StepTime",
    "tiny_gpt2_spec",
    "TP_LAYOUTS",
    "TPPrediction",
    "tp_allreduces",
    "tp_memory",
    "tp_prediction",
    "tp_rank_params",
    "tp_step_time",
]
