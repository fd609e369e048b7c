"""perfkit.sizing: work planned from constructed ceilings fits its budget, native or emulated."""

import pytest
import torch

from perfkit import ceilings, hw, sizing

# the two 2-core AMD EPYCs of the course's machines: native bf16, and bf16 emulated
NATIVE = hw.MachineLimits("cpu", "native", {"float32": 1.9e11, "bfloat16": 4.3e11}, 2e10)
EMULATED = hw.MachineLimits("cpu", "emulated", {"float32": 1.54e11, "bfloat16": 1.78e9}, 2e10)
PER_SAMPLE = 6 * 524_288 * 128  # tiny GPT-2 (N = 0.5 M) at 128 tokens: FLOPs per sample
BATCHES = [1, 4, 8, 16, 32]


def seconds(limits, plan, per_sample=PER_SAMPLE):
    """The planned work's seconds, recomputed here from the ceiling."""
    return plan.calls * sum(plan.batches) * per_sample / (sizing.EFFICIENCY * limits.peak_flops(plan.dtype))


def test_native_bf16_times_every_batch_within_its_share():
    plan = sizing.plan_dtype(NATIVE, "bfloat16", PER_SAMPLE, BATCHES, calls=8, budget_s=20)
    assert plan.support == "native" and plan.batches == tuple(BATCHES) and plan.calls == 8
    assert not plan.reduced and plan.predicted_s <= 20
    assert plan.predicted_s == pytest.approx(seconds(NATIVE, plan))
    assert "native; every batch (1, 4, 8, 16, 32) fits its 20 s share" in plan.note


def test_emulated_bf16_is_timed_at_small_size_only_and_says_so():
    plan = sizing.plan_dtype(EMULATED, "bfloat16", PER_SAMPLE, [16, 1, 4, 8, 32], calls=8, budget_s=20)
    assert plan.support == "emulated" and plan.reduced
    assert plan.batches == (1,)  # 1 fits (7 s), 1 + 4 would not (36 s)
    assert plan.predicted_s == pytest.approx(seconds(EMULATED, plan)) and plan.predicted_s <= 20
    assert plan.full_s == pytest.approx(441, rel=0.01)  # the sweep that took notebook 06 past 400 s
    assert plan.note.startswith("bfloat16 runs at 1.78 GFLOP/s here, 0.0116x the fp32 ceiling (154 GFLOP/s)")
    assert "emulated, so it is timed at batch 1 only: about 7 s of its 20 s share" in plan.note
    assert "every batch would take about 442 s" in plan.note


def test_fp32_on_the_same_machine_keeps_its_sweep():
    plan = sizing.plan_dtype(EMULATED, "float32", PER_SAMPLE, BATCHES, calls=8, budget_s=20)
    assert plan.batches == tuple(BATCHES) and plan.support == "native"


@pytest.mark.parametrize("budget_s", [0.5, 2.0, 5.0, 40.0, 100.0, 1000.0])
@pytest.mark.parametrize("limits", [NATIVE, EMULATED], ids=["native", "emulated"])
def test_the_plan_fits_any_budget_its_smallest_batch_fits(limits, budget_s):
    plan = sizing.plan_dtype(limits, "bfloat16", PER_SAMPLE, BATCHES, calls=8, budget_s=budget_s)
    one = PER_SAMPLE / (sizing.EFFICIENCY * limits.peak_flops("bfloat16"))  # s: batch 1, one call
    assert plan.predicted_s == pytest.approx(seconds(limits, plan))
    assert plan.calls == 8 and (plan.predicted_s <= budget_s or plan.batches == (1,))
    # greedy: the next batch would not have fit
    if len(plan.batches) < len(BATCHES):
        assert plan.calls * (sum(plan.batches) + BATCHES[len(plan.batches)]) * one > budget_s


def test_the_smallest_batch_keeps_every_call_and_says_it_overruns():
    # no caller can time fewer calls than it asked for: the note must not promise fewer
    plan = sizing.plan_dtype(EMULATED, "bfloat16", PER_SAMPLE, BATCHES, calls=8, budget_s=2)
    assert plan.batches == (1,) and plan.calls == 8 and plan.predicted_s > 2
    assert "calls instead of" not in plan.note and "the smallest alone overruns it" in plan.note
    widths = sizing.plan_dtype(EMULATED, "bfloat16", 2 * 1024 * 256, [1088, 960, 1021], calls=8, budget_s=1,
                               label="n")
    assert widths.batches == (960,) and "timed at n 960 only" in widths.note
    assert "every n would" in widths.note


