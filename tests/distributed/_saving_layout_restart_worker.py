"""torchrun worker for tests/distributed/test_saving_layout_restart.py: ZeRO-1/2/3 and DP x TP
killed and restarted under ``torchrun --max-restarts``, resumed through
``perfkit.saving.Checkpointer``, ``TrainState``, ``model_state`` and ``optim_state``.

The layouts (those of tests/distributed/_saving_reshard_worker.py) train side by side, step
by step, each with its own checkpoint directory, saved every ``SAVE_EVERY`` steps
(``--modes`` gives each layout's Checkpointer mode: a save in flight counts only once
committed). In the first attempt (``TORCHELASTIC_RESTART_COUNT`` 0) rank 1 SIGKILLs itself
at the start of step ``KILL_STEP``; torchrun restarts every rank, and each layout resumes
from its own last complete checkpoint. Every loss is logged per rank, per attempt,
fsynced. Then each layout trains again from scratch without stopping (the reference) in
the same job; the result per layout: the step the last attempt resumed from, the logged
losses that differ from the reference's, and the state tensors whose local pieces differ
from the reference's, bit for bit.

Usage::

    launch(WORKER, 4, ["--root", root, "--layouts", "zero1,zero3"], max_restarts=3)
"""

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _saving_reshard_worker import Run

from perfkit import dist as pdist
from perfkit.saving import Checkpointer, TrainState, model_state, optim_state
from perfkit.saving._chunks import is_chunked, shards_of

STEPS, SAVE_EVERY, KILL_STEP = 6, 2, 5


def pieces(sd: object, prefix: str = "") -> dict[str, object]:
    """Every tensor piece this rank holds in a state dict, by key and offsets."""
    out: dict[str, object] = {}
    if isinstance(sd, dict):
        for k, v in sd.items():
            out.update(pieces(v, f"{prefix}{k}."))
    elif isinstance(sd, list):
        for i, v in enumerate(sd):
            out.update(pieces(v, f"{prefix}{i}."))
    elif isinstance(sd, torch.Tensor):
        local = sd.to_local() if hasattr(sd, "to_local") and not is_chunked(sd) else sd
        for v, off in shards_of(local):
            out[f"{prefix}{off}"] = v.detach().clone()
    else:
        out[prefix] = sd
    return out


def train(layouts: list[str], modes: list[str], root: Path, attempt: int) -> dict[str, Any]:
    """Every layout, step by step side by side, each saved and resumed by its Checkpointer;
    rank 1 dies at the start of step ``KILL_STEP`` in the first attempt."""
    rank = dist.get_rank()
    runs, states, ckpts, starts = {}, {}, {}, {}
    for layout, mode in zip(layouts, modes, strict=True):
        run = runs[layout] = Run(layout, seed=0)
        ms = model_state(run.model)
        states[layout] = TrainState(model=ms, optim=optim_state(run.opt, run.model))
        ckpts[layout] = Checkpointer(root / layout, keep=2, mode=mode, layout=ms.layout)
        starts[layout] = ckpts[layout].load_latest(states[layout]) or 0
    with open(root / f"loss.rank{rank}.jsonl", "a") as log:
        for step in range(min(starts.values()), STEPS):
            if attempt == 0 and rank == 1 and step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            for layout in layouts:
                if step < starts[layout]:
                    continue
                loss = runs[layout].step(step)
                log.write(json.dumps({"layout": layout, "attempt": attempt, "step": step,
                                      "loss": loss}) + "\n")
                log.flush()
                os.fsync(log.fileno())
                states[layout].step = step + 1
                if (step + 1) % SAVE_EVERY == 0:
                    ckpts[layout].save(step + 1, states[layout])
    for c in ckpts.values():
        c.close()
    return {"runs": runs, "starts": starts}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--layouts", required=True)
    p.add_argument("--modes", default="", help="a Checkpointer mode per layout (default sync)")
    a = p.parse_args()
    layouts = a.layouts.split(",")
    modes = a.modes.split(",") if a.modes else ["sync"] * len(layouts)
    root = Path(a.root)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    pdist.init_worker("gloo")
    rank = dist.get_rank()
    done = train(layouts, modes, root, attempt)
    logged = [json.loads(line) for line in (root / f"loss.rank{rank}.jsonl").read_text().splitlines()]
    result = {}
    for layout in layouts:
        run = done["runs"][layout]
        mine = pieces({"model": model_state(run.model).state_dict(),
                       "optim": optim_state(run.opt, run.model).state_dict()})
        ref = Run(layout, seed=0)
        losses = [ref.step(s) for s in range(STEPS)]
        theirs = pieces({"model": model_state(ref.model).state_dict(),
                         "optim": optim_state(ref.opt, ref.model).state_dict()})
        differ = sorted(k for k in set(mine) | set(theirs) if k not in mine or k not in theirs or (
            not torch.equal(mine[k], theirs[k]) if isinstance(mine[k], torch.Tensor)
            else mine[k] != theirs[k]))
        mylog = [e for e in logged if e["layout"] == layout]
        result[layout] = {"start": done["starts"][layout], "attempt": attempt,
                          "attempts": sorted({e["attempt"] for e in mylog}),
                          "steps": sorted({e["step"] for e in mylog}),
                          "losses_differ": [e for e in mylog if e["loss"] != losses[e["step"]]],
                          "state_differs": differ, "tensors": len(mine)}
    pdist.worker_result(result)
    pdist.shutdown()


if __name__ == "__main__":
    main()
