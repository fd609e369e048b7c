"""Resharding a checkpoint: save on 4 gloo ranks through ``perfkit.saving.model_state`` /
``optim_state``, load on 3, 2 and 1 (the last in a process without a process group), for
DDP, ZeRO-1/2/3, FSDP2 and DP x TP.

Per layout: the synchronous ``dcp.save`` time on 4 ranks (median of 3 saves, slowest
rank), each rank's bytes in the files DCP wrote and the largest rank's share, the elements
of the optimizer state each rank held when saving (against the whole state), the
``dcp.load`` time on each world size (slowest rank), and whether what each loaded, saved
again, equals the 4-rank checkpoint bit for bit (``exact``: every key, read back whole
without a process group). The model: an MLP of ``--width`` (float32, AdamW), a
``--width``-wide one-block GPT split over TP groups of 2 (of 1 on 3 ranks) for DP x TP.
Four processes on two cores: the times measure this machine's scheduler as much as DCP.

Targets: ``exact`` everywhere; no rank holds more than 1/N + 5% of a sharded layout's
optimizer state (``held_share``), nor writes more than 1/N + 25% of the bytes
(``largest_file_share``; DCP spreads a replicated layout's keys over the ranks too).

Prints one JSON object. Run::

    .venv/bin/python benchmarks/checkpoint_reshard.py [--width 512] [--layouts ddp,zero3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

LAYOUTS = ("ddp", "zero1", "zero2", "zero3", "fsdp2", "dptp")
SHARDED = ("zero1", "zero2", "zero3", "fsdp2")


def build(layout: str, width: int) -> tuple[Any, Any, Any]:
    """``(module to save, optimizer, loss of a step)`` on this process's world."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from perfkit.parallel import GPT, GPTConfig, ShardedModule, ZeroOptimizer, parallelize_gpt

    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(0)
    kw = {"lr": 1e-3, "weight_decay": 0.01}
    if layout == "dptp":
        cfg = GPTConfig(vocab_size=256, block_size=16, n_embd=width // 4, n_layer=2, n_head=4)
        idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size + 1))
        model = GPT(cfg)
        if dist.is_initialized():
            t = 2 if world % 2 == 0 else 1
            groups = [dist.new_group(list(range(i, i + t))) for i in range(0, world, t)]
            model = parallelize_gpt(model, groups[dist.get_rank() // t])
            return model, torch.optim.AdamW(model.parameters(), **kw), \
                lambda: model.loss(idx[:, :-1], idx[:, 1:])
        from perfkit.parallel import gpt_loss

        return model, torch.optim.AdamW(model.parameters(), **kw), \
            lambda: gpt_loss(model(idx[:, :-1]), idx[:, 1:])
    model = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width + 3))
    x = torch.randn(4, width)
    fwd = model
    if not dist.is_initialized():
        opt = torch.optim.AdamW(model.parameters(), **kw)
    elif layout == "ddp":
        fwd = model = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), **kw)
    elif layout in ("zero1", "zero2"):
        opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=int(layout[-1]),
                            bucket_cap_mb=1, module=model, **kw)
    elif layout == "zero3":
        fwd = model = ShardedModule(model, [model[0], model[2]])
        opt = ZeroOptimizer(model, torch.optim.AdamW, stage=3, **kw)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in (model[0], model[2], model):
            fully_shard(layer, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), **kw)
    return model, opt, lambda: fwd(x).square().mean()


def held(sd: Any) -> tuple[int, int]:
    """Elements of the tensors (at least 1-D) in ``sd`` this rank holds, and their sizes."""
    import torch
    from torch.distributed.tensor import DTensor

    if isinstance(sd, dict):
        parts = [held(v) for v in sd.values()]
        return sum(h for h, _ in parts), sum(t for _, t in parts)
    if not isinstance(sd, torch.Tensor) or sd.dim() == 0:
        return 0, 0
    if isinstance(sd, DTensor):
        local = sd._local_tensor
        return (sum(x.numel() for x in local.local_shards()) if hasattr(local, "local_shards")
                else local.numel()), sd.numel()
    return sd.numel(), sd.numel()


