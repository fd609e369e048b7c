"""A figure and its interval print at one precision, the point visibly inside, never an
interval of zero width (perfkit.units.si_interval, used by Estimate and by every verdict).

The property is checked over many values of every magnitude and unit, and a planted wrong
formatter (each number at its own three significant digits, as ``si`` prints one number)
must fail the same check.
"""

import random
import re

import pytest

from perfkit import stats
from perfkit.units import si, si_interval

UNITS = ["x", "", "%", " s", " B/s", " FLOP/s", " ms", " B"]
NUMBER = re.compile(r"^(-?[\d,]*\.?\d*)(.*)$")   # the number, then its power, prefix and unit


def parsed(texts: tuple[str, str, str]) -> tuple[list[float], set[str], set[int]]:
    """(numbers, unit suffixes with prefix, decimals) of three printed figures."""
    nums, suffixes, decimals = [], set(), set()
    for t in texts:
        m = NUMBER.match(t)
        nums.append(float(m[1].replace(",", "")))
        suffixes.add(m[2])
        decimals.add(len(m[1].split(".")[1]) if "." in m[1] else 0)
    return nums, suffixes, decimals


def violations(fmt, cases) -> list[str]:
    """Cases where ``fmt(value, low, high, unit)`` prints the point outside or on the edge of a
    wider interval, a zero-width interval, or three figures at different prefixes or decimals."""
    bad = []
    for value, low, high, unit in cases:
        texts = fmt(value, low, high, unit)
        (v, lo, hi), suffixes, decimals = parsed(texts)
        ok = (lo <= v <= hi and (v > lo or value == low) and (v < hi or value == high)
              and (lo < hi or low == high) and len(suffixes) == 1 and len(decimals) == 1)
        if not ok:
            bad.append(f"{value!r} in [{low!r}, {high!r}] {unit!r}: {texts}")
    return bad


def cases(seed=0, count=3000):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        scale = 10 ** rng.uniform(-9, 13)
        width = 10 ** rng.uniform(-6, 0.5)              # from a hair's breadth to 3x the figure
        low = scale * rng.uniform(0.2, 1.0)
        high = low * (1 + width)
        value = rng.choice([low, high, low + (high - low) * rng.random(), low + (high - low) * 1e-4])
        out.append((value, low, high, rng.choice(UNITS)))
    return out


def test_the_point_is_visibly_inside_at_one_precision():
    assert violations(si_interval, cases()) == []


def test_the_check_rejects_each_number_printed_at_its_own_precision():
    def each_own(value, low, high, unit):   # planted: si() per number
        return si(value, unit), si(low, unit), si(high, unit)

    bad = violations(each_own, cases(count=500))
    assert len(bad) > 50, "the check should catch a point on an edge and mixed precisions"
    assert violations(each_own, [(0.50005, 0.5, 0.5001, "")])   # 0.5 / 0.5 / 0.5


@pytest.mark.parametrize("args,want", [
    ((0.1848, 0.182, 0.212, "x"), ("0.185x", "0.182x", "0.212x")),
    ((1.2, 1.1, 1.3, "x"), ("1.2x", "1.1x", "1.3x")),          # trailing zeros dropped alike
    ((950e-6, 900e-6, 1.05e-3, "s"), ("0.95 ms", "0.90 ms", "1.05 ms")),
    ((6.2e-9, 6.1e-9, 6.3e-9, "ms"), ("6.2e-09 ms", "6.1e-09 ms", "6.3e-09 ms")),   # below any prefix
    ((5, 3, 9, ""), ("5", "3", "9")),                        # counts stay whole
    ((12_000, 11_000, 13_000, "ms"), ("12,000 ms", "11,000 ms", "13,000 ms")),
    ((0.0308, 0.0308, 0.194, ""), ("0.0308", "0.0308", "0.1940")),   # a point on its end: tied samples
])
def test_worked_examples(args, want):
    assert si_interval(*args) == want


def test_estimates_and_their_descriptions_print_through_it():
    e = stats.Estimate(950e-6, 900e-6, 1.05e-3, 0.9, 9, "median of 9 samples")
    assert e.text("s") == "0.95 ms (90% interval 0.90 ms to 1.05 ms, median of 9 samples)"
    assert e.describe("s") == "90% interval 0.90 ms to 1.05 ms, median of 9 samples"
    assert stats.exact(3).describe() == "exact" and str(stats.exact(3)) == "3 (exact)"


