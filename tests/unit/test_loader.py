"""Tests for perfkit.loader: loader measurements, the pipeline model, and their plots.

No test asserts on wall-clock speed (the machine is shared).
"""

from __future__ import annotations

import pytest

from perfkit.data import LoaderConfig, SlowDataset, measure_loader, simulate_pipeline

# --- loader measurements and the pipeline model ----------------------------------------------


def test_measure_loader_records_every_step_and_sample():
    rec = measure_loader(SlowDataset(40, 0.0005), LoaderConfig(batch_size=8), compute=0.001,
                         epochs=2)
    assert rec.steps == 10 and rec.samples == 80
    assert [len(w) for w in rec.wait_s] == [5, 5] and [len(c) for c in rec.compute_s] == [5, 5]
    assert 0.0 < rec.wait_share < 1.0 and 0.0 <= rec.steady_wait_share < 1.0
    assert rec.samples_per_s > 0 and rec.startup_s > 0
    assert rec.steady_step_s == pytest.approx(
        (rec.wall_s - sum(w[0] + c[0] for w, c in zip(rec.wait_s, rec.compute_s))) / 8)


def test_measure_loader_with_persistent_workers_a_callable_step_and_max_steps():
    seen = []
    cfg = LoaderConfig(batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=3)
    rec = measure_loader(SlowDataset(40, 0.0), cfg, compute=lambda b: seen.append(int(b[0, 0])),
                         epochs=2, max_steps=3)
    assert rec.steps == 6 and rec.samples == 24 and seen == [0, 4, 8, 0, 4, 8]


def test_loader_config_bad_input():
    with pytest.raises(ValueError, match="num_workers"):
        LoaderConfig(num_workers=0, persistent_workers=True)
    with pytest.raises(ValueError, match="batch_size"):
        LoaderConfig(batch_size=0)
    with pytest.raises(ValueError, match="prefetch_factor"):
        LoaderConfig(num_workers=1, prefetch_factor=0)
    with pytest.raises(ValueError, match="start_method"):
        LoaderConfig(num_workers=1, start_method="thread")
    with pytest.raises(ValueError, match="start_method"):
        LoaderConfig(start_method="spawn")
    with pytest.raises(TypeError, match="compute"):
        measure_loader(SlowDataset(4, 0.0), LoaderConfig(), compute="fast")


def test_simulation_matches_hand_computed_pipelines():
    serial = simulate_pipeline(0.03, 0.01, workers=0, steps=10)
    assert serial.step_s == pytest.approx(0.04) and serial.wait_share == pytest.approx(0.75)
    assert serial.steady_step_s == pytest.approx(0.04)
    assert serial.steady_wait_share == pytest.approx(0.75)
    hidden = simulate_pipeline(0.01, 0.03, workers=1, depth=2, steps=100)
    assert hidden.wait_s[0] == pytest.approx(0.01) and max(hidden.wait_s[1:]) == 0.0
    assert hidden.steady_step_s == pytest.approx(0.03) and hidden.steady_wait_share == 0.0
    # data-bound: 4 workers each 0.08 s per batch -> a batch every 0.02 s
    bound = simulate_pipeline(0.08, 0.01, workers=4, depth=2, steps=2000)
    assert bound.step_s == pytest.approx(0.02, rel=0.01)
    # the same loads as CPU work on 2 cores: each takes twice as long
    cpu = simulate_pipeline(0.08, 0.01, workers=4, depth=2, steps=2000, cores=2)
    assert cpu.step_s == pytest.approx(0.04, rel=0.01)


def test_handoff_is_paid_by_the_loop_on_every_batch_from_a_worker():
    r = simulate_pipeline(0.01, 0.01, workers=4, depth=2, steps=1000, handoff_s=0.002)
    assert r.step_s == pytest.approx(0.012, rel=0.01)
    assert r.steady_wait_share == pytest.approx(0.002 / 0.012, rel=0.01)
    r0 = simulate_pipeline(0.01, 0.01, workers=0, steps=10, handoff_s=0.002)
    assert r0.step_s == pytest.approx(0.02)  # no workers: nothing to hand over


