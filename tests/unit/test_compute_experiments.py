"""perfkit.compute.experiments and perfkit.compute.fusion: notebook 06's steps and records (and
the text tables perfkit.viz.compute makes of them)."""

from types import SimpleNamespace

import pytest
import torch

from perfkit.compute import compiling, fusion, kernels
from perfkit.compute import experiments as ex
from perfkit.compute.flops import Speedup, counted_flops
from perfkit.compute.kernels import ShapePoint
from perfkit.timing import Measurement
from perfkit.viz import compute as vc

GPT = dict(n_embd=32, n_layer=1, n_head=2)


def meas(times):
    return Measurement(tuple(times), 0)


def test_gpt_step_trains_the_same_seeded_model_each_time():
    ids = torch.randint(0, 64, (2, 16))
    a, b = ex.gpt_step(GPT, ids), ex.gpt_step(GPT, ids)
    la, lb = a(), b()
    assert torch.equal(la, lb)  # same seed, same weights, same batch
    assert a() < la  # a step updates the weights: the second loss on the same batch is lower
    with pytest.raises(ValueError, match="precision"):
        ex.gpt_step(GPT, ids, "fp8")
    with pytest.raises(TypeError, match="ids"):
        ex.gpt_step(GPT, ids.float())


def test_precision_curves_restart_from_the_same_weights():
    torch.manual_seed(0)
    model, batches = torch.nn.Linear(4, 1), [torch.randn(8, 4) for _ in range(3)]
    loss = lambda m, b: m(b).square().mean()  # noqa: E731
    first = loss(model, batches[0]).item()
    curves = ex.precision_curves(model, loss, batches, ["fp32", "bf16"], lr=0.1)
    assert curves["fp32"][0] == pytest.approx(first)
    assert curves["bf16"][0] == pytest.approx(first, rel=0.02)  # restored, not after fp32's steps
    assert loss(model, batches[0]).item() < 0.9 * first  # and each run trained it


def test_largest_rise_compares_the_same_steps_in_both_runs():
    same = ex.largest_rise({"fp32": [3.0, 2.5, 2.9, 2.4], "bf16": [3.0, 2.5, 2.95, 2.4]})
    assert "fp32 loss: steps 2 -> 3 (2.500 -> 2.900)" in same and "both rose there" in same
    assert "back at 2.400" in same  # recovered below the step before the rise
    # both rose at fp32's largest rise; bf16's own largest is a spike in bf16 alone, gone at the next step:
    # named as such, never as rounding having moved where the loss rose (the old text's claim)
    spike = ex.largest_rise({"fp32": [6.0, 5.9, 5.8, 5.8, 6.4, 6.0],
                             "bf16": [6.0, 5.9, 6.9, 5.8, 6.45, 6.0]})
    assert "fp32 loss: steps 4 -> 5 (5.800 -> 6.400)" in spike
    assert "bf16 at the same steps: 5.800 -> 6.450" in spike
    assert "both rose there" in spike and "changed where" not in spike
    assert "bf16's own largest rise is at steps 2 -> 3 (5.900 -> 6.900), where fp32 moved -0.100" in spike
    assert "a rise in bf16 alone" in spike and "one step's deviation" in spike
    # fp32 rose too at bf16's own largest rise, less than half as much: both rose, not bf16 alone
    part = ex.largest_rise({"fp32": [6.0, 5.9, 6.2, 5.8, 6.4, 6.0],
                            "bf16": [6.0, 5.9, 6.9, 5.8, 6.45, 6.0]})
    assert "where fp32 moved +0.300: both rose, bf16 3.3x as much, a step where bf16's loss left" in part
    assert "bf16 alone" not in part
    other = ex.largest_rise({"fp32": [3.0, 2.5, 2.9, 2.8], "bf16": [3.0, 3.2, 2.9, 2.8]})
    assert "bf16 rose less than half as much there" in other and "back at" not in other
    assert ex.largest_rise({"fp32": [3, 2, 1], "bf16": [3, 2, 1]}) == "the fp32 loss never rose"
    with pytest.raises(ValueError, match="two steps"):
        ex.largest_rise({"fp32": [1.0], "bf16": [1.0]})


def test_hidden_side_prints_the_digits_that_show_a_figure_s_side_of_its_edge():
    # 0.89973 printed "0.900x" beside a bound of 0.9x while the verdict said it lay below it
    said = ex.hidden_side(0.89973, 0.9, "x")
    assert "at 4 it is 0.8997x, below it" in said and "equals the edge 0.9x" in said
    assert ex.hidden_side(0.887, 0.9, "x") == "" and ex.hidden_side(0.9, 0.9) == ""
    assert "above it" in ex.hidden_side(1.00002, 1.0)
    with pytest.raises(ValueError, match="edge"):
        ex.hidden_side(1.0, float("nan"))


