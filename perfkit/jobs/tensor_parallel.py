"""Job: tensor and sequence parallelism against the unsplit GPT and against PyTorch's DTensor.

Run by :func:`perfkit.dist.launch`; configured by a JSON object (every task optional)::

    launch("perfkit.jobs.tensor_parallel", 2, ["--config", json.dumps(
        {"model": {"n_embd": 32, "n_head": 4}, "batch": 4, "steps": 5,
         "equality": {}, "dropout": {}, "traffic": {}, "dtensor": {}, "dp_tp": {"dp": 2},
         "timing": {"repeat": 10}})])

* ``equality``: each of :data:`VARIANTS` (or ``{"variants": [...]}``) trained 5 steps with
  SGD (momentum) from the unsplit GPT's weights, on the same global batch as the unsplit
  GPT: per parameter ``max |p - p_ref| / max |p_ref|`` (``rel``, the worst one); AdamW's
  loss curves (``loss_diff``).
* ``dropout``: the random-number contract (:class:`perfkit.parallel.tensor.RNGTracker`).
* ``traffic``: :func:`perfkit.comm.traffic.count_traffic` around one step and one block,
  against :func:`perfkit.parallel.tp_gpt.tp_traffic`.
* ``dtensor``: the same GPT under ``parallelize_module`` (Colwise/Rowwise/SequenceParallel,
  ``loss_parallel``): parameters against the unsplit GPT, collectives counted by
  ``CommDebugMode`` for one step of each implementation (forward, backward, perfkit's
  gradient sums and the SGD step; ``counts`` the whole step, ``in_step`` the SGD step's own
  window, counted apart, which shows where DTensor all-reduces its ``Partial`` gradients).
* ``dp_tp``: a ``(dp, tp)`` device mesh, gradients averaged over ``dp`` by
  :class:`perfkit.parallel.BucketedDP`, against the unsplit GPT on the global batch.
* ``errors``: what :func:`~perfkit.parallel.tp_gpt.parallelize_gpt` raises for its own
  ``model`` (``{"errors": {"model": {"n_head": 4}}}``), or ``None``.
* ``memory``: bytes one block saves for backward under TP and SP, and in its LayerNorm and
  dropout regions (perfkit.memory.saved_tensors).
* ``allreduce``: all-reduce times over ``{"sizes": [...], "repeat": 5}`` bytes.
* ``speedup``: one block unsplit and split, interleaved, at each of ``{"widths": [...]}``.
* ``timing``: perfkit's TP step against DTensor's, interleaved; the slowest rank's times
  (``{"timing": {"repeat": 10, "model": {...}, "batch": 8}}``: its own sizes, if given).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfkit import dist as pdist
from perfkit.comm.traffic import count_traffic
from perfkit.jobs.tp_dtensor import dtensor_gpt
from perfkit.jobs.tp_training import (
    SEED,
    global_batch,
    gpt_config,
    make_optimizer,
    max_over_ranks,
    seeded_gpt,
    train,
    train_reference,
    worst_rel_diff,
)
from perfkit.parallel.data_parallel import BucketedDP
from perfkit.parallel.gpt import GPT, GPTConfig
from perfkit.parallel.tensor import RNGTracker
from perfkit.parallel.tp_gpt import parallelize_gpt, tp_traffic
from perfkit.timing import interleaved

# the variants every comparison runs: name -> parallelize_gpt's keyword arguments
VARIANTS = {"tp": {"sequence_parallel": False},
            "sp": {"sequence_parallel": True},
            "tp_overlap": {"sequence_parallel": False, "overlap": True},
            "sp_recompute": {"sequence_parallel": True, "keep_gathered": False}}


def _tp_losses(cfg: GPTConfig, batch: int, steps: int, opt_name: str,
               sequence_parallel: bool, group: Any = None, model: GPT | None = None,
               **kw: Any) -> tuple[nn.Module, list[float]]:
    rng = RNGTracker(SEED, group) if cfg.dropout else None
    tp = parallelize_gpt(model if model is not None else seeded_gpt(cfg), group, sequence_parallel,
                         rng, **kw)
    return tp, train(tp.loss, list(tp.parameters()), cfg, batch, steps, opt_name, tp.sync_grads)


def equality(cfg: GPTConfig, batch: int, steps: int,
             variants: list[str] | None = None) -> dict[str, Any]:
    """The named variants (default: all) against the unsplit GPT (SGD parameters, AdamW
    loss curves)."""
    out: dict[str, Any] = {}
    ref, ref_losses = train_reference(cfg, batch, steps, "sgd")
    _, ref_adam = train_reference(cfg, batch, steps, "adamw")
    for key, kw in ((k, VARIANTS[k]) for k in (variants or VARIANTS)):
        tp, losses = _tp_losses(cfg, batch, steps, "sgd", **kw)
        rel, name, noise = worst_rel_diff(tp, ref)
        _, adam = _tp_losses(cfg, batch, steps, "adamw", **kw)
        out[key] = {"rel": max_over_ranks(rel), "worst": name, "losses": losses,
                    "key_bias_abs": max_over_ranks(noise),
                    "ref_losses": ref_losses,
                    "loss_diff": max(abs(a - b) for a, b in zip(adam, ref_adam, strict=True))}
    return out


def _gathered(x: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return parts


def dropout(cfg: GPTConfig, batch: int, steps: int) -> dict[str, Any]:
    """The RNG contract: replicated regions draw the unsplit model's masks, split regions
    each rank its own, and the tracker leaves the default stream where it was."""
    cfg = GPTConfig(**{**cfg.__dict__, "dropout": 0.1})
    out: dict[str, Any] = {}
    # TP without SP: every dropout but attention's is replicated; attention's switched off
    # so that the unsplit model's stream is consumed in the same order
    ref, tp_model = seeded_gpt(cfg), seeded_gpt(cfg)
    for m in (ref, tp_model):
        for b in m.blocks:
            b.attn.dropout = 0.0
    ref, ref_losses = train_reference(cfg, batch, steps, "sgd", ref)
    tp, losses = _tp_losses(cfg, batch, steps, "sgd", False, model=tp_model)
    out["replicated_rel"] = max_over_ranks(worst_rel_diff(tp, ref)[0])
    out["dropout_changes_loss"] = losses != train_reference(
        GPTConfig(**{**cfg.__dict__, "dropout": 0.0}), batch, steps, "sgd")[1]
    rng, ones = RNGTracker(SEED), torch.ones(4096)
    before = torch.get_rng_state()
    with rng.fork():
        split = F.dropout(ones, 0.5)
    out["fork_keeps_default_stream"] = bool(torch.equal(before, torch.get_rng_state()))
    with RNGTracker(SEED).fork():
        out["fork_reproducible"] = bool(torch.equal(split, F.dropout(ones, 0.5)))
    masks = _gathered(split)
    out["split_masks_differ"] = all(not torch.equal(masks[0], m) for m in masks[1:])
    masks = _gathered(F.dropout(ones, 0.5))
    out["replicated_masks_equal"] = all(torch.equal(masks[0], m) for m in masks[1:])
    # every dropout on, TP and SP: the replicated parameters stay equal on every rank
    for key, sp in (("tp", False), ("sp", True)):
        tp, losses = _tp_losses(cfg, batch, steps, "sgd", sp)
        drift = max(float(max((q - p).abs().max() for q in _gathered(p.detach())))
                    for n, p in tp.named_parameters() if tp.shard(n) is None)
        block = tp.blocks[0]
        block.train()
        with torch.no_grad():   # the residual dropout: split region only under SP
            mask = (block.drop1(torch.ones(1, 8, cfg.n_embd)) != 0).float()
        ms = _gathered(mask)
        out[key] = {"replicated_drift": drift, "finite": all(map(torch.isfinite,
                                                                  map(torch.tensor, losses))),
                    "residual_masks_differ": all(not torch.equal(ms[0], m) for m in ms[1:])}
    return out


def traffic(cfg: GPTConfig, batch: int) -> dict[str, Any]:
    """Bytes and calls counted around one step and one block, and the model's counts."""
    out: dict[str, Any] = {}
    t = dist.get_world_size()
    for key, kw in VARIANTS.items():
        sp, keep = kw["sequence_parallel"], kw.get("keep_gathered", True)
        tp = parallelize_gpt(seeded_gpt(cfg), **kw)
        idx, tgt = global_batch(cfg, batch, 0)
        with count_traffic() as step:
            tp.loss(idx, tgt).backward()
            tp.sync_grads()
        x = torch.randn(batch, cfg.block_size // t if sp else cfg.block_size, cfg.n_embd,
                        requires_grad=True)
        with count_traffic() as blk:
            tp.blocks[0](x).sum().backward()
        model = tp_traffic(cfg, batch, cfg.block_size, t, sp, keep_gathered=keep)
        block_model = tp_traffic(cfg, batch, cfg.block_size, t, sp, blocks_only=True,
                                 keep_gathered=keep)
        out[key] = {"step": [step.calls, step.buffer_bytes], "model": [model.calls,
                                                                      model.buffer_bytes],
                    "block": [blk.calls, blk.buffer_bytes, blk.sent_bytes(t)],
                    "block_model": [block_model.calls, block_model.buffer_bytes,
                                    block_model.sent_bytes(t)]}
    return out


