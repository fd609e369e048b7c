"""Plots, tables and the widget of notebook 01 (profiling); they consume monitor records.

Usage::

    from perfkit.viz.profiling import plot_phase_bars, findings_markdown
    plot_phase_bars({"slow data": before, "fixed": after})   # StepSummary records
    findings_markdown(diagnose_shares(after))
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit.units import si, si_beside, si_interval
from perfkit.viz.core import FloatControl, IntControl, WidgetSpec, tidy
from perfkit.viz.profiling_text import eta_split_text, first_step, neither_floor
from perfkit.viz.profiling_widget import widget_expectation_text

__all__ = ["PHASE_COLORS", "against_bound", "breakdown_widget", "ceiling_rise_note", "findings_markdown",
           "eta_split_text", "first_step", "loader_explain", "medians_moved_text", "neither_floor",
           "plot_diagnosis", "plot_phase_bars", "plot_scalars", "ridge_text", "stall_note",
           "summary_markdown", "top_ops_markdown", "widget_expectation_text"]

PHASE_COLORS = {"data": "tab:orange", "forward": "tab:blue", "backward": "tab:cyan",
                "optimizer": "tab:green", "communication": "tab:red", "other": "tab:gray"}
_EXTRA_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:olive"]


def _phase_values(record: Any, unit: str, stat: str = "mean") -> dict[str, float]:
    """Top-level phase -> value in ``unit`` ("ms" or "%") for any record with shares; with
    ``stat="median"`` a StepSummary gives its median shares, or in ms each phase's own median."""
    median = stat == "median" and hasattr(record, "median_shares")
    if median and unit == "ms" and hasattr(record, "phases"):  # a phase's median, not a share of another's
        return {k: p.p50_s * 1e3 for k, p in record.phases.items() if p.parent is None}
    shares = dict(record) if isinstance(record, Mapping) else (
        record.median_shares() if median else record.shares())
    if unit == "%":
        return {k: 100 * v for k, v in shares.items()}
    if isinstance(record, Mapping):
        raise ValueError("unit='ms' needs a StepSummary or TraceBreakdown, not a dict of shares")
    step_s = (record.step.p50_s if median else record.step.mean_s) if hasattr(record, "step") \
        else record.step_mean_s
    return {k: v * step_s * 1e3 for k, v in shares.items()}


def stall_note(summary: Any, factor: float = 3.0) -> str:
    """A sentence naming the phases whose slowest steps (p99) took over ``factor`` times their
    median and over 5 % of the median step more, and what they do to the mean step; ``""``
    where none did. Such a stall moves the means and every share of them, not the medians."""
    slow = [p for p in summary.phases.values() if p.parent is None and p.p99_s > factor * p.p50_s > 0
            and p.p99_s - p.p50_s > 0.05 * summary.step.p50_s]
    if not slow:
        return ""
    st = summary.step
    return ("Stalled steps: " + "; ".join(f"{p.name}'s p99 {p.p99_s * 1e3:.2f} ms is "
                                          f"{p.p99_s / p.p50_s:.1f}x its median {p.p50_s * 1e3:.2f} ms"
                                          for p in slow)
            + f". They lengthen the mean step to {st.mean_s * 1e3:.2f} ms against a median of "
            f"{st.p50_s * 1e3:.2f} ms ({st.mean_s / st.p50_s:.2f}x) and move every share of the means: "
            "read the medians.")


def ceiling_rise_note(obs: Any, setter: str) -> str:
    """``obs``'s note (a :class:`perfkit.ceilings.Observation`) with as many digits as show the
    rise, naming ``setter``, what set the ceiling it beat (``limits.sources`` before it), and
    that the new ceiling is its rate; ``""`` when no ceiling rose."""
    if not obs.raised:
        return ""
    unit = "B/s" if obs.kind in ("dram", "cache") else "FLOP/s"
    d = next((d for d in range(3, 16) if si(obs.before, unit, d) != si(obs.after, unit, d)), 15)
    name = obs.note.split(" ceiling rose from ")[0]  # "the float32 matmul"
    return (f"{name} ceiling rose from {si(obs.before, unit, d)} to {si(obs.after, unit, d)}, the rate "
            f"of {obs.what}: it ran faster than what had set the ceiling ({setter or 'the sweep'})")


