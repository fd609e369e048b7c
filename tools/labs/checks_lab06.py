"""Checks for lab 06 (Amdahl's bound; the time to a target loss; the slow job made fast).

Each check takes the namespace left by the student's notebook and raises AssertionError
with a hint. Used by `make grade` and by tests/labs/test_labs.py.

The job check launches three 2-process torchrun jobs per round, interleaved: the slow job
(``examples/slow_train.py --fix none``), the student's ``fast_main`` (shipped to the
workers as a cloudpickle file and run by ``tools/run_main.py``) and the reference solution
(``--fix all``), each until the mean loss over the last 4096 training tokens reaches
:data:`TARGET_LOSS`. The student's speedup in time to that loss (each job's fastest round:
load only ever slows a run down) must reach :data:`REL_BAR` of the reference's, measured in
the same rounds, so the bar follows the machine; a miss by less than a quarter of the bar
is measured once more. Every run of the student's is timed and the fastest counts, so every
run is checked alike: the ranks' weights agree, the target is reached, the final loss is no
worse than the slow job's. The slow and reference runs are kept for the rest of the grading
process (the mutant tests grade several answers against one baseline). On a miss, the
message quotes ``perfkit diagnose`` on the student's job: what dominates its step now.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from perfkit import dist
from tools.grade import pickled, require, time_limit

ROOT = Path(__file__).resolve().parents[2]
SLOW = ROOT / "examples" / "slow_train.py"
RUNNER = ROOT / "tools" / "run_main.py"
PATH = [str(ROOT), str(ROOT / "examples")]
TARGET_LOSS = 5.2    # nats; the slow job needs about 130 steps (6-10 s) to get there
MAX_STEPS = 1500     # a job that has not reached the target by then has failed
MAX_BYTES = 300_000  # of the standard library's source: the tokenizer and the data
ROUNDS = 2           # interleaved rounds of (slow, student, reference); the fastest counts
EXTRA = 1            # one more round when the speedup misses the bar by less than a quarter
REL_BAR = 0.8        # the student's speedup must reach 80 % of the reference's, same rounds
LOSS_TOL = 0.1       # nats: the final loss may not be worse than the slow job's by more
JOB_TIMEOUT_S = 240.0
_BASELINE: dict[str, list[dict]] = {}  # slow and reference runs, kept for this process
# a file that keeps the baseline across grading processes too (the course's own tests set
# it, so the solution and the mutants are graded against one baseline); unset for students
BASELINE_ENV = "PERFKIT_LAB06_BASELINE"


def _shared_baseline(save: bool = False) -> None:
    path = os.environ.get(BASELINE_ENV)
    if not path:
        return
    if save:
        Path(path).write_text(json.dumps(_BASELINE))
    elif not _BASELINE and Path(path).exists():
        _BASELINE.update(json.loads(Path(path).read_text()))


# --- q1 -----------------------------------------------------------------------------------


def _amdahl(share: float, factor: float) -> float:
    return 1.0 / ((1.0 - share) + share / factor)


def check_amdahl_bound(ns: dict) -> None:
    f = require(ns, "amdahl_bound")
    with time_limit(10, "amdahl_bound did not return within 10 s on a single number"):
        cases = [(0.5, math.inf), (0.5, 2.0), (0.0, 10.0), (0.9, 10.0), (1.0, 4.0), (0.25, 1.0),
                 (0.3, 1.5)]
        for share, factor in cases:
            got, want = f(share, factor), _amdahl(share, factor)
            why = {1 / (1 - share) if share < 1 else math.inf:
                   "that is the bound for removing the part entirely (factor = inf): a part "
                   "made `factor` times faster still takes share / factor",
                   1 + share * (factor - 1) if math.isfinite(factor) else math.inf:
                   "that grows linearly with the factor (Gustafson's scaled speedup): the "
                   "untouched 1 - share of the step caps the gain",
                   1 / (1 - share / factor) if share < factor else math.inf:
                   "the new step time is (1 - share) + share / factor, and the speedup its inverse"}
            assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9), (
                f"amdahl_bound(share={share}, factor={factor}) = {got!r}, expected {want:.6g} = "
                f"1 / ((1 - share) + share / factor). {why.get(got, '') if got != want else ''}")
        assert math.isclose(f(0.4), _amdahl(0.4, math.inf)), (
            "amdahl_bound(0.4) should default to factor = inf (the part removed): 1 / (1 - 0.4)")
    for bad in ((-0.1, 2.0), (1.5, 2.0), (float("nan"), 2.0), (0.5, 0.0), (0.5, -1.0)):
        try:
            f(*bad)
        except ValueError:
            continue
        except Exception as e:  # noqa: BLE001 - any other error is the wrong kind
            raise AssertionError(f"amdahl_bound{bad} raised {type(e).__name__}; raise ValueError "
                                 "naming the argument") from e
        raise AssertionError(f"amdahl_bound{bad} returned instead of raising ValueError: share "
                             "must be in [0, 1] and factor > 0")


# --- q2 -----------------------------------------------------------------------------------


def _time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    k = math.ceil(window_tokens / tokens_per_step)
    for i in range(k - 1, len(losses)):
        if sum(losses[i - k + 1:i + 1]) / k <= target:
            return ends[i]
    return None


def check_time_to_target(ns: dict) -> None:
    f = require(ns, "time_to_target")
    # 1024 tokens per step and a 4096-token window: the mean of the last 4 steps. One step
    # dips below the target at index 1, a partial window's mean at index 2; the first full
    # window with a mean <= 5.0 ends at index 7 (mean exactly 5.0; strictly below at 8).
    # Steps end 0.5 s apart, the first at 1 s.
    ends = [1.0 + 0.5 * i for i in range(10)]
    losses = [7.0, 4.0, 4.0, 5.5, 6.75, 4.5, 3.75, 5.0, 4.0, 4.0]
    hints = {
        ends[1]: "a single step's loss is noisy: average the last window_tokens tokens "
                 "(ceil(window_tokens / tokens_per_step) steps)",
        ends[2]: "the window must be full before its mean counts: the first steps' mean is over "
                 "fewer tokens than window_tokens",
        8: "return the seconds at the end of that step (ends[i]), not the number of steps",
        7: "return the seconds at the end of that step (ends[i]), not its index",
        ends[6]: "that is the end of the step before the one that reached the target",
        ends[8]: "that is one step late: a mean equal to the target reaches it (<=, not <)",
        None: "the window is ceil(window_tokens / tokens_per_step) steps, not window_tokens steps",
    }
    with time_limit(10, "time_to_target did not return within 10 s on 10 steps"):
        got = f(ends, losses, 1024, 5.0, 4096)
        want = _time_to_target(ends, losses, 1024, 5.0, 4096)
        assert got == want, (f"time_to_target = {got!r} on the example in the check, expected "
                             f"{want} (the end of step 8, the first whose last 4 losses average "
                             f"<= 5.0). {hints.get(got, '')}")
        got = f(ends, losses, 512, 5.0, 4096)  # 8 steps per window now
        want = _time_to_target(ends, losses, 512, 5.0, 4096)
        assert got == want, (
            f"with 512 tokens per step the window is 8 steps; time_to_target = {got!r}, "
            f"expected {want}: the window is ceil(window_tokens / tokens_per_step) steps")
        assert f(ends, losses, 1024, 3.0, 4096) is None, (
            "a target the loss never reaches must give None")
        assert f(ends[:3], losses[:3], 1024, 9.0, 4096) is None, (
            "with fewer steps than one window, no mean is complete yet: None")


# --- q3 -----------------------------------------------------------------------------------


def _common() -> list[str]:
    return ["--target-loss", str(TARGET_LOSS), "--steps", str(MAX_STEPS),
            "--max-bytes", str(MAX_BYTES)]


def _run(who: str, pkl: str) -> dict:
    """One 2-process job to the target loss; its result, with the grader's wall clock."""
    t0 = time.perf_counter()
    if who == "student":
        try:
            res = dist.launch(str(RUNNER), 2, [pkl, *_common()], timeout_s=JOB_TIMEOUT_S,
                              pythonpath=PATH)[0]
        except dist.LaunchTimeout as e:
            raise AssertionError(f"your fast_main did not finish within {JOB_TIMEOUT_S:g} s on "
                                 "2 processes (the slow job takes about 15 s): does it stop "
                                 "after --steps, and do both ranks run the same collectives?") from e
        except dist.WorkerError as e:
            text = e.worker_traceback or str(e)
            if "NotImplementedError" in text:
                raise NotImplementedError("fast_main is not implemented") from e
            raise AssertionError(f"your fast_main raised on 2 processes:\n{text[-1500:]}") from e
    else:
        fix = "none" if who == "slow" else "all"
        res = dist.launch(str(SLOW), 2, ["--fix", fix, *_common()], timeout_s=JOB_TIMEOUT_S)[0]
    wall = time.perf_counter() - t0
    if who == "student":
        need = ("time_to_target_s", "final_loss", "ranks_agree", "train_s", "world_size")
        lacks = [k for k in need if k not in res] if isinstance(res, dict) else list(need)
        assert not lacks, (
            "fast_main handed back no job result: end it, on rank 0, with "
            "dist.worker_result(job.summarize(...)) as the slow job does (missing: "
            f"{', '.join(lacks)})")
        assert res["world_size"] == 2, f"fast_main ran on {res['world_size']} processes, not 2"
        assert res["train_s"] <= wall, (
            f"fast_main reports {res['train_s']:.1f} s of training, longer than the whole job took "
            f"({wall:.1f} s by the grader's clock): time the steps with job.StepClock")
    return res


