"""Gradients of sharded buckets averaged across ranks, reduce-scattered during backward.

The gradient path of every ZeRO stage (:class:`perfkit.parallel.ZeroOptimizer`), as DDP
overlaps its all-reduce with backward (Li et al., VLDB 2020): a ``post_accumulate_grad``
hook copies each parameter's gradient into its bucket and, once that bucket and every
bucket before it are complete, starts an asynchronous reduce-scatter that hands rank ``r``
the summed slice ``r``. Stage 1 keeps the full gradient (``p.grad`` becomes a view into the
bucket: DDP's ``gradient_as_bucket_view``); stages 2-3 free it once copied and keep at most
``in_flight`` full buckets alive, waiting for the oldest (DeepSpeed's
``reduce_bucket_size`` bounds the same buffers).

Stage 1's ``p.grad`` stays visible after backward but, with the hooks, is no longer what
the step uses: a bucket's reduce-scatter has already read it, or (a bucket backward did not
complete) will read this rank's copy. Changing it in place then (clipping or scaling it,
``torch.nn.utils.clip_grad_norm_`` included) would be lost or use this rank's own norm,
silently; :meth:`BucketReducer.sync` finds it by the bucket's version counter, and every
rank raises.

Usage::

    reducer = BucketReducer(buckets, stage=2, world_size=2, process_group=None)
    loss.backward()                     # reduce-scatters start in the hooks
    has_grad = reducer.sync()           # collective: b.reduced is each bucket's average
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_choice, check_int, check_items, check_type
from perfkit.parallel.buckets import ShardedBucket
from perfkit.parallel.flat import reduce_scatter_flat
from perfkit.parallel.sharded_grad import ShardedGradient, clear_sharded_gradients

__all__ = ["BucketReducer"]


class BucketReducer:
    """Averages the gradients of ``buckets`` over ranks into ``b.reduced`` ``(shard_size,)``.

    Each bucket gets ``grads`` (its full gradient ``(padded,)`` in ``b.grad_dtype``, or
    ``None`` when freed), ``shard_grad`` (stages 2-3, and ``reduce_grads=False``: this
    rank's slice, persistent) and ``reduced`` (set by :meth:`sync`).

    Args:
        buckets: the layout (:func:`perfkit.parallel.build_buckets`, or stage 3's units).
        stage: 1 keeps full gradients, 2 and 3 free them once reduced.
        world_size: ranks in ``process_group``.
        process_group: the data-parallel group (``None``: WORLD).
        reduce_grads: ``False`` for gradients DDP already averaged (stage 1): each rank
            copies its slices, nothing is communicated.
        hooks: reduce-scatter during backward (one backward per step); ``False``: in
            :meth:`sync`, from ``p.grad`` accumulated by any number of backward passes.
        on_complete: called with a bucket's index once all its gradients arrived (stage 3
            frees the unit's parameters there).
        in_flight: full buckets alive at once during backward (stages 2-3).

    Raises:
        TypeError, ValueError: for an argument of the wrong type or out of range, or
            ``reduce_grads=False`` above stage 1.

    Warning:
        Collective: every rank must run the same backward passes and call :meth:`sync`.
    """

    def __init__(self, buckets: Sequence[ShardedBucket], stage: int, world_size: int,
                 process_group: Any = None, reduce_grads: bool = True, hooks: bool = True,
                 on_complete: Callable[[int], None] | None = None, in_flight: int = 2) -> None:
        self.buckets = check_items("buckets", buckets, nonempty=False)
        for i, b in enumerate(self.buckets):
            check_type(f"buckets[{i}]", b, ShardedBucket)
        self.stage = check_choice("stage", stage, (1, 2, 3))
        self.world_size = check_int("world_size", world_size, 1)
        self.reduce_grads = check_type("reduce_grads", reduce_grads, bool)
        check_type("hooks", hooks, bool)
        self.in_flight = check_int("in_flight", in_flight, 1)
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        if not reduce_grads and stage != 1:
            raise ValueError(f"reduce_grads=False (gradients averaged by DDP) needs stage 1, "
                             f"got stage={stage}: DDP keeps the full gradients stage 2 shards")
        self.process_group, self.on_complete = process_group, on_complete
        for b in self.buckets:
            b.grads, b.reduced = None, None
            b.seen = 0  # version of b.grads after the reducer's last write to it
            b.shard_grad = torch.zeros(b.shard_size, dtype=b.grad_dtype, device=b.device) \
                if stage >= 2 or not reduce_grads else None
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(bi, k))
                       for bi, b in enumerate(self.buckets) for k, p in enumerate(b.params)
                       ] if hooks and reduce_grads else []
        self.buffer_peak_bytes = 0  # largest transient bucket/output bytes alive at once
        self.reset()

    def reset(self) -> None:
        """Forget this step's arrivals (after the step used :attr:`ShardedBucket.reduced`);
        stages 2-3: ``p.grad`` back to ``None`` from its :class:`ShardedGradient` marker."""
        for b in self.buckets:
            b.reduced = None
            clear_sharded_gradients(b.params)
        self._arrived = [[False] * len(b.params) for b in self.buckets]
        self._count = [0] * len(self.buckets)
        self._work: list[tuple[int, Any, torch.Tensor]] = []  # (bucket, handle, output)
        self.launched = 0  # buckets whose reduce-scatter has started, in order
        self._synced = False
        self._transient = 0  # bytes of bucket buffers and outputs alive now

    def remove_hooks(self) -> None:
        """Detach the gradient hooks (then :meth:`sync` reads ``p.grad``)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _hook(self, bi: int, k: int) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            if bi < self.launched or self._synced:
                raise RuntimeError(f"a gradient arrived for a bucket already reduced in this "
                                   f"step: ZeRO-{self.stage} with overlap=True takes one backward "
                                   "per step() (overlap=False accumulates several)")
            self._take(bi, k, p)
            self._count[bi] += 1
            if self._count[bi] == len(self.buckets[bi].params) and self.on_complete:
                self.on_complete(bi)
            while self.launched < len(self.buckets) and \
                    self._count[self.launched] == len(self.buckets[self.launched].params):
                self._launch(self.launched)  # in bucket order: every rank issues the same
        return hook

    def _grads(self, bi: int) -> torch.Tensor:
        b = self.buckets[bi]
        if b.grads is None:  # padding stays 0
            b.grads = torch.zeros(b.padded, dtype=b.grad_dtype, device=b.device)
            if self.stage >= 2:
                self._transient += b.padded * b.grads.element_size()
                self.buffer_peak_bytes = max(self.buffer_peak_bytes, self._transient)
        return b.grads

    def _take(self, bi: int, k: int, p: torch.Tensor) -> None:
        """Copy ``p.grad`` into its bucket (cast to the reduce dtype); stage 1 keeps it there
        as ``p.grad``, stages 2-3 free it and leave a :class:`ShardedGradient` marker, which
        raises on use (torch's ``clip_grad_norm_`` would otherwise find no gradient)."""
        b = self.buckets[bi]
        view = self._grads(bi)[b.offsets[k]:b.offsets[k] + b.numels[k]]
        if p.grad.data_ptr() != view.data_ptr():  # stage 1 after zero_grad(set_to_none=False)
            view.copy_(p.grad.reshape(-1))
        p.grad = ShardedGradient(p, self.stage) if self.stage >= 2 else view.view_as(p)
        self._arrived[bi][k] = True
        b.seen = b.grads._version  # after the reducer's own write; sync() checks the rest

    def _launch(self, bi: int) -> None:
        """Reduce-scatter bucket ``bi`` asynchronously (zeros for parameters without grads);
        with ``reduce_grads=False`` copy this rank's pieces of the local gradients."""
        b = self.buckets[bi]
        self.launched += 1
        if not self.reduce_grads:  # DDP averaged them already: no collective
            out = b.shard_grad.zero_()
            for k, lo, hi, at in b.pieces:
                if b.params[k].grad is not None:
                    out[at:at + hi - lo].copy_(b.params[k].grad.reshape(-1)[lo:hi])
            self._arrived[bi] = [p.grad is not None for p in b.params]
            self._work.append((bi, None, out))
            return
        grads = self._grads(bi)
        for k, p in enumerate(b.params):
            if not self._arrived[bi][k]:
                if p.grad is not None:  # set by hand, no hooks, or zero_grad(False)
                    self._take(bi, k, p)
                else:
                    grads[b.offsets[k]:b.offsets[k] + b.numels[k]].zero_()
        b.seen = grads._version
        out = b.shard_grad if self.stage >= 2 else torch.empty_like(grads[:b.shard_size])
        self._transient += 0 if self.stage >= 2 else out.numel() * out.element_size()
        self.buffer_peak_bytes = max(self.buffer_peak_bytes, self._transient)
        work = None
        if self.world_size > 1:
            work = reduce_scatter_flat(out, grads, self.process_group, async_op=True)
        else:
            out.copy_(grads)

        self._work.append((bi, work, out))
        # stages 2-3 keep at most in_flight full buckets: older ones are waited for and
        # freed while backward goes on (stage 1 keeps its buffers anyway)
        while self.stage >= 2 and len(self._work) > self.in_flight:
            self._finish(*self._work.pop(0))

    def _finish(self, bi: int, work: Any, out: torch.Tensor) -> None:
        """Wait for bucket ``bi``'s reduce-scatter and average it (``b.reduced``); stage 1
        writes the average into its slice of the full gradient, stages 2-3 free that."""
        b = self.buckets[bi]
        if work is not None:
            work.wait()
        b.reduced = out
        if not self.reduce_grads:
            return
        out.div_(self.world_size)  # gloo has no AVG: sum, then divide
        if self.stage == 1:
            b.grads[b.start:b.end].copy_(out)
            b.reduced = b.grads[b.start:b.end]
            b.seen = b.grads._version
        else:
            self._transient -= b.padded * b.grads.element_size()
            b.grads = None  # the full bucket is no longer needed

    @torch.no_grad()
    def sync(self) -> list[list[bool]]:
        """Launch the buckets backward did not complete and wait for every reduce-scatter.

        Returns:
            Per bucket and parameter: had it a gradient on any rank (read locally when
            ``reduce_grads=False``: DDP gives every rank the same)?

        Raises:
            RuntimeError: at stage 1 with the hooks, on every rank, if a gradient the hooks
                had read was changed in place on any rank before this call.

        Warning:
            Collective: every rank must call it (one all-reduce of a flag per parameter).
        """
        guard = self.stage == 1 and bool(self._hooks)  # p.grad is the bucket, read already
        changed = [bi for bi, b in enumerate(self.buckets)
                   if guard and any(self._arrived[bi]) and b.grads._version != b.seen]
        for bi in range(self.launched, len(self.buckets)):
            self._launch(bi)
        # every arrival is known now: agree on them while the reduce-scatters finish; with
        # the guard, one more flag says whether a gradient changed after the hooks read it
        flags = torch.tensor([float(a) for arrived in self._arrived for a in arrived] +
                             [float(bool(changed))] * guard,
                             device=self.buckets[0].device if self.buckets else None)
        flag_work = None
        if self.world_size > 1 and self.buckets and self.reduce_grads:
            flag_work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.process_group,
                                        async_op=True)
        for bi, work, out in self._work:
            self._finish(bi, work, out)
        self._work, self._transient, self._synced = [], 0, True  # stage 1's outputs freed
        if flag_work is not None:
            flag_work.wait()
        if guard and flags[-1] > 0:
            self.reset()
            raise RuntimeError(
                f"ZeRO-1: gradients changed in place between backward and the step (bucket(s) "
                f"{changed} on this rank); with overlap=True backward has already read them (and "
                "reduce-scattered the complete buckets), so the change is lost or used unaveraged. "
                "torch.nn.utils.clip_grad_norm_(model.parameters()) does this: it clips this "
                "rank's un-averaged gradient. Clip with ZeroOptimizer.clip_grad_norm_(max_norm) "
                "between backward and step(), scale the loss rather than the gradients, or use "
                "overlap=False")
        it = iter(flags.tolist())
        return [[next(it) > 0 for _ in b.params] for b in self.buckets]

    def gradient_tensors(self) -> list[torch.Tensor]:
        """The tensors that hold gradients between backward and step: every full bucket
        (stage 1), this rank's reduced slices (stages 2-3)."""
        if self.stage == 1:
            return [b.grads for b in self.buckets if b.grads is not None]
        return [b.shard_grad for b in self.buckets]
