"""perfkit.timing: exact numbers on a fake clock, real clocks only for units and direction.

The arithmetic (median, warm-ups left out, time per call, min_time_s, calibrate_number's
doubling) is checked on a clock that moves only when the timed function says so, so a
loaded machine cannot move it. The real clock is checked only in the direction load
cannot flip: a sleep never ends early.
"""

import time
import types

import pytest
import torch

from perfkit import timing

U = 2.0**-10  # ~1 ms, a binary fraction: sums of fake times are exact, so counts are too


class FakeClock:
    """Stands in for perf_counter: time moves only when the timed function advances it."""

    def __init__(self):
        self.t = 1024.0

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


@pytest.fixture
def clock(monkeypatch):
    """perfkit.timing reads this clock instead of time.perf_counter (CPU path only)."""
    fake = FakeClock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=fake))
    return fake


def test_benchmark_counts_warmup_and_repeats_separately():
    calls = []
    m = timing.benchmark(lambda: calls.append(1), warmup=3, repeat=7)
    assert len(calls) == 10 and m.n == 7 and m.warmup == 3


def test_median_ignores_a_slow_warmup_and_one_outlier(clock):
    # durations in call order: 2 warm-up calls, then 5 timed ones
    durations = iter([150 * U, 150 * U, 10 * U, 20 * U, 150 * U, 20 * U, 30 * U])
    m = timing.benchmark(lambda: clock.advance(next(durations)), warmup=2, repeat=5)
    assert m.times_s == (10 * U, 20 * U, 150 * U, 20 * U, 30 * U)  # in call order, no warm-up
    assert m.median_s == 20 * U  # the mean would be 46 U, a median with the warm-ups 30 U
    assert m.quantile(1.0) == 150 * U and m.quantile(0.0) == 10 * U


def test_number_reports_time_per_call(clock):
    calls = []
    m = timing.benchmark(lambda: (calls.append(1), clock.advance(2 * U)), warmup=0, repeat=3,
                         number=5)
    assert len(calls) == 15
    assert m.times_s == (2 * U,) * 3  # per call, not per batch of 5 (10 U)


def test_min_time_extends_repetitions(clock):
    m = timing.benchmark(lambda: clock.advance(U), warmup=0, repeat=1, min_time_s=19.5 * U)
    assert m.n == 20  # the first repetition whose running total reaches 19.5 U
    # min_time_s counts measured time, which is number x the per-call time of a repetition
    m = timing.benchmark(lambda: clock.advance(U), warmup=0, repeat=1, min_time_s=19.5 * U,
                         number=4)
    assert m.n == 5 and m.times_s == (U,) * 5


def test_quantiles_and_rate_by_hand():
    m = timing.Measurement(times_s=(1.0, 2.0, 3.0, 4.0, 5.0), warmup=0)
    assert m.median_s == 3.0 and m.p10_s == pytest.approx(1.4) and m.p90_s == pytest.approx(4.6)
    assert m.rate(6.0) == 2.0 and m.iqr_rel == pytest.approx(2.0 / 3.0)
    with pytest.raises(ValueError, match="q must be"):
        m.quantile(1.5)


def test_timer_reads_the_clock_at_entry_and_exit(clock):
    t = timing.Timer("cpu")
    with pytest.raises(RuntimeError, match="before the timed block"):
        _ = t.elapsed_s
    clock.advance(5 * U)  # before the block: not counted
    with t:
        clock.advance(3 * U)
    clock.advance(7 * U)  # after the block: not counted
    assert t.elapsed_s == 3 * U


def test_timer_on_the_real_clock_counts_seconds():
    # A sleep never ends early, so the lower bound holds on any machine; the upper bound is
    # only a units check (milliseconds would read 10, nanoseconds 1e7), 500x above the sleep.
    with timing.Timer("cpu") as t:
        time.sleep(0.01)
    assert 0.0095 <= t.elapsed_s < 5.0


def test_interleaved_alternates_calls_in_balanced_orders():
    """Rounds follow balanced_orders (planted: a fixed a-b-c order each round, or a plain
    rotation, where a always follows c and never b, fails)."""
    order = []
    ms = timing.interleaved([lambda: order.append("a"), lambda: order.append("b"),
                             lambda: order.append("c")], warmup=1, repeat=6, order="balanced")
    assert order[:3] == list("abc") and [m.n for m in ms] == [6, 6, 6]
    rounds = ["".join(order[i:i + 3]) for i in range(3, 21, 3)]
    assert rounds == ["abc", "bca", "cab", "cba", "acb", "bac"]
    two = []
    timing.interleaved([lambda: two.append("a"), lambda: two.append("b")], warmup=0, repeat=4,
                       order="balanced")
    assert "".join(two) == "abbaabba"


