"""The exclusive attribution of a trace, the report's rules and the recorder's hooks, on
synthetic traces and tiny in-process loops (fast; no subprocess)."""

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from perfkit.profiling import (
    DiagnoseConfig,
    Finding,
    StepRecorder,
    StepShares,
    Thresholds,
    WindowDone,
    attribute_trace,
    build_report,
    diagnose_shares,
    render_html,
)

MAIN, GLOO = 1, 7


def ev(name, ts, dur, tid=MAIN, cat="cpu_op"):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "cat": cat}


def ann(name, ts, dur, tid=MAIN):
    return ev(name, ts, dur, tid, "user_annotation")


def trace(*events):
    return {"traceEvents": list(events)}


def step(n, ts, dur):
    return ann(f"ProfilerStep#{n}", ts, dur)


def test_categories_are_exclusive_and_follow_the_priority():
    # one 100 us step: forward 0-30, backward 30-80 with a sync 40-45 inside,
    # optimizer 80-95, 95-100 nothing
    t = trace(step(1, 0, 100), ann("phase:forward", 0, 30), ev("aten::mm", 0, 30),
              ann("phase:backward", 30, 50), ev("aten::mm", 30, 50),
              ev("aten::_local_scalar_dense", 40, 5), ann("phase:optimizer", 80, 15),
              ev("aten::add_", 80, 15))
    a = attribute_trace(t)
    got = {k: round(v * 1e6, 6) for k, v in a.category_s.items()}
    assert got == {"data": 0, "sync": 5, "communication": 0, "optimizer": 15,
                   "backward": 45, "forward": 30, "other": 5}
    assert sum(a.shares().values()) == pytest.approx(1.0)
    assert a.syncs_per_step == 1 and a.steps == 1


def test_collectives_split_into_exposed_and_overlapped():
    # gloo all-reduce 50-90 on its thread; the main thread computes until 70, then waits
    t = trace(step(1, 0, 100), ann("phase:backward", 0, 95), ev("aten::mm", 0, 49),
              ev("c10d::allreduce_", 49, 1), ev("aten::mm", 50, 20),
              ann("gloo:all_reduce", 50, 40, tid=GLOO))
    a = attribute_trace(t)
    # 70-90 exposed, and the 1 us launch on the main thread is communication's own work
    assert a.category_s["communication"] * 1e6 == pytest.approx(20 + 1)
    assert a.comm_host_s * 1e6 == pytest.approx(1)
    assert a.comm_overlapped_s * 1e6 == pytest.approx(20)  # 50-70 hidden under the mm
    assert a.comm_contention_s == 0  # one mm: nothing to compare it with
    assert a.category_s["backward"] * 1e6 == pytest.approx(74)  # 95 less 20 and 1


def test_ddp_bucket_copies_inside_backward_are_communication():
    # DDP's reducer copies each gradient into its bucket inside AccumulateGrad's node, and
    # the buckets back into the gradients at the end of backward: work only DDP causes
    acc = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    t = trace(step(1, 0, 100), ann("phase:backward", 0, 90), ev("aten::mm", 0, 30),
              ev(acc, 30, 20), ev("torch::distributed::reducer::mul_out", 35, 12),
              ev("torch.distributed.ddp.reducer::copy_bucket_to_grad", 60, 25),
              ev("aten::copy_", 60, 25))
    a = attribute_trace(t)
    assert a.category_s["communication"] * 1e6 == pytest.approx(12 + 25)
    assert a.comm_host_s * 1e6 == pytest.approx(37)
    assert a.category_s["backward"] * 1e6 == pytest.approx(90 - 37)


DIMS = {"Input Dims": [[2, 1024], [1024, 1024]]}


def op(name, ts, dur, args=None):
    return {**ev(name, ts, dur), "args": args or {}}


def slowed_steps(under_dur, clean_dur=10, n=3, dims_under=DIMS, early_long=False):
    """``n`` 100 us steps; in each a backward of three mm: one before a 40 us all-reduce
    (20-60), one that starts during it, one after it (70-80). ``early_long``: the first
    mm starts at 12 and runs 30 us, into the all-reduce, but it started before it."""
    events = []
    for k in range(n):
        t0 = 100 * k
        first = (12, 30) if early_long else (0, clean_dur)
        events += [step(k + 1, t0, 100), ann("phase:backward", t0, 95),
                   op("aten::mm", t0 + first[0], first[1], DIMS),
                   op("aten::mm", t0 + 45, under_dur, dims_under),
                   op("aten::mm", t0 + 70, clean_dur, DIMS),
                   ann("gloo:all_reduce", t0 + 20, 40, tid=GLOO)]
    return trace(*events)


