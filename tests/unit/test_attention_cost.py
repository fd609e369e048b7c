"""Attention's measured costs (perfkit.compute.attention_cost) and notebook 12's plots and
widget (perfkit.viz.attention): exact saved bytes, timing records, the tile cost model fitted
on synthetic times it must recover, the tile-owner picture and the widget at its extremes."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from perfkit.compute import attention_cost as ac
from perfkit.compute.flash import eager_saved_bytes, flash_flops, flash_saved_bytes
from perfkit.sizing import pinned_threads
from perfkit.viz import attention as va
from perfkit.viz import attention_notes as vn

matplotlib.use("Agg")


def test_saved_bytes_sweep_is_exact():
    got = ac.saved_bytes_sweep([32, 48, 80], batch=2, heads=3, head_dim=8)
    assert got["eager"] == [eager_saved_bytes(2, 3, t) for t in (32, 48, 80)]
    assert got["flash"] == [flash_saved_bytes(2, 3, t, 8) for t in (32, 48, 80)]


def test_time_attention_records():
    with pinned_threads(1):  # tiny ops on busy OpenMP threads stall at every barrier
        pts = ac.time_attention([40, 64], tiles=[16, 32], heads=2, head_dim=8, repeat=2)
    # the control, one fixed matmul, is timed in the same rounds at every length (the old sweep had none)
    assert [(p.impl, p.seq_len, p.tile) for p in pts] == [
        (i, t, tile) for t in (40, 64) for i, tile in
        (("flash", 16), ("flash", 32), ("eager", 0), ("sdpa", 0), ("control", 0))]
    for p in pts:
        assert len(p.times_s) == 2 and p.median_s > 0
        if p.impl == "control":
            assert p.flops == 2 * ac.CONTROL_SIZE ** 3 and p.tiles == 0
            continue
        f = flash_flops(1, 2, p.seq_len, 8, False, p.tile or 64)
        want = f.forward + f.backward if p.impl == "flash" else f.eager_forward + f.eager_backward
        assert p.flops == want and p.tiles == (f.tiles if p.impl == "flash" else 0)


def _synthetic(rate, per_tile, eager_rate):
    pts = []
    for t in (256, 512, 1024):
        for tile in (16, 64, 256):
            f = flash_flops(1, 4, t, 32, False, tile)
            s = (f.forward + f.backward) / rate + 2 * f.tiles * per_tile
            pts.append(ac.AttentionTiming("flash", t, tile, (s,), f.forward + f.backward, f.tiles))
        f = flash_flops(1, 4, t, 32)
        e = f.eager_forward + f.eager_backward
        pts.append(ac.AttentionTiming("eager", t, 0, (e / eager_rate,), e, 0))
    return pts


def test_tile_model_recovers_its_terms():
    model = ac.TileCostModel.fit(_synthetic(2e10, 5e-5, 1e10))
    assert model.flop_rate == pytest.approx(2e10, rel=1e-6)
    assert model.per_tile_s == pytest.approx(5e-5, rel=1e-6)
    assert model.eager_rate == pytest.approx(1e10)
    f = flash_flops(1, 4, 2048, 32, False, 32)
    assert model.flash_s(2048, 32) == pytest.approx((f.forward + f.backward) / 2e10
                                                    + 2 * f.tiles * 5e-5)
    # eager slowing with T (scores out of cache): the rate of the longest length, not the
    # median over lengths (which would predict longer lengths at the shorter ones' speed)
    slowing = [ac.AttentionTiming("eager", p.seq_len, 0, (p.median_s * p.seq_len / 256,), p.flops, 0)
               if p.impl == "eager" else p for p in _synthetic(2e10, 5e-5, 1e10)]
    assert ac.TileCostModel.fit(slowing).eager_rate == pytest.approx(1e10 / 4)
    assert ac.TileCostModel.fit(slowing[::-1]).eager_rate == pytest.approx(1e10 / 4)   # not the last listed
    # no overhead at all: the per-tile term is 0, not negative
    assert ac.TileCostModel.fit(_synthetic(2e10, 0.0, 1e10)).per_tile_s == pytest.approx(0,
                                                                                         abs=1e-12)


def test_tile_owner_and_plots():
    grid = va.tile_owner(16, 2, 2, "zigzag")
    # zig-zag over P=2: chunks 0 and 3 on rank 0, chunks 1 and 2 on rank 1 (4 positions each)
    assert (grid[:2][np.tril_indices(2)] == 0).all() and (grid[6:, :8][grid[6:, :8] >= 0] == 0).all()
    assert (grid[2:6][np.tril(np.ones((4, 8), bool), 2)] == 1).all()
    assert (grid[np.triu_indices(8, 1)] == -1).all()  # above the diagonal: skipped
    assert (va.tile_owner(16, 2, 2, "contiguous")[4:][np.tril(np.ones((4, 8), bool), 4)] == 1).all()
    plt.close(va.plot_tiles(32, 2, 4))
    plt.close(va.plot_saved_bytes([32, 64], {"eager": [1, 4], "flash": [1, 2]}))
    pts = _synthetic(2e10, 5e-5, 1e10)
    fig = va.plot_tile_times(pts, ac.TileCostModel.fit(pts))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # each length, then the untiled marker (the old legend named only the colours and lines), then the model
    assert legend[3:] == ["eager, measured (right of the line)", "model: one fit over every length drawn"]
    # eager attention stands right of the tiles, one point per length: every median printed is drawn
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()][-1] == "eager"
    eager_x = 256 * 2
    assert sum(eager_x in ln.get_xdata() for ln in fig.axes[0].get_lines()) == 3
    plt.close(fig)
    # the length the model was not fitted on is drawn dashed: a prediction, not a fit
    lens = sorted({p.seq_len for p in pts})
    fig = va.plot_tile_times(pts, ac.TileCostModel.fit(pts), fitted_lens=lens[:-1])
    styles = [ln.get_linestyle() for ln in fig.axes[0].get_lines()
              if ln.get_linestyle() != "None" and len(ln.get_xdata())]   # the drawn lines, not the legend's
    assert styles.count("--") == 1 and styles.count("-") == len(lens) - 1
    assert "dashed: predicted" in fig.axes[0].get_title()
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "model, predicted (a length outside the fit)" in legend
    plt.close(fig)
    plt.close(va.plot_saved_bytes([32, 64], {"eager": [1, 4], "flash": [1, 2]}))
    with pytest.raises(ValueError, match="flash"):
        va.plot_tile_times([p for p in pts if p.impl == "eager"])


def test_tile_times_legend_names_the_one_fit_over_its_lengths():
    # the model is one joint fit over the shorter lengths: the old legend said "fitted on this length"
    pts = _synthetic(2e10, 5e-5, 1e10)
    fig = va.plot_tile_times(pts, ac.TileCostModel.fit(pts), fitted_lens=[256, 512])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "model: one fit over T = 256, 512" in legend
    assert not any("this length" in x for x in legend)
    assert "time" in fig.axes[0].get_ylabel()   # the quantity, not only the phase
    plt.close(fig)


def test_row_note_prints_the_control_in_one_unit_and_names_an_outlier_round():
    # the run behind this: one control round at T = 1024 took 5.6x its median, and the old note printed
    # "0.794 ms to 5.176 ms and 798 µs to 856 µs" without naming the round that made the intervals overlap
    pts = []
    for p in _row({"flash": 0.95, "eager": 1.0, "sdpa": 1.0}):
        if p.impl == "control" and p.seq_len in (1024, 1536):
            times = ((794e-6, 900e-6, 926e-6, 950e-6, 5176e-6) if p.seq_len == 1024
                     else (798e-6, 820e-6, 850e-6, 853e-6, 856e-6))
            p = ac.AttentionTiming("control", p.seq_len, 0, times, p.flops, 0)
        pts.append(p)
    note = va.row_note(pts, "flash", 64, miss=-0.06, band=0.22)
    assert "overlapping (794 µs to 5176 µs and 798 µs to 856 µs)" in note
    assert ("one control round at T = 1024, 5176 µs, took 5.6x that length's median and sets its interval's "
            "high end by itself") in note
    assert note.endswith("may be what keeps the intervals from lying apart.")
    # no round past CONTROL_OUTLIER x its median: nothing named
    steady = va.row_note(_row({"flash": 0.95, "eager": 1.0, "sdpa": 1.0}), "flash", 64, miss=-0.06, band=0.22)
    assert "control round" not in steady and steady.endswith("moving between them.")
    assert vn.CONTROL_OUTLIER == 2.0


def test_widget_extremes_and_bad_arguments():
    spec = va.attention_widget(ac.TileCostModel(2e10, 1e-4, 1e10),
                               _synthetic(2e10, 1e-4, 1e10), max_len=4096)
    for kw in spec.extremes():
        plt.close(spec.fn(**kw))
    fig = spec.fn(seq_len=4096, tile=64)
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "tiles of 64 (measured medians)" in labels and "eager (measured medians)" in labels
    plt.close(fig)
    with pytest.raises(TypeError, match="model"):
        va.attention_widget({"rate": 1})
    with pytest.raises(ValueError, match="points"):
        ac.TileCostModel.fit(_synthetic(2e10, 1e-4, 1e10)[:1])
    with pytest.raises(ValueError, match="impls"):
        ac.time_attention([16], impls=["cudnn"])
    with pytest.raises(ValueError, match="tile"):
        ac.time_attention([16], tiles=[12])
    with pytest.raises(ValueError, match="seq_lens"):
        ac.saved_bytes_sweep([])


def test_forward_model_and_the_ratio_between_its_two_ends():
    f = flash_flops(1, 4, 1024, 32, False, 64)
    model = ac.TileCostModel(2e10, 5e-5, 1e10)
    assert model.flash_forward_s(1024, 64) == pytest.approx(f.forward / 2e10 + f.tiles * 5e-5)
    ratio = model.flash_s(1024, 64) / model.flash_forward_s(1024, 64)
    assert 2 < ratio < 3.5
    assert ac.TileCostModel(2e10, 0.0, 1e10).flash_s(1024, 64) == pytest.approx(
        3.5 * ac.TileCostModel(2e10, 0.0, 1e10).flash_forward_s(1024, 64))    # FLOPs alone
    assert ac.TileCostModel(1e30, 5e-5, 1e10).flash_s(1024, 64) == pytest.approx(
        2 * ac.TileCostModel(1e30, 5e-5, 1e10).flash_forward_s(1024, 64))     # visits alone


def test_eager_model_is_not_called_a_lower_bound():
    """A rate that rises again past the fitted length puts the time below the model's: the
    docstring must not promise a bound."""
    doc = ac.TileCostModel.__doc__
    assert "lower bound" not in doc and "not a bound" in doc


def test_eager_bytes_per_score_by_where_softmax_runs():
    # fp32 P; bf16 with softmax in fp32 (CUDA autocast, HF's dtype=float32): fp32 P kept by
    # softmax's backward plus the bf16 copy P @ V keeps; softmax in bf16: one bf16 P, shared
    assert ac.eager_bytes_per_score() == {"fp32": 4.0, "bf16, softmax in fp32": 6.0,
                                          "bf16, softmax in bf16": 2.0}
    with pytest.raises(ValueError, match="seq_len must be an int >= 1"):
        ac.eager_bytes_per_score(seq_len=0)


def test_call_mix_counts_views_apart_from_kernels():
    import torch

    x = torch.ones(4, 4)

    def fn():
        x.view(16)      # view
        x.t()           # view
        y = x + 1       # kernel
        y.add_(1)       # kernel, in place: aliases its input but writes
    mix = ac.call_mix(fn)
    assert (mix.views, mix.kernels, mix.total) == (2, 2, 4)
    with pytest.raises(TypeError, match="fn must be a callable"):
        ac.call_mix(3)


def test_times_table_sets_every_median_and_the_last_change_per_flop():
    pts = _synthetic(2e10, 5e-5, 1e10)   # 256, 512, 1024; flash 16, 64, 256, then eager
    table = va.times_table(pts).splitlines()
    assert table[0] == "| T (forward + backward) | flash16 | flash64 | flash256 | eager |"
    assert len(table) == 2 + 3
    per_flop = va.times_table(pts, per_flop=True).splitlines()
    # eager runs at one rate: its time per FLOP does not move; flash16's tiles cost the same per FLOP too
    assert per_flop[-1].startswith("| 512 to 1024 |") and per_flop[-1].split(" | ")[-1] == "+0% |"
    assert per_flop[2].split(" | ")[-1] == "100 |"   # eager at 1e10 FLOP/s: 100 ps per FLOP
    with pytest.raises(ValueError, match="points must hold at least one"):
        va.times_table([])
    with pytest.raises(TypeError, match="per_flop must be a bool"):
        va.times_table(pts, per_flop=1)


def _timed(model, tile, seq_len, miss):
    f = flash_flops(1, 4, seq_len, 32, tile=tile)
    return ac.AttentionTiming("flash", seq_len, tile, (model.flash_s(seq_len, tile) * (1 + miss),),
                              f.forward + f.backward, f.tiles)


def test_tile_miss_note_names_a_miss_the_fitted_lengths_already_showed():
    model = ac.TileCostModel(2e10, 5e-5, 1e10)
    misses = {(16, 256): -0.13, (16, 512): -0.07, (64, 256): 0.31, (64, 512): 0.33,
              (64, 1024): 0.26, (16, 1024): -0.07, (64, 1536): 0.34, (16, 1536): 0.0}
    note = ac.tile_miss_note([_timed(model, t, n, m) for (t, n), m in misses.items()], model, 64)
    # the old text blamed a change from the last fitted length; the misses are the same at every length
    assert "+31%, +33%, +26% from the model at the fitted T = 256, 512, 1024, and +34% at T = 1536" \
        in note
    # the old text, "one the shorter lengths already showed, beyond their largest", said both at once
    assert "a bias the shorter lengths already showed, though not this large (+33%)" in note
    assert "The band, ±33%, is this tile's own largest miss where the model was fitted." in note
    misses[(64, 512)] = -0.05
    note = ac.tile_miss_note([_timed(model, t, n, m) for (t, n), m in misses.items()], model, 64)
    assert "not on the same side at every fitted length: the shorter lengths do not show it as a" in note
    assert "The band, ±31%, is this tile's own largest miss where the model was fitted." in note
    assert "bias" not in note   # its misses lie on both sides
    with pytest.raises(ValueError):
        ac.tile_miss_note([_timed(model, 16, 256, 0.0), _timed(model, 64, 512, 0.0)], model, 64)


def test_tile_miss_note_compares_the_fitted_lengths_among_themselves():
    model = ac.TileCostModel(2e10, 5e-5, 1e10)
    misses = {(16, 256): -0.14, (16, 512): 0.05, (16, 1024): 0.05, (16, 1536): 0.1,
              (64, 256): 0.40, (64, 512): 0.22, (64, 1024): 0.19, (64, 1536): -0.13}
    note = ac.tile_miss_note([_timed(model, t, n, m) for (t, n), m in misses.items()], model, 64)
    # the old note set each fitted miss against the longest length's sign and called +40%, +22%, +19%
    # "not on the same side at every fitted length"
    assert "not on the same side" not in note
    assert ("the fitted lengths all on one side, a steady bias (+19% to +40%) where the model was fitted, "
            "and the longest length's median on the other side") in note
    assert "Its fitted misses all on one side, that band measures the model's bias" in note


def test_same_call_note_speaks_only_where_the_two_timings_exclude_each_other():
    from perfkit.estimate import Estimate

    sweep = Estimate(0.113, 0.110, 0.117, 0.9, 5, "median of 5 samples")
    sec3 = Estimate(0.0738, 0.0700, 0.0772, 0.9, 15, "median of 15 samples")
    got = ac.same_call_note(sweep, sec3, "the call")
    assert got.startswith(" This sweep ran the call 1.53x slower than section 3 did, the two intervals apart")
    assert "faster" in ac.same_call_note(sec3, sweep, "the call")
    near = Estimate(0.077, 0.0765, 0.080, 0.9, 5, "median of 5 samples")
    assert ac.same_call_note(near, sec3, "the call") == ""
    assert ac.same_call_note(Estimate(0.113, 0.113, 0.113, None, 1, "exact"), sec3, "the call") == ""


def test_tile_miss_note_says_when_the_prediction_lies_outside_the_measured_interval():
    from perfkit.estimate import Estimate
    model = ac.TileCostModel(2e10, 5e-5, 1e10)
    misses = {(16, 256): -0.14, (16, 512): 0.29, (16, 1024): 0.05, (16, 1536): 0.1,
              (64, 256): 0.35, (64, 512): 0.22, (64, 1024): 0.19, (64, 1536): 0.24}
    pts = [_timed(model, t, n, m) for (t, n), m in misses.items()]
    pred = model.flash_s(1536, 64)
    # the old note left unsaid that the point lay outside the interval, the band alone holding it
    outside = Estimate(pred * 1.24, pred * 1.20, pred * 1.36, 0.93, 5, "median of 5 samples")
    got = ac.tile_miss_note(pts, model, 64, measured=outside)
    assert "itself lies below the measured 93% interval" in got
    # the old note said only the band's ±35% kept it from missed, though any band of ±20% or more did
    assert (f"{1 / 1.20:.2f}x its low end: a band of ±20% or wider keeps the outcome from missed, of ±36% or "
            "wider holds it; this one is ±35%.") in got
    # the band is tile 64's own miss, all of its misses on one side: a bias, which the note names
    assert "Its fitted misses all on one side, that band measures the model's bias for this tile" in got
    inside = Estimate(pred * 1.1, pred * 0.95, pred * 1.2, 0.93, 5, "median of 5 samples")
    assert "itself lies" not in ac.tile_miss_note(pts, model, 64, measured=inside)
    missed = Estimate(pred * 1.5, pred * 1.4, pred * 1.6, 0.93, 5, "median of 5 samples")
    # a miss past the band prints the same point miss first, with the band that would have held it
    assert ac.tile_miss_note(pts, model, 64, measured=missed).startswith(
        "The predicted 269 ms itself lies below the measured 93% interval (377 ms to 430 ms), 0.71x its low "
        "end: a band of ±40% or wider keeps the outcome from missed, of ±60% or wider holds it; this one is "
        "±35%. ")


def test_rate_note_names_whole_calls_faster_than_the_fitted_rate_inside_the_tiles():
    model = ac.TileCostModel(2e10, 5e-5, 1e10)
    pts = [_timed(model, 64, 512, 0.0), _timed(model, 256, 512, 0.0)]
    # the old sentence, "Every tiled call ran below", did not say which calls: only those passed in
    assert va.rate_note(pts, model).startswith(" Every tiled call (T = 512) ran below the fitted rate")
    assert va.rate_note(pts + [_timed(model, 64, 256, 0.0)], model, fitted=True).startswith(
        " Every fitted tiled call (T = 256 and 512) ran below")
    f = flash_flops(1, 4, 1536, 32, tile=256)
    flops = f.forward + f.backward
    fast = ac.AttentionTiming("flash", 1536, 256, (flops / 2.5e10,), flops, f.tiles)
    # the old output printed the fitted rate as the tiles' own though a whole call outran it
    got = va.rate_note([*pts, fast], model)
    assert "ran above the fitted rate parameter, 20 GFLOP/s: tile 256 at T = 1536 (25 GFLOP/s)." in got
    assert "it is a fitted parameter, not a rate the tiles run at" in got
    assert "ceiling" not in got   # the old text called the fitted rate a ceiling on every call
    # a call above the rate by less than the third digit prints with a digit more, never equal
    close = ac.AttentionTiming("flash", 1536, 256, (flops / 2.0004e10,), flops, f.tiles)
    said = va.rate_note([*pts, close], model)
    assert "rate parameter, 20 GFLOP/s: tile 256 at T = 1536 (20.004 GFLOP/s)." in said


def test_eager_line_label_says_where_its_rate_was_measured_and_how_far_later_points_lie():
    pts = [p for p in _synthetic(2e10, 1e-4, 1e10) if p.seq_len < 1024]
    f = flash_flops(1, 4, 1024, 32)
    e = f.eager_forward + f.eager_backward
    pts.append(ac.AttentionTiming("eager", 1024, 0, (2.1 * e / 1e10,), e, 0))
    model = ac.TileCostModel.fit([p for p in pts if p.seq_len < 1024])
    # the old label, "eager (model)", did not say the line carries one rate past where it was measured
    label = va.eager_line_label(model, pts)
    assert label.startswith("eager (model): 10 GFLOP/s, its rate at T = 512,\ncarried on; ")
    assert label.endswith("carried on; measured 2.1x the line at T = 1024")
    assert va.eager_line_label(model) == "eager (model)"
    # with the control timed at both lengths the label sets the machine's change beside eager's; the old
    # label read SDPA's time per FLOP, which moves with T by itself
    for n, k in ((512, 1.0), (1024, 1.3)):
        pts.append(ac.AttentionTiming("control", n, 0, (k * 0.003,), 2 * ac.CONTROL_SIZE ** 3, 0))
        g = flash_flops(1, 4, n, 32)
        pts.append(ac.AttentionTiming("sdpa", n, 0, (3.0 * n * (g.eager_forward + g.eager_backward) / 2e10,),
                                      g.eager_forward + g.eager_backward, 0))
    assert va.eager_line_label(model, pts).endswith(
        "measured 2.1x the line at T = 1024,\nwhere the control took 1.30x its time at T = 512")


def _row(changes, control=(1.0, 1.0), spread=0.01, lens=(256, 512, 1024, 1536)):
    """Timings of flash64, eager and SDPA whose time per FLOP is 1 ps, times ``changes[col]`` at
    the longest length, and the control: 5 rounds of 3 ms at the shorter lengths, times
    ``control`` at the two longest, each round within ``spread`` of its median."""
    out = []
    for impl, tile in (("flash", 64), ("eager", 0), ("sdpa", 0)):
        for n in lens:
            f = flash_flops(1, 4, n, 32, tile=64)
            flops = f.forward + f.backward if impl == "flash" else f.eager_forward + f.eager_backward
            k = changes[impl] if n == lens[-1] else 1.0 + 0.05 * (n == lens[1])
            out.append(ac.AttentionTiming(impl, n, tile, (k * flops * 1e-12,), flops, f.tiles if tile else 0))
    for n in lens:
        k = control[0] if n == lens[-2] else control[1] if n == lens[-1] else 1.0
        times = tuple(0.003 * k * (1 + spread * d) for d in (-2, -1, 0, 1, 2))
        out.append(ac.AttentionTiming("control", n, 0, times, 2 * ac.CONTROL_SIZE ** 3, 0))
    return out


def test_row_note_reads_the_machine_from_the_control_not_from_sdpa():
    # SDPA sped up 30 % per FLOP while the control stayed put: the old note read SDPA's -30 % as the row's
    # and called eager's +23 % "its own" or tile 64's -5 % "not its own"; SDPA is no load control
    steady = _row({"flash": 0.95, "eager": 1.23, "sdpa": 0.70})
    note = va.row_note(steady, "eager")
    assert note.startswith(" From T = 1024 to 1536 eager's time per FLOP changed +23%; the control, one "
                           "512 x 512 matmul timed in the same rounds at every length, +0%, its intervals at "
                           "the two lengths overlapping (")
    assert note.endswith("the control does not show the machine's speed moving between them.")
    assert "SDPA" not in note and "own" not in note
    tile = va.row_note(steady, "flash", 64, miss=-0.04, band=0.23)
    assert "would be" not in tile and "SDPA" not in tile   # no counterfactual miss from SDPA's change
    assert va.row_flag(steady) == ""
    assert va.row_note(steady, "control") == ""
    assert va.row_note([p for p in steady if p.impl != "control"], "eager") == ""


def test_row_note_lays_a_control_that_moved_to_the_machine():
    pts = _row({"flash": 1.29, "eager": 2.45, "sdpa": 1.31}, control=(1.0, 1.30))
    assert vn._per_flop_change(pts, "flash", 64) == pytest.approx(0.29)
    assert vn._per_flop_change(pts, "flash", 16) is None
    note = va.row_note(pts, "flash", 64, miss=0.61, band=0.40)
    assert ("; the control, one 512 x 512 matmul timed in the same rounds at every length, +30%, its "
            "intervals at the two lengths apart (") in note
    assert "so this run does not separate tile 64's own change from the machine's" in note
    assert note.endswith("Were the control's change every call's, the miss at T = 1536 would be +24%, within "
                         "the band (±40%).")
    assert va.row_note(pts, "eager").endswith("were the control's change every call's, eager's own would "
                                              "be +88%.")
    assert va.row_flag(pts) == (" (the control, a fixed matmul timed in the same rounds, changed +30% in "
                                "time from T = 1024 to 1536, its intervals apart: the machine's speed moved, "
                                "which the outcome does not mark)")
    # one round per length: no interval, so no claim either way
    few = [ac.AttentionTiming(p.impl, p.seq_len, 0, p.times_s[:1], p.flops, 0)
           if p.impl == "control" else p for p in pts]
    assert va.row_note(few, "eager").endswith("too few rounds for an interval, so this run cannot say "
                                              "whether the machine's speed moved.")
    assert va.row_flag(few) == ""
    with pytest.raises(ValueError):
        va.row_note(pts, "flash", 64, miss=0.61)
    with pytest.raises(ValueError):
        va.row_note([p for p in pts if p.seq_len == 256], "eager")


def test_rounds_note_flags_one_round_that_sets_the_interval_alone():
    from perfkit import stats

    # five rounds: the 93 % interval is [min, max], so one 11 s round set its high end
    times = [0.235, 0.238, 0.240, 0.237, 10.963]
    got = va.rounds_note(times, stats.median_interval(times), "at T = 1536")
    assert got.startswith("Its 5 rounds at T = 1536 ran from 235 ms to 11 s, the slowest 46.1x their median, "
                          "the next slowest 1.01x: one round, 45.7x the next slowest, sets the interval's "
                          "high end")
    calm = [0.235, 0.238, 0.240, 0.237, 0.3]
    calm_note = va.rounds_note(calm, stats.median_interval(calm), "at T = 1536")
    assert calm_note.endswith("the next slowest 1.01x.")
    assert va.rounds_note([0.2, 0.3], stats.median_interval([0.2, 0.3]), "here") == \
        "Its 2 rounds here ran from 200 ms to 300 ms."
    with pytest.raises(TypeError, match="measured"):
        va.rounds_note([1.0], 1.0, "x")
    with pytest.raises(ValueError, match=r"times_s\[0\]"):
        va.rounds_note([0.0], stats.median_interval([1.0]), "x")


def test_the_control_gets_a_table_column_and_stays_off_the_tile_figure():
    pts = _row({"flash": 1.0, "eager": 1.0, "sdpa": 1.0}, control=(1.0, 1.2))
    # the old table indexed IMPLS and had no column for the control
    table = va.times_table(pts, per_flop=True).splitlines()
    assert table[0].endswith("| eager | SDPA | control (matmul) |") and table[-1].endswith("| +20% |")
    fig = va.plot_tile_times(pts)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()][-2:] == ["eager", "SDPA"]
    plt.close(fig)


def test_saved_bytes_ticks_mark_the_lengths_counted():
    lens = [256, 512, 1024, 2048]
    fig = va.plot_saved_bytes(lens, {"eager": [16 * t * t for t in lens], "flash": [528 * t for t in lens]})
    # the old axis ticked log decades (4x10², 6x10², 10³), not the measured lengths
    assert list(fig.axes[0].get_xticks()) == lens
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["256", "512", "1024", "2048"]
    plt.close(fig)
