"""Plots and the widget of notebook 06 (compute).

They consume the records of :mod:`perfkit.compute.compiling`, :mod:`perfkit.compute.kernels` and
:mod:`perfkit.compute.throughput`; the loss-curve plot and table take plain lists. The tables
(:func:`loss_lines`, :func:`attention_table`, :func:`throughput_lines`) are lines of text.

Usage::

    from perfkit.viz.compute import compute_widget, plot_break_even
    plot_break_even(compiling.measure_compile(eager_step, compiled_step))
    build_widget(compute_widget(throughput.StepBench.gpt2(limits)))   # dtype, compile, batch
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.compute.intensity import dram_on_threads  # re-exported: the notebooks draw roofs with it
from perfkit.compute.kernels import AttentionPoint, attention_matrix_bytes
from perfkit.hw import MachineLimits
from perfkit.viz.compute_shapes import alignment_line, plot_shape_sweep
from perfkit.viz.core import Choice, WidgetSpec, plot_roofline, si, tidy

__all__ = ["alignment_line", "attention_table", "compute_widget", "dram_on_threads", "loss_lines",
           "plot_attention_sweep", "plot_break_even", "plot_loss_curves", "plot_shape_sweep",
           "plot_throughput", "plot_thread_roofline", "throughput_lines"]


def plot_thread_roofline(limits: MachineLimits, threads: int | None,
                         points: Sequence[tuple[str, float, float]],
                         intensity_range: tuple[float, float] = (1 / 16, 64), title: str = "") -> Figure:
    """:func:`perfkit.viz.plot_roofline` for points timed on ``threads`` intra-op threads: the
    float32 compute roof of those threads and, where the limits hold a copy of DRAM-sized buffers
    on them (:func:`dram_on_threads`), their memory roof too; else DRAM's on all cores, the most
    any thread count draws (no copy of DRAM-sized buffers measured on them), and the title says
    which.

    Raises:
        TypeError, ValueError: as :func:`dram_on_threads` and :func:`perfkit.viz.plot_roofline`.
    """
    dram = dram_on_threads(limits, threads)
    on = "" if threads is None else f" on {threads} thread{'s' * (threads != 1)}"
    roof = ("memory roof: DRAM's best copy or x + y, same threads" if dram else
            "memory roof: DRAM's on all cores, the most any thread count draws")
    return plot_roofline({f"float32{on}": limits.peak_flops("float32", threads)},
                         dram or limits.copy_bytes_per_s, points, intensity_range=intensity_range,
                         title=f"{title}\n(compute roof{on or ' on all cores'}; {roof})")


def plot_loss_curves(curves: Mapping[str, Sequence[float]], tolerance: float | None = None,
                     title: str = "") -> Figure:
    """Loss per step of several runs, and each run's gap to the first one.

    Args:
        curves: run name -> loss per step (same length); the first is the reference.
        tolerance: optional allowed gap, drawn as a dashed line on the gap panel.
        title: the figure's title.

    Raises:
        ValueError: for no curves or curves of different lengths.
    """
    if not curves:
        raise ValueError("curves must hold at least one run")
    lengths = {len(v) for v in curves.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"curves must be non-empty and of one length, got lengths {sorted(lengths)}")
    ref_name, ref = next(iter(curves.items()))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, losses in curves.items():
        ax1.plot(range(1, len(losses) + 1), losses, label=name)
        if name != ref_name:
            ax2.plot(range(1, len(losses) + 1), [abs(a - b) for a, b in zip(losses, ref)],
                     label=f"|{name} - {ref_name}|")
    if tolerance is not None:
        ax2.axhline(tolerance, ls="--", c="gray", label=f"tolerance {tolerance:.3g}")
    ax1.set(xlabel="step", ylabel="training loss", title="loss per step")
    ax2.set(xlabel="step", ylabel="absolute gap", title=f"gap to {ref_name}")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Same model, same data, same seed: does precision change training?", fontsize=11)
    fig.tight_layout()
    return tidy(fig)


def plot_break_even(record: Any, calls: int | None = None, title: str = "", unit: str = "calls",
                    between: bool = False) -> Figure:
    """Cumulative seconds of eager and compiled calls; dashed: the medians' break-even.

    Args:
        record: a :class:`perfkit.compute.CompileRecord`.
        calls: x-axis length; default twice the break-even point (100 if it never pays).
        title: the figure's title.
        unit: what one call is, in the plural, for the axis and legend ("calls", "steps"), so
            they name the unit the title does.
        between: shade and title :meth:`~perfkit.compute.CompileRecord.break_even_shade` (the paired range).

    Raises:
        TypeError: for a ``unit`` that is not a non-empty str.
    """
    if not isinstance(unit, str) or not unit:
        raise TypeError(f"unit must be a non-empty str ('calls', 'steps'), got {unit!r}")
    one = unit[:-1] if unit.endswith("s") else unit
    eager, compiled = record.eager.median_s, record.compiled.median_s
    be = record.break_even_calls
    n = calls or (int(2 * be) + 10 if math.isfinite(be) else 100)
    xs = [n * i / 200 for i in range(201)]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(xs, [x * eager for x in xs], label=f"eager: {si(eager, 's')} per {one}")
    ax.plot(xs, [max(record.compile_s, 0.0) + x * compiled for x in xs],
            label=f"compiled: {si(record.compile_s, 's')} once + {si(compiled, 's')} per {one}")
    if math.isfinite(be) and be <= n:
        ax.axvline(be, ls="--", c="gray", label=f"break-even at the medians' difference: {be:,.0f} {unit}")
    if between and (shade := record.break_even_shade(unit)):  # the paired range, and the point against it
        ax.axvspan(shade[0], min(shade[1], n), color="gray", alpha=0.15, label=shade[2])
        title = f"{title or 'torch.compile'}\n{shade[3]}"
    ax.set(xlabel=unit, ylabel="cumulative seconds",
           title=title or f"torch.compile: {record.speedup:.2f}x per {one}, paid for after "
                          f"{'never' if not math.isfinite(be) else f'{be:,.0f} {unit}'}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def plot_attention_sweep(points: Sequence[Any], title: str = "") -> Figure:
    """Forward + backward time and saved bytes against sequence length, per implementation.

    Args:
        points: :class:`perfkit.compute.AttentionPoint` s (or any records with ``impl``,
            ``seq_len``, ``seconds`` and ``saved_bytes``).
        title: the figure's title.

    Raises:
        ValueError: for no points.
    """
    if len(points) == 0:
        raise ValueError("points must hold at least one AttentionPoint")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for impl in dict.fromkeys(p.impl for p in points):
        pts = sorted((p for p in points if p.impl == impl), key=lambda p: p.seq_len)
        ax1.plot([p.seq_len for p in pts], [p.seconds * 1e3 for p in pts], "o-", label=impl)
        ax2.plot([p.seq_len for p in pts], [p.saved_bytes / 2**20 for p in pts], "o-", label=impl)
    ax1.set(ylabel="forward + backward (ms, median)", title="time")
    ax2.set(ylabel="saved for backward (MiB)", title="activation memory")
    for ax in (ax1, ax2):
        ax.set(xscale="log", yscale="log", xlabel="sequence length T")
        ax.set_xscale("log", base=2)
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Attention against sequence length", fontsize=11)
    fig.tight_layout()
    return tidy(fig)


def _label(p: Any) -> str:
    return f"{p.precision}{' compiled' if p.compiled else ''}"


def plot_throughput(points: Sequence[Any], selected: Any = None, title: str = "") -> Figure:
    """Tokens/s and model FLOP/s as a share of the measured ceiling (not an MFU: no vendor
    peak) against batch size, one line per (precision, compiled) setting.

    Args:
        points: :class:`perfkit.compute.ThroughputPoint` s.
        selected: one of them to highlight and describe in the title.
        title: the figure's title (default: the selected point's figures).

    Raises:
        ValueError: for no points.
    """
    if len(points) == 0:
        raise ValueError("points must hold at least one ThroughputPoint")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, key in enumerate(dict.fromkeys((p.precision, p.compiled) for p in points)):
        pts = sorted((p for p in points if (p.precision, p.compiled) == key), key=lambda p: p.batch)
        roof = f" (against {pts[0].ceiling}'s ceiling)" if _on_roof(pts[0]) else ""
        style = dict(c=f"C{i}", marker="o", ls="--" if key[1] else "-")
        ax1.plot([p.batch for p in pts], [p.tokens_per_s for p in pts], label=_label(pts[0]), **style)
        ax2.plot([p.batch for p in pts], [100 * p.mfu for p in pts], label=_label(pts[0]) + roof, **style)
    if selected is not None:
        ax1.scatter([selected.batch], [selected.tokens_per_s], s=160, facecolors="none",
                    edgecolors="k", zorder=4)
        ax2.scatter([selected.batch], [100 * selected.mfu], s=160, facecolors="none",
                    edgecolors="k", zorder=4)
        title = title or (
            f"{_label(selected)}, batch {selected.batch}: {si(selected.tokens_per_s, 'tokens/s')}, "
            f"{100 * selected.mfu:.1f} % of its measured ceiling")  # the one the right axis names
    ax1.set(ylabel="tokens / s (median step)", title=title or "throughput against batch size")
    # each point is held against the ceiling of the dtype its matmuls ran in, measured on its
    # threads; an emulated dtype against fp32's (perfkit.sizing.mfu_dtype)
    ceilings = "/".join(sorted({p.ceiling for p in points}))
    threads = sorted({p.threads for p in points if getattr(p, "threads", None)})
    on = f" on {'/'.join(map(str, threads))} thread{'s' * (threads != [1])}" if threads else ""
    ax2.set(ylabel=f"model FLOP/s (% of the {ceilings}\nceiling measured{on})",
            title="share of a measured ceiling (not an MFU: no vendor peak)")
    for ax in (ax1, ax2):
        ax.set(xlabel="batch size")
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in (ax1, ax2):  # one size for both panels' titles: the selected point's is long
        ax.title.set_fontsize(9)
    fig.tight_layout()
    return tidy(fig)


def compute_widget(bench: Any, batches: Sequence[int] = (1, 2, 4, 8, 16, 32),
                   precisions: Sequence[str] = ("fp32", "bf16"), batch: int | None = None,
                   precision: str | None = None) -> WidgetSpec:
    """Precision, compile on/off and batch size -> measured throughput and share of the ceiling.

    Each new setting runs a few real training steps through ``bench`` (a
    :class:`perfkit.compute.StepBench`), which caches them, so returning to a setting is
    instant; the plot shows every setting measured so far. Switching ``compiled`` on
    compiles the model the first time (tens of seconds on a CPU with a cold cache).

    Args:
        bench: the :class:`perfkit.compute.StepBench` that measures and caches.
        batches: batch sizes offered.
        precisions: precisions offered (``"fp16"`` needs CUDA).
        batch, precision: the starting setting (default: the middle batch, the first precision).

    Raises:
        ValueError: for no batches or precisions, or a starting value not offered.
    """
    if len(batches) == 0 or len(precisions) == 0:
        raise ValueError("batches and precisions must not be empty")
    batch = batches[len(batches) // 2] if batch is None else batch
    precision = precisions[0] if precision is None else precision
    if batch not in batches or precision not in precisions:
        raise ValueError(f"batch must be one of {list(batches)} and precision one of {list(precisions)}")

    def show(precision: str, compiled: bool, batch: int) -> Figure:
        point = bench.measure(precision, compiled, batch)  # first, so the plot includes it
        return plot_throughput(bench.points, point)

    return WidgetSpec(show, {
        "precision": Choice(list(precisions), precision, description="precision"),
        "compiled": Choice([False, True], False, description="torch.compile"),
        "batch": Choice(list(batches), batch, description="batch size"),
    }, title="Training-step throughput and share of the measured ceiling, on this machine")


def loss_lines(curves: Mapping[str, Sequence[float]], tail: int = 5, base: str = "fp32") -> list[str]:
    """One line per precision: first and last loss, the mean of the last ``tail`` steps and
    its gap to ``base``'s, and the largest per-step gap to ``base``."""
    check_int("tail", tail, 1)
    if not isinstance(curves, Mapping) or base not in curves:
        raise TypeError(f"curves must be a mapping holding {base!r}, got {curves!r}")
    ref = statistics.fmean(curves[base][-tail:])
    out = []
    for p, c in curves.items():
        mean = statistics.fmean(c[-tail:])
        gap = max(abs(a - b) for a, b in zip(c, curves[base]))
        out.append(f"{p}: loss {c[0]:.3f} -> {c[-1]:.3f}; mean of last {tail} {mean:.4f}, "
                   f"{abs(mean - ref) / ref:.3%} from {base}; largest per-step gap {gap:.4f}")
    return out


