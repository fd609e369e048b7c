"""torchrun worker for tests/distributed/test_saving_reshard.py: every layout saved through
``perfkit.saving.model_state``/``optim_state`` on N ranks and loaded on M.

Layouts (float64, tiny): ``ddp`` (torch DDP + AdamW), ``zero1``/``zero2``/``zero3``
(perfkit's ZeroOptimizer around AdamW, 25-value buckets so every parameter's range splits
unevenly; stage 3 through a ShardedModule with two blocks), ``fsdp2`` (``fully_shard`` per
linear and the root), ``dptp`` (a one-block GPT split by ``parallelize_gpt`` over TP groups
of 2 where the world is even, 1 otherwise; gradients averaged over the DP groups), ``zerotp``
(the same GPT, ZeRO-2 over the DP groups: each rank's TP block cut again in flat ranges). The
data: a global batch per step, each DP rank its chunk; the same on any number of ranks.

``--phase save``: per layout, train ``K`` steps, save ``<root>/<layout>/ckpt``, train ``J``
more (the run that never stopped: ``ref``, final state in ``final_ref``); then a fresh model
(other initial weights) loads ``ckpt``, trains the same ``J`` steps (``resumed``, final state
in ``final_resumed``).

``--phase load``: per layout, a fresh model on this world loads ``ckpt``, saves what it
holds at once (``<world>/loaded``: the test compares it with ``ckpt`` bit for bit), trains
the ``J`` steps (``resumed``) and saves ``<world>/final``.

``--phase single`` (plain ``python``, no process group): a plain model and ``AdamW`` load
``--source`` (a directory under each layout's), save ``1/loaded``, train ``J`` steps on the
whole batch.

Usage::

    launch(WORKER, 4, ["--phase", "save", "--root", root, "--layouts", "ddp,zero3"])
"""

import argparse
import os
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

from perfkit.parallel import GPT, GPTConfig, ShardedModule, ZeroOptimizer, gpt_loss, parallelize_gpt
from perfkit.saving import model_state, optim_state

K, J, BATCH = 3, 2, 12  # steps before the save, after it; global batch (divides 1-4)
CAP = 200 / 2**20  # MiB: 25 float64 values per bucket
CFG = GPTConfig(vocab_size=16, block_size=8, n_embd=8, n_layer=1, n_head=2)
LAYOUTS = ("ddp", "zero1", "zero2", "zero3", "fsdp2", "dptp", "zerotp")


def mlp(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 7), nn.Tanh(),
                         nn.Linear(7, 1)).double()