def test_deeper_prefetch_absorbs_jitter():
    shares = [simulate_pipeline(0.02, 0.02, workers=2, depth=d, steps=3000, jitter=1.0).wait_share
              for d in (1, 2, 8)]
    assert shares[0] > shares[1] > shares[2]


def test_known_batch_costs_replay_one_run_by_hand():
    # one worker, depth 1, compute 0.01 s; loads 0.03, 0.005, 0.005 s. Batch 1 is requested
    # only when batch 0 arrives (t=0.03), ready at 0.035 while the loop asks at 0.04; batch 2
    # is requested at 0.035, ready at 0.04 + 0.005 = 0.045, asked for at 0.05: no wait.
    r = simulate_pipeline(0.5, 0.01, workers=1, depth=1, loads=[0.03, 0.005, 0.005])
    assert r.wait_s == pytest.approx((0.03, 0.0, 0.0))
    assert r.step_s == pytest.approx(0.06 / 3)
    # the same batch costs as a dataset's seeded jitter: a slow batch late in a short run
    # stalls the loop even with a deep queue, which the long-run average does not show
    slow_late = [0.01] * 9 + [0.2]
    deep = simulate_pipeline(0.01, 0.01, workers=2, depth=8, loads=slow_late)
    assert deep.wait_s[-1] > 0.05 and len(deep.wait_s) == 10
    cpu = simulate_pipeline(0.0, 0.01, workers=4, depth=1, cores=2, loads=[0.02] * 4)
    assert cpu.wait_s[0] == pytest.approx(0.04)  # 4 busy workers on 2 cores: twice as long


def test_simulation_bad_input():
    for kw in ({"load_s": -1.0}, {"compute_s": float("nan")}, {"workers": -1}, {"depth": 0},
               {"steps": 0}, {"cores": 0}, {"handoff_s": -0.001}):
        args = {"load_s": 0.01, "compute_s": 0.01, **kw}
        with pytest.raises(ValueError, match=next(iter(kw))):
            simulate_pipeline(**args)
    for loads, match in (([], "loads"), ([0.01, -0.01], "loads"), ("0.01", "loads"),
                         ([0.01, float("nan")], "loads")):
        with pytest.raises(ValueError, match=match):
            simulate_pipeline(0.01, 0.01, workers=1, loads=loads)
    with pytest.raises(ValueError, match="jitter"):
        simulate_pipeline(0.01, 0.01, workers=1, jitter=0.5, loads=[0.01])


# --- widgets and plots ------------------------------------------------------------------------


def test_loader_widget_extremes_and_plots():
    import matplotlib.pyplot as plt

    from perfkit.viz import data as vd

    spec = vd.loader_widget(batch_size=16, compute_ms=10.0, handoff_ms=1.5)
    for kw in spec.extremes():
        plt.close(spec.fn(**kw))
    recs = [measure_loader(SlowDataset(16, 0.0), LoaderConfig(batch_size=4, num_workers=w),
                           max_steps=2) for w in (0, 1)]
    sims = [simulate_pipeline(0.001, 0.0, w, steps=4) for w in (0, 1)]
    plt.close(vd.plot_loader_sweep(recs, predicted=sims, labels=["a", "b"]))
    with pytest.raises(ValueError, match="predicted"):
        vd.plot_loader_sweep(recs, predicted=sims[:1])
    plt.close(vd.plot_overlap({"serial": 2.0, "prefetched": 1.1}, load_ms=1.0, compute_ms=1.0))
    with pytest.raises(ValueError, match="records"):
        vd.plot_loader_sweep([])
    with pytest.raises(ValueError, match="handoff_ms"):
        vd.loader_widget(handoff_ms=-1.0)


