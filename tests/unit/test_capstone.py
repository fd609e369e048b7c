"""perfkit.profiling.capstone (the capstone's fix loop) and viz.capstone's round display,
on hand-made job results: no torchrun here (tests/notebooks runs the real loop)."""

import dataclasses
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from perfkit.hw import MachineLimits
from perfkit.profiling.capstone import (
    MIN_TESTABLE_SHARE,
    CapstoneJob,
    FixLoop,
    Round,
    job_peak,
    next_fix,
    round_speedup,
)
from perfkit.profiling.capstone_explain import explain_round, phase_ms
from perfkit.profiling.capstone_past import past_bound
from perfkit.profiling.capstone_text import (
    Pick,
    loose_bound,
    percent2,
    reads_pick,
    still_listed,
)
from perfkit.stats import Estimate
from perfkit.viz.capstone import (
    context_outcome,
    dropped_text,
    pick_text,
    plot_waterfall,
    round_context,
    round_prediction,
    round_text,
    seams_text,
    show_round,
    total_text,
    waterfall_shares,
)

LIMITS = MachineLimits("cpu", "test", {"float32": 1e9, "bfloat16": 4e9}, 1e9)
FIX_FOR = {"data": ("data",), "sync": ("sync", "ddp"), "communication": ("ddp",),
           "compute": ("attention", "batch")}
JOB = CapstoneJob(Path("train.py"), Path("/tmp/out"), 5.0, skip=1, window=2, measure=3)  # measured from 4


def result(steps, tokens=100, fixes=(), k=None):
    return {"step_times_s": list(steps), "tokens_per_step": tokens, "fixes": list(fixes), "n_params": 10_000,
            "seq_len": 8, "losses": [5.0 - 0.1 * i for i in range(len(steps))], "window_tokens": 200,
            "steps_to_target": k}


def report(findings, shares, steps=(0.2, 0.2)):
    base = {"data": 0.0, "sync": 0.0, "communication": 0.0, "forward": 0.3, "backward": 0.4}
    return {"findings": [{"severity": s, "kind": k, "share": v} for s, k, v in findings],
            "shares": {**base, **shares}, "step_times_s": list(steps)}


def test_job_args_and_reading_its_result():
    full, again = JOB.args(("data", "sync")), JOB.args(("data",), to_target=False)
    assert full[full.index("--min-steps") + 1] == "7" and "--target-loss" in full  # 1 + 2 + 1 + 3
    assert full[full.index("--fix") + 1] == "data,sync" and full[2].endswith("data-sync")
    assert "--target-loss" not in again and again[2].endswith("data-again") and again[-3] == "7"
    assert JOB.args(())[JOB.args(()).index("--fix") + 1] == "none"
    r = result([9, 1, 9, 9, 0.5, 0.1, 0.2, 0.01, 0.01])
    # skip, window and the trace step dropped; later steps too: every run is read on the same steps
    assert JOB.after_window(r) == [0.5, 0.1, 0.2]
    assert JOB.tokens_per_s(r) == pytest.approx(100 / 0.2)
    assert JOB.mfu(r, 1e9, tokens_per_s=250.0) == pytest.approx(JOB.mfu(r, 1e9) / 2)
    # the window (steps 1-3) counted at the median measured step: 0.2 s
    assert JOB.clean_seconds(r) == pytest.approx([9, 9.2, 9.4, 9.6, 10.1, 10.2, 10.4, 10.41, 10.42])
    assert JOB.reached(result(r["step_times_s"], k=5)) == (pytest.approx(10.1), 500)
    assert JOB.reached(r) is None
    t, v = JOB.loss_curve(r, lambda losses, tps, w: [None, *losses[1:]])
    assert t[0] == pytest.approx(9.2) and len(t) == len(v) == 8
    # the data's preparation before the first step (--fix data tokenizes there) is the job's time too
    prepared = {**result(r["step_times_s"], k=5), "data_prep_s": 0.4}
    assert JOB.clean_seconds(prepared)[0] == pytest.approx(9.4)
    assert JOB.reached(prepared) == (pytest.approx(10.5), 500)
    with pytest.raises(ValueError, match="measure"):
        CapstoneJob(Path("x"), Path("y"), 5.0, measure=0)


def test_job_peak_and_mfu():
    assert job_peak(LIMITS, result([1], fixes=("bf16",))) == 4e9
    assert job_peak(LIMITS, result([1], fixes=("data",))) == 1e9
    r = result([1, 1, 1, 1, 0.1, 0.1])
    assert JOB.mfu(r, 2e9) == pytest.approx(JOB.mfu(r, 1e9) / 2)


def test_one_run_before_is_an_unpaired_median_ratio_scaled_by_tokens():
    before = result([1] * 4 + [0.40, 0.42, 0.41, 0.39])
    after = result([1] * 4 + [0.80, 0.82, 0.79, 0.81], tokens=400)  # 4x tokens, 2x the time
    est = round_speedup(JOB, [before], after)
    assert est.value == pytest.approx((0.41 / 0.80) * 4)  # the measure=3 steps after the window
    assert est.low <= est.value <= est.high and est.high < 2.2 and "separate runs" in est.method


def test_two_runs_before_judge_against_their_mean_and_hold_each():
    job = replace(JOB, measure=6)  # separate runs' medians need 6 steps each for an interval
    before, again = result([1] * 4 + [0.4] * 6), result([1] * 4 + [0.5] * 6)
    after = result([1] * 4 + [0.2, 0.21, 0.19, 0.2, 0.2, 0.2])
    est = round_speedup(job, [before, again], after)
    mean_before = statistics.mean([100 / 0.4, 100 / 0.5])
    assert est.value == pytest.approx((100 / 0.2) / mean_before)
    assert est.low <= 2.0 and est.high >= 2.5  # widened to each before alone
    # what such an interval covers is said once, with the first round, not in every interval's method
    assert est.method.endswith("widened to the ratio against each run before") and "label" not in est.method
    first = Round(1, Pick("sync", 0.5, 2.0, "m", "sync"), est, 225.0, 500.0, {}, True, befores=2)
    said = ("Each such interval, widened to the ratio against each run before, here and below: of the steps' "
            "spread it covers at least what its label prints, not how far separate runs move.")
    assert round_text(first).count(said) == 1 and said not in round_text(replace(first, number=2))
    short = round_speedup(JOB, [before, again], after)  # 3 steps a run: too few for an interval
    assert short.needs == 6 and short.low == short.value == short.high
    with pytest.raises(ValueError, match="befores"):
        round_speedup(JOB, [], after)


def test_next_fix_takes_the_worst_finding_with_a_fix_left():
    rep = report([("info", "compute", 0.7), ("high", "sync", 0.2), ("medium", "data", 0.1)],
                 {"sync": 0.2, "communication": 0.1, "data": 0.1})
    r = result([0.2] * 8)
    pick = next_fix(rep, r, JOB, [], ("data", "sync", "ddp"), FIX_FOR, 1e9)
    # info is skipped; the reads' fix: its reads (no collective waited for between them) + communication
    assert (pick.kind, pick.fix, pick.share) == ("sync", "sync", pytest.approx(0.3))
    assert pick.bound == pytest.approx(1 / 0.7) and pick.phases == ("sync", "communication")
    # with sync applied, ddp answers sync and communication: their shares add
    pick = next_fix(rep, r, JOB, ["sync"], ("data", "sync", "ddp"), FIX_FOR, 1e9)
    assert (pick.fix, pick.share) == ("ddp", pytest.approx(0.3)) and "sync + communication" in pick.model
    assert next_fix(rep, r, JOB, ["sync"], ("data", "sync"), FIX_FOR, 1e9).fix == "data"  # ddp unavailable
    assert not pick.untested  # a 30 % share: a bound that can fail


def test_a_finding_with_a_share_too_small_to_test_is_context():
    # the sync finding fires on its count (29 reads a step) with 1 % of the step: a bound of 1.01x
    rep = report([("medium", "sync", 0.01)], {"sync": 0.01})
    pick = next_fix(rep, result([0.2] * 8), JOB, [], ("ddp",), FIX_FOR, 1e9)
    assert pick.bound == pytest.approx(1 / 0.99) and "fired on its count" in pick.untested
    assert "1.0%" in pick.untested
    edge = report([("medium", "sync", MIN_TESTABLE_SHARE)], {"sync": MIN_TESTABLE_SHARE})
    assert not next_fix(edge, result([0.2] * 8), JOB, [], ("ddp",), FIX_FOR, 1e9).untested


