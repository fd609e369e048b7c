"""perfkit.compute.claims_speed: notebook 09's timed speed claims, on tiny sizes (correctness only)."""

import pytest
import torch

from perfkit import stats
from perfkit.compute import claims_speed as cs
from perfkit.hw import MachineLimits
from perfkit.models import tiny_gpt2
from perfkit.timing import Measurement

LIMITS = MachineLimits("cpu", "test", {"float32": 1e9, "bfloat16": 2e9}, 1e9)


def m(*ts):
    return Measurement(tuple(ts), 0)


def test_speedup_estimate_is_baseline_over_candidate_over_paired_rounds():
    est = cs.speedup_estimate(m(2.0, 2.2, 2.4), m(1.0, 1.1, 1.2))
    assert isinstance(est, stats.Estimate) and est.value == pytest.approx(2.0) and est.n == 3
    assert est.low <= est.value <= est.high
    with pytest.raises(ValueError, match="same number of rounds"):
        cs.speedup_estimate(m(1.0, 2.0), m(1.0))


def test_activation_timing_directions():
    t = cs.ActivationTiming(relu_op=m(1.0, 1.0), gelu_op=m(3.0, 3.0), calls=10,
                            relu_step=m(4.0, 4.0), gelu_step=m(5.0, 5.0))
    assert t.op_cost().value == pytest.approx(3.0)       # GELU op over ReLU op
    assert t.step_speedup().value == pytest.approx(0.8)  # ReLU step over GELU step: GELU slower
    assert t.extra_op_s == pytest.approx(0.2)
    assert t.extra_backward_s is None  # the backward ops not timed
    t = cs.ActivationTiming(relu_op=m(1.0, 1.0), gelu_op=m(3.0, 3.0), calls=10, relu_step=m(4.0, 4.0),
                            gelu_step=m(5.0, 5.0), relu_backward=m(2.0, 2.0), gelu_backward=m(2.5, 2.5))
    assert t.extra_backward_s == pytest.approx(0.05)  # GELU's backward minus ReLU's, per call


def test_time_activations_runs_and_pairs_rounds():
    t = cs.time_activations(rows=8, width=16, repeat=3, op_repeat=2, target_s=0.001)
    # balanced orders over whole cycles: the two steps 3 -> 4 rounds, the four ops 2 -> 4
    assert t.relu_step.n == t.gelu_step.n == 4 and t.calls >= 1
    assert t.relu_backward.n == t.gelu_backward.n == 4 and t.extra_backward_s is not None
    # the median of the paired rounds' ratios (stats.median_ratio), round by round
    assert t.step_speedup().value == pytest.approx(stats.median(stats.paired_ratios(t.relu_step.times_s,
                                                                                    t.gelu_step.times_s)))
    with pytest.raises(ValueError, match="width"):
        cs.time_activations(width=0)


def test_grouped_conv_counts_flops_exactly_and_bounds_by_hand():
    c = cs.time_grouped_conv(channels=8, size=4, batch=2, groups=4, repeat=2, device="cpu")
    assert c.flops[1] == 4 * c.flops[4]  # FLOPs fall by the group count exactly
    assert c.flops[1] == 2 * 2 * 8 * 8 * 9 * 16  # 2 * batch * C_out * C_in * 9 * H * W
    t = c.terms(LIMITS)
    io = 2 * 2 * 8 * 16 * 4
    assert t[1] == pytest.approx((c.flops[1] / 1e9, (io + 9 * 64 * 4) / 1e9))
    # the grouped call's roofline time bounds its own time; the dense call's measured time is
    # the other end (the two roofline times' ratio would bound nothing)
    assert c.roofline_bound(LIMITS) == pytest.approx(c.dense.median_s / max(t[4]))
    assert c.threads == torch.get_num_threads()
    assert c.speedup().value == pytest.approx(stats.median(stats.paired_ratios(c.dense.times_s,
                                                                               c.grouped.times_s)))
    with pytest.raises(ValueError, match="multiple of groups"):
        cs.time_grouped_conv(channels=6, groups=4)


def test_one_thread_runs_use_the_one_thread_ceiling():
    # all cores (2 threads) reach 1e9 FLOP/s, one thread 0.6e9: a 1-thread run's share and
    # roofline use 0.6e9, an unstated thread count the all-cores 1e9
    lim = MachineLimits("cpu", "t", {"float32": 1e9}, 1e9, threads=2, one_thread_flops={"float32": 6e8})
    flops = {1: int(6e6), 4: int(1.5e6)}
    one = cs.ConvTiming(8, 4, 2, 4, flops, m(0.02, 0.02), m(0.01, 0.01), threads=1)
    every = cs.ConvTiming(8, 4, 2, 4, flops, m(0.02, 0.02), m(0.01, 0.01))
    assert one.peak(lim) == 6e8 and every.peak(lim) == 1e9
    assert one.terms(lim)[4][0] == pytest.approx(1.5e6 / 6e8)
    assert one.roofline_bound(lim) == pytest.approx(0.02 / (1.5e6 / 6e8))
    from perfkit.compute.compiling import CompileRecord

    rec = CompileRecord(1.0, m(0.01, 0.01), m(0.005, 0.005))
    assert cs.CompileTiming(rec, int(3e6), True, threads=1).matmul_share(lim)[1] == pytest.approx(0.5)
    assert cs.CompileTiming(rec, int(3e6), True).matmul_share(lim)[1] == pytest.approx(0.3)


