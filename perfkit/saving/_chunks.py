"""Pieces of a parameter as chunks with offsets: what DCP saves where it lies and reads back
for any other layout (the machinery under :mod:`perfkit.saving.layouts`).

A rank of a sharded layout holds pieces of a parameter: ZeRO and ``ShardedModule`` a flat
range ``[lo, hi)`` of its elements (rank ``r`` owns slice ``r`` of a padded flat bucket, so
a parameter's range can split unevenly or not reach a rank at all); tensor parallelism a
block along the split dimension (Megatron's column- and row-parallel linears, the
vocabulary-parallel embedding); both at once when ZeRO shards a tensor-parallel model.
``torch.distributed.checkpoint`` (DCP) describes a saved tensor by its global shape and
rectangular chunks, each with its offsets, and on load reads, for each chunk the new layout
asks for, the overlapping parts of the saved ones. So a flat range becomes rectangular
boxes (:func:`boxes`: at most ``2 (ndim - 1) + 1``, each a contiguous view of the memory the
rank already holds), shifted by the tensor-parallel offset (:func:`tp_splits`). Nothing is
copied or gathered.

The boxes travel to DCP in torch's ``LocalShardsWrapper`` (a tensor subclass implementing
DCP's ``_Checkpointable`` protocol: write items and chunk lists from its shards and offsets;
TorchRec's row- and column-wise sharded tables use it), extended by :class:`Boxes` with the
copies DCP's asynchronous staging makes (thread and process executors), inside a
``DTensor`` that carries the global shape on a one-dimensional mesh of every rank
(:func:`chunked`). The ``DTensor``
is built from its spec, not with ``DTensor.from_local``, whose ``view_as`` the wrapper
refuses beyond two dimensions; its placement is nominal, DCP takes the chunks from the
wrapper. Why not ``ShardedTensor``, which takes arbitrary offsets too: torch 2.13 deprecates
it and DCP's load touches its ``device``, which prints a ``FutureWarning`` to the user.

Usage::

    boxes(7, 18, (4, 5))   # [((1, 2), (1, 3)), ((2, 0), (1, 5)), ((3, 0), (1, 3))]
    t = chunked([(flat_piece, 7, 18)], (4, 5), None, mesh)   # a DTensor of shape (4, 5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor._shards_wrapper import LocalShardsWrapper

__all__: list[str] = []

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes)
Split = tuple[int, int, int]  # (dim, start, global length) of a tensor-parallel piece


aten = torch.ops.aten


class Boxes(LocalShardsWrapper):
    """``LocalShardsWrapper`` plus the operations DCP's asynchronous staging applies to a
    ``DTensor``'s local tensor (``_create_cpu_state_dict``, ``_copy_state_dict``): a zero or
    empty copy, an in-place copy and a clone, box by box. At module level, so that the
    process executor can pickle it."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        src = args[0]
        if func in (aten.zeros_like.default, aten.empty_like.default, aten.clone.default):
            return Boxes([func(v, *args[1:], **kwargs) for v in src.local_shards()],
                         src.local_offsets())
        if func is aten.copy_.default:
            for d, v in zip(src.local_shards(), args[1].local_shards(), strict=True):
                d.copy_(v, *args[2:], **kwargs)
            return src
        return super().__torch_dispatch__(func, types, args, kwargs)


def boxes(lo: int, hi: int, shape: Sequence[int]) -> list[Box]:
    """The rectangular boxes, in memory order, that elements ``[lo, hi)`` of a row-major
    tensor of ``shape`` cover: a partial row, partial planes, whole leading blocks, and the
    same again at the end. Each is contiguous in memory (a view of the flat range)."""
    shape = tuple(shape)
    if lo >= hi:
        return []
    if len(shape) <= 1:
        return [((lo,), (hi - lo,))]
    inner = math.prod(shape[1:])  # elements of one leading index
    out: list[Box] = []
    row = lo // inner
    if lo % inner:  # the end of a partial leading index
        end = min(hi, (row + 1) * inner)
        out += [((row, *o), (1, *s)) for o, s in boxes(lo - row * inner, end - row * inner,
                                                          shape[1:])]
        lo, row = end, row + 1
    if lo >= hi:
        return out
    full = hi // inner
    if full > row:  # whole leading indices
        out.append(((row, *[0] * (len(shape) - 1)), (full - row, *shape[1:])))
        lo = full * inner
    if lo < hi:  # the start of a partial last leading index
        out += [((full, *o), (1, *s)) for o, s in boxes(0, hi - lo, shape[1:])]
    return out


