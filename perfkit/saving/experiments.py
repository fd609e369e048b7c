"""Lecture 14's measurements as functions that return records: what a save costs and how much
of it blocks training, a save killed midway, and the goodput model at this machine's save
and restart times.

* :func:`save_costs` saves the tiny GPT of :mod:`perfkit.models` (weights and AdamW state)
  with :class:`~perfkit.saving.Checkpointer` in several modes, in interleaved rounds (one
  save of each mode per round, so load drifts hit every mode alike), beside the write
  bandwidth of the same directory (:func:`perfkit.saving.write_bandwidth`, with fsync, as
  a commit does).
* :func:`killed_save` forks a child that commits one checkpoint and is SIGKILLed inside the
  next, after its shard files and before the manifest and the rename; the parent loads the
  latest checkpoint, then damages one file of it and asks :func:`~perfkit.saving.verify`.
* a killed run resumed bit for bit and its restart cost: :mod:`perfkit.saving.restart_experiments`.
* :func:`goodput_curve` is the goodput model on a grid of intervals with Young's, Daly's
  and the grid's best interval.
* :func:`small_state` and :func:`small_step`: a small float64 MLP and its AdamW state after a
  given number of deterministic steps, the state every kill experiment (here and in
  ``benchmarks/checkpoint.py``) compares a loaded checkpoint with, bit for bit.

Usage::

    costs = save_costs("build/ckpt", rounds=5)    # the copy rate measured at the state's size
    print(costs.blocked("thread"), costs.sync_model_s, costs.staging_floor_s)
    print(killed_save("build/killed").verify_error)
    print(goodput_curve(save_s=0.5, restart_s=20.0, mtbf_s=600.0).best_s)
"""

from __future__ import annotations

import math
import os
import signal
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from perfkit import hw, stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.saving import checkpointer as checkpointer_module
from perfkit.saving.checkpointer import MODES, Checkpointer
from perfkit.saving.interval import best_interval, daly_interval, goodput, young_interval
from perfkit.saving.storage import WriteBandwidth, write_bandwidth
from perfkit.saving.store import CheckpointError, complete_steps, latest, verify
from perfkit.saving.training_state import TrainState
from perfkit.stats import Estimate
from perfkit.units import si

__all__ = ["GoodputCurve", "KilledSave", "SaveCosts", "copy_beside_limits", "goodput_curve", "killed_save",
           "save_costs", "small_state", "small_step", "with_fastest_copy"]

# DCP warns once per save that it saves in a single process when no group exists: expected here
_SINGLE = "torch.distributed is disabled, unavailable or uninitialized"


# --- 1. what a save costs ----------------------------------------------------------------


@dataclass(frozen=True)
class SaveCosts:
    """Interleaved saves of one state in several modes.

    Attributes:
        state_bytes: the checkpoint's bytes (its manifest's sum of file sizes).
        blocked_s: per mode, each round's seconds the caller was blocked.
        persist_s: per mode, each round's seconds until the files were written (in ``sync``
            mode the whole ``dcp.save``: planning, serialising and writing with fsync).
        commit_s: per mode, each round's seconds of the commit (each file's sha256, the
            manifest, its fsync and the rename), inside the blocked time in ``sync`` mode.
        write: the directory's write bandwidth with fsync.
        copy_bytes_per_s: the copy rate of a buffer of the state's size, read plus written
            bytes per s (the fastest of :func:`perfkit.hw.measure_copy` at ``state_bytes``,
            unless given; :func:`with_fastest_copy` raises it to a faster copy measured
            before): a state larger than the caches is copied at memory speed, not at the
            cache's.
    """

    state_bytes: int
    blocked_s: dict[str, list[float]]
    persist_s: dict[str, list[float]]
    write: WriteBandwidth
    copy_bytes_per_s: float
    commit_s: dict[str, list[float]] = field(default_factory=dict)

    @property
    def sync_model_s(self) -> float:
        """The synchronous save's floor: state bytes over the fastest of the directory's
        writes with fsync (s). A floor takes the fastest rate seen, not the median's."""
        return self.state_bytes / self.write.best_bytes_per_s

    @property
    def staging_floor_s(self) -> float:
        """The least an asynchronous save blocks: one copy of the state, which moves twice
        its bytes (read and written) at ``copy_bytes_per_s``, the fastest copy rate seen at the
        state's size (measured beside the saves, or raised by :func:`with_fastest_copy`) (s)."""
        return 2 * self.state_bytes / self.copy_bytes_per_s

    def blocked(self, mode: str) -> Estimate:
        """The median seconds ``mode`` blocked, with its interval."""
        return stats.median_interval(self.blocked_s[mode])

    def blocked_over_sync(self, mode: str) -> Estimate:
        """``mode``'s blocked time over the synchronous save's, paired by round."""
        return stats.median_ratio(self.blocked_s[mode], self.blocked_s["sync"])


