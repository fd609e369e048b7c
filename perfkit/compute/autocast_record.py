"""Recording and replaying the ops autocast changes in a training step, for
:mod:`perfkit.compute.autocast_parts` to time them alone.

A ``TorchDispatchMode`` sits below autograd and autocast, so it sees every op a step
dispatches, the backward's and autocast's own casts included. :func:`record_parts` runs one
mixed-precision step under it and keeps each op that touches a low-precision tensor
(:data:`LOW_DTYPES`), with copies of its arguments (shapes, strides, dtypes and values) and
its kind (:data:`PART_KINDS`: a matmul, fused attention, a cast, or any other op on a
low-precision tensor). :func:`replay_parts` runs the recorded calls again, as recorded or
upcast to fp32 (the same ops at the same shapes without the casts), so that each precision
is timed at the step's own shapes.

Usage::

    calls = record_parts(mixed_step)                 # one mixed step's low-precision ops
    run_mixed, run_fp32 = replay_parts(calls), replay_parts(calls, fp32=True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from perfkit._checks import check_callable, check_type

__all__ = ["LOW_DTYPES", "PART_KINDS", "OpCall", "record_parts", "replay_parts"]

PART_KINDS = ("matmul", "attention", "cast", "other")  # "other": any other op on a low-precision tensor
LOW_DTYPES = (torch.bfloat16, torch.float16)
_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "convolution", "convolution_backward"}


def _low(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in LOW_DTYPES


def _kind(func: Any, args: tuple, kwargs: dict, out: Any) -> str | None:
    """The part a dispatched op belongs to (one of :data:`PART_KINDS`), or ``None`` when it touches
    no low-precision tensor (it runs the same in both steps)."""
    name = func.__name__.split(".")[0]  # "addmm.default" -> "addmm"
    if name == "_to_copy":
        src, to = args[0], kwargs.get("dtype")
        cast = src.is_floating_point() and to is not None and to.is_floating_point and to != src.dtype
        return "cast" if cast and (to in LOW_DTYPES or src.dtype in LOW_DTYPES) else None
    if not any(_low(t) for t in tree_flatten((args, kwargs, out))[0]):
        return None
    if name in _MATMULS:
        return "matmul"
    return "attention" if "scaled_dot_product" in name else "other"


def _copy(t: Any, dtype: torch.dtype | None = None) -> Any:
    """A detached copy of a tensor with its strides (a transposed view stays transposed), in
    ``dtype`` when it is low precision and ``dtype`` is given; a low-precision dtype argument
    becomes ``dtype`` too. Anything else is returned as is."""
    if isinstance(t, torch.dtype):
        return dtype if dtype is not None and t in LOW_DTYPES else t
    if not isinstance(t, torch.Tensor):
        return t
    to = dtype if dtype is not None and t.dtype in LOW_DTYPES else t.dtype
    broadcast = [d for d, (n, s) in enumerate(zip(t.shape, t.stride(), strict=True)) if s == 0 and n > 1]
    if broadcast:  # an expanded view: copy one slice along each broadcast dim, expand it again
        base = t
        for d in broadcast:
            base = base.narrow(d, 0, 1)
        return _copy(base, dtype).expand(t.shape)
    try:
        return torch.empty_strided(t.shape, t.stride(), dtype=to, device=t.device).copy_(t.detach())
    except RuntimeError:  # other self-overlapping layouts (as_strided): a dense copy
        return t.detach().to(to, copy=True)


@dataclass(frozen=True)
class OpCall:
    """One recorded op: the aten overload, its arguments as recorded (``args``, ``kwargs``:
    tensors copied with their values and strides), the same upcast to fp32 (``args32``,
    ``kwargs32``; ``None`` for a cast, which the fp32 step does not run) and its kind."""

    func: Any
    args: tuple
    kwargs: dict
    args32: tuple | None
    kwargs32: dict | None
    kind: str

    def __call__(self, fp32: bool = False) -> Any:
        if fp32:
            return None if self.args32 is None else self.func(*self.args32, **self.kwargs32)
        return self.func(*self.args, **self.kwargs)


class _Recorder(TorchDispatchMode):
    """Keep a copy of every op that touches a low-precision tensor, and of every cast."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[OpCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if (kind := _kind(func, args, kwargs, out)) is not None:
            up = (None, None) if kind == "cast" else (tree_map(lambda t: _copy(t, torch.float32), args),
                                                      tree_map(lambda t: _copy(t, torch.float32), kwargs))
            self.calls.append(OpCall(func, tree_map(_copy, args), tree_map(_copy, kwargs), *up, kind))
        return out


def record_parts(step: Callable[[], object]) -> list[OpCall]:
    """Run ``step()`` once and return, in order, every op it ran (forward and backward) on a
    low-precision tensor and every cast to or from low precision. A training step updates the
    weights like any other call.

    Raises:
        TypeError: if ``step`` is not callable.
    """
    check_callable("step", step)
    rec = _Recorder()
    with rec:
        step()
    return rec.calls


def replay_parts(calls: list[OpCall], fp32: bool = False) -> Callable[[], None]:
    """A callable running ``calls`` again, one after the other, on their recorded inputs (no
    autograd: the backward's ops were recorded as ops of their own); ``fp32``: upcast, casts
    skipped.

    Raises:
        TypeError: for calls that are not a list of :class:`OpCall`.
    """
    check_type("calls", calls, list)
    for i, c in enumerate(calls):
        check_type(f"calls[{i}]", c, OpCall)

    def run() -> None:
        with torch.no_grad():
            for c in calls:
                c(fp32)

    return run
