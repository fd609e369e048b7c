"""Speed advice under the microscope (course module 09): each claim's settings, built and timed.

Every function builds the two (or more) settings a piece of advice compares, times them in
alternation, in balanced orders (:func:`perfkit.timing.interleaved_balanced`: a drifting load
hits both members of a round, and each runs first in half the rounds, so what a round's
position does to a time cancels from the ratio) and returns a record of the Measurements.
``speedup()`` on a record is the
:class:`perfkit.stats.Estimate` a verdict is judged on: the median of the paired rounds'
``baseline / candidate`` ratios with its order-statistic interval. The models each claim is held against
(roofline, Amdahl) are methods of the records, from the machine's measured ceilings.

Usage::

    act = time_activations(rows=512, width=1024, repeat=9)
    print(act.step_speedup())       # GELU's step speedup over ReLU's, with its interval
    print(time_grouped_conv(64, 32, 8, groups=8, repeat=9).roofline_bound(cached_limits()))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from perfkit import stats, timing
from perfkit._checks import check_callable, check_int, check_items, check_type
from perfkit.compute.compiling import CompileRecord, measure_compile
from perfkit.hw import MachineLimits
from perfkit.timing import Measurement

__all__ = ["ActivationTiming", "ChannelsLastCheck", "CompileTiming", "ConvTiming", "ThreadTiming",
           "channels_last_check", "mlp_step", "speedup_estimate", "time_activations", "time_compile",
           "time_grouped_conv", "time_thread_counts"]


def speedup_estimate(baseline: Measurement, candidate: Measurement) -> stats.Estimate:
    """``median(baseline) / median(candidate)`` over paired rounds (> 1: the candidate is faster).

    Raises:
        TypeError: for an argument that is not a :class:`~perfkit.timing.Measurement`.
        ValueError: for rounds of unequal count (they must come from one interleaved run).
    """
    check_type("baseline", baseline, Measurement)
    check_type("candidate", candidate, Measurement)
    return stats.median_ratio(baseline.times_s, candidate.times_s)


def mlp_step(act: nn.Module, rows: int = 512, width: int = 1024, features: int = 256) -> Callable[[], None]:
    """One SGD step of ``Linear -> act -> Linear`` on a fixed batch (rows, features), seeded.

    Raises:
        TypeError, ValueError: for ``act`` that is not a module, or sizes that are not ints >= 1.
    """
    check_type("act", act, nn.Module)
    for name, v in (("rows", rows), ("width", width), ("features", features)):
        check_int(name, v, 1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(features, width), act, nn.Linear(width, features))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(rows, features)

    def step() -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


# --- 4: GELU against ReLU -------------------------------------------------------------------


@dataclass(frozen=True)
class ActivationTiming:
    """GELU and ReLU timed alone (``calls`` calls per timing) and inside an MLP training step."""

    relu_op: Measurement
    gelu_op: Measurement
    calls: int
    relu_step: Measurement
    gelu_step: Measurement
    relu_backward: Measurement | None = None  # the ops' backward (``threshold_backward`` and
    gelu_backward: Measurement | None = None  # ``gelu_backward``), ``calls`` calls per timing

    def op_cost(self) -> stats.Estimate:
        """GELU op time over ReLU op time (> 1: GELU costs more)."""
        return speedup_estimate(self.gelu_op, self.relu_op)

    def step_speedup(self) -> stats.Estimate:
        """ReLU step time over GELU step time: GELU's speedup (> 1: GELU faster)."""
        return speedup_estimate(self.relu_step, self.gelu_step)

    @property
    def extra_op_s(self) -> float:
        """Seconds GELU adds per call over ReLU (medians)."""
        return (self.gelu_op.median_s - self.relu_op.median_s) / self.calls

    @property
    def extra_backward_s(self) -> float | None:
        """Seconds GELU's backward op adds per call over ReLU's (medians; ``None`` if not timed)."""
        if self.gelu_backward is None or self.relu_backward is None:
            return None
        return (self.gelu_backward.median_s - self.relu_backward.median_s) / self.calls