def _nearest_copy(costs: SaveCosts, limits: hw.MachineLimits, threads: int) -> Any:
    """The limits file's copy on ``threads`` whose buffer lies nearest the state's size."""
    same = [q for q in limits.copy_points if q.op == "copy" and q.threads == threads]
    return min(same, key=lambda q: abs(q.nbytes - costs.state_bytes), default=None)


def with_fastest_copy(costs: SaveCosts, limits: hw.MachineLimits, threads: int) -> SaveCosts:
    """``costs`` with its copy rate raised to the limits file's copy nearest the state's size
    on the same ``threads`` (notebook 00's) where that ran faster: the staging floor is a floor
    only at the fastest copy rate seen, not at the one measured last.

    Raises:
        TypeError, ValueError: a bad argument.
    """
    check_type("costs", costs, SaveCosts)
    check_type("limits", limits, hw.MachineLimits)
    check_int("threads", threads, 1)
    near = _nearest_copy(costs, limits, threads)
    if near is None or near.best_bytes_per_s <= costs.copy_bytes_per_s:
        return costs
    return replace(costs, copy_bytes_per_s=float(near.best_bytes_per_s))


def copy_beside_limits(costs: SaveCosts, limits: hw.MachineLimits, threads: int) -> str:
    """``costs``' copy rate (a buffer of the state's size, on ``threads``) beside the copies in
    notebook 00's limits file: its DRAM ceiling (the best thread count on buffers no cache
    holds), its in-cache copy, and its copy nearest the state's size on the same threads; and
    which of the two copies near the state's size the staging floor takes
    (:func:`with_fastest_copy`: the faster); where that copy ran faster than the DRAM ceiling,
    that caches served part of it, and that the floor is then one for the caches, not DRAM.

    Raises:
        TypeError, ValueError: a bad argument.
    """
    check_type("costs", costs, SaveCosts)
    check_type("limits", limits, hw.MachineLimits)
    check_int("threads", threads, 1)
    near = _nearest_copy(costs, limits, threads)
    src = limits.sources
    plural = "s" * (threads > 1)
    out = (f"notebook 00's limits file: DRAM ceiling {si(limits.copy_bytes_per_s, 'B/s')} "
           f"({src.get('dram', 'source not recorded')}: the best thread count, on buffers no cache holds)")
    if limits.cache_bytes_per_s:
        out += (f", in-cache copy {si(limits.cache_bytes_per_s, 'B/s')} "
                f"({src.get('cache', 'source not recorded')})")
    if near is not None:
        out += (f"; on {threads} thread{plural}, its copy nearest the state's size "
                f"{si(near.best_bytes_per_s, 'B/s')} ({si(near.nbytes, 'B')} buffers)")
    out += (f". The copy here: {si(costs.copy_bytes_per_s, 'B/s')} on {si(costs.state_bytes, 'B')} "
            f"buffers, {threads} thread{plural}.")
    if near is not None and near.best_bytes_per_s > costs.copy_bytes_per_s:
        out += (f" The staging floor takes the faster, {si(near.best_bytes_per_s, 'B/s')}: a floor holds "
                "only at the fastest rate seen.")
    if with_fastest_copy(costs, limits, threads).copy_bytes_per_s > limits.copy_bytes_per_s:
        llc = f"a last-level cache the OS reports as {si(limits.llc_bytes, 'B')}" if limits.llc_bytes else \
            "a last-level cache whose size the limits file does not record"
        out += (" That copy ran faster than the DRAM ceiling, so caches served part of it (a copy of the "
                f"state reads and writes {si(2 * costs.state_bytes, 'B')}, against {llc}): the staging floor "
                "built on it is a floor for this machine's caches, not for DRAM.")
    return out


def _gpt_state(n_embd: int, n_layer: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from perfkit import models

    torch.manual_seed(0)
    gpt = models.tiny_gpt2(n_embd=n_embd, n_layer=n_layer, n_head=4)
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-3)
    x = torch.randint(0, 1024, (2, 64))  # (B, T) tokens
    gpt(x, labels=x).loss.backward()
    opt.step()  # creates Adam's two moments: the saved state has its full size
    return gpt, opt