def test_compile_timing_share_is_capped_and_raw_kept():
    from perfkit.compute.compiling import CompileRecord

    rec = CompileRecord(1.0, m(0.01, 0.01), m(0.005, 0.005))
    ct = cs.CompileTiming(rec, matmul_flops=int(2e7), train=True)
    assert ct.speedup().value == pytest.approx(2.0)
    assert ct.matmul_share(LIMITS) == (1.0, pytest.approx(2.0))  # 0.02 s of matmuls in a 0.01 s call
    ct2 = cs.CompileTiming(ct.record, matmul_flops=int(2e6), train=True)
    assert ct2.matmul_share(LIMITS) == (pytest.approx(0.2), pytest.approx(0.2))


def test_channels_last_relays_nothing_in_a_transformer():
    ids = torch.randint(0, 1024, (1, 8))
    c = cs.channels_last_check(lambda: tiny_gpt2(block_size=8, n_embd=16, n_layer=1, n_head=2), ids, repeat=2)
    assert c.params_4d_5d == 0 and c.relaid == 0
    assert c.speedup().n == 2 and c.cnn_speedup().n == 2
    with pytest.raises(TypeError, match="ids"):
        cs.channels_last_check(lambda: torch.nn.Linear(2, 2), [1, 2])


def test_thread_timing_best_other_and_direction():
    tt = cs.ThreadTiming({1: m(3.0, 3.0), 2: m(1.0, 1.0), 4: m(2.0, 2.0)})
    assert tt.best_other(2) == 4 and tt.best_other(4) == 2
    assert tt.speedup(2, 4).value == pytest.approx(2.0)  # other's time over the advised count's


def test_time_thread_counts_restores_the_setting():
    before = torch.get_num_threads()
    tt = cs.time_thread_counts(cs.mlp_step(torch.nn.ReLU(), rows=4, width=8, features=4), [2, 1, 2], repeat=2)
    assert sorted(tt.runs) == [1, 2] and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="counts entries"):
        cs.time_thread_counts(lambda: None, [0])


def test_time_compile_counts_the_matmuls_that_ran_and_times_in_balanced_orders(monkeypatch):
    """Training: 5 matmuls of 2 * rows * features * width FLOPs, not 6 (planted: the old count,
    3 per Linear, assumed a gradient for the input, which needs none); forward only: 2."""
    from perfkit.compute.compiling import CompileRecord

    seen = {}

    def fake_measure(eager, compiled, warmup, repeat, balanced=False):
        seen["balanced"] = balanced
        return CompileRecord(1.0, m(1.0), m(1.0))

    monkeypatch.setattr(cs, "measure_compile", fake_measure)
    monkeypatch.setattr(torch, "compile", lambda model: model)
    one = 2 * 16 * 8 * 32  # 2 * rows * features * width
    assert cs.time_compile(rows=16, width=32, features=8, train=True).matmul_flops == 5 * one
    assert cs.time_compile(rows=16, width=32, features=8, train=False).matmul_flops == 2 * one
    assert seen["balanced"] is True


def test_time_compile_checks_sizes_before_compiling():
    with pytest.raises(ValueError, match="width"):
        cs.time_compile(width=0)


def test_break_even_is_printed_only_for_a_speedup_whose_interval_lies_above_1x():
    from perfkit.compute.compiling import CompileRecord

    # as run: 1.01x with an interval of 0.95x to 1.06x, and "break-even after 73,120 calls" printed
    eager = [0.0101, 0.0095, 0.0106, 0.0100, 0.0102, 0.0099, 0.0104, 0.0097]
    holds = cs.CompileTiming(CompileRecord(8.0, m(*eager), m(*[0.01] * 8)), 1, True).break_even_text()
    assert holds.startswith("no break-even printed: the speedup's") and "holds 1x" in holds
    assert "may never pay off" in holds and "calls" not in holds
    faster = cs.CompileTiming(CompileRecord(8.0, m(*[2 * t for t in eager]), m(*[0.01] * 8)), 1, True)
    calls = 8.0 / (faster.record.eager.median_s - 0.01)
    assert faster.break_even_text() == f"break-even after {calls:,.0f} calls (the medians' difference)"
    slower = cs.CompileTiming(CompileRecord(8.0, m(*[t / 2 for t in eager]), m(*[0.01] * 8)), 1, True)
    assert slower.break_even_text().endswith("its interval below 1x")
    few = cs.CompileTiming(CompileRecord(8.0, m(0.02, 0.02), m(0.01, 0.01)), 1, True).break_even_text()
    assert few == ("break-even after 800 calls (the medians' difference): a point, the rounds too few for "
                   "an interval")
