"""Training-step throughput and MFU per (precision, compiled, batch), measured once and cached.

Measures as nanoGPT's ``bench.py`` does (build the step, warm up, then time it, and report
MFU as ``estimate_mfu`` does, against the measured ceiling of the dtype the matmuls run in)
and returns a record per setting, as torchtitan's metrics do, for notebook 06's widget
(:func:`perfkit.viz.compute.compute_widget`) to plot. Settings measured together take turns
(:func:`perfkit.timing.interleaved`), so their ratios survive a noisy machine; with ``threads``
they run pinned to that many intra-op threads (:func:`perfkit.sizing.pinned_threads`), held
against that share of the ceilings. An emulated dtype's MFU is held against fp32's ceiling
(:func:`perfkit.sizing.mfu_dtype`): over 100 % of an emulated ceiling measures nothing.

Usage::

    bench = StepBench.gpt2(hw.cached_limits(), seq_len=64, n_embd=64)
    p = bench.measure("bf16", compiled=False, batch=8)
    print(p.tokens_per_s, p.mfu)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from perfkit import ceilings
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.compute.flops import gpt2_shape, make_train_step, mfu, model_over_counted, precision_dtype
from perfkit.hw import MachineLimits, dtype_name
from perfkit.sizing import mfu_dtype, pinned_threads
from perfkit.timing import Measurement, Timer, interleaved, resolve_device
from perfkit.units import printed_beside, si, si_interval

__all__ = ["StepBench", "ThroughputPoint", "at_ends", "cross_run_spread", "model_rate_note",
           "model_share", "own_ceiling_note", "sweep_beside_curve", "two_run_text"]


@dataclass(frozen=True)
class ThroughputPoint:
    """A training step measured at one setting, with its model FLOPs and ceiling.

    Attributes:
        precision, compiled, batch: the setting.
        step: timings of the step (after ``warmup`` untimed steps).
        first_call_s: the first step's seconds (includes compiling when ``compiled``).
        tokens_per_step, flops_per_step: work per step.
        peak_flops: the ceiling the MFU is held against: that of the dtype the matmuls run in
            (fp32's where that dtype is emulated), measured on the step's threads
            (:meth:`perfkit.hw.MachineLimits.peak_flops`).
        ceiling: the dtype whose ceiling ``peak_flops`` is.
        threads: intra-op threads the step ran with.
    """

    precision: str
    compiled: bool
    batch: int
    step: Measurement
    first_call_s: float
    tokens_per_step: int
    flops_per_step: int
    peak_flops: float
    ceiling: str = "float32"
    threads: int = 1

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step.median_s

    @property
    def mfu(self) -> float:
        return mfu(self.flops_per_step, self.step.median_s, self.peak_flops)


class StepBench:
    """Training-step throughput and MFU per (precision, compiled, batch), measured once each.

    Every setting gets its own model from ``make_model`` (same seed, so the same weights),
    an AdamW optimizer and a step from :func:`make_train_step`; a compiled setting wraps
    the model in ``torch.compile`` (compiled once per precision; a new batch size may
    recompile). Results are cached, so a widget can revisit a setting instantly.

    Example::

        bench = StepBench.gpt2(hw.cached_limits(), seq_len=64, n_embd=64)
        p = bench.measure("bf16", compiled=False, batch=8)
        print(p.tokens_per_s, p.mfu)
    """

    def __init__(self, make_model: Callable[[], nn.Module], make_batch: Callable[[int], Any],
                 loss_fn: Callable[[nn.Module, Any], torch.Tensor],
                 flops_per_step: Callable[[int], int], tokens_per_sample: int,
                 limits: MachineLimits, warmup: int = 2, repeat: int = 5,
                 compile_backend: str = "inductor", lr: float = 1e-3,
                 device: torch.device | str | None = None, threads: int | None = None) -> None:
        """Args:
            make_model: builds the (seeded) model on the target device.
            make_batch: ``make_batch(b)`` returns one batch of ``b`` samples.
            loss_fn: ``loss_fn(model, batch)`` returns the loss.
            flops_per_step: ``flops_per_step(b)`` model FLOPs of a step at batch ``b``.
            tokens_per_sample: tokens (or samples) one sample counts as, for throughput.
            limits: measured ceilings (:func:`perfkit.hw.cached_limits`).
            warmup, repeat: untimed and timed steps per setting.
            compile_backend: ``torch.compile`` backend (``"eager"`` only traces: for tests).
            lr: AdamW learning rate.
            device: where the steps run (for timing); ``None`` means CUDA if present.
            threads: intra-op threads to time with (:func:`perfkit.sizing.timing_threads`),
                restored after; ``None`` keeps the current setting.

        Raises:
            TypeError: if a ``make_*``/``*_fn`` argument is not callable, or ``limits`` is
                not a :class:`perfkit.hw.MachineLimits`.
            ValueError: for a ``tokens_per_sample``, ``repeat`` or ``threads`` below 1, a negative
                ``warmup``, an ``lr`` that is not a finite number > 0 or an empty
                ``compile_backend``.
        """
        for name, fn in (("make_model", make_model), ("make_batch", make_batch),
                         ("loss_fn", loss_fn), ("flops_per_step", flops_per_step)):
            if not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        check_int("tokens_per_sample", tokens_per_sample, 1)
        check_type("limits", limits, MachineLimits)
        check_int("warmup", warmup, 0)
        check_int("repeat", repeat, 1)
        check_real("lr", lr, 0, lo_open=True)
        self.threads = None if threads is None else check_int("threads", threads, 1)
        if not isinstance(compile_backend, str) or not compile_backend:
            raise TypeError(f"compile_backend must be a torch.compile backend name, got "
                            f"{compile_backend!r}")
        self.make_model, self.make_batch, self.loss_fn = make_model, make_batch, loss_fn
        self.flops_per_step, self.tokens_per_sample = flops_per_step, tokens_per_sample
        self.limits, self.warmup, self.repeat, self.lr = limits, warmup, repeat, lr
        self.compile_backend, self.device = compile_backend, resolve_device(device)
        self._steps: dict[tuple[str, bool], Callable[[Any], torch.Tensor]] = {}
        self._batches: dict[int, Any] = {}
        self._points: dict[tuple[str, bool, int], ThroughputPoint] = {}

    @classmethod
    def gpt2(cls, limits: MachineLimits, seq_len: int = 64, vocab_size: int = 1024,
             n_embd: int = 64, n_layer: int = 2, n_head: int = 2,
             device: torch.device | str | None = None, **kwargs: Any) -> StepBench:
        """A bench over :func:`perfkit.models.tiny_gpt2` on random token batches (speed
        does not depend on the token values). ``kwargs`` go to the constructor."""
        from perfkit.models import tiny_gpt2

        check_type("limits", limits, MachineLimits)  # before the model is built
        check_int("seq_len", seq_len, 1)  # tiny_gpt2 would call it block_size
        dev = resolve_device(device)

        def make_model() -> nn.Module:
            torch.manual_seed(0)
            return tiny_gpt2(vocab_size, seq_len, n_embd, n_layer, n_head).to(dev)

        shape = gpt2_shape(make_model(), seq_len)
        gen = torch.Generator().manual_seed(0)
        return cls(make_model,
                   lambda b: torch.randint(0, vocab_size, (b, seq_len), generator=gen).to(dev),
                   lambda m, x: m(input_ids=x, labels=x).loss, shape.train_flops, seq_len,
                   limits, device=dev, **kwargs)

    @property
    def points(self) -> list[ThroughputPoint]:
        """Every setting measured so far, in measurement order."""
        return list(self._points.values())

    def measure(self, precision: str, compiled: bool, batch: int) -> ThroughputPoint:
        """The setting's :class:`ThroughputPoint`, measured on first request, then cached.

        Raises:
            ValueError: for an unknown precision or a batch below 1.
        """
        return self.measure_all([(precision, compiled, batch)])[0]

    def measure_all(self, settings: Sequence[tuple[str, bool, int]]) -> list[ThroughputPoint]:
        """Measure the uncached ``(precision, compiled, batch)`` settings *interleaved*.

        Their steps take turns (:func:`perfkit.timing.interleaved`), so a burst of load on a
        shared machine slows all of them alike and their ratios stay fair.

        Raises:
            TypeError, ValueError: for settings that are not ``(precision, compiled, batch)``
                triples, an unknown precision or a batch below 1.
        """
        keys = []
        for i, setting in enumerate(check_items("settings", settings)):
            if not isinstance(setting, tuple | list) or len(setting) != 3:
                raise TypeError(f"settings[{i}] must be a (precision, compiled, batch) tuple, "
                                f"got {setting!r}")
            precision, compiled, batch = setting
            precision_dtype(precision)
            keys.append((precision, bool(compiled), check_int("batch", batch, 1)))
        todo = list(dict.fromkeys(k for k in keys if k not in self._points))
        threads = self.threads or torch.get_num_threads()
        calls, firsts = [], []
        with pinned_threads(threads):  # first calls too: a compile's time depends on its threads
            for precision, compiled, batch in todo:
                if (precision, compiled) not in self._steps:
                    model = self.make_model()
                    opt = torch.optim.AdamW(model.parameters(), lr=self.lr)
                    run = torch.compile(model, backend=self.compile_backend) if compiled else model
                    self._steps[precision, compiled] = make_train_step(
                        model, opt, lambda _m, b, run=run: self.loss_fn(run, b), precision)
                if batch not in self._batches:
                    self._batches[batch] = self.make_batch(batch)
                calls.append(lambda s=self._steps[precision, compiled], x=self._batches[batch]: s(x))
                with Timer(self.device) as first:  # includes compiling for a compiled setting
                    calls[-1]()
                firsts.append(first.elapsed_s)
            times = interleaved(calls, warmup=max(self.warmup - 1, 0), repeat=self.repeat,
                                device=self.device) if todo else []
        on = threads if self.device.type == "cpu" else None  # the ceiling measured on these threads
        for (precision, compiled, batch), m, first_s in zip(todo, times, firsts, strict=True):
            ceiling = mfu_dtype(self.limits, precision_dtype(precision))
            self._points[precision, compiled, batch] = ThroughputPoint(
                precision, compiled, batch, m, first_s, batch * self.tokens_per_sample,
                self.flops_per_step(batch), self.limits.peak_flops(ceiling, on), ceiling, threads)
        return [self._points[k] for k in keys]


def cross_run_spread(first: Mapping[int, float], second: Mapping[int, float],
                     names: tuple[str, str] = ("the sweep", "the batch curve")) -> str:
    """A clause on how far the same steps' medians moved between two cells' runs: ``first`` and
    ``second`` map a batch to its median step time (s) in each, and the batch they share whose
    two medians differ most (by the larger over the smaller) is named with both times; "" when
    they share no batch.

    Raises:
        ValueError: for a step time that is not a finite number > 0.
    """
    shared = [b for b in first if b in second]
    for b in shared:
        check_real("first[b]", first[b], 0, lo_open=True)
        check_real("second[b]", second[b], 0, lo_open=True)
    if not shared:
        return ""
    b = max(shared, key=lambda k: max(first[k], second[k]) / min(first[k], second[k]))
    return (f"; across the {len(shared)} batches both {names[0]} and {names[1]} timed, their medians differ "
            f"most at batch {b}: {first[b] * 1e3:.1f} ms against {second[b] * 1e3:.1f} ms, "
            f"{max(first[b], second[b]) / min(first[b], second[b]):.2f}x")


def at_ends(x: float, est: Any) -> str:
    """The ratio ``x`` printed as ``est``'s interval prints its ends (``"1.034x"`` beside ``"1.016x to
    1.030x"``, never ``"1.03x"``), so that a reader sees the side :meth:`perfkit.stats.Estimate.clear_of`
    names.

    Raises:
        ValueError: for an ``x`` that is not finite.
    """
    digits = len(si_interval(est.value, est.low, est.high, "x")[1].rstrip("x").partition(".")[2])
    return f"{printed_beside(x, est.value, est.low, est.high, 'x'):.{digits}f}x"


def two_run_text(swept: float, here: Any, floor: float, batches: tuple[int, int],
                 times_s: Mapping[int, tuple[float, float]], floor_of: str = "the crude model's") -> str:
    """The sentence that holds a ratio of two batches' tokens/s measured in the sweep (``swept``,
    a ratio of medians) against the same ratio in the batch curve's paired rounds (``here``, a
    :class:`perfkit.stats.Estimate`), for a verdict whose floor is ``floor`` (``floor_of`` names
    whose: ``"the crude model's"``): inside or outside ``here``'s interval as printed; outside it,
    each batch's step time in both runs (``times_s`` maps a batch to (sweep, curve) seconds) and
    its ratio, sweep over curve, saying where the two batches moved opposite ways,
    whether a step moved more than the verdict's margin ``1 - floor`` (a floor below 1x), and on
    which side of ``floor`` the sweep's figure lies: for a floor below 1x always, else where the
    two ratios fall on opposite sides of it (the verdict then holds for the curve's rounds only).

    Raises:
        ValueError: for a ratio or a step time that is not a finite number > 0.
    """
    check_real("swept", swept, 0, lo_open=True)
    check_real("floor", floor, 0, lo_open=True)
    for b in times_s:
        for t in times_s[b]:
            check_real("times_s[b]", t, 0, lo_open=True)
    top, rival = batches
    shown = at_ends(swept, here)
    out = (f"The batch sweep above measured the same ratio, batch {top} over {rival}, at {shown} (a ratio of "
           f"its medians); this curve's rounds: {here.text('x')}. The same steps in two separate runs, each "
           "paired only within its own rounds: ")
    side, other = ("at or above", "below") if swept >= floor else ("below", "at or above")
    same = (swept >= floor) == (here.value >= floor)
    where = f"{side} {floor_of} floor ({floor:.2f}x)"
    if not here.clear_of(swept, "x"):
        said = (f", and {where}, as this curve's point does" if same and floor < 1 else "" if same else
                f", but {where}, where this curve's point lies {other} it: the two runs agree within this "
                "interval, and that verdict's side is this curve's rounds'")
        return (out + f"the sweep's figure lies inside this {here.label}{said}. The verdicts judge this "
                "curve's paired rounds.")
    moved = "; ".join(f"batch {b} {a * 1e3:.1f} ms there, {c * 1e3:.1f} ms here ({a / c:.2f}x)"
                      for b, (a, c) in times_s.items())
    ways = {b: "slower" if round(a / c, 2) > 1 else "faster" for b, (a, c) in times_s.items()
            if round(a / c, 2) != 1}
    if len(set(ways.values())) > 1:   # the two batches moved opposite ways: the ratio moved by both
        moved += ("; the two batches moved opposite ways between the runs ("
                  + ", ".join(f"batch {b} {w} there" for b, w in ways.items()) + ")")
    out += (f"the sweep's figure lies outside this {here.label} (the step times, there over here: {moved}). "
            "It is a ratio of medians from other rounds, with an error of its own that this interval does "
            "not count: the gap is that error, or what changed between the runs (the load, or the "
            "allocator's state: page faults per step, counted above), and this notebook does not tell which.")
    most = max(max(a, c) / min(a, c) for a, c in times_s.values())
    if floor < 1 and most - 1 > 1 - floor:
        out += (f" A step moved {most - 1:.0%} between the runs, more than {floor_of} {1 - floor:.0%} "
                "margin, so one run's rounds cannot settle that verdict for the step in general.")
    if not same:
        out += (f" The sweep's figure lies {where} and this curve's {other} it: that verdict stands for "
                "this curve's rounds only.")
    elif floor < 1:
        out += f" The sweep's figure lies {where}, as this curve's point does."
    return out + " The verdicts judge this curve's paired rounds."


def sweep_beside_curve(sweep: Mapping[int, Any], curve: Any, other: int, floor: float,
                       floor_of: str = "the crude model's") -> str:
    """:func:`two_run_text` for the batch curve's largest batch over its batch ``other`` (an
    index into ``curve.batches``), where the sweep (``sweep`` maps a batch to its
    :class:`ThroughputPoint`) timed both batches; ``""`` where it did not. For the curve's best other
    batch (:meth:`BatchCurve.rival`), it adds where the sweep's own best other batch differs."""
    check_real("floor", floor, 0, lo_open=True)
    top, rival = curve.batches[-1], curve.batches[other]
    if top not in sweep or rival not in sweep:
        return ""
    times = {b: (sweep[b].step.median_s, curve.step_s(curve.batches.index(b)).value) for b in (top, rival)}
    out = two_run_text(sweep[top].tokens_per_s / sweep[rival].tokens_per_s, curve.gain(-1, other), floor,
                       (top, rival), times, floor_of)
    best = max((b for b in curve.batches[:-1] if b in sweep), key=lambda b: sweep[b].tokens_per_s)
    if other % len(curve.batches) == curve.rival() % len(curve.batches) and best != rival:
        there = sweep[top].tokens_per_s / sweep[best].tokens_per_s
        out += (f" The sweep's own best batch other than {top} is {best}, not {rival} (there, {top} over "
                f"{best} is {there:.2f}x): the two runs rank the other batches differently, and the verdicts "
                "take this curve's.")
    return out


