"""perfkit.saving.per_step refuses bad arguments with a message naming the argument and what
is allowed: a zero or negative step or failure interval, negative lost steps, NaN, inf, a
string, and a prediction where no step would commit.

Each case is (id, call, exception, regex on the message).
"""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import per_step
from perfkit.saving.per_step import per_step_goodput, per_step_prediction, whole_job_text

NAN, INF = math.nan, math.inf
RUN = {"failures": 7, "wall_s": 200.0, "time_goodput": 0.93, "uncommitted": 7, "attempted": 1690,
       "restart_s": 12.2}

CASES = [
    ("per_step_goodput.step_s zero", lambda: per_step_goodput(0.0, 10.0), ValueError,
     "step_s must be a finite number > 0"),
    ("per_step_goodput.step_s str", lambda: per_step_goodput("0.1", 10.0), TypeError, "step_s"),
    ("per_step_goodput.failure_interval_s nan", lambda: per_step_goodput(0.1, NAN), ValueError,
     "failure_interval_s"),
    ("per_step_goodput.failure_interval_s inf", lambda: per_step_goodput(0.1, INF), ValueError,
     "failure_interval_s must be a finite number > 0"),
    ("per_step_goodput.lost_steps negative", lambda: per_step_goodput(0.1, 10.0, -1.0), ValueError,
     "lost_steps must be a finite number >= 0"),
    ("per_step_goodput.lost_steps None", lambda: per_step_goodput(0.1, 10.0, None), TypeError,
     "lost_steps"),
    ("per_step_prediction.step_s negative", lambda: per_step_prediction(-0.1, 10.0), ValueError,
     "step_s"),
    ("per_step_prediction.lost_steps zero", lambda: per_step_prediction(0.1, 10.0, 0.0), ValueError,
     "lost_steps must be a finite number > 0"),
    ("per_step_prediction.tol_steps zero", lambda: per_step_prediction(0.1, 10.0, 1.0, 0.0),
     ValueError, "tol_steps must be a finite number > 0"),
    ("per_step_prediction.tol_steps str", lambda: per_step_prediction(0.1, 10.0, 1.0, "half"),
     TypeError, "tol_steps"),
    ("whole_job_text.result list", lambda: whole_job_text([1]), TypeError, "result"),
    ("whole_job_text.result lacks wall_s",
     lambda: whole_job_text({k: v for k, v in RUN.items() if k != "wall_s"}), ValueError,
     "result lacks 'wall_s'"),
    ("whole_job_text.time_goodput above 1", lambda: whole_job_text({**RUN, "time_goodput": 1.5}), ValueError,
     "time_goodput"),
    ("whole_job_text.groups one", lambda: whole_job_text(RUN, 1), ValueError, "groups"),
    ("per_step_prediction.failure_interval_s too short", lambda: per_step_prediction(1.0, 0.5),
     ValueError, "failure_interval_s .* must exceed lost_steps \\* step_s"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(per_step, CASES)
    assert not missing, f"no bad-input case for {missing}"
