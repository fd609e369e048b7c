"""Plots and widgets for communication: collectives, data parallelism, compression.

The collectives' plot and the ring widget live in :mod:`perfkit.viz.comm_collectives` and are
re-exported here, beside data parallelism's and compression's plots (its widget and seed
curves: :mod:`perfkit.viz.compress`).

Every function consumes records that ``perfkit.comm``, the ``perfkit.jobs`` modules,
``perfkit.compress`` and ``perfkit.compress.simulate`` return; the widgets are
:class:`~perfkit.viz.core.WidgetSpec` over pure functions that tests call at every
control's extremes.

Usage::

    fig = plot_collectives(points, fits={"all_reduce": fit}, copy_bytes_per_s=bw)
    spec = collectives_widget({2: pts2, 3: pts3}, fit)
    build_widget(spec)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.figure import Figure

from perfkit.stats import Estimate
from perfkit.viz.comm_collectives import collectives_widget, plot_collectives
from perfkit.viz.core import tidy

__all__ = [
    "collectives_widget",
    "plot_buckets_accumulation",
    "plot_collectives",
    "plot_compression_tradeoff",
    "plot_data_parallel",
    "plot_kernel_shares",
    "plot_method_comparison",
]


def plot_data_parallel(compare: Mapping[str, Any]) -> Figure:
    """Step time of each synchroniser, beside a step's compute alone and its bucketed all-reduces
    alone (one by one, and launched together where timed), and the bucketed step (the same work,
    no overlap) as the line the overlapped bar is read against.

    Args:
        compare: the ``compare`` result of ``perfkit.jobs.data_parallel``.
    """
    t = compare["time_s"]
    shown = {"compute_only": ("compute\nalone", "0.6"), "comm_only": ("all-reduces\none by one", "0.8"),
             "comm_together": ("all-reduces\ntogether", "0.85"), "naive": ("naive", "C0"),
             "bucketed": ("bucketed", "C1"), "overlapped": ("overlapped", "C2"), "ddp": ("DDP", "C3")}
    names = [n for n in shown if n in t]  # comm_together: where the job timed it
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bars = ax.bar([shown[n][0] for n in names], [t[n] * 1e3 for n in names],
                  color=[shown[n][1] for n in names])
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.axhline(t["bucketed"] * 1e3, color="k", ls=":", label="bucketed: the same work, no overlap")
    ax.set_ylabel("median per step (ms)")
    ax.tick_params(axis="x", labelsize=8)
    hidden = compare["hidden_share"]
    # no share in the title (no interval here): the verdict judges the rounds' paired savings
    ax.set_title(f"{compare['n_params']:,} parameters, {compare['buckets']} buckets: " + (
        "no communication showed in the bucketed step" if hidden is None else
        "how far the overlapped bar falls below the dotted line\nis what these medians saved, behind "
        "backward or by running the all-reduces together" if t["overlapped"] < t["bucketed"] else
        "the overlapped bar is not below the dotted line:\nby these medians the overlap saved nothing")
        + ("" if hidden is None else ";\npaired rounds can differ (see the verdict)"), fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def plot_buckets_accumulation(buckets: Sequence[Mapping[str, Any]],
                              accumulate: Sequence[Mapping[str, Any]]) -> Figure:
    """DDP step time and all-reduce calls vs ``bucket_cap_mb`` (left); bytes and time per
    sample vs accumulation steps ``k`` with ``no_sync()`` (right)."""
    if not buckets or not accumulate:
        raise ValueError("buckets and accumulate must be non-empty")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    caps = [b["bucket_cap_mb"] for b in buckets]
    ax1.plot(caps, [b["step_s"] * 1e3 for b in buckets], "o-", label="step time (ms, median)")
    ax1.set_xscale("log")
    ax1.set_xlabel("bucket_cap_mb (MiB)")
    ax1.set_ylabel("step time (ms, median)")
    tw = ax1.twinx()
    tw.plot(caps, [b["calls_per_step"] for b in buckets], "s--", color="C1")
    tw.set_ylabel("all-reduce calls per step", color="C1")
    ax1.set_title("DDP bucket size")
    # both per-sample figures relative to the first k's, on one axis: bytes fall as 1/k, time less
    first, ks = accumulate[0], [a["k"] for a in accumulate]
    ax2.plot(ks, [first["k"] / k for k in ks], ":", color="k", lw=2, zorder=3,
             label="1/k (relative to the first k)")
    ax2.plot(ks, [a["allreduce_bytes_per_sample"] / first["allreduce_bytes_per_sample"] for a in accumulate],
             "o-", label="bytes all-reduced per sample")
    ax2.plot(ks, [a["s_per_sample"] / first["s_per_sample"] for a in accumulate], "s--",
             label="time per sample (ratio of medians;\nthe verdict: median of paired ratios)")
    ax2.set_ylim(0, None)
    ax2.set_xlabel("micro-batches per all-reduce (k)")
    ax2.set_ylabel(f"per sample, relative to k={first['k']}")
    ax2.legend(fontsize=8)
    ax2.set_title("gradient accumulation with no_sync()")
    ax1.set_xticks(caps, [f"{c:g}" for c in caps])
    ax1.xaxis.set_minor_locator(ticker.NullLocator())
    ax2.set_xticks(ks, [str(k) for k in ks])
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    tw.tick_params(axis="x", which="both", labelbottom=False, labeltop=False)  # hidden: not overlaps
    fig.tight_layout()
    return tidy(fig)


def plot_compression_tradeoff(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Relative reconstruction error against wire-bytes ratio, measured and predicted.

    Args:
        rows: dicts with ``name``, ``wire_ratio``, ``rel_error`` and optionally
            ``predicted`` (the Gaussian model's error).
    """
    if not rows:
        raise ValueError("rows is empty")
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, r in enumerate(rows):
        ax.scatter([r["wire_ratio"]], [r["rel_error"]], color=f"C{i % 10}", label=r["name"])
        if r.get("predicted") is not None:
            ax.scatter([r["wire_ratio"]], [r["predicted"]], color=f"C{i % 10}", marker="x")
    ax.set_xscale("log")
    ax.set_xlabel("bytes on the wire / dense fp32 bytes")
    ax.set_ylabel("relative L2 error")
    ax.set_title("compression: measured (o) vs Gaussian model (x)")
    ax.grid(True, which="both", alpha=0.3)
    ax.scatter([], [], color="black", marker="o", label="measured (every method)")  # no method is black
    if any(r.get("predicted") is not None for r in rows):
        ax.scatter([], [], color="black", marker="x", label="Gaussian model")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return tidy(fig)


