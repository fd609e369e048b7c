"""perfkit.compute.claims_precision: mixed precision, loss scaling and kdim attention, on tiny sizes."""

import math

import pytest

from perfkit.advice import Claim, assess
from perfkit.compute import claims_precision as cp
from perfkit.hw import MachineLimits
from perfkit.timing import Measurement

SMALL = dict(n_embd=16, n_layer=1, n_head=2)


def test_amdahl_by_hand():
    t = cp.PrecisionTiming("bf16", Measurement((0.1, 0.1), 0), Measurement((0.05, 0.05), 0), flops=2e7)
    # 2e7 FLOPs at 1e9 FLOP/s = 0.02 s of a 0.1 s step: f = 0.2; r = 4 -> 1 / (0.8 + 0.05)
    f, f_raw, r, pred = t.amdahl(MachineLimits("cpu", "t", {"float32": 1e9, "bfloat16": 4e9}, 1e9))
    assert (f, f_raw, r) == (pytest.approx(0.2), pytest.approx(0.2), 4.0)
    assert pred == pytest.approx(1 / 0.85)
    assert t.speedup().value == pytest.approx(2.0)
    # a ceiling below what the step reached: f capped at 1, the raw share kept
    f, f_raw, _, pred = t.amdahl(MachineLimits("cpu", "t", {"float32": 1e8, "bfloat16": 5e7}, 1e9))
    assert f == 1.0 and f_raw == pytest.approx(2.0) and pred == pytest.approx(0.5)
    # a one-thread step against the one-thread ceilings, not all cores' (2 threads here)
    lim = MachineLimits("cpu", "t", {"float32": 1e9, "bfloat16": 4e9}, 1e9, threads=2,
                        one_thread_flops={"float32": 4e8, "bfloat16": 8e8})
    one = cp.PrecisionTiming("bf16", t.fp32, t.mixed, 2e7, threads=1)
    f, _, r, _ = one.amdahl(lim)
    assert (f, r) == (pytest.approx(0.5), pytest.approx(2.0))
    assert t.amdahl(lim)[0] == pytest.approx(0.2)  # no thread count: all cores


def test_time_precision_step_runs_both():
    t = cp.time_precision_step(batch=1, seq=8, model_kw=SMALL, repeat=2, device="cpu")
    assert t.fp32.n == t.mixed.n == 2 and t.flops > 0 and t.parts is None
    # with parts: the steps are the ones timed beside the parts, in the same rounds
    t = cp.time_precision_step(batch=1, seq=8, model_kw=SMALL, repeat=2, device="cpu", parts=True)
    assert t.fp32 is t.parts.steps.baseline and t.mixed is t.parts.steps.candidate
    # the steps and the 8 replays in balanced orders: one whole cycle of 10 rounds
    assert t.parts.counts["matmul"] == 15 and t.parts.total().baseline.n == 10 and t.fp32.n == 10
    with pytest.raises(TypeError, match="parts"):
        cp.time_precision_step(batch=1, seq=8, model_kw=SMALL, repeat=1, parts=1)
    with pytest.raises(ValueError, match="precision"):
        cp.time_precision_step(batch=1, seq=8, model_kw=SMALL, repeat=1, precision="fp8", device="cpu")


def test_autocast_ratio_falls_with_batch():
    # autocast also keeps its bf16 copies of the weights: a fixed cost that a larger batch dilutes
    small, large = (cp.autocast_activation_ratio(batch=b, seq=16, model_kw=SMALL) for b in (1, 16))
    assert 0 < large < small
    mem = cp.autocast_memory(batch=4, seq=16, model_kw=SMALL)
    assert mem.activation_ratio == pytest.approx(mem.bf16 / mem.fp32)
    # the model states do not shrink, so the step's ratio lies between the activations' and 1
    assert mem.activation_ratio < mem.step_ratio < 1
    assert mem.step_ratio == pytest.approx((16 * mem.params + mem.bf16) / (16 * mem.params + mem.fp32))
    assert cp.AutocastMemory(100, 50, 0).step_ratio == 0.5
    assert cp.AutocastMemory(100, 50, 10**6).step_ratio > 0.99


def test_gradient_flush_bf16_keeps_what_fp32_keeps():
    g = cp.gradient_flush(batch=2, seq=8, model_kw=SMALL, device="cpu")
    assert g.lost["bf16"] == 0 and g.kept > 0 and g.max_abs > 0
    assert 0 <= g.subnormal <= 1
    assert g.kept_by_scale("fp16", 1.0) == 0  # scale 1 is the unscaled run
    assert g.kept_by_scale("fp16", 2.0 ** 16) >= 0
    with pytest.raises(ValueError, match="scale"):
        g.flush_at("fp16", 0.0)


def test_a_loss_scale_lifts_the_subnormal_gradients_not_only_the_flushed_ones():
    """Values in fp16's subnormal range keep fewer significant bits: a scale that lifts them above its
    smallest normal restores them, which a count of values flushed to zero misses (the planted
    version counted only those)."""
    g = cp.gradient_flush(batch=2, seq=8, model_kw=SMALL, device="cpu")
    assert g.lifted_by_scale(1.0) == 0
    below = round(g.subnormal * g.kept)  # every value under the smallest normal, unscaled
    assert g.lifted_by_scale(2.0 ** 16) <= below
    assert below > 0 and g.lifted_by_scale(2.0 ** 40) >= g.lifted_by_scale(2.0 ** 16) > 0  # more scale: more
    with pytest.raises(ValueError, match="scale"):
        g.lifted_by_scale(-1.0)


