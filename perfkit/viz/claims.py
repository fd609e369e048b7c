"""Verdicts on common advice: one line per claim, the summary table of module 09, and its
figures (verdicts counted by status; each speed claim's figure against its promise).

Consumes :class:`perfkit.verdict.ClaimVerdict` records (:func:`perfkit.verdict.assess`);
nothing here measures.

Usage::

    show_claim(assess(claim, measured, spread))
    show_claims_table({"mixed precision": v1, "torch.compile": v2})
    fig = plot_claims_forest({"mixed precision": v1, "torch.compile": v2})   # speedups on one axis
"""

from __future__ import annotations

import html
import json
import textwrap
from collections.abc import Mapping

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit._checks import check_real, check_type
from perfkit.data.claims import PinTiming
from perfkit.estimate import Estimate
from perfkit.verdict import CLAIM_STATUSES, Claim, ClaimVerdict, Prediction, judge
from perfkit.viz.claims_control import control_order_text, control_text
from perfkit.viz.claims_text import (
    bucket_figure,
    bucket_source_text,
    control_gap_text,
    gap_statuses,
    identical_work_reach,
    ops_gap_text,
    order_gap_text,
    others_side_text,
    pair_order_text,
    reweighed_statuses,
    reweighed_text,
    same_work_text,
)
from perfkit.viz.core import tidy, verdict

__all__ = ["CLAIM_MIME", "bucket_figure", "bucket_source_text", "claims_headlines", "claims_table_rows",
           "control_gap_text", "control_order_text",
           "control_text", "floor_context", "identical_work_reach", "reweighed_statuses", "reweighed_text",
           "ops_gap_text", "order_gap_text", "others_side_text",
           "pair_order_text", "plot_claims", "plot_claims_forest", "same_layout_text", "same_work_text",
           "show_claim",
           "show_claims_table",
           "thread_spread_text", "weighed_text", "weighed_verdict"]

CLAIM_MIME = "application/vnd.perfkit.claim+json"
_MARK = {"holds": "✅", "holds partly": "◐", "does not hold here": "❌", "inconclusive": "❔",
         "GPU only": "🖥"}


def _check(verdicts: Mapping[str, ClaimVerdict]) -> None:
    if not isinstance(verdicts, Mapping) or not verdicts:
        raise ValueError("verdicts must be a non-empty mapping of claim name -> ClaimVerdict")
    for k, v in verdicts.items():
        if not isinstance(k, str) or not isinstance(v, ClaimVerdict):
            raise TypeError(f"verdicts[{k!r}] must be a ClaimVerdict under a str name, got "
                            f"{type(v).__name__}")


def show_claim(verdict: ClaimVerdict) -> None:
    """Display one computed verdict on a claim as Markdown, and record it (:data:`CLAIM_MIME`).

    Raises:
        TypeError: if ``verdict`` is not a :class:`~perfkit.verdict.ClaimVerdict`.
    """
    from IPython.display import display

    if not isinstance(verdict, ClaimVerdict):
        raise TypeError(f"verdict must be a perfkit.verdict.ClaimVerdict, got {type(verdict).__name__}")
    display({CLAIM_MIME: json.loads(json.dumps(verdict.record())),
             "text/markdown": f"{_MARK[verdict.status]} {verdict.text}",
             "text/plain": f"[{verdict.status}] {verdict.text}".replace("**", "")}, raw=True)


def claims_table_rows(verdicts: Mapping[str, ClaimVerdict]) -> list[tuple[str, str, str, str]]:
    """(claim, typical statement, measured here, verdict) per claim, in the order given.

    Raises:
        TypeError, ValueError: for an empty mapping or values that are not ClaimVerdicts.
    """
    _check(verdicts)
    return [(name, v.claim.statement, f"{v.claim.figure}: {v.measured_text}"
             + ("; wholly outside the promise, its side of no effect undecided" if v.refuted else "")
             + ("; an edge's side set by less than a tenth of the A/A control's reach" if v.thin else ""),
             v.status)
            for name, v in verdicts.items()]