def test_a_timed_probe_plans_in_proportion_to_it_not_from_the_ceiling():
    # the emulated ceiling says a batch-1 call takes ~0.9 s; the probe timed 72 ms: the plan follows the probe
    plan = sizing.plan_dtype(EMULATED, "bfloat16", PER_SAMPLE, BATCHES, calls=12, budget_s=18, probe_s=0.072)
    assert plan.batches == (1, 4, 8) and plan.probe_s == 0.072
    assert plan.predicted_s == pytest.approx(12 * 0.072 * (1 + 4 + 8))
    assert plan.full_s == pytest.approx(12 * 0.072 * sum(BATCHES))
    assert "one call at batch 1 took 72 ms, timed now" in plan.note and "GFLOP/s" not in plan.note
    assert "in proportion to the probe" in plan.note
    assert sizing.plan_dtype(EMULATED, "bfloat16", PER_SAMPLE, BATCHES, calls=12, budget_s=18).batches == (1,)
    with pytest.raises(ValueError, match="probe_s"):
        sizing.plan_dtype(EMULATED, "bfloat16", PER_SAMPLE, BATCHES, calls=12, budget_s=18, probe_s=0.0)


def test_the_ceiling_ratio_is_taken_on_matching_threads():
    # bf16's ceiling raised on 1 thread to 7 GFLOP/s, fp32's 105 on 1 thread and 204 on both cores
    limits = hw.MachineLimits("cpu", "emulated", {"float32": 2.04e11, "bfloat16": 7.07e9}, 2e10, threads=2,
                              one_thread_flops={"float32": 1.05e11, "bfloat16": 7.07e9})
    one = sizing.plan_dtype(limits, "bfloat16", PER_SAMPLE, BATCHES, calls=2, budget_s=18, probe_s=0.07,
                            threads=1)
    assert "its matmul ceiling on 1 thread 0.0673x fp32's on 1 thread" in one.note  # 7.07 / 105, not / 204
    every = sizing.plan_dtype(limits, "bfloat16", PER_SAMPLE, BATCHES, calls=2, budget_s=18, probe_s=0.07)
    assert "its matmul ceiling 0.0347x fp32's" in every.note  # all cores over all cores, as before
    with pytest.raises(ValueError, match="threads"):
        sizing.plan_dtype(limits, "bfloat16", PER_SAMPLE, BATCHES, calls=2, budget_s=18, threads=0)
    # a bf16 ceiling an operation on 1 thread raised: the matched ratio is printed beside the all-core one
    assert sizing.after_sweep_note(limits) == ""  # the sweep's own ceiling: nothing to say
    raised = hw.MachineLimits("cpu", "emulated", {"float32": 2.04e11, "bfloat16": 7.07e9}, 2e10, threads=2,
                              one_thread_flops={"float32": 1.05e11, "bfloat16": 7.07e9},
                              sources={"bfloat16": "the bf16 step's matmuls" + sizing.AFTER_SWEEP})
    note = sizing.after_sweep_note(raised)
    assert note.startswith("(that bfloat16 ceiling is not the sweep's: the bf16 step's matmuls")
    assert "on 1 thread each it is 0.0673x fp32's" in note  # 7.07 / 105, where the all-core ratio is 0.0347
    every = hw.MachineLimits("cpu", "emulated", {"float32": 2.04e11, "bfloat16": 9e9}, 2e10, threads=2,
                             one_thread_flops={"float32": 1.05e11, "bfloat16": 5e9}, sources=raised.sources)
    assert "1 thread" not in sizing.after_sweep_note(every)  # raised on all cores: the ratio above matches


@pytest.mark.parametrize("kw, exc, match", [
    (dict(limits="fast"), TypeError, "limits"), (dict(dtype="float16"), ValueError, "was not measured"),
    (dict(batches=[]), ValueError, "batches"), (dict(batches=[0, 4]), ValueError, "batches entries"),
    (dict(calls=0), ValueError, "calls"), (dict(budget_s=0), ValueError, "budget_s"),
    (dict(flops_per_sample=float("nan")), ValueError, "flops_per_sample"),
    (dict(efficiency=1.5), ValueError, "efficiency"), (dict(label=""), TypeError, "label"),
])
def test_bad_arguments_are_named(kw, exc, match):
    args = dict(limits=NATIVE, dtype="bfloat16", flops_per_sample=1e6, batches=[1], calls=1, budget_s=1.0)
    with pytest.raises(exc, match=match):
        sizing.plan_dtype(**{**args, **kw})