def test_the_reads_fix_is_bounded_by_the_reads_not_the_collective_between_them():
    # a CPU DDP job: 25.4 % sync, of which 21.6 % passed with DDP's all-reduce in flight between two
    # reads, which removing the loop's reads leaves; judged on the whole sync share (1.34x) it was a test
    rep = {**report([("medium", "sync", 0.254)], {"sync": 0.254, "communication": 0.116}),
           "sync_comm_share": 0.216, "sync_read_share": 0.0003}
    # ranked by the gain each fix can remove, not by the finding's whole share: ddp (sync + communication,
    # 37.0%) comes before the fix of the reads (3.8% + 11.6%), though the sync finding named both
    first = next_fix(rep, result([0.2] * 8), JOB, [], ("sync", "ddp"), FIX_FOR, 1e9)
    assert first.fix == "ddp" and first.share == pytest.approx(0.37)
    pick = next_fix(rep, result([0.2] * 8), JOB, ["ddp"], ("sync", "ddp"), FIX_FOR, 1e9)
    assert pick == reads_pick(rep, "sync") and pick.share == pytest.approx(0.038 + 0.116)
    assert "less the 21.6% that passed with a collective in flight" in pick.model
    assert "the reads and the loop between them, is 3.8% of a profiled step" in pick.untested  # context
    assert "at most 3.8% of an unprofiled one" in pick.untested  # a profiled step no slower: times 1
    # reads that cost time themselves (a GPU's): a bound that can fail
    gpu = {**rep, "sync_comm_share": 0.0}
    assert not reads_pick(gpu, "sync").untested and reads_pick(gpu, "sync").share == pytest.approx(0.37)
    ddp = next_fix(rep, result([0.2] * 8), JOB, ["sync"], ("sync", "ddp"), FIX_FOR, 1e9)
    assert ddp.share == pytest.approx(0.37)  # ddp removes the wait too: the whole sync share
    with pytest.raises(ValueError, match="report must be"):
        reads_pick({"findings": []}, "sync")


def test_the_data_share_is_counted_against_an_unprofiled_step():
    r = result([1] * 4 + [0.1] * 4)  # unprofiled 0.1 s
    slow = report([("high", "data", 0.3)], {"data": 0.3}, steps=(0.2, 0.2))  # profiled 2x slower
    assert next_fix(slow, r, JOB, [], ("data",), FIX_FOR, 1e9).share == pytest.approx(0.6)
    # with the other rank waiting for it at the collectives: that wait can go too
    waits = report([("high", "data", 0.2)], {"data": 0.2, "communication": 0.15}, steps=(0.2, 0.2))
    pick = next_fix(waits, r, JOB, [], ("data",), FIX_FOR, 1e9)
    assert pick.share == pytest.approx(0.7) and pick.bound == pytest.approx(1 / 0.3)
    assert "collectives that wait for it" in pick.model
    capped = report([("high", "data", 0.8)], {"data": 0.8}, steps=(0.2, 0.2))
    assert next_fix(capped, r, JOB, [], ("data",), FIX_FOR, 1e9).share == pytest.approx(0.99)
    fast = report([("high", "data", 0.3)], {"data": 0.3}, steps=(0.05, 0.05))  # never scaled down
    assert next_fix(fast, r, JOB, [], ("data",), FIX_FOR, 1e9).share == pytest.approx(0.3)


def test_every_waste_fix_is_bounded_against_an_unprofiled_step_by_one_rule():
    r = result([1] * 4 + [0.1] * 4)  # unprofiled 0.1 s; profiled 0.2 s: the window's ms over 0.1 s
    rep = {**report([("high", "sync", 0.2)], {"sync": 0.2, "communication": 0.1}, steps=(0.2, 0.2)),
           "sync_comm_share": 0.17}
    ddp = next_fix(rep, r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9)
    assert ddp.share == pytest.approx(0.6) and "times 2.00" in ddp.model  # (0.2 + 0.1) * 2
    reads = next_fix(rep, r, JOB, [], ("sync",), FIX_FOR, 1e9)
    assert reads.share == pytest.approx((0.03 + 0.1) * 2) and "times 2.00" in reads.model
    # the testability rule reads the share of an unprofiled step: 3 % profiled, times 2, is 6 %: testable
    assert not reads.untested
    few = reads_pick({**rep, "sync_comm_share": 0.18}, "sync", 2.0)  # 2 % profiled, 4 % unprofiled
    assert "is 2.0% of a profiled step, at most 4.0% of an unprofiled one" in few.untested
    assert "bounds the gain from removing them at 1.04x" in few.untested
    counted = report([("medium", "sync", 0.03)], {"sync": 0.03}, steps=(0.2, 0.2))  # 3 % profiled, 6 %
    assert not next_fix(counted, r, JOB, [], ("ddp",), FIX_FOR, 1e9).untested
    counted = report([("medium", "sync", 0.02)], {"sync": 0.02}, steps=(0.2, 0.2))  # 2 % profiled, 4 %
    assert "at most 4.0% of an unprofiled one" in next_fix(counted, r, JOB, [], ("ddp",), FIX_FOR,
                                                           1e9).untested
    capped = report([("high", "sync", 0.4)], {"sync": 0.4, "communication": 0.2}, steps=(0.2, 0.2))
    assert next_fix(capped, r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9).share == pytest.approx(0.99)
    # a profiled step faster than an unprofiled one is load, not the profiler: the share stays, and it is said
    fast = {**rep, "step_times_s": [0.05, 0.05]}
    ddp = next_fix(fast, r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9)
    assert ddp.share == pytest.approx(0.3)
    assert "mean measured 0.50x the unprofiled steps' mean, 50.0 over 100.0 ms; below 1, so load" in ddp.model
    assert "measured 0.50x" in reads_pick(fast, "sync", 0.5).model
    with pytest.raises(ValueError, match="slowdown"):
        reads_pick(rep, "sync", 0.0)


def test_compute_fixes_follow_once_no_waste_is_left():
    rep, r = report([("info", "compute", 0.7)], {}), result([1] * 4 + [0.1] * 4)
    pick = next_fix(rep, r, JOB, [], ("attention", "batch"), FIX_FOR, 1e9)
    assert (pick.fix, pick.share) == ("attention", pytest.approx(0.99))  # forward + backward, 2x profiled
    pick = next_fix(rep, r, JOB, ["attention"], ("attention", "batch"), FIX_FOR, 1e9)
    assert pick.fix == "batch" and pick.bound == pytest.approx(1 / JOB.mfu(r, 1e9))
    assert next_fix(rep, r, JOB, ["attention", "batch"], ("attention", "batch"), FIX_FOR, 1e9) is None


def test_compute_bound_is_taken_over_an_unprofiled_step_as_the_wastes_are():
    # profiled steps 1.2x the unprofiled: forward + backward 70 % of a profiled step is at most 84 %
    # of an unprofiled one, a bound of 6.25x, not the 3.33x the profiled share alone gives
    rep, r = report([("info", "compute", 0.7)], {}, steps=(0.12, 0.12)), result([1] * 4 + [0.1] * 4)
    pick = next_fix(rep, r, JOB, [], ("attention", "batch"), FIX_FOR, 1e9)
    assert pick.share == pytest.approx(0.84) and pick.bound == pytest.approx(6.25)
    assert "70.0% of a profiled step, 84.0 ms, times 1.20" in pick.model
    assert "84.0% of an unprofiled step" in pick.untested


