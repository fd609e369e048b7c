"""The 1-worker step's explanation credits the longer stage, and near_edge compares as printed."""

import pytest

from perfkit.data import experiments as ex
from perfkit.stats import Estimate
from perfkit.verdict import Prediction


def test_a_loader_bound_step_credits_the_worker_not_the_compute_slowdown():
    # notebook 07's run: step 20.0 ms, wait 5.1, compute 14.8 in the loop; B*c 17.3, t_compute 13.3 alone
    got = ex.pipeline_excess(20.0, 5.1, 14.8, 17.3, 13.3, 0.0, 2)
    assert got.stage == "loader" and got.unsplit_ms == pytest.approx(2.7)
    assert "delivered a batch every 20.0 ms (the median step) against B*c = 17.3 ms alone (1.16x)" in got.text
    assert "changes the wait, not the step" in got.text and "1.11x its 13.3 ms alone (+1.5 ms)" in got.text
    assert "the other +2.7 ms is the worker's side" in got.text
    assert "+1.2" not in got.text   # the old account put the compute's +1.5 ms into the +2.7 ms


def test_a_compute_bound_step_counts_the_compute_slowdown_and_nothing_at_or_below_the_model():
    got = ex.pipeline_excess(16.0, 0.6, 15.2, 10.0, 13.3, 0.3, 2)   # +2.7 ms over t_compute
    assert got.stage == "compute" and got.unsplit_ms == pytest.approx(0.5)   # 2.7 - 0.3 - 1.9
    assert "the compute's slowdown +1.9 ms; the other +0.5 ms" in got.text
    level = ex.pipeline_excess(17.3, 4.0, 13.3, 17.3, 13.3, 0.0, 2)
    assert level.unsplit_ms == 0.0 and "Of the" not in level.text
    with pytest.raises(ValueError, match="load_ms"):
        ex.pipeline_excess(20.0, 5.1, 14.8, 0.0, 13.3, 0.0, 2)
    with pytest.raises(ValueError, match="cores"):
        ex.pipeline_excess(20.0, 5.1, 14.8, 17.3, 13.3, 0.0, 0)


def test_handoff_part_names_the_side_the_longer_stage_puts_the_rest_on():
    assert "the other 2.2 ms is the worker taking longer per batch" in ex.handoff_part(0.55, 2.7)
    assert "the other 0.3 ms is the loop's own work" in ex.handoff_part(0.2, 0.5, "compute")
    with pytest.raises(ValueError, match="stage"):
        ex.handoff_part(0.2, 0.5, "gpu")


def test_near_edge_does_not_claim_more_than_the_width_when_both_print_alike():
    pred = Prediction("1-worker step time", "m", value=17.3, rel_tol=0.25, unit=" ms")   # upper edge 21.6 ms
    said = ex.near_edge(pred, Estimate(20.0, 19.4, 20.5, 0.9, 30, "median of 30 samples"))
    assert "ends 1.1 ms inside the prediction's upper edge" in said
    assert "no more than the interval's own width (1.1 ms)" in said and "more than the" not in said.replace(
        "no more than the", "")


def test_loader_widget_title_names_the_jitter_that_sets_its_reading():
    import matplotlib.pyplot as plt

    from perfkit.viz import data as vd

    spec = vd.loader_widget(batch_size=16, compute_ms=10.0, per_sample_ms=2.0)
    fig = spec.fn(**spec.defaults())
    assert "load jitter (CV) 0.5" in fig._suptitle.get_text()
    plt.close(fig)


def test_a_compute_in_the_loop_past_the_loader_alone_credits_neither_stage():
    # a loaded run: 26.2 ms of compute in the loop against B*c = 16.9 ms alone
    got = ex.pipeline_excess(29.5, 2.4, 26.2, 16.9, 12.0, 0.0, 2)
    assert got.stage == "either" and got.unsplit_ms == pytest.approx(12.6)
    assert "either stage may have set the 29.5 ms median step" in got.text
    assert "worker's side" not in got.text and "follows the worker" not in got.text
    assert "either stage slower in the loop" in ex.handoff_part(0.55, got.unsplit_ms, got.stage)
