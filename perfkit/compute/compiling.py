"""What ``torch.compile`` costs and buys: compile time, steady-state speedup, graph breaks.

Follows PyTorch 2's own account of its compiler (Ansel et al., ASPLOS 2024): TorchDynamo
captures Python bytecode into FX graphs, splitting them at a *graph break* wherever it must
fall back to Python, and Inductor generates fused C++/OpenMP (CPU) or Triton (GPU) kernels
for each graph. Compiling is paid once, on the first call; :class:`CompileRecord` turns the
two measurements into the number of calls after which it has paid for itself.

Usage::

    fast = torch.compile(f)                         # compiles on its first call
    rec = measure_compile(lambda: f(x), lambda: fast(x))
    print(rec.speedup, rec.break_even_calls, graph_breaks(f, x).reasons)
    print(rec.break_even_between())                  # (soonest, latest) at the paired ratio's interval ends
    print(cold_compile_cost("my function", rec)[1])  # what an empty cache costs here
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfkit._checks import check_callable, check_int, check_real, check_type
from perfkit._files import write_atomic
from perfkit.estimate import Estimate
from perfkit.hw import default_limits_path, device_name
from perfkit.stats import LEVEL, median_ratio
from perfkit.timing import Measurement, Timer, interleaved, interleaved_balanced, resolve_device

__all__ = ["CompileRecord", "GraphReport", "break_even_elsewhere", "cold_compile_cost", "compiled_elsewhere",
           "graph_breaks", "measure_compile"]


@dataclass(frozen=True)
class CompileRecord:
    """What compiling bought: the first compiled call's cost and the steady-state speed.

    Attributes:
        compile_s: first compiled call minus one eager call, in seconds (tracing,
            lowering, C++/Triton code generation and compilation).
        eager, compiled: steady-state timings, measured interleaved.
        fx_cache_hits: inductor FX-graph cache hits during the first call (a hit reuses
            code compiled by an earlier process, so the compile is much cheaper).
    """

    compile_s: float
    eager: Measurement
    compiled: Measurement
    fx_cache_hits: int = 0

    def __post_init__(self) -> None:
        check_real("compile_s", self.compile_s)  # may be < 0: a cached compile within noise
        check_type("eager", self.eager, Measurement)
        check_type("compiled", self.compiled, Measurement)
        check_int("fx_cache_hits", self.fx_cache_hits, 0)

    @property
    def speedup(self) -> float:
        return self.eager.median_s / self.compiled.median_s

    @property
    def break_even_calls(self) -> float:
        """Calls after which compiling has paid for itself, from the medians' difference:
        ``compile_s / (eager - compiled)``, where :func:`perfkit.viz.plot_break_even`'s two lines
        cross (``inf`` if it is not faster)."""
        saved = self.eager.median_s - self.compiled.median_s
        return max(self.compile_s, 0.0) / saved if saved > 0 else math.inf

    def break_even_between(self, level: float = LEVEL) -> tuple[float, float]:
        """:attr:`break_even_calls` at the ends of the paired ratio's interval: ``(soonest,
        latest)``, ``inf`` at an end where the compiled call may be no faster.

        The eager and compiled calls are timed in pairs (:func:`measure_compile`), so the ends
        come from the paired statistic: ``rho``, eager's time over compiled's round by round
        (:func:`perfkit.stats.median_ratio`, its order-statistic interval at ``level``), gives a
        saving of ``c * (rho - 1)`` per call at the compiled median ``c``, and a break-even of
        ``compile_s / (c * (rho - 1))``: the soonest at the interval's high end, the latest at its
        low end, ``inf`` only where that end is at most 1. Putting the two medians anywhere inside
        their own intervals at once would treat paired rounds as independent and reach "never"
        though the paired interval excludes 1. The point, from the medians' difference, can lie
        outside this range (the ratio of the medians is another statistic than the median of
        the paired ratios): :meth:`break_even_text` says so where it does.

        Raises:
            ValueError: for ``level`` outside (0, 1), or fewer rounds than such an interval
                needs (``min_samples(level)``: 5 at 90 %).
        """
        rho = self.paired_ratio(level)
        if not rho.has_interval:
            raise ValueError(f"break_even_between needs {rho.needs} rounds for a {level:.0%} "
                             f"interval, got {self.eager.n}")
        c = self.compiled.median_s

        def calls(r: float) -> float:
            return max(self.compile_s, 0.0) / (c * (r - 1)) if r > 1 else math.inf

        return calls(rho.high), calls(rho.low)

    def paired_ratio(self, level: float = LEVEL) -> Estimate:
        """Eager's time over compiled's, round by round: the median of the paired ratios with its
        interval (:func:`perfkit.stats.median_ratio`)."""
        check_real("level", level, 0, 1, lo_open=True, hi_open=True)
        return median_ratio(self.eager.times_s, self.compiled.times_s, level=level)

    def break_even_span(self, unit: str = "steps", level: float = LEVEL) -> str:
        """:meth:`break_even_between` in words: ``"1,929 to 4,339 steps"``, ``"1,929 steps to
        never"`` where the interval's low end reaches 1, ``"never"`` where both ends do."""
        soon, late = self.break_even_between(level)
        return (f"{soon:,.0f} to {late:,.0f} {unit}" if math.isfinite(late) else
                f"{soon:,.0f} {unit} to never" if math.isfinite(soon) else "never")

    def break_even_shade(self, unit: str = "steps") -> tuple[float, float, str, str] | None:
        """For a plot: the range :meth:`break_even_between` gives, its legend label naming the
        paired interval's coverage, and a line on whether :attr:`break_even_calls` (the medians'
        difference, dashed) lies inside or outside it; ``None`` where the rounds are too few for
        an interval or even the soonest end never pays off."""
        rho = self.paired_ratio()
        soon, late = self.break_even_between() if rho.has_interval else (math.inf, math.inf)
        if not math.isfinite(soon):
            return None
        where = "inside" if soon <= self.break_even_calls <= late else "outside"
        label = f"break-even at the paired ratio's {rho.label} ends: {self.break_even_span(unit)}"
        return soon, late, label, f"the medians' break-even (dashed) lies {where} the paired range (shaded)"

    def break_even_text(self, unit: str = "steps", level: float = LEVEL) -> str:
        """The break-even from the medians' difference with :meth:`break_even_span` beside it:
        ``"2,338 steps (the medians' difference; 1,929 to 4,339 steps at the ends of the paired
        ratio's 93% interval, at the compiled median)"``, saying so where the point lies outside
        that range; the point alone where the rounds are too few for an interval."""
        be = self.break_even_calls
        point = "never" if math.isinf(be) else f"{be:,.0f} {unit}"
        try:
            soon, late = self.break_even_between(level)
        except ValueError:
            return f"{point} (the medians' difference)"
        out = (f"{point} (the medians' difference; {self.break_even_span(unit, level)} at the ends of the "
               f"paired ratio's {self.paired_ratio(level).label}, at the compiled median")
        if soon <= be <= late:
            return out + ")"
        return out + ": the medians' difference lies outside that range, the ratio of the medians being " \
                     "another statistic than the paired ratios)"