def against_bound(est: Any, bound: float, unit: str = "x") -> str:
    """Where an estimate (:class:`perfkit.estimate.Estimate`) lies against an upper ``bound``,
    its figure and its interval as printed: a clause such as "its figure above it, its interval
    reaching below it"."""
    side = est.clear_of(bound, unit)
    if side:
        return f"its whole interval {'above' if side == 'above' else 'under'} it"
    if not est.has_interval or est.low == est.high:
        return f"its figure {'above' if est.value > bound else 'at or under'} it (no interval)"
    if est.value > bound:
        return ("its figure above it, its interval reaching below it: this run cannot tell noise from a "
                "change in the rest of the step")
    shown = si_beside(bound, est.value, est.low, est.high, unit)
    on_top = shown == si_interval(est.value, est.low, est.high, unit)[2]  # the top end prints as the bound
    return "its figure at or under it, " + (f"its interval's top end on it as printed (both {shown})"
                                            if on_top else "its interval reaching above it")


def medians_moved_text(first: Any, second: Any, moved: bool) -> str:
    """Why the medians of two runs of one step, one right after the other, differ (``first`` and
    ``second``: :class:`perfkit.timing.Measurement`; ``moved``: the ratio's interval lies clear of
    1x): both medians, and what the run can and cannot tell apart. A second run faster than the
    first is told from neither a change in the machine's speed nor a warm-up that had not finished
    when the first run began; where the first run's own p10 reaches the second's median, part of
    the first run already ran at the second's speed. A second run slower than the first did the
    same work on a warm model: something outside the step changed, which the run does not name."""
    a, b = first.median_s, second.median_s
    text = f"The first run's median was {si(a, 's')}, the second's {si(b, 's')}"
    if not moved:
        return (text + ": whether the machine's speed changed between the two runs this run cannot say (its "
                "interval holds 1x); if it did, even medians moved")
    if b < a:
        return (text + (f"; the first run's own p10, {si(first.p10_s, 's')}, reaches the second's median: "
                        "part of the first run already ran at the second's speed" if first.p10_s <= b else "")
                + f". This run does not tell a change in the machine's speed from a warm-up ({first.warmup} "
                "steps) that had not finished when the first run began; either moves even a median")
    return (text + ": the second run did the same work on a warm model, so something outside the step "
            "changed between the runs (other load, a lower clock), which this run does not measure; "
            "even medians move then")


def loader_explain(data_s: float, alone: Any, factor: float = 1.5,
                   shares: tuple[float, float, tuple[float, float]] | None = None) -> dict[str, str]:
    """A verdict's causes for a data share judged against the loader timed alone (``alone``, an
    Estimate in s per batch, allowed up to ``factor`` times its high end in the step): above the
    band, below it (the data phase in the step under the loader's interval alone), and inside it
    (the share has no interval: held says only where the figure lies). With ``shares`` (the judged
    share, the median of the steps' own shares, the band), each ends on where the other statistic
    lies against the band, and whether the choice between the two decides the verdict."""
    return {k: v + _other_share(shares) for k, v in _loader_causes(data_s, alone, factor).items()}


def _other_share(shares: tuple[float, float, tuple[float, float]] | None) -> str:
    if shares is None:
        return ""
    judged, other, (lo, hi) = shares
    side = {x: "below" if x < lo else "above" if x > hi else "inside" for x in (judged, other)}.get
    return (f" The verdict judges the data phase's median over the step's median, {judged:.3g}; the median "
            f"of the steps' own data shares, {other:.3g}, lies {side(other)} the band "
            f"({lo:.3g} to {hi:.3g})" + (": the choice between these two statistics decides this verdict."
                                         if side(other) != side(judged) else ", as the judged figure does."))


