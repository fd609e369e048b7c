"""Figures and the widget of notebook 13 (planning at scale), over :mod:`perfkit.plan`.

:func:`plot_plan` draws the best layouts of a :class:`perfkit.plan.Plan`: step time by term
and memory per GPU by kind against the usable memory. :func:`plot_published` draws published
throughput against the planner's and the constant-MFU baseline's predictions, with each
row's error. :func:`plan_widget` redraws the plan for a model size, a GPU count, a network
and a batch (:func:`plan_view` is the pure function it drives). :func:`step_ratio` judges a ZeRO
step's ratio to DDP's, or prints it as context where its window cannot test the collectives;
:func:`plot_step_differences` draws each layout's measured paired difference from its base step
against the predicted difference and the tolerance window put on it.

Usage::

    fig = plot_plan(plan(model, named_cluster("h100-sxm"), 64, 512))
    fig = plot_published(compare(megatron_runs() + foundry_runs()))
    build_widget(plan_widget())
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, MultipleLocator

from perfkit import stats
from perfkit._checks import check_real, check_type
from perfkit.estimate import Estimate
from perfkit.plan.cluster import named_cluster
from perfkit.plan.model import ModelSpec
from perfkit.plan.published import Comparison
from perfkit.plan.readings import step_ratio_text
from perfkit.plan.search import Plan, plan
from perfkit.plan.windows import shared_window_text
from perfkit.viz.core import Choice, WidgetSpec, tidy, verdict

__all__ = ["SHAPES", "plan_view", "plan_widget", "plot_plan", "plot_published", "plot_step_differences",
           "published_table", "step_ratio", "verdict_or_context"]

# Llama-style shapes by size (SwiGLU, 8 key/value heads, 128-wide heads): illustrations for
# the widget, not any released model's configuration
SHAPES = {  # name: (layers, hidden, heads, ffn)
    "1B": (16, 2048, 16, 8192),
    "8B": (32, 4096, 32, 14336),
    "70B": (80, 8192, 64, 28672),
    "400B": (126, 16384, 128, 53248),
}

TERM_COLORS = {"matmul": "#4c72b0", "memory-bound": "#8172b2", "tensor-parallel": "#dd8452",
               "context-parallel": "#937860", "pipeline bubble": "#c44e52",
               "pipeline sends": "#da8bc3", "data-parallel": "#55a868", "ZeRO-3 collectives": "#64b5cd",
               "optimizer": "#8c8c8c"}

# the memory panel's kinds, in colours no step-time term uses: one colour, one meaning per figure
MEMORY_KIND_COLORS = {"model_states": "#2b4c6f", "activations": "#ccb974", "buffers": "#4d4d4d"}

# a term whose largest bar is below this share of the longest bar cannot be seen: the legend
# lists it apart, under "too small to see", instead of beside a colour no bar shows
VISIBLE_SHARE = 0.005


def _stacked(ax, labels: list[str], series: list[tuple[str, str, list[float]]]) -> list[str]:
    """Stack ``series`` (name, colour, one value per label) as horizontal bars; the legend
    names only those a reader can see. Returns the names too small to see."""
    longest = max((sum(v) for v in zip(*(vals for *_, vals in series), strict=True)), default=0.0)
    left, small = [0.0] * len(labels), []
    for name, color, vals in series:
        seen = max(vals) >= VISIBLE_SHARE * longest
        if not seen:
            small.append(name)
        ax.barh(labels, vals, left=left, color=color, label=name if seen else None)
        left = [x + v for x, v in zip(left, vals)]
    return small


def step_ratio(prediction, measured, other: float, said: str, terms, base_terms, difference=None) -> None:
    """Record the verdict on a step-ratio ``prediction`` (:func:`perfkit.viz.verdict`), or print
    it as context where its window also holds the model's ratio without collectives: the
    choice and the text are :func:`perfkit.plan.readings.step_ratio_text`'s (``difference``
    passed on). Returns nothing."""
    recorded, text = step_ratio_text(prediction, measured, other, said, terms, base_terms, difference)
    if recorded:
        verdict(prediction, measured, explain=dict.fromkeys(("above", "below", "held"), text))
    else:
        print(text)


def verdict_or_context(name: str, predictions, measured, said: str, without: float | None = None,
                       what: str = "") -> None:
    """Record the verdict on ``predictions[name]`` with ``said`` as its cause on every side, or
    print it as context where its window also holds ``without``: the choice and the text are
    :func:`perfkit.plan.readings.shared_window_text`'s. Returns nothing."""
    recorded, text = shared_window_text(name, predictions, measured, said, without, what)
    if recorded:
        verdict(predictions[name], measured, explain=dict.fromkeys(("above", "below", "held"), text))
    else:
        print(text)