def gpt(seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(CFG).double()


def batch(layout: str, step: int, part: int, parts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s chunk ``part`` of ``parts`` of the global batch."""
    g = torch.Generator().manual_seed(100 + step)
    if layout in ("dptp", "zerotp"):
        idx = torch.randint(0, CFG.vocab_size, (BATCH, CFG.block_size + 1), generator=g)
        x, y = idx[:, :-1], idx[:, 1:]
    else:
        x = torch.randn(BATCH, 6, generator=g, dtype=torch.float64)
        y = torch.sin(x.sum(dim=1, keepdim=True))
    n = BATCH // parts
    return x[part * n:(part + 1) * n], y[part * n:(part + 1) * n]


class Run:
    """One layout on this world: the module to save, the optimizer, and one training step."""

    def __init__(self, layout: str, seed: int) -> None:
        self.layout = layout
        distributed = dist.is_initialized()
        world = dist.get_world_size() if distributed else 1
        rank = dist.get_rank() if distributed else 0
        self.part, self.parts, self.dp_group = rank, world, None
        if not distributed:  # the plain model every layout loads into
            self.model = gpt(seed) if layout in ("dptp", "zerotp") else mlp(seed)
            self.forward = self.model
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2, weight_decay=0.01)
            return
        if layout in ("dptp", "zerotp"):
            self._dptp(seed, world, rank)
            return
        model = mlp(seed)
        self.forward = self.model = model
        if layout == "ddp":
            # find_unused_parameters: DDP then keeps its first bucket order. By default it
            # rebuilds its buckets after the first step, in the order gradients arrived; over
            # 4 gloo ranks an element's sum order follows its place in the bucket, so a fresh
            # DDP's first step would differ in the last bit from one that ran on
            self.model = self.forward = nn.parallel.DistributedDataParallel(
                model, find_unused_parameters=True)
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
        elif layout in ("zero1", "zero2"):
            self.opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=int(layout[-1]),
                                     bucket_cap_mb=CAP, module=model, lr=1e-2, weight_decay=0.01)
        elif layout == "zero3":
            self.model = self.forward = ShardedModule(model, [model[0], model[2]])
            self.opt = ZeroOptimizer(self.model, torch.optim.AdamW, stage=3, lr=1e-2,
                                     weight_decay=0.01)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (world,))
            for layer in (model[0], model[2], model[4]):
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)

    def _dptp(self, seed: int, world: int, rank: int) -> None:
        t = 2 if world % 2 == 0 else 1
        d = world // t
        tp = [dist.new_group([i * t + j for j in range(t)]) for i in range(d)]
        dp = [dist.new_group([i * t + j for i in range(d)]) for j in range(t)]
        self.dp_group, self.part, self.parts = dp[rank % t], rank // t, d
        self.model = parallelize_gpt(gpt(seed), tp[rank // t])
        self.forward = self.model
        if self.layout == "zerotp":  # ZeRO-2 over the DP group shards the TP pieces further
            self.opt = ZeroOptimizer(self.model.parameters(), torch.optim.AdamW, stage=2,
                                     bucket_cap_mb=CAP, process_group=self.dp_group,
                                     module=self.model, lr=1e-2, weight_decay=0.01)
            self.dp_group = None  # the optimizer averages the gradients
            return
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2, weight_decay=0.01)

    def loss(self, step: int) -> torch.Tensor:
        x, y = batch(self.layout, step, self.part, self.parts)
        if self.layout not in ("dptp", "zerotp"):
            return (self.forward(x) - y).square().mean()
        if isinstance(self.model, GPT):
            return gpt_loss(self.model(x), y)
        return self.model.loss(x, y)

    def step(self, step: int) -> float:
        loss = self.loss(step)
        loss.backward()
        if self.dp_group is not None and self.parts > 1:  # DP x TP: average over DP ranks
            for p in self.model.parameters():
                dist.all_reduce(p.grad, group=self.dp_group)
                p.grad.div_(self.parts)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    def state(self) -> dict[str, Any]:
        return {"model": model_state(self.model), "optim": optim_state(self.opt, self.model)}

    def save(self, path: str) -> None:
        dcp.save(self.state(), checkpoint_id=path, no_dist=not dist.is_initialized())

    def load(self, path: str) -> None:
        dcp.load(self.state(), checkpoint_id=path, no_dist=not dist.is_initialized())


def held(sd: Any) -> tuple[int, int]:
    """Elements of the tensors (at least 1-D) in ``sd`` that this rank holds, and their global
    sizes: what a layout keeps per rank, in the state DCP saves."""
    from torch.distributed.tensor import DTensor

    if isinstance(sd, dict):
        parts = [held(v) for v in sd.values()]
        return sum(h for h, _ in parts), sum(t for _, t in parts)
    if not isinstance(sd, torch.Tensor) or sd.dim() == 0:
        return 0, 0
    if isinstance(sd, DTensor):
        local = sd._local_tensor
        mine = sum(x.numel() for x in local.local_shards()) if hasattr(local, "local_shards") \
            else local.numel()
        return mine, sd.numel()
    return sd.numel(), sd.numel()


def save_phase(root: str, layouts: list[str]) -> dict[str, Any]:
    out = {}
    for layout in layouts:
        where = os.path.join(root, layout)
        run = Run(layout, seed=0)
        first = [run.step(s) for s in range(K)]
        state = run.state()
        share = {k: held(v.state_dict()) for k, v in state.items()}
        run.save(os.path.join(where, "ckpt"))
        ref = [run.step(s) for s in range(K, K + J)]
        run.save(os.path.join(where, "final_ref"))
        again = Run(layout, seed=1)
        again.load(os.path.join(where, "ckpt"))
        resumed = [again.step(s) for s in range(K, K + J)]
        again.save(os.path.join(where, "final_resumed"))
        out[layout] = {"first": first, "ref": ref, "resumed": resumed, "held": share}
    return out


def load_phase(root: str, layouts: list[str], source: str, world: int) -> dict[str, Any]:
    out = {}
    for layout in layouts:
        where = os.path.join(root, layout)
        run = Run(layout, seed=1)
        run.load(os.path.join(where, source))
        run.save(os.path.join(where, str(world), "loaded"))
        resumed = [run.step(s) for s in range(K, K + J)]
        run.save(os.path.join(where, str(world), "final"))
        out[layout] = {"resumed": resumed, "parts": run.parts}
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["save", "load", "single"], required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--source", default="ckpt")
    a = p.parse_args()
    layouts = a.layouts.split(",")
    if a.phase == "single":
        # DCP says once that it saves and loads in one process: that is the point here
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        import json

        print("RESULT " + json.dumps(load_phase(a.root, layouts, a.source, 1)))
        return
    from perfkit import dist as pdist

    pdist.init_worker()
    if a.phase == "save":
        pdist.worker_result(save_phase(a.root, layouts))
    else:
        pdist.worker_result(load_phase(a.root, layouts, a.source, dist.get_world_size()))
    pdist.shutdown()


if __name__ == "__main__":
    main()
