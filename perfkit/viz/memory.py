"""Plots and widgets of notebooks 04 (memory anatomy) and 05 (ZeRO and LoRA).

They consume :mod:`perfkit.memory.model_states` and :mod:`perfkit.memory.activations` records and
:mod:`perfkit.workers.zero_bench` results; nothing here measures.

Usage::

    from perfkit.viz.memory import plot_memory_stack, memory_widget
    plot_memory_stack({"predicted": gpt2_step_memory(64, 2, 2, 1024, 8, 64)})
    build_widget(memory_widget())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit.memory import gpt2_step_memory, zero_table
from perfkit.viz.core import Choice, IntControl, LogControl, WidgetSpec, si, tidy

__all__ = ["MEMORY_COLORS", "memory_widget", "plot_loss_curves", "plot_memory_stack",
           "plot_zero_stages", "plot_zero_comparison", "zero_widget"]

MEMORY_COLORS = {"parameters": "tab:blue", "gradients": "tab:orange",
                 "optimizer state": "tab:green", "activations": "tab:red",
                 "recompute": "tab:pink", "other": "tab:gray"}


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
        figsize=(8, 0.8 + 0.6 * len(bars)))
    labels = list(bars)
    seen: set[str] = set()
    for y, label in enumerate(labels):
        left = 0.0
        for kind, value in bars[label].items():
            if value < 0:
                raise ValueError(f"bars[{label!r}][{kind!r}] is negative: {value}")
            ax.barh(y, value / 1e6, left=left / 1e6, color=MEMORY_COLORS.get(kind, None),
                    label=kind if kind not in seen else None, edgecolor="white")
            seen.add(kind)
            left += value
        ax.annotate(si(left, "B"), (left / 1e6, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    largest = max(sum(v.values()) for v in bars.values())
    if limit_bytes and limit_bytes <= 4 * largest:
        ax.axvline(limit_bytes / 1e6, color="black", ls="--", lw=1,
                   label=f"limit {si(limit_bytes, 'B')}")
    elif limit_bytes:
        title += f"\n(largest bar = {largest / limit_bytes:.2%} of this device's {si(limit_bytes, 'B')})"
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("MB (10^6 bytes)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
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
    """Step time and optimizer-state bytes per rank of each variant of a comparison.

    Args:
        comparison: a :class:`perfkit.workers.zero_bench.Comparison`.
        ax: two axes (time, bytes) to draw into; new figure if ``None``.
    """
    names = list(comparison.variants)
    fig, axes = (ax[0].figure, ax) if ax is not None else plt.subplots(
        1, 2, figsize=(10, 0.8 + 0.5 * len(names)))
    v = comparison.variants
    axes[0].barh(names, [v[n].step_s * 1e3 for n in names], color="tab:blue")
    axes[0].set_xlabel("ms per step (median, slowest rank)")
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
                     title: str = "Loss per step") -> Figure:
    """One line per run (label -> losses)."""
    if not curves:
        raise ValueError("curves must hold at least one label -> losses")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 3.5))
    for i, (label, ys) in enumerate(curves.items()):
        ax.plot(range(len(ys)), list(ys), label=label, lw=1.5, ls=("-", "--", ":", "-.")[i % 4])
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return tidy(fig)


def memory_widget(vocab_size: int = 1024, n_head: int = 2,
                  measured: Mapping[str, float] | None = None,
                  limit_bytes: float | None = None) -> WidgetSpec:
    """GPT-2 model size, batch, sequence, precision and checkpointing -> a memory bar.

    Args:
        vocab_size, n_head: fixed parts of the model.
        measured: a measured step at the default setting ({kind: bytes}), drawn beside
            the prediction so the model is checked against a real point.
        limit_bytes: the machine's memory, drawn as a line.
    """
    def show(n_embd: int, n_layer: int, batch: int, seq_len: float, precision: str,
             checkpointing: str) -> Figure:
        pred = gpt2_step_memory(n_embd, n_layer, n_head, vocab_size, batch, int(seq_len),
                                precision, checkpointing == "per block")
        bars = {"predicted": pred}
        at_default = (n_embd, n_layer, batch, int(seq_len), precision, checkpointing) == (
            64, 2, 8, 64, "fp32", "off")
        if measured and at_default:
            bars["measured here"] = dict(measured)
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


def zero_widget() -> WidgetSpec:
    """Parameters, world size, stage and precision -> per-rank model-state bytes."""
    def show(num_params: float, world_size: int, stage: int, recipe: str) -> Figure:
        fig = plot_zero_stages(num_params, world_size, recipe, highlight=stage)
        return tidy(fig)

    return WidgetSpec(show, {
        "num_params": LogControl(6, 12, 7.5e9, step=0.25, description="parameters Ψ"),
        "world_size": IntControl(1, 1024, 64, 1, "ranks N"),
        "stage": Choice([0, 1, 2, 3], 1, "ZeRO stage"),
        "recipe": Choice(["mixed_adam", "fp32_adam", "fp32_sgd_momentum"], "mixed_adam",
                         "precision / optimizer"),
    }, title="ZeRO: model states per rank (paper's formulas)")
