"""Record an unchanged training script: steps from optimizer hooks, a profiled window.

:class:`StepRecorder` is what ``python -m perfkit diagnose`` installs before it runs a
script. It needs no change to the script: a step ends when an optimizer step ends
(``optim_hooks.register_optimizer_step_post_hook``, which every ``torch.optim``
optimizer calls, also under Hugging Face ``Trainer`` and DDP; a wrapping optimizer's nested
call counts once), or when a named ``--step-marker`` function returns. A training step that
calls ``step()`` several times in a row counts as several: DeepSpeed's ZeRO stages 1 and 2
step the wrapped optimizer once per parameter group, ZeRO-3 once per sub-group, and a loop
with several optimizers steps each; such scripts need ``--step-marker`` naming a module-level
function that runs once per training step. Data wait is the time the script's thread spends
in DataLoader iterators' ``__next__`` (one iterated by another thread, as a prefetcher's,
is marked in the trace as loading off the main thread). After ``skip`` steps it starts
``torch.profiler`` for ``steps`` steps and writes ``phase:`` and ``ProfilerStep#`` markers
into the trace, so that :func:`perfkit.profiling.attribute_trace` splits the window into
data / sync / communication / optimizer / backward / forward / other. When the window ends it takes the
peak memory and counts the model states held by the optimizers that stepped in it
(:func:`perfkit.profiling.memory_split`), and what the machine's load cost the window
(:mod:`perfkit.profiling.machine_load`: the main thread's waits for a core).

Outside the window each step costs two ``perf_counter`` calls and a list append (the
overhead ``benchmarks/diagnose.py`` measures); the forward hooks, the backward wrapper
and the profiler exist only inside the window.

Usage::

    rec = StepRecorder(skip=3, steps=10, out_dir="build/diagnose")
    with rec:
        train()                      # any loop that calls optimizer.step()
    print(rec.step_times_s, rec.trace_path)
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.optim.optimizer as optim_hooks
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity

from perfkit._checks import check_int, check_type
from perfkit.profiling.footprint import memory_in_use, memory_split
from perfkit.profiling.machine_load import CpuSnapshot, LoadRecord, cpu_snapshot, load_between
from perfkit.profiling.profiler import PHASE_PREFIX, quiet_kineto

__all__ = ["StepRecorder", "WindowDone"]


class WindowDone(BaseException):
    """Raised at the end of the recorded window to stop the script (``then="stop"``).

    A ``BaseException`` so that a script's ``except Exception`` does not swallow it.
    """


def _batch_size(batch: Any) -> int | None:
    """Leading dimension of the first tensor in a batch (tensor, sequence or mapping)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    items = batch.values() if isinstance(batch, dict) else batch
    if isinstance(items, list | tuple) or isinstance(batch, dict):
        for x in items:
            n = _batch_size(x)
            if n is not None:
                return n
    return None


