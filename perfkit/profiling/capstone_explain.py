"""Why a capstone round (module 08) came out as it did: the verdict's sentence for each outcome,
built from the two diagnoses around the fix.

:func:`explain_round` words each outcome with the measured quantities that decide it: each
phase's milliseconds per profiled step before and after the fix (:func:`phase_ms`), the host
reads (syncs) per step, the profiled window's gain beside the runs' (:func:`window_gain`), and
the runs before when they drifted apart. Where the runs crossed a bound, it sets the fix against
the run before that the bound was set from: within the bound there, the other run before moved
the mean; past it, the fix removed more milliseconds of that run's unprofiled step than the
bound allows, and the phases outside the bound whose time fell are named. The fix and its bound
are :mod:`perfkit.profiling.capstone_text`'s :class:`~perfkit.profiling.capstone_text.Pick`.

Usage::

    pick = Pick("sync", 0.27, 1.36, "Amdahl: the sync share 26.6% removed", "sync", ("sync",))
    words = explain_round(pick, 1.12, report_before, slowdown=1.2, repeated=True, after_report=report_after)
    print(words["above"])   # the fix against the run before the bound was set from, and what fell
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling._capstone_credit import bound_ms
from perfkit.profiling.capstone_text import Pick, unprofiled_factor

__all__ = ["explain_round", "phase_ms", "window_gain"]


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
        return said + (f": that fall, {ov_b - ov_a:.1f} ms, covers the {rise_ms:.1f} ms communication rose "
                       "by.")
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
            slowdown_after: float | None, befores_tps: Sequence[float] = ()) -> str:
    """The profiled window's tokens/s gain beside the runs', when the two differ by more than a
    tenth: the shares, phases and bound were measured in that window. The profiler's factors
    before and after are named, and said to weigh alike or not as they lie within a tenth of each
    other or not; where the runs before lie more than a tenth apart, the run the window before
    belongs to (the first) and the fix's ratio against it alone, beside the window's."""
    window = window_gain(before, after, tokens_x)
    if window is None or 1 / 1.1 <= window / gain <= 1.1:
        return ""
    step_b, step_a = (statistics.mean(r["step_times_s"]) * 1e3 for r in (before, after))  # ms
    alike = slowdown_after is not None and 1 / 1.1 <= slowdown_after / slowdown <= 1.1
    apart = len(befores_tps) > 1 and max(befores_tps) > 1.1 * min(befores_tps)
    own = ""  # the window's own run before, where the runs before drifted apart
    if apart:
        g0 = gain * statistics.mean(befores_tps) / befores_tps[0]
        near = 1 / 1.1 <= window / g0 <= 1.1
        own = (f"; the window before the fix is the run before at {befores_tps[0]:,.0f} tokens/s, against "
               f"which alone the fix measures {g0:.2f}x, " + (
                   "within a tenth of the window's gain: the other run before moved the runs' mean"
                   if near else f"{'above' if g0 > window else 'below'} the window's gain by more than a "
                   "tenth: even against its own run, the window moved otherwise"))
    why = ("" if slowdown_after is None else
           f": the profiled steps' mean took {slowdown:.2f}x the unprofiled steps' mean before the fix "
           f"and {slowdown_after:.2f}x after it, " + (
               "within a tenth of each other, so the profiler weighed on the two about alike"
               + ("" if apart else ": the runs themselves moved otherwise than their windows") if alike else
               "so the profiler (and any load during a window) did not weigh on the two alike"))
    return (f"The profiled window gained {window:.2f}x ({step_b:.1f} -> {step_a:.1f} ms, the profiled "
            "steps' mean"
            + (f", {tokens_x:g}x the tokens" if tokens_x != 1 else "")
            + f") against the runs' {gain:.2f}x{why}{own}; the diagnosis' phases, and the bound's shares, "
            "were measured in windows that changed otherwise than the runs did.")


def _crossed(pick: Pick, gain: float, before_report: Mapping, slowdown: float,
             befores_tps: Sequence[float]) -> tuple[str, bool]:
    """Why the runs crossed the bound, and whether the fix crossed it against the run before that the
    bound was set from (the first of ``befores_tps``, whose ``slowdown`` it used): within it there, the
    other run moved the mean; past it, the fix removed more ms of that run's step than the bound allows."""
    g0 = gain * statistics.mean(befores_tps) / befores_tps[0] if befores_tps else gain
    run = "the run before" + (f" that the bound was set from ({befores_tps[0]:,.0f} tokens/s)"
                              if len(befores_tps) > 1 else "")
    if g0 <= pick.bound and len(befores_tps) > 1:
        return (f"against {run} alone the fix measures {g0:.2f}x, within its {pick.bound:.3g}x: the other "
                f"run before ({', '.join(f'{t:,.0f}' for t in befores_tps[1:])} tokens/s) moved the mean "
                "across it: the runs before drifted, the fix did not remove more than its share"), False
    step = statistics.mean(before_report["step_times_s"]) * 1e3 / slowdown  # ms, the unprofiled mean
    return (f"against {run} alone the fix measures {g0:.2f}x: it removed {step * (1 - 1 / g0):.1f} ms of "
            f"that run's {step:.1f} ms unprofiled step, more than the {pick.share * step:.1f} ms "
            f"({pick.share:.1%}) the bound allows, so either the bound's phases took longer without the "
            "profiler than with it (load that differed between the window and that run breaks the "
            "bound's premise) or the fix removed time the diagnosis booked in other phases"), True


