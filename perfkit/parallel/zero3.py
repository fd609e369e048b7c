"""ZeRO stage 3 (FSDP) from scratch: parameters sharded too, gathered one block at a time.

Rajbhandari et al., *ZeRO* (SC 2020), stage 3 ("P_os+g+p"); Zhao et al., *PyTorch FSDP*
(VLDB 2023). Each *unit* (a block the user names, plus a root unit with every other
trainable parameter) keeps only its rank's slice of a flat, padded buffer. Before a
block's forward its parameters are all-gathered (the next block's gather is started
asynchronously at the same time: prefetch) and freed after it; during backward they are
gathered again when autograd first unpacks a tensor saved from them (saved-tensor hooks)
or is about to accumulate one of their gradients, and freed once every gradient of the
unit has arrived. Gradients are reduce-scattered and sharded as in ZeRO-2
(:class:`perfkit.parallel.ZeroOptimizer`): 1.5x the bytes of data parallelism per step
(two all-gathers and a reduce-scatter of the parameters against one all-reduce).

Usage::

    sharded = ShardedModule(model, blocks=list(model.transformer.h))
    opt = ZeroThreeOptimizer(sharded, torch.optim.AdamW, lr=1e-3)
    sharded(x).loss.backward(); opt.step(); opt.zero_grad()      # step() is collective
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import check_items, check_type
from perfkit.parallel.buckets import ShardedBucket
from perfkit.parallel.flat import all_gather_flat
from perfkit.parallel.zero2 import ZeroOptimizer

__all__ = ["ShardedModule", "ZeroThreeOptimizer"]


class ShardedModule(nn.Module):
    """Wrap ``module`` so that each rank holds 1/N of its trainable parameters.

    The wrapped module's parameters stay registered (its ``parameters()`` order numbers
    the optimizer state) but hold no data outside a unit's forward and backward: a
    trainable ``p`` is an empty tensor then; :meth:`full_parameters` gathers them.
    Frozen parameters (``requires_grad=False``) are kept whole and never communicated.
    The root unit stays gathered from the start of forward until its gradients arrive,
    unless ``reshard_root`` (then it is freed after forward and gathered again in backward,
    like every block: stage 3's full 1.5x traffic, for less memory).

    Args:
        module: the model.
        blocks: submodules gathered one at a time, in forward order (say a transformer's
            layers); none may contain another or share a parameter with another.
        process_group: the data-parallel group (``None``: WORLD, or one process when
            ``torch.distributed`` is not initialised).
        prefetch: start the all-gather of block ``i + 1`` when block ``i`` starts.
        reshard_root: free the root unit after forward too. Then the root's tensors must
            be used in the same backward order on every rank (no branch taken on some ranks
            only), since the gather they trigger is collective.

    Raises:
        TypeError: for a ``module`` or a block that is not an ``nn.Module``, or a
            ``process_group`` that is not one.
        ValueError: for a block that is not a submodule of ``module``, contains another
            block or shares a parameter with one, or no trainable parameter at all.

    Warning:
        Collective: every rank must run the same blocks' forward and backward, in the same
        order, every step (a block skipped on one rank makes the others hang).
    """

    def __init__(self, module: nn.Module, blocks: Sequence[nn.Module] = (),
                 process_group: Any = None, prefetch: bool = True,
                 reshard_root: bool = False) -> None:
        check_type("module", module, nn.Module)
        blocks = check_items("blocks", blocks, nonempty=False)
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        check_type("prefetch", prefetch, bool)
        check_type("reshard_root", reshard_root, bool)
        super().__init__()
        self.module, self.prefetch, self.reshard_root = module, prefetch, reshard_root
        distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group if distributed else None
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        params = list(module.parameters())
        position = {id(p): i for i, p in enumerate(params)}
        subs = {id(m) for m in module.modules()}
        owned: dict[int, int] = {}  # id(param) -> block index
        for i, blk in enumerate(blocks):
            check_type(f"blocks[{i}]", blk, nn.Module)
            if id(blk) not in subs or blk is module:
                raise ValueError(f"blocks[{i}] is not a submodule of module")
            for p in blk.parameters():
                if id(p) in owned:
                    raise ValueError(f"blocks[{i}] shares a parameter with blocks[{owned[id(p)]}]"
                                     " (nested blocks or tied weights): list disjoint blocks")
                owned[id(p)] = i
        members = [[p for p in params if owned.get(id(p)) == i] for i in range(len(blocks))]
        members.append([p for p in params if id(p) not in owned])  # the root unit
        if not any(p.requires_grad for p in params):
            raise ValueError("module has no parameter with requires_grad=True")
        self.blocks = blocks
        # units in the order backward completes them (last block first, root last): the
        # reduce-scatters are launched in this order on every rank
        self.units: list[ShardedBucket] = []
        self._unit_of_block: dict[int, int] = {}
        for i in [*reversed(range(len(blocks))), len(blocks)]:
            trainable = [p for p in members[i] if p.requires_grad]
            if not trainable:
                continue
            u = ShardedBucket(trainable, [position[id(p)] for p in trainable], 0,
                              self.world_size, self.rank)
            u.shard = u.flatten()[u.start:u.end].clone()  # (shard_size,): this rank's slice
            u.full, u.work, u.ready, u.root = None, None, False, i == len(blocks)
            if i < len(blocks):
                self._unit_of_block[i] = len(self.units)
            self.units.append(u)
        self._root = next((k for k, u in enumerate(self.units) if u.root), None)
        self._by_storage: dict[int, int] = {}  # data_ptr of a gathered buffer -> unit
        self.gathered_bytes = self.gathered_peak_bytes = 0
        for k, u in enumerate(self.units):
            self._free(k)
            for p in u.params:  # before its gradient is accumulated, p must have its shape
                p.register_hook(self._before_accumulate(k))
        for i, blk in enumerate(blocks):
            if i in self._unit_of_block:
                blk.register_forward_pre_hook(lambda _m, _a, i=i: self._enter(i))
                blk.register_forward_hook(lambda _m, _a, _o, i=i: self._free(
                    self._unit_of_block[i]))

    # --- gather and free ------------------------------------------------------------------

    def _start(self, k: int) -> None:
        """Start the all-gather of unit ``k`` (asynchronous) unless it is gathered. Collective."""
        u = self.units[k]
        if u.full is not None:
            return
        u.full = torch.empty(u.padded, dtype=u.dtype, device=u.device)
        self.gathered_bytes += u.full.numel() * u.full.element_size()
        self.gathered_peak_bytes = max(self.gathered_peak_bytes, self.gathered_bytes)
        self._by_storage[u.full.untyped_storage().data_ptr()] = k
        if self.world_size > 1:
            u.work = all_gather_flat(u.full, u.shard, self.process_group, async_op=True)
        else:
            u.full.copy_(u.shard)

    def _gather(self, k: int) -> torch.Tensor:
        """Unit ``k``'s parameters, whole: gathered (or waited for) and set as their data."""
        self._start(k)
        u = self.units[k]
        if not u.ready:
            if u.work is not None:
                u.work.wait()
                u.work = None
            for p, off, n, shape in zip(u.params, u.offsets, u.numels, u.shapes, strict=True):
                p.data = u.full[off:off + n].view(shape)
            u.ready = True
        return u.full

    def _free(self, k: int) -> None:
        """Drop unit ``k``'s whole parameters (waiting for a gather still in flight)."""
        u = self.units[k]
        if u.work is not None:
            u.work.wait()
            u.work = None
        if u.full is not None:
            self._by_storage.pop(u.full.untyped_storage().data_ptr(), None)
            self.gathered_bytes -= u.full.numel() * u.full.element_size()
            u.full = None
        u.ready = False
        for p in u.params:
            p.data = torch.empty(0, dtype=u.dtype, device=u.device)

    def _before_accumulate(self, k: int) -> Any:
        def hook(_grad: torch.Tensor) -> None:
            self._gather(k)
        return hook

    def _enter(self, i: int) -> None:
        self._gather(self._unit_of_block[i])
        if self.prefetch and i + 1 in self._unit_of_block:  # overlap the next block's gather
            self._start(self._unit_of_block[i + 1])

    def free_all(self) -> None:
        """Free every gathered unit (after backward; :class:`ZeroThreeOptimizer` calls it)."""
        for k in range(len(self.units)):
            self._free(k)

    # --- forward and backward -------------------------------------------------------------

    def _pack(self, t: torch.Tensor) -> Any:
        """A tensor saved for backward that is a gathered parameter: keep where it lies, not
        the tensor, so that freeing the unit frees it."""
        try:
            k = self._by_storage.get(t.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):  # no plain storage
            return t
        if k is None:
            return t
        return k, t.storage_offset(), tuple(t.shape), tuple(t.stride())

    def _unpack(self, saved: Any) -> torch.Tensor:
        if isinstance(saved, torch.Tensor):
            return saved
        k, offset, shape, stride = saved
        return self._gather(k).as_strided(shape, stride, offset)  # gathered again if freed

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Gather the root unit, run the module with saved-tensor hooks. Collective."""
        if self._root is not None:
            self._gather(self._root)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            out = self.module(*args, **kwargs)
        if self.reshard_root and self._root is not None:
            self._free(self._root)
        return out

    @torch.no_grad()
    def full_parameters(self) -> list[torch.Tensor]:
        """Copies of every parameter of ``module``, whole, in ``parameters()`` order.

        Warning:
            Collective: every rank must call it (one all-gather per unit).
        """
        out: list[torch.Tensor | None] = [None] * len(list(self.module.parameters()))
        for u in self.units:
            full = torch.empty(u.padded, dtype=u.dtype, device=u.device)
            if self.world_size > 1:
                all_gather_flat(full, u.shard, self.process_group)
            else:
                full.copy_(u.shard)
            for pos, off, n, shape in zip(u.positions, u.offsets, u.numels, u.shapes, strict=True):
                out[pos] = full[off:off + n].view(shape).clone()
        return [o if o is not None else p.detach().clone()
                for o, p in zip(out, self.module.parameters(), strict=True)]


class ZeroThreeOptimizer(ZeroOptimizer):
    """The optimizer of a :class:`ShardedModule`: ZeRO-2's gradient path on its units.

    One parameter group (the module's parameters in ``parameters()`` order); the wrapped
    ``optimizer_class`` steps this rank's pieces of each unit's shard in place, and the
    next forward gathers them. Gradient hooks, ``None``-gradient semantics and
    :meth:`state_dict` are :class:`ZeroOptimizer`'s.

    Args:
        sharded: the :class:`ShardedModule`.
        optimizer_class: the ``torch.optim.Optimizer`` subclass to wrap.
        **defaults: keyword arguments for ``optimizer_class``.

    Raises:
        TypeError: for a ``sharded`` that is not a :class:`ShardedModule`; as
            :class:`ZeroOptimizer` otherwise.

    Warning:
        Collective: every rank must run backward and :meth:`step` each step.
    """

    def __init__(self, sharded: ShardedModule, optimizer_class: type[torch.optim.Optimizer],
                 **defaults: Any) -> None:
        check_type("sharded", sharded, ShardedModule)
        self.sharded = sharded
        super().__init__(list(sharded.module.parameters()), optimizer_class, stage=2,
                         process_group=sharded.process_group, **defaults)
        self.stage = 3

    def _build_buckets(self, cap_bytes: int) -> list[ShardedBucket]:
        """The module's units; the optimizer's leaves are pieces of their shards."""
        for u in self.sharded.units:
            u.segments = [nn.Parameter(u.shard[at:at + hi - lo]) for _k, lo, hi, at in u.pieces]
        return self.sharded.units

    def _complete(self, bi: int) -> None:
        self.sharded._free(bi)  # every gradient of the unit is in: its parameters can go

    def sync_grads(self) -> None:  # noqa: D102 (ZeroOptimizer's, plus freeing every unit)
        super().sync_grads()
        self.sharded.free_all()

    def _share_updated(self) -> None:
        """Nothing to share: the next forward gathers the updated shards."""
