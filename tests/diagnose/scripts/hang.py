"""Trains 4 steps with a DataLoader worker alive, then hangs (a stuck collective, a dead
lock): diagnose must stop it at --timeout, report the 4 steps and leave no process."""
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=4, num_workers=1)
it = iter(loader)
for _ in range(4):
    (x,) = next(it)
    model(x).sum().backward()
    opt.step()
print(f"worker pids: {[w.pid for w in it._workers]}", flush=True)
print(f"main pid: {os.getpid()}", flush=True)
time.sleep(3600)
