"""torchft's per-step fault tolerance on this CPU: the share of a surviving replica group's
steps that commit while another group fails as a Poisson process, held against the model
``1 - step_s / failure_interval_s`` (:mod:`perfkit.saving.per_step`).

The job: a torchft lighthouse (``torchft.coordination.LighthouseServer`` in a child process,
on a free port: ``min_replicas=1``, a quorum tick of 100 ms, a heartbeat timeout of 1 s and a
join timeout of 1 s, so a dead group is left out of the quorum a second after its last
heartbeat) and two replica groups of one process each, each started with real ``torchrun
--nproc-per-node 1`` as torchft's README starts ``train_ddp.py``
(``benchmarks/torchft_goodput_worker.py``: a ``Manager`` on torchft's ``ProcessGroupGloo``,
gradients all-reduced by ``manager.allreduce``, torchft's ``Optimizer`` wrapper that steps
only if ``should_commit()``; a step of about ``--step-s`` seconds, mostly a sleep, so the
step time holds on a loaded machine). Group 0 survives: it trains for ``--window-s`` seconds
from its first step. Group 1 fails: this driver SIGKILLs its process at exponential gaps of
mean ``--mtbf-s`` (a Poisson process over the time it trains: each gap starts at its first
committed step after a (re)start; none in the window's last 2 s, so that each failure's lost
step and stall fall inside it), and its ``torchrun --max-restarts`` starts it again; the
restarted process heals from group 0 (torchft fetches the live weights) and rejoins.

Measured on the survivor: the steps it attempted and committed (``should_commit()`` True),
the failures during its window, the realised failure interval (its wall time over the
failures: MTBF plus group 1's restart), its mean step time (wall time over attempted steps,
stalls included) and median step time, the steps lost per failure, and where each lost step
was (in flight at a kill, or elsewhere: a rejoin or a healing step), the stall after a kill
(the survivor's next steps beyond the median: it waits at the quorum until the lighthouse
stops hearing the dead group) and the extra time of the step at which group 1 rejoins.

The prediction, recorded before the run: the uncommitted share ``1 - committed/attempted``
equals ``step_s / failure_interval_s`` (one step lost per failure, the step in flight) within
half a step per failure (``rel_tol`` 0.5): that tells one lost step per failure from none and
from two. The model is evaluated at the run's realised failure interval and its median step
time, the step's own cost. Not the mean step (wall time over attempted steps): that takes in
the stalls after each kill, and at it the model's share is exactly failures over attempted
steps, so the comparison would only count lost steps per failure against one
(``model_at_mean_step``, reported beside it). The stalls make the survivor attempt fewer steps
per failure interval than the median step would, so the measured share lies a few percent
of itself above the model's even when every failure costs exactly one step. It is judged on
exact counts by :func:`perfkit.verdict.judge`; with no failure in the window there is nothing
to judge (``verdict`` is ``null``). The time the survivor loses waiting for the heartbeat
timeout is not a lost step; it shows in ``time_goodput`` (committed steps times the median
step over the wall time), which is reported, not judged.

Prints one JSON object. Run: ``.venv/bin/python benchmarks/torchft_goodput.py`` (about 4
minutes: a window of 200 s at an MTBF of 15 s; ``PERFKIT_QUICK=1``: 30 s at 8 s, under a
minute; ``--schedule 3`` replaces the Poisson draws by fixed gaps, for a test; ``--store
benchmarks/stored/torchft_goodput.json`` keeps the run with its command and load).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfkit.dist import end_process_tree
from perfkit.torchrun import torchrun_command

HERE = Path(__file__).resolve().parent
WORKER = HERE / "torchft_goodput_worker.py"
LIGHTHOUSE = {"min_replicas": 1, "join_timeout_ms": 1000, "quorum_tick_ms": 100,
              "heartbeat_timeout_ms": 1000}
TOL_STEPS = 0.5  # steps per failure: tells one lost step from none and from two
STALL_STEPS = 3  # steps after a kill in which the survivor's wait for the quorum shows
END_MARGIN_S = 2.0  # no kill this close to the window's end: its loss and stall fit inside
LIGHTHOUSE_CODE = (
    "import sys\nfrom torchft.coordination import LighthouseServer\n"
    "lh = LighthouseServer(bind='[::]:0', **{cfg})\nprint(lh.address(), flush=True)\n"
    "sys.stdin.read()\nlh.shutdown()\n")


def start_lighthouse(work: Path) -> tuple[subprocess.Popen, str]:
    """The lighthouse in a child process (its log to ``lighthouse.log``); it ends when its
    stdin closes. Returns the process and its address."""
    proc = subprocess.Popen([sys.executable, "-c", LIGHTHOUSE_CODE.format(cfg=LIGHTHOUSE)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=open(work / "lighthouse.log", "wb"), text=True)
    addr = proc.stdout.readline().strip()
    if not addr:
        raise RuntimeError(f"the lighthouse did not start: {(work / 'lighthouse.log').read_text()[-2000:]}")
    return proc, addr


def start_group(work: Path, group: int, addr: str, step_s: float, window_s: float,
                max_restarts: int) -> subprocess.Popen:
    """One replica group: ``torchrun --nproc-per-node 1`` running the worker."""
    cmd = torchrun_command(str(WORKER), 1, ["--group", group, "--out", work, "--step-s", step_s,
                                            "--window-s", window_s], max_restarts=max_restarts)
    env = {**os.environ, "TORCHFT_LIGHTHOUSE": addr, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([str(c) for c in cmd], env=env, stdin=subprocess.DEVNULL,
                            stdout=open(work / f"group{group}.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def events(work: Path, group: int) -> list[dict]:
    """A group's events so far (a line cut by a kill is skipped)."""
    path = work / f"group{group}.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class Tail:
    """The complete lines a group's event log gained since the last call (a line cut by a
    kill is never completed, and is skipped): the driver polls every 50 ms and must not
    re-read thousands of lines each time on cores the groups need."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill, then the next one after it
                continue
        return out


def inject(work: Path, survivor: subprocess.Popen, gaps: list[float], window_s: float,
           timeout_s: float) -> list[dict]:
    """SIGKILL group 1's process ``gaps[i]`` seconds after its ``i``-th (re)start first
    committed a step, until the last ``END_MARGIN_S`` of the survivor's window. Returns the
    kills."""
    kills: list[dict] = []
    deadline = time.monotonic() + timeout_s
    tail0, tail1 = Tail(work / "group0.jsonl"), Tail(work / "group1.jsonl")
    pid = None  # group 1's current process
    kill_at = None  # when to kill it: its first committed step plus the next gap
    last_kill = None  # the survivor's first step plus its window, less the margin
    while survivor.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        for e in tail0.new():
            if e["event"] == "step" and last_kill is None:
                last_kill = e["t1"] + window_s - END_MARGIN_S
            elif e["event"] == "done":
                return kills  # the window is over
        for e in tail1.new():
            if e["event"] == "started":
                pid, kill_at = e["pid"], None
            elif (e["event"] == "step" and e["committed"] and e["pid"] == pid and kill_at is None
                  and len(kills) < len(gaps) and not any(k["pid"] == pid for k in kills)):
                kill_at = e["t1"] + gaps[len(kills)]
        if kill_at is not None and time.time() >= kill_at:
            kill_at = None
            if last_kill is None or time.time() > last_kill:
                continue  # too late: its lost step and stall would not fit in the window
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            kills.append({"t": time.time(), "pid": pid})
    return kills


def analyse(work: Path, kills: list[dict], step_s_asked: float) -> dict:
    """The survivor's counts and times, the model, the prediction and its verdict."""
    # imported here, not at the top: perfkit.saving loads torch.distributed.checkpoint, seconds
    # on 2 busy cores that the replica groups' start-up would otherwise wait behind
    from perfkit.saving.per_step import per_step_goodput, per_step_prediction
    from perfkit.verdict import judge

    ev0 = events(work, 0)
    steps = [e for e in ev0 if e["event"] == "step"]
    if not steps or not any(e["event"] == "done" for e in ev0):
        tail = (work / "group0.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the surviving group did not finish:\n{tail}")
    t_begin, t_end = steps[0]["t0"], steps[-1]["t1"]
    kills = [k for k in kills if t_begin <= k["t"] <= t_end]
    attempted, committed = len(steps), sum(e["committed"] for e in steps)
    wall = t_end - t_begin
    durations = [e["t1"] - e["t0"] for e in steps]
    median_step = statistics.median(durations)
    mean_step = wall / attempted
    failures = len(kills)
    # a lost step is the failure's when the kill fell in it or in the gap just before it
    ends = [t_begin] + [e["t1"] for e in steps[:-1]]
    lost = [(end, e) for end, e in zip(ends, steps) if not e["committed"]]
    at_kill = [e for end, e in lost if any(end <= k["t"] <= e["t1"] for k in kills)]
    elsewhere = [e for _, e in lost if e not in at_kill]
    stalls = []
    for k in kills:
        after = [e for e in steps if e["t0"] > k["t"]][:STALL_STEPS]
        stalls.append(sum(max(0.0, e["t1"] - e["t0"] - median_step) for e in after))
    rejoins = [e["t1"] - e["t0"] - median_step for prev, e in zip(steps, steps[1:])
               if e["participants"] > prev["participants"]]
    ev1 = events(work, 1)
    restarts = []  # group 1: kill -> its first committed step again
    for k in kills:
        back = [e["t1"] for e in ev1 if e["event"] == "step" and e["committed"] and e["t0"] > k["t"]]
        if back:
            restarts.append(min(back) - k["t"])
    result = {
        "attempted": attempted, "committed": committed, "uncommitted": attempted - committed,
        "failures": failures, "wall_s": wall,
        "failure_interval_s": wall / failures if failures else None,
        "step_s_asked": step_s_asked, "step_s_mean": mean_step, "step_s_median": median_step,
        "committed_over_attempted": committed / attempted,
        "lost_steps_per_failure": (attempted - committed) / failures if failures else None,
        "lost_at_kill": len(at_kill), "lost_elsewhere": len(elsewhere),
        "lost_elsewhere_t": [round(e["t0"] - t_begin, 3) for e in elsewhere],
        "kills_t": [round(k["t"] - t_begin, 3) for k in kills],
        "stall_after_kill_s": statistics.mean(stalls) if stalls else None,
        "rejoins": len(rejoins), "rejoin_extra_s": statistics.mean(rejoins) if rejoins else None,
        "restart_s": statistics.mean(restarts) if restarts else None,
        "time_goodput": committed * median_step / wall,
        "model": None, "model_at_mean_step": None, "predicted_uncommitted_share": None,
        "verdict": None, "verdict_text": None,
    }
    if failures:
        interval = wall / failures
        # the step's own cost, the median: the mean (wall / attempted) takes in the stalls
        # after each kill, and with it the model would reduce to one lost step per failure
        result["model"] = per_step_goodput(median_step, interval)
        result["model_at_mean_step"] = per_step_goodput(mean_step, interval)
        p = per_step_prediction(median_step, interval, tol_steps=TOL_STEPS)
        v = judge(p, 1.0 - committed / attempted, explain={
            "above": "The surviving group lost more than the step in flight per failure "
                     "(lost_elsewhere: a rejoin or a healing step that did not commit)",
            "below": "Some failures cost the surviving group no step: the kill fell after its "
                     "all-reduce had finished, and the next quorum left the dead group out",
            "held": "Each failure cost the surviving group about the step in flight, no more"})
        result.update(predicted_uncommitted_share=p.value, verdict=v.outcome, verdict_text=v.text)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quick = os.environ.get("PERFKIT_QUICK") == "1"
    p.add_argument("--mtbf-s", type=float, default=8.0 if quick else 15.0,
                   help="mean seconds group 1 trains between failures")
    p.add_argument("--step-s", type=float, default=0.1, help="the step's controlled cost (s)")
    p.add_argument("--window-s", type=float, default=30.0 if quick else 200.0,
                   help="seconds the surviving group trains from its first step")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--schedule", help="fixed gaps instead of Poisson draws: seconds, comma-separated")
    p.add_argument("--dir", help="working directory, kept (default: a temporary one, removed)")
    p.add_argument("--store", help="also write the JSON with its command, date and load here "
                                   "(benchmarks/stored/torchft_goodput.json)")
    a = p.parse_args()
    t_start, load0 = time.time(), os.getloadavg()[0]
    if a.schedule:
        gaps = [float(g) for g in a.schedule.split(",")]
    else:
        rng = random.Random(a.seed)
        gaps = [rng.expovariate(1.0 / a.mtbf_s) for _ in range(1000)]
    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(
        prefix="perfkit-torchft-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    work.mkdir(parents=True, exist_ok=True)
    lighthouse, addr = start_lighthouse(work)
    survivor = victim = None
    try:
        survivor = start_group(work, 0, addr, a.step_s, a.window_s, max_restarts=0)
        victim = start_group(work, 1, addr, a.step_s, 0.0, max_restarts=1000)
        kills = inject(work, survivor, gaps, a.window_s, timeout_s=a.window_s + 120.0)
        end_process_tree(victim.pid, grace_s=0)  # the failing group: no clean exit owed
        victim.wait()
        code = survivor.wait(timeout=30.0)
        if code != 0:
            raise RuntimeError(f"the surviving group exited with {code}:\n"
                               f"{(work / 'group0.log').read_text(errors='replace')[-3000:]}")
        result = {"config": {"mtbf_s": a.mtbf_s, "step_s": a.step_s, "window_s": a.window_s,
                             "seed": a.seed, "schedule": a.schedule, "lighthouse": LIGHTHOUSE,
                             "groups": 2, "processes_per_group": 1, "tol_steps_per_failure": TOL_STEPS,
                             "launcher": "torchrun --nproc-per-node 1 per group; group 1 "
                                         "--max-restarts 1000"},
                  **analyse(work, kills, a.step_s), "run_s": time.time() - t_start}
    finally:
        for proc in (survivor, victim):
            if proc is not None and proc.poll() is None:
                end_process_tree(proc.pid)
                proc.wait()
        lighthouse.stdin.close()
        try:
            lighthouse.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            end_process_tree(lighthouse.pid, grace_s=0)
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))
    if a.store:  # a sibling script: importable when this one runs as a script, from benchmarks/
        from checkpoint_stored import write_stored

        write_stored(a.store, result, t_start, load0)


if __name__ == "__main__":
    main()