def show_claims_table(verdicts: Mapping[str, ClaimVerdict], weighed: Mapping[str, str] | None = None,
                      by: str = "") -> None:
    """Display the summary table: claim, typical statement, measured here, verdict; with
    ``weighed`` (name -> the status a timed verdict gets weighed by another error), a last column
    headed ``by`` with it, for the rows it does not name "not timed" (a figure that is no timing) or
    "not judged" (a timing whose verdict does not judge it, as an A/A control standing in for a claim).

    Raises:
        TypeError, ValueError: for an empty mapping or values that are not ClaimVerdicts, or a
            ``weighed`` without a ``by``.
    """
    from IPython.display import display

    if weighed is not None and (not isinstance(weighed, Mapping) or not isinstance(by, str) or not by):
        raise ValueError("weighed must map claim names to statuses, with by naming the column")
    rows = claims_table_rows(verdicts)
    extra = [] if weighed is None else [weighed.get(r[0], "not judged" if verdicts[r[0]].claim.timed
                                                    else "not timed") for r in rows]
    head = "".join(f"<th>{h}</th>" for h in ("claim", "typical statement", "measured here", "verdict",
                                             *([by] if extra else [])))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r[:3])
                   + f"<td><b>{_MARK[r[3]]} {html.escape(r[3])}</b></td>"
                   + (f"<td>{html.escape(extra[i])}</td>" if extra else "") + "</tr>"
                   for i, r in enumerate(rows))
    text = "\n".join(" | ".join([*r, *extra[i:i + 1]]) for i, r in enumerate(rows))
    display({"text/html": f"<table><tr>{head}</tr>{body}</table>", "text/plain": text}, raw=True)


def claims_headlines(verdicts: Mapping[str, ClaimVerdict],
                     reweighed: Mapping[str, tuple[str, str]] | None = None,
                     error: float | None = None) -> dict[str, str]:
    """``{claim: "verdict (measured)"}`` for :func:`perfkit.viz.show_headlines`; a verdict that
    does not hold because its interval lies wholly outside the promise, though undecided on the
    no-effect value (``refuted``), says that its side of no effect is undecided, one whose
    edge was decided by a margin finer than the A/A control measures (``thin``) says so, and a
    verdict whose figure has no bearing on the advice (``judged=False``) says so beside the figure.

    ``reweighed`` (name -> ``(status, status weighed by error)``,
    :func:`~perfkit.viz.claims_text.reweighed_statuses`) with ``error`` (the larger estimate of the
    design's error it was weighed by): where the two statuses differ, the headline states the one
    weighed by ``error``, the more cautious, and names the other beside it.

    Raises:
        TypeError, ValueError: for an empty mapping or values that are not ClaimVerdicts, or a
            ``reweighed`` without an ``error`` that is a finite number >= 0.
    """
    _check(verdicts)
    if reweighed is not None:
        check_type("reweighed", reweighed, Mapping)
        check_real("error", error, 0)
    changed = {n: s for n, s in (reweighed or {}).items() if s[0] != s[1]}
    refuted = ", whatever its side of no effect, which this run cannot tell"
    thin = ", by a margin under a tenth of the A/A control's reach"
    out = {}
    for name, v in verdicts.items():
        if name in changed:
            head = (f"{changed[name][1]} weighed by {error:.1%}, the largest reading of identical work "
                    f"({changed[name][0]} by the A/A control's reach alone)")
        else:
            head = f"{v.status}{refuted if v.refuted else ''}{thin if v.thin else ''}"
        out[name] = (f"{head} (" + ("" if v.judged else "not judged: its figure, ") + v.measured_text
                     + ("" if v.judged else ", says nothing about the advice here") + ")")
    return out


