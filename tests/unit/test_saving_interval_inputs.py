"""perfkit.saving.interval's inputs: the MTBF's exact Poisson interval and an asynchronous save's cost.

The interval is checked against chi-square quantiles (Garwood's form: ``chi2(a/2, 2k) / 2`` to
``chi2(1 - a/2, 2k + 2) / 2`` failures), written out here so that the test needs no scipy, and
against the closed form for one failure.
"""

import math

import pytest

from perfkit.saving import async_save_cost, async_save_cost_of_run, daly_interval, mtbf_interval


def test_six_failures_leave_the_mtbf_within_a_factor_of_four_and_a_half():
    # the stored Daly sweep: 6 failure times in a 240 s window, replayed in every job; read as
    # "30 failures", the MTBF looked known to within a few per cent
    low, high = mtbf_interval(240.0, 6)
    assert low == pytest.approx(240 / (23.6848 / 2), rel=1e-4)   # chi2(0.95, 14) = 23.6848
    assert high == pytest.approx(240 / (5.2260 / 2), rel=1e-4)   # chi2(0.05, 12) = 5.2260
    assert low < 240 / 6 < high
    # Daly's interval grows about as sqrt(M): it moves by about x0.7 to x1.5 over that range
    mid = daly_interval(0.06, 40.0)
    assert 0.65 < daly_interval(0.06, low) / mid < 0.75 and 1.45 < daly_interval(0.06, high) / mid < 1.55
    # thirty independent failures would have narrowed it: the count that is given matters
    low30, high30 = mtbf_interval(1200.0, 30)
    assert high30 / low30 < (high / low) / 2


def test_one_failure_matches_the_closed_form():
    low, high = mtbf_interval(100.0, 1, level=0.9)
    assert 100 / high == pytest.approx(-math.log(0.95), rel=1e-6)      # P(X >= 1) = 0.05
    lam_hi = 100 / low                                                 # P(X <= 1) = 0.05
    assert math.exp(-lam_hi) * (1 + lam_hi) == pytest.approx(0.05, rel=1e-6)


def test_an_async_save_costs_its_blocked_time_and_the_slowdown_beside_its_persist():
    # the stored checkpoint run: 0.274 s blocked, 13 steps over 3 persists at 1.126 s against 0.347 s
    assert async_save_cost(0.274, 13 / 3, 1.126, 0.347) == pytest.approx(0.274 + 13 / 3 * 0.779)
    assert async_save_cost(0.274, 0, 1.126, 0.347) == 0.274
    assert async_save_cost(0.274, 4, 0.3, 0.347) == 0.274   # a faster step is taken as no faster


def test_a_stored_runs_async_save_is_set_against_its_sync_save():
    # the stored checkpoint run: the thread mode cost 3.65 s of training, 1.4x its sync save
    th = {"blocked_s": [0.27, 0.274, 0.28], "median_blocked_s": 0.274, "steps_during_persist": 13,
          "step_s_during_persist": 1.126}
    run = {"step_s_without_persist": 0.347, "modes": {"thread": th, "sync": {"median_blocked_s": 2.59}}}
    per_save, lost, ratio = async_save_cost_of_run(run)
    assert per_save == pytest.approx(13 / 3)
    assert lost == pytest.approx(async_save_cost(0.274, 13 / 3, 1.126, 0.347))
    assert ratio == pytest.approx(lost / 2.59) and ratio > 1    # on busy cores it cost more than sync
    with pytest.raises(ValueError, match="run lacks"):
        empty = {"thread": {**th, "blocked_s": []}, "sync": {"median_blocked_s": 2.59}}
        async_save_cost_of_run({"step_s_without_persist": 0.347, "modes": empty})
