"""Lecture 14's restart experiment: a data-parallel run killed and restarted under torchrun,
held bit for bit against the same run uninterrupted, and its restart cost split into parts.

:func:`resilient_run` runs ``examples/resilient_train.py`` on 2 processes under real
torchrun (``perfkit.dist.launch(max_restarts=...)``), with rank 1 SIGKILLed at a step of the
first attempt or uninterrupted; :func:`compare_restart` counts the differing bits of every
final tensor (model and optimizer, both ranks) and of every step's loss, and splits the
restart cost R, from the kill to the end of the first resumed step, from the workers' event
logs (:func:`restart_parts`): rendezvous, process start and imports, joining the process
group, building the model, load, first step. :func:`restart_timeline` lays one failure and
restart out as spans per rank, for a plot.

Usage::

    whole = resilient_run("../examples/resilient_train.py", "build/whole")
    run = compare_restart(resilient_run("../examples/resilient_train.py", "build/killed",
                                        kill_step=7), whole)
    print(run.differing_bits, run.parts["total"])
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfkit._checks import check_int, check_real, check_type

__all__ = ["RestartRun", "compare_restart", "differing_bits", "resilient_run", "restart_parts",
           "restart_table", "restart_timeline"]

PARTS = ("rendezvous", "start_and_imports", "join", "build", "load", "first_step")
# how a table or legend names each part: the first runs from the kill to the new worker's start, so
# it holds torchrun's noticing the failure and stopping the other ranks as well as the rendezvous
PART_NAMES = {p: p.replace("_", " ") for p in PARTS} | {"rendezvous": "detect+rendezvous"}


# --- 3. a killed run resumed ---------------------------------------------------------------


def differing_bits(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many bits differ between two tensors of the same dtype and shape (their bytes
    XORed); a shape or dtype mismatch counts every bit of the larger.

    Raises:
        TypeError: ``a`` or ``b`` not a tensor.
    """
    check_type("a", a, torch.Tensor)
    check_type("b", b, torch.Tensor)
    if a.dtype != b.dtype or a.shape != b.shape:
        return 8 * max(a.numel() * a.element_size(), b.numel() * b.element_size())
    xa = a.detach().contiguous().view(-1).view(torch.uint8)  # (bytes,)
    x = xa ^ b.detach().contiguous().view(-1).view(torch.uint8)
    values, counts = torch.unique(x, return_counts=True)
    return int(sum(bin(int(v)).count("1") * int(n) for v, n in zip(values, counts)))


