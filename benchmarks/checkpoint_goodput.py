"""Goodput under injected failures: a sweep of the checkpoint interval in real torchrun jobs,
held against the goodput model and Young's and Daly's intervals.

Each point of the sweep is one job, ``torchrun --nproc-per-node 2 --max-restarts 1000``
running ``benchmarks/checkpoint_goodput_worker.py``: two ranks, each with its own shard of
the state, a step of ``--step-s`` (a one-element all-reduce and a sleep: a device step the
host waits for), a synchronous save through ``perfkit.saving.Checkpointer`` every ``tau``
of training, and failures injected as a Poisson process of mean ``--mtbf-s`` (rank 0
SIGKILLs itself; torchrun restarts both ranks, which load the last complete checkpoint).

First a short job with one failure measures the save time ``delta`` and the restart cost
``R``. The goodput model is first order in ``R / M``, and a restart here costs seconds
(torchrun starts both processes again and each imports torch: 2-3 s on an idle 2-core
machine, 5-10 s under load), so the MTBF is ``--mtbf-s`` (40 s) or six restarts, whichever
is longer. The restarts of the sweep's jobs, side by side, cost more than the calibration's
alone (1.5-2.5x on 2026-11-29): with the MTBF at six calibration restarts, R / M reached
0.41 in the sweep, where neither model held (gaps of 11-17 points); at 40 s it stayed near
0.1. The grid is Daly's interval for that ``delta`` and MTBF times 1/4, 1/2, 1, 2, 4 (whole
steps). The jobs run side by side, each started a fifth of the MTBF after the previous one
(they sleep through their steps; only saves and restarts take the cores, and restarts at the
same moment would compete for them), each for ``--window-s`` of wall time from its first
step, with the same failure gaps: every job meets its failures at the same times of its own
window (common random numbers), so that the comparison between intervals is not the noise of
how many failures each met.

For each job: the effective training time ratio, the steps it reached (kept in its state)
times the step's seconds over its wall time from the first step (the imports before it
excluded: the model has no start); the failures, the realised MTBF (wall time over
failures), the restart cost ``R`` per failure (from a failure until training resumes, or
the next failure: a restart can fail too), the full restart (failure to resumed training,
uninterrupted), the mean save ``delta``, the work lost per failure. The model is evaluated
at that job's own ``delta``, ``R`` and realised MTBF: the first-order goodput
``1 - delta/tau - (tau/2 + R)/M`` and Daly's exact share (with the full restart: it counts
failures during a restart itself). ``sd_pp`` is the spread the measured ratio has from where
the failures fall within an interval alone (the lost work of each failure uniform over
``tau + delta``).

Targets: measured within 5 percentage points of the model at every interval, and the
measured best interval within one grid step of Young's and Daly's (computed with the mean
``delta`` and the realised MTBF over all jobs). With fewer than two failures per job (the
window is about six MTBFs: a Poisson draw leaves fewer than two failures in about one run in
sixty) the targets are ``null``: too few failures to judge; run again with another
``--seed``.

Prints one JSON object. Run: ``.venv/bin/python benchmarks/checkpoint_goodput.py``
(about 5 minutes: windows of 240 s, six failures each on average; ``PERFKIT_QUICK=1``: 120 s; ``--store
benchmarks/stored/checkpoint_goodput.json`` keeps the run, with its command, for notebook 14).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from perfkit.dist import end_process_tree
from perfkit.saving.interval import daly_goodput, daly_interval, goodput, young_interval
from perfkit.torchrun import torchrun_command

HERE = Path(__file__).resolve().parent
WORKER = HERE / "checkpoint_goodput_worker.py"
FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)  # the grid, times Daly's interval
MAX_RESTARTS = 1000  # a job fails only if its failures outnumber these
MIN_FAILURES = 2  # per job, for the targets to be judged
RESTART_SHARE = 6.0  # the MTBF is at least this many restarts (of the calibration job)


def failure_gaps(seed: int, mtbf_s: float, count: int) -> list[float]:
    """``count`` independent exponential gaps of mean ``mtbf_s`` (s): a Poisson process."""
    rng = random.Random(seed)
    return [rng.expovariate(1.0 / mtbf_s) for _ in range(count)]


def start_job(work: Path, window_s: float, save_every: int, step_s: float, state_mib: float,
              gaps: list[float]) -> subprocess.Popen:
    """Start one torchrun job (2 ranks, ``--max-restarts 1000``) writing under ``work``."""
    (work / "out").mkdir(parents=True)
    (work / "schedule.json").write_text(json.dumps(gaps))
    cmd = torchrun_command(str(WORKER), 2, [
        "--root", work / "ckpt", "--out", work / "out", "--window-s", window_s,
        "--save-every", save_every, "--step-s", step_s, "--state-mib", state_mib,
        "--schedule", work / "schedule.json"], max_restarts=MAX_RESTARTS)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    log = open(work / "torchrun.log", "wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def wait_all(procs: list[subprocess.Popen], timeout_s: float) -> list[int | None]:
    """Wait for every job; end the process tree of any still running at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            end_process_tree(p.pid)
            p.wait()
            codes.append(None)
    return codes


