"""Data-loading advice under the microscope (course module 09): pin_memory and worker counts.

:func:`time_pin_memory` times a DataLoader loop with and without ``pin_memory=True`` (on a
machine without CUDA the flag would only be ignored, so it times the ``pin_memory=False`` loop
against itself: an A/A control, whose :meth:`PinTiming.reach` is how far this timing design
reads identical code apart, and :meth:`PinTiming.resolves` whether another effect, by
:func:`interval_gap`, lies beyond it).
:func:`worker_sweep` measures throughput at each ``num_workers`` over a whole second pass
(workers persist: their start-up is left out, the pipeline's fill is not), the counts taking
turns round after round in balanced orders, and simulates the same pass with
:func:`perfkit.data.simulate_pipeline`. Both time their settings in balanced orders over whole
cycles (:func:`perfkit.timing.balanced_orders`): each runs before each other one in half the
rounds, so what a round's position does to a time cancels from their paired ratios.
:func:`ratio_explain` words lecture 07's verdict on busy workers' rate ratio: how far each run's
shortfall from the pipeline model moves the ratio of mean rates, and what is left to the statistic.

Usage::

    sweep = worker_sweep([0, 1, 2, 4, 8], batch=8, batches=20, cost_s=1e-3, compute_s=2e-3)
    print(sweep.advised_over_rest(), sweep.predicted_advised_over_rest())
    print(time_pin_memory(batch=8, batches=20, repeat=15).speedup())
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from torch.utils.data import DataLoader, TensorDataset

from perfkit import stats, timing
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.data.datasets import SlowDataset
from perfkit.data.loader import LoaderConfig, LoaderRecord, measure_loader, simulate_pipeline
from perfkit.stats import Estimate
from perfkit.timing import Measurement

__all__ = ["ADVISED_WORKERS", "PinTiming", "WorkerSweep", "interval_gap", "pass_rate", "ratio_explain",
           "time_pin_memory", "worker_sweep"]

ADVISED_WORKERS = (4, 8)  # the advice: "4-8 workers"


@dataclass(frozen=True)
class PinTiming:
    """A loop over a DataLoader, copying each batch to ``device``, with and without pinned memory
    (without CUDA: the loop without it, twice)."""

    pageable: Measurement
    pinned: Measurement
    device: str

    def speedup(self) -> stats.Estimate:
        """Pageable time over pinned time (> 1: pinning is faster)."""
        return stats.median_ratio(self.pageable.times_s, self.pinned.times_s)

    def by_order(self) -> dict[str, stats.Estimate]:
        """The same ratio over the rounds of each order apart: ``"pageable first"`` (the even
        rounds of the balanced design) and ``"pinned first"`` (the odd ones). Where the two loops
        run the same code, the two figures part by what a round's position does to a time, which
        the balanced median over both cancels."""
        ratios = stats.paired_ratios(self.pageable.times_s, self.pinned.times_s)
        return {"pageable first": stats.median_interval(ratios[0::2]),
                "pinned first": stats.median_interval(ratios[1::2])}

    @property
    def same_code(self) -> bool:
        """Without CUDA both loops ran the same code (``pin_memory=False``: PyTorch would ignore
        the flag, with a warning each pass)."""
        return self.device != "cuda"

    def position_effect(self) -> float:
        """How much longer a round's second loop took than its first, as a fraction (negative:
        shorter), from the two orders' medians: the geometric mean of pinned-first over
        pageable-first; meaningful where the two loops run the same code."""
        a_first, b_first = self.by_order().values()
        return math.sqrt(b_first.value / a_first.value) - 1

    def reach(self) -> float | None:
        """Where both loops ran the same code (an A/A control), how far the interval of their
        ratio reaches from 1x, as a fraction: the largest gap this timing design showed between
        identical code, which no figure timed the same way can be told from. ``None`` with CUDA,
        where the two loops differ and there is no control."""
        if not self.same_code:
            return None
        s = self.speedup()
        return max(1 - s.low, s.high - 1, 0.0)

    def resolves(self, est: stats.Estimate, reference: float) -> bool:
        """Whether ``est``'s interval lies farther from ``reference`` than :meth:`reach`: an
        effect the control cannot account for. Without a control (CUDA) any gap counts, as
        nothing here measures the design's own error there.

        Raises:
            TypeError, ValueError: for an ``est`` that is not an Estimate or a ``reference``
                that is not a finite number > 0.
        """
        return interval_gap(est, reference) > (self.reach() or 0.0)

    def widened(self, est: stats.Estimate) -> stats.Estimate:
        """``est`` with its interval widened by the factor ``1 + reach`` (:meth:`reach`) on each
        side (``low / (1 + reach)``, ``high * (1 + reach)``: a ratio's interval stays above 0
        however far identical code read apart), its method saying so: what a verdict on ``est``
        would stand on once this design's own error is counted. ``est`` unchanged without a
        control (CUDA) or without an interval.

        Raises:
            TypeError: for an ``est`` that is not an Estimate.
        """
        check_type("est", est, stats.Estimate)
        reach = self.reach()
        if not reach or not est.has_interval:
            return est
        return replace(est, low=est.low / (1 + reach), high=est.high * (1 + reach),
                       method=f"{est.method}, widened by the A/A control's {reach:.1%}")


def interval_gap(est: stats.Estimate, reference: float) -> float:
    """How far ``est``'s interval lies from ``reference``, as a fraction of it: its low end's
    excess over it, or its high end's shortfall, and 0 where the interval holds it.

    Raises:
        TypeError, ValueError: for an ``est`` that is not an Estimate or a ``reference`` that is
            not a finite number > 0.
    """
    check_type("est", est, stats.Estimate)
    check_real("reference", reference, 0, lo_open=True)
    if est.low > reference:
        return est.low / reference - 1
    return 1 - est.high / reference if est.high < reference else 0.0


def time_pin_memory(batch: int = 8, batches: int = 20, repeat: int = 15,
                    device: torch.device | str | None = None) -> PinTiming:
    """Time a loop over ``batches`` batches of (batch, 3, 64, 64) images copied to ``device``,
    ``pin_memory=False`` against ``True``, interleaved in balanced orders (``repeat`` rounded up
    to even: pageable first in the even rounds, pinned first in the odd ones). Without CUDA,
    where PyTorch ignores the flag (after a check and a warning each pass), both loops run with
    ``pin_memory=False``: the same code, an A/A control of the timing design.

    Raises:
        ValueError: for counts that are not ints >= 1.
    """
    for name, v in (("batch", batch), ("batches", batches), ("repeat", repeat)):
        check_int(name, v, 1)
    dev = timing.resolve_device(device)
    images = TensorDataset(torch.randn(batch * batches, 3, 64, 64))

    def loop(pin: bool):
        def run() -> None:
            for (x,) in DataLoader(images, batch_size=batch, pin_memory=pin):
                x.to(dev, non_blocking=pin)
            timing.synchronize(dev)
        return run

    pin = dev.type == "cuda"  # else the flag does nothing but warn: time identical code (A/A)
    pageable, pinned = timing.interleaved_balanced([loop(False), loop(pin)], warmup=1, repeat=repeat,
                                                   device=dev)
    return PinTiming(pageable, pinned, dev.type)


def pass_rate(record: LoaderRecord, batch: int) -> float:
    """Samples/s of the last pass over the data: the pipeline's fill included, start-up not.

    Raises:
        TypeError, ValueError: for a ``record`` that is not a :class:`LoaderRecord` or a
            ``batch`` that is not an int >= 1.
    """
    check_type("record", record, LoaderRecord)
    check_int("batch", batch, 1)
    waits, computes = record.wait_s[-1], record.compute_s[-1]
    return batch * len(waits) / (sum(waits) + sum(computes))


@dataclass(frozen=True)
class WorkerSweep:
    """Samples/s per ``num_workers``, one value per round, and the pipeline model's prediction."""

    rates: dict[int, list[float]]   # workers -> samples/s, one per round
    model: dict[int, float]         # workers -> samples/s simulated
    cost_s: float                   # measured seconds per sample (under this machine's load)
    cores: int

    def _split(self) -> tuple[list[int], list[int]]:
        advised = [w for w in self.rates if ADVISED_WORKERS[0] <= w <= ADVISED_WORKERS[1]]
        rest = [w for w in self.rates if w not in advised]
        if not advised or not rest:
            raise ValueError("the sweep must hold advised counts (4-8) and others")
        return advised, rest

    def median(self, w: int) -> float:
        return stats.median(self.rates[w])

    def best(self) -> tuple[int, int]:
        """(best advised count, best other count) by median samples/s."""
        advised, rest = self._split()
        return max(advised, key=self.median), max(rest, key=self.median)

    def advised_over_rest(self) -> stats.Estimate:
        """The best advised count's samples/s over the best other's, over the paired rounds."""
        a, r = self.best()
        return stats.median_ratio(self.rates[a], self.rates[r])

    def predicted_advised_over_rest(self) -> float:
        """The same ratio in the pipeline model (best advised over best other, simulated)."""
        advised, rest = self._split()
        return max(self.model[w] for w in advised) / max(self.model[w] for w in rest)

    def cost_text(self, batch: int, compute_s: float) -> str:
        """The sample cost the model uses against the one the 0-worker pass implies (its batch's
        time less its ``compute_s`` step, over ``batch`` samples), and the model's rates with
        workers against the measured, each side said as the figures fall: a pass that costs a sample
        more than alone (what the model leaves out) lifts the model's rates, a cost timed alone that
        is too high lowers them, and rates off by more than that, or the other way, are said to be
        what this sweep does not measure; ``""`` without a 0-worker run.

        Raises:
            TypeError, ValueError: for a ``batch`` that is not an int >= 1 or a ``compute_s`` that
                is not a finite number >= 0.
        """
        check_int("batch", batch, 1)
        check_real("compute_s", compute_s, 0)
        if 0 not in self.rates:
            return ""
        implied, used = (batch / self.median(0) - compute_s) / batch * 1e3, self.cost_s * 1e3  # ms a sample
        over = [self.model[w] / self.median(w) - 1 for w in self.rates if w]
        said = (f"at 0 workers (no parallelism) the measured rate implies {implied:.2f} ms a sample (a "
                f"batch's time less its {compute_s * 1e3:g} ms step, over {batch} samples) against the "
                f"{used:.2f} ms the model uses: ")
        extra = implied / used - 1  # what a sample costs in a pass beyond its cost alone
        if round(extra, 2) > 0:
            said += (f"in a pass a sample costs {extra:.0%} more than alone (what else the pass costs, which "
                     "the model leaves out)")
            odd = round(max(over, default=0), 2) > round(extra, 2)
            why = f"more than a per-sample excess of {extra:.0%} can raise them"
        elif round(extra, 2) < 0:
            low = 1 - implied / used  # the most a cost too high lowers a modelled rate
            said += (f"the cost the model uses, timed alone, is {used / implied - 1:.0%} above what a sample "
                     f"took in the pass, which lowers the model's rates, by at most {low:.0%}")
            odd = bool(over) and (round(min(over), 2) < -round(low, 2) or round(max(over), 2) > 0)
            why = (f"{'lower' if round(min(over), 2) < -round(low, 2) else 'higher'} than that cost alone "
                   "can make them")
        else:
            said += "the two agree"
            odd = bool(over) and round(max(map(abs, over)), 2) > 0
            why = "though the two costs agree"
        if over:
            said += (f"; with workers the model's rates run {min(over):+.0%} to {max(over):+.0%} against "
                     "the measured"
                     + (f", {why}: what else the workers cost is not measured here" if odd else ""))
        return said + "; the prediction below is its ratio of rates, not the rates"


