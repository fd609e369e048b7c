"""Plots and the widget of notebook 12 (attention): the tiles each rank computes, saved bytes
against length, and tile size and length against memory and time.

Usage::

    plot_tiles(64, world=4, tile=8)                       # contiguous against zig-zag
    build_widget(attention_widget(model, points))          # model: compute.TileCostModel
    plot_saved_bytes([256, 512], {"eager": [...], "flash": [...]})
    plot_tile_times(points, model)                         # time against tile size, per length
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from perfkit._checks import check_int, check_items, check_type
from perfkit.compute.attention_cost import CONTROL, IMPLS, AttentionTiming, TileCostModel
from perfkit.compute.flash import check_tile, eager_saved_bytes, flash_saved_bytes, tile_pairs
from perfkit.parallel.context import SPLITS, segments
from perfkit.parallel.context_model import imbalance, ring_work
from perfkit.viz.attention_notes import rate_note, rounds_note, row_flag, row_note
from perfkit.viz.core import Choice, LogControl, WidgetSpec, si, tidy

__all__ = ["attention_widget", "eager_line_label", "plot_saved_bytes", "plot_tile_times", "plot_tiles",
           "rate_note", "rounds_note", "row_flag", "row_note", "tile_owner", "times_table"]
# rate_note, rounds_note, row_flag and row_note live in perfkit.viz.attention_notes


def tile_owner(seq_len: int, world: int, tile: int, split: str) -> np.ndarray:
    """``(T/tile, T/tile)`` grid: the rank that computes each (query, key) tile of causal
    attention under ``split``, -1 where the tile is skipped (above the diagonal)."""
    check_tile(tile)
    n = -(-seq_len // tile)
    grid = -np.ones((n, n), dtype=int)
    for rank in range(world):
        for qs, qn in segments(seq_len, rank, world, split):
            for src in range(world):
                for ks, kn in segments(seq_len, src, world, split):
                    for i0, _, j0, _, _ in tile_pairs(qn, kn, tile, True, qs, ks):
                        grid[(qs + i0) // tile, (ks + j0) // tile] = rank
    return grid


def plot_tiles(seq_len: int = 64, world: int = 4, tile: int = 4) -> Figure:
    """Which rank computes each tile of causal attention, contiguous against zig-zag, with
    each split's counted per-rank work imbalance in its title."""
    check_int("world", world, 1, 16)
    colours = ListedColormap(["white", *plt.get_cmap("tab10").colors[:world]])
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.8))
    for ax, split in zip(axes, SPLITS):
        grid = tile_owner(seq_len, world, tile, split)
        ax.imshow(grid + 1, cmap=colours, vmin=0, vmax=world, interpolation="nearest")
        work = ring_work(seq_len, world, split, tile=tile)
        ax.set_title(f"{split}: busiest rank {imbalance(work):.2f}x the mean", fontsize=10)
        ax.set_xlabel(f"key tile ({tile} positions each)")
        ax.set_ylabel("query tile")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(r + 1)) for r in range(world)]
    # the skipped upper triangle is empty: room for the legend
    axes[0].legend(handles, [f"rank {r}" for r in range(world)], loc="upper right", fontsize=8)
    fig.suptitle(f"Causal attention over T = {seq_len} on P = {world} ranks: who computes which "
                 "tile (white: skipped)", fontsize=10)
    fig.tight_layout()
    return tidy(fig)


