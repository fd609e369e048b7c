"""Plots and the widget of notebook 07 (data loading); they consume :mod:`perfkit.data.loader` records.

Usage::

    from perfkit.viz.data import loader_widget, plot_loader_sweep
    build_widget(loader_widget(batch_size=32, compute_ms=20))   # sliders over the model
    plot_loader_sweep(records, predicted=sims)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit._checks import check_int, check_real
from perfkit.viz.core import FloatControl, IntControl, LogControl, WidgetSpec, si, tidy

__all__ = ["loader_widget", "plot_loader_sweep", "plot_overlap", "sweep_lines"]


def sweep_lines(labels: Sequence[Any], records: Sequence[Any], predicted: Sequence[Any],
                batch_size: int, compute_ms: float | None = None) -> str:
    """One line per loader setting: predicted against measured samples/s and waiting share
    (steady state: each epoch's first step left out), for printing beside a sweep's plot. With
    ``compute_ms`` (the step's planted compute, ms), each line also gives the measured mean of
    the steady steps' compute: a run whose waiting share matches its model's while its
    throughput falls short has its step itself running long, which this shows.

    Raises:
        ValueError: for sequences of different lengths, a ``batch_size`` below 1 or a
            ``compute_ms`` that is not a finite number > 0.
    """
    if not len(labels) == len(records) == len(predicted):
        raise ValueError(f"labels, records and predicted must be equally long, got "
                         f"{len(labels)}, {len(records)} and {len(predicted)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if compute_ms is not None and (isinstance(compute_ms, bool) or not isinstance(compute_ms, (int, float))
                                   or not 0 < compute_ms < math.inf):
        raise ValueError(f"compute_ms must be a finite number > 0, got {compute_ms!r}")

    def step(r: Any) -> str:
        if compute_ms is None:
            return ""
        steady = [c for cs in r.compute_s for c in cs[1:]]
        return f", the {compute_ms:g} ms step took {1e3 * sum(steady) / len(steady):.1f} ms" if steady else ""

    return "\n".join(
        f"{label}: predicted {batch_size / p.steady_step_s:5.0f} samples/s, "
        f"{p.steady_wait_share:4.0%} waiting | "
        f"measured {batch_size / r.steady_step_s:5.0f} samples/s, {r.steady_wait_share:4.0%} waiting{step(r)}"
        for label, r, p in zip(labels, records, predicted))


def plot_loader_sweep(records: Sequence[Any], predicted: Sequence[Any] | None = None,
                      labels: Sequence[str] | None = None, title: str = "") -> Figure:
    """Throughput and share of the loop spent waiting, one bar pair per loader setting.

    Both panels leave out each epoch's first step (worker start-up), as the model does.

    Args:
        records: :class:`perfkit.data.LoaderRecord` s, in the order to show.
        predicted: optional :class:`perfkit.data.PipelineRecord` per record (markers).
        labels: x tick labels; default ``workers=N``.
        title: the figure's title.

    Raises:
        ValueError: for no records, or ``predicted``/``labels`` of another length.
    """
    if len(records) == 0:
        raise ValueError("records must hold at least one LoaderRecord")
    for name, seq in (("predicted", predicted), ("labels", labels)):
        if seq is not None and len(seq) != len(records):
            raise ValueError(f"{name} must have one entry per record ({len(records)})")
    labels = labels or [f"workers={r.config.num_workers}" for r in records]
    xs = list(range(len(records)))
    batch = [r.config.batch_size for r in records]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.bar(xs, [b / r.steady_step_s for b, r in zip(batch, records)], color="tab:blue",
            label="measured")
    ax2.bar(xs, [100 * r.steady_wait_share for r in records], color="tab:orange",
            label="measured")
    if predicted is not None:
        ax1.plot(xs, [b / p.steady_step_s for b, p in zip(batch, predicted)], "kD",
                 label="predicted by the model")
        ax2.plot(xs, [100 * p.steady_wait_share for p in predicted], "kD",
                 label="predicted by the model")
    ax1.set_ylabel("samples / s")
    ax2.set_ylabel("% of the loop waiting for data")
    ax2.set_ylim(0, 100)
    for ax in (ax1, ax2):
        ax.set_xticks(xs, labels, rotation=20, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "DataLoader settings (after each epoch's first step)", fontsize=11)
    fig.tight_layout()
    return tidy(fig)


def plot_overlap(ms_per_step: Mapping[str, float], load_ms: float, compute_ms: float,
                 title: str = "", steps: int | None = None, floor_ms: float | None = None,
                 least_ms: Mapping[str, float] | None = None) -> Figure:
    """Measured ms per step of each variant against the two models: serial and overlapped.

    Args:
        ms_per_step: variant name -> measured milliseconds per step.
        load_ms, compute_ms: the measured cost of loading and of computing one batch.
        steps: the steps of each timed loop: the overlap model then pays the first load
            unhidden, ``(load + steps * max(load, compute)) / steps`` per step; ``None``:
            ``max(load, compute)``, a long loop.
        floor_ms: the overlap model's least ms per step for these loops, computed by the caller
            (:func:`perfkit.data.overlap_floor` over ``steps``, which also counts the last
            step and the load begun as a loop stops); drawn instead of the ``steps`` formula.
        least_ms: variant name -> a least ms per step that variant is judged against (a bound
            of its own, such as :func:`perfkit.data.gil_least_step`), drawn as a mark across its
            bar, so the figure shows every bound the text judges.

    Raises:
        ValueError: for an empty ``ms_per_step``, ``steps`` that is not an int >= 1, a
            ``floor_ms`` that is not a finite number > 0, or a ``least_ms`` that names a variant
            not in ``ms_per_step`` or holds a value that is not a finite number > 0.
    """
    if not ms_per_step:
        raise ValueError("ms_per_step must name at least one variant")
    if steps is not None:
        check_int("steps", steps, 1)
    if floor_ms is not None:
        check_real("floor_ms", floor_ms, 0, lo_open=True)
    for name, v in (least_ms or {}).items():
        if name not in ms_per_step:
            raise ValueError(f"least_ms must name variants of ms_per_step {sorted(ms_per_step)}, "
                             f"got {name!r}")
        check_real(f"least_ms[{name!r}]", v, 0, lo_open=True)
    overlap_ms = (floor_ms if floor_ms is not None else
                  max(load_ms, compute_ms) + (load_ms / steps if steps else 0.0))  # ms per step
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = list(ms_per_step)
    ax.barh(names, [ms_per_step[n] for n in names], color="tab:blue")
    ax.axvline(load_ms + compute_ms, color="tab:red", ls="--",
               label=f"serial model: load + compute = {load_ms + compute_ms:.1f} ms")
    how = (f"floor of {steps} steps, parts as timed apart" if floor_ms is not None and steps
           else "floor per step" if floor_ms is not None
           else f"(load + {steps} max(load, compute)) / {steps}" if steps else "max(load, compute)")
    ax.axvline(overlap_ms, color="tab:green", ls="--", label=f"overlap model: {how} = {overlap_ms:.1f} ms")
    for name, v in (least_ms or {}).items():  # a bound of one variant's own: across its bar only
        i = names.index(name)
        ax.plot([v, v], [i - 0.45, i + 0.45], color="tab:purple", lw=2.5, zorder=3,
                label=f"least step judged for {name}: {v:.2f} ms")
    for i, n in enumerate(names):  # on a white box above the model lines, which can cross a bar's end
        ax.text(ms_per_step[n], i, f" {ms_per_step[n]:.1f} ms", va="center", fontsize=8, zorder=4,
                bbox=dict(facecolor="white", edgecolor="none", pad=1))
    ax.set_xlabel("ms per step (median)")
    ax.set_xlim(0, 1.15 * max(max(ms_per_step.values()), load_ms + compute_ms))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    ax.set_title(title or "Does prefetching hide the load?", fontsize=11)
    fig.tight_layout()
    return tidy(fig)


def loader_widget(batch_size: int = 32, compute_ms: float = 20.0, cores: int | None = None,
                  handoff_ms: float = 0.0, max_workers: int = 8, per_sample_ms: float = 1.0) -> WidgetSpec:
    """Sliders for per-sample cost, workers, prefetch depth and jitter over the pipeline model.

    The figure shows, for 0..``max_workers`` workers, the throughput and the share of each
    step spent waiting that :func:`perfkit.data.simulate_pipeline` predicts, with the
    chosen setting marked.

    Args:
        batch_size: samples per batch.
        compute_ms: milliseconds of compute per step.
        cores: CPU-bound loads share this many cores (``None``: I/O-bound loads).
        handoff_ms: milliseconds the loop spends receiving each batch from a worker
            (measured; see :func:`perfkit.data.simulate_pipeline`).
        max_workers: the workers slider's maximum.
        per_sample_ms: the per-sample cost slider's start (ms, from 0.1 to 100): the
            setting the notebook measured, so the static figure shows that one.
    """
    from perfkit.data import simulate_pipeline

    if batch_size < 1 or max_workers < 1 or compute_ms < 0 or handoff_ms < 0:
        raise ValueError("batch_size and max_workers must be >= 1, compute_ms and "
                         "handoff_ms >= 0")
    check_real("per_sample_ms", per_sample_ms, 0.1, 100.0)

    def show(per_sample_ms: float, workers: int, depth: int, jitter: float) -> Figure:
        load_s = per_sample_ms * batch_size / 1e3
        sims = [simulate_pipeline(load_s, compute_ms / 1e3, w, depth, steps=400, jitter=jitter,
                                  cores=cores, handoff_s=handoff_ms / 1e3)
                for w in range(max_workers + 1)]
        ws = list(range(max_workers + 1))
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
        ax1.plot(ws, [batch_size * s.batches_per_s for s in sims], "o-")
        ax1.axhline(batch_size / (compute_ms / 1e3) if compute_ms else float("nan"),
                    color="gray", ls="--", label="compute-bound ceiling (B / compute, no handoff)")
        ax2.plot(ws, [100 * s.wait_share for s in sims], "o-", color="tab:orange")
        pick = sims[workers]
        ax1.plot([workers], [batch_size * pick.batches_per_s], "r*", ms=15)
        ax2.plot([workers], [100 * pick.wait_share], "r*", ms=15)
        ax1.set_ylabel("samples / s (predicted)")
        ax1.set_ylim(bottom=0)  # from zero: a gain reads at its true size
        ax2.set_ylabel("% of the step waiting (predicted)")
        ax2.set_ylim(-2, 100)
        for ax in (ax1, ax2):
            ax.set_xlabel("DataLoader workers")
            ax.grid(True, alpha=0.3)
        ax1.legend(fontsize=8)
        fig.suptitle(
            f"load {si(load_s, 's')}/batch, compute {compute_ms:g} ms/step; workers={workers}, "
            f"depth={depth}, load jitter (CV) {jitter:g}: {batch_size * pick.batches_per_s:.0f} samples/s, "
            f"{100 * pick.wait_share:.0f}% waiting", fontsize=10)
        fig.tight_layout()
        return tidy(fig)

    return WidgetSpec(show, {
        "per_sample_ms": LogControl(-1, 2, per_sample_ms, description="per-sample cost (ms)"),
        "workers": IntControl(0, max_workers, 2, description="workers"),
        "depth": IntControl(1, 8, 2, description="prefetch depth (per worker)"),
        "jitter": FloatControl(0.0, 2.0, 0.5, step=0.1, description="load jitter (CV)"),
    }, title="When does the step wait for data? (pipeline model)")
