"""Bytes each rank moves per collective: every call through ``torch.distributed`` counted.

:func:`count_traffic` patches the collectives of the ``torch.distributed`` module for the
duration of a ``with`` block (anything that looks them up at call time is seen: perfkit,
FSDP2, DeepSpeed's torch backend, DDP with a Python communication hook) and records, per
collective, the calls and the bytes of the largest tensor argument (a list counts as its
sum): the whole buffer of an all-reduce, the input of a reduce-scatter, the output of an
all-gather. :meth:`Traffic.sent_bytes` turns them into the bytes one rank sends with the
bandwidth-optimal (ring) algorithms, averaged over the ranks: ``2 (N - 1) / N`` of the buffer
for an all-reduce, ``(N - 1) / N`` for a reduce-scatter, an all-gather, a broadcast or a
reduce (a pipelined chain: every rank but the last passes the buffer on once); a rank
receives as much. So data parallelism's all-reduce of ``G`` bytes and ZeRO's
reduce-scatter plus all-gather move the same bytes, ZeRO-3's two all-gathers and one
reduce-scatter move 1.5 times as much, and so does an all-reduce followed by one broadcast
of each shard from its owner (PyTorch's ``ZeroRedundancyOptimizer``): the N shards'
broadcasts, whose roots rotate, move what one all-gather of them moves.

Usage (inside a worker)::

    with count_traffic() as t:
        loss.backward(); opt.step()
    print(t.calls, t.sent_bytes(world_size=2))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_int, check_items

__all__ = ["COUNTED", "Traffic", "count_traffic", "ring_factor"]

# what a module-level patch can see; *_coalesced and the object collectives are left out
COUNTED = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
           "all_gather", "all_gather_into_tensor", "all_gather_single", "broadcast", "reduce",
           "all_to_all", "all_to_all_single")


def ring_factor(name: str, world_size: int) -> float:
    """Bytes a rank sends per byte of the collective's buffer (ring algorithms), averaged
    over the ranks. A broadcast or reduce of ``S`` bytes is a chain in which each rank but the
    last sends ``S``: ``(N - 1) / N`` on average. (nccl-tests' bus factor for a broadcast is
    1: the time of one broadcast is set by a link that carries all of ``S``.)

    Raises:
        ValueError: for a ``world_size`` below 1.
    """
    check_int("world_size", world_size, 1)
    n = world_size
    if name == "all_reduce":
        return 2 * (n - 1) / n
    if name.startswith(("reduce_scatter", "all_gather", "all_to_all")):
        return (n - 1) / n
    return (n - 1) / n  # broadcast, reduce: every rank but the chain's last sends it once


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


@dataclass
class Traffic:
    """Collectives counted by :func:`count_traffic`: calls and buffer bytes per name."""

    calls: dict[str, int] = field(default_factory=dict)
    buffer_bytes: dict[str, int] = field(default_factory=dict)

    def sent_bytes(self, world_size: int) -> dict[str, float]:
        """Bytes one rank sends (and receives) per collective, by the ring model."""
        return {k: v * ring_factor(k, world_size) for k, v in self.buffer_bytes.items()}

@contextlib.contextmanager
def count_traffic(extra: Sequence[tuple[Any, str, str]] = ()) -> Iterator[Traffic]:
    """Count every collective called through ``torch.distributed`` inside the block.

    Args:
        extra: more patch points ``(object, attribute, collective name)`` for code that
            bound a collective before the block (DeepSpeed's backend keeps
            ``all_gather_function`` and ``reduce_scatter_function``).

    Not thread-safe across concurrent ``with`` blocks (it patches the module).

    Raises:
        TypeError: for an ``extra`` entry that is not ``(object, attribute, name)``.
    """
    t = Traffic()
    targets = [(dist, n, n) for n in COUNTED if hasattr(dist, n)]
    for e in check_items("extra", extra, nonempty=False):
        if not (isinstance(e, tuple) and len(e) == 3 and isinstance(e[1], str)
                and isinstance(e[2], str) and callable(getattr(e[0], e[1], None))):
            raise TypeError(f"extra must hold (object, attribute, name) tuples naming a "
                            f"callable attribute, got {e!r}")
        targets.append(e)
    saved = [(obj, attr, name, getattr(obj, attr)) for obj, attr, name in targets]

    def wrap(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kw: Any) -> Any:
            t.calls[name] = t.calls.get(name, 0) + 1
            t.buffer_bytes[name] = t.buffer_bytes.get(name, 0) + max(
                [_nbytes(a) for a in (*args, *kw.values())] or [0])
            return f(*args, **kw)
        return counted

    for obj, attr, name, f in saved:
        setattr(obj, attr, wrap(name, f))
    try:
        yield t
    finally:
        for obj, attr, _name, f in saved:
            setattr(obj, attr, f)
