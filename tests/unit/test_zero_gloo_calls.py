"""Notebook 03's one-sided medians sentence (shared baseline, no chance figure) and notebook 05's
step-time edge counting gloo's list-form reduce-scatter as one all-reduce per rank."""

from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")


def test_one_sided_medians_name_the_shared_baseline_and_its_spread_not_a_chance():
    from perfkit.compress.narrate import medians_outside_text
    e = SimpleNamespace
    paired = {k: e(value=1.1, low=1.05, high=1.15) for k in "abcde"}
    med = dict.fromkeys("abcde", 1.4)
    # the baseline's 90th percentile is 2x its median; every other method's 1.2x
    times = {"none": [1.0] * 6 + [2.0] * 5, **{k: [1.0] * 6 + [1.2] * 5 for k in "abcde"}}
    text = medians_outside_text(paired, med, times)
    assert "chance" not in text.replace("no chance of the pattern applies", "")
    assert "none's 90th percentile step is 2.00x its median, the other methods' 1.20x to 1.20x" in text
    assert "spread further above their median than any other method's" in text
    narrow = medians_outside_text(paired, med, {**times, "none": [1.0] * 11})
    assert "spread less above their median" in narrow
    among = medians_outside_text(paired, med, {**times, "none": [1.0] * 6 + [1.2] * 5})
    assert "lies among theirs" in among
    with pytest.raises(ValueError, match="times lacks"):
        medians_outside_text(paired, med, {"none": [1.0]})


def test_gloo_counts_each_list_form_reduce_scatter_as_one_all_reduce_per_rank():
    from perfkit.viz import zero as vzero
    z1 = SimpleNamespace(calls={"reduce_scatter": 4, "all_reduce": 1, "all_gather_single": 4})
    assert vzero.calls_per_step(z1) == 9  # as made
    assert vzero.gloo_calls_per_step(z1, 2) == 13 and vzero.gloo_calls_per_step(z1, 4) == 21
    single = SimpleNamespace(calls={"reduce_scatter_single": 4, "all_gather_single": 4})
    assert vzero.gloo_calls_per_step(single, 2) == 8  # the single-tensor form all-reduces once
    assert "each of its 4 reduce-scatters counted as the 2 all-reduces" in vzero.gloo_calls_note(z1, 2)
    assert vzero.gloo_calls_note(single, 2) == ""
    assert vzero.gloo_calls_note(SimpleNamespace(calls={"reduce_scatter": 1}), 2).startswith(
        ", its reduce-scatter counted as the 2 all-reduces")
    with pytest.raises((TypeError, ValueError), match="world_size"):
        vzero.gloo_calls_per_step(z1, 0)


def test_stage_edge_charges_the_gloo_count_and_says_how_it_counted():
    from perfkit.viz import zero as vzero
    ddp = SimpleNamespace(step_s=69.4e-3, update_s=5.22e-3, calls={"all_reduce": 2})
    z1 = SimpleNamespace(calls={"reduce_scatter": 4, "all_reduce": 1, "all_gather_single": 4})
    more = vzero.gloo_calls_per_step(z1, 2) - vzero.calls_per_step(ddp)
    e = vzero.stage_edge(1, ddp, more, 4.57e-3, 0.391e-3, 2, calls_note=vzero.gloo_calls_note(z1, 2))
    assert e.calls == 11  # 7 as made, plus the 4 second all-reduces gloo runs
    assert e.edge == pytest.approx(1 + (0.5 * (4.57e-3 - 0.391e-3) + 11 * 0.391e-3 - 2.61e-3) / 69.4e-3)
    assert "plus 11 calls, each of its 4 reduce-scatters counted as the 2 all-reduces" in e.text()
    plain = vzero.after_backward_edge(ddp, 1.5, 3, 4.57e-3, 0.391e-3, 2)
    assert "3 against 11, each of its 4 reduce-scatters" in e.against_plain(plain)
    with pytest.raises(TypeError, match="calls_note"):
        vzero.stage_edge(1, ddp, more, 4.57e-3, 0.391e-3, 2, calls_note=None)


def test_loss_curves_take_the_y_label_of_what_they_draw():
    from perfkit.viz.memory import plot_loss_curves
    fig = plot_loss_curves({"zero1": [0.0, 0.0]}, ylabel="loss difference (nats)")
    assert fig.axes[0].get_ylabel() == "loss difference (nats)"
    assert plot_loss_curves({"a": [1.0, 0.5]}).axes[0].get_ylabel() == "loss (nats)"
