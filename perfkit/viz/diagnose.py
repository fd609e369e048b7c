"""Plots of a ``perfkit diagnose`` report: where the step goes, each step, each rank, memory.

They consume the report dict (:func:`perfkit.profiling.build_report`, or ``report.json``
read back). :func:`report_pngs` is what the command embeds in ``report.html``: it draws on
figures of its own (no pyplot), so a diagnosed script's own matplotlib state is left alone.

Usage::

    rep = json.loads(Path("build/diagnose/report.json").read_text())
    plot_report_shares(rep)                 # in a notebook
    pngs = report_pngs(rep)                 # {"shares": b"\\x89PNG...", "steps": ...}
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from perfkit._checks import check_int
from perfkit.profiling.render import check_report
from perfkit.viz.core import tidy
from perfkit.viz.profiling import PHASE_COLORS

__all__ = ["plot_memory_split", "plot_rank_spread", "plot_report_shares", "plot_step_times",
           "report_figures", "report_pngs"]

_KEYS = ("shares", "step_times_s", "ranks", "memory", "findings", "steps_seen")
_SHARE_COLORS = {**PHASE_COLORS, "sync": "tab:purple"}
_MEMORY_COLORS = {"before the script": "tab:gray", "parameters": "tab:blue",
                  "gradients": "tab:orange", "optimizer state": "tab:green",
                  "rest of the peak": "silver"}


def _report(rep: Any) -> dict[str, Any]:
    return check_report(rep, _KEYS)


def _axes(ax: Any, size: tuple[float, float]) -> tuple[Figure, Any]:
    return (ax.figure, ax) if ax is not None else plt.subplots(figsize=size)


def _mib(n: float) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 2**10:.3g} KiB"


def plot_report_shares(rep: dict[str, Any], ax: Any = None, title: str = "") -> Figure:
    """Rank 0's step split into data, sync, communication, optimizer, backward, forward and
    other, as one stacked bar of milliseconds (each share of the p50 step).

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report, or one with no profiled
            window (no shares).
    """
    _report(rep)
    if not rep["shares"]:
        raise ValueError("rep has no shares: its script ended before the profiled window")
    step_ms = rep["step_p50_s"] * 1e3
    fig, ax = _axes(ax, (8, 2.2))
    left = 0.0
    for name, share in rep["shares"].items():
        ax.barh(["step p50"], [share * step_ms], left=left, color=_SHARE_COLORS[name],
                label=f"{name} {share:.1%}")
        if share > 0.07:  # wide enough to hold its label
            ax.text(left + share * step_ms / 2, 0, f"{share:.0%}", ha="center", va="center",
                    fontsize=8, color="white")
        left += share * step_ms
    ax.set_xlabel("ms (p50 step)")
    ax.set_title(title or f"Where the {step_ms:.3g} ms step goes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.1), frameon=False)
    fig.tight_layout()
    return tidy(fig)


def plot_step_times(rep: dict[str, Any], ax: Any = None) -> Figure:
    """Each recorded step's time on rank 0, with its DataLoader wait and the p50.

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report, or one with no step.
    """
    _report(rep)
    times = [t * 1e3 for t in rep["step_times_s"] or []]  # ms
    if not times:
        raise ValueError("rep has no recorded step")
    first = rep["steps_seen"] - len(times) + 1  # the script's step number of the first bar
    steps = list(range(first, first + len(times)))
    fig, ax = _axes(ax, (8, 3))
    ax.bar(steps, times, color="tab:blue", alpha=0.6, label="step")
    if rep.get("step_data_s") and any(rep["step_data_s"]):
        ax.bar(steps, [d * 1e3 for d in rep["step_data_s"]], color="tab:orange", width=0.5,
               label="DataLoader wait")
    ax.axhline(rep["step_p50_s"] * 1e3, color="black", linestyle="--", linewidth=1,
               label=f"p50 {rep['step_p50_s'] * 1e3:.3g} ms")
    ax.set_xlabel("training step (the recorded window)")
    ax.set_ylabel("ms")
    ax.set_title("Step time, step by step")
    ax.set_xticks(steps if len(steps) <= 20 else steps[:: len(steps) // 10 + 1])
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return tidy(fig)


def plot_rank_spread(rep: dict[str, Any], ax: Any = None) -> Figure:
    """Per rank: the step's p50 and its mean work outside collectives (what a straggler adds;
    a mean, so a stalled step can lift it above the p50).

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report, or one of a single rank.
    """
    _report(rep)
    ranks = rep["ranks"]
    if len(ranks) < 2:
        raise ValueError(f"rep must hold at least 2 ranks to compare, got {len(ranks)}")
    slow = next((f.get("rank") for f in rep["findings"] if f["kind"] == "straggler"), None)
    fig, ax = _axes(ax, (8, 3))
    x = list(range(len(ranks)))
    step = [(r["step_p50_s"] or 0) * 1e3 for r in ranks]
    work = [(r["work_s"] or 0) * 1e3 for r in ranks]
    ax.bar([i - 0.2 for i in x], step, width=0.4, color="tab:blue", label="step p50")
    ax.bar([i + 0.2 for i in x], work, width=0.4, color="tab:purple",
           label="mean work outside collectives (mean step less its collectives)")
    ax.set_xticks(x, [f"rank {r['rank']}" + (" (straggler)" if r["rank"] == slow else "")
                      for r in ranks])
    ax.set_ylabel("ms per step")
    ax.set_title("Ranks: step time and the work each does")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return tidy(fig)


def plot_memory_split(rep: dict[str, Any], ax: Any = None) -> Figure:
    """The peak as one stacked bar: in use before the script, parameters, gradients,
    optimizer state, and the rest (activations, temporaries, the script's other data).

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report, or one whose model
            states were not counted (no ``torch.optim`` optimizer seen).
    """
    mem = _report(rep)["memory"]
    if mem.get("params_bytes") is None:
        raise ValueError("rep's memory has no split: no torch.optim optimizer was seen")
    parts = {"before the script": mem.get("start_bytes") or 0,
             "parameters": mem["params_bytes"], "gradients": mem["grads_bytes"],
             "optimizer state": mem["optimizer_bytes"]}
    parts["rest of the peak"] = max(0, mem["bytes"] - sum(parts.values()))
    fig, ax = _axes(ax, (8, 2.4))
    left = 0.0
    for name, n in parts.items():
        ax.barh([mem["kind"]], [n / 2**20], left=left, color=_MEMORY_COLORS[name],
                label=f"{name} {_mib(n)}")
        left += n / 2**20
    ax.set_xlabel("MiB")
    ax.set_title(f"Memory: {mem['kind']} {_mib(mem['bytes'])}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return tidy(fig)


def report_figures(rep: dict[str, Any]) -> dict[str, Figure]:
    """Every plot the report has data for, by name (``shares``, ``steps``, ``ranks`` when
    distributed, ``memory`` when the model states were counted), on figures outside pyplot.

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report.
    """
    _report(rep)
    plots: dict[str, tuple[Callable[..., Figure], tuple[float, float]]] = {}
    if rep["shares"]:
        plots["shares"] = (plot_report_shares, (8, 2.2))
    if rep["step_times_s"]:
        plots["steps"] = (plot_step_times, (8, 3))
    if len(rep["ranks"]) > 1:
        plots["ranks"] = (plot_rank_spread, (8, 3))
    if rep["memory"].get("params_bytes") is not None:
        plots["memory"] = (plot_memory_split, (8, 2.4))
    figs = {}
    for name, (plot, size) in plots.items():
        fig = Figure(figsize=size)
        FigureCanvasAgg(fig)  # attaches itself: text extents and PNGs without pyplot
        figs[name] = plot(rep, ax=fig.subplots())
    return figs


def report_pngs(rep: dict[str, Any], dpi: int = 90) -> dict[str, bytes]:
    """:func:`report_figures` as PNG bytes, by name (what ``report.html`` embeds).

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report, or ``dpi`` below 20.
    """
    check_int("dpi", dpi, 20)
    out = {}
    for name, fig in report_figures(rep).items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        out[name] = buf.getvalue()
    return out
