"""ZB-H1's note sets Qi et al.'s bubble against the model the prediction used, not the measured F."""

import pytest

from perfkit.estimate import Estimate
from perfkit.parallel import zb_step_note


def _est(v, lo, hi):
    return Estimate(v, lo, hi, 0.96, 12, "paired ratios")


ARGS = (_est(1.04, 0.96, 1.09), _est(1.13, 1.08, 1.18), _est(0.922, 0.90, 0.95), 0.874)


def test_qi_bubble_is_set_against_the_models_own_f():
    # measured F 7.49 ms, I 6.0 ms, W 2.5 ms: F + I - W = 10.99 ms; the model fed stages of 16.2 ms,
    # F = I = W = 5.4 ms
    got = zb_step_note(*ARGS, (7.49e-3, 6.0e-3, 2.5e-3), stage_s=(16.1e-3, 16.3e-3))
    # the old note divided by the measured F and called 1.47x "the model's"
    assert ("Qi et al.'s bubble, (p - 1)(F + I - W), is 11 ms per (p - 1) at these times, 2.04x the model's "
            "(p - 1) F with its F = I = W = 5.4 ms, a third of a stage timed alone; per the measured F, "
            "1.47x (p - 1) F") in got
    assert "1.47x the model's" not in got
    plain = zb_step_note(*ARGS, (7.49e-3, 6.0e-3, 2.5e-3))
    assert "(F + I - W), is 1.47x (p - 1) F at the measured F" in plain
    with pytest.raises(ValueError, match="stage_s mean"):
        zb_step_note(*ARGS, (1, 1, 1), stage_s=(0.0, 0.0))
    with pytest.raises(ValueError, match=r"stage_s\[1\]"):
        zb_step_note(*ARGS, (1, 1, 1), stage_s=(1.0, -1.0))


def test_bubble_share_direction_is_read_from_its_interval():
    # the old note said "fell" from the point 0.790x though its interval 0.506x to 1.367x holds 1x
    got = zb_step_note(*ARGS, (1, 1, 1), _est(0.790, 0.506, 1.367), 0.468)
    assert ("the bubble share was 0.790x of 1F1B's (its interval 0.506x to 1.367x holds 1x and wholly above "
            "the model's 0.468x)") in got
    fell = zb_step_note(*ARGS, (1, 1, 1), _est(0.711, 0.662, 0.748), 0.484)
    assert ("the bubble share fell to 0.711x of 1F1B's (its interval 0.662x to 0.748x wholly below 1x and "
            "wholly above the model's 0.484x)") in fell
