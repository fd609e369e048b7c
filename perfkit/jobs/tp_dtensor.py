"""PyTorch's own tensor parallelism (DTensor) for :class:`perfkit.parallel.gpt.GPT`: the plan
that splits it as :func:`perfkit.parallel.tp_gpt.parallelize_gpt` does, for comparisons.

Usage (inside a worker, every rank)::

    model, loss_fn = dtensor_gpt(GPT(cfg), sequence_parallel=True)
    with loss_parallel():                       # the vocabulary-parallel loss, backward too
        loss_fn(idx, targets).backward()
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from perfkit._checks import check_type
from perfkit.parallel.gpt import GPT, GPTConfig

__all__ = ["dtensor_gpt", "dtensor_plan"]


def dtensor_plan(cfg: GPTConfig, sp: bool = False) -> dict[str, Any]:
    """PyTorch's plan for the same split (torchtitan's for Llama): Colwise for ``q``, ``k``,
    ``v``, ``fc``, the head; Rowwise for the projections and the embedding; with ``sp``,
    SequenceParallel LayerNorms and sequence-sharded activations between blocks."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    between = Shard(1) if sp else Replicate()   # the activation's layout between regions
    plan: dict[str, Any] = {
        "embed.wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "head.lm_head": ColwiseParallel(input_layouts=between, output_layouts=Shard(-1),
                                        use_local_output=False)}
    if sp:
        plan["embed"] = PrepareModuleOutput(output_layouts=Replicate(),
                                            desired_output_layouts=Shard(1))
        plan["head.ln_f"] = SequenceParallel()
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        for region, cols, row in (("attn", "qkv", "proj"), ("mlp", ["fc"], "proj")):
            # one DTensor input for the region: one all-reduce (or gather) for all its columns
            plan[b + region] = PrepareModuleInput(input_layouts=(between,),
                                                  desired_input_layouts=(Replicate(),),
                                                  use_local_output=False)
            for c in cols:
                plan[f"{b}{region}.{c}"] = ColwiseParallel()
            plan[f"{b}{region}.{row}"] = RowwiseParallel(output_layouts=between)
        if sp:
            plan[b + "ln1"], plan[b + "ln2"] = SequenceParallel(), SequenceParallel()
    return plan


def dtensor_gpt(model: GPT, sequence_parallel: bool = False,
                mesh: Any = None) -> tuple[GPT, Any]:
    """``model`` split in place by ``parallelize_module`` over a 1-D CPU (or given) mesh, and
    its loss function, to be called (forward and backward) inside ``loss_parallel()``.

    Warning:
        Collective: every rank must call it with a model built identically.

    Raises:
        TypeError: if ``model`` is not a GPT.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    check_type("model", model, GPT)
    mesh = mesh or init_device_mesh("cpu", (dist.get_world_size(),))
    model = parallelize_module(model, mesh, dtensor_plan(model.cfg, sequence_parallel))

    def loss(idx: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        # call inside loss_parallel(), backward included (a nested context would end early)
        return F.cross_entropy(model(idx).flatten(0, 1), tgt.reshape(-1))
    return model, loss
