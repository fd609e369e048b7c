"""Plots of notebook 14 (saving and failures): what a save blocks, one failure and restart as a
timeline, the goodput model against the checkpoint interval, and a widget that redraws it.

Usage::

    fig = plot_save_costs(costs)                           # perfkit.saving.save_costs
    fig = plot_restart_timeline(restart_timeline(run.events))
    fig = plot_goodput(goodput_curve(save_s=0.5, restart_s=20.0, mtbf_s=600.0))
    spec = goodput_widget(save_s=0.5, restart_s=20.0)      # build_widget(spec)
    print(verdict_kinds({"sync floor": p_sync, "atomic": p_atomic}, verdicts=viz.shown_verdicts()))
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from perfkit._checks import check_real, check_type
from perfkit.saving.experiments import GoodputCurve, SaveCosts, goodput_curve
from perfkit.saving.interval import goodput
from perfkit.saving.restart_experiments import PART_NAMES
from perfkit.units import si
from perfkit.verdict import KINDS as VERDICT_KINDS
from perfkit.verdict import Prediction, Verdict
from perfkit.viz.core import FloatControl, LogControl, WidgetSpec

__all__ = ["PART_COLORS", "goodput_view", "goodput_widget", "plot_goodput", "plot_restart_timeline",
           "plot_save_costs", "verdict_kind", "verdict_kinds"]

# each kind of verdict, as :func:`verdict_kind` names it, in the order a summary lists them
KINDS = (*VERDICT_KINDS, "re-judged")

PART_COLORS = {"training (attempt 0)": "#4c72b0", "rendezvous": "#c44e52",
               "start_and_imports": "#dd8452", "join": "#8172b3", "build": "#937860",
               "load": "#55a868", "first_step": "#da8bc3", "training (resumed)": "#4c72b0"}


def plot_save_costs(costs: SaveCosts, ax: Axes | None = None) -> Axes:
    """Each mode's blocked seconds (the median, its interval as an error bar, every round as
    a dot) beside its persist time, with the two models as lines: state bytes over the write
    bandwidth (the sync save's floor, drawn across its group only), and the staging copy's
    floor. The legend lies below the axes, clear of the bars.

    Raises:
        TypeError: ``costs`` not a :class:`perfkit.saving.SaveCosts`.
    """
    check_type("costs", costs, SaveCosts)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.4))
    modes = list(costs.blocked_s)
    for i, m in enumerate(modes):
        e = costs.blocked(m)
        lo, hi = (e.low, e.high) if e.has_interval else (e.value, e.value)
        ax.bar(i - 0.2, e.value, 0.4, color="#c44e52", label="blocked the step" if i == 0 else None)
        ax.errorbar(i - 0.2, e.value, yerr=[[e.value - lo], [hi - e.value]], color="black", capsize=3)
        ax.plot([i - 0.2] * len(costs.blocked_s[m]), costs.blocked_s[m], ".", color="black", ms=3)
        ax.bar(i + 0.2, sorted(costs.persist_s[m])[len(costs.persist_s[m]) // 2], 0.4, color="#4c72b0",
               label="persist: files written (inside the blocked time for sync)" if i == 0 else None)
    # the write's floor bounds the sync save alone (a thread save writes behind the step): drawn
    # across the sync group only, so a thread bar below it does not read as a floor beaten
    at = [i for i, m in enumerate(modes) if m == "sync"]
    ends = (at[0] - 0.45, at[0] + 0.45) if at else ax.get_xlim()
    ax.hlines(costs.sync_model_s, *ends, color="grey", ls="--", lw=1,
              label=f"sync's floor: bytes / write bandwidth ({costs.sync_model_s * 1e3:.3g} ms)")
    ax.axhline(costs.staging_floor_s, color="grey", ls=":", lw=1.5,
               label=f"staging floor: 2 x bytes / {si(costs.copy_bytes_per_s, 'B/s')}, the fastest "
                     f"copy seen near this size ({costs.staging_floor_s * 1e3:.3g} ms)")
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel("seconds per save")
    ax.set_title(f"A save of {costs.state_bytes / 1e6:.3g} MB: what blocks, what runs behind", fontsize=9)
    # below the axes: inside, it covered the bars, and its red swatch vanished on the red bar
    ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return ax


def plot_restart_timeline(spans: Sequence[tuple[int, str, float, float]], ax: Axes | None = None) -> Axes:
    """One row per rank: training, then the restart's parts from the kill (a red line) to the
    first resumed step, then training again (:func:`perfkit.saving.restart_timeline`'s spans).

    Raises:
        TypeError, ValueError: ``spans`` not a non-empty sequence of (rank, label, start, end).
    """
    if isinstance(spans, str) or not isinstance(spans, Sequence) or not spans:
        raise TypeError("spans must be a non-empty sequence of (rank, label, start_s, end_s)")
    for i, s in enumerate(spans):
        if not (isinstance(s, tuple) and len(s) == 4 and s[1] in PART_COLORS):
            raise ValueError(f"spans[{i}] must be (rank, label, start_s, end_s) with a label of "
                             f"{list(PART_COLORS)}, got {s!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2.4))
    ranks = sorted({s[0] for s in spans})
    drawn = set()
    for rank, label, a, b in spans:
        shown = label in drawn or label.startswith("training (res")  # one legend entry each
        name = "training" if label.startswith("training") else PART_NAMES[label]  # before and after
        ax.barh(rank, b - a, left=a, color=PART_COLORS[label], edgecolor="white", linewidth=0.5,
                label=None if shown else name)
        drawn.add(label)
    kill = min(a for _, label, a, _ in spans if label == "rendezvous")
    ax.axvline(kill, color="red", lw=1.5)
    ax.text(kill, -0.6, " SIGKILL", color="red", fontsize=8, va="bottom")
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_ylim(max(ranks) + 0.6, -0.7)
    ax.set_xlabel("seconds since the first worker started")
    ax.set_title("One failure and restart under torchrun --max-restarts", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def plot_goodput(curve: GoodputCurve, measured: Sequence[tuple[float, float]] = (), ax: Axes | None = None,
                 unit_s: float = 1.0, unit: str = "s") -> Axes:
    """The goodput model against the interval (log axis), with Young's, Daly's and the grid's
    best interval marked; ``measured`` points ``(tau_s, goodput)`` are drawn over it.

    Raises:
        TypeError: ``curve`` not a :class:`perfkit.saving.GoodputCurve`.
        ValueError: ``unit_s`` not > 0.
    """
    check_type("curve", curve, GoodputCurve)
    check_real("unit_s", unit_s, 0, lo_open=True)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot([t / unit_s for t in curve.tau_s], curve.goodput, color="#4c72b0",
            label="model 1 - δ/τ - (τ/2 + R)/M, floored at 0")  # the model goes below 0 at small τ
    for tau, name, ls in ((curve.young_s, "Young", "--"), (curve.daly_s, "Daly", ":")):
        ax.axvline(tau / unit_s, color="grey", ls=ls, lw=1, label=f"{name}: {tau / unit_s:.3g} {unit}")
    ax.plot([curve.best_s / unit_s], [curve.best_goodput], "o", color="#c44e52",
            label=f"model's best on the grid: {curve.best_goodput:.1%}")
    if measured:
        ax.plot([t / unit_s for t, _ in measured], [g for _, g in measured], "s", color="black",
                label="measured")
    ax.set_xscale("log")
    ax.set_ylim(max(0.0, min(curve.goodput) - 0.05), 1.0)
    ax.set_xlabel(f"checkpoint interval τ ({unit} of training between saves)")
    ax.set_ylabel("goodput (share of wall time kept)")
    ax.set_title(f"δ = {curve.save_s:.3g} s per save, R = {curve.restart_s:.3g} s, "
                 f"MTBF M = {curve.mtbf_s:.3g} s", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="lower center")
    return ax


def goodput_view(mtbf_h: float, checkpoint_gb: float, bandwidth_gb_per_s: float,
                 restart_min: float) -> GoodputCurve:
    """The goodput curve for an MTBF in hours, a checkpoint in GB written at GB/s and a
    restart in minutes (the widget's pure function).

    Raises:
        TypeError, ValueError: an argument not a finite number > 0 (restart >= 0).
    """
    check_real("mtbf_h", mtbf_h, 0, lo_open=True)
    check_real("checkpoint_gb", checkpoint_gb, 0, lo_open=True)
    check_real("bandwidth_gb_per_s", bandwidth_gb_per_s, 0, lo_open=True)
    check_real("restart_min", restart_min, 0)
    return goodput_curve(checkpoint_gb / bandwidth_gb_per_s, restart_min * 60.0, mtbf_h * 3600.0)


def goodput_widget(mtbf_h: float = 3.1, checkpoint_gb: float = 5670.0, bandwidth_gb_per_s: float = 2000.0,
                   restart_min: float = 10.0) -> WidgetSpec:
    """Sliders for the MTBF (hours), the checkpoint's size (GB), the storage's bandwidth (GB/s)
    and the restart cost (minutes); draws the goodput curve and its best interval. The defaults
    are Llama 3 405B's run (``perfkit.plan.failures``); pass this machine's figures instead.
    """
    def show(mtbf_h: float, checkpoint_gb: float, bandwidth_gb_per_s: float, restart_min: float) -> Figure:
        curve = goodput_view(mtbf_h, checkpoint_gb, bandwidth_gb_per_s, restart_min)
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        plot_goodput(curve, ax=ax, unit_s=60.0, unit="min")
        # the title names Daly's interval and the model's goodput there: the figures perfkit.plan prints
        at_daly = goodput(curve.daly_s, curve.save_s, curve.restart_s, curve.mtbf_s)
        ax.set_title(f"save {curve.save_s:.3g} s, restart {restart_min:.3g} min, MTBF {mtbf_h:.3g} h: "
                     f"save every {curve.daly_s / 60:.3g} min (Daly), goodput {at_daly:.1%}", fontsize=9)
        fig.tight_layout()
        return fig

    return WidgetSpec(show, {"mtbf_h": LogControl(-1, 2, mtbf_h, description="MTBF (h)"),
                             "checkpoint_gb": LogControl(-1, 4, checkpoint_gb, description="checkpoint (GB)"),
                             "bandwidth_gb_per_s": LogControl(-1, 4, bandwidth_gb_per_s,
                                                              description="bandwidth (GB/s)"),
                             "restart_min": FloatControl(0.0, 60.0, restart_min, step=0.5,
                                                         description="restart (min)")},
                      title="How often to save: the goodput curve and its best interval")


def verdict_kind(p: Prediction, again: bool = False) -> str:
    """What kind of evidence a verdict on ``p`` is, from how ``p`` was built, one rule:
    ``"re-judged"`` where ``again`` (it judges a figure an earlier verdict judged); otherwise
    :meth:`perfkit.verdict.Prediction.kind`: ``"stored run"`` for a figure not measured in this
    run; ``"exact check"`` where its bounds, clipped to the physical range, leave one value;
    ``"test"`` for a window (a point with a tolerance > 0, or both a low and a high edge);
    ``"floor"`` for a low edge alone, ``"ceiling"`` for a high edge alone (a bound tests little
    where the figure lies far from it).

    Raises:
        TypeError: ``p`` not a :class:`~perfkit.verdict.Prediction` or ``again`` not a bool.
    """
    check_type("p", p, Prediction)
    check_type("again", again, bool)
    return "re-judged" if again else p.kind()


def verdict_kinds(predictions: Mapping[str, Prediction], again: Collection[str] = (),
                  verdicts: Sequence[Verdict] | None = None, names: bool = True) -> str:
    """One line: the verdicts on ``predictions`` (a short name -> its Prediction) counted by
    :func:`verdict_kind`, each kind with its names (``names``), so a reader sees how many are
    tests (``names=False``: the counts alone, for a headline). ``again`` names those that judge a
    figure an earlier verdict judged. With
    ``verdicts`` (those shown, :func:`perfkit.viz.shown_verdicts`), the line counts the held
    ones by kind and says how many of them were tests, and names any that did not hold: a
    count of held verdicts is not a count of tests.

    Raises:
        TypeError, ValueError: ``predictions`` empty or not Predictions, ``again`` naming
            one it does not hold, ``verdicts`` not Verdicts or judging none of a prediction.
    """
    check_type("predictions", predictions, Mapping)
    if not predictions:
        raise ValueError("predictions must name at least one Prediction")
    unknown = [n for n in again if n not in predictions]
    if unknown:
        raise ValueError(f"again must name predictions given, got {unknown!r}")
    for n, p in predictions.items():
        check_type(f"predictions[{n!r}]", p, Prediction)
    outcome = dict.fromkeys(predictions, "held")
    if verdicts is not None:
        for i, v in enumerate(verdicts):
            check_type(f"verdicts[{i}]", v, Verdict)
        for n, p in predictions.items():
            judged = [v.outcome for v in verdicts if v.prediction == p]  # the last shown counts
            if not judged:
                raise ValueError(f"verdicts hold no verdict on predictions[{n!r}]")
            outcome[n] = judged[-1]
    by: dict[str, list[str]] = {k: [] for k in KINDS}
    for n, p in predictions.items():
        if outcome[n] == "held":
            by[verdict_kind(p, n in again)].append(n)
    kinds = "; ".join(f"{len(ns)} {k}{'s' * (len(ns) != 1 and k != 're-judged')}"
                      + (f" ({', '.join(ns)})" if names else "") for k, ns in by.items() if ns)
    if verdicts is None:
        return f"The {len(predictions)} verdicts by kind: {kinds}."
    held, tests = sum(map(len, by.values())), len(by["test"])
    other = [f"{n} {o}" for n, o in outcome.items() if o != "held"]
    were = "was a test" if tests == 1 else "were tests"
    return (f"{held} of {len(predictions)}{' verdicts' * names} held"
            + (f", by kind: {kinds}" if held else "")
            + (f"; {tests} of the {held} held {were}, the rest weaker evidence" if held else "")
            + (f"; not held: {', '.join(other)}" if other else "") + ".")
