"""perfkit.saving.interval against Daly's published cases, a numerical minimum of Daly's exact
wall time, a simulation of that wall time, and numbers worked by hand.

Daly's cases come from J. T. Daly, "A higher order estimate of the optimum checkpoint
interval for restart dumps", Future Generation Computer Systems 22(3), 303-312 (2006),
doi:10.1016/j.future.2004.11.016, captions of Figs. 3-5: with R = 10 min and delta = 5 min,
"The new model predicts tau_opt = 117 min" at M = 24 h, "57 min" at M = 6 h and "9.1 min" at
M = 15 min (the captions give the rounding we compare at).
"""

import math
import random

import pytest
from scipy.optimize import minimize_scalar

from perfkit.saving.interval import (
    best_interval,
    daly_goodput,
    daly_interval,
    daly_wall_time,
    goodput,
    young_interval,
)

# (M in minutes, Daly's published tau_opt in minutes, the digits the caption gives)
DALY_CASES = [(24 * 60, 117, 0), (6 * 60, 57, 0), (15, 9.1, 1)]
DELTA_MIN = 5.0


@pytest.mark.parametrize(("mtbf", "published", "digits"), DALY_CASES)
def test_daly_interval_reproduces_the_published_cases(mtbf, published, digits):
    assert round(daly_interval(DELTA_MIN, mtbf), digits) == published
    # Young's interval rounds to something else in each case: a Daly asked for Young fails
    assert round(young_interval(DELTA_MIN, mtbf), digits) != published


def test_young_interval_worked_by_hand():
    assert young_interval(5.0, 1440.0) == 120.0  # sqrt(2 * 5 * 1440) = sqrt(14400)
    assert young_interval(2.0, 4.0) == 4.0


def test_planted_wrong_formulas_miss_the_published_cases():
    def missing_two(d, m):
        x = math.sqrt(d / (2 * m))
        return math.sqrt(d * m) * (1 + x / 3 + x * x / 9) - d

    def plus_delta(d, m):
        return daly_interval(d, m) + 2 * d  # tau + delta where tau - delta is meant

    for wrong in (missing_two, plus_delta, young_interval):
        assert any(round(wrong(DELTA_MIN, m), k) != p for m, p, k in DALY_CASES), wrong.__name__


def exact_optimum(delta: float, mtbf: float) -> float:
    res = minimize_scalar(lambda t: daly_wall_time(t, delta, 0.0, mtbf, 1.0),
                          bounds=(1e-9 * mtbf, 10 * mtbf), method="bounded",
                          options={"xatol": 1e-12 * mtbf})
    return res.x


@pytest.mark.parametrize(("ratio", "tol"), [(1e-4, 1e-6), (1e-3, 1e-5), (0.01, 1e-4),
                                            (0.1, 1e-3), (0.5, 1e-2), (1.5, 0.05)])
def test_daly_estimate_is_near_the_exact_minimum_of_the_wall_time(ratio, tol):
    exact = exact_optimum(ratio * 3600.0, 3600.0)
    assert daly_interval(ratio * 3600.0, 3600.0) == pytest.approx(exact, rel=tol)
    # the exact optimum solves exp((tau + delta) / M) (1 - tau / M) = 1
    t, d = exact / 3600.0, ratio
    assert math.exp(t + d) * (1 - t) == pytest.approx(1.0, abs=1e-6)


def test_young_is_long_where_the_save_is_not_short():
    # Young's first-order interval is 17 % long at delta / M = 0.1; Daly's is 0.04 % short
    exact = exact_optimum(360.0, 3600.0)
    assert young_interval(360.0, 3600.0) / exact == pytest.approx(1.167, abs=0.005)
    assert daly_interval(360.0, 3600.0) < exact


def test_a_save_longer_than_two_mtbf_saves_once_per_mtbf():
    assert daly_interval(20.0, 10.0) == 10.0
    assert daly_interval(25.0, 10.0) == 10.0
    assert daly_interval(19.99, 10.0) < 10.0


