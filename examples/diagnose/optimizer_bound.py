"""Planted bottleneck: optimizer-bound. 200 small parameter tensors updated by Adam with
``foreach=False``: a dozen tiny operators per tensor per step, against a forward and
backward that touch them once. ``perfkit diagnose`` should name: optimizer.

    python -m perfkit diagnose examples/diagnose/optimizer_bound.py
"""

import sys

import torch
from torch import nn


class ManySmall(nn.Module):
    """A linear layer plus 200 learned (16,) offsets, summed in one stack (cheap to run)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(16, 16)
        self.offsets = nn.ParameterList(nn.Parameter(torch.zeros(16)) for _ in range(200))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + torch.stack(list(self.offsets)).sum(0)  # (B, 16)


def main(steps: int = 40) -> None:
    torch.manual_seed(0)
    model = ManySmall()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)  # the plant
    x, y = torch.randn(64, 16), torch.randn(64, 16)
    for _ in range(steps):
        loss = (model(x) - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
