"""Core of perfkit.viz: widget specs over pure functions, headline figures, the roofline.

Every plot here consumes records that other perfkit modules return; nothing here
measures. Widgets are described by a :class:`WidgetSpec` (a pure function plus its
controls) so that tests can call the function at every control's extremes without a
browser, and notebooks turn the same spec into sliders with :func:`build_widget`.
ipywidgets is imported only when a widget is built, never at import time.

Usage::

    spec = WidgetSpec(fn=lambda n: f"{n} x {n}", controls={"n": IntControl(1, 64, 8)})
    build_widget(spec)            # in a notebook: sliders + live output
    for kw in spec.extremes():    # in a test: every control at its min and max
        spec.fn(**kw)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit.stats import Estimate
from perfkit.units import si
from perfkit.verdict import Prediction, Verdict, context, judge

__all__ = [
    "Choice",
    "FloatControl",
    "IntControl",
    "LogControl",
    "WidgetSpec",
    "build_widget",
    "show_headlines",
    "HEADLINE_MIME",
    "HEADLESS_ENV",
    "plot_roofline",
    "roofline_widget",
    "si",
    "verdict",
]

HEADLESS_ENV = "PERFKIT_HEADLESS"  # "1": a run without a live frontend (make course, the tests)

HEADLINE_MIME = "application/vnd.perfkit.headline+json"
VERDICT_MIME = "application/vnd.perfkit.verdict+json"


# --- headline figures -------------------------------------------------------------------


def show_headlines(figures: dict[str, str]) -> None:
    """Display a notebook's headline measured figures (``{"fp32 matmul": "172 GFLOP/s"}``).

    They render as a small table and are stored under :data:`HEADLINE_MIME` in the executed
    notebook, where ``make course`` picks them up for its summary.
    """
    from IPython.display import display

    if not figures or not all(isinstance(v, str) for v in figures.values()):
        raise ValueError("figures must be a non-empty dict of name -> formatted string")
    rows = "".join(f"<tr><td>{k}</td><td><b>{v}</b></td></tr>" for k, v in figures.items())
    display({HEADLINE_MIME: json.loads(json.dumps(figures)),
             "text/html": f"<table>{rows}</table>",
             "text/plain": "\n".join(f"{k}: {v}" for k, v in figures.items())}, raw=True)


def _text_boxes(fig: Figure) -> list[tuple[Any, Any]]:
    """(text artist, window extent) of every visible, non-empty text inside ``fig``."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        bb = t.get_window_extent(renderer)
        if bb.width > 0 and bb.height > 0 and bb.overlaps(fig.bbox):
            boxes.append((t, bb))
    return boxes


def _overlapping(fig: Figure, min_area: float) -> list[tuple[Any, Any]]:
    from itertools import combinations

    found = []
    for (ta, a), (tb, b) in combinations(_text_boxes(fig), 2):
        w, h = min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0)
        if w > 0 and h > 0 and w * h > min_area:
            found.append((ta, tb))
    return found


def text_overlaps(fig: Figure, min_area: float = 4.0) -> list[tuple[str, str]]:
    """Pairs of visible texts of ``fig`` whose boxes overlap by more than ``min_area`` pixels².

    Draws the figure, then compares the window extent of every non-empty text artist (titles,
    labels, tick labels, legend entries, annotations) inside the figure with every other. The
    test suite calls it on every figure perfkit and the notebooks draw.
    """
    return [(a.get_text(), b.get_text()) for a, b in _overlapping(fig, min_area)]


def tidy(fig: Figure, min_area: float = 4.0) -> Figure:
    """Resolve overlapping text in ``fig`` in place, least important text first; return it.

    A tick label or annotation that collides with anything is hidden (a corner tick, one of
    two value labels on small bars); a legend that collides is moved outside the axes, to
    the right; titles and axis labels that collide are re-spaced with ``tight_layout``.
    Every plot of :mod:`perfkit.viz` returns through it.
    """
    for _ in range(4):
        pairs = _overlapping(fig, min_area)
        if not pairs:
            break
        ticks = {id(t) for ax in fig.axes for t in (*ax.get_xticklabels(which="both"),
                                                    *ax.get_yticklabels(which="both"))}
        legends = {id(t): leg for ax in fig.axes if ax.get_legend()
                   for leg in [ax.get_legend()] for t in (*leg.get_texts(), leg.get_title())}
        heads = {id(t) for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)}

        def rank(t: Any, heads=heads, legends=legends, ticks=ticks) -> int:
            return 3 if id(t) in heads else 2 if id(t) in legends else 0 if id(t) in ticks else 1

        moved = False
        for a, b in pairs:
            low = min((a, b), key=rank)
            if rank(low) in (0, 1):
                low.set_visible(False)
            elif rank(low) == 2 and not moved:
                leg = legends[id(low)]
                leg.set_loc("upper left")
                leg.set_bbox_to_anchor((1.02, 1.0), transform=leg.axes.transAxes)
                moved = True
        fig.tight_layout()
    return fig


