"""perfkit.compute.autocast_parts: the ops autocast changes, recorded, replayed, and Amdahl from them."""

import pytest
import torch
from torch.utils._pytree import tree_flatten

from perfkit.compute import autocast_parts as ap
from perfkit.compute.experiments import gpt_step
from perfkit.compute.flops import Speedup
from perfkit.timing import Measurement

SMALL = dict(n_embd=16, n_layer=1, n_head=2)
IDS = torch.randint(0, 64, (1, 8))


def m(*ms: float) -> Measurement:
    return Measurement(tuple(x * 1e-3 for x in ms), 0)  # ms -> s


def parts(steps=(10.0, 8.0), fp32=(4.0, 1.0, 0.0, 1.0), mixed=(2.0, 1.0, 0.5, 0.5)) -> ap.AutocastParts:
    """Three identical rounds: steps (fp32, mixed) and per-kind parts in PART_KINDS order (ms)."""
    kinds = zip(ap.PART_KINDS, fp32, mixed, strict=True)
    return ap.AutocastParts(Speedup(m(*[steps[0]] * 3), m(*[steps[1]] * 3)),
                            {k: Speedup(m(*[a] * 3), m(*[b] * 3)) for k, a, b in kinds},
                            dict.fromkeys(ap.PART_KINDS, 1))


def test_prediction_by_hand_is_amdahl_with_the_measured_parts():
    p = parts()
    # fp32 step 10 ms, its changed ops 6 ms (f = 0.6); mixed parts 4 ms (r = 1.5): 10 / (4 + 4)
    assert p.share() == pytest.approx(0.6) and p.total().ratio == pytest.approx(1.5)
    assert p.predicted_s() == pytest.approx(8e-3) and p.predicted() == pytest.approx(1.25)
    assert p.predicted() == pytest.approx(1 / ((1 - 0.6) + 0.6 / 1.5))
    assert p.steps.estimate.value == pytest.approx(1.25)
    # the parts' own speeds decide it, not a ceiling: an emulated matmul 20x slower moves it
    slow = parts(mixed=(40.0, 1.0, 0.5, 0.5))
    assert slow.predicted() == pytest.approx(10 / (4 + 42))
    # autocast's casts are counted: more cast time, a slower predicted step
    assert parts(mixed=(2.0, 1.0, 3.0, 0.5)).predicted() == pytest.approx(10 / (4 + 6.5))


def test_totals_are_summed_round_by_round():
    one = Speedup(m(1, 1, 1), m(1, 1, 1))
    p = ap.AutocastParts(Speedup(m(10, 10, 10), m(9, 9, 9)),
                         {"matmul": Speedup(m(1, 5, 1), m(1, 1, 1)),
                          "attention": Speedup(m(5, 1, 1), m(1, 1, 1)), "cast": one, "other": one},
                         dict.fromkeys(ap.PART_KINDS, 0))
    # per round: 8, 8, 4 -> median 8 (the sum of the medians would be 1 + 1 + 1 + 1 = 4)
    assert p.total().baseline.times_s == pytest.approx((8e-3, 8e-3, 4e-3))
    assert p.total().baseline.median_s == pytest.approx(8e-3)


def test_explain_names_the_rest_and_refuses_a_negative_rest():
    p = parts(steps=(10.0, 8.4))  # rest: fp32 10 - 6 = 4 ms, mixed 8.4 - 4 = 4.4 ms
    why = p.explain()
    assert "took 4.4 ms where the fp32 step took 4.0 ms" in why["below"] and "0.91x as fast" in why["below"]
    assert p.rest_s() == pytest.approx((4e-3, 4.4e-3))
    assert "less than its changed ops" in parts(steps=(10.0, 3.0)).explain()["above"]
    # the fp32 parts alone took longer than the whole step (5 ms < 6 ms): f is capped at 1, said so
    disturbed = parts(steps=(5.0, 8.0))
    assert disturbed.share() == pytest.approx(1.2) and disturbed.predicted() == pytest.approx(1.5)
    assert "capped at 1" in disturbed.explain()["below"]
    assert len(p.lines()) == len(ap.PART_KINDS) and "fp32 has no casts" in p.lines()[2]
    # with the verdict's band: the rests printed even when it holds; a band with room for the
    # rest to double (8 ms / 1.5 -> 5.3 to 16.0 ms: 8 ms above, 2.7 below, a 4 ms rest) said not to test them
    held = p.explain(band=0.5)["held"]
    assert "the mixed step took 4.4 ms and the fp32 step 4.0 ms, 1.10x as long" in held
    assert "from 5.3 to 16.0 ms" in held and "room enough for the rest to have doubled: this" in held
    # ... and what the rests say of the premise, however the band came out
    assert held.endswith("this verdict cannot test that premise; the two rests test it, and by them the "
                         "mixed step's rest took 1.10x the fp32 step's (medians: no interval).")
    assert "by them it held: they are equal" in parts(steps=(10.0, 8.0)).explain(band=0.25)["held"]
    assert "only to within" in p.explain(band=0.25)["held"] and "held" not in p.explain()  # 6.4 to 10.7 ms
    assert p.explain(band=0.25)["below"] == why["below"]