def test_ratio_text_prints_the_judged_estimate():
    sp = Speedup(meas([0.010, 0.011, 0.012]), meas([0.005, 0.0055, 0.006]))
    text = ex.ratio_text(sp)
    assert text.startswith(sp.estimate.point("x")) and "medians 11.0 -> 5.5 ms)" in text
    # pairs say slower (0.9x each), medians say faster: both named, the figure's statistic said
    split = Speedup(meas([0.010, 0.020, 0.100, 0.110, 0.120]), meas([0.011, 0.022, 0.050, 0.050, 0.132]))
    assert split.estimate.value < 1 < split.baseline.median_s / split.candidate.median_s
    said = ex.ratio_text(split)
    assert "whose ratio, 0.901x" not in said and "lies above 1x where the figure lies below it" in said
    assert f"{split.baseline.median_s / split.candidate.median_s:.2f}x" in said
    # medians a hair apart: their ratio printed with the digits that show its side, never "1x" or "1.00x"
    hair = Speedup(meas([0.0650, 0.06503, 0.0700, 0.0600, 0.0601]),
                   meas([0.0651, 0.06498, 0.0690, 0.0610, 0.0602]))
    assert hair.estimate.value < 1 < hair.baseline.median_s / hair.candidate.median_s < 1.001
    said = ex.ratio_text(hair)
    assert "whose ratio, 1.0003x, lies above 1x" in said and "1.00x" not in said
    # the point at the interval's precision: 0.184x beside 0.183x to 0.196x, never 0.18x
    five = Speedup(meas([0.0069] * 5), meas([0.0374, 0.0375, 0.0376, 0.0353, 0.0377]))
    est = five.estimate
    lo, hi = est.describe("x").split("interval ")[1].split(",")[0].split(" to ")
    point = float(ex.ratio_text(five).split("x")[0])
    assert est.low < est.value < est.high and float(lo[:-1]) < point < float(hi[:-1])
    # the medians' ratio on the same side of 1x but outside the pairs' interval: flagged, as a split is
    base = [0.010 + 0.002 * i for i in range(11)]
    r = [1.06, 1.08, 1.09, 1.10, 1.11, 1.02, 1.12, 1.13, 1.14, 1.16, 1.18]
    drift = Speedup(meas(base), meas([x / q for x, q in zip(base, r, strict=True)]))
    assert not drift.estimate.low <= drift.baseline.median_s / drift.candidate.median_s <= drift.estimate.high
    assert "whose ratio, 1.02x, lies outside the interval" in ex.ratio_text(drift)
    assert "outside the interval" not in ex.ratio_text(sp)
    # outside as printed, at the digits of the interval's ends: never "1.03x lies outside ... to 1.030x"
    base = [0.060 + 0.002 * i for i in range(11)]
    r = [1.016, 1.017, 1.018, 1.019, 1.020, 1.0345, 1.022, 1.025, 1.030, 1.029, 1.016]
    edge = Speedup(meas(base), meas([x / q for x, q in zip(base, r, strict=True)]))
    assert "to 1.029x" in ex.ratio_text(edge) and "whose ratio, 1.034x, lies outside" in ex.ratio_text(edge)


def test_the_graph_break_example_breaks_once_and_its_fix_not_at_all():
    broken, fixed = ex.RescaledMLP(8), ex.WhereRescaledMLP(8)
    fixed.load_state_dict(broken.state_dict())
    x = torch.randn(4, 8) * 3
    torch.testing.assert_close(broken(x), fixed(x))
    assert compiling.graph_breaks(broken, x).breaks == 1
    assert compiling.graph_breaks(fixed, x).breaks == 0


def test_attention_in_model_counts_eager_above_sdpa():
    r = ex.attention_in_model(64, batch=2, heads=4, layers=2, width=64, repeat=2)
    assert r.saved["eager"] > r.saved["sdpa"] and r.counted["eager"] > r.counted["sdpa"]
    # the measured difference is the counted one (notebook 04's exact model; at batch 1 it is not)
    diff = r.counted["eager"] - r.counted["sdpa"]
    assert (r.saved["eager"] - r.saved["sdpa"]) == pytest.approx(diff, rel=0.02)
    assert r.describe().startswith("T=  64: sdpa against eager")


def points(dtype, rates):
    return [ShapePoint(1024, n, 256, dtype, 1.0, f) for n, f in rates.items()]