_SHOWN: list[Verdict] = []  # every verdict show_verdict displayed in this process, in order


def shown_verdicts() -> tuple[Verdict, ...]:
    """Every verdict :func:`show_verdict` displayed in this process (a notebook's kernel), in
    order: what a notebook's summary counts, e.g. with :func:`perfkit.verdict.kinds_text`."""
    return tuple(_SHOWN)


def show_verdict(verdict: Verdict) -> None:
    """Display a computed :class:`perfkit.verdict.Verdict` as Markdown, and record it.

    The record goes under :data:`VERDICT_MIME` into the executed notebook, where
    ``make course`` counts the predictions that held (its scorecard). Returns nothing, so a
    cell ending with it shows the verdict once.
    """
    from IPython.display import display

    if not isinstance(verdict, Verdict):
        raise TypeError(f"verdict must be a perfkit.verdict.Verdict, got {type(verdict).__name__}")
    _SHOWN.append(verdict)
    mark = {"held": "✅", "missed": "❌", "inconclusive": "❔", "disturbed": "⚠️"}[verdict.outcome]
    display({VERDICT_MIME: json.loads(json.dumps(verdict.record())),
             "text/markdown": f"{mark} {verdict.text}",
             "text/plain": f"[{verdict.outcome}] {verdict.text}".replace("**", "")}, raw=True)


def verdict(prediction: Prediction, measured: float | Estimate, spread: tuple[float, float] | None = None,
            explain: Mapping[str, str] | None = None) -> None:
    """The one-call form of a course section's ending: judge ``measured`` against
    ``prediction`` by :func:`perfkit.verdict.judge`'s one rule, show the verdict and record it
    (:func:`show_verdict`). The machine's load is added to the explanation by the rule itself
    when it was busy. Returns nothing, so a cell ending with it shows the verdict once; code
    that reads the outcome calls ``judge`` and ``show_verdict`` itself.

    A bound computed from this run that reaches the figure's physical limit (say "at most
    1" for a share that cannot exceed 1) cannot fail, so it is no prediction: it is shown
    with :func:`perfkit.verdict.context`, marked as context, and not recorded.
    """
    if isinstance(prediction, Prediction) and not prediction.can_fail():
        from IPython.display import display

        text = context(prediction, measured)
        display({"text/markdown": f"ℹ️ {text}",
                 "text/plain": f"[context] {text}".replace("**", "")}, raw=True)
        return
    show_verdict(judge(prediction, measured, spread=spread, explain=explain))


# --- widget specs -----------------------------------------------------------------------


@dataclass(frozen=True)
class IntControl:
    """An integer slider from ``min`` to ``max`` in steps of ``step``."""

    min: int
    max: int
    value: int
    step: int = 1
    description: str = ""

    def extremes(self) -> tuple[int, int]:
        return (self.min, self.max)


@dataclass(frozen=True)
class FloatControl:
    """A float slider from ``min`` to ``max``."""

    min: float
    max: float
    value: float
    step: float = 0.01
    description: str = ""

    def extremes(self) -> tuple[float, float]:
        return (self.min, self.max)


@dataclass(frozen=True)
class LogControl:
    """A slider over ``base ** exponent`` for exponents in [``min_exp``, ``max_exp``]."""

    min_exp: float
    max_exp: float
    value: float
    base: float = 10.0
    step: float = 0.1
    description: str = ""

    def extremes(self) -> tuple[float, float]:
        return (self.base ** self.min_exp, self.base ** self.max_exp)


@dataclass(frozen=True)
class Choice:
    """A dropdown over ``options``."""

    options: Sequence[Any]
    value: Any
    description: str = ""

    def extremes(self) -> tuple[Any, ...]:
        return tuple(self.options)


Control = IntControl | FloatControl | LogControl | Choice


@dataclass(frozen=True)
class WidgetSpec:
    """A pure function and the controls that feed it, one control per keyword argument.

    ``fn(**values)`` returns what to show: a matplotlib ``Figure``, a string (rendered as
    Markdown), or any object IPython can display.
    """

    fn: Callable[..., Any]
    controls: dict[str, Control]
    title: str = ""
    continuous_update: bool = field(default=False)

    def defaults(self) -> dict[str, Any]:
        """Every control at its starting value."""
        return {k: c.value for k, c in self.controls.items()}

    def extremes(self) -> Iterator[dict[str, Any]]:
        """Keyword sets with one control at a time moved to each of its extremes."""
        base = self.defaults()
        for name, control in self.controls.items():
            for v in control.extremes():
                yield {**base, name: v}