def test_loose_compute_bounds_are_context_and_the_rest_can_fail():
    rep, r = report([("info", "compute", 0.7)], {}), result([1] * 4 + [0.1] * 4)
    attention = next_fix(rep, r, JOB, [], ("attention", "batch"), FIX_FOR, 1e9)
    batch = next_fix(rep, r, JOB, ["attention"], ("attention", "batch"), FIX_FOR, 1e9)
    assert "does not measure apart" in attention.untested and attention.phases == ("forward", "backward")
    assert "peak is not what limits it" in batch.untested and batch.phases == ()
    # with the batch's factor known, that factor is the bound, and it can fail
    four = dataclasses.replace(JOB, batch_factor=4.0)
    tight = next_fix(rep, r, four, ["attention"], ("attention", "batch"), FIX_FOR, 1e9)
    assert tight.fix == "batch" and tight.bound == 4.0 and not tight.untested and tight.by_tokens
    assert "4x the tokens" in tight.model
    with pytest.raises(ValueError, match="batch_factor"):
        dataclasses.replace(JOB, batch_factor=0.5)
    sync = next_fix(report([("high", "sync", 0.2)], {"sync": 0.2, "communication": 0.1}), r, JOB, ["sync"],
                    ("ddp",), FIX_FOR, 1e9)
    assert sync.untested == "" and sync.phases == ("sync", "communication")  # ddp: both kinds it answers
    data = next_fix(report([("high", "data", 0.2)], {"data": 0.2}), r, JOB, [], ("data",), FIX_FOR, 1e9)
    assert data.untested == "" and data.phases == ("data", "communication")
    rnd = Round(4, attention, Estimate(1.04, 0.9, 1.2, 0.9, 8, "m"), 100.0, 104.0, {}, True)
    text = round_context(rnd)
    # 70% x 2.00 = 140% of an unprofiled step: no finite bound, never "at most 100x" from a clipped share
    assert "Context, not a prediction" in text and "no finite bound" in text and "1.04x (90% interval" in text
    assert "140.0% of an unprofiled step" in text and "at most 100x" not in text
    assert "holds 1x" in text and "does not measure apart" in text
    measured = replace(rnd, explain={"inconclusive": "The bound's phases went forward 3.0 -> 2.0 ms."})
    assert round_context(measured).endswith("none. The bound's phases went forward 3.0 -> 2.0 ms.")
    above = replace(rnd, speedup=Estimate(1.5, 1.2, 1.9, 0.9, 8, "m"))
    assert "lies above 1x" in round_context(above)
    below = replace(rnd, speedup=Estimate(0.465, 0.344, 0.711, 0.9, 16, "m"))  # wholly below 1x: slower, said
    assert "lies wholly below 1x: the job ran slower with the fix here" in round_context(below)
    assert "this run does not separate them" in round_context(below)  # not blamed on the fix alone
    assert "calls missed; but this bound cannot test the fix" in round_context(below)
    assert "holds 1x" not in round_context(below)
    with pytest.raises(ValueError, match="can fail"):
        round_context(replace(rnd, pick=sync))
    with pytest.raises(TypeError, match="r must be"):
        round_context("round")


def test_explanations_name_what_was_measured():
    rep = report([], {"communication": 0.12})
    held = explain_round(Pick("sync", 0.5, 2.0, "m", "sync"), 1.5, rep, 1.0, repeated=True)
    # Amdahl's terms: 1.5x removed 1/3 of the step, two thirds of the 50 % share (not (1.5-1)/(2-1) = 50 %)
    assert held["held"].startswith("It removed 33% of the step, 67% of the 50.0% the bound allows")
    assert "three runs" in held["above"]
    assert "profiler" not in held["above"]  # the profiler did not stretch the steps
    data = explain_round(Pick("data", 0.5, 2.0, "m", "data", ("data", "communication")), 1.5, rep, 1.6,
                         repeated=False)
    assert "50.0%) the bound allows" in data["above"] and "one run of each" in data["above"]
    assert "run before and after" in held["below"] and "one run before" in data["below"]
    capped = explain_round(Pick("data", 0.99, 100.0, "m", "data"), 1.5, rep, 1.6, repeated=False)
    assert "1.6x" in capped["held"]
    slower = explain_round(Pick("sync", 0.5, 2.0, "m", "sync"), 0.9, rep, 1.0, repeated=True)["below"]
    assert "the fix cost more than it saved" in slower  # its interval lies below 1x (the default)
    unclear = explain_round(Pick("sync", 0.5, 2.0, "m", "sync"), 0.9, rep, 1.0, repeated=True,
                            clear_below=False)["below"]
    assert "the fix cost more than it saved on" not in unclear and "dropped" in unclear
    assert "cannot tell the fix from no change" in unclear
    # two runs before that differ: a load on the middle run alone reads the same as a costly fix
    drifted = explain_round(Pick("sync", 0.5, 2.0, "m", "sync"), 0.9, rep, 1.0, repeated=True,
                            befores_tps=(10000.0, 17700.0))["below"]
    assert "the fix cost more than it saved on" not in drifted and "differed by 1.77x" in drifted
    # runs before 1.90x apart: every outcome names them, and the ratio against each beside the bound
    swing = explain_round(Pick("compute", 0.1, 4.0, "m", "batch", by_tokens=True), 3.02, rep, 1.3,
                          repeated=True, befores_tps=(22147.0, 11686.0))
    said = ("ran at 22,147 and 11,686 tokens/s, 1.90x apart: against each alone the fix measures "
            "2.31x and 4.37x")
    assert all(said in swing[k] for k in ("held", "above", "below", "inconclusive"))
    assert "on both sides of 4x: which of those two runs" in swing["inconclusive"]
    steady = explain_round(Pick("sync", 0.5, 2.0, "m", "sync"), 1.5, rep, 1.0, repeated=True,
                           befores_tps=(10000.0, 10500.0))
    assert "inconclusive" not in steady and "tokens/s" not in steady["held"]
    batch = explain_round(Pick("compute", 0.01, 100.0, "m", "batch"), 3.0, rep, 1.3, repeated=True)
    assert "1.3x" in batch["above"]  # bounded by the peak (1 / MFU)
    four = explain_round(Pick("compute", 0.01, 4.0, "m", "batch", by_tokens=True), 2.0, rep, 1.3,
                         repeated=True)
    assert "4x the tokens took 2.00x as long" in four["held"] and "load fell" in four["above"]
    assert "inconclusive" not in held  # without the report after, the rule's own sentence, no stock one