def _drift(gain: float, befores_tps: Sequence[float], bound: float) -> str:
    """The runs before by name when they lie more than a tenth apart: the fix's ratio against
    each, and the edges (1x, the bound) that lie between those two ratios."""
    if len(befores_tps) < 2 or max(befores_tps) <= 1.1 * min(befores_tps):
        return ""
    each = [gain * statistics.mean(befores_tps) / t for t in befores_tps]
    edges = [e for e in (1.0, bound) if min(each) < e < max(each)]
    digits = 2  # decimals enough that the printed ratios and edges show which side each lies on
    while digits < 5 and any(len({f"{x:.{digits}f}" for x in (min(each), e, max(each))}) < 3 for e in edges):
        digits += 1
    shown = {e: f"{e:.3g}x" if digits == 2 else f"{e:.{digits}f}x" for e in edges}
    return (f"The configuration before ran at {' and '.join(f'{t:,.0f}' for t in befores_tps)} tokens/s, "
            f"{max(befores_tps) / min(befores_tps):.2f}x apart: against each alone the fix measures "
            + " and ".join(f"{e:.{digits}f}x" for e in each)
            + (f", on both sides of {' and '.join(shown.values())}: which of those two runs read "
               "the machine right decides the round, not the fix." if edges else "."))


def _data_alone(pick: Pick, gain: float, before: Mapping, slowdown: float, ms_before: Mapping[str, float],
                ms_after: Mapping[str, float]) -> str:
    """For the data fix, whose bound adds the communication share to the data share: where the
    gain passes what the data share alone allows (over an unprofiled step, as the bound's), that
    it is within the bound only through the communication term, and whether communication fell."""
    if pick.fix != "data" or len(pick.phases) < 2 or pick.phases[0] != "data":
        return ""
    factor = unprofiled_factor(slowdown)[0]
    share = min(before["shares"].get("data", 0.0) * factor, 0.99)
    alone = 1 / (1 - share)
    out = ""
    if round(gain, 2) > round(alone, 2):  # as printed
        comm = ms_before.get("communication", 0.0), ms_after.get("communication", 0.0)
        where = ("so it is within the bound only through the communication term (the wait for the rank "
                 "still loading data)" if gain <= pick.bound else
                 f"and past the whole bound, {pick.bound:.2f}x, too")
        out = (f" The data share alone, {share:.1%} of an unprofiled step, bounds the gain at {alone:.2f}x: "
               f"the figure, {gain:.2f}x, lies above it, {where}; "
               + ("communication did not fall, so this round's diagnoses do not show where the gain beyond "
                  "the data phase came from." if comm[1] >= comm[0] else
                  f"communication fell by {comm[0] - comm[1]:.1f} ms per profiled step."))
    return out + _fall_short(pick, gain, before, factor, ms_before, ms_after)