def test_loader_widget_starts_at_the_measured_setting_and_plots_from_zero():
    import matplotlib.pyplot as plt

    from perfkit.viz import data as vd

    spec = vd.loader_widget(batch_size=16, compute_ms=10.0, per_sample_ms=2.0)
    assert spec.defaults()["per_sample_ms"] == 2.0  # the notebook's measured setting, not 1 ms
    fig = spec.fn(**spec.defaults())
    assert fig.axes[0].get_ylim()[0] == 0  # samples/s from zero: a 600-to-1000 axis magnifies gains
    assert "32 ms/batch" in fig._suptitle.get_text()
    plt.close(fig)
    for bad in (0.05, 200.0, float("nan"), True):
        with pytest.raises((TypeError, ValueError), match="per_sample_ms"):
            vd.loader_widget(per_sample_ms=bad)


def test_plot_overlap_legend_is_the_printed_model():
    import matplotlib.pyplot as plt

    from perfkit.viz import data as vd

    fig = vd.plot_overlap({"serial": 12.0, "prefetched": 8.0}, load_ms=6.0, compute_ms=5.0, steps=8)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("= 6.8 ms" in t for t in labels), labels  # (6 + 8 * 6) / 8, the first load unhidden
    plt.close(fig)
    fig = vd.plot_overlap({"serial": 12.0}, load_ms=6.0, compute_ms=5.0)
    assert any("= 6.0 ms" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    plt.close(fig)
    # a bar ending on a model line (6.2 ms beside the 6.3 ms overlap): its label sits on a box above the line
    fig = vd.plot_overlap({"prefetched": 6.2}, load_ms=6.1, compute_ms=4.9, steps=28)
    label = next(t for t in fig.axes[0].texts if "6.2 ms" in t.get_text())
    lines = [ln.get_zorder() for ln in fig.axes[0].get_lines()]
    assert label.get_bbox_patch() is not None and label.get_zorder() > max(lines)
    plt.close(fig)
    for bad in (0, 1.5):
        with pytest.raises((TypeError, ValueError), match="steps"):
            vd.plot_overlap({"serial": 12.0}, load_ms=6.0, compute_ms=5.0, steps=bad)
    # the caller's floor (the last step and the load begun at the stop counted) is the line drawn,
    # not the first-load formula a bar can beat
    fig = vd.plot_overlap({"prefetched": 6.9}, load_ms=6.0, compute_ms=5.0, steps=8, floor_ms=7.4)
    assert any("floor of 8 steps, parts as timed apart = 7.4 ms" in t.get_text()
               for t in fig.axes[0].get_legend().get_texts())
    assert 7.4 in [ln.get_xdata()[0] for ln in fig.axes[0].get_lines()]
    plt.close(fig)
    for bad in (0.0, float("nan")):
        with pytest.raises(ValueError, match="floor_ms"):
            vd.plot_overlap({"serial": 12.0}, load_ms=6.0, compute_ms=5.0, floor_ms=bad)
    # a bound one variant alone is judged against (the GIL load's least step) is drawn across its bar
    fig = vd.plot_overlap({"serial": 16.0, "Prefetcher, spin load": 15.1}, load_ms=7.4, compute_ms=6.5,
                          least_ms={"Prefetcher, spin load": 12.05})
    mark = next(ln for ln in fig.axes[0].get_lines() if "least step judged" in ln.get_label())
    assert list(mark.get_xdata()) == [12.05, 12.05] and min(mark.get_ydata()) > 0.5  # on the second bar only
    # at the precision the text prints the other least steps (10.05 printed "10.1" read above 10.07)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("Prefetcher, spin load: 12.05 ms" in t for t in legend)
    plt.close(fig)
    with pytest.raises(ValueError, match="least_ms"):
        vd.plot_overlap({"serial": 12.0}, load_ms=6.0, compute_ms=5.0, least_ms={"prefetched": 7.0})
