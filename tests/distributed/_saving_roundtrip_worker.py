"""torchrun worker for tests/distributed/test_saving_restart.py: save on every rank, verify the
manifest, load into fresh objects, continue bit for bit, in each Checkpointer mode.

For each mode (``sync``, ``thread``, ``process``): torch DDP on gloo in float64 (dropout on,
so the RNG matters) trains 3 steps and saves step 3; 3 more steps give the reference losses
and state; a model and optimizer built with other seeds load the checkpoint and train the
same 3 steps. Returns, per mode, whether the losses, parameters and optimizer state are
equal (``torch.equal``), the manifest (rank 0) and the save's timings.

Usage::

    launch(str(Path(__file__).with_name("_saving_roundtrip_worker.py")), 2, ["--config", json])
"""

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from perfkit import dist as pdist
from perfkit.saving import Checkpointer, ResumableSampler, TrainState, latest, verify

N, GLOBAL_BATCH = 64, 8
DATA = torch.linspace(-2, 2, N * 6, dtype=torch.float64).reshape(N, 6)  # (N, 6)


def build(seed: int, ctx: pdist.WorkerContext):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 24), torch.nn.Dropout(0.2), torch.nn.Linear(24, 1)).double()
    ddp = DDP(m)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    sampler = ResumableSampler(N, GLOBAL_BATCH, ctx.rank, ctx.world_size, seed=11)
    return ddp, opt, TrainState(ddp, opt, sampler=sampler), sampler


def steps(ddp, opt, st, sampler, n: int) -> list[float]:
    out, it = [], iter(sampler)
    for _ in range(n):
        loss = ddp(DATA[next(it)]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        st.step += 1
        out.append(loss.item())
    return out


def tensors(ddp, opt) -> list[torch.Tensor]:
    return ([p.detach().clone() for p in ddp.parameters()]
            + [t.clone() for s in opt.state.values() for t in s.values() if torch.is_tensor(t)])


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    ctx = pdist.WorkerContext(torch.distributed.get_rank(), torch.distributed.get_world_size(), 0,
                              torch.device("cpu"), "gloo")
    out = {}
    for mode in cfg["modes"]:
        root = f"{cfg['root']}/{mode}"
        ddp, opt, st, sampler = build(0, ctx)
        steps(ddp, opt, st, sampler, 3)
        with Checkpointer(root, mode=mode) as ck:
            rec = ck.save(st.step, st)
            ck.wait()
        ref = steps(ddp, opt, st, sampler, 3)
        want = tensors(ddp, opt)
        ddp2, opt2, st2, sampler2 = build(1 + ctx.rank, ctx)
        torch.manual_seed(77)
        loaded = Checkpointer(root, mode="sync").load_latest(st2)
        got = steps(ddp2, opt2, st2, sampler2, 3)
        have = tensors(ddp2, opt2)
        m = verify(latest(root)) if ctx.rank == 0 else None
        same = len(have) == len(want) and all(torch.equal(a, b) for a, b in zip(have, want))
        out[mode] = {"loaded": loaded, "losses_equal": got == ref, "ref": ref, "got": got,
                     "tensors_equal": same,
                     "n_tensors": len(want), "blocked_s": rec.blocked_s, "persist_s": rec.persist_s,
                     "manifest": None if m is None else {"step": m.step, "world_size": m.world_size,
                                                         "files": sorted(m.files), "bytes": m.bytes}}
    return out


if __name__ == "__main__":
    pdist.worker_main(run, __doc__)
