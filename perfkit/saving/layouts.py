"""State dicts that ``torch.distributed.checkpoint`` (DCP) saves shard by shard, on every
rank at once, and loads onto another number of ranks: the model and the optimizer of a
plain module, torch's DDP and FSDP2, perfkit's ZeRO stages 1-3 and ``ShardedModule``, and
perfkit's tensor-parallel modules, alone or under data parallelism.

How it writes. Every layout's state dict has the same keys: parameter names of the
unwrapped model (no ``module.`` prefix), and for the optimizer torch's own name-keyed format
(``{"state": {name: {"exp_avg": ..., "step": ...}}, "param_groups": [{"lr": ..., "params":
[names]}]}``, what ``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict``
returns), each tensor with its *global* shape. A rank puts in only what it holds:

* a whole tensor where it holds all of it (plain, DDP, ZeRO-1/2 parameters, replicated
  LayerNorms); DCP writes each such key once, spreading the keys over the ranks;
* FSDP2's own ``DTensor`` shards, through ``get_state_dict``/``set_state_dict``;
* its pieces as chunks with offsets where it holds pieces (:mod:`perfkit.saving._chunks`):
  ZeRO's and ``ShardedModule``'s flat ranges (rank ``r`` owns slice ``r`` of each padded
  flat bucket, so a parameter's range can split unevenly) become rectangular boxes of the
  parameter, tensor-parallel blocks an offset along the split dimension, carried in torch's
  ``LocalShardsWrapper`` inside a ``DTensor`` of the global shape. Each rank writes its own
  boxes; nothing is gathered.

Resharding is DCP's: on load each rank's template lists the boxes the *new* layout holds,
and DCP reads the overlapping parts of the saved ones, in place, into the optimizer's and the
module's own memory. A checkpoint of one layout therefore loads into any other with the same
parameter names and shapes (a plain model's into ZeRO-3, four ranks into three, or into a
plain model in a process without a process group). A different model does not: DCP refuses a key the
checkpoint lacks, or a shape that differs, naming the parameter inside a
``CheckpointException`` (a ``BaseException``) that carries every rank's traceback;
:func:`check_loadable` says the same first, as a ``ValueError`` with both shapes.

Scalar state (Adam's ``step``), hyperparameters and the learning rate travel with it; a
fresh optimizer gets its state created first (one step with zero gradients and ``lr = 0``,
which leaves the parameters' bits unchanged, as torch's ``set_state_dict`` does).

Usage::

    state = {"model": model_state(model), "optim": optim_state(opt, model)}
    dcp.save(state, checkpoint_id="ckpt/step_100")        # each rank writes its own pieces
    dcp.load(state, checkpoint_id="ckpt/step_100")        # on any number of ranks
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful
from torch.nn.parallel import DistributedDataParallel

from perfkit._checks import check_type
from perfkit.parallel.zero import ZeroOptimizer
from perfkit.parallel.zero3 import ShardedModule
from perfkit.saving._chunks import chunked, copy_into, local_tensor, tp_splits, world_mesh

__all__ = ["ModelState", "OptimState", "check_loadable", "model_state", "optim_state"]


def _unwrap(module: nn.Module) -> nn.Module:
    """The model under torch's DDP or perfkit's ShardedModule: the names a plain model has."""
    return module.module if isinstance(module, (DistributedDataParallel, ShardedModule)) \
        else module


def _is_fsdp2(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in module.modules())


def _layout(kind: str, module: nn.Module) -> dict[str, Any]:
    """What the manifest records: the kind, the ranks, the tensor-parallel degree."""
    from perfkit.parallel.tensor import ColumnParallelLinear

    tp = max((dist.get_world_size(m.group) for m in module.modules()
              if isinstance(m, ColumnParallelLinear)), default=1)
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    return {"kind": kind, "world_size": world, "tp": tp, "reshardable": True}


def _whole(t: torch.Tensor, split: Any, mesh: Any) -> torch.Tensor:
    """A tensor this rank holds all of: itself, or at its tensor-parallel offset."""
    if split is None:
        return t
    return chunked([(t.detach().reshape(-1), 0, t.numel())], t.shape, split, mesh)


def _check_keys(what: str, have: dict[str, Any], got: Any) -> None:
    if not isinstance(got, dict):
        raise TypeError(f"{what} state_dict must be a dict, got {type(got).__name__}")
    missing = sorted(set(have) - set(got))
    if missing:
        raise ValueError(f"{what} state_dict lacks {missing[:5]}: saved from a different model")


class ModelState(Stateful):
    """A module's parameters and buffers as a DCP ``Stateful`` (see the module docstring).

    Attributes:
        module: the module (a plain one, DDP, an FSDP2 one, or a ShardedModule).
        kind: ``"sharded"`` (perfkit's stage 3), ``"fsdp2"``, ``"ddp"`` or ``"plain"``.
        layout: a JSON description for a checkpoint's manifest.

    Warning:
        ``state_dict()`` and ``load_state_dict()`` are called by DCP on every rank; with
        FSDP2 they are collective.
    """

    def __init__(self, module: nn.Module) -> None:
        check_type("module", module, nn.Module)
        self.module = module
        self.kind = ("sharded" if isinstance(module, ShardedModule) else
                     "fsdp2" if _is_fsdp2(module) else
                     "ddp" if isinstance(module, DistributedDataParallel) else "plain")
        self.layout = _layout(self.kind, _unwrap(module))
        self._template: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """Name -> tensor (whole, chunked or FSDP2's DTensor); views of the module's memory."""
        inner = _unwrap(self.module)
        splits = tp_splits(inner)
        mesh = None
        if self.kind == "sharded":
            sm: ShardedModule = self.module  # type: ignore[assignment]
            where = {id(p): (k, j) for k, u in enumerate(sm.units) for j, p in enumerate(u.params)}
            mesh = world_mesh(sm.units[0].device) if sm.units else None
            sd: dict[str, Any] = {}
            for name, p in inner.named_parameters():
                if id(p) not in where:
                    sd[name] = _whole(p.detach(), splits.get(name), mesh)
                    continue
                k, j = where[id(p)]
                u = sm.units[k]
                pieces = [(u.shard[at:at + hi - lo], lo, hi) for jj, lo, hi, at in u.pieces
                          if jj == j]  # (hi - lo,) views of this rank's slice
                t = chunked(pieces, u.shapes[j], splits.get(name), mesh)
                if t is not None:  # a rank whose slice misses the parameter has no key
                    sd[name] = t
            for name, b in _persistent_buffers(inner):
                sd[name] = b.detach()
        else:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict

            sd = get_model_state_dict(self.module)
            if splits:
                mesh = world_mesh(next(iter(sd.values())).device)
                sd = {k: _whole(v, splits.get(k), mesh) for k, v in sd.items()}
        self._template = sd
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what DCP filled in (in place) or any layout's whole tensors (copied).

        Raises:
            TypeError: for a ``state_dict`` that is not a dict.
            ValueError: naming the parameter, for a missing one or another shape.
        """
        tmpl = self._template if state_dict is self._template else self.state_dict()
        _check_keys("model", tmpl, state_dict)
        for k, v in tmpl.items():
            copy_into(k, v, state_dict[k])
        if self.kind == "sharded":
            self.module.free_all()  # gathered copies are stale now
            return
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.module, {k: local_tensor(v) for k, v in tmpl.items()})


def _persistent_buffers(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    out = []
    for prefix, m in module.named_modules():
        for n, b in m._buffers.items():
            if b is not None and n not in m._non_persistent_buffers_set:
                out.append((f"{prefix}.{n}" if prefix else n, b))
    return out


def _init_state(optim: torch.optim.Optimizer) -> None:
    """Create the state of an optimizer never stepped, so that DCP has tensors to load
    into: one step on zero gradients with ``lr = 0`` (AdamW's decay multiplies by 1, the
    update adds 0: the parameters keep their bits)."""
    leaves = [p for g in optim.param_groups for p in g["params"]]
    if optim.state or any(p.grad is not None for p in leaves):
        return
    for p in leaves:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    lrs = [g.get("lr") for g in optim.param_groups]
    for g in optim.param_groups:
        if "lr" in g:
            g["lr"] = torch.zeros_like(g["lr"]) if isinstance(g["lr"], torch.Tensor) else 0.0
    optim.step()
    for g, lr in zip(optim.param_groups, lrs, strict=True):
        if lr is not None:
            g["lr"] = lr
    for p in leaves:
        p.grad = None


class OptimState(Stateful):
    """An optimizer's state in torch's name-keyed format as a DCP ``Stateful``.

    Attributes:
        optimizer, module: as given to :func:`optim_state`.
        kind: ``"zero1"``, ``"zero2"``, ``"zero3"``, ``"fsdp2"``, ``"ddp"`` or ``"plain"``.
        layout: a JSON description for a checkpoint's manifest.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, module: nn.Module) -> None:
        check_type("optimizer", optimizer, torch.optim.Optimizer)
        check_type("module", module, nn.Module)
        zero = isinstance(optimizer, ZeroOptimizer)
        zero3 = zero and optimizer.sharded is not None
        if zero3 and module not in (optimizer.sharded, optimizer.sharded.module):
            raise ValueError("module must be the stage-3 optimizer's ShardedModule (or the "
                             "module it wraps)")
        self._named = optimizer.sharded.module if zero3 else _unwrap(module)
        held = {id(p) for p in self._named.parameters()}
        for gi, g in enumerate(optimizer.param_groups):
            for i, p in enumerate(g["params"]):
                if id(p) not in held:
                    raise ValueError(f"module does not hold parameter {i} of param group {gi} "
                                     f"(shape {tuple(p.shape)}): pass the model the optimizer "
                                     "steps")
        self.optimizer, self.module = optimizer, module
        self.kind = f"zero{optimizer.stage}" if zero else ModelState(module).kind
        self.layout = _layout(self.kind, self._named)
        self._template: dict[str, Any] | None = None
        self._inner: dict[str, list[dict[str, Any]]] = {}  # name -> inner optimizer states

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {name: {key: tensor or value}}, "param_groups": [...]}``."""
        if not isinstance(self.optimizer, ZeroOptimizer):
            sd = self._native()
        else:
            sd = self._zero()
        self._template = sd
        return sd

    def _native(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        sd = get_optimizer_state_dict(self.module, self.optimizer)
        splits = tp_splits(self._named)
        if splits:
            shapes = dict((n, p.shape) for n, p in self._named.named_parameters())
            mesh = world_mesh(next(self._named.parameters()).device)
            sd["state"] = {n: {k: _whole(v, splits.get(n), mesh) if isinstance(
                v, torch.Tensor) and v.shape == shapes[n] and v.dim() else v
                for k, v in st.items()} for n, st in sd["state"].items()}
        return sd

    def _zero(self) -> dict[str, Any]:
        opt: ZeroOptimizer = self.optimizer  # type: ignore[assignment]
        opt.wait_params()
        _init_state(opt.optim)
        names = {id(p): n for n, p in self._named.named_parameters()}
        splits = tp_splits(self._named)
        inner = opt.optim.state
        mesh = world_mesh(opt.buckets[0].device) if opt.buckets else None
        state: dict[str, dict[str, Any]] = {}
        self._inner = {}
        for b in opt.buckets:
            for seg, (k, lo, hi, _at) in zip(b.segments, b.pieces, strict=True):
                st = inner.get(seg)
                if not st:
                    continue  # never stepped: no state, as in torch.optim
                name = names[id(b.params[k])]
                self._inner.setdefault(name, []).append(st)
                state[name] = {key: chunked([(v, lo, hi)], b.shapes[k], splits.get(name), mesh)
                               if isinstance(v, torch.Tensor) and v.shape == seg.shape
                               and v.dim() else v for key, v in st.items()}
        for p in opt.sharded.unsharded if opt.sharded else []:  # stepped whole on every rank
            st = inner.get(p)
            if st:
                name = names[id(p)]
                self._inner.setdefault(name, []).append(st)
                state[name] = {key: _whole(v, splits.get(name), mesh)
                               if isinstance(v, torch.Tensor) and v.shape == p.shape
                               and v.dim() else v for key, v in st.items()}
        groups = [{**{k: v for k, v in g.items() if k != "params"},
                   "params": [names[id(p)] for p in g["params"]]} for g in opt.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what DCP filled in (in place) or any layout's whole state (copied).

        Raises:
            TypeError: for a ``state_dict`` that is not a dict.
            ValueError: naming the parameter, for a missing one, another shape, or param
                groups that list other parameters.
        """
        tmpl = self._template if state_dict is self._template else self.state_dict()
        _check_keys("optimizer", tmpl, state_dict)
        _check_keys("optimizer", tmpl["state"], state_dict["state"])
        saved = state_dict["param_groups"]
        mine = [g["params"] for g in tmpl["param_groups"]]
        if [g.get("params") for g in saved] != mine:
            raise ValueError(f"optimizer param groups list {[g.get('params') for g in saved]}, "
                             f"this optimizer's {mine}: saved from a different model or grouping")
        for name, st in tmpl["state"].items():
            got = state_dict["state"][name]
            _check_keys(f"optimizer state of {name!r}:", st, got)
            for key, v in st.items():
                if isinstance(v, torch.Tensor):
                    copy_into(f"{name}.{key}", v, got[key])
                else:
                    for inner in self._inner.get(name, []):
                        inner[key] = copy.deepcopy(got[key])
        if isinstance(self.optimizer, ZeroOptimizer):
            for group, sg in zip(self.optimizer.param_groups, saved, strict=True):
                group.update({k: v for k, v in sg.items() if k != "params"})
            return
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        local = {"state": {n: {k: local_tensor(v) for k, v in st.items()}
                           for n, st in tmpl["state"].items()},
                 "param_groups": copy.deepcopy(saved)}
        set_optimizer_state_dict(self.module, self.optimizer, local)


def model_state(module: nn.Module) -> ModelState:
    """The DCP ``Stateful`` of ``module``'s parameters and buffers, reshardable.

    Args:
        module: a plain module (tensor-parallel modules inside it included), torch's
            ``DistributedDataParallel``, a module sharded by FSDP2's ``fully_shard``, or a
            :class:`perfkit.parallel.ShardedModule` (pass the wrapper: its wrapped module's
            own ``state_dict()`` gathers every parameter onto every rank).

    Raises:
        TypeError: if ``module`` is not an ``nn.Module``.
    """
    return ModelState(module)


def optim_state(optimizer: torch.optim.Optimizer, module: nn.Module) -> OptimState:
    """The DCP ``Stateful`` of ``optimizer``'s state (name-keyed, reshardable).

    Args:
        optimizer: a ``torch.optim`` optimizer, or a :class:`perfkit.parallel.ZeroOptimizer`
            of any stage.
        module: the model it steps, as passed to :func:`model_state` (names its parameters;
            at stage 3 the ShardedModule, or the module it wraps).

    Raises:
        TypeError: if ``optimizer`` is not an optimizer or ``module`` not an ``nn.Module``.
        ValueError: if ``module`` does not hold every parameter of ``optimizer`` (the
            first missing one is named by its group and position).
    """
    return OptimState(optimizer, module)


def check_loadable(checkpoint: str | os.PathLike, state: dict[str, Any]) -> None:
    """Refuse, before DCP loads anything, a checkpoint that ``state`` cannot be resharded
    from: a key it lacks or a tensor of another global shape (a different model). Local:
    reads the checkpoint's metadata only.

    Args:
        checkpoint: a DCP checkpoint directory.
        state: what would be passed to ``dcp.load`` (``Stateful`` objects are asked for
            their ``state_dict()``, as ``dcp.load`` does; nested keys joined by dots).

    Raises:
        TypeError: for a ``checkpoint`` that is not a path or a ``state`` not a dict.
        ValueError: for a directory without DCP metadata, or naming the first key the
            checkpoint lacks or whose shape differs (both shapes given).
    """
    check_type("checkpoint", checkpoint, (str, os.PathLike))
    check_type("state", state, dict)
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict  # DCP's own keys
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    if not (Path(checkpoint) / ".metadata").is_file():
        raise ValueError(f"checkpoint {os.fspath(checkpoint)!r} holds no DCP metadata (.metadata)")
    saved = FileSystemReader(os.fspath(checkpoint)).read_metadata().state_dict_metadata
    flat, _ = flatten_state_dict({k: v.state_dict() if isinstance(v, Stateful) else v
                                  for k, v in state.items()})
    for key, v in flat.items():
        if key not in saved:
            raise ValueError(f"{key}: not in checkpoint {os.fspath(checkpoint)!r} (saved from a "
                             "different model, or without this state)")
        md = saved[key]
        if isinstance(v, torch.Tensor) and isinstance(md, TensorStorageMetadata) \
                and tuple(md.size) != tuple(v.shape):
            raise ValueError(f"{key}: the checkpoint holds shape {tuple(md.size)}, this layout "
                             f"{tuple(v.shape)}: a different model or parameter shape cannot be "
                             "resharded")