@pytest.mark.parametrize("cores, load, threads", [(2, 0.0, 2), (2, 1.0, 2), (2, 1.6, 1), (2, 3.0, 1),
                                                  (16, 3.0, 14), (16, 40.0, 1), (1, 0.0, 1)])
def test_timing_threads_leave_the_cores_others_use(cores, load, threads):
    assert sizing.timing_threads(cores, load) == threads


def test_pinned_threads_restores_the_setting_even_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), sizing.pinned_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
        raise RuntimeError("a failing section")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must"):
        sizing.pinned_threads(0).__enter__()


def test_ceiling_share_scales_with_the_pinned_threads():
    assert sizing.ceiling_share(1, 2) == 0.5 and sizing.ceiling_share(4, 2) == 1.0
    with pytest.raises(ValueError, match="threads"):
        sizing.ceiling_share(0, 2)


def test_mfu_is_held_against_a_ceiling_that_means_something():
    flops, step_s = 3.2e9, 1.0  # 3.2 GFLOP/s: above the emulated bf16 ceiling
    value, dtype, text = sizing.meaningful_mfu(EMULATED, flops, step_s, "bfloat16")
    assert dtype == "float32" and value == pytest.approx(3.2e9 / 1.54e11)
    assert "emulates at 1.78 GFLOP/s" in text and "(180%)" in text and "matmuls in bfloat16" in text
    # on one thread each dtype has its own ceiling: bf16 keeps 80% of its all-core rate, fp32 50%
    pinned = hw.MachineLimits("cpu", "native", {"float32": 1.9e11, "bfloat16": 4.3e11}, 2e10, threads=2,
                              one_thread_flops={"float32": 0.95e11, "bfloat16": 3.44e11})
    value, dtype, text = sizing.meaningful_mfu(pinned, flops, step_s, "bfloat16", threads=1)
    assert dtype == "bfloat16" and value == pytest.approx(3.2e9 / 3.44e11) and "on 1 thread" in text
    fp32_share = 3.2e9 / (4.3e11 * pinned.thread_share(1, "float32"))  # the old rule: fp32's share
    assert value != pytest.approx(fp32_share)
    with pytest.raises(ValueError, match="threads"):
        sizing.meaningful_mfu(pinned, flops, step_s, "bfloat16", threads=0)
    assert sizing.meaningful_mfu(EMULATED, flops, step_s, "float32")[1] == "float32"
    assert sizing.mfu_dtype(EMULATED, "bfloat16") == "float32"
    assert sizing.mfu_dtype(NATIVE, "bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match="step_s"):
        sizing.meaningful_mfu(NATIVE, flops, 0.0, "float32")


def test_threads_note_names_the_threads_the_load_and_the_share():
    note = sizing.threads_note(1, 0.5, cores=2, load=3.6)
    # a load average counts runnable tasks, not busy cores: 3.6 on 2 cores is oversubscribed
    assert note == ("timing on 1 of 2 threads (load average 3.6: on average about 2.6 tasks runnable "
                    "beside this one, more than its 2 cores run at once: absolute times and rates below can "
                    "be slower for it, ratios of steps timed interleaved less so); each step's model FLOP/s "
                    "is held against the ceilings measured on these threads (fp32's: 50% of the all-core "
                    "one): a share of a measured ceiling, not an MFU against a vendor's peak")
    assert "cores busy" not in note
    quiet = sizing.threads_note(2, 1.0, cores=2, load=0.4)
    assert "about 0.0 tasks runnable beside this one);" in quiet and "more than" not in quiet
    with pytest.raises(ValueError, match="share"):
        sizing.threads_note(1, 0.0, cores=2, load=1.0)


def fake_interleaved(t_small, t_large):
    """interleaved() that runs each callable once (counting the small one's calls) and returns
    the given times."""
    from perfkit.timing import Measurement

    def run(fns, warmup=1, repeat=7, device=None):
        fns[0](), fns[1]()
        return [Measurement(tuple(t_small), 1), Measurement(tuple(t_large), 1)]

    return run


def test_same_work_ratio_repeats_the_small_operation_to_the_large_ones_work(monkeypatch):
    calls = []
    monkeypatch.setattr(sizing, "interleaved", fake_interleaved([0.02, 0.021, 0.019], [0.01, 0.01, 0.011]))
    est = sizing.same_work_ratio(lambda: calls.append(1), lambda: None, 1.0, 10.0, repeat=3)
    assert len(calls) == 10  # ten small calls per round do the large one's work
    # rates: 10 x 1 / 0.02 s against 10 / 0.01 s
    assert est.value == pytest.approx(0.5) and est.low <= 0.5 <= est.high and "paired" in est.method
    calls.clear()
    est = sizing.same_work_ratio(lambda: calls.append(1), lambda: None, 3.0, 10.0, repeat=3)
    assert len(calls) == 3 and est.value == pytest.approx(0.5 * 9 / 10)  # 3 copies do 9 of the 10


def test_matmul_and_copy_ratios_run_on_real_tensors():
    before = torch.get_num_threads()
    for est in (sizing.matmul_ratio(16, 64, repeat=3), sizing.copy_ratio(4096, 65536, repeat=3, threads=1)):
        assert 0 < est.low <= est.value <= est.high and est.n == 3
    assert torch.get_num_threads() == before  # the pinned threads are restored


@pytest.mark.parametrize("call, exc, match", [
    (lambda: sizing.same_work_ratio(1, lambda: None, 1.0, 2.0), TypeError, "small"),
    (lambda: sizing.same_work_ratio(lambda: None, lambda: None, 0.0, 2.0), ValueError, "work_small"),
    (lambda: sizing.same_work_ratio(lambda: None, lambda: None, 1.0, 2.0, repeat=1), ValueError, "repeat"),
    (lambda: sizing.matmul_ratio(0, 64), ValueError, "n_small"),
    (lambda: sizing.matmul_ratio(16, 64, dtype="float32"), TypeError, "dtype"),
    (lambda: sizing.copy_ratio(4096, 2), ValueError, "large_bytes"),
    (lambda: sizing.copy_ratio(4096, 8192, threads=0), ValueError, "threads"),
])
def test_same_work_ratios_name_a_bad_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_ceiling_note_names_whose_ceiling_it_is():
    sweep = [hw.MatmulPoint(128, "bfloat16", 1e-3, 3.2e9, 3.26e9, threads=1),
             hw.MatmulPoint(128, "bfloat16", 1e-3, 3.3e9, 3.37e9, threads=2)]

    def limits(bf16, one, source):
        return hw.MachineLimits("cpu", "emulated", {"float32": 2e11, "bfloat16": bf16}, 2e10,
                                matmul_points=sweep, threads=2,
                                one_thread_flops={"float32": 1e11, "bfloat16": one},
                                sources={"bfloat16": source, "bfloat16, 1 thread": source})

    swept = limits(3.37e9, 3.26e9, "n=128 on 1 thread")
    assert ceilings.ceiling_note(swept, "bfloat16", 3.0e9, 1) == (
        "92% of the bfloat16 ceiling on 1 thread, 3.26 GFLOP/s (notebook 00's sweep: n=128 on 1 thread)")
    # the step's own matmuls raised it in an earlier run: the old sentence read "96% of the bf16
    # ceiling" with no word on whose it was
    raised = limits(7.81e9, 7.0e9, "the bf16 step's matmuls replayed alone at batch 4" + sizing.AFTER_SWEEP)
    note = ceilings.ceiling_note(raised, "bfloat16", 6.72e9, 1, mine="bf16 step")
    assert note.startswith(
        "96% of the bfloat16 ceiling on 1 thread, 7 GFLOP/s, set by the bf16 step's matmuls replayed alone "
        "at batch 4 after notebook 00's sweep, in this run or an earlier one (the best bfloat16 sweep point "
        "on 1 thread in the sweep the limits file keeps, that of the notebook 00 run that set the all-cores "
        "ceiling, not always this run's, reached 3.26 GFLOP/s; this rate is 2.06x that)")
    # the old text called that point "the highest of notebook 00's runs": the merged limits keep
    # the sweep of the run that set the all-cores ceiling, so another run's 1-thread point can be higher
    # the old sentence, "which the groups=1 convolution set after notebook 00's sweep", read as this run's
    # when the ceiling came from an earlier one: with the limits the notebook loaded, it says which
    assert "before this notebook ran" in ceilings.ceiling_note(raised, "bfloat16", 6.72e9, 1, loaded=raised)
    assert ceilings.ceiling_source(raised, "bfloat16", 1, loaded=swept).endswith(", in this notebook")
    assert ceilings.ceiling_source(swept, "bfloat16", 1) == "notebook 00's sweep: n=128 on 1 thread"
    assert "not how much of the machine it used" in note
    assert "not how much" not in ceilings.ceiling_note(raised, "bfloat16", 6.72e9, 1, mine="MLP")
    with pytest.raises(ValueError, match="rate"):
        ceilings.ceiling_note(raised, "bfloat16", 8e9, 1)  # above the ceiling: observe it first
