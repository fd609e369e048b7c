"""The collectives' plots: time and busbw against message size, and the ring all-reduce widget.

:func:`plot_collectives` draws a sweep (:func:`perfkit.comm.sweep`) with its alpha-beta fits and,
on the busbw panel, the copy rate and each collective's expectation by counting copies
(:func:`perfkit.comm.loopback_copy_share`), the lines notebook 02's table judges against.
:func:`collectives_widget` moves a message size and a world size under the ring model.

Usage::

    fig = plot_collectives(points, fits={"all_reduce": fit}, copy_bytes_per_s=bw)
    build_widget(collectives_widget({2: pts2, 3: pts3}, fit))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit.comm import AlphaBeta, CollectivePoint, loopback_copy_share, ring_allreduce_time
from perfkit.viz.core import IntControl, LogControl, WidgetSpec, si, tidy

__all__ = ["collectives_widget", "plot_collectives"]


def _points_by_op(points: Sequence[CollectivePoint]) -> dict[str, list[CollectivePoint]]:
    if not points:
        raise ValueError("points is empty: run a sweep first")
    by: dict[str, list[CollectivePoint]] = {}
    for p in sorted(points, key=lambda p: p.nbytes):
        by.setdefault(p.op, []).append(p)
    return by


def plot_collectives(points: Sequence[CollectivePoint], fits: Mapping[str, AlphaBeta] | None = None,
                     copy_bytes_per_s: float | None = None,
                     copy_label: str = "one copy at the DRAM ceiling") -> Figure:
    """Time (left) and busbw (right) against message size, one line per op.

    Args:
        points: a sweep from :func:`perfkit.comm.sweep`.
        fits: op -> fitted :class:`AlphaBeta`, drawn dashed on the time panel.
        copy_bytes_per_s: a copy's rate (bytes read + written per second, as :mod:`perfkit.hw`
            counts it; :func:`perfkit.ceilings.dram_copy`); drawn as the rate of copying a buffer
            once, ``copy_bytes_per_s / 2``, the reference a shared-memory transport can reach, with
            each op's expectation on loopback TCP below it, that rate times
            :func:`perfkit.comm.loopback_copy_share` (dash-dot, in the op's color).
        copy_label: what that rate is, for the legend.
    """
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    colors: dict[str, str] = {}  # op -> its lines' color
    for op, pts in _points_by_op(points).items():
        xs = [p.nbytes for p in pts]
        line, = ax_t.plot(xs, [p.time_s * 1e6 for p in pts], "o-", label=op)
        colors[op] = line.get_color()
        ax_b.plot(xs, [p.busbw / 1e9 for p in pts], "o-", label=op, color=line.get_color())
        if fits and op in fits:
            ax_t.plot(xs, [fits[op].predict(x) * 1e6 for x in xs], "--", color=line.get_color(),
                      alpha=0.6)
    world = points[0].world_size
    if copy_bytes_per_s:
        buf = copy_bytes_per_s / 2  # B/s: a buffer's bytes copied once
        ax_b.axhline(buf / 1e9, color="k", ls=":", label=f"{copy_label}: {si(buf, 'B/s')}")
        for op, color in colors.items():  # each op's expectation by counting its copies on loopback TCP
            share = loopback_copy_share(op, world)
            ax_b.axhline(buf * share / 1e9, color=color, ls="-.", alpha=0.7,
                         label=f"{op} expected: at most {share:g} of it")
    for ax, ylabel in ((ax_t, "time (µs)"), (ax_b, "busbw (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    # both span decades: latency-bound sizes reach kB/s, large ones GB/s
    ax_t.set_yscale("log")
    ax_b.set_yscale("log")
    ax_t.set_title(f"{world} ranks: time (dashed: alpha-beta fit)")
    ax_b.set_title("bus bandwidth (nccl-tests definition)")
    fig.tight_layout()
    return tidy(fig)


def collectives_widget(measured: Mapping[int, Sequence[CollectivePoint]], fit2: AlphaBeta
                       ) -> WidgetSpec:
    """Message size and world size sliders: ring all-reduce time predicted vs measured.

    The prediction scales a 2-rank fit to ``n`` ranks with the ring model
    (:func:`perfkit.comm.ring_allreduce_time`); a 2-rank ring is two steps of half the
    buffer, so one link step has latency ``fit2.alpha_s / 2`` and bandwidth
    ``fit2.bandwidth``.

    Args:
        measured: world size -> all-reduce points measured at that size.
        fit2: the alpha-beta fit of the 2-rank all-reduce.
    """
    if not measured:
        raise ValueError("measured is empty: need at least the 2-rank sweep")
    link = AlphaBeta(fit2.alpha_s / 2, fit2.bandwidth)
    by_world = {w: sorted((p for p in pts if p.op == "all_reduce"), key=lambda p: p.nbytes)
                for w, pts in measured.items()}
    sizes = [p.nbytes for pts in by_world.values() for p in pts]
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))

    def fn(nbytes: float, world_size: int) -> Figure:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = [2 ** (lo + (hi - lo) * i / 60) for i in range(61)]
        ax.plot(xs, [ring_allreduce_time(x, world_size, link) * 1e6 for x in xs], "--",
                label=f"ring model, {world_size} ranks")
        pred = ring_allreduce_time(nbytes, world_size, link)
        ax.plot([nbytes], [pred * 1e6], "s", color="C0", label=f"model at {si(nbytes, 'B')}")
        note = "not measured at this world size"
        pts = by_world.get(world_size)
        if pts:
            ax.plot([p.nbytes for p in pts], [p.time_s * 1e6 for p in pts], "o-", color="C1",
                    label=f"measured, {world_size} ranks")
            near = min(pts, key=lambda p: abs(math.log2(p.nbytes) - math.log2(nbytes)))
            there = ring_allreduce_time(near.nbytes, world_size, link)  # s: the model at the measured size
            note = (f"measured {si(near.time_s, 's')} at {si(near.nbytes, 'B')}"
                    + (f" (model there: {si(there, 's')})" if near.nbytes != round(nbytes) else ""))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("all-reduce time (µs)")
        ax.set_title(f"{si(nbytes, 'B')}, {world_size} ranks: ring model {si(pred, 's')}\n{note}",
                     fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return tidy(fig)

    start = 2 ** round((lo + hi) / 2)
    return WidgetSpec(fn, {"nbytes": LogControl(lo, hi, start, base=2, step=0.5,
                                                description="message bytes"),
                           "world_size": IntControl(2, 16, 2, description="ranks")},
                      title="Ring all-reduce: alpha-beta prediction vs measurement")