def test_shape_summary_holds_odd_widths_against_the_aligned_median():
    rates = {960: 10.0, 1024: 12.0, 1088: 11.0, 1021: 5.5, 1023: 11.0, 1000: 1.0}
    s = ex.shape_summary(points("float32", rates), "float32")
    assert s.ref == 11.0 and s.odd == (0.5, 1.0) and 1000 not in s.aligned  # even, unaligned: neither
    est = s.odd_share  # odd over aligned medians; 3 aligned widths are too few for an interval
    assert est.value == pytest.approx(0.75) and not est.has_interval
    assert "multiples of 64" in s.describe() and "odd n: median 75%, slowest 50%" in s.describe()
    assert s.aligned_spread == "91%-109%"
    same = ex.shape_summary(points("float32", {960: 11.0, 1024: 11.02, 1088: 10.99, 1021: 5.5}),
                            "float32")  # planted: "100%-100%", a range of no width
    assert same.aligned_spread == "within 0.2% of it" and "100%-100%" not in same.describe()
    with pytest.raises(ValueError, match="aligned and an odd"):
        ex.shape_summary(points("float32", {1024: 1.0, 1088: 1.0}), "float32")
    with pytest.raises(ValueError, match="no even width off the vector grid"):
        s.parity  # noqa: B018  (1000 is a multiple of 4 (and of 8): on the grid of an 8-lane vector)


def test_parity_compares_odd_widths_with_even_ones_off_the_vector_grid():
    # even widths that are multiples of 4 (1016, 1020) are not "off the grid": left out
    rates = {960: 10.0, 1024: 10.0, 1021: 6.0, 1023: 6.2, 1025: 5.8, 1018: 6.0, 1022: 6.1,
             1016: 9.0, 1020: 2.0}
    s = ex.shape_summary(points("float32", rates), "float32")
    assert s.even == (0.6, 0.61) and "even n off the vector grid: median 60%" in s.describe()
    est = s.parity
    assert est.value == pytest.approx(0.6 / 0.605) and est.low <= est.value <= est.high
    assert est.method == "ratio of the medians of 3 odd widths to 2 even ones"


def test_a_group_of_one_width_is_not_described_as_a_median():
    # bf16's plan kept 960, 1016 and 1017: the old line read "they spread within 0.0% of it" and
    # "odd n: median 111%, slowest 111%" for one width each
    s = ex.shape_summary(points("bfloat16", {960: 3.04e9, 1016: 3.1e9, 1017: 3.37e9}), "bfloat16")
    text = s.describe()
    assert "one multiple of 64, 3.04 GFLOP/s" in text and "one odd n, at 111% of it" in text
    assert "median" not in text and "spread" not in text and "nothing is judged on it" in text
    # every width the figure draws is named: 1016 (a multiple of 8) was drawn but left out of the line
    assert "one other even n (a multiple of 4, in no group above), at 102%" in text
    assert s.other == (3.1e9 / 3.04e9,)


def test_shape_sweep_skips_a_dtype_without_an_odd_width():
    pts, sums = ex.shape_sweep({"float32": [64, 63], "bfloat16": [64, 128]}, m=16, k=16, repeat=2)
    assert set(sums) == {"float32"} and {p.dtype for p in pts} == {"float32"}


def test_largest_mfu_text_names_the_causes_only_above_100_percent():
    top = SimpleNamespace(mfu=0.3, precision="fp32", batch=8, ceiling="float32")
    assert "PaLM" in ex.largest_mfu_text(top, 2048)
    # named for what it is: a share of a measured ceiling, not an MFU
    assert ex.largest_mfu_text(top, 2048).startswith("largest share of a measured ceiling")
    assert "Not an MFU" in ex.largest_mfu_text(top, 2048)
    compiled = SimpleNamespace(**{**vars(top), "compiled": True})  # the compiled step's, named as such
    assert "(fp32 compiled, batch" in ex.largest_mfu_text(compiled, 2048)
    assert "(fp32, batch" in ex.largest_mfu_text(SimpleNamespace(**{**vars(top), "compiled": False}), 2048)
    over = ex.largest_mfu_text(SimpleNamespace(mfu=1.4, precision="fp32", batch=8, ceiling="float32"), 512,
                               share=0.5, threads=1, cores=2)
    assert "Above 100 %" in over and "QUICK sizes" in over and "1 of 2 threads" in over
    assert "QUICK" not in ex.largest_mfu_text(SimpleNamespace(**{**vars(top), "mfu": 1.4}), 2048)
    shared = ex.largest_mfu_text(top, 2048, share=0.51, threads=1, cores=2)  # the share it was held against
    assert "against the float32 ceiling measured on 1 of 2 threads, 51% of the all-core one" in shared
    rated = ex.largest_mfu_text(SimpleNamespace(**{**vars(top), "peak_flops": 1.05e11}), 2048, share=0.51,
                                threads=1, cores=2)  # the ceiling's own rate, named
    assert "over a matmul ceiling measured here: 30.0%" in rated
    assert "float32 ceiling (105 GFLOP/s) measured on 1 of 2 threads" in rated
    assert "against the all-core one, 15.3%)" in shared  # the all-core share printed beside it
    assert "PaLM" in shared
    assert "not comparable" in shared  # a measured ceiling is not the vendor's peak PaLM divides by
    assert "100%" not in ex.largest_mfu_text(top, 2048, share=1.0)


