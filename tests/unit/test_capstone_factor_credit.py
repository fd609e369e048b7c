"""The capstone's factor, window, credit and headline rules (module 08)."""

from pathlib import Path

import pytest

from perfkit.profiling.capstone import CapstoneJob, FixLoop, next_fix
from perfkit.profiling.capstone_explain import explain_round
from perfkit.profiling.capstone_past import past_part
from perfkit.profiling.capstone_text import (
    Pick,
    Total,
    bound_class,
    context_kinds_text,
    reads_pick,
    scaled_share,
)
from perfkit.stats import Estimate, exact
from perfkit.viz.capstone_target import headline_rate
from tests.unit.test_capstone import CALLS, FIX_FOR, KIND, LIMITS, FakeJob, report, result

JOB = CapstoneJob(Path("train.py"), Path("/tmp/out"), 5.0, skip=1, window=4, measure=3)


def test_a_bound_takes_one_statistic_for_the_phase_the_profiled_step_and_the_unprofiled_step():
    # a share is a phase's time over the window's mean step: one slow profiled step of four moves the mean
    # (15 ms) and not the median (10 ms); data 40 % of the mean is 6 ms per profiled step, and over the
    # 10 ms unprofiled step that is 60 %, the most it can take; a ratio of medians (1.0) gave 40 %
    rep = report([("high", "data", 0.4)], {"data": 0.4}, steps=(0.01, 0.01, 0.01, 0.03))
    r = result([0.01] * 6 + [0.01] * 3)
    assert JOB.profiler_slowdown(rep, r) == pytest.approx(1.5)
    pick = next_fix(rep, r, JOB, [], ["data"], {"data": ["data"]}, 1e12)
    assert pick.share == pytest.approx(0.6) and pick.bound == pytest.approx(2.5)
    # the printed arithmetic checks out: 6.0 ms of a 15.0 ms profiled mean, over a 10.0 ms unprofiled mean
    assert "of a profiled step, 6.0 ms" in pick.model and "times 1.50" in pick.model
    assert "(15.0 over 10.0 ms;" in pick.model
    assert "60.0% of an unprofiled step is the most it can take" in pick.model


def test_a_scaled_share_past_the_whole_step_prints_no_share_above_100_percent():
    share, words = scaled_share(0.522, 3.08)
    assert share == pytest.approx(0.99)
    assert "161.0%" not in words and "premise" in words and "no bound is printed" in words
    assert "1.61 times a whole unprofiled step" in words


def test_a_window_gain_past_its_own_share_names_the_untouched_phases():
    # as run: sync + communication 52.2% gave 2.09x, the window gained 2.86x: the other phases shrank too
    before = {**report([], {"sync": 0.4, "communication": 0.12, "forward": 0.2, "backward": 0.28},
                       steps=(0.0368,)), "syncs_per_step": 28}
    after = {**report([], {"sync": 0.0, "communication": 0.14, "forward": 0.36, "backward": 0.5},
                      steps=(0.0129,)), "syncs_per_step": 0}
    pick = Pick("sync", 0.6, 2.5, "m", "ddp", ("sync", "communication"))
    words = explain_round(pick, 1.8, before, 1.0, repeated=True, after_report=after)["held"]
    assert "The profiled window gained 2.85x, past the 2.08x" in words
    assert "the phases the fix does not touch went 17.7 -> 11.1 ms" in words
    same = {**after, "step_times_s": [0.0368 * 0.52 / 0.14 * 0.14]}  # a window gain within its share's bound
    assert "does not touch" not in explain_round(pick, 1.8, before, 1.0, repeated=True,
                                                 after_report={**same, "step_times_s": [0.03]})["held"]