def test_explanations_name_each_phase_in_ms_before_and_after():
    # before: a 10 ms profiled step; after: 8 ms
    before = {**report([], {"sync": 0.3, "communication": 0.2, "forward": 0.3, "backward": 0.2},
                       steps=(0.01,)), "syncs_per_step": 57}
    after = {**report([], {"sync": 0.05, "communication": 0.2, "forward": 0.125, "backward": 0.25},
                      steps=(0.008,)), "syncs_per_step": 29}
    assert phase_ms(before) == pytest.approx({"data": 0, "sync": 3, "communication": 2, "forward": 3,
                                              "backward": 2})
    ddp = Pick("sync", 0.5, 2.0, "m", "ddp", ("sync", "communication"))
    words = explain_round(ddp, 2.4, before, 1.0, repeated=True, after_report=after)
    # the bound's phases, and the syncs, in the inconclusive sentence
    assert "sync 3.0 -> 0.4 ms, communication 2.0 -> 1.6 ms" in words["inconclusive"]
    assert "57 -> 29" in words["inconclusive"] and words["inconclusive"] in words["below"]
    assert "(together 5.0 -> 2.0 ms) per profiled step" in words["inconclusive"]
    # the profiled window gained 1.25x (10 -> 8 ms) against the runs' 2.4x: said whatever the outcome
    window = ("The profiled window gained 1.25x (10.0 -> 8.0 ms, the profiled steps' mean) against the runs' "
              "2.40x")
    assert all(window in words[k] for k in ("held", "below", "inconclusive"))
    assert "measured in windows that changed otherwise than the runs did" in words["inconclusive"]
    # above the bound in the runs (2.4x against 2x): the ms the fix removed from the unprofiled step
    # against the ms the bound allows, and the phase outside the bound whose time fell
    assert ("the fix measures 2.40x: it removed 5.8 ms of that run's 10.0 ms unprofiled step, more than the "
            "5.0 ms (50.0%) the bound allows") in words["above"]
    outside = "outside the sync + communication the bound counts, forward 3.0 -> 1.0 ms"
    assert window in words["above"] and outside in words["above"]
    # the window crossed it too (2.5x against 2x): the phase outside the bound whose time fell (forward
    # 3 -> 0.8 ms), not backward (2 -> 2)
    faster = {**report([], {"sync": 0.1, "communication": 0.2, "forward": 0.2, "backward": 0.5},
                       steps=(0.004,)), "syncs_per_step": 29}
    crossed = explain_round(ddp, 2.4, before, 1.0, repeated=True, after_report=faster)["above"]
    assert "outside the sync + communication the bound counts, forward 3.0 -> 0.8 ms" in crossed
    assert "backward" not in crossed and "find_unused_parameters" in crossed
    unalike = explain_round(ddp, 2.4, before, 1.0, repeated=True, after_report=after, slowdown_after=1.57)
    assert ("mean took 1.00x the unprofiled steps' mean before the fix and 1.57x after it"
            in unalike["held"])
    assert "the window's times" not in unalike["above"]  # an identity, not a cause: not said
    close = explain_round(ddp, 1.3, before, 1.0, repeated=True, after_report=after)["above"]
    assert "The profiled window gained" not in close  # 1.25x against 1.3x: the window's phases hold the gain
    batch = explain_round(Pick("compute", 0.1, 4.0, "m", "batch", by_tokens=True), 5.0, before, 1.0,
                          repeated=True, after_report=after, tokens_x=4.0)
    assert "profiled window" not in batch["held"]  # 4x the tokens in 0.8x the time: 5x, as the runs
    other = explain_round(Pick("data", 0.2, 1.2, "m", "data", ("data", "communication")), 1.5, before, 1.0,
                          repeated=False, after_report=after)
    assert "syncs" not in other["inconclusive"] and "find_unused" not in other["above"]
    assert "sync 3.0 -> 0.4 ms" in other["above"]  # outside data + communication, the largest drop first
    assert "rose" not in words["inconclusive"]  # every phase of the bound fell
    # the phase the fix targets rose while its reads halved: said, split as the diagnosis splits the
    # phase (the waits with a collective in flight, the reads and the loop), with no time per read
    slower = {**report([], {"sync": 0.5, "communication": 0.2, "forward": 0.1, "backward": 0.2},
                       steps=(0.012,)), "syncs_per_step": 28}
    sync = explain_round(Pick("sync", 0.3, 1.4, "m", "sync", ("sync",)), 1.0, before, 1.0,
                         repeated=True, after_report=slower)
    said = sync["inconclusive"]
    assert "sync 3.0 -> 6.0 ms" in said and "rose though the reads fell" in said
    assert "per read" not in said and "the reads and the loop between them 3.0 -> 6.0 ms" in said
    assert "the reads' own time rose more than the waits: the reads the fix left cost more each" in said
    waits = explain_round(Pick("sync", 0.3, 1.4, "m", "sync", ("sync",)), 1.0,
                          {**before, "sync_comm_share": 0.2}, 1.0, repeated=True,
                          after_report={**slower, "sync_comm_share": 0.45})["inconclusive"]
    assert "which the bound takes this fix to leave) went 2.0 -> 5.4 ms" in waits
    assert "1.0 -> 0.6 ms per profiled step: the waits rose more than the reads' own time" in waits
    assert "premise" not in waits
    # as run: the part with a collective in flight, which the bound took the sync fix to leave, fell
    # far more than the reads' own time, and the text still said the fix cannot remove it
    fell = explain_round(Pick("sync", 0.3, 1.4, "m", "sync", ("sync",)), 1.38,
                         {**before, "sync_comm_share": 0.2}, 1.0, repeated=True,
                         after_report={**report([], {"sync": 0.1}, steps=(0.012,)), "syncs_per_step": 28,
                                       "sync_comm_share": 0.05})["inconclusive"]
    assert "which the bound takes this fix to leave) went 2.0 -> 0.6 ms" in fell
    assert "that part fell 1.4 ms, so the bound's premise, that this fix leaves it, failed" in fell
    unsplit = explain_round(Pick("sync", 0.3, 1.4, "m", "sync", ("sync",)), 1.38,
                            {**before, "sync_comm_share": 0.2}, 1.0, repeated=True,
                            after_report={**report([], {"sync": 0.05}, steps=(0.012,)), "syncs_per_step": 28})
    assert "at most 0.6 ms (the sync phase after, not split)" in unsplit["inconclusive"]
    assert "fell at least 1.4 ms" in unsplit["inconclusive"]
    kept = explain_round(Pick("sync", 0.3, 1.4, "m", "sync", ("sync",)), 1.38,
                         {**before, "sync_comm_share": 0.2}, 1.0, repeated=True,
                         after_report={**report([], {"sync": 0.3}, steps=(0.009,)), "syncs_per_step": 28,
                                       "sync_comm_share": 0.2})
    assert "premise" not in kept.get("inconclusive", "")
    comm = explain_round(Pick("communication", 0.3, 1.4, "m", "ddp", ("communication",)), 1.0, before, 1.0,
                         repeated=True,
                         after_report={**slower, "shares": {**slower["shares"], "communication": 0.3}})
    assert "Communication rose, though the fix targets it; this run does not time why" in comm["inconclusive"]
    # where the diagnoses recorded the overlap, its fall says why: exposed now what ran under backward
    overlap = explain_round(Pick("communication", 0.3, 1.4, "m", "ddp", ("communication",)), 1.0,
                            {**before, "comm_overlapped_share": 0.3}, 1.0, repeated=True,
                            after_report={**slower, "shares": {**slower["shares"], "communication": 0.3},
                                          "comm_overlapped_share": 0.0})["inconclusive"]
    assert "under other work fell 3.0 -> 0.0 ms per profiled step" in overlap  # a 1.6 ms rise: explained
    assert "does not time" not in overlap and "covers the 1.6 ms communication rose by" in overlap
    part = explain_round(Pick("communication", 0.3, 1.4, "m", "ddp", ("communication",)), 1.0,
                         {**before, "comm_overlapped_share": 0.05}, 1.0, repeated=True,
                         after_report={**slower, "shares": {**slower["shares"], "communication": 0.3},
                                       "comm_overlapped_share": 0.0})["inconclusive"]
    assert "fell 0.5 -> 0.0 ms" in part
    assert "31% of the 1.6 ms it rose; this run does not time the rest" in part
    assert "start their all-reduce later in backward" in overlap
    with pytest.raises(ValueError, match="report must be"):
        explain_round(ddp, 2.4, before, 1.0, repeated=True, after_report={"shares": {}})
    with pytest.raises(TypeError, match="report must be"):
        phase_ms([0.1])


def test_a_window_whose_profiler_weighed_alike_names_the_run_it_belongs_to():
    # the window gained 1.25x (10 -> 8 ms), the runs 1.5x, the profiler's factor 1.11 before and after:
    # the runs before, 6,000 and 4,000 tokens/s, drifted; against the first, the window's, 1.25x
    before = {**report([], {"sync": 0.3, "communication": 0.2}, steps=(0.01,)), "syncs_per_step": 57}
    after = {**report([], {"sync": 0.05, "communication": 0.2}, steps=(0.008,)), "syncs_per_step": 29}
    ddp = Pick("sync", 0.5, 2.0, "m", "ddp", ("sync", "communication"))
    said = explain_round(ddp, 1.5, before, 1.11, repeated=True, after_report=after, slowdown_after=1.11,
                         befores_tps=(6000.0, 4000.0))["inconclusive"]
    assert ("the window before the fix is the run before at 6,000 tokens/s, against which alone the fix "
            "measures 1.25x, within a tenth of the window's gain: the other run before moved the runs' mean"
            in said)
    assert "did not weigh on the two alike" not in said and "the runs themselves" not in said
    alone = explain_round(ddp, 1.5, before, 1.11, repeated=True, after_report=after, slowdown_after=1.11,
                          befores_tps=(5000.0, 4900.0))["inconclusive"]  # runs before within a tenth
    assert "the runs themselves moved otherwise than their windows" in alone
    assert "window before the" not in alone
    unalike = explain_round(ddp, 1.5, before, 1.11, repeated=True, after_report=after, slowdown_after=1.6,
                            befores_tps=(4000.0, 6000.0))["inconclusive"]
    assert "did not weigh on the two alike" in unalike
    assert ("at 4,000 tokens/s, against which alone the fix measures 1.88x, above the window's gain by more "
            "than a tenth: even against its own run, the window moved otherwise" in unalike)


