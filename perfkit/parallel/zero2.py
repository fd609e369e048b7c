"""ZeRO stages 1 and 2 overlapped with backward, around any ``torch.optim`` optimizer.

Rajbhandari et al., *ZeRO* (SC 2020): stage 1 ("P_os") shards the optimizer state, stage 2
("P_os+g") the gradients too. Both reduce-scatter the gradients in buckets *while backward
runs*, as DDP overlaps its all-reduce (Li et al., VLDB 2020): a
``post_accumulate_grad`` hook copies each parameter's gradient into its bucket and, once
every bucket before it has been launched, starts an asynchronous reduce-scatter that hands
rank ``r`` the summed slice ``r`` of the bucket. :meth:`ZeroOptimizer.step` waits for the
handles, updates this rank's slices with the wrapped optimizer and all-gathers them.

* Stage 1 keeps every full gradient: ``p.grad`` becomes a view into a persistent bucket
  buffer (DDP's ``gradient_as_bucket_view``), so the gradients cost ``G Ψ`` bytes, once.
* Stage 2 keeps only the reduced slice (``G Ψ / N``): the hook frees ``p.grad`` as soon as
  it is copied, and a bucket's full buffer lives only until its reduce-scatter is done:
  once more than ``IN_FLIGHT`` buckets are in flight, backward waits for the oldest and
  frees it, so the full gradient is never alive at once (DeepSpeed bounds the same
  buffers with ``reduce_bucket_size``).

Usage::

    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=2, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()      # step() is collective
    full = opt.state_dict()                            # collective; AdamW's own format
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_choice, check_real
from perfkit.parallel.buckets import ShardedBucket, build_buckets, consolidated_state, shard_state
from perfkit.parallel.flat import all_gather_flat, reduce_scatter_flat
from perfkit.parallel.zero1 import _hyper, _param_groups

__all__ = ["ZeroOptimizer"]


class ZeroOptimizer(torch.optim.Optimizer):
    """ZeRO stage 1 or 2 for ``optimizer_class``, gradients reduce-scattered during backward.

    How it partitions: each group's trainable parameters are bucketed in backward order
    (about ``bucket_cap_mb`` each, whole tensors) and become views into one flat buffer
    per bucket, padded to a multiple of ``N``; rank ``r`` owns slice ``r`` of every
    bucket, so its optimizer state is ``sum(ceil(bucket_numel / N))`` elements.

    Parameters without gradients follow ``torch.optim``: a parameter whose gradient is
    ``None`` on every rank is neither updated nor its state advanced (one all-reduce of a
    flag per parameter per step); one that has a gradient on some ranks gets their average
    over all ranks. A parameter frozen (``requires_grad=False``) at construction is never
    sharded, communicated or updated. Gradients are read when each parameter's
    ``post_accumulate_grad`` hook fires, or at :meth:`sync_grads` for a ``p.grad`` set by
    hand: one backward per step (a second backward into a bucket already reduced raises).

    After :meth:`step`, at stage 1 ``p.grad`` holds the local gradient except for this
    rank's slice, which holds the average (the reduce-scatter result is copied there
    instead of being kept twice); at stage 2 ``p.grad`` is ``None`` after backward.

    Args:
        params: tensors or parameter-group dicts, as for any ``torch.optim`` optimizer.
            All tensors of a group share dtype and device; floating point only.
        optimizer_class: the ``torch.optim.Optimizer`` subclass to wrap (e.g. ``AdamW``).
        stage: 1 (optimizer state sharded) or 2 (gradients too).
        bucket_cap_mb: bucket size in MiB (a tensor is never split; one byte at least).
        process_group: the data-parallel group; ``None`` means WORLD, or one process when
            ``torch.distributed`` is not initialised (then nothing is communicated).
        **defaults: keyword arguments for ``optimizer_class`` (``lr``, ``weight_decay``...).

    Raises:
        TypeError, ValueError: as :class:`perfkit.parallel.ZeroOneOptimizer` for ``params``,
            ``optimizer_class``, ``process_group``; for a ``stage`` not 1 or 2 or a
            ``bucket_cap_mb`` that is not a finite number of at least one byte.

    Warning:
        Collective: every rank must run backward and :meth:`step` each step, with the
        same parameters; on a subset of ranks it hangs.
    """

    IN_FLIGHT = 2  # stage 2: full bucket buffers alive at once during backward

    def __init__(self, params: Iterable[Any], optimizer_class: type[torch.optim.Optimizer],
                 stage: int = 2, bucket_cap_mb: float = 25.0, process_group: Any = None,
                 **defaults: Any) -> None:
        if not (isinstance(optimizer_class, type)
                and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError("optimizer_class must be a torch.optim.Optimizer subclass, got "
                            f"{optimizer_class!r}")
        check_choice("stage", stage, (1, 2))
        check_real("bucket_cap_mb", bucket_cap_mb, 2.0**-20)
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        groups = _param_groups(params, "ZeroOptimizer")
        super().__init__(groups, defaults)
        self.optimizer_class, self.stage = optimizer_class, stage
        distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group if distributed else None
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self._frozen = [p for g in self.param_groups for p in g["params"] if not p.requires_grad]
        self.buckets = self._build_buckets(int(bucket_cap_mb * 2**20))
        for b in self.buckets:
            b.grads = None  # (padded,) full gradients: stage 1 keeps it, stages 2-3 free it
            b.shard_grad = torch.zeros(b.shard_size, dtype=b.dtype, device=b.device) \
                if self.stage >= 2 else None
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(bi, k))
                       for bi, b in enumerate(self.buckets) for k, p in enumerate(b.params)]
        mine = [[s for b in self.buckets if b.group == gi for s in b.segments]
                for gi in range(len(self.param_groups))]
        # a group without a piece on this rank stays a valid (never stepped) optimizer group
        self._idle = [torch.nn.Parameter(g["params"][0].new_zeros(0)) for g in self.param_groups]
        self.optim = optimizer_class([{**_hyper(g), "params": segs or [idle]} for g, segs, idle
                                      in zip(self.param_groups, mine, self._idle, strict=True)],
                                     **defaults)
        for g, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            for k, v in _hyper(inner).items():  # the class's defaults, visible to schedulers
                g.setdefault(k, v)
        self.defaults = self.optim.defaults
        self.state = self.optim.state  # this rank's pieces only: what memory accounting sees
        self.buffer_peak_bytes = 0  # largest transient bucket/output bytes alive at once
        self._reset()

    def _build_buckets(self, cap_bytes: int) -> list[ShardedBucket]:
        """Bucket the groups' trainable parameters; they become views into each bucket's
        ``flat`` buffer ``(padded,)``, and this rank's pieces of it the optimizer's leaves."""
        buckets = build_buckets([g["params"] for g in self.param_groups], cap_bytes,
                                self.world_size, self.rank)
        for b in buckets:
            b.flat = b.flatten()
            for p, off, n in zip(b.params, b.offsets, b.numels, strict=True):
                p.data = b.flat[off:off + n].view_as(p)  # the all-gather writes the parameters
            b.segments = [torch.nn.Parameter(b.flat[b.start + at:b.start + at + hi - lo])
                          for _k, lo, hi, at in b.pieces]
        return buckets

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Only the constructor adds groups: the buckets are fixed after it.

        Raises:
            NotImplementedError: after construction.
        """
        if hasattr(self, "buckets"):
            raise NotImplementedError("ZeroOptimizer cannot add a param group after "
                                      "construction; build a new one with every group")
        super().add_param_group(param_group)

    # --- during backward ------------------------------------------------------------------

    def _reset(self) -> None:
        self._arrived = [[False] * len(b.params) for b in self.buckets]
        self._count = [0] * len(self.buckets)
        self._work: list[tuple[int, Any, torch.Tensor]] = []  # (bucket, handle, output)
        self._launched = 0  # buckets whose reduce-scatter has started, in order
        self._synced = False
        self._transient = 0  # bytes of bucket buffers and outputs alive now

    def _hook(self, bi: int, k: int) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            if bi < self._launched or self._synced:
                raise RuntimeError("a gradient arrived for a bucket already reduced in this "
                                   "step: ZeroOptimizer takes one backward per step()")
            self._take(bi, k, p)
            self._count[bi] += 1
            if self._count[bi] == len(self.buckets[bi].params):
                self._complete(bi)
            while self._launched < len(self.buckets) and \
                    self._count[self._launched] == len(self.buckets[self._launched].params):
                self._launch(self._launched)  # in bucket order: every rank issues the same
        return hook

    def _complete(self, bi: int) -> None:
        """Every gradient of bucket ``bi`` has arrived (stage 3 frees its parameters)."""

    def _grads(self, bi: int) -> torch.Tensor:
        b = self.buckets[bi]
        if b.grads is None:
            b.grads = torch.zeros(b.padded, dtype=b.dtype, device=b.device)  # padding stays 0
            if self.stage >= 2:
                self._transient += b.padded * b.grads.element_size()
                self.buffer_peak_bytes = max(self.buffer_peak_bytes, self._transient)
        return b.grads

    def _take(self, bi: int, k: int, p: torch.Tensor) -> None:
        """Copy ``p.grad`` into its bucket; stage 1 keeps it there as ``p.grad``, stage 2 frees it."""
        b = self.buckets[bi]
        view = self._grads(bi)[b.offsets[k]:b.offsets[k] + b.numels[k]]
        if p.grad.data_ptr() != view.data_ptr():  # stage 1 after zero_grad(set_to_none=False)
            view.copy_(p.grad.reshape(-1))
        p.grad = None if self.stage >= 2 else view.view_as(p)
        self._arrived[bi][k] = True

    def _launch(self, bi: int) -> None:
        """Reduce-scatter bucket ``bi`` asynchronously (zeros for parameters without grads)."""
        b = self.buckets[bi]
        grads = self._grads(bi)
        for k, p in enumerate(b.params):
            if not self._arrived[bi][k]:
                if p.grad is not None:  # set by hand, or left by zero_grad(set_to_none=False)
                    self._take(bi, k, p)
                else:
                    grads[b.offsets[k]:b.offsets[k] + b.numels[k]].zero_()
        out = b.shard_grad if self.stage >= 2 else torch.empty_like(grads[:b.shard_size])
        self._transient += 0 if self.stage >= 2 else out.numel() * out.element_size()
        self.buffer_peak_bytes = max(self.buffer_peak_bytes, self._transient)
        work = None
        if self.world_size > 1:
            work = reduce_scatter_flat(out, grads, self.process_group, async_op=True)
        else:
            out.copy_(grads)
        self._work.append((bi, work, out))
        self._launched += 1
        # stage 2 keeps at most IN_FLIGHT full buckets: older ones are waited for and freed
        # while backward goes on (stage 1 keeps its buffers anyway)
        while self.stage >= 2 and len(self._work) > self.IN_FLIGHT:
            self._finish(*self._work.pop(0))

    def _finish(self, bi: int, work: Any, out: torch.Tensor) -> None:
        """Wait for bucket ``bi``'s reduce-scatter, average it; stage 2 frees the full bucket."""
        b = self.buckets[bi]
        if work is not None:
            work.wait()
        out.div_(self.world_size)  # gloo has no AVG: sum, then divide
        if self.stage == 1:
            b.grads[b.start:b.end].copy_(out)
        else:
            self._transient -= b.padded * b.grads.element_size()
            b.grads = None  # the full bucket is no longer needed

    # --- the step -------------------------------------------------------------------------

    @torch.no_grad()
    def sync_grads(self) -> None:
        """Launch the buckets backward did not complete, wait for every reduce-scatter, and
        hand each segment its averaged gradient (``None`` where no rank had one).
        :meth:`step` calls it; call it first to read the gradients (idempotent per step).

        Warning:
            Collective: every rank must call it (directly or through :meth:`step`).
        """
        if self._synced:
            return
        for bi in range(self._launched, len(self.buckets)):
            self._launch(bi)
        # every arrival is known now: agree on them while the reduce-scatters finish
        flags = torch.tensor([float(a) for arrived in self._arrived for a in arrived],
                             device=self.buckets[0].device if self.buckets else None)
        flag_work = None
        if self.world_size > 1 and self.buckets:
            flag_work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.process_group,
                                        async_op=True)
        for bi, work, out in self._work:
            self._finish(bi, work, out)
        self._work, self._transient = [], 0  # stage 1's outputs are freed here
        if flag_work is not None:
            flag_work.wait()
        it = iter(flags.tolist())
        for b in self.buckets:
            has = [next(it) > 0 for _ in b.params]
            shard = b.grads[b.start:b.end] if self.stage == 1 else b.shard_grad
            for seg, (k, lo, hi, at) in zip(b.segments, b.pieces, strict=True):
                seg.grad = shard[at:at + hi - lo] if has[k] else None  # None: not stepped
        self._synced = True

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Wait for the gradients, update this rank's slices, all-gather them.

        Warning:
            Collective: every rank must call it; on a subset of ranks it hangs.

        Returns:
            The closure's loss, or ``None``.

        Raises:
            RuntimeError: if a parameter frozen at construction now requires a gradient.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if any(p.requires_grad for p in self._frozen):  # before any collective
            raise RuntimeError("a parameter frozen when this ZeroOptimizer was built now "
                               "requires grad; build a new one (it loads state_dict())")
        self.sync_grads()
        for group, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            inner.update(_hyper(group))  # hyperparameters set on this wrapper (LR schedulers)
        self.optim.step()
        for b in self.buckets:
            for seg in b.segments:
                seg.grad = None
        self._share_updated()
        self._reset()
        return loss

    def _share_updated(self) -> None:
        """All-gather every bucket's updated slices into the parameters. Collective."""
        works = []
        if self.world_size > 1:
            for b in self.buckets:  # in place: this rank's slice is the input
                works.append(all_gather_flat(b.flat, b.flat[b.start:b.end], self.process_group,
                                             async_op=True))
        for w in works:
            w.wait()

    # --- state and memory -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state in ``optimizer_class``'s format, on every rank.

        Warning:
            Collective: every rank must call it (it all-gathers); on a subset it hangs.
        """
        return consolidated_state(self.buckets, self.optim, self.param_groups, self.world_size,
                                  self.process_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a consolidated state (from any world size, any ZeRO optimizer, or a plain
        ``optimizer_class``); each rank keeps its own pieces. Local, not collective.

        Raises:
            ValueError: if the number of groups or of parameters per group differs.
        """
        inner = shard_state(self.buckets, self.optim, self.param_groups, state_dict)
        for group, sg in zip(self.param_groups, state_dict["param_groups"], strict=True):
            group.update({k: v for k, v in sg.items() if k != "params"})
        self.optim.load_state_dict(inner)

    @property
    def launched_buckets(self) -> int:
        """Buckets whose reduce-scatter has started in this step (during backward, when
        every gradient of a bucket and of the buckets before it has arrived)."""
        return self._launched

    def shard_numel(self) -> int:
        """Elements of this rank's slices, padding included."""
        return sum(b.shard_size for b in self.buckets)

    def gradient_tensors(self) -> list[torch.Tensor]:
        """The tensors that hold gradients on this rank between backward and step: every
        full bucket (stage 1), this rank's reduced slices (stage 2)."""
        if self.stage == 1:
            return [b.grads for b in self.buckets if b.grads is not None]
        return [b.shard_grad for b in self.buckets]

    def remove_hooks(self) -> None:
        """Detach the gradient hooks (the optimizer no longer sees new gradients)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
