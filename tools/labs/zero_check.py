"""Job: ZeRO-1 on N ranks against single-process ``torch.optim.AdamW`` on the global batch.

Run by :func:`perfkit.dist.launch`::

    launch("tools.labs.zero_check", 3, ["--config", json.dumps(
        {"steps": 50, "mode": "alone", "groups": True})])

Every rank trains a small MLP (13 -> 11 -> 7 -> 3; 241 weights and 21 biases, so the
flat buffers divide neither by 2 nor by 3) on its contiguous chunk of a global batch with
a ZeRO-1 optimizer, and also trains a copy with plain AdamW on the *whole* global batch
in one process. Rank 0's result holds the largest relative parameter difference
(``max |p - p_ref| / max |p_ref|`` over each tensor, the worst tensor) and the same for
the consolidated optimizer state.

Config keys: ``model`` (``"mlp"``; ``"partial"``: :class:`PartialMLP`, whose frozen
tensor must never move and whose extra layer has no gradient on some ranks or on all of them
in some steps, as ``torch.optim`` treats a ``None`` grad; ``"uneven"``: :class:`UnevenModel`,
trainable tensors of 13, 7 and 1 values around a frozen one, the last without a gradient on
odd steps; both train from step 0 without groups, in mode ``"alone"`` or ``"ddp"``, then with
``find_unused_parameters``), ``steps`` (50), ``optimizer``
(``"adamw"``, or ``"sgd"`` with momentum:
Adam hardly notices a gradient summed instead of averaged, SGD does), ``mode``
(``"alone"``: reduce-scatter inside the optimizer; ``"ddp"``: DistributedDataParallel
all-reduces and ``reduce_grads=False``;
``"ddp_reduce"``: DDP and the optimizer's own reduce-scatter too), ``groups`` (weights and
biases in two groups with different ``lr``/``weight_decay``), ``start`` (first step index),
``save``/``load`` (a file for the consolidated optimizer state and the parameters),
``stage`` (1 or 2: :class:`perfkit.parallel.ZeroOptimizer` with ``bucket_cap_mb``, whose
result adds the bucket sizes and ``launched_in_backward``, per step how many buckets'
reduce-scatters backward had started; 3: :class:`perfkit.parallel.ShardedModule` over
:func:`blocks_of` and ``ZeroOptimizer(stage=3)``, one group; without ``stage``:
``ZeroOptimizer(stage=1, overlap=False)``, one bucket per group reduced in ``step()``), ``impl``
(a cloudpickle file holding a class ``(params, optimizer_class, **defaults)`` used instead of
the stage-1 ``ZeroOptimizer``, given one list of parameters; with
``mode="alone"``, ``groups`` false and ``state`` false: how lab 03 is graded). When the
optimizer has an ``optim`` attribute (the wrapped optimizer of its slice), the result
also holds ``state_bytes``, that optimizer's state on this rank.
The result also names the ``collectives`` that ran during training (through
``torch.distributed``'s module) and ``collective_elems_per_step``, the elements of their
largest tensors per step. A list of such objects runs them one after the other in the
same job; the result is then the list of results (an entry ``{"collectives": true}``
runs :func:`check_collectives`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from perfkit import dist as pdist
from perfkit.memory import optimizer_state_bytes
from perfkit.parallel import ShardedModule, ZeroOptimizer
from tools.labs.record import record_collectives

GLOBAL_BATCH = 12  # divisible by 2 and 3: every rank gets an equal chunk
LR, WD = 1e-2, 0.1
# Adam is invariant to the gradient's scale (m / sqrt(v)), so a gradient summed instead of
# averaged over ranks goes almost unnoticed; SGD with momentum is not, so checks run both.
OPTIMIZERS = {"adamw": (torch.optim.AdamW, {"lr": LR, "weight_decay": WD}),
              "sgd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": WD})}


def make_mlp(seed: int = 0) -> nn.Module:
    """The test model; the same seed gives the same weights on every rank."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(13, 11), nn.Tanh(), nn.Linear(11, 7), nn.Tanh(),
                         nn.Linear(7, 3))


