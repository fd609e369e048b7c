"""The odd-over-aligned ratio carries the aligned widths' own spread."""

from perfkit.compute.kernels import ShapeSummary

ODD = (1.02, 0.96, 1.0, 1.03, 1.05, 1.02, 1.01, 0.99, 1.04, 1.02, 1.03, 1.02, 1.0)


def test_odd_share_interval_holds_1_when_the_aligned_widths_spread_past_it():
    # notebook 06's case: 4 multiples of 64 spread 98%-107%; the old interval took their median as
    # exact and, from the odd widths alone, lay above 1x (1.01x to 1.05x)
    s = ShapeSummary("float32", 1.0, (0.98, 0.99, 1.01, 1.07, 1.0, 0.97), ODD)
    est = s.odd_share
    assert est.has_interval and est.clear_of(1.0, "x") == ""
    assert est.low < 0.98 and est.level >= 0.9
    assert "13 odd widths to 6 multiples of 64" in est.describe("x")


def test_odd_share_gives_no_interval_below_90_percent():
    # 4 multiples of 64: the old code asked a 77 % interval of them and printed it ("79% interval")
    est = ShapeSummary("float32", 1.0, (0.98, 0.99, 1.01, 1.07), ODD).odd_share
    assert not est.has_interval and est.needs


def test_odd_share_is_resolved_where_both_groups_clear_1_and_needs_four_aligned_widths():
    s = ShapeSummary("float32", 1.0, (0.99, 1.0, 1.0, 1.01, 1.0, 1.0), tuple(v + 0.2 for v in ODD))
    assert s.odd_share.clear_of(1.0, "x") == "above" and s.odd_share.level == 0.9  # 6 aligned: usual level
    assert not ShapeSummary("float32", 1.0, (0.99, 1.0, 1.01), ODD).odd_share.has_interval
