"""A small deterministic data-parallel training run that survives a killed rank.

Torch DDP on gloo, float64, a fixed data order (``perfkit.saving.ResumableSampler``), saved
every ``--save-every`` steps by ``perfkit.saving.Checkpointer`` and resumed with
``load_latest``. Run under ``torchrun --max-restarts N``: when a rank dies, torchrun stops
the others and starts every rank again; each loads the last complete checkpoint and goes on.
An interrupted run therefore ends with the same parameters, optimizer state and losses,
bit for bit, as one that never stopped (``tests/distributed/test_saving_restart.py``).
Under an elastic ``torchrun --nnodes 1:2``, losing an agent restarts the job on the ranks
that are left, which load the checkpoint the larger job saved (the data position counts
global batches, so the order of the data is kept).

For experiments it can kill itself: ``--kill-rank R --kill-step S`` SIGKILLs rank R at the
start of step S, only in the first attempt (``TORCHELASTIC_RESTART_COUNT`` 0); and a SIGTERM
(torchrun forwards the one it gets) saves at the next step boundary and exits 0
(``perfkit.saving.Preemption``).

Each rank writes, under ``--out``:

* ``loss.rank<r>.jsonl``: one line per step ``{"attempt", "step", "loss"}``;
* ``events.rank<r>.jsonl``: wall-clock times (``time.time()``, s) of ``created`` (the
  process's creation, from the OS: :func:`created_time`), ``started`` (the script's first line), ``imported``,
  ``joined`` (process group), ``built`` (model, DDP, optimizer, checkpointer), ``loaded``
  (with the step), ``first_step`` (the end of the first step of this attempt), ``kill``,
  ``saved``, ``preempted``, ``done``; from these the restart cost R splits into rendezvous
  (kill -> worker created), process start and imports, joining the group, building, load,
  first step (:func:`restart_cost`);
* ``final.rank<r>.pt``: the model's and the optimizer's state dicts at the end.

The model and optimizer come from :func:`build` alone, so that another layout (``--layout``)
swaps them without touching the loop.

Usage::

    torchrun --nproc-per-node 2 --max-restarts 3 --rdzv-backend c10d \\
        examples/resilient_train.py --root /tmp/ck --out /tmp/run --steps 12 --save-every 3 \\
        --kill-rank 1 --kill-step 7
"""

import time

STARTED = time.time()  # before the imports, which are part of the restart cost

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from perfkit import dist as pdist  # noqa: E402
from perfkit.saving import Checkpointer, Preemption, ResumableSampler, TrainState  # noqa: E402

N, FEATURES, HIDDEN = 96, 8, 32
PARTS = ("rendezvous", "start_and_imports", "join", "build", "load", "first_step")


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression set: (N, FEATURES) inputs and (N, 1) targets, float64."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(N, FEATURES, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def build(layout: str, ctx: pdist.WorkerContext) -> tuple[torch.nn.Module, Any, Any]:
    """The model as trained (``forward`` used by the loop), and the model and optimizer
    objects ``TrainState`` saves. The one place a layout is chosen."""
    if layout != "ddp":
        raise ValueError(f"layout must be 'ddp' here, got {layout!r}")
    torch.manual_seed(0)  # the same initial weights on every rank and every attempt
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Dropout(0.1), torch.nn.Linear(HIDDEN, 1)).double()
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2, weight_decay=0.01)
    return ddp, ddp, opt


