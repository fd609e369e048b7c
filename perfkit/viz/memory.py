"""Plots and widgets of notebooks 04 (memory anatomy) and 05 (ZeRO and LoRA).

They consume :mod:`perfkit.memory.model_states` and :mod:`perfkit.memory.activations` records and
:mod:`perfkit.jobs.zero_bench` results; nothing here measures.

Usage::

    from perfkit.viz.memory import plot_memory_stack, memory_widget
    plot_memory_stack({"predicted": gpt2_step_memory(64, 2, 2, 1024, 8, 64)})
    build_widget(memory_widget())
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit import stats
from perfkit._checks import check_choice, check_int, check_real, check_type
from perfkit.memory import gpt2_step_memory, zero_model_states, zero_table
from perfkit.viz.core import Choice, IntControl, LogControl, WidgetSpec, si, tidy
from perfkit.viz.zero import gloo_sent_bytes

__all__ = ["MEMORY_COLORS", "memory_widget", "plot_loss_curves", "plot_memory_stack",
           "plot_zero_memory", "plot_zero_stages", "plot_zero_comparison", "plot_zero_traffic",
           "zero_scaling_widget"]

MEMORY_COLORS = {"parameters": "tab:blue", "gradients": "tab:orange",
                 "optimizer state": "tab:green", "activations": "tab:red",
                 "recompute": "tab:pink", "other": "tab:gray", "peak above the step's start": "tab:gray"}


def plot_memory_stack(bars: Mapping[str, Mapping[str, float]], ax: Any = None,
                      title: str = "Memory of one training step",
                      limit_bytes: float | None = None) -> Figure:
    """One horizontal stacked bar per entry: bytes by kind (parameters, gradients, ...).

    Args:
        bars: label -> {kind: bytes}; kinds named in :data:`MEMORY_COLORS` get its colors.
        ax: draw into this axes instead of a new figure.
        title: the axes title.
        limit_bytes: the machine's RAM or GPU memory: a vertical line when it is within 4x
            of the largest bar; otherwise (a line would squash every bar to a sliver) the
            largest bar's share of it is written in the title.

    Raises:
        ValueError: if ``bars`` is empty or holds a negative value.
    """
    if not bars:
        raise ValueError("bars must hold at least one label -> {kind: bytes}")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(
        figsize=(8, max(2.2, 0.8 + 0.6 * len(bars))))  # tall enough for a legend of six kinds
    labels = list(bars)
    largest = max(sum(v.values()) for v in bars.values())
    # the axis unit follows the largest bar, so that its ticks read like the totals written beside it
    scale, unit = next(((10.0 ** e, u) for e, u in ((12, "TB"), (9, "GB"), (6, "MB"), (3, "kB"))
                        if largest >= 10.0 ** e), (1.0, "B"))
    seen: set[str] = set()
    for y, label in enumerate(labels):
        left = 0.0
        for kind, value in bars[label].items():
            if value < 0:
                raise ValueError(f"bars[{label!r}][{kind!r}] is negative: {value}")
            shown = value > 0 and kind not in seen  # a zero-sized kind gets no legend entry
            ax.barh(y, value / scale, left=left / scale, color=MEMORY_COLORS.get(kind, None),
                    label=kind if shown else None, edgecolor="white")
            seen.update([kind] if shown else [])
            left += value
        ax.annotate(si(left, "B"), (left / scale, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    right = largest
    if limit_bytes and limit_bytes <= 4 * largest:
        ax.axvline(limit_bytes / scale, color="black", ls="--", lw=1,
                   label=f"limit {si(limit_bytes, 'B')}")
        right = max(right, limit_bytes)
    elif limit_bytes:
        title += f"\n(largest bar = {largest / limit_bytes:.2%} of this device's {si(limit_bytes, 'B')})"
    ax.set_xlim(0, 1.18 * right / scale or 1)  # room for the total written after the longest bar
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} (10^{round(math.log10(scale))} bytes)" if scale > 1 else "bytes")
    ax.set_title(title)
    # outside the axes: inside, it would cover the end of a bar and its total
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return tidy(fig)


def plot_zero_stages(num_params: float, world_size: int, recipe: str = "mixed_adam",
                     highlight: int | None = None, ax: Any = None) -> Figure:
    """Per-rank model-state bytes of ZeRO stages 0-3 (the ZeRO paper's Figure 1)."""
    table = zero_table(num_params, world_size, recipe)
    bars = {("> " if s.stage == highlight else "") + f"stage {s.stage}":
            {"parameters": s.params, "gradients": s.grads, "optimizer state": s.optimizer}
            for s in table}
    return plot_memory_stack(
        bars, ax=ax, title=f"Model states per rank: {si(num_params)} parameters, "
                           f"N = {world_size}, {recipe}")


def plot_zero_comparison(comparison: Any, ax: Any = None) -> Figure:
    """Step time (over ``ddp_adamw``'s, or the first variant's, as the verdicts judge it) and
    optimizer-state bytes per rank of each variant of a comparison.

    Args:
        comparison: a :class:`perfkit.jobs.zero_bench.Comparison`.
        ax: two axes (time, bytes) to draw into; new figure if ``None``.
    """
    names = list(comparison.variants)
    fig, axes = (ax[0].figure, ax) if ax is not None else plt.subplots(
        1, 2, figsize=(10, 0.8 + 0.5 * len(names)))
    v = comparison.variants
    base = "ddp_adamw" if "ddp_adamw" in v else names[0]
    # the statistic the verdicts judge: the median of the interleaved rounds' ratios, with its interval
    ests = [stats.median_ratio(v[n].step_times_s, v[base].step_times_s) for n in names]
    axes[0].barh(names, [e.value for e in ests], color="tab:blue",
                 xerr=[[e.value - e.low for e in ests], [e.high - e.value for e in ests]], capsize=3)
    axes[0].axvline(1.0, color="black", ls=":", lw=1)
    shown = " / ".join(sorted({e.label for e in ests if e.has_interval})) or "no interval"
    axes[0].set_xlabel(f"step time over {base}'s (median of paired rounds' ratios, bars: {shown})")
    axes[1].barh(names, [v[n].state_bytes / 1e6 for n in names], color="tab:green")
    axes[1].axvline(comparison.total_state_bytes / comparison.world_size / 1e6, color="black",
                    ls="--", lw=1, label="unsharded / N")
    axes[1].set_xlabel("optimizer state on one rank (MB)")
    axes[1].legend(fontsize=8)
    for a in axes:
        a.invert_yaxis()
    fig.suptitle(f"{comparison.world_size} processes, {si(comparison.numel)} parameters")
    fig.tight_layout()
    return tidy(fig)


def plot_loss_curves(curves: Mapping[str, Sequence[float]], ax: Any = None,
                     title: str = "Loss per step", ylabel: str = "loss (nats)") -> Figure:
    """One line per run (label -> losses, or another per-step series that ``ylabel`` names)."""
    if not curves:
        raise ValueError("curves must hold at least one label -> losses")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 3.5))
    for i, (label, ys) in enumerate(curves.items()):
        ax.plot(range(len(ys)), list(ys), label=label, lw=1.5, ls=("-", "--", ":", "-.")[i % 4])
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def memory_widget(vocab_size: int = 1024, n_head: int = 2,
                  measured: Mapping[str, float] | None = None,
                  limit_bytes: float | None = None,
                  peak: Mapping[str, float] | None = None,
                  peak_label: str = "step's peak measured here") -> WidgetSpec:
    """GPT-2 model size, batch, sequence, precision and checkpointing -> a memory bar.

    Args:
        vocab_size, n_head: fixed parts of the model.
        measured: the live tensors counted in a step at the default setting ({kind: bytes}),
            drawn beside the prediction: a check of the bookkeeping, the same tensors the
            model counts.
        limit_bytes: the machine's memory, drawn as a line.
        peak: that step's measured peak ({kind: bytes}: the parameters and the peak above
            the step's start), drawn as a third bar at the default setting: the memory the
            step needed, which no formula here models.
        peak_label: that bar's label (say which step's peak it is).
    """
    def show(n_embd: int, n_layer: int, batch: int, seq_len: float, precision: str,
             checkpointing: str) -> Figure:
        pred = gpt2_step_memory(n_embd, n_layer, n_head, vocab_size, batch, int(seq_len),
                                precision, checkpointing == "per block")
        bars = {"predicted": pred}
        at_default = (n_embd, n_layer, batch, int(seq_len), precision, checkpointing) == (
            64, 2, 8, 64, "fp32", "off")
        if measured and at_default:
            bars["tensors counted here"] = dict(measured)
        if peak and at_default:
            bars[peak_label] = dict(peak)
        return plot_memory_stack(bars, limit_bytes=limit_bytes,
                                 title=f"GPT-2 C={n_embd}, L={n_layer}, B={batch}, "
                                       f"T={int(seq_len)}, {precision}, checkpointing "
                                       f"{checkpointing}")

    return WidgetSpec(show, {
        "n_embd": IntControl(32, 2048, 64, 32, "width C"),
        "n_layer": IntControl(1, 48, 2, 1, "blocks L"),
        "batch": IntControl(1, 64, 8, 1, "batch B"),
        "seq_len": LogControl(4, 12, 64, base=2, step=1, description="sequence T"),
        "precision": Choice(["fp32", "mixed"], "fp32", "precision"),
        "checkpointing": Choice(["off", "per block"], "off", "checkpointing"),
    }, title="Memory of one GPT-2 training step (the model of perfkit.memory)")


