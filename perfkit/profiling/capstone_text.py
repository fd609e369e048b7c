"""What one round of the capstone (module 08) says: the fix chosen and its bound, and the
verdict's sentence for each outcome, built from the two diagnoses around the fix.

A round predicts a fix's gain from the share of the step its finding measured (Amdahl's law,
``1 / (1 - share)``), or from its factor of tokens per step for a larger batch. Its :class:`Pick`
records the bound, the phases whose shares make it, and, for a bound that cannot test the fix
at this job's sizes (too loose, at :data:`MAX_TESTABLE_SHARE` or above; or too close to 1x for
this job's noise, below :data:`MIN_TESTABLE_SHARE`), why (``untested``): such a bound is printed
as context beside the measurement, never recorded as a prediction. :func:`reads_pick` bounds the
fix of the host reads by what it can remove: the reads, not the collective waited for between
two of them. :func:`still_listed` says which findings the last diagnosis still lists and what
became of their fixes. A played round is a :class:`Round`, and what the kept fixes bought, a
:class:`Total`. What a round's outcome says, from
the two diagnoses around it, is :mod:`perfkit.profiling.capstone_explain`'s.

Usage::

    pick = Pick("sync", 0.27, 1.36, "Amdahl: the sync share 26.6% removed", "sync", ("sync",))
    print(pick.bound, pick.untested or "a bound that can fail")
    print("\n".join(still_listed(report, {"sync": ["sync"]}, applied=["sync"], tried=[], available=["sync"])))
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from perfkit._checks import check_real, check_type
from perfkit.hw import MachineLimits
from perfkit.stats import Estimate

__all__ = ["CONTEXT_KINDS", "Pick", "Round", "Total", "bound_class", "context_kinds_text", "job_peak",
           "percent2", "reads_pick", "still_listed"]

# a finding's share below this bounds its fix's gain within 5 % of 1x: the loop's runs, minutes
# apart on a shared machine, repeat no closer (the rounds' intervals span tens of percent), so
# such a bound is shown as context, not judged
MIN_TESTABLE_SHARE = 0.05
# a share of an unprofiled step at or above this gives a bound of 10x or more, too loose to test it: context
MAX_TESTABLE_SHARE = 0.9


# the method text of an interval widened to each run before (capstone.round_speedup); what such an
# interval covers is said once, with the first round (perfkit.viz.capstone.round_text)
WIDENED = ", widened to the ratio against each run before"
WIDENED_COVERS = ("of the steps' spread it covers at least what its label prints, not how far separate runs "
                  "move")
# a share of an unprofiled step is taken at most at this for the arithmetic of a bound (1 / (1 - s))
SHARE_CAP = 0.99

# why a bound cannot test its fix, one word each (bound_class): every text that names the reason uses these
TOO_TIGHT = "too tight"  # a share under MIN_TESTABLE_SHARE: the bound lies within the runs' noise of 1x
TOO_LOOSE = "too loose"  # a share at MAX_TESTABLE_SHARE or above: a bound of 10x or more, or none
BROADER = "broader than the fix"  # it counts whole phases of which the fix changes a part not measured apart
NOT_THE_LIMIT = "not what limits the fix"  # the peak, where a batch's own factor of tokens limits it more
CONTEXT_KINDS = (TOO_TIGHT, TOO_LOOSE, BROADER, NOT_THE_LIMIT)


def bound_class(share: float, broader: bool = False, peak: bool = False) -> str:
    """The one rule that says whether a bound can test its fix: ``""`` where it can, else why not,
    one of :data:`CONTEXT_KINDS`. ``share``: the share of an unprofiled step the bound takes the fix to
    remove (for the reads' fix, the reads alone: the part it targets); ``broader``: the bound counts
    whole phases of which the fix changes a part the diagnosis does not measure apart (the compute
    fixes); ``peak``: the bound is the measured peak, not a larger batch's own factor of tokens.
    Every round's context reason, its headline and the notebook's words take the class from here.

    Raises:
        ValueError: for a ``share`` that is not a finite number >= 0.
        TypeError: for a ``broader`` or ``peak`` that is not a bool.
    """
    check_real("share", share, 0)
    check_type("broader", broader, bool)
    check_type("peak", peak, bool)
    if peak:
        return NOT_THE_LIMIT
    if broader:
        return BROADER
    if share >= MAX_TESTABLE_SHARE:
        return TOO_LOOSE
    return TOO_TIGHT if share < MIN_TESTABLE_SHARE else ""


def context_kinds_text() -> str:
    """``"too tight, too loose, broader than the fix or not what limits the fix"``: the reasons a bound
    can be shown as context, from :data:`CONTEXT_KINDS` (for a headline's key)."""
    return ", ".join(CONTEXT_KINDS[:-1]) + f" or {CONTEXT_KINDS[-1]}"


def scaled_share(profiled: float, slow: float) -> tuple[float, str]:
    """A ``profiled`` share times the factor ``slow`` (:func:`unprofiled_factor`), taken at most at
    :data:`SHARE_CAP`, and the words that finish a bound's model with it, computed: below the cap,
    ``"so X of an unprofiled step is the most it can take"``; at or above it, no share of an
    unprofiled step is printed (none above 100 % exists): where the product passes 1, the premise
    (a phase takes no longer without the profiler than with it) failed in this round, and no bound
    is printed; at the cap up to 1, the fix may remove the whole step (no finite bound)."""
    raw = profiled * slow
    if raw < SHARE_CAP:
        return raw, f"so {raw:.1%} of an unprofiled step is the most it can take"
    if raw > 1:
        return SHARE_CAP, (f"which would make its phases {raw:.2f} times a whole unprofiled step "
                           f"({profiled:.1%} x {slow:.2f}), more than any phase can take: the premise that "
                           "a phase takes no longer without the profiler than with it failed in this round "
                           "(the window and the runs bore different load), so no bound is printed (the "
                           f"arithmetic alone takes {SHARE_CAP:.0%}, {1 / (1 - SHARE_CAP):.0f}x)")
    return SHARE_CAP, (f"which gives {raw:.1%} of an unprofiled step, the whole step within a percent: "
                       "the fix may remove up to the whole step, no finite bound (taken as "
                       f"{SHARE_CAP:.0%}, {1 / (1 - SHARE_CAP):.0f}x, in the arithmetic only, not measured)")


def loose_bound(share: float, profiled: float, slow: float) -> str:
    """Why a waste fix's bound (``share`` of an unprofiled step: a ``profiled`` share times ``slow``)
    cannot fail, at or above :data:`MAX_TESTABLE_SHARE`; ``""`` below it. Where the product reaches
    :data:`SHARE_CAP`, it says the bound is void rather than print the capped share."""
    if bound_class(share) != TOO_LOOSE:
        return ""
    alone = f"{1 / (1 - profiled):.3g}x" if profiled < 1 else "no bound"
    if profiled * slow >= SHARE_CAP:
        if profiled * slow > 1:
            return (f"the profiled share times the factor, {profiled:.1%} x {slow:.2f}, passes a whole "
                    "unprofiled step: the premise of the bound failed in this round, so there is no finite "
                    f"bound to test (the profiled share alone, {profiled:.1%}, gives {alone}, a bound on the "
                    "profiled window's own gain)")
        return (f"the profiled share times the factor, {profiled * slow:.1%} of an unprofiled step, leaves "
                f"no finite bound, so it cannot test the share (the profiled share alone, {profiled:.1%}, "
                f"gives {alone}; the factor {slow:.2f} that carries it to the step mixes the profiler's "
                "cost with load)")
    return (f"the bound is {1 / (1 - share):.3g}x ({share:.1%} of an unprofiled step), "
            f"{1 / (1 - MAX_TESTABLE_SHARE):.0f}x or more: it claims only that the fix leaves at least "
            f"{1 - share:.1%} of the step, too loose to test the share (the profiled share alone, "
            f"{profiled:.1%}, gives {alone}; the factor {slow:.2f} that carries it mixes the profiler's "
            "cost with load)")


@dataclass(frozen=True)
class Pick:
    """The next round's fix: the finding ``kind`` it answers, the ``share`` of the step that
    finding measured, the most the fix can buy (``bound``, x), the model it comes from, the
    ``phases`` of the diagnosis whose shares make the bound, ``untested``: empty when the
    bound can fail, else why it cannot test the fix (it is then printed as context), and
    ``by_tokens``: the bound is a larger batch's factor of tokens per step, not a share;
    ``void``: the scaled share reached :data:`SHARE_CAP` (:func:`scaled_share`), so the bound is
    none, and ``bound`` only the arithmetic's stand-in; ``context``: :func:`bound_class`'s word for why
    the bound cannot test the fix (empty where it can); ``part_bound``: for the reads' fix, the gain
    bound of the reads alone (:func:`reads_pick`), which ``untested`` names and a measurement can pass
    while staying within ``bound``."""

    kind: str
    share: float
    bound: float
    model: str
    fix: str
    phases: tuple[str, ...] = ()
    untested: str = ""
    by_tokens: bool = False
    void: bool = False
    context: str = ""  # why the bound cannot test the fix, in one word (bound_class); "" where it can
    part_bound: float | None = None  # the gain bound of the part the fix targets, where ``untested`` names it


@dataclass
class Round:
    """One played round: the fix and its bound (``pick``), the measured speedup, tokens/s
    before and after, and the verdict's sentences (:func:`explain_round`)."""

    number: int
    pick: Pick
    speedup: Estimate
    before_tps: float
    after_tps: float
    explain: dict[str, str]
    kept: bool
    description: str = ""
    befores: int = 1  # runs of the configuration before: 2 with repeat_before (before and after)
    befores_tps: tuple[float, ...] = ()  # tokens/s of each run of the configuration before
    past: str = ""  # what decided a gain past a bound printed as context (capstone_explain.past_bound)
    announced: bool = False  # its heading and prediction were shown before its runs (FixLoop.play)

    @property
    def runs_apart(self) -> float:
        """The runs before's fastest tokens/s over their slowest (1.0 with one run)."""
        return max(self.befores_tps) / min(self.befores_tps) if len(self.befores_tps) > 1 else 1.0

    @property
    def within_drift(self) -> bool:
        """Whether the runs before lay as far apart as the speedup lies from 1x, or further (as
        printed, to two decimals): drift between two runs of one configuration could make it alone."""
        g = self.speedup.value
        return len(self.befores_tps) > 1 and round(self.runs_apart, 2) >= round(max(g, 1 / g), 2)


@dataclass(frozen=True)
class Total:
    """What the kept fixes bought: ``direct``, the fixed job's tokens/s over the slow job's
    (``slow_tps`` -> ``fixed_tps``, measured as a round is); ``product``, the ``kept`` rounds'
    speedups multiplied; ``repeated``: the slow job was run again after the fixed one.

    ``seams``: where the product and the direct ratio part, ``(configuration, a, b)`` with
    ``direct / product`` exactly the product of the ``b / a``: each kept configuration but the
    last at its tokens/s as its round's "after" (``a``) and as the next kept round's "before"
    (``b``: with repeat runs, the mean of that run and its repeat); the slow job at its tokens/s
    in the direct ratio (``a``) and as the first kept round's "before" (``b``).
    ``slow_runs_tps``: tokens/s of each run of the slow job behind ``slow_tps`` (their mean);
    ``every_slow_tps``: of every run of the slow job, the rounds' repeats of it included.
    ``repeats``: every repeat run, in the order run, as ``(where, tokens/s of the run it repeats,
    tokens/s of the repeat)``: each round's configuration before, run again after its fix (a
    dropped round's too), and the slow job after the rounds; empty where no run was repeated.
    """

    direct: Estimate
    product: Estimate
    kept: int
    repeated: bool
    slow_tps: float
    fixed_tps: float
    seams: tuple[tuple[str, float, float], ...] = ()
    slow_runs_tps: tuple[float, ...] = ()
    every_slow_tps: tuple[float, ...] = ()
    repeats: tuple[tuple[str, float, float], ...] = ()

    @property
    def slow_apart(self) -> float:
        """The slow job's fastest run over its slowest (1.0 with one run)."""
        runs = self.slow_runs_tps or (self.slow_tps,)
        return max(runs) / min(runs)

    @property
    def drift(self) -> bool:
        """Whether the product and the direct ratio disagree beyond both their intervals."""
        return self.direct.has_interval and (self.product.low > self.direct.high
                                             or self.product.high < self.direct.low)


def job_peak(limits: MachineLimits, result: Mapping) -> float:
    """The measured matmul ceiling (FLOP/s) for the job's precision: bf16 with ``--fix bf16``
    (when the ceilings include bf16), else fp32."""
    check_type("limits", limits, MachineLimits)
    bf16 = "bf16" in result["fixes"] and "bfloat16" in limits.matmul_flops
    return limits.peak_flops("bfloat16" if bf16 else "float32")


def percent2(share: float) -> str:
    """``share`` (a fraction) in percent to two significant figures, trailing zeros kept
    (``"3.0%"``, ``"20%"``, ``"0.50%"``): an MFU whose runs minutes apart differ by tens of
    percent shows no third figure.

    Raises:
        TypeError, ValueError: for a ``share`` that is not a finite number >= 0.
    """
    check_real("share", share, 0)
    p = float(f"{100 * share:.2g}")  # rounded first: 9.99 % is "10%", not "10.0%"
    if p == 0:
        return "0%"
    decimals = max(0, 1 - math.floor(math.log10(p)))
    return f"{p:.{decimals}f}%"


def unprofiled_factor(slowdown: float, profiled_ms: float | None = None) -> tuple[float, str]:
    """The factor a share of a profiled step is multiplied by to bound the share of an unprofiled
    step, ``max(1, slowdown)`` (``slowdown``: the profiled steps' mean over the unprofiled steps'
    mean, :meth:`~perfkit.profiling.capstone.CapstoneJob.profiler_slowdown`), and the words that say
    it, computed: a ``slowdown`` above 1 mixes the profiler's cost with any load that differed between
    the window and the runs; one below 1 is load, not the profiler. With ``profiled_ms`` (the profiled
    steps' mean, ms) the words print both means, so that a share times the profiled mean over the
    unprofiled mean can be checked by hand.

    Raises:
        TypeError, ValueError: for a ``slowdown`` or ``profiled_ms`` that is not a finite number > 0.
    """
    check_real("slowdown", slowdown, 0, lo_open=True)
    if profiled_ms is not None:
        check_real("profiled_ms", profiled_ms, 0, lo_open=True)
    ms = "" if profiled_ms is None else f"{profiled_ms:.1f} over {profiled_ms / slowdown:.1f} ms; "
    if slowdown >= 1:
        return slowdown, (f"times {slowdown:.2f}, the profiled steps' mean over the unprofiled steps' mean "
                          f"({ms}the mean, as the share's own step: the profiler's cost and any load that "
                          "differed between the window and the runs, together)")
    return 1.0, (f"times 1 (the profiled steps' mean measured {slowdown:.2f}x the unprofiled steps' mean, "
                 f"{ms}below 1, so load that differed between the window and the runs, not the profiler, "
                 "set it; never taken below 1)")


def profiled_mean_ms(report: Mapping) -> float:
    """The profiled window's mean step (ms) of a diagnosis ``report``: the step its shares are of."""
    return statistics.mean(report["step_times_s"]) * 1e3


def reads_pick(report: Mapping, fix: str, slowdown: float = 1.0) -> Pick:
    """The bound of ``fix``, the fix of the training loop's own host reads, from a diagnosis
    whose sync finding fired.

    The sync share holds the reads, the host loop between them, and the time that passed with a
    collective in flight between two reads (a wait for it: DDP's buckets, with
    ``find_unused_parameters=True``), which the bound takes removing the loop's reads to leave (fewer
    reads can leave fewer such waits between two of them: the round says how that part moved). What the
    fix can remove is the sync share less that wait, plus part of the communication share (the
    loop's own collective, as a per-step loss all-reduce, not measured apart): the bound counts
    all of communication. Where the part of the sync share the fix removes lies below
    :data:`MIN_TESTABLE_SHARE` of an unprofiled step, or the bound is too loose to fail
    (:func:`loose_bound`), the bound cannot test the fix (``Pick.untested`` says why).
    ``slowdown``: the profiled over the unprofiled step; the bound is the removable milliseconds of
    the profiled window over an unprofiled step (the share times :func:`unprofiled_factor`, capped
    at 99 %), as every waste fix's is (:func:`~perfkit.profiling.capstone.next_fix`).

    Raises:
        TypeError, ValueError: for a ``report`` that is not a diagnosis report with shares.
    """
    check_type("report", report, Mapping)
    if not isinstance(report.get("shares"), Mapping):
        raise ValueError("report must be a diagnosis report with shares")
    sync, comm = report["shares"].get("sync", 0.0), report["shares"].get("communication", 0.0)
    wait = min(report.get("sync_comm_share") or 0.0, sync)
    slow, said = unprofiled_factor(slowdown, profiled_mean_ms(report))
    reads = sync - wait  # the reads and the loop between them
    share, most_words = scaled_share(reads + comm, slow)
    model = (f"Amdahl: the reads and the host loop between them (sync {sync:.1%}, less the {wait:.1%} "
             "that passed with a collective in flight, which the bound takes the fix to leave) "
             "+ communication "
             f"{comm:.1%} (the loop's own collectives among it, not measured apart) of a profiled step, "
             f"{(reads + comm) * profiled_mean_ms(report):.1f} ms, "
             f"{said}: a phase takes no longer without the profiler than with it, {most_words}, removed")
    most = min(reads * slow, SHARE_CAP)  # the reads' share of an unprofiled step, by the rule of the bound
    kind = bound_class(most) or bound_class(share)  # too tight by the reads alone, or too loose by the whole
    untested = loose_bound(share, reads + comm, slow) if kind != TOO_TIGHT else (
        f"what the bound takes the fix to remove, the reads and the loop between them, is {reads:.1%} of a "
        "profiled "
        f"step, at most {most:.1%} of an unprofiled one (by the factor above), which bounds the gain from "
        f"removing them at {1 / (1 - most):.3g}x: a share under {MIN_TESTABLE_SHARE:.0%}, closer to 1x than "
        f"two runs of this job minutes apart repeat; the rest of the bound, communication {comm:.1%}, holds "
        "the loop's own collectives, which the fix runs less often, beside the others, which it does not "
        "target: a part the diagnosis does not measure apart")
    return Pick("sync", share, 1 / (1 - share), model, fix, ("sync", "communication"), untested,
                void=(reads + comm) * slow >= SHARE_CAP, context=kind,
                part_bound=1 / (1 - most) if kind == TOO_TIGHT else None)


def still_listed(report: Mapping, fix_for_finding: Mapping[str, Sequence[str]], applied: Sequence[str],
                 tried: Collection[str], available: Sequence[str]) -> list[str]:
    """One line per finding above information level that the diagnosis ``report`` still lists,
    with what the loop did with each of its fixes (``fix_for_finding``): applied, tried and
    dropped, not offered (not in ``available``) or not tried.

    Raises:
        TypeError, ValueError: for a ``report`` that is not a diagnosis report with findings.
    """
    check_type("report", report, Mapping)
    if not isinstance(report.get("findings"), list):
        raise ValueError("report must be a diagnosis report with findings")
    out = []
    for f in report["findings"]:
        if f["severity"] == "info":
            continue
        did = [f"--fix {x} " + ("applied" if x in applied else "tried and dropped" if x in tried
                                else "not offered here" if x not in available else "not tried")
               for x in fix_for_finding.get(f["kind"], ())]
        out.append(f"[{f['severity']}] {f['kind']} ({f['share']:.1%} of the last step): "
                   + (", ".join(did) or "no fix for it in this job"))
    return out
