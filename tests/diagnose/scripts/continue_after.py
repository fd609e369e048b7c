"""A plain loop that says how many steps it finished and with which arguments (for
--then continue and -m module runs)."""
import sys

import torch
from torch import nn

model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
n = int(sys.argv[1])
for _ in range(n):
    model(torch.randn(8, 16)).square().mean().backward()
    opt.step()
    opt.zero_grad()
print(f"finished {n} steps, argv {sys.argv[1:]}", flush=True)