def test_a_gain_no_larger_than_its_runs_drift_is_not_credited():
    pick = Pick("compute", 0.7, 3.8, "m", "attention", ("forward", "backward"), untested="it counts all",
                context="broader than the fix")
    rnd = Round(4, pick, Estimate(1.45, 1.01, 1.91, 0.9, 16, "m"), 15734.0, 22815.0, {}, True,
                befores_tps=(19402.0, 12067.0))
    assert rnd.runs_apart == pytest.approx(1.608, abs=1e-3) and rnd.within_drift
    text = round_context(rnd)
    assert "a gain this run can show" not in text
    assert "the runs before lay 1.61x apart, at least as far as the 1.45x measured lies from 1x" in text
    assert context_outcome(rnd) == ("context (broader than the fix), faster, within the runs' drift "
                                    "(1.61x apart)")
    steady = replace(rnd, befores_tps=(19402.0, 17000.0))
    assert not steady.within_drift and context_outcome(steady) == "context (broader than the fix), faster"
    assert "a gain this run can show" in round_context(steady)
    assert context_outcome(replace(rnd, speedup=Estimate(1.02, 0.9, 1.2, 0.9, 16, "m"))) == (
        "context (broader than the fix), interval holds 1x")
    fig = plot_waterfall([("a", 2.0), ("b", 1.45)], total=2.9, drifted=["b"])
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "within the runs' drift" in labels[1] and "drift" not in labels[0]
    colors = [tuple(round(c, 3) for c in b.get_facecolor()[:3]) for b in fig.axes[0].patches]
    assert colors[0] != colors[1]
    grey = plot_waterfall([("a", 2.0), ("b", 1.05)], total=2.1, unresolved=["b"], drifted=["b"])
    assert "within the runs' drift" not in grey.axes[0].texts[1].get_text()  # grey says more
    with pytest.raises(ValueError, match="drifted"):
        plot_waterfall([("a", 2.0)], drifted=["c"])
    with pytest.raises(TypeError, match="drifted"):
        plot_waterfall([("a", 2.0)], drifted="a")


def test_a_crossed_bound_is_explained_against_the_run_it_was_set_from():
    # the data round as measured: bound 2.21x set from the first run before (58.2 ms a profiled step, 1.70x
    # an unprofiled one: 34.2 ms); the runs before read 7,481 and 5,602 tokens/s, the fix 2.91x against
    # their mean, 2.54x against the first alone; the window gained 2.13x and the profiler stretched the
    # step 2.03x after the fix: 2.13 x 2.03 / 1.70 is the 2.54x against the first run, not the 2.91x
    before = {**report([], {"data": 0.285, "communication": 0.036}, steps=(0.0582,)), "syncs_per_step": 57}
    after = {**report([], {"data": 0.007, "communication": 0.16}, steps=(0.0273,)), "syncs_per_step": 57}
    pick = Pick("data", 0.547, 2.21, "m", "data", ("data", "communication"))
    above = explain_round(pick, 2.91, before, 1.70, repeated=True, after_report=after,
                          slowdown_after=2.03, befores_tps=(7481.0, 5602.0))["above"]
    assert "the run before that the bound was set from (7,481 tokens/s) alone the fix measures 2.54x" in above
    assert "it removed 20.8 ms of that run's 34.2 ms unprofiled step, more than the 18.7 ms (54.7%)" in above
    assert "window's times" not in above and "unequally" not in above  # the old story: it cannot explain it
    # against the run the bound was set from the fix stayed within it: the other run before moved the mean
    drift = explain_round(pick, 2.61, before, 1.70, repeated=True, after_report=after,
                          slowdown_after=2.03, befores_tps=(7481.0, 4000.0))["above"]
    assert "alone the fix measures 2.00x, within its 2.21x: the other run before (4,000 tokens/s)" in drift
    assert "removed" not in drift.split("; ")[0] and "outside the data" not in drift


def test_a_data_gain_past_the_data_share_alone_is_said():
    # the data round as run: data 28.0% + communication 18.5% of a profiled step bound it at 1.87x;
    # the data share alone allows 1.39x, and 1.65x lies above it while communication rose 8.0 -> 10.5 ms
    before = report([], {"data": 0.28, "communication": 0.185}, steps=(0.0433,))
    after = report([], {"data": 0.008, "communication": 0.279}, steps=(0.0376,))
    pick = Pick("data", 0.465, 1.87, "m", "data", ("data", "communication"))
    said = explain_round(pick, 1.65, before, 0.99, repeated=True, after_report=after)["inconclusive"]
    assert ("The data share alone, 28.0% of an unprofiled step, bounds the gain at 1.39x: the figure, 1.65x, "
            "lies above it, so it is within the bound only through the communication term") in said
    assert "communication did not fall, so this round's diagnoses do not show where" in said
    assert "though the bound counts it" in said and "though the fix targets" not in said
    # the phases fell 20.1 -> 10.8 ms of a 43.3 ms profiled step: 1.28x at most, short of 1.65x
    assert ("The bound's phases fell 9.3 ms of a 43.3 ms profiled step (21.6% of an unprofiled step by the "
            "bound's rule), which accounts for at most 1.28x, short of the figure, 1.65x") in said
    assert "accounts for at most" not in explain_round(pick, 1.2, before, 0.99, repeated=True,
                                                       after_report=after)["held"]
    # past the whole bound: not "within" it; within the data share alone: nothing said
    past = explain_round(pick, 1.95, before, 0.99, repeated=True, after_report=after)["above"]
    assert "and past the whole bound, 1.87x, too" in past and "within the bound only" not in past
    assert "data share alone" not in explain_round(pick, 1.30, before, 0.99, repeated=True,
                                                   after_report=after)["held"]
    # the bound counts the data share over an unprofiled step: 28% x 1.2 = 33.6%, 1.51x
    assert "33.6% of an unprofiled step, bounds the gain at 1.51x" in explain_round(
        pick, 1.65, before, 1.2, repeated=True, after_report=after)["inconclusive"]


@dataclass(frozen=True)
class FakeJob(CapstoneJob):
    """Runs nothing: each configuration's median step is given by ``STEP`` (times ``AGAIN``'s
    factor in a repeat run)."""

    def run(self, fixes, to_target=True):
        CALLS.append((tuple(fixes), to_target))
        step = STEP[tuple(fixes)] * (1.0 if to_target else AGAIN.get(tuple(fixes), 1.0))
        kind = KIND.get(tuple(fixes), "sync")
        rep = report([("high", kind, 0.4)], {kind: 0.4}, steps=(step, step))
        return rep, result([step] * 4 + [step * f for f in (0.98, 1.0, 1.02, 0.99, 1.01, 1.0)], fixes=fixes)


CALLS: list = []
STEP = {(): 0.4, ("sync",): 0.2, ("sync", "ddp"): 0.3, ("sync", "data"): 0.1, ("sync", "data", "ddp"): 0.05}
AGAIN: dict = {}
KIND: dict = {}


@pytest.mark.parametrize("repeat", [True, False])
def test_the_loop_keeps_a_faster_fix_and_drops_a_slower_one(repeat):
    CALLS.clear()
    loop = FixLoop(FakeJob(Path("t.py"), Path("/tmp/o"), 5.0, skip=1, window=2, measure=3), ("sync", "ddp"),
                   FIX_FOR, LIMITS, repeat_before=repeat, describe=lambda f: f"fix {f}")
    loop.start()
    r = first = loop.play()
    assert r.kept and r.speedup.value == pytest.approx(2.0) and loop.applied == ["sync"]
    assert CALLS[1:] == [(("sync",), True)] + ([((), False)] if repeat else [])  # QUICK: one job per fix
    r = loop.play()
    assert not r.kept and list(loop.tried) == ["ddp"] and loop.waterfall == [("sync", 2.0)]
    assert loop.tried["ddp"].value == pytest.approx(2 / 3) and loop.tried["ddp"] == r.speedup
    assert loop.play() is None and len(loop.rounds) == 2
    # every configuration diagnosed, the dropped one's included (rounds holds only the kept ones)
    assert len(loop.factors) == 3
    assert loop.factors[0] == loop.job.profiler_slowdown(loop.rounds[0]["report"], loop.rounds[0]["result"])
    assert loop.left_alone() == [] and "fix ddp" in round_text(r) and "**0.667x**" in round_text(r)
    assert "dropped" in round_text(r) and "dropped" not in round_text(first)
    # three steps a run: no interval, so no slowdown is claimed; what the interval is said once
    assert "no interval, so this run cannot tell it from no change" in round_text(r)
    assert round_text(r).count("fewer than the") == 1
    assert ("mean of its runs before and after" if repeat else "its one run") in round_text(first)
    assert len(first.befores_tps) == (2 if repeat else 1)
    # two runs of the configuration before that read 1.39x apart: the round says so
    drift = replace(first, befores=2, befores_tps=(16210.0, 22474.0))
    said = round_text(drift)
    assert "16,210 and 22,474, 1.39x apart" in said and "moved between the runs" in said
    steady = replace(first, befores=2, befores_tps=(20000.0, 21000.0))
    assert "20,000 and 21,000" in round_text(steady) and "apart" not in round_text(steady)


