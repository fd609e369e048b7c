"""ZeRO stages 1, 2 and 3 around any ``torch.optim`` optimizer: one class, a ``stage`` argument.

Rajbhandari et al., *ZeRO* (SC 2020): stage 1 shards the optimizer state, stage 2 the
gradients too, stage 3 the parameters as well (held by a :class:`ShardedModule`). The
parameters lie in DDP-ordered buckets (:mod:`perfkit.parallel.buckets`), rank ``r`` owning
slice ``r`` of each; a bucket's reduce-scatter starts *during backward* (Li et al., VLDB
2020); :meth:`ZeroOptimizer.step` steps this rank's slices and, at stages 1-2, starts one
asynchronous all-gather per bucket that the next forward waits for in a pre-hook.

Why one class with a ``stage`` and not one per stage: the stages share the layout, the
gradient path (:class:`perfkit.parallel.BucketReducer`), the step, ``torch.optim``'s
``None``-gradient contract and the one consolidated ``state_dict``; they differ in three
decisions, each a visible ``if`` on ``stage``: keep the full gradient (1) or free it once
reduced (2, 3; in the reducer); all-gather the updated slices (1, 2) or let the module
gather them (3); free a unit's parameters once its gradients are in (3). Subclasses
would be a few lines each, hiding those decisions in overrides.

Usage::

    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=2, module=model, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()          # step() is collective
    opt3 = ZeroOptimizer(ShardedModule(model, blocks), torch.optim.AdamW, stage=3, lr=1e-3)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import check_choice, check_real, check_type
from perfkit.parallel.buckets import (
    ShardedBucket,
    build_buckets,
    check_param_groups,
    consolidated_state,
    flat_buckets,
    shard_state,
)
from perfkit.parallel.clip import clip_grad_norm_
from perfkit.parallel.data_parallel import DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES
from perfkit.parallel.flat import all_gather_flat
from perfkit.parallel.reducer import BucketReducer
from perfkit.parallel.sharded_grad import clear_sharded_gradients
from perfkit.parallel.zero3 import ShardedModule

__all__ = ["ZeroOptimizer"]


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


class ZeroOptimizer(torch.optim.Optimizer):
    """ZeRO stage 1, 2 or 3 for ``optimizer_class``; one slice of every bucket per rank.

    Layout: each group's trainable parameters are bucketed in backward order (about
    ``bucket_cap_mb``, whole tensors, DDP's sizes by default; stage 3: the module's units),
    one flat buffer per bucket padded to a multiple of ``N``; rank ``r`` owns slice ``r``,
    so its optimizer state is ``sum(ceil(bucket_numel / N))`` elements. Stages 1-2 make
    the parameters views into their bucket's buffer. Stage 3 steps the module's
    ``unsharded`` parameters whole on every rank, after one all-reduce averages their
    gradients.

    Gradients: with ``overlap`` each is read when its ``post_accumulate_grad`` hook fires,
    a bucket reduce-scattered once it and every bucket before it are complete (one
    backward per step); without, :meth:`step` reads ``p.grad`` (accumulated over any
    number of backward passes). Stage 1 keeps the full gradient (``p.grad`` a view into
    the bucket, this rank's slice averaged after :meth:`step`); stages 2-3 free it once
    copied, at most ``IN_FLIGHT`` full buckets alive. As in ``torch.optim``, a parameter
    whose grad is ``None`` on every rank is not updated nor its state advanced (one
    all-reduce of a flag per parameter per step); one with a gradient on some ranks gets
    their average. A parameter frozen at construction is never sharded or communicated.

    Clipping: the gradients the step uses are this rank's slices, so clip them with
    :meth:`clip_grad_norm_` between backward and :meth:`step` (their norm over every rank).
    ``torch.nn.utils.clip_grad_norm_(model.parameters(), ...)`` cannot: at stages 2-3 each
    parameter's ``.grad`` is then a :class:`perfkit.parallel.ShardedGradient`, which raises
    on use, naming this method (as ``None`` it would return 0 and clip nothing, silently;
    :meth:`step` and :meth:`zero_grad` set it back to ``None``); at stage 1 with
    ``overlap`` they hold this rank's un-averaged gradient, already read by backward, so
    the step raises when it finds them changed; at stages 1-2 without ``overlap`` it
    would clip each rank's gradient by that rank's own norm before the average, which no
    check can tell from a legitimate scaling.

    Updated parameters (stages 1-2): :meth:`step` starts one asynchronous all-gather per
    bucket. With ``overlap`` and ``module``, a forward pre-hook on each submodule holding
    a bucket's parameters waits for that bucket (later layers' gathers run during earlier
    layers' forward), as do ``module.state_dict()``/``load_state_dict()``, :meth:`step`
    and :meth:`state_dict`; elsewhere (a parent reading a child's weight in its own
    forward too) call :meth:`wait_params` first. Without either, :meth:`step` waits.
    ``zero_grad`` does not wait: it touches only gradients, and waiting there would
    serialize the usual ``zero_grad(); model(x)``.

    Args:
        params: tensors or parameter-group dicts as for any ``torch.optim`` optimizer (all
            tensors of a group share dtype and device; floating point only); at stage 3
            the :class:`perfkit.parallel.ShardedModule` (one group, its parameters).
        optimizer_class: the ``torch.optim.Optimizer`` subclass to wrap (e.g. ``AdamW``).
        stage: 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too).
        bucket_cap_mb: bucket size in MiB (stages 1-2; a tensor is never split); ``None``:
            DDP's default, 25 MiB with a first bucket of 1 MiB (the last layers' gradients,
            complete first, start their reduce-scatter early); a number sets every bucket,
            the first included, as ``DistributedDataParallel(bucket_cap_mb=...)`` does.
        process_group: the data-parallel group; ``None`` means WORLD, or one process when
            ``torch.distributed`` is not initialised (stage 3: the module's group).
        reduce_grads: ``False`` for gradients already averaged (``DistributedDataParallel``;
            stage 1 only): each rank reads its slices, nothing is reduced.
        overlap: reduce-scatter during backward and wait for the all-gather in the next
            forward; ``False``: both inside :meth:`step` (the blocking version).
        module: the model whose forward reads the parameters (stages 1-2), for the
            forward pre-hooks described above; ``None``: :meth:`step` waits.
        **defaults: keyword arguments for ``optimizer_class`` (``lr``, ``weight_decay``...).

    Raises:
        TypeError, ValueError: for ``params`` as :func:`perfkit.parallel.check_param_groups`
            says; a non-optimizer ``optimizer_class``; a ``process_group`` or ``module`` of
            the wrong type or a non-bool flag (TypeError); a ``stage`` not 1-3 or not
            matching ``params`` (a ShardedModule iff 3), ``reduce_grads=False`` above stage
            1, a ``module`` at stage 3 or holding none of the parameters, a
            ``bucket_cap_mb`` below one byte (ValueError).

    Warning:
        Collective: every rank must run backward and :meth:`step` each step, and
        :meth:`state_dict`, with the same parameters; on a subset of ranks it hangs.
    """

    IN_FLIGHT = 2  # stages 2-3: full bucket buffers alive at once during backward

    def __init__(self, params: Iterable[Any] | ShardedModule,
                 optimizer_class: type[torch.optim.Optimizer], stage: int = 1,
                 bucket_cap_mb: float | None = None, process_group: Any = None,
                 reduce_grads: bool = True, overlap: bool = True,
                 module: nn.Module | None = None, **defaults: Any) -> None:
        if not (isinstance(optimizer_class, type)
                and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError("optimizer_class must be a torch.optim.Optimizer subclass, got "
                            f"{optimizer_class!r}")
        check_choice("stage", stage, (1, 2, 3))
        if bucket_cap_mb is not None:
            check_real("bucket_cap_mb", bucket_cap_mb, 2.0**-20)
        check_type("reduce_grads", reduce_grads, bool)
        check_type("overlap", overlap, bool)
        check_type("module", module, nn.Module, optional=True)
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        sharded = params if isinstance(params, ShardedModule) else None
        if (stage == 3) != (sharded is not None):
            raise ValueError(f"stage 3 takes the ShardedModule that holds the parameters as "
                             f"params, stages 1-2 take parameters; got stage={stage} and "
                             f"params of type {type(params).__name__}")
        if not reduce_grads and stage != 1:
            raise ValueError(f"reduce_grads=False (gradients averaged by DDP) needs stage 1, "
                             f"got stage={stage}: DDP keeps the full gradients stage 2 shards")
        if module is not None and stage == 3:
            raise ValueError("module is for stages 1-2; stage 3's ShardedModule gathers its "
                             "own parameters")
        if sharded is not None:
            params, process_group = list(sharded.module.parameters()), sharded.process_group
        super().__init__(check_param_groups(params, stage), defaults)
        self.optimizer_class, self.stage, self.sharded = optimizer_class, stage, sharded
        self.reduce_grads, self.overlap = reduce_grads, overlap
        distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group if distributed else None
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self._frozen = [p for g in self.param_groups for p in g["params"] if not p.requires_grad]
        cap, first = (DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES) if bucket_cap_mb is None \
            else (int(bucket_cap_mb * 2**20), None)
        self.buckets = self._build_buckets(cap, first)
        for b in self.buckets:
            b.gather = None  # handle of the all-gather of its updated slices in flight
        self.reducer = BucketReducer(self.buckets, stage, self.world_size, self.process_group,
                                     reduce_grads, hooks=overlap, in_flight=self.IN_FLIGHT,
                                     on_complete=sharded.free_unit if sharded else None)
        self._waits_in_forward = overlap and module is not None
        self._hooks = self._forward_waits(module) if module is not None else []
        self._has: list[list[bool]] | None = None  # per bucket and param, once synced
        # stage 3's unsharded parameters: (group 0, position, tensor), stepped whole by each rank
        position = {id(p): i for i, p in enumerate(self.param_groups[0]["params"])}
        self._whole = [(0, position[id(p)], p) for p in (sharded.unsharded if sharded else [])]
        mine = [[s for b in self.buckets if b.group == gi for s in b.segments] +
                [p for g, _, p in self._whole if g == gi] for gi in range(len(self.param_groups))]
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

    def _build_buckets(self, cap_bytes: int, first_bytes: int | None) -> list[ShardedBucket]:
        """Stages 1-2: bucket the groups' parameters, which become views into each bucket's
        ``flat`` ``(padded,)``; stage 3: the module's units. This rank's pieces of the slice
        are the wrapped optimizer's leaves."""
        if self.sharded is not None:
            for u in self.sharded.units:
                u.segments = [nn.Parameter(u.shard[at:at + hi - lo]) for _k, lo, hi, at in u.pieces]
            return self.sharded.units
        return flat_buckets(build_buckets([g["params"] for g in self.param_groups], cap_bytes,
                                          self.world_size, self.rank, first_bytes))

    def _forward_waits(self, module: nn.Module) -> list[Any]:
        """Hooks that wait for the all-gathers a forward (or a module state dict) reads."""
        where = {id(p): bi for bi, b in enumerate(self.buckets) for p in b.params}
        hooks = []
        for m in module.modules():  # every holder waits: no forward order is assumed
            mine = sorted({where[id(p)] for p in m.parameters(recurse=False) if id(p) in where})
            if mine:
                hooks.append(m.register_forward_pre_hook(lambda _m, _a, bis=mine: self._wait(bis)))
        if not hooks:
            raise ValueError("module holds none of the trainable parameters in params")
        hooks.append(module.register_state_dict_pre_hook(lambda *_: self.wait_params()))
        hooks.append(module.register_load_state_dict_pre_hook(lambda *_: self.wait_params()))
        return hooks

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Only the constructor adds groups: the buckets are fixed after it.

        Raises:
            NotImplementedError: after construction.
        """
        if hasattr(self, "buckets"):
            raise NotImplementedError(f"ZeRO-{self.stage} cannot add a param group after "
                                      "construction; build a new ZeroOptimizer with every group")
        super().add_param_group(param_group)

    # --- the step -------------------------------------------------------------------------

    @torch.no_grad()
    def sync_grads(self) -> None:
        """Launch the buckets backward did not complete, wait for every reduce-scatter, and
        hand each segment its averaged gradient (``None`` where no rank had one).
        :meth:`step` calls it; call it first to read the gradients (idempotent per step).

        Raises:
            RuntimeError: on every rank, at stage 1 with ``overlap``, if a gradient was
                changed in place after backward had read it (see Clipping above).

        Warning:
            Collective: every rank must call it (directly or through :meth:`step`).
        """
        if self._has is not None:
            return
        self._has = self.reducer.sync()
        for b, has in zip(self.buckets, self._has, strict=True):
            shard = b.reduced.to(b.dtype)  # stage 3 may reduce in a lower dtype; steps fp32
            for seg, (k, lo, hi, at) in zip(b.segments, b.pieces, strict=True):
                seg.grad = shard[at:at + hi - lo] if has[k] else None  # None: not stepped
        if self.stage == 3:
            self.sharded.free_all()  # units whose gradients never all arrived
            self._average_whole()

    def _average_whole(self) -> None:
        """Average the unsharded parameters' gradients over ranks: one all-reduce of a flag
        per parameter (``None`` on every rank: not stepped) and the gradients (zeros where
        ``None``). Collective."""
        ps = [p for _, _, p in self._whole]
        if not ps:
            return
        flat = torch.cat([torch.tensor([float(p.grad is not None) for p in ps], dtype=ps[0].dtype,
                                       device=ps[0].device),
                          *[(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                            for p in ps]])  # (len(ps) + sum numel,)
        if self.world_size > 1:
            dist.all_reduce(flat, group=self.process_group)  # gloo has no AVG: sum, divide
        at = len(ps)
        for i, p in enumerate(ps):
            g = flat[at:at + p.numel()].view_as(p).div_(self.world_size)
            p.grad, at = (g if flat[i] > 0 else None), at + p.numel()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Wait for the gradients, update this rank's slices, start sharing them.

        Warning:
            Collective: every rank must call it; on a subset of ranks it hangs.

        Returns:
            The closure's loss, or ``None``.

        Raises:
            RuntimeError: if a parameter frozen at construction now requires a gradient, or
                as :meth:`sync_grads` says.
        """
        self.wait_params()  # the step writes the slices the last all-gather reads
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if any(p.requires_grad for p in self._frozen):  # before any collective
            raise RuntimeError(f"a parameter frozen when this ZeRO-{self.stage} optimizer was "
                               "built now requires grad; build a new one (it loads state_dict())")
        self.sync_grads()
        for group, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            inner.update(_hyper(group))  # hyperparameters set on this wrapper (LR schedulers)
        self.optim.step()
        for b in self.buckets:
            for seg in b.segments:
                seg.grad = None
        if self.stage < 3 and self.world_size > 1:  # stage 3: the next forward gathers
            for b in self.buckets:  # in place: this rank's slice is the input
                b.gather = all_gather_flat(b.flat, b.flat[b.start:b.end], self.process_group,
                                           async_op=True)
        if not self._waits_in_forward:
            self.wait_params()
        self.reducer.reset()
        self._has = None
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim.Optimizer.zero_grad``; a :class:`ShardedGradient` marker is set
        to ``None`` whatever ``set_to_none`` says (it holds nothing to zero)."""
        clear_sharded_gradients(p for group in self.param_groups for p in group["params"])
        super().zero_grad(set_to_none)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False) -> torch.Tensor:
        """Scale the gradients :meth:`step` will use so that their norm over every rank is
        at most ``max_norm``; return that norm, what ``torch.nn.utils.clip_grad_norm_``
        returns on the unsharded model (:func:`perfkit.parallel.clip_grad_norm_` over this
        rank's slices, stage 3's unsharded parameters counted once). Call it after
        backward, before :meth:`step`; it runs :meth:`sync_grads`.

        Raises:
            TypeError, ValueError, RuntimeError: as :func:`perfkit.parallel.clip_grad_norm_`.

        Warning:
            Collective: every rank must call it (the reduce-scatters and one all-reduce).
        """
        self.sync_grads()
        return clip_grad_norm_([s for b in self.buckets for s in b.segments], max_norm,
                               norm_type, error_if_nonfinite,
                               replicated=[p for _, _, p in self._whole],
                               process_group=self.process_group)

    def _wait(self, bis: Sequence[int]) -> None:
        for bi in bis:
            b = self.buckets[bi]
            if b.gather is not None:
                b.gather.wait()
                b.gather = None

    def wait_params(self) -> None:
        """Wait for every all-gather of updated parameters still in flight (local: each
        rank waits for a collective every rank already started)."""
        self._wait(range(len(self.buckets)))

    @property
    def params_in_flight(self) -> int:
        """Buckets whose updated parameters are still being all-gathered."""
        return sum(b.gather is not None for b in self.buckets)

    # --- state and memory -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state in ``optimizer_class``'s format, the same on every rank:
        it loads into a plain ``optimizer_class`` or a ``ZeroOptimizer`` of any stage and
        world size.

        Warning:
            Collective: every rank must call it (it all-gathers); on a subset it hangs.
        """
        self.wait_params()
        return consolidated_state(self.buckets, self.optim, self.param_groups, self.world_size,
                                  self.process_group, self._whole)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a consolidated state (any stage or world size, or a plain
        ``optimizer_class``'s); each rank keeps its own pieces. Local, not collective.

        Raises:
            TypeError: for a ``state_dict`` that is not a dict.
            ValueError: if the number of groups or of parameters per group differs.
        """
        inner = shard_state(self.buckets, self.optim, self.param_groups, state_dict, self._whole)
        for group, sg in zip(self.param_groups, state_dict["param_groups"], strict=True):
            group.update({k: v for k, v in sg.items() if k != "params"})
        self.optim.load_state_dict(inner)

    @property
    def launched_buckets(self) -> int:
        """Buckets whose reduce-scatter has started in this step (during backward, when
        every gradient of a bucket and of the buckets before it has arrived)."""
        return self.reducer.launched

    @property
    def buffer_peak_bytes(self) -> int:
        """Largest bytes of transient bucket buffers and outputs alive at once so far."""
        return self.reducer.buffer_peak_bytes

    def shard_numel(self) -> int:
        """Elements of this rank's slices, padding included."""
        return sum(b.shard_size for b in self.buckets)

    def shard_state_bytes(self) -> int:
        """Bytes of optimizer state held by this rank (its slices only)."""
        from perfkit.memory.model_states import optimizer_state_bytes

        return optimizer_state_bytes(self.optim)

    def gradient_tensors(self) -> list[torch.Tensor]:
        """The tensors that hold gradients on this rank between backward and step: every
        full bucket (stage 1), this rank's reduced slices (stages 2-3)."""
        return self.reducer.gradient_tensors()

    def remove_hooks(self) -> None:
        """Detach the gradient and forward hooks (after :meth:`wait_params`)."""
        self.wait_params()
        self.reducer.remove_hooks()
        for h in self._hooks:
            h.remove()
        self._hooks, self._waits_in_forward = [], False