def tp_splits(module: nn.Module) -> dict[str, Split]:
    """``{name: (dim, start, global length)}`` of every parameter of ``module`` that
    perfkit's tensor-parallel modules split: column-parallel weights and biases along
    dimension 0, row-parallel weights along 1, the vocabulary-parallel embedding's rows.
    Names are ``module.named_parameters()``'s."""
    from perfkit.parallel.tensor import ColumnParallelLinear, RowParallelLinear
    from perfkit.parallel.vocab import VocabParallelEmbedding

    out: dict[str, Split] = {}
    for prefix, m in module.named_modules():
        at = f"{prefix}." if prefix else ""
        if isinstance(m, VocabParallelEmbedding):
            out[at + "weight"] = (0, m.vocab_start, m.vocab_size)
            continue
        if not isinstance(m, (ColumnParallelLinear, RowParallelLinear)):
            continue
        rank, t = dist.get_rank(m.group), dist.get_world_size(m.group)
        dim = 0 if isinstance(m, ColumnParallelLinear) else 1
        n = m.weight.shape[dim]
        out[at + "weight"] = (dim, rank * n, t * n)
        if dim == 0 and m.bias is not None:  # a row-parallel bias is whole on every rank
            out[at + "bias"] = (0, rank * n, t * n)
    return out


def world_mesh(device: torch.device) -> Any:
    """A one-dimensional mesh of every rank on ``device``'s type (no new process group),
    or ``None`` without a process group or with one rank: then every piece is whole."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(dist.group.WORLD, device.type)


def chunked(pieces: Sequence[tuple[torch.Tensor, int, int]], shape: Sequence[int],
            split: Split | None, mesh: Any) -> torch.Tensor | None:
    """This rank's pieces of one tensor as a DCP-ready tensor, ``None`` if it holds none.

    Args:
        pieces: ``(flat, lo, hi)``: ``flat`` (1-D, ``hi - lo`` elements) holds elements
            ``[lo, hi)`` of the rank's local tensor of ``shape``, row-major.
        shape: the local tensor's shape (this rank's tensor-parallel block).
        split: where that block lies in the whole tensor, or ``None`` (it is the whole).
        mesh: from :func:`world_mesh`.

    Returns:
        The tensor itself (a view) when the rank holds all of it; otherwise a ``DTensor``
        of the global shape whose local tensor lists the boxes with their offsets.
    """
    shape = tuple(shape)
    numel = math.prod(shape)
    if split is None and len(pieces) == 1 and pieces[0][1:] == (0, numel):
        return pieces[0][0].view(shape)
    if mesh is None:
        raise ValueError(f"a piece of a tensor of shape {shape} without a process group: "
                         "a rank alone holds every tensor whole")
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    dim, start, length = split if split is not None else (0, 0, shape[0] if shape else 1)
    whole = tuple(length if d == dim else n for d, n in enumerate(shape))
    local, offsets = [], []
    for flat, lo, hi in pieces:
        at = 0
        for off, size in boxes(lo, hi, shape):
            n = math.prod(size)
            local.append(flat[at:at + n].view(size))
            offsets.append(tuple(o + start if d == dim else o for d, o in enumerate(off)))
            at += n
    if not local:
        return None
    stride = torch.empty(whole, device="meta").stride()
    spec = DTensorSpec(mesh, (Shard(0),), TensorMeta(torch.Size(whole), stride, local[0].dtype))
    return DTensor(Boxes(local, offsets), spec, requires_grad=False)


def is_chunked(t: Any) -> bool:
    """Whether ``t`` is what :func:`chunked` returns for a piece (not a whole tensor)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._shards_wrapper import LocalShardsWrapper

    return isinstance(t, DTensor) and isinstance(t._local_tensor, LocalShardsWrapper)


def shards_of(t: torch.Tensor) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
    """``(view, offsets)`` of each box of a :func:`chunked` tensor; a whole tensor is one."""
    if not is_chunked(t):
        return [(t, (0,) * t.dim())]
    w = t._local_tensor
    return list(zip(w.local_shards(), [tuple(o) for o in w.local_offsets()], strict=True))


def copy_into(name: str, dst: torch.Tensor, src: Any) -> None:
    """Copy ``src`` into ``dst`` (a template this package made), unless DCP already loaded
    into ``dst`` itself. ``src`` may be whole (any layout's full tensor) or chunked like
    ``dst``.

    Raises:
        ValueError: naming ``name``, for a ``src`` of another shape or boxes, or not a tensor.
    """
    if src is dst:
        return
    if not isinstance(src, torch.Tensor):
        raise ValueError(f"{name}: expected a tensor, got {type(src).__name__}")
    if tuple(src.shape) != tuple(dst.shape):
        raise ValueError(f"{name}: saved shape {tuple(src.shape)}, this layout's "
                         f"{tuple(dst.shape)}: a different model or parameter shape cannot "
                         "be resharded")
    with torch.no_grad():
        if not is_chunked(src) and not is_chunked(dst):
            dst.copy_(src)
            return
        if is_chunked(src):
            theirs = {o: v for v, o in shards_of(src)}
            for v, o in shards_of(dst):
                if o not in theirs or theirs[o].shape != v.shape:
                    raise ValueError(f"{name}: the chunks differ from this layout's; load "
                                     "through torch.distributed.checkpoint to reshard")
                v.copy_(theirs[o])
            return
        for v, o in shards_of(dst):
            v.copy_(src[tuple(slice(a, a + n) for a, n in zip(o, v.shape, strict=True))])


def local_tensor(t: Any) -> Any:
    """The rank's own tensor behind a tensor-parallel :func:`chunked` one (one box, the
    whole local block); anything else unchanged."""
    if is_chunked(t):
        (v, _), = shards_of(t)
        return v
    return t
