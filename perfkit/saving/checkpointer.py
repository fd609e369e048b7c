"""``Checkpointer``: save the training state through ``torch.distributed.checkpoint`` without
stopping for long, and load the last complete save.

Every rank writes its own shard with DCP into a ``.partial`` directory; rank 0 then commits
it (``perfkit.saving.store``: manifest with checksums, one rename, ``latest``, keep the last
k). Three modes:

* ``"sync"``: ``dcp.save``; the step waits for the whole write and the commit.
* ``"thread"``: ``dcp.async_save`` with ``AsyncCheckpointerType.THREAD``: the step waits only
  for the copy of the state into CPU memory (staging); a thread writes the files and rank 0
  commits. That thread holds the GIL while it serialises, which slows the training loop.
* ``"process"``: ``AsyncCheckpointerType.PROCESS``: the write runs in a daemon process that
  DCP starts on the first save (its own process group), so it does not contend for the
  training process's GIL; the staged copy travels to it through a pipe. The process is
  spawned, so it imports the training script again: a script without an
  ``if __name__ == "__main__":`` guard kills it ("Checkpoint background process is dead").

At most one save is in flight, as in CheckFreq (Mohan et al., FAST 2021): a save first waits
(up to ``timeout_s``) for the previous one's persist and commit. Each save's timings are
kept in :attr:`Checkpointer.records` (:class:`SaveRecord`).

Saves and loads run their collectives on a gloo process group of their own, created here, so
that a background thread's collectives never interleave with the training's on the default
group, and CPU tensors are saved the same way when the training's group is NCCL.

Usage::

    ckpt = Checkpointer("runs/ckpt", keep=2, mode="thread")
    start = ckpt.load_latest(state) or 0       # state: a perfkit.saving.TrainState
    ckpt.save(step, state)                     # returns once the state is staged
    ckpt.close()                               # waits for the last persist
"""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from perfkit._checks import check_choice, check_int, check_real
from perfkit.saving.layouts import check_loadable
from perfkit.saving.store import (
    CheckpointError,
    Manifest,
    check_layout,
    commit,
    latest,
    partial_dir,
    prune,
    remove_partials,
    verify,
)
from perfkit.saving.training_state import TrainState

__all__ = ["Checkpointer", "SaveRecord"]

MODES = ("sync", "thread", "process")


@dataclass
class SaveRecord:
    """The cost of one save.

    Attributes:
        step: the step saved; mode: ``"sync"``, ``"thread"`` or ``"process"``.
        blocked_s: seconds the caller of :meth:`Checkpointer.save` was blocked (s), the wait
            for a previous save in flight excluded (that is ``waited_s``).
        waited_s: seconds spent first waiting for the previous save to finish (s).
        persist_s: seconds from the end of staging until the files were written (s); the
            whole ``dcp.save`` in sync mode; ``None`` until the files are written (the commit
            may still be running then).
        commit_s: seconds rank 0 spent on the manifest, fsync and rename (s); 0 elsewhere.
        bytes: the checkpoint's bytes (from its manifest; rank 0 only, else 0).
        path: the committed directory (rank 0 only, else ``None``).
    """

    step: int
    mode: str
    blocked_s: float
    waited_s: float = 0.0
    persist_s: float | None = None
    commit_s: float = 0.0
    bytes: int = 0
    path: str | None = None