def _diagnosis(pkl: str) -> str:
    """The top finding of ``perfkit diagnose`` on the student's job (a short window)."""
    with tempfile.TemporaryDirectory() as out:
        args = ["diagnose", "--out", out, "--skip", "3", "--steps", "4", "--then", "stop",
                str(RUNNER), pkl, "--steps", "40", "--max-bytes", str(MAX_BYTES)]
        try:
            dist.launch("perfkit", 2, args, timeout_s=JOB_TIMEOUT_S, pythonpath=PATH)
            rep = json.loads((Path(out) / "report.json").read_text())
        except Exception as e:  # noqa: BLE001 - the diagnosis is a hint, never the verdict
            return f"(perfkit diagnose could not run on your job: {type(e).__name__})"
    shares = rep.get("shares", {})
    top = next((f for f in rep.get("findings", []) if f["severity"] != "info"), None)
    split = ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])[:4])
    if top is None:
        return (f"perfkit diagnose finds no problem above information level in your step "
                f"({split}): what is left is the arithmetic (attention, batch size)")
    return (f"perfkit diagnose on your job: [{top['severity']}] {top['kind']}: {top['evidence']}; "
            f"fix: {(top.get('fix') or ['see ' + top.get('notebook', 'notebook 08')])[0]} "
            f"(step split: {split})")


