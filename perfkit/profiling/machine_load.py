"""What else ran on the cores while a window was recorded: the machine's load, measured.

A loaded machine stretches every phase of a step, and a collective that runs on its own
threads is then covered by the stretched operators: the diagnosis has to know how loaded the
machine was. :func:`cpu_snapshot` reads, on Linux, each thread's CPU time and run-queue wait
from ``/proc/self/task/*/schedstat`` (the scheduler's own accounts: time on a core, time
ready to run but waiting for one), the busy time of the cores this process may run on from
``/proc/stat`` and the load average; :func:`load_between` turns two snapshots into a
:class:`LoadRecord`. Where ``/proc`` lacks them (macOS, Windows, some containers) the
snapshot is ``None`` and the report says the load is unknown.

Usage::

    before = cpu_snapshot()
    train_steps()
    load = load_between(before, cpu_snapshot())
    print(load.main_wait_s / load.window_s)  # share of the window the main thread waited
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from perfkit._checks import check_int, check_type

__all__ = ["CpuSnapshot", "LoadRecord", "cpu_snapshot", "load_between"]

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01  # /proc/stat


@dataclass(frozen=True)
class CpuSnapshot:
    """One reading: ``threads`` maps each thread id of this process to (CPU s, run-queue
    wait s) so far; ``cores_busy_s`` is the busy time of the cores in ``cores`` since boot
    (every process's), ``main`` the thread that took the snapshot."""

    t_s: float
    main: int
    threads: dict[int, tuple[float, float]]
    cores: tuple[int, ...]
    cores_busy_s: float | None
    loadavg: float | None


@dataclass(frozen=True)
class LoadRecord:
    """The load between two snapshots, in seconds of the window ``window_s``.

    ``main_cpu_s`` and ``main_wait_s``: the main thread on a core, and ready to run but
    waiting for one (the load's direct effect on the step); ``process_cpu_s``: every thread
    of this process (gloo's and the DataLoader's included); ``cores_busy_s``: every
    process's busy time on this process's ``cores`` (``None`` where unreadable);
    ``loadavg``: the 1-minute load average at the end.
    """

    window_s: float
    cores: int
    main_cpu_s: float
    main_wait_s: float
    process_cpu_s: float
    cores_busy_s: float | None
    loadavg: float | None


def _schedstat(path: Path) -> tuple[float, float] | None:
    try:
        cpu_ns, wait_ns = path.read_text().split()[:2]
        return int(cpu_ns) * 1e-9, int(wait_ns) * 1e-9
    except (OSError, ValueError):
        return None  # a thread that ended between listing and reading


def _cores_busy_s(cores: tuple[int, ...]) -> float | None:
    """Busy seconds (all but idle and iowait) of ``cores`` since boot, from /proc/stat."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    busy, wanted = 0, {f"cpu{c}" for c in cores}
    for line in lines:
        name, *ticks = line.split()
        if name in wanted:
            values = [int(x) for x in ticks[:8]]  # user nice system idle iowait irq softirq steal
            busy += sum(values) - values[3] - values[4]
    return busy * _TICK_S


def cpu_snapshot(main: int | None = None) -> CpuSnapshot | None:
    """This process's threads and its cores, now; ``None`` where ``/proc`` cannot say.

    Args:
        main: the native id of the thread whose waits matter (the training loop's);
            ``None``: the calling thread.

    Raises:
        TypeError, ValueError: for a ``main`` that is not an int >= 1.
    """
    main = threading.get_native_id() if main is None else check_int("main", main, 1)
    task = Path("/proc/self/task")
    threads = {}
    try:
        for d in task.iterdir():
            got = _schedstat(d / "schedstat")
            if got is not None and d.name.isdigit():
                threads[int(d.name)] = got
    except OSError:
        return None
    if main not in threads:
        return None
    cores = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") \
        else tuple(range(os.cpu_count() or 1))
    try:
        loadavg = os.getloadavg()[0]
    except OSError:
        loadavg = None
    return CpuSnapshot(time.monotonic(), main, threads, cores, _cores_busy_s(cores), loadavg)


def load_between(before: CpuSnapshot, after: CpuSnapshot) -> LoadRecord:
    """The load of the window between two snapshots of one process.

    Threads that started inside the window count from zero; those that ended count
    nothing for it (their time is gone with them).

    Raises:
        TypeError: if either is not a :class:`CpuSnapshot`.
        ValueError: if ``after`` is not later than ``before`` or their main threads differ.
    """
    check_type("before", before, CpuSnapshot)
    check_type("after", after, CpuSnapshot)
    if after.t_s <= before.t_s or after.main != before.main:
        raise ValueError("after must be a later snapshot taken on the same main thread as "
                         "before")
    main_cpu = after.threads[after.main][0] - before.threads[before.main][0]
    main_wait = after.threads[after.main][1] - before.threads[before.main][1]
    cpu = sum(c - before.threads.get(tid, (0.0, 0.0))[0] for tid, (c, _) in after.threads.items())
    busy = (after.cores_busy_s - before.cores_busy_s
            if after.cores_busy_s is not None and before.cores_busy_s is not None else None)
    return LoadRecord(after.t_s - before.t_s, len(after.cores), main_cpu, main_wait, cpu, busy,
                      after.loadavg)
