"""Sharded buckets: the flat layout ZeRO stages 1-3 share, and their consolidated state.

A bucket holds whole trainable parameters of one parameter group, flattened in one buffer
padded to a multiple of the world size ``N``; rank ``r`` owns slice ``r`` of every bucket
(:func:`perfkit.parallel.flat.shard_range`). Buckets follow DDP's
(:func:`perfkit.parallel.data_parallel.assign_buckets`: reverse registration order, closed
at about ``bucket_cap`` bytes), so the first bucket's gradients are complete early in
backward and its reduce-scatter runs while earlier layers still compute theirs.

The wrapped ``torch.optim`` optimizer sees one leaf per piece of a parameter that lies in
this rank's slice (a *segment*), so it keeps state and step counts per parameter, as
``torch.optim`` does; :func:`consolidated_state` all-gathers those pieces back into the
wrapped optimizer's own ``state_dict`` format, :func:`shard_state` cuts one up again.
:func:`check_param_groups` reads ``params`` as ``torch.optim`` does, checked for sharding.

Usage::

    buckets = build_buckets([[p for p in model.parameters()]], cap_bytes=1 << 20,
                            world_size=2, rank=0)
    full = consolidated_state(buckets, inner_optim, groups, world_size=2)  # collective
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_int, check_items, check_type
from perfkit.parallel.data_parallel import assign_buckets
from perfkit.parallel.flat import all_gather_flat, shard_range

__all__ = ["ShardedBucket", "build_buckets", "check_param_groups", "consolidated_state",
           "shard_state"]


class ShardedBucket:
    """Whole parameters of one group in a flat layout of ``padded`` elements, sliced in N.

    Attributes:
        params: the bucket's parameters, in backward order.
        positions: each one's index in its group's parameter list (frozen ones included).
        offsets, numels, shapes: where each lies in the flat layout, its size and shape.
        start, end, shard_size: this rank's slice ``[start, end)`` of the layout.
        pieces: ``(k, lo, hi, at)``: elements ``[lo, hi)`` of parameter ``k`` are
            elements ``[at, at + hi - lo)`` of this rank's slice.
        segments: the leaves the wrapped optimizer steps, one per piece (set by the owner).
    """

    def __init__(self, params: Sequence[torch.Tensor], positions: Sequence[int], group: int,
                 world_size: int, rank: int) -> None:
        self.params = check_items("params", params)
        self.positions = check_items("positions", positions)
        if len(self.positions) != len(self.params) or not all(
                isinstance(p, torch.Tensor) for p in self.params):
            raise TypeError(f"params must be tensors, one per position; got {len(self.params)} "
                            f"params for {len(self.positions)} positions")
        self.group = check_int("group", group, 0)
        check_int("world_size", world_size, 1)
        check_int("rank", rank, 0, world_size - 1)
        self.numels = [p.numel() for p in self.params]
        self.shapes = [p.shape for p in self.params]
        self.offsets = [0, *itertools.accumulate(self.numels)][:-1]
        self.numel = sum(self.numels)
        self.start, self.end, self.shard_size = shard_range(self.numel, world_size, rank)
        self.padded = self.shard_size * world_size
        self.dtype, self.device = self.params[0].dtype, self.params[0].device
        self.grad_dtype = self.dtype  # dtype gradients are reduced in (stage 3 may lower it)
        self.pieces = [(k, lo - off, hi - off, lo - self.start)
                       for k, (off, n) in enumerate(zip(self.offsets, self.numels, strict=True))
                       for lo, hi in [(max(off, self.start), min(off + n, self.end))] if lo < hi]
        self.segments: list[torch.nn.Parameter] = []

    def flatten(self) -> torch.Tensor:
        """The parameters' current values in one new buffer ``(padded,)``, zero padding."""
        flat = torch.zeros(self.padded, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            for p, off, n in zip(self.params, self.offsets, self.numels, strict=True):
                flat[off:off + n].copy_(p.reshape(-1))
        return flat


def build_buckets(groups: Sequence[Sequence[torch.Tensor]], cap_bytes: int, world_size: int,
                  rank: int, first_bucket_bytes: int | None = None) -> list[ShardedBucket]:
    """Buckets of every group's trainable parameters (``requires_grad``), in backward order.

    Frozen parameters belong to no bucket: they are never sharded nor communicated. The
    first bucket of all (the first group's, reduced first) closes at ``first_bucket_bytes``
    when given, as DDP's does (:func:`perfkit.parallel.assign_buckets`).

    Raises:
        TypeError, ValueError: for ``groups`` that is not a list of lists of tensors, or a
            ``cap_bytes``, ``first_bucket_bytes``, ``world_size`` or ``rank`` out of range.
    """
    if isinstance(groups, torch.Tensor) or any(isinstance(g, torch.Tensor) for g in groups):
        raise TypeError("groups must be a list or tuple of lists of tensors, got a tensor")
    groups = [check_items(f"groups[{g}]", ps) for g, ps in enumerate(check_items("groups", groups))]
    check_int("cap_bytes", cap_bytes, 1)
    if first_bucket_bytes is not None:
        check_int("first_bucket_bytes", first_bucket_bytes, 1)
    check_int("world_size", world_size, 1)
    check_int("rank", rank, 0, world_size - 1)
    buckets = []
    for g, params in enumerate(groups):
        trainable = [(i, p) for i, p in enumerate(params) if p.requires_grad]
        if not trainable:
            continue
        first = first_bucket_bytes if not buckets else None  # only the very first bucket
        for idx in assign_buckets([p for _, p in trainable], cap_bytes, first):
            buckets.append(ShardedBucket([trainable[j][1] for j in idx],
                                         [trainable[j][0] for j in idx], g, world_size, rank))
    return buckets


def flat_buckets(buckets: list[ShardedBucket]) -> list[ShardedBucket]:
    """Give each bucket (stages 1-2) its ``flat`` buffer ``(padded,)`` holding its parameters,
    which become views into it (the all-gather of the updated slices writes them), and its
    ``segments``: this rank's pieces of the slice, as the leaves the wrapped optimizer steps.
    Returns ``buckets``. Internal: :class:`perfkit.parallel.ZeroOptimizer` calls it."""
    for b in buckets:
        b.flat = b.flatten()
        for p, off, n in zip(b.params, b.offsets, b.numels, strict=True):
            p.data = b.flat[off:off + n].view_as(p)
        b.segments = [torch.nn.Parameter(b.flat[b.start + at:b.start + at + hi - lo])
                      for _k, lo, hi, at in b.pieces]
    return buckets


def check_param_groups(params: Any, stage: int) -> list[dict[str, Any]]:
    """``params`` as ``torch.optim``'s param groups (dicts with a ``"params"`` list), checked.

    Args:
        params: tensors, or param-group dicts, in an ordered iterable (not a set: its order
            differs between processes, and every rank must lay out the same buffers).
        stage: the ZeRO stage that shards them, named in the messages.

    Returns:
        New group dicts; each ``"params"`` a list.

    Raises:
        TypeError: for ``params`` that is a tensor, a set or not iterable, a group without
            ``"params"``, a non-tensor or non-floating-point parameter.
        ValueError: for no parameters, an empty group, a parameter listed twice, or a
            group mixing dtypes or devices.
    """
    groups = list(_ordered("params", params))
    if not groups:
        raise ValueError(f"params is empty: ZeRO-{stage} needs at least one parameter")
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    seen: set[int] = set()
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError(f"params: group {i} must be a dict with a 'params' key when "
                            f"group 0 is one, got {type(g).__name__}")
        ps = [g["params"]] if isinstance(g["params"], torch.Tensor) \
            else list(_ordered(f"params of group {i}", g["params"]))
        groups[i] = {**g, "params": ps}
        if not ps:
            raise ValueError(f"param group {i} has no parameters")
        for p in ps:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"params of group {i} must be tensors, got {type(p).__name__}")
            if not p.is_floating_point():
                raise TypeError(f"params of group {i}: ZeRO-{stage} shards floating-point "
                                f"parameters only, got dtype {p.dtype}")
            if id(p) in seen:
                raise ValueError(f"a parameter appears twice (group {i}); list each once")
            seen.add(id(p))
        if len({(p.dtype, p.device) for p in ps}) > 1:
            raise ValueError(f"param group {i} mixes dtypes or devices "
                             f"{sorted({(str(p.dtype), str(p.device)) for p in ps})}; "
                             "put each dtype/device in its own group")
    return groups