def test_operators_slowed_by_a_collective_in_flight_charge_it():
    # the mm that starts during the all-reduce takes 15 us against 10 us without one: a
    # third of its 15 us overlap (45-60) is the collective's cost, paid inside backward
    a = attribute_trace(slowed_steps(under_dur=15))
    assert a.comm_contention_s * 1e6 == pytest.approx(15 * (1 - 10 / 15))
    # per step: all-reduce 20-60; the main thread runs mm 45-60: exposed 20-45 (25 us)
    assert a.category_s["communication"] * 1e6 == pytest.approx(25 + 5)
    assert a.category_s["backward"] * 1e6 == pytest.approx(95 - 25 - 5)
    assert a.comm_overlapped_s * 1e6 == pytest.approx(15)  # hidden, the slowed part too


def test_no_charge_without_a_slowdown_or_a_comparison():
    assert attribute_trace(slowed_steps(under_dur=10)).comm_contention_s == 0  # as fast
    assert attribute_trace(slowed_steps(under_dur=8)).comm_contention_s == 0  # faster
    # other shapes are other work: a larger mm is not a slowed small one
    other = {"Input Dims": [[64, 1024], [1024, 1024]]}
    assert attribute_trace(slowed_steps(under_dur=15, dims_under=other)).comm_contention_s == 0
    # fewer than MIN_SAMPLES instances on a side: not judged
    assert attribute_trace(slowed_steps(under_dur=15, n=2)).comm_contention_s == 0


def test_an_operator_is_judged_by_where_it_starts_not_by_how_much_it_overlaps():
    # the first mm starts before the all-reduce and runs long into it; the one that starts
    # during it is as fast as the others. Judged by overlap, the long one would look like
    # a collective's victim (longer instances overlap more by chance)
    a = attribute_trace(slowed_steps(under_dur=10, early_long=True))
    assert a.comm_contention_s == 0


def test_a_loop_of_syncs_counts_as_sync_but_separate_syncs_do_not_merge():
    loop = [ev("aten::_local_scalar_dense", 10 + 10 * i, 1) for i in range(5)]  # 10..51
    apart = [ev("aten::_local_scalar_dense", 60, 1), ev("aten::mm", 62, 300),
             ev("aten::_local_scalar_dense", 400, 1)]
    a = attribute_trace(trace(step(1, 0, 500), *loop, *apart))
    # 10-61: the loop and the sync 9 us after it (nothing ran between); then the 300 us
    # mm separates the last sync: 51 + 1, the mm is not sync
    assert a.category_s["sync"] * 1e6 == pytest.approx(51 + 1)
    assert a.syncs_per_step == 7