def worker(a: argparse.Namespace) -> dict[str, Any]:
    """One layout on this world: save (``--phase save``) or load and save again."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from perfkit.saving import model_state, optim_state

    model, opt, loss = build(a.layout, a.width)
    state = {"model": model_state(model), "optim": optim_state(opt, model)}
    distributed = dist.is_initialized()
    if a.phase == "save":
        loss().backward()
        opt.step()
        opt.zero_grad()
        times = []
        for i in range(3):
            if distributed:
                dist.barrier()
            t0 = time.perf_counter()
            dcp.save(state, checkpoint_id=os.path.join(a.root, f"save{i}"))
            times.append(time.perf_counter() - t0)
        return {"save_s": sorted(times)[1], "held": held(state["optim"].state_dict())}
    if distributed:
        dist.barrier()
    t0 = time.perf_counter()
    dcp.load(state, checkpoint_id=os.path.join(a.root, "save0"), no_dist=not distributed)
    took = time.perf_counter() - t0
    dcp.save(state, checkpoint_id=os.path.join(a.root, f"loaded{a.world}"),
             no_dist=not distributed)
    return {"load_s": took}


def full(path: str) -> dict[str, Any]:
    """Every key of a DCP checkpoint, tensors whole, read without a process group."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(path, path + ".pt")
    flat: dict[str, Any] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        else:
            flat[prefix] = v
    walk("", torch.load(path + ".pt", weights_only=False))
    return flat


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return set(a) == set(b) and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def run_layout(layout: str, width: int) -> dict[str, Any]:
    from perfkit import dist

    root = tempfile.mkdtemp(prefix=f"reshard-{layout}-")
    try:
        args = ["--worker", "--layout", layout, "--width", str(width), "--root", root]
        saved = dist.launch(__file__, 4, [*args, "--phase", "save", "--world", 4], timeout_s=600)
        files = sorted(Path(root, "save0").glob("*.distcp"))
        sizes = [f.stat().st_size for f in files]
        out: dict[str, Any] = {
            "save_s": max(r["save_s"] for r in saved), "bytes_per_rank": sizes,
            "largest_file_share": max(sizes) / sum(sizes),
            "held_share": max(r["held"][0] / r["held"][1] for r in saved),
            "load_s": {}, "exact": {}}
        for m in (3, 2, 1):
            if m == 1:
                env = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}
                done = subprocess.run([sys.executable, __file__, *args, "--phase", "load",
                                       "--world", "1"], capture_output=True, text=True,
                                      timeout=600, env=env, check=True)
                res = [json.loads(done.stdout.strip().splitlines()[-1])]
            else:
                res = dist.launch(__file__, m, [*args, "--phase", "load", "--world", m],
                                  timeout_s=600)
            out["load_s"][str(m)] = max(r["load_s"] for r in res)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
                out["exact"][str(m)] = same(full(os.path.join(root, "save0")),
                                            full(os.path.join(root, f"loaded{m}")))
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--layout", help=argparse.SUPPRESS)
    p.add_argument("--phase", help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        if a.world == 1:
            print(json.dumps(worker(a)))
            return
        from perfkit import dist as pdist

        pdist.init_worker("gloo")
        pdist.worker_result(worker(a))
        pdist.shutdown()
    layouts = {name: run_layout(name, a.width) for name in a.layouts.split(",")}
    targets = {
        "exact": all(all(r["exact"].values()) for r in layouts.values()),
        "held_share_at_most_0.30": {n: layouts[n]["held_share"] <= 0.25 + 0.05
                                    for n in SHARDED if n in layouts},
        "largest_file_share_at_most_0.50": {n: r["largest_file_share"] <= 0.25 + 0.25
                                            for n, r in layouts.items()}}
    print(json.dumps({"config": {"width": a.width, "saved_on": 4, "loaded_on": [3, 2, 1]},
                      "layouts": layouts, "targets": targets}, indent=1))


if __name__ == "__main__":
    main()
