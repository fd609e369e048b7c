"""Profiling (module 01): where a training step's time goes.

StepMonitor and MemoryMonitor time your own loop's phases, the Profiler wraps torch.profiler
and reads phase shares back from its trace, and diagnose turns shares into findings.

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

__all__ = [
    "diagnose",
    "Finding",
    "measure_workload",
    "MemoryMonitor",
    "MemoryRecord",
    "OpStat",
    "PHASES",
    "PhaseStats",
    "ProfileConfig",
    "Profiler",
    "ProfileResult",
    "StepMonitor",
    "StepSummary",
    "Thresholds",
    "trace_breakdown",
    "TraceBreakdown",
]
