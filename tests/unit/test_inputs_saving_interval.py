"""perfkit.saving.interval refuses bad arguments with a message naming the argument and what
is allowed: a zero or negative save time, MTBF or interval, NaN, inf, a string, an empty grid,
an unknown model.

Each case is (id, call, exception, regex on the message).
"""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import interval
from perfkit.saving.interval import (
    async_save_cost,
    async_save_cost_of_run,
    best_interval,
    daly_goodput,
    daly_interval,
    daly_wall_time,
    goodput,
    mtbf_interval,
    young_interval,
)

NAN, INF = math.nan, math.inf

CASES = [
    ("young_interval.save_s zero", lambda: young_interval(0.0, 10.0), ValueError,
     "save_s must be a finite number > 0"),
    ("young_interval.mtbf_s nan", lambda: young_interval(1.0, NAN), ValueError, "mtbf_s"),
    ("young_interval.save_s str", lambda: young_interval("1", 10.0), TypeError, "save_s"),
    ("daly_interval.save_s negative", lambda: daly_interval(-1.0, 10.0), ValueError, "save_s"),
    ("daly_interval.mtbf_s inf", lambda: daly_interval(1.0, INF), ValueError,
     "mtbf_s must be a finite number > 0"),
    ("daly_interval.mtbf_s bool", lambda: daly_interval(1.0, True), ValueError, "mtbf_s"),
    ("goodput.tau_s zero", lambda: goodput(0.0, 1.0, 1.0, 10.0), ValueError,
     "tau_s must be a finite number > 0"),
    ("goodput.save_s negative", lambda: goodput(1.0, -1.0, 1.0, 10.0), ValueError,
     "save_s must be a finite number >= 0"),
    ("goodput.restart_s nan", lambda: goodput(1.0, 1.0, NAN, 10.0), ValueError, "restart_s"),
    ("goodput.mtbf_s zero", lambda: goodput(1.0, 1.0, 1.0, 0.0), ValueError, "mtbf_s"),
    ("goodput.tau_s None", lambda: goodput(None, 1.0, 1.0, 10.0), TypeError, "tau_s"),
    ("daly_wall_time.solve_s zero", lambda: daly_wall_time(1.0, 1.0, 1.0, 10.0, 0.0), ValueError,
     "solve_s must be a finite number > 0"),
    ("daly_wall_time.restart_s negative", lambda: daly_wall_time(1.0, 1.0, -1.0, 10.0, 1.0),
     ValueError, "restart_s"),
    ("daly_goodput.mtbf_s negative", lambda: daly_goodput(1.0, 1.0, 1.0, -10.0), ValueError,
     "mtbf_s"),
    ("daly_goodput.tau_s inf", lambda: daly_goodput(INF, 1.0, 1.0, 10.0), ValueError, "tau_s"),
    ("best_interval.grid_s empty", lambda: best_interval([], 1.0, 1.0, 10.0), ValueError,
     "grid_s must hold at least one item"),
    ("best_interval.grid_s str", lambda: best_interval("1 2", 1.0, 1.0, 10.0), TypeError, "grid_s"),
    ("best_interval.grid_s zero entry", lambda: best_interval([1.0, 0.0], 1.0, 1.0, 10.0),
     ValueError, "grid_s entries must be a finite number > 0"),
    ("best_interval.model", lambda: best_interval([1.0], 1.0, 1.0, 10.0, "young"), ValueError,
     "model must be one of 'first-order', 'daly'"),
    ("best_interval.mtbf_s zero", lambda: best_interval([1.0], 1.0, 1.0, 0.0), ValueError,
     "mtbf_s"),
    ("mtbf_interval.failures zero", lambda: mtbf_interval(240.0, 0), ValueError,
     "failures must be an int >= 1"),
    ("mtbf_interval.failures float", lambda: mtbf_interval(240.0, 6.0), ValueError,
     "failures must be an int"),
    ("mtbf_interval.window_s zero", lambda: mtbf_interval(0.0, 6), ValueError,
     "window_s must be a finite number > 0"),
    ("mtbf_interval.level one", lambda: mtbf_interval(240.0, 6, level=1.0), ValueError,
     r"level must be a finite number in \(0, 1\)"),
    ("async_save_cost.blocked_s negative", lambda: async_save_cost(-1.0, 1, 1.0, 1.0), ValueError,
     "blocked_s must be a finite number >= 0"),
    ("async_save_cost.steps_per_save nan", lambda: async_save_cost(0.1, NAN, 1.0, 1.0), ValueError,
     "steps_per_save"),
    ("async_save_cost.step_s_during zero", lambda: async_save_cost(0.1, 1, 0.0, 1.0), ValueError,
     "step_s_during must be a finite number > 0"),
    ("async_save_cost.step_s_quiet str", lambda: async_save_cost(0.1, 1, 1.0, "1"), TypeError,
     "step_s_quiet"),
    ("async_save_cost_of_run.run list", lambda: async_save_cost_of_run([]), TypeError,
     "run must be a mapping"),
    ("async_save_cost_of_run.modes missing", lambda: async_save_cost_of_run({"step_s_without_persist": 0.3}),
     ValueError, "run lacks a benchmark field"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(interval, CASES)
    assert not missing, f"no bad-input case for {missing}"
