"""StepMonitor's sinks with real components: windows on a fake clock (exact), TensorBoard's
event file read back with tensorboard's own reader, JSON lines parsed back, the Prometheus
endpoint scraped over loopback while a real model trains, NVTX calls on the CPU path."""

import dataclasses
import json
import socket
import threading
import urllib.request

import pytest
import torch

from perfkit import models
from perfkit.profiling import (
    JsonLinesSink,
    MemoryMonitor,
    PrometheusSink,
    StepMonitor,
    StepWindow,
    TensorBoardSink,
    read_json_lines,
    read_scalars,
    window_scalars,
)
from perfkit.profiling import sinks as sinks_module
from perfkit.viz import plot_scalars


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Recorder:
    """A sink that keeps what it is given."""

    def __init__(self):
        self.windows, self.closed = [], False

    def write(self, window):
        self.windows.append(window)

    def close(self):
        self.closed = True


def fake_loop(mon, clock, steps, data_s=lambda i: 0.001 * (i % 4 + 1)):
    """Steps whose data phase takes 1-4 ms (varied, so p50 and mean differ) and forward 2 ms."""
    for i in range(steps):
        with mon.phase("data"):
            clock.t += data_s(i)
        with mon.phase("forward"):
            clock.t += 0.002
        clock.t += 0.0005
        mon.step(samples=8, tokens=64)


def fake_monitor(**kw):
    mon, clock = StepMonitor(device="cpu", **kw), FakeClock()
    mon._mark = clock
    return mon, clock


def test_one_window_per_every_steps_after_warmup_and_the_rest_on_close():
    rec = Recorder()
    mon, clock = fake_monitor(warmup=2, every=3, sinks=[rec])
    fake_loop(mon, clock, 12)
    assert [w.step for w in rec.windows] == [5, 8, 11]  # written as each window fills
    mon.close()
    assert [w.step for w in rec.windows] == [5, 8, 11, 12] and rec.closed
    for w, lo in zip(rec.windows, [2, 5, 8, 11]):  # each window is its own steps' summary
        ref, clk = fake_monitor(warmup=lo)
        fake_loop(ref, clk, w.step)
        assert w.summary == ref.summary()
        assert w.step_times_s == pytest.approx([0.0025 + 0.001 * (i % 4 + 1)
                                                for i in range(lo, w.step)])


def test_close_without_a_partial_window_writes_nothing_more():
    rec = Recorder()
    mon, clock = fake_monitor(every=4, sinks=[rec])
    fake_loop(mon, clock, 8)
    mon.close()
    assert [w.step for w in rec.windows] == [4, 8]


def test_memory_monitor_record_goes_with_each_window(tmp_path):
    rec, lines = Recorder(), JsonLinesSink(tmp_path / "m.jsonl")
    with MemoryMonitor(device="cpu", interval_s=0.001) as mm:
        mon, clock = fake_monitor(every=2, sinks=[rec, lines], memory=mm)
        fake_loop(mon, clock, 4)
        mon.close()
    assert len(rec.windows) == 2
    for w, line in zip(rec.windows, (tmp_path / "m.jsonl").read_text().splitlines()):
        assert w.memory.kind == "process_rss" and w.memory.peak_bytes > 0
        assert json.loads(line)["memory"] == dataclasses.asdict(w.memory)
    scalars = window_scalars(rec.windows[0])
    assert scalars["memory/peak_bytes"] == rec.windows[0].memory.peak_bytes
    assert scalars["memory/current_bytes"] == rec.windows[0].memory.current_bytes


def test_window_scalars_names_and_values():
    rec = Recorder()
    mon, clock = fake_monitor(every=4, sinks=[rec])
    fake_loop(mon, clock, 4)
    s = rec.windows[0].summary
    assert window_scalars(rec.windows[0]) == {
        "step/p50_s": s.step.p50_s, "step/mean_s": s.step.mean_s, "step/p95_s": s.step.p95_s,
        "step/p99_s": s.step.p99_s,
        **{f"phase/{n}/{k}": getattr(p, "p50_s" if k == "p50_s" else "share")
           for n, p in s.phases.items() for k in ("p50_s", "share")},
        "throughput/samples_per_s": s.samples_per_s, "throughput/tokens_per_s": s.tokens_per_s}
    assert s["data"].p50_s != s["data"].mean_s  # so a mean logged as p50 would be caught


def real_loop(sinks, steps=12, every=4, **kw):
    """A SmallCNN trained on digits for ``steps`` steps, its windows recorded beside ``sinks``."""
    rec = Recorder()
    wl = models.digits_workload(batch_size=16, **kw)
    mon = StepMonitor(device="cpu", warmup=1, every=every, sinks=[rec, *sinks])
    return wl, mon, rec


