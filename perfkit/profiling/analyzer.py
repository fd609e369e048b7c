"""The bottleneck analyzer: phase shares in, :class:`Finding` records out.

:func:`diagnose` reads a :class:`~perfkit.profiling.monitor.StepSummary`, a
:class:`~perfkit.profiling.profiler.TraceBreakdown` or a plain dict of shares, and names the
bottleneck with its evidence, what to try and which course notebook teaches the fix.
:func:`measure_workload` measures one of the course's workloads for the widget.

Usage::

    mon = StepMonitor(warmup=2)
    train_steps(wl, 20, monitor=mon)
    for finding in diagnose(mon.summary()):
        print(finding.title, finding.fix)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from perfkit._checks import check_int, check_real, check_type
from perfkit.profiling.monitor import StepSummary
from perfkit.profiling.profiler import TraceBreakdown

__all__ = ["Finding", "Thresholds", "diagnose", "measure_workload"]


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
            check_real(k, getattr(self, k), 0, 1, lo_open=True, hi_open=True)  # a share
        check_real("jitter", self.jitter, 1, lo_open=True)  # a p99/p50 ratio
        check_int("min_steps", self.min_steps, 0)


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
        record: a :class:`~perfkit.profiling.StepSummary` (enables the jitter rule), a
            :class:`TraceBreakdown`, or a dict of top-level phase -> share.
        thresholds: when to report; see :class:`Thresholds` for the defaults and why.
        aliases: map user-named phases onto the known kinds, e.g.
            ``{"allreduce": "communication"}``; their shares are added to that kind.
            Phases neither known nor aliased are not judged (their time is still part
            of the step, so they lower every other share).

    Returns:
        A list of :class:`Finding`, empty when nothing crosses a threshold.

    Raises:
        TypeError: for a ``record``, ``thresholds`` or ``aliases`` of another type.
        ValueError: if an alias targets an unknown kind, or the shares are not in [0, 1].
    """
    check_type("record", record, (StepSummary, TraceBreakdown, Mapping))
    th = check_type("thresholds", thresholds, Thresholds, optional=True) or Thresholds()
    shares = dict(record.shares() if not isinstance(record, Mapping) else record)
    for name, kind in (check_type("aliases", aliases, Mapping, optional=True) or {}).items():
        if kind not in _KINDS:
            raise ValueError(f"alias {name!r} -> {kind!r}: kind must be one of {_KINDS}")
        shares[kind] = shares.get(kind, 0.0) + shares.pop(name, 0.0)
    for name, v in shares.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0 + 1e-9:
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
    from perfkit.profiling.monitor import StepMonitor

    builders = {"digits": models.digits_workload, "gpt2": models.gpt2_workload}
    if workload not in builders:
        raise ValueError(f"workload must be one of {sorted(builders)}, got {workload!r}")
    check_int("steps", steps, 1)
    check_int("warmup", warmup, 0)  # before the workload is built (a tokenizer is trained)
    wl = builders[workload](batch_size=batch_size, num_workers=num_workers, cost_ms=cost_ms,
                            device=device, **kwargs)
    mon = StepMonitor(wl.device, warmup=warmup)
    models.train_steps(wl, warmup + steps, monitor=mon)
    settings = {"workload": workload, "batch_size": batch_size, "num_workers": num_workers,
                "cost_ms": cost_ms, **kwargs}
    return replace(mon.summary(), extra={"settings": settings})
