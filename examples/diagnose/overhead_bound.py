"""Planted bottleneck: overhead-bound. One sample per step through a small MLP: each
operator does almost no work, so the step is per-operator dispatch and Python overhead
(on a GPU: kernel launches). ``perfkit diagnose`` should name: overhead.

    python -m perfkit diagnose examples/diagnose/overhead_bound.py
"""

import sys

import torch
from torch import nn


def main(steps: int = 60) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(1024, 32)
    for step in range(steps):
        x = data[step % 1024 : step % 1024 + 1]  # batch of 1: the plant
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
