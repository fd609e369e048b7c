"""Launch real ``torchrun`` jobs from Python and get JSON results back, rank by rank.

Every distributed experiment in the course runs its workers as separate processes
under ``python -m torch.distributed.run`` (torchrun), the launcher that also runs
multi-node jobs, never a home-made one. :func:`launch` starts the job on a free port,
waits under a timeout, and returns what each rank passed to :func:`worker_result`.

Launcher side::

    from perfkit import dist
    results = dist.launch("perfkit.jobs.hello", nproc=2, args=["--size", "1024"])
    print(results[1])                     # what rank 1 passed to worker_result

Worker side (a module or script, run by torchrun)::

    ctx = dist.init_worker()              # process group: nccl with CUDA, else gloo
    dist.worker_result({"rank": ctx.rank, "sum": float(t.sum())})
    dist.shutdown()                       # collective: every rank calls it last

API contract (stable; other modules build on it):

* ``launch(target, nproc=2, args=(), timeout_s=120.0, env=None, pythonpath=(),
  backend=None, max_restarts=0) -> list`` returns one entry per rank, in rank order: the last object that
  rank passed to :func:`worker_result`, or ``None`` if it passed none. ``target`` is a
  module name (``"pkg.mod"``, run as ``-m pkg.mod``) or a path to a ``.py`` script.
* A failing job raises :class:`WorkerError` whose message holds the traceback of the
  rank that failed first (not the "peer closed the connection" errors it caused on the
  other ranks) and the tail of the job's output; a job past ``timeout_s`` raises
  :class:`LaunchTimeout` after the whole process tree was killed.
* ``max_restarts`` > 0: torchrun restarts the whole job after a worker fails, at most that
  often (``perfkit.torchrun`` builds the command line); the job fails only when the last
  attempt does.

A stuck job's ranks print their stacks (faulthandler on SIGUSR1) before they are killed.

Clean shutdown. gloo's threads can be alive while the interpreter finalises, and a joinable
C++ ``std::thread`` destroyed then aborts the process (SIGABRT) after its work is done.
:func:`shutdown` therefore ends it with ``os._exit`` after a barrier,
``destroy_process_group`` and a flush: the results are already on disk (written atomically
by :func:`worker_result`). ``tests/distributed/test_dist.py`` requires 20 exits 0 in a row.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from perfkit._checks import check_int, check_real
from perfkit._files import write_atomic
from perfkit.torchrun import check_launch_args, torchrun_command

__all__ = ["LaunchTimeout", "WorkerContext", "WorkerError", "default_backend", "end_process_tree",
           "init_worker", "launch", "shutdown", "worker_main", "worker_result"]

RESULT_DIR_ENV = "PERFKIT_RESULT_DIR"
BACKEND_ENV = "PERFKIT_BACKEND"
_TAIL_CHARS = 8000  # room for every rank's stacks after a timeout


class WorkerError(RuntimeError):
    """A launched job failed. ``rank`` is the first rank that raised (``None`` if none
    left a traceback, e.g. killed by a signal); ``worker_traceback`` is its traceback;
    ``output`` is the tail of the job's combined stdout/stderr; ``returncode`` is
    torchrun's exit status."""

    def __init__(self, message: str, rank: int | None, worker_traceback: str, output: str,
                 returncode: int) -> None:
        super().__init__(message)
        self.rank = rank
        self.worker_traceback = worker_traceback
        self.output = output
        self.returncode = returncode