def simulated_wall_time(tau, delta, restart, mtbf, segments, rng):
    """Poisson failures strike anywhere (training, saves, restarts); each sends the run back
    to its last save, through a restart that may itself fail."""
    total = 0.0
    for _ in range(segments):
        while True:
            t = rng.expovariate(1 / mtbf)
            if t >= tau + delta:
                total += tau + delta
                break
            total += t
            while (t := rng.expovariate(1 / mtbf)) < restart:
                total += t
            total += restart
    return total / (segments * tau)  # wall seconds per second of training


def test_daly_wall_time_matches_a_simulation_of_its_assumptions():
    rng = random.Random(7)
    tau, delta, restart, mtbf = 3.0, 0.5, 2.0, 10.0
    sim = simulated_wall_time(tau, delta, restart, mtbf, 40000, rng)
    assert daly_wall_time(tau, delta, restart, mtbf, 1.0) == pytest.approx(sim, rel=0.01)
    # a model without the restart's own failures (exp(R / M) -> 1 + R / M) is 1.7 % off here
    no_restart_failures = (mtbf + restart) * math.expm1((tau + delta) / mtbf) / tau
    assert abs(no_restart_failures / sim - 1) > 0.012


def test_wall_time_scales_with_the_solve_time_and_overflows_to_inf():
    one = daly_wall_time(60.0, 5.0, 10.0, 1440.0, 1.0)
    assert daly_wall_time(60.0, 5.0, 10.0, 1440.0, 500.0) == pytest.approx(500 * one)
    assert daly_wall_time(1e6, 5.0, 10.0, 1.0, 1.0) == math.inf


def test_goodput_worked_by_hand():
    # 1 - 5/120 - (60 + 10)/1440
    assert goodput(120.0, 5.0, 10.0, 1440.0) == pytest.approx(1 - 5 / 120 - 70 / 1440, abs=1e-15)
    assert goodput(10.0, 0.0, 0.0, 100.0) == pytest.approx(0.95)   # only the half interval lost
    assert goodput(10.0, 1.0, 0.0, 1e30) == pytest.approx(0.9)     # only the saves


def test_goodput_returns_zero_where_the_losses_exceed_the_wall_time():
    assert goodput(3000.0, 5.0, 10.0, 1440.0) == 0.0   # tau > 2 M
    assert goodput(60.0, 5.0, 2000.0, 1440.0) == 0.0   # R > M
    assert daly_goodput(3000.0, 5.0, 10.0, 1440.0) > 0.0


def test_goodput_is_daly_to_first_order_and_drifts_where_tau_nears_m():
    # short intervals, saves and restarts against M: the two agree to second order, here
    # (delta / tau)^2 = 2.8e-4 apart
    small = (goodput(60.0, 1.0, 5.0, 36000.0), daly_goodput(60.0, 1.0, 5.0, 36000.0))
    assert small[0] == pytest.approx(small[1], abs=4e-4)
    # tau = M / 3: the first-order model is a point low; tau = M / 2: 2.5 points
    gap = daly_goodput(1200.0, 5.0, 60.0, 3600.0) - goodput(1200.0, 5.0, 60.0, 3600.0)
    assert 0.010 < gap < 0.014
    gap = daly_goodput(1800.0, 5.0, 60.0, 3600.0) - goodput(1800.0, 5.0, 60.0, 3600.0)
    assert 0.022 < gap < 0.028


def test_the_first_order_maximum_is_young_and_the_exact_one_daly():
    delta, restart, mtbf = 5.0, 10.0, 1440.0
    grid = [60.0 + 0.25 * i for i in range(400)]  # 60 .. 160 s
    assert best_interval(grid, delta, restart, mtbf) == pytest.approx(120.0, abs=0.125)
    assert best_interval(grid, delta, restart, mtbf, "daly") == pytest.approx(
        daly_interval(delta, mtbf), abs=0.25)


def test_best_interval_picks_from_the_grid_and_the_shorter_on_a_tie():
    # goodput(t) is symmetric in log t around Young's 120 s: 60 and 240 tie
    assert best_interval([240.0, 60.0], 5.0, 0.0, 1440.0) == 60.0
    assert best_interval([30.0, 480.0, 100.0], 5.0, 0.0, 1440.0) == 100.0