def test_a_wait_for_a_collective_between_two_reads_is_booked_as_sync_and_named():
    # DDP with find_unused_parameters on a CPU: it waits for a bucket's all-reduce (gloo's
    # thread, 12-90), then reads the used map (1 us reads at 10 and 90): 81 us of sync, of
    # which the reads are 2 and 78 had the all-reduce in flight
    t = trace(step(1, 0, 100), ev("aten::_local_scalar_dense", 10, 1),
              ann("gloo:all_reduce", 12, 78, tid=GLOO), ev("aten::_local_scalar_dense", 90, 1))
    a = attribute_trace(t)
    assert a.category_s["sync"] * 1e6 == pytest.approx(81)
    assert a.sync_read_s * 1e6 == pytest.approx(2) and a.sync_comm_s * 1e6 == pytest.approx(78)
    said = diagnose_shares(a, Thresholds(sync=0.1))[0]
    assert said.kind == "sync"
    assert ("of that, the reads themselves took 2.00% of the step, and 78.0% passed with a collective in "
            "flight between two reads: waiting for it") in said.evidence
    # ranked and graded on the whole share, the wait included: the rest alone says what it is made of
    assert ("; it is ranked and graded on the whole 81.0%, that wait included: the rest, 3.0% of the step, "
            "would raise no finding") in said.evidence
    as_run = diagnose_shares(StepShares({"sync": 0.34}, syncs_per_step=57, sync_comm_share=0.33,
                                        sync_read_share=0.0003))[0]  # 08's slow job: high on the wait
    assert as_run.severity == "high" and ("the rest, 1.0% of the step, would grade it medium, on its count "
                                          "of reads alone (57 past 8)") in as_run.evidence
    rest = diagnose_shares(StepShares({"sync": 0.7}, syncs_per_step=2, sync_comm_share=0.2))[0]
    assert "the rest, 50.0% of the step, would grade it high" in rest.evidence
    rep = build_report([dict(record(0, 1e-4), attribution=vars(a))], Thresholds(sync=0.1))
    assert rep["sync_comm_share"] == pytest.approx(0.78) and rep["sync_read_share"] == pytest.approx(0.02)
    assert rep["findings"][0]["evidence"] == said.evidence
    # reads with nothing in flight: no such clause, and the GPU's wait named once (the title's)
    alone = diagnose_shares(attribute_trace(trace(step(1, 0, 100), ev("aten::_local_scalar_dense", 10, 1),
                                                  ev("aten::_local_scalar_dense", 90, 1))),
                            Thresholds(sync=0.1))[0]
    assert "collective" not in alone.evidence and alone.evidence.count("waits for the device") == 1


def test_syncs_inside_the_optimizer_belong_to_it_and_outside_steps_are_ignored():
    t = trace(step(1, 0, 100), ann("phase:optimizer", 0, 50),
              ev("aten::_local_scalar_dense", 10, 5), ev("aten::_local_scalar_dense", 20, 5),
              ev("aten::_local_scalar_dense", 150, 5),  # outside every step
              ann("phase:data", 200, 50), step(2, 300, 100), ann("phase:data", 300, 60))
    a = attribute_trace(t)
    assert a.syncs_per_step == 0 and a.category_s["sync"] == 0
    assert a.category_s["optimizer"] * 1e6 == pytest.approx(25)  # 50 us over 2 steps
    assert a.category_s["data"] * 1e6 == pytest.approx(30)
    # step 1: 100 us less the two 5 us sync ops; step 2: 100 us less 60 us of data
    assert a.host_gap_s * 1e6 == pytest.approx((90 + 40) / 2)


def test_a_trace_without_steps_is_refused():
    with pytest.raises(ValueError, match="ProfilerStep"):
        attribute_trace(trace(ev("aten::mm", 0, 5)))
    with pytest.raises(TypeError, match="trace"):
        attribute_trace(3)


def record(rank, step_s, comm_s=0.0, batch=None, shares=None, flops=None):
    shares = shares or {"forward": 0.4, "backward": 0.5}
    cat = {k: 0.0 for k in ("data", "sync", "communication", "optimizer", "backward",
                            "forward", "other")}
    cat.update({k: v * step_s for k, v in shares.items()})
    cat["communication"] = comm_s
    return {"rank": rank, "status": "complete", "steps_seen": 13, "window_steps": 10,
            "step_times_s": [step_s] * 10, "batch_size": batch, "flops_per_step": flops,
            "memory": {"kind": "peak RSS", "bytes": 2**30}, "trace": "t.json", "note": None,
            "attribution": {"steps": 10, "step_mean_s": step_s, "category_s": cat,
                            "comm_overlapped_s": 0.0, "syncs_per_step": 1.0,
                            "host_gap_s": 0.1 * step_s, "ops_per_step": 50.0,
                            "device_idle_share": None}}


def test_findings_are_ranked_by_what_the_fix_can_gain():
    rep = build_report([record(0, 0.1, shares={"data": 0.3, "optimizer": 0.5,
                                               "forward": 0.1})])
    kinds = [f["kind"] for f in rep["findings"]]
    assert kinds == ["optimizer", "data"]
    assert rep["findings"][0]["max_speedup"] == pytest.approx(2.0)  # 1 / (1 - 0.5)
    assert rep["findings"][1]["max_speedup"] == pytest.approx(1 / 0.7)