class LaunchTimeout(TimeoutError):
    """A launched job ran past its timeout and was killed; ``output`` ends with each rank's stacks."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def default_backend() -> str:
    """``"nccl"`` when CUDA is available, else ``"gloo"`` (``PERFKIT_BACKEND`` overrides)."""
    return os.environ.get(BACKEND_ENV) or ("nccl" if torch.cuda.is_available() else "gloo")


# --- launcher side ----------------------------------------------------------------------


def end_process_tree(pid: int | None = None, grace_s: float = 3.0) -> None:
    """End process ``pid`` and all its descendants: SIGTERM, ``grace_s`` to exit, SIGKILL.

    The descendants are listed before any signal: torchrun's workers run in their own
    sessions, so killing a process group alone would orphan them, and a parent that dies
    first hands its children to init, out of reach. Processes already gone are skipped.

    Args:
        pid: the root process; ``None``: this process's descendants, not itself.
        grace_s: seconds to exit after SIGTERM (torchrun forwards it to its workers)
            before SIGKILL; 0 sends SIGKILL at once.

    Raises:
        ValueError, TypeError: ``pid`` not an int >= 1 (or ``None``); ``grace_s`` not a
            finite number >= 0.
    """
    if pid is not None:
        check_int("pid", pid, 1)
    check_real("grace_s", grace_s, 0)
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + ([root] if pid is not None else [])
    except psutil.NoSuchProcess:
        return
    if grace_s > 0:
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGTERM)
        _, procs = psutil.wait_procs(procs, timeout=grace_s)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=3.0)


def _ask_for_stacks(pid: int, wait_s: float = 0.5) -> None:
    """SIGUSR1 to the workers under ``pid``, one at a time, ``wait_s`` apart, so their stack
    dumps into the shared log do not interleave character by character."""
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGUSR1)
                time.sleep(wait_s)


def _first_error(result_dir: Path) -> tuple[int | None, str]:
    """The traceback of the rank that failed first (earliest error file)."""
    errs = sorted(result_dir.glob("rank*.err"), key=lambda p: (p.stat().st_mtime_ns, p.name))
    if not errs:
        return None, ""
    return int(errs[0].stem.removeprefix("rank")), errs[0].read_text()


def launch(
    target: str,
    nproc: int = 2,
    args: Sequence[str | int | float] = (),
    timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
    pythonpath: Sequence[str | os.PathLike] = (),
    backend: str | None = None,
    max_restarts: int = 0,
) -> list[Any]:
    """Run ``target`` on ``nproc`` local processes under torchrun; return their results.

    Args:
        target: a module name (``"perfkit.jobs.collectives"``, run as ``python -m``)
            or the path of a ``.py`` script.
        nproc: number of worker processes (ranks), at least 1.
        args: command-line arguments for every worker (converted with ``str``).
        timeout_s: wall-clock limit for the whole job, start-up included.
        env: extra environment variables for the workers.
        pythonpath: directories prepended to the workers' ``PYTHONPATH`` (for worker code
            that lives outside installed packages, e.g. a module written to a temp dir).
        backend: ``"gloo"`` or ``"nccl"``; ``None`` lets each worker pick (nccl with CUDA).
        max_restarts: how often torchrun restarts the whole job after a worker fails
            (``--max-restarts``); the workers read the attempt from
            ``TORCHELASTIC_RESTART_COUNT``.

    Returns:
        One entry per rank in rank order: the JSON value that rank last passed to
        :func:`worker_result` (in any attempt; a later one replaces it), or ``None`` if it
        passed none.

    Raises:
        TypeError, ValueError: for a bad ``target``, ``nproc``, ``timeout_s`` (a finite
            number > 0), ``args``, ``env``, ``pythonpath``, ``backend`` or ``max_restarts``.
        WorkerError: if any worker exited non-zero; the message holds the traceback of
            the first rank that raised and the tail of the job's output.
        LaunchTimeout: if the job ran past ``timeout_s`` (every process is killed first).
    """
    check_launch_args(target, nproc, timeout_s, args, env, pythonpath, max_restarts)
    if backend not in (None, "gloo", "nccl"):
        raise ValueError(f"backend must be None, 'gloo' or 'nccl', got {backend!r}")
    cmd = torchrun_command(target, nproc, args, max_restarts)
    result_dir = Path(tempfile.mkdtemp(prefix="perfkit-dist-"))
    full_env = {**os.environ, **(env or {}), RESULT_DIR_ENV: str(result_dir)}
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env["PYTHONUNBUFFERED"] = "1"
    paths = [str(Path(p).resolve()) for p in pythonpath] + [os.getcwd()]
    if full_env.get("PYTHONPATH"):
        paths.append(full_env["PYTHONPATH"])
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    if backend is not None:
        full_env[BACKEND_ENV] = backend
    log_path = result_dir / "output.log"
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _ask_for_stacks(proc.pid)
                end_process_tree(proc.pid)
                proc.wait()  # reaps torchrun (a killed child stays a zombie until waited for)
                out = log_path.read_text(errors="replace")[-_TAIL_CHARS:]
                raise LaunchTimeout(
                    f"{target} on {nproc} processes ran past timeout_s={timeout_s} s and was "
                    f"killed (a rank stuck in a collective that another rank never called?); "
                    f"each rank's stacks at the timeout are in the output."
                    f"\n--- job output (tail) ---\n{out}", out) from None
        output = log_path.read_text(errors="replace")
        rank, tb = _first_error(result_dir)
        if returncode != 0:
            tail = output[-_TAIL_CHARS:]
            who = f"rank {rank} raised" if rank is not None else "no rank left a traceback"
            raise WorkerError(
                f"{target} on {nproc} processes failed (torchrun exit {returncode}); {who}:"
                f"\n{tb}\n--- job output (tail) ---\n{tail}", rank, tb, tail, returncode)
        results: list[Any] = []
        for r in range(nproc):
            f = result_dir / f"rank{r}.json"
            results.append(json.loads(f.read_text()) if f.exists() else None)
        return results
    finally:
        shutil.rmtree(result_dir, ignore_errors=True)


# --- worker side ------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerContext:
    """Where this worker stands: its rank, the world size, its device and backend."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """Write the traceback where the launcher finds it, print it, and exit 1 at once.

    Exiting with ``os._exit`` skips finalisation: a rank that raised must not wait in
    gloo's teardown for peers that are themselves blocked waiting for it.
    """
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    result_dir = os.environ.get(RESULT_DIR_ENV)
    if result_dir:
        try:
            (Path(result_dir) / f"rank{_rank()}.err").write_text(text)
        except OSError:
            pass
    sys.stderr.write(f"[rank {_rank()}] {text}")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)


def _attempt_store(timeout: datetime.timedelta) -> dict[str, Any]:
    """The rendezvous store of this attempt of a restarted job, as ``init_process_group``'s
    arguments. torchrun's workers share its agent's store across restarts, where a killed
    attempt's keys (its ranks' gloo addresses) remain: a new rank could read a dead peer's
    address before the live peer overwrote it, and fail to connect. A prefix per attempt
    (``TORCHELASTIC_RESTART_COUNT``) keeps each attempt's keys apart."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt == "0" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    import torch.distributed as dist

    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                           is_master=False, timeout=timeout)
    return {"store": dist.PrefixStore(f"perfkit/attempt{attempt}", client),
            "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}


def init_worker(backend: str | None = None, timeout_s: float = 120.0) -> WorkerContext:
    """Join the job's process group (call once, first, in every worker).

    Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` that torchrun sets, picks the
    backend (``nccl`` with CUDA, else ``gloo``), binds the CUDA device ``LOCAL_RANK``,
    and installs an exception hook that hands an uncaught traceback to the launcher.

    Warning:
        Collective: every rank must call it, or the others wait until ``timeout_s``.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; ``None`` means :func:`default_backend`.
        timeout_s: how long collectives wait for missing ranks before failing.

    Returns:
        A :class:`WorkerContext`.

    Raises:
        RuntimeError: if not started by torchrun (``RANK``/``WORLD_SIZE`` unset).
        TypeError, ValueError: for an unknown ``backend`` or a ``timeout_s`` that is not a
            finite number > 0 (checked first).
    """
    import torch.distributed as dist

    check_real("timeout_s", timeout_s, 0, lo_open=True)
    backend = default_backend() if backend is None else backend
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise RuntimeError("init_worker() needs RANK and WORLD_SIZE: start this worker with "
                           "perfkit.dist.launch or torchrun, not plain python")
    sys.excepthook = _excepthook
    if hasattr(signal, "SIGUSR1"):  # launch() asks a stuck job where it waits before killing it
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        dist.init_process_group(backend, timeout=timeout, **_attempt_store(timeout))
    return WorkerContext(dist.get_rank(), dist.get_world_size(), local_rank, device, backend)


def worker_result(obj: Any) -> None:
    """Hand ``obj`` (anything ``json.dumps`` accepts) to the launcher as this rank's result.

    The file is written to a temporary name and renamed, so the launcher never reads a
    half-written result. Called again, the later result replaces the earlier. Without a
    launcher (plain torchrun) the result is printed as one ``PERFKIT_RESULT`` line.

    Raises:
        TypeError: if ``obj`` is not JSON-serialisable.
    """
    try:
        text = json.dumps(obj)
    except (TypeError, ValueError) as e:
        raise TypeError(f"worker_result needs a JSON-serialisable obj: {e}") from None
    result_dir = os.environ.get(RESULT_DIR_ENV)
    if not result_dir:
        print(f"PERFKIT_RESULT rank={_rank()} {text}", flush=True)
        return
    write_atomic(Path(result_dir) / f"rank{_rank()}.json", text)  # the launcher never reads half


def shutdown(exit_code: int = 0) -> None:
    """Leave the job cleanly and end the process; never returns.

    Barrier, ``destroy_process_group``, flush, ``os._exit(exit_code)``: no interpreter
    finalisation (the SIGABRT above). Write results with :func:`worker_result` *before*.

    Warning:
        Collective: every rank must call it (it starts with a barrier).

    Raises:
        TypeError, ValueError: if ``exit_code`` is not an int in [0, 255] (checked first).
    """
    import torch.distributed as dist

    check_int("exit_code", exit_code, 0, 255)  # os._exit(256) would report success
    if dist.is_initialized():
        if torch.cuda.is_available() and dist.get_backend() == "nccl":
            torch.cuda.synchronize()
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(exit_code)


def worker_main(run: Any, description: str = "", argv: Sequence[str] | None = None) -> None:
    """The whole ``main`` of a worker configured by one JSON ``--config`` argument.

    Parses ``--config``, joins the group (:func:`init_worker`), hands ``run(config)`` to the
    launcher (:func:`worker_result`), leaves (:func:`shutdown`). A worker module ends with::

        if __name__ == "__main__":
            worker_main(run, __doc__)

    Warning: collective; every rank of the job must call it.

    Raises:
        TypeError: if ``run`` is not callable (checked before joining the job).
    """
    import argparse

    if not callable(run):
        raise TypeError(f"run must be callable, got {type(run).__name__}")
    p = argparse.ArgumentParser(description=(description or "").split("\n\n")[0])
    p.add_argument("--config", required=True, help="JSON object; see the module docstring")
    cfg = json.loads(p.parse_args(argv).config)
    init_worker()
    worker_result(run(cfg))
    shutdown()
