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

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["ZeroOneOptimizer", "all_gather_flat", "reduce_scatter_flat", "shard_range"]


# torch 2.13 deprecates reduce_scatter_tensor / all_gather_into_tensor in favour of the
# *_single names; older releases only have the former. Detect once, use whichever exists.
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_flat(out: torch.Tensor, flat: torch.Tensor, group: Any = None) -> None:
    """Sum ``flat`` (N equal slices) over ranks; rank r receives slice r in ``out``.

    On gloo the list form ``dist.reduce_scatter`` is used: gloo's single-tensor
    reduce-scatter measured 2 to 4x slower than the list form (and slower than a whole
    all-reduce) for 0.17-4 M floats on 2 CPU processes; NCCL gets the single-tensor call.

    Warning:
        Collective: every rank of ``group`` must call it, or the others hang.
    """
    if dist.get_backend(group) == "gloo":
        n = dist.get_world_size(group)
        dist.reduce_scatter(out, list(flat.chunk(n)), op=dist.ReduceOp.SUM, group=group)
    else:
        _REDUCE_SCATTER(out, flat, op=dist.ReduceOp.SUM, group=group)


def all_gather_flat(flat: torch.Tensor, shard: torch.Tensor, group: Any = None) -> None:
    """Concatenate every rank's ``shard`` into ``flat`` (rank r's shard at slice r).

    Warning:
        Collective: every rank of ``group`` must call it, or the others hang.
    """
    _ALL_GATHER(flat, shard, group=group)


def shard_range(numel: int, world_size: int, rank: int) -> tuple[int, int, int]:
    """Rank ``rank``'s slice ``[start, end)`` of a flat buffer of ``numel`` elements.

    The buffer is padded to ``N * ceil(numel / N)`` so that every shard has the same
    size (collectives need equal sizes); the last shards may be partly or wholly padding.

    Returns:
        ``(start, end, shard_size)``; ``end - start == shard_size``.

    Raises:
        ValueError: for ``numel < 1``, ``world_size < 1`` or a rank outside
            ``[0, world_size)``.
    """
    if numel < 1:
        raise ValueError(f"numel must be >= 1, got {numel}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need world_size >= 1 and 0 <= rank < world_size, got "
                         f"world_size={world_size}, rank={rank}")
    size = math.ceil(numel / world_size)
    return rank * size, (rank + 1) * size, size


class _FlatGroup:
    """One parameter group flattened: its parameters are views into ``flat``."""

    def __init__(self, params: list[torch.Tensor], world_size: int, rank: int) -> None:
        self.params = params
        self.numels = [p.numel() for p in params]
        self.offsets = [0]
        for n in self.numels[:-1]:
            self.offsets.append(self.offsets[-1] + n)
        self.numel = sum(self.numels)
        self.start, self.end, size = shard_range(self.numel, world_size, rank)
        p0 = params[0]
        self.flat = torch.zeros(size * world_size, dtype=p0.dtype, device=p0.device)
        with torch.no_grad():
            for p, off, n in zip(params, self.offsets, self.numels, strict=True):
                self.flat[off:off + n].copy_(p.reshape(-1))
                p.data = self.flat[off:off + n].view_as(p)  # the all-gather writes params
        # The optimizer's parameter for this rank: a leaf that *is* slice r of the buffer.
        self.shard = torch.nn.Parameter(self.flat[self.start:self.end])
        self.send = torch.empty(size, dtype=p0.dtype, device=p0.device)
        self.flat_grad: torch.Tensor | None = None  # allocated at the first reduce-scatter

    def segments(self) -> Iterable[tuple[torch.Tensor, int, int, int]]:
        """For each parameter overlapping this rank's slice: (param, lo, hi, shard_lo)."""
        for p, off, n in zip(self.params, self.offsets, self.numels, strict=True):
            lo, hi = max(off, self.start), min(off + n, self.end)
            if lo < hi:
                yield p, lo - off, hi - off, lo - self.start


class ZeroOneOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer_class`` so that each rank keeps optimizer state for 1/N of the parameters.

    How it partitions: the parameters of each parameter group are copied, in order, into
    one flat buffer padded to a multiple of the world size ``N``, and become views into
    it. Rank ``r`` owns the contiguous slice ``r`` of every group's buffer (parameters
    may be split across ranks), and an instance of ``optimizer_class`` updates only
    that slice, so Adam's state is ``ceil(numel / N)`` elements per group and rank.
    This is DeepSpeed's layout; PyTorch's ``ZeroRedundancyOptimizer`` instead assigns
    whole parameters to ranks, which balances less evenly.

    What :meth:`step` does, per group: copy the gradients into a flat buffer,
    reduce-scatter it and divide by ``N`` (each rank gets the averaged gradient of its
    slice), run the wrapped optimizer on the slice, and all-gather the updated slices
    into the parameters. With ``reduce_grads=False`` the reduce-scatter is skipped: use it
    when the gradients are already averaged (``DistributedDataParallel``); leaving it on
    under DDP is still correct (averaging equal gradients), only slower. A parameter
    whose ``grad`` is ``None`` is stepped with a zero gradient (unlike ``torch.optim``,
    which skips it), since its slice is shared with others.

    Side effects and memory: after construction the parameters of a group share one
    storage (the flat buffer); copying into them (``model.load_state_dict``) is fine, but
    replacing a parameter's ``.data`` or loading with ``assign=True`` detaches it from the
    buffer and from the all-gather. Besides the optimizer state of its slice, each rank
    keeps a send buffer of one slice and, when it reduces gradients, a flat gradient
    buffer of the group's size. With one process (``torch.distributed`` not initialised,
    or a group of one) nothing is communicated and the result equals ``optimizer_class``.

    Args:
        params: tensors or parameter-group dicts, as for any ``torch.optim`` optimizer.
            All tensors of a group must share dtype and device; floating point only.
        optimizer_class: the ``torch.optim.Optimizer`` subclass to wrap (e.g. ``AdamW``).
        process_group: the data-parallel group; ``None`` means WORLD, or a single process
            when ``torch.distributed`` is not initialised (then nothing is communicated).
        reduce_grads: average gradients across ranks in :meth:`step` (reduce-scatter).
        **defaults: keyword arguments for ``optimizer_class`` (``lr``, ``weight_decay``...).

    Raises:
        ValueError: for no parameters, an empty group, a parameter listed twice, or a
            group mixing dtypes or devices.
        TypeError: for a non-floating-point parameter or an ``optimizer_class`` that is
            not an optimizer class.

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
        groups = list(params)
        if not groups:
            raise ValueError("params is empty: ZeroOneOptimizer needs at least one parameter")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        seen: set[int] = set()
        for i, g in enumerate(groups):
            g["params"] = list(g["params"]) if not isinstance(g["params"], torch.Tensor) \
                else [g["params"]]
            _check_group(i, g["params"], seen)
        super().__init__(groups, defaults)
        self.optimizer_class = optimizer_class
        self.reduce_grads = reduce_grads
        distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group if distributed else None
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self._flat = [_FlatGroup(g["params"], self.world_size, self.rank)
                      for g in self.param_groups]
        self.optim = optimizer_class(
            [{**_hyper(g), "params": [f.shard]} for g, f in
             zip(self.param_groups, self._flat, strict=True)], **defaults)
        for g, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            for k, v in _hyper(inner).items():  # the class's defaults, visible to schedulers
                g.setdefault(k, v)
        self.defaults = self.optim.defaults
        self.state = self.optim.state  # this rank's slice only: what memory accounting sees

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group before the optimizer is built (the constructor's use).

        Raises:
            NotImplementedError: after construction; the flat buffers are fixed then,
                so build a new ``ZeroOneOptimizer`` instead.
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
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        n = self.world_size
        for f in self._flat:
            if self.reduce_grads and n > 1:
                if f.flat_grad is None:
                    f.flat_grad = torch.zeros_like(f.flat)
                for p, off, k in zip(f.params, f.offsets, f.numels, strict=True):
                    dst = f.flat_grad[off:off + k]
                    dst.copy_(p.grad.reshape(-1)) if p.grad is not None else dst.zero_()
                shard_grad = f.send
                reduce_scatter_flat(shard_grad, f.flat_grad, self.process_group)
                shard_grad.div_(n)  # gloo has no AVG: sum, then divide
            else:  # gradients are already averaged: read this rank's slice only
                shard_grad = f.send.zero_()
                for p, lo, hi, at in f.segments():
                    if p.grad is not None:
                        shard_grad[at:at + hi - lo].copy_(p.grad.reshape(-1)[lo:hi])
            f.shard.grad = shard_grad
        for group, inner in zip(self.param_groups, self.optim.param_groups, strict=True):
            inner.update(_hyper(group))  # hyperparameters set on this wrapper (LR schedulers)
        self.optim.step()
        for f in self._flat:
            f.shard.grad = None
            if n > 1:
                f.send.copy_(f.shard)  # an own send buffer: gloo gets no aliased input
                all_gather_flat(f.flat, f.send, self.process_group)
        return loss

    # --- consolidated state -------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state in ``optimizer_class``'s own format, on every rank.

        Per-parameter states (Adam's ``exp_avg``, ``exp_avg_sq``) are all-gathered from
        the shards and cut back into one tensor per parameter, keyed by parameter index
        as ``torch.optim`` does; so the result loads into a plain ``optimizer_class``
        over the same parameters, or into a ``ZeroOneOptimizer`` of any world size.

        Warning:
            Collective: every rank must call it (it all-gathers); on a subset it hangs.
        """
        inner = self.optim.state_dict()
        state: dict[int, dict[str, Any]] = {}
        groups = []
        index = 0
        for gi, (group, f) in enumerate(zip(self.param_groups, self._flat, strict=True)):
            shard_state = inner["state"].get(gi, {})
            full = {}
            for key, v in shard_state.items():
                if isinstance(v, torch.Tensor) and v.shape == f.shard.shape:
                    buf = torch.empty_like(f.flat, dtype=v.dtype)
                    if self.world_size > 1:
                        all_gather_flat(buf, v.contiguous(), self.process_group)
                    else:
                        buf.copy_(v)
                    full[key] = buf
            for p, off, k in zip(f.params, f.offsets, f.numels, strict=True):
                if shard_state:
                    state[index] = {key: (full[key][off:off + k].view_as(p).clone()
                                          if key in full else _copy(v))
                                    for key, v in shard_state.items()}
                index += 1
            groups.append({**_hyper(group),
                           "params": list(range(index - len(f.params), index))})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a consolidated state (from :meth:`state_dict` of any world size, or from a
        plain ``optimizer_class``); each rank keeps only its own slice. Local, not collective.

        Raises:
            ValueError: if the number of groups or of parameters per group differs.
        """
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state_dict has {len(groups)} param groups, this optimizer "
                             f"has {len(self.param_groups)}")
        inner_state: dict[int, dict[str, Any]] = {}
        for gi, (sg, f) in enumerate(zip(groups, self._flat, strict=True)):
            if len(sg["params"]) != len(f.params):
                raise ValueError(f"param group {gi}: state_dict has {len(sg['params'])} "
                                 f"parameters, this optimizer has {len(f.params)}")
            per_param = [state_dict["state"].get(i) for i in sg["params"]]
            if any(s is None for s in per_param):
                continue  # no state yet for this group (saved before the first step)
            shard: dict[str, Any] = {}
            for key, v0 in per_param[0].items():
                # an element-wise state has each parameter's shape; "step" is a counter
                if key != "step" and all(isinstance(s[key], torch.Tensor)
                                         and s[key].shape == p.shape
                                         for s, p in zip(per_param, f.params, strict=True)):
                    flat = torch.zeros_like(f.flat, dtype=v0.dtype)
                    for s, off, k in zip(per_param, f.offsets, f.numels, strict=True):
                        flat[off:off + k].copy_(s[key].reshape(-1))
                    shard[key] = flat[f.start:f.end].clone()
                else:
                    shard[key] = _copy(v0)
            inner_state[gi] = shard
        for group, sg in zip(self.param_groups, groups, strict=True):
            group.update({k: v for k, v in sg.items() if k != "params"})
        self.optim.load_state_dict({
            "state": inner_state,
            "param_groups": [{**_hyper(g), "params": [i]}
                             for i, g in enumerate(self.param_groups)]})

    def shard_state_bytes(self) -> int:
        """Bytes of optimizer state held by this rank (its slice only)."""
        from perfkit.memory.model_states import optimizer_state_bytes

        return optimizer_state_bytes(self.optim)

    def shard_numel(self) -> int:
        """Elements of this rank's slices, padding included (``ceil(numel / N)`` per group)."""
        return sum(f.end - f.start for f in self._flat)


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def _copy(v: Any) -> Any:
    return v.clone() if isinstance(v, torch.Tensor) else v


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
