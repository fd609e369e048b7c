"""One torchrun job of the injected-failure sweep (``benchmarks/checkpoint_goodput.py``).

Each rank holds its own shard of the training state (``--state-mib`` of float32, as a
sharded optimizer would) and trains for ``--window-s`` of wall time from its first step:
each step a one-element all-reduce (the ranks stay in step, as data parallelism keeps them,
and rank 0 says when the window is over) and a sleep of ``--step-s`` (the step's compute, a
device the host waits for: sleeping leaves the 2 cores to the saves and restarts of the
other jobs). Every ``--save-every`` steps it saves through
``perfkit.saving.Checkpointer`` (synchronous: the step waits for the write and rank 0's
commit); at start it loads the last complete checkpoint. The first value of each shard
counts the steps applied to it, so a resumed run that redid or skipped a step ends with a
count other than its step.

Failures: attempt ``a`` of rank 0 SIGKILLs itself ``gaps[a]`` seconds after it starts, where
``gaps`` (``--schedule``, a JSON list of seconds) are independent exponential draws of mean
MTBF made by the driver: a Poisson process over the time a rank 0 is alive. The first
attempt counts from its first step (its imports are no restart); a restarted rank 0 arms its
failure as its first act, before importing torch, so that a failure can strike a restart
too, as in Daly's model. Only the instants between a kill and the new process are not
exposed (torchrun noticing the death and starting the processes, tenths of a second).

Rank 0 writes ``events.jsonl`` under ``--out``: ``begin``, ``kill``, ``started``,
``resumed`` and ``first_step`` (the end of an attempt's first step; with the attempt and
step), ``save`` (``blocked_s``), ``done`` (the step reached, the shard's count and the mean
step seconds of the last attempt), each ``{"event", "t", ...}`` with ``t`` from
``time.time()``.
"""

import json
import os
import signal
import sys
import threading
import time

STARTED = time.time()


def log(path: str, **rec) -> None:
    """Append one JSON line and fsync it, so that a SIGKILL right after loses nothing."""
    with open(path, "a") as f:
        f.write(json.dumps({**rec}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def arm(gaps: list[float], attempt: int, events: str) -> threading.Timer | None:
    """Start a timer that SIGKILLs this process ``gaps[attempt]`` seconds from now."""
    if attempt >= len(gaps):
        return None

    def die() -> None:
        log(events, event="kill", t=time.time(), attempt=attempt)
        os.kill(os.getpid(), signal.SIGKILL)

    timer = threading.Timer(gaps[attempt], die)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--window-s", type=float, required=True,
                   help="wall seconds from the first step to the end of the run")
    p.add_argument("--save-every", type=int, required=True)
    p.add_argument("--step-s", type=float, required=True)
    p.add_argument("--state-mib", type=float, required=True)
    p.add_argument("--schedule", required=True, help="JSON file: the list of gaps, s")
    a = p.parse_args(argv)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ.get("RANK", "0"))
    events = os.path.join(a.out, "events.jsonl")
    begin_file = os.path.join(a.out, "begin.json")
    with open(a.schedule) as f:
        gaps = json.load(f)
    timer, begin = None, None
    if rank == 0 and attempt > 0:  # before the imports: a restart can fail too
        timer = arm(gaps, attempt, events)
        log(events, event="started", t=STARTED, attempt=attempt)
        with open(begin_file) as f:
            begin = json.load(f)

    import torch
    import torch.distributed as dist

    from perfkit import dist as pdist
    from perfkit.saving import Checkpointer

    ctx = pdist.init_worker("gloo")
    n = int(a.state_mib * 2**20 / 4)
    state = {f"shard{ctx.rank}": torch.zeros(n)}  # (n,) float32: this rank's part of the state
    shard = state[f"shard{ctx.rank}"]
    ckpt = Checkpointer(a.root, keep=1, mode="sync")
    step = ckpt.load_latest(state) or 0
    if rank == 0 and attempt > 0:
        log(events, event="resumed", t=time.time(), attempt=attempt, step=step)
    stepping, steps = 0.0, 0  # s and count of this attempt's steps, saves excluded
    while True:
        t0 = time.time()
        if rank == 0 and begin is None:
            begin = t0
            with open(begin_file + ".tmp", "w") as f:
                json.dump(begin, f)
            os.replace(begin_file + ".tmp", begin_file)
            log(events, event="begin", t=begin)
            timer = arm(gaps, attempt, events)
        # rank 0 ends the window for all (after one step of each attempt, so that a restart
        # that ends past the window still shows when training resumed); the ranks stay in step
        stop = torch.tensor([float(rank == 0 and steps > 0 and t0 >= begin + a.window_s)])
        dist.all_reduce(stop)
        if stop.item() > 0:
            break
        time.sleep(a.step_s)  # the step's compute
        shard[0] += 1  # the step's update: the count of steps applied to this state
        step += 1
        stepping, steps = stepping + time.time() - t0, steps + 1
        if rank == 0 and attempt > 0 and steps == 1:
            log(events, event="first_step", t=time.time(), attempt=attempt, step=step)
        if step % a.save_every == 0:
            rec = ckpt.save(step, state)
            if rank == 0:
                log(events, event="save", t=time.time(), step=step, blocked_s=rec.blocked_s)
    if timer is not None:
        timer.cancel()
    if rank == 0:
        log(events, event="done", t=time.time(), attempt=attempt, step=step,
            count=int(shard[0].item()), step_s=stepping / max(steps, 1))
    ckpt.close()
    pdist.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
