"""Healthy: an MLP on in-memory tensors with a batch large enough to keep the matmuls
busy; the step is forward and backward. ``perfkit diagnose`` should find no problem.

    python -m perfkit diagnose examples/diagnose/healthy_mlp.py
"""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main(steps: int = 40) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=256, shuffle=True)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")  # one sync every 10 steps
        if step + 1 == steps:
            break


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
