"""perfkit.monitor: exact arithmetic on a fake clock; on the real clock, only bounds load cannot
flip (a sleep never ends early)."""

import json
import threading
import time

import pytest
import torch

from perfkit.profiling import PHASES, MemoryMonitor, StepMonitor
from perfkit.timing import Measurement

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class FakeClock:
    """Stands in for perf_counter: time moves only when the test says so."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


def fake_monitor(**kw):
    mon = StepMonitor(device="cpu", **kw)
    clock = FakeClock()
    mon._mark = clock
    return mon, clock


def run_step(mon, clock, durations, other=0.0, samples=0, tokens=0):
    for name, d in durations.items():
        with mon.phase(name):
            clock.advance(d)
    clock.advance(other)
    mon.step(samples=samples, tokens=tokens)


def test_shares_are_exact_on_a_fake_clock():
    mon, clock = fake_monitor()
    for _ in range(3):
        run_step(mon, clock, {"data": 2.0, "forward": 3.0, "backward": 4.0, "optimizer": 0.5},
                 other=0.5)
    s = mon.summary()
    assert s.steps == 3 and s.step.mean_s == pytest.approx(10.0)
    assert s.shares() == pytest.approx(
        {"data": 0.2, "forward": 0.3, "backward": 0.4, "optimizer": 0.05, "other": 0.05})
    assert list(s.phases) == ["data", "forward", "backward", "optimizer", "other"]
    assert sum(s.shares().values()) == pytest.approx(1.0)


def test_statistics_match_timing_measurement():
    mon, clock = fake_monitor()
    fwd = [1.0, 2.0, 3.0, 4.0, 10.0]
    for d in fwd:
        run_step(mon, clock, {"forward": d})
    p = mon.summary()["forward"]
    m = Measurement(times_s=tuple(fwd), warmup=0)
    assert (p.mean_s, p.std_s, p.p50_s) == pytest.approx((m.mean_s, m.std_s, m.median_s))
    assert (p.p95_s, p.p99_s) == pytest.approx((m.quantile(0.95), m.quantile(0.99)))
    assert p.p50_s == 3.0 and p.p95_s == pytest.approx(8.8)  # 4 + 0.8 * (10 - 4)


def test_warmup_steps_are_left_out():
    mon, clock = fake_monitor(warmup=2)
    run_step(mon, clock, {"forward": 100.0})
    run_step(mon, clock, {"forward": 100.0})
    run_step(mon, clock, {"forward": 1.0})
    s = mon.summary()
    assert s.steps == 1 and s["forward"].mean_s == 1.0 and mon.steps == 3


def test_repeated_phase_in_one_step_is_summed_and_absent_phase_counts_zero():
    mon, clock = fake_monitor()
    for _ in range(2):  # two all-reduce buckets in the same step
        with mon.phase("communication"):
            clock.advance(1.5)
    mon.step()
    run_step(mon, clock, {"forward": 1.0})
    s = mon.summary()
    assert s["communication"].mean_s == pytest.approx(1.5)  # (3 + 0) / 2
    assert s["forward"].mean_s == pytest.approx(0.5)


def test_step_time_includes_untimed_work_as_other():
    mon, clock = fake_monitor()
    run_step(mon, clock, {"forward": 1.0})
    clock.advance(3.0)  # e.g. logging between steps
    run_step(mon, clock, {"forward": 1.0})
    s = mon.summary()
    assert s.step.mean_s == pytest.approx(2.5)  # (1 + 4) / 2: the first step starts at its first phase
    assert s["other"].mean_s == pytest.approx(1.5)


def test_nested_phases_with_distinct_names():
    mon, clock = fake_monitor()
    with mon.phase("forward"):
        clock.advance(1.0)
        with mon.phase("attention"):
            clock.advance(3.0)
    mon.step()
    s = mon.summary()
    assert s["attention"].parent == "forward" and s["forward"].parent is None
    assert s.share("forward") == pytest.approx(1.0) and s.share("attention") == pytest.approx(0.75)
    assert "attention" not in s.shares() and "attention" in s.shares(top_level=False)
    assert sum(s.shares().values()) == pytest.approx(1.0)


def test_nested_phase_with_the_same_name_is_an_error_and_leaves_a_usable_monitor():
    mon, clock = fake_monitor()
    with mon.phase("forward"):
        with pytest.raises(ValueError, match="already open"):
            with mon.phase("forward"):
                pass
        clock.advance(1.0)
    mon.step()
    assert mon.summary()["forward"].mean_s == 1.0


def test_summary_before_any_step_is_a_clear_error():
    mon = StepMonitor(device="cpu")
    with pytest.raises(RuntimeError, match="at least one completed step"):
        mon.summary()
    mon, clock = fake_monitor(warmup=5)
    run_step(mon, clock, {"forward": 1.0})
    with pytest.raises(RuntimeError, match="warmup=5"):
        mon.summary()


def test_unknown_phase_names():
    mon, clock = fake_monitor(phases=PHASES)
    with pytest.raises(ValueError, match="unknown phase 'fwd'.*allowed"):
        mon.phase("fwd")
    run_step(mon, clock, {"forward": 1.0})
    s = mon.summary()
    with pytest.raises(KeyError, match="unknown phase 'backward'.*forward"):
        s["backward"]
    with pytest.raises(KeyError):
        s.share("fwd")


@pytest.mark.parametrize("bad, err", [("", TypeError), (3, TypeError), ("step", ValueError),
                                      ("other", ValueError)])
def test_bad_phase_names(bad, err):
    with pytest.raises(err):
        StepMonitor(device="cpu").phase(bad)
    with pytest.raises(err):
        StepMonitor(device="cpu", phases=(bad,))


def test_step_or_reset_with_an_open_phase_is_an_error():
    mon = StepMonitor(device="cpu")
    with mon.phase("forward"):
        with pytest.raises(RuntimeError, match="'forward' is open"):
            mon.step()
        with pytest.raises(RuntimeError, match="'forward' is open"):
            mon.reset()


def test_closing_an_outer_phase_before_the_inner_one_names_both():
    mon, clock = fake_monitor()
    outer, inner = mon.phase("a"), mon.phase("b")
    outer.__enter__()
    inner.__enter__()
    clock.advance(1.0)
    with pytest.raises(RuntimeError, match="phase 'a' closed while phase 'b'.*still open"):
        outer.__exit__(None, None, None)  # used to pop 'b' and record it as 'a'
    inner.__exit__(None, None, None)  # the right order still works, and nothing was lost
    outer.__exit__(None, None, None)
    mon.step()
    s = mon.summary()
    assert s["a"].mean_s == 1.0 and s["b"].mean_s == 1.0 and s["b"].parent == "a"
    with pytest.raises(RuntimeError, match="phase 'a' closed but it is not open"):
        outer.__exit__(None, None, None)


def test_bad_warmup():
    with pytest.raises(ValueError, match="warmup"):
        StepMonitor(device="cpu", warmup=-1)


def test_throughput_and_json_record():
    mon, clock = fake_monitor()
    for _ in range(4):
        run_step(mon, clock, {"forward": 0.5}, samples=32, tokens=32 * 64)
    s = mon.summary()
    assert s.samples_per_s == pytest.approx(64.0) and s.tokens_per_s == pytest.approx(64 * 64)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["phases"]["forward"]["share"] == pytest.approx(1.0) and d["steps"] == 4


def test_no_samples_means_no_throughput():
    mon, clock = fake_monitor()
    run_step(mon, clock, {"forward": 1.0})
    assert mon.summary().samples_per_s is None and mon.summary().tokens_per_s is None


def test_reset_forgets_steps():
    mon, clock = fake_monitor()
    run_step(mon, clock, {"forward": 1.0})
    mon.reset()
    with pytest.raises(RuntimeError):
        mon.summary()


def test_real_clock_counts_seconds_and_never_less_than_a_sleep():
    # Exact shares are tested on the fake clock above. On the real clock only what load
    # cannot flip: a sleep never ends early (lower bounds), and the step holds its phases.
    # The upper bound is a units check (milliseconds would read 20, nanoseconds 2e7).
    mon = StepMonitor(device="cpu")
    for _ in range(5):
        with mon.phase("data"):
            time.sleep(0.010)
        with mon.phase("forward"):
            time.sleep(0.020)
        mon.step()
    s = mon.summary()
    assert s["data"].p50_s >= 0.0099 and s["forward"].p50_s >= 0.0199
    assert s.step.mean_s >= s["data"].mean_s + s["forward"].mean_s
    assert s.step.p50_s < 5.0


def test_annotate_puts_phases_into_a_profiler_trace():
    mon = StepMonitor(device="cpu", annotate=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with mon.phase("forward"):
            torch.ones(8) @ torch.ones(8)
        mon.step()
    assert "phase:forward" in {e.name for e in prof.events()}


def test_memory_monitor_sees_a_large_cpu_allocation():
    # The sampler thread, not this one, must see the tensor: x stays alive until the thread
    # has taken two samples after the allocation (a fixed sleep would race a loaded machine).
    mm = MemoryMonitor(device="cpu", interval_s=0.001)
    real_rss, samples = mm._rss, []
    mm._rss = lambda: samples.append(threading.current_thread()) or real_rss()
    with mm:
        x = torch.ones(50_000_000)  # 200 MB, touched so it is resident
        seen = len(samples)
        deadline = time.monotonic() + 30.0  # a hang guard, not a speed bound
        while len(samples) < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        sampled = samples[seen:]
        del x
    assert len(sampled) >= 2 and threading.main_thread() not in sampled, (
        "no background sample while the tensor was alive")
    r = mm.record()
    assert r.kind == "process_rss" and r.peak_increase_bytes > 150e6


def test_memory_monitor_errors():
    with pytest.raises(RuntimeError, match="before entering"):
        MemoryMonitor(device="cpu").record()
    with pytest.raises(ValueError, match="interval_s"):
        MemoryMonitor(device="cpu", interval_s=0)


@pytest.mark.gpu
@cuda
def test_cuda_phases_time_the_gpu_and_never_synchronise_in_the_loop(monkeypatch):
    mon = StepMonitor(device="cuda")
    calls = []
    real_sync = torch.cuda.Event.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    monkeypatch.setattr(torch.cuda.Event, "synchronize",
                        lambda self: (calls.append("ev"), real_sync(self)))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):  # the first call also pays the kernel's load: calibrate on the second
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
    cycles = int(1_000_000 * 200 / start.elapsed_time(end))  # ~200 ms of GPU spinning
    calls.clear()  # the calibration above synchronised on purpose; the loop below must not
    t = time.perf_counter()
    for _ in range(3):
        with mon.phase("forward"):
            torch.cuda._sleep(cycles)
        mon.step()
    enqueue_s = time.perf_counter() - t
    assert calls == [], "the loop must not synchronise"
    s = mon.summary()  # resolves the events, synchronising once
    assert 0.1 < s["forward"].p50_s < 1.0
    assert s.share("forward") > 0.9
    # A loop that waits for the GPU takes at least the 3 phases' GPU time to enqueue them; a
    # loop that does not takes microseconds. Half the GPU time leaves a loaded host 0.3 s.
    gpu_s = 3 * s["forward"].mean_s
    assert enqueue_s < 0.5 * gpu_s, (
        f"enqueueing {gpu_s:.2f} s of GPU work took {enqueue_s:.2f} s: the loop waited for it")


@pytest.mark.gpu
@cuda
def test_cuda_memory_monitor_reports_allocator_peak():
    with MemoryMonitor(device="cuda") as mm:
        x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        del x
    r = mm.record()
    assert r.kind == "cuda_allocator" and r.peak_increase_bytes >= 64 * 2**20
