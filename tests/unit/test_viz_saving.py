"""perfkit.viz.saving: the goodput widget at every extreme, the save-cost, restart-timeline and
goodput plots, and their refusals."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from perfkit.saving import SaveCosts, WriteBandwidth, goodput, goodput_curve, young_interval  # noqa: E402
from perfkit.saving.restart_experiments import PARTS  # noqa: E402
from perfkit.viz import text_overlaps  # noqa: E402
from perfkit.viz.saving import (  # noqa: E402
    goodput_view,
    goodput_widget,
    plot_goodput,
    plot_restart_timeline,
    plot_save_costs,
)


def test_widget_at_every_extreme():
    spec = goodput_widget()
    for kw in spec.extremes():
        fig = spec.fn(**kw)
        assert isinstance(fig, Figure) and "save every" in fig.axes[0].get_title()
        plt.close(fig)


def test_widget_title_names_dalys_interval_and_its_goodput():
    # the title and the printed plan must be one number from one computation (not the grid's best)
    fig = goodput_widget().fn(mtbf_h=3.1, checkpoint_gb=5670.0, bandwidth_gb_per_s=2000.0, restart_min=10.0)
    curve = goodput_view(3.1, 5670.0, 2000.0, 10.0)
    title = fig.axes[0].get_title()
    assert f"save every {curve.daly_s / 60:.3g} min (Daly)" in title
    assert f"goodput {goodput(curve.daly_s, curve.save_s, 600.0, 3.1 * 3600):.1%}" in title
    assert f"{curve.best_s / 60:.3g} min" not in title  # the grid's best, 4.22 min, is a different number
    plt.close(fig)


def test_goodput_view_extremes():
    # a rare failure and a tiny checkpoint: save rarely, keep almost everything
    calm = goodput_view(mtbf_h=100.0, checkpoint_gb=0.1, bandwidth_gb_per_s=1e4, restart_min=0.0)
    assert calm.best_goodput > 0.999 and calm.best_s == pytest.approx(young_interval(1e-5, 3.6e5), rel=0.05)
    # a failure every 6 minutes, an hour-long restart and a 3-hour save: nothing is kept
    storm = goodput_view(mtbf_h=0.1, checkpoint_gb=1e4, bandwidth_gb_per_s=1.0, restart_min=60.0)
    assert storm.best_goodput == 0.0 and all(g == 0.0 for g in storm.goodput)
    # Llama 3 405B's defaults: about 4 minutes, above 90 %
    ll = goodput_view(3.1, 5670.0, 2000.0, 10.0)
    assert 3 < ll.best_s / 60 < 5 and 0.9 < ll.best_goodput < 0.95


def test_goodput_plot_marks_young_daly_and_measured_points():
    curve = goodput_curve(0.5, 15.0, 600.0)
    ax = plot_goodput(curve, measured=[(20.0, 0.9), (40.0, 0.92)])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("Young") for lab in labels) and any(lab.startswith("Daly") for lab in labels)
    assert "measured" in labels and ax.get_xscale() == "log"
    assert any(lab.endswith("floored at 0") for lab in labels)  # goodput() clips the model at 0
    assert not text_overlaps(ax.figure)
    plt.close("all")


def _costs():
    bw = WriteBandwidth("d", "/", "ext4", 2**20, True, (0.002, 0.002, 0.002))
    return SaveCosts(10**7, {"sync": [0.4, 0.5, 0.45, 0.42, 0.44], "thread": [0.2, 0.3, 0.25, 0.22, 0.21]},
                     {"sync": [0.3] * 5, "thread": [0.35] * 5}, bw, 2e10)


def test_save_costs_plot_draws_models_and_rounds():
    ax = plot_save_costs(_costs())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("write bandwidth" in lab for lab in labels) and any("staging" in lab for lab in labels)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["sync", "thread"]
    assert not text_overlaps(ax.figure)
    # the legend lies below the axes, off the bars (inside, its red swatch vanished on the red bar)
    ax.figure.canvas.draw()
    legend, area = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 <= area.y0
    plt.close("all")


def test_the_sync_floor_is_drawn_over_the_sync_group_only():
    """The write's floor bounds the sync save alone; drawn across the whole axes it ran over the
    thread bar beneath it, which read as a floor beaten."""
    ax = plot_save_costs(_costs())
    line = next(c for c in ax.collections if "write bandwidth" in str(c.get_label()))
    (seg,) = line.get_segments()
    assert seg[0][0] == pytest.approx(-0.45) and seg[1][0] == pytest.approx(0.45)   # sync is group 0
    assert str(line.get_label()).startswith("sync's floor")
    plt.close("all")


def test_restart_timeline_plot_and_refusals():
    spans = [(r, "training (attempt 0)", 0.0, 3.0) for r in (0, 1)]
    spans += [(r, p, 3.0 + i, 4.0 + i) for r in (0, 1) for i, p in enumerate(PARTS)]
    spans += [(r, "training (resumed)", 9.0, 10.0) for r in (0, 1)]
    ax = plot_restart_timeline(spans)
    assert len(ax.patches) == len(spans)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert not text_overlaps(ax.figure)
    plt.close("all")
    with pytest.raises(TypeError, match="spans"):
        plot_restart_timeline([])
    with pytest.raises(ValueError, match=r"spans\[0\]"):
        plot_restart_timeline([(0, "coffee", 0.0, 1.0)])


def test_refusals():
    with pytest.raises(TypeError, match="costs"):
        plot_save_costs({"sync": [1.0]})
    with pytest.raises(TypeError, match="curve"):
        plot_goodput([1.0])
    with pytest.raises(ValueError, match="mtbf_h"):
        goodput_view(0.0, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="restart_min"):
        goodput_view(1.0, 1.0, 1.0, math.nan)


def test_the_staging_floors_legend_names_the_rate_it_used():
    """The floor takes the fastest copy seen near the state's size (with_fastest_copy may raise
    it above the copy measured beside the saves): the legend prints that rate, not "the copy
    rate at this size", which a reader matched against the slower copy printed beside it."""
    from dataclasses import replace

    costs = replace(_costs(), copy_bytes_per_s=2.35e10)
    ax = plot_save_costs(costs)
    floor = next(t.get_text() for t in ax.get_legend().get_texts() if "staging" in t.get_text())
    assert "23.5 GB/s, the fastest copy seen near this size" in floor
    assert f"({costs.staging_floor_s * 1e3:.3g} ms)" in floor
    plt.close("all")
