"""A claim judged on a count or on bytes (``Claim(timed=False)``) never blames the machine's
load: no load moves a count, and a reader took such remarks for a real caveat."""

import math
import os

import pytest

from perfkit.advice import Claim, assess

COUNT = Claim("the rule gets every size right", "sizes it gets wrong", low=0, high=0, timed=False)
SPEED = Claim("it gives a 40-60% speedup", "step speedup", low=1.4, high=1.6, partly=1.0, unit="x")


@pytest.fixture
def busy_machine(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 1.0, 1.0))


def test_a_count_claim_on_a_busy_machine_names_no_load(busy_machine):
    v = assess(COUNT, 2)
    assert v.status == "does not hold here"
    assert "busy" not in v.text and "load average" not in v.text
    # with an interval too (a count over several seeds): still no load remark
    assert "load average" not in assess(COUNT, 2, spread=(1, 3)).text


def test_a_timed_claim_on_a_busy_machine_still_names_the_load(busy_machine):
    # the planted wrong version (the flag drops the remark for every claim) fails here
    assert "load average 6.0" in assess(SPEED, 0.8).text
    assert "load average 6.0" in assess(SPEED, 0.8, spread=(0.7, 0.9)).text
    assert "load average" not in assess(SPEED, 1.5).text


def test_timed_defaults_to_true_and_does_not_change_the_status(busy_machine):
    assert SPEED.timed is True
    untimed = Claim(SPEED.statement, SPEED.figure, low=1.4, high=1.6, partly=1.0, unit="x", timed=False)
    for x, spread in ((0.8, None), (1.2, (1.1, 1.3)), (1.05, (0.9, 1.2)), (1.5, None)):
        assert assess(untimed, x, spread).status == assess(SPEED, x, spread).status


def _est(value, low, high):
    from perfkit.estimate import Estimate

    return Estimate(value, low, high, 0.9, 16, "median of 16 paired ratios")


COMPILE = Claim("torch.compile gives a 10-30% speedup", "compiled speedup over eager", low=1.1, partly=1.0,
                unit="x")


def test_an_interval_within_the_controls_reach_of_no_effect_is_not_asserted():
    # 0.959x (0.927x to 0.980x) lies 2.0% below 1x: past it by its interval, not by an A/A control
    # that read identical code 5.9% apart; the planted version judged it "does not hold here" all the same
    slower = _est(0.959, 0.927, 0.980)
    assert assess(COMPILE, slower).status == "does not hold here"
    near = Claim("it is faster", "speedup", low=1.03, partly=1.0, unit="x")  # 5.1% above the interval
    v = assess(near, slower, error=0.059)
    assert v.status == "inconclusive", v.text
    assert "2.0% from 1x, within the 5.9% an A/A control read" in v.text
    # against compile's 1.1x, 10.9% above the interval beyond the reach: on either side of 1x it fails
    v = assess(COMPILE, slower, error=0.059)
    assert v.status == "does not hold here" and v.refuted, v.text
    assert "2.0% from 1x, within the 5.9% an A/A control read" in v.text
    assert assess(COMPILE, _est(0.84, 0.807, 0.858), error=0.059).status == "does not hold here"  # 14% away


def test_the_control_moves_holds_to_holds_partly_only_near_the_promise():
    faster = Claim("it is faster", "speedup", low=1.05, partly=1.0, unit="x")
    near = _est(1.35, 1.08, 1.47)  # 2.9% above the promised 1.05x
    assert assess(faster, near).status == "holds"
    assert assess(faster, near, error=0.059).status == "holds partly"
    assert assess(faster, _est(1.35, 1.23, 1.47), error=0.059).status == "holds"  # 17% clear of it


def test_the_control_weighs_no_count_and_no_bad_error():
    bytes_ratio = Claim(COMPILE.statement, "a ratio of bytes", low=1.1, partly=1.0, unit="x", timed=False)
    untimed = assess(bytes_ratio, _est(0.959, 0.927, 0.980), error=0.059)
    assert untimed.status == "does not hold here"
    for bad in (-0.1, math.inf, math.nan, True, "5%"):
        with pytest.raises(ValueError, match="error"):
            assess(COMPILE, 0.9, error=bad)