def _stages(comparison: Any, stages: Mapping[str, int]) -> dict[str, int]:
    check_type("stages", stages, Mapping)
    if not stages:
        raise ValueError("stages must name at least one variant -> ZeRO stage")
    for name, stage in stages.items():
        check_choice("stages key", name, list(comparison.variants))
        check_int(f"stages[{name!r}]", stage, 0, 3)
    return dict(stages)


def plot_zero_memory(comparison: Any, stages: Mapping[str, int], recipe: str = "fp32_adam",
                     ax: Any = None) -> Figure:
    """Model states per rank, measured beside the formula, one pair of bars per stage.

    Args:
        comparison: a :class:`perfkit.jobs.zero_bench.Comparison` whose variants carry
            ``model_states`` (bytes counted from storages after backward, largest rank).
        stages: variant name -> the ZeRO stage it implements (0 for plain data parallelism).
        recipe: the :data:`perfkit.memory.RECIPES` entry of the formula.
        ax: draw into this axes instead of a new figure.

    Raises:
        TypeError, ValueError: for ``stages`` that is not a mapping of the comparison's
            variant names to stages 0-3.
    """
    bars = {}
    for name, stage in _stages(comparison, stages).items():
        f = zero_model_states(comparison.numel, comparison.world_size, stage, recipe)
        m = comparison.variants[name].model_states
        bars[f"stage {stage}: formula"] = {"parameters": f.params, "gradients": f.grads,
                                           "optimizer state": f.optimizer}
        bars[f"stage {stage}: {name}"] = {"parameters": m["params"], "gradients": m["grads"],
                                          "optimizer state": m["optimizer"]}
    return plot_memory_stack(bars, ax=ax, title=(
        f"Model states per rank, measured vs formula ({recipe}, N = {comparison.world_size}, "
        f"Ψ = {si(comparison.numel)})"))


