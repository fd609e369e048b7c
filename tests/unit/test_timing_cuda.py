"""perfkit.timing's CUDA path, checked on a CPU against a fake ``torch.cuda``.

No GPU runs here: ``torch.cuda``'s events, streams and synchronisation are replaced by
recorders, and the tests check what the timers ask of them: events on the stream of the
device being timed (not the current device's), milliseconds turned into seconds, and the
device synchronised after every timed call so that work a callable leaves on another stream
never spills into the next timing. The real GPU is exercised by the ``gpu``-marked tests
(tools/gpu_run.py runs them on a CUDA machine).
"""

import pytest
import torch

from perfkit import timing


class FakeEvent:
    """A ``torch.cuda.Event`` that stamps a fake clock (ms) and remembers its stream."""

    clock_ms = 0.0

    def __init__(self, enable_timing=False):
        assert enable_timing, "timing events need enable_timing=True"
        self.stream, self.at_ms, self.synced = None, None, False

    def record(self, stream=None):
        self.stream, self.at_ms = stream, FakeEvent.clock_ms

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, end):
        assert self.at_ms is not None and end.at_ms is not None, "both events must be recorded"
        return end.at_ms - self.at_ms


@pytest.fixture
def fake_cuda(monkeypatch):
    """Two fake CUDA devices; the current one is cuda:0. Returns the call log."""
    log = {"events": [], "syncs": []}

    def event(enable_timing=False):
        e = FakeEvent(enable_timing)
        log["events"].append(e)
        return e

    def current_stream(device=None):
        index = 0 if device is None or torch.device(device).index is None else torch.device(device).index
        return f"stream of cuda:{index}"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "Event", event)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log["syncs"].append(str(device)))
    FakeEvent.clock_ms = 0.0
    return log


def tick(ms):
    """A callable that advances the fake GPU clock by ``ms``."""
    def fn():
        FakeEvent.clock_ms += ms
    return fn


def test_timer_records_on_the_timed_devices_stream(fake_cuda):
    with timing.Timer("cuda:1") as t:
        tick(250.0)()
    start, end = fake_cuda["events"]
    # a bare record() would use the current device's (cuda:0) stream: None here
    assert start.stream == end.stream == "stream of cuda:1"
    assert t.elapsed_s == pytest.approx(0.25)  # ms from elapsed_time, seconds out
    assert end.synced, "reading elapsed_s waits for the end event"


def test_timer_reads_lazily(fake_cuda):
    with timing.Timer("cuda") as t:
        tick(3.0)()
    end = fake_cuda["events"][1]
    assert not end.synced, "leaving the block must not stall the GPU"
    assert t.elapsed_s == pytest.approx(0.003) and end.synced


def test_benchmark_synchronises_after_every_timed_call(fake_cuda):
    m = timing.benchmark(tick(2.0), warmup=2, repeat=4, device="cuda:1")
    assert m.times_s == pytest.approx((0.002,) * 4)
    # once after the warm-up, then once after each timed call
    assert fake_cuda["syncs"] == ["cuda:1"] * 5
    assert {e.stream for e in fake_cuda["events"]} == {"stream of cuda:1"}


def test_interleaved_synchronises_after_every_timed_call(fake_cuda):
    a, b = timing.interleaved([tick(1.0), tick(4.0)], warmup=1, repeat=3, device="cuda")
    assert a.times_s == pytest.approx((0.001,) * 3) and b.times_s == pytest.approx((0.004,) * 3)
    assert len(fake_cuda["syncs"]) == 1 + 2 * 3


def test_benchmark_number_divides_the_event_time(fake_cuda):
    m = timing.benchmark(tick(1.0), warmup=0, repeat=2, device="cuda", number=8)
    assert m.times_s == pytest.approx((0.001, 0.001))
