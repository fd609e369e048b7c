"""Profiling (module 01): where a training step's time goes.

StepMonitor and MemoryMonitor time your own loop's phases, the Profiler wraps torch.profiler
and reads phase shares back from its trace, and diagnose turns shares into findings.
run_diagnosis (``python -m perfkit diagnose train.py``) does all of it for an unchanged
script: StepRecorder finds its steps, attribute_trace splits them, build_report ranks the
findings.

Usage::

    mon = StepMonitor(warmup=2)
    ...  # your loop, with `with mon.phase("forward"):` around each phase
    print(mon.summary(), diagnose(mon.summary()))
"""

from perfkit.profiling.analyzer import (
    Finding,
    Thresholds,
    diagnose,
    measure_workload,
)
from perfkit.profiling.attribution import CATEGORIES, TraceAttribution, attribute_trace
from perfkit.profiling.monitor import (
    PHASES,
    MemoryMonitor,
    MemoryRecord,
    PhaseStats,
    StepMonitor,
    StepSummary,
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
from perfkit.profiling.report import (
    DiagnoseThresholds,
    build_report,
    rank_record,
    render_html,
    render_markdown,
    render_text,
)
from perfkit.profiling.session import DiagnoseConfig, run_diagnosis

__all__ = [
    "attribute_trace",
    "build_report",
    "CATEGORIES",
    "DiagnoseConfig",
    "DiagnoseThresholds",
    "diagnose",
    "Finding",
    "measure_workload",
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
    "Thresholds",
    "trace_breakdown",
    "TraceBreakdown",
]