def plot_zero_traffic(comparison: Any, stages: Mapping[str, int], baseline: str = "ddp_adamw",
                      ax: Any = None, gloo: bool = True) -> Figure:
    """Bytes one rank sends per step (by collective) and step time, per variant.

    The bars count the ring's bytes (what NCCL sends); with ``gloo`` a cross marks what each
    variant sent on gloo, whose reduce-scatter all-reduces
    (:func:`perfkit.viz.zero.gloo_sent_bytes`), so the time panel sits beside the bytes that ran.

    Args:
        comparison: a :class:`perfkit.jobs.zero_bench.Comparison` whose variants carry
            ``sent_bytes`` (per collective, ring model).
        stages: variant name -> ZeRO stage, in the order to draw.
        baseline: the data-parallel variant: its bytes are the 1x line, 1.5x beside it,
            and its median step time a line on the time panel.
        ax: two axes (bytes, time); a new figure if ``None``.
        gloo: mark each variant's bytes as gloo sends them (the run's backend).

    Raises:
        TypeError, ValueError: for bad ``stages``, or a ``baseline`` not among them.
    """
    names = list(_stages(comparison, stages))
    check_choice("baseline", baseline, names)
    v = comparison.variants
    fig, axes = (ax[0].figure, ax) if ax is not None else plt.subplots(
        1, 2, figsize=(10, 1.4 + 0.5 * len(names)))
    labels = [f"{n} (stage {stages[n]})" for n in names]
    kinds = sorted({k for n in names for k in v[n].sent_bytes})
    left = [0.0] * len(names)
    for kind in kinds:
        widths = [v[n].sent_bytes.get(kind, 0.0) / 1e6 for n in names]
        axes[0].barh(labels, widths, left=left, label=kind, edgecolor="white")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    dp = sum(v[baseline].sent_bytes.values()) / 1e6
    for k, ls in ((1.0, "--"), (1.5, ":")):
        axes[0].axvline(k * dp, color="black", ls=ls, lw=1, label=f"{k:g}x data parallel")
    right = 1.3 * dp  # the 1.5x line, or the largest cross, lies left of the legend at half the width
    if gloo:  # what ran: gloo's reduce-scatter all-reduces, so it sends more than the ring's bars
        crosses = [gloo_sent_bytes(v[n]) / 1e6 for n in names]
        axes[0].scatter(crosses, labels, marker="x", color="black", zorder=3, label="on gloo (this run)")
        right = max(right, *crosses)
    axes[0].set_xlim(0, 2 * right)
    axes[0].set_xlabel("MB one rank sends per step (bars: ring model, as NCCL sends)")
    axes[0].legend(fontsize=7, loc="lower right")
    med = [v[n].step_s * 1e3 for n in names]
    err = [[m - v[n].step_p10_s * 1e3 for m, n in zip(med, names, strict=True)],
           [v[n].step_p90_s * 1e3 - m for m, n in zip(med, names, strict=True)]]
    axes[1].barh(labels, med, xerr=[[max(e, 0) for e in row] for row in err], color="tab:blue",
                 capsize=3)
    axes[1].axvline(v[baseline].step_s * 1e3, color="black", ls="--", lw=1)
    axes[1].set_xlabel("ms per step (median; bars: 10th-90th percentile)")
    axes[1].set_yticks(range(len(names)), [""] * len(names))
    for a in axes:
        a.invert_yaxis()
    fig.suptitle(f"Bytes and time per step, {comparison.world_size} processes")
    fig.tight_layout()
    return tidy(fig)