def model_rate_note(point: ThroughputPoint, counted_per_step: float, ceiling: float, name: str,
                    flat_per_step: float) -> str:
    """A sentence, starting with a space, for a step whose *counted* FLOPs (``counted_per_step``:
    FlopCounterMode's, attention on its causal entries only) are held against a ceiling of
    counted FLOPs (``ceiling``, FLOP/s; ``name`` names it): where the step's *model* FLOP/s
    (``point.flops_per_step`` over its median step) print above that ceiling, it says so and by
    what factor the model's count exceeds the counted one, split by computation
    (:func:`perfkit.compute.flops.model_over_counted`; ``flat_per_step``: the ``6N`` FLOPs a step
    charges the parameters that do no matmul), so that no reader takes the ceiling for a roof of
    model FLOPs. ``""`` where they do not.

    Raises:
        TypeError, ValueError: for a ``point`` that is not a ThroughputPoint, figures that are
            not finite numbers > 0 (``flat_per_step``: >= 0), or an empty ``name``.
    """
    check_type("point", point, ThroughputPoint)
    check_real("counted_per_step", counted_per_step, 0, lo_open=True)
    check_real("ceiling", ceiling, 0, lo_open=True)
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must name the ceiling, got {name!r}")
    rate = point.flops_per_step / point.step.median_s  # model FLOP/s
    if float(f"{rate:.3g}") <= float(f"{ceiling:.3g}"):
        return ""
    return (f" Its model FLOP/s, {si(rate, 'FLOP/s')}, lie above {name}, {si(ceiling, 'FLOP/s')}: the "
            f"model's count (6N + 12·L·d·T a token) is "
            f"{model_over_counted(point.flops_per_step, counted_per_step, flat_per_step)}; so a ceiling of "
            "counted FLOPs is no roof for model FLOPs.")