def plot_step_differences(rows: Mapping[str, tuple], base: str = "DDP",
                          alternative: str = "priced as NCCL's ring reduce-scatter") -> Figure:
    """Each layout's step minus the ``base`` step, paired by round (ms): the measured median with
    its interval (black), the predicted difference (red diamond), the prediction's tolerance
    window put on the difference (grey band) and, where given, the difference predicted at
    another price (hollow diamond, ``alternative``). ``rows`` maps a layout's name to
    ``(measured, predicted_ms, (window_low_ms, window_high_ms), alternative_ms or None)``,
    ``measured`` an :class:`~perfkit.estimate.Estimate` in ms.

    Raises:
        TypeError, ValueError: ``rows`` empty or not of that shape, a figure not finite, or a
            window with low > high.
    """
    check_type("rows", rows, Mapping)
    if not rows:
        raise ValueError("rows must name at least one layout")
    checked = []
    for n, row in rows.items():
        if not isinstance(row, tuple) or len(row) != 4:
            raise ValueError(f"rows[{n!r}] must be (measured, predicted_ms, (low, high), alternative_ms), "
                             f"got {row!r}")
        m, pr, win, alt = row
        check_type(f"rows[{n!r}][0]", m, Estimate)
        if not isinstance(win, tuple) or len(win) != 2:
            raise ValueError(f"rows[{n!r}][2] must be (low_ms, high_ms), got {win!r}")
        lo, hi = (check_real(f"rows[{n!r}][2][{i}]", w) for i, w in enumerate(win))
        if lo > hi:
            raise ValueError(f"rows[{n!r}][2] must have low <= high, got {win!r}")
        checked.append((str(n), m, check_real(f"rows[{n!r}][1]", pr), lo, hi,
                        None if alt is None else check_real(f"rows[{n!r}][3]", alt)))
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.6 * len(checked)))
    seen: set[str] = set()

    def once(label: str) -> str | None:  # each legend entry once, from whichever row draws it first
        if label in seen:
            return None
        seen.add(label)
        return label
    for y, (_n, m, pr, lo, hi, alt) in enumerate(checked[::-1]):
        ax.fill_betweenx([y - 0.3, y + 0.3], lo, hi, color="0.85", lw=0,
                         label=once("the ratio's tolerance window, put on the difference"))
        if m.has_interval:
            ax.errorbar(m.value, y, xerr=[[m.value - m.low], [m.high - m.value]], fmt="o", color="k",
                        capsize=4, label=once(f"measured: median, {m.label}"))
        else:
            ax.plot(m.value, y, "o", color="k", label=once("measured: median"))
        ax.plot(pr, y, "D", color="C3", label=once("predicted"))
        if alt is not None:
            ax.plot(alt, y, "D", mfc="none", color="C3", label=once(f"predicted, {alternative}"))
    ax.set_yticks(range(len(checked)), [n for n, *_ in checked[::-1]])
    ax.set_ylim(-0.6, len(checked) - 0.4)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_xlabel(f"step minus {base}'s step, paired by round (ms)")
    ax.set_title(f"Each layout's step minus {base}'s: measured, predicted and the window", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return tidy(fig)


def plot_plan(p: Plan, top: int = 5) -> Figure:
    """The best ``top`` layouts: seconds per term (left), GB per GPU by kind (right). A term
    or kind below :data:`VISIBLE_SHARE` of the longest bar is drawn but left out of the
    legend's colours: the legend's title names it as too small to see.

    Raises:
        TypeError: if ``p`` is not a :class:`Plan`.
    """
    if not isinstance(p, Plan):
        raise TypeError(f"p must be a perfkit.plan.Plan, got {type(p).__name__}")
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 1.8 + 0.45 * max(min(top, len(p.best)), 1)),
                               gridspec_kw={"width_ratios": [3, 2]})
    best = p.best[:top][::-1]  # the best on top
    labels = [c.layout.label() for c in best]
    if not best:
        a.text(0.5, 0.5, f"no layout fits ({len(p.rejected)} rejected)", ha="center", va="center")
        a.set_axis_off()
        b.set_axis_off()
        return tidy(fig)
    terms = [(t, color, [c.time.terms.get(t, 0.0) for c in best]) for t, color in TERM_COLORS.items()]
    small = _stacked(a, labels, [x for x in terms if any(x[2])])
    a.set_xlabel("predicted step time (s)")
    a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.25), ncol=3, frameon=False,
             title=f"too small to see: {', '.join(small)}" if small else None, title_fontsize=7)
    a.set_title(f"{p.model.name} on {p.gpus} x {p.cluster.gpu.name}", fontsize=9)
    kinds = [(k.replace("_", " "), color, [getattr(c.memory, k) / 1e9 for c in best])  # GB
             for k, color in MEMORY_KIND_COLORS.items()]
    small = _stacked(b, labels, [x for x in kinds if any(x[2])])
    b.axvline(p.cluster.usable_memory / 1e9, color="k", ls="--", lw=1, label="usable")
    b.set_yticks([])
    b.set_xlabel("memory per GPU (GB)")
    b.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.25), ncol=2, frameon=False,
             title=f"too small to see: {', '.join(small)}" if small else None, title_fontsize=7)
    for ax in (a, b):
        ax.xaxis.set_major_locator(MaxNLocator(5))
    fig.tight_layout()
    fig.subplots_adjust(wspace=0.12, bottom=0.3)  # room for the tick labels and legends
    return tidy(fig)