_OWN = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # each precision's own matmul dtype


def _on_roof(p: Any) -> bool:
    """Whether a throughput point is held against another dtype's ceiling than its matmuls ran
    in (an emulated dtype against fp32's): its share is then no MFU of that dtype."""
    return _OWN.get(p.precision, p.ceiling) != p.ceiling


def throughput_lines(points: Sequence, share: float = 1.0) -> list[str]:
    """One line per :class:`perfkit.compute.throughput.ThroughputPoint`: step time, tokens/s
    and model FLOP/s as a share of its measured ceiling, after a first line that names that share
    (not an MFU: the field's divides by a vendor's peak); when the threads had part of the machine
    (``share`` < 1: these threads' float32 ceiling over the all-core one), that line says so and
    each line held against the float32 ceiling prints its share of the all-core one beside it. A step
    held against another dtype's ceiling than its matmuls ran in (an emulated bf16 step against
    fp32's) is named for what it is, its model FLOP/s as a share of that roof, not an MFU."""
    check_real("share", share, 0, 1, lo_open=True)
    head = ["(each share below is the step's model FLOP/s over the matmul ceiling its line names, measured "
            + ("on this machine" if share >= 1 else f"on these threads; the float32 one is {share:.0%} of "
               "the all-core float32 ceiling, and each float32 line prints its share of that too")
            + ": a share of a measured ceiling, not an MFU, which divides by a vendor's theoretical peak)"]

    def held(p: Any) -> str:
        t = getattr(p, "threads", None)
        on = f" on {t} thread{'s' * (t != 1)}" if share < 1 and t else ""  # the ceiling's own threads
        every = f" ({p.mfu * share:.1%} of the all-core one)" if share < 1 and p.ceiling == "float32" else ""
        if _on_roof(p):
            return (f"model FLOP/s {p.mfu:5.1%} of the {p.ceiling} ceiling{on}{every}, not an MFU: its "
                    f"matmuls ran in {_OWN[p.precision]}")
        return f"model FLOP/s {p.mfu:5.1%} of the {p.ceiling} ceiling{on}{every}"

    return head + [f"{p.precision}{' compiled' if p.compiled else '':9} batch {p.batch:3d}: "
                   f"{p.step.median_s * 1e3:7.1f} ms/step, {si(p.tokens_per_s, 'tokens/s'):>14}, {held(p)}"
                   for p in points]


