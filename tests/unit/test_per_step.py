"""perfkit.saving.per_step: the per-step fault-tolerance model and its prediction, by hand,
with planted wrong versions (the lost steps ignored, step time and failure interval
swapped, no floor at 0, half the loss) that the by-hand cases must catch, and a verdict that
tells one lost step per failure from none and from two."""

import math

import pytest

from perfkit.saving.per_step import per_step_goodput, per_step_prediction
from perfkit.verdict import judge

# (step_s, failure_interval_s, lost_steps) -> committed share, by hand: 0.1 s steps, a failure
# every 20 s is 200 steps between failures
BY_HAND = [((0.1, 20.0, 1.0), 1 - 1 / 200), ((0.1, 20.0, 2.0), 1 - 2 / 200),
           ((0.1, 20.0, 0.0), 1.0), ((0.2, 5.0, 2.0), 1 - 2 * 0.2 / 5.0),
           ((0.5, 1.0, 3.0), 0.0)]  # failures faster than the steps they cost: nothing commits


def _wrong_by_hand(f) -> list:
    """The by-hand cases ``f`` gets wrong."""
    return [args for args, want in BY_HAND if not math.isclose(f(*args), want, abs_tol=1e-12)]


def test_the_model_by_hand():
    assert not _wrong_by_hand(per_step_goodput)


def _lost_ignored(step_s, interval_s, lost_steps=1.0):
    return max(0.0, 1 - step_s / interval_s)


def _swapped(step_s, interval_s, lost_steps=1.0):
    return max(0.0, 1 - lost_steps * interval_s / step_s)


def _unclipped(step_s, interval_s, lost_steps=1.0):
    return 1 - lost_steps * step_s / interval_s


def _half_interval(step_s, interval_s, lost_steps=1.0):  # checkpoint-style: half an interval lost
    return max(0.0, 1 - lost_steps * step_s / (2 * interval_s))


@pytest.mark.parametrize("wrong", [_lost_ignored, _swapped, _unclipped, _half_interval])
def test_the_by_hand_cases_catch_planted_wrong_models(wrong):
    assert _wrong_by_hand(wrong), f"{wrong.__name__} passes every by-hand case"


def test_more_lost_steps_or_faster_failures_lose_more():
    assert per_step_goodput(0.1, 10.0) < per_step_goodput(0.1, 20.0)
    assert per_step_goodput(0.2, 20.0) < per_step_goodput(0.1, 20.0)
    assert per_step_goodput(0.1, 20.0, 2.0) < per_step_goodput(0.1, 20.0, 1.0)


def test_prediction_holds_one_lost_step_and_misses_none_or_two():
    # 2000 attempted steps, 0.1 s each, 10 failures (one per 20 s)
    p = per_step_prediction(0.1, 20.0)
    assert p.value == pytest.approx(0.005) and p.rel_tol == pytest.approx(0.5)
    assert judge(p, 10 / 2000).outcome == "held"           # one step per failure
    assert judge(p, 13 / 2000).outcome == "held"           # 1.3 per failure: within half a step
    v0, v2 = judge(p, 0 / 2000), judge(p, 20 / 2000)       # none, two per failure
    assert (v0.outcome, v0.direction) == ("missed", "below")
    assert (v2.outcome, v2.direction) == ("missed", "above")
    assert judge(p, 1.5).outcome == "disturbed"           # a share cannot exceed 1


def test_prediction_tolerance_is_in_steps_per_failure():
    p = per_step_prediction(0.1, 20.0, lost_steps=2.0, tol_steps=0.5)
    assert p.value == pytest.approx(0.01) and p.rel_tol == pytest.approx(0.25)
    assert judge(p, 16 / 2000).outcome == "held"            # 1.6 steps per failure
    assert judge(p, 14 / 2000).outcome == "missed"          # 1.4: more than half a step off
    # a tolerance on the committed share (0.995 +- 50%) would hold anything: this one can fail
    assert p.can_fail()
    assert "2 x 0.1 s step" in p.model and "20 s" in p.model


def test_whole_job_text_counts_the_killed_group_too():
    """The stored torchft run: the survivor lost 7 of 1690 steps (0.41 %), which once stood for the
    job; the killed group was down 7 x 12.23 s = 85.6 s of 200 s, so the job trained at most 75.2 %."""
    from perfkit.saving import whole_job_text

    run = {"failures": 7, "wall_s": 200.26, "time_goodput": 0.9324, "uncommitted": 7, "attempted": 1690,
           "restart_s": 12.22505}
    text = whole_job_text(run)
    assert "the killed group was down 7 x 12.23 s" in text and "= 85.6 s of the 200 s" in text
    assert "it trained at most 57.3% of its time" in text
    assert "with the survivor's 93.2%, the 2 groups together trained at most 75.2% of theirs" in text
    assert text.endswith("The survivor's 7 of 1690 steps lost (0.41%) count its own steps only.")
    # three groups, one killed: the two survivors weigh twice
    three = whole_job_text(run, 3)
    assert "the 3 groups together trained at most 81.2%" in three
    assert three.startswith("For the whole job, all 3 groups: ")
    # down longer than the run: capped at the run
    assert "at most 0.0% of its time" in whole_job_text({**run, "restart_s": 40.0})
    with pytest.raises(ValueError, match="restart_s"):
        whole_job_text({k: v for k, v in run.items() if k != "restart_s"})