def own_ceiling_note(limits: MachineLimits, dtype: str, rate: float, threads: int | None = None,
                     mine: str = "", loaded: MachineLimits | None = None, at: str = "") -> str:
    """:func:`perfkit.ceilings.ceiling_note` (``rate``'s share of the ``dtype`` ceiling, and its
    source), except where that ceiling was set by this same work (its source, as
    :func:`perfkit.ceilings.ceiling_source` gives it, names ``mine``): a share of it would measure
    the work against itself, so none is printed. The sentence then gives ``rate`` against the
    float32 ceiling on the same threads (a share, or how many times it where ``rate`` is above it),
    names the ``dtype`` ceiling with its source, says why no share of it is printed, and, where
    ``at`` (``"batch 2"``) names this run's size and the source names a size other than it, says
    that the ceiling was set at another size.

    Raises:
        TypeError, ValueError: as :func:`perfkit.ceilings.ceiling_note`, and for a ``mine`` or an
            ``at`` that is not a str.
    """
    check_type("mine", mine, str)
    check_type("at", at, str)
    source = ceilings.ceiling_source(limits, dtype, threads, loaded)
    if not mine or mine not in source:
        return ceilings.ceiling_note(limits, dtype, rate, threads, loaded=loaded)
    on = "" if threads is None else f" on {threads} thread{'s' * (threads != 1)}"
    fp32 = limits.peak_flops("float32", threads)
    roof = (f"{rate / fp32:.1%} of the float32 ceiling{on}, {si(fp32, 'FLOP/s')}" if rate <= fp32 else
            f"{rate / fp32:.2f}x the float32 ceiling{on}, {si(fp32, 'FLOP/s')}")
    word = at.split()[0] if at.split() else ""
    other = bool(word) and bool(re.search(rf"\b{re.escape(word)} \d+\b", source)) \
        and not re.search(rf"\b{re.escape(at)}\b", source)
    name = dtype_name(dtype)
    peak = si(limits.peak_flops(name, threads), 'FLOP/s')
    return (f"{roof}; no share of the {name} ceiling{on}, {peak}, is printed: it was {source}"
            + (f" (at another size than this run's {at})" if other else "")
            + f": the same work, so a share of it would measure the {mine} against itself, not the machine")


