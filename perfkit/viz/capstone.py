"""The capstone's plots: a waterfall of measured speedups, and loss against time.

Consumes numbers the capstone notebook measured (``examples/slow_train.py`` runs, played by
``perfkit.profiling.capstone.FixLoop``); nothing here measures.

Usage::

    fig = plot_waterfall([("data", 1.9), ("ddp", 1.3), ("batch", 2.4)], total=4.5)  # 5.93x, then 0.76x drift
    fig = plot_time_to_target({"slow": (seconds, losses), "fast": (seconds2, losses2)}, 5.0)
    more = show_round(loop.play())  # one round's heading and figures (the notebook judges them)
    print(total_text(loop.finish()))  # the direct gain against the rounds' product
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.capstone import Round, Total
from perfkit.profiling.capstone_text import WIDENED, WIDENED_COVERS, Pick
from perfkit.stats import Estimate
from perfkit.units import si_beside, si_interval
from perfkit.verdict import Prediction
from perfkit.viz.capstone_tally import context_outcome, repeats_text, round_context, tally_text
from perfkit.viz.capstone_target import ceiling_text, headline_rate, plot_runs, target_context, target_text
from perfkit.viz.core import tidy

__all__ = [
    "ceiling_text", "context_outcome", "headline_rate", "cumulative_speedups", "dropped_text", "pick_text",
    "plot_runs", "plot_time_to_target", "plot_waterfall", "round_context", "round_prediction", "round_text",
    "runs_text", "seams_text",
    "show_pick", "show_round", "tally_text", "target_context", "target_text", "total_text", "waterfall_shares"
]

_UP, _DOWN, _TOTAL, _FLAT, _DRIFT_COLOR = "#2ca02c", "#d62728", "#1f77b4", "#b0b0b0", "#ff7f0e"
_WITHIN = "#b7dfb0"  # a gain whose interval lies above 1x, but no larger than its runs before lay apart
DRIFT = "drift"  # the waterfall's bar for the direct gain over the rounds' product (short: a rotated
# long label reaches under the bar before it, and the overlap tidying hides that bar's label)


def cumulative_speedups(steps: Sequence[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """``(name, before, after)`` per fix: the running product of the measured speedups.

    Args:
        steps: ``(fix name, measured speedup)`` in the order the fixes were applied; a
            speedup below 1 is a fix that made the step slower.

    Raises:
        TypeError, ValueError: for an empty ``steps``, a name that is not a non-empty str or
            a speedup that is not a finite number > 0.
    """
    out, total = [], 1.0
    for i, item in enumerate(check_items("steps", steps)):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(f"steps[{i}] must be a (name, speedup) pair, got {item!r}")
        name, gain = item
        if not isinstance(name, str) or not name:
            raise TypeError(f"steps[{i}] name must be a non-empty str, got {name!r}")
        check_real(f"steps[{i}] speedup", gain, 0, lo_open=True)
        out.append((name, total, total * gain))
        total *= gain
    return out


def waterfall_shares(steps: Sequence[tuple[str, float]], total: float) -> list[tuple[str, float]]:
    """Each fix's share of ``total``: its speedup's logarithm over the sum of all of theirs,
    as a factor (the factors multiply to ``total``); the speedups unchanged where ``total``
    cannot be split that way (their product is 1, or on the other side of 1 from ``total``).

    Raises:
        TypeError, ValueError: for bad ``steps`` (see :func:`cumulative_speedups`) or a
            ``total`` that is not a finite number > 0.
    """
    bars = cumulative_speedups(steps)
    check_real("total", total, 0, lo_open=True)
    logs = [math.log(hi / lo) for _, lo, hi in bars]
    k = math.log(total) / sum(logs) if sum(logs) else -1.0
    if k <= 0:
        return list(steps)
    return [(name, math.exp(x * k)) for (name, *_), x in zip(bars, logs, strict=True)]


def plot_waterfall(steps: Sequence[tuple[str, float]], title: str = "",
                   unit: str = "tokens/s", total: float | None = None,
                   unresolved: Sequence[str] | None = None,
                   intervals: Sequence[tuple[float, float]] | None = None,
                   total_interval: tuple[float, float] | None = None,
                   drifted: Sequence[str] = ()) -> Figure:
    """Each fix's measured speedup as a bar from the running product before it to after it (log
    scale, so equal factors get equal heights), labelled with that speedup; with ``total`` (the
    whole gain measured directly), the drift between runs, ``total`` over the rounds' product
    (what the seams between the rounds moved), as a bar of its own where it shows at two
    decimals, and the total as the last bar. No measured figure is spread over the fixes.

    Args:
        steps: ``(fix name, measured speedup)`` in the order applied.
        title: the figure's title.
        unit: what the speedup is of (the y label).
        total: the whole gain measured directly (``None``: the rounds' product is the total).
        unresolved: the fixes applied but not credited (:attr:`FixLoop.credited`: an interval
            that holds 1x, and the parts of the step its bound counts fell by no more than the
            profiled steps' spread, :func:`~perfkit.profiling._capstone_credit.credit`): drawn grey
            and labelled so, since the run cannot tell their gain from none; the other gains are
            then credited ones (``None``: none judged). A legend below the axes names the colours.
        intervals: each step's speedup interval ``(low, high)``, in the order of ``steps``: drawn
            as a line through the bar's top, from the running product before it times ``low``
            to it times ``high`` (``None``, or ``low == high``, an estimate without interval: none
            drawn; the drift bar has none).
        total_interval: ``total``'s interval ``(low, high)``, drawn the same way on its bar.
        drifted: the fixes whose gain lies no further from 1x than their round's runs before lay
            apart (:attr:`~perfkit.profiling.capstone_text.Round.within_drift`): a gain not shown
            as one, drawn pale green and labelled "within the runs' drift" (where not grey).

    Raises:
        TypeError, ValueError: for bad ``steps`` (see :func:`cumulative_speedups`), a
            ``title``/``unit`` that is not a str, a bad ``total``, or ``unresolved`` naming
            a fix that is not among the steps, or ``intervals`` not one ``(low, high)`` per step
            with ``0 < low <= high``.
    """
    bars = cumulative_speedups(steps)
    spans = [] if intervals is None else list(intervals)
    if intervals is not None and (len(spans) != len(bars) or not all(
            isinstance(x, tuple | list) and len(x) == 2 and 0 < x[0] <= x[1] for x in spans)):
        raise ValueError(f"intervals must be one (low, high) per step, 0 < low <= high, got {intervals!r}")
    if total_interval is not None and not (isinstance(total_interval, tuple | list)
                                           and len(total_interval) == 2
                                           and 0 < total_interval[0] <= total_interval[1]):
        raise ValueError(f"total_interval must be (low, high), 0 < low <= high, got {total_interval!r}")
    check_type("title", title, str)
    check_type("unit", unit, str)
    direct = total is not None
    if direct:
        check_real("total", total, 0, lo_open=True)
    judged = unresolved is not None
    unresolved = () if unresolved is None else unresolved
    if isinstance(unresolved, str) or not isinstance(unresolved, Sequence):
        raise TypeError(f"unresolved must be a list of fix names, got {unresolved!r}")
    if isinstance(drifted, str) or not isinstance(drifted, Sequence):
        raise TypeError(f"drifted must be a list of fix names, got {drifted!r}")
    if unknown := [n for n in (*unresolved, *drifted) if n not in {b[0] for b in bars}]:
        raise ValueError(f"unresolved and drifted must name fixes among the steps, got {unknown}")
    drifted = [n for n in drifted if n not in unresolved]  # grey says more: no gain shown at all
    product = bars[-1][2]
    total = product if total is None else total
    drift = f"{total / product:.2f}" != "1.00"  # as labelled: a bar that would read 1.00x is left out
    if drift:
        bars.append((DRIFT, product, total))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.2 * len(bars) + 2.6), 4.3))  # room for a long title
    names = [b[0] for b in bars] + ["total"]
    legend = {_UP: "a gain: interval above 1x, or its bound's parts fell past the steps' spread" if judged
              else "faster",
              _FLAT: "applied, not credited: interval holds 1x, its bound's parts within the steps' spread",
              _WITHIN: "a gain, but no larger than its runs before lay apart",
              _DOWN: "slower", _DRIFT_COLOR: "drift between runs (the seams), not a fix",
              _TOTAL: "total" + (", measured directly" if direct else "")}
    used = [_TOTAL]
    for i, (name, lo, hi) in enumerate(bars):
        color = (_DRIFT_COLOR if name == DRIFT else _FLAT if name in unresolved
                 else _WITHIN if name in drifted else _UP if hi >= lo else _DOWN)
        used.append(color)
        ax.bar(i, math.log2(hi) - math.log2(lo), bottom=math.log2(lo), color=color, width=0.6)
        if i:  # the connector from the previous bar's top
            ax.plot([i - 1.3, i - 0.3], [math.log2(lo)] * 2, color="0.5", lw=0.8)
        label = f"{hi / lo:.2f}x" + ("\nnot credited" if name in unresolved else
                                     "\nwithin the runs' drift" if name in drifted else "")
        if i < len(spans) and spans[i][0] < spans[i][1]:  # the round's interval, through the bar's top
            ax.plot([i, i], [math.log2(lo * spans[i][0]), math.log2(lo * spans[i][1])], color="black", lw=1.2)
        top_i = max(lo, hi, lo * spans[i][1]) if i < len(spans) else max(lo, hi)
        ax.annotate(label, (i, math.log2(top_i)), ha="center", va="bottom",
                    xytext=(0, 2), textcoords="offset points", fontsize=9)
    n = len(bars)
    ax.bar(n, math.log2(total), color=_TOTAL, width=0.6)
    if total_interval is not None and total_interval[0] < total_interval[1]:
        ax.plot([n, n], [math.log2(x) for x in total_interval], color="black", lw=1.2)
    ax.annotate(f"{total:.2f}x", (n, max(0.0, math.log2(total))), ha="center", va="bottom",
                xytext=(0, 2), textcoords="offset points", fontsize=9, fontweight="bold")
    ax.axhline(0, color="0.3", lw=0.8)
    ends = [math.log2(b[1] * x) for b, sp in zip(bars, spans) for x in sp]
    ends += [math.log2(x) for x in total_interval or ()]
    top = max(max(math.log2(b[2]) for b in bars), math.log2(product), math.log2(total), 0.0, *ends)
    bottom = min(min(math.log2(b[2]) for b in bars), 0.0, *ends)
    ax.set_ylim(bottom - 0.2, top + 0.6)
    ticks = range(math.ceil(bottom - 0.2), math.floor(top + 0.6) + 1)  # within the limits: none widens them
    ax.set_yticks(list(ticks), [f"{2.0 ** t:g}x" for t in ticks])
    ax.set_xticks(range(n + 1), names, rotation=20, ha="right")
    ax.set_ylabel(f"speedup of {unit} (log scale)")
    ax.set_title(title or "Measured speedup of each fix, cumulative")
    handles = [Patch(color=c, label=legend[c]) for c in legend if c in used]
    if any(a < b for a, b in [*spans, *([total_interval] if total_interval else [])]):
        handles.append(Line2D([], [], color="black", lw=1.2, label="its interval, as printed"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(len(handles), 3),
              fontsize=8, frameon=False)  # below the axes: it covers no bar
    fig.tight_layout()
    return tidy(fig)


def plot_time_to_target(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                        target: float, title: str = "", ylabel: str = "training loss") -> Figure:
    """Loss against wall-clock seconds for each run, with the target loss as a line.

    Args:
        curves: run name -> ``(seconds at each step's end, loss at that step)``.
        target: the target loss.
        title: the figure's title.
        ylabel: what the loss is (the job's own smoothing, say).

    Raises:
        TypeError, ValueError: for an empty ``curves``, curves of unequal or zero length,
            a ``target`` that is not a finite number, or a ``title``/``ylabel`` that is not a str.
    """
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves must be a non-empty mapping of run name -> (seconds, losses)")
    for k, v in curves.items():
        if not isinstance(v, tuple | list) or len(v) != 2 or len(v[0]) != len(v[1]) or not v[0]:
            raise ValueError(f"curves[{k!r}] must be (seconds, losses) of equal, non-zero length")
    check_real("target", target)
    check_type("title", title, str)
    check_type("ylabel", ylabel, str)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, (t, loss) in curves.items():
        ax.plot(t, loss, label=name, lw=1.2)
    ax.axhline(target, color="0.3", ls="--", lw=0.8, label=f"target {target:g}")
    ax.set_xscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # "2", not "2x10^0": seconds read as numbers
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    ax.set_xlabel("seconds (log scale)")
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "Time to the target loss")
    fig.tight_layout()
    return tidy(fig)


def runs_text(tps: Sequence[float]) -> str:
    """``": 5,997 and 4,927, 1.22x apart, so ..."``: the runs of one configuration behind a mean,
    and, when they lie more than a tenth apart, that the machine's speed moved between them."""
    lo, hi = min(tps), max(tps)
    return (f": {' and '.join(f'{t:,.0f}' for t in tps)}"
            + (f", {hi / lo:.2f}x apart, so the machine's speed moved between the runs more than a tenth, "
               "and the interval is widened to the ratio against each" if hi > 1.1 * lo else ""))


def round_text(r: Round) -> str:
    """The Markdown heading and figures of one round: the fix, tokens/s before and after,
    and the measured speedup with its interval (the one the verdict judges)."""
    check_type("r", r, Round)
    before = ("the configuration before, mean of its runs before and after this one"
              if r.befores > 1 else "the configuration before, its one run")
    if len(r.befores_tps) > 1:
        before += runs_text(r.befores_tps)
    return (("" if r.announced else pick_text(r.number, r.pick, r.description, with_bound=False))
            + f"Tokens/s {r.before_tps:,.0f} ({before}) -> {r.after_tps:,.0f}: **{r.speedup.point('x')}** "
            f"({r.speedup.describe('x')})."
            + (f" Each such interval, {WIDENED.lstrip(', ')}, here and below: {WIDENED_COVERS}."
               if r.number == 1 and r.speedup.method.endswith(WIDENED) else "")
            + ("" if r.kept else " " + dropped_text(r.pick.fix, r.speedup, False) + "; the next round starts "
               "from the configuration before it."))


def round_prediction(pick: Pick) -> Prediction:
    """What a round whose bound can test its fix predicts: its tokens/s speedup between 1x (expected,
    not a bound) and the bound."""
    check_type("pick", pick, Pick)
    return Prediction(f"tokens/s speedup of --fix {pick.fix}", pick.model, low=1.0, high=pick.bound,
                      unit="x", soft=("low",))


def pick_text(number: int, pick: Pick, description: str = "", with_bound: bool = True) -> str:
    """A round's Markdown heading and, with ``with_bound``, its prediction as set before its runs
    (:meth:`~perfkit.profiling.capstone.FixLoop.play`'s ``announce``): the range its verdict
    judges, or, for a bound that cannot test the fix (``pick.untested``), the bound as context."""
    check_type("pick", pick, Pick)
    head = (f"### Round {number}: {pick.kind} -> `--fix {pick.fix}`\n\n"
            + (f"{description}. " if description else ""))
    if not with_bound:
        return head
    if pick.untested:
        return head + ("**Its bound, set before its runs** (context, not a prediction: why it cannot test "
                       "the fix is said after them): " + ("no finite bound." if pick.void else
                                                          f"at most {pick.bound:.3g}x."))
    p = round_prediction(pick)
    return head + (f"**Predicted before its runs:** {p.what}, {p.describe()}; its model is set out in the "
                   "verdict.")


def show_pick(number: int, pick: Pick, description: str = "") -> None:
    """Show :func:`pick_text`: ``FixLoop.play(announce=show_pick)``."""
    from IPython.display import Markdown, display

    display(Markdown(pick_text(number, pick, description)))


def dropped_text(fix: str, gain: Estimate, with_interval: bool = True) -> str:
    """Why the loop dropped ``fix``, measured at ``gain`` with its median below 1x: where the
    interval holds 1x, the run cannot tell the fix from no change, and the drop is the loop's rule
    (a fix is kept only where its median gained), not a measured slowdown. ``with_interval``:
    print the interval (``False`` where the sentence before printed it).

    Raises:
        TypeError: for a ``fix`` that is not a str or a ``gain`` that is not an Estimate.
    """
    check_type("fix", fix, str)
    check_type("gain", gain, Estimate)
    measured = gain.text("x") if with_interval else gain.point("x")
    if gain.clear_of(1.0, "x") == "below":
        return f"--fix {fix} measured {measured}, slower beyond its interval: dropped"
    why = ("its interval holds 1x, so this run cannot tell it from no change" if gain.has_interval else
           "it has no interval, so this run cannot tell it from no change")
    return (f"--fix {fix} measured a median of {measured}: {why}; dropped by the loop's rule (a fix is kept "
            "only where its median gained), not shown to slow the job")


def every_run_text(t: Total) -> str:
    """For :func:`total_text`: where the fixed job's ratio against each run of the slow job, the
    rounds' repeats of it included, lies against the direct gain's interval as printed (a sentence
    starting with a space); ``""`` without an interval or with no run beyond those it was built on."""
    d, runs = t.direct, t.every_slow_tps
    if not d.has_interval or d.low == d.high or len(runs) <= len(t.slow_runs_tps):
        return ""
    ratios = [t.fixed_tps / x for x in runs]
    out = [x for x in ratios if d.clear_of(x, "x")]
    _, lo, hi = si_interval(d.value, d.low, d.high, "x")
    verb = "lies" if len(out) == 1 else "lie"
    said = (f"{len(out)} of these {verb} outside this {d.label} ({lo} to {hi}), which counts the steps "
            "of the runs it was built on, not how far runs of this job move between each other"
            if out else f"each lies inside this {d.label} ({lo} to {hi})")
    return (f" The slow job ran {len(runs)} times in all (" + ", ".join(f"{x:,.0f}" for x in runs)
            + " tokens/s, the rounds' repeats of it included): against each alone the fixed job measures "
            + ", ".join(si_beside(x, d.value, d.low, d.high, "x") for x in ratios) + f"; {said}.")


def total_text(t: Total) -> str:
    """The whole gain, measured directly, against the product of the rounds' speedups: whether
    they agree within their intervals, and when they do not, by how much and why."""
    check_type("t", t, Total)
    p, d = t.product, t.direct
    point, low, high = si_interval(p.value, p.low, p.high, "x")  # the product at its interval's precision
    runs = (f" (mean of its runs before and after the rounds{runs_text(t.slow_runs_tps)})"
            if len(t.slow_runs_tps) > 1 else "")
    out = (f"Slow job {t.slow_tps:,.0f}{runs} -> fixed {t.fixed_tps:,.0f} tokens/s: **{d.point('x')}** "
           f"({d.describe('x')}).{every_run_text(t)} The {t.kept} kept rounds' speedups multiply to ")
    if not t.repeated:
        return out + (f"{p.value:.2f}x: each round's run after is the next round's run before, so the two "
                      "are the same runs.")
    out += (f"{point} ({low} to {high}: the rounds' intervals combined, a range of no stated confidence, "
            "since each round's interval, widened, covers an unknown share above the one it prints)"
            + seams_text(t))
    bars = (" The figure draws each fix at its speedup as measured in its round, and the direct gain over "
            "the product, the drift between runs, as a bar of its own.")
    if not t.drift:
        return out + " The two agree within their ranges." + _selected(t) + bars
    apart = max(p.value / d.value, d.value / p.value)
    return out + (f" The product lies {apart:.2f}x {'below' if p.high < d.low else 'above'} "
                  "the direct gain, beyond both ranges: each round compares runs a minute apart, and what "
                  "changed between rounds (the load, or a repeat run slower than the run it repeats) "
                  "compounds in the product." + _selected(t) + " The headline is the direct gain." + bars)


def _selected(t: Total) -> str:
    """Beside drift, where the product lies above the direct gain: the selection of the kept rounds."""
    return (" Beside drift, selection lifts the product: the loop keeps a fix whose median gained, so the "
            "kept rounds are selected for reading high (the winner's curse), which puts their product above "
            "the direct gain even with no drift." if t.product.value > t.direct.value else "")


def seams_text(t: Total) -> str:
    """Why the rounds' product is not the direct ratio, in the run's numbers: each configuration's
    tokens/s in the two comparisons it joined (:attr:`Total.seams`), read as every ``a -> b`` of
    the course is (``b / a``): their ratios multiply to exactly the direct ratio over the
    product. Empty without seams.

    Raises:
        TypeError: for ``t`` that is not a :class:`~perfkit.profiling.capstone.Total`.
    """
    check_type("t", t, Total)
    if not t.seams:
        return ""
    moved = math.prod(b / a for _, a, b in t.seams)
    cancel = f"{moved:.2f}" == "1.00"  # as printed: the seams leave the product where the direct ratio is
    return (("; the seams between the comparisons, where one configuration's tokens/s is read twice, "
             "cancel: " if cancel else
             "; it differs from the direct ratio by exactly the seams between the comparisons, where one "
             "configuration's tokens/s is read twice: ") + ", ".join(
                f"{name if name.startswith('the ') else 'after --fix ' + name} {a:,.0f} -> {b:,.0f}"
                for name, a, b in t.seams)
            + " (each kept configuration as its round's \"after\", then as the next round's \"before\", the "
            "mean of that run and its repeat; the slow job in the direct ratio, then as the \"before\" of "
            "the first kept round" + (f", that of --fix {t.seams[1][0]}" if len(t.seams) > 1 else "")
            + "). Their "
            f"ratios, second over first, multiply to {moved:.3g}x, the direct gain over the product"
            + (", so the two agree although single seams moved." if cancel else "." + repeats_text(t)))


def show_round(r: Round | None) -> bool:
    """Show one played round's heading and figures (:func:`round_text`); ``False`` for
    ``None``, the loop's answer when nothing is left to fix."""
    if r is None:
        print("Nothing left to fix: the loop has applied, or tried and dropped, every fix the findings "
              "name (the last diagnosis, below, lists what it still finds).")
        return False
    from IPython.display import Markdown, display

    display(Markdown(round_text(r)))
    return True
