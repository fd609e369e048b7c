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
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from perfkit._checks import check_callable, check_int, check_real, check_type
from perfkit.timing import Measurement, Timer, interleaved, resolve_device

__all__ = ["CompileRecord", "GraphReport", "graph_breaks", "measure_compile"]


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
        """Calls after which compiling has paid for itself (``inf`` if it is not faster)."""
        saved = self.eager.median_s - self.compiled.median_s
        return max(self.compile_s, 0.0) / saved if saved > 0 else math.inf


def measure_compile(eager_fn: Callable[[], object], compiled_fn: Callable[[], object],
                    warmup: int = 2, repeat: int = 10,
                    device: torch.device | str | None = None) -> CompileRecord:
    """Time the first call of ``compiled_fn`` (the compile), then both interleaved.

    Build ``compiled_fn`` from a fresh ``torch.compile`` (dynamo caches compiled code per
    function, so a function compiled earlier in the process costs nothing the second time).

    Args:
        eager_fn: the work without compiling.
        compiled_fn: the same work through a ``torch.compile``-d model or function.
        warmup, repeat: as for :func:`perfkit.timing.interleaved`.
        device: ``None`` means CUDA if present, else CPU.

    Raises:
        TypeError, ValueError: for a function that is not callable, a negative ``warmup``
            or a ``repeat`` below 1, checked before anything is compiled.
    """
    check_callable("eager_fn", eager_fn)
    check_callable("compiled_fn", compiled_fn)
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)
    dev = resolve_device(device)
    from torch._dynamo.utils import counters  # imports dynamo: a second, so after the checks

    eager_fn()  # eager's own first-call costs must not count as compile time
    with Timer(dev) as one:
        eager_fn()
    hits = counters["inductor"]["fxgraph_cache_hit"]
    with Timer(dev) as first:
        compiled_fn()
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits
    eager, compiled = interleaved([eager_fn, compiled_fn], warmup=warmup, repeat=repeat,
                                  device=dev)
    return CompileRecord(first.elapsed_s - one.elapsed_s, eager, compiled, hits)


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
