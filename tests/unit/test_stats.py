"""perfkit.stats: one quantile, paired ratios, and intervals of known coverage at small n.

The order-statistic intervals are checked by simulation (their coverage at 5-9 samples is at
least the level they print) and against planted wrong versions (an interval one order
statistic too narrow, a percentile bootstrap of a handful of repeats) that the same checks
reject.
"""

import math
import random
import re

import numpy as np
import pytest

from perfkit import stats
from perfkit.order_stats import median_bounds, min_samples, sign_coverage

DRAWS = 2000          # simulated data sets per coverage check
TOLERANCE = 0.02      # 2000 draws: the binomial sd of a 0.93 coverage is 0.006; 3 sd below 0.9


def test_quantile_interpolates_between_order_statistics():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert stats.quantile(xs, 0) == 1 and stats.quantile(xs, 1) == 4
    assert stats.quantile(xs, 0.5) == 2.5            # not nearest-rank's 2 or 3
    assert stats.quantile(xs, 0.1) == pytest.approx(1.3)
    assert stats.median([3, 1, 2]) == 2


def test_timing_and_monitor_use_the_same_quantile():
    from perfkit.timing import Measurement

    xs = [0.5, 0.1, 0.9, 0.3, 0.7, 0.2]
    m = Measurement(tuple(xs), 0)
    for q in (0.1, 0.25, 0.9):
        assert m.quantile(q) == pytest.approx(stats.quantile(xs, q))


def test_paired_ratios_keep_pairs():
    assert stats.paired_ratios([2, 6], [1, 3]) == [2.0, 2.0]
    with pytest.raises(ValueError, match="same number"):
        stats.paired_ratios([1, 2], [1])


# --- the order-statistic interval: exact coverage, its minimum, its choice of k ---------------


def test_sign_coverage_is_the_binomial_tail_worked_by_hand():
    assert sign_coverage(5, 1) == 1 - 2 / 32                # [min, max] of 5
    assert sign_coverage(4, 1) == 1 - 2 / 16                # 87.5 %: four cannot make 90 %
    assert sign_coverage(9, 2) == pytest.approx(1 - 2 * (1 + 9) / 512)
    assert sign_coverage(1, 1) == 0.0                       # one draw brackets nothing


def test_the_minimum_samples_are_stated_and_follow_from_the_level():
    assert stats.MIN_SAMPLES == min_samples(stats.LEVEL) == 5
    assert (min_samples(0.95), min_samples(0.99), min_samples(0.5)) == (6, 8, 2)
    assert sign_coverage(stats.MIN_SAMPLES, 1) >= stats.LEVEL > sign_coverage(stats.MIN_SAMPLES - 1, 1)


@pytest.mark.parametrize("n", range(5, 21))
def test_median_bounds_take_the_narrowest_k_that_still_covers(n):
    xs = list(range(n, 0, -1))                     # unsorted on purpose
    lo, hi, k, cover = median_bounds(xs, 0.9)
    assert (lo, hi) == (k, n + 1 - k) and cover == sign_coverage(n, k) >= 0.9
    assert k + 1 > (n + 1) // 2 or sign_coverage(n, k + 1) < 0.9   # one narrower would not cover
    assert lo <= stats.median(xs) <= hi