def test_predicted_skips_by_hand():
    # 2^16 * 1.0 / 65504 -> log2 just above 0 -> 1 skip; 2^32 * 1.0 -> 17
    assert cp.predicted_skips(2.0 ** 16, 1.0) == 1
    assert cp.predicted_skips(2.0 ** 32, 1.0) == 17
    assert cp.predicted_skips(1.0, 1e-3) == 0  # fits at once: no negative skips
    with pytest.raises(ValueError, match="init_scale"):
        cp.predicted_skips(0.0, 1.0)


def test_scaler_skips_what_the_formula_predicts():
    g = cp.gradient_flush(batch=2, seq=8, model_kw=SMALL, device="cpu")
    k, scale = cp.scaler_first_update(2.0 ** 24, batch=2, seq=8, model_kw=SMALL, device="cpu")
    assert abs(k - cp.predicted_skips(2.0 ** 24, g.max_abs)) <= 1
    assert scale == 2.0 ** 24 / 2 ** k


def test_kdim_keeps_the_t_squared_matrix_and_need_weights_false_does_not():
    a = cp.kdim_attention_check(embed=16, heads=2, batch=1, seq=16)
    assert a.matrices["kdim"] == pytest.approx(1.0, rel=0.01)
    assert abs(a.matrices["kdim, need_weights=False"]) <= 0.01
    assert abs(a.matrices["F.scaled_dot_product_attention"]) <= 0.01
    assert a.params["default"] - a.params["kdim"] == 16 * (16 - 8)  # the key projection (E, E) -> (E, kdim)
    assert a.self_attention_error is not None
    with pytest.raises(ValueError, match="multiple of heads"):
        cp.kdim_attention_check(embed=10, heads=4)
    assert math.isfinite(a.saved["kdim"])


def test_the_fp16_claim_is_judged_by_one_rule_over_its_two_counts():
    # 10,000 values: 2,000 below fp16's smallest normal (20 %), 30 flushed to zero unscaled; at 2^16 the
    # stand-in lifts 19 % (past the 1 % line), the direct count keeps 0.3 % (below it): the verdict took
    # the stand-in alone and said "holds"; the two counts as the figure's range make it "holds partly"
    flush = cp.GradientFlush(10_000, 1.0, {"fp16": 30, "bf16": 0}, 0.2,
                          lambda dtype, s: 30 if s == 1.0 else 0, lambda s: 2_000 if s == 1.0 else 100)
    assert flush.span(2.0 ** 16) == (pytest.approx(0.003), pytest.approx(0.19))
    claim = Claim("fp16 needs a loss scaler", "share", low=0.01, partly=0.0, timed=False)
    assert assess(claim, 0.19, flush.span(2.0 ** 16)).status == "holds partly"
    said = flush.criteria(2.0 ** 16, 0.01)
    assert "19.00% lifted out of fp16's subnormal range" in said and "at or above the 1% line" in said
    assert "0.300% kept of the values the fp16 backward itself flushed to zero (30 unscaled), below" in said
    assert said.endswith("they lie on both sides: the scale rescues precision, not values from zero.")
    many = cp.GradientFlush(100, 1.0, {"fp16": 30, "bf16": 0}, 0.2, lambda d, s: 30 if s == 1.0 else 0,
                         lambda s: 20 if s == 1.0 else 0)
    assert many.criteria(2.0 ** 16, 0.01).endswith("they lie on one side of the line.")
    assert assess(claim, 0.3, many.span(2.0 ** 16)).status == "holds"
    assert flush.criterion_label(2.0 ** 16, 0.01) == (
        "two counts, 19.00% lifted from subnormal, 0.300% from zero: both sides of 1%")
    assert many.criterion_label(2.0 ** 16, 0.01).endswith("one side of 1%")
    with pytest.raises(ValueError, match="line"):
        flush.criteria(2.0 ** 16, 0.0)
    with pytest.raises(ValueError, match="line"):
        flush.criterion_label(2.0 ** 16, 0.0)


def test_a_ceiling_model_that_agrees_by_cancelling_errors_says_so():
    # as measured: the ceilings gave f 32.0%, r 0.0682 -> 0.186x; the step's shapes f 83%, r 0.157 -> 0.183x
    text = cp.ceiling_terms_text(0.32, 0.0682, 0.83, 0.157)
    assert "f 32.0% against 83.0% (0.39x)" in text and "r 0.0682 against 0.157 (0.43x)" in text
    assert "0.186x and 0.183x" in text and "the errors cancel" in text and "accident" in text
    assert "each within 25%" in cp.ceiling_terms_text(0.8, 0.15, 0.83, 0.157)
    assert "3.12x the shapes' 0.183x" in cp.ceiling_terms_text(0.32, 0.3, 0.83, 0.157)
    with pytest.raises(ValueError, match="f_c"):
        cp.ceiling_terms_text(0.0, 0.1, 0.8, 0.1)


def test_the_sweep_ratio_reads_the_sweep_points_not_the_raised_ceilings():
    from perfkit.hw_sweep import MatmulPoint
    # ceilings raised by later work to 1e11 and 7e9 (0.07x); the sweep's own points on 1 thread: 1e11, 1.6e9
    pts = [MatmulPoint(512, "float32", 1.0, 1e11, 1e11, threads=1),
           MatmulPoint(512, "bfloat16", 1.0, 1.6e9, 1.6e9, threads=1)]
    lim = MachineLimits("cpu", "t", {"float32": 1e11, "bfloat16": 7e9}, 1e9, matmul_points=pts)
    assert cp.sweep_ceiling_ratio(lim, 1) == pytest.approx(0.016)
    assert cp.sweep_ceiling_ratio(lim, 2) is None  # no point on 2 threads
    with pytest.raises(TypeError):
        cp.sweep_ceiling_ratio("limits", 1)