def test_attention_table_and_disturbed_lengths():
    pts = [kernels.AttentionPoint(i, t, s, 4 * t * t) for i, t, s in
           [("naive", 64, 1.0), ("naive", 128, 3.0), ("sdpa", 64, 0.5), ("sdpa", 128, 1.0)]]
    lines = vc.attention_table(pts, 1, 1, 16)
    assert len(lines) == 2 and lines[1].endswith("3.00x")
    assert ex.disturbed_length(pts) is None
    pts[1] = kernels.AttentionPoint("naive", 128, 0.9, 0)  # faster at twice the length
    assert ex.disturbed_length(pts) == ("naive", 64)


def test_a_disturbed_sweep_gets_a_disturbed_verdict_whatever_its_figure():
    from perfkit.verdict import Prediction

    clean = [kernels.AttentionPoint(i, t, s, 0) for i, t, s in
             [("naive", 64, 1.0), ("naive", 128, 3.0), ("sdpa", 64, 0.5), ("sdpa", 128, 1.0)]]
    assert ex.disturbed_text(clean) == ""
    jumped = [*clean[:1], kernels.AttentionPoint("naive", 128, 100.0, 0), *clean[2:]]
    text = ex.disturbed_text(jumped)
    assert text == "naive attention's time grew 100x from T=64 to T=128, for 4x the work"
    fell = [*clean[:3], kernels.AttentionPoint("sdpa", 128, 0.25, 0)]
    assert "sdpa attention's time fell 0.5x" in ex.disturbed_text(fell)
    pred = Prediction("ratio", "traffic", low=1.0, unit="x")
    explain = {"held": "grew as modelled", "disturbed": "The memory is exact."}
    v = ex.disturbed_verdict(pred, 3.0, text, explain=explain)  # would be held: the flag decides
    assert v.outcome == "disturbed" and "grew 100x" in v.text and "it says held" in v.text
    assert "grew as modelled" not in v.text and v.text.endswith("The memory is exact.")
    assert v.text.startswith("**Prediction** (traffic): ratio") and "**Measured:** 3" in v.text
    missed = ex.disturbed_verdict(pred, 0.5, text)  # a crossed bound stays missed, with the reason
    assert missed.outcome == "missed" and "disturbed too: naive attention's time grew 100x" in missed.text
    missed = ex.disturbed_verdict(pred, 0.5, text, explain={**explain, "below": "per-call costs"})
    assert "per-call costs" not in missed.text and missed.text.endswith("The memory is exact.")
    tol = Prediction("r", "m", value=2.0, rel_tol=0.1, unit="x")  # a tolerance: inside would be held
    assert ex.disturbed_verdict(tol, 2.05, text).outcome == "disturbed"
    ok = ex.disturbed_verdict(pred, 3.0, "", explain=explain)  # clean: the rule decides, both ways
    assert ok.outcome == "held" and "grew as modelled" in ok.text
    assert ex.disturbed_verdict(pred, 0.5, "").outcome == "missed"


def test_counted_flops_counts_the_matmuls_that_ran():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert counted_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    assert counted_flops(lambda: (a @ b) @ b.T) == 2 * 8 * 16 * 4 * 2
    assert counted_flops(lambda: a.relu() + 1) == 0  # elementwise work is not counted


def test_dispatched_calls_counts_every_operator_call_views_included():
    from perfkit.compute.flops import dispatched_calls

    a = torch.randn(4, 4)
    assert dispatched_calls(lambda: a + 1) == 1
    assert dispatched_calls(lambda: (a + 1) * 2) == 2
    assert dispatched_calls(lambda: a[1:].t()) == 2  # two views: counted like any call
    assert dispatched_calls(lambda: None) == 0


