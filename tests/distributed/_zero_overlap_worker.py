"""torchrun worker for tests/distributed/test_zero_overlap.py: ZeRO-1/2's all-gather overlapped
with the next forward, and stage 3's mixed precision against PyTorch's FSDP2.

``--case overlap``: stages 1 and 2 train a small MLP for a few steps, each forward run right
after the previous step, with every asynchronous all-gather made *late*: its data is
written only when its handle is waited for (a patched ``torch.distributed`` all-gather),
so a parameter read before its wait reads the old values. Variants: ``overlap`` (waits in
forward pre-hooks), ``blocking`` (``overlap=False``), ``no_wait`` (the pre-hooks removed:
the mistake the test must catch), all against ``torch.optim.AdamW`` on the global batch.

``--case mixed``: ``ShardedModule(mixed_precision=MixedPrecision(bf16, reduce))`` with
``ZeroOptimizer(stage=3)`` against ``fully_shard(mp_policy=MixedPrecisionPolicy(bf16,
reduce))`` on the same MLP, and both in fp32, for ``reduce`` fp32 and bf16; then, in fp32,
an MLP with a LayerNorm whose parameters stay ``unsharded`` against FSDP2 with them as
``ignored_params``, whose gradients this worker all-reduces itself (FSDP2 does not); and
fp16 with a :class:`ShardedLossScaler` on :class:`Spiky`, whose overflow lands on rank 1's
slice only, against the same scaler with a local (not all-reduced) overflow check.

Usage::

    launch(str(Path(__file__).with_name("_zero_overlap_worker.py")), 2, ["--case", "overlap"])
"""

import argparse
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit import dist as pdist
from perfkit.parallel import MixedPrecision, ShardedLossScaler, ShardedModule, ZeroOptimizer

BATCH, STEPS, LR, WD = 8, 6, 1e-2, 0.1


def mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(13, 11), nn.Tanh(), nn.Linear(11, 7), nn.Tanh(), nn.Linear(7, 3))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 13, generator=g), torch.randn(BATCH, 3, generator=g)  # (B, 13), (B, 3)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


class _Late:
    """A work handle whose all-gather runs (blocking) only when waited for."""

    def __init__(self, fn: Any, args: tuple, kw: dict) -> None:
        self.fn, self.args, self.kw, self.done = fn, args, kw, False

    def wait(self, *_: Any) -> bool:
        if not self.done:
            self.fn(*self.args, **self.kw)
            self.done = True
        return True


def make_gathers_late() -> None:
    name = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
    real = getattr(dist, name)

    def late(*args: Any, async_op: bool = False, **kw: Any) -> Any:
        return _Late(real, args, kw) if async_op else real(*args, **kw)

    setattr(dist, name, late)


def overlap(rank: int, world: int) -> dict[str, Any]:
    make_gathers_late()
    chunk = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    ref = mlp()
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=WD)
    ref_losses = []
    for s in range(STEPS):
        x, y = batch(s)
        ref_opt.zero_grad()
        loss = nn.functional.mse_loss(ref(x), y)
        ref_losses.append(float(loss))
        loss.backward()
        ref_opt.step()
    out: dict[str, Any] = {"rank": rank, "ref_losses": ref_losses}
    for stage in (1, 2):
        for variant in ("overlap", "blocking", "no_wait"):
            model = mlp()
            opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=stage,
                                bucket_cap_mb=100 / 2**20, overlap=variant != "blocking",
                                module=model, lr=LR, weight_decay=WD)
            if variant == "no_wait":  # the mistake: forward reads before the gathers land
                for h in opt._hooks:
                    h.remove()
            losses, in_flight = [], []
            for s in range(STEPS):
                x, y = batch(s)
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x[chunk]), y[chunk])  # right after step
                losses.append(loss.detach())
                loss.backward()
                opt.step()
                in_flight.append(opt.params_in_flight)
            mean = torch.stack(losses)
            dist.all_reduce(mean)  # the global batch's loss: the mean of equal chunks
            opt.wait_params()
            out[f"{variant}{stage}"] = {
                "losses": (mean / world).tolist(), "buckets": len(opt.buckets),
                "in_flight": in_flight,
                "max_rel_diff": max(rel(p, q.detach()) for p, q in
                                    zip(model.parameters(), ref.parameters(), strict=True))}
    return out


def normed(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(13, 11), nn.LayerNorm(11), nn.Tanh(), nn.Linear(11, 7),
                         nn.Tanh(), nn.Linear(7, 3))


