"""torchrun worker for tests/distributed/test_zero_clip_state_dist.py: gradient clipping under ZeRO
1-3 against DDP + ``torch.nn.utils.clip_grad_norm_``, and ShardedModule's state dict resumed.

``--case clip``: :class:`tools.labs.zero_check.PartialMLP` in float64 (a frozen tensor; an
extra layer whose gradient is ``None`` on some ranks, or on all, in some steps) trained on
each rank's chunk of the global batch by ``ZeroOptimizer`` at stage 1, 2 or 3 (stage 3 with
the last layer's bias ``unsharded``: kept whole on every rank, so counted once), clipped by
``opt.clip_grad_norm_``; the reference is ``DistributedDataParallel`` on the same model,
clipped by torch on its (whole, averaged) gradients. ``max_norm`` lies below every step's
norm, so clipping changes every step. Planted wrong versions: torch's function on the ZeRO
model's parameters (``torch``, every stage), on this rank's slices only (``local``, stage
2), the unsharded parameters counted on every rank (``twice``, stage 3); and DDP unclipped.

``--case tp``: :func:`perfkit.parallel.parallelize_gpt` (and with sequence parallelism) in
float64, clipped by ``clip_grad_norm_`` over :func:`perfkit.parallel.tensor_parallel_pieces`
(LayerNorms, positions and row-parallel biases counted once), against the unsplit GPT
clipped by torch; planted: the replicated parameters counted on every rank (``twice``).

``--case state``: ShardedModule + ``ZeroOptimizer(stage=3)`` trained 4 steps, its
``state_dict()`` and the optimizer's saved to a file (``--save``), 4 more steps; a fresh
module (other initial weights) loads the file and trains the same 4 steps. The planted old
behaviour is the same module without its state-dict hooks (``_state_hooks`` removed): its
state holds empty tensors, which load "successfully". ``--load`` (another world size's
file): loaded into a fresh module here, its parameters compared with the saved ones.

Usage::

    launch(str(Path(__file__).with_name("_zero_clip_state_worker.py")), 2, ["--case", "clip"])
"""

import argparse
import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from perfkit import dist as pdist
from perfkit.jobs.tp_training import global_batch as gpt_batch
from perfkit.jobs.tp_training import gpt_config, seeded_gpt
from perfkit.parallel import (
    ShardedModule,
    ZeroOptimizer,
    clip_grad_norm_,
    gpt_loss,
    parallelize_gpt,
    tensor_parallel_pieces,
)
from tools.labs.zero_check import GLOBAL_BATCH, PartialMLP, blocks_of, extra_rows, global_batch

STEPS = 8
CAP = 200 / 2**20  # MiB: 25 float64 values, so the model spreads over 3 buckets
MAX_NORM = {2.0: 0.25, math.inf: 0.05}  # below every step's norm (the test checks it)
OPTIMIZERS = {"sgd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}),
              "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1})}


def chunk(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = GLOBAL_BATCH // world
    return t[rank * n:(rank + 1) * n]


def batch(step: int, rank: int, world: int, dtype: torch.dtype) -> tuple[Any, Any, Any]:
    x, y = global_batch(step)
    return (chunk(x, rank, world).to(dtype), chunk(y, rank, world).to(dtype),
            chunk(extra_rows(step, world), rank, world))


def ddp_reference(rank: int, world: int, optimizer: str, norm_type: float,
                  clip: bool) -> dict[str, Any]:
    """DDP + torch's clip_grad_norm_ on the whole, averaged gradients: norms, parameters."""
    model = PartialMLP().double()
    ddp = DDP(model, find_unused_parameters=True)
    cls, kw = OPTIMIZERS[optimizer]
    opt = cls(model.parameters(), **kw)
    norms, params = [], []
    for s in range(STEPS):
        x, y, model.mask = batch(s, rank, world, torch.float64)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        if clip:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                              MAX_NORM[norm_type], norm_type)))
        opt.step()
        params.append([p.detach().clone() for p in model.parameters()])
    return {"norms": norms, "params": params}


