"""Data loading behind a prefetcher: the Prefetcher accounts for its thread's loading and
the consumer's wait, the recorder writes a DataLoader's loading on that thread into the
trace, and the diagnosis judges it with the main thread's stall, so a CPU-bound loader that
only moved onto another thread is still named (it contends with compute)."""

import time

import pytest
import torch
from torch.utils.data import DataLoader

from perfkit.data import WAIT_ANNOTATION, Prefetcher, SlowDataset
from perfkit.profiling import (
    StepRecorder,
    Thresholds,
    attribute_trace,
    build_report,
    diagnose_shares,
    render_text,
    trace_events,
)
from perfkit.profiling import attribution as attribution_module
from perfkit.profiling.rules import StepShares

MAIN, LOADER = 1, 9


def ev(name, ts, dur, tid=MAIN, cat="user_annotation"):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "cat": cat}


def test_the_prefetcher_counts_its_loading_and_the_consumers_wait():
    def slow(n, cost_s):
        for i in range(n):
            time.sleep(cost_s)
            yield i

    pf = Prefetcher(slow(6, 0.03), device="cpu", depth=1)
    got = []
    for b in pf:  # the consumer takes 0 s: it waits for nearly every batch
        got.append(b)
    fast = pf.stats()
    assert got == list(range(6)) and fast.batches == 6
    assert fast.load_s >= 6 * 0.03  # at least the sleeps
    assert fast.wait_s >= 0.7 * fast.load_s  # nothing hid the loading
    pf = Prefetcher(slow(6, 0.005), device="cpu", depth=2)
    for _ in pf:
        time.sleep(0.04)  # a step far longer than a batch's loading hides it
    hidden = pf.stats()
    assert hidden.batches == 6 and hidden.load_s >= 6 * 0.005
    assert hidden.wait_s < 0.5 * 6 * 0.04  # waits a little at most, not a step's worth
    assert hidden.wait_s < fast.wait_s


def test_the_wait_annotation_is_the_one_the_attribution_reads():
    assert WAIT_ANNOTATION == attribution_module.PREFETCH_WAIT


def test_loading_off_the_main_thread_is_told_from_the_wait():
    # 100 us step: the main thread waits for the queue 0-20, computes 20-100; the loader
    # thread loads 10-90: 10-20 is under the wait (data), 20-90 overlaps the step
    t = {"traceEvents": [ev("ProfilerStep#1", 0, 100), ev(WAIT_ANNOTATION, 0, 20),
                         ev("phase:forward", 20, 80), ev("aten::mm", 20, 80, cat="cpu_op"),
                         ev("phase:data", 10, 80, tid=LOADER)]}
    a = attribute_trace(t)
    assert a.category_s["data"] * 1e6 == pytest.approx(20)
    assert a.data_offload_s * 1e6 == pytest.approx(70)
    assert a.category_s["forward"] * 1e6 == pytest.approx(80)  # no main-thread category


def shares(data=0.05, off=0.6, stall=0.5, wait=0.3):
    return StepShares({"data": data, "forward": 0.4, "backward": 0.5}, data_offload_share=off,
                      main_stall_share=stall, core_wait_share=wait)


def test_loading_that_keeps_the_step_off_its_core_is_data_bound():
    top = diagnose_shares(shares(), Thresholds.for_command())[0]
    assert top.kind == "data" and top.share == pytest.approx(0.65)  # the wait and the loading
    assert "data loading contends with compute, 65.0% of the step" in top.evidence
    assert "off its core 50.0%" in top.evidence and "waiting for a core 30.0%" in top.evidence
    assert any("cannot help when loading is CPU-bound" in x for x in top.fix)
    # one data finding, not one for the wait and one for the contention
    both = diagnose_shares(shares(data=0.3), Thresholds.for_command())
    assert [f.kind for f in both].count("data") == 1 and both[0].share == pytest.approx(0.9)


def test_loading_hidden_on_a_spare_core_is_not_a_finding():
    # the main thread ran whenever it was not waiting: the loading had a core of its own
    quiet = diagnose_shares(shares(stall=0.05, wait=0.0), Thresholds.for_command())
    assert "data" not in [f.kind for f in quiet]
    # the wait alone still counts, as without a prefetcher
    waits = diagnose_shares(shares(data=0.35, stall=0.05), Thresholds.for_command())
    assert waits[0].kind == "data" and waits[0].share == pytest.approx(0.35)
    # little loading: nothing to name, however stalled
    assert "data" not in [f.kind for f in diagnose_shares(shares(off=0.1), Thresholds.for_command())]
    # no load measurement (no /proc): no claim of contention
    unknown = StepShares({"data": 0.05}, data_offload_share=0.6)
    assert "data" not in [f.kind for f in diagnose_shares(unknown, Thresholds.for_command())]


