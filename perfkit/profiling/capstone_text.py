"""What one round of the capstone (module 08) says: the fix chosen and its bound, and the
verdict's sentence for each outcome, built from the two diagnoses around the fix.

A round predicts a fix's gain from the share of the step its finding measured (Amdahl's law,
``1 / (1 - share)``), or from the machine's peak for a larger batch. Its :class:`Pick` records
the bound, the phases whose shares make it, and, for a bound that cannot test the fix at
this job's sizes (too loose, or too close to 1x for this job's noise), why (``untested``):
such a bound is printed as context beside the measurement, never recorded as a prediction.
:func:`reads_pick` bounds the fix of the host reads by what it can remove: the reads, not the
collective waited for between two of them. :func:`explain_round` words each outcome with the
measured quantities that decide it: each phase's milliseconds per profiled step before and
after the fix, the host reads (syncs) per step, the profiled window's gain beside the runs',
and the runs before when they drifted apart. Where the runs crossed a bound that the profiled
window kept, that is what the verdict says, with each configuration's profiled over unprofiled
step (a profiler that stretches the two unequally moves the shares). :func:`still_listed` says
which findings the last diagnosis still lists and what became of their fixes. A played round is
a :class:`Round`.

Usage::

    pick = Pick("sync", 0.27, 1.36, "Amdahl: the sync share 26.6% removed", "sync", ("sync",))
    words = explain_round(pick, 1.12, report_before, slowdown=1.2, repeated=True, after_report=report_after)
    print(words["above"])   # the window's gain against the bound, or the phases outside it that fell
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from perfkit._checks import check_items, check_real, check_type
from perfkit.stats import Estimate

__all__ = ["Pick", "Round", "explain_round", "percent2", "phase_ms", "reads_pick", "still_listed",
           "window_gain"]

# a finding's share below this bounds its fix's gain within 5 % of 1x: the loop's runs, minutes
# apart on a shared machine, repeat no closer (the rounds' intervals span tens of percent), so
# such a bound is shown as context, not judged
MIN_TESTABLE_SHARE = 0.05


@dataclass(frozen=True)
class Pick:
    """The next round's fix: the finding ``kind`` it answers, the ``share`` of the step that
    finding measured, the most the fix can buy (``bound``, x), the model it comes from, the
    ``phases`` of the diagnosis whose shares make the bound, ``untested``: empty when the
    bound can fail, else why it cannot test the fix (it is then printed as context), and
    ``by_tokens``: the bound is a larger batch's factor of tokens per step, not a share."""

    kind: str
    share: float
    bound: float
    model: str
    fix: str
    phases: tuple[str, ...] = ()
    untested: str = ""
    by_tokens: bool = False


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
        return slowdown, (f"times {slowdown:.2f}, the profiled step over an unprofiled one (the profiler's "
                          "cost and any load that differed between the window and the runs, together)")
    return 1.0, (f"times 1 (a profiled step measured {slowdown:.2f}x an unprofiled one: below 1, so load "
                 "that differed between the window and the runs, not the profiler, set it; never taken "
                 "below 1)")