def test_interleaved_keeps_the_given_order_by_default_for_callables_that_depend_on_it():
    """A forward whose graph the next callable's backward runs (perfkit.jobs.data_parallel):
    planted balanced orders by default would run the backward first and fail."""
    graph = {}
    timing.interleaved([lambda: graph.update(loss=1), lambda: graph.pop("loss")], warmup=1,
                       repeat=5)
    order = []
    timing.interleaved([lambda: order.append("a"), lambda: order.append("b"),
                        lambda: order.append("c")], warmup=0, repeat=3)
    assert "".join(order) == "abc" * 3


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_balanced_orders_put_every_callable_everywhere_and_after_every_other_equally(n):
    from collections import Counter

    rows = timing.balanced_orders(n)
    assert len(rows) == (2 * n if n % 2 and n > 1 else n)
    assert all(sorted(r) == list(range(n)) for r in rows)
    positions = Counter((i, p) for r in rows for p, i in enumerate(r))
    assert len(positions) == n * n and len(set(positions.values())) == 1
    pairs = Counter((r[k - 1], r[k]) for r in rows for k in range(1, n))
    assert n == 1 or (len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1)


def test_interleaved_balanced_runs_whole_cycles_so_a_position_effect_cancels(clock):
    """Two identical calls, the second of every round 2 % slower (a planted position effect): in
    the fixed order every paired ratio reads 0.98 (the old design); balanced over whole cycles
    (5 rounds asked, 6 run: A B, B A, ...) half read 0.98 and half 1.02, and their median is 1."""
    slot = []

    def call(name):
        def run():
            slot.append(name)
            clock.advance(U * (1.02 if len(slot) % 2 == 0 else 1.0))  # the round's second call
        return run

    a, b = timing.interleaved(([call("a"), call("b")]), warmup=0, repeat=5)
    assert timing.stats.median_ratio(a.times_s, b.times_s).high < 0.99  # fixed: the bias stays
    slot.clear()
    a, b = timing.interleaved_balanced([call("a"), call("b")], warmup=0, repeat=5)
    assert a.n == b.n == 6 and "".join(slot) == "abba" * 3
    ratios = timing.stats.paired_ratios(a.times_s, b.times_s)
    assert sorted(round(r, 4) for r in ratios) == [0.9804] * 3 + [1.02] * 3
    assert abs(timing.stats.median(ratios) - 1) < 1e-3
    three = timing.interleaved_balanced([call("a"), call("b"), call("c")], warmup=0, repeat=7)
    assert [m.n for m in three] == [12, 12, 12]  # two cycles of the 6-row design for three


def test_interleaved_gives_each_callable_its_own_times(clock):
    slow = iter([3 * U, 4 * U, 5 * U, 6 * U])  # the first is the warm-up
    fast = iter([U, 2 * U, 3 * U, 4 * U])
    ms = timing.interleaved([lambda: clock.advance(next(slow)), lambda: clock.advance(next(fast))],
                            warmup=1, repeat=3)
    # sample r of each is its call in round r, whichever ran first in that round
    assert ms[0].times_s == (4 * U, 5 * U, 6 * U) and ms[1].times_s == (2 * U, 3 * U, 4 * U)
    assert ms[0].median_s / ms[1].median_s == 5.0 / 3.0


@pytest.mark.parametrize("per_call, target, want", [
    (U, 3.5 * U, 4), (U, 4 * U, 4), (U, 0.5 * U, 1), (3 * U, 100 * U, 64), (U, 1000 * U, 1024),
])
def test_calibrate_number_is_the_smallest_power_of_two_reaching_the_target(clock, per_call,
                                                                          target, want):
    calls = []
    n = timing.calibrate_number(lambda: (calls.append(1), clock.advance(per_call)), target_s=target)
    assert n == want
    assert n * per_call >= target and (n == 1 or n // 2 * per_call < target)
    assert len(calls) == 2 * want - 1  # 1 + 2 + ... + n calls: each trial is timed afresh


@pytest.mark.parametrize("kwargs, match", [
    ({"warmup": -1}, "warmup"), ({"repeat": 0}, "repeat"), ({"number": 0}, "number"),
    ({"min_time_s": -1.0}, "min_time_s"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.benchmark(lambda: None, **kwargs)


def test_non_callable_and_missing_cuda():
    with pytest.raises(TypeError, match="fn must be callable"):
        timing.benchmark(42)  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            timing.resolve_device("cuda")


@pytest.mark.gpu
def test_cuda_timer_counts_queued_work():
    # perf_counter around a launch sees only the enqueue; CUDA events see the kernel run.
    a = torch.randn(4096, 4096, device="cuda")
    timing.synchronize("cuda")
    with timing.Timer("cuda") as t:
        for _ in range(10):
            a @ a
    assert t.elapsed_s > 10 * 2 * 4096**3 / 2e15  # slower than any GPU's peak
