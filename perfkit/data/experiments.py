"""Lecture 07's measurements as functions that return records and Estimates: a monitored
training run's data share and the sentence on what a second worker changed (:func:`worker_gain`),
loader sweeps' waiting shares and rates, padding waste (the
prefetcher's experiment is :mod:`perfkit.data.overlap`; the sentences its two verdicts append,
:func:`sleep_explain` and :func:`gil_explain`, and the CPU sweep's :func:`rates_held`, computed
from their figures, are re-exported here from ``perfkit.data._verdicts``).

Every figure a verdict is judged on comes with its uncertainty as a
:class:`perfkit.stats.Estimate`. A loader loop's steps are not independent draws: batches
queued by workers carry over from one step to the next, and busy workers deliver them in
bursts. So a figure of a loop's steps is computed per block of consecutive steps, as many
blocks as an order-statistic interval at the level needs (:func:`perfkit.stats.min_samples`),
each as long as the run allows, and judged as the median block's figure with that interval
(:func:`perfkit.stats.per_round`, blocks as rounds): a median of block means, not a bootstrap
that resamples single steps as if each were drawn afresh. The largest gap of a sweep comes
from each run's by :func:`perfkit.stats.largest` (paired block by block with a model that
replays the run's batches).

Usage::

    run = monitored_steps(workload, dataset, num_workers=1, steps=8)
    print(run.data_share())                      # the median step's data share, with its interval
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
from perfkit.data._verdicts import (  # noqa: F401 (07's)
    PipelineExcess,
    gil_explain,
    near_edge,
    pipeline_excess,
    rate_context,
    rates_held,
    sleep_explain,
)
from perfkit.data.loader import LoaderRecord, PipelineRecord, beyond_model, handoff_part  # noqa: F401 (07's)
from perfkit.stats import Estimate

__all__ = ["MonitoredRun", "PaddingRecord", "balanced_max", "gil_explain", "largest_gap", "monitored_steps",
           "near_edge", "padding_waste", "rate_context", "rate_ratio", "rates_held", "run_gaps",
           "sleep_explain", "wait_share", "worker_gain", "workers_note"]


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


def worker_gain(one: MonitoredRun, two: MonitoredRun, cores: int) -> str:
    """The sentence on a second worker: the ratio of ``two``'s median step to ``one``'s (two
    separate runs, unpaired) and, where its interval is clear of 1x, how the median step's change
    splits into the median wait's and the median rest's (the compute), each as its share of the
    change. A part is named as the cause only where its share is at least half; only a change
    mostly in the wait is put down to the loader: a worker does no compute, and two runs timed
    apart on a shared machine can differ in load.

    Raises:
        TypeError, ValueError: for runs that are not :class:`MonitoredRun` or a bad ``cores``.
    """
    check_type("one", one, MonitoredRun)
    check_type("two", two, MonitoredRun)
    check_int("cores", cores, 1)
    est = stats.median_ratio(two.step_s, one.step_s, paired=False)
    said = f"2 workers' step over 1 worker's (ratio of the runs' median steps): {est.text('x')}: "
    side = est.clear_of(1.0, "x")
    if not side:
        return said + "the run cannot tell the two apart"
    ms = [(float(np.median(r.step_s)) * 1e3, float(np.median(r.data_s)) * 1e3,
           float(np.median([t - d for t, d in zip(r.step_s, r.data_s)])) * 1e3) for r in (one, two)]
    step, wait, rest = (b - a for a, b in zip(*ms))   # ms: two's median less one's
    said += (f"a second worker made the step {'slower' if side == 'above' else 'faster'} ({step:+.1f} ms "
             f"at the median; the median wait {wait:+.1f} ms, the median rest, its compute, {rest:+.1f} ms)")
    step, wait, rest = (round(v, 1) for v in (step, wait, rest))   # ms, as printed
    if step == 0:
        return said + ": too small a change at the medians to split"
    w, r = wait / step, rest / step   # each part's share of the change, as printed (medians do not add)
    if w >= 0.5:
        return said + (f": mostly {'less ' if side == 'below' else 'more '}waiting ({w:.0%} of the change), "
                       + ("so one worker did not keep up" if side == "below" else
                          "which these two runs do not explain"))
    if r >= 0.5:
        return said + (f": mostly in the compute ({r:.0%} of the change), " + (
            "which no worker does, so not the loader keeping up; two runs timed apart on a machine other "
            "jobs share can differ in load" if side == "below" else
            f"beside two tokenizing workers on {cores} cores"))
    return said + (f": neither median explains most of it (the wait {w:.0%} of the change, the compute "
                   f"{r:.0%}; a median step is not the sum of the median parts), so these two runs do not "
                   "say " + ("whether one worker kept up" if side == "below" else "what slowed it"))


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


def _blocks(n: int, level: float) -> list[np.ndarray]:
    """Indices of ``n`` steps in blocks of consecutive steps: as many blocks as an
    order-statistic interval of their median needs at ``level`` (fewer steps: one a block)."""
    return np.array_split(np.arange(n), min(n, stats.min_samples(level)))


def _blocked(figure: Any, arrays: Sequence[Sequence[float]], level: float) -> Estimate:
    """The median over blocks of consecutive steps of ``figure(*block slices of arrays)``, with
    its order-statistic interval at ``level``."""
    arrs = [np.asarray(a, dtype=float) for a in arrays]
    idx = _blocks(len(arrs[0]), level)
    per_block = [float(figure(*(a[i] for a in arrs))) for i in idx]
    steps = len(arrs[0]) / len(idx)
    return stats.per_round(float, [per_block], what=f"blocks of {steps:.3g} consecutive steps", level=level)


def wait_share(record: LoaderRecord) -> Estimate:
    """The steady share of the loop spent waiting for data: the median over blocks of
    consecutive steps of each block's share, with its order-statistic interval."""
    return _blocked(_share, list(_steady(record)), stats.LEVEL)