def reads_pick(report: Mapping, fix: str, slowdown: float = 1.0) -> Pick:
    """The bound of ``fix``, the fix of the training loop's own host reads, from a diagnosis
    whose sync finding fired.

    The sync share holds the reads, the host loop between them, and the time that passed with a
    collective in flight between two reads (a wait for it: DDP's buckets, with
    ``find_unused_parameters=True``), which removing the loop's reads does not remove. What the
    fix can remove is the sync share less that wait, plus part of the communication share (the
    loop's own collective, as a per-step loss all-reduce, not measured apart): the bound counts
    all of communication. Where the part of the sync share the fix removes lies below
    :data:`MIN_TESTABLE_SHARE`, the bound cannot test the fix (``Pick.untested`` says why).
    ``slowdown``: the profiled over the unprofiled step; the bound is the removable milliseconds
    of the profiled window over an unprofiled step (the share times :func:`unprofiled_factor`,
    capped at 99 %), as every waste fix's is (:func:`~perfkit.profiling.capstone.next_fix`).

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
    share = min((reads + comm) * slow, 0.99)
    model = (f"Amdahl: the reads and the host loop between them (sync {sync:.1%}, less the {wait:.1%} "
             "that passed with a collective in flight, which the fix does not remove) + communication "
             f"{comm:.1%} (the loop's own collectives among it, not measured apart) of a profiled step, "
             f"{said}: a phase takes no longer without the profiler than with it, so {share:.1%} of an "
             "unprofiled step at most, removed")
    untested = "" if reads >= MIN_TESTABLE_SHARE else (
        f"what the fix measurably removes, the reads and the loop between them, is {reads:.1%} of a profiled "
        "step, "
        f"which puts its gain within {MIN_TESTABLE_SHARE:.0%} of 1x, closer than two runs of this job "
        f"minutes apart repeat; the rest of the bound, communication {comm:.1%}, holds the loop's own "
        "collectives, which the fix runs less often, beside the others, which it leaves: a part the "
        "diagnosis does not measure apart")
    return Pick("sync", share, 1 / (1 - share), model, fix, ("sync", "communication"), untested)


def phase_ms(report: Mapping) -> dict[str, float]:
    """Milliseconds per profiled step in each phase of a diagnosis: its share times the
    mean profiled step.

    Raises:
        TypeError, ValueError: for a ``report`` that is not a mapping with ``shares`` and
            ``step_times_s``.
    """
    check_type("report", report, Mapping)
    if "shares" not in report or not report.get("step_times_s"):
        raise ValueError("report must be a diagnosis report with shares and step_times_s")
    step_ms = statistics.mean(report["step_times_s"]) * 1e3
    return {k: v * step_ms for k, v in report["shares"].items()}


def _moves(before: Mapping[str, float], after: Mapping[str, float], phases: list[str]) -> str:
    """``"forward 3.1 -> 1.9 ms, backward 5.0 -> 4.2 ms"`` for ``phases`` (in that order)."""
    return ", ".join(f"{k} {before.get(k, 0.0):.1f} -> {after.get(k, 0.0):.1f} ms" for k in phases)


def _overlapped_ms(report: Mapping) -> float | None:
    """Milliseconds per profiled step that collectives ran under other work (as the diagnosis
    prints it: overlapped, less the operators they slowed); ``None`` when not recorded."""
    if report.get("comm_overlapped_share") is None:
        return None
    share = report["comm_overlapped_share"] - report.get("comm_contention_share", 0.0)
    return share * statistics.mean(report["step_times_s"]) * 1e3


def _comm_rose(fix: str, before: Mapping, after: Mapping, rise_ms: float) -> str:
    """Why communication rose by ``rise_ms`` (per profiled step) with ``fix``, as far as the
    overlap the two diagnoses recorded says it: collective time that ran under other work
    before and runs exposed after."""
    ov_b, ov_a = _overlapped_ms(before), _overlapped_ms(after)
    if ov_b is None or ov_a is None:
        return "; this run does not time why."
    if ov_a >= ov_b - 0.1:
        return (f"; the collectives' time under other work went {ov_b:.1f} -> {ov_a:.1f} ms per profiled "
                "step, so lost overlap does not explain it, and this run does not time why.")
    how = (" (fewer, larger buckets start their all-reduce later in backward, or after it)"
           if fix == "ddp" else "")
    said = (f": the collectives' time under other work fell {ov_b:.1f} -> {ov_a:.1f} ms per profiled step, "
            f"collective time that was overlapped and now runs exposed{how}")
    if ov_b - ov_a >= rise_ms:
        return said + f", as much as the {rise_ms:.1f} ms it rose."
    return said + (f", {(ov_b - ov_a) / rise_ms:.0%} of the {rise_ms:.1f} ms it rose; this run does not time "
                   "the rest.")


def window_gain(before: Mapping, after: Mapping, tokens_x: float = 1.0) -> float | None:
    """The profiled window's tokens/s gain: the mean profiled step before over after, times the
    tokens per step after over before; ``None`` for an empty step after. The diagnosis' shares,
    and so a bound made of them, were measured in these windows, not in the runs.

    Raises:
        TypeError, ValueError: for a report that is not a mapping with ``step_times_s``, or a
            ``tokens_x`` that is not a finite number > 0.
    """
    for name, r in (("before", before), ("after", after)):
        check_type(name, r, Mapping)
        if not r.get("step_times_s"):
            raise ValueError(f"{name} must be a diagnosis report with step_times_s")
    check_real("tokens_x", tokens_x, 0, lo_open=True)
    step_b, step_a = (statistics.mean(r["step_times_s"]) for r in (before, after))  # s
    return None if step_a <= 0 else step_b / step_a * tokens_x


def _window(gain: float, before: Mapping, after: Mapping, tokens_x: float, slowdown: float,
            slowdown_after: float | None) -> str:
    """The profiled window's tokens/s gain beside the runs', when the two differ by more than a
    tenth: the shares, phases and bound were measured in that window."""
    window = window_gain(before, after, tokens_x)
    if window is None or 1 / 1.1 <= window / gain <= 1.1:
        return ""
    step_b, step_a = (statistics.mean(r["step_times_s"]) * 1e3 for r in (before, after))  # ms
    why = (f": the profiled steps took {slowdown:.2f}x an unprofiled one before the fix and "
           f"{slowdown_after:.2f}x after it, so the profiler (and any load during a window) did not weigh on "
           "the two alike" if slowdown_after is not None else "")
    return (f"The profiled window gained {window:.2f}x ({step_b:.1f} -> {step_a:.1f} ms a profiled step"
            + (f", {tokens_x:g}x the tokens" if tokens_x != 1 else "")
            + f") against the runs' {gain:.2f}x{why}; the diagnosis' phases, and the bound's shares, were "
            "measured in windows that changed otherwise than the runs did.")


def _held_in_window(pick: Pick, window: float, slowdown: float, slowdown_after: float | None) -> str:
    """Why the runs crossed a bound that the profiled window, where its shares were measured,
    kept: the profiler stretched the two configurations unequally (each one's profiled over
    unprofiled step), so a share of a profiled step was not that share of an unprofiled one."""
    out = (f"inside them, where the bound's shares were measured, the fix gained {window:.2f}x, within "
           f"its {pick.bound:.3g}x")
    if slowdown_after is not None and not 1 / 1.1 <= slowdown_after / slowdown <= 1.1:
        return out + (f". The shares were measured under a profiler that stretched the two configurations "
                      f"unequally: a profiled step took {slowdown:.2f}x an unprofiled one before the fix and "
                      f"{slowdown_after:.2f}x after it, so the runs' gain is about the window's times "
                      f"{slowdown_after / slowdown:.2f}, and the shares of a profiled step are not those of "
                      "an unprofiled one")
    return out + (". The runs, without the profiler, gained more than the windows (the profiler, and any "
                  "load during a window, weigh on the two otherwise)")


def _drift(gain: float, befores_tps: Sequence[float], bound: float) -> str:
    """The runs before by name when they lie more than a tenth apart: the fix's ratio against
    each, and the edges (1x, the bound) that lie between those two ratios."""
    if len(befores_tps) < 2 or max(befores_tps) <= 1.1 * min(befores_tps):
        return ""
    each = [gain * statistics.mean(befores_tps) / t for t in befores_tps]
    edges = [e for e in (1.0, bound) if min(each) < e < max(each)]
    return (f"The configuration before ran at {' and '.join(f'{t:,.0f}' for t in befores_tps)} tokens/s, "
            f"{max(befores_tps) / min(befores_tps):.2f}x apart: against each alone the fix measures "
            + " and ".join(f"{e:.2f}x" for e in each)
            + (f", on both sides of {' and '.join(f'{e:.3g}x' for e in edges)}: which of those two runs read "
               "the machine right decides the round, not the fix." if edges else "."))


def explain_round(pick: Pick, gain: float, before_report: Mapping, slowdown: float,
                  repeated: bool, after_report: Mapping | None = None,
                  clear_below: bool = True, befores_tps: Sequence[float] = (),
                  slowdown_after: float | None = None, tokens_x: float = 1.0) -> dict[str, str]:
    """The verdict's sentence for each outcome of one round, from what it measured.

    Args:
        pick: the round's fix and bound; gain: its measured speedup (x).
        before_report: the diagnosis of the configuration the fix was chosen from.
        slowdown: that configuration's profiled over unprofiled step (the profiler's cost).
        repeated: whether the configuration before was run again after the new one.
        after_report: the diagnosis with the fix applied: the sentences then name each
            phase's milliseconds per profiled step before and after, the syncs per step, and,
            whatever the outcome, the profiled window's gain where it differs from the runs'
            by more than a tenth. Above the bound, where that window's gain stays within it,
            the sentence says so, with each configuration's profiled over unprofiled step, in
            place of phases outside the bound whose time fell.
        clear_below: whether the gain's interval lies below 1x (as printed); when it holds
            1x, a gain below 1x is not called a slowdown the fix caused.
        befores_tps: tokens/s of each run of the configuration before: where two lie more
            than a tenth apart, every outcome names them and the fix's ratio against each, and
            a slower step is not called a fix that cost more than it saved.
        slowdown_after: the configuration with the fix's profiled over unprofiled step,
            named beside ``slowdown`` when the window's gain differs from the runs'.
        tokens_x: tokens per step after the fix over before (a larger batch's factor).

    Raises:
        TypeError, ValueError: for a ``pick`` that is not a :class:`Pick`, a gain, slowdown,
            tokens factor or run's tokens/s that is not a finite number > 0, or a report that
            is not a diagnosis report.
    """
    check_type("pick", pick, Pick)
    check_real("gain", gain, 0, lo_open=True)
    check_real("slowdown", slowdown, 0, lo_open=True)
    check_real("tokens_x", tokens_x, 0, lo_open=True)
    for i, t in enumerate(check_items("befores_tps", befores_tps, nonempty=False)):
        check_real(f"befores_tps[{i}]", t, 0, lo_open=True)
    if slowdown_after is not None:
        check_real("slowdown_after", slowdown_after, 0, lo_open=True)
    ms_before = phase_ms(before_report)
    ms_after = None if after_report is None else phase_ms(after_report)
    apart = max(befores_tps) / min(befores_tps) if befores_tps else 1.0
    # Amdahl's terms: the share of the step the fix removed against the share the bound allows
    held = (f"It removed {1 - 1 / gain:.0%} of the step, {(1 - 1 / gain) / (1 - 1 / pick.bound):.0%} of "
            f"the {1 - 1 / pick.bound:.1%} the bound allows." if pick.bound > 1 and gain > 1 else "")
    if pick.kind == "data" and pick.bound >= 99:  # the share was capped at 99 %
        held = (f"The data time in the profiled window was as long as a whole unprofiled step (the "
                f"profiled steps took {slowdown:.1f}x as long: the profiler, and any load), so this "
                "bound says little.")
    by_tokens = pick.by_tokens
    if by_tokens:  # bounded by its factor of tokens per step: the step cannot get shorter
        held = (f"The step with {pick.bound:g}x the tokens took {pick.bound / gain:.2f}x as long; one that "
                f"did not lengthen would give the whole {pick.bound:g}x.")
    window = None if after_report is None or by_tokens else window_gain(before_report, after_report, tokens_x)
    in_window = window is not None and window <= pick.bound  # the bound held where its shares were measured
    if in_window:
        above = _held_in_window(pick, window, slowdown, slowdown_after)
    elif pick.kind == "data":
        above = (f"the fix removed more than the data and collective time together ({pick.share:.1%} "
                 f"of the step; communication {before_report['shares'].get('communication', 0.0):.1%})")
    elif by_tokens:
        above = ("the step with more tokens took less time than the one before it, which more work cannot "
                 "do alone: the machine's load fell between the runs")
    else:
        above = ((f"the bound's share was measured under the profiler, where a step took {slowdown:.1f}x "
                  "as long as without it; " if slowdown > 1.1 else "")
                 + "a fix that removes many small calls also removes per-call costs the attribution "
                 "counts in other phases")
    said = []  # what the round measured, said whatever the outcome
    if ms_after is not None:
        outside = [k for k in ms_before if k not in pick.phases and ms_before[k] > ms_after.get(k, 0.0)]
        outside.sort(key=lambda k: ms_after.get(k, 0.0) - ms_before[k])  # largest drop first
        if outside and not in_window:
            above += (f": outside the {' + '.join(pick.phases) or 'phases'} the bound counts, "
                      + _moves(ms_before, ms_after, outside[:2]) + " per profiled step")
            if pick.fix == "ddp" and "forward" in outside[:2]:
                above += (" (with find_unused_parameters=True DDP walks the autograd graph after every "
                          "forward, time counted in forward)")
        syncs = (f"; host reads (syncs) per step {before_report.get('syncs_per_step', 0):.0f} -> "
                 f"{after_report.get('syncs_per_step', 0):.0f}" if "sync" in pick.phases else "")
        if pick.phases:
            moved = _moves(ms_before, ms_after, list(pick.phases))
            together = (" (together {:.1f} -> {:.1f} ms)".format(*(sum(ms.get(k, 0.0) for k in pick.phases)
                                                                  for ms in (ms_before, ms_after)))
                        if len(pick.phases) > 1 else "")
            decided = f"The bound's phases went {moved}{together} per profiled step{syncs}."
            rose = [k for k in pick.phases if ms_after.get(k, 0.0) > ms_before.get(k, 0.0)]
            reads = (before_report.get("syncs_per_step", 0), after_report.get("syncs_per_step", 0))
            if "sync" in rose and reads[0] and reads[1]:
                decided += (f" The sync phase rose though the reads fell: "
                            f"{ms_before['sync'] / reads[0]:.3g} -> {ms_after['sync'] / reads[1]:.3g} ms "
                            "per read; this run does not tell whether the reads the fix left cost more "
                            "each or the load rose.")
            elif rose:
                decided += (f" {' and '.join(rose).capitalize()} rose, though the fix targets "
                            f"{'them' if len(rose) > 1 else 'it'}"
                            + (_comm_rose(pick.fix, before_report, after_report,
                                          ms_after["communication"] - ms_before["communication"])
                               if rose == ["communication"] else "; this run does not time why."))
            said.append(decided)
    windows = "" if ms_after is None else _window(gain, before_report, after_report, tokens_x, slowdown,
                                                  slowdown_after)
    drift = _drift(gain, befores_tps, pick.bound)
    decided = " ".join(s for s in (*said, windows, drift) if s)
    decided_above = " ".join(s for s in (*said, "" if in_window else windows, drift) if s)  # said once
    load = ("and the load may have changed faster than the three runs (before, after, before again) can "
            "cancel" if repeated else "and with one run of each configuration, a load that changed between "
            "the two runs moves the ratio as much as the fix does")
    tail = " " + decided if decided else ""
    out = {"held": (held + tail).strip(),
           "above": ("The runs crossed the bound, the profiled windows did not: " if in_window else
                     "More than the bound allows: ") + f"{above}; {load}."
                    + (" " + decided_above if decided_above else ""),
           "below": ("The step got slower: the run with the fix was slower than "
                     + (("both runs of the configuration before it, run before and after it: the fix "
                         "cost more than it saved on this machine." if apart < 1.05 else
                         "both runs of the configuration before it, run before and after it; those two "
                         f"differed by {apart:.2f}x, so a load that rose during the run with the "
                         "fix alone reads the same as a fix that cost more than it saved.") if repeated
                        else "the one run before it (a load that changed between the two runs reads the "
                        "same).") if clear_below else
                     "The median step got slower with the fix, but the interval holds 1x: this run cannot "
                     "tell the fix from no change, nor say that it cost more than it saved.")
                    + " It is dropped (the loop keeps a fix only where the median gained); the next round "
                    "starts from the configuration before it." + tail}
    if decided:
        out["inconclusive"] = decided
    return out


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
