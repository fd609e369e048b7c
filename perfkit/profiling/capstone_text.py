"""What one round of the capstone (module 08) says: the fix chosen and its bound, and the
verdict's sentence for each outcome, built from the two diagnoses around the fix.

A round predicts a fix's gain from the share of the step its finding measured (Amdahl's law,
``1 / (1 - share)``), or from the machine's peak for a larger batch. Its :class:`Pick` records
the bound, the phases whose shares make it, and, for a bound that cannot test the fix at
this job's sizes (too loose, or too close to 1x for this job's noise), why (``untested``):
such a bound is printed as context beside the measurement, never recorded as a prediction.
:func:`explain_round` words each outcome with the
measured quantities that decide it: each phase's milliseconds per profiled step before and
after the fix, the host reads (syncs) per step, the profiler's slowdown.

Usage::

    pick = Pick("sync", 0.27, 1.36, "Amdahl: the sync share 26.6% removed", "sync", ("sync",))
    words = explain_round(pick, 1.12, report_before, slowdown=1.2, repeated=True, after_report=report_after)
    print(words["above"])   # names the phases outside the bound whose time fell, in ms
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from perfkit._checks import check_real, check_type

__all__ = ["Pick", "explain_round", "phase_ms"]


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


def explain_round(pick: Pick, gain: float, before_report: Mapping, slowdown: float,
                  repeated: bool, after_report: Mapping | None = None,
                  clear_below: bool = True) -> dict[str, str]:
    """The verdict's sentence for each outcome of one round, from what it measured.

    Args:
        pick: the round's fix and bound; gain: its measured speedup (x).
        before_report: the diagnosis of the configuration the fix was chosen from.
        slowdown: that configuration's profiled over unprofiled step (the profiler's cost).
        repeated: whether the configuration before was run again after the new one.
        after_report: the diagnosis with the fix applied: the sentences then name each
            phase's milliseconds per profiled step before and after, and the syncs per step.
        clear_below: whether the gain's interval lies below 1x (as printed); when it holds
            1x, a gain below 1x is not called a slowdown the fix caused.

    Raises:
        TypeError, ValueError: for a ``pick`` that is not a :class:`Pick`, a gain or slowdown
            that is not a finite number > 0, or a report that is not a diagnosis report.
    """
    check_type("pick", pick, Pick)
    check_real("gain", gain, 0, lo_open=True)
    check_real("slowdown", slowdown, 0, lo_open=True)
    ms_before = phase_ms(before_report)
    ms_after = None if after_report is None else phase_ms(after_report)
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
    if pick.kind == "data":
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
    decided = ""
    if ms_after is not None:
        outside = [k for k in ms_before if k not in pick.phases and ms_before[k] > ms_after.get(k, 0.0)]
        outside.sort(key=lambda k: ms_after.get(k, 0.0) - ms_before[k])  # largest drop first
        if outside:
            above += (f": outside the {' + '.join(pick.phases) or 'phases'} the bound counts, "
                      + _moves(ms_before, ms_after, outside[:2]) + " per profiled step")
            if pick.fix == "ddp" and "forward" in outside[:2]:
                above += (" (with find_unused_parameters=True DDP walks the autograd graph after every "
                          "forward, time counted in forward)")
        step_b, step_a = (statistics.mean(r["step_times_s"]) * 1e3  # ms per profiled step
                          for r in (before_report, after_report))
        if step_a > 0 and step_b / step_a < gain / 1.1:  # the profiled window gained less than the runs
            above += (f"; the profiled step went {step_b:.1f} -> {step_a:.1f} ms, only "
                      f"{step_b / step_a:.2f}x against the {gain:.2f}x of the unprofiled steps, so the "
                      "window's phases cannot place the rest of the gain")
        syncs = (f"; host reads (syncs) per step {before_report.get('syncs_per_step', 0):.0f} -> "
                 f"{after_report.get('syncs_per_step', 0):.0f}" if "sync" in pick.phases else "")
        if pick.phases:
            moved = _moves(ms_before, ms_after, list(pick.phases))
            decided = f"The bound's phases went {moved} per profiled step{syncs}."
            rose = [k for k in pick.phases if ms_after.get(k, 0.0) > ms_before.get(k, 0.0)]
            reads = (before_report.get("syncs_per_step", 0), after_report.get("syncs_per_step", 0))
            if "sync" in rose and reads[0] and reads[1]:
                decided += (f" The sync phase rose though the reads fell: "
                            f"{ms_before['sync'] / reads[0]:.3g} -> {ms_after['sync'] / reads[1]:.3g} ms "
                            "per read; this run does not tell whether the reads the fix left cost more "
                            "each or the load rose.")
            elif rose:
                decided += (f" {' and '.join(rose).capitalize()} rose, though the fix targets "
                            f"{'them' if len(rose) > 1 else 'it'}; this run does not time why.")
    load = ("and the load may have changed faster than the three runs (before, after, before again) can "
            "cancel" if repeated else "and with one run of each configuration, a load that changed between "
            "the two runs moves the ratio as much as the fix does")
    out = {"held": held,
           "above": f"More than the bound allows: {above}; {load}.",
           "below": ("The step got slower: the run with the fix was slower than "
                     + ("the configuration before it, run before and after it: the fix cost more than it "
                        "saved on this machine." if repeated else "the one run before it (a load that "
                        "changed between the two runs reads the same).") if clear_below else
                     "The median step got slower with the fix, but the interval holds 1x: this run cannot "
                     "tell the fix from no change, nor say that it cost more than it saved.")
                    + " It is dropped (the loop keeps a fix only where the median gained); the next round "
                    "starts from the configuration before it."
                    + (" " + decided if decided else "")}
    if decided:
        out["inconclusive"] = decided
    return out