def plot_saved_bytes(seq_lens: Sequence[int], measured: Mapping[str, Sequence[int]],
                     batch: int = 1, heads: int = 4, head_dim: int = 32) -> Figure:
    """Measured saved-for-backward bytes (points) on the formulas (lines), log-log; the
    formulas go on past the longest length counted, dashed there (no point checks them)."""
    lens = check_items("seq_lens", seq_lens)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    inside = np.geomspace(min(lens), max(lens), 30)
    beyond = np.geomspace(max(lens), max(lens) * 4, 12)
    for ts, ls, note in ((inside, "-", ""), (beyond, "--", None)):
        ax.plot(ts, [eager_saved_bytes(batch, heads, int(x)) for x in ts], ls, color="tab:red",
                label=note if note is None else "eager: B H T² x 4 bytes")
        ax.plot(ts, [flash_saved_bytes(batch, heads, int(x), head_dim) for x in ts], ls,
                color="tab:blue", label=note if note is None else "FlashAttention: O and L, linear in T")
    ax.plot([], [], "--", color="grey", label="formula past the lengths counted")
    for name, colour in (("eager", "tab:red"), ("flash", "tab:blue")):
        ax.plot(lens, measured[name], "o", color=colour, label=f"{name}, counted")
    ax.set(xscale="log", yscale="log", xlabel="sequence length T (ticks: the lengths counted)",
           ylabel="bytes saved for backward", title="Bytes saved for backward: counted and formula")
    ax.title.set_fontsize(10)
    ax.set_xticks(lens, [str(t) for t in lens])   # the measured lengths, not log decades
    ax.minorticks_off()
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def plot_tile_times(points: Sequence[AttentionTiming], model: TileCostModel | None = None,
                    batch: int = 1, heads: int = 4, head_dim: int = 32,
                    fitted_lens: Sequence[int] | None = None) -> Figure:
    """Forward + backward seconds of the tiled attention against the tile size, one colour per
    length: the measured medians as points, ``model``'s prediction as a line through them,
    solid at the lengths in ``fitted_lens`` (those the model was fitted on, all in one fit, which
    the legend names) and dashed at the others, where it predicts (``None``: every line solid,
    the legend saying one fit over every length drawn). The untiled implementations in
    ``points`` (eager, SDPA) stand to the right of the tiles, one column each, in the same
    colours, so that one figure holds every median the notebook prints.

    Raises:
        ValueError: for ``points`` without a tiled (``"flash"``) timing.
    """
    flash = [p for p in points if p.impl == "flash"]
    if not flash:
        raise ValueError("points must hold flash timings")
    fitted = None if fitted_lens is None else set(check_items("fitted_lens", fitted_lens))
    tiles = sorted({p.tile for p in flash})
    untiled = [name for name in IMPLS if name != "flash" and any(p.impl == name for p in points)]
    column = {name: tiles[-1] * 2 ** (k + 1) for k, name in enumerate(untiled)}   # x beyond the tiles
    fig, ax = plt.subplots(figsize=(8.0, 3.8))
    for i, t in enumerate(sorted({p.seq_len for p in flash})):
        mine = sorted((p for p in flash if p.seq_len == t), key=lambda p: p.tile)
        color = f"C{i}"
        ax.plot([p.tile for p in mine], [p.median_s for p in mine], "o", color=color,
                label=f"T = {t} measured")
        for p in points:
            if p.seq_len == t and p.impl in column:
                ax.plot([column[p.impl]], [p.median_s], "x" if p.impl == "eager" else "s", color=color)
        if model is not None:
            ax.plot([p.tile for p in mine], [model.flash_s(t, p.tile, batch, heads, head_dim) for p in mine],
                    "-" if fitted is None or t in fitted else "--", color=color, alpha=0.6)
    for name in column:   # one legend entry per untiled marker, in grey: the colours are the lengths'
        ax.plot([], [], "x" if name == "eager" else "s", color="grey", ls="none",
                label=("eager" if name == "eager" else "SDPA") + ", measured (right of the line)")
    if model is not None:   # one legend entry per line style, in grey: the colours are the lengths'
        over = "every length drawn" if fitted is None else "T = " + ", ".join(map(str, sorted(fitted)))
        ax.plot([], [], "-", color="grey", label=f"model: one fit over {over}")
        if fitted is not None and {p.seq_len for p in flash} - fitted:
            ax.plot([], [], "--", color="grey", label="model, predicted (a length outside the fit)")
    if column:
        ax.axvline(tiles[-1] * 2 ** 0.5, color="grey", ls=":", lw=0.8)   # tiles left, untiled right
    ax.set(xscale="log", yscale="log", ylabel="forward + backward time (median)",
           xlabel="tile size (queries and keys per tile)"
           + ("; right of the line: untiled" if column else ""),
           title="measured medians" + ((", lines: the tile model" + (
               " (dashed: predicted at a length it was not fitted on)" if fitted and
               {p.seq_len for p in flash} - fitted else "")) if model else ""))
    ax.title.set_fontsize(10)
    ax.set_xticks([*tiles, *column.values()],
                  [str(x) for x in tiles] + [{"eager": "eager", "sdpa": "SDPA"}[n] for n in column])
    ax.minorticks_off()
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: si(y, "s")))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return tidy(fig)


