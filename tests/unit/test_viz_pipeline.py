"""perfkit.viz.pipeline: the schedule widget at every extreme, grids and the bubble plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from perfkit.parallel.schedules import make_schedule, one_f_one_b  # noqa: E402
from perfkit.parallel.simulate import simulate  # noqa: E402
from perfkit.viz.core import text_overlaps  # noqa: E402
from perfkit.viz.pipeline import plot_bubbles, plot_grids, plot_timeline, schedule_widget  # noqa: E402


def test_widget_extremes_and_refused_choice():
    measured = simulate(one_f_one_b(4, 8), {"F": 0.01, "B": 0.02})
    spec = schedule_widget({("1f1b", 4, 8, 1): measured})
    for kw in spec.extremes():
        out = spec.fn(**kw)
        if kw["schedule"] == "1f1b" and kw["m"] < kw["p"]:
            assert isinstance(out, str) and "n_micro >= n_ranks" in out
        else:
            assert isinstance(out, Figure)
            plt.close(out)
    fig = spec.fn(schedule="1f1b", p=4, m=8, v=1)
    assert len(fig.axes) == 2 and "measured" in fig.axes[1].get_title()   # the run beside the model
    plt.close(fig)
    fig = spec.fn(schedule="gpipe", p=4, m=8, v=1)
    assert len(fig.axes) == 1                                              # nothing measured for it
    plt.close(fig)


def test_widget_names_the_measured_step():
    measured = simulate(one_f_one_b(2, 4), {"F": 0.01, "B": 0.02})
    key = ("1f1b", 2, 4, 1)
    fig = schedule_widget({key: measured}, {key: "step 3 of 5, nearest the median"}).fn(
        schedule="1f1b", p=2, m=4, v=1)
    assert "step 3 of 5, nearest the median" in fig.axes[1].get_title()
    plt.close(fig)


def test_grids_and_bubbles():
    tl = simulate(one_f_one_b(2, 4), {"F": 1, "B": 1})
    ax = plot_timeline(tl)
    assert len(ax.patches) == 16 and "20.0%" in ax.get_title()
    plt.close("all")
    assert len(plot_grids(tl).axes) == 1
    # the legend names only the kinds drawn (1F1B: F and B, no I or W); the measured grid says its step
    fig = plot_grids(tl, tl, measured_note="the last of 5 steps")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["F", "B"]
    assert fig.axes[1].get_title().endswith("the last of 5 steps")
    fig = plot_grids(simulate(make_schedule("zb_h1", 2, 4), {"F": 1, "I": 1, "W": 1}))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["F", "I", "W"]
    assert fig.axes[0].get_title().startswith("model: ") and fig.axes[0].get_xlabel() == "time (F = 1)"
    # a prediction fed with measured seconds says so, in its title and its axis
    fig = plot_grids(tl, tl, label="prediction (stage costs timed alone)", unit="s")
    assert fig.axes[0].get_title().startswith("prediction (stage costs timed alone): 1f1b")
    assert fig.axes[0].get_xlabel() == "time (s)"
    plt.close("all")
    # costs in seconds: no tick label past a grid's end, where it would collide with the next grid's
    secs = simulate(one_f_one_b(2, 4), {"F": 0.036, "B": 0.072})   # ends at 0.54 s, between ticks
    fig = plot_grids(secs, secs, label="prediction", unit="s")
    assert text_overlaps(fig) == []
    plt.close("all")
    # the old panels each ended at their own step, hiding a measured step 1.5x the predicted one
    slow = simulate(one_f_one_b(2, 4), {"F": 0.054, "B": 0.108})
    fig = plot_grids(secs, slow, label="prediction", unit="s", share_time=True)
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim() == (0, slow.makespan)
    assert text_overlaps(fig) == []
    assert plot_grids(secs, slow, unit="s").axes[0].get_xlim() == (0, secs.makespan)
    plt.close("all")
    rows = [{"p": 2, "schedule": "gpipe", "n_micro": 4, "measured": 0.21, "interval": [0.2, 0.22]},
            {"p": 2, "schedule": "1f1b", "n_micro": 8, "measured": 0.12, "interval": [0.11, 0.13]}]
    ax = plot_bubbles(rows + [{**rows[0], "p": 4}])   # the formula line named once, not per p
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == [
        "1f1b measured", "formula (p - 1) / (m + p - 1)", "gpipe measured"]
    # a title, and the intervals' size printed: bars narrower than the markers do not show
    assert ax.get_title().startswith("Bubble share") and "intervals at most ±0.01" in ax.get_title()
    plt.close("all")
    # both schedules at the same m and nearly the same share: neither marker hides the other
    same = [rows[0], {**rows[0], "schedule": "1f1b", "measured": 0.2105}]
    xs = [line.get_xdata()[0] for line in plot_bubbles(same).lines if line.get_marker() in ("o", "s")]
    assert len(xs) == 2 and abs(xs[0] - xs[1]) >= 0.2 and all(abs(x - 4) < 0.2 for x in xs)
    plt.close("all")
    with pytest.raises(TypeError, match="Timeline"):
        plot_timeline("grid")
