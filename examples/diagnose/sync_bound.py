"""Planted bottleneck: sync-bound. Every step computes its accuracy in a Python loop over
``.item()``, one host-device synchronisation per sample (free-looking on CPU, a full stall
of the GPU queue each on CUDA). ``perfkit diagnose`` should name: sync.

    python -m perfkit diagnose examples/diagnose/sync_bound.py
"""

import sys

import torch
from torch import nn


def main(steps: int = 40) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    for _ in range(steps):
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        pred = out.argmax(dim=1)
        correct = sum(int(pred[i].item() == y[i].item()) for i in range(len(y)))  # the plant
        assert 0 <= correct <= len(y)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