def _fall_short(pick: Pick, gain: float, before: Mapping, factor: float, ms_before: Mapping[str, float],
                ms_after: Mapping[str, float]) -> str:
    """Where the time the bound's phases lost per profiled step (over an unprofiled step, by the
    bound's own rule: times ``factor``) accounts for less than the measured ``gain``, as printed:
    the diagnoses' phases do not explain the gain, whatever the verdict reads; ``""`` otherwise."""
    step = statistics.mean(before["step_times_s"]) * 1e3  # ms, profiled
    fell = max(sum(ms_before.get(k, 0.0) - ms_after.get(k, 0.0) for k in pick.phases), 0.0)
    share = min(fell / step * factor, 0.99)
    most = 1 / (1 - share)
    if gain <= 1 or round(most, 2) >= round(gain, 2):
        return ""
    return (f" The bound's phases fell {fell:.1f} ms of a {step:.1f} ms profiled step ({share:.1%} of an "
            f"unprofiled step by the bound's rule), which accounts for at most {most:.2f}x, short of the "
            f"figure, {gain:.2f}x: the phases the diagnoses measured do not explain this round's gain, "
            "whatever its verdict reads.")


def _window_past_share(pick: Pick, before: Mapping, after: Mapping, ms_before: Mapping[str, float],
                       ms_after: Mapping[str, float]) -> str:
    """Where the profiled window's own gain (same tokens per step) beats the bound its own share of
    the bound's phases gives (``1 / (1 - share)``, both as printed): the phases the fix does not touch
    shrank too, by how much, and the two that fell most; ``""`` otherwise."""
    share = sum(before["shares"].get(k, 0.0) for k in pick.phases)
    window = window_gain(before, after)
    if not pick.phases or share >= 1 or window is None or round(window, 2) <= round(1 / (1 - share), 2):
        return ""
    rest = [k for k in ms_before if k not in pick.phases]
    was, now = (sum(ms.get(k, 0.0) for k in rest) for ms in (ms_before, ms_after))
    fell = sorted((k for k in rest if ms_before[k] > ms_after.get(k, 0.0)),
                  key=lambda k: ms_after.get(k, 0.0) - ms_before[k])[:2]
    return (f" The profiled window gained {window:.2f}x, past the {1 / (1 - share):.2f}x that removing the "
            f"whole of its own {' + '.join(pick.phases)} share ({share:.1%}) allows it: the phases the fix "
            f"does not touch went {was:.1f} -> {now:.1f} ms per profiled step"
            + (f" ({_moves(ms_before, ms_after, fell)})" if fell else "")
            + ", so the window's phase accounting does not hold this gain to the fix's phases; this run does "
            "not time why they shrank.")