def time_activations(rows: int = 512, width: int = 1024, repeat: int = 9, op_repeat: int | None = None,
                     target_s: float = 0.02) -> ActivationTiming:
    """Time ``F.relu`` against ``F.gelu`` on a (rows, width) tensor, forward and backward ops
    (``aten.threshold_backward``, ``aten.gelu_backward``, what autograd calls), then an MLP step
    with each (one activation per step).

    Raises:
        ValueError: for sizes or counts that are not ints >= 1.
    """
    for name, v in (("rows", rows), ("width", width), ("repeat", repeat)):
        check_int(name, v, 1)
    op_repeat = check_int("op_repeat", op_repeat if op_repeat is not None else 3 * repeat, 1)
    h = torch.randn(rows, width)  # (tokens, hidden): an MLP's hidden activations
    calls = timing.calibrate_number(lambda: F.gelu(h), target_s=target_s)  # one timing >= target_s
    g = torch.randn(rows, width)  # the gradient arriving from the next layer
    aten = torch.ops.aten
    relu_out = F.relu(h)
    ops = [lambda: [F.relu(h) for _ in range(calls)], lambda: [F.gelu(h) for _ in range(calls)],
           lambda: [aten.threshold_backward(g, relu_out, 0) for _ in range(calls)],
           lambda: [aten.gelu_backward(g, h) for _ in range(calls)]]
    relu_op, gelu_op, relu_bwd, gelu_bwd = timing.interleaved_balanced(ops, warmup=1, repeat=op_repeat)
    steps = [mlp_step(nn.ReLU(), rows, width), mlp_step(nn.GELU(), rows, width)]
    relu_step, gelu_step = timing.interleaved_balanced(steps, warmup=1, repeat=repeat)
    return ActivationTiming(relu_op, gelu_op, calls, relu_step, gelu_step, relu_bwd, gelu_bwd)


# --- 5: grouped convolutions ----------------------------------------------------------------