def test_clear_of_holds_for_the_printed_ends_not_the_unrounded_ones():
    """"The interval lies above 1x" must be true of what the reader sees. A clear_of that
    compared the unrounded ends would call 1.0004..1.03 "above" 1x, printed "1.00x to 1.03x"."""
    from perfkit.estimate import Estimate
    from perfkit.units import printed_interval

    rounds_onto = Estimate(1.02, 1.0004, 1.03, 0.9, 7, "median of 7 paired ratios")
    assert "1.00x to 1.03x" in rounds_onto.text("x") and rounds_onto.clear_of(1.0, "x") == ""
    assert Estimate(1.02, 1.006, 1.03, 0.9, 7, "m").clear_of(1.0, "x") == "above"
    assert Estimate(0.97, 0.95, 0.994, 0.9, 7, "m").clear_of(1.0, "x") == "below"
    assert Estimate(0.97, 0.95, 0.9996, 0.9, 7, "m").clear_of(1.0, "x") == ""
    assert Estimate(1.5, 1.5, 1.5, 0.9, 3, "m", needs=5).clear_of(1.0) == ""  # no interval: no side
    ms = Estimate(0.0031, 0.0029, 0.0033, 0.9, 7, "m")  # printed 2.9 ms to 3.3 ms
    assert ms.clear_of(0.0025, "s") == "above" and ms.clear_of(0.003, "s") == ""
    # the figure is rounded as the ends are: a step of 36.72 ms is not "above" an interval
    # printed as ending at 36.7 ms (a clear_of that kept x unrounded would say it is)
    busy = Estimate(0.0244, 0.0235, 0.03671, 0.9, 12, "median of 12 samples")
    assert "23.5 ms to 36.7 ms" in busy.text("s") and busy.clear_of(0.03672, "s") == ""
    assert busy.clear_of(0.0368, "s") == "below" and busy.clear_of(0.02352, "s") == ""
    assert busy.clear_of(0.0234, "s") == "above"
    rng = random.Random(3)
    for _ in range(2000):  # the printed ends, parsed back from the text, are printed_interval's
        v = 10 ** rng.uniform(-6, 6)
        lo, hi = v * (1 - rng.uniform(0, 0.2)), v * (1 + rng.uniform(0, 0.2))
        unit = rng.choice(UNITS).strip()
        nums, _, _ = parsed(si_interval(v, lo, hi, unit))
        plo, phi = printed_interval(v, lo, hi, unit)
        assert plo / nums[1] == pytest.approx(phi / nums[2], rel=1e-9), (v, lo, hi, unit)
    with pytest.raises(ValueError, match="x must be a finite number"):
        rounds_onto.clear_of(float("nan"))


def test_beside_says_where_another_estimate_of_the_figure_lies_as_printed():
    from perfkit.estimate import Estimate

    # notebook 13's ZeRO-1 step: paired 1.02x to 1.13x, the printed medians' ratio 1.145x
    zero1 = Estimate(1.08, 1.02, 1.13, 0.9, 7, "median of 7 paired ratios", coverage=0.984375)
    out = zero1.beside(1.145)
    assert out.startswith(" The ratio of the medians, 1.15x, lies above this 98% interval (1.02x to 1.13x)")
    assert "judges this interval only" in out
    unjudged = zero1.beside(1.145, judged=False)  # no verdict on it: the text claims none
    assert unjudged.endswith("of a different statistic (median of 7 paired ratios), which it does not cover.")
    assert zero1.beside(0.99).startswith(" The ratio of the medians, 0.99x, lies below this 98% interval")
    inside = " The ratio of the medians, 1.10x, lies inside this 98% interval (1.02x to 1.13x)."
    assert zero1.beside(1.10) == inside
    # at the printed precision: 1.1304 prints onto the end 1.13x, so it is not "above" (a beside
    # that compared unrounded numbers would call it outside)
    assert "inside" in zero1.beside(1.1304) and "inside" not in zero1.beside(1.136)
    assert Estimate(1.5, 1.5, 1.5, 0.9, 3, "m", needs=5).beside(1.0) == ""  # no interval: nothing to say
    # the other figure prints at the interval's digits: 1.034x beside 1.016x to 1.030x, never
    # "1.03x", which would read as inside an interval it lies above
    padded = Estimate(1.020, 1.016, 1.030, 0.9, 7, "median of 7 paired ratios")
    assert "1.016x to 1.030x" in padded.text("x")
    assert padded.beside(1.034).startswith(" The ratio of the medians, 1.034x, lies above")
    assert zero1.beside(1.2, "the ratio of the whole runs' rates").startswith(" The ratio of the whole runs'")


def test_on_end_names_a_figure_inside_only_because_it_rounds_onto_a_printed_end():
    from perfkit.estimate import Estimate

    # notebook 00: write-allocate's 1.125x beside an interval printed as ending at 1.12x (1.1236x
    # unrounded): 1.125 rounds to 1.12 at two decimals, so "inside" holds only as printed
    add = Estimate(1.07, 1.03, 1.1236, 0.9, 30, "median of 30 paired ratios")
    assert add.clear_of(1.125, "x") == ""
    end = " (on its high end as printed: 1.125x shows as 1.12x at the interval's digits)"
    assert add.on_end(1.125, "x") == end
    assert add.on_end(1.1, "x") == ""  # inside unrounded: nothing to say
    assert add.on_end(1.2, "x") == ""  # clear of the interval as printed: not inside at all
    assert add.on_end(1.0273, "x").startswith(" (on its low end as printed: 1.027x shows as 1.03x")
    assert Estimate(1.5, 1.5, 1.5, 0.9, 3, "m", needs=5).on_end(1.51) == ""  # no interval
