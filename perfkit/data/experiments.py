"""Lecture 07's measurements as functions that return records and Estimates: a monitored
training run's data share, loader sweeps' waiting shares and rates, padding waste (the
prefetcher's experiment is :mod:`perfkit.data.overlap`).

Every figure a verdict is judged on comes with its uncertainty as a
:class:`perfkit.stats.Estimate`: a share of sums over a loop's steps by a percentile
bootstrap over the steps (the level, seed, resample count and minimum steps of
:mod:`perfkit.stats`), and the largest gap of a sweep from each run's share by
:func:`perfkit.stats.largest` (paired step by step with a model that replays the run's batches).

Usage::

    run = monitored_steps(workload, dataset, num_workers=1, steps=8)
    print(run.data_share())                      # the median step's data share, 90 % interval
    print(largest_gap(records, predictions))    # PipelineRecords of simulate_pipeline
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset

from perfkit import stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.data.loader import LoaderRecord, PipelineRecord
from perfkit.stats import Estimate, bootstrap

__all__ = ["MonitoredRun", "PaddingRecord", "largest_gap", "monitored_steps", "padding_waste", "rate_ratio",
           "wait_share"]


# --- a training run under StepMonitor ------------------------------------------------------


class _PerStep:
    """A StepMonitor sink with ``every=1``: each window is one step."""

    def __init__(self) -> None:
        self.data_s: list[float] = []
        self.step_s: list[float] = []

    def write(self, window: Any) -> None:
        self.step_s.append(window.step_times_s[0])
        self.data_s.append(window.summary["data"].mean_s)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class MonitoredRun:
    """A :class:`perfkit.profiling.StepSummary` and the per-step seconds behind it."""

    summary: Any
    data_s: tuple[float, ...]   # s waiting in next(loader), per step
    step_s: tuple[float, ...]   # s per whole step

    def data_share(self) -> Estimate:
        """The median step's share of data wait (each step's wait over its time), with its
        order-statistic interval over the steps."""
        return stats.median_ratio([max(d, 1e-9) for d in self.data_s], self.step_s)

    def step_time(self) -> Estimate:
        """Median step seconds, with the order-statistic interval of the median."""
        return stats.median_interval(self.step_s)


def monitored_steps(workload: Any, dataset: Dataset, num_workers: int = 0, steps: int = 8,
                    warmup: int = 2) -> MonitoredRun:
    """Train ``workload`` on ``dataset`` for ``warmup + steps`` steps under a StepMonitor.

    Args:
        workload: a :class:`perfkit.models.Workload` (its loader is replaced).
        dataset: what the new ``DataLoader`` reads (shuffled, ``workload.batch_size``).
        num_workers: the loader's worker processes (persistent).
        steps: steps measured, after ``warmup`` untimed ones.

    Returns:
        A :class:`MonitoredRun`.

    Raises:
        TypeError, ValueError: for a ``workload`` or ``dataset`` of another type, or counts
            that are not ints (``num_workers``, ``warmup`` >= 0, ``steps`` >= 1).
    """
    from perfkit import models
    from perfkit.profiling.monitor import StepMonitor

    check_type("workload", workload, models.Workload)
    check_type("dataset", dataset, Dataset)
    check_int("num_workers", num_workers, 0)
    check_int("steps", steps, 1)
    check_int("warmup", warmup, 0)
    loader = DataLoader(dataset, batch_size=workload.batch_size, shuffle=True, drop_last=True,
                        num_workers=num_workers, persistent_workers=num_workers > 0)
    log = _PerStep()
    mon = StepMonitor(device=workload.device, warmup=warmup, sinks=[log], every=1)
    models.train_steps(replace(workload, loader=loader), steps + warmup, monitor=mon)
    mon.close()
    return MonitoredRun(mon.summary(), tuple(log.data_s), tuple(log.step_s))


# --- loader sweeps ---------------------------------------------------------------------------


def _steady(r: LoaderRecord) -> tuple[list[float], list[float]]:
    """Waits and computes without each epoch's first step (worker start-up)."""
    check_type("record", r, LoaderRecord)
    w = [x for ws in r.wait_s for x in ws[1:]]
    c = [x for cs in r.compute_s for x in cs[1:]]
    if not w:
        raise ValueError("a record needs at least 2 steps in an epoch to have steady steps")
    return w, c


def _share(w: np.ndarray, c: np.ndarray) -> float:
    return float(w.sum() / (w.sum() + c.sum()))


def wait_share(record: LoaderRecord) -> Estimate:
    """The steady share of the loop spent waiting for data, bootstrapped over its steps."""
    w, c = _steady(record)
    return bootstrap(lambda *a: _share(a[0], a[1]), [w, c], paired=True, what="steps")


