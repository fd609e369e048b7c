"""Notebook 14's verdicts counted by kind, and notebook 13's figure of paired step differences."""

import matplotlib

matplotlib.use("Agg")

import pytest

from perfkit import stats
from perfkit.verdict import Prediction, judge
from perfkit.viz.plan import plot_step_differences
from perfkit.viz.saving import verdict_kind, verdict_kinds


def _p(**kw):
    return Prediction("a figure", "a model", **kw)


@pytest.mark.parametrize("kw, again, kind", [
    (dict(low=0.026, unit="s", physical=(0, None)), False, "floor"),
    (dict(high=1.0, unit="x", physical=(0, None)), False, "ceiling"),
    (dict(value=1.0, rel_tol=0.25, unit="x"), False, "test"),
    (dict(low=0.75, high=1.0, unit="x"), False, "test"),
    (dict(value=1, rel_tol=0.0, physical=(0, None)), False, "exact check"),
    (dict(high=0, physical=(0, None)), False, "exact check"),   # a count at most 0 that cannot be below 0
    (dict(low=0.5, high=2.0, measured_here=False), False, "stored run"),
    (dict(high=1.0, unit="s"), True, "re-judged"),
    (dict(low=0.5, physical=(0, 1)), False, "floor"),   # a share at least 0.5: one edge set, not a window
])
def test_each_kind_comes_from_how_the_prediction_was_built(kw, again, kind):
    assert verdict_kind(_p(**kw), again) == kind


def test_the_summary_counts_every_verdict_once_by_kind():
    ps = {"sync floor": _p(low=0.02, physical=(0, None)), "bits": _p(high=0, physical=(0, None)),
          "torchft": _p(value=0.004, rel_tol=0.5, measured_here=False), "tmpfs": _p(value=1.0, rel_tol=0.25),
          "<1 s": _p(high=1.0)}
    line = verdict_kinds(ps, again=["<1 s"])
    assert line.startswith("The 5 verdicts by kind: 1 test (tmpfs); 1 floor (sync floor); "
                           "1 exact check (bits)")
    assert "1 stored run (torchft)" in line and "1 re-judged (<1 s)" in line
    with pytest.raises(ValueError, match="again"):
        verdict_kinds(ps, again=["missing"])
    with pytest.raises(TypeError, match="predictions"):
        verdict_kinds({"x": 1.0})


def test_the_differences_figure_draws_each_layout_against_its_window():
    gap = stats.median_interval([8.0 + 0.2 * i for i in range(40)])
    fig = plot_step_differences({"zero1": (gap, 2.0, (-4.4, 8.6), 1.0),
                                 "zero3": (gap, 7.8, (-0.1, 15.7), None)})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["zero3", "zero1"]   # the first on top
    labels = ax.get_legend_handles_labels()[1]
    assert len(labels) == len(set(labels)) == 4   # window, measured, predicted, the other price: each once
    # the title names the axis's quantity, a difference, not a ratio ("over")
    assert "minus" in ax.get_title() and " over " not in ax.get_title()
    assert "minus" in ax.get_xlabel()
    with pytest.raises(ValueError, match="low <= high"):
        plot_step_differences({"zero1": (gap, 2.0, (8.6, -4.4), None)})
    with pytest.raises(TypeError, match=r"rows\['zero1'\]\[0\]"):
        plot_step_differences({"zero1": (8.0, 2.0, (-4.4, 8.6), None)})


def test_with_the_shown_verdicts_the_line_counts_the_held_ones_by_kind_and_how_many_were_tests():
    ps = {"sync floor": _p(low=0.02, physical=(0, None)), "tmpfs": _p(value=1.0, rel_tol=0.25),
          "gzip": _p(value=0.9, rel_tol=0.05), "<1 s": _p(high=1.0, physical=(0, None))}
    shown = [judge(ps["sync floor"], 0.131), judge(ps["tmpfs"], 0.92), judge(ps["gzip"], 0.5),
             judge(ps["<1 s"], 0.131)]
    line = verdict_kinds(ps, again=["<1 s"], verdicts=shown)
    assert line.startswith("3 of 4 verdicts held, by kind: 1 test (tmpfs); 1 floor (sync floor); "
                           "1 re-judged (<1 s)")
    assert "1 of the 3 held was a test, the rest weaker evidence" in line and "not held: gzip missed" in line
    short = verdict_kinds(ps, again=["<1 s"], verdicts=shown, names=False)
    assert short.startswith("3 of 4 held, by kind: 1 test; 1 floor; 1 re-judged;") and "(tmpfs)" not in short
    with pytest.raises(ValueError, match="no verdict on predictions"):
        verdict_kinds(ps, verdicts=shown[:2])
    with pytest.raises(TypeError, match="verdicts"):
        verdict_kinds(ps, verdicts=[1.0])