def save_costs(root: str | os.PathLike, copy_bytes_per_s: float | None = None,
               modes: tuple[str, ...] = ("sync", "thread"), rounds: int = 5, n_embd: int = 256,
               n_layer: int = 4) -> SaveCosts:
    """Save the tiny GPT and its AdamW state ``rounds`` times in each mode, interleaved.

    One untimed save per mode first (DCP's first save plans and imports). Each save is
    waited for before the next, so a round's blocked and persist times are its own.

    Args:
        root: a directory for the checkpoints (one sub-directory per mode; created).
        copy_bytes_per_s: the staging floor's copy rate, bytes read plus written per s (> 0);
            ``None``: measured here on a buffer of the state's size, on the current threads.
        modes: Checkpointer modes, ``"sync"`` included (``"process"`` needs a process group).
        rounds: saves per mode (>= 1; an interval needs 5).
        n_embd, n_layer: the GPT's width and depth (>= 1; width a multiple of 4).

    Raises:
        TypeError, ValueError: a bad argument.
    """
    check_type("root", root, (str, os.PathLike))
    if copy_bytes_per_s is not None:
        check_real("copy_bytes_per_s", copy_bytes_per_s, 0, lo_open=True)
    check_items("modes", modes)
    if not all(isinstance(m, str) for m in modes):
        raise TypeError(f"modes must be a tuple of mode names (str), got {modes!r}")
    if "sync" not in modes or set(modes) - set(MODES):
        raise ValueError(f"modes must include 'sync' and hold only {MODES}, got {modes!r}")
    check_int("rounds", rounds, 1)
    check_int("n_layer", n_layer, 1)
    if check_int("n_embd", n_embd, 4) % 4:
        raise ValueError(f"n_embd must be a multiple of 4 (4 heads), got {n_embd}")
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    gpt, opt = _gpt_state(n_embd, n_layer)
    state = TrainState(gpt, opt)
    blocked: dict[str, list[float]] = {m: [] for m in modes}
    persist: dict[str, list[float]] = {m: [] for m in modes}
    commit: dict[str, list[float]] = {m: [] for m in modes}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SINGLE)
        cks = {m: Checkpointer(base / m, keep=1, mode=m) for m in modes}
        try:
            for r in range(rounds + 1):
                for m, ck in cks.items():
                    rec = ck.save(r + 1, state)
                    ck.wait()
                    if r:  # round 0 warms up
                        blocked[m].append(rec.blocked_s)
                        persist[m].append(rec.persist_s)
                        commit[m].append(rec.commit_s)
        finally:
            for ck in cks.values():
                ck.close()
    nbytes = verify(latest(base / "sync")).bytes
    bw = write_bandwidth(base, nbytes=max(nbytes, 2**20), fsync=True, repeat=3)
    if copy_bytes_per_s is None:  # the state's size decides which memory level the copy runs in
        copy_bytes_per_s = hw.measure_copy(nbytes, device="cpu", repeat=5).best_bytes_per_s
    return SaveCosts(nbytes, blocked, persist, bw, float(copy_bytes_per_s), commit)


# --- 2. a save killed midway ---------------------------------------------------------------


@dataclass(frozen=True)
class KilledSave:
    """A save SIGKILLed after its shard files and before its manifest and rename.

    Attributes:
        killed_by: the signal that ended the child (``signal.SIGKILL``'s number).
        partial_left: directory names left under ``.partial`` names.
        complete: the complete steps on disk; latest_step: the step ``latest`` names.
        loaded_step: the step ``load_latest`` returned; loaded_exact: whether every tensor
            loaded equals the committed step's, bit for bit.
        damaged_file: the file one byte was flipped in; verify_error: ``verify``'s message.
    """

    killed_by: int
    partial_left: list[str]
    complete: list[int]
    latest_step: int | None
    loaded_step: int | None
    loaded_exact: bool
    damaged_file: str
    verify_error: str