def worker_sweep(workers: Sequence[int], batch: int = 8, batches: int = 20, cost_s: float = 1e-3,
                 compute_s: float = 2e-3, rounds: int = 2, cores: int | None = None) -> WorkerSweep:
    """Measure samples/s at each worker count (CPU-bound samples of ``cost_s``, a step of
    ``compute_s`` sleep, as a GPU step leaves the host free), the counts taking turns for
    ``rounds`` rounds, rounded up to whole cycles of :func:`perfkit.timing.balanced_orders` (each
    count before each other one in half the rounds); simulate the same pass with the machine's
    ``cores``.

    Raises:
        TypeError, ValueError: for empty ``workers``, negative counts, or costs not > 0.
    """
    workers = [check_int("workers entries", w, 0) for w in check_items("workers", workers)]
    for name, v in (("batch", batch), ("batches", batches), ("rounds", rounds)):
        check_int(name, v, 1)
    check_real("cost_s", cost_s, 0, lo_open=True)
    check_real("compute_s", compute_s, 0)
    cores = check_int("cores", cores if cores is not None else os.cpu_count() or 1, 1)
    ds = SlowDataset(batch * batches, cost_s, kind="spin")
    per_sample = timing.benchmark(lambda: [ds[i] for i in range(batch)], warmup=1, repeat=3).median_s / batch
    rates: dict[int, list[float]] = {w: [] for w in workers}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # more workers than cores, on purpose
        orders = timing.balanced_orders(len(workers))
        for r in range(-(-rounds // len(orders)) * len(orders)):  # whole cycles
            for w in (workers[i] for i in orders[r % len(orders)]):  # 1st pass starts the workers, 2nd timed
                rec = measure_loader(ds, LoaderConfig(batch, w, persistent_workers=w > 0),
                                     compute=compute_s, epochs=2 if w else 1)
                rates[w].append(pass_rate(rec, batch))
    sim = {w: simulate_pipeline(batch * per_sample, compute_s, w, 2, steps=batches, cores=cores)
           for w in workers}
    model = {w: batch / r.step_s for w, r in sim.items()}  # samples/s of the same pass, simulated
    return WorkerSweep(rates, model, per_sample, cores)


def ratio_explain(rates: Mapping[int, float], model_rates: Mapping[int, float], at: int, last: int,
                  measured: Estimate) -> dict[str, str]:
    """The ``"above"`` and ``"below"`` sentences for the verdict on :func:`rate_ratio` of the
    ``last``-worker run over the ``at``-worker run (``rates``, ``model_rates``: samples/s by worker
    count, measured and modelled, mean steady rates). Each run's shortfall from its model moves the
    ratio of the mean rates, by exactly the ratio of the two shortfalls; whatever lies between that
    ratio and ``measured`` (a ratio of median block means) is put down to the statistic, not to the
    shortfalls.

    Raises:
        TypeError, ValueError: for a ``measured`` that is not an Estimate, worker counts missing
            from the rates, or rates that are not finite numbers > 0.
    """
    check_type("measured", measured, Estimate)
    for name, m in (("rates", rates), ("model_rates", model_rates)):
        check_type(name, m, Mapping)
        for w in (at, last):
            if w not in m:
                raise ValueError(f"{name} must hold worker counts {at} and {last}, got {sorted(m)}")
            check_real(f"{name}[{w}]", m[w], 0, lo_open=True)
    share = {w: rates[w] / model_rates[w] for w in (at, last)}
    mean_x, model_x = rates[last] / rates[at], model_rates[last] / model_rates[at]
    head = (f"The {at}-worker run reached {share[at]:.0%} of its model's {model_rates[at]:.0f} samples/s and "
            f"the {last}-worker run {share[last]:.0%} of its model's {model_rates[last]:.0f}: ")
    blocks = ("a run's median block mean does not move with the few blocks that hold its slowest steps, "
              "which its mean rate counts in full")
    said = {}
    for side, sign in (("above", 1), ("below", -1)):
        lagging = at if side == "above" else last
        if sign * (mean_x - model_x) > 0:
            said[side] = head + (f"the {lagging}-worker run fell further short of its model, which "
                                 f"{'lifts' if side == 'above' else 'lowers'} the ratio of the runs' mean "
                                 f"steady rates to {mean_x:.2f}x, against the model's {model_x:.3f}x")
            rest = f"; the rest of the way to {measured.point('x')} is the statistic's: "
        else:
            said[side] = head + (f"the ratio of their mean steady rates, {mean_x:.2f}x, does not lie "
                                 f"{side} the model's {model_x:.3f}x")
            rest = f"; the figure, {measured.point('x')}, lies {side} it through the statistic alone: "
        off = sign * (measured.value / mean_x - 1) > 0.02   # the block medians beyond the mean rates
        said[side] += (rest + blocks + "." if off or sign * (mean_x - model_x) <= 0 else
                       ", which accounts for the figure.")
    return said
