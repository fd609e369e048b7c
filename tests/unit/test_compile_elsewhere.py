"""compiled_elsewhere: another run's verdict on the compiled step comes from its interval."""

import pytest

from perfkit.compute import compiling
from perfkit.timing import Measurement

EAGER = (0.0652, 0.0655, 0.0657, 0.0658, 0.0659, 0.0659, 0.0660, 0.0661, 0.0663, 0.0668, 0.0690)
COMPILED = (0.0615, 0.0617, 0.0618, 0.0620, 0.0621, 0.0621, 0.0622, 0.0623, 0.0625, 0.0629, 0.0650)
REC = compiling.CompileRecord(9.1, Measurement(EAGER, 0), Measurement(COMPILED, 0))


def test_a_sweep_whose_interval_holds_1x_puts_no_step_ahead_and_prints_no_break_even():
    # notebook 06's case: 50.7 against 50.6 ms at the medians, a ratio of 1.00x whose spread holds 1x;
    # the old sentence said "Both put the compiled step ahead" and a five-digit break-even
    eager = (0.0480, 0.0495, 0.0500, 0.0507, 0.0510, 0.0520, 0.0535)
    comp = (0.0470, 0.0490, 0.0502, 0.0506, 0.0512, 0.0525, 0.0540)
    est, said = compiling.compiled_elsewhere(REC, Measurement(eager, 0), Measurement(comp, 0))
    assert est.has_interval and est.low < 1 < est.high
    assert "Both" not in said and "calls" not in said
    assert "this sweep's interval holds 1x, so this sweep's rounds do not resolve which step is faster" \
        in said


def test_a_sweep_clear_of_1x_gives_a_break_even_range_from_its_interval_ends():
    eager = tuple(t * 1.2 for t in COMPILED)
    est, said = compiling.compiled_elsewhere(REC, Measurement(eager, 0), Measurement(COMPILED, 0))
    assert est.clear_of(1.0, "x") == "above" and " Both intervals lie above 1x." in said
    c = sorted(COMPILED)[5]
    soon, late = 9.1 / (c * (est.high - 1)), 9.1 / (c * (est.low - 1))
    assert f"after {soon:,.0f} to {late:,.0f} calls, against section 3's {REC.break_even_span('calls')}" \
        in said


def test_opposite_sides_and_an_unresolved_own_ratio_are_named():
    slower = tuple(t * 1.2 for t in EAGER)
    _, said = compiling.compiled_elsewhere(REC, Measurement(EAGER, 0), Measurement(slower, 0))
    assert "opposite sides" in said
    tie = compiling.CompileRecord(9.1, Measurement(EAGER, 0), Measurement(EAGER[3:] + EAGER[:3], 0))
    _, said = compiling.compiled_elsewhere(tie, Measurement(EAGER, 0), Measurement(COMPILED, 0))
    assert "do not put the compiled step clearly ahead" in said
    with pytest.raises(TypeError, match="eager"):
        compiling.compiled_elsewhere(REC, EAGER, Measurement(COMPILED, 0))