def plot_published(cmp: Comparison) -> Figure:
    """Each row's error, predicted over reported tokens/s per GPU less 1, on a linear axis
    (a log-log plot of predicted against reported hides errors of tens of percent): against the
    reported tokens/s (left; hollow: the fitted rows) and, for the held-out rows, against the
    model's parameters, the planner's beside the constant-MFU baseline's (right).

    Raises:
        TypeError: if ``cmp`` is not a :class:`perfkit.plan.Comparison`.
    """
    if not isinstance(cmp, Comparison):
        raise TypeError(f"cmp must be a perfkit.plan.Comparison, got {type(cmp).__name__}")
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    tables = list(dict.fromkeys(r.run.table for r in cmp.rows))
    for i, t in enumerate(tables):
        rows = [r for r in cmp.rows if r.run.table == t]
        color = f"C{i}"
        for fitted in (False, True):
            pick = [r for r in rows if r.fitted == fitted]
            if pick:
                a.scatter([r.run.reported_tokens_per_gpu for r in pick], [100 * r.error for r in pick],
                          s=14, color=color, facecolors="none" if fitted else color,
                          label=None if fitted else t)
        held = [r for r in rows if not r.fitted]
        size = [r.run.model.num_params for r in held]
        b.scatter(size, [100 * r.error for r in held], s=10, color=color)
        b.scatter(size, [100 * r.baseline_error for r in held], s=10, color=color, marker="x", alpha=0.5)
    a.scatter([], [], s=14, color="grey", facecolors="none", label="hollow: fitted rows")
    a.set(xscale="log", xlabel="reported tokens/s per GPU", ylabel="error: predicted / reported - 1 (%)")
    a.legend(fontsize=7)
    for ax in (a, b):
        for y in (-20, 20):
            ax.axhline(y, color="k", ls=":", lw=1)
        ax.axhline(0, color="k", lw=0.5)
    b.scatter([], [], s=10, color="grey", label="planner")
    b.scatter([], [], s=10, color="grey", marker="x", label="constant MFU")
    b.plot([], [], "k:", lw=1, label="±20 %")
    b.set(xscale="log", xlabel="parameters (held-out rows; colours as on the left)")
    b.yaxis.set_major_locator(MultipleLocator(10))
    b.tick_params(labelleft=True)
    b.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.subplots_adjust(wspace=0.25)
    return tidy(fig)


