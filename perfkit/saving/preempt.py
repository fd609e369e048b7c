"""Graceful preemption: a SIGTERM saves the run at the next step boundary and exits cleanly.

Schedulers and launchers announce the end of a job with SIGTERM and kill it for good a grace
period later: torchrun forwards SIGTERM to its workers and sends SIGKILL 30 s later, Slurm
waits ``KillWait`` (30 s by default), Kubernetes ``terminationGracePeriodSeconds`` (30 s).
A run that saves then loses nothing but the step in progress. The signal handler only sets
a flag (a handler that saved in the middle of a step would save a half-updated model, and
could not run collectives); :meth:`Preemption.requested`, called at each step boundary on
every rank, agrees across ranks (one all-reduce of a flag, MAX), since the signal reaches
the ranks at different moments and every rank must save the same step.

Usage::

    with Preemption() as pre:                   # installs the SIGTERM handler
        for step in range(start, steps):
            train_step()
            if pre.requested():                 # collective: every rank, every step
                pre.save_and_exit(ckpt, state)  # save this step, wait for it, exit 0
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_items, check_type
from perfkit.dist import shutdown

__all__ = ["Preemption"]


class Preemption:
    """A flag that the given signals set, read at step boundaries and agreed across ranks.

    Args:
        signals: the signals that announce preemption (default: SIGTERM).
        group: the process group over which ranks agree (``None``: the default group when
            one is initialized; without one the local flag is the answer).

    Attributes:
        received_at: ``time.time()`` when this process first got one of the signals, or ``None``.

    Raises:
        TypeError, ValueError: ``signals`` not a non-empty list of ``signal.Signals``.
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,), group: Any = None) -> None:
        self.signals = tuple(check_type("signals[]", s, signal.Signals)
                             for s in check_items("signals", signals))
        self.group = group
        self.received_at: float | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.received_at is None:
            self.received_at = time.time()

    def install(self) -> Preemption:
        """Install the handlers (in the main thread); the previous ones come back at
        :meth:`uninstall`."""
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handler)
        return self

    def uninstall(self) -> None:
        """Restore the handlers that were there before :meth:`install`."""
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()

    def __enter__(self) -> Preemption:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def requested(self) -> bool:
        """Whether any rank got the signal: call it at a step boundary.

        Warning:
            Collective with a process group: every rank must call it at the same step.
        """
        flag = self.received_at is not None
        if not (dist.is_available() and dist.is_initialized()):
            return flag
        t = torch.tensor([1.0 if flag else 0.0])
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return bool(t.item())

    def save_and_exit(self, checkpointer: Any, state: Any, exit_code: int = 0) -> None:
        """Save ``state`` at its step (unless that step is already saved), wait until the
        save is committed, and leave the job with ``exit_code`` (``perfkit.dist.shutdown``:
        barrier, destroy the group, exit); never returns.

        Warning:
            Collective: every rank must call it.

        Args:
            checkpointer: a :class:`~perfkit.saving.Checkpointer`.
            state: a :class:`~perfkit.saving.TrainState` (its ``step`` names the checkpoint).
            exit_code: the process's exit status, 0 by default (a clean stop).

        Raises:
            TypeError: ``checkpointer`` or ``state`` of the wrong kind (checked first).
        """
        from perfkit.saving.checkpointer import Checkpointer
        from perfkit.saving.store import latest, step_dir
        from perfkit.saving.training_state import TrainState

        check_type("checkpointer", checkpointer, Checkpointer)
        check_type("state", state, TrainState)
        checkpointer.wait()
        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # rank 0's commit of the last save is visible to every rank
        if latest(checkpointer.root) != step_dir(checkpointer.root, state.step):
            checkpointer.save(state.step, state)
        checkpointer.close()
        shutdown(exit_code)
