"""Planted bottleneck: communication-bound through gradient size. A wide MLP on a batch of
2 (almost no compute) under DDP with 50 KB buckets, so backward is a train of all-reduces of
16 MB of gradients in all. Run it under torchrun: ``perfkit diagnose`` should name:
communication, on a quiet machine and on a loaded one.

    torchrun --nproc_per_node 2 -m perfkit diagnose examples/diagnose/comm_bound_wide.py
"""

import sys

import torch
import torch.distributed as dist
from torch import nn


def main(steps: int = 40) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])  # 4.2M parameters
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)  # the plant
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(2, 1024)  # (B, C): batch 2, so the step is its gradients' traffic
    for _ in range(steps):
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
