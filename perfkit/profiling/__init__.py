"""Profiling (module 01): where a training step's time goes.

StepMonitor and MemoryMonitor time your own loop's phases and write them to sinks
(TensorBoard, JSON lines, Prometheus), the Profiler wraps torch.profiler and reads phase shares
back from its trace, diagnose turns shares into findings, and alert_rules turns the same
thresholds into Prometheus alerts. run_diagnosis (``python -m perfkit diagnose train.py``)
does all of it for an unchanged script: StepRecorder finds its steps, attribute_trace splits
them, build_report ranks the findings and measures the memory split (footprint), and
render writes the report.

Usage::

    mon = StepMonitor(warmup=2)
    ...  # your loop, with `with mon.phase("forward"):` around each phase
    print(mon.summary(), diagnose(mon.summary()))
"""

from perfkit.profiling.alerts import ALERTS, alert_rules, prometheus_config
from perfkit.profiling.analyzer import (
    Finding,
    Thresholds,
    diagnose,
    measure_workload,
)
from perfkit.profiling.attribution import CATEGORIES, TraceAttribution, attribute_trace
from perfkit.profiling.footprint import memory_split
from perfkit.profiling.memory_monitor import MemoryMonitor, MemoryRecord
from perfkit.profiling.monitor import (
    PHASES,
    PhaseStats,
    StepMonitor,
    StepSummary,
    StepWindow,
)
from perfkit.profiling.profiler import (
    OpStat,
    ProfileConfig,
    Profiler,
    ProfileResult,
    TraceBreakdown,
    trace_breakdown,
)
from perfkit.profiling.recorder import StepRecorder, WindowDone
from perfkit.profiling.render import render_html, render_markdown, render_text
from perfkit.profiling.report import DiagnoseThresholds, build_report, rank_record
from perfkit.profiling.session import DiagnoseConfig, run_diagnosis
from perfkit.profiling.sinks import (
    METRICS,
    JsonLinesSink,
    PrometheusSink,
    TensorBoardSink,
    process_rank,
    read_scalars,
    window_scalars,
)

__all__ = [
    "ALERTS",
    "alert_rules",
    "prometheus_config",
    "JsonLinesSink",
    "METRICS",
    "PrometheusSink",
    "process_rank",
    "read_scalars",
    "TensorBoardSink",
    "window_scalars",
    "attribute_trace",
    "build_report",
    "CATEGORIES",
    "DiagnoseConfig",
    "DiagnoseThresholds",
    "diagnose",
    "Finding",
    "measure_workload",
    "memory_split",
    "MemoryMonitor",
    "MemoryRecord",
    "OpStat",
    "PHASES",
    "PhaseStats",
    "rank_record",
    "render_html",
    "render_markdown",
    "render_text",
    "run_diagnosis",
    "StepRecorder",
    "TraceAttribution",
    "WindowDone",
    "ProfileConfig",
    "Profiler",
    "ProfileResult",
    "StepMonitor",
    "StepSummary",
    "StepWindow",
    "Thresholds",
    "trace_breakdown",
    "TraceBreakdown",
]