def _window_flops(prof: torch.profiler.profile) -> float:
    """FLOPs the profiler counted from the operators' shapes (``with_flops``), summed over
    its raw events: ``key_averages()`` gives the same sum but first builds a Python event
    tree, seconds for a window with thousands of small operators."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:  # not the Kineto profiler: the slow, public way
        return float(sum(k.flops for k in prof.key_averages()))
    return float(sum(e.flops() for e in results.events()))


def _add_loading(path: Path, spans: list[tuple[int, float, float]], step: str,
                 opened_s: float) -> None:
    """Write data loading done on other threads into the trace as ``phase:data`` ranges on
    those threads: the profiler records only the threads that ran when it started (not a
    prefetcher's). ``spans`` are (native thread id, start, end) in ``perf_counter`` s;
    ``step`` is the first step's marker, opened at ``opened_s``: it sets the clock offset."""
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    first = next(e for e in events if e.get("name") == step and e.get("ph") == "X")
    offset_us = first["ts"] - opened_s * 1e6
    events += [{"ph": "X", "cat": "user_annotation", "name": PHASE_PREFIX + "data",
                "pid": first.get("pid"), "tid": tid, "ts": a * 1e6 + offset_us,
                "dur": (b - a) * 1e6} for tid, a, b in spans]
    path.write_text(json.dumps(trace))


class _Span:
    """A ``record_function`` opened in one hook and closed in another (same thread)."""

    def __init__(self) -> None:
        self._rf: record_function | None = None

    def open(self, name: str) -> None:
        self.close()
        self._rf = record_function(name)
        self._rf.__enter__()

    def close(self) -> None:
        if self._rf is not None:
            rf, self._rf = self._rf, None
            rf.__exit__(None, None, None)


class StepRecorder:
    """Hooks that find a script's steps and profile ``steps`` of them after ``skip``.

    For a script you cannot change. A loop you write yourself is timed by
    :class:`~perfkit.profiling.StepMonitor` instead (phases you name, CUDA events, sinks):
    the two share no code because they share no mechanism (global hooks and a profiler
    window here, explicit ``with mon.phase(...)`` blocks there).

    Args:
        skip: warm-up steps left out of the window (compilation, allocator warm-up).
        steps: steps recorded by the profiler (the window), at least 1.
        out_dir: where the Chrome trace ``trace.rank<R>.json`` is written.
        then: ``"stop"`` raises :class:`WindowDone` when the window ends, ``"continue"``
            lets the script run on (unprofiled).
        step_marker: ``"module:function"`` whose return ends a step, for scripts that do
            not call a ``torch.optim`` optimizer; ``None`` uses optimizer steps.
        rank: this process's rank (names the trace file).
        on_window_end: called once with the recorder when the window is complete.

    Raises:
        TypeError, ValueError: for arguments of the wrong type or out of range, or a
            ``step_marker`` that is not ``module:function`` naming a function.
    """

    def __init__(self, skip: int = 3, steps: int = 10, out_dir: str | os.PathLike = "build/diagnose",
                 then: str = "stop", step_marker: str | None = None, rank: int = 0,
                 on_window_end: Callable[[StepRecorder], None] | None = None) -> None:
        self.skip = check_int("skip", skip, 0)
        self.steps = check_int("steps", steps, 1)
        self.out_dir = Path(check_type("out_dir", out_dir, (str, os.PathLike)))
        if then not in ("stop", "continue"):
            raise ValueError(f"then must be 'stop' or 'continue', got {then!r}")
        self.then = then
        self.step_marker = check_type("step_marker", step_marker, str, optional=True)
        if step_marker is not None and step_marker.count(":") != 1:
            raise ValueError(f"step_marker must be 'module:function', got {step_marker!r}")
        self.rank = check_int("rank", rank, 0)
        self.on_window_end = on_window_end
        self.trace_path = self.out_dir / f"trace.rank{rank}.json"
        self.start_s = time.perf_counter()
        self.step_ends_s: list[float] = []  # perf_counter at the end of every step
        # profiler start and trace export are not the script's time: the first window
        # step starts once the profiler runs, the step after it once the trace is written
        self._restart_s: dict[int, float] = {}
        self.data_s: list[float] = [0.0]  # data wait per step (the last entry is open)
        self.optimizer_s: list[float] = [0.0]
        self.batch_size: int | None = None
        self.flops_per_step: float | None = None
        self.window_done = False  # the whole window was recorded
        self.trace_ok = False  # a trace was written (of a window perhaps cut short)
        self.error: str | None = None
        self.start_memory: dict[str, int] | None = None  # in use when the script started
        # peak memory and the model states of the optimizers stepped in the window
        # (footprint.memory_split), taken when the window ends, before the trace export
        self.memory: dict[str, Any] | None = None
        self.load: LoadRecord | None = None  # the window's, where /proc can tell
        self._cpu0: CpuSnapshot | None = None
        self._optimizers: dict[int, Any] = {}  # id -> optimizer, inside the window only
        self._lock = threading.Lock()
        self._opt_depth = 0
        self._opt_t0 = 0.0
        self._prof: torch.profiler.profile | None = None
        self._undo: list[Callable[[], None]] = []
        self._step_span, self._opt_span = _Span(), _Span()
        self._fwd_span, self._fwd_depth = _Span(), 0
        self._offload: list[tuple[int, float, float]] = []  # (thread, start, end) in the window
        self._anchor = ("", 0.0)  # the window's first step marker and when it opened

    # --- installing and removing the hooks ----------------------------------------------

    def __enter__(self) -> StepRecorder:
        self._thread = threading.get_ident()  # the script's loop runs on this thread
        self.start_memory = memory_in_use()
        self.start_s = time.perf_counter()
        if self.step_marker is None:
            pre = optim_hooks.register_optimizer_step_pre_hook(self._opt_pre)
            post = optim_hooks.register_optimizer_step_post_hook(self._opt_post)
            self._undo += [pre.remove, post.remove]
        else:
            self._wrap_marker(self.step_marker)
        self._wrap_dataloader()
        if self.skip == 0:
            self._start_window()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        """Stop the profiler if it still runs (a window cut short) and remove every hook."""
        if self._prof is not None and not self.window_done:
            self._stop_window(complete=False)
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _wrap_marker(self, marker: str) -> None:
        mod_name, fn_name = marker.split(":")
        mod = importlib.import_module(mod_name)
        fn = getattr(mod, fn_name, None)
        if not callable(fn):
            raise ValueError(f"step_marker {marker!r}: {mod_name} has no function {fn_name!r}")

        def marked(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self._end_step()

        setattr(mod, fn_name, marked)
        self._undo.append(lambda: setattr(mod, fn_name, fn))

    def _wrap_dataloader(self) -> None:
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        orig = _BaseDataLoaderIter.__next__
        rec = self

        def timed_next(it: Any) -> Any:
            t0 = time.perf_counter()
            span = record_function(PHASE_PREFIX + "data") if rec._prof is not None else None
            if span is not None:
                span.__enter__()
            try:
                batch = orig(it)
            finally:
                if span is not None:
                    span.__exit__(None, None, None)
                t1 = time.perf_counter()
                if threading.get_ident() == rec._thread:
                    rec.data_s[-1] += t1 - t0
                elif span is not None:  # a prefetch thread's: loading, not the step's wait
                    rec._offload.append((threading.get_native_id(), t0, t1))
            if rec.batch_size is None:
                rec.batch_size = _batch_size(batch)
            return batch

        _BaseDataLoaderIter.__next__ = timed_next
        self._undo.append(lambda: setattr(_BaseDataLoaderIter, "__next__", orig))

    # --- step boundaries ----------------------------------------------------------------

    def _opt_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._opt_depth += 1  # optimizers that wrap another one (accelerate) nest
        if self._prof is not None:  # every depth: the inner optimizer holds the tensors
            self._optimizers[id(opt)] = opt
        if self._opt_depth == 1:
            self._opt_t0 = time.perf_counter()
            if self._prof is not None:
                self._opt_span.open(PHASE_PREFIX + "optimizer")

    def _opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._opt_depth = max(0, self._opt_depth - 1)
        if self._opt_depth == 0:
            self._opt_span.close()
            self.optimizer_s[-1] += time.perf_counter() - self._opt_t0
            self._end_step()

    def _end_step(self) -> None:
        with self._lock:
            self.step_ends_s.append(time.perf_counter())
            self.data_s.append(0.0)
            self.optimizer_s.append(0.0)
            n = len(self.step_ends_s)
        if self._prof is not None and n >= self.skip + self.steps:
            self._stop_window(complete=True)
            if self.then == "stop":
                raise WindowDone()
        elif self._prof is not None:
            self._step_span.open(f"ProfilerStep#{n + 1}")
        elif n == self.skip and not self.window_done:
            self._start_window()

    # --- the profiled window ------------------------------------------------------------

    def _start_window(self) -> None:
        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        # with_flops counts matmul/conv FLOPs from the shapes (MFU); no stacks: they
        # multiply the trace's size and the window's overhead.
        quiet_kineto()  # before the profiler starts: Kineto reads its log level once
        self._prof = torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True)
        self._prof.__enter__()
        pre = torch.nn.modules.module.register_module_forward_pre_hook(self._fwd_pre)
        post = torch.nn.modules.module.register_module_forward_hook(self._fwd_post,
                                                                    always_call=True)
        orig_backward = torch.autograd.backward

        def backward(*args: Any, **kwargs: Any) -> Any:
            with record_function(PHASE_PREFIX + "backward"):
                return orig_backward(*args, **kwargs)

        torch.autograd.backward = backward
        self._window_undo = [pre.remove, post.remove,
                             lambda: setattr(torch.autograd, "backward", orig_backward)]
        self._restart_s[len(self.step_ends_s)] = time.perf_counter()
        self._cpu0 = cpu_snapshot()
        self._offload = []
        self._anchor = (f"ProfilerStep#{len(self.step_ends_s) + 1}", time.perf_counter())
        self._step_span.open(self._anchor[0])

    def _fwd_pre(self, module: Any, args: Any) -> None:
        self._fwd_depth += 1  # only the outermost module call is the forward phase
        if self._fwd_depth == 1:
            self._fwd_span.open(PHASE_PREFIX + "forward")

    def _fwd_post(self, module: Any, args: Any, output: Any) -> None:
        self._fwd_depth = max(0, self._fwd_depth - 1)
        if self._fwd_depth == 0:
            self._fwd_span.close()

    def _stop_window(self, complete: bool) -> None:
        cpu1 = cpu_snapshot()
        if self._cpu0 is not None and cpu1 is not None and cpu1.main == self._cpu0.main:
            self.load = load_between(self._cpu0, cpu1)
        prof, self._prof = self._prof, None
        for undo in self._window_undo:
            undo()
        self._fwd_span.close()
        self._opt_span.close()
        self._step_span.close()
        assert prof is not None
        try:  # the optimizer has just stepped: gradients and its state are alive
            self.memory = memory_split(list(self._optimizers.values()), self.start_memory)
        except Exception as e:  # an exotic optimizer must not cost the report
            self.error = f"the model states could not be counted: {e}"
        self._optimizers.clear()
        try:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            prof.__exit__(None, None, None)
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(self.trace_path))
            if self._offload:
                _add_loading(self.trace_path, self._offload, *self._anchor)
            flops = _window_flops(prof)
            n = max(1, min(self.steps, len(self.step_ends_s) - self.skip))
            self.flops_per_step = flops / n if flops > 0 else None
            self.trace_ok = True
        except Exception as e:  # a broken trace must not hide the step times
            self.error = f"the profiler trace could not be written: {e}"
        self.window_done = complete
        self._restart_s[len(self.step_ends_s)] = time.perf_counter()
        if complete and self.on_window_end is not None:
            self.on_window_end(self)

    # --- what was recorded --------------------------------------------------------------

    @property
    def step_times_s(self) -> list[float]:
        """Seconds of every finished step, the first measured from the recorder's start
        (profiler start-up and trace export left out)."""
        ends = [self.start_s, *self.step_ends_s]
        return [b - self._restart_s.get(i, a) for i, (a, b) in enumerate(zip(ends, ends[1:],
                                                                             strict=False))]

    def window(self) -> slice:
        """The steps recorded by the profiler (indices into :attr:`step_times_s`)."""
        return slice(self.skip, self.skip + self.steps)
