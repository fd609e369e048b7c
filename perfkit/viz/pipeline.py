"""Plots of notebook 11 (pipeline parallelism): schedule grids, simulated above measured, and
the bubble against the number of micro-batches.

Usage::

    fig = plot_grids(simulate(one_f_one_b(2, 4)), measured_timeline)   # model | this run
    spec = schedule_widget({("1f1b", 2, 4, 1): measured_timeline})     # build_widget(spec)
    fig = plot_bubbles(rows)                                            # measured vs formula
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import AutoLocator

from perfkit.parallel.schedules import SCHEDULES, make_schedule
from perfkit.parallel.simulate import Timeline, bubble_formula, simulate
from perfkit.viz.core import Choice, IntControl, WidgetSpec

__all__ = ["COLORS", "plot_bubbles", "plot_grids", "plot_timeline", "schedule_widget"]

COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#55a868"}
UNIT_COSTS = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}   # backward = twice forward; I + W = B


def plot_timeline(tl: Timeline, ax: Axes | None = None, title: str = "", unit: str = "") -> Axes:
    """One row per rank, a box per action (colour by kind, micro-batch written inside; with
    virtual stages, lighter boxes for later chunks); white space is the bubble.

    Raises:
        TypeError: if ``tl`` is not a :class:`perfkit.parallel.Timeline`.
    """
    if not isinstance(tl, Timeline):
        raise TypeError(f"tl must be a perfkit.parallel.Timeline, got {type(tl).__name__}")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(tl.slots)))
    t0, v = tl.start, tl.schedule.n_virtual
    for r, row in enumerate(tl.slots):
        for s in row:
            a = s.action
            alpha = 1.0 - 0.45 * (a.stage // tl.schedule.n_ranks) / max(v - 1, 1) if v > 1 else 1.0
            ax.barh(r, s.end - s.start, left=s.start - t0, color=COLORS[a.kind], alpha=alpha,
                    edgecolor="white", linewidth=0.5)
            if len(row) <= 64:   # labels only where they fit
                ax.text(s.start - t0 + (s.end - s.start) / 2, r, f"{a.mb}", ha="center",
                        va="center", fontsize=9, color="white")
    ax.set_yticks(range(len(tl.slots)), [f"rank {r}" for r in range(len(tl.slots))])
    ax.invert_yaxis()
    ax.set_xlim(0, tl.makespan)
    ax.set_xticks([x for x in ax.get_xticks() if 0 <= x <= tl.makespan])   # none past the end to collide
    ax.set_xlabel(f"time{f' ({unit})' if unit else ''}")
    ax.set_title(title or f"{tl.schedule.name}: bubble {tl.bubble_share:.1%}", fontsize=10)
    return ax


def plot_grids(simulated: Timeline, measured: Timeline | None = None, note: str = "",
               measured_note: str = "", label: str = "model", unit: str = "F = 1",
               share_time: bool = False) -> Figure:
    """The simulated grid, and under it the measured one of the same schedule (if given);
    ``note`` is appended to the model's title, ``measured_note`` to the measured grid's (say
    which step it draws). ``label`` opens the simulated grid's title (``"model"`` for unit
    costs; name a prediction fed with measured costs as such) and ``unit`` is its time axis's
    (``"s"`` for costs in seconds). The legend names only the kinds of action drawn. With
    ``share_time`` (both grids in seconds), the two panels share one time axis, so a step longer
    than predicted shows as longer. The panels stack, one above the other, each row of boxes tall
    enough for its labels to read at the notebook's width."""
    n = 1 if measured is None else 2
    fig, axes = plt.subplots(n, 1, figsize=(9, 0.6 + n * (1.2 + 0.55 * len(simulated.slots))), squeeze=False)
    axes = [row[0] for row in axes]
    plot_timeline(simulated, axes[0], f"{label}: {simulated.schedule.name}, "
                  f"bubble {simulated.bubble_share:.1%}{note}", unit)
    if measured is not None:
        plot_timeline(measured, axes[1], f"measured: bubble {measured.bubble_share:.1%}"
                      + (f", {measured_note}" if measured_note else ""), "s")
        if share_time:
            right = max(ax.get_xlim()[1] for ax in axes)
            for ax in axes:
                ax.set_xlim(0, right)
                ax.set_xticks([x for x in AutoLocator().tick_values(0, right) if 0 <= x <= right])
    drawn = {s.action.kind for tl in (simulated, measured) if tl is not None for row in tl.slots for s in row}
    kinds = [k for k in COLORS if k in drawn]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in kinds]
    fig.legend(handles, kinds, loc="lower center", ncol=4, fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / fig.get_size_inches()[1], 1, 1))
    return fig


