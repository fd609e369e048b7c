"""perfkit.stats: one quantile, paired ratios, and the bootstrap interval of a median ratio."""

import math
import random

import numpy as np
import pytest

from perfkit import stats


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


def test_median_ratio_is_the_ratio_of_medians_with_an_interval_around_it():
    rng = random.Random(0)
    b = [1 + rng.gauss(0, 0.05) for _ in range(40)]
    a = [1.2 * x * (1 + rng.gauss(0, 0.02)) for x in b]
    e = stats.median_ratio(a, b)
    assert e.value == pytest.approx(np.median(a) / np.median(b))
    assert e.low < e.value < e.high and e.level == stats.LEVEL and e.n == 40
    assert 1.15 < e.low and e.high < 1.25          # the shared load cancels in pairs
    # fixed seed and resample count: the same numbers print the same interval
    assert stats.median_ratio(a, b) == e
    # more rounds narrow the uncertainty of the median; a range of single rounds does not
    a4, b4 = a * 4, b * 4
    wide, narrow = stats.median_ratio(a, b), stats.median_ratio(a4, b4)
    assert narrow.high - narrow.low < 0.7 * (wide.high - wide.low)


def test_a_ratio_that_is_one_has_an_interval_across_one():
    rng = random.Random(1)
    a = [1 + rng.gauss(0, 0.1) for _ in range(30)]
    b = [1 + rng.gauss(0, 0.1) for _ in range(30)]
    e = stats.median_ratio(a, b)
    assert e.low < 1 < e.high


def test_unpaired_median_ratio_resamples_each_run_on_its_own():
    e = stats.median_ratio([1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 2.0], paired=False)
    assert e.value == pytest.approx(1.0) and e.low <= 1.0 <= e.high and e.low < e.high
    assert "separate runs" in e.method
    # rounds that move together: pairing cancels the shared drift, separate runs keep it
    drift = [1.0 + 0.1 * i for i in range(20)]
    a = [1.5 * d for d in drift]
    paired, apart = stats.median_ratio(a, drift), stats.median_ratio(a, drift, paired=False)
    assert paired.high - paired.low < 1e-9 < apart.high - apart.low


def test_median_interval_and_single_rounds():
    e = stats.median_interval([1.0, 1.1, 0.9, 1.05, 0.95])
    assert e.low <= 1.0 <= e.high and e.low < e.high
    one = stats.median_ratio([2.0], [1.0])
    assert one.value == one.low == one.high == 2.0 and "no interval" in one.method


def test_range_of_is_labelled_as_a_range_not_a_confidence():
    r = stats.range_of([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert r.level is None and r.low == pytest.approx(1.9) and r.high == pytest.approx(9.1)
    assert "repeats" in r.method
    widened = stats.range_of([1, 2, 3], value=5)
    assert widened.high == 5


def test_estimate_refuses_a_point_outside_its_interval():
    with pytest.raises(ValueError, match="lie in its interval"):
        stats.Estimate(1.0, 1.1, 1.2, 0.9, 10, "x")
    with pytest.raises(TypeError, match="value"):
        stats.Estimate(math.nan, 1.1, 1.2, 0.9, 10, "x")
    e = stats.Estimate(2.0, 1.0, 4.0, 0.9, 10, "x")
    assert e.inverse() == stats.Estimate(0.5, 0.25, 1.0, 0.9, 10, "x")
    assert e.scaled(2).spread == (2.0, 8.0)


def test_bootstrap_holds_its_value_and_pairs_rounds():
    rng = np.random.default_rng(1)
    b = list(rng.uniform(1, 3, 40))
    a = [2 * x for x in b]   # every round exactly twice as long: pairing removes all noise
    def ratio(x, y):
        return float(np.median(x) / np.median(y))

    paired = stats.bootstrap(ratio, [a, b], paired=True, what="rounds")
    apart = stats.bootstrap(ratio, [a, b], paired=False, what="runs")
    assert paired.spread == pytest.approx((2, 2)) and paired.value == pytest.approx(2)
    assert apart.low < 2 < apart.high and apart.level == stats.LEVEL and apart.n == 40
    assert "40 rounds" in paired.method


def test_bootstrap_of_one_value_has_no_interval_and_bad_samples_raise():
    one = stats.bootstrap(lambda x: float(x[0]), [[3.0]], paired=False, what="steps")
    assert one.low == one.value == one.high == 3.0
    with pytest.raises(ValueError, match="equally long"):
        stats.bootstrap(lambda x, y: 1.0, [[1.0, 2.0], [1.0]], paired=True, what="rounds")
    with pytest.raises(ValueError, match="finite"):
        stats.bootstrap(lambda x: 1.0, [[1.0, math.nan]], paired=False, what="steps")
    with pytest.raises(ValueError, match="samples"):
        stats.bootstrap(lambda: 1.0, [], paired=False, what="steps")


def test_bootstrap_of_a_median_ratio_agrees_with_median_ratio():
    rng = np.random.default_rng(2)
    b = list(rng.uniform(1, 2, 30))
    a = [1.3 * x * rng.uniform(0.9, 1.1) for x in b]
    general = stats.bootstrap(lambda x, y: float(np.median(x) / np.median(y)), [a, b], paired=True,
                              what="rounds")
    special = stats.median_ratio(a, b)
    assert general.value == special.value
    assert general.low == pytest.approx(special.low, rel=0.02)
    assert general.high == pytest.approx(special.high, rel=0.02)


def test_chance_misses_is_half_the_tails():
    assert stats.chance_misses(100) == pytest.approx(5.0)
    assert stats.chance_misses(130, level=0.95) == pytest.approx(130 * 0.025)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: stats.quantile([], 0.5), ValueError, "at least one"),
    (lambda: stats.quantile([1, math.nan], 0.5), ValueError, "finite"),
    (lambda: stats.quantile([1, 2], 1.5), ValueError, "q must"),
    (lambda: stats.quantile("12", 0.5), TypeError, "sequence"),
    (lambda: stats.quantile([True], 0.5), TypeError, "numbers"),
    (lambda: stats.median_ratio([1, 0], [1, 1]), ValueError, "> 0"),
    (lambda: stats.median_ratio([1, 2], [1, 1], level=1.0), ValueError, "level"),
    (lambda: stats.median_ratio([1, 2], [1, 1], resamples=10), ValueError, "resamples"),
    (lambda: stats.median_ratio([1, 2], [1, 1], seed=-1), ValueError, "seed"),
    (lambda: stats.chance_misses(-1), ValueError, "n must"),
])
def test_bad_arguments_name_themselves(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
