"""A DDP communication hook that sends gradients through a perfkit compressor.

DDP hands each gradient bucket to the hook, which compresses it with a
:class:`~perfkit.compress.Compressor`, exchanges the payloads (an all-reduce when they can
be summed, else an all-gather), and averages the decompressed gradients. It follows
PyTorch's DDP communication-hook interface (``register_comm_hook``, the one torch's
``fp16_compress_hook`` and PowerSGD hook (Vogels et al., 2019) use), and counts the payload
bytes against the dense ones so the compression ratio is measured, not nominal.

Usage::

    state = HookState(ErrorFeedback(TopK(0.01)))
    ddp_model.register_comm_hook(state, compression_hook)
    loss.backward()  # state.wire_bytes / state.dense_bytes: this rank's ratio so far
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from perfkit.compress.codecs import Compressed, Compressor, ErrorFeedback

__all__ = ["HookState", "compression_hook"]


@dataclass
class HookState:
    """State of :func:`compression_hook`: the compressor and byte counters (this rank).

    Attributes:
        compressor: any :class:`~perfkit.compress.Compressor` (an
            :class:`~perfkit.compress.ErrorFeedback` keeps one residual per DDP bucket).
        process_group: the group to communicate in (``None``: WORLD).
        wire_bytes: payload bytes this rank contributed, summed over calls.
        dense_bytes: bytes of the uncompressed gradient buckets, summed over calls.
        calls: buckets communicated.
    """

    compressor: Compressor
    process_group: Any = None
    wire_bytes: int = 0
    dense_bytes: int = 0
    calls: int = 0


def compression_hook(state: HookState, bucket):  # no annotations: DDP checks real types
    """DDP communication hook: compress the bucket, communicate, average, decompress.

    Summable payloads (the identity, :class:`~perfkit.compress.RandomK` with a seed shared
    by all ranks) are all-reduced; the others are all-gathered (every payload tensor has a
    size that depends only on the bucket size, the same on every rank) and each rank
    decompresses and sums the ``world_size`` payloads. The communication is blocking inside the hook
    and the returned future is already complete: simple and correct, at the price of
    DDP's overlap with backward.

    Register with ``ddp_model.register_comm_hook(HookState(TopK(0.01)), compression_hook)``.

    Warning:
        Collective: DDP calls it on every rank for every bucket; every rank must use the
        same compressor type and settings (and the same seed for
        :class:`~perfkit.compress.RandomK`).
    """
    import torch.distributed as dist

    from perfkit.comm.collectives import all_gather_single

    buf = bucket.buffer()  # flat gradient bucket, (numel,)
    group = state.process_group
    n = dist.get_world_size(group)
    comp = state.compressor
    if isinstance(comp, ErrorFeedback):
        c = comp.compress(buf, key=(bucket.index(), buf.numel()))
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
