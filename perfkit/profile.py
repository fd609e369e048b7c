"""The PyTorch profiler with a schedule, trace export, the phase breakdown and a diagnosis.

:class:`Profiler` wraps ``torch.profiler.profile`` with a wait/warmup/active schedule
and writes a Chrome trace to ``build/traces/NAME.pt.trace.json``: open it in
https://ui.perfetto.dev or ``chrome://tracing``, or point TensorBoard's profiler plugin
at the folder. :func:`trace_breakdown` reads the ``phase:NAME`` markers that
``StepMonitor(annotate=True)`` puts into the trace and derives each phase's share of the
step from the trace alone. :func:`diagnose` turns shares into :class:`Finding` records:
the bottleneck, the evidence, what to try and which course notebook teaches the fix.

Usage::

    mon = StepMonitor(warmup=2, annotate=True)
    with Profiler(ProfileConfig(wait=1, warmup=1, active=3), name="gpt2") as prof:
        train_steps(wl, prof.config.total_steps, monitor=mon, on_step=prof.step)
    print(prof.result().top_ops[:5], diagnose(mon.summary()))
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function, schedule

from perfkit.monitor import StepSummary
from perfkit.timing import resolve_device

__all__ = ["Finding", "OpStat", "ProfileConfig", "ProfileResult", "Profiler", "Thresholds",
           "TraceBreakdown", "diagnose", "measure_workload", "trace_breakdown"]

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
            v = getattr(self, k)
            if not isinstance(v, int) or v < (1 if k == "active" else 0):
                raise ValueError(f"{k} must be an int >= {1 if k == 'active' else 0}, got {v!r}")

    @property
    def total_steps(self) -> int:
        """Steps to run so that every active step is recorded."""
        return self.wait + self.warmup + self.active


@dataclass(frozen=True)
class OpStat:
    """One operator over the active steps; times in seconds, ``share`` of all self time."""

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


def trace_breakdown(trace: str | os.PathLike | Mapping[str, Any]) -> TraceBreakdown:
    """Per-phase time from a Chrome trace's ``ProfilerStep#N`` and ``phase:NAME`` events.

    A phase belongs to the step whose window holds its start; repeated phases in a step are
    summed; a phase inside another phase (same thread) is recorded with that parent. These
    are host-side (CPU) annotations: on CUDA they measure when work was issued, not run.

    Args:
        trace: a path to a ``.json`` trace, or the parsed trace dict.

    Raises:
        ValueError: if the trace holds no ``ProfilerStep#`` events (profile with a schedule
            and call ``step()``) or no ``phase:`` markers (``StepMonitor(annotate=True)``
            or :meth:`Profiler.phase`).
    """
    data = trace if isinstance(trace, Mapping) else json.loads(Path(trace).read_text())
    events = [e for e in data.get("traceEvents", [])
              if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
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
        self.config = config or ProfileConfig()
        self.name = name
        self.device = resolve_device(device)
        self.trace_path = Path(self.config.trace_dir) / f"{name}.pt.trace.json"
        self._prof: torch.profiler.profile | None = None
        self._result: ProfileResult | None = None

    def __enter__(self) -> Profiler:
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
        return record_function(PHASE_PREFIX + name)

    def _ready(self, prof: torch.profiler.profile) -> None:
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.trace_path))
        ops = [k for k in prof.key_averages()
               if not k.key.startswith((PHASE_PREFIX, "ProfilerStep"))]
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


# --- the bottleneck analyzer --------------------------------------------------------------


@dataclass(frozen=True)
class Thresholds:
    """When :func:`diagnose` reports a phase, as shares of the mean step (0.10 = 10 %).

    Compared with the PyTorch profiler's TensorBoard plugin (``torch_tb_profiler``), which
    advises on DataLoader time above 5 % of the step and communication above 10 %:

    * ``data`` 0.10, twice the plugin's: the DataLoader's fixed per-batch cost (sampling
      indices, collation) is a few percent of the 5-30 ms CPU steps of this course even
      when nothing is wrong; notebook 01 measures it. Lower it for long GPU steps.
    * ``communication`` 0.10, as the plugin: un-overlapped gradient traffic grows with
      the world size, so 10 % on 2 ranks is a warning for 8.
    * ``optimizer`` 0.25: with Adam the update reads and writes 4 values per parameter
      and should stay well below forward + backward.
    * ``other`` 0.15: time outside every phase (Python overhead, logging, ``.item()``).
    * ``jitter`` 1.5: step-time p99 over p50 (stragglers), judged from ``min_steps`` steps.
    * ``compute`` 0.60: forward + backward above this is reported as compute-bound (info).
    """

    data: float = 0.10
    communication: float = 0.10
    optimizer: float = 0.25
    other: float = 0.15
    jitter: float = 1.5
    compute: float = 0.60
    min_steps: int = 20

    def __post_init__(self) -> None:
        for k in ("data", "communication", "optimizer", "other", "compute"):
            if not 0.0 < getattr(self, k) < 1.0:
                raise ValueError(f"threshold {k} must be a share in (0, 1), got "
                                 f"{getattr(self, k)!r}")
        if self.jitter <= 1.0:
            raise ValueError(f"jitter is a p99/p50 ratio and must be > 1, got {self.jitter}")


@dataclass(frozen=True)
class Finding:
    """One diagnosis: what is slow, the measured evidence, what to do, where it is taught."""

    kind: str
    severity: str  # "high" (>= 2x the threshold), "medium", or "info"
    value: float  # the measured share (or p99/p50 ratio for jitter)
    threshold: float
    evidence: str
    recommendations: tuple[str, ...]
    notebook: str

    def __str__(self) -> str:
        recs = "".join(f"\n  - {r}" for r in self.recommendations)
        return f"[{self.severity}] {self.kind}: {self.evidence}{recs}\n  see {self.notebook}"


_RULES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "data": ("the step waits for input data", (
        "move per-sample decoding/tokenizing out of the step: do it once and cache, or in "
        "DataLoader workers (num_workers > 0, persistent_workers=True)",
        "prefetch the next batch while the model runs (perfkit.data.Prefetcher; on GPU "
        "pin_memory=True and non_blocking copies)",
        "measure the loader alone: if it cannot reach the model's samples/s, no overlap "
        "will hide it"), "notebooks/07_data_loading.ipynb"),
    "communication": ("gradient communication is exposed", (
        "overlap all-reduce with backward (DDP buckets; tune bucket_cap_mb)",
        "communicate less often: gradient accumulation with no_sync(), larger batches",
        "compress gradients (PowerSGD, top-k with error feedback, bf16 hooks)"),
        "notebooks/02_collectives.ipynb, notebooks/03_gradient_compression.ipynb"),
    "optimizer": ("the optimizer update is a large share of the step", (
        "use the foreach or fused implementation (torch.optim.AdamW(fused=True) on GPU)",
        "shard optimizer work and state across ranks (ZeRO-1)",
        "train fewer parameters (LoRA)"), "notebooks/05_zero_and_lora.ipynb"),
    "other": ("much of the step is outside every timed phase", (
        "look for host-device synchronisation (.item(), print of a tensor) in the loop",
        "reduce Python overhead per step: larger batches, torch.compile, fewer small ops",
        "time the missing work as its own phase to see what it is"),
        "notebooks/01_profiling.ipynb"),
    "jitter": ("step times vary a lot (stragglers)", (
        "check for periodic stalls: data workers falling behind, garbage collection, "
        "checkpointing or logging every N steps",
        "on a shared machine, other processes compete for the cores; pin threads"),
        "notebooks/07_data_loading.ipynb"),
    "compute": ("the step is compute-bound (forward + backward dominate)", (
        "use bf16 autocast (and fp16 with GradScaler on older GPUs)",
        "torch.compile to fuse memory-bound operations",
        "use shapes that are multiples of 64 and measure MFU against the machine's peak"),
        "notebooks/06_compute.ipynb"),
}
_KINDS = ("data", "forward", "backward", "optimizer", "communication", "other")


def diagnose(record: StepSummary | TraceBreakdown | Mapping[str, float],
             thresholds: Thresholds | None = None,
             aliases: Mapping[str, str] | None = None) -> list[Finding]:
    """Find the bottlenecks in a step's phase shares; the worst first, info last.

    Args:
        record: a :class:`~perfkit.monitor.StepSummary` (enables the jitter rule), a
            :class:`TraceBreakdown`, or a dict of top-level phase -> share.
        thresholds: when to report; see :class:`Thresholds` for the defaults and why.
        aliases: map user-named phases onto the known kinds, e.g.
            ``{"allreduce": "communication"}``; their shares are added to that kind.
            Phases neither known nor aliased are not judged (their time is still part
            of the step, so they lower every other share).

    Returns:
        A list of :class:`Finding`, empty when nothing crosses a threshold.

    Raises:
        ValueError: if an alias targets an unknown kind, or the shares are not in [0, 1].
    """
    th = thresholds or Thresholds()
    shares = dict(record.shares() if not isinstance(record, Mapping) else record)
    for name, kind in (aliases or {}).items():
        if kind not in _KINDS:
            raise ValueError(f"alias {name!r} -> {kind!r}: kind must be one of {_KINDS}")
        shares[kind] = shares.get(kind, 0.0) + shares.pop(name, 0.0)
    for name, v in shares.items():
        if not 0.0 <= v <= 1.0 + 1e-9:
            raise ValueError(f"share of phase {name!r} must be in [0, 1], got {v}")
    found = []

    def add(kind: str, value: float, limit: float, evidence: str, info: bool = False) -> None:
        title, recs, notebook = _RULES[kind]
        severity = "info" if info else ("high" if value >= 2 * limit else "medium")
        found.append(Finding(kind, severity, value, limit, f"{title}: {evidence}", recs,
                             notebook))

    for kind in ("data", "communication", "optimizer", "other"):
        v, limit = shares.get(kind, 0.0), getattr(th, kind)
        if v > limit:
            add(kind, v, limit, f"{kind} takes {v:.1%} of the step (threshold {limit:.0%})")
    if isinstance(record, StepSummary) and record.steps >= th.min_steps and record.step.p50_s:
        ratio = record.step.p99_s / record.step.p50_s
        if ratio > th.jitter:
            add("jitter", ratio, th.jitter, f"p99 step {record.step.p99_s * 1e3:.1f} ms is "
                f"{ratio:.2f}x the median {record.step.p50_s * 1e3:.1f} ms "
                f"(threshold {th.jitter}x, {record.steps} steps)")
    found.sort(key=lambda f: f.value / f.threshold, reverse=True)
    compute = shares.get("forward", 0.0) + shares.get("backward", 0.0)
    if compute > th.compute:
        add("compute", compute, th.compute, f"forward + backward take {compute:.1%} of the "
            f"step (threshold {th.compute:.0%})", info=True)
    return found


# --- a short measurement of a course workload ---------------------------------------------


def measure_workload(workload: str = "digits", batch_size: int = 64, num_workers: int = 0,
                     cost_ms: float = 0.0, steps: int = 10, warmup: int = 3,
                     device: torch.device | str | None = None, **kwargs: Any) -> StepSummary:
    """Train a :mod:`perfkit.models` workload for ``warmup + steps`` steps under a monitor.

    The pure function behind notebook 01's widget: every call builds a fresh workload
    (fixed seed), so results depend only on the arguments and the machine.

    Args:
        workload: ``"digits"`` (SmallCNN) or ``"gpt2"`` (tiny GPT-2).
        batch_size, num_workers, cost_ms: the DataLoader settings and the per-sample data
            cost; see :func:`perfkit.models.digits_workload`.
        steps: measured steps; warmup: steps run first and left out.
        kwargs: passed on to the workload builder (e.g. ``tokenize_per_sample``).

    Returns:
        The :class:`StepSummary`; ``extra`` records the settings.

    Raises:
        ValueError: for an unknown ``workload`` or bad settings.
    """
    from perfkit import models
    from perfkit.monitor import StepMonitor

    builders = {"digits": models.digits_workload, "gpt2": models.gpt2_workload}
    if workload not in builders:
        raise ValueError(f"workload must be one of {sorted(builders)}, got {workload!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    wl = builders[workload](batch_size=batch_size, num_workers=num_workers, cost_ms=cost_ms,
                            device=device, **kwargs)
    mon = StepMonitor(wl.device, warmup=warmup)
    models.train_steps(wl, warmup + steps, monitor=mon)
    settings = {"workload": workload, "batch_size": batch_size, "num_workers": num_workers,
                "cost_ms": cost_ms, **kwargs}
    return replace(mon.summary(), extra={"settings": settings})