def model_share(limits: MachineLimits, dtype: str, share: float, threads: int | None = None,
                mine: str = "", loaded: MachineLimits | None = None) -> str:
    """``"model FLOP/s 41.0% of the bfloat16 ceiling on 1 thread"``: a step's model FLOP/s over the
    ``dtype`` ceiling (``share``), never printed as a share above 100 % (model FLOPs count more than
    the counted FLOPs a ceiling may have been set in: such a share says how many times the ceiling
    it is, and why), nor as a share of a ceiling this same work set (its source names ``mine``).

    Raises:
        TypeError, ValueError: for bad limits, an unmeasured dtype, a ``share`` that is not a
            finite number > 0, or a ``mine`` that is not a str.
    """
    check_real("share", share, 0, lo_open=True)
    check_type("mine", mine, str)
    on = "" if threads is None else f" on {threads} thread{'s' * (threads != 1)}"
    name = f"the {dtype_name(dtype)} ceiling{on}"
    if mine and mine in ceilings.ceiling_source(limits, dtype, threads, loaded):
        return f"model FLOP/s not held against {name}, which this same work set (as said below)"
    if float(f"{share * 100:.1f}") <= 100:
        return f"model FLOP/s {share:.1%} of {name}"
    return (f"model FLOP/s {share:.2f}x {name}, above it: the model's count (6N + 12·L·d·T a token) exceeds "
            "the FLOPs counted in the ceiling's operations, so that ceiling is no roof for model FLOPs")
