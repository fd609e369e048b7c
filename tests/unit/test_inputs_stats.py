"""perfkit.stats and perfkit.units (the floor every verdict and printed figure stands on)
refuse bad arguments: each public function and class raises ``TypeError`` (wrong type) or
``ValueError`` (wrong value) with a message naming the argument and what is allowed.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit import stats, units
from perfkit.stats import (
    Estimate,
    bootstrap,
    chance_misses,
    exact,
    median,
    median_interval,
    median_ratio,
    paired_ratios,
    quantile,
    range_of,
)
from perfkit.units import si

NAN, INF = math.nan, math.inf
E = Estimate(1.0, 0.9, 1.1, 0.9, 5, "bootstrap")
XS = [1.0, 2.0, 3.0]

CASES = [  # (id, call, exception, regex on the message)
    ("quantile.xs str", lambda: quantile("123", 0.5), TypeError, "xs must be a sequence"),
    ("quantile.xs empty", lambda: quantile([], 0.5), ValueError, "xs must hold at least one"),
    ("quantile.xs nan", lambda: quantile([1.0, NAN], 0.5), ValueError, "xs must hold finite"),
    ("quantile.q", lambda: quantile(XS, 1.5), ValueError, r"q must be in \[0, 1\]"),
    ("quantile.q str", lambda: quantile(XS, "0.5"), TypeError, "q must be a number"),
    ("median.xs item", lambda: median([1.0, "2"]), TypeError, "xs must hold numbers"),
    ("median.xs bool", lambda: median([True]), TypeError, "xs must hold numbers"),
    ("paired_ratios.a zero", lambda: paired_ratios([0.0], [1.0]), ValueError,
     "a must hold numbers > 0"),
    ("paired_ratios.b length", lambda: paired_ratios([1.0], [1.0, 2.0]), ValueError,
     "a and b must hold the same number of rounds"),
    ("Estimate.value nan", lambda: Estimate(NAN, 0.0, 1.0, 0.9, 2, "x"), TypeError,
     "value must be a number"),
    ("Estimate.low above value", lambda: Estimate(1.0, 1.5, 2.0, 0.9, 2, "x"), ValueError,
     "value must lie in its interval"),
    ("Estimate.level", lambda: Estimate(1.0, 1.0, 1.0, 1.5, 2, "x"), ValueError,
     r"level must be a confidence in \(0, 1\)"),
    ("Estimate.n", lambda: Estimate(1.0, 1.0, 1.0, None, 0, "x"), ValueError,
     "n must be an int >= 1"),
    ("Estimate.method", lambda: Estimate(1.0, 1.0, 1.0, None, 1, ""), ValueError,
     "method must say how the interval was made"),
    ("Estimate.scaled k", lambda: E.scaled(0), ValueError, "k must be a finite number > 0"),
    ("Estimate.scaled k inf", lambda: E.scaled(INF), ValueError, "k must be"),
    ("Estimate.inverse", lambda: Estimate(0.0, -1.0, 1.0, None, 1, "x").inverse(), ValueError,
     "inverse needs an estimate above 0"),
    ("Estimate.describe unit", lambda: E.describe(3), TypeError, "unit must be a string"),
    ("exact.value str", lambda: exact("3"), TypeError, "value must be a number"),
    ("exact.value nan", lambda: exact(NAN), TypeError, "value must be a number"),
    ("exact.what", lambda: exact(3, ""), ValueError, "what must say what the figure is"),
    ("range_of.xs", lambda: range_of(3), TypeError, "xs must be a sequence"),
    ("range_of.value", lambda: range_of(XS, value="2"), TypeError, "value must be a number"),
    ("range_of.lo", lambda: range_of(XS, lo=-0.1), ValueError, r"lo must be a finite number in \[0, 1\]"),
    ("range_of.hi below lo", lambda: range_of(XS, lo=0.9, hi=0.1), ValueError,
     r"hi must be a finite number in \[0.9, 1\]"),
    ("median_interval.xs", lambda: median_interval([]), ValueError, "xs must hold at least one"),
    ("median_interval.level", lambda: median_interval(XS, level=0), ValueError, "level"),
    ("median_interval.resamples", lambda: median_interval(XS, resamples=10), ValueError,
     "resamples must be an int >= 100"),
    ("median_interval.seed", lambda: median_interval(XS, seed=-1), ValueError,
     "seed must be an int >= 0"),
    ("median_ratio.a negative", lambda: median_ratio([-1.0], [1.0]), ValueError,
     "a must hold numbers > 0"),
    ("median_ratio.b inf", lambda: median_ratio([1.0], [INF]), ValueError, "b must hold finite"),
    ("median_ratio.b length", lambda: median_ratio(XS, [1.0]), ValueError,
     "a and b must hold the same number of rounds"),
    ("median_ratio.level", lambda: median_ratio(XS, XS, level=0.9 + 0.2), ValueError, "level"),
    ("bootstrap.stat", lambda: bootstrap(None, [XS], True, "rounds"), TypeError,
     "stat must be a callable"),
    ("bootstrap.samples str", lambda: bootstrap(max, "12", True, "rounds"), ValueError,
     "samples must be a non-empty list"),
    ("bootstrap.samples item", lambda: bootstrap(max, [XS, [NAN]], False, "runs"), ValueError,
     "samples entries must hold finite"),
    ("bootstrap.what", lambda: bootstrap(max, [XS], True, 3), TypeError,
     "what must be a str"),
    ("chance_misses.n", lambda: chance_misses(-1), ValueError, "n must be an int >= 0"),
    ("chance_misses.level", lambda: chance_misses(3, level=1.0), ValueError, "level"),
    # units
    ("si.value", lambda: si("1k"), TypeError, "value must be a number"),
    ("si.unit", lambda: si(1.0, None), TypeError, "unit must be a string"),
    ("si.digits", lambda: si(1.0, "s", 0), ValueError, "digits must be an int from 1 to 15"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


@pytest.mark.parametrize("module", [stats, units], ids=lambda m: m.__name__)
def test_every_public_callable_has_a_case(module):
    # LEVEL, RESAMPLES and SEED are constants
    missing = uncovered(module, CASES)
    assert not missing, f"no bad-input case for {missing}"