def play_all(repeat, again):
    """Three fixes, each round's finding naming the next (sync, data, ddp); ``again``: the
    factor on a repeat run's steps, per configuration."""
    CALLS.clear()
    AGAIN.clear()
    AGAIN.update(again)
    KIND.update({(): "sync", ("sync",): "data", ("sync", "data"): "communication"})
    fix_for = {"sync": ("sync",), "data": ("data",), "communication": ("ddp",)}
    loop = FixLoop(FakeJob(Path("t.py"), Path("/tmp/o"), 5.0, skip=1, window=2, measure=6),
                   ("sync", "data", "ddp"), fix_for, LIMITS, repeat_before=repeat)
    loop.start()
    while loop.play() is not None:
        pass
    KIND.clear()
    return loop, loop.finish()


def test_the_total_is_measured_directly_and_the_product_compounds_drift():
    # repeat runs of the fixed configurations read 1.5x slower: each later round's "before" is low
    loop, total = play_all(True, {("sync",): 1.5, ("sync", "data"): 1.5})
    assert loop.applied == ["sync", "data", "ddp"] and CALLS[-1] == ((), False)  # the slow job again
    assert total.direct.value == pytest.approx(8.0) and total.slow_tps == pytest.approx(250)
    assert total.fixed_tps == pytest.approx(2000) and total.kept == 3 and total.repeated
    assert total.product.value == pytest.approx(2.0 * 2.4 * 2.4)
    assert total.product.low <= total.product.value <= total.product.high
    assert total.drift and "above the direct gain" in total_text(total) and "**8.00x**" in total_text(total)
    # combined in quadrature: the product of the rounds' lows (2 x 2 x 2 = 8) would hide the drift
    assert total.product.low > 8.0 * 1.05
    # the seams say exactly where the product parts from the direct ratio: sync ran 500 tokens/s
    # as round 1's after and (500 + 500 / 1.5) / 2 as round 2's before; the slow job 250 both times
    names = [n for n, _, _ in total.seams]
    assert names == ["the slow job", "sync", "data"]
    assert total.seams[1][1:] == (pytest.approx(500), pytest.approx(500 * (1 + 1 / 1.5) / 2))
    assert total.seams[0][1:] == (pytest.approx(250), pytest.approx(250))
    moved = math.prod(a / b for _, a, b in total.seams)
    assert moved == pytest.approx(total.product.value / total.direct.value)
    assert "after --fix sync 500 -> 417" in seams_text(total) and "multiply to 0.694x" in seams_text(total)
    assert seams_text(total) in total_text(total)
    # the slow job's second reading is the first kept round's "before", whichever round that was
    assert 'then as the "before" of the first kept round, that of --fix sync)' in seams_text(total)
    assert "round 1" not in seams_text(total)
    total = replace(total, repeats=())  # a Total without its repeat runs: read from the seams alone
    # repeats that all ran one way are a bias between the runs, not load drifting both ways; the
    # slow job's repeat is set against its first run (the first of slow_runs_tps), in time order
    one_way = replace(total, seams=[("the slow job", 100, 90), ("sync", 200, 180), ("data", 300, 290)],
                      slow_runs_tps=(100.0, 100.0))
    assert "all 3 repeats inside a round ran slower than the run they repeat" in seams_text(one_way)
    # all 3 slower by chance: 1 in 8 (all 3 one way, either way: 1 in 4)
    assert "a 1 in 8 chance, and 1 in 4 for all 3 one way, either way" in seams_text(one_way)
    up = replace(total, seams=[("the slow job", 100, 110), ("sync", 200, 220), ("data", 300, 330)],
                 slow_runs_tps=(100.0, 100.0))
    assert "all 3 repeats inside a round ran faster" in seams_text(up)
    # planted: 2 of 3 one way called a bias (with 3 seams that said "one way" whatever happened)
    two = replace(total, seams=[("the slow job", 100, 110), ("sync", 200, 220), ("data", 300, 290)],
                  slow_runs_tps=(100.0, 100.0))
    assert "1 in" not in seams_text(two) and "all 3" not in seams_text(two)
    assert "slower than the run it repeats for after --fix data, which biases that round's" in seams_text(two)
    assert ("and faster for the slow job and after --fix sync, which biases each such round's"
            in seams_text(two))
    # planted, as run: the slow job's seam reads slower (6,314 -> 6,051) only because its first
    # reading holds its last run, 6,758; its repeat, 6,233, ran faster than its first run, 5,869
    seams = [("the slow job", 6314, 6051), ("data", 10005, 9611), ("sync", 11347, 10250),
             ("ddp", 21444, 20851), ("attention", 22993, 22492)]
    run = seams_text(replace(total, seams=seams, slow_runs_tps=(5869.0, 6758.0)))
    assert "seams read the configuration slower" not in run and "all 5" not in run and "1 in 32" not in run
    assert "and faster for the slow job, which biases that round's \"before\" high" in run
    assert "The slow job's seam reads slower although its repeat ran faster" in run and "6,758" in run
    both = replace(total, seams=[("the slow job", 100, 110), ("sync", 200, 180), ("data", 300, 330),
                                 ("ddp", 400, 360)])
    assert "1 in" not in seams_text(both) and "multiply to" in seams_text(both)
    # seams that cancel (one up 10 %, two down) leave the product at the direct ratio: no "differs"
    even = replace(total, seams=[("the slow job", 100, 110), ("sync", 200, 181.82), ("data", 300, 300)])
    said = seams_text(even)
    assert "cancel:" in said and "so the two agree" in said
    assert "differs" not in said and "one way" not in said
    loop, total = play_all(True, {})
    assert total.product.value == pytest.approx(total.direct.value) and not total.drift
    assert "agree within their ranges" in total_text(total)
    # the product's range has no stated confidence: its rounds' intervals cover more than 90 % each
    assert total.product.level is None and "a range of no stated confidence" in total_text(total)
    # the product beside its interval at the interval's precision: a fixed .2f read "0.18x (0.18x to 0.20x)"
    close = replace(total, product=Estimate(0.1834, 0.1828, 0.196, 0.9, 8, "m"),
                    direct=Estimate(0.19, 0.18, 0.2, 0.9, 8, "m"))
    assert "multiply to 0.1834x (0.1828x to 0.1960x: the rounds' intervals combined" in total_text(close)


def test_a_round_is_announced_with_its_prediction_before_its_runs():
    CALLS.clear()
    loop = FixLoop(FakeJob(Path("t.py"), Path("/tmp/o"), 5.0, skip=1, window=2, measure=3), ("sync", "ddp"),
                   FIX_FOR, LIMITS, describe=lambda f: f"fix {f}")
    loop.start()
    seen = []
    r = loop.play(announce=lambda n, pick, what: seen.append((n, pick.fix, what, len(CALLS))))
    assert seen == [(1, "sync", "fix sync", 1)]  # only the slow job had run: the round's runs came after
    said = pick_text(1, r.pick, "fix sync")
    assert said.startswith("### Round 1: sync -> `--fix sync`\n\nfix sync. **Predicted before its runs:** ")
    assert round_prediction(r.pick).describe() in said
    with pytest.raises(TypeError, match="pick"):
        round_prediction(r)  # a Round, not its Pick
    # announced: the measurement's text leaves out the heading the announcement showed
    assert r.announced and round_text(r).startswith("Tokens/s ")
    heading = "### Round 1: sync -> `--fix sync`\n\nfix sync. Tokens/s"
    assert round_text(replace(r, announced=False)).startswith(heading)
    context = replace(r.pick, untested="too loose")
    assert "context, not a prediction" in pick_text(2, context)
    assert f"at most {r.pick.bound:.3g}x." in pick_text(2, context)
    assert "no finite bound." in pick_text(2, replace(context, void=True))