def largest_gap(records: Sequence[LoaderRecord], predicted: Sequence[float | PipelineRecord]) -> Estimate:
    """``max |measured - predicted|`` steady waiting share over a sweep, each run's gap
    bootstrapped over its steps at :func:`perfkit.stats.joint_level` of the run count, and
    :func:`perfkit.stats.largest` of the gaps (a bootstrap of the maximum itself would misjudge
    it: a resample never exceeds the sample's own worst run).

    A prediction given as a :class:`PipelineRecord` of as many steps as its run's one epoch is
    resampled with it, step by step (paired): a model that replays the run's own batch costs
    (``simulate_pipeline(..., loads=...)``) has its slow steps where the run has them, and
    resampling the run's steps alone would count which steps came out slow as noise the model
    does not have. A plain number is a fixed share, and only the run is resampled.

    Raises:
        TypeError, ValueError: for unequal lengths, no records, a record that is not a
            :class:`LoaderRecord`, or a :class:`PipelineRecord` whose steps do not match its run's.
    """
    records, predicted = check_items("records", records), check_items("predicted", predicted)
    if len(records) != len(predicted):
        raise ValueError(f"records and predicted must be equally long, got {len(records)} and "
                         f"{len(predicted)}")
    each = stats.joint_level(len(records))   # all the runs' intervals hold together at LEVEL
    gaps = []
    for r, p in zip(records, predicted, strict=True):
        if not isinstance(p, PipelineRecord):
            share = bootstrap(_share, list(_steady(r)), paired=True, what="steps", level=each)
            gaps.append(share.shifted(-float(check_real("predicted entries", p, 0, 1))))
            continue
        if len(r.wait_s) != 1 or len(r.wait_s[0]) != len(p.wait_s):
            raise ValueError(f"a PipelineRecord pairs with a one-epoch record of as many steps, got "
                             f"{len(p.wait_s)} steps against epochs of {[len(w) for w in r.wait_s]}")

        def gap(w: np.ndarray, c: np.ndarray, pw: np.ndarray, compute_s: float = p.compute_s) -> float:
            return _share(w, c) - float(pw.sum() / (pw.sum() + len(pw) * compute_s))

        gaps.append(bootstrap(gap, [*_steady(r), list(p.wait_s[1:])], paired=True, what="paired steps",
                              level=each))
    return stats.largest(gaps, absolute=True)


def rate_ratio(a: LoaderRecord, b: LoaderRecord) -> Estimate:
    """Steady samples/s of ``a`` over ``b`` (mean step of ``b`` over mean step of ``a``),
    bootstrapped over each run's steps independently.

    The resampling treats a run's steps as independent draws. Steps that come in a pattern
    (more busy workers than cores deliver batches in bursts: several quick steps, then a long
    wait) are not: the interval then counts the pattern as noise, and says how unequal the
    steps were more than how far the run's mean step would move in a repeat."""
    sa, sb = ([w + c for w, c in zip(*_steady(r), strict=True)] for r in (a, b))
    return bootstrap(lambda x, y: float(y.mean() / x.mean()), [sa, sb], paired=False, what="steps per run")


# --- padding --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaddingRecord:
    """Padding of consecutive batches of token lengths, per scheme, and rounding's share."""

    waste: dict[str, float]   # scheme -> share of the padded batch that is padding
    mean_len: float           # tokens per sample
    extra_per_row: float      # pad tokens per row that rounding up to x8 adds
    capped: float             # share of batches whose longest sample was cut at max_len


def padding_waste(lengths: Sequence[int], batch: int, max_len: int, fixed: int = 256) -> PaddingRecord:
    """How much of each batch is padding when ``lengths`` are batched ``batch`` at a time.

    Raises:
        TypeError, ValueError: for fewer lengths than one batch, or bad counts.
    """
    check_int("batch", batch, 1)
    check_int("max_len", max_len, 1)
    check_int("fixed", fixed, 1)
    lengths = [check_int("lengths entries", x, 1) for x in check_items("lengths", lengths)]
    groups = [lengths[i:i + batch] for i in range(0, len(lengths) - batch + 1, batch)]
    if not groups:
        raise ValueError(f"lengths must fill at least one batch of {batch}, got {len(lengths)}")
    real = sum(map(sum, groups))
    schemes = {"longest in batch": max, "longest, rounded up to x8": lambda g: math.ceil(max(g) / 8) * 8,
               f"fixed {fixed}": lambda g: fixed}
    waste = {k: 1 - real / sum(t(g) * len(g) for g in groups) for k, t in schemes.items()}
    extra = sum(math.ceil(max(g) / 8) * 8 - max(g) for g in groups) / len(groups)
    capped = sum(max(g) == max_len for g in groups) / len(groups)
    return PaddingRecord(waste, real / sum(map(len, groups)), extra, capped)