def zero_run(rank: int, world: int, stage: int, optimizer: str, norm_type: float,
             clip: str) -> dict[str, Any]:
    """ZeroOptimizer at ``stage`` clipped by ``clip``: ours or a planted wrong version."""
    model = PartialMLP().double()
    cls, kw = OPTIMIZERS[optimizer]
    if stage == 3:
        last_bias = model.mlp[4].bias
        net = ShardedModule(model, blocks=blocks_of(model), unsharded=[last_bias])
        opt = ZeroOptimizer(net, cls, stage=3, **kw)
    else:
        net = model
        opt = ZeroOptimizer(model.parameters(), cls, stage=stage, bucket_cap_mb=CAP,
                            module=model, **kw)
    max_norm = MAX_NORM[norm_type]
    norms, params, error = [], [], None
    for s in range(STEPS):
        x, y, model.mask = batch(s, rank, world, torch.float64)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        if clip == "ours":
            norms.append(float(opt.clip_grad_norm_(max_norm, norm_type)))
        elif clip == "torch":  # what a user would try first
            try:  # stages 2-3: p.grad is a ShardedGradient marker, which raises
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm,
                                                                  norm_type)))
            except RuntimeError as e:
                error = str(e)
                break
        elif clip == "local":  # torch's function on the slices this rank steps: its own norm
            opt.sync_grads()
            leaves = [t for g in opt.optim.param_groups for t in g["params"]]
            norms.append(float(torch.nn.utils.clip_grad_norm_(leaves, max_norm, norm_type)))
        elif clip == "twice":  # the unsharded parameters summed on every rank
            opt.sync_grads()
            leaves = [t for b in opt.buckets for t in b.segments] + opt.sharded.unsharded
            norms.append(float(clip_grad_norm_(leaves, max_norm, norm_type)))
        try:
            opt.step()
        except RuntimeError as e:
            error = str(e)
            break
        opt.wait_params()  # stages 1-2: the updated slices' all-gather, else the next forward
        params.append(net.full_parameters() if stage == 3 else
                      [p.detach().clone() for p in model.parameters()])
    return {"norms": norms, "params": params, "error": error}


def max_diff(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> float:
    return max(float((p - q).abs().max()) for pa, pb in zip(a, b, strict=True)
               for p, q in zip(pa, pb, strict=True))


def clip_case(rank: int, world: int) -> dict[str, Any]:
    configs = [(1, "sgd", 2.0), (1, "sgd", math.inf), (2, "sgd", 2.0), (2, "sgd", math.inf),
               (2, "adamw", 2.0), (3, "sgd", 2.0), (3, "sgd", math.inf)]
    # in one order on every rank (a set's would differ: each process hashes strings anew)
    refs = {(o, n): ddp_reference(rank, world, o, n, clip=True)
            for o, n in dict.fromkeys((o, n) for _, o, n in configs)}
    unclipped = ddp_reference(rank, world, "sgd", 2.0, clip=False)
    out: dict[str, Any] = {"unclipped_vs_clipped": max_diff(unclipped["params"],
                                                            refs[("sgd", 2.0)]["params"])}
    for stage, optimizer, norm_type in configs:
        ref = refs[(optimizer, norm_type)]
        planted = ["torch"] + {1: [], 2: ["local"], 3: ["twice"]}[stage]
        for clip in ["ours"] + (planted if (optimizer, norm_type) == ("sgd", 2.0) else []):
            run = zero_run(rank, world, stage, optimizer, norm_type, clip)
            n = len(run["params"])
            out[f"{stage}-{optimizer}-{norm_type}-{clip}"] = {
                "max_norm": MAX_NORM[norm_type], "ref_norms": ref["norms"],
                "norms": run["norms"], "error": run["error"], "steps": n,
                "norm_rel_diff": max((abs(a - b) / b for a, b in
                                      zip(run["norms"], ref["norms"])), default=None),
                "param_max_diff": max_diff(run["params"], ref["params"][:n]) if n else None}
    return out


def tp_run(sp: bool, clip: str) -> dict[str, Any]:
    """The GPT split over every rank (``clip="tp"`` or ``"twice"``) or whole (``"torch"``),
    8 SGD steps on the same global batch, clipped: norms and parameters (this rank's slices
    against the unsplit model's, in the test)."""
    # heads, vocabulary and sequence split by 2 and by 3
    cfg = gpt_config({"n_head": 6, "n_embd": 48, "vocab_size": 66, "block_size": 12})
    model = seeded_gpt(cfg).double()
    tp = parallelize_gpt(model, sequence_parallel=sp) if clip != "torch" else None
    params = list((tp or model).parameters())
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    norms = []
    for s in range(STEPS):
        idx, tgt = gpt_batch(cfg, 4, s)
        opt.zero_grad()
        if tp is None:
            gpt_loss(model(idx), tgt).backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, 0.5)))
        else:
            tp.loss(idx, tgt).backward()
            tp.sync_grads()  # sequence parallelism: the LayerNorms' partial gradients summed
            split, whole = tensor_parallel_pieces(tp)
            if clip == "twice":
                split, whole = split + whole, []
            norms.append(float(clip_grad_norm_(split, 0.5, replicated=whole,
                                               process_group=tp.group)))
        opt.step()
    return {"norms": norms, "model": tp or model}


