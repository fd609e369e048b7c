"""Peak memory of a diagnosed script, and the part of it the model states take.

``perfkit diagnose`` cannot see the script's variables, but every ``torch.optim``
optimizer that steps passes through the global step hooks, and an optimizer holds the
parameters (``param_groups``), reaches their gradients (``p.grad``) and keeps its own state
(``state``: Adam's two moments, SGD's momentum). :func:`memory_split` counts those tensors'
storages with :func:`perfkit.memory.live_model_states` (a storage once, in the first
category that holds it) and puts them beside the peak: the CUDA allocator's peak on a GPU,
the process's resident-set high-water mark on a CPU (which also holds Python, torch's
libraries and everything the script allocated, hence ``start_bytes``: what was resident
before the script ran).

Usage::

    start = memory_in_use()
    ...                                   # training steps
    record = memory_split([optimizer], start=start)
    record["params_bytes"], record["bytes"]
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import psutil
import torch

from perfkit._checks import check_int, check_items, check_type
from perfkit.memory import live_model_states

__all__ = ["memory_split"]


def _on_cuda() -> bool:
    """Whether this process uses CUDA: a CPU script on a GPU machine is judged by its RSS,
    and asking the allocator before the script chose its device would create a context."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def memory_in_use() -> dict[str, int]:
    """Bytes in use now: ``rss``, this process's resident set, and ``cuda``, the CUDA
    allocator's on the current device (0 while the process has not used CUDA)."""
    return {"rss": int(psutil.Process().memory_info().rss),
            "cuda": int(torch.cuda.memory_allocated()) if _on_cuda() else 0}


def _peak_rss() -> int:
    """This process's resident-set high-water mark, bytes.

    Linux's ``VmHWM`` first: ``ru_maxrss`` survives ``exec``, so a process started from a
    large one (a notebook kernel running the command) would report its parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) << 10  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) << 10  # bytes there, KiB here


def _peak() -> dict[str, Any]:
    if _on_cuda():
        return {"kind": "CUDA allocator peak", "bytes": int(torch.cuda.max_memory_allocated())}
    return {"kind": "peak RSS", "bytes": _peak_rss()}


def memory_split(optimizers: Sequence[torch.optim.Optimizer] = (),
                 start: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The peak so far and the model-state bytes the ``optimizers`` hold (a JSON-able dict).

    Call it where all three states are alive: after backward, before ``zero_grad``, from
    the second step on (optimizers allocate their state at their first step).

    Args:
        optimizers: the optimizers whose parameters, gradients and state are counted
            (an optimizer wrapping another one may be given with it: storages count once).
        start: :func:`memory_in_use` before the script ran, or ``None``.

    Returns:
        ``kind`` and ``bytes`` of the peak (the CUDA allocator's once the process uses
        CUDA, else the resident set's), ``start_bytes`` (of the same kind), and ``params_bytes``,
        ``grads_bytes``, ``optimizer_bytes`` and ``optimizers`` (class names), which are
        ``None`` when no optimizer was given.

    Raises:
        TypeError, ValueError: for an item that is not a ``torch.optim.Optimizer``, or a
            ``start`` that is not a :func:`memory_in_use` record.
    """
    opts = [check_type("optimizers item", o, torch.optim.Optimizer)
            for o in check_items("optimizers", optimizers, nonempty=False)]
    peak, start_bytes = _peak(), None
    if start is not None:
        check_type("start", start, Mapping)
        key = "cuda" if peak["kind"].startswith("CUDA") else "rss"
        if key not in start:
            raise ValueError(f"start must be a memory_in_use() record with 'rss' and 'cuda', "
                             f"got keys {sorted(start)}")
        start_bytes = check_int(f"start[{key!r}]", start[key], 0)
    out: dict[str, Any] = {**peak, "start_bytes": start_bytes, "params_bytes": None,
                           "grads_bytes": None, "optimizer_bytes": None, "optimizers": None}
    if not opts:
        return out
    params = [p for o in opts for g in o.param_groups for p in g["params"]]
    state = [t for o in opts for s in o.state.values() if isinstance(s, dict)
             for t in s.values() if isinstance(t, torch.Tensor)]
    live = live_model_states(params, [p.grad for p in params], state)
    out.update(params_bytes=live.params, grads_bytes=live.grads, optimizer_bytes=live.optimizer,
               optimizers=sorted({type(o).__name__ for o in opts}))
    return out