def small_state(steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A small float64 MLP (64 -> 64 -> 8) and its AdamW state after ``steps`` calls of
    :func:`small_step`: the same ``steps`` give the same tensors bit for bit, so a loaded
    checkpoint can be compared with the state it claims to be.

    Raises:
        TypeError, ValueError: ``steps`` not an int >= 0.
    """
    check_int("steps", steps, 0)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).double()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    for s in range(1, steps + 1):
        _step(m, opt, s)
    return m, opt


def small_step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    """Step number ``step`` (from 1) of :func:`small_state`'s training, in place: a batch of
    four rows all equal to ``step``, so the data order needs no sampler state.

    Raises:
        TypeError, ValueError: a model or optimizer of the wrong type, ``step`` not an int >= 1.
    """
    check_type("model", model, torch.nn.Module)
    check_type("opt", opt, torch.optim.Optimizer)
    _step(model, opt, check_int("step", step, 1))


def _step(m: torch.nn.Module, opt: torch.optim.Optimizer, s: int) -> None:
    m(torch.full((4, 64), float(s), dtype=torch.float64)).square().mean().backward()  # (4, 64) -> (4, 8)
    opt.step()
    opt.zero_grad()


def _die_before_commit(*args: Any, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _child(root: str) -> None:
    # a forked child must not enter the parent's OpenMP pool, whose threads were not forked
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=_SINGLE)
    m, opt = small_state(1)
    ck = Checkpointer(root, keep=2)
    ck.save(1, TrainState(m, opt))  # a complete checkpoint
    m2, opt2 = small_state(2)
    # the next save dies after every shard file is written, before the manifest and the rename
    checkpointer_module.commit = _die_before_commit
    ck.save(2, TrainState(m2, opt2))
    os._exit(3)  # not reached: the kill came first


def killed_save(root: str | os.PathLike, timeout_s: float = 60.0) -> KilledSave:
    """Fork a child that saves step 1, then is SIGKILLed inside the save of step 2 (its files
    written, no manifest, no rename); load the latest checkpoint into a fresh state and
    compare it with step 1's; then flip one byte of its largest file and call ``verify``.

    Args:
        root: an empty or missing directory (created).
        timeout_s: how long to wait for the child (> 0).

    Raises:
        TypeError, ValueError: a bad argument, or ``root`` not empty.
        TimeoutError: the child did not end within ``timeout_s``.
    """
    check_type("root", root, (str, os.PathLike))
    check_real("timeout_s", timeout_s, 0, lo_open=True)
    base = Path(root)
    if base.exists() and any(base.iterdir()):
        raise ValueError(f"root must be an empty or missing directory, got one with files: {base.name}")
    base.mkdir(parents=True, exist_ok=True)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _child(str(base))
        finally:
            os._exit(4)
    status = _wait_child(pid, timeout_s)
    partial = sorted(d.name for d in base.iterdir() if d.name.endswith(".partial"))
    path = latest(base)
    m, opt = small_state(0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SINGLE)
        loaded = Checkpointer(base, keep=2).load_latest(TrainState(m, opt))
    want, _ = small_state(1)
    exact = all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), want.state_dict().values()))
    target = max((p for p in path.iterdir() if p.is_file() and p.name != "manifest.json"),
                 key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    target.write_bytes(bytes(data))
    try:
        verify(path)
        error = ""
    except CheckpointError as e:
        error = str(e).replace(str(base) + os.sep, "")  # relative to root: no temp path printed
    return KilledSave(os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0, partial,
                      complete_steps(base), int(path.name.split("_")[-1]) if path else None,
                      loaded, exact, target.name, error)


def _wait_child(pid: int, timeout_s: float) -> int:
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise TimeoutError(f"the saving child did not end within {timeout_s} s")


# --- 4. how often to save ------------------------------------------------------------------


@dataclass(frozen=True)
class GoodputCurve:
    """The goodput model on a grid of intervals, with Young's, Daly's and the grid's best."""

    tau_s: list[float]
    goodput: list[float]
    save_s: float
    restart_s: float
    mtbf_s: float
    young_s: float
    daly_s: float
    best_s: float
    best_goodput: float


def goodput_curve(save_s: float, restart_s: float, mtbf_s: float, points: int = 200) -> GoodputCurve:
    """``1 - delta/tau - (tau/2 + R)/M`` on ``points`` intervals spaced logarithmically from
    ``delta / 2`` to ``M`` (at least ``2 delta``; s), with Young's and Daly's intervals and the
    grid's best.

    Raises:
        TypeError, ValueError: a save time or MTBF not > 0, a restart not >= 0, fewer than
            2 points.
    """
    d = check_real("save_s", save_s, 0, lo_open=True)
    r = check_real("restart_s", restart_s, 0)
    m = check_real("mtbf_s", mtbf_s, 0, lo_open=True)
    check_int("points", points, 2)
    lo, hi = math.log(d / 2), math.log(max(m, 2 * d))  # below δ/2 the saves alone exceed the time
    taus = [math.exp(lo + (hi - lo) * i / (points - 1)) for i in range(points)]
    best = best_interval(taus, d, r, m)
    return GoodputCurve(taus, [goodput(t, d, r, m) for t in taus], d, r, m, young_interval(d, m),
                        daly_interval(d, m), best, goodput(best, d, r, m))
