"""perfkit.plan.failures refuses bad arguments with a message naming the argument (or the
``perfkit plan`` flag) and what is allowed: a zero or negative rate, bandwidth or size, NaN,
inf, a string where a number is meant, a GPU count below 1.

Each case is (id, call, exception, regex on the message).
"""

import argparse
import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.plan import failures
from perfkit.plan.failures import (
    add_failure_arguments,
    checkpoint_bytes,
    failure_lines,
    failure_options,
    failure_plan,
    llama3_check,
)

NAN, INF = math.nan, math.inf


def flags(**kw):
    ns = {"storage_gb_per_s": None, "gpu_failures_per_year": 0.17, "restart_minutes": 10.0}
    return argparse.Namespace(**{**ns, **kw})


CASES = [
    ("failure_plan.state_bytes zero", lambda: failure_plan(0.0, 8), ValueError,
     "state_bytes must be a finite number > 0"),
    ("failure_plan.gpus zero", lambda: failure_plan(1e9, 0), ValueError, "gpus must be an int >= 1"),
    ("failure_plan.gpus float", lambda: failure_plan(1e9, 8.0), ValueError, "gpus"),
    ("failure_plan.step_s negative", lambda: failure_plan(1e9, 8, -1.0), ValueError, "step_s"),
    ("failure_plan.gpu_failures_per_year zero", lambda: failure_plan(1e9, 8, None, 0.0),
     ValueError, "gpu_failures_per_year must be a finite number > 0"),
    ("failure_plan.gpu_failures_per_year str", lambda: failure_plan(1e9, 8, None, "0.2"),
     TypeError, "gpu_failures_per_year"),
    ("failure_plan.storage_bytes_per_s nan", lambda: failure_plan(1e9, 8, storage_bytes_per_s=NAN),
     ValueError, "storage_bytes_per_s"),
    ("failure_plan.storage_bytes_per_s zero", lambda: failure_plan(1e9, 8, storage_bytes_per_s=0),
     ValueError, "storage_bytes_per_s must be a finite number > 0"),
    ("failure_plan.restart_s negative", lambda: failure_plan(1e9, 8, restart_s=-1.0), ValueError,
     "restart_s must be a finite number >= 0"),
    ("failure_plan.gpu_state_bytes inf", lambda: failure_plan(1e9, 8, gpu_state_bytes=INF),
     ValueError, "gpu_state_bytes"),
    ("checkpoint_bytes.model", lambda: checkpoint_bytes("llama"), TypeError,
     "model must be a ModelSpec"),
    ("checkpoint_bytes.recipe", lambda: checkpoint_bytes(failures.ModelSpec(
        "m", layers=1, hidden=8, heads=1, ffn=8, vocab=8, seq=8), "adam"), ValueError,
     "recipe must be a StateRecipe or one of"),
    ("failure_lines.fp", lambda: failure_lines({"goodput": 0.9}), TypeError,
     "fp must be a FailurePlan"),
    ("llama3_check.restart_s", lambda: llama3_check(-1.0), ValueError, "restart_s"),
    ("failure_options.rate", lambda: failure_options(flags(gpu_failures_per_year=-1.0)),
     ValueError, "--gpu-failures-per-year must be a finite number > 0"),
    ("failure_options.storage", lambda: failure_options(flags(storage_gb_per_s=0.0)), ValueError,
     "--storage-gb-per-s must be a finite number > 0"),
    ("failure_options.restart", lambda: failure_options(flags(restart_minutes=INF)), ValueError,
     "--restart-minutes"),
    ("add_failure_arguments.ap", lambda: add_failure_arguments(None), TypeError,
     "ap must be an ArgumentParser"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(failures, CASES, {"FailurePlan"})
    assert not missing, f"no bad-input case for {missing}"