def _stop_writer_process() -> None:
    """End the daemon process DCP's process executor starts on its first save (one per
    trainer process, kept for later saves; torch ends it only when the module is finalised)."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    proc = getattr(executor, "_CHECKPOINT_PROCESS", None)
    if proc is not None:
        executor._CHECKPOINT_PROCESS = None
        proc.__del__()  # sends TERMINATE, joins for 5 s, then SIGTERM
        writer = getattr(proc, "_save_process", None)
        if writer is not None:  # reaped here, so the object's own __del__ at collection finds it
            writer.join(timeout=5)  # ended instead of sending into a closed pipe (BrokenPipeError)
            if writer.is_alive():
                writer.kill()
                writer.join()


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Checkpointer:
    """Save and load the training state under ``root``, atomically, in the background if asked.

    Warning:
        With a process group the constructor, :meth:`save` and :meth:`load_latest` are
        collective: every rank must call them, in the same order, with the same ``step``.

    Args:
        root: the directory of the checkpoints (created; shared by every rank).
        keep: how many complete checkpoints to keep (at least 1).
        mode: ``"sync"``, ``"thread"`` or ``"process"`` (see the module docstring);
            ``"process"`` needs an initialized process group (one rank is enough).
        layout: a JSON description of the state's layout, written into each manifest and
            checked at load (``{"kind": ..., "reshardable": False}`` refuses other world sizes).
        timeout_s: how long a save waits for the previous one in flight, and :meth:`wait` by
            default.

    Raises:
        TypeError, ValueError: a bad argument; ``"process"`` without a process group.
    """

    def __init__(self, root: str | os.PathLike, keep: int = 2, mode: str = "sync",
                 layout: Any = None, timeout_s: float = 600.0) -> None:
        if not isinstance(root, str | os.PathLike) or not str(root):
            raise TypeError(f"root must be a directory path (str or os.PathLike), got {root!r}")
        self.root = Path(root)
        self.keep = check_int("keep", keep, 1)
        self.mode = check_choice("mode", mode, MODES)
        self.timeout_s = check_real("timeout_s", timeout_s, 0, lo_open=True)
        self.layout = layout
        self.rank, self.world_size = _world()
        if mode == "process" and not dist.is_initialized():
            raise ValueError("mode 'process' needs an initialized process group (DCP's writer "
                             "process joins it; torch.distributed.init_process_group with one "
                             "rank is enough); use mode 'thread' or 'sync' without one")
        self.records: list[SaveRecord] = []
        self._inflight: Future | None = None
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="perfkit-commit")
        self._group = None
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            remove_partials(self.root)  # a crash's leftovers, before any rank writes anew
        if dist.is_initialized():
            self._group = dist.new_group(backend="gloo")
            dist.barrier()

    # --- saving ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        """Whether a save's persist or commit is still running in the background."""
        return self._inflight is not None and not self._inflight.done()

    def wait(self, timeout_s: float | None = None) -> SaveRecord | None:
        """Wait for the save in flight (persist and commit); return its record, or ``None``
        if none was in flight.

        Raises:
            TypeError, ValueError: ``timeout_s`` not ``None`` or a finite number > 0.
            TimeoutError: it did not finish within ``timeout_s`` (default: the constructor's).
            CheckpointError, and any error of the write: the save failed (raised once; the
                next save starts afresh, and ``latest`` still names the last complete one).
        """
        if timeout_s is not None:
            check_real("timeout_s", timeout_s, 0, lo_open=True)
        if self._inflight is None:
            return None
        try:
            self._inflight.result(timeout=self.timeout_s if timeout_s is None else timeout_s)
        except FutureTimeout:
            raise TimeoutError(f"the save of step {self.records[-1].step} did not finish within "
                               f"{self.timeout_s if timeout_s is None else timeout_s} s") from None
        finally:
            if self._inflight.done():
                self._inflight = None
        return self.records[-1]

    def _finish(self, record: SaveRecord, partial: Path, upload: Future | None, t0: float) -> None:
        if upload is not None:
            upload.result()
        record.persist_s = time.perf_counter() - t0
        if self.rank == 0:
            t1 = time.perf_counter()
            path = commit(partial, record.step, self.world_size, self.layout)
            prune(self.root, self.keep)
            remove_partials(self.root, below=record.step)  # earlier saves that failed
            record.commit_s = time.perf_counter() - t1
            record.path = str(path)
            record.bytes = verify(path, files=[]).bytes

    def save(self, step: int, state: Any) -> SaveRecord:
        """Save ``state`` as checkpoint ``step``; in the asynchronous modes return once it is
        staged in CPU memory (the persist and rank 0's commit continue in the background).

        Args:
            step: the training step, an int >= 0 above the latest checkpoint's.
            state: a :class:`~perfkit.saving.TrainState`, another DCP ``Stateful``, or a dict
                of tensors and ``Stateful`` objects.

        Returns:
            The :class:`SaveRecord`; ``persist_s`` fills in once the files are written, and
            the save is done (committed) after :meth:`wait`.

        Raises:
            TypeError, ValueError: a bad ``step`` or ``state``.
            CheckpointError: ``step`` not above the latest checkpoint's step.
            TimeoutError: the previous save did not finish within ``timeout_s``.
        """
        check_int("step", step, 0)
        if not (isinstance(state, dict) or callable(getattr(state, "state_dict", None))):
            raise TypeError(f"state must be a TrainState, a Stateful or a dict, got "
                            f"{type(state).__name__}")
        t_wait = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - t_wait
        last = latest(self.root)
        if last is not None and int(last.name.removeprefix("step_")) >= step:
            raise CheckpointError(f"step {step} is not above the latest checkpoint's "
                                  f"({last.name}); a new run needs another root")
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

        partial = partial_dir(self.root, step)
        record = SaveRecord(step, self.mode, 0.0, waited_s=waited)
        sd = {"train": state}
        writer = dcp.FileSystemWriter(partial, sync_files=True)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            warnings.filterwarnings("ignore", message=".*experimental.*")
            if self.mode == "sync":
                dcp.save(sd, storage_writer=writer, process_group=self._group,
                         no_dist=not dist.is_initialized())
                record.blocked_s = time.perf_counter() - t0
                self._finish(record, partial, None, t0)
                record.blocked_s = time.perf_counter() - t0
                self.records.append(record)
                return record
            kind = (AsyncCheckpointerType.THREAD if self.mode == "thread"
                    else AsyncCheckpointerType.PROCESS)
            upload = dcp.async_save(sd, storage_writer=writer, process_group=self._group,
                                    async_checkpointer_type=kind, no_dist=not dist.is_initialized())
        t1 = time.perf_counter()
        record.blocked_s = t1 - t0
        self.records.append(record)
        self._inflight = self._committer.submit(self._finish, record, partial, upload, t1)
        return record

    # --- loading --------------------------------------------------------------------------

    def _verify_shared(self, path: Path) -> Manifest:
        """Verify ``path``'s files, each rank a share of them; raise the first failure on all."""
        manifest = verify(path, files=[])
        names = sorted(manifest.files)
        error = ""
        try:
            verify(path, files=names[self.rank::self.world_size])
        except CheckpointError as e:
            error = str(e)
        if dist.is_initialized():
            errors: list[Any] = [None] * self.world_size
            dist.all_gather_object(errors, error, group=self._group)
            error = next((e for e in errors if e), "")
        if error:
            raise CheckpointError(error)
        return manifest

    def load_latest(self, state: Any) -> int | None:
        """Load the last complete checkpoint into ``state`` and return its step, or ``None``
        (``state`` untouched) when there is none. Its files are checked against the manifest
        first (the ranks share the reading).

        Args:
            state: what :meth:`save` was given (the same structure; DCP reshards tensors
                onto this job's layout).

        Returns:
            The step loaded, or ``None``.

        Raises:
            TypeError: ``state`` has no ``state_dict``/``load_state_dict`` and is not a dict.
            CheckpointError: ``latest`` names a checkpoint that is missing, partial, corrupt
                (the file is named), or in a layout this job cannot load.
        """
        if not (isinstance(state, dict) or all(callable(getattr(state, m, None))
                                               for m in ("state_dict", "load_state_dict"))):
            raise TypeError(f"state must be a TrainState, a Stateful or a dict, got "
                            f"{type(state).__name__}")
        self.wait()
        path = latest(self.root)
        if path is None:
            return None
        manifest = self._verify_shared(path)
        check_layout(manifest, self.world_size, self.layout)
        import torch.distributed.checkpoint as dcp

        reader = dcp.FileSystemReader(path)
        sd = state if isinstance(state, dict) else state.state_dict()
        if isinstance(state, TrainState):
            keys = reader.read_metadata().state_dict_metadata
            if not any(k.startswith(f"train.{state.rng_key}.") for k in keys):
                sd.pop("rng", None)  # a rank the saving job did not have: keep its seeds
        try:  # a different model: name its first key here, not inside DCP's BaseException
            check_loadable(path, {"train": sd})
        except ValueError as e:
            raise CheckpointError(f"cannot load {path.name} into this job: {e}") from None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            dcp.load({"train": sd}, storage_reader=reader, process_group=self._group,
                     no_dist=not dist.is_initialized())
        if not isinstance(state, dict):
            state.load_state_dict(sd)
        return manifest.step

    def close(self) -> None:
        """Wait for the save in flight, stop the commit thread and, in ``"process"`` mode,
        DCP's writer process (call before exit: ``os._exit`` would leave it behind)."""
        try:
            self.wait()
        finally:
            self._committer.shutdown(wait=True)
            if self.mode == "process":
                _stop_writer_process()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