def thread_spread_text(spread: Mapping[int, float], rounds: int) -> str:
    """What the rounds' spreads per thread count (``spread``: threads -> 10th-to-90th percentile
    range over the median, from ``rounds`` rounds each) say about the premise that one compute
    thread is the steadier: which count was the steadiest, computed, and that spreads without an
    interval do not test the premise; where one thread was not the steadiest, that the claims ran
    on one thread all the same.

    Raises:
        ValueError: for a ``spread`` without thread count 1 and another, a spread that is not a
            number >= 0, or ``rounds`` that is not an int >= 1.
    """
    if not isinstance(spread, Mapping) or 1 not in spread or len(spread) < 2:
        raise ValueError(f"spread must map thread counts, 1 and another, to spreads; got {spread!r}")
    for n, v in spread.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"spread[{n!r}] must be a number >= 0, got {v!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    steadiest = min(spread, key=lambda n: (spread[n], n))
    said = ("the premise of this notebook's one compute thread: the rounds' spread over their median, "
            + ", ".join(f"{spread[n]:.0%} with {n} thread{'s' * (n != 1)}" for n in sorted(spread)) + "; ")
    said += ("one thread was the steadiest here, as the premise expects" if steadiest == 1 else
             f"{steadiest} threads were the steadiest here, not one")
    return said + (f"; spreads from {rounds} rounds each carry no interval, so these do not test the premise "
                   "either way" + (
                       "" if steadiest == 1 else "; the claims ran on one thread all the same, their ratios "
                       "from paired rounds, and the A/A control's reach is the measure of their error that "
                       "their verdicts use"))


def same_layout_text(claim: Claim, measured: Estimate, a_s: float, b_s: float, error: float,
                     what: str) -> str:
    """A timed verdict weighed again by a job's own error: two settings that ran the same thing
    (``what``, e.g. two caps that laid out the same buckets) took ``a_s`` and ``b_s`` seconds (their
    medians), so their gap is one reading of that job's error. Says, computed, how it compares with
    ``error`` (the A/A control's reach the verdict was weighed by), which status
    :func:`perfkit.verdict.assess` gives weighed by the gap instead, and, where ``measured``'s
    interval is wider than the gap, that the gap does not bound the job's error.

    Raises:
        TypeError, ValueError: for times that are not finite numbers > 0, or as :func:`assess`.
    """
    gap, base, alt = gap_statuses(claim, measured, error, {"a_s": a_s, "b_s": b_s}, "time > 0 in seconds")
    width = (measured.high - measured.low) / measured.value if measured.has_interval else 0.0
    return (f"{what} ran the same here; their median steps, {a_s * 1e3:.1f} and {b_s * 1e3:.1f} ms, lay "
            f"{1 + gap:.2f}x apart: that gap, {gap:.1%}, is "
            f"{'wider' if gap > error else 'no wider'} than the {error:.1%} the A/A control read; weighed by "
            f"that gap instead, the rule gives {alt}"
            + (" as well." if alt == base else f", not {base}: the label rests on which error is used.")
            + (f" The gap compares two medians only; it does not bound this job's error, which the judged "
               f"interval, {width:.0%} of its figure wide, carries." if width > gap else ""))


_COLOR = {"holds": "#2ca02c", "holds partly": "#bcbd22", "does not hold here": "#d62728",
          "inconclusive": "#7f7f7f", "GPU only": "#1f77b4"}
_REFUTED = _COLOR["inconclusive"]  # the ring of a point that misses the promise, undecided on no effect


def plot_claims(verdicts: Mapping[str, ClaimVerdict]) -> Figure:
    """How the advice fared on this machine: one bar per verdict status, as long as the number
    of claims that got it (counted from the verdicts).

    Raises:
        TypeError, ValueError: if ``verdicts`` is not a non-empty mapping of ClaimVerdicts.
    """
    _check(verdicts)
    by_status = {s: [k for k, v in verdicts.items() if v.status == s] for s in CLAIM_STATUSES}
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(CLAIM_STATUSES) + 1.2))
    ys = range(len(CLAIM_STATUSES))
    counts = [len(by_status[s]) for s in CLAIM_STATUSES]
    ax.barh(ys, counts, color=[_COLOR[s] for s in CLAIM_STATUSES])
    ax.set_yticks(list(ys), CLAIM_STATUSES)
    ax.invert_yaxis()
    ax.set_xlabel("claims")
    ax.set_xlim(0, max(counts + [1]) * 1.1)
    ax.xaxis.get_major_locator().set_params(integer=True)  # counts are whole claims
    ax.set_title(f"{len(verdicts)} verdicts on the advice, measured on this machine")
    fig.tight_layout()  # room for the longest status label
    return tidy(fig)


BAND_MIN = 1.03  # a promise's band is drawn at least this factor either side of its centre


