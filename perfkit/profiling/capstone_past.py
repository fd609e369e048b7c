"""What decided a capstone round's gain past a bound printed as context (module 08), computed
from the two diagnoses around the fix and the runs before it (:func:`past_bound`, for
:class:`perfkit.profiling.capstone.FixLoop`; not re-exported), and, for the reads' fix, a gain past
the bound of the reads alone that its context names (:func:`past_part`). Split from
:mod:`perfkit.profiling.capstone_explain`, whose :func:`phase_ms` and :func:`window_gain` it reads.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.capstone_explain import phase_ms, window_gain
from perfkit.profiling.capstone_text import Pick
from perfkit.stats import Estimate

__all__: list[str] = []  # past_bound, past_part: capstone.FixLoop's, not re-exported


def _bound_part_ms(pick: Pick, report: Mapping) -> tuple[float, float]:
    """Milliseconds per profiled step of ``report`` in the phases ``pick``'s bound counts, by the bound's
    own definition, and those of its phases it leaves out: for the reads' fix (kind and fix "sync",
    :func:`~perfkit.profiling.capstone_text.reads_pick`) the sync phase less the time that passed with
    a collective in flight, which is the part left out; for any other fix its phases whole, none left out."""
    ms = phase_ms(report)
    total = sum(ms.get(k, 0.0) for k in pick.phases)
    if not (pick.kind == pick.fix == "sync" and "sync" in pick.phases):
        return total, 0.0
    sync = report["shares"].get("sync", 0.0)
    wait = min(report.get("sync_comm_share") or 0.0, sync) * statistics.mean(report["step_times_s"]) * 1e3
    return total - wait, wait


def _sides(each: Sequence[float], bound: float) -> list[str]:
    """``each`` printed at the decimals (2 to 5) that show on which side of ``bound`` each lies."""
    d = 2
    while d < 5 and any(f"{x:.{d}f}" == f"{bound:.{d}f}" for x in each):
        d += 1
    return [f"{x:.{d}f}x" for x in each]


def past_bound(pick: Pick, gain: float, before_report: Mapping, after_report: Mapping | None = None,
               befores_tps: Sequence[float] = (), tokens_x: float = 1.0) -> str:
    """What decided a measured ``gain`` past a bound the round does not judge (context), computed:
    the milliseconds the bound's phases (by the bound's own definition, :func:`_bound_part_ms`; a
    phase part it leaves out is named apart) lost per profiled step against the share of the step the
    runs' ratio removed, the profiled window's gain against the bound, and the fix's ratio against
    each run before alone. The drift between the runs before is named as what carried the gain past
    only where the window stayed within the bound, the phases removed less than the runs did, and
    the bound lies between the ratios against each run before (within it against one); where the
    gain passes the bound against each run before, that is said, and no drift is blamed; ``""`` for a
    gain within the bound.

    Raises:
        TypeError, ValueError: for a ``pick`` that is not a :class:`Pick`, a ``gain``, ``tokens_x``
            or run's tokens/s that is not a finite number > 0, or a report that is not a diagnosis.
    """
    check_type("pick", pick, Pick)
    check_real("gain", gain, 0, lo_open=True)
    for i, t in enumerate(check_items("befores_tps", befores_tps, nonempty=False)):
        check_real(f"befores_tps[{i}]", t, 0, lo_open=True)
    if gain <= pick.bound:
        return ""
    said, fix_small, window_in = [], None, None
    if after_report is not None and pick.phases:
        (b, wb), (a, wa) = (_bound_part_ms(pick, r) for r in (before_report, after_report))
        step = statistics.mean(before_report["step_times_s"]) * 1e3
        fix_small = (b - a) / step < 1 - 1 / gain
        said.append(f"the bound's phases went {b:.1f} -> {a:.1f} ms per profiled step ("
                    + (f"{(b - a) / step:.1%} of a {step:.1f} ms profiled step" if b > a else "none")
                    + f" removed, against the {1 - 1 / gain:.0%} of the step the runs' ratio removed)"
                    + (f", the wait with a collective in flight that it leaves out {wb:.1f} -> {wa:.1f} ms"
                       if wb or wa else ""))
        window = window_gain(before_report, after_report, tokens_x)
        if window is not None:
            window_in = window <= pick.bound
            said.append(f"the profiled window gained {window:.2f}x, "
                        f"{'within' if window_in else 'past'} the bound")
    straddle = None  # whether the bound lies between the fix's ratios against each run before
    if len(befores_tps) > 1:
        each = [gain * statistics.mean(befores_tps) / t for t in befores_tps]
        straddle = min(each) <= pick.bound
        said.append(f"against each run before alone the fix measures {' and '.join(_sides(each, pick.bound))}"
                    ", "
                    + ("within the bound against one of them" if straddle else
                       f"{'both' if len(each) == 2 else 'all'} past the bound, so the drift between the "
                       "runs before did not carry it past"))
    drift = fix_small and window_in and straddle
    d = 2 if f"{gain:.2f}" != f"{pick.bound:.2f}" else 4  # decimals that show the two apart
    return (f"The measured {gain:.{d}f}x lies past this bound's {pick.bound:.{d}f}x "
            "(as context, it is not judged): "
            + ("; ".join(said) or "this round measured nothing that says why") + (
                ": what this round measured points to the drift between the runs before, not the fix, "
                "as what carried it past." if drift else
                (": this run does not tell what carried it past." if said else ".")))


def past_part(pick: Pick, gain: Estimate, before_report: Mapping, after_report: Mapping | None = None) -> str:
    """Where a measured ``gain`` passes ``pick.part_bound`` (the gain bound of the reads alone, which the
    round's context names as what the fix targets) but not the whole bound: that it does, whether its
    interval holds that edge, and how the rest of the bound's phases (communication) moved, computed;
    ``""`` otherwise (no such edge, or a gain within it, or past the whole bound: :func:`past_bound`).

    Raises:
        TypeError: for a ``pick`` that is not a :class:`Pick` or a ``gain`` that is not an Estimate.
    """
    check_type("pick", pick, Pick)
    check_type("gain", gain, Estimate)
    edge = pick.part_bound
    if edge is None or not edge < gain.value <= pick.bound:
        return ""
    d = 2 if f"{gain.value:.2f}" != f"{edge:.2f}" else 4  # decimals that show the two apart
    held = gain.has_interval and gain.low <= edge
    out = (f"The measured {gain.value:.{d}f}x lies past the {edge:.{d}f}x that removing the reads alone "
           "allows" + (f" (its interval, down to {gain.low:.{d}f}x, holds that edge: noise alone can put it "
                       "there)" if held else f" (its whole interval, from {gain.low:.{d}f}x, lies past it)"))
    rest = [k for k in pick.phases if k != "sync"]
    if after_report is None or not rest:
        return out + ": this round does not say where the rest came from."
    b, a = (sum(phase_ms(r).get(k, 0.0) for k in rest) for r in (before_report, after_report))
    return (out + f": the rest of the bound, {' + '.join(rest)}, went {b:.1f} -> {a:.1f} ms per profiled "
            + ("step, the part the fix can remove beside the reads (its own collectives), or drift between "
               "the runs, carried it; this round does not separate the two." if a < b else
               "step, no fall: the phases this round measured do not explain the gain past the reads' edge."))
