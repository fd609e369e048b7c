"""Per-phase step timing for a training loop; the monitor returns records, sinks get windows.

``StepMonitor`` times named phases (data, forward, backward, optimizer, communication, or
any name you choose) inside every step and summarises them as mean/std/p50/p95/p99 and
each phase's share of the step, plus samples/s and tokens/s. It follows torchtitan's
metrics split: the monitor measures and returns a plain record; printing and plotting
(:mod:`perfkit.viz.profiling`) consume it.

On the CPU a phase is two ``time.perf_counter`` reads. On CUDA it is two
``torch.cuda.Event`` records on the current stream, resolved lazily: the hot path never
synchronises, events are read once they have completed (``Event.query``) or when
:meth:`StepMonitor.summary` is called. CUDA phase times are therefore intervals of the
*GPU stream's* timeline; a phase with no GPU work (waiting for the DataLoader) shows up as
the time the stream sat between its two events, which is the GPU idle time it caused.
On CUDA each phase is also an NVTX range named after it, so Nsight Systems shows the phases.

Sinks (:mod:`perfkit.profiling.sinks`: TensorBoard, JSON lines, Prometheus) receive the
summary of every ``every`` steps, computed once per window, never per phase.

Usage::

    mon = StepMonitor(warmup=2)
    for x, y in loader:
        with mon.phase("forward"):
            loss = model(x).sum()
        ...
        mon.step(samples=len(x))
    print(mon.summary().shares())
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from perfkit import stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.profiling.memory_monitor import MemoryMonitor, MemoryRecord
from perfkit.timing import resolve_device

__all__ = ["PHASES", "PhaseStats", "StepMonitor", "StepSummary", "StepWindow"]

PHASES = ("data", "forward", "backward", "optimizer", "communication")
_RESERVED = ("step", "other")  # names the summary uses for the whole step and the rest


@dataclass(frozen=True)
class PhaseStats:
    """Seconds one phase took per step (0 in steps where it did not run).

    ``share`` is the phase's mean over the mean step time. ``median_share`` is the median,
    over the steps, of the phase's time over that step's time (``None`` where the steps'
    times were not given): one stalled step moves a mean, and with it every phase's
    ``share``, but not this. ``parent`` names the phase it was nested in (``None`` at top
    level); nested time is also inside the parent's time.
    """

    name: str
    mean_s: float
    std_s: float
    p50_s: float
    p95_s: float
    p99_s: float
    share: float
    parent: str | None = None
    median_share: float | None = None

    @classmethod
    def of(cls, name: str, times: list[float], step_mean_s: float,
           parent: str | None = None, step_times: list[float] | None = None) -> PhaseStats:
        """The statistics of one phase's per-step ``times`` (s); quantiles are
        :func:`perfkit.stats.quantile`'s (linear interpolation). ``step_times`` (s, the same
        steps in the same order) give ``median_share``.

        Raises:
            TypeError, ValueError: for empty ``times``, a time that is not a finite number
                >= 0, a bad ``step_mean_s``, or ``step_times`` of another length.
        """
        check_real("step_mean_s", step_mean_s, 0)
        xs = [check_real("times_s entries", t, 0) for t in check_items("times_s", times)]
        # float sums: statistics.stdev's exact fractions cost ~1 ms per 50 times, paid per
        # phase in every window a sink receives
        n, mean = len(xs), math.fsum(xs) / len(xs)
        std = math.sqrt(math.fsum((t - mean) ** 2 for t in xs) / (n - 1)) if n > 1 else 0.0
        share = mean / step_mean_s if step_mean_s > 0 else 0.0
        per_step = None
        if step_times is not None:
            if len(step_times) != n:
                raise ValueError(f"step_times must hold one time per step ({n}), got {len(step_times)}")
            per_step = stats.median([min(1.0, t / s) if s > 0 else 0.0  # a phase within its step: <= 1
                                     for t, s in zip(xs, step_times, strict=True)])
        return cls(name, mean, std, stats.median(xs), stats.quantile(xs, 0.95),
                   stats.quantile(xs, 0.99), share, parent, per_step)


@dataclass(frozen=True)
class StepSummary:
    """What :meth:`StepMonitor.summary` returns: plain data, safe to pickle or JSON-dump.

    ``phases`` holds every phase in first-seen order and, last, ``other``: step time
    outside all top-level phases (Python overhead, logging, untimed work).
    """

    steps: int
    step: PhaseStats
    phases: dict[str, PhaseStats]
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> PhaseStats:
        """The stats of phase ``name``; ``"step"`` gives the whole step.

        Raises:
            KeyError: naming the phases this summary knows.
        """
        if name == "step":
            return self.step
        if name not in self.phases:
            raise KeyError(f"unknown phase {name!r}; this summary has "
                           f"{['step', *self.phases]}")
        return self.phases[name]

    def share(self, name: str) -> float:
        """Share of the mean step spent in ``name`` (0.25 = 25 %); see :meth:`__getitem__`."""
        return self[name].share

    def shares(self, top_level: bool = True) -> dict[str, float]:
        """Phase -> share of the step; with ``top_level`` they (and ``other``) sum to 1."""
        return {k: p.share for k, p in self.phases.items()
                if not (top_level and p.parent is not None)}

    def median_shares(self, top_level: bool = True) -> dict[str, float]:
        """Phase -> its median share over the steps (:attr:`PhaseStats.median_share`; the
        share of the means where the steps' times were not kept). Unlike :meth:`shares`, one
        stalled step does not move them, and they need not sum to 1."""
        return {k: p.share if p.median_share is None else p.median_share for k, p in self.phases.items()
                if not (top_level and p.parent is not None)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of everything in the record."""
        return {"steps": self.steps, "device": self.device, "step": dict(vars(self.step)),
                "phases": {k: dict(vars(v)) for k, v in self.phases.items()},
                "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s,
                **self.extra}


@dataclass(frozen=True)
class StepWindow:
    """What a sink receives: the summary of ``every`` consecutive steps, once per window.

    ``step`` counts the steps recorded when the window closed, warm-up included (the
    training step to plot against); ``step_times_s`` are the window's steps, in order.
    """

    step: int
    summary: StepSummary
    step_times_s: tuple[float, ...]
    memory: MemoryRecord | None = None


class _Phase:
    """Context manager for one phase name; reused, since a name cannot be open twice."""

    __slots__ = ("mon", "name", "start", "parent", "_rf")

    def __init__(self, mon: StepMonitor, name: str) -> None:
        self.mon, self.name, self.start, self.parent = mon, name, None, None
        self._rf: Any = None

    def __enter__(self) -> _Phase:
        mon = self.mon
        if self.start is not None:
            raise ValueError(f"phase {self.name!r} is already open; nested phases need "
                             "distinct names")
        self.parent = mon._open[-1].name if mon._open else None
        mon._open.append(self)
        if mon._nvtx:  # a range per phase for Nsight Systems; host-side, no synchronisation
            torch.cuda.nvtx.range_push(self.name)
        if mon._annotate:
            self._rf = torch.profiler.record_function(f"phase:{self.name}")
            self._rf.__enter__()
        if mon._step_start is None:
            mon._step_start = mon._mark()
        self.start = mon._mark()
        return self

    def __exit__(self, *exc: object) -> None:
        mon = self.mon
        if self not in mon._open:
            raise RuntimeError(f"phase {self.name!r} closed but it is not open")
        if mon._open[-1] is not self:  # recording it would pop (and end) the inner phase
            raise RuntimeError(f"phase {self.name!r} closed while phase {mon._open[-1].name!r}, "
                               "opened inside it, is still open: close phases in the reverse "
                               "order of opening (nested `with` blocks do)")
        mon._current.append((self.name, self.parent, self.start, mon._mark()))
        if mon._annotate:
            self._rf.__exit__(*exc)
        if mon._nvtx:
            torch.cuda.nvtx.range_pop()
        mon._open.pop()
        self.start = None


class StepMonitor:
    """Times the phases of each training step; :meth:`summary` returns a :class:`StepSummary`.

    Args:
        device: where the step runs; CUDA uses events (no synchronisation in the loop),
            the CPU uses ``perf_counter``. ``None``: CUDA if present, else CPU.
        warmup: leading steps left out of the summary (compilation, allocator growth, the
            DataLoader's first batches).
        phases: if given, the only phase names allowed (a typo then raises instead of
            silently creating a new phase). By default any name is allowed.
        annotate: also open ``torch.profiler.record_function("phase:NAME")`` around each
            phase, so a profiler trace of the same run carries the phases
            (:func:`perfkit.profiling.trace_breakdown` reads them). Costs a few µs a phase.
        sinks: objects with ``write(window)`` and ``close()`` (see
            :mod:`perfkit.profiling.sinks`); each gets a :class:`StepWindow` for every
            ``every`` steps after the warm-up; :meth:`close` writes the rest and closes them.
        every: steps per window written to the sinks.
        memory: a :class:`~perfkit.profiling.MemoryMonitor` (entered by you) whose record
            goes with each window (on CUDA reading it synchronises, once per window).

    Behaviour worth knowing: a phase run several times in one step is summed; a step's
    time runs from the previous :meth:`step` call (the first phase for the first step)
    to this one; nested phases must have distinct names and close in the reverse order of
    opening (closing an outer phase first raises ``RuntimeError`` naming both).

    It times a loop you write (you name the phases; CUDA events, sinks, every step). A script
    you cannot change is timed by :class:`~perfkit.profiling.StepRecorder` instead, which
    finds the steps from optimizer hooks and the phases from a profiled window: the two
    share no code because they share no mechanism.
    """

    def __init__(self, device: torch.device | str | None = None, warmup: int = 0,
                 phases: tuple[str, ...] | None = None, annotate: bool = False,
                 sinks: Sequence[Any] | None = None, every: int = 50,
                 memory: MemoryMonitor | None = None) -> None:
        self.warmup = check_int("warmup", warmup, 0)
        self.every = check_int("every", every, 1)
        self._sinks = [] if sinks is None else check_items("sinks", sinks, nonempty=False)
        for i, sink in enumerate(self._sinks):
            if not callable(getattr(sink, "write", None)):
                raise TypeError(f"sinks[{i}] must have a write(window) method, "
                                f"got {type(sink).__name__}")
        self._memory = check_type("memory", memory, MemoryMonitor, optional=True)
        self.device = resolve_device(device)
        self._allowed = None if phases is None else tuple(  # a str would allow its letters
            self._check_name(p) for p in check_items("phases", phases))
        self._annotate = annotate
        self._cuda = self.device.type == "cuda"
        self._nvtx = self._cuda
        self._mark: Callable[[], Any] = self._cuda_mark if self._cuda else time.perf_counter
        self._ctx: dict[str, _Phase] = {}
        self.reset()

    def _cuda_mark(self) -> torch.cuda.Event:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self.device))
        return ev

    @staticmethod
    def _check_name(name: object) -> str:
        if not isinstance(name, str) or not name:
            raise TypeError(f"phase name must be a non-empty str, got {name!r}")
        if name in _RESERVED:
            raise ValueError(f"phase name {name!r} is reserved (reserved: {_RESERVED})")
        return name

    def reset(self) -> None:
        """Forget every recorded step.

        Raises:
            RuntimeError: if a phase is open.
        """
        if getattr(self, "_open", None):
            raise RuntimeError(f"cannot reset while phase {self._open[-1].name!r} is open")
        self._open: list[_Phase] = []
        self._current: list[tuple[str, str | None, Any, Any]] = []
        self._step_start: Any = None
        # (start mark, end mark, [(name, parent, start, end)], samples, tokens)
        self._pending: deque[tuple[Any, Any, list, int, int]] = deque()
        self._done: list[tuple[float, dict[str, float], dict[str, str | None], int, int]] = []
        self._written = self.warmup  # steps in _done already written to the sinks

    def phase(self, name: str) -> _Phase:
        """Context manager timing ``name`` inside the current step.

        Raises:
            TypeError: if ``name`` is not a non-empty string.
            ValueError: for a reserved name (``step``, ``other``), a name outside
                ``phases`` when they were given, or (on entry) a phase nested in itself.
            RuntimeError: (on exit) if a phase opened inside this one is still open, or this
                one is not open.
        """
        ctx = self._ctx.get(name) if isinstance(name, str) else None  # a list is unhashable
        if ctx is None:  # first use of this name: validate once, then reuse the object
            self._check_name(name)
            if self._allowed is not None and name not in self._allowed:
                raise ValueError(f"unknown phase {name!r}; allowed phases: {self._allowed}")
            ctx = self._ctx[name] = _Phase(self, name)
        return ctx

    def step(self, samples: int = 0, tokens: int = 0) -> None:
        """End the current step; ``samples``/``tokens`` it processed feed the throughput.

        Raises:
            RuntimeError: if a phase is still open.
            TypeError, ValueError: if ``samples`` or ``tokens`` is not an int >= 0.
        """
        check_int("samples", samples, 0)
        check_int("tokens", tokens, 0)
        if self._open:
            raise RuntimeError(f"step() called while phase {self._open[-1].name!r} is open")
        end = self._mark()
        start = self._step_start if self._step_start is not None else end
        self._pending.append((start, end, self._current, samples, tokens))
        self._current, self._step_start = [], end
        if self._cuda or self._sinks:  # read finished steps now so that pending events stay few
            self._resolve(block=False)
        if self._sinks:
            self._write()

    def _elapsed(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1e3 if self._cuda else b - a

    def _resolve(self, block: bool) -> None:
        """Turn pending marks into seconds; without ``block`` only steps already finished."""
        while self._pending:
            start, end, marks, samples, tokens = self._pending[0]
            if not block and self._cuda and not end.query():
                return  # the GPU has not reached this step's end yet; read it later
            if block and self._cuda:
                end.synchronize()
            times: dict[str, float] = {}
            parents: dict[str, str | None] = {}
            for name, parent, a, b in marks:
                times[name] = times.get(name, 0.0) + self._elapsed(a, b)
                parents.setdefault(name, parent)
            self._done.append((self._elapsed(start, end), times, parents, samples, tokens))
            self._pending.popleft()

    @property
    def steps(self) -> int:
        """Steps recorded so far, warm-up included."""
        return len(self._done) + len(self._pending)

    def summary(self) -> StepSummary:
        """Statistics over the steps after ``warmup``; synchronises on CUDA.

        Raises:
            RuntimeError: before any step past the warm-up has ended (no data yet).
        """
        self._resolve(block=True)
        done = self._done[self.warmup:]
        if not done:
            raise RuntimeError(f"summary() needs at least one completed step after "
                               f"warmup={self.warmup}; {len(self._done)} recorded. Call "
                               "step() at the end of every training step.")
        return self._summarize(done)

    def _write(self, partial: bool = False) -> None:
        """Write each full window of resolved steps to the sinks (with ``partial``, the rest).

        The window's summary is computed here, once per ``every`` steps: the phases
        themselves only append marks.
        """
        while len(self._done) - self._written >= (1 if partial else self.every):
            end = min(self._written + self.every, len(self._done))
            done = self._done[self._written:end]
            self._written = end
            window = StepWindow(end, self._summarize(done), tuple(d[0] for d in done),
                                None if self._memory is None else self._memory.record())
            for sink in self._sinks:
                sink.write(window)

    def close(self) -> None:
        """Write the steps of the last, partial window to the sinks, then close them."""
        self._resolve(block=True)
        try:
            self._write(partial=True)
        finally:
            for sink in self._sinks:
                sink.close()

    def _summarize(self, done: list) -> StepSummary:
        step_times = [d[0] for d in done]
        step_mean = sum(step_times) / len(step_times)
        names: dict[str, str | None] = {}
        for _, _, parents, _, _ in done:
            for n, p in parents.items():
                names.setdefault(n, p)
        names = {n: names[n] for n in self._ctx if n in names}  # order of first use
        phases = {n: PhaseStats.of(n, [d[1].get(n, 0.0) for d in done], step_mean, p, step_times)
                  for n, p in names.items()}
        other = [max(0.0, s - sum(t for n, t in times.items() if parents[n] is None))
                 for s, times, parents, _, _ in done]
        phases["other"] = PhaseStats.of("other", other, step_mean, step_times=step_times)
        total_s = sum(step_times)
        samples, tokens = sum(d[3] for d in done), sum(d[4] for d in done)
        return StepSummary(
            steps=len(done), step=PhaseStats.of("step", step_times, step_mean),
            phases=phases, samples_per_s=samples / total_s if samples and total_s else None,
            tokens_per_s=tokens / total_s if tokens and total_s else None,
            device=str(self.device))