def test_the_report_and_a_trace_are_judged_by_the_same_rules():
    # one 100 us step: a 70 us loop of 8 syncs between a short forward and backward
    syncs = [ev("aten::_local_scalar_dense", 15 + 9 * i, 1) for i in range(8)]
    t = trace(step(1, 0, 100), ann("phase:forward", 0, 10), ev("aten::mm", 0, 10), *syncs,
              ann("phase:backward", 90, 10), ev("aten::mm", 90, 10))
    att = attribute_trace(t)
    direct = diagnose_shares(att, Thresholds.for_command())
    assert direct[0].kind == "sync" and "8 host-device syncs per step" in direct[0].evidence
    rep = build_report([dict(record(0, 1e-4), attribution=vars(att))])
    assert rep["findings"] == [f.record() for f in direct]  # one pipeline, one wording
    # the course's thresholds judge "other"; the command leaves it to the overhead rule
    assert "other" in [f.kind for f in diagnose_shares({"other": 0.3})]
    assert not diagnose_shares({"other": 0.3}, Thresholds.for_command())


def test_step_time_quantiles_interpolate_linearly():
    rec = dict(record(0, 0.1), step_times_s=[0.004, 0.001, 0.003, 0.002])
    rep = build_report([rec])
    # perfkit.stats.quantile, not the nearest rank (which gives 3 ms and 4 ms)
    assert rep["step_p50_s"] == pytest.approx(0.0025)
    assert rep["step_p95_s"] == pytest.approx(0.00385)  # 3 + 0.85 * (4 - 3) ms
    assert rep["ranks"][0]["step_p50_s"] == pytest.approx(0.0025)


def test_a_finding_record_is_its_fields_with_amdahls_bound():
    f = Finding("straggler", "high", 0.75, 0.3, "e", ("a", "b"), "nb", rank=3)
    assert f.record() == {"kind": "straggler", "severity": "high", "share": 0.75,
                          "threshold": 0.3, "evidence": "e", "max_speedup": 4.0,
                          "fix": ["a", "b"], "notebook": "nb", "rank": 3}
    assert "rank" not in Finding("data", "medium", 0.2, 0.1, "e", (), "nb").record()
    assert Finding("jitter", "medium", 2.0, 1.5, "e", (), "nb").max_speedup is None


def test_a_healthy_record_has_no_finding_above_info_and_mfu_needs_a_peak():
    rep = build_report([record(0, 0.1, batch=32, flops=1e9)])
    assert all(f["severity"] == "info" for f in rep["findings"])
    assert rep["mfu"].startswith("unknown")  # never guessed
    assert rep["throughput"]["samples_per_s"] == pytest.approx(320)
    rep = build_report([record(0, 0.1, flops=1e9)], peak_flops=1e11)
    assert rep["mfu"] == pytest.approx(0.1)  # 1e9 FLOP / 0.1 s / 1e11 FLOP/s
    assert rep["throughput"] is None


def test_the_straggler_is_the_rank_the_others_wait_for():
    # every rank's step is 100 ms; rank 2 works 90 ms, ranks 0, 1 and 3 work 20 ms and
    # wait 80 ms in their all-reduce
    recs = [record(r, 0.1, comm_s=0.01 if r == 2 else 0.08) for r in range(4)]
    rep = build_report(recs)
    top = rep["findings"][0]
    assert top["kind"] == "straggler" and "rank 2 is the straggler" in top["evidence"]
    assert top["share"] == pytest.approx(0.7)  # (90 - 20) ms of a 100 ms step
    # the collectives themselves cost what the least exposed rank waits: 10 %, not 80 %
    assert "communication" not in [f["kind"] for f in rep["findings"]]
    even = build_report([record(r, 0.1, comm_s=0.07) for r in range(4)])
    assert [f["kind"] for f in even["findings"]][0] == "communication"
    # 3x the others' work is below the 4x bar: noise between ranks on shared cores
    mild = build_report([record(r, 0.1, comm_s=0.04 if r == 2 else 0.08) for r in range(4)])
    assert "straggler" not in [f["kind"] for f in mild["findings"]]


def test_arguments_are_checked_by_name():
    with pytest.raises(ValueError, match="data"):
        Thresholds(data=1.5)
    with pytest.raises(ValueError, match="straggler"):
        Thresholds(straggler=0.5)
    with pytest.raises(ValueError, match="then"):
        DiagnoseConfig(then="later")
    with pytest.raises(ValueError, match="timeout_s"):
        DiagnoseConfig(timeout_s=math.inf)
    with pytest.raises(ValueError, match="step_marker"):
        StepRecorder(step_marker="no_colon")
    with pytest.raises(ValueError, match="skip"):
        StepRecorder(skip=-1)
    with pytest.raises(ValueError, match="records"):
        build_report([])


