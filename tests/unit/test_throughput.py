"""perfkit.compute.throughput: the step bench measures, caches and feeds the widget.

No test asserts on wall-clock speed (the machine is shared); timings are only checked for
being consistent with the work they report.
"""

import matplotlib.pyplot as plt
import pytest
import torch

from perfkit import compute, sizing
from perfkit.compute import throughput
from perfkit.estimate import Estimate
from perfkit.viz import compute as vc


@pytest.fixture(scope="module")
def bench(limits):
    return throughput.StepBench.gpt2(limits, seq_len=16, vocab_size=256, n_embd=32, n_layer=1,
                                     n_head=2, warmup=1, repeat=2, compile_backend="eager",
                                     device="cpu")


def test_step_bench_measures_and_caches(bench, limits):
    p = bench.measure("bf16", False, 4)
    assert bench.measure("bf16", False, 4) is p
    assert p.tokens_per_step == 64 and p.peak_flops == limits.peak_flops("bfloat16")
    assert p.tokens_per_s == pytest.approx(64 / p.step.median_s)
    assert p.flops_per_step == compute.gpt2_shape(bench.make_model(), 16).train_flops(4)
    assert p.mfu == pytest.approx(p.flops_per_step / p.step.median_s / 4e11)
    with pytest.raises(ValueError, match="batch"):
        bench.measure("fp32", False, 0)


def test_compute_widget_sweeps_its_controls(limits):
    # a small MLP bench through the generic constructor: dynamo traces it in about a second
    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))

    bench = throughput.StepBench(make_model, lambda b: torch.randn(b, 16),
                                 lambda m, x: m(x).square().mean(), lambda b: 6 * 2128 * b, 1,
                                 limits, warmup=1, repeat=2, compile_backend="eager", device="cpu")
    spec = vc.compute_widget(bench, batches=(2, 8))
    for kw in spec.extremes():
        fig = spec.fn(**kw)
        title = fig.axes[0].get_title()
        assert f"batch {kw['batch']}" in title and "of its measured ceiling" in title and "MFU" not in title
        plt.close(fig)
    assert {(p.precision, p.compiled) for p in bench.points} == {
        ("fp32", False), ("bf16", False), ("fp32", True)}
    assert len(bench.points) == 4  # fp32 eager at batch 2 and 8 (the default), bf16, compiled
    with pytest.raises(ValueError, match="batch"):
        vc.compute_widget(bench, batches=(2, 8), batch=3)


def test_an_emulated_dtype_and_pinned_threads_set_the_ceiling_of_the_mfu():
    from perfkit import hw

    # one thread is held against the one-thread ceiling notebook 00 measured, not a share of all cores'
    emulated = hw.MachineLimits("cpu", "no-bf16", {"float32": 1.54e11, "bfloat16": 1.78e9}, 2e10, threads=2,
                                one_thread_flops={"float32": 9e10, "bfloat16": 1e9})
    before = torch.get_num_threads()
    bench = throughput.StepBench.gpt2(emulated, seq_len=8, vocab_size=64, n_embd=16, n_layer=1, n_head=2,
                                      warmup=0, repeat=1, device="cpu", threads=1)
    seen = []
    real = bench.loss_fn
    bench.loss_fn = lambda m, x: seen.append(torch.get_num_threads()) or real(m, x)
    fp32, bf16 = bench.measure_all([("fp32", False, 2), ("bf16", False, 2)])
    assert set(seen) == {1} and torch.get_num_threads() == before  # pinned while timing, restored
    assert bf16.ceiling == "float32" and bf16.peak_flops == fp32.peak_flops == 9e10
    assert fp32.ceiling == "float32" and bf16.threads == fp32.threads == 1
    assert bf16.mfu == pytest.approx(bf16.flops_per_step / bf16.step.median_s / 9e10)
    with pytest.raises(ValueError, match="threads"):
        throughput.StepBench.gpt2(emulated, seq_len=8, device="cpu", threads=0)


def test_a_native_dtype_keeps_its_own_ceiling(limits):
    bench = throughput.StepBench.gpt2(limits, seq_len=8, vocab_size=64, n_embd=16, n_layer=1, n_head=2,
                                      warmup=0, repeat=1, device="cpu", threads=sizing.CORES)
    p = bench.measure("bf16", False, 2)
    assert p.ceiling == "bfloat16" and p.peak_flops == limits.peak_flops("bfloat16")


def test_cross_run_spread_names_the_batch_that_moved_most():
    sweep = {1: 0.0141, 8: 0.0664, 16: 0.1276, 32: 0.2914}  # s: one cell's medians
    curve = {1: 0.0167, 4: 0.0800, 8: 0.0703, 16: 0.1373, 32: 0.3190}  # s: another cell's, the same steps
    said = throughput.cross_run_spread(sweep, curve)
    # batch 1 moved 1.18x, more than batch 8's 1.06x: the largest is named, not only the one batch listed
    assert "across the 4 batches both the sweep and the batch curve timed" in said
    assert "most at batch 1: 14.1 ms against 16.7 ms, 1.18x" in said
    assert throughput.cross_run_spread(sweep, {64: 1.0}) == ""
    with pytest.raises(ValueError, match="second"):
        throughput.cross_run_spread(sweep, {1: 0.0})