def job_record(work: Path, save_every: int) -> dict:
    """What one job's events say: wall, productive time, failures, R, delta, lost work."""
    ev = [json.loads(line) for line in (work / "out" / "events.jsonl").read_text().splitlines()]
    begin = next(e["t"] for e in ev if e["event"] == "begin")
    done = next(e for e in ev if e["event"] == "done")
    steps = done["step"]
    if done["count"] != steps:
        raise RuntimeError(f"{work}: the state counts {done['count']} steps at step {steps}: "
                           f"a resume redid or skipped one")
    # a step's seconds: from one save to the next of the same attempt, the save taken out
    marks = [e for e in ev if e["event"] in ("save", "started")]
    runs = [(b["t"] - a["t"] - b["blocked_s"]) / save_every for a, b in zip(marks, marks[1:])
            if a["event"] == b["event"] == "save" and b["step"] == a["step"] + save_every]
    step_s = statistics.median(runs) if runs else done["step_s"]
    wall = done["t"] - begin
    kills = [e for e in ev if e["event"] == "kill"]
    saves = [e for e in ev if e["event"] == "save"]
    firsts = [e["t"] - step_s for e in ev if e["event"] == "first_step"]  # training resumes
    # each failure's restart: until training resumes or the next failure ends it (Daly's
    # model restarts a restart that fails); a full restart: last failure -> training resumes
    per_failure, full = [], []
    for i, k in enumerate(kills):
        resume = min((t for t in firsts if t > k["t"]), default=done["t"])
        nxt = kills[i + 1]["t"] if i + 1 < len(kills) else math.inf
        per_failure.append(min(resume, nxt) - k["t"])
        if resume < nxt:
            full.append(resume - k["t"])
    # work lost by each failure: since the last save, or since training resumed; none for a
    # failure during a restart
    lost, last = [], ("begin", begin)
    for e in sorted(ev, key=lambda e: e["t"]):
        if e["event"] in ("save", "first_step", "begin"):
            last = (e["event"], e["t"] - (step_s if e["event"] == "first_step" else 0.0))
        elif e["event"] == "kill":
            lost.append(e["t"] - last[1] if last[0] != "kill" else 0.0)
            last = ("kill", e["t"])
    return {"steps": steps, "save_every": save_every, "step_s": step_s,
            "tau_s": save_every * step_s, "wall_s": wall, "productive_s": steps * step_s,
            "measured": steps * step_s / wall, "failures": len(kills),
            "restart_s": statistics.mean(per_failure) if kills else None,
            "restart_full_s": statistics.mean(full) if full else None,
            "restart_each_s": [round(r, 3) for r in per_failure],
            "save_s": statistics.mean(e["blocked_s"] for e in saves) if saves else 0.0,
            "saves": len(saves), "lost_per_failure_s": statistics.mean(lost) if lost else None}


def calibrate(root: Path, step_s: float, state_mib: float) -> tuple[float, float]:
    """A short job with one failure: its median save time and its restart cost, s."""
    work = root / "calibrate"
    code = wait_all([start_job(work, 6.0, 5, step_s, state_mib, [2.0])], 300.0)[0]
    if code != 0:
        tail = (work / "torchrun.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the calibration job failed ({code}):\n{tail}")
    ev = [json.loads(line) for line in (work / "out" / "events.jsonl").read_text().splitlines()]
    rec = job_record(work, 5)
    return (statistics.median(e["blocked_s"] for e in ev if e["event"] == "save"),
            rec["restart_s"] or 0.0)