def test_tensorboard_event_file_holds_the_windows_values(tmp_path, one_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "run")
    wl, mon, rec = real_loop([sink])
    models.train_steps(wl, 13, monitor=mon)
    mon.close()
    acc = EventAccumulator(sink.log_dir)
    acc.Reload()
    assert len(rec.windows) == 3
    expected = [window_scalars(w) for w in rec.windows]
    assert set(acc.Tags()["scalars"]) == set(expected[0])
    assert "phase/data/share" in expected[0] and "throughput/samples_per_s" in expected[0]
    for tag in expected[0]:
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [5, 9, 13], tag
        assert [e.value for e in events] == pytest.approx([e[tag] for e in expected],
                                                         rel=1e-6), tag  # float32 on disk
    back = read_scalars(sink.log_dir)  # perfkit's reader gives the same points
    assert back == {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in expected[0]}
    fig = plot_scalars(back, ["phase/data/share", "phase/forward/share"], threshold=0.1,
                       events={"switch": 7})
    lines = fig.axes[0].get_lines()
    assert [list(ln.get_ydata()) for ln in lines[:2]] == [
        [v for _, v in back["phase/data/share"]], [v for _, v in back["phase/forward/share"]]]
    assert list(lines[0].get_xdata()) == [5, 9, 13] and list(lines[2].get_ydata()) == [0.1, 0.1]
    assert list(lines[3].get_xdata()) == [7, 7]
    import matplotlib.pyplot as plt

    plt.close(fig)
    with pytest.raises(ValueError, match="not in scalars"):
        plot_scalars(back, ["phase/dta/share"])
    with pytest.raises(FileNotFoundError, match="no TensorBoard event file"):
        read_scalars(tmp_path)


