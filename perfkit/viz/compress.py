"""Plots and the widget for gradient compression's simulated training (notebook 03).

Simulated runs (:func:`perfkit.compress.simulate_dp_training`) are cheap, so a method is run
from several seeds; :func:`plot_seed_curves` draws each method's median over its seeds with
the band they span, each method in its own colour, line style and marker, so that two
methods whose curves coincide (no compression and sign with error feedback, say) both stay
visible. :func:`compression_widget` sets one compressor's error on a real gradient beside its
simulated training.

Usage::

    runs = {"none": [simulate_dp_training(None, seed=s) for s in range(5)]}
    fig = plot_seed_curves(runs, smooth=5)
    build_widget(compression_widget(grad))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import ticker
from matplotlib.figure import Figure

from perfkit import compress
from perfkit.compress import simulate_dp_training
from perfkit.viz.core import Choice, LogControl, WidgetSpec, tidy

__all__ = ["STYLES", "compression_widget", "plot_seed_curves"]

# (line style, marker) per method, in order: curves that lie on one another differ in both
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 3)), "x"))


def _running_mean(ys: np.ndarray, w: int) -> np.ndarray:
    """The mean of the last ``w`` values at each step (fewer at the start)."""
    acc = np.cumsum(ys)
    out = acc.copy()
    out[w:] = acc[w:] - acc[:-w]
    return out / np.minimum(np.arange(1, len(ys) + 1), w)


def plot_seed_curves(curves: Mapping[str, Sequence[Sequence[float]]], smooth: int = 1, ax: Any = None,
                     title: str = "training loss") -> Figure:
    """Loss per step for several seeds of each method: the median over seeds, and the band
    from the lowest to the highest seed (none with one seed).

    Each method gets its own colour, line style and marker (:data:`STYLES`, markers at
    offset steps), so curves that coincide stay distinguishable.

    Args:
        curves: method -> one loss curve (nats per step) per seed, all of one length.
        smooth: running mean over this many steps, applied to each seed's curve.
        ax: draw into this axes; ``None`` makes a figure.
        title: the axes' title.

    Raises:
        ValueError: ``curves`` empty, a method without seeds, curves of unequal lengths, more
            methods than :data:`STYLES`, or ``smooth`` < 1.
    """
    if not curves:
        raise ValueError("curves is empty")
    if len(curves) > len(STYLES):
        raise ValueError(f"curves holds {len(curves)} methods, at most {len(STYLES)} are drawn apart")
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1, got {smooth}")
    lengths = {len(c) for runs in curves.values() for c in runs}
    if any(not runs for runs in curves.values()) or len(lengths) != 1 or 0 in lengths:
        raise ValueError("every method needs at least one seed's curve, all of one non-zero length")
    own = ax is None
    fig, ax = plt.subplots(figsize=(7, 4)) if own else (ax.figure, ax)
    steps = lengths.pop()
    every = max(steps // 8, 1)  # markers per curve, offset so that coinciding curves show each
    for i, ((name, runs), (ls, marker)) in enumerate(zip(curves.items(), STYLES, strict=False)):
        ys = np.array([_running_mean(np.asarray(c, dtype=float), smooth) for c in runs])  # (seeds, steps)
        mid = np.median(ys, axis=0)
        label = name if len(runs) == 1 else f"{name} (median of {len(runs)} seeds)"
        line, = ax.plot(mid, ls=ls, marker=marker, markevery=(i * every // len(curves), every),
                        ms=5, mfc="none", lw=1.4, label=label)
        if len(runs) > 1:
            ax.fill_between(range(steps), ys.min(0), ys.max(0), color=line.get_color(), alpha=0.15, lw=0)
    ax.set_yscale("log")  # labelled 1-2-3-5: a loss curve often spans less than one decade
    ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("step" + (f" (running mean of {smooth})" if smooth > 1 else ""))
    ax.set_ylabel("loss (nats)")
    banded = any(len(r) > 1 for r in curves.values())
    ax.set_title(title + (" (bands: lowest to highest seed)" if banded else ""), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if own:  # a caller that passed ``ax`` lays out its own figure
        fig.tight_layout()
    return tidy(fig)


def _factory(method: str, ratio: float, error_feedback: bool) -> Callable[[], compress.Compressor]:
    def make() -> compress.Compressor:
        base = {"topk": lambda: compress.TopK(ratio), "randomk": lambda: compress.RandomK(ratio),
                "qsgd": compress.QSGD, "sign": compress.Sign}[method]()
        return compress.ErrorFeedback(base) if error_feedback else base
    return make


def compression_widget(grad: torch.Tensor, steps: int = 80) -> WidgetSpec:
    """Compressor, ratio and error-feedback controls: one compression's error and bytes on
    ``grad``, and simulated 2-worker training beside uncompressed training.

    The left panel compresses ``grad`` once. Error feedback starts from an empty residual, so
    that one compression is the inner compressor's, and the title names the inner one; error
    feedback shows in the training curve on the right.

    Args:
        grad: a real gradient (flat or not) to measure the reconstruction error on.
        steps: simulated training steps per curve.

    Raises:
        TypeError: ``grad`` is not a tensor of at least 2 values.
    """
    if not isinstance(grad, torch.Tensor) or grad.numel() < 2:
        raise TypeError("grad must be a tensor with at least 2 values")
    base_curve = simulate_dp_training(None, steps=steps)
    norm = float(grad.norm())

    def fn(method: str, ratio: float, error_feedback: bool) -> Figure:
        make = _factory(method, ratio, error_feedback)
        comp = make()
        once = comp.inner if isinstance(comp, compress.ErrorFeedback) else comp  # what one call sends
        c = once.compress(grad)
        err = float((once.decompress(c) - grad).norm()) / norm
        saved = 1 - c.wire_bytes / (grad.numel() * 4)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
        ax1.bar(["relative error", "bytes saved"], [err, saved], color=["C3", "C2"])
        ax1.set_ylim(0, 1.05)
        ax1.set_ylabel("share of the gradient (norm; bytes)")
        used = f"ratio {ratio:.3g}" if method in ("topk", "randomk") else "ratio unused"
        ax1.set_title(f"{once.name} ({used}), one compression of a real gradient:\nerror {err:.2f}, "
                      f"{c.wire_bytes:,} of {grad.numel() * 4:,} bytes"
                      + ("\n(error feedback's first call sends the same; it acts later, right)"
                         if error_feedback else ""), fontsize=9)
        curve = simulate_dp_training(make, steps=steps)  # nats per step
        plot_seed_curves({"no compression": [base_curve], comp.name: [curve]}, ax=ax2,
                         title="simulated 2-worker SGD, softmax regression on digits")
        fig.tight_layout()
        return tidy(fig)

    return WidgetSpec(fn, {"method": Choice(["topk", "randomk", "qsgd", "sign"], "topk"),
                           "ratio": LogControl(-3, 0, 0.01, step=0.25, description="ratio kept"),
                           "error_feedback": Choice([False, True], True, description="error feedback")},
                      title="Gradient compression: error, bytes and convergence")