class PartialMLP(nn.Module):
    """The test MLP plus a frozen tensor (5 values, added to the output) and an extra layer
    (12 values) applied only to the rows in ``mask``: so some steps leave its gradient
    ``None`` on some ranks or on all of them, as an unused branch does."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.mlp = make_mlp(seed)
        torch.manual_seed(seed + 1)
        self.extra = nn.Linear(3, 3)
        self.frozen = nn.Parameter(torch.full((5,), 2.0), requires_grad=False)
        self.mask: torch.Tensor | None = None  # (B,) rows that go through `extra`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(x) + self.frozen[:3]
        if self.mask is not None and bool(self.mask.any()):  # else `extra` gets no gradient
            y = torch.where(self.mask[:, None], self.extra(y), y)
        return y


def extra_rows(step: int, world: int) -> torch.Tensor:
    """Global-batch rows through the extra layer: all (step % 3 == 0), rank 0's only (1), none (2)."""
    chunk, rows = GLOBAL_BATCH // world, torch.zeros(GLOBAL_BATCH, dtype=torch.bool)
    rows[: GLOBAL_BATCH if step % 3 == 0 else chunk if step % 3 == 1 else 0] = True
    return rows


class UnevenModel(nn.Module):
    """Trainable tensors of 13, 7 and 1 values registered around a frozen one of 5: the 21
    trainable values split unevenly over ranks (2 ranks: 11 + 10 and one of padding, cut
    inside ``w``; 3 ranks: 7 + 7 + 7, cut inside ``w`` and ``b``). ``c`` is added to the
    rows in ``mask`` only."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(torch.randn(13, generator=g))
        self.frozen = nn.Parameter(torch.full((5,), 2.0), requires_grad=False)
        self.b = nn.Parameter(torch.randn(7, generator=g))
        self.c = nn.Parameter(torch.ones(1))
        self.mask: torch.Tensor | None = None  # (B,) rows that get `c`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x * self.w)  # (B, 13)
        y = h[:, :3] * self.b[:3] + h[:, 3:6] * self.b[3:6] + self.b[6] + self.frozen[:3]  # (B, 3)
        if self.mask is not None and bool(self.mask.any()):  # else `c` gets no gradient
            y = torch.where(self.mask[:, None], y + self.c, y)
        return y


def uneven_rows(step: int, world: int) -> torch.Tensor:
    """Global-batch rows that get ``c``: none on odd steps (its grad is ``None`` on every
    rank), all when ``step % 4 == 0``, rank 0's only when ``step % 4 == 2``."""
    chunk, rows = GLOBAL_BATCH // world, torch.zeros(GLOBAL_BATCH, dtype=torch.bool)
    rows[: 0 if step % 2 else GLOBAL_BATCH if step % 4 == 0 else chunk] = True
    return rows


MODELS = {"mlp": (make_mlp, None), "partial": (PartialMLP, extra_rows),
          "uneven": (UnevenModel, uneven_rows)}  # (constructor, rows of the gradless branch)


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """Stage 3's blocks: the MLP's linear layers; the rest (``extra``, or every tensor of
    :class:`UnevenModel`) is the root unit."""
    mlp = getattr(model, "mlp", model)
    return [m for m in mlp.modules() if isinstance(m, nn.Linear)] if mlp is not model or \
        isinstance(model, nn.Sequential) else []


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step`` (seeded by the step, so a resumed run sees the same)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 13, generator=g)  # (B, 13)
    y = torch.randn(GLOBAL_BATCH, 3, generator=g)  # (B, 3)
    return x, y