def break_even_elsewhere(rec: CompileRecord, eager_s: float, compiled_s: float, where: str = "this sweep's",
                         own: str = "section 3's") -> str:
    """A sentence on ``rec``'s break-even at another run's medians (``eager_s``, ``compiled_s``, s
    per call): the calls its compile cost needs at that saving, held against ``rec``'s own point
    and, where ``rec`` has the rounds for it, the range :meth:`CompileRecord.break_even_between`
    gives (:meth:`CompileRecord.break_even_span`); a run that saves nothing says that compiling never
    pays off at its medians.

    Raises:
        ValueError: for a time that is not a finite number > 0.
    """
    check_type("rec", rec, CompileRecord)
    check_real("eager_s", eager_s, 0, lo_open=True)
    check_real("compiled_s", compiled_s, 0, lo_open=True)
    saved = eager_s - compiled_s
    if saved <= 0:
        return f" At {where} medians the compiled call saves nothing, so there compiling never pays off."
    n = max(rec.compile_s, 0.0) / saved
    try:
        soon, late = rec.break_even_between()
    except ValueError:  # too few rounds for the range: the point alone
        soon = late = None
    span = "" if soon is None else f" ({rec.break_even_span('calls')} at its paired ratio's interval ends)"
    out = (f" At {where} medians it saves {saved * 1e3:.1f} ms per call, which pays back the "
           f"{rec.compile_s:.1f} s compile after {n:,.0f} calls, against {own} "
           f"{rec.break_even_calls:,.0f} at its medians{span}")
    if soon is None:
        return out + "."
    return out + (": inside that range." if soon <= n <= late else
                  f": outside that range, so {own} break-even holds for its own rounds only.")


