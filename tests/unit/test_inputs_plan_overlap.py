"""perfkit.plan.overlap refuses bad arguments with a message naming the argument and what is
allowed. Each case is (id, call, exception, regex on the message)."""

import importlib
import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.plan.overlap import exposed_time, full_charge

module = importlib.import_module("perfkit.plan.overlap")

CASES = [
    ("exposed_time negative comm", lambda: exposed_time(-1.0, 1.0, 2), ValueError, "comm_s"),
    ("exposed_time nan comm", lambda: exposed_time(math.nan, 1.0, 2), ValueError, "comm_s"),
    ("exposed_time inf compute", lambda: exposed_time(1.0, math.inf, 2), ValueError, "compute_s"),
    ("exposed_time str compute", lambda: exposed_time(1.0, "1", 2), TypeError, "compute_s"),
    ("exposed_time zero chunks", lambda: exposed_time(1.0, 1.0, 0), ValueError, "chunks"),
    ("exposed_time float chunks", lambda: exposed_time(1.0, 1.0, 2.5), ValueError, "chunks"),
    ("full_charge empty", lambda: full_charge({}), ValueError, "costs"),
    ("full_charge list", lambda: full_charge([1.0]), TypeError, "costs"),
    ("full_charge float cost", lambda: full_charge({"zero1": 1.0}), TypeError, "costs"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_named_argument(case):
    _, call, exc, msg = case
    with pytest.raises(exc, match=msg):
        call()


def test_cases_are_unique_and_cover_the_module():
    assert duplicate_ids(CASES) == []
    # OverlapRule: a record of the rules' table; micro_batch_overhead takes no arguments
    assert uncovered(module, CASES, {"OverlapRule", "micro_batch_overhead"}) == []