def tp_case() -> dict[str, Any]:
    ref = tp_run(False, "torch")
    ref_params = dict(ref["model"].named_parameters())
    out: dict[str, Any] = {}
    for sp in (False, True):
        for clip in ("tp", "twice"):
            run = tp_run(sp, clip)
            tp = run["model"]
            diff = 0.0
            for name, p in tp.named_parameters():
                r, cut = ref_params[name].detach(), tp.shard(name)
                if cut is not None:
                    r = r.narrow(cut[0], cut[1], cut[2] - cut[1])
                diff = max(diff, float((p.detach() - r).abs().max()))
            out[f"{'sp' if sp else 'tp'}-{clip}"] = {
                "ref_norms": ref["norms"], "norms": run["norms"],
                "norm_rel_diff": max(abs(a - b) / b for a, b in zip(run["norms"], ref["norms"])),
                "param_max_diff": diff,
                "replicated": len(tensor_parallel_pieces(tp)[1]),
                "split": len(tensor_parallel_pieces(tp)[0])}
    return out


# --- ShardedModule's state dict ----------------------------------------------------------

def sharded(seed: int) -> tuple[ShardedModule, ZeroOptimizer, PartialMLP]:
    model = PartialMLP(seed)
    net = ShardedModule(model, blocks=blocks_of(model))
    return net, ZeroOptimizer(net, torch.optim.AdamW, stage=3, lr=1e-2, weight_decay=0.1), model


def train(net: ShardedModule, opt: ZeroOptimizer, model: PartialMLP, steps: range, rank: int,
          world: int) -> list[float]:
    """``steps`` AdamW steps; the extra layer's rows are 2 ranks' (the same global batch on
    any world size, so a 2-rank and a 3-rank run compute the same global loss)."""
    losses = []
    for s in steps:
        x, y, _ = batch(s, rank, world, torch.float32)
        model.mask = chunk(extra_rows(s, 2), rank, world)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def bitwise(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def state_case(rank: int, world: int, save: str | None, load: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    net, opt, model = sharded(0)
    train(net, opt, model, range(4), rank, world)
    sd, osd = net.state_dict(), opt.state_dict()
    if save and rank == 0:
        torch.save({"model": sd, "optim": osd}, save)
    dist.barrier()
    at_save = net.full_parameters()
    losses = train(net, opt, model, range(4, 8), rank, world)
    final = net.full_parameters()

    fresh, fresh_opt, fresh_model = sharded(1)  # other initial weights
    ck = torch.load(save, weights_only=True) if save else {"model": sd, "optim": osd}
    keys = fresh.load_state_dict(ck["model"])
    fresh_opt.load_state_dict(ck["optim"])
    loaded = fresh.full_parameters()
    resumed = train(fresh, fresh_opt, fresh_model, range(4, 8), rank, world)
    out["resume"] = {
        "shapes": {k: list(v.shape) for k, v in sd.items()},
        "missing": keys.missing_keys, "unexpected": keys.unexpected_keys,
        "loaded_equal": bitwise(loaded, at_save), "losses_equal": resumed == losses,
        "params_equal": bitwise(fresh.full_parameters(), final), "losses": losses}

    # the old behaviour, planted: the same module without its state-dict hooks
    old, old_opt, old_model = sharded(0)
    for h in old._state_hooks:
        h.remove()
    train(old, old_opt, old_model, range(4), rank, world)
    old_sd, old_osd = old.state_dict(), old_opt.state_dict()
    old_fresh, old_fresh_opt, old_fresh_model = sharded(1)
    for h in old_fresh._state_hooks:
        h.remove()
    old_keys = old_fresh.load_state_dict(old_sd)
    old_fresh_opt.load_state_dict(old_osd)
    old_loaded = old_fresh.full_parameters()
    old_resumed = train(old_fresh, old_fresh_opt, old_fresh_model, range(4, 8), rank, world)
    try:
        sharded(1)[0].load_state_dict(old_sd)
        refused = None
    except ValueError as e:
        refused = str(e)
    out["planted_old"] = {
        "shapes": {k: list(v.shape) for k, v in old_sd.items()},
        "missing": old_keys.missing_keys, "unexpected": old_keys.unexpected_keys,
        "loaded_equal": bitwise(old_loaded, at_save), "losses_equal": old_resumed == losses,
        "params_equal": bitwise(old_fresh.full_parameters(), final), "refused": refused}

    if load:  # another world size's state, resharded here
        other = torch.load(load, weights_only=True)
        there, there_opt, there_model = sharded(1)
        there.load_state_dict(other["model"])
        there_opt.load_state_dict(other["optim"])
        saved = dict(other["model"])
        names = [n for n, _ in there.named_parameters()]
        out["resharded"] = {
            "loaded_equal": bitwise(there.full_parameters(), [saved[n] for n in names]),
            "losses": train(there, there_opt, there_model, range(4, 8), rank, world)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=["clip", "tp", "state"], required=True)
    p.add_argument("--save")
    p.add_argument("--load")
    a = p.parse_args()
    ctx = pdist.init_worker(backend="gloo")
    if a.case == "state":
        result = state_case(ctx.rank, ctx.world_size, a.save, a.load)
    else:
        result = clip_case(ctx.rank, ctx.world_size) if a.case == "clip" else tp_case()
    pdist.worker_result(result)
    pdist.shutdown()


if __name__ == "__main__":
    main()
