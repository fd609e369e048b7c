"""Profiling (module 01): where a training step's time goes.

Two step timers: StepMonitor (and MemoryMonitor) time the phases of a loop you write and send
them to sinks (TensorBoard, JSON lines, Prometheus); StepRecorder finds the steps of a script
you cannot change and profiles a window of them. Two trace readers, both through
trace_events: trace_breakdown sums the nested phases a Profiler run recorded, attribute_trace
labels each instant of a StepRecorder window once; machine_load measures what the machine's
load cost the window. One diagnosis: diagnose_shares judges any of their shares by the one
rules table (RULES) at one Thresholds and returns Finding records;
alert_rules turns the same thresholds into Prometheus alerts. run_diagnosis (``python -m
perfkit diagnose train.py``) does it all for an unchanged script: build_report merges the
ranks and ranks the findings, footprint measures the memory split, render writes the report.

Usage::

    mon = StepMonitor(warmup=2)
    ...  # your loop, with `with mon.phase("forward"):` around each phase
    print(mon.summary(), diagnose_shares(mon.summary()))
"""

from perfkit.profiling.alerts import ALERTS, alert_rules, prometheus_config
from perfkit.profiling.attribution import CATEGORIES, TraceAttribution, attribute_trace
from perfkit.profiling.capstone import (
    CapstoneJob,
    FixLoop,
    Round,
    Total,
    job_peak,
    next_fix,
    round_speedup,
)
from perfkit.profiling.capstone_explain import explain_round, phase_ms, window_gain
from perfkit.profiling.capstone_text import (
    CONTEXT_KINDS,
    Pick,
    bound_class,
    context_kinds_text,
    percent2,
    reads_pick,
    still_listed,
)
from perfkit.profiling.footprint import memory_split
from perfkit.profiling.machine_load import CpuSnapshot, LoadRecord, cpu_snapshot, load_between
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
    trace_events,
)
from perfkit.profiling.recorder import StepRecorder, WindowDone
from perfkit.profiling.render import render_html, render_markdown, render_text
from perfkit.profiling.report import build_report, rank_record
from perfkit.profiling.rules import RULES, Finding, Rule, StepShares, diagnose_shares
from perfkit.profiling.session import DiagnoseConfig, run_diagnosis
from perfkit.profiling.sinks import (
    METRICS,
    JsonLinesSink,
    PrometheusSink,
    TensorBoardSink,
    process_rank,
    read_json_lines,
    read_scalars,
    window_scalars,
)
from perfkit.profiling.thresholds import Thresholds
from perfkit.profiling.workload import measure_workload

__all__ = [
    "CONTEXT_KINDS",
    "bound_class",
    "context_kinds_text",
    "CapstoneJob",
    "FixLoop",
    "Pick",
    "Round",
    "Total",
    "explain_round",
    "reads_pick",
    "percent2",
    "still_listed",
    "window_gain",
    "phase_ms",
    "job_peak",
    "next_fix",
    "round_speedup",
    "ALERTS",
    "alert_rules",
    "prometheus_config",
    "JsonLinesSink",
    "METRICS",
    "PrometheusSink",
    "process_rank",
    "read_json_lines",
    "read_scalars",
    "TensorBoardSink",
    "window_scalars",
    "attribute_trace",
    "CpuSnapshot",
    "cpu_snapshot",
    "LoadRecord",
    "load_between",
    "build_report",
    "CATEGORIES",
    "DiagnoseConfig",
    "diagnose_shares",
    "Finding",
    "measure_workload",
    "memory_split",
    "MemoryMonitor",
    "MemoryRecord",
    "OpStat",
    "PHASES",
    "PhaseStats",
    "rank_record",
    "Rule",
    "RULES",
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
    "StepShares",
    "StepWindow",
    "Thresholds",
    "trace_breakdown",
    "TraceBreakdown",
    "trace_events",
]