class Spiky(nn.Module):
    """``w`` (13 values) then ``c`` (1): on 2 ranks rank 0's slice is ``w[:7]``, rank 1's
    ``w[7:]`` and ``c``, whose gradient is about 40x ``w``'s: it overflows fp16 first."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(13, generator=g) * 0.1)
        self.c = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, 13) -> (B, 1)
        return (x * self.w).sum(-1, keepdim=True) + 10.0 * self.c * x[:, :1]


class LocalCheck(ShardedLossScaler):
    """The mistake: each rank decides from its own slice."""

    def found_inf(self, leaves: list[torch.Tensor]) -> bool:
        return any(bool((~torch.isfinite(p.grad)).any()) for p in leaves)


def scaled(rank: int, world: int, scaler_class: type) -> dict[str, Any]:
    model = Spiky()
    sharded = ShardedModule(model, mixed_precision=MixedPrecision(torch.float16, torch.float32))
    opt = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=LR)
    scaler = scaler_class(opt, init_scale=2.0**12, growth_interval=2)
    chunk, stepped, scales = slice(rank * BATCH // world, (rank + 1) * BATCH // world), [], []
    for s in range(10):
        x, y = batch(s)
        opt.zero_grad()
        scaler.scale(nn.functional.mse_loss(sharded(x[chunk]).float(), y[chunk, :1])).backward()
        stepped.append(scaler.step())
        scales.append(scaler.scale_value)
    return {"stepped": stepped, "scales": scales,
            "params": [p.tolist() for p in sharded.full_parameters()]}


def _train(net: nn.Module, opt: torch.optim.Optimizer, rank: int, world: int,
           average: list[torch.Tensor] = ()) -> list[float]:
    chunk, losses = slice(rank * BATCH // world, (rank + 1) * BATCH // world), []
    for s in range(STEPS):
        x, y = batch(s)
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x[chunk]).float(), y[chunk])
        loss.backward()
        for p in average:  # FSDP2's ignored_params: averaged here, by hand
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        losses.append(float(loss))
    return losses


def mixed(rank: int, world: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world,))
    out: dict[str, Any] = {"rank": rank}
    runs = {"fp32": None, "bf16_fp32": (torch.bfloat16, torch.float32),
            "bf16_bf16": (torch.bfloat16, torch.bfloat16)}
    for name, dtypes in runs.items():
        ours = mlp()
        blocks = [m for m in ours if isinstance(m, nn.Linear)]
        sharded = ShardedModule(ours, blocks=blocks,
                                mixed_precision=MixedPrecision(*dtypes) if dtypes else None)
        seen: list[str] = []  # dtypes of each block's weight and input while the block runs
        for b in blocks:  # after ShardedModule's pre-hooks, which gather and cast
            b.register_forward_pre_hook(lambda m, a, seen=seen: seen.extend(
                [str(m.weight.dtype), str(a[0].dtype)]))
        opt = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=LR, weight_decay=WD)
        our_losses = _train(sharded, opt, rank, world)
        mine = sharded.full_parameters()
        theirs = mlp()
        policy = MixedPrecisionPolicy(*dtypes) if dtypes else MixedPrecisionPolicy()
        for m in theirs:
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh, mp_policy=policy)
        fully_shard(theirs, mesh=mesh, mp_policy=policy)
        fsdp_opt = torch.optim.AdamW(theirs.parameters(), lr=LR, weight_decay=WD)
        fsdp_losses = _train(theirs, fsdp_opt, rank, world)
        full = [p.full_tensor() for p in theirs.parameters()]
        out[name] = {"max_rel_diff": max(rel(a, b) for a, b in zip(mine, full, strict=True)),
                     "losses": our_losses, "fsdp_losses": fsdp_losses,
                     "param_dtypes": sorted(set(seen)), "shard_dtypes": sorted(
                         {str(u.shard.dtype) for u in sharded.units}),
                     "params": [p.tolist() for p in mine]}
    ours, theirs = normed(), normed()
    norm = list(ours[1].parameters())
    sharded = ShardedModule(ours, blocks=[ours[0], ours[3], ours[5]], unsharded=norm)
    opt = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=LR, weight_decay=WD)
    our_losses = _train(sharded, opt, rank, world)
    mine = sharded.full_parameters()
    sd = opt.state_dict()  # collective; the norm's state is every rank's own, whole
    ignored = set(theirs[1].parameters())
    for i in (0, 3, 5):
        fully_shard(theirs[i], mesh=mesh)
    fully_shard(theirs, mesh=mesh, ignored_params=ignored)
    fsdp_opt = torch.optim.AdamW(theirs.parameters(), lr=LR, weight_decay=WD)
    fsdp_losses = _train(theirs, fsdp_opt, rank, world, list(theirs[1].parameters()))
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in
            theirs.parameters()]
    out["unsharded"] = {
        "max_rel_diff": max(rel(a, b) for a, b in zip(mine, full, strict=True)),
        "losses": our_losses, "fsdp_losses": fsdp_losses,
        "units": [u.numel for u in sharded.units], "norm_shapes": [list(p.shape) for p in norm],
        "norm_state_steps": [float(sd["state"][i]["step"]) for i in (2, 3)],
        "norm_state_diff": max(rel(sd["state"][i]["exp_avg_sq"],
                                   fsdp_opt.state[p]["exp_avg_sq"])
                               for i, p in zip((2, 3), theirs[1].parameters(), strict=True)),
        "norm": [p.tolist() for p in norm]}
    out["scaler"] = scaled(rank, world, ShardedLossScaler)
    out["local_check"] = scaled(rank, world, LocalCheck)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=["overlap", "mixed"], required=True)
    case = p.parse_args().case
    ctx = pdist.init_worker(backend="gloo")
    pdist.worker_result((overlap if case == "overlap" else mixed)(ctx.rank, ctx.world_size))
    pdist.shutdown()


if __name__ == "__main__":
    main()