@dataclass(frozen=True)
class ConvTiming:
    """A dense and a grouped 3x3 convolution (same channels, same input): FLOPs counted, timed."""

    channels: int
    size: int
    batch: int
    groups: int
    flops: dict[int, int]  # groups -> FLOPs of one call (counted by torch's FlopCounterMode)
    dense: Measurement
    grouped: Measurement
    threads: int | None = None  # intra-op threads the calls ran on (None: all cores)

    def speedup(self) -> stats.Estimate:
        """Dense time over grouped time."""
        return speedup_estimate(self.dense, self.grouped)

    def peak(self, limits: MachineLimits) -> float:
        """The fp32 matmul ceiling at the thread count the calls ran on (FLOP/s)."""
        return limits.peak_flops("float32", threads=self.threads)

    def terms(self, limits: MachineLimits) -> dict[int, tuple[float, float]]:
        """groups -> (compute s, memory s) at the fp32 ceiling (of the threads used) and the copy
        bandwidth (roofline): each a lower bound on that call's time."""
        io = 2 * self.batch * self.channels * self.size ** 2 * 4  # bytes: read the input, write the output
        return {g: (f / self.peak(limits),
                    (io + 9 * self.channels * self.channels // g * 4) / limits.copy_bytes_per_s)
                for g, f in self.flops.items()}

    def roofline_bound(self, limits: MachineLimits) -> float:
        """The largest speedup the roofline allows: the dense call's measured (median) time over
        the grouped call's roofline time. The grouped call cannot run faster than its roofline
        time; the dense one took what it took. (The ratio of the two roofline times bounds
        nothing: a dense call far from its own roofline can lose more than that ratio.)"""
        return self.dense.median_s / max(self.terms(limits)[self.groups])

    def rates(self) -> dict[int, float]:
        """groups -> achieved FLOP/s (median times)."""
        g = self.groups
        return {1: self.flops[1] / self.dense.median_s, g: self.flops[g] / self.grouped.median_s}


def time_grouped_conv(channels: int = 64, size: int = 32, batch: int = 8, groups: int = 8, repeat: int = 27,
                      device: torch.device | str | None = None) -> ConvTiming:
    """Count and time a 3x3 convolution with ``groups=1`` and ``groups=groups`` (inference, fp32).

    Raises:
        ValueError: for sizes that are not ints >= 1, or ``channels`` not a multiple of ``groups``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    for name, v in (("channels", channels), ("size", size), ("batch", batch), ("groups", groups),
                    ("repeat", repeat)):
        check_int(name, v, 1)
    if channels % groups:
        raise ValueError(f"channels ({channels}) must be a multiple of groups ({groups})")
    dev = timing.resolve_device(device)
    torch.manual_seed(0)
    x = torch.randn(batch, channels, size, size, device=dev)  # (N, C, H, W)
    convs = {g: nn.Conv2d(channels, channels, 3, padding=1, groups=g).to(dev).eval() for g in (1, groups)}
    flops = {}
    for g, conv in convs.items():
        with FlopCounterMode(display=False) as fc, torch.no_grad():
            conv(x)
        flops[g] = fc.get_total_flops()

    def call(g: int) -> Callable[[], None]:
        def run() -> None:  # cuDNN's TF32 off: fp32 arithmetic, as the fp32 ceiling assumes
            with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                convs[g](x)
        return run

    dense, grouped = timing.interleaved_balanced([call(1), call(groups)], warmup=1, repeat=repeat, device=dev)
    return ConvTiming(channels, size, batch, groups, flops, dense, grouped, torch.get_num_threads())


# --- 9: torch.compile -----------------------------------------------------------------------


@dataclass(frozen=True)
class CompileTiming:
    """An MLP eager and compiled (:class:`perfkit.compute.CompileRecord`) and its matmul FLOPs."""

    record: CompileRecord
    matmul_flops: int  # per call, counted by torch's FlopCounterMode (forward, and backward with train)
    train: bool
    threads: int | None = None  # intra-op threads the calls ran on (None: all cores)

    def speedup(self) -> stats.Estimate:
        """Eager time over compiled time."""
        return speedup_estimate(self.record.eager, self.record.compiled)

    def matmul_share(self, limits: MachineLimits) -> tuple[float, float]:
        """(share capped at 1, raw share) of the eager call the matmuls take at the fp32 ceiling
        of the thread count the calls ran on. A raw share above 1 says the cached ceiling is too low."""
        peak = limits.peak_flops("float32", threads=self.threads)
        raw = self.matmul_flops / peak / self.record.eager.median_s
        return min(1.0, raw), raw

    def break_even_text(self) -> str:
        """The calls after which the compile has paid for itself (the medians' difference,
        :attr:`~perfkit.compute.CompileRecord.break_even_calls`), printed only where the speedup's
        interval, as printed, lies above 1x; else why none is: an interval that holds 1x cannot tell
        the compiled call from one no faster, so compiling may never pay off here, and one below 1x
        says it is slower. Without an interval (too few rounds), the point, said to be one."""
        est, be = self.speedup(), self.record.break_even_calls
        side = est.clear_of(1.0, "x")
        if not est.has_interval or side == "above":
            return ((f"break-even after {be:,.0f} calls (the medians' difference)" if be != math.inf else
                     "no break-even: at the medians the compiled step is not faster")
                    + ("" if est.has_interval else ": a point, the rounds too few for an interval"))
        return ("no break-even: the compiled step is slower, its interval below 1x" if side == "below" else
                f"no break-even printed: the speedup's {est.label} holds 1x, so this run cannot tell the "
                "compiled step from one no faster, and compiling may never pay off")


def time_compile(rows: int = 512, width: int = 1024, features: int = 256, train: bool = True,
                 repeat: int = 9) -> CompileTiming:
    """Compile ``Linear -> tanh GELU -> LayerNorm -> Linear`` (forward and backward with ``train``,
    else forward only), then time it against eager (:func:`perfkit.compute.measure_compile`, in
    balanced orders). The matmul FLOPs of one call are counted by torch's ``FlopCounterMode`` on
    the eager call: with backward, 5 matmuls, not 6 (the input needs no gradient, so the first
    Linear's backward computes only its weight's).

    Raises:
        ValueError: for sizes that are not ints >= 1.
    """
    for name, v in (("rows", rows), ("width", width), ("features", features), ("repeat", repeat)):
        check_int(name, v, 1)

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(features, width), nn.GELU(approximate="tanh"), nn.LayerNorm(width),
                             nn.Linear(width, features))

    x = torch.randn(rows, features)  # (tokens, features)

    def call(m: nn.Module) -> Callable[[], None]:
        def run() -> None:
            if train:
                m(x).square().mean().backward()
            else:
                with torch.no_grad():
                    m(x)
        return run

    from torch.utils.flop_counter import FlopCounterMode

    eager = call(model())
    with FlopCounterMode(display=False) as fc:
        eager()
    rec = measure_compile(eager, call(torch.compile(model())), warmup=1, repeat=repeat, balanced=True)
    return CompileTiming(rec, fc.get_total_flops(), train, torch.get_num_threads())


# --- 10: channels_last on a transformer -----------------------------------------------------


@dataclass(frozen=True)
class ChannelsLastCheck:
    """What ``.to(memory_format=torch.channels_last)`` changed in a transformer, and inference timed
    with and without it there and on a small CNN (4-D weights) for contrast."""

    params_4d_5d: int  # parameters of 4 or 5 dimensions: the only ones Module.to(memory_format=...) converts
    relaid: int  # parameters whose storage the call replaced
    transformer: tuple[Measurement, Measurement]  # default, channels_last
    cnn: tuple[Measurement, Measurement]

    def speedup(self) -> stats.Estimate:
        """The transformer's default time over its channels_last time."""
        return speedup_estimate(*self.transformer)

    def cnn_speedup(self) -> stats.Estimate:
        return speedup_estimate(*self.cnn)


def channels_last_check(make_transformer: Callable[[], nn.Module], ids: torch.Tensor,
                        repeat: int = 9) -> ChannelsLastCheck:
    """Convert a fresh ``make_transformer()`` to channels_last, count what changed, time inference.

    Raises:
        TypeError: if ``make_transformer`` is not callable or ``ids`` not a tensor.
    """
    from perfkit.models import SmallCNN

    check_callable("make_transformer", make_transformer)
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"ids must be a tensor of token ids (B, T), got {type(ids).__name__}")
    check_int("repeat", repeat, 1)
    plain, cl = make_transformer().eval(), make_transformer().eval()
    before = [p.data_ptr() for p in cl.parameters()]
    cl = cl.to(memory_format=torch.channels_last)
    relaid = sum(p.data_ptr() != b for p, b in zip(cl.parameters(), before, strict=True))

    def infer(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                model(x)
        return run

    tr = timing.interleaved_balanced([infer(plain, ids), infer(cl, ids)], warmup=1, repeat=repeat)
    img = torch.randn(256, 1, 8, 8)  # (N, C, H, W) digits
    cnn = timing.interleaved_balanced([infer(SmallCNN().eval(), img),
                                       infer(SmallCNN().eval().to(memory_format=torch.channels_last),
                                             img.to(memory_format=torch.channels_last))],
                                      warmup=1, repeat=repeat)
    layout_params = sum(p.dim() in (4, 5) for p in plain.parameters())
    return ChannelsLastCheck(layout_params, relaid, tuple(tr), tuple(cnn))


# --- 13: torch.set_num_threads --------------------------------------------------------------


@dataclass(frozen=True)
class ThreadTiming:
    """One step timed at several intra-op thread counts, the counts taking turns."""

    runs: dict[int, Measurement]  # threads -> step times

    def best_other(self, advised: int) -> int:
        """The fastest count other than ``advised`` (median step time)."""
        return min((n for n in self.runs if n != advised), key=lambda n: self.runs[n].median_s)

    def speedup(self, advised: int, other: int) -> stats.Estimate:
        """``other``'s step time over ``advised``'s (> 1: the advised count is faster)."""
        return speedup_estimate(self.runs[other], self.runs[advised])


def time_thread_counts(step: Callable[[], object], counts: Sequence[int], repeat: int = 9) -> ThreadTiming:
    """Time ``step`` at each thread count, interleaved; the caller's setting is restored after.

    Raises:
        TypeError, ValueError: for a ``step`` that is not callable, or counts that are not ints >= 1.
    """
    check_callable("step", step)
    counts = sorted({check_int("counts entries", n, 1) for n in check_items("counts", counts)})
    before = torch.get_num_threads()

    def at(n: int) -> Callable[[], None]:
        def run() -> None:
            torch.set_num_threads(n)
            step()
        return run

    try:
        runs = timing.interleaved_balanced([at(n) for n in counts], warmup=1,
                                           repeat=check_int("repeat", repeat, 1))
    finally:
        torch.set_num_threads(before)
    return ThreadTiming(dict(zip(counts, runs, strict=True)))
