"""A DDP communication hook that sends gradients through a perfkit compressor.

DDP hands each gradient bucket to the hook, which compresses it with a
:class:`~perfkit.compress.Compressor`, exchanges the payloads (an all-reduce when they can
be summed, else an all-gather), and averages the decompressed gradients. It follows
PyTorch's DDP communication-hook interface (``register_comm_hook``, the one torch's
``fp16_compress_hook`` and PowerSGD hook (Vogels et al., 2019) use), and counts the payload
bytes against the dense ones so the compression ratio is measured, not nominal.

Error feedback keeps one residual per *parameter*, not per bucket: DDP rebuilds its
buckets after the first step (gradients are regrouped in the order backward produced
them), so a bucket's index and size say nothing about which parameters it holds.

Usage::

    state = HookState(ErrorFeedback(TopK(0.01)))
    ddp_model.register_comm_hook(state, compression_hook)
    loss.backward()  # state.wire_bytes / state.dense_bytes: this rank's ratio so far
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from perfkit._checks import check_int
from perfkit.compress.codecs import Compressed, Compressor
from perfkit.compress.feedback import ErrorFeedback

__all__ = ["HookState", "compression_hook"]


@dataclass
class HookState:
    """State of :func:`compression_hook`: the compressor and byte counters (this rank).

    Attributes:
        compressor: any :class:`~perfkit.compress.Compressor` (an
            :class:`~perfkit.compress.ErrorFeedback` keeps one residual per parameter,
            ``compressor.residuals[param]``, a flat tensor of ``param.numel()`` values).
        process_group: the group to communicate in (``None``: WORLD).
        wire_bytes: payload bytes this rank contributed, summed over calls.
        dense_bytes: bytes of the uncompressed gradient buckets, summed over calls.
        calls: buckets communicated.

    Raises:
        TypeError: ``compressor`` is not a Compressor, ``process_group`` is neither
            ``None`` nor a ``torch.distributed.ProcessGroup``, a counter is not an int.
        ValueError: a counter is negative.
    """

    compressor: Compressor
    process_group: Any = None
    wire_bytes: int = 0
    dense_bytes: int = 0
    calls: int = 0

    def __post_init__(self) -> None:
        # checked here: a wrong type would otherwise fail inside DDP's backward
        if not isinstance(self.compressor, Compressor):
            raise TypeError(f"compressor must be a perfkit.compress.Compressor, got "
                            f"{type(self.compressor).__name__}")
        if self.process_group is not None:
            import torch.distributed as dist

            if not isinstance(self.process_group, dist.ProcessGroup):
                raise TypeError(f"process_group must be None (WORLD) or a "
                                f"torch.distributed.ProcessGroup, got {self.process_group!r}")
        for name in ("wire_bytes", "dense_bytes", "calls"):
            check_int(name, getattr(self, name))


def compression_hook(state: HookState, bucket):  # no annotations: DDP checks real types
    """DDP communication hook: compress the bucket, communicate, average, decompress.

    Summable payloads (the identity, :class:`~perfkit.compress.RandomK` with a seed shared
    by all ranks) are all-reduced; the others are all-gathered (every payload tensor has a
    size that depends only on the bucket size, the same on every rank) and each rank
    decompresses and sums the ``world_size`` payloads. The communication is blocking inside the hook
    and the returned future is already complete: simple and correct, at the price of
    DDP's overlap with backward.

    With an :class:`~perfkit.compress.ErrorFeedback` compressor, each parameter's residual
    is laid out in the bucket's current order (``bucket.parameters()``, each taking
    ``numel`` values of the flat buffer in turn) and updated in place, so it stays with
    its parameter when DDP rebuilds the buckets.

    Register with ``ddp_model.register_comm_hook(HookState(TopK(0.01)), compression_hook)``.

    Raises:
        TypeError: ``state`` is not a :class:`HookState`.
        RuntimeError: the bucket's parameters do not tile its buffer (sparse gradients).

    Warning:
        Collective: DDP calls it on every rank for every bucket; every rank must use the
        same compressor type and settings (and the same seed for
        :class:`~perfkit.compress.RandomK`).
    """
    import torch.distributed as dist

    from perfkit.comm.collectives import all_gather_single

    if not isinstance(state, HookState):
        raise TypeError(f"state must be a HookState, got {type(state).__name__}")
    buf = bucket.buffer()  # flat gradient bucket, (numel,)
    group = state.process_group
    n = dist.get_world_size(group)
    comp = state.compressor
    if isinstance(comp, ErrorFeedback):
        params = bucket.parameters()
        numels = [p.numel() for p in params]
        if sum(numels) != buf.numel():
            raise RuntimeError(f"bucket {bucket.index()}: its {len(params)} parameters hold "
                               f"{sum(numels)} values, its buffer {buf.numel()}")
        c = comp.compress_parts(buf, params, numels)
    else:
        c = comp.compress(buf)
    state.calls += 1
    state.wire_bytes += c.wire_bytes
    state.dense_bytes += buf.numel() * buf.element_size()
    if comp.summable:  # same coordinates on every rank: sum the values directly
        dist.all_reduce(c.tensors[0], group=group)
        out = comp.decompress(c).reshape(-1)
    else:
        gathered = []
        for t in c.tensors:
            g = torch.empty(n * t.numel(), dtype=t.dtype, device=t.device)
            all_gather_single(g, t.contiguous(), group=group)
            gathered.append(g.view(n, -1))  # (world, payload numel)
        out = torch.zeros_like(buf)
        tmp = torch.empty_like(buf)
        for r in range(n):
            part = Compressed(tuple(g[r] for g in gathered), c.shape, c.dtype, c.meta)
            out += comp.decompress(part, out=tmp).reshape(-1)
    buf.copy_(out.div_(n))
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(buf)
    return fut
