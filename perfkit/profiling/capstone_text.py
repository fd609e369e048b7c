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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from perfkit._checks import check_real, check_type
from perfkit.stats import Estimate

__all__ = ["Pick", "Round", "Total", "percent2", "reads_pick", "still_listed"]

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


def scaled_share(profiled: float, slow: float) -> tuple[float, str]:
    """A ``profiled`` share times the factor ``slow`` (:func:`unprofiled_factor`), taken at most at
    :data:`SHARE_CAP`, and the words that finish a bound's model with it, computed: below the cap,
    ``"so X of an unprofiled step is the most it can take"``; at or above it, the product as it is,
    never the capped figure, and what it means for the bound (none: the fix may remove the step)."""
    raw = profiled * slow
    if raw < SHARE_CAP:
        return raw, f"so {raw:.1%} of an unprofiled step is the most it can take"
    past = ("more than the whole step: the factor is larger than this round's phases allow, so it "
            "holds load that differed between the window and the runs beside the profiler's cost: a "
            "most past the whole step is one no phase can reach, so it bounds nothing here, and the "
            "other rounds' factors may hold such load too, which loosens their bounds"
            if raw > 1 else "the whole step, within a percent")
    return SHARE_CAP, (f"which gives {profiled:.1%} x {slow:.2f} = {raw:.1%} of an unprofiled step, {past}; "
                       "as a bound this says nothing: the fix may remove up to the whole step, no finite "
                       f"gain (taken as {SHARE_CAP:.0%}, {1 / (1 - SHARE_CAP):.0f}x, in the arithmetic "
                       "only, not measured)")


