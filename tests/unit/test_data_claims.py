"""perfkit.data.claims: pin_memory's A/A loop and the worker sweep, on tiny sizes."""

import pytest

from perfkit.data import claims as dc
from perfkit.data.loader import LoaderConfig, LoaderRecord


def test_pin_timing_is_pageable_over_pinned_and_same_code_without_cuda():
    t = dc.time_pin_memory(batch=2, batches=2, repeat=1, device="cpu")  # balanced: 1 -> 2 rounds
    assert t.same_code and t.pageable.n == t.pinned.n == 2
    # paired rounds: the median of the rounds' ratios (not a ratio of medians)
    ratios = [a / b for a, b in zip(t.pageable.times_s, t.pinned.times_s)]
    assert t.speedup().value == pytest.approx(sorted(ratios)[0] / 2 + sorted(ratios)[1] / 2)
    with pytest.raises(ValueError, match="batches"):
        dc.time_pin_memory(batches=0)


def test_without_cuda_the_control_times_identical_code(monkeypatch):
    """Without CUDA the flag is only ignored, after a check and a warning each pass: the A/A control
    runs pin_memory=False in both loops (the planted version passed True to one, which is not the
    same code)."""
    flags = []
    real = dc.DataLoader

    def spy(*args, pin_memory=False, **kw):
        flags.append(pin_memory)
        return real(*args, pin_memory=pin_memory, **kw)

    monkeypatch.setattr(dc, "DataLoader", spy)
    assert dc.time_pin_memory(batch=2, batches=2, repeat=1, device="cpu").same_code
    assert flags and not any(flags)


def test_pin_by_order_splits_the_balanced_rounds_and_their_median_cancels_the_position():
    """An A/A loop whose second call of a round is 2 % slower: the even rounds (pageable first)
    read 1/1.02, the odd ones 1.02, and the balanced median over both 1 (planted: every round
    pageable first, the old order, reads 0.98 with an interval that excludes 1)."""
    from perfkit.timing import Measurement

    n = 10
    first, second = 1.0, 1.02
    pageable = Measurement(tuple(first if r % 2 == 0 else second for r in range(n)), 0)
    pinned = Measurement(tuple(second if r % 2 == 0 else first for r in range(n)), 0)
    t = dc.PinTiming(pageable, pinned, "cpu")
    by = t.by_order()
    assert by["pageable first"].value == pytest.approx(1 / 1.02)
    assert by["pinned first"].value == pytest.approx(1.02)
    assert t.speedup().low <= 1.0 <= t.speedup().high
    fixed = dc.PinTiming(Measurement((first,) * n, 0), Measurement((second,) * n, 0), "cpu")
    assert fixed.speedup().high < 1.0


def test_pass_rate_counts_the_last_pass_only():
    rec = LoaderRecord(LoaderConfig(4), wait_s=((5.0, 5.0), (0.1, 0.1)), compute_s=((0.1, 0.1), (0.3, 0.3)),
                       samples=16)
    # 2 batches of 4 in 0.8 s; the first pass's 10 s of start-up left out
    assert dc.pass_rate(rec, 4) == pytest.approx(8 / 0.8)


def test_sweep_compares_the_best_advised_with_the_best_other():
    s = dc.WorkerSweep({0: [100, 110], 2: [300, 280], 4: [330, 300], 8: [200, 220]},
                       {0: 100.0, 2: 300.0, 4: 320.0, 8: 320.0}, cost_s=1e-3, cores=2)
    assert s.best() == (4, 2)
    # the median of the paired rounds' ratios, 330/300 and 300/280 (not 315/290, medians' ratio)
    assert s.advised_over_rest().value == pytest.approx((330 / 300 + 300 / 280) / 2)
    assert s.predicted_advised_over_rest() == pytest.approx(320 / 300)
    with pytest.raises(ValueError, match="advised"):
        dc.WorkerSweep({0: [1.0], 2: [1.0]}, {0: 1.0, 2: 1.0}, 1e-3, 2).best()


def test_worker_sweep_runs_small():
    s = dc.worker_sweep([0, 4], batch=2, batches=4, cost_s=1e-4, compute_s=1e-4, rounds=1, cores=2)
    # balanced orders over a whole cycle: 1 round asked, 2 run (0 first, then 4 first)
    assert set(s.rates) == {0, 4} and all(len(r) == 2 and min(r) > 0 for r in s.rates.values())
    assert all(v > 0 for v in s.model.values()) and s.cost_s > 0
    with pytest.raises(ValueError, match="cost_s"):
        dc.worker_sweep([0], cost_s=0.0)