@pytest.mark.parametrize("t_q, t_k", [(6, 6), (4, 7), (7, 4)])
def test_counted_flops_counts_cpu_fused_attention_on_its_unmasked_entries(t_q, t_k):
    """The CPU's fused attention has no formula in PyTorch (it would count 0): forward is two
    matmuls over the scores, backward five; a causal mask keeps min(i + 1, t_k) keys in row i
    (counting the whole square would overstate the work, so an HFU could beat its ceiling)."""
    import torch.nn.functional as F

    b, h, d = 2, 3, 8
    q = torch.randn(b, h, t_q, d, requires_grad=True)
    k, v = (torch.randn(b, h, t_k, d, requires_grad=True) for _ in range(2))
    kept = sum(min(i + 1, t_k) for i in range(t_q))
    for causal, entries in ((False, t_q * t_k), (True, kept)):
        def attend(causal=causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        fwd = counted_flops(attend)
        both = counted_flops(lambda attend=attend: attend().sum().backward())
        assert fwd == round(2 * 2 * b * h * d * entries * 1.0), (causal, fwd)
        assert both == fwd + round(5 * 2 * b * h * d * entries * 1.0), (causal, both)


def test_loss_and_throughput_lines():
    lines = vc.loss_lines({"fp32": [3.0, 2.0, 1.0], "bf16": [3.0, 2.0, 1.1]}, tail=1)
    assert "10.000% from fp32" in lines[1] and "largest per-step gap 0.1000" in lines[1]
    p = SimpleNamespace(precision="bf16", compiled=True, batch=4, step=meas([0.01]), tokens_per_s=1e4,
                        mfu=0.25, ceiling="bfloat16")
    head, line = vc.throughput_lines([p], 0.5)  # the threads' share said once, above the rows
    assert "the float32 one is 50% of the all-core float32 ceiling" in head
    # a share of a measured ceiling is named for what it is, never an MFU (a vendor peak's share)
    assert "not an MFU, which divides by a vendor's theoretical peak" in head
    assert line.endswith("model FLOP/s 25.0% of the bfloat16 ceiling") and "threads" not in line
    assert "MFU" not in line
    whole, same = vc.throughput_lines([p], 1.0)  # the whole machine: the name said, no thread share
    assert same == line and "not an MFU" in whole and "all-core" not in whole
    # a float32 line on part of the machine prints its all-core share beside it
    fp32 = SimpleNamespace(**{**vars(p), "precision": "fp32", "compiled": False, "ceiling": "float32",
                              "threads": 1})
    said = vc.throughput_lines([fp32], 0.5)[1]
    assert said.endswith("model FLOP/s 25.0% of the float32 ceiling on 1 thread (12.5% of the all-core one)")
    # an emulated bf16 step held against fp32's ceiling is not called an MFU
    roof = SimpleNamespace(**{**vars(p), "ceiling": "float32"})
    said = vc.throughput_lines([roof], 1.0)[1]
    assert "MFU 25" not in said and "model FLOP/s 25.0% of the float32 ceiling, not an MFU" in said


def test_autocast_saved_bytes_shrink_under_bf16():
    from perfkit.models import tiny_gpt2

    model = tiny_gpt2(block_size=32, n_embd=64, n_layer=1, n_head=2)
    saved = ex.autocast_saved_bytes(model, torch.randint(0, 64, (8, 32)))
    # activations dominate at this size: bf16 saves less, but more than half (fp32 logits, weight copies)
    assert 0.5 * saved["fp32"] < saved["bf16"] < 0.9 * saved["fp32"]


def test_new_tensor_cost_and_its_words():
    c = fusion.NewTensorCost(meas([0.003]), meas([0.001]))
    assert c.extra_s == pytest.approx(0.002) and "pages fault in" in c.describe(2**20)
    small = fusion.NewTensorCost(meas([0.0015]), meas([0.001]))
    assert "less than the fill itself" in small.describe(2**20)
    faster = fusion.NewTensorCost(meas([0.0009]), meas([0.001]))
    assert faster.extra_s == 0.0 and "only noise" in faster.describe(2**20)
    # an existing 32 MiB buffer filled in 0.22 ms is 152 GB/s: past 4/3 of a 36 GB/s DRAM roof, so in cache
    cached = fusion.NewTensorCost(meas([0.0093]), meas([0.00022]))
    said = cached.describe(32 * 2**20, 36e9)
    assert "written, above 4/3 of the DRAM roof of 36 GB/s" in said and "stayed in cache" in said
    # 20.2 GB/s against a 15.5 GB/s roof: a write-only fill can pass x + y's roof from DRAM; the old
    # words said its pages stayed in cache, which that rate does not show; no share above 100 %
    streamed = fusion.NewTensorCost(meas([0.00775]), meas([0.00166])).describe(32 * 2**20, 15.5e9)
    assert "1.30x the DRAM roof" in streamed and "streaming stores" in streamed
    assert "stayed in cache" not in streamed and "%" not in streamed
    # the roof is x + y's (4 buffers moved for 3 counted): a streaming fill reaches 4/3 of it from DRAM,
    # not the 3/2 a copy's roof would allow, so 1.40x the roof shows part of the pages stayed in cache
    assert fusion.FILL_OVER_ROOF == pytest.approx(4 / 3)
    past = fusion.NewTensorCost(meas([0.00775]), meas([0.001547])).describe(32 * 2**20, 15.5e9)
    assert "above 4/3 of the DRAM roof" in past and "stayed in cache" in past
    assert "cache" not in cached.describe(32 * 2**20)  # without the ceiling nothing is said of it
    # below the ceiling no share of it: a fill counts one buffer written, the ceiling's x + y three
    dram = fusion.NewTensorCost(meas([0.01]), meas([0.002]))  # 64 MiB in 2 ms: 34 GB/s
    assert "(33.6 GB/s written)" in dram.describe(2**26, 36e9) and "%" not in dram.describe(2**26, 36e9)
    assert fusion.new_tensor_cost(torch.zeros(1024), repeat=2).reuse.n == 2
    # faults counted per round: one statistic, the rounds' median, per tensor and per fault
    counted = fusion.NewTensorCost(meas([0.003, 0.005, 0.004]), meas([0.001] * 3), (1000, 1000, 1000))
    assert counted.extra_s == pytest.approx(0.003) and counted.per_fault_s == pytest.approx(3e-6)
    assert counted.fault_rounds() == pytest.approx((2e-6, 4e-6, 3e-6))
    assert "1,000 faults, 3 us each" in counted.describe(2**20).replace("µs", "us")
    assert fusion.NewTensorCost(meas([0.003]), meas([0.001])).per_fault_s == 0.0  # none counted
    big = torch.zeros(8 * 2**20 // 4)  # 8 MiB: past glibc's first mmap threshold, a new one faults in
    assert len(fusion.new_tensor_cost(big, repeat=3).faults) in (0, 3)
    with pytest.raises(ValueError, match="faults must hold one count per round"):
        fusion.NewTensorCost(meas([0.003, 0.002]), meas([0.001, 0.001]), (5,))
    with pytest.raises(ValueError, match="repeat"):
        fusion.new_tensor_cost(torch.zeros(4), repeat=0)


def test_chain_model_and_which_term_explains_a_miss():
    chain = kernels.elementwise_chain_bytes([1, 1, 2], numel=1000, inputs=1)
    model = fusion.chain_model(chain, 0.001, 1e6)  # 1 ms per new tensor
    assert model.bytes_s == pytest.approx(chain.eager / 1e6) and model.faults_s == pytest.approx(0.003)
    assert model.eager_s == pytest.approx(model.bytes_s + 0.003)
    slow_fused = compiling.CompileRecord(1.0, meas([0.05]), meas([10 * model.fused_s]))
    eager, fused = fusion.chain_explanations(model, slow_fused)
    assert "10.0x its own bytes' time" in eager["above"]
    # a held verdict still says how far the median lies from the model (a wide band can hold a large miss)
    assert eager["held"].startswith(f"The median is {0.05 / model.eager_s:.2f}x the model's ")
    # the fused kernel's model is its bytes and its one new tensor: a slower loop is its arithmetic
    assert model.new_s == 0.001 and model.fused_total_s == pytest.approx(model.fused_s + 0.001)
    assert model.speedup == pytest.approx(model.eager_s / (model.fused_s + 0.001))
    assert f"against the model's {model.fused_total_s * 1e3:.2f} ms" in fused["below"]
    assert "and its one new tensor, 1.00 ms" in fused["below"] and "arithmetic" in fused["below"]
    # y**3 is two multiplies in ATen's pow kernel and in inductor's lowering: only tanh is costly
    assert "tanh and pow" not in fused["below"] + eager["above"] and "two multiplies" in fused["below"]
    assert "at the all-core DRAM ceiling" in fused["below"] and "bandwidth of all cores" in fused["below"]
    # a model that charged the bytes at the timings' own threads' DRAM roof says so, not "all cores"
    one = fusion.chain_explanations(model, slow_fused, "the DRAM ceiling on 1 thread")[1]["below"]
    assert "(its bytes at the DRAM ceiling on 1 thread," in one and "all cores" not in one
    with pytest.raises(ValueError, match="dram"):
        fusion.chain_explanations(model, slow_fused, "")
    quick_fused = compiling.CompileRecord(1.0, meas([0.05]), meas([model.fused_s]))
    assert "Not from arithmetic" in fusion.chain_explanations(model, quick_fused)[0]["above"]
    no_faults = fusion.chain_model(chain, 0.0, 1e6)
    above = fusion.chain_explanations(no_faults, quick_fused)[1]["above"]  # the model counts faults already
    assert above.startswith("Of the speedup's two terms the eager one carries the miss")
    assert "page faults" not in above
    # a speedup below the model names the term that missed, each side against its own model
    ran = 10 * model.fused_s / model.fused_total_s  # the compiled loop over its bytes and its one new tensor
    assert f"the compiled one carries the miss: the compiled loop took {ran:.2f}x" in fused["below"]
    assert f"the eager chain {0.05 / model.eager_s:.2f}x its own" in fused["below"]
    with pytest.raises(ValueError, match="extra_s"):
        fusion.chain_model(chain, -1.0, 1e6)


def test_a_disturbed_attention_sweep_is_measured_again(monkeypatch):
    import perfkit.compute.kernels as k

    def sweep(t128):
        return [kernels.AttentionPoint("naive", 64, 1.0, 0), kernels.AttentionPoint("naive", 128, t128, 0)]

    sweeps = iter([sweep(0.5), sweep(3.0)])  # faster at twice the length: disturbed; then clean
    monkeypatch.setattr(k, "attention_sweep", lambda *a, **kw: next(sweeps))
    pts, note = ex.attention_sweep_checked({"naive": None}, [64, 128])
    assert pts[1].seconds == 3.0 and "naive attention's time from T=64" in note and "next sweep" in note
    monkeypatch.setattr(k, "attention_sweep", lambda *a, **kw: pts)
    assert ex.attention_sweep_checked({"naive": None}, [64, 128]) == (pts, "")


@pytest.mark.parametrize("call, exc, match", [
    (lambda: ex.ratio_text("1.2x"), TypeError, "sp must be"),
    (lambda: ex.precision_curves("model", lambda m, b: b, [1], ["fp32"]), TypeError, "model must be"),
    (lambda: ex.largest_rise({"fp32": [1.0, 2.0]}), TypeError, "curves must be"),
    (lambda: ex.largest_mfu_text(SimpleNamespace(mfu=1.2), 0), ValueError, "swept"),
    (lambda: ex.shape_summary([("float32", 1024)], "float32"), TypeError, r"points\[i\]"),
    (lambda: ex.shape_sweep([], repeat=2), TypeError, "widths must be"),
    (lambda: vc.loss_lines({"bf16": [1.0]}), TypeError, "curves must be"),
    (lambda: vc.throughput_lines([], share=0.0), ValueError, "share"),
    (lambda: vc.attention_table([1], 1, 1, 1), TypeError, r"points\[i\]"),
])
def test_bad_arguments_are_refused_by_name(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_drift_text_calls_moves_alike_only_when_they_share_a_sign():
    def m(ms, spread=0.1):  # 7 rounds around ms milliseconds
        return Measurement(tuple((ms + spread * d) * 1e-3 for d in (-3, -2, -1, 0, 1, 2, 3)), 0)

    # -1 % and +1 % (65.9 -> 65.0 ms, 62.1 -> 62.7 ms), each well clear of its noise: opposite, not "alike"
    text = ex.drift_text({"eager": m(65.9), "compiled": m(62.1)}, {"eager": m(65.2), "compiled": m(62.7)})
    assert "-1.1%" in text and "+1.0%" in text and "opposite directions" in text
    assert "the same way" not in text
    small = ex.drift_text({"eager": m(65.9), "compiled": m(62.1)}, {"eager": m(65.6), "compiled": m(62.2)})
    assert "moved -0.5% and the compiled one's +0.2%" in small and "-0%" not in small
    same = ex.drift_text({"eager": m(65.9), "compiled": m(62.1)}, {"eager": m(67.2), "compiled": m(63.4)})
    assert "the same way" in same
    wide = ex.drift_text({"eager": m(65.9, 1.0), "compiled": m(62.1, 1.0)},
                         {"eager": m(65.2, 1.0), "compiled": m(62.7, 1.0)})
    assert "neither clearly" in wide     # the medians' intervals overlap: no move to explain
    lopsided = ex.drift_text({"eager": m(65.9), "compiled": m(62.1)}, {"eager": m(72.0), "compiled": m(62.2)})
    assert "the eager step moved the more" in lopsided
    # -4.2 % and -1.0 %: the same way, within 5 points, but four times as much: not "about as much"
    fourfold = ex.drift_text({"eager": m(71.0), "compiled": m(65.0)},
                             {"eager": m(68.0), "compiled": m(64.35)})
    assert "-4.2%" in fourfold and "-1.0%" in fourfold and "about as much" not in fourfold
    assert "the eager step moved the more, 4.2x as much" in fourfold
    with pytest.raises(ValueError, match="same two steps"):
        ex.drift_text({"eager": m(1.0)}, {"eager": m(1.0)})


def test_what_fusion_saved_names_the_term_that_moved_the_speedup_off_the_byte_ratio():
    chain = kernels.elementwise_chain_bytes([1, 1, 1, 2, 1, 1, 1, 1, 2], numel=8192 * 1024, inputs=1)
    # as measured on a 2-core CPU: 13.85 ms per new tensor, bytes at 53.8 GB/s; 174 ms eager, 37.8 fused
    faulty = fusion.chain_model(chain, 13.85e-3, 53.8e9)
    rec = compiling.CompileRecord(1.8, meas([0.174]), meas([0.0378]))
    said = fusion.what_fusion_saved(faulty, rec, chain.kernels, chain.ratio)
    assert "saved 136.2 ms per call" in said and "110.8 ms of page faults (8 fewer new tensors)" in said
    assert "the new tensors' page faults are the larger part, not the bytes" in said
    # faults scale 9:1 as bytes scale 10:1, so they move the model only to 9.08x; the compiled loop's
    # own time (2.50x its model's) moved the measured 4.60x off the byte ratio, and the words say so
    assert ("The measured 4.60x (the medians' ratio) is the 10.0x byte ratio divided by 1.10 for the page "
            "faults the model counts (its 9.08x), divided by 2.50 for the compiled loop's time over its "
            "model's, and multiplied by 1.27 for the eager chain's time over its model's") in said
    assert "the compiled loop's own time lowered it most, not the page faults" in said
    assert "never the speedup" not in said
    # where the faults move the model most, they are named: the byte ratio was not on offer
    fault_bound = fusion.ChainModel(0.010, 0.090, 0.001, 0.010)  # s: model speedup 9.09x of 10.0x bytes
    exact = fusion.what_fusion_saved(fault_bound, compiling.CompileRecord(1.0, meas([0.1]), meas([0.011])),
                                     9, 10.0)
    assert "the page faults lowered it most: the model's 9.09x, not the 10.0x byte ratio" in exact
    # an eager chain far slower than its model, a compiled loop on it: the eager side is named
    slow = compiling.CompileRecord(1.0, meas([0.3]), meas([0.012]))
    slow_eager = fusion.what_fusion_saved(fault_bound, slow, 9, 10.0)
    assert "the eager chain's own time raised it most" in slow_eager
    # the faults are the allocator's (glibc's mmap threshold), not the CPU's, and the usual remedy is named
    assert "On this CPU" not in said and "not the CPU" in said and "LD_PRELOAD" in said
    # glibc caps M_MMAP_THRESHOLD at 32 MiB on 64-bit: only disabling mmap (or another allocator) works
    assert "MALLOC_MMAP_MAX_=0" in said and "cannot help" in said
    assert "does not carry over" in said   # a GPU's caching allocator: no faults
    no_faults = fusion.chain_model(chain, 0.0, 53.8e9)
    bytes_said = fusion.what_fusion_saved(no_faults, rec, chain.kernels, chain.ratio)
    assert "the bytes are the larger part, as on a GPU" in bytes_said and "never" not in bytes_said
    assert "together 90% of it: 14.2 ms of the saving is time neither term counts" in said  # 122 of 136 ms
    small = fusion.what_fusion_saved(no_faults, compiling.CompileRecord(1.8, meas([0.0442]), meas([0.0141])),
                                     chain.kernels, chain.ratio)
    assert "together 37% of it: the rest is time neither term counts" in small   # 11.2 ms of 30.1
    slower = fusion.what_fusion_saved(faulty, compiling.CompileRecord(1.8, meas([0.03]), meas([0.04])),
                                      chain.kernels, chain.ratio)
    assert slower.startswith("Fusing saved nothing here") and "page faults" not in slower
    with pytest.raises(ValueError, match="kernels"):
        fusion.what_fusion_saved(faulty, rec, 0, 10.0)