def test_the_headline_splits_the_gap_by_the_data_preparation():
    # as run: 4.49x over the runs, 0.76x the direct 5.94x, put down to "a sample of runs whose speed moved"
    t = Total(exact(5.94, "x"), exact(7.92, "x"), 4, True, 9579, 56941, (), (10084.0, 9075.0))
    said = headline_rate(t, {"slow": (4.6, 41216), "fixed": (1.6, 65536)}, {"slow": 0.0, "fixed": 0.29})
    assert "sample of runs whose speed moved" not in said
    assert "without each run's data preparation (0.00 s and 0.29 s) 5.58x, 0.94x the direct figure" in said
    assert "the slow run made 0.89x the tokens/s of its measured steps, the fixed run 0.88x" in said
    with pytest.raises(ValueError, match="prep's fixed"):
        headline_rate(t, {"slow": (4.6, 41216), "fixed": (1.6, 65536)}, {"slow": 0.0, "fixed": 1.6})


def test_a_fix_kept_on_its_median_alone_is_applied_not_credited():
    # as run: --fix sync kept at 1.37x (interval 0.52x to 2.39x) while its phases rose, and counted a gain
    CALLS.clear()
    KIND.update({(): "sync"})
    loop = FixLoop(FakeJob(Path("t.py"), Path("/tmp/o"), 5.0, skip=1, window=2, measure=3), ("sync",),
                   FIX_FOR, LIMITS, repeat_before=False)
    loop.start()
    r = loop.play()  # three steps a run: no interval; the sync phase 0.4 of 0.4 s -> 0.4 of 0.2 s: it fell
    assert r.kept and loop.credited == ["sync"]
    KIND.clear()

    class Noisy(FakeJob):
        """The sync fix's run: a hair faster, its sync phase higher (0.5 of 0.39 s against 0.4 of 0.4 s)."""

        def run(self, fixes, to_target=True):
            rep, res = super().run(fixes, to_target)
            if tuple(fixes) == ("sync",):
                steps = [0.39] * 4 + [0.39 * f for f in (0.98, 1.0, 1.02, 0.99, 1.01, 1.0)]
                rep = report([("high", "sync", 0.5)], {"sync": 0.5}, steps=(0.39, 0.39))
                res = {**res, "step_times_s": steps}
            return rep, res

    KIND.update({(): "sync"})
    loop2 = FixLoop(Noisy(Path("t.py"), Path("/tmp/o"), 5.0, skip=1, window=2, measure=3), ("sync",),
                    {"sync": ("sync",)}, LIMITS, repeat_before=False)
    loop2.start()
    r2 = loop2.play()
    KIND.clear()
    assert r2.kept and loop2.applied == ["sync"] and loop2.credited == []


def test_a_context_round_past_the_reads_bound_it_names_says_so():
    # as run: the reads alone bound the gain at 1.05x, the whole bound (with communication) at 1.88x;
    # the runs measured 1.09x: past the edge the context names, within the whole bound
    rep = report([("medium", "sync", 0.023)], {"sync": 0.023, "communication": 0.226}, steps=(0.016,))
    pick = reads_pick(rep, "sync", 1.88)
    assert pick.context == "too tight" and pick.part_bound == pytest.approx(1 / (1 - 0.023 * 1.88))
    after = report([], {"sync": 0.0, "communication": 0.2}, steps=(0.0125,))
    words = past_part(pick, Estimate(1.09, 0.54, 1.54, 0.93, 16, "m"), rep, after)
    assert words.startswith("The measured 1.09x lies past the 1.05x that removing the reads alone allows")
    assert "holds that edge" in words and "communication, went 3.6 -> 2.5 ms" in words
    assert past_part(pick, Estimate(1.03, 0.9, 1.2, 0.93, 16, "m"), rep, after) == ""


def test_one_rule_classifies_why_a_bound_cannot_test_its_fix():
    assert bound_class(0.043) == "too tight" and bound_class(0.5) == "" and bound_class(0.92) == "too loose"
    # attention's 86.5 % is not 10x or more: its bound is untested because it is broader than the fix
    assert bound_class(0.865, broader=True) == "broader than the fix"
    rep, r = report([("info", "compute", 0.58)], {}, steps=(0.012,)), result([1] * 6 + [0.008] * 3)
    pick = next_fix(rep, r, JOB, [], ("attention",), {"compute": ("attention",)}, 1e12)
    assert pick.untested and pick.context == "broader than the fix"
    assert context_kinds_text() == "too tight, too loose, broader than the fix or not what limits the fix"