def test_the_recorder_traces_a_prefetch_threads_loading(tmp_path, one_thread):
    model = torch.nn.Linear(16, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(SlowDataset(64, 0.004), batch_size=2)  # 8 ms a batch, asleep
    rec = StepRecorder(skip=1, steps=6, out_dir=tmp_path, then="continue")
    with rec, Prefetcher(loader, device="cpu") as pf:
        for step, x in enumerate(pf):
            model(x).sum().backward()
            opt.step()
            if step == 8:
                break
    assert rec.window_done and rec.trace_ok
    # the loading is on the prefetch thread: not counted as the step's wait, and written
    # into the trace (the profiler does not record a thread started before it)
    assert sum(rec.data_s) < 0.5 * pf.stats().load_s
    events = trace_events(rec.trace_path)
    main = next(e["tid"] for e in events if e["name"].startswith("ProfilerStep#"))
    loads = [e for e in events if e["name"] == "phase:data" and e["tid"] != main]
    waits = [e for e in events if e["name"] == WAIT_ANNOTATION and e["tid"] == main]
    assert len(loads) >= 3 and len(waits) == 6
    # on the trace's clock the consumer waits while the thread loads: the loading covers
    # most of each wait (nearly all on a quiet machine); a clock offset between the two
    # would uncover them. The first wait's batch was loading when the window opened, so
    # its range is not in the trace
    spans = [(x["ts"], x["ts"] + x["dur"]) for x in loads]
    waited = [(w["ts"], w["ts"] + w["dur"]) for w in waits[1:]]
    covered = sum(max(0.0, min(b, d) - max(a, c)) for a, b in waited for c, d in spans)
    assert covered > 0.6 * sum(b - a for a, b in waited), (waited, spans)
    a = attribute_trace(rec.trace_path)
    assert a.category_s["data"] > 0  # the consumer's waits, on the main thread


def record(main_cpu_s, data=0.05, offload=0.6, exposed=0.0, host=0.0):
    """One rank's record: a 10 ms step over a 1 s window, the main thread on its core
    ``main_cpu_s`` of it."""
    step = 0.01
    cat = {k: 0.0 for k in ("data", "sync", "communication", "optimizer", "backward",
                            "forward", "other")}
    cat.update(data=data * step, communication=(exposed + host) * step,
               forward=(1 - data - exposed - host) * step)
    return {"rank": 0, "status": "complete", "steps_seen": 102, "window_steps": 100,
            "step_times_s": [step] * 100, "batch_size": 32, "flops_per_step": None,
            "memory": {"kind": "peak RSS", "bytes": 2**30}, "trace": "t.json", "note": None,
            "host": "a", "load": {"window_s": 1.0, "cores": 2, "main_cpu_s": main_cpu_s,
                                  "main_wait_s": 0.1, "process_cpu_s": 1.5,
                                  "cores_busy_s": 1.6, "loadavg": 2.0},
            "attribution": {"steps": 100, "step_mean_s": step, "category_s": cat,
                            "comm_overlapped_s": 0.0, "syncs_per_step": 0.0,
                            "host_gap_s": 0.0, "ops_per_step": 50.0, "device_idle_share": None,
                            "comm_host_s": host * step, "data_offload_s": offload * step}}


def test_the_report_judges_the_loading_by_the_main_threads_stall():
    # on its core 30 % of the window, waiting for data 5 % and for collectives 10 %: off its
    # core otherwise 55 % (the DDP launches, 20 %, are work on its core, not a wait)
    rep = build_report([record(0.3, exposed=0.1, host=0.2)])
    top = rep["findings"][0]
    assert top["kind"] == "data" and top["share"] == pytest.approx(0.65)
    assert "off its core 55.0%" in top["evidence"] and "waiting for a core 10.0%" in top["evidence"]
    assert rep["data_offload_share"] == pytest.approx(0.6)
    assert "data, off-main  60.0%" in render_text(rep)
    # on its core 90 %: the loading had a core of its own and was hidden
    quiet = build_report([record(0.9)])
    assert "data" not in [f["kind"] for f in quiet["findings"]]