def run_gaps(records: Sequence[LoaderRecord], predicted: Sequence[float | PipelineRecord]) -> list[Estimate]:
    """Each run's measured steady waiting share less its predicted one, as the median over
    blocks of consecutive steps of the block's gap, at :func:`perfkit.stats.joint_level` of the
    run count (so that :func:`perfkit.stats.largest` of them holds at :data:`perfkit.stats.LEVEL`).

    A prediction given as a :class:`PipelineRecord` of as many steps as its run's one epoch is
    paired with it block by block: a model that replays the run's own batch costs
    (``simulate_pipeline(..., loads=...)``) has its slow steps where the run has them, and each
    block's gap compares the same steps. A plain number is a fixed share, held against every
    block's.

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
            fixed = float(check_real("predicted entries", p, 0, 1))
            gaps.append(_blocked(lambda w, c, fixed=fixed: _share(w, c) - fixed, list(_steady(r)), each))
            continue
        if len(r.wait_s) != 1 or len(r.wait_s[0]) != len(p.wait_s):
            raise ValueError(f"a PipelineRecord pairs with a one-epoch record of as many steps, got "
                             f"{len(p.wait_s)} steps against epochs of {[len(w) for w in r.wait_s]}")

        def gap(w: np.ndarray, c: np.ndarray, pw: np.ndarray, compute_s: float = p.compute_s) -> float:
            return _share(w, c) - float(pw.sum() / (pw.sum() + len(pw) * compute_s))

        gaps.append(_blocked(gap, [*_steady(r), list(p.wait_s[1:])], each))
    return gaps


def largest_gap(records: Sequence[LoaderRecord], predicted: Sequence[float | PipelineRecord]) -> Estimate:
    """``max |measured - predicted|`` steady waiting share over a sweep: :func:`perfkit.stats.largest`
    of :func:`run_gaps` (each run's median block gap at the joint level; a resampling of the
    maximum itself would misjudge it: a resample never exceeds the sample's own worst run).
    Its text names each interval's exact coverage (an order-statistic interval covers at least the
    level asked: 7 blocks asked at 98 % cover 98.4 %), the figures Bonferroni's sum over them, the
    joint coverage it prints, is computed from.

    Raises:
        TypeError, ValueError: as :func:`run_gaps`.
    """
    gaps = run_gaps(records, predicted)
    return stats.largest(gaps, absolute=True)


def rate_ratio(a: LoaderRecord, b: LoaderRecord) -> Estimate:
    """Steady samples/s of ``a`` over ``b``: each run's steady steps in blocks of consecutive
    steps, each block's mean step, and the ratio of the two runs' median block means (``b``'s
    over ``a``'s), with the interval of two separate runs' medians
    (:func:`perfkit.stats.median_ratio`, unpaired: each run at ``sqrt(level)``).

    Blocks, not single steps: more busy workers than cores deliver batches in bursts (several
    quick steps, then a long wait), so single steps are no independent draws, and an interval
    that resamples them counts the pattern as noise. A block as long as the run allows spans
    such a burst."""
    each = math.sqrt(stats.LEVEL)  # of_medians holds each run's median at sqrt(level)
    means, sizes = [], []
    for r in (a, b):
        steps = np.asarray([w + c for w, c in zip(*_steady(r), strict=True)])
        idx = _blocks(len(steps), each)
        means.append([float(steps[i].mean()) for i in idx])
        sizes.append(len(steps) / len(idx))
    est = stats.median_ratio(means[1], means[0], paired=False)
    return replace(est, method=f"ratio of two runs' median block means ({len(means[0])} and {len(means[1])} "
                               f"blocks of {sizes[0]:.3g} and {sizes[1]:.3g} consecutive steps)")


def workers_note(load_s: float, compute_s: float, handoff_s: float) -> str:
    """``"14.3% of a 10 ms step per batch -> ..."``: what a batch that loads in ``load_s`` (``B * c``)
    asks of a loader beside a step of ``compute_s``, by section 2a's model, in which each batch
    from a worker still costs the loop ``handoff_s`` (``t_handoff``): under a tenth of the step,
    no worker; else ``ceil(B * c / (t_compute + t_handoff))`` workers hide the load, and they save
    ``B * c - t_handoff`` a step, nothing where the handoff costs more than the load.

    Raises:
        ValueError: for a ``load_s`` or ``compute_s`` that is not a finite number > 0, or a
            negative ``handoff_s``.
    """
    check_real("load_s", load_s, 0, lo_open=True)
    check_real("compute_s", compute_s, 0, lo_open=True)
    check_real("handoff_s", handoff_s, 0)
    frac = load_s / compute_s
    out = f"{frac:.1%} of a {compute_s * 1e3:.0f} ms step per batch -> "
    if frac <= 0.1:
        return out + "no worker needed: in the loop it adds that share"
    saved, ms = load_s - handoff_s, f"{handoff_s * 1e3:.2f} ms"
    if saved <= 0:
        return out + (f"no worker pays: each batch from one costs the loop 2a's handoff, {ms}, at least the "
                      f"{load_s * 1e3:.2f} ms it loads in")
    w = math.ceil(load_s / (compute_s + handoff_s))
    return out + (f"{w} worker{'s' * (w > 1)} to hide it by 2a's model, saving {saved * 1e3:.2f} of its "
                  f"{load_s * 1e3:.2f} ms a step ({saved / load_s:.0%}): the loop still receives each batch, "
                  f"2a's handoff of {ms} (timed on 2a's batches; a batch of other size may cost otherwise)")

def balanced_max(a: Sequence[float], b: Sequence[float]) -> float:
    """The median of ``max(x, y)`` over every pair of ``x`` in ``a`` and ``y`` in ``b``: the step
    of a two-stage pipeline whose stages take times drawn independently from the two samples
    (each measured apart). Where the stages are balanced and vary, it lies above
    ``max(median(a), median(b))``: each step waits for whichever stage is longer that time.

    Raises:
        TypeError, ValueError: for empty samples or values that are not finite numbers >= 0.
    """
    x = np.asarray([check_real("a entries", v, 0) for v in check_items("a", a)], dtype=float)
    y = np.asarray([check_real("b entries", v, 0) for v in check_items("b", b)], dtype=float)
    return float(np.median(np.maximum.outer(x, y)))


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