def _ordered(name: str, params: Any) -> Iterable[Any]:
    """``params`` if it is an ordered iterable: a set's order differs between processes."""
    if isinstance(params, (torch.Tensor, dict, set, frozenset)) or not isinstance(params, Iterable):
        raise TypeError(f"{name} must be an ordered iterable (list, tuple, generator) of tensors "
                        f"or of param-group dicts, got {type(params).__name__}")
    return params


def _elementwise(v: Any, like: torch.Tensor) -> bool:
    """An element-wise state (Adam's moments): a tensor of its segment's shape."""
    return isinstance(v, torch.Tensor) and v.shape == like.shape and v.dim() > 0


def _inner_ids(optim: torch.optim.Optimizer) -> dict[int, int]:
    """id of each leaf of ``optim`` -> its index in ``optim.state_dict()``."""
    leaves = itertools.chain.from_iterable(g["params"] for g in optim.param_groups)
    return {id(p): i for i, p in enumerate(leaves)}


def consolidated_state(buckets: Sequence[ShardedBucket], optim: torch.optim.Optimizer,
                       groups: Sequence[dict[str, Any]], world_size: int,
                       process_group: Any = None,
                       whole: Sequence[tuple[int, int, torch.Tensor]] = ()) -> dict[str, Any]:
    """The whole optimizer state in ``optim``'s class's format, the same on every rank.

    Element-wise states are all-gathered bucket by bucket; scalars (``step``) come from
    whichever rank holds a piece of the parameter. Keys are parameter indices over
    ``groups`` (each a dict with ``"params"``, frozen ones included); a parameter never
    stepped has no entry, as in ``torch.optim``. ``whole``: ``(group, position, leaf)`` of
    parameters every rank steps unsharded (the same state everywhere: copied, not gathered).

    Warning:
        Collective: every rank must call it (it all-gathers); on a subset it hangs.

    Raises:
        TypeError, ValueError: for an ``optim`` that is not an optimizer or a ``world_size``
            below 1 (checked before any collective).
    """
    check_type("optim", optim, torch.optim.Optimizer)
    check_int("world_size", world_size, 1)
    inner, ids = optim.state_dict()["state"], _inner_ids(optim)
    mine: dict[tuple[int, int], dict[str, Any]] = {}
    keys: set[str] = set()
    for bi, b in enumerate(buckets):
        for seg, (k, *_rest) in zip(b.segments, b.pieces, strict=True):
            st = inner.get(ids[id(seg)])
            if st:
                mine[(bi, k)] = {n: copy.deepcopy(v) for n, v in st.items()
                                 if not _elementwise(v, seg)}
                keys |= {n for n, v in st.items() if _elementwise(v, seg)}
    everyone = [(mine, keys)]
    if world_size > 1:
        everyone = [None] * world_size
        dist.all_gather_object(everyone, (mine, keys), group=process_group)
    scalars: dict[tuple[int, int], dict[str, Any]] = {}
    for held, _ in everyone:
        scalars.update(held)
    all_keys = sorted(set().union(*(k for _, k in everyone)))
    firsts = [0, *itertools.accumulate(len(g["params"]) for g in groups)][:-1]
    state: dict[int, dict[str, Any]] = {}
    for bi, b in enumerate(buckets):
        full = {}
        for key in all_keys:  # the same keys, in the same order, on every rank
            local = torch.zeros(b.shard_size, dtype=b.dtype, device=b.device)
            for seg, (_k, lo, hi, at) in zip(b.segments, b.pieces, strict=True):
                v = inner.get(ids[id(seg)], {}).get(key)
                if v is not None:
                    local[at:at + hi - lo].copy_(v)
            full[key] = local
            if world_size > 1:
                full[key] = torch.empty(b.padded, dtype=b.dtype, device=b.device)
                all_gather_flat(full[key], local, process_group)
        for k, (pos, off, n, shape) in enumerate(zip(b.positions, b.offsets, b.numels, b.shapes,
                                                     strict=True)):
            if (bi, k) in scalars:
                state[firsts[b.group] + pos] = {
                    **{key: full[key][off:off + n].view(shape).clone() for key in all_keys},
                    **scalars[(bi, k)]}
    for g, pos, leaf in whole:
        if inner.get(ids[id(leaf)]):
            state[firsts[g] + pos] = copy.deepcopy(inner[ids[id(leaf)]])
    params = [list(range(f, f + len(g["params"]))) for f, g in zip(firsts, groups, strict=True)]
    return {"state": dict(sorted(state.items())),
            "param_groups": [{**{k: v for k, v in g.items() if k != "params"}, "params": ps}
                             for g, ps in zip(groups, params, strict=True)]}