def _make_control(name: str, c: Control) -> Any:
    import ipywidgets as w

    desc = c.description or name
    style = {"description_width": "initial"}
    if isinstance(c, IntControl):
        return w.IntSlider(value=c.value, min=c.min, max=c.max, step=c.step,
                           description=desc, style=style, continuous_update=False)
    if isinstance(c, FloatControl):
        return w.FloatSlider(value=c.value, min=c.min, max=c.max, step=c.step,
                             description=desc, style=style, continuous_update=False)
    if isinstance(c, LogControl):
        return w.FloatLogSlider(value=c.value, min=c.min_exp, max=c.max_exp, base=c.base,
                                step=c.step, description=desc, style=style,
                                continuous_update=False)
    if isinstance(c, Choice):
        return w.Dropdown(options=list(c.options), value=c.value, description=desc,
                          style=style)
    raise TypeError(f"control {name!r} has unknown type {type(c).__name__}")


def _show(result: Any) -> None:
    from IPython.display import Markdown, display

    if isinstance(result, Figure):
        display(result)
        plt.close(result)
    elif isinstance(result, str):
        display(Markdown(result))
    else:
        display(result)


def build_widget(spec: WidgetSpec) -> Any:
    """Sliders for ``spec.controls`` above an output area that shows ``spec.fn``'s result.

    Returns an ``ipywidgets.VBox``; display it as a cell's last expression. In a headless run
    (:data:`HEADLESS_ENV` set to ``1``, as ``make course`` and the tests set it) the default
    setting's result is shown as the cell's own output and ``None`` is returned: nbclient
    (papermill's client) waits until the cell's timeout on about one cell in twenty that
    displays into an ``ipywidgets.Output``, while the kernel sits idle (measured with nbclient
    0.11 and ipywidgets 8.1: 2-3 of 40 cells), and on a static page sliders cannot move: their
    only trace there is their text form, ``VBox(children=...``.
    """
    if os.environ.get(HEADLESS_ENV) == "1":
        _show(spec.fn(**spec.defaults()))
        return None
    import ipywidgets as w

    controls = {k: _make_control(k, c) for k, c in spec.controls.items()}
    header = [w.HTML(f"<b>{spec.title}</b>")] if spec.title else []
    row = w.HBox(list(controls.values()), layout=w.Layout(flex_flow="row wrap"))
    out = w.Output()

    def render(*_: Any) -> None:
        result = spec.fn(**{k: c.value for k, c in controls.items()})
        with out:
            out.clear_output(wait=True)
            _show(result)

    for c in controls.values():
        c.observe(render, names="value")
    render()
    return w.VBox([*header, row, out])


# --- plots ------------------------------------------------------------------------------


def plot_roofline(
    peak_flops: dict[str, float],
    bandwidth: float,
    points: Sequence[tuple[str, float, float]] = (),
    ax: Any = None,
    intensity_range: tuple[float, float] = (1 / 16, 1024),
    title: str = "Roofline of this machine (measured ceilings)",
) -> Figure:
    """Log-log roofline: one compute ceiling per dtype, the memory slope, and points.

    Args:
        peak_flops: dtype name -> measured FLOP/s ceiling.
        bandwidth: measured memory bandwidth in bytes/s.
        points: ``(label, intensity FLOP/byte, achieved FLOP/s)`` to place on the plot.
        ax: draw into this axes instead of a new figure.
        intensity_range: x-axis range in FLOP/byte.
    """
    if not peak_flops or bandwidth <= 0:
        raise ValueError("need at least one peak_flops entry and bandwidth > 0")
    lo, hi = intensity_range
    if not 0 < lo < hi:
        raise ValueError(f"intensity_range must satisfy 0 < lo < hi, got {intensity_range}")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(10, 4.5))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for dtype, peak in sorted(peak_flops.items(), key=lambda kv: kv[1]):
        ax.plot(xs, [min(peak, x * bandwidth) for x in xs],
                label=f"{dtype}: {si(peak, 'FLOP/s')}, ridge {peak / bandwidth:.3g} FLOP/B")
    # Points are named in the legend, not beside the dot: two operations of similar
    # intensity would put their labels on top of each other, and a hidden label leaves an
    # unnamed dot.
    for (label, intensity, achieved), marker in zip(points, "osD^vP*X" * (len(points) // 8 + 1)):
        ax.scatter([intensity], [achieved], zorder=3, marker=marker, s=36, edgecolors="black",
                   linewidths=0.5, label=f"{label}: {si(achieved, 'FLOP/s')}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"{title}\nmemory: {si(bandwidth, 'B/s')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the axes: no point hidden
    fig.tight_layout()
    return tidy(fig)


def roofline_widget(limits: Any) -> WidgetSpec:
    """Matrix size and dtype sliders placing a square matmul on the measured roofline.

    The same widget as :func:`perfkit.viz.machine.matmul_roofline_widget` without a sweep's
    rates beside it: it starts in float32 and names the roof it divides by (the limits file's
    ceiling, from the operation that set it), never an "attainable" rate.

    Args:
        limits: a :class:`perfkit.hw.MachineLimits`.
    """
    from perfkit.viz.machine import matmul_roofline_widget

    return matmul_roofline_widget(limits)
