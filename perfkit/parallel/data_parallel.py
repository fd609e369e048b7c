"""Data parallelism from scratch: naive, bucketed, and overlapped with backward.

Three gradient synchronisers, each a small step towards what
``torch.nn.parallel.DistributedDataParallel`` does (Li et al., "PyTorch Distributed",
VLDB 2020), all producing the gradient average over ranks:

* :class:`NaiveDP`: after ``backward()``, one all-reduce per parameter. Many small
  messages, each paying the collective's start-up latency (alpha).
* :class:`BucketedDP`: after ``backward()``, gradients are copied into flat buckets of
  about ``bucket_cap_mb`` and each bucket is all-reduced once: few, large messages.
* :class:`OverlappedDP`: ``post_accumulate_grad`` hooks fill the buckets *during*
  backward and launch an asynchronous all-reduce as soon as a bucket is complete, so
  communication of late layers runs while early layers still compute their gradients.

Buckets hold parameters in reverse registration order, the order backward produces
their gradients, as DDP's do; they are launched strictly in bucket order so that every
rank issues the same collectives in the same order. Their default sizes are DDP's
(torch 2.x, after its first step rebuilds the buckets): 25 MiB (``DDP_BUCKET_CAP_BYTES``),
the first one 1 MiB (``DDP_FIRST_BUCKET_BYTES``) when ``bucket_cap_mb`` is left unset, so
that a side-by-side run against DDP compares the same messages.

Usage (inside a worker started by :func:`perfkit.dist.launch`)::

    dp = OverlappedDP(model, bucket_cap_mb=1.0)
    loss_fn(model(x), y).backward()
    dp.finish()                     # waits for the all-reduces; grads are now averaged
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Real

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import check_int, check_real

__all__ = ["DDP_BUCKET_CAP_BYTES", "DDP_FIRST_BUCKET_BYTES", "BucketedDP", "NaiveDP",
           "OverlappedDP", "assign_buckets"]

DDP_BUCKET_CAP_BYTES = 25 * 2**20  # DistributedDataParallel's bucket_cap_mb default, 25 MiB
# its first bucket when bucket_cap_mb is left at None (torch.distributed's
# _DEFAULT_FIRST_BUCKET_BYTES): the first all-reduce starts early in backward
DDP_FIRST_BUCKET_BYTES = 2**20


def assign_buckets(params: Sequence[nn.Parameter], bucket_cap_bytes: int,
                   first_bucket_bytes: int | None = None) -> list[list[int]]:
    """Group parameter indices into buckets the way DDP's reducer does (torch 2.x).

    Walk ``params`` in reverse (the order backward produces gradients), append each one
    to the open bucket, and close the bucket as soon as it holds ``bucket_cap_bytes`` or
    more; a tensor is never split, so a tensor larger than the cap closes a bucket by
    itself. ``first_bucket_bytes`` (DDP uses 1 MiB when ``bucket_cap_mb`` is left at
    its default) caps the first bucket, so that the first all-reduce starts early.

    Raises:
        TypeError: for ``params`` that is not a sequence of tensors, or a cap that is not
            a number.
        ValueError: for an empty ``params``, or a cap that is not an int >= 1 (a float,
            NaN, inf or bool included).
    """
    if not (isinstance(params, Sequence) and not isinstance(params, str)
            and all(isinstance(p, torch.Tensor) for p in params)):
        raise TypeError(f"params must be a sequence (list, tuple) of tensors, got {_describe(params)}")
    if len(params) == 0:
        raise ValueError("params is empty: the model has no trainable parameters")
    caps = {"bucket_cap_bytes": bucket_cap_bytes}
    if first_bucket_bytes is not None:
        caps["first_bucket_bytes"] = first_bucket_bytes
    for name, cap in caps.items():
        check_int(name, cap, 1)  # bytes
    buckets: list[list[int]] = [[]]
    size = 0
    for i in reversed(range(len(params))):
        buckets[-1].append(i)
        size += params[i].numel() * params[i].element_size()
        first = len(buckets) == 1 and first_bucket_bytes is not None
        if size >= (first_bucket_bytes if first else bucket_cap_bytes):
            buckets.append([])
            size = 0
    if not buckets[-1]:
        buckets.pop()
    return buckets


class _DataParallel:
    """Shared set-up: parameter checks, the initial broadcast, and counters.

    Warning:
        Collective: construct it on every rank (it broadcasts rank 0's parameters).
    """

    def __init__(self, module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"group must be None (WORLD) or a ProcessGroup, got {_describe(group)}")
        self.module = module
        self.group = group
        self.params = [p for p in module.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("module has no parameters with requires_grad=True")
        if any(not p.is_floating_point() for p in self.params):
            raise TypeError("every trainable parameter must be a floating-point tensor")
        self.world_size = dist.get_world_size(group)
        self.calls = 0  # all-reduce calls issued
        self.bytes = 0  # bytes all-reduced (message sizes, not wire traffic)
        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():  # every rank starts from the same weights, as DDP does
            for p in module.state_dict().values():
                dist.broadcast(p, src=src, group=group)

    def _all_reduce(self, t: torch.Tensor, async_op: bool = False):
        self.calls += 1
        self.bytes += t.numel() * t.element_size()
        t.div_(self.world_size)  # average: divide first, like DDP, to avoid overflow
        return dist.all_reduce(t, group=self.group, async_op=async_op)

    def _grad(self, p: nn.Parameter) -> torch.Tensor:
        if p.grad is None:  # unused in this step: contribute zeros, as DDP does
            p.grad = torch.zeros_like(p)
        return p.grad


class NaiveDP(_DataParallel):
    """One blocking all-reduce per parameter after backward.

    Args:
        module: the model; its parameters with ``requires_grad`` are synchronised.
        group: the data-parallel process group (``None``: WORLD).

    Raises:
        TypeError: for a ``module`` that is not an ``nn.Module``, a ``group`` that is not a
            ``ProcessGroup``, or a trainable parameter that is not floating point.
        ValueError: for a module without trainable parameters.

    Warning:
        Collective: :meth:`finish` must run on every rank after every backward.
    """

    def finish(self) -> None:
        """Average every gradient over ranks, one all-reduce per parameter."""
        for p in self.params:
            self._all_reduce(self._grad(p))


class BucketedDP(_DataParallel):
    """One blocking all-reduce per flat bucket of about ``bucket_cap_mb`` after backward.

    Args:
        module, group: as for :class:`NaiveDP`.
        bucket_cap_mb: bucket size in MiB, at least one byte, for every bucket (the first
            included, as ``DistributedDataParallel(bucket_cap_mb=...)``); ``None``: DDP's
            default, 25 MiB with a first bucket of 1 MiB.

    Raises:
        TypeError, ValueError: as for :class:`NaiveDP`; also for a ``bucket_cap_mb`` that is
            not a number (TypeError), or not finite, a bool or below one byte (ValueError).

    Warning:
        Collective: :meth:`finish` must run on every rank after every backward.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        if bucket_cap_mb is not None:
            check_real("bucket_cap_mb", bucket_cap_mb, 2**-20)  # MiB; 2**-20 MiB is one byte
        super().__init__(module, group)
        self.buckets = assign_buckets(self.params, DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES) \
            if bucket_cap_mb is None else assign_buckets(self.params, int(bucket_cap_mb * 2**20))
        # one flat fp32 buffer per bucket, allocated once: (sum of bucket numels,)
        self.buffers = [torch.empty(sum(self.params[i].numel() for i in b),
                                    dtype=self.params[b[0]].dtype, device=self.params[b[0]].device)
                        for b in self.buckets]

    def _pack(self, k: int) -> None:
        off = 0
        for i in self.buckets[k]:
            g = self._grad(self.params[i])
            self.buffers[k][off: off + g.numel()].copy_(g.view(-1))
            off += g.numel()

    def _unpack(self, k: int) -> None:
        off = 0
        for i in self.buckets[k]:
            g = self.params[i].grad
            g.copy_(self.buffers[k][off: off + g.numel()].view_as(g))
            off += g.numel()

    def finish(self) -> None:
        """Average every gradient over ranks, one all-reduce per bucket."""
        for k in range(len(self.buckets)):
            self._pack(k)
            self._all_reduce(self.buffers[k])
            self._unpack(k)


class OverlappedDP(BucketedDP):
    """Buckets all-reduced asynchronously *during* backward, as their gradients arrive.

    A ``post_accumulate_grad`` hook on each parameter counts arrivals per bucket; when a
    bucket is complete (and every earlier bucket was launched) it is packed and its
    all-reduce is launched with ``async_op=True``. :meth:`finish` launches what is left
    (parameters unused in this step), waits for every handle and unpacks.

    Args and Raises: as for :class:`BucketedDP`.

    Warning:
        Collective: every rank must run backward and :meth:`finish` each step.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__(module, bucket_cap_mb, group)
        self._bucket_of = {i: k for k, b in enumerate(self.buckets) for i in b}
        self._hooks = [p.register_post_accumulate_grad_hook(self._make_hook(i))
                       for i, p in enumerate(self.params)]
        self._reset()

    def _reset(self) -> None:
        self._ready = [0] * len(self.buckets)
        self._handles: list = []  # async work handles, in bucket order

    def _make_hook(self, i: int):
        def hook(_: torch.Tensor) -> None:
            k = self._bucket_of[i]
            self._ready[k] += 1
            self._launch_ready()
        return hook

    def _launch_ready(self) -> None:
        # launch in bucket order only: ranks must issue collectives in the same order
        while (len(self._handles) < len(self.buckets)
               and self._ready[len(self._handles)] == len(self.buckets[len(self._handles)])):
            k = len(self._handles)
            self._pack(k)
            self._handles.append(self._all_reduce(self.buffers[k], async_op=True))

    def finish(self) -> None:
        """Launch any bucket not yet launched, wait for all, write averaged grads back."""
        for k in range(len(self._handles), len(self.buckets)):
            self._pack(k)
            self._handles.append(self._all_reduce(self.buffers[k], async_op=True))
        for k, h in enumerate(self._handles):
            h.wait()
            self._unpack(k)
        self._reset()

    def remove_hooks(self) -> None:
        """Detach the gradient hooks from the module's parameters."""
        for h in self._hooks:
            h.remove()
        self._hooks = []


def _describe(x: object) -> str:
    """What ``x`` is, for an error message: never a tensor's values or a long repr."""
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {sorted({type(v).__name__ for v in x})}"
    return repr(x) if isinstance(x, (Real, str)) else type(x).__name__
