"""A tiny torchrun worker for tests/distributed/test_dist.py: ok, fail or hang on purpose."""

import argparse

p = argparse.ArgumentParser()
p.add_argument("--tag", default="")
p.add_argument("--mode", choices=["ok", "fail", "hang", "noinit"], default="ok")
a = p.parse_args()
if a.mode == "noinit":  # exits before importing torch or joining the process group
    raise SystemExit(3)

import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from perfkit import dist as pdist  # noqa: E402

ctx = pdist.init_worker()
t = torch.full((4,), float(ctx.rank + 1))
dist.all_reduce(t)
if a.mode == "fail" and ctx.rank == 1:
    raise ValueError("rank 1 fails on purpose")
if a.mode == "hang":
    print(f"rank {ctx.rank} waits", flush=True)  # past init_worker: its stacks can be asked for
if a.mode == "hang" and ctx.rank == 1:
    time.sleep(3600)  # rank 0 waits in shutdown's barrier for a peer that never comes
pdist.worker_result({"rank": ctx.rank, "world": ctx.world_size, "sum": t.tolist(),
                     "backend": ctx.backend})
pdist.shutdown()
