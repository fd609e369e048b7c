"""Updates its parameters by hand (no torch.optim optimizer): steps come only from
--step-marker no_step_update:update."""
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import no_step_update  # noqa: E402

w = torch.zeros(8, requires_grad=True)
for _ in range(3000 if "--long" in sys.argv else 30):
    (w - 1).square().sum().backward()
    no_step_update.update(w)
    time.sleep(0.01)