def created_time() -> float:
    """This process's creation time on the ``time.time()`` clock (s).

    ``psutil.Process().create_time()`` adds the start tick to the boot time that
    ``/proc/stat`` gives in whole seconds, so on Linux it can be off by up to a second:
    more than a fast restart takes. Here the process's age (``/proc/uptime`` minus its start
    tick, to 1/CLK_TCK s) is subtracted from the current time instead."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except OSError:  # not Linux
        return psutil.Process().create_time()
    return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


class Log:
    """Append-only JSON lines, flushed and fsynced per line so a SIGKILL loses none."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "a")

    def write(self, **rec: Any) -> None:
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def restart_cost(events: list[dict], killed: list[dict]) -> dict[str, float]:
    """R and its parts (s) from one rank's events of the resumed attempt and the killed
    rank's ``kill`` event: rendezvous (kill -> worker created), start and imports, joining
    the process group, building the model, load, first step; ``total`` is kill -> end of
    the first resumed step."""
    kill = next(e["t"] for e in killed if e["event"] == "kill")
    attempt = max(e["attempt"] for e in events)
    t = {e["event"]: e["t"] for e in events if e["attempt"] == attempt}
    edges = [kill, t["created"], t["imported"], t["joined"], t["built"], t["loaded"], t["first_step"]]
    out = {p: b - a for p, a, b in zip(PARTS, edges, edges[1:])}
    out["total"] = edges[-1] - kill
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="checkpoint directory")
    p.add_argument("--out", required=True, help="directory for the losses, events, final state")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--mode", default="sync", choices=["sync", "thread", "process"])
    p.add_argument("--layout", default="ddp")
    p.add_argument("--kill-rank", type=int, default=-1, help="rank to SIGKILL in attempt 0")
    p.add_argument("--kill-step", type=int, default=-1, help="at the start of this step")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds added to each step")
    a = p.parse_args()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    events = Log(out / f"events.rank{rank}.jsonl")
    losses = Log(out / f"loss.rank{rank}.jsonl")
    events.write(event="created", t=created_time(), attempt=attempt)
    events.write(event="started", t=STARTED, attempt=attempt)
    events.write(event="imported", t=time.time(), attempt=attempt)

    ctx = pdist.init_worker("gloo")
    events.write(event="joined", t=time.time(), attempt=attempt, world_size=ctx.world_size)
    fwd, model, opt = build(a.layout, ctx)
    sampler = ResumableSampler(N, a.global_batch, ctx.rank, ctx.world_size, seed=5)
    state = TrainState(model, opt, sampler=sampler)
    ckpt = Checkpointer(a.root, keep=2, mode=a.mode, layout={"kind": a.layout})
    events.write(event="built", t=time.time(), attempt=attempt)
    start = ckpt.load_latest(state) or 0
    events.write(event="loaded", t=time.time(), attempt=attempt, step=start)
    x, y = dataset()
    batches = iter(sampler)
    with Preemption() as pre:
        for step in range(start, a.steps):
            if attempt == 0 and ctx.rank == a.kill_rank and step == a.kill_step:
                events.write(event="kill", t=time.time(), attempt=attempt, step=step)
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                idx = next(batches)
            except StopIteration:  # the epoch is over: the sampler starts the next one
                batches = iter(sampler)
                idx = next(batches)
            loss = torch.nn.functional.mse_loss(fwd(x[idx]), y[idx])  # (B/world, 1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if a.step_sleep:
                time.sleep(a.step_sleep)
            state.step = step + 1
            losses.write(attempt=attempt, step=step, loss=loss.item())
            if step == start:
                events.write(event="first_step", t=time.time(), attempt=attempt, step=step)
            if state.step % a.save_every == 0:
                rec = ckpt.save(state.step, state)
                events.write(event="saved", t=time.time(), attempt=attempt, step=state.step,
                             blocked_s=rec.blocked_s)
            if pre.requested():
                events.write(event="preempted", t=time.time(), attempt=attempt, step=state.step,
                             signal_t=pre.received_at)
                torch.save(final_state(model, opt), out / f"final.rank{rank}.pt")
                pre.save_and_exit(ckpt, state)
    ckpt.close()
    torch.save(final_state(model, opt), out / f"final.rank{rank}.pt")
    events.write(event="done", t=time.time(), attempt=attempt, step=state.step)
    pdist.worker_result({"rank": ctx.rank, "attempt": attempt, "start": start, "steps": a.steps})
    dist.barrier()
    pdist.shutdown()


def final_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The model's and the optimizer's full state dicts (parameter names as keys)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    m, o = get_state_dict(model, opt)
    return {"model": m, "optim": o}


if __name__ == "__main__":
    main()
