"""Trains 6 steps, then fails the way a real script does (a shape error)."""
import torch
from torch import nn

model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    x = torch.randn(4, 8 if step < 6 else 9)  # step 6 feeds a wrong shape
    model(x).sum().backward()
    opt.step()
