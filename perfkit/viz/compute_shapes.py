"""Matmul shape sweeps of notebook 06: which widths a CPU's kernels run fast.

The rate of ``(m, k) @ (k, n)`` against one dimension, each width marked by the grid it lies
on (a multiple of the vector width, odd, even but on no vector grid), and a line grouping the
widths' rates by the largest power of two dividing them. Both consume
:class:`perfkit.compute.ShapePoint` s; :mod:`perfkit.viz.compute` re-exports them.

Usage::

    from perfkit.viz.compute_shapes import alignment_line, plot_shape_sweep
    print(alignment_line(points, "float32"))
    plot_shape_sweep(points, vary="n", multiple=64)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit._checks import check_int, check_items
from perfkit.viz.core import tidy

__all__ = ["alignment_line", "plot_shape_sweep"]


def plot_shape_sweep(points: Sequence[Any], vary: str = "n", multiple: int = 64, title: str = "") -> Figure:
    """Matmul GFLOP/s against one dimension, one panel per dtype, each on its own linear axis
    from zero (the dtypes' ceilings can differ a hundredfold; one log axis would flatten the
    spread within each, and an axis cut to the points' range would blow a few percent up to its
    full height). The sizes sit side by side in order, evenly spaced, each named on the axis: a
    sweep dense around one size (every width from 1016 to 1039) and sparse around it would
    otherwise pile its dense part onto one spot. Multiples of ``multiple`` drawn filled, odd
    sizes as crosses, even sizes that are a multiple of no vector width (``% 4 == 2``) as hollow
    squares and the other even sizes as hollow circles, each kind in its own colour and named in
    the legend. No line joins the points: neighbouring sizes belong to different kinds, and a
    line through them in size order draws a zigzag that reads as a trend.

    Args:
        points: :class:`perfkit.compute.ShapePoint` s.
        vary: the dimension on the x-axis: ``"m"``, ``"n"`` or ``"k"``.
        multiple: sizes divisible by it are filled markers.
        title: the figure's title.

    Raises:
        ValueError: for no points, an unknown ``vary`` or a ``multiple`` below 2.
    """
    if len(points) == 0:
        raise ValueError("points must hold at least one ShapePoint")
    if vary not in ("m", "n", "k"):
        raise ValueError(f"vary must be 'm', 'n' or 'k', got {vary!r}")
    check_int("multiple", multiple, 2)
    dtypes = list(dict.fromkeys(p.dtype for p in points))
    most = max(sum(p.dtype == dt for p in points) for dt in dtypes)  # sizes in the widest panel
    fig, axes = plt.subplots(1, len(dtypes), figsize=(max(4.6, 0.24 * most) * len(dtypes) + 2.4, 3.8),
                             squeeze=False)
    kinds = ((f"{vary} % {multiple} == 0", lambda x: x % multiple == 0, dict(c="C0")),
             (f"odd {vary}", lambda x: x % multiple and x % 2 == 1, dict(marker="x", c="C3")),
             (f"{vary} % 4 == 2 (no vector width divides it)", lambda x: x % multiple and x % 4 == 2,
              dict(marker="s", facecolors="none", edgecolors="C2")),
             (f"other even {vary}", lambda x: x % multiple and x % 4 == 0,
              dict(facecolors="none", edgecolors="C1")))
    for dtype, ax in zip(dtypes, axes[0], strict=True):
        pts = sorted((p for p in points if p.dtype == dtype), key=lambda p: getattr(p, vary))
        xs, ys = [getattr(p, vary) for p in pts], [p.flops_per_s / 1e9 for p in pts]
        for name, keep, style in kinds:  # each size at its place in the order (evenly spaced)
            ax.scatter([i for i, x in enumerate(xs) if keep(x)], [y for x, y in zip(xs, ys) if keep(x)],
                       zorder=3, label=name if ax is axes[0][-1] else None, **style)
        ax.set_xticks(range(len(xs)), [str(x) for x in xs], rotation=90, fontsize=7)
        ax.set(xlabel=f"{vary} of (m, k) @ (k, n), in order (not to scale)",
               ylabel=f"{dtype} GFLOP/s (median)", title=dtype)
        ax.set_ylim(0, 1.08 * max(ys))
        ax.grid(True, alpha=0.3)
    # the marker kinds are named once, beside the last panel (each panel's title names its dtype)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                       title="every panel" if len(dtypes) > 1 else None, title_fontsize=7)
    fig.suptitle(title or f"Matmul throughput against {vary}", fontsize=11)
    fig.tight_layout()
    return tidy(fig)


def alignment_line(points: Sequence[Any], dtype: str = "float32", vary: str = "n", multiple: int = 64) -> str:
    """Each width's rate as a share of the median of the multiples of ``multiple``, grouped by
    the largest power of two dividing the width (up to ``multiple / 2``), medians: which grid
    the fast widths share.

    Raises:
        ValueError: for an unknown ``vary``, or no ``dtype`` point that is a multiple of ``multiple``.
    """
    if vary not in ("m", "n", "k"):
        raise ValueError(f"vary must be 'm', 'n' or 'k', got {vary!r}")
    check_int("multiple", multiple, 2)
    pts = [p for p in check_items("points", points) if p.dtype == dtype]
    ref = [p.flops_per_s for p in pts if getattr(p, vary) % multiple == 0]
    if not ref:
        raise ValueError(f"points hold no {dtype} {vary} that is a multiple of {multiple}")
    mid = statistics.median(ref)
    groups: dict[int, list[float]] = {}
    for p in pts:
        x = getattr(p, vary)
        if x % multiple:
            groups.setdefault(x & -x, []).append(p.flops_per_s / mid)  # the largest power of 2 dividing x
    parts = [f"{'odd' if g == 1 else f'{vary} % {2 * g} == {g}'}: {statistics.median(v):.0%} ({len(v)})"
             for g, v in sorted(groups.items(), reverse=True)]
    return (f"{dtype}, median rate against the multiples of {multiple}'s, by the largest power of two "
            f"dividing {vary} (widths): " + "; ".join(parts))