def _tensors(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    if torch.is_tensor(obj):
        return {prefix: obj}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_tensors(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list | tuple):
        out = {}
        for i, v in enumerate(obj):
            out.update(_tensors(v, f"{prefix}[{i}]"))
        return out
    return {prefix: torch.tensor(obj, dtype=torch.float64)} if isinstance(obj, int | float) else {}


def _events(out: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (out / f"events.rank{rank}.jsonl").read_text().splitlines()]


def restart_parts(events: list[dict], killed: list[dict]) -> dict[str, float]:
    """The restart cost R and its parts (s), from one rank's events of its last attempt and the
    killed rank's ``kill`` event: rendezvous (kill -> the new worker process exists), process
    start and imports, joining the process group, building the model, load, first step;
    ``total`` is kill -> the end of the first resumed step.

    Raises:
        TypeError: events not lists; ValueError: no ``kill`` event, or a part missing.
    """
    check_type("events", events, list)
    check_type("killed", killed, list)
    kills = [e["t"] for e in killed if e.get("event") == "kill"]
    if not kills or not events:
        raise ValueError("killed must hold a 'kill' event and events at least one event")
    last = max(e["attempt"] for e in events)
    t = {e["event"]: e["t"] for e in events if e["attempt"] == last}
    missing = [k for k in ("created", "imported", "joined", "built", "loaded", "first_step") if k not in t]
    if missing:
        raise ValueError(f"events of attempt {last} lack {missing}")
    edges = [kills[0], t["created"], t["imported"], t["joined"], t["built"], t["loaded"], t["first_step"]]
    out = {p: b - a for p, a, b in zip(PARTS, edges, edges[1:])}
    out["total"] = edges[-1] - kills[0]
    return out


def restart_timeline(events: dict[int, list[dict]]) -> list[tuple[int, str, float, float]]:
    """Spans ``(rank, label, start, end)`` (s from the first event) of a run with one failure:
    attempt 0's training until the kill (or the last event the rank wrote), then the restart's
    parts, then training until ``done``.

    Raises:
        TypeError: ``events`` not a dict of rank -> list of events.
        ValueError: no ``kill`` event among them.
    """
    check_type("events", events, dict)
    kill = [e["t"] for evs in events.values() for e in evs if e.get("event") == "kill"]
    if not kill:
        raise ValueError("events must hold the killed rank's 'kill' event")
    t0 = min(e["t"] for evs in events.values() for e in evs)
    spans = []
    for rank, evs in sorted(events.items()):
        first = [e for e in evs if e["attempt"] == 0]
        a0 = {e["event"]: e["t"] for e in first}
        end0 = a0.get("kill", kill[0])
        spans.append((rank, "training (attempt 0)", a0["first_step"] - t0, end0 - t0))
        last = {e["event"]: e["t"] for e in evs if e["attempt"] == max(x["attempt"] for x in evs)}
        edges = [kill[0], last["created"], last["imported"], last["joined"], last["built"],
                 last["loaded"], last["first_step"]]
        spans += [(rank, p, a - t0, b - t0) for p, a, b in zip(PARTS, edges, edges[1:])]
        spans.append((rank, "training (resumed)", last["first_step"] - t0, last["done"] - t0))
    return spans


def restart_table(parts: dict[str, float], events: dict[int, list[dict]], rank: int = 0) -> str:
    """R and its ``parts`` (:func:`restart_parts`, timed on ``rank``), one line each, and under
    ``join`` every rank's own join from ``events`` (:func:`restart_timeline`'s spans): the
    process group forms when the last rank arrives, so a rank that starts sooner waits there
    longer, and one rank's parts do not show the other's.

    Raises:
        TypeError: ``parts`` not a dict, or as :func:`restart_timeline`; ValueError: a part
            missing, or as :func:`restart_timeline`.
    """
    check_type("parts", parts, dict)
    missing = [p for p in (*PARTS, "total") if p not in parts]
    if missing:
        raise ValueError(f"parts lack {missing}")
    total = parts["total"]
    joins = {r: b - a for r, label, a, b in restart_timeline(events) if label == "join"}
    lines = [f"restart of rank {rank}, from the kill to its first resumed step (its parts add up to R):"]
    for part in PARTS:
        line = f"  {PART_NAMES[part]:18s} {parts[part]:6.2f} s  ({parts[part] / total:4.0%})"
        if part == "join" and len(joins) > 1:
            line += "   each rank's: " + ", ".join(f"rank {r} {v:.2f} s" for r, v in sorted(joins.items()))
        lines.append(line)
    lines += [f"  {'R':18s} {total:6.2f} s", "  (detect+rendezvous: from the kill until the new worker "
              "exists: torchrun notices the failure, stops the other ranks, rendezvouses, spawns)"]
    return "\n".join(lines)


@dataclass(frozen=True)
class RestartRun:
    """A run killed and restarted under torchrun, against the same run uninterrupted.

    Attributes:
        differing_bits: bits that differ over every final tensor (model, optimizer) of every rank.
        tensors: how many tensors were compared; first_difference: the first that differs, or "".
        loss_bits: bits that differ over the per-step losses the two runs logged last.
        steps: steps of the run; kill_step: the step rank ``kill_rank`` was SIGKILLed at.
        resumed_from: the step the restarted attempt loaded.
        parts: the restart cost and its parts (:func:`restart_parts`), s.
        events: every rank's event log of the killed run.
    """

    differing_bits: int
    tensors: int
    first_difference: str
    loss_bits: int
    steps: int
    kill_step: int
    resumed_from: int
    parts: dict[str, float]
    events: dict[int, list[dict]] = field(repr=False)


def _losses(out: Path, rank: int) -> dict[int, float]:
    last: dict[int, float] = {}
    for line in (out / f"loss.rank{rank}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        last[rec["step"]] = rec["loss"]  # a resumed attempt's loss replaces the killed one's
    return last


def resilient_run(script: str | os.PathLike, out: str | os.PathLike, steps: int = 12, save_every: int = 3,
                  kill_step: int | None = None, max_restarts: int = 3, timeout_s: float = 300.0) -> Path:
    """Run ``script`` (``examples/resilient_train.py``) on 2 processes under torchrun with
    ``--max-restarts``; with ``kill_step``, rank 1 is SIGKILLed at the start of that step in
    the first attempt. Returns ``out``, which holds the losses, events and final states.

    Args:
        script: the path of ``resilient_train.py``; out: a directory for the run (created).
        steps, save_every: as the script's flags (>= 1).
        kill_step: the step to kill rank 1 at (in [1, steps - 1]), or ``None``.
        max_restarts: torchrun's ``--max-restarts`` (>= 0; >= 1 with ``kill_step``).
        timeout_s: for the launch (> 0).

    Raises:
        TypeError, ValueError: a bad argument; perfkit.dist's WorkerError, LaunchTimeout.
    """
    from perfkit import dist as pdist

    check_type("script", script, (str, os.PathLike))
    check_type("out", out, (str, os.PathLike))
    check_int("steps", steps, 2)
    check_int("save_every", save_every, 1)
    check_int("max_restarts", max_restarts, 0 if kill_step is None else 1)
    if kill_step is not None:
        check_int("kill_step", kill_step, 1, steps - 1)
    check_real("timeout_s", timeout_s, 0, lo_open=True)
    if not Path(script).is_file():
        raise ValueError("script must be an existing file (examples/resilient_train.py), "
                         f"got {str(script)!r}")
    dest = Path(out)
    kill = [] if kill_step is None else ["--kill-rank", 1, "--kill-step", kill_step]
    pdist.launch(str(script), 2, ["--root", dest / "ck", "--out", dest, "--steps", steps,
                                  "--save-every", save_every, *kill],
                 timeout_s=timeout_s, max_restarts=max_restarts, backend="gloo")
    return dest


def compare_restart(killed: str | os.PathLike, whole: str | os.PathLike) -> RestartRun:
    """Hold a killed and restarted run (:func:`resilient_run` with ``kill_step``) against the
    same run uninterrupted: differing bits of every final tensor of both ranks and of every
    step's loss, and the restart cost split into its parts.

    Raises:
        TypeError: a bad argument; ValueError: a directory without a run's logs.
    """
    check_type("killed", killed, (str, os.PathLike))
    check_type("whole", whole, (str, os.PathLike))
    runs = {"killed": Path(killed), "whole": Path(whole)}
    for name, d in runs.items():
        if not (d / "final.rank1.pt").is_file():
            raise ValueError(f"{name} must be the directory of a finished resilient_run, got {d.name!r}")
    bits, count, first, loss_bits = 0, 0, "", 0
    for rank in (0, 1):
        a = _tensors(torch.load(runs["killed"] / f"final.rank{rank}.pt", weights_only=False))
        b = _tensors(torch.load(runs["whole"] / f"final.rank{rank}.pt", weights_only=False))
        for k in sorted(set(a) | set(b)):
            d = differing_bits(a[k], b[k]) if k in a and k in b else 64
            count += 1
            bits += d
            if d and not first:
                first = f"rank {rank}: {k}"
        la, lb = _losses(runs["killed"], rank), _losses(runs["whole"], rank)
        loss_bits += sum(differing_bits(torch.tensor(la.get(s, math.nan), dtype=torch.float64),
                                        torch.tensor(lb.get(s, math.inf), dtype=torch.float64))
                         for s in sorted(set(la) | set(lb)))
    events = {r: _events(runs["killed"], r) for r in (0, 1)}
    kill = next(e for e in events[1] if e["event"] == "kill")
    loaded = [e for e in events[0] if e["event"] == "loaded"]
    return RestartRun(bits, count, first, loss_bits, len(_losses(runs["whole"], 0)), kill["step"],
                      loaded[-1]["step"], restart_parts(events[0], events[1]), events)