def _loader_causes(data_s: float, alone: Any, factor: float) -> dict[str, str]:
    return {"held": (
        "The measured share, a ratio of two medians of the same steps, has no interval: held says only "
        f"that this figure lies in the band. In the step the data phase's median took "
        f"{data_s / alone.high:.2f}x the high end of the loader's interval alone, against the {factor:g}x "
        "the band's top edge allows, an allowance, not a measurement."),
        "above": (
        f"The data phase's median took {data_s / alone.high:.2f}x the high end of the loader's interval "
        f"alone; the band's top edge allows {factor:g}x that high end for what the step does to the loader "
        f"(caches the model's work evicts); that {factor:g}x is an allowance, not a measurement, and this "
        "run does not measure what added the rest. The measured share, a ratio of two medians of the same "
        "steps, has no interval: this run cannot say whether noise alone could carry it past the edge."),
        "below": (
        f"In the step the data phase's median took {data_s * 1e3:.2f} ms, {data_s / alone.value:.2f}x the "
        f"loader's median alone ({alone.value * 1e3:.2f} ms) and under its interval's low end "
        f"({alone.low * 1e3:.2f} ms): the loader ran faster inside the step than alone, the opposite of the "
        "direction the band allows for; this run does not measure why.")}


def ridge_text(intensity: float, peak: float, limits: Any, where: Any = None, near: float = 0.5) -> str:
    """Which roof is the lower one at ``intensity`` (FLOP/B) under ``peak`` (FLOP/s), by the DRAM
    ceiling of ``limits`` (a :class:`perfkit.hw.MachineLimits`) and by the fastest copy of its
    DRAM-sized buffers that it holds (the figure the ceiling credits an ``x + y`` 9/8 of), saying
    so when the two ridge points put the intensity on different sides; else the DRAM figure past
    which the step would change sides (the file keeps the highest run's, and another run's own
    figure can lie on the other side of it). With ``where`` (the step's
    :class:`perfkit.compute.StepRoofline`) placed "neither", it adds the DRAM figure above which
    that holds on either side (:func:`neither_floor`)."""
    bw = limits.copy_bytes_per_s
    floor = neither_floor(where, peak, near) if where is not None else None
    either = (f"; either way, the step's {si(where.mfu.high * peak, 'FLOP/s')} (the top of its interval) "
              f"stays under {near:.0%} of the lower roof for any DRAM figure above {si(floor, 'B/s')}, so "
              f"'under {near:.0%} of the roof above it' does not rest on that side") if floor else ""
    roof = "memory" if intensity < peak / bw else "compute"
    text = (f"intensity {intensity:.1f} FLOP/B against a ridge point of {peak / bw:.1f} FLOP/B (the limits "
            f"file's fp32 ceiling over its DRAM ceiling, {si(bw, 'B/s')}), so by that figure the {roof} roof "
            f"is the lower one ({si(min(peak, intensity * bw), 'FLOP/s')})")
    copy = max((p.best_bytes_per_s for p in limits.copy_points
                if p.op == "copy" and p.nbytes == limits.dram_nbytes), default=None)
    if copy is None or copy >= bw or ("memory" if intensity < peak / copy else "compute") == roof:
        flip = f"{si(peak / intensity, 'B/s')}" if intensity > 0 else ""
        return text + (f"; that side rests on the limits file's DRAM figure: by its own ridge point, a run "
                       f"whose DRAM figure lies {'below' if roof == 'compute' else 'above'} {flip} (notebook "
                       f"00 prints its run's beside the file's) puts the step on the "
                       f"{'memory' if roof == 'compute' else 'compute'} side" if flip else "") + either
    return (text + f"; by the fastest copy of DRAM-sized buffers the file holds, {si(copy, 'B/s')}, the "
            f"ridge point is {peak / copy:.1f} FLOP/B and the memory roof would be the lower one "
            f"({si(intensity * copy, 'FLOP/s')}): the step lies between the two ridge points, so which roof "
            "is lower is not settled here" + either)