def memory(cfg: GPTConfig, batch: int) -> dict[str, Any]:
    """Bytes one block saves for backward under TP and SP (dropout on), counted by
    :class:`perfkit.memory.saved_tensors.SavedTensorMeter`: the whole block, and its
    LayerNorm and residual-dropout regions alone (a meter around each of those modules)."""
    from perfkit.memory.saved_tensors import SavedTensorMeter

    cfg = GPTConfig(**{**cfg.__dict__, "dropout": 0.1})
    out: dict[str, Any] = {}
    for key, kw in VARIANTS.items():
        sp = kw["sequence_parallel"]
        block = parallelize_gpt(seeded_gpt(cfg), rng=RNGTracker(SEED), **kw).blocks[0].train()
        meters, hooks = [], []
        for mod in (block.ln1, block.ln2, block.drop1, block.drop2):
            m = SavedTensorMeter(block)
            meters.append(m)
            # a pre-hook's non-None return would replace the module's input: return None
            hooks += [mod.register_forward_pre_hook(lambda *_, m=m: m.__enter__() and None),
                      mod.register_forward_hook(lambda *_, m=m: m.__exit__(None, None, None))]
        seq = cfg.block_size // dist.get_world_size() if sp else cfg.block_size
        x = torch.randn(batch, seq, cfg.n_embd, requires_grad=True)
        with SavedTensorMeter(block) as whole:
            y = block(x)
        for h in hooks:
            h.remove()
        y.sum().backward()
        regions = sum(m.report().activation_bytes for m in meters)
        # the region meters are inner hooks: what they saw, the whole block's did not
        out[key] = {"block": whole.report().activation_bytes + regions, "regions": regions}
    return out