def compiled_elsewhere(rec: CompileRecord, eager: Measurement, compiled: Measurement,
                       where: str = "this sweep's", own: str = "section 3's") -> tuple[Estimate, str]:
    """Whether another run of the same two steps (``eager``, ``compiled``: timed in other rounds,
    not in pairs) agrees with ``rec`` that the compiled step is faster, judged on intervals: that
    run's ratio of medians, eager over compiled, with its interval
    (:func:`perfkit.stats.median_ratio`, unpaired), beside ``rec``'s paired ratio. Returns that
    Estimate and a sentence, starting with a space. A run whose interval holds 1x (or that has too
    few timings for one) does not resolve which step is faster and gives no break-even; one that
    resolves it gives the break-even range at its interval's ends (at its compiled median), held
    against ``rec``'s own range (:meth:`CompileRecord.break_even_between`).

    Raises:
        TypeError: for a ``rec`` that is not a CompileRecord or timings that are not Measurements.
    """
    check_type("rec", rec, CompileRecord)
    check_type("eager", eager, Measurement)
    check_type("compiled", compiled, Measurement)
    other = median_ratio(eager.times_s, compiled.times_s, paired=False)
    mine = rec.paired_ratio()
    a, b = mine.clear_of(1.0, "x"), other.clear_of(1.0, "x")
    own_, where_ = own[0].upper() + own[1:], where[0].upper() + where[1:]
    if a != "above":
        return other, (f" {own_} rounds do not put the compiled step clearly ahead ({mine.point('x')}, "
                       f"{mine.describe('x')}), so this notebook cannot say that compiling it pays off.")
    if b == "below":
        return other, (f" {where_} interval lies below 1x and {own} above it: the two runs put the compiled "
                       "step on opposite sides, so whether compiling it pays off is not settled here: "
                       f"{own} break-even holds for its own rounds only.")
    if b != "above":
        why = "interval holds 1x" if other.has_interval else "timings are too few for an interval"
        return other, (f" {own_} paired interval lies above 1x; {where} {why}, so {where} rounds do not "
                       f"resolve which step is faster and give no break-even of their own: {own} break-even "
                       "holds for its own rounds only.")
    c = compiled.median_s

    def calls(r: float) -> float:
        return max(rec.compile_s, 0.0) / (c * (r - 1))

    soon, late = calls(other.high), calls(other.low)
    out = (f" Both intervals lie above 1x. At {where} interval ends (at its compiled median) the "
           f"{rec.compile_s:.1f} s compile pays back after {soon:,.0f} to {late:,.0f} calls")
    try:
        mine_soon, mine_late = rec.break_even_between()
    except ValueError:
        return other, out + "."
    meet = soon <= mine_late and mine_soon <= late
    return other, out + (f", against {own} {rec.break_even_span('calls')}: "
                         + ("the two ranges overlap." if meet else
                            f"the ranges do not overlap, so {own} break-even holds for its own rounds only."))


def measure_compile(eager_fn: Callable[[], object], compiled_fn: Callable[[], object],
                    warmup: int = 2, repeat: int = 10,
                    device: torch.device | str | None = None, balanced: bool = False) -> CompileRecord:
    """Time the first call of ``compiled_fn`` (the compile), then both interleaved.

    Build ``compiled_fn`` from a fresh ``torch.compile`` (dynamo caches compiled code per
    function, so a function compiled earlier in the process costs nothing the second time).

    Args:
        eager_fn: the work without compiling.
        compiled_fn: the same work through a ``torch.compile``-d model or function.
        warmup, repeat: as for :func:`perfkit.timing.interleaved`.
        device: ``None`` means CUDA if present, else CPU.
        balanced: time the two in balanced orders over whole cycles (half the rounds eager
            first, :func:`perfkit.timing.interleaved_balanced`) instead of eager first always.

    Raises:
        TypeError, ValueError: for a function that is not callable, a negative ``warmup``
            or a ``repeat`` below 1, checked before anything is compiled.
    """
    check_callable("eager_fn", eager_fn)
    check_callable("compiled_fn", compiled_fn)
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)
    check_type("balanced", balanced, bool)
    dev = resolve_device(device)
    from torch._dynamo.utils import counters  # imports dynamo: a second, so after the checks

    eager_fn()  # eager's own first-call costs must not count as compile time
    with Timer(dev) as one:
        eager_fn()
    hits = counters["inductor"]["fxgraph_cache_hit"]
    with Timer(dev) as first:
        compiled_fn()
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits
    timed = interleaved_balanced if balanced else interleaved
    eager, compiled = timed([eager_fn, compiled_fn], warmup=warmup, repeat=repeat, device=dev)
    return CompileRecord(first.elapsed_s - one.elapsed_s, eager, compiled, hits)