def coverage(interval, draw, truth, n, seed=0):
    """Share of DRAWS simulated samples of size ``n`` whose ``interval(sample)`` holds ``truth``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(DRAWS):
        lo, hi = interval(draw(rng, n))
        hits += lo <= truth <= hi
    return hits / DRAWS


def ours(xs):
    e = stats.median_interval(xs)
    return e.low, e.high


def one_too_narrow(xs):   # a planted mutant: k + 1, the next order statistic in
    s = sorted(xs)
    _, _, k, _ = median_bounds(xs, 0.9)
    return s[k], s[len(s) - 1 - k]


def bootstrap_median(xs):   # the old method: a percentile bootstrap of the median
    e = stats.bootstrap(lambda x: float(np.median(x)), [xs], paired=False, what="repeats")
    arr = np.asarray(xs)
    idx = np.random.default_rng(0).integers(0, len(arr), (stats.RESAMPLES, len(arr)))
    return tuple(np.quantile(np.median(arr[idx], axis=1), [0.05, 0.95])) if e.needs else e.spread


DISTRIBUTIONS = {  # name: (draw, true median)
    "lognormal (skewed times)": (lambda rng, n: rng.lognormal(0.0, 0.5, n), 1.0),
    "exponential": (lambda rng, n: rng.exponential(1.0, n), math.log(2)),
    "uniform": (lambda rng, n: rng.uniform(2.0, 3.0, n), 2.5),
}


@pytest.mark.parametrize("name", DISTRIBUTIONS)
@pytest.mark.parametrize("n", [5, 6, 7, 8, 9])
def test_the_median_interval_covers_at_least_its_level(name, n):
    draw, truth = DISTRIBUTIONS[name]
    got = coverage(ours, draw, truth, n)
    assert got >= stats.LEVEL - TOLERANCE, f"{name}, n={n}: covered {got:.3f}"
    assert got == pytest.approx(sign_coverage(n, median_bounds(list(range(n)), 0.9)[2]), abs=0.03)


def test_the_coverage_check_rejects_planted_wrong_intervals():
    draw, truth = DISTRIBUTIONS["lognormal (skewed times)"]
    assert coverage(one_too_narrow, draw, truth, 5) < stats.LEVEL - TOLERANCE      # 62.5 % in theory
    assert coverage(bootstrap_median, draw, truth, 4) < stats.LEVEL - TOLERANCE    # 4 repeats


@pytest.mark.parametrize("n", [5, 7, 9])
def test_a_paired_ratio_covers_the_median_ratio_under_shared_load(n):
    def draw(rng, n):
        load = rng.uniform(1.0, 3.0, n)                          # each round's load hits both
        b = load * rng.lognormal(0, 0.05, n)
        return 1.3 * load * rng.lognormal(0, 0.05, n), b

    def interval(ab):
        e = stats.median_ratio(*ab)
        return e.low, e.high

    # the per-round ratio is 1.3 times a ratio of two iid lognormals: its median is 1.3
    assert coverage(interval, draw, 1.3, n) >= stats.LEVEL - TOLERANCE


@pytest.mark.parametrize("n", [6, 9])
def test_separate_runs_cover_the_ratio_of_their_medians(n):
    def draw(rng, n):
        return rng.lognormal(math.log(2.0), 0.3, n), rng.lognormal(0.0, 0.3, n + 2)

    def interval(ab):
        e = stats.median_ratio(*ab, paired=False)
        return e.low, e.high

    assert coverage(interval, draw, 2.0, n) >= stats.LEVEL - TOLERANCE


# --- what each function returns -------------------------------------------------------------------


def test_median_ratio_is_the_median_of_the_paired_ratios():
    rng = random.Random(0)
    b = [1 + rng.gauss(0, 0.05) for _ in range(40)]
    a = [1.2 * x * (1 + rng.gauss(0, 0.02)) for x in b]
    e = stats.median_ratio(a, b)
    assert e.value == pytest.approx(np.median(np.array(a) / np.array(b)))
    assert e.low < e.value < e.high and e.level == stats.LEVEL and e.n == 40
    assert 1.15 < e.low and e.high < 1.25          # the shared load cancels in pairs
    assert "40 paired ratios" in e.method and e.has_interval
    # more rounds narrow the uncertainty of the median; a range of single rounds does not
    wide, narrow = stats.median_ratio(a, b), stats.median_ratio(a * 4, b * 4)
    assert narrow.high - narrow.low < 0.7 * (wide.high - wide.low)


def test_a_ratio_that_is_one_has_an_interval_across_one():
    rng = random.Random(1)
    a = [1 + rng.gauss(0, 0.1) for _ in range(30)]
    b = [1 + rng.gauss(0, 0.1) for _ in range(30)]
    e = stats.median_ratio(a, b)
    assert e.low < 1 < e.high


def test_too_few_samples_give_no_interval_and_say_how_many_are_needed():
    for e in (stats.median_interval([1.0, 1.1, 0.9, 1.05]), stats.median_ratio([2.0, 2.2, 2.1], [1, 1, 1])):
        assert e.needs == stats.MIN_SAMPLES and e.low == e.value == e.high and not e.has_interval
        assert f"fewer than the {stats.MIN_SAMPLES} a 90% interval needs" in str(e)
    one = stats.median_ratio([2.0], [1.0])
    assert one.value == 2.0 and one.n == 1 and "1 sample," in one.describe()
    apart = stats.median_ratio([1.0, 2.0, 3.0, 4.0, 5.0], [2.0] * 9, paired=False)
    assert apart.needs == min_samples(math.sqrt(stats.LEVEL)) == 6 and "separate runs" in apart.method
    assert stats.median_interval([1.0, 1.1, 0.9, 1.05, 0.95]).has_interval


def test_unpaired_median_ratio_keeps_the_drift_between_runs():
    e = stats.median_ratio([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2.0] * 7, paired=False)
    assert e.value == pytest.approx(1.75) and (e.low, e.high) == (0.5, 3.0)   # [min, max] of 6
    drift = [1.0 + i / 8 for i in range(20)]   # exact in binary: every ratio is exactly 1.5
    a = [1.5 * d for d in drift]
    paired, apart = stats.median_ratio(a, drift), stats.median_ratio(a, drift, paired=False)
    assert paired.value == pytest.approx(1.5) and "all 20 paired ratios equal" in paired.method
    assert apart.high - apart.low > 0.2 and "separate runs" in apart.method


def test_of_medians_follows_each_median_the_way_the_figure_moves():
    fast, slow = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95], [2.0, 2.2, 1.8, 2.0, 2.1, 1.9]
    e = stats.of_medians(lambda f, s: s / f, [fast, slow], [False, True])
    assert e.value == pytest.approx(2.0)
    assert (e.low, e.high) == pytest.approx((1.8 / 1.1, 2.2 / 0.9))   # far ends: the slow low, the fast high
    with pytest.raises(ValueError, match="rising"):   # the figure falls as the fast median grows
        stats.of_medians(lambda f, s: s / f, [fast, slow], [True, False])
    short = stats.of_medians(lambda *m: sum(m), [fast[:5], slow, slow], [True] * 3)
    assert short.needs == min_samples(stats.LEVEL ** (1 / 3)) == 6


def test_per_round_is_the_median_of_each_rounds_figure():
    c, m, o = [3.0, 3.3, 2.9, 3.1, 3.0], [2.0, 2.2, 1.9, 2.0, 2.1], [4.0, 4.5, 3.8, 4.1, 4.2]
    e = stats.per_round(lambda ci, mi, oi: (ci + mi - oi) / mi, [c, m, o])
    each = sorted((ci + mi - oi) / mi for ci, mi, oi in zip(c, m, o))
    assert e.value == pytest.approx(each[2]) and (e.low, e.high) == pytest.approx((each[0], each[-1]))
    assert "median of 5 rounds" in e.method
    with pytest.raises(ValueError, match="equally long"):
        stats.per_round(lambda a, b: a / b, [[1.0, 2.0], [1.0]])
    with pytest.raises(ValueError, match="finite figure"):
        stats.per_round(lambda a, b: a / b - math.inf, [[1.0] * 5, [1.0] * 5])


def test_largest_holds_the_largest_figure_whenever_each_interval_holds():
    e = stats.Estimate
    runs = [e(0.05, -0.02, 0.12, 0.95, 30, "a"), e(-0.20, -0.30, -0.10, 0.95, 30, "b")]
    gap = stats.largest(runs, absolute=True)
    assert (gap.value, gap.low, gap.high) == pytest.approx((0.20, 0.10, 0.30))
    assert gap.level == pytest.approx(0.9)                          # Bonferroni: 1 - 2 x 0.05
    top = stats.largest(runs)
    assert (top.value, top.low, top.high) == (0.05, -0.02, 0.12)
    straddle = stats.largest([e(0.01, -0.02, 0.04, 0.95, 9, "c")] * 2, absolute=True)
    assert straddle.low == 0.0                                       # the gap may be none at all
    short = stats.largest([runs[0], e(0.3, 0.3, 0.3, 0.95, 3, "d", needs=6)], absolute=True)
    assert short.needs == 6 and short.low == short.value == short.high == 0.3
    assert stats.joint_level(2) == pytest.approx(0.95) and stats.joint_level(1) == stats.LEVEL
    # its text names each interval's exact coverage, not the level asked: 7 samples asked at 97.5 %
    # give [min, max], which covers 1 - 2/2^7 = 98.4 % (a text with the level asked would not add up
    # to the joint coverage it prints)
    sev = [stats.median_interval([1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.15], level=0.975)] * 2
    assert "each at 98.4%" in stats.largest(sev).method


def test_largest_covers_the_worst_gap_by_simulation():
    truths, n = [0.0, 0.3, -0.5], 9         # the worst |gap| is 0.5

    def interval(samples):
        ests = [stats.median_interval(s, level=stats.joint_level(3)) for s in samples]
        e = stats.largest(ests, absolute=True)
        return e.low, e.high

    def draw(rng, n):
        return [t + rng.standard_normal(n) * 0.3 for t in truths]

    assert coverage(interval, draw, 0.5, n) >= stats.LEVEL - TOLERANCE


def test_bootstrap_needs_its_minimum_and_pairs_rounds():
    rng = np.random.default_rng(1)
    b = list(rng.uniform(1, 3, 40))
    a = [2 * x for x in b]   # every round exactly twice as long: pairing removes all noise

    def ratio(x, y):
        return float(np.mean(x) / np.mean(y))

    paired = stats.bootstrap(ratio, [a, b], paired=True, what="rounds")
    apart = stats.bootstrap(ratio, [a, b], paired=False, what="runs")
    assert paired.spread == pytest.approx((2, 2)) and paired.method.endswith("equal")
    assert apart.low < 2 < apart.high and apart.level == stats.LEVEL and apart.n == 40
    few = stats.bootstrap(ratio, [a[:stats.BOOTSTRAP_MIN - 1], b[:stats.BOOTSTRAP_MIN - 1]], paired=True,
                          what="steps")
    assert few.needs == stats.BOOTSTRAP_MIN and few.low == few.value == few.high
    wider = stats.bootstrap(ratio, [a, b], paired=False, what="runs", level=0.99)
    assert wider.low < apart.low and wider.high > apart.high


def test_bootstrap_refuses_bad_samples():
    with pytest.raises(ValueError, match="equally long"):
        stats.bootstrap(lambda x, y: 1.0, [[1.0, 2.0], [1.0]], paired=True, what="rounds")
    with pytest.raises(ValueError, match="finite"):
        stats.bootstrap(lambda x: 1.0, [[1.0, math.nan]], paired=False, what="steps")
    with pytest.raises(ValueError, match="samples"):
        stats.bootstrap(lambda: 1.0, [], paired=False, what="steps")


def test_range_of_is_labelled_as_a_range_not_a_confidence():
    r = stats.range_of([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert r.level is None and r.low == pytest.approx(1.9) and r.high == pytest.approx(9.1)
    assert "repeats" in r.method and str(r).startswith("5.5 (spread 1.9 to 9.1")
    assert stats.range_of([1, 2, 3], value=5).high == 5


def test_chance_misses_is_half_the_tails():
    assert stats.chance_misses(100) == pytest.approx(5.0)
    assert stats.chance_misses(130, level=0.95) == pytest.approx(130 * 0.025)


# --- printing: the point visibly inside, never a zero-width interval ---------------------------


def test_estimate_refuses_a_point_outside_its_interval_and_keeps_its_record():
    with pytest.raises(ValueError, match="lie in its interval"):
        stats.Estimate(1.0, 1.1, 1.2, 0.9, 10, "x")
    with pytest.raises(TypeError, match="value"):
        stats.Estimate(math.nan, 1.1, 1.2, 0.9, 10, "x")
    e = stats.Estimate(2.0, 1.0, 4.0, 0.9, 10, "x")
    assert e.inverse() == stats.Estimate(0.5, 0.25, 1.0, 0.9, 10, "x")
    assert e.scaled(2).spread == (2.0, 8.0) and e.shifted(-1).spread == (0.0, 3.0)
    short = stats.median_interval([1.0, 2.0])
    assert stats.Estimate(**short.record()) == short and short.scaled(2).needs == short.needs


def test_the_printed_point_of_a_rounded_interval_stays_inside():
    # the course printed "0.18x (90% interval 0.182x to 0.212x)": each number at its own precision
    e = stats.Estimate(0.1848, 0.182, 0.212, 0.9, 7, "median of 7 paired ratios")
    assert e.text("x") == "0.185x (90% interval 0.182x to 0.212x, median of 7 paired ratios)"
    close = stats.Estimate(0.50104, 0.50101, 0.50109, 0.9, 9, "m")
    assert str(close).startswith("0.50104 (90% interval 0.50101 to 0.50109")
    # a caller printing the point beside describe() (with its own suffix) asks for point(): a
    # fixed-digit f"{value:.2f}x" printed "0.18x" beside "0.183x to 0.196x" in notebook 06
    batch1 = stats.Estimate(0.1842, 0.1831, 0.1957, 0.9, 5, "median of 5 paired ratios")
    assert batch1.point("x") == "0.184x" and batch1.describe("x").startswith("90% interval 0.183x to 0.196x")
    assert stats.Estimate(2.0, 2.0, 2.0, 0.9, 5, "all 5 samples equal").point("x") == "2x"


def test_ties_print_as_ties_never_as_a_zero_width_interval():
    tied = stats.median_interval([2.0] * 5)
    assert str(tied) == "2 (all 5 samples equal 2)" and tied.has_interval
    most = stats.median_interval([1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0])   # k = 2: x(2) = x(8)
    assert "7 of 9 samples equal 2" in str(most)
    rng = random.Random(4)
    for _ in range(300):   # small integers: ties everywhere
        xs = [rng.randint(1, 3) for _ in range(rng.randint(1, 12))]
        for e in (stats.median_interval(xs), stats.median_ratio(xs, [1] * len(xs))):
            ends = re.search(r"interval (\S+) to (\S+?),", str(e))
            assert ends is None or ends[1] != ends[2], str(e)


def test_an_interval_is_named_by_its_exact_coverage_not_the_level_asked():
    # the narrowest order-statistic interval whose coverage reaches 90 %: at 7 samples that is
    # [min, max], which covers the median 1 - 2 / 2**7 = 98.4 % ([2nd, 6th] only 87.5 %). A
    # label that printed the level asked ("90% interval") would claim less than it holds.
    seven = stats.median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert (seven.low, seven.high) == (1.0, 7.0)
    assert seven.coverage == pytest.approx(1 - 2 / 2 ** 7) and seven.level == stats.LEVEL
    assert seven.label == "98% interval" and str(seven) == "4 (98% interval 1 to 7, median of 7 samples)"
    # rounded down, never up: 93.75 % prints as 93 %, not 94 %
    five = stats.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert five.label == "93% interval"
    # 30 samples: k = 11 ([11th, 20th]) is the narrowest reaching 90 %; its exact coverage
    thirty = stats.median_interval(list(range(1, 31)))
    cover = sign_coverage(30, 11)
    assert (thirty.low, thirty.high) == (11, 20) and thirty.coverage == pytest.approx(cover)
    assert thirty.label == f"{int(cover * 100)}% interval"
    # the same label survives scaling, shifting and inversion (a unit change keeps coverage)
    assert seven.scaled(2.0).label == seven.inverse().label == seven.shifted(-1).label == "98% interval"
    # a ratio of two separate runs: both runs' intervals hold together, the product of coverages
    a, b = [1.0 + i / 10 for i in range(7)], [2.0 + i / 10 for i in range(7)]
    sep = stats.median_ratio(a, b, paired=False)
    each = stats.median_interval(a, stats.LEVEL ** 0.5).coverage
    assert sep.coverage == pytest.approx(each * each) and sep.coverage >= stats.LEVEL
    # a largest of k figures: Bonferroni over their exact coverages, never below the level asked
    figs = [stats.median_interval([v + i for i in range(9)], stats.joint_level(2)) for v in (0.0, 1.0)]
    big = stats.largest(figs)
    assert big.coverage == pytest.approx(1 - sum(1 - f.coverage for f in figs)) and big.coverage >= big.level
    # a bootstrap knows only its nominal level
    boot = stats.bootstrap(np.mean, [list(range(1, 41))], paired=True, what="steps")
    assert boot.coverage is None and boot.label == "90% interval"
    # a range of repeats has no confidence: a spread
    assert stats.range_of([1.0, 2.0, 3.0]).label == "spread"
    # the record rebuilds the same estimate, coverage included
    assert stats.Estimate(**seven.record()) == seven