def shard_state(buckets: Sequence[ShardedBucket], optim: torch.optim.Optimizer,
                groups: Sequence[dict[str, Any]], state_dict: dict[str, Any],
                whole: Sequence[tuple[int, int, torch.Tensor]] = ()) -> dict[str, Any]:
    """This rank's pieces of a consolidated ``state_dict``, as a ``state_dict`` for ``optim``.

    Local, not collective. ``groups`` and ``whole`` as for :func:`consolidated_state`.

    Raises:
        TypeError: for an ``optim`` that is not an optimizer or a ``state_dict`` not a dict.
        ValueError: if the number of groups or of parameters per group differs.
    """
    check_type("optim", optim, torch.optim.Optimizer)
    check_type("state_dict", state_dict, dict)
    saved = state_dict.get("param_groups", [])
    if len(saved) != len(groups):
        raise ValueError(f"state_dict has {len(saved)} param groups, this optimizer has "
                         f"{len(groups)}")
    for gi, (sg, g) in enumerate(zip(saved, groups, strict=True)):
        if len(sg["params"]) != len(g["params"]):
            raise ValueError(f"param group {gi}: state_dict has {len(sg['params'])} parameters, "
                             f"this optimizer has {len(g['params'])}")
    ids = _inner_ids(optim)
    inner: dict[int, dict[str, Any]] = {}
    for b in buckets:
        for seg, (k, lo, hi, _at) in zip(b.segments, b.pieces, strict=True):
            st = state_dict["state"].get(saved[b.group]["params"][b.positions[k]])
            if not st:
                continue  # never stepped (or saved before the first step): no state
            inner[ids[id(seg)]] = {
                n: (v.reshape(-1)[lo:hi].clone() if n != "step" and isinstance(v, torch.Tensor)
                    and v.shape == b.shapes[k] else copy.deepcopy(v)) for n, v in st.items()}
    for g, pos, leaf in whole:
        st = state_dict["state"].get(saved[g]["params"][pos])
        if st:
            inner[ids[id(leaf)]] = copy.deepcopy(st)
    first = 0
    inner_groups = []
    for g, ig in zip(saved, optim.param_groups, strict=True):
        inner_groups.append({**{k: v for k, v in g.items() if k != "params"},
                             "params": list(range(first, first + len(ig["params"])))})
        first += len(ig["params"])
    return {"state": inner, "param_groups": inner_groups}