def cold_compile_cost(name: str, record: CompileRecord,
                      path: str | os.PathLike | None = None) -> tuple[float | None, str]:
    """What an empty inductor cache costs compiling ``name`` on this machine, as measured here.

    A compile without an FX-graph cache hit is a cold one (a fresh machine, or CI): its
    seconds are kept in ``path`` under this machine's name and ``name``. A warm compile (a hit)
    is reported beside the cold one kept earlier, so a reader on a warm machine still learns
    what a fresh one pays. ``TORCHINDUCTOR_CACHE_DIR=$(mktemp -d)`` forces a cold run.

    Args:
        name: what was compiled (a key: ``"GELU chain"``).
        record: the :func:`measure_compile` record of this run.
        path: the JSON file of cold costs (default ``compile_costs.json`` beside the cached
            limits, :func:`perfkit.hw.default_limits_path`).

    Returns:
        ``(cold seconds or None when never measured cold here, sentence)``.

    Raises:
        TypeError, ValueError: for an empty ``name`` or a record that is not a
            :class:`CompileRecord`.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    check_type("record", record, CompileRecord)
    p = Path(path) if path is not None else default_limits_path().with_name("compile_costs.json")
    try:
        costs = json.loads(p.read_text())
    except (OSError, ValueError):  # absent or unreadable: nothing measured cold yet
        costs = {}
    key = f"{device_name()} | {name}"
    if record.fx_cache_hits == 0:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        costs[key] = {"s": max(record.compile_s, 0.0), "measured": when}
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, json.dumps(costs, indent=1))  # whole: another process may read it
        return costs[key]["s"], (f"cold cache (no inductor cache hit): compiling {name} cost "
                                 f"{costs[key]['s']:.1f} s here, what a fresh machine or CI pays")
    stored = costs.get(key)  # {"s", "measured"}; a bare number from before the date was kept
    cold = stored.get("s") if isinstance(stored, dict) else stored
    when = f" on {stored['measured']}" if isinstance(stored, dict) and stored.get("measured") else ""
    source = f"measured by an earlier run{when}, stored in {p.name}"
    hits = f"{record.fx_cache_hits} inductor cache hit{'s' * (record.fx_cache_hits != 1)}"
    warm = (f"warm cache ({hits}): compiling {name} cost "
            f"{max(record.compile_s, 0.0):.1f} s")
    if cold is None:
        return None, (f"{warm}; a cold cache was not measured on this machine yet "
                      "(run with TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) to measure it)")
    slower = record.compile_s > cold  # the cache saves work, not time under a heavier load
    return cold, (f"{warm}; a cold cache cost {cold:.1f} s here ({source})"
                  + (f": this warm compile took {record.compile_s / cold:.1f}x as long, so the machine's "
                     f"load now (load average {os.getloadavg()[0]:.1f}) cost more than the cache saved"
                     if slower else ""))


@dataclass(frozen=True)
class GraphReport:
    """What ``torch._dynamo.explain`` found: graphs captured, breaks, and why."""

    graphs: int
    breaks: int
    reasons: list[str] = field(default_factory=list)


def graph_breaks(fn: Callable[..., object], *args: Any, **kwargs: Any) -> GraphReport:
    """Trace ``fn(*args, **kwargs)`` with dynamo (no code generation) and report its breaks.

    Each break splits the program into separately compiled graphs with Python in between,
    which stops fusion across the break and adds guard checks. Resets dynamo's caches.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    log = logging.getLogger("torch._dynamo")
    level = log.level
    log.setLevel(logging.ERROR)  # the report carries each break's reason; skip the warnings
    try:
        torch._dynamo.reset()
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        log.setLevel(level)
        torch._dynamo.reset()
    reasons = [r.reason.strip().splitlines()[0] for r in out.break_reasons]
    return GraphReport(out.graph_count, out.graph_break_count, reasons)
