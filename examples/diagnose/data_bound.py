"""Planted bottleneck: data-bound. Each sample is built in ``__getitem__`` with per-sample
Python work (as a tokenizer or image decoder would), and the DataLoader has no workers,
so the step waits for every batch. ``perfkit diagnose`` should name: data.

    python -m perfkit diagnose examples/diagnose/data_bound.py
"""

import math
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    """256 features per sample computed in Python, one value at a time (slow on purpose)."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        x = torch.tensor([math.sin(i * 0.01 + k) * math.cos(k * 0.1) for k in range(256)])
        return x, i % 10


def main(steps: int = 40) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Decoded(), batch_size=32, shuffle=True, num_workers=0)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step + 1 == steps:
            break


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