def test_summary_is_computed_from_the_verdicts_and_the_rests():
    from perfkit.verdict import Prediction, judge
    p = parts(steps=(10.0, 8.4))  # measured 10 / 8.4 = 1.19x; rests 4.0 and 4.4 ms
    fc = judge(Prediction("speedup", "forecast", value=2.0, rel_tol=0.25, unit="x"), 10 / 8.4)
    acct = judge(Prediction("speedup", "account", value=p.predicted(), rel_tol=0.25, unit="x"), 10 / 8.4)
    text = p.summary(acct, fc)
    assert "the forecast from notebook 00's sweep, 2x predicted: missed" in text
    assert "the account by the step's parts, 1.25x predicted: held" in text
    assert text.endswith("the mixed step took 1.10x the fp32 step's time, where the model assumes 1x "
                         "(medians)")
    assert "forecast" not in p.summary(acct) and "not measured" in parts(steps=(10.0, 3.0)).summary(acct)
    with pytest.raises(TypeError, match="account"):
        p.summary("held")

def test_record_finds_autocast_s_ops_and_replays_them_in_both_precisions():
    assert ap.record_parts(gpt_step(SMALL, IDS, "fp32", vocab=64)) == []  # nothing in low precision
    calls = ap.record_parts(gpt_step(SMALL, IDS, "bf16", vocab=64))
    kinds = {c.kind for c in calls}
    assert {"matmul", "cast", "other"} <= kinds and kinds <= set(ap.PART_KINDS)
    mm = [c for c in calls if c.kind == "matmul"]
    assert len(mm) == 3 * (4 + 1)  # 4 linear layers and the head: forward, two backward matmuls each
    for c in calls:
        out32 = [t for t in tree_flatten(c(fp32=True))[0]
                 if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if c.kind == "cast":
            assert c(fp32=True) is None  # the fp32 step has no cast
        else:
            assert all(t.dtype == torch.float32 for t in out32), c.func  # upcast: nothing left in bf16
    first = mm[0]
    assert first().dtype == torch.bfloat16
    torch.testing.assert_close(first(fp32=True), first().float(), rtol=0.05, atol=0.05)
    # a transposed operand (the backward's weight gradient) is replayed transposed
    strides = [t.stride() for c in mm for t in c.args if isinstance(t, torch.Tensor) and t.dim() == 2]
    assert any(s[0] == 1 and s[1] > 1 for s in strides)
    ap.replay_parts(calls)()
    ap.replay_parts(calls, fp32=True)()


def test_time_autocast_parts_runs_the_steps_and_parts_in_the_same_rounds():
    r = ap.time_autocast_parts(gpt_step(SMALL, IDS, "fp32", vocab=64), gpt_step(SMALL, IDS, "bf16", vocab=64),
                               warmup=0, repeat=2, threads=1, device="cpu")
    assert r.steps.baseline.n == r.total().candidate.n == 2 and r.counts["matmul"] == 15
    assert r.predicted() > 0 and 0 < r.share()


def test_a_broadcast_operand_is_recorded_as_a_broadcast():
    def step() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.ones(4, 4) @ torch.full((4, 4), 2.0)  # bf16
        return y * torch.arange(4.0, dtype=torch.bfloat16).view(1, 4).expand(4, 4)  # a stride-0 operand

    calls = ap.record_parts(step)
    mul = next(c for c in calls if c.func.__name__.startswith("mul"))
    assert mul.args[1].stride() == (0, 1) and mul.args32[1].dtype == torch.float32
    torch.testing.assert_close(mul(fp32=True), step().float())


@pytest.mark.parametrize("call, exc, match", [
    (lambda: ap.time_autocast_parts(1, lambda: None), TypeError, "fp32_step"),
    (lambda: ap.time_autocast_parts(lambda: None, lambda: None, threads=0), ValueError, "threads"),
    (lambda: ap.time_autocast_parts(lambda: None, lambda: torch.ones(2, 2) @ torch.ones(2, 2)), ValueError,
     "autocast"),
    (lambda: ap.replay_parts([1]), TypeError, r"calls\[0\]"),
    (lambda: ap.AutocastParts(parts().steps, {"matmul": parts().steps}, {"matmul": 1}), ValueError, "keys"),
    (lambda: ap.AutocastParts(Speedup(m(1, 1), m(1, 1)), parts().parts, parts().counts), ValueError,
     "rounds"),
])
def test_bad_arguments_are_refused(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _limits(points, bf16_ceiling=4e9):
    from perfkit.hw import MachineLimits, MatmulPoint

    pts = [MatmulPoint(n, d, 1.0, r, r, t) for n, d, r, t in points]
    return MachineLimits("cpu", "test", {"float32": 2e11, "bfloat16": bf16_ceiling}, 5e10, matmul_points=pts,
                         threads=2, one_thread_flops={"float32": 1e11, "bfloat16": bf16_ceiling})


def test_swept_ratio_reads_the_sweep_not_a_raised_ceiling():
    sweep = [(128, "float32", 1e11, 1), (128, "bfloat16", 3e9, 1), (512, "float32", 1e11, 1),
             (512, "bfloat16", 2e9, 1), (512, "float32", 2e11, 2), (512, "bfloat16", 2e9, 2)]
    # the bf16 ceiling raised to 7 GFLOP/s by a step after the sweep: the forecast's r must not use it
    raised = _limits(sweep, bf16_ceiling=7e9)
    near_128 = ap.swept_ratio(raised, "bfloat16", 2 * 150**3, threads=1)
    assert (near_128.n, near_128.threads, near_128.exact_threads) == (128, 1, True)
    assert near_128.ratio == pytest.approx(0.03)  # 3e9 / 1e11, not the raised 7e9 over anything
    # two sizes swept in both dtypes on 1 thread: "nearest" names the choice it made, and the source
    assert near_128.sizes == 2 and "of the 2 sizes swept in both dtypes there" in near_128.describe()
    assert "not necessarily this run's" in near_128.describe()
    # the file keeps one run's sweep per dtype, not each point's best over runs (the old words said so)
    words = near_128.describe()
    assert "fastest tenth" in words and "the best the limits file keeps" not in words
    assert ap.swept_ratio(raised, "bfloat16", 2 * 400**3, threads=1).ratio == pytest.approx(0.02)
    # all cores: the points on every thread count (limits.threads = 2)
    every = ap.swept_ratio(raised, "bfloat16", 2 * 128**3)
    assert (every.n, every.threads) == (512, 2) and every.ratio == pytest.approx(0.01)
    assert "there): bfloat16 2 GFLOP/s, float32 200 GFLOP/s" in every.describe()
    assert "n=512 on 2 threads" in every.describe()
    # no thread count asked for was swept: the nearest one, said so
    far = ap.swept_ratio(_limits(sweep[:2]), "bfloat16", 2 * 128**3, threads=2)
    assert far.threads == 1 and not far.exact_threads and "nearest thread count" in far.describe()
    assert far.sizes == 1 and "the only size swept in both dtypes there" in far.describe()  # not a near one
    assert ap.swept_ratio(_limits(sweep[:1]), "bfloat16", 1e6) is None  # no size in both dtypes
    with pytest.raises(ValueError, match="flops_per_call"):
        ap.swept_ratio(raised, "bfloat16", 0.0)


def test_forecast_terms_names_the_term_that_missed():
    assert ap.amdahl(0.5, 2.0) == pytest.approx(1 / 0.75) and ap.amdahl(0.0, 0.01) == 1.0
    p = parts()  # f = 0.6, r = 1.5, measured 1.25x
    # the forecast had the right f and a wrong r: swapping in the parts' r lands on the measurement
    text = p.forecast_terms(0.6, 3.0)
    assert "r is the term that missed most" in text
    assert "With the parts' r (1.5, against the forecast's 3)" in text
    assert "the forecast reads 1.25x" in text and "cancelled" not in text
    # f too low and r too high: each swap alone lands past the measurement on its own side
    both = p.forecast_terms(0.2, 3.0)
    assert "partly cancelled" in both
    with pytest.raises(ValueError, match="r must be"):
        p.forecast_terms(0.5, 0.0)