def plot_claims_forest(verdicts: Mapping[str, ClaimVerdict], unit: str = "x") -> Figure:
    """Each claim measured in ``unit`` as one row: what the advice promises (a band from its
    low to its high end, open ends to the axis edge), the measured figure coloured by its
    verdict (one that does not hold, its interval wholly outside the promise but undecided on the
    no-effect value, ``refuted``, ringed in the colour of "inconclusive", with its own legend entry),
    and its interval where it has one; log scale. A dashed tick on a row marks that
    claim's no-effect value (``Claim.partly``: 1x for a speedup) where it names one; a ratio
    whose promise is a multiple (Adam's state at 2x the weights) has none, so no line is drawn
    across every row. A promise narrower than :data:`BAND_MIN` either side of its centre is drawn
    that wide, outlined dotted (the x label says so); the figures are drawn above every line.

    Args:
        verdicts: claim name -> its verdict; those in another unit, and those whose figure has
            no bearing on the advice here (``judged`` False), are left out.
        unit: the unit of the claims drawn (``"x"``: speedups and ratios).

    Raises:
        TypeError, ValueError: for an empty mapping, values that are not ClaimVerdicts, a
            ``unit`` that is not a str, or no claim in ``unit`` with a finite figure above 0.
    """
    import math

    _check(verdicts)
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a str, got {unit!r}")
    rows = [(k, v) for k, v in verdicts.items() if v.claim.unit == unit and v.judged
            and math.isfinite(v.measured) and v.measured > 0]
    if not rows:
        raise ValueError(f"verdicts must hold a claim in unit {unit!r} with a finite figure above 0")
    ends = [e for _, v in rows
            for e in (v.measured, *(v.spread or ()), v.claim.low, v.claim.high, v.claim.partly)
            if e is not None and math.isfinite(e) and e > 0]
    lo, hi = min(ends) / 1.5, max(ends) * 1.5
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.6))  # wide: room for the 1-2-5 tick labels
    for y, (_, v) in enumerate(rows):
        a = v.claim.low if v.claim.low is not None and v.claim.low > 0 else lo
        b = v.claim.high if v.claim.high is not None else hi
        widened = b / a < BAND_MIN ** 2  # a hairline on a log axis: drawn BAND_MIN either side of its centre
        if widened:
            a, b = math.sqrt(a * b) / BAND_MIN, math.sqrt(a * b) * BAND_MIN
        ax.barh(y, b - a, left=a, height=0.6, color="#dddddd", zorder=1, ec="0.45" if widened else "none",
                lw=0.8, ls=":")
        if v.spread is not None:  # a line with a cap at each end: a narrow one still shows beside the dot
            ax.plot(v.spread, [y, y], color=_COLOR[v.status], lw=2, zorder=2)
            for end in v.spread:
                ax.plot([end, end], [y - 0.25, y + 0.25], color=_COLOR[v.status], lw=1.5, zorder=2)
        ax.plot([v.measured], [y], "o", color=_COLOR[v.status], ms=6, mec=_REFUTED if v.refuted else "white",
                mew=1.5 if v.refuted else 0.8, zorder=5)  # above every line; no-effect side undecided: ring
        if v.claim.partly is not None and v.claim.partly > 0:  # this claim's no-effect value
            ax.plot([v.claim.partly] * 2, [y - 0.4, y + 0.4], color="0.3", lw=1, ls="--", zorder=4)  # below
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = [m * 10.0 ** e for e in range(-3, 4) for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    ax.set_xticks(ticks, [f"{t:g}{unit}" for t in ticks])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())  # the 1-2-5 labels only
    ax.set_yticks(range(len(rows)), [textwrap.fill(k, 36) for k, _ in rows], fontsize=8)  # long names wrapped
    ax.invert_yaxis()
    ax.set_xlabel(f"measured here ({unit}, log scale; capped line: its interval)\ngrey band: what the "
                  f"advice promises (one narrower than {BAND_MIN - 1:.0%} either side of its centre is drawn "
                  "that wide, outlined dotted); dashed tick: the claim's no-effect value")
    handles = [plt.Line2D([], [], marker="o", ls="", color=_COLOR[s], label=s) for s in CLAIM_STATUSES
               if any(v.status == s for _, v in rows)]
    if any(v.refuted for _, v in rows):
        handles.append(plt.Line2D([], [], marker="o", ls="", color=_COLOR["does not hold here"], mec=_REFUTED,
                                  mew=1.5, label="does not hold here,\nside of no effect undecided"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the bands
    ax.set_title(f"{len(rows)} verdicts measured in {unit}: the figure and its interval against the promise",
                 fontsize=10)
    fig.tight_layout()
    return tidy(fig)


def weighed_text(control: PinTiming, prediction: Prediction, measured: Estimate) -> str:
    """Where the A/A control's reach (:meth:`PinTiming.reach`) would change a timed prediction's
    outcome, a sentence that says so: the outcome by the course's one rule on ``measured``, and
    on ``measured`` with its interval widened by that reach (:meth:`PinTiming.widened`). Empty
    where it would not, where there is no control (CUDA), or where the prediction cannot fail.

    Raises:
        TypeError: for a ``control`` that is not a PinTiming, a ``prediction`` that is not a
            Prediction, or a ``measured`` that is not an Estimate.
    """
    check_type("control", control, PinTiming)
    check_type("prediction", prediction, Prediction)
    check_type("measured", measured, Estimate)
    reach = control.reach()
    if not reach or not prediction.can_fail():
        return ""
    wide, u = control.widened(measured), prediction.unit
    plain, counted = judge(prediction, measured).outcome, judge(prediction, wide).outcome
    if counted == plain:
        return ""
    return (f"weighed by the A/A control's {reach:.1%} (the interval widened to {wide.low:.3g}{u} to "
            f"{wide.high:.3g}{u}), this prediction would be {counted}, not {plain}: the figure lies within "
            "this design's own error of the prediction's edge")


def floor_context(prediction: Prediction, measured: Estimate, floor: tuple[float, float]) -> str:
    """Where an upper bound is a measured time over a floor (s) that lies at or below the faster
    call's own measured median (s), ``floor`` = ``(floor, median)``, the context line that says the
    bound cannot fail by construction: it is at least the ratio of the two medians, and only that
    ratio's gap to the judged figure could cross it. ``""`` where the floor lies above the median
    (then the bound can fail, and is judged).

    Raises:
        TypeError, ValueError: for a ``prediction`` without an upper bound, a ``measured`` that is not
            an Estimate, or a ``floor`` that is not two times > 0.
    """
    check_type("prediction", prediction, Prediction)
    check_type("measured", measured, Estimate)
    if prediction.high is None or len(floor) != 2 or not all(isinstance(t, (int, float)) and t > 0
                                                               for t in floor):
        raise ValueError(f"need an upper bound and floor = (floor s, median s) > 0, got {floor!r}")
    if floor[0] > floor[1]:
        return ""
    u, ratio = prediction.unit, prediction.high * floor[0] / floor[1]  # dense median over grouped median
    p = prediction
    return (f"**Context, not a prediction** ({p.model}): {p.what}, {p.describe()}. **Measured:** "
            f"{measured.text(u)}. The floor, {floor[0] * 1e3:.3g} ms, lies at or below the "
            f"call's own measured median, {floor[1] * 1e3:.3g} ms (a ceiling is raised to any rate measured "
            f"above it), so the bound is at least the ratio of the two medians, {ratio:.2f}{u}, by "
            "construction: only that ratio's gap to the median of paired ratios could cross it, so it "
            "cannot test the model and is not counted as a prediction.")


def weighed_verdict(control: PinTiming, prediction: Prediction, measured: Estimate,
                    explain: Mapping[str, str] | None = None,
                    floor: tuple[float, float] | None = None) -> None:
    """A timed prediction's verdict by the course's one rule (:func:`perfkit.viz.verdict`), then
    :func:`weighed_text`'s line where the A/A control's reach would change its outcome.
    ``floor``: ``(floor s, median s)`` of an upper bound that is a time over a floor; where
    :func:`floor_context` says it cannot fail, that context line is shown instead, no verdict.

    Raises:
        TypeError: as :func:`weighed_text`, before anything is shown.
    """
    said = "" if floor is None else floor_context(prediction, measured, floor)
    if said:
        from IPython.display import display

        display({"text/markdown": f"ℹ️ {said}", "text/plain": f"[context] {said}".replace("**", "")}, raw=True)
        return
    line = weighed_text(control, prediction, measured)
    verdict(prediction, measured, explain=explain)
    if line:
        print(line)