def test_every_repeat_run_is_counted_the_dropped_rounds_and_the_last_included():
    loop, total = play_all(True, {("sync",): 1.5, ("sync", "data"): 1.5})
    # one repeat per round, and the slow job's after the rounds, in the order run
    assert [w for w, _, _ in total.repeats] == ["the round of --fix sync", "the round of --fix data",
                                                "the round of --fix ddp", "the slow job after the rounds"]
    assert total.repeats[1][1:] == (pytest.approx(500), pytest.approx(500 / 1.5))
    # planted, as run: the seams held 4 repeats that all ran faster ("a 1 in 16 chance"); the
    # dropped round's repeat of the slow job, and its run after the rounds, ran slower
    seams = (("the slow job", 7577, 7856), ("ddp", 10661, 10928), ("data", 17323, 17647),
             ("attention", 19091, 20319))
    ran = (("the round of --fix sync", 7709, 5822), ("the round of --fix ddp", 7709, 8002),
           ("the round of --fix data", 10661, 11194), ("the round of --fix attention", 17323, 17970),
           ("the round of --fix batch", 19091, 21546), ("the slow job after the rounds", 7709, 7445))
    said = seams_text(replace(total, seams=seams, slow_runs_tps=(7709.0, 7445.0), repeats=ran))
    assert " a 1 in 16" not in said
    assert "faster in 4 (the round of --fix ddp" in said
    assert "slower in 2 (the round of --fix sync and the slow job after the rounds)" in said
    # one comparison per run repeated: 6 repeats of 4 runs (7709 three times), the first repeat of each
    assert "They repeat 4 separate runs (2 repeats share a run with an earlier one" in said
    assert "its first repeat ran slower in 1 and faster in 3." in said
    # 3 of the 4 runs repeated were kept fixes' "after" runs, selected for reading high: no chance printed
    assert "3 of those 4 runs were the \"after\" run of a fix kept because its median gained" in said
    assert "cannot tell drift between runs from that selection" in said and "in 16" not in said
    one_way = replace(total, repeats=tuple((w, a, a * 1.1) for w, a, _ in ran))
    assert "1 in 32" not in seams_text(one_way) and "1 in 8 (12%)" in seams_text(one_way)
    # one run repeated (the slow job's first), not selected: still too few for a chance to reject
    slow_only = seams_text(replace(total, slow_runs_tps=(7709.0, 7445.0),
                                   repeats=tuple((w, 7709.0, 7000.0) for w, _, _ in ran)))
    assert "They repeat 1 separate run" in slow_only and "1 comparison is too few" in slow_only
    assert "cannot tell drift between runs from chance" in slow_only and "selected" not in slow_only
    alike = seams_text(replace(total, repeats=tuple((w, a, a) for w, a, _ in ran)))
    assert "the repeat ran as fast in all 6." in alike and "chance" not in alike


def test_quick_totals_are_the_same_runs_chained():
    loop, total = play_all(False, {("sync",): 1.5})  # no repeat run: AGAIN never applies
    assert ((), False) not in CALLS and not total.repeated
    assert total.product.value == pytest.approx(total.direct.value) == pytest.approx(8.0)
    assert "the same runs" in total_text(total)
    assert all(a == pytest.approx(b) for _, a, b in total.seams)  # chained: no seam moves


def test_each_bar_is_its_fix_measured_speedup_and_the_drift_a_bar_of_its_own():
    bars = waterfall_shares([("a", 2.0), ("b", 8.0)], 4.0)  # log2: 1 and 3 of 4, scaled to 2
    assert bars == [("a", pytest.approx(2 ** 0.5)), ("b", pytest.approx(2 ** 1.5))]
    assert waterfall_shares([("a", 2.0)], 0.5) == [("a", 2.0)]  # the other side of 1: not split
    assert waterfall_shares([("a", 2.0), ("b", 0.5)], 3.0) == [("a", 2.0), ("b", 0.5)]  # product 1
    # the planted version drew each fix at its share of the direct gain (1.41x for a 2.00x round),
    # spreading the drift between runs over the fixes
    ax = plot_waterfall([("a", 2.0), ("b", 8.0)], total=4.0).axes[0]
    assert [t.get_text() for t in ax.texts] == ["2.00x", "8.00x", "0.25x", "4.00x"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "drift", "total"]
    assert "drift between runs (the seams), not a fix" in [t.get_text() for t in ax.get_legend().get_texts()]
    same = plot_waterfall([("a", 2.0), ("b", 2.0)], total=4.001).axes[0]  # no drift as labelled: no bar
    assert [t.get_text() for t in same.texts] == ["2.00x", "2.00x", "4.00x"]
    with pytest.raises(ValueError, match="total"):
        waterfall_shares([("a", 2.0)], 0.0)


def test_a_gain_whose_interval_holds_one_is_drawn_apart():
    fig = plot_waterfall([("a", 2.0), ("b", 1.05)], total=2.1, unresolved=["b"])
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "not credited" in labels[1] and "not credited" not in labels[0]
    colors = [tuple(round(c, 3) for c in b.get_facecolor()[:3]) for b in fig.axes[0].patches]
    assert colors[0] != colors[1] and colors[1] == (0.69, 0.69, 0.69)  # grey, not the gain's green
    with pytest.raises(ValueError, match="unresolved"):
        plot_waterfall([("a", 2.0)], unresolved=["c"])
    with pytest.raises(TypeError, match="unresolved"):
        plot_waterfall([("a", 2.0)], unresolved="a")


def test_the_loop_needs_a_start_and_lists_fixes_left_alone():
    loop = FixLoop(JOB, ("sync", "ddp", "data"), FIX_FOR, LIMITS)
    with pytest.raises(RuntimeError, match="start"):
        loop.play()
    with pytest.raises(RuntimeError, match="start"):
        loop.finish()
    loop.rounds = [{"fixes": (), "report": report([], {"data": 0.03}), "result": result([0.1] * 8)}]
    loop.applied = ["sync", "ddp"]
    assert loop.left_alone() == ["not applied: --fix data (data: 3.0% of the last step)"]


def test_a_drop_on_an_interval_holding_one_is_not_called_a_slowdown():
    unclear = dropped_text("sync", Estimate(0.85, 0.459, 1.382, 0.9, 16, "m"))
    assert "0.850x (90% interval 0.459x to 1.382x, m)" in unclear
    assert "cannot tell it from no change" in unclear and "not shown to slow the job" in unclear
    assert "slower beyond" not in unclear
    assert "0.850x: its interval" in dropped_text("sync", Estimate(0.85, 0.459, 1.382, 0.9, 16, "m"), False)
    clear = dropped_text("sync", Estimate(0.8, 0.7, 0.9, 0.9, 16, "m"))
    assert "slower beyond its interval: dropped" in clear and "no change" not in clear
    with pytest.raises(TypeError, match="gain"):
        dropped_text("sync", 0.85)


def test_findings_still_listed_say_what_became_of_their_fixes():
    # the last diagnosis still lists a sync finding whose fixes were dropped and applied: the loop is
    # done with it, though it stands (the loop stops when the fixes are used up, not the findings)
    rep = report([("medium", "sync", 0.016), ("info", "compute", 0.73)], {})
    lines = still_listed(rep, FIX_FOR, ["data", "ddp"], {"sync": None}, ("data", "sync", "ddp"))
    assert lines == ["[medium] sync (1.6% of the last step): --fix sync tried and dropped, --fix ddp applied"]
    assert "not offered here" in still_listed(rep, FIX_FOR, [], {}, ("data",))[0]
    assert still_listed(report([("high", "straggler", 0.2)], {}), FIX_FOR, [], {}, ()) == [
        "[high] straggler (20.0% of the last step): no fix for it in this job"]
    with pytest.raises(ValueError, match="findings"):
        still_listed({"shares": {}}, FIX_FOR, [], {}, ())


def test_mfu_is_printed_to_two_figures():
    # runs minutes apart differ by tens of percent: "3.32%" and "20.32%" claimed figures no run repeats
    assert [percent2(v) for v in (0.0332, 0.2032, 0.0296, 0.005, 0.0999, 1.0, 0.0)] == [
        "3.3%", "20%", "3.0%", "0.50%", "10%", "100%", "0%"]
    with pytest.raises(ValueError, match="share"):
        percent2(-0.1)


def test_show_round_says_when_the_loop_is_done(capsys):
    assert show_round(None) is False and "Nothing left" in capsys.readouterr().out
    with pytest.raises(TypeError, match="r must be"):
        round_text("round")


