"""perfkit.compute.batch_curve: tokens/s against batch from the roofline, page faults and a fixed cost."""

import dataclasses
import math

import pytest
import torch

from perfkit.compute.batch_curve import BatchCurve, measure_batch_curve, page_fault_s
from perfkit.compute.intensity import OpRecord, roofline_s
from perfkit.hw import MachineLimits

MiB = 2**20
# half the last-level cache is 16 MiB; the cache moves bytes 4x faster than DRAM
LIMITS = MachineLimits(device="cpu", name="test", matmul_flops={"float32": 1e11}, copy_bytes_per_s=1e10,
                       cache_bytes_per_s=4e10, llc_bytes=32 * MiB)
BATCHES = (4, 8, 16, 32)
SEQ = 100


def ops(b: int, per_sample: int) -> list[OpRecord]:
    """A step at batch b: per sample, a matmul of 1 MFLOP and an elementwise op of ``per_sample`` bytes."""
    return [OpRecord("mm.default", b * 10**6, 1024), OpRecord("add.Tensor", 0, b * per_sample)]


def curve(roofs, faults=(0, 0, 0, 0), fixed=0.0, fault_s=0.0, eta=0.5, fit=1, noise=(1.0, 1.0, 1.0),
          dram=None):
    """A curve whose rounds follow the model exactly: T = fixed + R / eta + n * fault_s, times ``noise``;
    ``dram``: the no-cache end of R (default: the same as ``roofs``)."""
    times = tuple(tuple((fixed + r / eta + n * fault_s) * k for k in noise) for r, n in zip(roofs, faults))
    return BatchCurve(BATCHES, SEQ, tuple(roofs), tuple(dram or roofs), (0,) * 4, times,
                      tuple((n,) * len(noise) for n in faults), tuple(fixed * k for k in noise), 0.0,
                      (fault_s,) * len(noise), fit)


def roofs(per_sample: int, cache: bool = True) -> list[float]:
    return [roofline_s(ops(b, per_sample), LIMITS, cache=cache) for b in BATCHES]


