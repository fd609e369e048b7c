"""``torch.compile`` for one vector ISA: the fused codecs' compile step, safe in a shared cache.

Inductor picks the CPU vector ISA per process (from ``$ATEN_CPU_CAPABILITY``, else the best
the CPU has), but its on-disk graph cache does not key on that choice. A graph generated for
AVX2 (loops stepping by 8 floats) and loaded by a process that builds it for AVX-512 writes
past its buffers: the heap is corrupted ("free(): invalid next size"), or QSGD's codes come
back 7.0 off instead of 0.04, silently. Naming the width in ``cpp.simdlen``, which is part of
the cache key, gives each ISA its own entries; the width named is the one Inductor would
pick anyway. (:mod:`perfkit.imitate` also gives an imitated CPU a cache of its own.)

The first call compiles: tens of seconds on a 2-core CPU with an empty Inductor cache, well
under one when a later process loads the graph from disk. It is logged at INFO by
``perfkit.compress`` with the seconds it took, so a user of the fused default can see it.

Usage::

    run = compile_for_isa(lambda x, out: out.copy_(x * 2 + 1))
    run(x, out)                                  # compiles here, once per process
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from perfkit._checks import check_callable

__all__ = ["compile_for_isa", "isa_options"]

_log = logging.getLogger("perfkit.compress")


def isa_options() -> dict[str, int]:
    """Inductor options that pin the CPU vector width this process generates code for.

    Returns:
        ``{"cpp.simdlen": bits}`` for the ISA Inductor picks here (scalar code, 0 bits,
        becomes 1: no ISA has that width, so the code stays scalar), or ``{}`` when the
        user has set ``torch._inductor.config.cpp.simdlen`` (then it is in the key already).
    """
    # imports Inductor: only once a fused call runs
    from torch._inductor import config as inductor_config
    from torch._inductor import cpu_vec_isa

    if inductor_config.cpp.simdlen is not None:
        return {}
    return {"cpp.simdlen": cpu_vec_isa.pick_vec_isa().bit_width() or 1}


def compile_for_isa(fn: Callable) -> Callable:
    """``torch.compile(fn, dynamic=True, fullgraph=True)`` for this process's vector ISA,
    built on the first call: one graph for every size.

    Args:
        fn: the function to compile (a fused kernel's one expression).

    Returns:
        A callable with ``fn``'s arguments; its first call compiles and logs how long it took.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    check_callable("fn", fn)
    cache: list[Callable] = []

    def run(*args):
        if cache:
            return cache[0](*args)
        options = isa_options()
        _log.info("perfkit.compress: compiling %s for %s (first call in this process; "
                  "fused=False or PERFKIT_FUSED=0 skips it)", fn.__name__, options)
        start = time.perf_counter()
        compiled = torch.compile(fn, dynamic=True, fullgraph=True, options=options)
        out = compiled(*args)
        _log.info("perfkit.compress: %s compiled and ran in %.1f s", fn.__name__,
                  time.perf_counter() - start)
        cache.append(compiled)
        return out
    return run