def test_recorder_finds_steps_and_data_then_stops_and_unhooks(tmp_path, one_thread):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(40, 4)), batch_size=5)
    rec = StepRecorder(skip=1, steps=2, out_dir=tmp_path)
    seen = 0
    with pytest.raises(WindowDone), rec:
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
            seen += 1
    assert seen == 2 and len(rec.step_ends_s) == 3  # stopped inside the 3rd step
    assert rec.window_done and rec.trace_ok and rec.batch_size == 5
    assert len(rec.step_times_s) == 3 and all(t > 0 for t in rec.step_times_s)
    assert all(d > 0 for d in rec.data_s[:3])
    a = attribute_trace(rec.trace_path)
    assert a.steps == 2 and a.category_s["forward"] > 0 and a.category_s["optimizer"] > 0
    opt.step()  # unhooked: no more steps, the DataLoader no longer timed
    next(iter(loader))
    assert len(rec.step_ends_s) == 3 and rec.data_s[3] == 0.0


def test_overhead_is_operators_too_small_for_their_dispatch():
    # 50 operators per step; the machine does 1e10 FLOP/s, so 0.1 us of it is 1 kFLOP
    tiny = build_report([record(0, 0.1, flops=50 * 1e2)], peak_flops=1e10)  # 100 FLOP/op
    assert tiny["findings"][0]["kind"] == "overhead"
    assert tiny["findings"][0]["share"] == pytest.approx(0.9)  # forward + backward
    assert tiny["flops_per_op"] == pytest.approx(1e2)
    edge = build_report([record(0, 0.1, flops=50 * 2e3)], peak_flops=1e10)  # 2 kFLOP/op
    assert "overhead" not in [f["kind"] for f in edge["findings"]]
    big = build_report([record(0, 0.1, flops=50 * 1e6)], peak_flops=1e10)  # 1 MFLOP/op
    assert "overhead" not in [f["kind"] for f in big["findings"]]
    unknown = build_report([record(0, 0.1, flops=None)], peak_flops=1e10)  # not counted
    assert "overhead" not in [f["kind"] for f in unknown["findings"]]


def test_html_report_draws_each_share_once():
    rep = build_report([record(0, 0.1, shares={"data": 0.3, "forward": 0.2, "backward": 0.5})])
    page = render_html(rep)
    assert page.count("<rect") == 7 and "<title>data 30.0%</title>" in page
    assert 'width="180.0"' in page  # 30 % of the 600-pixel bar
    assert "[medium] data" in page  # the findings, escaped text


def test_mfu_divides_by_the_ceiling_of_the_threads_the_script_ran_on(tmp_path, monkeypatch):
    from perfkit import hw
    from perfkit.profiling import render_text
    from perfkit.profiling.session import _peak_flops
    dev = hw.resolve_device(None)
    lim = hw.MachineLimits(str(dev), hw.device_name(dev), {"float32": 4e11}, 3e10, threads=2,
                           one_thread_flops={"float32": 2.5e11})
    monkeypatch.setenv("PERFKIT_CACHE", str(tmp_path))
    hw.save_limits(lim)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # what torchrun's OMP_NUM_THREADS=1 gives a script
        assert _peak_flops() == (2.5e11, 1)  # one thread's ceiling, not all cores' 4e11
        torch.set_num_threads(2)
        assert _peak_flops() == (4e11, 2)
    finally:
        torch.set_num_threads(before)
    rep = build_report([record(0, 0.1, flops=1e9)], peak_flops=2.5e11)
    rep["mfu_ceiling"] = {"flops_per_s": 2.5e11, "threads": 1}
    text = render_text(rep)
    assert "counted FLOP rate: 4 % of this machine's measured fp32 ceiling on 1 thread (250 GFLOP/s)" in text
    assert "HFU:" not in render_text(rep)  # a rate of the profiler's matmul FLOPs bounds HFU, it is not it
    assert "a lower bound of the step's HFU" in text