def schedule_widget(measured: Mapping[tuple[str, int, int, int], Timeline] | None = None,
                    notes: Mapping[tuple[str, int, int, int], str] | None = None) -> WidgetSpec:
    """Sliders for schedule, ``p``, ``m`` and ``v``: the simulated grid (F = 1, B = 2, I = W = 1),
    above the measured grid of this run where one was recorded for the same choice
    (``measured[(schedule, p, m, v)]``, titled with ``notes`` under the same key: which step
    it is). A choice a builder refuses (``m < p`` for 1F1B) shows the builder's message instead.
    """
    measured, notes = dict(measured or {}), dict(notes or {})

    def show(schedule: str, p: int, m: int, v: int) -> Figure | str:
        try:
            sched = make_schedule(schedule, p, m, v if schedule == "interleaved" else 1)
        except ValueError as e:
            return f"**Not a valid schedule:** {e}"
        costs = {k: c / sched.n_virtual for k, c in UNIT_COSTS.items()}
        tl = simulate(sched, costs)
        return plot_grids(tl, measured.get((schedule, p, m, sched.n_virtual)),
                          f" (formula {bubble_formula(schedule, p, m, sched.n_virtual):.1%}), "
                          f"peak {max(tl.peak_in_flight) / sched.n_virtual:g} micro-batches",
                          notes.get((schedule, p, m, sched.n_virtual), ""))

    return WidgetSpec(show, {"schedule": Choice(list(SCHEDULES), "1f1b"),
                             "p": IntControl(1, 8, 4), "m": IntControl(1, 16, 8),
                             "v": IntControl(1, 4, 2, description="v (interleaved)")},
                      title="Pipeline schedule: the grid, its bubble and its memory")


def plot_bubbles(rows: Sequence[Mapping], ax: Axes | None = None) -> Axes:
    """Measured bubble share (points, with their interval) against ``(p-1)/(m+p-1)`` (lines),
    from :func:`perfkit.jobs.pipeline_bench.report`-style rows (``p``, ``schedule``,
    ``n_micro``, ``measured``, ``interval``)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ps = sorted({r["p"] for r in rows})
    for p in ps:
        ms = range(1, max(r["n_micro"] for r in rows) + 1)
        ax.plot(list(ms), [bubble_formula("gpipe", p, m) for m in ms], color="grey", lw=1,
                label="formula (p - 1) / (m + p - 1)" if p == ps[0] else None)
        ax.text(max(ms) + 0.3, bubble_formula("gpipe", p, max(ms)), f"p={p}", fontsize=8, va="center")
    # the two schedules sit a little apart on x: at the same m their points would hide each other
    for name, marker, dx in (("gpipe", "o", -0.12), ("1f1b", "s", 0.12)):
        pts = [r for r in rows if r["schedule"] == name]
        if pts:
            ax.errorbar([r["n_micro"] + dx for r in pts], [r["measured"] for r in pts],
                        yerr=[[r["measured"] - r["interval"][0] for r in pts],
                              [r["interval"][1] - r["measured"] for r in pts]],
                        fmt=marker, label=f"{name} measured", capsize=2)
    ax.set_xticks(sorted({r["n_micro"] for r in rows} | {1}))
    ax.set_xlim(0.5, max(r["n_micro"] for r in rows) + 1.5)
    ax.set_ylim(0, None)
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble share of the step")
    half = max(max(r["measured"] - r["interval"][0], r["interval"][1] - r["measured"]) for r in rows)
    ax.set_title(f"Bubble share: measured (points) and the formula (lines)\nintervals at most ±{half:.2g}: "
                 "unseen where smaller than the markers", fontsize=9)
    ax.legend(fontsize=8)
    return ax
