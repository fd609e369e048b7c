"""Whether a kept capstone fix (module 08) is credited with a gain.

The loop keeps a fix on its median speedup alone, which keeps fixes on noise: a kept round is
selected for reading high (the winner's curse). So a kept fix is **credited** with a gain only
where its interval lies above 1x, or where the parts of the step its bound counts fell by more
than the profiled steps' own spread:

* the parts are exactly those the bound sums (:func:`bound_ms`): the phases of its
  :class:`~perfkit.profiling.capstone_text.Pick`, except for the fix of the host reads, whose
  bound counts the reads and the loop between them (the sync phase less the time that passed
  with a collective in flight) plus communication, not the whole sync phase;
* the spread (:func:`step_spread_ms`) is the standard deviation of the profiled steps' times, the
  larger of the two windows': the diagnosis records each phase's share of its window, not its
  time in each step, so the whole step's step-to-step spread stands in for a phase's. It is a
  spread of single steps, wider than the spread of a window's mean: the bar is a cautious one.

Usage::

    c = credit(pick, est, report_before, report_after)
    print(c.credited, c.text)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from perfkit._checks import check_type
from perfkit.profiling.capstone_text import Pick
from perfkit.stats import Estimate

__all__ = ["Credit", "bound_ms", "credit", "step_spread_ms"]


def _checked(name: str, report: object) -> Mapping:
    check_type(name, report, Mapping)
    if not isinstance(report.get("shares"), Mapping) or not report.get("step_times_s"):
        raise ValueError(f"{name} must be a diagnosis report with shares and step_times_s")
    return report


def bound_ms(pick: Pick, report: Mapping) -> float:
    """Milliseconds per profiled step of the parts ``pick``'s bound sums, in the diagnosis
    ``report``: the shares of its phases times the mean profiled step; for the fix of the host
    reads (``pick.kind == pick.fix == "sync"``), the sync share less the time that passed with a
    collective in flight (``sync_comm_share``; where a report does not split it, none is taken
    out), plus the communication share. 0.0 for a bound with no phases (a larger batch's).

    Raises:
        TypeError, ValueError: for a ``pick`` that is not a Pick or a ``report`` that is not a
            diagnosis report with shares and step times.
    """
    check_type("pick", pick, Pick)
    shares = _checked("report", report)["shares"]
    step = statistics.mean(report["step_times_s"]) * 1e3
    if pick.kind == pick.fix == "sync":
        sync = shares.get("sync", 0.0)
        wait = min(report.get("sync_comm_share") or 0.0, sync)
        return (sync - wait + shares.get("communication", 0.0)) * step
    return sum(shares.get(k, 0.0) for k in pick.phases) * step


def step_spread_ms(report: Mapping) -> float:
    """The standard deviation of a diagnosis' profiled step times (ms); 0.0 for one step.

    Raises:
        TypeError, ValueError: for a ``report`` that is not a diagnosis report.
    """
    times = _checked("report", report)["step_times_s"]
    return statistics.stdev(times) * 1e3 if len(times) > 1 else 0.0


@dataclass(frozen=True)
class Credit:
    """Whether a kept fix is credited, the sentence that says what decided it, and its terms:
    the bound's parts before and after (ms per profiled step) and the spread they must clear."""

    credited: bool
    text: str
    before_ms: float
    after_ms: float
    spread_ms: float


def credit(pick: Pick, speedup: Estimate, before: Mapping, after: Mapping) -> Credit:
    """Whether the kept fix ``pick``, measured at ``speedup``, is credited with a gain: its
    interval lies above 1x, or the parts its bound counts (:func:`bound_ms`) fell from the
    diagnosis ``before`` to ``after`` by more than :func:`step_spread_ms`, the larger of the two.

    Raises:
        TypeError, ValueError: for a ``pick`` that is not a Pick, a ``speedup`` that is not an
            Estimate, or reports that are not diagnosis reports.
    """
    check_type("speedup", speedup, Estimate)
    was, now = bound_ms(pick, before), bound_ms(pick, after)
    spread = max(step_spread_ms(before), step_spread_ms(after))
    above = speedup.clear_of(1.0, "x") == "above"
    parts = ("the reads and the loop between them plus communication" if pick.kind == pick.fix == "sync"
             else " + ".join(pick.phases))
    if not pick.phases:
        fell, said = False, "its bound counts no phase"
    else:
        fell = was - now > spread
        said = (f"the parts its bound counts ({parts}) went {was:.1f} -> {now:.1f} ms per profiled step, "
                + (f"a fall of {was - now:.1f} ms, " if now < was else "")
                + f"{'more than' if fell else 'within'} the {spread:.1f} ms the profiled steps' times "
                "spread (standard deviation, the larger window's)")
    interval = f"its interval {'lies above' if above else 'holds'} 1x" if speedup.has_interval else (
        "it has no interval")
    verdict = "credited" if above or fell else "applied, not credited"
    return Credit(above or fell, f"--fix {pick.fix}: {verdict} ({interval}; {said})", was, now, spread)
