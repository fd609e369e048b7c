"""perfkit.timing: the numbers come out of known sleeps, and bad input is refused."""

import time

import pytest
import torch

from perfkit import timing


def test_benchmark_counts_warmup_and_repeats_separately():
    calls = []
    m = timing.benchmark(lambda: calls.append(1), warmup=3, repeat=7)
    assert len(calls) == 10 and m.n == 7 and m.warmup == 3


def test_median_ignores_a_slow_warmup_and_one_outlier():
    # Durations in call order: 2 warm-up calls, then 5 timed ones. Sleep only overshoots,
    # so the median must be >= 20 ms and well below the 150 ms outlier and warm-ups.
    durations = iter([0.15, 0.15, 0.01, 0.02, 0.15, 0.02, 0.03])
    m = timing.benchmark(lambda: time.sleep(next(durations)), warmup=2, repeat=5)
    assert 0.019 <= m.median_s < 0.06
    assert m.quantile(1.0) >= 0.15 and m.quantile(0.0) >= 0.0099


def test_number_reports_time_per_call():
    m = timing.benchmark(lambda: time.sleep(0.002), warmup=0, repeat=3, number=5)
    assert all(t >= 0.0019 for t in m.times_s)
    assert m.median_s < 0.05  # per call, not per batch of 5 (which would be >= 10 ms)


def test_min_time_extends_repetitions():
    m = timing.benchmark(lambda: time.sleep(0.001), warmup=0, repeat=1, min_time_s=0.02)
    assert m.n >= 10


def test_quantiles_and_rate_by_hand():
    m = timing.Measurement(times_s=(1.0, 2.0, 3.0, 4.0, 5.0), warmup=0)
    assert m.median_s == 3.0 and m.p10_s == pytest.approx(1.4) and m.p90_s == pytest.approx(4.6)
    assert m.rate(6.0) == 2.0 and m.iqr_rel == pytest.approx(2.0 / 3.0)
    with pytest.raises(ValueError, match="q must be"):
        m.quantile(1.5)


def test_timer_measures_a_sleep_and_refuses_early_reads():
    t = timing.Timer("cpu")
    with pytest.raises(RuntimeError, match="before the timed block"):
        _ = t.elapsed_s
    with t:
        time.sleep(0.01)
    assert 0.0095 <= t.elapsed_s < 0.2


def test_interleaved_alternates_calls():
    order = []
    ms = timing.interleaved([lambda: order.append("a"), lambda: order.append("b")],
                            warmup=1, repeat=3)
    assert order == ["a", "b"] * 4 and [m.n for m in ms] == [3, 3]


def test_calibrate_number_reaches_target():
    n = timing.calibrate_number(lambda: time.sleep(0.001), target_s=0.004)
    assert 2 <= n <= 8


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
