"""Lecture 07's measurements as functions that return records and Estimates: a monitored
training run's data share, loader sweeps' waiting shares and rates, the prefetcher's hidden
fraction, padding waste.

Every figure a verdict is judged on comes with its uncertainty as a
:class:`perfkit.stats.Estimate`: a share of sums over a loop's steps by a percentile
bootstrap over the steps (the level, seed, resample count and minimum steps of
:mod:`perfkit.stats`), the largest gap of a sweep from each run's share by
:func:`perfkit.stats.largest`, and a figure of the paired rounds of
:func:`perfkit.timing.interleaved` per round, as the median over rounds
(:func:`perfkit.stats.per_round`).

Usage::

    run = monitored_steps(workload, dataset, num_workers=1, steps=8)
    print(run.data_share())                      # the median step's data share, 90 % interval
    print(largest_gap(records, [p.steady_wait_share for p in predictions]))
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from perfkit import stats
from perfkit._checks import check_choice, check_int, check_items, check_real, check_type
from perfkit.data.datasets import Delayed
from perfkit.data.loader import LoaderRecord
from perfkit.data.prefetch import Prefetcher
from perfkit.stats import Estimate, bootstrap

__all__ = ["MonitoredRun", "PaddingRecord", "ThreadProbe", "gil_hidden_bound", "hidden_fraction",
           "hidden_fraction_estimate", "largest_gap", "monitored_steps", "padding_waste", "prefetch_loops",
           "rate_ratio", "thread_probe", "thread_share", "wait_share"]


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


def largest_gap(records: Sequence[LoaderRecord], predicted: Sequence[float]) -> Estimate:
    """``max |measured - predicted|`` steady waiting share over a sweep: each run's share
    bootstrapped over its steps at :func:`perfkit.stats.joint_level` of the run count, and
    :func:`perfkit.stats.largest` of their gaps (a bootstrap of the maximum itself would
    misjudge it: a resample never exceeds the sample's own worst run).

    Raises:
        TypeError, ValueError: for unequal lengths, no records, or a record that is not a
            :class:`LoaderRecord`.
    """
    records, predicted = check_items("records", records), check_items("predicted", predicted)
    if len(records) != len(predicted):
        raise ValueError(f"records and predicted must be equally long, got {len(records)} and "
                         f"{len(predicted)}")
    each = stats.joint_level(len(records))   # all the runs' intervals hold together at LEVEL
    shares = [bootstrap(_share, list(_steady(r)), paired=True, what="steps", level=each)
              for r in records]
    return stats.largest([e.shifted(-p) for e, p in zip(shares, predicted, strict=True)], absolute=True)


def rate_ratio(a: LoaderRecord, b: LoaderRecord) -> Estimate:
    """Steady samples/s of ``a`` over ``b`` (mean step of ``b`` over mean step of ``a``),
    bootstrapped over each run's steps independently."""
    sa, sb = ([w + c for w, c in zip(*_steady(r), strict=True)] for r in (a, b))
    return bootstrap(lambda x, y: float(y.mean() / x.mean()), [sa, sb], paired=False, what="steps per run")


# --- the prefetcher -------------------------------------------------------------------------


def prefetch_loops(loader: Any, step: Callable[[Any, Any], None], batch: tuple[Any, Any], n: int,
                   delay_s: float, device: torch.device | str | None = None) -> dict[str, Callable[[], None]]:
    """The six loops of the prefetcher experiment, each ``n`` steps long.

    ``"load only"`` and ``"compute only"`` (on ``batch``) time the two parts; ``"serial, K
    load"`` and ``"Prefetcher, K load"`` train on ``loader`` with ``delay_s`` added per batch,
    spent as K = ``sleep`` (I/O: frees the GIL) or ``spin`` (Python work: holds it).

    Raises:
        TypeError, ValueError: for ``n`` < 1, ``delay_s`` not a finite number >= 0, or a
            ``step`` that is not callable.
    """
    check_int("n", n, 1)
    check_real("delay_s", delay_s, 0)
    if not callable(step):
        raise TypeError(f"step must be a callable taking (x, y), got {type(step).__name__}")

    def run(source: Any) -> None:
        it = iter(source)
        for _ in range(n):
            step(*next(it))   # leaving early closes a Prefetcher's thread

    def load_only() -> None:
        it = iter(Delayed(loader, delay_s))
        for _ in range(n):
            next(it)

    def compute_only() -> None:
        for _ in range(n):
            step(*batch)

    loops = {"load only": load_only, "compute only": compute_only}
    for kind in ("sleep", "spin"):
        src = Delayed(loader, delay_s, kind=kind)
        loops[f"serial, {kind} load"] = lambda src=src: run(src)
        loops[f"Prefetcher, {kind} load"] = lambda src=src: run(Prefetcher(src, device=device))
    return loops


def _loop_names(name: str, loops: Any, kind: str) -> list[str]:
    """The keys of ``loops`` (a mapping), refused by ``name`` unless they hold the four that
    the ``kind`` (``"sleep"`` or ``"spin"``) hidden fraction needs."""
    check_choice("kind", kind, ("sleep", "spin"))
    check_type(name, loops, Mapping)
    need = ["load only", "compute only", f"serial, {kind} load", f"Prefetcher, {kind} load"]
    if missing := [k for k in need if k not in loops]:
        raise ValueError(f"{name} must hold the loops {need}, missing {missing}")
    return list(loops)


def hidden_fraction(t: Mapping[str, float], kind: str) -> float:
    """``(serial - prefetched) / (serial - max(load, compute))`` from one set of loop times
    keyed as :func:`prefetch_loops` names them."""
    _loop_names("t", t, kind)
    serial = t[f"serial, {kind} load"]
    return (serial - t[f"Prefetcher, {kind} load"]) / (serial - max(t["load only"], t["compute only"]))


def hidden_fraction_estimate(rounds: Mapping[str, Sequence[float]], kind: str) -> Estimate:
    """:func:`hidden_fraction` of each round of :func:`perfkit.timing.interleaved` (its loops
    timed back to back), as the median over rounds with its order-statistic interval
    (``rounds``: loop name -> its times)."""
    names = _loop_names("rounds", rounds, kind)

    def stat(*seconds: float) -> float:  # one round: each loop's time
        return hidden_fraction(dict(zip(names, seconds, strict=True)), kind)

    return stats.per_round(stat, [rounds[k] for k in names], what="rounds")


@dataclass(frozen=True)
class ThreadProbe:
    """A busy Python thread beside a step, each round's figures as medians with intervals.

    ``share``: the thread's progress while the step runs, over its rate with the main thread
    asleep. ``slowdown``: the step's time beside the thread over its time alone (the thread
    paused), the same round.
    """

    share: Estimate
    slowdown: Estimate


def thread_probe(step: Callable[[], None], n: int, repeat: int = 5) -> ThreadProbe:
    """Run ``n`` calls of ``step`` alone, then beside a Python thread that never gives up the
    GIL by itself (a busy loop), ``repeat`` rounds: how far the thread gets, and how much
    longer the step takes.

    The thread runs only while the step is inside code that released the GIL (most PyTorch
    kernels) or while the step waits for the GIL at a switch, and only on a core the step's
    own threads leave it; the step, for its part, waits for the GIL at every return to Python.
    A load that holds the GIL in a prefetch thread meets both: it runs at most ``share`` of the
    time, and while it runs the step does ``1 / slowdown`` of its work.

    Raises:
        TypeError, ValueError: for a ``step`` that is not callable, ``n`` below 1 or
            ``repeat`` below 2.
    """
    if not callable(step):
        raise TypeError(f"step must be a callable taking no argument, got {type(step).__name__}")
    check_int("n", n, 1)
    check_int("repeat", repeat, 2)
    count, stop, run = [0], threading.Event(), threading.Event()

    def spin() -> None:
        while not stop.is_set():
            run.wait()  # paused: blocked, the GIL released
            while run.is_set() and not stop.is_set():
                count[0] += 1

    def timed() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        return time.perf_counter() - t0

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    shares, slow, took = [], [], 0.05  # s: the first round's idle window
    try:
        for _ in range(repeat):
            alone = timed()  # the thread paused
            run.set()
            c0, t0 = count[0], time.perf_counter()
            time.sleep(max(took, 0.05))  # the main thread idle: the thread's own rate
            rate = (count[0] - c0) / (time.perf_counter() - t0)
            c0 = count[0]
            took = timed()
            run.clear()
            shares.append((count[0] - c0) / (rate * took))
            slow.append(took / alone)
    finally:
        stop.set()
        run.set()
        worker.join()
    return ThreadProbe(stats.median_interval(shares), stats.median_interval(slow))


def thread_share(step: Callable[[], None], n: int, repeat: int = 5) -> Estimate:
    """:func:`thread_probe`'s ``share`` alone: the most a GIL-holding load in a prefetch
    thread can run beside ``n`` calls of ``step`` (median over ``repeat`` rounds, with its
    order-statistic interval).

    Raises:
        TypeError, ValueError: for a ``step`` that is not callable, ``n`` below 1 or
            ``repeat`` below 2.
    """
    return thread_probe(step, n, repeat).share


def gil_hidden_bound(serial_s: float, load_s: float, compute_s: float, slowdown: float) -> float:
    """The most of a GIL-holding load a prefetch thread is expected to hide, as a hidden
    fraction (:func:`hidden_fraction`'s scale): ``(serial - fastest) / (serial - max(load, compute))``.

    The thread is busy for at least ``load_s`` a step (its rate alone is its fastest), and
    while it runs the step does at most ``1 / slowdown`` of its work (:func:`thread_probe`;
    below 1 counts as 1), so a step takes at least ``max(load, compute + load * (1 - 1 /
    slowdown))``. All times are per step (any one unit); ``serial_s`` is the measured serial
    loop's. An estimate, not a bound: a loader that releases the GIL now and then (its calls
    into torch) slows the step less than the probe's pure-Python thread.

    Raises:
        ValueError: for times that are not > 0, a ``serial_s`` not above ``max(load, compute)``,
            or a ``slowdown`` that is not > 0.
    """
    for name, v in (("serial_s", serial_s), ("load_s", load_s), ("compute_s", compute_s),
                    ("slowdown", slowdown)):
        check_real(name, v, 0, lo_open=True)
    longer = max(load_s, compute_s)
    if serial_s <= longer:
        raise ValueError(f"serial_s must exceed max(load_s, compute_s) = {longer}, got {serial_s}")
    fastest = max(load_s, compute_s + load_s * (1 - 1 / max(1.0, slowdown)))
    return (serial_s - fastest) / (serial_s - longer)


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