def param_groups(model: nn.Module, groups: bool) -> list[dict[str, Any]]:
    """One group, or weights (lr 1e-2, weight decay 0.1) and biases (lr 5e-3, no decay)."""
    if not groups:
        return [{"params": list(model.parameters())}]
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if n.endswith("weight")]},
            {"params": [p for n, p in named if n.endswith("bias")], "lr": LR / 2,
             "weight_decay": 0.0}]


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max |b|`` (``b`` the reference)."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def run(cfg: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """Train both and compare; see the module docstring for ``cfg``."""
    steps, start, mode = int(cfg.get("steps", 50)), int(cfg.get("start", 0)), cfg.get("mode",
                                                                                          "alone")
    if mode not in ("alone", "ddp", "ddp_reduce"):
        raise ValueError(f"mode must be 'alone', 'ddp' or 'ddp_reduce', got {mode!r}")
    if cfg.get("optimizer", "adamw") not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {cfg['optimizer']!r}")
    opt_class, opt_kw = OPTIMIZERS[cfg.get("optimizer", "adamw")]
    if cfg.get("model", "mlp") not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {cfg['model']!r}")
    make, rows = MODELS[cfg.get("model", "mlp")]
    partial = rows is not None
    if partial and (mode == "ddp_reduce" or cfg.get("groups") or cfg.get("start")):
        raise ValueError(f"model {cfg['model']!r} runs with mode 'alone' or 'ddp', no groups, "
                         "from step 0")
    model, ref = make(), make()
    ref_opt = opt_class(param_groups(ref, cfg.get("groups", False)), **opt_kw)
    for s in range(start):  # the reference always starts from step 0
        _train_step(ref, ref_opt, *global_batch(s))
    net: nn.Module = model
    if mode != "alone" and world > 1:
        # a branch unused on every rank keeps grad None under DDP only with this flag
        net = nn.parallel.DistributedDataParallel(model, find_unused_parameters=partial)
    if cfg.get("impl"):  # a student's class: one list of parameters, it averages gradients
        import cloudpickle

        if mode != "alone" or cfg.get("groups") or cfg.get("state", True):
            raise ValueError("impl runs with mode 'alone', no groups and state False")
        with open(cfg["impl"], "rb") as f:
            factory = cloudpickle.load(f)
        opt = factory(list(model.parameters()), opt_class, **opt_kw)
    elif cfg.get("stage") == 3:  # ShardedModule: parameters gathered block by block
        if mode != "alone" or cfg.get("groups"):
            raise ValueError("stage 3 runs with mode 'alone' and one group")
        net = ShardedModule(model, blocks=blocks_of(model))
        opt = ZeroOptimizer(net, opt_class, stage=3, **opt_kw)
    elif cfg.get("stage"):  # ZeroOptimizer: stage 1 or 2, reduce-scatter during backward
        if mode != "alone":
            raise ValueError("stage runs with mode 'alone'")
        opt = ZeroOptimizer(param_groups(model, cfg.get("groups", False)), opt_class,
                            stage=cfg["stage"], bucket_cap_mb=cfg.get("bucket_cap_mb", 25.0),
                            **opt_kw)
    else:
        opt = ZeroOptimizer(param_groups(model, cfg.get("groups", False)), opt_class, stage=1,
                            reduce_grads=(mode != "ddp"), overlap=False, **opt_kw)
    if cfg.get("load"):
        saved = torch.load(cfg["load"], weights_only=False)
        model.load_state_dict(saved["model"])  # copies into the flat buffer's views
        opt.load_state_dict(saved["optim"])
    with record_collectives() as calls:  # which collectives ran, and how much they moved
        launched = _train_loop(model, ref, net, opt, ref_opt, rows, rank, world, start, steps)
    out_calls = sorted({name for name, _ in calls})
    final = net.full_parameters() if isinstance(net, ShardedModule) else \
        [p.detach() for p in model.parameters()]  # stage 3: gathered (collective)
    elems_per_step = sum(k for _, k in calls) / max(steps, 1)
    out: dict[str, Any] = {
        "rank": rank, "world_size": world, "mode": mode,
        "collectives": out_calls, "collective_elems_per_step": elems_per_step,
        "optimizer": cfg.get("optimizer", "adamw"),
        "max_rel_diff": max(rel_diff(p, q.detach())
                            for p, q in zip(final, ref.parameters(), strict=True)),
        "numel": sum(p.numel() for p in model.parameters()),
        "groups": len(getattr(opt, "param_groups", [None])),
    }
    if hasattr(opt, "shard_numel"):
        out["shard_numel"] = opt.shard_numel()
    out["collective_elems"] = {n: sum(k for m, k in calls if m == n) / max(steps, 1)
                               for n in out_calls}  # per step, by collective
    if isinstance(net, ShardedModule):  # the largest whole parameters alive at once
        out["gathered_peak_bytes"] = net.gathered_peak_bytes
    if hasattr(opt, "buckets"):  # ZeroOptimizer: buckets reduce-scattered during backward
        out["buckets"] = [b.numel for b in opt.buckets]
        out["launched_in_backward"] = launched
    inner = getattr(opt, "optim", None)  # the wrapped optimizer over this rank's slice
    if isinstance(inner, torch.optim.Optimizer):
        out["state_bytes"] = optimizer_state_bytes(inner)
    if cfg.get("state", True):
        sd, rsd = opt.state_dict(), ref_opt.state_dict()  # collective: every rank calls it
        out["state_rel_diff"] = max(rel_diff(sd["state"][i][k], v)
                                    for i, st in rsd["state"].items() for k, v in st.items()
                                    if k != "step")
        out["steps_equal"] = all(float(sd["state"][i].get("step", 0)) == float(st.get("step", 0))
                                 for i, st in rsd["state"].items())
        out["state_keys_equal"] = sorted(sd["state"]) == sorted(rsd["state"])
        out["steps"], out["ref_steps"] = ({i: float(st.get("step", -1))
                                           for i, st in d["state"].items()} for d in (sd, rsd))
        if cfg.get("save") and rank == 0:
            torch.save({"model": model.state_dict(), "optim": sd}, cfg["save"])
    if partial:
        out["frozen_unchanged"] = bool(torch.equal(model.frozen, torch.full((5,), 2.0)))
        out["frozen_max_abs_change"] = float((model.frozen - 2.0).abs().max())
        out["param_rel_diffs"] = {n: rel_diff(p, q.detach()) for (n, _), p, q in
                                  zip(model.named_parameters(), final, ref.parameters(),
                                      strict=True)}
    return out


def check_collectives(rank: int, world: int) -> dict[str, Any]:
    """Both reduce-scatter paths of :mod:`perfkit.parallel.flat` (gloo's list form and the
    feature-detected single-tensor call) and the all-gather, on integer-valued data
    (every summation order is exact). Collective."""
    from perfkit.parallel import flat as zero

    flat = torch.arange(world * 5, dtype=torch.float32) * (rank + 1)  # (N * 5,)
    want = flat.new_tensor(range(rank * 5, rank * 5 + 5)) * sum(range(1, world + 1))
    a, b = torch.empty(5), torch.empty(5)
    zero.reduce_scatter_flat(a, flat)
    zero._REDUCE_SCATTER(b, flat)
    gathered = torch.empty(world * 5)
    zero.all_gather_flat(gathered, torch.full((5,), float(rank)))
    return {"rank": rank, "list_form": torch.equal(a, want), "single": torch.equal(b, want),
            "all_gather": torch.equal(gathered, torch.arange(world).repeat_interleave(5).float())}


def _train_loop(model: nn.Module, ref: nn.Module, net: nn.Module,
                opt: Any, ref_opt: torch.optim.Optimizer,
                rows: Callable[[int, int], torch.Tensor] | None, rank: int, world: int,
                start: int, steps: int) -> list[int | None]:
    chunk, launched = GLOBAL_BATCH // world, []
    for s in range(start, start + steps):
        x, y = global_batch(s)
        mine = slice(rank * chunk, (rank + 1) * chunk)  # this rank's part of the global batch
        if rows is not None:
            model.mask, ref.mask = rows(s, world)[mine], rows(s, world)
        launched.append(_train_step(net, opt, x[mine], y[mine]))
        _train_step(ref, ref_opt, x, y)
    return launched


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor) -> int | None:
    """One step; returns how many buckets backward had launched (``None``: no buckets)."""
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    launched = getattr(opt, "launched_buckets", None)
    opt.step()
    return launched


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="{}",
                   help="JSON object (keys in the module docstring) or a list of them")
    cfg = json.loads(p.parse_args().config)
    ctx = pdist.init_worker(backend="gloo")
    if isinstance(cfg, list):  # several checks in one job: torchrun starts once
        pdist.worker_result([check_collectives(ctx.rank, ctx.world_size) if c.get("collectives")
                             else run(c, ctx.rank, ctx.world_size) for c in cfg])
    else:
        pdist.worker_result(run(cfg, ctx.rank, ctx.world_size))
    pdist.shutdown()


if __name__ == "__main__":
    main()
