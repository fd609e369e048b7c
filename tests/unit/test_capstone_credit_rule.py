"""The capstone's credit rule (module 08): a kept fix is credited only where its interval lies
above 1x or the parts its bound sums fell by more than the profiled steps' spread."""

import pytest

from perfkit.profiling._capstone_credit import bound_ms, credit, step_spread_ms
from perfkit.profiling.capstone_explain import explain_round
from perfkit.profiling.capstone_text import Pick, reads_pick
from perfkit.stats import Estimate
from tests.unit.test_capstone import report

HOLDS_1X = Estimate(1.11, 0.67, 1.72, 0.9, 16, "m")


def test_the_reads_fix_is_judged_on_the_parts_its_bound_counts_not_the_whole_sync_phase():
    # as run: the whole sync phase rose 11.5 -> 12.7 ms (its wait with a collective in flight rose),
    # while the reads and the loop between them fell 0.4 -> 0.0 ms and communication 4.2 -> 4.0 ms
    before = {**report([("high", "sync", 0.324)], {"sync": 0.324, "communication": 0.117},
                       steps=(0.0355, 0.0355)), "sync_comm_share": 0.312}
    after = {**report([], {"sync": 0.34, "communication": 0.107}, steps=(0.0374, 0.0374)),
             "sync_comm_share": 0.34}
    pick = reads_pick(before, "sync")
    assert bound_ms(pick, before) == pytest.approx((0.012 + 0.117) * 35.5)
    assert bound_ms(pick, after) == pytest.approx(0.107 * 37.4)
    c = credit(pick, HOLDS_1X, before, after)  # identical steps: no spread to clear
    assert c.credited and "went 4.6 -> 4.0 ms per profiled step" in c.text  # the old rule: 15.7 -> 16.7
    # the round's sentence sums the same parts, not the whole sync phase with its wait
    said = explain_round(pick, 1.11, before, 1.0, repeated=True, after_report=after)["inconclusive"]
    assert "(the parts the bound counts 4.6 -> 4.0 ms)" in said and "together 15.7" not in said


def test_a_fall_within_the_steps_spread_is_not_credited():
    pick = Pick("communication", 0.4, 1.7, "m", "ddp", ("sync", "communication"))
    before = report([], {"sync": 0.2, "communication": 0.2}, steps=(0.09, 0.11))
    after = report([], {"sync": 0.2, "communication": 0.1999}, steps=(0.09, 0.11))  # 0.01 ms less
    assert step_spread_ms(before) == pytest.approx(14.142, abs=1e-3)
    c = credit(pick, HOLDS_1X, before, after)
    assert not c.credited and "within the 14.1 ms" in c.text and "applied, not credited" in c.text
    far = report([], {"sync": 0.0, "communication": 0.1}, steps=(0.09, 0.11))  # 30 ms less
    assert credit(pick, HOLDS_1X, before, far).credited
    above = Estimate(1.3, 1.1, 1.5, 0.9, 16, "m")
    assert credit(pick, above, before, after).credited  # the interval alone credits it
    with pytest.raises(ValueError, match="report must be"):
        bound_ms(pick, {"shares": {}})
