"""A real DeepSpeed client: a ZeRO stage-1 engine around a tiny MLP with a client
``torch.optim.AdamW`` (no compiled op). Run under torchrun with 2 processes:

    torchrun --nproc_per_node 2 -m perfkit diagnose examples/diagnose/deepspeed_engine.py
"""

import importlib
import sys

import torch
from torch import nn


def main(steps: int = 30) -> None:
    import deepspeed

    # skip the ~30 s g++ build of DeepSpeed's shared-memory comm op (gloo does the work)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 1},
              "steps_per_print": 10**9}
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    x = torch.randn(16, 128)
    for _ in range(steps):
        loss = engine(x).square().mean()
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