def test_tensorboard_writes_under_rank_directory_in_a_multi_rank_job(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with TensorBoardSink(tmp_path) as sink:
        assert sink.log_dir == str(tmp_path / "rank1")
    with pytest.raises(RuntimeError, match="after close"):
        sink.write(None)


def test_json_lines_parse_back_to_the_windows(tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("RANK", "3")
    sink = JsonLinesSink(tmp_path / "log-{rank}.jsonl")
    assert sink.path == tmp_path / "log-3.jsonl"
    wl, mon, rec = real_loop([sink])
    models.train_steps(wl, 11, monitor=mon)
    mon.close()
    lines = sink.path.read_text().splitlines()
    assert len(lines) == len(rec.windows) == 3  # two full windows and the partial one
    for line, w in zip(lines, rec.windows):
        record = json.loads(line)
        assert record == json.loads(json.dumps(
            {"run_id": sink.run_id, "started_at": sink.started_at, "step": w.step, "rank": 3,
             "summary": w.summary.to_dict(), "step_times_s": list(w.step_times_s),
             "memory": None}))


def test_json_lines_step_is_the_step_number_not_the_step_statistics(tmp_path):
    # the summary's own "step" key holds step-time statistics; merged into the record it
    # would overwrite the window's step number (the windows end at steps 4 and 8)
    mon, clock = fake_monitor(every=4, sinks=[JsonLinesSink(tmp_path / "m.jsonl")])
    fake_loop(mon, clock, 8)
    mon.close()
    records = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 8]
    assert all(r["summary"]["step"]["name"] == "step" and r["summary"]["steps"] == 4
               and r["summary"]["step"]["mean_s"] == pytest.approx(0.005)  # 2.5 + 2 + 0.5 ms
               for r in records)
    assert "phases" not in records[0]  # the summary is nested whole, not spread


def test_two_runs_appended_to_one_file_are_told_apart(tmp_path, monkeypatch):
    path = tmp_path / "steps.jsonl"
    monkeypatch.setattr(sinks_module, "datetime", FrozenDatetime("2031-01-02T03:04:05"))
    first = JsonLinesSink(path)
    monkeypatch.setattr(sinks_module, "datetime", FrozenDatetime("2031-01-02T03:09:00"))
    second = JsonLinesSink(path, run_id="exp-b")
    for sink, steps, every in ((first, 6, 3), (second, 4, 2)):
        mon, clock = fake_monitor(every=every, sinks=[sink])
        fake_loop(mon, clock, steps)
        mon.close()
    assert len(first.run_id) == 12 and first.run_id != second.run_id == "exp-b"
    assert JsonLinesSink(tmp_path / "other.jsonl").run_id != first.run_id  # drawn afresh
    runs = read_json_lines(path)
    assert list(runs) == [first.run_id, "exp-b"]  # in the order they first appear
    assert [r["step"] for r in runs[first.run_id]] == [3, 6]
    assert [r["step"] for r in runs["exp-b"]] == [2, 4]
    assert {r["started_at"] for r in runs[first.run_id]} == {"2031-01-02T03:04:05.000+00:00"}
    assert {r["started_at"] for r in runs["exp-b"]} == {"2031-01-02T03:09:00.000+00:00"}
    assert [r["summary"]["steps"] for r in runs["exp-b"]] == [2, 2]


def test_read_json_lines_refuses_lines_it_cannot_group(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text('{"run_id": "a", "step": 1}\n\n{"step": 2}\n')  # a line without a run
    with pytest.raises(ValueError, match=r"old.jsonl:3 .*no run_id"):
        read_json_lines(path)
    path.write_text('{"run_id": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"old.jsonl:2 is not JSON"):
        read_json_lines(path)
    with pytest.raises(FileNotFoundError):
        read_json_lines(tmp_path / "missing.jsonl")


class FrozenDatetime:
    """``datetime`` with ``now`` fixed, so a run's start time is known to the test."""

    def __init__(self, iso):
        import datetime as dt

        self._at = dt.datetime.fromisoformat(iso).replace(tzinfo=dt.timezone.utc)

    def now(self, tz=None):
        return self._at.astimezone(tz)


def scrape(url):
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_prometheus_endpoint_scraped_during_training(monkeypatch, one_thread):
    monkeypatch.setenv("RANK", "1")
    sink = PrometheusSink(port=0)
    assert sink.port > 0 and sink.url.startswith("http://127.0.0.1:")
    wl, mon, rec = real_loop([sink])
    during, stop = [], threading.Event()

    def poll():  # scrapes from another thread while the loop trains
        while not stop.wait(0.01):
            during.append(scrape(sink.url))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        models.train_steps(wl, 17, monitor=mon)
    finally:
        stop.set()
        poller.join()
    got = scrape(sink.url)
    mon.close()
    assert len(during) > 0
    last, r = rec.windows[-1].summary, ("rank", "1")
    assert got[("perfkit_step_p50_seconds", (r,))] == last.step.p50_s
    assert got[("perfkit_samples_per_second", (r,))] == last.samples_per_s
    for name, p in last.phases.items():
        assert got[("perfkit_phase_share", (("phase", name), r))] == p.share
        assert got[("perfkit_phase_p50_seconds", (("phase", name), r))] == p.p50_s
    times = [t for w in rec.windows for t in w.step_times_s]  # 16 steps: 4 full windows
    assert got[("perfkit_step_seconds_count", (r,))] == len(times) == 16
    assert got[("perfkit_step_seconds_sum", (r,))] == pytest.approx(sum(times))
    assert got[("perfkit_step_seconds_bucket", (("le", "0.001"), r))] == sum(
        t <= 0.001 for t in times)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", sink.port), 1):
        pass  # closed: the port is free, nothing listens


def test_prometheus_sinks_use_private_registries():
    from prometheus_client import REGISTRY

    a, b = PrometheusSink(rank=0), PrometheusSink(rank=0)  # would clash in one registry
    try:
        rec = Recorder()
        mon, clock = fake_monitor(every=2, sinks=[rec, a])
        fake_loop(mon, clock, 2)
        assert scrape(a.url)[("perfkit_step_p50_seconds", (("rank", "0"),))] == (
            rec.windows[0].summary.step.p50_s)
        assert ("perfkit_step_p50_seconds", (("rank", "0"),)) not in scrape(b.url)
        assert REGISTRY.get_sample_value("perfkit_step_p50_seconds", {"rank": "0"}) is None
    finally:
        a.close()
        b.close()


class NvtxCalls:
    def __init__(self, monkeypatch, passthrough=False):
        self.calls = []
        push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop

        def record_push(name):
            self.calls.append(("push", name))
            return push(name) if passthrough else 0

        def record_pop():
            self.calls.append(("pop",))
            return pop() if passthrough else 0

        monkeypatch.setattr(torch.cuda.nvtx, "range_push", record_push)
        monkeypatch.setattr(torch.cuda.nvtx, "range_pop", record_pop)


def nested_step(mon):
    with mon.phase("backward"):
        with mon.phase("communication"):
            pass
    mon.step()


def test_nvtx_is_not_called_on_cpu(monkeypatch):
    nvtx = NvtxCalls(monkeypatch)
    mon = StepMonitor(device="cpu")
    nested_step(mon)
    assert nvtx.calls == [] and mon.summary().steps == 1


def test_nvtx_ranges_open_and_close_around_each_phase_when_enabled(monkeypatch):
    nvtx = NvtxCalls(monkeypatch)
    mon, _ = fake_monitor()
    mon._nvtx = True  # what a CUDA monitor sets; the CPU clock keeps the test on the CPU
    nested_step(mon)
    assert nvtx.calls == [("push", "backward"), ("push", "communication"), ("pop",), ("pop",)]


@pytest.mark.gpu
def test_nvtx_ranges_on_cuda(monkeypatch):
    nvtx = NvtxCalls(monkeypatch, passthrough=True)
    mon = StepMonitor(device="cuda")
    x = torch.randn(256, 256, device="cuda")
    for _ in range(2):
        with mon.phase("forward"):
            x @ x
        mon.step()
    assert nvtx.calls == [("push", "forward"), ("pop",)] * 2
    assert mon.summary().steps == 2


def test_step_window_is_what_sinks_get():
    rec = Recorder()
    mon, clock = fake_monitor(every=1, sinks=[rec])
    fake_loop(mon, clock, 1)
    assert isinstance(rec.windows[0], StepWindow) and rec.windows[0].memory is None