def model(rec: dict, mtbf_s: float) -> dict:
    """The two models at one job's own delta, R and realised MTBF, and the sampling spread."""
    tau, delta, n = rec["tau_s"], rec["save_s"], rec["failures"]
    r, r_full = rec["restart_s"] or 0.0, rec["restart_full_s"] or 0.0
    # each failure loses U(0, tau + delta) of work: sd (tau + delta) / sqrt(12) per failure
    sd = math.sqrt(n) * (tau + delta) / math.sqrt(12) / rec["wall_s"] * rec["measured"]
    first = goodput(tau, delta, r, mtbf_s)
    exact = daly_goodput(tau, delta, r_full, mtbf_s)
    return {"model_first_order": first, "model_daly": exact, "sd_pp": 100 * sd,
            "diff_first_order_pp": 100 * (rec["measured"] - first),
            "diff_daly_pp": 100 * (rec["measured"] - exact)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mtbf-s", type=float, default=40.0, help="injected MTBF of a job (s)")
    p.add_argument("--step-s", type=float, default=0.05, help="one step's compute (s)")
    p.add_argument("--state-mib", type=float, default=4.0, help="state per rank (MiB)")
    quick = os.environ.get("PERFKIT_QUICK") == "1"
    p.add_argument("--window-s", type=float, default=120.0 if quick else 240.0,
                   help="wall seconds each job runs from its first step")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", help="working directory (default: a temporary one on /dev/shm)")
    p.add_argument("--store", help="also write the JSON with its command, date and load here "
                                   "(notebook 14 reads benchmarks/stored/checkpoint_goodput.json)")
    a = p.parse_args()
    t_start, load0 = time.time(), os.getloadavg()[0]
    base = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(
        prefix="perfkit-goodput-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    delta0, r0 = calibrate(base, a.step_s, a.state_mib)
    # the goodput model is first order in R / M: a slow restart (a loaded machine) gets a
    # longer MTBF, so that R / M stays near 1/3 or below with five jobs restarting side by
    # side (their restarts took about twice the calibration job's)
    mtbf = max(a.mtbf_s, RESTART_SHARE * r0)
    tau0 = daly_interval(delta0, mtbf)
    grid = sorted({max(1, round(f * tau0 / a.step_s)) for f in FACTORS})
    gaps = failure_gaps(a.seed, mtbf, 1000)
    # the jobs' restarts spread over one MTBF (or one window, if shorter)
    stagger = min(mtbf, a.window_s) / len(grid)
    procs, works = [], []
    for i, every in enumerate(grid):
        if i:
            time.sleep(stagger)
        works.append(base / f"tau{every}")
        procs.append(start_job(works[-1], a.window_s, every, a.step_s, a.state_mib, gaps))
    codes = wait_all(procs, a.window_s + 300.0)
    points = []
    for work, every, code in zip(works, grid, codes):
        if code != 0:
            tail = (work / "torchrun.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"job tau={every} steps ended with {code}:\n{tail}")
        points.append(job_record(work, every))
    delta = statistics.mean(pt["save_s"] for pt in points)
    n = sum(pt["failures"] for pt in points)
    judged = n >= MIN_FAILURES * len(points)  # else the sweep says nothing about failures
    realised = sum(pt["wall_s"] for pt in points) / n if n else None
    r = statistics.mean(x for pt in points for x in pt["restart_each_s"]) if n else None
    for pt in points:
        own = pt["wall_s"] / pt["failures"] if pt["failures"] else math.inf
        pt["mtbf_realised_s"] = own if pt["failures"] else None
        pt.update(model(pt, own if math.isfinite(own) else 1e12))
    best = max(points, key=lambda pt: pt["measured"])["tau_s"]
    young = daly = steps_from = None
    if realised:
        young, daly = young_interval(delta, realised), daly_interval(delta, realised)
        steps_from = {k: abs(math.log2(best / v)) for k, v in (("young", young), ("daly", daly))}
    worst = {k: max(abs(pt[f"diff_{k}_pp"]) for pt in points) for k in ("first_order", "daly")}
    if not a.dir:
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "config": {"mtbf_asked_s": a.mtbf_s, "mtbf_s": mtbf, "step_s": a.step_s,
                   "state_mib_per_rank": a.state_mib, "ranks": 2, "window_s": a.window_s,
                   "stagger_s": stagger, "seed": a.seed, "storage": str(base)},
        "calibration": {"save_s": delta0, "restart_s": r0, "daly_s": tau0, "grid_steps": grid},
        "points": points,
        "pooled": {"save_s": delta, "restart_s": r, "mtbf_realised_s": realised, "failures": n,
                   # the goodput model is first order in these: its error grows with them
                   "restart_over_mtbf": r / realised if n else None},
        "young_s": young, "daly_s": daly, "best_measured_s": best,
        "grid_steps_from_best": steps_from,
        "max_abs_diff_pp": worst,
        # None: fewer than MIN_FAILURES failures per job, too few to judge the model by
        "targets": {"within_5pp_daly": worst["daly"] <= 5.0 if judged else None,
                    "within_5pp_first_order": worst["first_order"] <= 5.0 if judged else None,
                    "best_within_one_grid_step":
                        max(steps_from.values()) <= 1.0 + 1e-9 if judged else None},
        "wall_s": time.time() - t_start,
    }
    print(json.dumps(result, indent=1))
    if a.store:  # a sibling script: importable when this one runs as a script, from benchmarks/
        from checkpoint_stored import write_stored

        write_stored(a.store, result, t_start, load0)


if __name__ == "__main__":
    main()
