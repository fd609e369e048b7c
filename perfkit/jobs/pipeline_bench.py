"""Launcher side of the pipeline measurements: bubbles, activation memory, step time, equality.

Each function starts :mod:`perfkit.jobs.pipeline_parallel` under torchrun and turns what the
ranks recorded into plain records for the benchmark (``benchmarks/model_parallel.py``, key
``pipeline``) and notebook 11:

* :func:`bubbles`: stages of controlled cost (sleeps: forward ``t_f``, backward ``t_b``) or
  real GPT blocks (balanced by measured time), each step's measured bubble share
  (:class:`perfkit.parallel.Timeline` from the recorded slots) against the formula, and,
  for real layers, against the simulator fed with the measured per-action costs;
* :func:`memory`: peak saved-for-backward bytes per rank, GPipe against 1F1B;
* :func:`step_times`: perfkit 1F1B against ``Schedule1F1B``, alternated, seconds per step;
* :func:`equality`: every schedule against the unsplit model;
* :func:`report`: all of them, with their targets;
* :func:`lecture_run`: notebook 11's share of them, in one 2-process job.

Usage::

    rows = bubbles(2, [("gpipe", 4), ("1f1b", 8)], t_f=0.02, t_b=0.04)
    print(rows[0]["shares"], rows[0]["formula"])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perfkit import dist, stats
from perfkit._checks import check_int, check_items, check_real
from perfkit.parallel.schedules import Action, dependencies, make_schedule
from perfkit.parallel.simulate import bubble_formula, simulate, timeline_from

__all__ = ["JOB", "bubbles", "equality", "hop_latency", "lecture_run", "memory", "report",
           "step_times"]

JOB = "perfkit.jobs.pipeline_parallel"


def _launch(n: int, tasks: list[dict], timeout_s: float) -> list[list[dict]]:
    return dist.launch(JOB, n, ["--config", json.dumps({"tasks": tasks})], timeout_s=timeout_s)


def _configs(configs: Sequence) -> list[tuple[str, int]]:
    out = []
    for i, c in enumerate(check_items("configs", configs)):
        if not (isinstance(c, (tuple, list)) and len(c) == 2):
            raise TypeError(f"configs[{i}] must be a (schedule, n_micro) pair, got {c!r}")
        out.append((c[0], check_int(f"configs[{i}][1]", c[1], 1)))
    return out


def bubbles(n_ranks: int, configs: Sequence[tuple[str, int]], t_f: float = 0.02,
            t_b: float = 0.04, steps: int = 3, real: bool = False,
            model: dict | None = None, micro_batch: int = 2, timeout_s: float = 300.0) -> list[dict]:
    """Measure each ``(schedule, n_micro)``'s bubble on ``n_ranks`` processes (one job).

    Args:
        n_ranks: pipeline ranks ``p`` (processes).
        configs: ``(schedule name, n_micro)`` pairs.
        t_f, t_b: seconds each sleep stage sleeps in forward / backward (ignored if ``real``).
        steps: measured steps per configuration (after none: the first is measured too, since
            a sleep stage has nothing to warm up; with ``real`` one extra untimed step runs).
        real: GPT blocks (``model`` overrides the job's sizes) balanced by measured time
            instead of sleeps.
        micro_batch: rows per micro-batch for ``real``.
        timeout_s: the job's limit.

    Returns:
        One record per configuration: ``schedule``, ``n_micro``, ``p``, ``shares`` (measured
        bubble share per step), ``step_s`` (each step's seconds from its first action's start to
        its last one's end), ``busy_s`` (each step's busy seconds per rank, averaged over the
        ranks), ``measured`` (the shares' median, a :class:`perfkit.stats.Estimate` record),
        ``formula``, ``drawn`` (the index of the step nearest the median, :func:`typical_step`),
        ``slots`` (that step's rows), ``simulated`` (the simulator with that step's measured
        median cost of each action kind at each stage and its measured :func:`hop_latency`,
        ``latency_s``), ``simulated_each`` (the same for every step, with its own costs and
        hop: each step's measured share less its own is the time between actions the
        simulator does not hold, a sample per step), ``actions`` (action kind -> each step's
        median seconds of that kind's actions, a sample per step).

    Raises:
        ValueError, TypeError: for bad counts, costs or configurations (checked before launching).
    """
    check_int("n_ranks", n_ranks, 1)
    check_int("steps", steps, 1)
    check_real("t_f", t_f, 0)
    check_real("t_b", t_b, 0)
    cfgs = _configs(configs)
    for name, m in cfgs:
        make_schedule(name, n_ranks, m)   # the builder's errors, here rather than in the job
    tasks = [{"task": "bubble", "schedule": name, "n_micro": m, "t_f": t_f, "t_b": t_b,
              "steps": steps + bool(real), "real": real, "model": model or {},
              "micro_batch": micro_batch, "balance": "time"} for name, m in cfgs]
    per_rank = _launch(n_ranks, tasks, timeout_s)
    return [_record(name, n_ranks, m, res["slots"][1:] if real else res["slots"])
            for (name, m), res in zip(cfgs, per_rank[0])]


def typical_step(shares: Sequence[float]) -> int:
    """The index of the step whose bubble share lies nearest the median of ``shares`` (the
    earlier of two as near): the step to draw and simulate for a figure judged by its median.

    Raises:
        ValueError, TypeError: for an empty sequence.
    """
    xs = [check_real(f"shares[{i}]", x) for i, x in enumerate(check_items("shares", shares))]
    med = stats.median(xs)
    return min(range(len(xs)), key=lambda i: abs(xs[i] - med))


def _record(name: str, p: int, m: int, runs: list) -> dict:
    """One configuration's timed steps as a record; the step drawn is :func:`typical_step`'s."""
    sched = make_schedule(name, p, m)
    lines = [timeline_from(sched, rows) for rows in runs]
    shares = [tl.bubble_share for tl in lines]
    k = typical_step(shares)
    hops = [hop_latency(rows, sched) for rows in runs]
    sims = [simulate(sched, _measured_costs(rows), lat).bubble_share for rows, lat in zip(runs, hops)]
    return {"schedule": name, "n_micro": m, "p": p, "shares": shares,
            "step_s": [tl.makespan for tl in lines],
            "busy_s": [sum(tl.busy(r) for r in range(p)) / p for tl in lines],
            "measured": stats.median_interval(shares).record(),
            "formula": bubble_formula(name, p, m), "latency_s": hops[k],
            "simulated": sims[k], "simulated_each": sims, "drawn": k, "slots": runs[k],
            "actions": {kind: [stats.median([t1 - t0 for row in rows for kk, _, _, t0, t1 in row
                                             if kk == kind]) for rows in runs]
                        for kind in sorted({a[0] for row in runs[k] for a in row})}}


def hop_latency(rows: list, schedule: Any) -> float:
    """The median delay from an action's end to the start of the action on another rank that
    waited for it (its rank idle meanwhile): the point-to-point latency the run showed, s."""
    end = {(k, s, j): t1 for row in rows for k, s, j, _, t1 in row}
    gaps = []
    for r, row in enumerate(rows):
        for i, (k, s, j, t0, _) in enumerate(row):
            free = row[i - 1][4] if i else float("-inf")
            for d in dependencies(schedule, Action(k, s, j)):
                t_dep = end[(d.kind, d.stage, d.mb)]
                if schedule.rank_of(d.stage) != r and t_dep >= free:
                    gaps.append(t0 - t_dep)
    return max(stats.median(gaps), 0.0) if gaps else 0.0


def _measured_costs(rows: list) -> Any:
    """``action -> median measured seconds`` of its kind at its stage (one step's rows)."""
    by: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        for k, s, _, t0, t1 in row:
            by.setdefault((k, s), []).append(t1 - t0)
    cost = {key: stats.median(v) for key, v in by.items()}
    return lambda a: cost[(a.kind, a.stage)]


def memory(n_ranks: int, n_micros: Sequence[int], model: dict | None = None,
           timeout_s: float = 300.0) -> list[dict]:
    """Peak saved-for-backward bytes per rank, GPipe and 1F1B, for each ``n_micro`` (one step each).

    Returns:
        Per ``n_micro``: ``gpipe`` and ``1f1b`` (peak bytes per rank), ``per_micro_batch``
        (bytes one forward saves, per rank) and ``ratio`` (1F1B's peak over GPipe's, the
        largest over ranks) against ``bound`` ``p / m``.
    """
    check_int("n_ranks", n_ranks, 1)
    ms = [check_int(f"n_micros[{i}]", m, n_ranks) for i, m in enumerate(check_items("n_micros", n_micros))]
    tasks = [{"task": "equal", "schedule": s, "n_micro": m, "steps": 1, "model": model or {}}
             for m in ms for s in ("gpipe", "1f1b")]
    per_rank = _launch(n_ranks, tasks, timeout_s)
    out = []
    for i, m in enumerate(ms):
        gp = [r[2 * i]["peak_saved_bytes"] for r in per_rank]
        one = [r[2 * i + 1]["peak_saved_bytes"] for r in per_rank]
        per_mb = [max(r[2 * i]["saved_bytes"].values()) for r in per_rank]
        out.append({"n_micro": m, "gpipe": gp, "1f1b": one, "per_micro_batch": per_mb,
                    "ratio": max(o / g for o, g in zip(one, gp)), "bound": n_ranks / m})
    return out


def step_times(repeat: int = 10, model: dict | None = None, n_micro: int = 4,
               micro_batch: int = 2, timeout_s: float = 300.0) -> dict:
    """perfkit's 1F1B against ``Schedule1F1B`` on 2 ranks, alternated; seconds per step.

    Returns:
        ``perfkit_s`` and ``torch_s`` (paired rounds) and their median ratio
        (:func:`perfkit.stats.median_ratio`) as a record.
    """
    check_int("repeat", repeat, 2)
    res = _launch(2, [{"task": "timing", "n_micro": n_micro, "repeat": repeat,
                       "micro_batch": micro_batch, "model": model or {}}], timeout_s)[0][0]
    return {"perfkit_s": res["perfkit"], "torch_s": res["torch"],
            "ratio": stats.median_ratio(res["perfkit"], res["torch"]).record()}


def equality(n_ranks: int = 2, n_micro: int = 4, timeout_s: float = 300.0) -> dict:
    """Every schedule (and PyTorch's GPipe and 1F1B) against the unsplit model, 5 SGD steps.

    Returns:
        Per schedule: ``max_rel_diff`` (largest over ranks), ``zero_abs_diff``, and
        ``adamw_loss_diff`` for 1F1B (largest loss-curve difference).
    """
    check_int("n_ranks", n_ranks, 2)
    scheds = [("gpipe", 1), ("1f1b", 1), ("zb_h1", 1), ("interleaved", 2)]
    tasks = [{"task": "equal", "schedule": s, "n_micro": n_micro, "n_virtual": v} for s, v in scheds]
    tasks += [{"task": "torch", "schedule": s, "n_micro": n_micro} for s in ("gpipe", "1f1b")]
    tasks.append({"task": "equal", "schedule": "1f1b", "n_micro": n_micro, "optimizer": "adamw"})
    per_rank = _launch(n_ranks, tasks, timeout_s)
    names = [s for s, _ in scheds] + ["torch_gpipe", "torch_1f1b"]
    out = {name: {"max_rel_diff": max(r[i]["max_rel_diff"] for r in per_rank),
                  "zero_abs_diff": max(r[i]["zero_abs_diff"] for r in per_rank)}
           for i, name in enumerate(names)}
    last = [r[-1] for r in per_rank if r[-1]["losses"][0] is not None][0]
    out["adamw_loss_diff"] = max(abs(a - b) for a, b in zip(last["losses"], last["ref_losses"]))
    return out


def _bubble_rows(p: int, rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        est = stats.median_interval(r["shares"]) if len(r["shares"]) > 1 else stats.exact(r["shares"][0])
        out.append({"p": p, "schedule": r["schedule"], "n_micro": r["n_micro"],
                    "measured": est.value, "interval": [est.low, est.high],
                    "formula": r["formula"], "simulated": r["simulated"],
                    "latency_s": r["latency_s"], "rel_err": abs(est.value / r["formula"] - 1)})
    return out


def report(quick: bool = False, repeat: int = 10, t_f: float = 0.05, t_b: float = 0.1) -> dict:
    """The ``pipeline`` part of ``benchmarks/model_parallel.py``: equality, bubbles (sleep
    stages at p = 2 and 4, GPT blocks at p = 2), activation peaks at m = 2p and 4p, step time
    against ``Schedule1F1B``, and its targets (bubble within 10% of the formula, 15%
    with real layers; 1F1B's peak <= p/m of GPipe's; relative differences <= 1e-5).

    Args:
        quick: fewer steps and configurations (for a smoke run).
        repeat: timed rounds per implementation for the step time.
        t_f, t_b: the sleep stages' forward and backward seconds.
    """
    steps = 2 if quick else 3
    grid = [("gpipe", 1), ("gpipe", 4), ("gpipe", 8), ("1f1b", 4), ("1f1b", 8)]
    calibrated = []
    for p in (2, 4):
        calibrated += _bubble_rows(p, bubbles(p, grid[1:4:2] if quick else grid, t_f, t_b, steps))
    gpt = {"n_embd": 128, "block_size": 64, "n_layer": 4, "vocab_size": 256}
    real = _bubble_rows(2, bubbles(2, [("gpipe", 4), ("1f1b", 4), ("1f1b", 8)], steps=steps,
                                   real=True, model=gpt, micro_batch=8))
    mem = {p: memory(p, [2 * p, 4 * p]) for p in (2, 4)}
    eq = equality()
    timing = step_times(repeat, gpt, micro_batch=4)
    rel = {k: v["max_rel_diff"] for k, v in eq.items() if isinstance(v, dict)}
    return {
        "max_rel_diff": rel,
        "zero_abs_diff": {k: v["zero_abs_diff"] for k, v in eq.items() if isinstance(v, dict)},
        "adamw_loss_diff": eq["adamw_loss_diff"],
        "bubble_calibrated": calibrated,
        "bubble_real_layers": real,
        "peak_activation_bytes": mem,
        "step_ms": {"perfkit_1f1b": 1e3 * stats.median(timing["perfkit_s"]),
                    "torch_schedule1f1b": 1e3 * stats.median(timing["torch_s"])},
        "step_time_ratio_vs_schedule1f1b": timing["ratio"],
        "targets": {
            "max_rel_diff_le_1e-5": {k: v <= 1e-5 for k, v in rel.items()},
            "adamw_loss_diff_le_1e-5": eq["adamw_loss_diff"] <= 1e-5,
            "bubble_within_10pct_calibrated": all(r["rel_err"] <= 0.10 for r in calibrated),
            "bubble_within_15pct_real_layers": all(r["rel_err"] <= 0.15 for r in real),
            "1f1b_peak_le_p_over_m_of_gpipe": all(x["ratio"] <= x["bound"] for v in mem.values()
                                                   for x in v),
            "perfkit_1f1b_le_1.0x_schedule1f1b": timing["ratio"]["value"] <= 1.0,
            "perfkit_1f1b_le_1.0x_schedule1f1b_whole_interval": timing["ratio"]["high"] <= 1.0,
        },
        "config": {"t_f_s": t_f, "t_b_s": t_b, "steps": steps, "repeat": repeat,
                   "stage_cost": "sleeps (time.sleep in forward and backward)", "real_model": gpt},
    }


def lecture_run(quick: bool = False, t_f: float = 0.02, t_b: float = 0.04,
                timeout_s: float = 300.0) -> dict:
    """Notebook 11's measurements on 2 processes in one job (a torchrun start costs seconds).

    Sleep stages (GPipe at m = 1, 4, 8 and 1F1B at m = 4, 8; ``t_f``/``t_b`` seconds), GPT
    blocks balanced by measured time (1F1B and ZB-H1 at m = 4, rounds alternated), activation
    peaks of GPipe and 1F1B at m = 4 and 8, and 5 SGD steps of every schedule against the
    unsplit model. Sleep stages run 5 steps each (2 in ``quick``), the judged 1F1B at m = 8
    three times as many.

    The GPT-block schedules share one cut into stages and run in alternating rounds, so
    ``real[0]`` and ``real[1]``'s step ``i`` are paired.

    Returns:
        ``bubbles`` and ``real`` (records as :func:`bubbles` returns), ``cut`` (the GPT
        blocks' ``layer_costs``, each layer's forward + backward seconds timed alone before
        any step, after an untimed pass through every layer, and ``sizes``, layers per
        stage), ``memory`` (as :func:`memory`), ``equality`` (schedule -> largest
        ``max_rel_diff`` over ranks).
    """
    check_real("t_f", t_f, 0)
    check_real("t_b", t_b, 0)
    steps = 2 if quick else 5   # sleep stages: 5 steps give the median an interval ([min, max], 93 %)
    judged = 3 * steps          # 1F1B at m = 8, whose bubble is judged: an interval narrower than its 10 %
    real_steps = 7 if quick else 13  # GPT blocks: the first round warms up; 12 paired rounds left
    sleeps = [("gpipe", 1), ("gpipe", 4), ("gpipe", 8), ("1f1b", 4), ("1f1b", 8)]
    gpt = {"n_embd": 128, "block_size": 64, "n_layer": 4, "vocab_size": 256}   # ~10 ms actions
    real = ["1f1b", "zb_h1"]   # at m = 4, on the same stages, paired rounds
    eq = ["gpipe", "1f1b", "zb_h1", "interleaved"]
    tasks = [{"task": "bubble", "schedule": s, "n_micro": m, "t_f": t_f, "t_b": t_b,
              "steps": judged if (s, m) == ("1f1b", 8) else steps} for s, m in sleeps]
    tasks.append({"task": "bubble", "schedules": real, "n_micro": 4, "steps": real_steps, "real": True,
                  "model": gpt, "micro_batch": 8, "balance": "time"})   # one cut, rounds alternated
    tasks += [{"task": "equal", "schedule": s, "n_micro": m, "steps": 1} for m in (4, 8)
              for s in ("gpipe", "1f1b")]
    tasks += [{"task": "equal", "schedule": s, "n_micro": 4, "n_virtual": 2 if s == "interleaved"
               else 1} for s in eq]
    per_rank = _launch(2, tasks, timeout_s)

    n_sleep = len(sleeps)
    mem, base = [], n_sleep + 1
    for i, m in enumerate((4, 8)):
        gp = [r[base + 2 * i]["peak_saved_bytes"] for r in per_rank]
        one = [r[base + 2 * i + 1]["peak_saved_bytes"] for r in per_rank]
        mem.append({"n_micro": m, "gpipe": gp, "1f1b": one,
                    "per_micro_batch": [max(r[base + 2 * i]["saved_bytes"].values()) for r in per_rank],
                    "ratio": max(o / g for o, g in zip(one, gp)), "bound": 2 / m})
    base += 4
    paired = per_rank[0][n_sleep]["slots"]
    cut = {k: per_rank[0][n_sleep][k] for k in ("layer_costs", "sizes")}
    return {"bubbles": [_record(s, 2, m, per_rank[0][k]["slots"]) for k, (s, m) in enumerate(sleeps)],
            "real": [_record(s, 2, 4, paired[s][1:]) for s in real], "cut": cut, "memory": mem,
            "equality": {s: max(r[base + i]["max_rel_diff"] for r in per_rank) for i, s in enumerate(eq)},
            "config": {"t_f_s": t_f, "t_b_s": t_b, "steps": steps, "real_model": gpt}}