def zero_scaling_widget(measured: Mapping[int, float] | None = None, numel: float | None = None,
                        world_size: int = 2, recipe: str = "fp32_adam",
                        memory_gb: float = 80.0) -> WidgetSpec:
    """Model size, ranks and stage -> model-state bytes per rank (the formula, log axes).

    Left: bytes per rank against Ψ for every stage at the chosen N, with a rank's memory as
    a line: where a stage's line crosses it is the largest model that stage fits. Right:
    bytes per *parameter* per rank against N, which does not depend on Ψ, so the measured
    points (``measured``: stage -> bytes per rank at ``numel`` parameters on ``world_size``
    ranks) always sit on it; on the left they are drawn at their N and precision.

    Args:
        measured: stage -> measured model-state bytes per rank, or ``None``.
        numel: Ψ of the measurement (also the slider's start); needed with ``measured``.
        world_size: N of the measurement (also the slider's start).
        recipe: the measurement's :data:`perfkit.memory.RECIPES` entry (the start too).
        memory_gb: one rank's memory in GB (10^9 bytes), the slider's start.

    Raises:
        TypeError, ValueError: for a ``measured`` that is not stage (0-3) -> bytes > 0, a
            missing or non-positive ``numel``, or a bad ``world_size``, ``recipe`` or
            ``memory_gb``.
    """
    measured = dict(check_type("measured", measured, Mapping, optional=True) or {})
    for stage, b in measured.items():
        check_int("measured key", stage, 0, 3)
        check_real(f"measured[{stage}]", b, 0, lo_open=True)
    if measured or numel is not None:
        check_real("numel", numel, 0, lo_open=True)
    check_int("world_size", world_size, 1)
    check_choice("recipe", recipe, ["mixed_adam", "fp32_adam", "fp32_sgd_momentum"])
    check_real("memory_gb", memory_gb, 0, lo_open=True)
    m_world, m_recipe = world_size, recipe
    psis = [10 ** (4 + 9 * i / 100) for i in range(101)]  # 10 k to 10 T parameters
    ranks = sorted({round(2 ** (i / 8)) for i in range(81)})  # 1 to 1024

    def show(num_params: float, world_size: int, stage: int, recipe: str,
             memory_gb: float) -> Figure:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        limit = memory_gb * 1e9
        for s in range(4):
            per = zero_model_states(1.0, world_size, s, recipe).total  # bytes per parameter
            style = dict(lw=2.5 if s == stage else 1, alpha=1.0 if s == stage else 0.6)
            a.plot(psis, [per * p for p in psis], label=f"stage {s}: fits Ψ ≤ {si(limit / per)}",
                   color=f"C{s}", **style)
            b.plot(ranks, [zero_model_states(1.0, n, s, recipe).total
                           for n in ranks], color=f"C{s}", label=f"stage {s}", **style)
        here = zero_model_states(num_params, world_size, stage, recipe).total
        a.scatter([num_params], [here], color=f"C{stage}", marker="o", s=40, zorder=4,
                  edgecolor="black")
        a.axhline(limit, color="black", ls="--", lw=1)
        b.axvline(world_size, color="gray", ls=":", lw=1)  # the N of the left panel
        if measured and recipe == m_recipe:
            b.scatter([m_world] * len(measured), [m / numel for m in measured.values()],
                      marker="x", s=60, color="black", zorder=5, label=f"measured (N={m_world})")
            if world_size == m_world:
                a.scatter([numel] * len(measured), list(measured.values()), marker="x", s=60,
                          color="black", zorder=5)
        a.set(xscale="log", yscale="log", xlabel="parameters Ψ", ylabel="bytes per rank",
              title=f"N = {world_size}: stage {stage} needs {si(here, 'B')} per rank\n"
                    f"(dashed: {si(limit, 'B')} per rank)")
        b.set(xscale="log", yscale="log", xlabel="ranks N", ylabel="bytes per parameter per rank",
              title=f"{recipe}: bytes per parameter per rank")
        b.set_xscale("log", base=2)
        a.legend(fontsize=7, loc="upper left")
        b.legend(fontsize=7, loc="lower left")
        for ax_ in (a, b):
            ax_.grid(True, which="major", alpha=0.3)
        fig.tight_layout()
        return tidy(fig)

    start = float(numel) if numel is not None else 7.5e9
    return WidgetSpec(show, {
        "num_params": LogControl(4, 13, start, step=0.25, description="parameters Ψ"),
        "world_size": IntControl(1, 1024, world_size, 1, "ranks N"),
        "stage": Choice([0, 1, 2, 3], 3, "ZeRO stage"),
        "recipe": Choice(["mixed_adam", "fp32_adam", "fp32_sgd_momentum"], recipe,
                         "precision / optimizer"),
        "memory_gb": LogControl(0, 3, memory_gb, step=0.1, description="memory per rank (GB)"),
    }, title="ZeRO: model states per rank against model size and ranks (formula; x: measured)")