def attention_table(points: Sequence, batch: int, heads: int, head_dim: int) -> list[str]:
    """One line per length of :func:`perfkit.compute.kernels.attention_sweep`'s ``"naive"``
    and ``"sdpa"`` points: time, saved bytes against the prediction (one ``T x T`` fp32 matrix
    per head; ``B·H·T·(d_head + 1)`` floats fused) and naive over fused time."""
    for p in check_items("points", points):
        check_type("points[i]", p, AttentionPoint)
    for name, v in (("batch", batch), ("heads", heads), ("head_dim", head_dim)):
        check_int(name, v, 1)
    by, mib = {(p.impl, p.seq_len): p for p in points}, 2**20
    lines = []
    for t in sorted({p.seq_len for p in points}):
        nv, fu = by["naive", t], by["sdpa", t]
        lines.append(f"T={t:5d}: naive {nv.seconds * 1e3:7.2f} ms, {nv.saved_bytes / mib:6.2f} MiB saved "
                     f"(predicted {attention_matrix_bytes(batch, heads, t) / mib:6.2f}); sdpa "
                     f"{fu.seconds * 1e3:7.2f} ms, {fu.saved_bytes / mib:5.2f} MiB (predicted "
                     f"{batch * heads * t * (head_dim + 1) * 4 / mib:5.2f}); {nv.seconds / fu.seconds:.2f}x")
    return lines