def plot_phase_bars(records: Mapping[str, Any], unit: str = "ms", ax: Any = None,
                    title: str = "Where the step goes", stat: str = "mean") -> Figure:
    """One horizontal stacked bar per run: each top-level phase's mean time (or share).

    Args:
        records: label -> :class:`~perfkit.profiling.StepSummary`,
            :class:`~perfkit.profiling.TraceBreakdown`, or (``unit="%"`` only) a dict of shares.
        unit: ``"ms"`` (mean ms per step) or ``"%"`` (share of the step).
        ax: draw into this axes instead of a new figure.
        title: the axes title.
        stat: ``"mean"`` (shares of the mean step) or ``"median"``: each phase's median share
            over the steps (``unit="%"``) or its own median time (``unit="ms"``), which one
            stalled step does not move; neither need sum to the step's. A record without median
            shares draws its means.

    Raises:
        ValueError: for no records or an unknown ``unit`` or ``stat``.
    """
    if not records:
        raise ValueError("records must hold at least one labelled record")
    if unit not in ("ms", "%"):
        raise ValueError(f"unit must be 'ms' or '%', got {unit!r}")
    if stat not in ("mean", "median"):
        raise ValueError(f"stat must be 'mean' or 'median', got {stat!r}")
    values = {label: _phase_values(r, unit, stat) for label, r in records.items()}
    names: list[str] = []
    for v in values.values():
        names += [k for k in v if k not in names and k != "other"]
    names.append("other")
    colors = dict(PHASE_COLORS)
    for i, n in enumerate(k for k in names if k not in colors):
        colors[n] = _EXTRA_COLORS[i % len(_EXTRA_COLORS)]
    labels = list(values)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(
        figsize=(8, 0.7 * len(labels) + 1.6))
    left = [0.0] * len(labels)
    widest = max(sum(v.values()) for v in values.values()) or 1.0  # the x axis' extent
    for name in names:
        widths = [values[lab].get(name, 0.0) for lab in labels]
        bars = ax.barh(labels, widths, left=left, color=colors[name], label=name)
        for bar, w in zip(bars, widths, strict=True):
            # a label needs room on the axis, whatever its own bar's total: 9 % of the axis
            # holds "19.3" or "46%" at this size
            if w / widest > 0.09:
                ax.text(bar.get_x() + w / 2, bar.get_y() + bar.get_height() / 2,
                        f"{w:.1f}" if unit == "ms" else f"{w:.0f}%", ha="center",
                        va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel(f"{stat} ms per step" if unit == "ms" else
                  "% of the step" + (" (median over the steps)" if stat == "median" else " (of the means)"))
    ax.set_title(title)
    # one column beside the bars: a row below them collides with the axis label
    ax.legend(ncol=1, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return tidy(fig)


def plot_scalars(scalars: Mapping[str, Sequence[tuple[int, float]]], tags: Sequence[str],
                 threshold: float | None = None, events: Mapping[str, float] | None = None,
                 ax: Any = None, title: str = "Read back from TensorBoard",
                 ylabel: str = "") -> Figure:
    """Scalars of a TensorBoard run against the training step, one line per tag.

    Args:
        scalars: tag -> ``[(step, value), ...]``, as
            :func:`perfkit.profiling.read_scalars` returns them.
        tags: which tags to draw (``phase/NAME/share`` tags take their phase's colour).
        threshold: a dashed horizontal line there (an alert threshold), or ``None``.
        events: label -> step, each drawn as a dotted vertical line (a change in the run).
        ax: draw into this axes instead of a new figure.
        title, ylabel: the axes' title and y label.

    Raises:
        ValueError: for no tags, or a tag ``scalars`` does not hold.
    """
    if not tags:
        raise ValueError("tags must name at least one scalar")
    missing = [t for t in tags if t not in scalars]
    if missing:
        raise ValueError(f"tags {missing} are not in scalars; it holds {sorted(scalars)}")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(8, 3))
    for tag in tags:
        steps, values = zip(*scalars[tag])
        phase = tag.split("/")[1] if tag.startswith("phase/") else None
        ax.plot(steps, values, marker="o", label=tag, color=PHASE_COLORS.get(phase))
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1,
                   label=f"threshold {threshold:g}")
    for label, step in (events or {}).items():
        ax.axvline(step, color="gray", linestyle=":", linewidth=1.5, label=label)
    ax.set_xlabel("training step (end of the window)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return tidy(fig)


def findings_markdown(findings: Sequence[Any]) -> str:
    """:func:`~perfkit.profiling.diagnose_shares`'s findings as Markdown (a line saying so
    when there are none)."""
    if not findings:
        return "**No bottleneck found**: no phase crosses its threshold."
    out = []
    for f in findings:
        recs = "".join(f"\n  - {r}" for r in f.fix)
        out.append(f"- **{f.kind}** ({f.severity}): {f.evidence}{recs}\n  - taught in "
                   f"`{f.notebook}`")
    return "\n".join(out)


def summary_markdown(summary: Any) -> str:
    """A StepSummary as a Markdown table: per-phase mean, p50, p95, p99 (ms), share of the means
    and median share. Under 100 steps the footnote says p95 and p99 are about the slowest steps,
    not tails; where a phase stalled it says so (:func:`stall_note`), and gives the throughput at
    the median step beside the whole run's."""
    rows = ["| phase | mean ms | p50 ms | p95 ms | p99 ms | share of means | median share |",
            "|---|---|---|---|---|---|---|"]
    for p in [*summary.phases.values(), summary.step]:
        name = f"&nbsp;&nbsp;{p.name} (in {p.parent})" if p.parent else p.name
        med = "" if p.median_share is None else f"{p.median_share:.1%}"
        rows.append(f"| {name} | {p.mean_s * 1e3:.2f} | {p.p50_s * 1e3:.2f} | "
                    f"{p.p95_s * 1e3:.2f} | {p.p99_s * 1e3:.2f} | {p.share:.1%} | {med} |")
    tput = []
    if summary.samples_per_s:
        tput.append(f"{summary.samples_per_s:,.0f} samples/s")
    if summary.tokens_per_s:
        tput.append(f"{summary.tokens_per_s:,.0f} tokens/s")
    skew = summary.step.mean_s / summary.step.p50_s if summary.step.p50_s > 0 else 1.0
    if tput and abs(skew - 1) > 0.05:  # the run's rate is over its mean step; a stall slows it
        tput[-1] += " over the whole run (its mean step); at the median step " + " and ".join(
            f"{r * skew:,.0f} {u}" for r, u in ((summary.samples_per_s, "samples/s"),
                                               (summary.tokens_per_s, "tokens/s")) if r)
    note = stall_note(summary)
    foot = f"\n\n{summary.steps} steps on {summary.device}" + (
        f"; {', '.join(tput)}" if tput else "") + (
        f"; from {summary.steps} steps, p99 lies between the two slowest steps and p95 among the "
        f"{max(2, math.ceil(0.05 * summary.steps) + 1)} slowest: read both as about the slowest, not as tails"
        if summary.steps < 100 else "") + (f". {note}" if note else "")
    return "\n".join(rows) + foot


def top_ops_markdown(ops: Sequence[Any], n: int = 10) -> str:
    """The profiler's top operators by self time as a Markdown table; the device column only
    where some operator ran on a device (on a CPU-only run it would be all zeros)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    device = any(o.self_device_s > 0 for o in ops[:n])
    rows = ["| operator | calls | self CPU ms | CPU total ms |" + (" self device ms |" if device else "")
            + " share |", "|---|---|---|---|" + "---|" * device + "---|"]
    for o in ops[:n]:
        rows.append(f"| `{o.name[:60]}` | {o.calls} | {o.self_cpu_s * 1e3:.2f} | {o.cpu_total_s * 1e3:.2f} | "
                    + (f"{o.self_device_s * 1e3:.2f} | " if device else "") + f"{o.share:.1%} |")
    return "\n".join(rows)


def plot_diagnosis(summary: Any, findings: Sequence[Any], title: str = "") -> Figure:
    """A run's stacked phase bar above its findings, each with every fix it names, in one
    figure (the widget's), whose text panel is as tall as its lines."""
    med = summary.median_shares() if hasattr(summary, "median_shares") else {}
    lines = [f"step {summary.step.p50_s * 1e3:.1f} ms (p50)"
             + (f", {summary.samples_per_s:,.0f} samples/s over the whole run (its mean step)"
                if summary.samples_per_s else "")]
    if med:  # the findings judge these, and the bar above shows them
        lines.append("median shares (the findings judge these): "
                     + ", ".join(f"{k} {v:.0%}" for k, v in med.items() if v >= 0.005))
    if not findings:
        lines.append("diagnosis: no bottleneck found")
    for f in findings:  # wrapped to the figure's width: a longer line runs off its edge
        lines += textwrap.wrap(f"[{f.severity}] {f.evidence}", 90, subsequent_indent="    ")
        for i, fix in enumerate(f.fix):
            lines += textwrap.wrap(f"{'try' if i == 0 else 'or'}: {fix}", 90, initial_indent="    ",
                                   subsequent_indent="    ")
    text_in = 0.17 * len(lines) + 0.2  # inches: 8.5 pt monospace lines
    fig, (ax, tax) = plt.subplots(2, 1, figsize=(8, 2.4 + text_in), height_ratios=[2.4, text_in])
    plot_phase_bars({"median shares" if med else "mean step": summary}, unit="%", ax=ax,
                    title=title or "Phase shares", stat="median" if med else "mean")
    tax.axis("off")
    tax.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", fontsize=8.5, family="monospace",
             transform=tax.transAxes)
    fig.tight_layout()
    return tidy(fig)


def breakdown_widget(workload: str = "digits", steps: int = 6, warmup: int = 2,
                     max_cost_ms: float = 2.0) -> WidgetSpec:
    """Sliders for batch size, DataLoader workers and per-sample data cost.

    Each change re-runs a short measurement (:func:`perfkit.profiling.measure_workload`)
    and shows the phase shares with the diagnosis (:func:`perfkit.profiling.diagnose_shares`).
    """
    from perfkit.profiling.rules import diagnose_shares
    from perfkit.profiling.workload import measure_workload

    last: dict[str, Any] = {}  # the latest figure's settings and summary (widget_expectation_text reads it)

    def show(batch_size: int, num_workers: int, cost_ms: float) -> Figure:
        s = measure_workload(workload, batch_size=batch_size, num_workers=num_workers,
                             cost_ms=cost_ms, steps=steps, warmup=warmup)
        last.update(settings={"batch_size": batch_size, "num_workers": num_workers, "cost_ms": cost_ms},
                    summary=s)
        return plot_diagnosis(s, diagnose_shares(s), title=f"{workload}: batch {batch_size}, "
                              f"{num_workers} workers, {cost_ms:.1f} ms/sample")

    show.last = last  # type: ignore[attr-defined]
    return WidgetSpec(show, {
        "batch_size": IntControl(8, 128, 64, step=8, description="batch size"),
        "num_workers": IntControl(0, 2, 0, description="DataLoader workers"),
        "cost_ms": FloatControl(0.0, max_cost_ms, 0.5, step=0.1,
                                description="data cost (ms/sample)"),
    }, title="Phase breakdown and diagnosis, measured on this machine")

