"""A short, monitored training run of one of the course's workloads (notebook 01's widget).

:func:`measure_workload` builds a fresh :mod:`perfkit.models` workload (fixed seed) and
trains it under a :class:`~perfkit.profiling.StepMonitor`, so its summary depends only on
the arguments and the machine: the pure function behind ``perfkit.viz.breakdown_widget``.

Usage::

    summary = measure_workload("digits", batch_size=64, cost_ms=0.5, steps=10)
    print(summary.shares(), diagnose_shares(summary))
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from perfkit import models
from perfkit._checks import check_int
from perfkit.profiling.monitor import StepMonitor, StepSummary

__all__ = ["measure_workload"]


def measure_workload(workload: str = "digits", batch_size: int = 64, num_workers: int = 0,
                     cost_ms: float = 0.0, steps: int = 10, warmup: int = 3,
                     device: torch.device | str | None = None, **kwargs: Any) -> StepSummary:
    """Train a :mod:`perfkit.models` workload for ``warmup + steps`` steps under a monitor.

    Args:
        workload: ``"digits"`` (SmallCNN) or ``"gpt2"`` (tiny GPT-2).
        batch_size, num_workers, cost_ms: the DataLoader settings and the per-sample data
            cost; see :func:`perfkit.models.digits_workload`.
        steps: measured steps; warmup: steps run first and left out.
        device: where to train (``None``: CUDA if present, else CPU).
        kwargs: passed on to the workload builder (e.g. ``tokenize_per_sample``).

    Returns:
        The :class:`StepSummary`; ``extra["settings"]`` records the settings.

    Raises:
        ValueError: for an unknown ``workload`` or bad settings.
    """
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