def test_ops_that_never_leave_the_cache_give_a_flat_curve():
    c = curve(roofs(per_sample=MiB // 4))  # 8 MiB at batch 32: in the cache throughout
    value, low, high = c.predicted_ratio()
    assert value == pytest.approx(1.0) and low == pytest.approx(1.0) and high == pytest.approx(1.0)
    rates = [c.tokens(i) / t for i, t in enumerate(c.predicted_s())]
    assert max(rates) / min(rates) == pytest.approx(1.0)


def test_an_op_crossing_the_cache_at_the_largest_batch_gives_the_drop():
    r = roofs(per_sample=MiB)  # 16 MiB at batch 16 (fits half the cache), 32 MiB at batch 32 (DRAM)
    c = curve(r, dram=roofs(per_sample=MiB, cache=False))
    # by hand: per sample 1e6 / 1e11 = 10 us of matmul plus 1 MiB at 4e10 (cache) or 1e10 (DRAM)
    in_cache, in_dram = 1e-5 + MiB / 4e10, 1e-5 + MiB / 1e10
    assert r[2] == pytest.approx(16 * in_cache, rel=1e-3) and r[3] == pytest.approx(32 * in_dram, rel=1e-3)
    value, low, high = c.predicted_ratio()
    assert value == pytest.approx(in_cache / in_dram, rel=1e-3) and low == pytest.approx(value)
    assert value < 0.9
    # the no-cache end: every op at DRAM's bandwidth at every batch, a flat curve
    assert high == pytest.approx(1.0)
    flat = [c.tokens(i) / t for i, t in enumerate(c.predicted_s(cache=False))]
    assert max(flat) / min(flat) == pytest.approx(1.0)
    assert c.eta == pytest.approx(0.5)


def test_page_faults_at_the_largest_batch_give_the_drop_the_cache_does_not():
    r = roofs(per_sample=MiB // 4)
    c = curve(r, faults=(0, 0, 0, 20_000), fault_s=2e-6)  # 40 ms more at batch 32
    step32 = 2 * r[3] + 0.04
    assert c.predicted_s()[3] == pytest.approx(step32)
    assert c.predicted_ratio()[0] == pytest.approx(2 * r[3] / step32)
    ignoring = curve(r, faults=(0, 0, 0, 20_000), fault_s=0.0)
    assert ignoring.predicted_ratio()[0] == pytest.approx(1.0)
    assert c.predicted_ratio(faults=False) == pytest.approx((1.0, 1.0, 1.0))
    assert "20,000 page faults" in c.explain()["below"]


def test_eta_is_fitted_on_the_fit_batch_alone_and_the_fixed_cost_is_taken_off():
    r = roofs(per_sample=MiB // 4)
    c = curve(r, fixed=0.01, eta=0.25, fit=2)
    assert c.eta == pytest.approx(0.25)
    pred = c.predicted_s()
    assert pred == pytest.approx([0.01 + x / 0.25 for x in r])
    # a fixed cost spreads over more tokens at larger batches: tokens/s rises to the largest
    rate = [c.tokens(i) / t for i, t in enumerate(pred)]
    assert rate[0] < rate[1] < rate[2] < rate[3]
    assert c.predicted_ratio()[0] == pytest.approx(rate[3] / rate[2])  # over the best other, never itself
    assert c.predicted_ratio(0)[0] == pytest.approx(rate[0] / rate[3])
    # the measured fit batch alone moves eta: a slower fit batch, a smaller eta
    times = list(c.times_s)
    times[2] = tuple(t * 2 for t in times[2])
    slower = BatchCurve(c.batches, SEQ, c.roof_s, c.roof_dram_s, c.over_cache, tuple(times), c.faults,
                        c.fixed_s, 0.0, c.fault_s, 2)
    assert slower.eta < c.eta


def test_intervals_widen_the_predicted_range_and_the_gain_is_paired():
    r = roofs(per_sample=MiB)
    c = curve(r, fixed=0.005, noise=(0.9, 1.0, 1.3, 0.95, 1.1))   # 5 rounds: the least with an interval
    value, low, high = c.predicted_ratio()
    assert low < value < high
    # every batch slowed alike in each round: the paired gain has no spread
    g = c.gain(3, 2)
    assert g.value == pytest.approx(32 / c.times_s[3][0] / (16 / c.times_s[2][0]))
    assert g.low == pytest.approx(g.value) and g.high == pytest.approx(g.value)
    assert c.rival() in (0, 1, 2) and c.rival(0) != 0 and c.tokens(3) == 3200


def test_lines_and_explanations_name_the_measured_terms():
    c = curve(roofs(per_sample=MiB), faults=(0, 0, 0, 1000), fault_s=1e-6)
    lines = c.lines()
    assert len(lines) == 4 and "eta fitted here" in lines[1] and "1,000 page faults/step" in lines[3]
    text = c.explain()
    assert set(text) == {"held", "above", "below"}
    assert "roofline per token is +" in text["held"] and "ms predicted" in text["above"]


@pytest.mark.parametrize("kw, match", [
    (dict(batches=(8, 4, 16, 32)), "ascending"),
    (dict(batches=(4,)), "batches"),
    (dict(fit=4), "fit"),
    (dict(roof_s=(1.0, 1.0, 1.0)), "roof_s"),
    (dict(roof_s=(1.0, 0.0, 1.0, 1.0)), "roof_s"),
    (dict(roof_dram_s=(1.0, 1.0)), "roof_dram_s"),
    (dict(fault_s=(-1e-6,)), "fault_s"),
    (dict(faults=((0, 0),) * 4), "faults"),
])
def test_bad_curves_are_refused(kw, match):
    base = dict(batches=BATCHES, seq_len=SEQ, roof_s=(1.0,) * 4, roof_dram_s=(1.0,) * 4, over_cache=(0,) * 4,
                times_s=((1.0,),) * 4, faults=((0,),) * 4, fixed_s=(0.1,), roof_fixed_s=0.0, fault_s=(1e-6,),
                fit=1)
    with pytest.raises((TypeError, ValueError), match=match):
        BatchCurve(**{**base, **kw})


def make_mlp_step(b: int, t: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(b, t, 16)

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return step


def test_batch_curve_counts_and_times_a_real_step():
    c = measure_batch_curve(make_mlp_step, [4, 1, 2], 8, LIMITS, fit=2, rounds=2, warmup=1, threads=1)
    assert c.batches == (1, 2, 4) and c.fit == 1 and c.seq_len == 8
    assert c.roof_s[0] < c.roof_s[1] < c.roof_s[2] and c.over_cache == (0, 0, 0)
    assert all(d > r for d, r in zip(c.roof_dram_s, c.roof_s))  # the cache is faster than DRAM
    assert all(len(t) == 2 and min(t) > 0 for t in c.times_s) and len(c.fixed_s) == 2
    assert all(f >= 0 for row in c.faults for f in row) and 0 < c.roof_fixed_s < c.roof_s[0]
    assert math.isfinite(c.predicted_ratio()[0])
    # one of two threads: the roofline holds the matmuls to the one-thread ceiling, not all cores'
    slow_one = dataclasses.replace(LIMITS, threads=2, one_thread_flops={"float32": 1e8})
    one = measure_batch_curve(make_mlp_step, [1, 2], 8, slow_one, fit=2, rounds=2, warmup=0, threads=1)
    every = measure_batch_curve(make_mlp_step, [1, 2], 8, slow_one, fit=2, rounds=2, warmup=0)
    assert one.roof_s[1] > 2 * every.roof_s[1] and one.roof_fixed_s > every.roof_fixed_s
    # a fault's cost measured before (notebook 06's new tensors): used as given, any number of them
    given = measure_batch_curve(make_mlp_step, [1, 2], 8, LIMITS, fit=2, rounds=2, warmup=0,
                                fault_s=[1e-6, 3e-6, 2e-6])
    assert given.fault_s == (1e-6, 3e-6, 2e-6) and given.fault_cost.value == pytest.approx(2e-6)


@pytest.mark.parametrize("kw, err", [
    (dict(make_step=None), TypeError), (dict(fit=3), ValueError), (dict(limits="x"), TypeError),
    (dict(seq_len=1), ValueError), (dict(rounds=1), ValueError), (dict(dtype="float8"), ValueError),
    (dict(batches=[]), ValueError), (dict(fault_s=[]), ValueError), (dict(fault_s=[-1e-6]), ValueError),
])
def test_batch_curve_refuses_bad_arguments(kw, err):
    args = dict(make_step=make_mlp_step, batches=[1, 2], seq_len=8, limits=LIMITS, fit=1)
    with pytest.raises(err):
        measure_batch_curve(**{**args, **kw})


def test_page_fault_s_is_a_small_positive_time_and_refuses_less_than_a_page():
    assert 0 <= page_fault_s(4 * MiB) < 1e-3
    with pytest.raises(ValueError, match="nbytes"):
        page_fault_s(100)


def test_the_predicted_ratio_is_against_the_batch_the_verdict_holds_it_to():
    """The verdict holds the largest batch against the other batch that measured the most
    tokens/s (rival); the predicted ratio must use that batch too. Planted: the best other
    batch by the model (batch 8 below), which labelled one ratio with another batch."""
    r = roofs(per_sample=MiB // 4)
    c = curve(r, faults=(0, 0, 400, 0), fault_s=1e-6, fit=1)  # batch 16's faults: slow by the model
    times = [list(t) for t in c.times_s]
    times[2] = [t * 0.1 for t in times[2]]  # batch 16 measured far faster than the model says
    assert max(range(3), key=lambda j: c.tokens(j) / c.predicted_s()[j]) != 2  # the model's best other
    measured = BatchCurve(c.batches, SEQ, c.roof_s, c.roof_dram_s, c.over_cache, tuple(map(tuple, times)),
                          c.faults, c.fixed_s, c.roof_fixed_s, c.fault_s, c.fit)
    j = measured.rival()
    assert measured.batches[j] == 16
    pred = measured.predicted_s()
    want = (measured.tokens(-1) / pred[-1]) / (measured.tokens(j) / pred[j])
    assert measured.predicted_ratio()[0] == pytest.approx(want)
