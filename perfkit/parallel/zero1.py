"""ZeRO stage 1: shard the optimizer state of any ``torch.optim`` optimizer across ranks.

Rajbhandari et al., *ZeRO* (SC 2020), stage 1 ("P_os"): every data-parallel rank keeps the
whole model and its whole gradient, but the optimizer state (Adam's momentum and
variance, 8 of 16 bytes per fp32 parameter) only for a 1/N slice of the parameters. Each
step averages the gradients (a reduce-scatter hands every rank the averaged gradient of
its slice), updates the slice, and all-gathers the updated slices. A reduce-scatter plus
an all-gather moves the same bytes as the all-reduce plain data parallelism needs, while
the update does 1/N of the work, so ZeRO-1 should cost no time and saves
``K Ψ (N - 1) / N`` bytes per rank (see :func:`perfkit.memory.zero_model_states`).

Usage::

    opt = ZeroOneOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()     # step() is collective
    torch.save(opt.state_dict(), "opt.pt")           # state_dict() is collective
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from perfkit.parallel.flat import all_gather_flat, reduce_scatter_flat, shard_range

__all__ = ["ZeroOneOptimizer"]


class _FlatGroup:
    """One parameter group flattened: its trainable parameters are views into ``flat``.

    ``segments`` are this rank's pieces of those parameters: leaf tensors that *are* their
    part of slice r of the buffer, one per parameter that overlaps the slice, so the
    wrapped optimizer keeps state (and a step count) per parameter, as ``torch.optim`` does.
    """

    def __init__(self, params: list[torch.Tensor], world_size: int, rank: int) -> None:
        self.all_params = params
        # Frozen at construction: never sharded, never communicated, never updated.
        self.params = [p for p in params if p.requires_grad]
        self.frozen = [p for p in params if not p.requires_grad]
        self.numels = [p.numel() for p in self.params]
        self.offsets = [0, *itertools.accumulate(self.numels)][:-1]  # of each in ``flat``
        self.numel = sum(self.numels)
        # a group with nothing to train gets empty buffers and no collectives
        self.start, self.end, size = shard_range(self.numel, world_size, rank) if self.numel \
            else (0, 0, 0)
        p0 = params[0]
        self.flat = torch.zeros(size * world_size, dtype=p0.dtype, device=p0.device)
        with torch.no_grad():
            for p, off, n in zip(self.params, self.offsets, self.numels, strict=True):
                self.flat[off:off + n].copy_(p.reshape(-1))
                p.data = self.flat[off:off + n].view_as(p)  # the all-gather writes params
        self.send = torch.empty(size, dtype=p0.dtype, device=p0.device)
        self.flat_grad: torch.Tensor | None = None  # allocated at the first reduce-scatter
        # (index in self.params, lo, hi, shard_lo) and the optimizer's leaf for each piece
        self.pieces = list(self._overlaps())
        self.segments = [torch.nn.Parameter(self.flat[self.start + at:self.start + at + hi - lo])
                         for _, lo, hi, at in self.pieces]

    def _overlaps(self) -> Iterable[tuple[int, int, int, int]]:
        for i, (off, n) in enumerate(zip(self.offsets, self.numels, strict=True)):
            lo, hi = max(off, self.start), min(off + n, self.end)
            if lo < hi:
                yield i, lo - off, hi - off, lo - self.start


class ZeroOneOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer_class`` so that each rank keeps optimizer state for 1/N of the parameters.

    How it partitions: the trainable parameters of each group are copied, in order, into
    one flat buffer padded to a multiple of the world size ``N``, and become views into it.
    Rank ``r`` owns slice ``r`` of every group's buffer (parameters may be split across
    ranks); an ``optimizer_class`` instance updates only that slice, so Adam's state is
    ``ceil(numel / N)`` elements per group and rank. This is DeepSpeed's layout; PyTorch's
    ``ZeroRedundancyOptimizer`` assigns whole parameters to ranks, less evenly balanced.

    What :meth:`step` does, per group: copy the gradients into a flat buffer,
    reduce-scatter it and divide by ``N`` (each rank gets the averaged gradient of its
    slice), run the wrapped optimizer on the slice, and all-gather the updated slices into
    the parameters. ``reduce_grads=False`` skips the reduce-scatter, for gradients already
    averaged (DDP; leaving it on there is correct, only slower).

    Parameters without gradients follow ``torch.optim``, in every step and on every world
    size: a parameter whose ``grad`` is ``None`` is not updated and its state (Adam's
    moments and step count) does not advance; the wrapped optimizer sees one tensor per
    parameter piece, so each keeps its own state. With ``reduce_grads=True`` a gradient
    ``None`` on some ranks only counts as zeros there (the global batch used the parameter,
    as DDP with ``find_unused_parameters`` has it); a parameter is skipped only when its
    grad is ``None`` on every rank, agreed by one all-reduce of a flag per parameter each
    step. With ``reduce_grads=False`` the flags are read locally: they must be the same on
    every rank, as DDP makes them. A parameter with ``requires_grad=False`` at construction
    is frozen: not sharded, not communicated, never updated (a group of frozen ones
    communicates nothing); turning its ``requires_grad`` on later makes :meth:`step` raise.

    Side effects and memory: copying into the parameters (``model.load_state_dict``) is
    fine, replacing ``.data`` or ``assign=True`` detaches them from the flat buffer. Each
    rank keeps its slice's state, a send buffer of one slice and, when it reduces
    gradients, a flat gradient buffer. One process communicates nothing.

    Args:
        params: tensors or parameter-group dicts, as for any ``torch.optim`` optimizer.
            All tensors of a group must share dtype and device; floating point only.
        optimizer_class: the ``torch.optim.Optimizer`` subclass to wrap (e.g. ``AdamW``).
        process_group: the data-parallel group; ``None`` means WORLD, or a single process
            when ``torch.distributed`` is not initialised (then nothing is communicated).
        reduce_grads: average gradients across ranks in :meth:`step` (reduce-scatter);
            ``False`` when they are already averaged (``DistributedDataParallel``).
        **defaults: keyword arguments for ``optimizer_class`` (``lr``, ``weight_decay``...).

    Raises:
        ValueError: for no parameters, an empty group, a parameter listed twice, or a
            group mixing dtypes or devices.
        TypeError: for ``params`` that is a tensor, a set (its order differs between
            processes) or not iterable, a group without ``"params"``, a non-floating-point
            parameter, a non-optimizer ``optimizer_class``, a ``process_group`` that is not
            one, or a non-bool ``reduce_grads``.

    Example::

        model = DDP(model)  # optional; then pass reduce_grads=False
        opt = ZeroOneOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
        for x, y in loader:
            loss_fn(model(x), y).backward()
            opt.step()        # every rank, every step
            opt.zero_grad()

    Warning:
        :meth:`step` and :meth:`state_dict` are collective: every rank of the process
        group must call them, in the same order; calling either on a subset of ranks
        hangs the others. The constructor and :meth:`load_state_dict` are local.
    """

    def __init__(self, params: Iterable[Any], optimizer_class: type[torch.optim.Optimizer],
                 process_group: Any = None, reduce_grads: bool = True, **defaults: Any) -> None:
        if not (isinstance(optimizer_class, type)
                and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError("optimizer_class must be a torch.optim.Optimizer subclass, got "
                            f"{optimizer_class!r}")
        if not isinstance(reduce_grads, bool):
            raise TypeError(f"reduce_grads must be a bool, got {reduce_grads!r}")
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be None (WORLD) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        groups = _param_groups(params, "ZeroOneOptimizer")
        super().__init__(groups, defaults)
        self.optimizer_class = optimizer_class
        self.reduce_grads = reduce_grads
        distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group if distributed else None
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self._flat = [_FlatGroup(g["params"], self.world_size, self.rank)
                      for g in self.param_groups]
        # keeps a group without a piece on this rank a valid optimizer group; never stepped
        self._idle = [torch.nn.Parameter(f.flat.new_zeros(0)) for f in self._flat]
        self.optim = optimizer_class(
            [{**_hyper(g), "params": f.segments or [idle]} for g, f, idle in
             zip(self.param_groups, self._flat, self._idle, strict=True)], **defaults)
        for g, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            for k, v in _hyper(inner).items():  # the class's defaults, visible to schedulers
                g.setdefault(k, v)
        self.defaults = self.optim.defaults
        self.state = self.optim.state  # this rank's pieces only: what memory accounting sees

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Only the constructor adds groups: the flat buffers are fixed after it.

        Raises:
            NotImplementedError: after construction (build a new ``ZeroOneOptimizer``).
        """
        if hasattr(self, "_flat"):
            raise NotImplementedError("ZeroOneOptimizer cannot add a param group after "
                                      "construction; build a new one with every group")
        super().add_param_group(param_group)

    # --- the step ---------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Average gradients, update this rank's slice, all-gather the slices.

        Warning:
            Collective: every rank must call it; on a subset of ranks it hangs.

        Args:
            closure: re-evaluates the model and returns the loss (optional).

        Returns:
            The closure's loss, or ``None``.

        Raises:
            RuntimeError: if a parameter frozen at construction now requires a gradient.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if any(p.requires_grad for f in self._flat for p in f.frozen):  # before any collective
            raise RuntimeError("a parameter frozen when this ZeroOneOptimizer was built now "
                               "requires grad; build a new one (it loads state_dict())")
        n = self.world_size
        has_grad = self._has_grad()
        for f, flags in zip(self._flat, has_grad, strict=True):
            if not f.params:
                continue  # nothing to train in this group: nothing to communicate
            if self.reduce_grads and n > 1:
                if f.flat_grad is None:
                    f.flat_grad = torch.zeros_like(f.flat)
                for p, off, k in zip(f.params, f.offsets, f.numels, strict=True):
                    dst = f.flat_grad[off:off + k]
                    dst.copy_(p.grad.reshape(-1)) if p.grad is not None else dst.zero_()
                shard_grad = f.send
                reduce_scatter_flat(shard_grad, f.flat_grad, self.process_group)
                shard_grad.div_(n)  # gloo has no AVG: sum, then divide
            else:  # gradients are already averaged: read this rank's pieces only
                shard_grad = f.send.zero_()
                for i, lo, hi, at in f.pieces:
                    if f.params[i].grad is not None:
                        shard_grad[at:at + hi - lo].copy_(f.params[i].grad.reshape(-1)[lo:hi])
            for seg, (i, lo, hi, at) in zip(f.segments, f.pieces, strict=True):
                seg.grad = shard_grad[at:at + hi - lo] if flags[i] else None  # None: not stepped
        for group, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            inner.update(_hyper(group))  # hyperparameters set on this wrapper (LR schedulers)
        self.optim.step()
        for f in self._flat:
            for seg in f.segments:
                seg.grad = None
            if n > 1 and f.params:
                f.send.copy_(f.flat[f.start:f.end])  # an own send buffer: gloo gets no aliased input
                all_gather_flat(f.flat, f.send, self.process_group)
        return loss

    def _has_grad(self) -> list[list[bool]]:
        """Per group and trainable parameter: has it a gradient on any rank?

        Warning:
            Collective (one all-reduce of a flag per parameter) when this optimizer reduces
            gradients on several ranks; local otherwise (DDP gives every rank the same).
        """
        local = [[p.grad is not None for p in f.params] for f in self._flat]
        if not (self.reduce_grads and self.world_size > 1):
            return local
        flags = torch.tensor([float(x) for g in local for x in g] or [0.0],
                             device=self._flat[0].flat.device)  # NCCL reduces device tensors only
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.process_group)
        it = iter(flags.tolist())
        return [[next(it) > 0 for _ in g] for g in local]

    # --- consolidated state -------------------------------------------------------------

    def _inner_index(self) -> list[int]:
        """Index of each group's first tensor in the wrapped optimizer's numbering."""
        return [0, *itertools.accumulate(len(g["params"]) for g in self.optim.param_groups)][:-1]

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state in ``optimizer_class``'s own format, on every rank.

        Element-wise states (Adam's ``exp_avg``, ``exp_avg_sq``) are all-gathered from the
        ranks' pieces, scalars (``step``) taken from a rank holding the parameter, keyed by
        parameter index as ``torch.optim`` does (a frozen or never stepped parameter has no
        state): it loads into a plain ``optimizer_class`` or a ``ZeroOneOptimizer`` of any
        world size.

        Warning:
            Collective: every rank must call it (it all-gathers); on a subset it hangs.
        """
        inner = self.optim.state_dict()["state"]
        firsts = self._inner_index()
        # What this rank holds: per group and trainable parameter, its scalar state entries.
        mine: list[dict[int, dict[str, Any]]] = []
        keys: set[str] = set()
        for f, first in zip(self._flat, firsts, strict=True):
            held = {}
            for j, (i, _lo, _hi, _at) in enumerate(f.pieces):
                st = inner.get(first + j)
                if st:
                    held[i] = {k: copy.deepcopy(v) for k, v in st.items()
                               if not _elementwise(v, f.segments[j])}
                    keys |= {k for k, v in st.items() if _elementwise(v, f.segments[j])}
            mine.append(held)
        everyone = [(mine, keys)]
        if self.world_size > 1:
            everyone = [None] * self.world_size
            dist.all_gather_object(everyone, (mine, keys), group=self.process_group)
        all_keys = sorted(set().union(*(k for _, k in everyone)))
        state: dict[int, dict[str, Any]] = {}
        groups = []
        index = 0
        for gi, (group, f, first) in enumerate(zip(self.param_groups, self._flat, firsts, strict=True)):
            scalars: dict[int, dict[str, Any]] = {}
            for held, _ in everyone:
                scalars.update(held[gi])
            full = {}
            for key in all_keys:  # the same keys in the same order on every rank
                local = torch.zeros(f.end - f.start, dtype=f.flat.dtype, device=f.flat.device)
                for j, (_i, lo, hi, at) in enumerate(f.pieces):
                    v = inner.get(first + j, {}).get(key)
                    if v is not None:
                        local[at:at + hi - lo].copy_(v)
                if self.world_size > 1 and f.params:  # one process: the slice is the buffer
                    full[key] = torch.empty_like(f.flat)
                    all_gather_flat(full[key], local, self.process_group)
                else:
                    full[key] = local
            trainable = {id(p): i for i, p in enumerate(f.params)}
            for p in f.all_params:
                i = trainable.get(id(p))
                if i is not None and i in scalars:
                    off, k = f.offsets[i], f.numels[i]
                    state[index] = {**{key: full[key][off:off + k].view_as(p).clone()
                                       for key in all_keys}, **scalars[i]}
                index += 1
            groups.append({**_hyper(group),
                           "params": list(range(index - len(f.all_params), index))})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a consolidated state (from :meth:`state_dict` of any world size, or from a
        plain ``optimizer_class``); each rank keeps only its own pieces. Local, not collective.

        Raises:
            ValueError: if the number of groups or of parameters per group differs.
        """
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state_dict has {len(groups)} param groups, this optimizer "
                             f"has {len(self.param_groups)}")
        inner_state: dict[int, dict[str, Any]] = {}
        firsts = self._inner_index()
        for gi, (sg, f, first) in enumerate(zip(groups, self._flat, firsts, strict=True)):
            if len(sg["params"]) != len(f.all_params):
                raise ValueError(f"param group {gi}: state_dict has {len(sg['params'])} "
                                 f"parameters, this optimizer has {len(f.all_params)}")
            index = {id(p): sg["params"][j] for j, p in enumerate(f.all_params)}
            for j, (i, lo, hi, _at) in enumerate(f.pieces):
                p = f.params[i]
                st = state_dict["state"].get(index[id(p)])
                if not st:
                    continue  # never stepped (or saved before the first step): no state
                inner_state[first + j] = {
                    k: (v.reshape(-1)[lo:hi].clone() if k != "step" and isinstance(v, torch.Tensor)
                        and v.shape == p.shape else copy.deepcopy(v)) for k, v in st.items()}
        for group, sg in zip(self.param_groups, groups, strict=True):
            group.update({k: v for k, v in sg.items() if k != "params"})
        self.optim.load_state_dict({
            "state": inner_state,
            "param_groups": [{**_hyper(g), "params": list(range(first, first + len(inner["params"])))}
                             for g, inner, first in zip(self.param_groups, self.optim.param_groups,
                                                        firsts, strict=True)]})

    def shard_state_bytes(self) -> int:
        """Bytes of optimizer state held by this rank (its slice only)."""
        from perfkit.memory.model_states import optimizer_state_bytes

        return optimizer_state_bytes(self.optim)

    def shard_numel(self) -> int:
        """Elements of this rank's slices, padding included (``ceil(numel / N)`` per group of
        trainable parameters)."""
        return sum(f.end - f.start for f in self._flat)


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def _elementwise(v: Any, like: torch.Tensor) -> bool:
    """An element-wise state (Adam's moments): a tensor of its parameter piece's shape."""
    return isinstance(v, torch.Tensor) and v.shape == like.shape and v.dim() > 0


def _param_groups(params: Any, owner: str) -> list[dict[str, Any]]:
    """``params`` as torch.optim's param groups (a list of dicts with a ``'params'`` list),
    checked: not empty, ordered, no parameter twice. Shared by every ZeRO stage."""
    groups = list(_ordered("params", params))
    if not groups:
        raise ValueError(f"params is empty: {owner} needs at least one parameter")
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    seen: set[int] = set()
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError(f"params: group {i} must be a dict with a 'params' key when "
                            f"group 0 is one, got {type(g).__name__}")
        g["params"] = [g["params"]] if isinstance(g["params"], torch.Tensor) \
            else list(_ordered(f"params of group {i}", g["params"]))
        _check_group(i, g["params"], seen)
    return groups


def _ordered(name: str, params: Any) -> Iterable[Any]:
    """``params`` if it is an ordered iterable: a set's order differs between processes."""
    if isinstance(params, (torch.Tensor, dict, set, frozenset)) or not isinstance(params, Iterable):
        raise TypeError(f"{name} must be an ordered iterable (list, tuple, generator) of tensors "
                        f"or of param-group dicts, got {type(params).__name__}")
    return params


def _check_group(i: int, params: list[Any], seen: set[int]) -> None:
    if not params:
        raise ValueError(f"param group {i} has no parameters")
    for p in params:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"params of group {i} must be tensors, got {type(p).__name__}")
        if not p.is_floating_point():
            raise TypeError(f"params of group {i}: ZeRO-1 shards floating-point parameters "
                            f"only, got dtype {p.dtype}")
        if id(p) in seen:
            raise ValueError(f"a parameter appears twice (group {i}); list each once")
        seen.add(id(p))
    if len({(p.dtype, p.device) for p in params}) > 1:
        raise ValueError(f"param group {i} mixes dtypes or devices "
                         f"{sorted({(str(p.dtype), str(p.device)) for p in params})}; "
                         "put each dtype/device in its own group")
