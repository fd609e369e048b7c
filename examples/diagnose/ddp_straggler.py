"""A real DDP client with a straggler: rank 1 trains on a 64x larger shard per step (an
uneven split), so every all-reduce waits for it. Run under torchrun with 2 processes:
``perfkit diagnose`` should name the straggler, rank 1.

    torchrun --nproc_per_node 2 -m perfkit diagnose examples/diagnose/ddp_straggler.py
"""

import sys

import torch
import torch.distributed as dist
from torch import nn


def main(steps: int = 40) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(32 if rank == 0 else 2048, 256)  # the plant: rank 1 gets 64x the rows
    for _ in range(steps):
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