def loose_bound(share: float, profiled: float, slow: float) -> str:
    """Why a waste fix's bound (``share`` of an unprofiled step: a ``profiled`` share times ``slow``)
    cannot fail, at or above :data:`MAX_TESTABLE_SHARE`; ``""`` below it. Where the product reaches
    :data:`SHARE_CAP`, it says the bound is void rather than print the capped share."""
    if share < MAX_TESTABLE_SHARE:
        return ""
    alone = f"{1 / (1 - profiled):.3g}x" if profiled < 1 else "no bound"
    if profiled * slow >= SHARE_CAP:
        return (f"the profiled share times the factor, {profiled * slow:.1%} of an unprofiled step, leaves "
                f"no finite bound, so it cannot test the share (the profiled share alone, {profiled:.1%}, "
                f"gives {alone}; the factor {slow:.2f} that carries it past the step mixes the profiler's "
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
    none, and ``bound`` only the arithmetic's stand-in."""

    kind: str
    share: float
    bound: float
    model: str
    fix: str
    phases: tuple[str, ...] = ()
    untested: str = ""
    by_tokens: bool = False
    void: bool = False


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


def unprofiled_factor(slowdown: float) -> tuple[float, str]:
    """The factor a share of a profiled step is multiplied by to bound the share of an unprofiled
    step, ``max(1, slowdown)`` (``slowdown``: the profiled over the unprofiled step), and the
    words that say it, computed: a ``slowdown`` above 1 mixes the profiler's cost with any load
    that differed between the window and the runs; one below 1 is load, not the profiler.

    Raises:
        TypeError, ValueError: for a ``slowdown`` that is not a finite number > 0.
    """
    check_real("slowdown", slowdown, 0, lo_open=True)
    if slowdown >= 1:
        return slowdown, (f"times {slowdown:.2f}, the profiled steps' mean over the unprofiled steps' median "
                          "(the profiler's cost and any load that differed between the window and the runs, "
                          "together)")
    return 1.0, (f"times 1 (the profiled steps' mean measured {slowdown:.2f}x the unprofiled steps' median: "
                 "below 1, so load that differed between the window and the runs, not the profiler, set it; "
                 "never taken below 1)")


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
    slow, said = unprofiled_factor(slowdown)
    reads = sync - wait  # the reads and the loop between them
    share, most_words = scaled_share(reads + comm, slow)
    model = (f"Amdahl: the reads and the host loop between them (sync {sync:.1%}, less the {wait:.1%} "
             "that passed with a collective in flight, which the bound takes the fix to leave) "
             "+ communication "
             f"{comm:.1%} (the loop's own collectives among it, not measured apart) of a profiled step, "
             f"{said}: a phase takes no longer without the profiler than with it, {most_words}, removed")
    most = min(reads * slow, SHARE_CAP)  # the reads' share of an unprofiled step, by the rule of the bound
    untested = loose_bound(share, reads + comm, slow) if most >= MIN_TESTABLE_SHARE else (
        f"what the bound takes the fix to remove, the reads and the loop between them, is {reads:.1%} of a "
        "profiled "
        f"step, at most {most:.1%} of an unprofiled one (by the factor above), which bounds the gain from "
        f"removing them at {1 / (1 - most):.3g}x: a share under {MIN_TESTABLE_SHARE:.0%}, closer to 1x than "
        f"two runs of this job minutes apart repeat; the rest of the bound, communication {comm:.1%}, holds "
        "the loop's own collectives, which the fix runs less often, beside the others, which it does not "
        "target: a part the diagnosis does not measure apart")
    return Pick("sync", share, 1 / (1 - share), model, fix, ("sync", "communication"), untested,
                void=(reads + comm) * slow >= SHARE_CAP)


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


def repeats_text(t: Total) -> str:
    """Which way each configuration's repeat inside a round went against the run it repeats, in
    the order they ran: a kept configuration's seam reads its run, then the mean of that run and
    its later repeat, so it reads slower exactly when the repeat ran slower; the slow job's seam
    sets the mean of its first and last runs against the mean of its first run and its repeat, so
    its repeat is set against its first run here (the first of ``t.slow_runs_tps``). Under load
    drifting both ways alike, all ``n`` the way they point has probability ``1 / 2 ** n``, and
    all one way, either way, ``2 / 2 ** n``: both are said for 3 or more, all one way. For
    :func:`perfkit.viz.capstone.seams_text`; not re-exported.

    Raises:
        TypeError: for ``t`` that is not a :class:`Total`.
    """
    check_type("t", t, Total)
    runs = [(f"after --fix {name}", b < a) for name, a, b in t.seams[1:]]
    if len(t.slow_runs_tps) > 1:  # the slow job's repeat ran slower than its first run
        runs.insert(0, ("the slow job", t.seams[0][2] < t.slow_runs_tps[0]))
    slower, faster = ([name for name, s in runs if s == way] for way in (True, False))
    n = len(runs)
    if t.repeats:  # every repeat run, the dropped rounds' and the last one's included
        return every_repeat_text(t) + _seam_against_time(t, runs)
    if n >= 3 and not (slower and faster):
        chance = (f" (under load drifting both ways alike, a 1 in {2 ** n} chance, and 1 in {2 ** (n - 1)} "
                  f"for all {n} one way, either way)")
        return (f" In the order the runs ran, all {n} repeats inside a round ran "
                + ("slower than the run they repeat" + chance + ": a repeat slower than the run it repeats "
                   "biases its round's \"before\" low, and its speedup high" + _high(t) if slower else
                   "faster than the run they repeat" + chance + ": each round's \"before\" then reads high, "
                   "and its speedup low."))
    parts = ([f"slower than the run it repeats for {_names(slower)}, which biases {_rounds(slower)} "
              "\"before\" low, and its speedup high"] if slower else [])
    if faster:
        parts.append(("and faster for " if slower else "faster than the run it repeats for ")
                     + f"{_names(faster)}, which biases {_rounds(faster)} \"before\" high, and its "
                     "speedup low")
    out = " In the order the runs ran, the repeat inside a round ran " + "; ".join(parts) + "." if n else ""
    return out + _seam_against_time(t, runs)


def _seam_against_time(t: Total, runs: list[tuple[str, bool]]) -> str:
    """Where the slow job's seam reads the other way than its repeat in the first kept round ran."""
    seam_slower = t.seams[0][2] < t.seams[0][1]
    if len(t.slow_runs_tps) > 1 and runs and seam_slower != runs[0][1]:
        return (f" The slow job's seam reads {'slower' if seam_slower else 'faster'} although "
                f"its repeat ran {'slower' if runs[0][1] else 'faster'}: its first reading holds its last "
                f"run, {t.slow_runs_tps[-1]:,.0f} tokens/s.")
    return ""


def every_repeat_text(t: Total) -> str:
    """Which way every repeat run went against the run it repeats (:attr:`Total.repeats`, in the
    order run), and, for 3 or more, the chance under load drifting both ways alike (each repeat
    as likely faster as slower) of at least as many one way, either way, as ran the more common
    way; repeats that read exactly alike are left out of that count. That chance is printed only
    where it can fall below 5 %: fewer than 6 repeats say that even all one way could not, and a
    split as even as their count allows says so instead of a chance of 1. "" without repeats.

    Raises:
        TypeError: for ``t`` that is not a :class:`Total`.
    """
    check_type("t", t, Total)
    if not t.repeats:
        return ""
    way = {"faster": [w for w, a, b in t.repeats if b > a], "slower": [w for w, a, b in t.repeats if b < a]}
    said = [f"{k} in {len(v)} ({_names(v)})" for k, v in way.items() if v] or [
        f"as fast in all {len(t.repeats)}"]
    last = any(w.startswith("the slow job") for w, _, _ in t.repeats)
    out = (f" In the order the runs ran, {len(t.repeats)} runs repeated a configuration (each round's "
           "configuration before, run again after its fix, whether the fix was kept or dropped"
           + (", and the slow job after the rounds" if last else "")
           + "): against the run it repeats, the repeat ran " + " and ".join(said)
           + (f", and as fast in {len(t.repeats) - sum(map(len, way.values()))}"
              if 0 < sum(map(len, way.values())) < len(t.repeats) else "") + ".")
    m, k = sum(map(len, way.values())), max(map(len, way.values()))
    if m >= 3:
        tail = Fraction(sum(math.comb(m, j) for j in range(m + 1) if max(j, m - j) >= k), 2 ** m)
        some = f"all {m}" if k == m else f"{k} or more of {m}"
        least = Fraction(2, 2 ** m)  # all one way, either way: the smallest chance m repeats can give
        if least >= 0.05:
            out += (f" Under load drifting both ways alike, even all {m} one way, either way, would have a "
                    f"chance of {least.numerator} in {least.denominator} ({float(least):.0%}): too few "
                    "repeats for their count to show load drifting one way.")
        elif tail == 1:
            out += (f" A split of {k} to {m - k} is the most even {m} repeats allow: no evidence of load "
                    "drifting one way.")
        else:
            out += (f" Under load drifting both ways alike, {some} one way, either way, has a chance of "
                    f"{tail.numerator} in {tail.denominator} ({float(tail):.0%})"
                    + (": these repeats are no evidence of load drifting one way." if tail >= 0.05 else "."))
    if way["slower"] and not way["faster"]:
        return out + (" A repeat slower than the run it repeats biases its comparison's \"before\" low, and "
                      "its speedup high" + _high(t))
    return out + "".join([" A repeat faster than the run it repeats biases its comparison's \"before\" high, "
                          "and its speedup low" + ("; a slower one, the reverse." if way["slower"] else ".")]
                         if way["faster"] else [])


def _high(t: Total) -> str:
    """After "all repeats ran slower": what that bias did to the rounds' product, computed."""
    p, d = t.product.value, t.direct.value
    return (f": every round's speedup, as the figure draws it, reads higher than against its first run "
            f"before alone, and their product, {p:.2f}x, "
            f"lies {p / d:.2f}x above the {d:.2f}x measured directly." if p > d else
            f"; their product, {p:.2f}x, still lies at or below the {d:.2f}x measured directly.")


def _rounds(names: list[str]) -> str:
    """Whose "before" a repeat biases: one round's or several."""
    return "that round's" if len(names) == 1 else "each such round's"


def _names(names: list[str]) -> str:
    """``"a, b and c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
