"""One replica group of the torchft per-step fault-tolerance run (``benchmarks/torchft_goodput.py``).

Started by ``torchrun --nproc-per-node 1`` (one process per replica group, as torchft's own
``train_ddp.py`` runs), with ``TORCHFT_LIGHTHOUSE`` pointing at the driver's lighthouse. It
trains with torchft's own pieces, as ``train_ddp.py`` does: a ``Manager`` on a reconfigurable
``ProcessGroupGloo``, the gradients all-reduced across the replica groups in the quorum by
``manager.allreduce`` (which, when a peer dies, reports the error to the manager instead of
raising), and torchft's ``Optimizer`` wrapper (``zero_grad`` starts the quorum, ``step``
steps the wrapped optimizer only if ``manager.should_commit()``).

Not torchft's ``DistributedDataParallel``: in torchft 0.2.0 its communication hook ends in
``assert fut._fut`` (``torchft/ddp.py``), which fails when the all-reduce's ``wait`` caught a
peer's death (gloo: "Connection closed by peer"), so the *surviving* replica died with an
``AssertionError`` at the first injected failure, tried on this machine. Waiting on the
manager's work directly, as that hook does before its assertion, keeps torchft's handling.

A model of one linear layer, deterministic data (batch ``i`` of group ``g`` drawn from seed
``1000 * g + i``), and a step of controlled cost: the forward and backward of the tiny model
and a sleep of ``--step-s`` (a device step the host waits for: sleeping leaves the 2 cores to
the other group and to restarts, so the step time stays stable under load).

A step is *committed* when ``manager.current_step()`` advanced through it (torchft increments
it exactly when ``should_commit()`` returns True). The worker appends one JSON line per step
to ``--out``/``group<g>.jsonl`` (``{"event": "step", "t0", "t1", "committed", "step",
"participants", "pid", "attempt"}``, ``t`` from ``time.time()``) and one ``started`` line per
process start, each written and flushed at once, so a SIGKILL loses at most the step in
flight. It trains until ``--window-s`` of wall time after its first step (``0``: until it is
ended), then writes ``done``.
"""

import argparse
import json
import os
import time
from datetime import timedelta


def log(path: str, **rec) -> None:
    """Append one JSON line; flushed at once so that a SIGKILL right after loses nothing."""
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description="one replica group of benchmarks/torchft_goodput.py")
    p.add_argument("--group", type=int, required=True, help="replica group id")
    p.add_argument("--out", required=True, help="directory for the group's events")
    p.add_argument("--step-s", type=float, default=0.1, help="the step's controlled cost (s)")
    p.add_argument("--window-s", type=float, default=0.0, help="wall seconds from the first step; 0: forever")
    p.add_argument("--timeout-s", type=float, default=10.0, help="torchft's collective/commit timeout")
    a = p.parse_args()
    events = os.path.join(a.out, f"group{a.group}.jsonl")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log(events, event="started", t=time.time(), pid=os.getpid(), attempt=attempt)

    import torch
    from torch import nn
    from torchft import Manager, Optimizer, ProcessGroupGloo

    torch.manual_seed(0)  # every group starts from the same weights
    model = nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    timeout = timedelta(seconds=a.timeout_s)

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd: dict) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"perfkit_ft_{a.group}", timeout=timeout,
                      quorum_timeout=timedelta(seconds=60), hostname="localhost")
    ft_opt = Optimizer(manager, opt)
    first = None
    i = 0
    try:
        while True:
            g = torch.Generator().manual_seed(1000 * a.group + i)
            x = torch.randn(16, 32, generator=g)  # (B, C)
            t0 = time.time()
            before = manager.current_step()
            ft_opt.zero_grad()  # starts the quorum (asynchronously)
            loss = model(x).pow(2).mean()
            time.sleep(a.step_s)  # the step's device time
            loss.backward()
            # the gradient all-reduce across replica groups (averaged over the participants);
            # a failed one marks the step errored, and should_commit() then returns False
            for work in [manager.allreduce(p.grad) for p in model.parameters()]:
                work.wait()
            ft_opt.step()  # steps only if should_commit()
            t1 = time.time()
            step = manager.current_step()
            log(events, event="step", t0=t0, t1=t1, committed=step > before, step=step,
                participants=manager.num_participants(), pid=os.getpid(), attempt=attempt)
            i += 1
            first = first or t1
            if a.window_s and t1 - first >= a.window_s:
                break
        log(events, event="done", t=time.time(), step=manager.current_step(), pid=os.getpid())
    finally:
        manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