def _trained(run: dict, k: int) -> None:
    """Run ``k`` (0 first) of the student's job trained as data parallelism does: every run is
    timed and the fastest counts, so every run is checked, not only the first."""
    which = "" if k == 0 else (f" in your run {k + 1} (every run of yours is timed and the "
                               "fastest counts, so each must train as the first did)")
    assert run["ranks_agree"], (
        f"after training, the two ranks' weights differ{which}: the gradients are not averaged "
        "over the ranks (keep DDP, or all-reduce the gradients yourself)")
    assert run["time_to_target_s"] is not None, (
        f"your job did not reach the target loss {TARGET_LOSS} (mean over the last "
        f"{run.get('window_tokens', 4096)} tokens) within {MAX_STEPS} steps{which}; its last "
        f"mean was {run['final_loss']:.3f}: is it still training the same model with the "
        "same learning rate?")


def check_fast_job(ns: dict) -> None:
    fn = require(ns, "fast_main")
    assert callable(fn), "fast_main must be a function taking the job's arguments (argv)"
    with pickled(fn, "fast_main.pkl") as pkl:
        mine = [_run("student", pkl)]  # first: a broken job fails before the baseline runs
        _trained(mine[0], 0)
        _shared_baseline()
        fresh = not _BASELINE  # the baseline is measured once per grading process
        base = _BASELINE or {"slow": [], "reference": []}

        def rounds(n: int, student_first: bool) -> None:
            """n more interleaved rounds: (student,) slow, (student,) reference."""
            for r in range(n):
                if fresh:
                    base["slow"].append(_run("slow", pkl))
                if r or not student_first:
                    mine.append(_run("student", pkl))
                    _trained(mine[-1], len(mine) - 1)
                if fresh:
                    base["reference"].append(_run("reference", pkl))

        def verdict() -> tuple[dict, float, float]:
            fastest = {k: min(x["time_to_target_s"] for x in v)  # load only slows a run
                       for k, v in (("slow", base["slow"]), ("reference", base["reference"]),
                                    ("student", mine))}
            return fastest, fastest["slow"] / fastest["student"], \
                fastest["slow"] / fastest["reference"]

        rounds(ROUNDS, student_first=True)
        assert all(x["time_to_target_s"] for x in base["slow"] + base["reference"]), (
            "the slow or the reference job did not reach the target loss: the grader's baseline "
            "failed (not your answer); run the grading again")
        tt, gain, ref_gain = verdict()
        if 0.75 * REL_BAR * ref_gain <= gain < REL_BAR * ref_gain:  # close: measure once more
            rounds(EXTRA, student_first=False)
            tt, gain, ref_gain = verdict()
        if fresh:
            _BASELINE.update(base)
            _shared_baseline(save=True)
        # every run of yours, the fastest included, against the slow job's median
        slow_final = statistics.median(x["final_loss"] for x in base["slow"])
        worst = max(range(len(mine)), key=lambda k: mine[k]["final_loss"])
        assert mine[worst]["final_loss"] <= slow_final + LOSS_TOL, (
            f"your job's final loss {mine[worst]['final_loss']:.3f} (run {worst + 1} of "
            f"{len(mine)}) is worse than the slow job's {slow_final:.3f} by more than "
            f"{LOSS_TOL}: a speedup must not cost quality")
        bar = REL_BAR * ref_gain
        if gain < bar:
            raise AssertionError(
                f"your job reached loss {TARGET_LOSS} in {tt['student']:.2f} s at best, the slow "
                f"job in {tt['slow']:.2f} s: a speedup of {gain:.2f}x. The reference solution "
                f"reached {ref_gain:.2f}x in the same rounds, so the bar is {bar:.2f}x "
                f"({REL_BAR:.0%} of it). {_diagnosis(pkl)}")


QUESTIONS = {
    "q1_amdahl_bound": check_amdahl_bound,
    "q2_time_to_target": check_time_to_target,
    "q3_fast_job": check_fast_job,
}
TIMEOUT_S = {"q3_fast_job": 600}