def test_worker_sweep_takes_the_counts_in_balanced_orders(monkeypatch):
    """Each count runs before each other one in half the rounds (planted: the counts in the
    given order every round, where 0 always runs first)."""
    seen = []

    def fake(ds, cfg, compute, epochs):
        seen.append(cfg.num_workers)
        return LoaderRecord(cfg, wait_s=((0.1,),), compute_s=((0.1,),), samples=2)

    monkeypatch.setattr(dc, "measure_loader", fake)
    s = dc.worker_sweep([0, 1, 4], batch=2, batches=1, cost_s=1e-5, compute_s=0.0, rounds=5, cores=2)
    rounds = [seen[i:i + 3] for i in range(0, len(seen), 3)]
    assert len(rounds) == 6 and all(len(v) == 6 for v in s.rates.values())  # 5 -> one cycle of 6
    for a, b in ((0, 1), (0, 4), (1, 4)):
        assert sum(r.index(a) < r.index(b) for r in rounds) == 3


def test_the_control_weighs_an_effect_against_how_far_identical_loops_read_apart():
    """Identical loops read 1/1.02 in every round: the control reaches 2 % from 1x, so a 1.3 %
    gap (a compiled step at 0.967x to 0.987x) is within it, a 5.8 % one (0.922x to 0.942x) is not."""
    from perfkit.stats import Estimate
    from perfkit.timing import Measurement

    aa = dc.PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.02,) * 10, 0), "cpu")
    assert aa.reach() == pytest.approx(1 - 1 / 1.02)
    assert aa.position_effect() == pytest.approx(0.0)
    compiled, gelu = Estimate(0.978, 0.967, 0.987, 0.9, 16, "m"), Estimate(0.935, 0.922, 0.942, 0.9, 16, "m")
    assert dc.interval_gap(compiled, 1.0) == pytest.approx(0.013)
    assert dc.interval_gap(gelu, 0.957) == pytest.approx(1 - 0.942 / 0.957)
    assert dc.interval_gap(Estimate(1.2, 1.1, 1.3, 0.9, 16, "m"), 1.0) == pytest.approx(0.1)
    assert dc.interval_gap(compiled, 0.98) == 0.0  # the interval holds it
    assert not aa.resolves(compiled, 1.0) and aa.resolves(gelu, 1.0)
    # with CUDA the loops differ: no control, so any gap counts
    gpu = dc.PinTiming(aa.pageable, aa.pinned, "cuda")
    assert gpu.reach() is None and gpu.resolves(compiled, 1.0)
    with pytest.raises(ValueError, match="reference"):
        dc.interval_gap(compiled, 0.0)
    with pytest.raises(TypeError, match="est"):
        dc.interval_gap(0.97, 1.0)


def test_the_control_widens_an_interval_by_its_reach():
    from perfkit.stats import Estimate
    from perfkit.timing import Measurement

    aa = dc.PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.02,) * 10, 0), "cpu")  # reach 1.96 %
    est = Estimate(0.992, 0.926, 1.010, 0.9, 16, "median of 16 paired ratios")
    wide = aa.widened(est)
    r = aa.reach()
    assert (wide.low, wide.value, wide.high) == pytest.approx((0.926 / (1 + r), 0.992, 1.010 * (1 + r)))
    far = dc.PinTiming(Measurement((1.0,) * 10, 0), Measurement((0.2,) * 10, 0), "cpu")  # reach 400 %
    assert far.widened(est).low > 0  # the planted low * (1 - reach) went negative
    assert "widened by the A/A control's 2.0%" in wide.method
    assert dc.PinTiming(aa.pageable, aa.pinned, "cuda").widened(est) is est  # no control: unchanged
    with pytest.raises(TypeError, match="est"):
        aa.widened(0.99)


def test_cost_text_says_which_way_the_models_sample_cost_is_off():
    # as run: 0 workers at 329 samples/s imply 2.79 ms a sample against the 3.74 ms the model used,
    # which lowers every modelled rate; the old sentence said the model's cost "covers the pass"
    rates, model = {0: [329.0], 1: [331.0], 2: [570.0], 4: [552.0], 8: [579.0]}, \
        {0: 251.0, 1: 267.0, 2: 531.0, 4: 528.0, 8: 521.0}
    said = dc.WorkerSweep(rates, model, 3.74e-3, 2).cost_text(8, 2e-3)
    assert "implies 2.79 ms a sample" in said and "is 34% above what a sample took in the pass" in said
    assert "by at most 25%" in said and "-19% to -4%" in said and "covers" not in said
    assert "not measured here" not in said  # -19% lies within what a 25% lower rate explains
    high = dc.WorkerSweep(rates, {**model, 2: 700.0}, 3.74e-3, 2).cost_text(8, 2e-3)
    assert "higher than that cost alone can make them: what else the workers cost" in high
    cheap = dc.WorkerSweep(rates, model, 2.0e-3, 2).cost_text(8, 2e-3)  # a pass costs a sample 39% more
    assert "in a pass a sample costs 39% more than alone" in cheap and "not measured here" not in cheap
    assert dc.WorkerSweep({2: [1.0], 4: [1.0]}, {2: 1.0, 4: 1.0}, 1e-3, 2).cost_text(8, 2e-3) == ""
    with pytest.raises(ValueError, match="batch"):
        dc.WorkerSweep(rates, model, 1e-3, 2).cost_text(0, 2e-3)