@pytest.mark.parametrize("call, exc, match", [
    (lambda: round_speedup("job", [result([1.0] * 8)], result([1.0] * 8)), TypeError, "job must be"),
    (lambda: next_fix(report([], {}), result([1.0] * 8), JOB, [], (), FIX_FOR, 0.0), ValueError, "peak"),
    (lambda: next_fix(report([], {}), result([1.0] * 8), JOB, [], (), [], 1e9), TypeError, "fix_for_finding"),
    (lambda: explain_round("data", 1.5, report([], {}), 1.0, True), TypeError, "pick must be"),
    (lambda: explain_round(Pick("data", 0.5, 2.0, "m", "data"), -1.0, report([], {}), 1.0, True), ValueError,
     "gain"),
    (lambda: job_peak({"float32": 1e9}, result([1.0])), TypeError, "limits must be"),
    (lambda: FixLoop("job", ("data",), FIX_FOR, LIMITS), TypeError, "job must be"),
    (lambda: FixLoop(JOB, "data", FIX_FOR, LIMITS), TypeError, "available"),
])
def test_bad_arguments_are_refused_by_name(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_a_bound_too_loose_to_fail_is_context():
    # the ddp round as measured: sync + communication 46.7% of a profiled step, times 2.03: 94.8% of an
    # unprofiled step, a 19.2x bound that no measurement of the round could fail
    r = result([1] * 4 + [0.1] * 4)  # unprofiled 0.1 s
    rep = report([("high", "sync", 0.3)], {"sync": 0.3, "communication": 0.167}, steps=(0.203, 0.203))
    ddp = next_fix(rep, r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9)
    assert ddp.bound == pytest.approx(1 / (1 - 0.467 * 2.03)) and "19.2x" in ddp.untested
    assert "profiled share alone, 46.7%, gives 1.88x" in ddp.untested
    assert loose_bound(0.89, 0.5, 1.78) == ""  # below 10x: a bound that can fail
    data = report([("high", "data", 0.4)], {"data": 0.4, "communication": 0.1}, steps=(0.2, 0.2))
    assert "no finite bound" in next_fix(data, r, JOB, [], ("data",), FIX_FOR, 1e9).untested  # 50% x 2.00
    assert "10x or more" in loose_bound(0.95, 0.5, 1.9)  # 95%: a bound, too loose to fail


def test_a_scaled_share_past_the_step_is_printed_as_it_is_and_the_bound_void():
    # the ddp round as measured: sync + communication 61.8% of a profiled step, times 1.71: 105.7% of an
    # unprofiled step, once clipped to 99.0% and printed as "the most it can take", "at most 100x"
    r = result([1] * 4 + [0.1] * 4)  # unprofiled 0.1 s
    rep = report([("high", "sync", 0.45)], {"sync": 0.45, "communication": 0.168}, steps=(0.171, 0.171))
    ddp = next_fix(rep, r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9)
    assert ddp.void and "105.7%" not in ddp.model and "1.06 times a whole unprofiled step" in ddp.model
    assert "99.0%" not in ddp.model + ddp.untested and "no finite bound" in ddp.untested
    rnd = Round(3, ddp, Estimate(1.59, 1.03, 2.32, 0.9, 16, "m"), 10585.0, 16802.0, {}, True)
    assert "no finite bound" in round_context(rnd) and "at most 100x" not in round_context(rnd)
    assert not next_fix(report([("high", "sync", 0.3)], {"sync": 0.3, "communication": 0.167},
                               steps=(0.203, 0.203)), r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9).void


def test_ratios_either_side_of_an_edge_are_printed_apart():
    # 1.2266x and 1.0896x against a 1.225x bound: at two decimals the first and the bound both read 1.23x
    gain = 1.2266 * 6099 / 6482.5
    text = explain_round(Pick("sync", 0.184, 1.225, "m", "sync"), gain, report([], {}), 1.0, repeated=True,
                         befores_tps=(6099.0, 6866.0))["inconclusive"]
    assert "1.227x and 1.090x, on both sides of 1.225x" in text


def test_the_batch_rounds_room_is_read_from_the_printed_mfu():
    # MFU 11.5% prints as 12%: the room beside it is 1 / 0.12 = 8.3x, not 1 / 0.115 = 8.7x
    rep, r = report([("info", "compute", 0.7)], {}), result([1] * 4 + [0.1] * 4)
    four = dataclasses.replace(JOB, batch_factor=4.0)
    peak = four.mfu(r, 1.0) / 0.115
    tight = next_fix(rep, r, four, ["attention"], ("attention", "batch"), FIX_FOR, peak)
    assert "leaves about 8.3x: its MFU 12%" in tight.model and "not a hard limit" in tight.model


def test_a_context_bound_the_measurement_passes_says_so_and_what_decided():
    pick = reads_pick(report([("high", "sync", 0.336)], {"sync": 0.336, "communication": 0.127})
                      | {"sync_comm_share": 0.316}, "sync", 1.07)
    assert pick.untested and pick.bound == pytest.approx(1.186, abs=1e-3)
    before = report([], {"sync": 0.336, "communication": 0.127}, steps=(0.036, 0.036))
    after = report([], {"sync": 0.383, "communication": 0.110}, steps=(0.0326, 0.0326))
    said = past_bound(pick, 1.34, before, after, (7633.0, 9059.0))
    assert said.startswith("The measured 1.34x lies past this bound's 1.19x")
    assert "profiled window gained 1.10x, within the bound" in said
    # against each run before alone 1.47x and 1.23x, both past 1.19x: no drift carried it past
    assert "the fix measures 1.47x and 1.23x, both past the bound" in said
    assert "points to the drift" not in said
    assert said.endswith("does not tell what carried it past.")
    either = past_bound(pick, 1.34, before, after, (7633.0, 11000.0))  # 1.64x and 1.13x: the bound between
    assert "1.64x and 1.13x, within the bound against one of them" in either
    assert "points to the drift" in either
    # the bound counts the sync phase less its wait with a collective in flight: the wait is named apart
    waits = past_bound(pick, 1.34, before | {"sync_comm_share": 0.316}, after | {"sync_comm_share": 0.37},
                       (7633.0, 9059.0))
    assert "the bound's phases went 5.3 -> 4.0 ms" in waits and "leaves out 11.4 -> 12.1 ms" in waits
    words = explain_round(pick, 1.34, before, 1.07, True, after, befores_tps=(7633.0, 9059.0))["held"]
    assert "The sync and communication phases (the bound counts the sync phase less its wait" in words
    assert past_bound(pick, 1.34, before, after, (9000.0,)).endswith("does not tell what carried it past.")
    assert past_bound(pick, 1.1, before, after, (7633.0, 9059.0)) == ""
    rnd = Round(2, pick, Estimate(1.34, 0.83, 2.15, 0.9, 16, "m"), 8346.0, 11153.0, {}, True, past=said)
    assert said in round_context(rnd)  # the old context line said nothing of the bound being passed
    assert "past this bound" not in round_context(replace(rnd, past=""))


def test_repeats_all_slower_say_what_the_bias_did_to_the_product():
    # as run: all 5 repeats slower, the rounds' product 8.05x against 5.93x measured directly, and
    # nothing said that every round's speedup, and so the product, read high
    loop, total = play_all(True, {})
    one_way = replace(total, seams=[("the slow job", 100, 90), ("sync", 200, 180), ("data", 300, 290)],
                      slow_runs_tps=(100.0, 100.0), product=Estimate(8.05, 2.6, 23.8, None, 16, "m"),
                      direct=Estimate(5.93, 4.22, 8.45, 0.93, 16, "m"), repeats=())
    said = seams_text(one_way)
    assert "reads higher than against its first run before alone" in said
    assert "their product, 8.05x, lies 1.36x above the 5.93x measured directly" in said
    low = replace(one_way, product=Estimate(5.0, 2.0, 9.0, None, 16, "m"))
    assert "still lies at or below the 5.93x measured directly" in seams_text(low)


def test_a_product_past_the_step_says_the_premise_of_the_bound_failed():
    r = result([1] * 4 + [0.1] * 4)
    rep = report([("high", "sync", 0.45)], {"sync": 0.45, "communication": 0.168}, steps=(0.171, 0.171))
    ddp = next_fix(rep, r, JOB, ["sync"], ("ddp",), FIX_FOR, 1e9)
    assert "the premise that a phase takes no longer without the profiler than with it failed" in ddp.model
    assert "so no bound is printed" in ddp.model and "a most past" not in ddp.model


def test_a_kept_fix_whose_targeted_phases_rose_says_what_kept_it():
    before = report([], {"forward": 0.3, "backward": 0.3}, steps=(0.015,))
    after = report([], {"forward": 0.35, "backward": 0.35}, steps=(0.015,))
    pick = Pick("compute", 0.6, 2.5, "m", "attention", ("forward", "backward"))
    kept = explain_round(pick, 1.14, before, 1.0, repeated=True, after_report=after)["inconclusive"]
    assert "rose, though the fix targets them" in kept
    assert "The loop keeps the fix on its median speedup, 1.14x, above 1x, not on these phases" in kept
    dropped = explain_round(pick, 0.95, before, 1.0, repeated=True, after_report=after)["inconclusive"]
    assert "keeps the fix" not in dropped
