"""perfkit.stats, its estimate and order_stats modules, perfkit.units, and the verdict
modules that judge on them (verdict, verdict_text, advice) refuse bad arguments: each
public function and class raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value)
with a message naming the argument and what is allowed.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit import advice, estimate, order_stats, stats, units, verdict, verdict_text
from perfkit.advice import Claim, assess
from perfkit.order_stats import median_bounds, sign_coverage
from perfkit.stats import (
    Estimate,
    bootstrap,
    chance_misses,
    exact,
    joint_coverage,
    joint_level,
    largest,
    median,
    median_interval,
    median_ratio,
    min_samples,
    of_medians,
    paired_ratios,
    per_round,
    quantile,
    range_of,
)
from perfkit.units import printed_beside, printed_interval, share_range, si, si_beside, si_bound, si_interval
from perfkit.verdict import Prediction, context, judge, kinds_text
from perfkit.verdict_text import reading

NAN, INF = math.nan, math.inf
E = Estimate(1.0, 0.9, 1.1, 0.9, 5, "median of 5 samples")
XS = [1.0, 2.0, 3.0]
P = Prediction("speedup", "Amdahl", high=1.8, unit="x")
RECORDS = {"Verdict", "ClaimVerdict", "Reading"}               # records perfkit returns
NO_ARGUMENTS = {"busy", "machine_state", "machine_text"}        # read the machine, take nothing

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
    ("Estimate.text unit", lambda: E.text(None), TypeError, "unit must be a string"),
    ("Estimate.beside x", lambda: E.beside(math.nan), ValueError, "x must be a finite number"),
    ("Estimate.beside what", lambda: E.beside(1.0, ""), ValueError, "what must name the other estimate"),
    ("Estimate.on_end x", lambda: E.on_end(math.inf), ValueError, "x must be a finite number"),
    ("Estimate.point unit", lambda: E.point(1), TypeError, "unit must be a string"),
    ("Estimate.shifted c", lambda: E.shifted(NAN), ValueError, "c must be a finite number"),
    ("Estimate.needs with an interval", lambda: Estimate(1.0, 0.9, 1.1, 0.9, 3, "x", needs=5), ValueError,
     "needs .* goes with a level and no interval"),
    ("Estimate.needs not above n", lambda: Estimate(1.0, 1.0, 1.0, 0.9, 5, "x", needs=5), ValueError,
     "needs must be an int >= 6"),
    ("Estimate.needs without level", lambda: Estimate(1.0, 1.0, 1.0, None, 3, "x", needs=5), ValueError,
     "needs .* goes with a level"),
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
    ("median_interval.level str", lambda: median_interval(XS, level="0.9"), ValueError, "level"),
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
    ("bootstrap.level", lambda: bootstrap(max, [XS], True, "rounds", level=1.0), ValueError, "level"),
    ("of_medians.f", lambda: of_medians(None, [XS], [True]), TypeError, "f must be a callable"),
    ("of_medians.samples", lambda: of_medians(max, [], []), ValueError, "samples must be a non-empty"),
    ("of_medians.rising length", lambda: of_medians(max, [XS, XS], [True]), ValueError,
     "rising must hold one bool per sample"),
    ("of_medians.rising bool", lambda: of_medians(max, [XS], [1]), ValueError, "rising must hold one bool"),
    ("of_medians.level", lambda: of_medians(max, [XS], [True], level=0), ValueError, "level"),
    ("per_round.stat", lambda: per_round("max", [XS]), TypeError, "stat must be a callable"),
    ("per_round.samples unequal", lambda: per_round(max, [XS, [1.0]]), ValueError,
     "samples must be equally long"),
    ("per_round.samples str", lambda: per_round(max, "12"), ValueError, "samples must be a non-empty"),
    ("per_round.what", lambda: per_round(max, [XS], what=""), TypeError, "what must be a str"),
    ("largest.estimates empty", lambda: largest([]), ValueError, "estimates must be a non-empty"),
    ("largest.estimates item", lambda: largest([1.0]), TypeError, "estimates must hold"),
    ("largest.estimates exact", lambda: largest([exact(1.0)]), ValueError,
     "estimates must each carry a confidence level"),
    ("largest.estimates levels", lambda: largest([E] * 11), ValueError, "joint confidence above 0"),
    ("joint_coverage.estimates empty", lambda: joint_coverage([]), ValueError,
     "estimates must be a non-empty"),
    ("joint_coverage.estimates item", lambda: joint_coverage([1.0]), TypeError, "estimates must hold"),
    ("joint_coverage.estimates exact", lambda: joint_coverage([exact(1.0)]), ValueError,
     "estimates must each carry a confidence level"),
    ("Estimate.coverage below level", lambda: Estimate(1.0, 0.9, 1.1, 0.9, 5, "x", coverage=0.8), ValueError,
     r"coverage must lie in \[level, 1\)"),
    ("Estimate.coverage without level", lambda: Estimate(1.0, 0.9, 1.1, None, 5, "x", coverage=0.95),
     ValueError, "coverage must lie"),
    ("joint_level.k", lambda: joint_level(0), ValueError, "k must be an int >= 1"),
    ("joint_level.level", lambda: joint_level(2, level=1.5), ValueError, "level"),
    ("min_samples.level", lambda: min_samples(1.0), ValueError, r"level must be a finite number in \(0, 1\)"),
    ("min_samples.level str", lambda: min_samples("0.9"), TypeError, "level must be"),
    ("chance_misses.n", lambda: chance_misses(-1), ValueError, "n must be an int >= 0"),
    ("chance_misses.level", lambda: chance_misses(3, level=1.0), ValueError, "level"),
    # units
    ("si.value", lambda: si("1k"), TypeError, "value must be a number"),
    ("si.unit", lambda: si(1.0, None), TypeError, "unit must be a string"),
    ("si.digits", lambda: si(1.0, "s", 0), ValueError, "digits must be an int from 1 to 15"),
    ("si_bound.side", lambda: si_bound(1.0, "x", "lower"), ValueError, "side must be 'low' or 'high'"),
    ("si_bound.value", lambda: si_bound("1"), TypeError, "value must be a number"),
    ("si_interval.value", lambda: si_interval("1", 0.9, 1.1), TypeError, "value must be a number"),
    ("share_range.low", lambda: share_range("0.9", 1.1), TypeError, "low must be a number"),
    ("share_range.low above high", lambda: share_range(1.1, 0.9), ValueError, "low .* above high"),
    ("si_interval.low above value", lambda: si_interval(1.0, 1.1, 1.2), ValueError,
     "low <= value <= high must hold"),
    ("si_interval.high inf", lambda: si_interval(1.0, 0.9, INF), ValueError, "low <= value <= high"),
    ("si_interval.unit", lambda: si_interval(1.0, 0.9, 1.1, 2), TypeError, "unit must be a string"),
    ("printed_beside.x", lambda: printed_beside("1", 1.0, 0.9, 1.1), TypeError, "x must be a number"),
    ("printed_beside.x inf", lambda: printed_beside(math.inf, 1.0, 0.9, 1.1), ValueError,
     "x must be a finite"),
    ("printed_beside.low above value", lambda: printed_beside(1.0, 1.0, 1.1, 1.2), ValueError,
     "low <= value <= high"),
    ("si_beside.x", lambda: si_beside(None, 1.0, 0.9, 1.1), TypeError, "x must be a number"),
    ("si_beside.unit", lambda: si_beside(1.0, 1.0, 0.9, 1.1, 3), TypeError, "unit must be a string"),
    ("printed_interval.value", lambda: printed_interval("1", 0.9, 1.1), TypeError, "value must be a number"),
    ("printed_interval.low above value", lambda: printed_interval(1.0, 1.1, 1.2), ValueError,
     "low <= value <= high"),
    ("printed_interval.unit", lambda: printed_interval(1.0, 0.9, 1.1, 2), TypeError, "unit must be a string"),
    ("si_interval.digits", lambda: si_interval(1.0, 0.9, 1.1, "x", 16), ValueError, "digits must be"),
    # order statistics
    ("sign_coverage.n", lambda: sign_coverage(0, 1), ValueError, "n must be an int >= 1"),
    ("sign_coverage.k", lambda: sign_coverage(5, 4), ValueError, r"k must be an int in \[1, 3\]"),
    ("median_bounds.xs few", lambda: median_bounds(XS, 0.9), ValueError, "xs must hold at least 5 values"),
    ("median_bounds.xs str", lambda: median_bounds("12345", 0.9), TypeError, "xs must be a list"),
    ("median_bounds.xs nan", lambda: median_bounds([1.0, 2.0, 3.0, 4.0, NAN], 0.9), ValueError,
     "xs entries must be a finite number"),
    ("median_bounds.level", lambda: median_bounds(XS * 2, 0.0), ValueError, "level must be"),
    # verdicts on them
    ("Prediction.physical", lambda: Prediction("w", "m", high=1.0, physical=[0, 1]), TypeError,
     "physical must be a .low, high. tuple"),
    ("Prediction.physical order", lambda: Prediction("w", "m", high=1.0, physical=(1, 0)), ValueError,
     "physical must have low <= high"),
    ("Prediction.can_fail within", lambda: P.can_fail(within=(2.0, 1.0)), ValueError,
     "within must have low <= high"),
    ("Prediction.what", lambda: Prediction("", "m", high=1.0), ValueError, "what and model"),
    ("judge.prediction", lambda: judge("p", 1.0), TypeError, "prediction must be a Prediction"),
    ("judge.explain", lambda: judge(P, 1.0, explain={"faster": "x"}), ValueError, "explain keys"),
    ("judge.prediction cannot fail", lambda: judge(Prediction("w", "m", high=5.0, physical=(0, 2)), 1.0),
     ValueError, "cannot fail"),
    ("context.prediction", lambda: context("p", 1.0), TypeError, "prediction must be a Prediction"),
    ("kinds_text.verdicts", lambda: kinds_text([P]), TypeError, r"verdicts\[0\] must be a perfkit.verdict"),
    ("context.measured", lambda: context(P, "1.2"), TypeError, "measured must be a number or"),
    ("context.within", lambda: context(P, 1.2, within=(0, 1, 2)), TypeError,
     "within must be a .low, high. tuple"),
    ("reading.measured", lambda: reading("1.0", None), TypeError, "measured must be a number or"),
    ("reading.spread", lambda: reading(1.0, (2.0, 1.0)), ValueError, "spread must be .low, high."),
    ("reading.spread with an Estimate", lambda: reading(E, (0.5, 1.5)), ValueError, "give spread only"),
    ("Claim.range", lambda: Claim("advice", "figure"), ValueError, "promised range"),
    ("Claim.partly", lambda: Claim("a", "f", low=1, high=2, partly=1.5), ValueError, "partly"),
    ("Claim.timed", lambda: Claim("a", "f", low=1.0, timed="no"), TypeError, "timed must be a bool"),
    ("assess.claim", lambda: assess("advice", 1.0), TypeError, "claim must be a Claim"),
    ("assess.reasons", lambda: assess(Claim("a", "f", low=1.0), 1.0, reasons={"held": "x"}), ValueError,
     "reasons keys"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


@pytest.mark.parametrize("module", [stats, estimate, order_stats, units, verdict, verdict_text, advice],
                         ids=lambda m: m.__name__)
def test_every_public_callable_has_a_case(module):
    # LEVEL, MIN_SAMPLES, BOOTSTRAP_MIN, RESAMPLES and SEED are constants
    missing = uncovered(module, CASES, RECORDS | NO_ARGUMENTS)
    assert not missing, f"no bad-input case for {missing}"