def plot_kernel_shares(predicted: Mapping[str, float | tuple[float, float]], measured: Mapping[str, float]
                       ) -> Figure:
    """Encode + decode speed as a share of memcpy: the bytes model's prediction beside the
    measurement, one pair of bars per kernel path (``"qsgd eager"``, ``"qsgd fused"``, ...).

    Args:
        predicted: path -> ``8 / bytes per value`` (:data:`perfkit.compress.BYTES_PER_VALUE`),
            or the ``(low, high)`` range a verdict judges the path on
            (:func:`perfkit.compress.copy_share_range`), drawn as a bar from low to high.
        measured: path -> memcpy time / encode + decode time, same keys.
    """
    if not predicted or set(predicted) != set(measured):
        raise ValueError(f"predicted and measured need the same non-empty keys, got "
                         f"{sorted(predicted)} and {sorted(measured)}")
    names = list(predicted)
    span = {n: p if isinstance(p, tuple) else (0.0, p) for n, p in predicted.items()}  # (bottom, top)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [(span[n][1] - span[n][0]) * 100 for n in names], 0.4, color="0.75",
           bottom=[span[n][0] * 100 for n in names], label="predicted (bytes moved; floating: a range)")
    ax.bar([x + 0.2 for x in xs], [measured[n] * 100 for n in names], 0.4, color="C0",
           label="measured")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("share of memcpy speed (%)")
    ax.set_title("encode + decode, one fp32 tensor")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def plot_method_comparison(results: Mapping[str, Mapping[str, Any]],
                           step_ratios: Mapping[str, Estimate] | None = None) -> Figure:
    """Final loss, wire-bytes ratio and step time per method (one bar group each).

    Args:
        results: method -> dict with ``final_loss``, ``wire_bytes_ratio``, ``step_s``.
        step_ratios: method -> its step time over the baseline's, with an interval (paired
            steps, :func:`perfkit.stats.median_ratio`); when given, the third panel draws these
            with their intervals and a 1x line (the baseline itself at 1x, no interval), not
            each method's own median ``step_s``: two medians of widely spread steps can differ
            by more than the steps do pair by pair.

    Raises:
        ValueError: for empty ``results``, or ``step_ratios`` naming a method not in it.
    """
    if not results:
        raise ValueError("results is empty")
    if step_ratios is not None and not set(step_ratios) <= set(results):
        extra = sorted(set(step_ratios) - set(results))
        raise ValueError(f"step_ratios names methods not in results: {extra}")
    names = list(results)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    colors = ["C3" if n.endswith("_ef") else "C0" for n in names]
    for ax, key, label in zip(axes[:2], ("final_loss", "wire_bytes_ratio"),
                              ("final loss (nats)", "wire bytes / dense"), strict=True):
        vals = [results[n][key] for n in names]
        # points, not bars: on a log axis a bar's length depends on where the axis starts
        ax.scatter(vals, names, color=colors, zorder=3)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_xlabel(label)
        if key == "final_loss":  # each point labelled: close losses differ in the third digit
            for v, n in zip(vals, names, strict=True):
                ax.annotate(f"{v:.3g}", (v, n), xytext=(4, 0), textcoords="offset points",
                            va="center", fontsize=7)
            ax.set_xlim(0.5 * min(vals), 3 * max(vals))
        ax.set_xscale("log")  # each spans decades: log, with 1-2-5 labels
        lo, hi = ax.get_xlim()
        # only ticks inside the axes: a locator's labels beyond the limits still collide
        ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
        ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax = axes[2]
    if step_ratios is None:
        ax.barh(names, [results[n]["step_s"] * 1e3 for n in names], color=colors)
        ax.set_xlabel("step time (ms, each method's median)")
    else:
        est = [step_ratios.get(n) for n in names]
        vals = [1.0 if e is None else e.value for e in est]
        err = [[0.0 if e is None else e.value - e.low for e in est],
               [0.0 if e is None else e.high - e.value for e in est]]
        ax.barh(names, vals, color=colors, xerr=err, error_kw={"elinewidth": 1, "capsize": 2})
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlabel("step time / baseline's (paired steps; each interval at the coverage printed with it)")
    for ax in axes:
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].invert_yaxis()
    fig.suptitle("2-process DDP training per method (red: a compressor with error feedback added; PowerSGD "
                 "keeps its own)", fontsize=10)
    fig.tight_layout()
    return tidy(fig)