def times_table(points: Sequence[AttentionTiming], per_flop: bool = False) -> str:
    """A Markdown table of the medians: one row per length, one column per implementation
    (FlashAttention per tile size, then eager and SDPA), and last the control (one fixed
    matmul, the same call at every length, so its column moves only with the machine's speed),
    in seconds or, with ``per_flop``, in picoseconds per FLOP with a last row of each column's
    change over the two longest lengths (in the tile model a tile size's time per FLOP does not
    move with the length).

    Raises:
        ValueError, TypeError: for no points, or points that are not :class:`AttentionTiming`.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    check_type("per_flop", per_flop, bool)
    order = (*IMPLS, CONTROL)
    cols = sorted({(order.index(p.impl), p.tile) for p in pts})
    name = {c: f"{order[c[0]]}{c[1] or ''}".replace("sdpa", "SDPA").replace(CONTROL, "control (matmul)")
            for c in cols}
    lens = sorted({p.seq_len for p in pts})
    cell = {(p.seq_len, (order.index(p.impl), p.tile)): p.median_s / p.flops if per_flop else p.median_s
            for p in pts}
    unit = "ps per FLOP" if per_flop else "forward + backward"
    rows = [f"| T ({unit}) | " + " | ".join(name[c] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for t in lens:
        rows.append(f"| {t} | " + " | ".join(
            (f"{1e12 * cell[t, c]:.0f}" if per_flop else si(cell[t, c], "s")) if (t, c) in cell else ""
            for c in cols) + " |")
    if per_flop and len(lens) > 1:
        a, b = lens[-2], lens[-1]
        rows.append(f"| {a} to {b} | " + " | ".join(
            f"{cell[b, c] / cell[a, c] - 1:+.0%}" if (a, c) in cell and (b, c) in cell else ""
            for c in cols) + " |")
    return "\n".join(rows)


def eager_line_label(model: TileCostModel, points: Sequence[AttentionTiming] = (),
                     batch: int = 1, heads: int = 4, head_dim: int = 32) -> str:
    """The legend label of eager's model line: the one FLOP rate it carries to every length,
    the length where that rate was measured (the eager point whose rate is nearest it, the
    longest of equals, as :meth:`TileCostModel.fit` takes it), and
    how far the measured points beyond that length lie from the line, each with the control's
    time there over its own at that length where the control was timed at both (one fixed
    matmul, the same call at every length: a change in it is the machine's speed).

    Raises:
        TypeError: for a ``model`` that is not a TileCostModel or points that are not
            :class:`AttentionTiming`.
    """
    check_type("model", model, TileCostModel)
    eager = [check_type(f"points[{i}]", p, AttentionTiming) for i, p in enumerate(points)]
    eager = [p for p in eager if p.impl == "eager"]
    if not eager or not model.eager_rate:
        return "eager (model)"
    at = min(eager, key=lambda p: (round(abs(p.flops / p.median_s / model.eager_rate - 1), 6), -p.seq_len))
    text = f"eager (model): {si(model.eager_rate, 'FLOP/s')}, its rate at T = {at.seq_len},\ncarried on"
    beyond = [(p, p.median_s / model.eager_s(p.seq_len, batch, heads, head_dim)) for p in eager
              if p.seq_len > at.seq_len]
    ctl = {p.seq_len: p.median_s for p in points if p.impl == CONTROL}

    def row(t: int) -> str:   # the same fixed call at both lengths: the machine's speed, not eager's
        return (f",\nwhere the control took {ctl[t] / ctl[at.seq_len]:.2f}x its time at T = {at.seq_len}"
                if t in ctl and at.seq_len in ctl else "")
    return text + "".join(f"; measured {r:.1f}x the line at T = {p.seq_len}{row(p.seq_len)}"
                          for p, r in beyond)


def attention_widget(model: TileCostModel, points: Sequence[AttentionTiming] = (),
                     batch: int = 1, heads: int = 4, head_dim: int = 32,
                     max_len: int = 65536) -> WidgetSpec:
    """Sliders for the sequence length and the tile size over the memory and time models.

    Left: bytes saved for backward against T (eager's ``T^2`` and FlashAttention's linear
    line), the chosen T marked. Right: forward + backward seconds predicted by ``model``
    against T, for the chosen tile and for eager attention, with the measured ``points``
    (medians) on them.

    Raises:
        TypeError, ValueError: for a ``model`` that is not a TileCostModel or bad sizes.
    """
    if not isinstance(model, TileCostModel):
        raise TypeError(f"model must be a TileCostModel, got {type(model).__name__}")
    pts = list(points)
    check_int("max_len", max_len, 256)

    def show(seq_len: float, tile: int) -> Figure:
        t_now = int(seq_len)
        ts = np.unique(np.geomspace(128, max_len, 24).astype(int))
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.2))
        eager_b = [eager_saved_bytes(batch, heads, int(x)) for x in ts]
        flash_b = [flash_saved_bytes(batch, heads, int(x), head_dim) for x in ts]
        ax1.plot(ts, eager_b, "-", color="tab:red", label="eager")
        ax1.plot(ts, flash_b, "-", color="tab:blue", label="FlashAttention")
        ax1.axvline(t_now, color="gray", ls=":")
        ax1.set(xscale="log", yscale="log", xlabel="T", ylabel="bytes saved for backward")
        ax2.plot(ts, [model.flash_s(int(x), tile, batch, heads, head_dim) for x in ts], "-",
                 color="tab:blue", label=f"tiles of {tile} (model)")
        if model.eager_rate:
            ax2.plot(ts, [model.eager_s(int(x), batch, heads, head_dim) for x in ts], "-",
                     color="tab:red", label=eager_line_label(model, pts, batch, heads, head_dim))
        for impl, color, name in (("flash", "tab:blue", f"tiles of {tile}"), ("eager", "tab:red", "eager")):
            mine = [p for p in pts if p.impl == impl and (impl == "eager" or p.tile == tile)]
            if mine:
                ax2.plot([p.seq_len for p in mine], [p.median_s for p in mine], "o", color=color,
                         label=f"{name} (measured medians)")
        ax2.axvline(t_now, color="gray", ls=":")
        ax2.set(xscale="log", yscale="log", xlabel="T", ylabel="forward + backward, s")
        for ax in (ax1, ax2):
            ax.grid(True, which="both", alpha=0.3)
        ax1.legend(fontsize=8)
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))   # beside, off the lines
        pred = model.flash_s(t_now, tile, batch, heads, head_dim)
        fig.suptitle(f"T = {t_now}: eager saves {si(eager_saved_bytes(batch, heads, t_now), 'B')}, "
                     f"FlashAttention {si(flash_saved_bytes(batch, heads, t_now, head_dim), 'B')}; "
                     f"tiles of {tile}: {si(pred, 's')} predicted", fontsize=10)
        fig.tight_layout()
        return tidy(fig)

    return WidgetSpec(show, {
        "seq_len": LogControl(min_exp=8, max_exp=int(np.log2(max_len)), value=4096, base=2,
                              step=1, description="sequence length T"),
        "tile": Choice(options=(16, 64, 256), value=64, description="tile size"),
    }, title="Attention: memory and time against T and the tile size")
