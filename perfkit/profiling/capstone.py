"""The capstone's loop (module 08): diagnose a job, fix its worst finding, measure, repeat.

A round runs the job (``perfkit diagnose --then continue`` around an unchanged script, 2
processes under real torchrun) with one more fix, predicts the fix's gain from the share
its finding measured (Amdahl's law ``1 / (1 - share)``; a larger batch's factor of tokens per
step) and measures tokens/s after over before on the steps after the profiled window.
Each configuration is timed once and compared with the next (``repeat_before=False``), or
run again after the new one (before, after, before again: a steady drift cancels). Every run
is read on the same steps; :meth:`FixLoop.finish` measures the whole gain directly.

Usage::

    job = CapstoneJob(Path("examples/slow_train.py"), Path("/tmp/cap"), target_loss=5.8)
    loop = FixLoop(job, ("data", "sync"), slow_train.FIX_FOR_FINDING, limits); loop.start()
    while (r := loop.play()) is not None: print(r.pick.fix, r.speedup.describe("x"))
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfkit import dist
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.compute.flops import gpt_train_flops
from perfkit.hw import MachineLimits
from perfkit.profiling._capstone_credit import credit
from perfkit.profiling._capstone_pick import rank_picks
from perfkit.profiling.capstone_explain import explain_round
from perfkit.profiling.capstone_past import past_bound, past_part
from perfkit.profiling.capstone_text import (
    MAX_TESTABLE_SHARE,  # noqa: F401 (named in next_fix's docstring)
    MIN_TESTABLE_SHARE,  # noqa: F401 (imported from here by callers)
    WIDENED,
    Pick,
    Round,
    Total,
    job_peak,
    reads_pick,  # noqa: F401 (named in next_fix's docstring)
)
from perfkit.stats import Estimate, exact, median_ratio, of_medians

__all__ = ["CapstoneJob", "FixLoop", "Round", "Total", "job_peak", "next_fix", "round_speedup"]

# the share of the step each planted problem's finding reads (the fixes left alone at the end)
FINDING_OF_FIX = {"data": "data", "sync": "sync", "ddp": "communication", "optimizer": "optimizer"}


@dataclass(frozen=True)
class CapstoneJob:
    """How one round of the job runs and how its result is read.

    ``skip`` warm-up steps and a profiled ``window`` come first; the step after it writes the
    trace; then ``measure`` steps are timed without the profiler: those steps, and no later
    ones, are every run's speed (a run to the target goes on; a repeat run stops there, and
    steps later in a run can run at another speed). ``n_layer`` and
    ``d_model`` are the job's model shape (for its model FLOPs). ``batch_factor``: how many
    times the tokens per step ``--fix batch`` runs (``None``: not known); a larger batch cannot
    shorten a step, so that factor bounds its tokens/s gain.
    """

    script: Path
    out: Path
    target_loss: float
    max_bytes: int = 300_000
    skip: int = 2
    window: int = 4
    measure: int = 8
    max_steps: int = 1500
    n_layer: int = 2
    d_model: int = 64
    timeout_s: float = 900.0
    batch_factor: float | None = None

    def __post_init__(self) -> None:
        check_type("script", self.script, Path)
        check_type("out", self.out, Path)
        check_real("target_loss", self.target_loss, 0, lo_open=True)
        for name in ("max_bytes", "skip", "window", "measure", "max_steps", "n_layer", "d_model"):
            check_int(name, getattr(self, name), 1 if name != "skip" else 0)
        check_real("timeout_s", self.timeout_s, 0, lo_open=True)
        if self.batch_factor is not None:
            check_real("batch_factor", self.batch_factor, 1, lo_open=True)

    @property
    def first_measured(self) -> int:
        """Index of the first step after the window and the trace-writing step."""
        return self.skip + self.window + 1

    def args(self, fixes: Sequence[str], to_target: bool = True) -> list[str]:
        """``perfkit`` command-line arguments of one round (``to_target=False``: a repeat run
        of the measured steps only, whose speed, not loss, is compared)."""
        name = ",".join(fixes) or "none"
        out = self.out / (("-".join(fixes) or "none") + ("" if to_target else "-again"))
        steps = (["--steps", self.max_steps, "--target-loss", self.target_loss,
                  "--min-steps", self.first_measured + self.measure]
                 if to_target else ["--steps", self.first_measured + self.measure])
        return [str(a) for a in ("diagnose", "--out", out, "--then", "continue", "--skip", self.skip,
                                 "--steps", self.window, self.script, "--fix", name, *steps,
                                 "--max-bytes", self.max_bytes)]

    def run(self, fixes: Sequence[str], to_target: bool = True) -> tuple[dict, dict]:
        """(diagnosis report, the script's result of rank 0) of one 2-process torchrun job.

        Raises:
            RuntimeError: from :func:`perfkit.dist.launch` when the job fails or times out.
        """
        args = self.args(fixes, to_target)
        result = dist.launch("perfkit", nproc=2, args=args, timeout_s=self.timeout_s)[0]
        return json.loads((Path(args[2]) / "report.json").read_text()), result

    def after_window(self, result: Mapping) -> list[float]:
        """Step times (s) of the ``measure`` steps after the profiled window and the step that
        wrote the trace: the same steps of every run, however long it went on."""
        return list(result["step_times_s"][self.first_measured:self.first_measured + self.measure])

    def tokens_per_s(self, result: Mapping, steps: Sequence[float] | None = None) -> float:
        """Tokens per second at the median step (of ``steps``, default after the window)."""
        return result["tokens_per_step"] / statistics.median(steps or self.after_window(result))

    def profiler_slowdown(self, report: Mapping, result: Mapping) -> float:
        """Mean profiled step over the mean unprofiled one: how much the profiler (and any load
        during the window) stretched the steps the shares were measured on.

        The mean, because a diagnosis' share is a phase's time over the window's *mean* step (its
        time per step is a total over the window, never a median): one statistic for the phase, the
        profiled step and the unprofiled step, so a share times this factor is exactly the phase's
        milliseconds per profiled step over the unprofiled steps' mean. A median here would rescale
        a mean-based share by a ratio of medians, and misstate the bound wherever a window's mean
        and median part (one slow profiled step)."""
        return statistics.mean(report["step_times_s"]) / statistics.mean(self.after_window(result))

    def mfu(self, result: Mapping, peak: float, tokens_per_s: float | None = None) -> float:
        """Model FLOPs (6N per token + attention; position embeddings are a lookup) per
        second, both ranks, over ``peak`` FLOP/s, at ``tokens_per_s`` (default: the run's)."""
        n = result["n_params"] - result["seq_len"] * self.d_model
        flops = gpt_train_flops(n, self.n_layer, self.d_model, result["seq_len"], result["tokens_per_step"])
        return flops * (tokens_per_s or self.tokens_per_s(result)) / result["tokens_per_step"] / peak

    def clean_seconds(self, result: Mapping) -> list[float]:
        """Seconds at each step's end, counted from the start of the data's preparation
        (``data_prep_s``, 0 where the result has none: ``--fix data`` tokenizes every document
        there, before the first step, so the fix moves that cost out of the steps, not away), the
        window steps counted at the median other step (the profiler's cost is not the job's)."""
        t, med = list(result["step_times_s"]), statistics.median(self.after_window(result))
        for i in range(self.skip, min(len(t), self.first_measured)):
            t[i] = med
        out, total = [], float(result.get("data_prep_s", 0.0))
        for x in t:
            total += x
            out.append(total)
        return out

    def reached(self, result: Mapping) -> tuple[float, int] | None:
        """(seconds, tokens) to the target loss, the data's preparation and the window counted
        as in :meth:`clean_seconds`;
        ``None`` when the run did not reach it."""
        k = result["steps_to_target"]
        return None if k is None else (self.clean_seconds(result)[k - 1], k * result["tokens_per_step"])

    def loss_curve(self, result: Mapping, smooth: Callable[[list, int, int], list]) -> tuple[list, list]:
        """(seconds, smoothed loss) at each step with a smoothed value; ``smooth(losses,
        tokens_per_step, window_tokens)`` is the job's own (``None`` until its window is full)."""
        values = smooth(result["losses"], result["tokens_per_step"], result["window_tokens"])
        pts = [(t, v) for t, v in zip(self.clean_seconds(result), values, strict=True) if v is not None]
        return [t for t, _ in pts], [v for _, v in pts]


def round_speedup(job: CapstoneJob, befores: Sequence[Mapping], after: Mapping) -> Estimate:
    """tokens/s of ``after`` over the configuration before it.

    One run before: the ratio of the median steps (scaled by the tokens per step), with
    :func:`perfkit.stats.median_ratio`'s unpaired interval (two separate runs). Two runs
    before (one before the new configuration, one after it): the ratio against their mean;
    the interval is :func:`perfkit.stats.of_medians`' (each run's median interval, all three
    holding together at 90 % or more: its exact coverage is its label's), widened to the ratio
    against each run before alone (a load that drifted across the three runs shows as the gap
    between those two), its method text ending in :data:`~perfkit.profiling.capstone_text.WIDENED`.

    Raises:
        ValueError: for no run or more than two runs before.
    """
    check_type("job", job, CapstoneJob)
    if len(befores) not in (1, 2):
        raise ValueError(f"befores must hold one or two runs, got {len(befores)}")
    b = job.after_window(after)
    if len(befores) == 1:
        return median_ratio(job.after_window(befores[0]), b, paired=False).scaled(
            after["tokens_per_step"] / befores[0]["tokens_per_step"])
    runs = [job.after_window(r) for r in befores]

    def ratio(step_after: float, *steps_before: float) -> float:  # falls as the step after grows
        return after["tokens_per_step"] / step_after / statistics.mean(
            r["tokens_per_step"] / s for r, s in zip(befores, steps_before, strict=True))

    est = of_medians(ratio, [b, *runs], [False] + [True] * len(runs), what="tokens/s over the runs before")
    each = [job.tokens_per_s(after) / job.tokens_per_s(r) for r in befores]
    return est if est.needs else replace(est, low=min(est.low, *each), high=max(est.high, *each),
                                         method=est.method + WIDENED)


def next_fix(report: Mapping, result: Mapping, job: CapstoneJob, skip: Sequence[str],
             available: Sequence[str], fix_for_finding: Mapping[str, Sequence[str]],
             peak: float) -> Pick | None:
    """Of the findings above information level, the fix not in ``skip`` (applied, or tried and
    measured below 1x) whose bound is largest: the gain it can remove, not the share of the finding
    that named it (:func:`~perfkit.profiling._capstone_pick.rank_picks`); once none is left, the compute
    fixes; ``None``: nothing left.

    Every waste fix's share is taken by one rule: its milliseconds in the profiled window over the
    unprofiled step (``unprofiled_factor``), the most it can take of an unprofiled step; where that
    product reaches 99 % the bound is void (``Pick.void``: ``scaled_share`` says so, with the product as
    it is), and 99 % stands in only in the arithmetic. A fix that answers several kinds (ddp: sync and
    communication) is bounded by their shares added; the data fix by the data and communication shares
    (the other ranks wait for a rank's data at the next collective); the fix of the host reads by what
    it can remove (:func:`reads_pick`). A larger batch is bounded by its factor of tokens per step, and
    the other compute fixes by forward + backward, taken over an unprofiled step by the same rule, too
    loose to test them; a finding that fired on a count with a share (of an unprofiled step) below
    :data:`MIN_TESTABLE_SHARE` gives a bound too tight to test, and one whose share reaches
    :data:`MAX_TESTABLE_SHARE` a bound too loose to fail (``loose_bound``); ``Pick.untested`` says why.
    """
    check_type("job", job, CapstoneJob)
    check_real("peak", peak, 0, lo_open=True)
    if not isinstance(fix_for_finding, Mapping):
        raise TypeError(f"fix_for_finding must map finding kinds to fixes, got {fix_for_finding!r}")
    return rank_picks(report, result, job, [f for f in available if f not in skip], fix_for_finding, peak)


@dataclass
class FixLoop:
    """The state of the loop: the configurations run, the fixes kept and those dropped.

    ``rounds`` holds ``{"fixes", "report", "result"}`` of the slow job and of each kept configuration;
    ``waterfall`` each kept fix's measured speedup; ``tried`` the fixes whose median ratio measured below
    1x, with that speedup and its interval (which may hold 1x: then the run cannot tell the fix from no
    change, and the drop is the loop's rule, not a finding); ``gains`` the kept fixes' speedups with their
    intervals; ``kept_tps`` each kept round's ``(fix, tokens/s before, tokens/s after)``; ``slow_runs``
    tokens/s of each run of the slow job in the rounds (the last, :meth:`finish`'s repeat, is added to the
    Total only); ``repeats``, the rounds' repeat runs (:attr:`Total.repeats`); ``factors`` each
    configuration run and diagnosed, in the order run (a dropped fix's included): its profiled steps' mean
    over its unprofiled steps' mean; ``drifted``, the kept fixes whose round is ``Round.within_drift``;
    ``credited``, the kept fixes credited with a gain: the loop keeps a fix on its median alone, which keeps
    fixes on noise (a kept round is selected for reading high), so a kept fix is credited only where its
    interval lies above 1x or the parts its bound counts fell by more than the profiled steps' spread
    (:func:`~perfkit.profiling._capstone_credit.credit`); the others are applied, not credited; ``credits``,
    each kept fix's sentence saying which; ``runs``, every run in the order run, as ``(its fixes joined by
    "+", or "none", tokens/s of its measured steps)``: how far runs of one configuration moved.
    """

    job: CapstoneJob
    available: Sequence[str]
    fix_for_finding: Mapping[str, Sequence[str]]
    limits: MachineLimits
    repeat_before: bool = True
    describe: Callable[[str], str] = str
    rounds: list[dict] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    tried: dict[str, Estimate] = field(default_factory=dict)
    waterfall: list[tuple[str, float]] = field(default_factory=list)
    gains: list[Estimate] = field(default_factory=list)
    kept_tps: list[tuple[str, float, float]] = field(default_factory=list)
    factors: list[float] = field(default_factory=list)
    slow_runs: list[float] = field(default_factory=list)
    repeats: list[tuple[str, float, float]] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    credited: list[str] = field(default_factory=list)
    credits: dict[str, str] = field(default_factory=dict)
    runs: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_type("job", self.job, CapstoneJob)
        check_type("limits", self.limits, MachineLimits)
        if not isinstance(self.fix_for_finding, Mapping):
            raise TypeError(f"fix_for_finding must map finding kinds to fixes, got {self.fix_for_finding!r}")
        self.available = tuple(check_items("available", self.available))

    def start(self) -> dict:
        """Run and diagnose the slow job (no fix); returns its report."""
        report, result = self.job.run(())
        self.rounds = [{"fixes": (), "report": report, "result": result}]
        self.factors = [self.job.profiler_slowdown(report, result)]
        self.slow_runs = [self.job.tokens_per_s(result)]
        self.runs = [("none", self.slow_runs[0])]
        self.repeats, self.drifted, self.credited, self.credits = [], [], [], {}
        return report

    def play(self, announce: Callable[[int, Pick, str], object] | None = None) -> Round | None:
        """Apply the next fix, run the job (and the configuration before again when ``repeat_before``),
        and return the round (``None``: nothing left); ``announce(number, pick, description)`` first."""
        if not self.rounds:
            raise RuntimeError("call start() before play()")
        last = self.rounds[-1]
        pick = next_fix(last["report"], last["result"], self.job, [*self.applied, *self.tried],
                        self.available, self.fix_for_finding, job_peak(self.limits, last["result"]))
        if pick is None:
            return None
        if announce is not None:  # the prediction is shown before the runs that measure it
            announce(len(self.applied) + len(self.tried) + 1, pick, self.describe(pick.fix))
        report, result = self.job.run((*self.applied, pick.fix))
        befores = [last["result"]]
        if self.repeat_before:  # the previous configuration again: before, after, before
            befores.append(self.job.run(tuple(self.applied), to_target=False)[1])
        est = round_speedup(self.job, befores, result)
        named = [("+".join((*self.applied, pick.fix)), result)] + [("+".join(self.applied) or "none", b)
                                                                    for b in befores[1:]]  # in the order run
        self.runs += [(name, self.job.tokens_per_s(x)) for name, x in named]
        self.factors.append(self.job.profiler_slowdown(report, result))
        slowdown = self.job.profiler_slowdown(last["report"], last["result"])
        tps = tuple(self.job.tokens_per_s(b) for b in befores)
        if not self.applied:  # the configuration before is the slow job: its repeat is one more run of it
            self.slow_runs += tps[1:]
        self.repeats += [(f"the round of --fix {pick.fix}", tps[0], x) for x in tps[1:]]
        r = Round(len(self.applied) + len(self.tried) + 1, pick, est, statistics.mean(tps),
                  self.job.tokens_per_s(result),
                  explain_round(pick, est.value, last["report"], slowdown, self.repeat_before, report,
                                clear_below=est.clear_of(1.0, "x") == "below", befores_tps=tps,
                                slowdown_after=self.factors[-1],
                                tokens_x=result["tokens_per_step"] / last["result"]["tokens_per_step"]),
                  kept=est.value >= 1.0, description=self.describe(pick.fix), befores=len(befores),
                  befores_tps=tps, announced=announce is not None)
        r.past = (past_bound(pick, est.value, last["report"], report, tps, result["tokens_per_step"]
                             / last["result"]["tokens_per_step"])
                  or past_part(pick, est, last["report"], report)) if pick.untested else ""
        if r.kept:
            self.applied.append(pick.fix)
            self.rounds.append({"fixes": tuple(self.applied), "report": report, "result": result})
            self.waterfall.append((pick.fix, est.value))
            self.gains.append(est)
            self.kept_tps.append((pick.fix, r.before_tps, r.after_tps))
            self.drifted += [pick.fix] if r.within_drift else []
            c = credit(pick, est, last["report"], report)
            self.credited += [pick.fix] if c.credited else []
            self.credits[pick.fix] = c.text
        else:  # not faster: the next round starts from the configuration before it
            self.tried[pick.fix] = est
        return r

    def finish(self) -> Total:
        """The whole gain measured directly, the last kept configuration against the slow job
        (run again now when ``repeat_before``, as a round is), beside the rounds' product.

        Raises:
            RuntimeError: before :meth:`start`.
        """
        if not self.rounds:
            raise RuntimeError("call start() before finish()")
        first, last = self.rounds[0]["result"], self.rounds[-1]["result"]
        if len(self.rounds) == 1:  # nothing kept: the slow job is the fixed one
            one = self.job.tokens_per_s(first)
            return Total(exact(1.0, "no fix kept"), exact(1.0, "no fix kept"), 0, False, one, one)
        befores = [first] + ([self.job.run((), to_target=False)[1]] if self.repeat_before else [])
        direct = round_speedup(self.job, befores, last)
        mid = sum(math.log(g.value) for g in self.gains)
        down = math.hypot(*(math.log(g.value / g.low) for g in self.gains))
        up = math.hypot(*(math.log(g.high / g.value) for g in self.gains))
        # no stated confidence (level None): the rounds' intervals, widened, cover more than each prints,
        # and adjacent rounds share a run: their combination is a range, not an interval of known coverage
        product = Estimate(math.exp(mid), math.exp(mid - down), math.exp(mid + up), None,
                           min(g.n for g in self.gains), "the rounds' log half-widths added in quadrature, "
                           "as for independent errors; adjacent rounds share a run, which moves their "
                           "ratios in opposite directions, so this overstates the width")
        runs = tuple(self.job.tokens_per_s(b) for b in befores)
        self.runs += [("none", t) for t in runs[1:]]
        slow_tps = statistics.mean(runs)
        seams = [("the slow job", slow_tps, self.kept_tps[0][1])]
        seams += [(fix, after, nxt[1]) for (fix, _, after), nxt in zip(self.kept_tps, self.kept_tps[1:])]
        return Total(direct, product, len(self.gains), len(befores) > 1, slow_tps,
                     self.job.tokens_per_s(last), tuple(seams), runs, (*self.slow_runs, *runs[1:]),
                     (*self.repeats, *(("the slow job after the rounds", runs[0], x) for x in runs[1:])))

    def left_alone(self) -> list[str]:
        """One line per planted problem the loop neither kept nor tried: the share of the
        last step its finding still takes."""
        shares = self.rounds[-1]["report"]["shares"]
        left = [f for f in self.available if f in FINDING_OF_FIX and f not in (*self.applied, *self.tried)]
        return [f"not applied: --fix {f} ({FINDING_OF_FIX[f]}: {shares[FINDING_OF_FIX[f]]:.1%} of the "
                "last step)" for f in left]