def speedup(widths: list[int], batch: int, seq: int, repeat: int) -> dict[str, Any]:
    """One block's forward and backward, unsplit (every rank alone) and split over the
    ranks, interleaved, at each width; the slowest rank's times per round."""
    out: dict[str, Any] = {}
    for w in widths:
        cfg = GPTConfig(vocab_size=64, block_size=seq, n_embd=w, n_layer=1, n_head=4)
        model = seeded_gpt(cfg)
        full, split = model.blocks[0], parallelize_gpt(seeded_gpt(cfg)).blocks[0]
        x = torch.randn(batch, seq, w, requires_grad=True)
        ms = interleaved([lambda b=b, x=x: b(x).sum().backward() for b in (full, split)],
                         warmup=2, repeat=repeat)
        t = torch.tensor([list(m.times_s) for m in ms], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out[str(w)] = {"unsplit_s": t[0].tolist(), "split_s": t[1].tolist()}
    return out


def allreduce(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """All-reduce times over message sizes (perfkit.comm.collectives.sweep), for the fit."""
    from dataclasses import asdict

    from perfkit.comm.collectives import sweep

    return [asdict(p) for p in sweep(["all_reduce"], sizes, repeat=repeat)]


def _dtensor_model(cfg: GPTConfig, sp: bool) -> tuple[GPT, Any]:
    return dtensor_gpt(seeded_gpt(cfg), sp)


def _backward(loss_fn: Any, cfg: GPTConfig, batch: int, after: Any = None) -> Any:
    from torch.distributed.tensor.parallel import loss_parallel

    def step() -> None:
        with loss_parallel():   # DTensor's loss must run backward inside the context too
            loss_fn(*global_batch(cfg, batch, 0)).backward()
        if after is not None:
            after()
    return step


def dtensor(cfg: GPTConfig, batch: int, steps: int) -> dict[str, Any]:
    """DTensor's TP/SP against the unsplit GPT, and collectives of one step of each."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel

    ref, _ = train_reference(cfg, batch, steps, "sgd")
    out: dict[str, Any] = {}
    for key, sp in (("tp", False), ("sp", True)):
        model, loss = _dtensor_model(cfg, sp)
        with loss_parallel():   # backward too runs inside the context
            losses = train(loss, list(model.parameters()), cfg, batch, steps, "sgd")
        rel = max_over_ranks(worst_rel_diff(model, ref)[0])  # before the counted step moves it
        counts, in_step = {}, {}
        ours = parallelize_gpt(seeded_gpt(cfg), None, sp)
        for name, m, fn in (("dtensor", model, _backward(loss, cfg, batch)),
                            ("perfkit", ours, _backward(ours.loss, cfg, batch, ours.sync_grads))):
            opt = make_optimizer(list(m.parameters()), "sgd")
            # two windows: forward + backward (+ perfkit's sums), then the optimizer step alone
            with CommDebugMode() as cm:
                fn()
            with CommDebugMode() as cm_step, loss_parallel():
                opt.step()
            parts = [{str(k).split(".")[-1]: v for k, v in w.get_comm_counts().items()}
                     for w in (cm, cm_step)]
            counts[name] = {k: parts[0].get(k, 0) + parts[1].get(k, 0)
                            for k in dict.fromkeys([*parts[0], *parts[1]])}
            in_step[name] = parts[1]
        out[key] = {"rel": rel, "losses": losses, "counts": counts, "in_step": in_step}
    return out


def dp_tp(cfg: GPTConfig, batch: int, steps: int, dp: int) -> dict[str, Any]:
    """DP x TP on a ``(dp, tp)`` mesh against the unsplit GPT on the global batch."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dp, dist.get_world_size() // dp), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh.get_group("tp"), mesh.get_group("dp")
    d, local = mesh.get_local_rank("dp"), batch // dp
    ref, _ = train_reference(cfg, batch, steps, "sgd")
    out: dict[str, Any] = {"tp_group": dist.get_process_group_ranks(tp_group),
                           "dp_group": dist.get_process_group_ranks(dp_group)}
    for key, sp in (("tp", False), ("sp", True)):
        tp = parallelize_gpt(seeded_gpt(cfg), tp_group, sp)
        ddp = BucketedDP(tp, group=dp_group)

        def after(tp: Any = tp, ddp: BucketedDP = ddp) -> None:
            tp.sync_grads()    # over tp: sequence-split parameters
            ddp.finish()       # over dp: average the data-parallel replicas

        def loss(idx: torch.Tensor, tgt: torch.Tensor, tp: Any = tp) -> torch.Tensor:
            return tp.loss(idx[d * local:(d + 1) * local], tgt[d * local:(d + 1) * local])
        train(loss, list(tp.parameters()), cfg, batch, steps, "sgd", after)
        out[key] = {"rel": max_over_ranks(worst_rel_diff(tp, ref)[0])}
    return out


def errors(cfg: GPTConfig) -> dict[str, Any]:
    """The error :func:`parallelize_gpt` raises for this model on this world size."""
    try:
        parallelize_gpt(seeded_gpt(cfg))
    except ValueError as e:
        return {"error": str(e)}
    return {"error": None}


def timing(cfg: GPTConfig, batch: int, repeat: int, warmup: int = 2) -> dict[str, Any]:
    """perfkit's TP step (plain, and with its backward overlapped) and DTensor's (forward,
    backward, SGD step), interleaved."""
    from torch.distributed.tensor.parallel import loss_parallel

    ours = parallelize_gpt(seeded_gpt(cfg), None, False)
    overlapped = parallelize_gpt(seeded_gpt(cfg), None, False, overlap=True)
    theirs, their_loss = _dtensor_model(cfg, False)
    fns = []
    for params, fn in ((list(ours.parameters()), _backward(ours.loss, cfg, batch)),
                       (list(theirs.parameters()), _backward(their_loss, cfg, batch)),
                       (list(overlapped.parameters()), _backward(overlapped.loss, cfg, batch))):
        opt = make_optimizer(params, "sgd")

        def step(fn: Any = fn, opt: torch.optim.Optimizer = opt) -> None:
            fn()
            with loss_parallel():
                opt.step()
            opt.zero_grad(set_to_none=True)
        fns.append(step)
    ms = interleaved(fns, warmup=warmup, repeat=repeat)
    t = torch.tensor([list(m.times_s) for m in ms], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)   # a step ends when its slowest rank does
    return {"perfkit_s": t[0].tolist(), "dtensor_s": t[1].tolist(),
            "perfkit_overlap_s": t[2].tolist()}


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Every task named in ``config``, in the order below; see the module docstring.

    Raises:
        ValueError: for a key that names no task (a typo would otherwise run nothing).
    """
    cfg = gpt_config(config.get("model", {}))
    batch, steps = int(config.get("batch", 4)), int(config.get("steps", 5))
    tasks = {
        "errors": lambda c: errors(gpt_config(c.get("model", {}))),
        "equality": lambda c: equality(cfg, batch, steps, c.get("variants")),
        "dropout": lambda c: dropout(cfg, batch, steps),
        "traffic": lambda c: traffic(cfg, batch),
        "dtensor": lambda c: dtensor(cfg, batch, steps),
        "dp_tp": lambda c: dp_tp(cfg, batch, steps, int(c.get("dp", 2))),
        "memory": lambda c: memory(cfg, batch),
        "allreduce": lambda c: allreduce(c["sizes"], int(c.get("repeat", 5))),
        "speedup": lambda c: speedup(c["widths"], int(c.get("batch", batch)),
                                     int(c.get("seq", 64)), int(c.get("repeat", 5))),
        # timing wants a wider model than the equality runs: its own sizes, if given
        "timing": lambda c: timing(gpt_config({**config.get("model", {}), **c.get("model", {})}),
                                   int(c.get("batch", batch)), int(c.get("repeat", 10))),
    }
    unknown = set(config) - set(tasks) - {"model", "batch", "steps"}
    if unknown:
        raise ValueError(f"unknown tasks {sorted(unknown)}; known: {list(tasks)}")
    out: dict[str, Any] = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
    out.update({name: fn(config[name]) for name, fn in tasks.items() if name in config})
    return out


if __name__ == "__main__":
    pdist.worker_main(run, __doc__)
