"""The PyTorch profiler with a schedule, trace export and the phase breakdown of a trace.

:class:`Profiler` wraps ``torch.profiler.profile`` with a wait/warmup/active schedule
and writes a Chrome trace to ``build/traces/NAME.pt.trace.json``: open it in
https://ui.perfetto.dev or ``chrome://tracing``, or point TensorBoard's profiler plugin
at the folder. :func:`trace_breakdown` reads the ``phase:NAME`` markers that
``StepMonitor(annotate=True)`` puts into the trace and derives each phase's share of the
step from the trace alone; :func:`perfkit.profiling.diagnose_shares` turns the shares into
findings. :func:`trace_events` is the one reader of a Chrome trace's file, which
:func:`trace_breakdown` and :func:`perfkit.profiling.attribute_trace` share.

Usage::

    mon = StepMonitor(warmup=2, annotate=True)
    with Profiler(ProfileConfig(wait=1, warmup=1, active=3), name="gpt2") as prof:
        train_steps(wl, prof.config.total_steps, monitor=mon, on_step=prof.step)
    print(prof.result().top_ops[:5], prof.result().breakdown)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function, schedule

from perfkit._checks import check_int, check_real, check_type
from perfkit.timing import resolve_device

__all__ = ["OpStat", "ProfileConfig", "ProfileResult", "Profiler", "TraceBreakdown", "trace_breakdown",
           "trace_events"]

PHASE_PREFIX = "phase:"


@dataclass(frozen=True)
class ProfileConfig:
    """The profiler's schedule and options.

    ``wait`` steps run unprofiled, ``warmup`` steps are profiled and thrown away (the
    profiler's own start-up cost lands there), ``active`` steps are recorded.
    """

    wait: int = 1
    warmup: int = 1
    active: int = 3
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    trace_dir: str | os.PathLike = "build/traces"

    def __post_init__(self) -> None:
        for k in ("wait", "warmup", "active"):
            check_int(k, getattr(self, k), 1 if k == "active" else 0)
        check_type("trace_dir", self.trace_dir, (str, os.PathLike))

    @property
    def total_steps(self) -> int:
        """Steps to run so that every active step is recorded."""
        return self.wait + self.warmup + self.active


@dataclass(frozen=True)
class OpStat:
    """One operator over the active steps; times in seconds, ``share`` of all operators' self time.

    Ranges are not operators: the ``record_function`` ranges PyTorch or a user marks (the
    optimizer's ``Optimizer.step#...``, ``enumerate(DataLoader)...``, ``ProfilerStep#N``, the
    ``phase:NAME`` markers) are left out of the list and of the shares' denominator."""

    name: str
    calls: int
    self_cpu_s: float
    cpu_total_s: float
    self_device_s: float
    share: float


@dataclass(frozen=True)
class TraceBreakdown:
    """Phase shares derived from a trace: mean seconds per step and share of the step."""

    steps: int
    step_mean_s: float
    phase_mean_s: dict[str, float]
    parents: dict[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 1)
        check_real("step_mean_s", self.step_mean_s, 0, lo_open=True)  # shares divide by it
        check_type("phase_mean_s", self.phase_mean_s, dict)

    def shares(self, top_level: bool = True) -> dict[str, float]:
        """Phase -> share of the mean step, with ``other`` (time outside top-level phases)."""
        out = {k: v / self.step_mean_s for k, v in self.phase_mean_s.items()
               if not (top_level and self.parents.get(k))}
        top = sum(v for k, v in self.phase_mean_s.items() if not self.parents.get(k))
        out["other"] = max(0.0, 1.0 - top / self.step_mean_s)
        return out


@dataclass(frozen=True)
class ProfileResult:
    """What one profiled run produced: the trace file, the top operators, the breakdown."""

    trace_path: Path
    top_ops: list[OpStat]
    breakdown: TraceBreakdown | None


_RANGE_PREFIXES = (PHASE_PREFIX, "ProfilerStep", "Optimizer.", "enumerate(DataLoader)")  # not operators


def _is_range(event: Any) -> bool:
    """Whether a ``key_averages`` row is a ``record_function`` range rather than an operator: the
    profiler's own flag where this torch sets it, else the names PyTorch's ranges carry."""
    return bool(getattr(event, "is_user_annotation", False)) or event.key.startswith(_RANGE_PREFIXES)


def trace_events(trace: str | os.PathLike | Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The complete events (``"ph": "X"``, a start and a duration) of a Chrome trace.

    Args:
        trace: a path to a ``.json`` trace, or the parsed trace dict.

    Raises:
        TypeError: if ``trace`` is neither a path nor a mapping.
        ValueError: if the file is not JSON, or not a JSON object with a ``traceEvents`` list.
    """
    check_type("trace", trace, (str, os.PathLike, Mapping))
    try:
        data = trace if isinstance(trace, Mapping) else json.loads(Path(trace).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"trace {str(trace)!r} is not a JSON file: {e}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("traceEvents", []), list):
        raise ValueError("trace must be a Chrome trace: a JSON object with a traceEvents list")
    return [e for e in data.get("traceEvents", []) if isinstance(e, Mapping) and e.get("ph") == "X"]


def trace_breakdown(trace: str | os.PathLike | Mapping[str, Any]) -> TraceBreakdown:
    """Per-phase time from a Chrome trace's ``ProfilerStep#N`` and ``phase:NAME`` events.

    A phase belongs to the step whose window holds its start; repeated phases in a step are
    summed; a phase inside another phase (same thread) is recorded with that parent, and its
    time counts in both (a nested breakdown). These are host-side (CPU) annotations: on CUDA
    they measure when work was issued, not run. :func:`perfkit.profiling.attribute_trace`
    answers another question on the traces ``perfkit diagnose`` writes: it labels each
    instant once, in fixed categories (syncs and exposed collectives included), so that its
    shares add up to one.

    Args:
        trace: a path to a ``.json`` trace, or the parsed trace dict.

    Raises:
        TypeError: if ``trace`` is neither a path nor a mapping.
        ValueError: if the trace is not a Chrome trace, holds no ``ProfilerStep#`` events
            (profile with a schedule and call ``step()``) or no ``phase:`` markers
            (``StepMonitor(annotate=True)`` or :meth:`Profiler.phase`).
    """
    events = [e for e in trace_events(trace) if e.get("cat") == "user_annotation"]
    if any(not {"name", "ts", "dur", "tid"} <= e.keys() for e in events):
        raise ValueError("trace has user_annotation events without a name, ts, dur or tid")
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    phases = [e for e in events if e["name"].startswith(PHASE_PREFIX)]
    if not steps:
        raise ValueError("trace has no ProfilerStep# events: call Profiler.step() every step")
    if not phases:
        raise ValueError("trace has no 'phase:' markers: use StepMonitor(annotate=True) "
                         "or Profiler.phase(name)")
    totals: dict[str, float] = {}
    parents: dict[str, str | None] = {}
    for p in phases:
        name = p["name"][len(PHASE_PREFIX):]
        if not any(s["ts"] <= p["ts"] < s["ts"] + s["dur"] for s in steps):
            continue  # a phase outside the recorded steps
        totals[name] = totals.get(name, 0.0) + p["dur"] * 1e-6  # µs -> s
        outer = [q for q in phases if q is not p and q["tid"] == p["tid"]
                 and q["ts"] <= p["ts"] and p["ts"] + p["dur"] <= q["ts"] + q["dur"]]
        parents.setdefault(name, max(outer, key=lambda q: q["ts"])["name"][len(PHASE_PREFIX):]
                           if outer else None)
    n = len(steps)
    return TraceBreakdown(n, sum(s["dur"] for s in steps) * 1e-6 / n,
                          {k: v / n for k, v in totals.items()}, parents)


def quiet_kineto() -> None:
    """Keep Kineto (the profiler's C++ side) from writing its USDT probe lines to stderr.

    Every profiler start and stop prints ``USDT:... SyncActivityProfilerHandler.cpp:52]
    profiler_start`` (and ``profiler_stop``) to the process's stderr, where a notebook shows
    them as output. Kineto reads ``KINETO_LOG_LEVEL`` once, when the process first profiles,
    and only a level above USDT's (6) silences these lines; its errors are silenced with them.
    A level the user set is kept. Call before the process's first profiler starts (the
    :class:`Profiler` and the ``diagnose`` recorder do); a later call changes nothing.
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


class Profiler:
    """``torch.profiler`` with a schedule, a named Chrome trace, top operators and phases.

    Args:
        config: schedule and options; see :class:`ProfileConfig`.
        name: the trace file's stem: ``<trace_dir>/<name>.pt.trace.json``.
        device: profiles CUDA activity as well when this is a CUDA device.

    Call :meth:`step` at the end of every training step (``ProfilerStep#N`` marks the
    step windows) and run at least ``config.total_steps`` steps.
    """

    def __init__(self, config: ProfileConfig | None = None, name: str = "run",
                 device: torch.device | str | None = None) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"name must be a non-empty file stem without '/', got {name!r}")
        self.config = check_type("config", config, ProfileConfig, optional=True) or ProfileConfig()
        self.name = name
        self.device = resolve_device(device)
        self.trace_path = Path(self.config.trace_dir) / f"{name}.pt.trace.json"
        self._prof: torch.profiler.profile | None = None
        self._result: ProfileResult | None = None

    def __enter__(self) -> Profiler:
        quiet_kineto()
        acts = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            acts.append(ProfilerActivity.CUDA)
        c = self.config
        self._prof = torch.profiler.profile(
            activities=acts, schedule=schedule(wait=c.wait, warmup=c.warmup, active=c.active,
                                               repeat=1),
            on_trace_ready=self._ready, record_shapes=c.record_shapes,
            profile_memory=c.profile_memory, with_stack=c.with_stack)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._prof is not None
        self._prof.__exit__(*exc)

    def step(self) -> None:
        """Mark the end of a training step (advances the schedule)."""
        if self._prof is None:
            raise RuntimeError("Profiler.step() outside `with Profiler(...)`")
        self._prof.step()

    @staticmethod
    def phase(name: str) -> record_function:
        """A ``phase:NAME`` marker for code not timed by a ``StepMonitor(annotate=True)``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        return record_function(PHASE_PREFIX + name)

    def _ready(self, prof: torch.profiler.profile) -> None:
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.trace_path))
        ops = [k for k in prof.key_averages() if not _is_range(k)]
        on_device = self.device.type == "cuda"
        total = sum(k.self_device_time_total if on_device else k.self_cpu_time_total
                    for k in ops) or 1.0
        stats = [OpStat(k.key, k.count, k.self_cpu_time_total * 1e-6,
                        k.cpu_time_total * 1e-6, k.self_device_time_total * 1e-6,
                        (k.self_device_time_total if on_device else k.self_cpu_time_total)
                        / total) for k in ops]
        stats.sort(key=lambda s: s.share, reverse=True)
        try:
            breakdown: TraceBreakdown | None = trace_breakdown(self.trace_path)
        except ValueError:
            breakdown = None  # no phase markers in this run: top operators only
        self._result = ProfileResult(self.trace_path, stats, breakdown)

    def result(self) -> ProfileResult:
        """The run's :class:`ProfileResult`.

        Raises:
            RuntimeError: if fewer than ``config.total_steps`` steps ran, so no trace exists.
        """
        if self._result is None:
            raise RuntimeError(f"no trace yet: run at least {self.config.total_steps} steps "
                               "(wait + warmup + active), calling step() after each")
        return self._result
