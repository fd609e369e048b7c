"""ZeRO stage 3 (FSDP) from scratch: parameters sharded too, gathered one block at a time.

Rajbhandari et al., *ZeRO* (SC 2020), stage 3 ("P_os+g+p"); Zhao et al., *PyTorch FSDP*
(VLDB 2023). Each *unit* (a block the user names, plus a root unit with every other
trainable parameter) keeps only its rank's slice of a flat, padded buffer. Before a
block's forward its parameters are all-gathered (the next block's gather is started
asynchronously at the same time: prefetch) and freed after it; during backward they are
gathered again when autograd first unpacks a tensor saved from them (saved-tensor hooks)
or is about to accumulate one of their gradients, and freed once every gradient of the
unit has arrived. Gradients are reduce-scattered and sharded as in ZeRO-2 by
``ZeroOptimizer(sharded, ..., stage=3)`` (:mod:`perfkit.parallel.zero`): 1.5x the bytes of
data parallelism per step (two all-gathers and a reduce-scatter against one all-reduce).

Mixed precision follows FSDP2's ``MixedPrecisionPolicy``: the shards (and the optimizer)
stay fp32; a unit is cast to ``param_dtype`` before its all-gather (half the bytes) and
computes in it; gradients are reduce-scattered in ``reduce_dtype`` and stepped in fp32.

Usage::

    sharded = ShardedModule(model, blocks=list(model.transformer.h),
                            mixed_precision=MixedPrecision(torch.bfloat16, torch.float32))
    opt = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=1e-3)   # perfkit.parallel.zero
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import check_items, check_type
from perfkit.parallel.buckets import ShardedBucket
from perfkit.parallel.flat import all_gather_flat

__all__ = ["MixedPrecision", "ShardedModule"]


@dataclass(frozen=True)
class MixedPrecision:
    """Dtypes of stage 3's gathered parameters and reduced gradients (FSDP2's
    ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``); the shards stay in their own.

    Attributes:
        param_dtype: dtype parameters are all-gathered and computed in, and floating-point
            forward inputs cast to (``None``: the shards' dtype).
        reduce_dtype: dtype gradients are reduce-scattered in (``None``: ``param_dtype``,
            as FSDP2 has it); the averaged slice is cast back to the shards' dtype.

    Raises:
        TypeError: for a dtype that is neither ``None`` nor a floating-point ``torch.dtype``.
    """

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        for name in ("param_dtype", "reduce_dtype"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, torch.dtype) and v.is_floating_point):
                raise TypeError(f"{name} must be None or a floating-point torch.dtype, got {v!r}")


def _cast(x: Any, dtype: torch.dtype) -> Any:
    """``x`` with every floating-point tensor in it (tuples, lists, dicts) cast to ``dtype``."""
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (tuple, list)):
        return type(x)(_cast(v, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _cast(v, dtype) for k, v in x.items()}
    return x


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
        mixed_precision: gathered-parameter and gradient-reduction dtypes (``None``: the
            parameters' own); then floating-point inputs of the module and of each block
            are cast to ``param_dtype``, as FSDP2's ``cast_forward_inputs`` does.
        unsharded: trainable parameters of ``module`` kept whole on every rank, never
            gathered nor cast (say small norms); unlike FSDP2's ``ignored_params`` their
            gradients are averaged (one all-reduce per step) and every rank steps them.

    State dicts hold whole parameters, in the shards' dtype: ``state_dict()`` of the wrapper
    (keys ``"module.<name>"``) or of ``module`` (its own names, as a plain model's) gathers
    every unit (collective), as FSDP's full state dict does; a submodule holding sharded
    parameters refuses its own ``state_dict()``. ``load_state_dict`` takes such a state,
    saved on any world size (or a plain model's, loaded into ``module``), and keeps this
    rank's slice of each parameter (local); it refuses ``assign=True`` and a state whose
    sharded entries are empty tensors (what the parameters hold between uses), naming the
    key. Loading is checked per submodule, as torch loads: a refusal leaves the submodules
    loaded before it loaded.

    Raises:
        TypeError: for a ``module`` or a block that is not an ``nn.Module``, a
            ``process_group`` that is not one, or a ``mixed_precision`` that is not a
            :class:`MixedPrecision`.
        ValueError: for a block that is not a submodule of ``module``, contains another
            block or shares a parameter with one, no trainable parameter at all, or an
            ``unsharded`` tensor that is not a trainable parameter of ``module``, is
            listed twice, or has another dtype than the other ``unsharded`` ones.

    Warning:
        Collective: every rank must run the same blocks' forward and backward, in the same
        order, every step (a block skipped on one rank makes the others hang), and call
        ``state_dict()`` together (it all-gathers every unit; on a subset of ranks it hangs).
    """

    def __init__(self, module: nn.Module, blocks: Sequence[nn.Module] = (),
                 process_group: Any = None, prefetch: bool = True,
                 reshard_root: bool = False, mixed_precision: MixedPrecision | None = None,
                 unsharded: Sequence[torch.Tensor] = ()) -> None:
        check_type("module", module, nn.Module)
        blocks = check_items("blocks", blocks, nonempty=False)
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        check_type("prefetch", prefetch, bool)
        check_type("reshard_root", reshard_root, bool)
        mp = check_type("mixed_precision", mixed_precision, MixedPrecision, optional=True)
        super().__init__()
        self.mixed_precision = mp
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
        listed = check_items("unsharded", unsharded, nonempty=False)
        for i, p in enumerate(listed):
            check_type(f"unsharded[{i}]", p, torch.Tensor)
        whole = {id(p) for p in listed}
        if not whole <= {id(p) for p in params if p.requires_grad} or len(whole) != len(
                listed) or len({p.dtype for p in listed}) > 1:
            raise ValueError("unsharded must list trainable parameters of module, each once, "
                             "of one dtype (their gradients are averaged in one all-reduce)")
        self.unsharded = [p for p in params if id(p) in whole]  # in parameters() order
        members = [[p for p in params if owned.get(id(p)) == i and id(p) not in whole]
                   for i in range(len(blocks))]
        members.append([p for p in params if id(p) not in owned and id(p) not in whole])
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
            u.param_dtype = (mp and mp.param_dtype) or u.dtype  # gathered in, computed in
            u.grad_dtype = (mp and (mp.reduce_dtype or mp.param_dtype)) or u.dtype
            u.full, u.send, u.work, u.ready = None, None, None, False
            u.root = i == len(blocks)
            if i < len(blocks):
                self._unit_of_block[i] = len(self.units)
            self.units.append(u)
        self._root = next((k for k, u in enumerate(self.units) if u.root), None)
        self._by_storage: dict[int, int] = {}  # data_ptr of a gathered buffer -> unit
        self.gathered_bytes = self.gathered_peak_bytes = 0
        for k, u in enumerate(self.units):
            self.free_unit(k)
            for p in u.params:  # before its gradient is accumulated, p must have its shape
                p.register_hook(self._before_accumulate(k))
        for i, blk in enumerate(blocks):
            if i in self._unit_of_block:
                blk.register_forward_pre_hook(lambda _m, a, i=i: self._enter(i, a))
                blk.register_forward_hook(lambda _m, _a, _o, i=i: self.free_unit(
                    self._unit_of_block[i]))
        # state dicts hold whole parameters: gathered on save, cut into shards on load
        self._where = {id(p): (k, j) for k, u in enumerate(self.units)
                       for j, p in enumerate(u.params)}  # id(param) -> (unit, index in it)
        self._saving = False  # inside the wrapped module's state_dict(): it gathers
        # lambdas, not bound methods: torch tags a post-hook with an attribute
        self._state_hooks = [module.register_state_dict_pre_hook(self._save_begins),
                             module.register_state_dict_post_hook(lambda *a: self._save_full(*a))]
        for name, m in module.named_modules():
            if any(id(p) in self._where for p in m.parameters(recurse=False)):
                self._state_hooks.append(m.register_load_state_dict_pre_hook(self._load_full))
                if m is not module:
                    self._state_hooks.append(m.register_state_dict_post_hook(
                        lambda *a, n=name: self._save_guard(n)))

    # --- gather and free ------------------------------------------------------------------

    def _start(self, k: int) -> None:
        """Start the all-gather of unit ``k`` (asynchronous) unless it is gathered. Collective."""
        u = self.units[k]
        if u.full is not None:
            return
        u.full = torch.empty(u.padded, dtype=u.param_dtype, device=u.device)
        self.gathered_bytes += u.full.numel() * u.full.element_size()
        self.gathered_peak_bytes = max(self.gathered_peak_bytes, self.gathered_bytes)
        self._by_storage[u.full.untyped_storage().data_ptr()] = k
        if self.world_size > 1:  # a cast copy lives until the gather is waited for
            u.send = u.shard.to(u.param_dtype)
            u.work = all_gather_flat(u.full, u.send, self.process_group, async_op=True)
        else:
            u.full.copy_(u.shard)

    def _gather(self, k: int) -> torch.Tensor:
        """Unit ``k``'s parameters, whole: gathered (or waited for) and set as their data."""
        self._start(k)
        u = self.units[k]
        if not u.ready:
            if u.work is not None:
                u.work.wait()
                u.work, u.send = None, None
            for p, off, n, shape in zip(u.params, u.offsets, u.numels, u.shapes, strict=True):
                p.data = u.full[off:off + n].view(shape)
            u.ready = True
        return u.full

    def free_unit(self, k: int) -> None:
        """Drop unit ``k``'s whole parameters (waiting for a gather still in flight); the
        stage-3 optimizer calls it once every gradient of the unit has arrived."""
        u = self.units[k]
        if u.work is not None:
            u.work.wait()
            u.work = None
        u.send = None
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

    def _enter(self, i: int, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        self._gather(self._unit_of_block[i])
        if self.prefetch and i + 1 in self._unit_of_block:  # overlap the next block's gather
            self._start(self._unit_of_block[i + 1])
        mp = self.mixed_precision
        return _cast(args, mp.param_dtype) if mp and mp.param_dtype else None

    def free_all(self) -> None:
        """Free every gathered unit (after backward; the stage-3 optimizer calls it)."""
        for k in range(len(self.units)):
            self.free_unit(k)

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
        mp = self.mixed_precision
        if mp and mp.param_dtype:
            args, kwargs = _cast(args, mp.param_dtype), _cast(kwargs, mp.param_dtype)
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            out = self.module(*args, **kwargs)
        if self.reshard_root and self._root is not None:
            self.free_unit(self._root)
        return out

    def _full_unit(self, k: int) -> torch.Tensor:
        """Unit ``k``'s flat layout ``(padded,)`` in the shards' dtype, from every rank's
        shard (a new buffer, whatever is gathered for compute). Collective."""
        u = self.units[k]
        full = torch.empty(u.padded, dtype=u.dtype, device=u.device)
        if self.world_size > 1:
            all_gather_flat(full, u.shard, self.process_group)
        else:
            full.copy_(u.shard)
        return full

    @torch.no_grad()
    def full_parameters(self) -> list[torch.Tensor]:
        """Copies of every parameter of ``module``, whole, in ``parameters()`` order.

        Warning:
            Collective: every rank must call it (one all-gather per unit).
        """
        out: list[torch.Tensor | None] = [None] * len(list(self.module.parameters()))
        for k, u in enumerate(self.units):
            full = self._full_unit(k)
            for pos, off, n, shape in zip(u.positions, u.offsets, u.numels, u.shapes, strict=True):
                out[pos] = full[off:off + n].view(shape).clone()
        return [o if o is not None else p.detach().clone()
                for o, p in zip(out, self.module.parameters(), strict=True)]

    # --- state dicts: whole parameters, never the empty tensors they hold between uses ---

    def _save_begins(self, _module: nn.Module, _prefix: str, _keep_vars: bool) -> None:
        self._saving = True

    @torch.no_grad()
    def _save_full(self, module: nn.Module, state: dict[str, Any], prefix: str,
                   _meta: Any) -> None:
        """The wrapped module's ``state_dict()`` ends here: each sharded parameter's entry
        (an empty tensor) becomes its whole value, gathered one unit at a time. Collective."""
        try:
            names: dict[int, list[str]] = {}
            for name, p in module.named_parameters(remove_duplicate=False):
                names.setdefault(id(p), []).append(prefix + name)
            for k, u in enumerate(self.units):
                full = self._full_unit(k)
                for p, off, n, shape in zip(u.params, u.offsets, u.numels, u.shapes, strict=True):
                    whole = full[off:off + n].view(shape).clone()  # its own storage, to save
                    for key in names.get(id(p), []):
                        state[key] = whole
        finally:
            self._saving = False

    def _save_guard(self, name: str) -> None:
        if not self._saving:
            raise RuntimeError(f"state_dict() of submodule {name!r} of a ShardedModule's module "
                               "would hold empty tensors (its parameters are "
                               "sharded): call state_dict() on the ShardedModule or its wrapped "
                               "module, which gathers them (collective)")

    @torch.no_grad()
    def _load_full(self, module: nn.Module, state: dict[str, Any], prefix: str, meta: Any,
                   *_rest: Any) -> None:
        """Before ``module`` loads its own parameters: cut each whole one in ``state`` into
        this rank's shard, and leave torch an empty tensor to copy into the empty parameter.
        Every entry is checked before any shard changes. Local, not collective."""
        if meta.get("assign_to_params_buffers", False):
            raise ValueError("load_state_dict(assign=True) would replace the sharded parameters "
                             "with new tensors that no unit holds; load with assign=False")
        todo = []
        for name, p in module.named_parameters(recurse=False, remove_duplicate=False):
            key = prefix + name
            if id(p) not in self._where or key not in state:
                continue  # not sharded, or missing: torch reports missing keys
            k, j = self._where[id(p)]
            shape, t = self.units[k].shapes[j], state[key]
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"state_dict[{key!r}] must be a tensor, got {type(t).__name__}")
            if t.shape != shape and t.numel() == 0:
                raise ValueError(f"state_dict[{key!r}] is an empty tensor where the parameter has "
                                 f"shape {tuple(shape)}: a state saved from a sharded module's "
                                 "empty parameters, not its values; save with "
                                 "ShardedModule.state_dict(), which gathers them")
            if t.shape != shape:
                raise ValueError(f"state_dict[{key!r}] has shape {tuple(t.shape)}, the parameter "
                                 f"{tuple(shape)}")
            todo.append((key, k, j, t))
        for key, k, j, t in todo:
            u = self.units[k]
            self.free_unit(k)  # a gathered copy would be stale
            flat = t.detach().reshape(-1)  # (numel,)
            for _j, lo, hi, at in (piece for piece in u.pieces if piece[0] == j):
                u.shard[at:at + hi - lo].copy_(flat[lo:hi])
            state[key] = torch.empty(0, dtype=u.dtype, device=u.device)
