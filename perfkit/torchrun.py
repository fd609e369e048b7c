"""The ``torchrun`` command line that :func:`perfkit.dist.launch` runs, and the checks of its
arguments.

One place builds it, so that every launched job uses the same rendezvous: the c10d backend
on a store that binds port 0 (the OS picks a free port) under a fresh job id, so concurrent
jobs never collide; ``--max-restarts`` for a job that must survive a killed rank (torchrun
stops every worker of the failed attempt, then starts them all again, at most that many
times, and sets ``TORCHELASTIC_RESTART_COUNT``); ``--nnodes`` as ``N`` or ``MIN:MAX``
(elastic: the job runs with between MIN and MAX agents).

Usage::

    check_launch_args("pkg.worker", 2, 60.0, [], None, [], max_restarts=3)
    cmd = torchrun_command("pkg.worker", 2, ["--steps", "8"], max_restarts=3)
    subprocess.run(cmd)
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfkit._checks import check_int, check_real

__all__ = ["check_launch_args", "torchrun_command"]

_NNODES = re.compile(r"^([1-9]\d*)(?::([1-9]\d*))?$")


def check_launch_args(target: Any, nproc: Any, timeout_s: Any, args: Any, env: Any, pythonpath: Any,
                      max_restarts: Any = 0, nnodes: Any = "1") -> None:
    """Refuse what :func:`perfkit.dist.launch` cannot run, naming the argument.

    Raises:
        TypeError, ValueError: ``target`` not a non-empty str; ``nproc`` not an int >= 1;
            ``timeout_s`` not a finite number > 0; ``args``/``pythonpath`` not a list or
            tuple; ``env`` not ``None`` or a mapping of str to str; ``max_restarts`` not an
            int >= 0; ``nnodes`` not ``"N"`` or ``"MIN:MAX"`` with 1 <= MIN <= MAX.
    """
    if not isinstance(target, str) or not target:
        raise TypeError(f"target must be a module name or a script path, got {target!r}")
    check_int("nproc", nproc, 1)
    check_real("timeout_s", timeout_s, 0, lo_open=True)  # inf: a stuck job would never end
    for name, seq in (("args", args), ("pythonpath", pythonpath)):
        if isinstance(seq, str | bytes) or not isinstance(seq, Sequence):  # "ab" -> "a", "b"
            raise TypeError(f"{name} must be a list or tuple, got {seq!r}")
    if env is not None and not (isinstance(env, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise TypeError(f"env must be None or a mapping of str to str, got {env!r}")
    check_int("max_restarts", max_restarts, 0)
    if not isinstance(nnodes, str):
        raise TypeError(f"nnodes must be a str such as '1' or '1:2', got {nnodes!r}")
    m = _NNODES.match(nnodes)
    if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
        raise ValueError(f"nnodes must be 'N' or 'MIN:MAX' with 1 <= MIN <= MAX, got {nnodes!r}")


def torchrun_command(target: str, nproc: int, args: Sequence[Any], max_restarts: int = 0,
                     nnodes: str = "1", rdzv_endpoint: str = "127.0.0.1:0",
                     rdzv_id: str | None = None, rdzv_conf: str | None = None) -> list[str]:
    """The command line that runs ``target`` on ``nproc`` processes per agent under torchrun.

    Args:
        target: a module name (run with ``-m``) or the path of a ``.py`` script.
        nproc: worker processes per agent; args: the workers' arguments (``str`` each).
        max_restarts: how often torchrun restarts the whole job after a worker fails.
        nnodes: ``"N"`` agents, or ``"MIN:MAX"`` for an elastic job.
        rdzv_endpoint: the c10d rendezvous store's ``host:port`` (port 0: a free one, for a
            single agent; agents of one job must share a fixed one).
        rdzv_id: the job id every agent of the job passes; ``None``: a fresh one.
        rdzv_conf: the rendezvous's ``key=value,...`` settings (``--rdzv-conf``), e.g.
            ``"last_call_timeout=2"``: how long an elastic job waits for more agents once
            it has its minimum; ``None``: torchrun's defaults.

    Raises:
        TypeError, ValueError: what :func:`check_launch_args` refuses, a script path that is
            not a file, or an endpoint that is not a non-empty str.
    """
    check_launch_args(target, nproc, 1.0, args, None, (), max_restarts, nnodes)
    if not isinstance(rdzv_endpoint, str) or not rdzv_endpoint:
        raise TypeError(f"rdzv_endpoint must be a 'host:port' str, got {rdzv_endpoint!r}")
    if rdzv_id is not None and (not isinstance(rdzv_id, str) or not rdzv_id):
        raise TypeError(f"rdzv_id must be None or a non-empty str, got {rdzv_id!r}")
    if rdzv_conf is not None and (not isinstance(rdzv_conf, str) or "=" not in rdzv_conf):
        raise TypeError(f"rdzv_conf must be None or a 'key=value,...' str, got {rdzv_conf!r}")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
           f"--rdzv-id={rdzv_id or uuid.uuid4().hex}", f"--max-restarts={max_restarts}",
           "--monitor-interval=0.1"] + ([f"--rdzv-conf={rdzv_conf}"] if rdzv_conf else [])
    if target.endswith(".py") or os.sep in target:
        if not Path(target).is_file():
            raise ValueError(f"target {target!r} looks like a script path but no such file")
        cmd.append(str(Path(target).resolve()))
    else:
        cmd += ["-m", target]
    return cmd + [str(a) for a in args]
