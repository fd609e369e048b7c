"""Planted bottleneck: communication-bound. DDP with 32 small layers and 1 KB buckets (one
all-reduce per gradient, each paying the full latency) on a batch whose compute is small.
Run it under torchrun: ``perfkit diagnose`` should name: communication.

    torchrun --nproc_per_node 2 -m perfkit diagnose examples/diagnose/comm_bound.py
"""

import sys

import torch
import torch.distributed as dist
from torch import nn


def main(steps: int = 40) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(128, 128) for _ in range(32)])
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)  # the plant
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(16, 128)
    for _ in range(steps):
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