def test_two_run_text_says_when_the_runs_disagree_about_the_floor():
    here = Estimate(0.961, 0.903, 0.978, 0.9, 11, "median of 11 paired ratios")
    times = {32: (0.3102, 0.2560), 16: (0.1315, 0.1237)}  # s: the sweep's and the curve's medians
    said = throughput.two_run_text(0.85, here, 0.9, (32, 16), times)
    assert "lies outside this 90% interval" in said
    assert "batch 32 310.2 ms there, 256.0 ms here (1.21x)" in said
    assert "moved 21% between the runs, more than the crude model's 10% margin" in said
    assert "lies below the crude model's floor (0.90x)" in said and "this curve's rounds only" in said
    inside = throughput.two_run_text(0.95, here, 0.9, (32, 16), times)
    assert "inside this 90% interval, and at or above the crude model's floor (0.90x), as this" in inside
    # inside the interval, but across the floor from the curve's point: said, and whose side the verdict takes
    near = Estimate(0.905, 0.880, 0.930, 0.9, 11, "median of 11 paired ratios")
    across = throughput.two_run_text(0.89, near, 0.9, (32, 16), times)
    assert "inside this 90% interval, but below the crude model's floor (0.90x)" in across
    assert "this curve's point lies at or above it" in across
    with pytest.raises(ValueError, match="swept"):
        throughput.two_run_text(0.0, here, 0.9, (32, 16), times)


def test_two_run_text_at_a_floor_of_one_names_no_margin_and_reads_the_interval_as_printed():
    here = Estimate(2.11, 1.44, 2.22, 0.93, 11, "median of 11 paired ratios")  # the gain over batch 1
    times = {32: (0.3223, 0.3145), 1: (0.0142, 0.0204)}
    said = throughput.two_run_text(1.41, here, 1.0, (32, 1), times, "the verdict's")
    assert "at 1.41x (a ratio of its medians)" in said
    assert "lies outside this 93% interval" in said and "batch 1 14.2 ms there, 20.4 ms here (0.70x)" in said
    assert "margin" not in said and "floor" not in said  # both ratios above 1x; a floor of 1x has no margin
    assert "inside this 93% interval" in throughput.two_run_text(1.4449, here, 1.0, (32, 1), times)  # 1.44x
    edge = Estimate(1.020, 1.016, 1.030, 0.93, 11, "median of 11 paired ratios")  # printed to 1.030x
    assert "at 1.034x (a ratio" in throughput.two_run_text(1.0344, edge, 0.9, (32, 16), {32: (0.3, 0.3)})


def test_sweep_beside_curve_is_empty_where_the_sweep_missed_a_batch():
    class Curve:
        batches = [1, 32]

        def rival(self):
            return 0

        def step_s(self, i):
            return Estimate({1: 0.0204, 16: 0.13, 32: 0.3145}[self.batches[i]], 0.0, 1.0, 0.9, 11, "m")

        def gain(self, i, j):
            return Estimate(2.11, 1.44, 2.22, 0.93, 11, "median of 11 paired ratios")

    class Point:
        def __init__(self, s, tps):
            self.step, self.tokens_per_s = type("M", (), {"median_s": s})(), tps

    sweep = {1: Point(0.0142, 9020.0), 32: Point(0.3223, 12700.0)}
    assert throughput.sweep_beside_curve({1: sweep[1]}, Curve(), 0, 1.0) == ""
    assert "batch 32 over 1, at 1.41x" in throughput.sweep_beside_curve(sweep, Curve(), 0, 1.0, "the verdict")
    assert "best batch" not in throughput.sweep_beside_curve(sweep, Curve(), 0, 1.0)
    Curve.batches = [1, 16, 32]  # the sweep's best other is 16, the curve's rival batch 1
    sweep[16] = Point(0.1302, 15700.0)
    said = throughput.sweep_beside_curve(sweep, Curve(), 0, 0.9)
    assert "own best batch other than 32 is 16, not 1 (there, 32 over 16 is 0.81x)" in said