def _sync_split(before: Mapping, after: Mapping, rose: bool, reads_fix: bool) -> str:
    """The sync phase before and after, split as the diagnoses split it: time with a collective in
    flight between two reads (which the reads' fix's bound, ``reads_fix``, takes it to leave) and the
    reads with the loop. Where it ``rose``, which part rose more; for ``reads_fix``, where the in-flight
    part (where after's is not split: at most its whole sync phase) fell past a tenth and 1 ms, that
    the bound's premise failed; else ""."""
    unsplit = after.get("sync_comm_share") is None and not rose  # bounded by after's whole sync phase
    parts = []
    for r in (before, after):
        step, sync = statistics.mean(r["step_times_s"]) * 1e3, r["shares"].get("sync", 0.0)  # ms, profiled
        wait = sync if unsplit and r is after else min(r.get("sync_comm_share") or 0.0, sync)
        parts.append((wait * step, (sync - wait) * step))
    (w0, o0), (w1, o1) = parts
    went = (f"the time that passed with a collective in flight between two reads (a wait for DDP's bucket "
            f"all-reduces, or the loop's own{', which the bound takes this fix to leave' * reads_fix}) went "
            f"{w0:.1f} -> "
            + (f"at most {w1:.1f} ms (the sync phase after, not split)" if unsplit else
               f"{w1:.1f} ms, the reads and the loop between them {o0:.1f} -> {o1:.1f} ms")
            + " per profiled step")
    if rose:
        grew = ("the waits rose more than the reads' own time: they or the load took longer in this window"
                if w1 - w0 > o1 - o0 else "the reads' own time rose more than the waits: the reads the fix "
                "left cost more each, or the load rose")
        return (f" The sync phase rose though the reads fell: of it, {went}: {grew}; this run does not "
                "tell which.")
    if not reads_fix or w0 - w1 <= max(0.1 * w0, 1.0):
        return ""
    return (f" Of the sync phase, {went}: that part fell {'at least ' if unsplit else ''}{w0 - w1:.1f} ms, "
            "so the bound's premise, that this fix leaves it, failed in this round: the fix runs the loop's "
            "own loss all-reduce less often, and with fewer reads fewer of DDP's waits fall between two of "
            "them (the only place the diagnosis books one as sync); this run does not separate the two.")


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
            by more than a tenth. Above the bound, the sentence sets the fix against the run
            before that the bound was set from: within the bound there, the other run before
            moved the mean; past it, the milliseconds the fix removed against those the bound
            allows, and the phases outside the bound whose time fell.
        clear_below: whether the gain's interval lies below 1x (as printed); when it holds
            1x, a gain below 1x is not called a slowdown the fix caused.
        befores_tps: tokens/s of each run of the configuration before (the first is the one
            the bound was set from): where two lie more than a tenth apart, every outcome names
            them and the fix's ratio against each, and a slower step is not called a fix that
            cost more than it saved.
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
    crossed = True  # past the bound against the run before it was set from: phases outside it named
    if pick.phases and not by_tokens:
        above, crossed = _crossed(pick, gain, before_report, slowdown, befores_tps)
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
        if outside and crossed:
            above += (f": outside the {' + '.join(pick.phases) or 'phases'} the bound counts, "
                      + _moves(ms_before, ms_after, outside[:2]) + " per profiled step")
            if pick.fix == "ddp" and "forward" in outside[:2]:
                above += (" (with find_unused_parameters=True DDP walks the autograd graph after every "
                          "forward, time counted in forward)")
        syncs = (f"; host reads (syncs) per step {before_report.get('syncs_per_step', 0):.0f} -> "
                 f"{after_report.get('syncs_per_step', 0):.0f}" if "sync" in pick.phases else "")
        if pick.phases:
            moved = _moves(ms_before, ms_after, list(pick.phases))
            reads_fix = pick.kind == pick.fix == "sync"  # its bound leaves out the sync phase's wait
            together = (" ({} {:.1f} -> {:.1f} ms)".format(
                "the parts the bound counts" if reads_fix else "together",
                *(bound_ms(pick, r) for r in (before_report, after_report))) if len(pick.phases) > 1 else "")
            decided = ((f"The {' and '.join(pick.phases)} phases (the bound counts the sync phase less its "
                        "wait with a collective in flight)" if reads_fix else "The bound's phases")
                       + f" went {moved}{together} per profiled step{syncs}.")
            rose = [k for k in pick.phases if ms_after.get(k, 0.0) > ms_before.get(k, 0.0)]
            reads = (before_report.get("syncs_per_step", 0), after_report.get("syncs_per_step", 0))
            split = bool(reads[0] and reads[1]) and ("sync" in rose or pick.fix == "sync")
            if split:
                decided += _sync_split(before_report, after_report, "sync" in rose, pick.fix == "sync")
            if rose and not (split and "sync" in rose):
                decided += (f" {' and '.join(rose).capitalize()} rose, though the "
                            + ("bound counts " if pick.fix == "data" else "fix targets ")
                            + f"{'them' if len(rose) > 1 else 'it'}"
                            + (_comm_rose(pick.fix, before_report, after_report,
                                          ms_after["communication"] - ms_before["communication"])
                               if rose == ["communication"] else "; this run does not time why.")
                            + (f" The loop keeps the fix on its median speedup, {gain:.2f}x, above 1x, "
                               "not on these phases: they do not show where a gain came from."
                               if gain >= 1 and pick.fix != "data" else ""))
            said.append(decided + _data_alone(pick, gain, before_report, slowdown, ms_before, ms_after)
                        + ("" if by_tokens else _window_past_share(pick, before_report, after_report,
                                                                     ms_before, ms_after)))
    windows = "" if ms_after is None else _window(gain, before_report, after_report, tokens_x, slowdown,
                                                  slowdown_after, befores_tps)
    drift = _drift(gain, befores_tps, pick.bound)
    decided = " ".join(s for s in (*said, windows, drift) if s)
    decided_above = " ".join(s for s in (*said, windows, drift) if s)
    load = ("and the load may have changed faster than the three runs (before, after, before again) can "
            "cancel" if repeated else "and with one run of each configuration, a load that changed between "
            "the two runs moves the ratio as much as the fix does")
    tail = " " + decided if decided else ""
    out = {"held": (held + tail).strip(),
           "above": f"More than the bound allows: {above}; {load}."
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
