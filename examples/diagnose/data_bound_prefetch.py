"""Planted bottleneck: data-bound behind a prefetcher. The loader of ``data_bound.py`` (each
sample built in Python, one value at a time) wrapped in perfkit's ``Prefetcher``: a thread
now loads the next batches while the step runs, but loading is CPU-bound and needs the
cores the step needs, so the step waits little and computes slower instead.
``perfkit diagnose`` should name: data (loading contends with compute).

    python -m perfkit diagnose examples/diagnose/data_bound_prefetch.py
"""

import sys

import torch
from data_bound import Decoded
from torch import nn
from torch.utils.data import DataLoader

from perfkit.data import Prefetcher


def main(steps: int = 40) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Decoded(), batch_size=32, shuffle=True, num_workers=0)
    with Prefetcher(loader, device="cpu") as batches:  # the attempted fix
        for step, (x, y) in enumerate(batches):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step + 1 == steps:
                break


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