def test_model_rate_note_flags_model_flops_above_a_ceiling_of_counted_flops():
    from perfkit.timing import Measurement
    # 0.5077 s a step, 3.66e9 model FLOPs: 7.21 GFLOP/s, above a 7.14 GFLOP/s ceiling the counted ones set
    p = throughput.ThroughputPoint("bf16", False, 8, Measurement((0.5077,) * 5, 0), 0.6, 512, 3_660_000_000,
                                   105e9)
    flat = 6 * 3584 * 512  # the 6N charge on 3,584 bias and layer-norm parameters, 512 tokens a step
    said = throughput.model_rate_note(p, 3_457_000_000, 7.14e9, "the bfloat16 ceiling", flat)
    # the gap, 5.9 points of the counted FLOPs, split by computation: 0.3 points are parameters in no
    # matmul, the rest attention's masked entries (the old words credited all of it to attention)
    assert said == (" Its model FLOP/s, 7.21 GFLOP/s, lie above the bfloat16 ceiling, 7.14 GFLOP/s: the "
                    "model's count (6N + 12·L·d·T a token) is 1.06x the FLOPs counted here: of its 5.9 "
                    "points, 0.3 are the 6N charge on the parameters that do no matmul (biases, layer "
                    "norms) and 5.6 attention's masked entries, which the formula's T x T square counts "
                    "and the causal kernel skips; so a ceiling of counted FLOPs is no roof for model FLOPs.")
    # equal as printed: not above
    assert throughput.model_rate_note(p, 3_457_000_000, 7.21e9, "c", flat) == ""
    with pytest.raises(ValueError, match="name must"):
        throughput.model_rate_note(p, 1.0, 1.0, "", flat)


def test_model_over_counted_splits_the_gap_by_computation():
    from perfkit.compute import flops
    # notebook 06's bf16 step: 23.4 MFLOP a sample of gap, 2.75 of them the 6N charge on biases and norms
    said = flops.model_over_counted(456.6e6, 433.2e6, 2.75e6)
    assert said.startswith("1.05x the FLOPs counted here: of its 5.4 points, 0.6 are the 6N charge")
    assert "and 4.8 attention's masked entries" in said
    # a counter that found more than the formula less the flat charge: no negative share for attention
    over = flops.model_over_counted(100.0, 99.0, 2.0)
    assert "more than the whole gap of 1.0" in over and "masked" not in over
    with pytest.raises(ValueError, match="flat_flops"):
        flops.model_over_counted(1.0, 1.0, -1.0)


def test_own_ceiling_note_says_before_the_share_that_this_notebook_set_the_ceiling():
    from perfkit import ceilings, hw, sizing
    sweep = [hw.MatmulPoint(128, "bfloat16", 1e-3, 3.2e9, 3.26e9, threads=1)]

    def limits(source):
        return hw.MachineLimits("cpu", "emulated", {"float32": 2e11, "bfloat16": 7.81e9}, 2e10,
                                matmul_points=sweep, threads=2,
                                one_thread_flops={"float32": 1e11, "bfloat16": 7.14e9},
                                sources={"bfloat16": source, "bfloat16, 1 thread": source})

    raised = limits("the bf16 step's matmuls replayed alone at batch 4" + sizing.AFTER_SWEEP)
    said = throughput.own_ceiling_note(raised, "bfloat16", 6.78e9, 1, mine="bf16 step", loaded=raised,
                                       at="batch 2")
    # the old sentence printed "95% of the bfloat16 ceiling", a share of a ceiling this same work set,
    # and called it "this notebook's own" though it was set before this notebook ran, at batch 4
    assert said.startswith("6.8% of the float32 ceiling on 1 thread, 100 GFLOP/s; no share of the bfloat16 "
                           "ceiling on 1 thread, 7.14 GFLOP/s, is printed: it was set by the bf16 step's")
    assert "95%" not in said and "this notebook's own" not in said
    assert "before this notebook ran" in said and "(at another size than this run's batch 2)" in said
    assert "against itself" in said
    same = throughput.own_ceiling_note(raised, "bfloat16", 6.78e9, 1, "bf16 step", raised, "batch 4")
    assert "another size" not in same
    fast = throughput.own_ceiling_note(raised, "bfloat16", 1.2e11, 1, "bf16 step")
    assert "1.20x the float32 ceiling" in fast
    other = limits("the groups=1 convolution" + sizing.AFTER_SWEEP)
    assert throughput.own_ceiling_note(other, "bfloat16", 6.78e9, 1, mine="bf16 step") == \
        ceilings.ceiling_note(other, "bfloat16", 6.78e9, 1)
    with pytest.raises(TypeError, match="mine"):
        throughput.own_ceiling_note(raised, "bfloat16", 6.78e9, 1, mine=None)


def test_model_share_is_never_a_share_above_100_percent_nor_of_a_self_set_ceiling():
    from perfkit import hw, sizing

    def limits(source):
        return hw.MachineLimits("cuda", "native", {"float32": 2e11, "bfloat16": 7.81e11}, 2e10, threads=2,
                                one_thread_flops={"float32": 1e11, "bfloat16": 7.14e11},
                                sources={"bfloat16": source, "bfloat16, 1 thread": source})

    sweep = limits("")
    said = throughput.model_share(sweep, "bfloat16", 0.41, 1)
    assert said == "model FLOP/s 41.0% of the bfloat16 ceiling on 1 thread"
    over = throughput.model_share(sweep, "bfloat16", 1.006, 1)  # the old text: "100.6% of the ... ceiling"
    assert over.startswith("model FLOP/s 1.01x the bfloat16 ceiling on 1 thread, above it")
    assert "%" not in over
    own = limits("the bf16 step's matmuls replayed alone at batch 4" + sizing.AFTER_SWEEP)
    assert "not held against" in throughput.model_share(own, "bfloat16", 0.95, 1, "bf16 step")
