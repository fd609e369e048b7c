"""Ring all-reduce from point-to-point messages (Patarasuk and Yuan, 2009).

A reduce-scatter then an all-gather over ``isend``/``irecv``: ``2(n-1)`` steps, each moving
``1/n`` of the data, so every rank sends ``2(n-1)/n`` of the buffer, the all-reduce busbw
factor. The teaching version of what NCCL and gloo do inside ``dist.all_reduce``.

Usage (inside a worker started by :func:`perfkit.dist.launch`)::

    t = torch.ones(1001)
    ring_all_reduce(t)          # in place: t == world_size everywhere
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["ring_all_reduce"]


def ring_all_reduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place with a ring of ``isend``/``irecv``.

    The flat tensor is split into ``n`` chunks with ``tensor_split`` (sizes may differ
    by one element, so any ``numel`` works). Reduce-scatter: at step ``s`` rank ``r``
    sends chunk ``(r - s) % n`` to its right neighbour and adds the chunk
    ``(r - s - 1) % n`` arriving from its left; after ``n - 1`` steps it holds the full
    sum of chunk ``(r + 1) % n``. All-gather: ``n - 1`` more steps pass the finished
    chunks around the ring. Each rank sends ``2 (n-1)/n`` of the buffer in total, the
    all-reduce busbw factor.

    Warning:
        Collective: every rank of ``group`` must call it with a tensor of the same shape
        and dtype, or the ring deadlocks until the process group's timeout.

    Args:
        tensor: a contiguous tensor, modified in place.
        group: process group (default: WORLD).

    Returns:
        ``tensor``, now holding the sum over ranks.

    Raises:
        ValueError: if ``tensor`` is not contiguous.
        TypeError: if ``tensor`` is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous (call .contiguous() first)")
    n = dist.get_world_size(group)
    if n == 1:
        return tensor
    rank = dist.get_rank(group)
    peer = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    right, left = peer((rank + 1) % n), peer((rank - 1) % n)
    chunks = tensor.view(-1).tensor_split(n)  # views into tensor, sizes differ by <= 1
    buf = torch.empty_like(chunks[0])  # the largest chunk is the first

    def exchange(send_idx: int, recv_idx: int) -> torch.Tensor:
        out = buf[: chunks[recv_idx].numel()]
        reqs = []
        # both sides know every chunk's size, so empty chunks are skipped symmetrically
        if chunks[send_idx].numel():
            reqs.append(dist.isend(chunks[send_idx], right, group=group))
        if out.numel():
            reqs.append(dist.irecv(out, left, group=group))
        for req in reqs:
            req.wait()
        return out

    for s in range(n - 1):  # reduce-scatter
        recv_idx = (rank - s - 1) % n
        chunks[recv_idx].add_(exchange((rank - s) % n, recv_idx))
    for s in range(n - 1):  # all-gather
        recv_idx = (rank - s) % n
        chunks[recv_idx].copy_(exchange((rank + 1 - s) % n, recv_idx))
    return tensor
