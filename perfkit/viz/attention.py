"""Plots and the widget of notebook 12 (attention): the tiles each rank computes, saved bytes
against length, and tile size and length against memory and time.

Usage::

    plot_tiles(64, world=4, tile=8)                       # contiguous against zig-zag
    build_widget(attention_widget(model, points))          # model: compute.TileCostModel
    plot_saved_bytes([256, 512], {"eager": [...], "flash": [...]})
    plot_tile_times(points, model)                         # time against tile size, per length
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.compute.attention_cost import IMPLS, AttentionTiming, TileCostModel
from perfkit.compute.flash import check_tile, eager_saved_bytes, flash_saved_bytes, tile_pairs
from perfkit.estimate import Estimate
from perfkit.parallel.context import SPLITS, segments
from perfkit.parallel.context_model import imbalance, ring_work
from perfkit.viz.core import Choice, LogControl, WidgetSpec, si, tidy

__all__ = ["attention_widget", "eager_line_label", "plot_saved_bytes", "plot_tile_times", "plot_tiles",
           "rate_note", "rounds_note", "row_flag", "row_note", "tile_owner", "times_table"]


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
    ax.set(xscale="log", yscale="log", xlabel="sequence length T",
           ylabel="bytes saved for backward")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def plot_tile_times(points: Sequence[AttentionTiming], model: TileCostModel | None = None,
                    batch: int = 1, heads: int = 4, head_dim: int = 32,
                    fitted_lens: Sequence[int] | None = None) -> Figure:
    """Forward + backward seconds of the tiled attention against the tile size, one colour per
    length: the measured medians as points, ``model``'s prediction as a line through them,
    solid at the lengths in ``fitted_lens`` (those the model was fitted on) and dashed at the
    others, where it predicts (``None``: every line solid). The untiled implementations in
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
        ax.plot([], [], "-", color="grey", label="model, fitted on this length")
        if fitted is not None and {p.seq_len for p in flash} - fitted:
            ax.plot([], [], "--", color="grey", label="model, predicted (not fitted on it)")
    if column:
        ax.axvline(tiles[-1] * 2 ** 0.5, color="grey", ls=":", lw=0.8)   # tiles left, untiled right
    ax.set(xscale="log", yscale="log", ylabel="forward + backward",
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
    (FlashAttention per tile size, then eager and SDPA), in seconds or, with ``per_flop``, in
    picoseconds per FLOP with a last row of each column's change over the two longest lengths
    (in the tile model a tile size's time per FLOP does not move with the length).

    Raises:
        ValueError, TypeError: for no points, or points that are not :class:`AttentionTiming`.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    check_type("per_flop", per_flop, bool)
    cols = sorted({(IMPLS.index(p.impl), p.tile) for p in pts})
    name = {c: f"{IMPLS[c[0]]}{c[1] or ''}".replace("sdpa", "SDPA") for c in cols}
    lens = sorted({p.seq_len for p in pts})
    cell = {(p.seq_len, (IMPLS.index(p.impl), p.tile)): p.median_s / p.flops if per_flop else p.median_s
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
    how far the measured points beyond that length lie from the line, each with SDPA's time per
    FLOP there over its own at that length where SDPA was timed at both (SDPA keeps no ``T x T``
    scores, so a change in it is the row's, not a cache's).

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
    sdpa = {p.seq_len: p.median_s / p.flops for p in points if p.impl == "sdpa"}

    def row(t: int) -> str:   # SDPA (no T x T scores) over the same lengths: the row's own change
        return (f",\nwhere SDPA ran {sdpa[t] / sdpa[at.seq_len]:.2f}x its time per FLOP at T = {at.seq_len}"
                if t in sdpa and at.seq_len in sdpa else "")
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
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
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
            ax.legend(fontsize=8)
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


def rate_note(points: Sequence[AttentionTiming], model: TileCostModel) -> str:
    """Whether any tiled call, whole (its per-tile overheads included), ran above ``model``'s
    fitted FLOP-rate parameter, which the model makes a ceiling on every call: where
    some did, a sentence naming them with their whole-call rates (the fit's rate is then not one
    the tiles run at: one rate and one cost per visit do not fit every tile size); where none
    did, a sentence saying each stayed below it. Starts with a space. (Text, kept beside the
    figure of the same points.)

    Raises:
        TypeError: for points that are not :class:`AttentionTiming` or ``model`` not a
            :class:`TileCostModel`.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    check_type("model", model, TileCostModel)
    flash = [p for p in pts if p.impl == "flash"]
    fast = [p for p in flash if p.flops / p.median_s > model.flop_rate]
    digits = 3  # enough that each call named "above" prints above the fit's rate

    def alike(d: int) -> bool:
        return any(si(p.flops / p.median_s, "FLOP/s", d) == si(model.flop_rate, "FLOP/s", d) for p in fast)

    while digits < 6 and alike(digits):
        digits += 1
    rate = si(model.flop_rate, "FLOP/s", digits)
    if not fast:
        return (f" Every tiled call ran below the fitted rate parameter, {rate}, as the model, which "
                "adds each tile visit's cost to the FLOPs' time, requires.")
    names = ", ".join(f"tile {p.tile} at T = {p.seq_len} ({si(p.flops / p.median_s, 'FLOP/s', digits)})"
                      for p in fast)
    return (f" Whole calls, their tile visits included, ran above the fitted rate parameter, {rate}: "
            f"{names}. The model makes that rate a ceiling on every call, so it is a fitted parameter, not a "
            "rate the tiles run at: one rate and one cost per visit do not fit every tile size alike.")


def rounds_note(times_s: Sequence[float], measured: Estimate, where: str) -> str:
    """A sentence on the rounds behind ``measured`` (their median interval): their range, the
    slowest round over their median and the next slowest over it, and, where the slowest is over
    twice the next slowest and is the interval's high end, that this one round sets that end
    (an order-statistic interval's ends are rounds' own times). ``where`` names the rounds
    (``"at T = 1536"``).

    Raises:
        TypeError, ValueError: for times not numbers > 0, ``measured`` not an
            :class:`~perfkit.estimate.Estimate` or ``where`` not a string.
    """
    ts = sorted(check_real(f"times_s[{i}]", t, 0, lo_open=True)
                for i, t in enumerate(check_items("times_s", times_s)))
    est = check_type("measured", measured, Estimate)
    check_type("where", where, str)
    med = statistics.median(ts)
    text = f"Its {len(ts)} rounds {where} ran from {si(ts[0], 's')} to {si(ts[-1], 's')}"
    if len(ts) < 3:
        return text + "."
    text += f", the slowest {ts[-1] / med:.3g}x their median, the next slowest {ts[-2] / med:.3g}x"
    if ts[-1] > 2 * ts[-2] and est.has_interval and est.high >= ts[-1]:
        text += (f": one round, {ts[-1] / ts[-2]:.3g}x the next slowest, sets the interval's high end by "
                 "itself (a round the machine slowed, or a call that ran so; this run does not tell which)")
    return text + "."


def _per_flop_change(pts: Sequence[AttentionTiming], impl: str, tile: int = 0) -> float | None:
    """One column's change in time per FLOP over the two longest lengths (None if not timed at both)."""
    lens = sorted({p.seq_len for p in pts})[-2:]
    at = {p.seq_len: p.median_s / p.flops for p in pts if p.impl == impl and p.tile == tile}
    return at[lens[1]] / at[lens[0]] - 1 if len(lens) == 2 and all(t in at for t in lens) else None


def _row_drift(pts: Sequence[AttentionTiming]) -> tuple[list[float], float]:
    """Every column's change per FLOP over the two longest lengths, and the largest change (in
    size) of any column between two consecutive shorter lengths (0 with fewer than 3 lengths)."""
    lens, cols = sorted({p.seq_len for p in pts}), sorted({(p.impl, p.tile) for p in pts})
    cell = {(p.seq_len, (p.impl, p.tile)): p.median_s / p.flops for p in pts}

    def change(a: int, b: int) -> list[float]:
        return [cell[b, c] / cell[a, c] - 1 for c in cols if (a, c) in cell and (b, c) in cell]

    return change(lens[-2], lens[-1]), max((abs(x) for a, b in zip(lens[:-2], lens[1:-1])
                                            for x in change(a, b)), default=0.0)


def row_flag(points: Sequence[AttentionTiming], tile: int = 0) -> str:
    """A clause for a headline where the whole row of the longest length slowed, or (with
    ``tile``) moved the way that flash tile did, as :func:`row_note` counts it: SDPA's change,
    which the outcome does not mark; ``""`` otherwise. Starts with a space.

    Raises:
        TypeError, ValueError: for no points or points that are not :class:`AttentionTiming`.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    lens, ctl, own = sorted({p.seq_len for p in pts}), _per_flop_change(pts, "sdpa"), _per_flop_change(
        pts, "flash", tile) if tile else None
    if ctl is None or (ctl <= (drift := _row_drift(pts)[1]) and not (own is not None and ctl * own > 0)):
        return ""
    return (f" (SDPA, which no tile cost enters, ran {ctl:+.0%} per FLOP from T = {lens[-2]} to {lens[-1]}"
            + (f", the way tile {tile} did ({own:+.0%}): the row moved too" if ctl <= drift else
               ": the whole row slowed") + ", which the outcome does not mark)")


def row_note(points: Sequence[AttentionTiming], impl: str, tile: int = 0, miss: float | None = None,
             band: float | None = None) -> str:
    """Whether the whole row of the longest length moved: one column's change in time per FLOP
    over the two longest lengths beside SDPA's (no Python tiles, no ``T x T`` scores). SDPA's
    rising by more than any column moved between the shorter lengths counts as the row slowing
    (the machine's doing), its moving less but the column's way as the row moving with it; then,
    with ``miss`` (the column's miss at the longest length) and ``band``, also that miss net of
    SDPA's change. Starts with a space; ``""`` without SDPA at both lengths.

    Raises:
        TypeError: for points that are not :class:`AttentionTiming`.
        ValueError: for fewer than two lengths timed, or ``miss`` without ``band``.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    lens = sorted({p.seq_len for p in pts})
    if len(lens) < 2 or (miss is None) != (band is None):
        raise ValueError("row_note needs timings at two lengths or more, and miss and band together")
    own, ctl = _per_flop_change(pts, impl, tile), _per_flop_change(pts, "sdpa")
    if own is None or ctl is None or impl == "sdpa":
        return ""
    (a, b), (last, drift) = lens[-2:], _row_drift(pts)
    name = f"tile {tile}'s" if impl == "flash" else f"{impl}'s"
    text = (f" From T = {a} to {b} {name} time per FLOP changed {own:+.0%}, SDPA's, which keeps neither "
            f"Python tiles nor T x T scores, {ctl:+.0%}")
    others = [x for c in sorted({(p.impl, p.tile) for p in pts} - {(impl, tile), ("sdpa", 0)})
              if (x := _per_flop_change(pts, *c)) is not None]
    if ctl <= drift and ctl * own > 0:   # SDPA moved the column's way: the row moved, not the column alone
        like = [x for x in others if x * own > 0] + [ctl]
        span = " to ".join(dict.fromkeys(f"{x:+.0%}" for x in (min(like), max(like))))
        text += (f", the same way: SDPA and {len(like) - 1} of the {len(others)} other columns changed "
                 f"{span}, so this run does not call the change {name} own: beyond SDPA's, it changed "
                 f"{(1 + own) / (1 + ctl) - 1:+.0%}")
    elif ctl <= drift:
        return text + (f", within the {drift:.0%} any column moved between the shorter lengths: the row "
                       f"as a whole did not slow, so the change is {name} own.")
    else:
        text += (f", more than the {drift:.0%} any column moved between the shorter lengths; every "
                 f"column changed {min(last):+.0%} to {max(last):+.0%}: the whole row ran slower, which no "
                 f"model here holds (the machine's doing, not the {'tile' if impl == 'flash' else 'eager'} "
                 f"model's), so this run does not separate {name} own change from the row's")
        text += f"; beyond SDPA's, {(1 + own) / (1 + ctl):.2f}x" if miss is None else ""
    if miss is None or band is None:
        return text + "."
    net = (1 + miss) / (1 + ctl) - 1
    return text + (f". Were SDPA's change the row's in every column, the miss at T = {b} would be "
                   f"{net:+.0%}, {'within' if abs(net) <= band else 'beyond'} the band (±{band:.0%}).")