def published_table(cmp: Comparison) -> str:
    """A Markdown table: per source table, rows, fitted efficiency, the planner's and the
    constant-MFU baseline's median and largest |error| over the held-out rows.

    Raises:
        TypeError: if ``cmp`` is not a :class:`perfkit.plan.Comparison`.
    """
    if not isinstance(cmp, Comparison):
        raise TypeError(f"cmp must be a perfkit.plan.Comparison, got {type(cmp).__name__}")
    lines = ["| table | rows (fitted) | efficiency | planner median / max | baseline median / max |",
             "|---|---|---|---|---|"]
    for t, eff in cmp.efficiency.items():
        rows = [r for r in cmp.rows if r.run.table == t]
        held = sorted(abs(r.error) for r in rows if not r.fitted)
        base = sorted(abs(r.baseline_error) for r in rows if not r.fitted)
        lines.append(f"| {t} | {len(rows)} ({len(rows) - len(held)}) | {eff:.2f} | "
                     f"{stats.median(held):.1%} / {held[-1]:.1%} | "
                     f"{stats.median(base):.1%} / {base[-1]:.1%} |")
    return "\n".join(lines)


def plan_view(size: str = "8B", gpus: int = 64, network_gbps: float = 400.0,
              batch_mtokens: float = 4.0, gpu: str = "h100-sxm", seq: int = 8192,
              efficiency: float = 0.5) -> Figure:
    """Plan a Llama-style model of ``size`` (:data:`SHAPES`) on ``gpus`` GPUs and draw the
    best layouts (:func:`plot_plan`).

    Raises:
        ValueError: for an unknown ``size`` or ``gpu``, or a value out of range.
    """
    if size not in SHAPES:
        raise ValueError(f"size must be one of {sorted(SHAPES)}, got {size!r}")
    layers, hidden, heads, ffn = SHAPES[size]
    model = ModelSpec(f"Llama-style {size}", layers=layers, hidden=hidden, heads=heads, ffn=ffn,
                      vocab=128256, seq=seq, kv_heads=8, gated=True, tied=False)
    batch = max(int(batch_mtokens * 2**20) // seq, 1)
    return plot_plan(plan(model, named_cluster(gpu, 8, network_gbps, efficiency), gpus, batch))


def plan_widget() -> WidgetSpec:
    """Model size, GPUs, network and batch -> the best layouts and their terms."""
    return WidgetSpec(plan_view, {
        "size": Choice(list(SHAPES), "8B", "model"),
        "gpus": Choice([8, 64, 512, 4096], 64, "GPUs"),
        "network_gbps": Choice([100.0, 200.0, 400.0, 800.0], 400.0, "network Gb/s per GPU"),
        "batch_mtokens": Choice([0.5, 1.0, 4.0, 16.0], 4.0, "batch (Mi tokens)"),
    }, title="The planner: best layouts of a Llama-style model on H100s (perfkit.plan)")
