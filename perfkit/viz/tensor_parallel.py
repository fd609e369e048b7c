"""Plots and the widget of notebook 10 (tensor and sequence parallelism), over the models of
:mod:`perfkit.parallel.tp_costs` and the counts of :mod:`perfkit.parallel.tp_gpt`.

Usage::

    fig = plot_tp_crossover(flops_per_s=1e11, link=link, t=2, tokens=4096, seq=512)
    spec = tp_widget(flops_per_s=1e11, link=link)      # build_widget(spec) in a notebook
    print(traffic_table(measured, model, t=2))          # collectives per step, side by side
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta
from perfkit.comm.traffic import Traffic
from perfkit.parallel.tp_costs import crossover_width, tp_block_cost
from perfkit.stats import Estimate
from perfkit.verdict import Prediction
from perfkit.viz.core import IntControl, LogControl, WidgetSpec, si, tidy

__all__ = ["plot_tp_crossover", "tp_widget", "traffic_table"]

WIDTHS = (16.0, 65536.0)   # the plotted range of model widths C


def plot_tp_crossover(flops_per_s: float, link: AlphaBeta, t: int = 2, tokens: int = 4096,
                      seq: int = 512, bandwidth_scale: float = 1.0, compute_scale: float = 1.0,
                      measured: Mapping[float, Estimate | float] | None = None,
                      bounds: Mapping[float, float] | None = None,
                      comm: Mapping[float, float] | None = None,
                      blocks: Mapping[float, tuple[float, float]] | None = None,
                      predicted: Prediction | None = None, crossing: Estimate | None = None) -> Figure:
    """One block's forward and backward time against the width: the model's unsplit, split
    ``t`` ways (compute / t + 4 all-reduces from the fit ``link``) and all-reduces alone, its
    crossover marked; beside it what was measured, where given.

    Args:
        flops_per_s, link, t, tokens, seq: as :func:`perfkit.parallel.tp_costs.tp_block_cost`.
        bandwidth_scale: the link's throughput (``link.bandwidth``, a fit's 1 / beta) times this
            (a faster or slower network).
        compute_scale: the compute rate times this (a faster or slower chip). A GPU raises both:
            what decides the crossover is the compute per byte of link, not either alone.
        measured: speedups measured here by width, drawn as points on the speedup axis (an
            :class:`perfkit.stats.Estimate` with an interval gets its bar).
        bounds: the bound on the speedup at each measured width (from that width's own
            measured compute time and the sweep's calls at its size), drawn as open markers.
        comm: seconds of a measured width's 4 all-reduces as a stand-alone sweep timed calls of
            that size (not the block's own calls), drawn as crosses beside the fit's line (what
            the sweep took against what the fit charges).
        blocks: ``(unsplit, split)`` seconds measured at each width, drawn as points on the
            time axis beside the model's lines.
        predicted: the judged prediction of the crossing width, drawn on the speedup axis as a
            line at its value (where it has one) over its band, shaded.
        crossing: the measured crossing width (where the measured speedups cross 1x), drawn on
            the speedup axis as a line over its interval, shaded.

    Raises:
        TypeError, ValueError: for arguments out of range, named.
    """
    check_real("bandwidth_scale", bandwidth_scale, 0, lo_open=True)
    check_real("compute_scale", compute_scale, 0, lo_open=True)
    check_type("link", link, AlphaBeta)
    flops_per_s = flops_per_s * compute_scale
    points = {check_real("measured width", w, 0, lo_open=True): v for w, v in (measured or {}).items()}
    for v in points.values():
        check_type("measured speedup", v, (Estimate, float, int))
    marks = {check_real("bounds width", w, 0, lo_open=True): check_real("bounds speedup", b, 0)
             for w, b in (bounds or {}).items()}
    calls = {check_real("comm width", w, 0, lo_open=True): check_real("comm seconds", c, 0, lo_open=True)
             for w, c in (comm or {}).items()}
    timed = {check_real("blocks width", w, 0, lo_open=True): _pair(v) for w, v in (blocks or {}).items()}
    check_type("predicted", predicted, Prediction, optional=True)
    check_type("crossing", crossing, Estimate, optional=True)
    scaled = AlphaBeta(link.alpha_s, link.bandwidth * bandwidth_scale)
    widths = np.geomspace(*WIDTHS, 60)
    costs = [tp_block_cost(float(w), t, tokens, seq, flops_per_s, scaled) for w in widths]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.4))
    un, = ax.loglog(widths, [c.compute_s for c in costs], label="unsplit block (model)")
    sp, = ax.loglog(widths, [c.tp_s for c in costs], label=f"split {t} ways: compute / {t} + comm (model)")
    cm, = ax.loglog(widths, [c.comm_s for c in costs], ":", label="4 all-reduces alone (the fit)")
    if calls:
        ax.plot(list(calls), list(calls.values()), "x", color=cm.get_color(), ms=8,
                label="4 all-reduces at the sweep's measured times")
    if timed:
        ax.plot(list(timed), [u for u, _ in timed.values()], "o", color=un.get_color(),
                label="unsplit, measured")
        ax.plot(list(timed), [s for _, s in timed.values()], "s", color=sp.get_color(),
                label="split, measured")
    ax.set(xlabel="width C", ylabel="s per block (forward + backward)")
    fig.suptitle(f"{tokens} tokens per step, compute at {si(flops_per_s, 'FLOP/s')}, "
                 f"link (the fit): alpha {si(scaled.alpha_s, 's')} + bytes at {si(scaled.bandwidth, 'B/s')} "
                 "per ring step (fitted throughput 1 / beta, not a link bandwidth)")
    ax2.semilogx(widths, [c.speedup for c in costs], label="model (the fit, one rate)")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.axhline(t, color="grey", lw=0.8, ls="--", label=f"ideal: {t}x")
    cross = crossover_width(t, tokens, seq, flops_per_s, scaled)
    for a in (ax, ax2):
        if cross is not None and WIDTHS[0] <= cross <= WIDTHS[1]:
            a.axvline(cross, color="red", lw=0.8, label=f"the model's crossover C = {cross:,.0f}")
    if predicted is not None:
        lo, hi = (min(max(x, WIDTHS[0]), WIDTHS[1]) for x in predicted.bounds())
        ax2.axvspan(lo, hi, color="tab:purple", alpha=0.12, lw=0)
        if predicted.value is not None:
            ax2.axvline(predicted.value, color="tab:purple", ls="--", lw=1.0,
                        label=f"judged prediction C = {predicted.value:,.0f} (band shaded)")
    if crossing is not None:
        if crossing.has_interval:
            ax2.axvspan(crossing.low, crossing.high, color="tab:green", alpha=0.15, lw=0)
        span = f" ({crossing.low:,.0f} to {crossing.high:,.0f}, shaded)" if crossing.has_interval else ""
        ax2.axvline(crossing.value, color="tab:green", lw=1.2,
                    label=f"measured crossing C = {crossing.value:,.0f}{span}")
    if marks:
        ax2.plot(list(marks), list(marks.values()), "o", mfc="none", mec="k",
                 label="bound: each width's measured U, the sweep's calls")
    if points:
        ws = list(points)
        vs = [float(v.value) if isinstance(v, Estimate) else float(v) for v in points.values()]
        lo = [v - p.low if isinstance(p, Estimate) and p.has_interval else 0.0
              for v, p in zip(vs, points.values())]
        hi = [p.high - v if isinstance(p, Estimate) and p.has_interval else 0.0
              for v, p in zip(vs, points.values())]
        ax2.errorbar(ws, vs, yerr=[lo, hi], fmt="ko", capsize=3, label="measured here")
    top = max([t * 1.1, *marks.values(), *(1.1 * float(v.high if isinstance(v, Estimate) else v)
                                          for v in points.values())])
    ax2.set(xlabel="width C", ylabel="speedup of the split block", ylim=(0, top))
    ax.legend(fontsize=7)
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))   # beside the panel, off the points
    fig.tight_layout()
    return tidy(fig)


def _pair(v: object) -> tuple[float, float]:
    """``(unsplit, split)`` seconds, each > 0."""
    items = check_items("blocks times", v)
    if len(items) != 2:
        raise ValueError(f"blocks times must be (unsplit, split) seconds, got {len(items)} values")
    u, s = (check_real("blocks seconds", x, 0, lo_open=True) for x in items)
    return u, s


def tp_widget(flops_per_s: float, link: AlphaBeta, seq: int = 512) -> WidgetSpec:
    """Sliders over the degree, the tokens per step, the link's fitted throughput and the compute rate
    (each a multiple of the one measured here), drawing :func:`plot_tp_crossover`.

    Raises:
        TypeError, ValueError: for a bad rate, link or ``seq``.
    """
    check_real("flops_per_s", flops_per_s, 0, lo_open=True)
    check_type("link", link, AlphaBeta)
    check_int("seq", seq, 1)

    def fn(t: int, tokens: float, bandwidth_scale: float, compute_scale: float) -> Figure:
        return plot_tp_crossover(flops_per_s, link, t, max(seq, int(tokens)), seq,
                                 bandwidth_scale, compute_scale)
    return WidgetSpec(fn, {
        "t": IntControl(2, 8, 2, description="tensor-parallel degree t"),
        "tokens": LogControl(np.log10(seq), 6, 4096, base=10,
                             description="tokens per step (B x T)"),
        "bandwidth_scale": LogControl(-1, 3, 1.0, description="throughput x fit's"),
        "compute_scale": LogControl(-1, 5, 1.0, description="compute x measured"),
    }, title="When does tensor parallelism pay?")


def traffic_table(measured: Traffic, model: Traffic, t: int) -> str:
    """A Markdown table: calls, buffer bytes and bytes sent per rank, counted and modelled.

    Raises:
        TypeError: unless ``measured`` and ``model`` are Traffic records.
    """
    check_type("measured", measured, Traffic)
    check_type("model", model, Traffic)
    check_int("t", t, 1)
    rows = ["| collective | calls (counted / model) | buffer bytes (counted / model) | "
            "sent per rank (ring) |", "|---|---|---|---|"]
    sent: Mapping[str, float] = measured.sent_bytes(t)
    for name in sorted(set(measured.calls) | set(model.calls)):
        rows.append(f"| {name} | {measured.calls.get(name, 0)} / {model.calls.get(name, 0)} | "
                    f"{measured.buffer_bytes.get(name, 0):,} / {model.buffer_bytes.get(name, 0):,}"
                    f" | {si(sent.get(name, 0.0), 'B')} |")
    return "\n".join(rows)
