"""The sharded variants of :mod:`perfkit.jobs.zero_bench`: how each is built, how its
model states are counted, how its whole parameters are read back, where its collectives are.

* ``zero1``, ``zero2``: :class:`perfkit.parallel.ZeroOptimizer` at stage 1 or 2
  (reduce-scatter during backward, all-gather waited for in the next forward);
* ``zero3``: :class:`perfkit.parallel.ShardedModule` over the GPT-2 blocks and
  ``ZeroOptimizer(stage=3)``;
* ``fsdp2``: PyTorch's ``fully_shard`` on each block and on the root, over an explicit
  CPU device mesh, with ``torch.optim.AdamW`` on the sharded (DTensor) parameters;
* ``deepspeed_N``: ``deepspeed.initialize`` at ZeRO stage N with a client
  ``torch.optim.AdamW`` (no compiled op; the shared-memory comm op is skipped).

Model states are counted from distinct storages (:func:`perfkit.memory.live_model_states`)
after backward, before the step. For DeepSpeed they are what its engine exposes: module
parameters (``ds_tensor`` partitions at stage 3), the fp32 partition its optimizer steps,
the tensors its ZeRO optimizer keeps under attributes named ``*grad*``, and the optimizer
state; buffers inside C++ (DDP's reducer buckets) are not visible to any of them.

Usage (inside a worker)::

    model, net, opt, engine = build("zero3", make_model, lr=1e-3, batch=8)
    states = model_states("zero3", model, opt, engine)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from perfkit.memory.model_states import LiveModelStates, live_model_states
from perfkit.parallel.zero import ZeroOptimizer
from perfkit.parallel.zero3 import ShardedModule

__all__ = ["BUCKET_CAP_MB", "build", "full_parameters", "model_states", "traffic_targets"]

BUCKET_CAP_MB = 1.0  # perfkit's ZeRO buckets in the benchmark: several per step, as DDP's


def _blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.transformer.h)  # GPT-2's transformer layers


def build(name: str, model: nn.Module, lr: float, batch: int) -> tuple[Any, Any, Any]:
    """``(net, optimizer, engine)`` for a sharded variant (``engine``: DeepSpeed's or None).

    Warning:
        Collective: every rank builds the same variant at the same time.
    """
    if name in ("zero1", "zero2"):
        return model, ZeroOptimizer(list(model.parameters()), torch.optim.AdamW,
                                    stage=int(name[-1]), bucket_cap_mb=BUCKET_CAP_MB,
                                    module=model, lr=lr), None
    if name == "zero3":
        # the root (embeddings, tied head, final norm) freed after forward too: GPT-2's
        # backward uses it in the same order on every rank, and stage 3 then moves 1.5x DP
        net = ShardedModule(model, blocks=_blocks(model), reshard_root=True)
        return net, ZeroOptimizer(net, torch.optim.AdamW, stage=3, lr=lr), None
    if name == "fsdp2":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in _blocks(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters(), lr=lr), None
    if name.startswith("deepspeed_"):
        engine = _deepspeed_engine(model, int(name[-1]), batch, lr)
        return engine, innermost_optimizer(engine.optimizer), engine
    raise ValueError(f"not a sharded variant: {name!r}")


def _deepspeed_engine(model: nn.Module, stage: int, batch: int, lr: float) -> Any:
    import deepspeed

    # DeepSpeed compiles a shared-memory comm op with g++ at start-up (~30 s, cached in
    # ~/.cache/torch_extensions); without it, it falls back to torch.distributed (gloo).
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    config = {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": stage}, "steps_per_print": 1 << 30,
              "wall_clock_breakdown": False,
              "gradient_clipping": 0.0}  # DeepSpeed 0.19 clips at norm 1.0 unless told
    # A client torch optimizer: the config's {"type": "AdamW"} would build FusedAdam (~40 s).
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    return engine


def innermost_optimizer(opt: Any) -> torch.optim.Optimizer:
    """DeepSpeed wraps the client optimizer (ZeRO stages keep it as ``.optimizer``)."""
    while not isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "optimizer"):
        opt = opt.optimizer
    return opt


def _local(t: Any) -> Any:
    """A DTensor's local shard (FSDP2), other tensors as they are."""
    return t.to_local() if hasattr(t, "to_local") else t


def _tensors(x: Any) -> Iterable[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield _local(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)


def _state(opt: Any) -> list[torch.Tensor]:
    return [t for s in opt.state.values() for t in _tensors(s)]


def model_states(name: str, model: nn.Module, net: Any, opt: Any, engine: Any) -> LiveModelStates:
    """Parameters, gradients and optimizer state alive on this rank (bytes of storages).

    Call after backward and before the step (perfkit's ZeRO: after ``sync_grads``).
    """
    params = [_local(p) for p in model.parameters()]
    grads = [_local(p.grad) if p.grad is not None else None for p in model.parameters()]
    inner = getattr(opt, "optim", opt)
    if isinstance(opt, ZeroOptimizer):
        grads += opt.gradient_tensors()
    if isinstance(net, ShardedModule):
        params += [u.shard for u in net.units] + [u.full for u in net.units]
    if engine is not None:
        params += [getattr(p, "ds_tensor", None) for p in model.parameters()]
        params += [p for g in inner.param_groups for p in g["params"]]  # the fp32 partition
        zero = engine.optimizer
        grads += [t for k, v in vars(zero).items() if "grad" in k for t in _tensors(v)]
    return live_model_states(params, grads, _state(inner))


@torch.no_grad()
def full_parameters(name: str, model: nn.Module, net: Any, opt: Any = None) -> list[torch.Tensor]:
    """Every parameter whole, in ``model.parameters()`` order (perfkit's ZeRO-1/2: after
    waiting for ``opt``'s all-gather of the last step, which the next forward would wait for).

    Warning:
        Collective for the sharded variants: every rank calls it.
    """
    if isinstance(opt, ZeroOptimizer):
        opt.wait_params()
    if isinstance(net, ShardedModule):
        return net.full_parameters()
    params = list(model.parameters())
    if name == "fsdp2":
        return [p.full_tensor() for p in params]
    if name == "deepspeed_3":
        import deepspeed

        with deepspeed.zero.GatheredParameters(params):
            return [p.detach().clone() for p in params]
    return [p.detach().clone() for p in params]


def traffic_targets(engine: Any) -> list[tuple[Any, str, str]]:
    """Collectives DeepSpeed bound before the step, for :func:`perfkit.comm.count_traffic`."""
    if engine is None:
        return []
    import deepspeed.comm as ds_comm

    cdb = ds_comm.comm.cdb
    names = (("all_gather_function", "all_gather_into_tensor"),
             ("reduce_scatter_function", "reduce_scatter_tensor"))
    return [(cdb, attr, name) for attr, name in names if callable(getattr(cdb, attr, None))]


def step_fn(net: Any, opt: Any, engine: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """Forward and backward of one batch ``(B, T)``; returns the loss."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        loss = net(input_ids=x, labels=x).loss
        (engine.backward if engine is not None else torch.Tensor.backward)(loss)
        return loss
    return fn
