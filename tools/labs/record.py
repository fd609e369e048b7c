"""What a graded process did: the collectives, point-to-point messages and perfkit code it ran.

A lab check must judge the *skill* (which collectives ran, who talked to whom, whose code
did the work), not only the result. These recorders patch ``torch.distributed``'s module or
install a profile hook for the length of a ``with`` block, inside the graded process::

    with record_collectives() as calls, record_p2p() as msgs, record_library("perfkit.comm") as lib:
        answer(tensor)
    assert not lib, f"the answer ran perfkit's own {sorted(lib)}"

Code that holds a reference taken before the block (``from torch.distributed import
isend``) is not seen by the module patches; the checks tell students to call through the
module (``dist.isend(...)``). The profile hook sees every Python function, however reached.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
               "all_gather", "all_gather_into_tensor", "all_gather_single", "broadcast", "reduce")
P2P = ("isend", "irecv", "send", "recv")


def _elems(x: Any) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else sum(_elems(t) for t in x) if isinstance(
        x, (list, tuple)) else 0


@contextlib.contextmanager
def _patched(names: tuple[str, ...], wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]
             ) -> Iterator[None]:
    """Replace ``torch.distributed``'s ``names`` by ``wrap(name, original)``; restore them."""
    saved = {name: getattr(dist, name) for name in names if hasattr(dist, name)}
    for name, f in saved.items():
        setattr(dist, name, wrap(name, f))
    try:
        yield
    finally:
        for name, f in saved.items():
            setattr(dist, name, f)


@contextlib.contextmanager
def record_collectives() -> Iterator[list[tuple[str, int]]]:
    """Record every collective called through ``torch.distributed``'s module.

    Returns:
        (in the ``with`` target) a list that fills with (name, elements of the call's
        largest tensor argument): which collectives ran and how much data they moved.
    """
    calls: list[tuple[str, int]] = []

    def wrap(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kw: Any) -> Any:
            calls.append((name, max([_elems(a) for a in (*args, *kw.values())] or [0])))
            return f(*args, **kw)
        return recorded

    with _patched(COLLECTIVES, wrap):
        yield calls


@contextlib.contextmanager
def record_p2p() -> Iterator[list[tuple[str, int, int]]]:
    """Record every ``dist.isend/irecv/send/recv`` called through the module.

    Returns:
        (in the ``with`` target) a list that fills with (op, peer rank or -1, elements):
        *who* an all-reduce implementation talks to and how much it sends.
    """
    calls: list[tuple[str, int, int]] = []

    def wrap(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        key = "dst" if name in ("isend", "send") else "src"

        def recorded(tensor: torch.Tensor, *args: Any, **kw: Any) -> Any:
            peer = kw.get(key, args[0] if args else None)
            calls.append((name, -1 if peer is None else int(peer), tensor.numel()))
            return f(tensor, *args, **kw)
        return recorded

    with _patched(P2P, wrap):
        yield calls


@contextlib.contextmanager
def record_library(prefix: str) -> Iterator[set[str]]:
    """Record the functions of modules named ``prefix`` or ``prefix.*`` that run in the block.

    A profile hook, not a patch: an answer that reaches the library's function through an
    alias, a closure or a reference cloudpickle restored is seen all the same.

    Args:
        prefix: a module name, e.g. ``"perfkit.comm"``.

    Returns:
        (in the ``with`` target) a set that fills with ``"module.function"`` names.

    Raises:
        ValueError: for an empty ``prefix``.
    """
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty module name, got {prefix!r}")
    seen: set[str] = set()

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            mod = frame.f_globals.get("__name__", "")
            if mod == prefix or mod.startswith(prefix + "."):
                seen.add(f"{mod}.{frame.f_code.co_name}")

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
