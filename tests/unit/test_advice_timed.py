"""A claim judged on a count or on bytes (``Claim(timed=False)``) never blames the machine's
load: no load moves a count, and a reader took such remarks for a real caveat."""

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
