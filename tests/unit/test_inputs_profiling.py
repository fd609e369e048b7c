"""perfkit.profiling refuses bad arguments: each public function and class raises
``TypeError`` (wrong type) or ``ValueError`` (wrong value) with a message naming the
argument and what is allowed, at the call, not steps later inside the loop or a thread.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered

from perfkit import profiling
from perfkit.hw import MachineLimits
from perfkit.profiling import (
    CpuSnapshot,
    DiagnoseConfig,
    JsonLinesSink,
    MemoryMonitor,
    PhaseStats,
    ProfileConfig,
    Profiler,
    PrometheusSink,
    StepMonitor,
    StepRecorder,
    StepShares,
    TensorBoardSink,
    Thresholds,
    TraceBreakdown,
    alert_rules,
    attribute_trace,
    build_report,
    cpu_snapshot,
    diagnose_shares,
    load_between,
    measure_workload,
    memory_split,
    process_rank,
    prometheus_config,
    rank_record,
    read_json_lines,
    read_scalars,
    render_html,
    render_markdown,
    render_text,
    run_diagnosis,
    trace_breakdown,
    trace_events,
    window_scalars,
)
from perfkit.profiling import capstone as cap

NAN, INF = math.nan, math.inf
REPORT = build_report([{"rank": 0, "status": "partial", "steps_seen": 0, "window_steps": 0,
                        "step_times_s": [], "batch_size": None, "flops_per_step": None,
                        "memory": {"kind": "peak RSS", "bytes": 1}, "trace": None,
                        "attribution": None}])
SHARES = {"data": 0.5, "forward": 0.2}
EV = dict(ph="X", cat="user_annotation", tid=1)  # a Chrome trace's complete event
SNAP = CpuSnapshot(1.0, 7, {7: (0.0, 0.0)}, (0,), None, None)


def bad_rank():
    """process_rank() with RANK set to something torchrun never sets."""
    import os

    old = os.environ.get("RANK")
    os.environ["RANK"] = "-1"
    try:
        return process_rank()
    finally:
        if old is None:
            del os.environ["RANK"]
        else:
            os.environ["RANK"] = old


def summary():
    """A one-step summary of a monitor on a fake clock (no real timing)."""
    mon, t = StepMonitor(device="cpu"), [0.0]
    mon._mark = lambda: t[0]
    with mon.phase("forward"):
        t[0] += 0.01
    mon.step()
    return mon.summary()


JOB = cap.CapstoneJob(Path("t.py"), Path("/tmp/o"), 5.0)
CAP_LIMITS = MachineLimits("cpu", "t", {"float32": 1e9}, 1e9)

CASES = [  # (id, call, exception, regex on the message)
    # StepMonitor
    ("StepMonitor.warmup negative", lambda: StepMonitor("cpu", warmup=-1), ValueError,
     "warmup must be an int >= 0"),
    ("StepMonitor.warmup bool", lambda: StepMonitor("cpu", warmup=True), ValueError, "warmup"),
    ("StepMonitor.warmup float", lambda: StepMonitor("cpu", warmup=1.5), ValueError, "warmup"),
    ("StepMonitor.warmup str", lambda: StepMonitor("cpu", warmup="2"), TypeError, "warmup"),
    ("StepMonitor.phases str", lambda: StepMonitor("cpu", phases="forward"), TypeError,
     "phases must be a list or tuple"),
    ("StepMonitor.phases empty", lambda: StepMonitor("cpu", phases=()), ValueError,
     "phases must hold at least one"),
    ("StepMonitor.phases int", lambda: StepMonitor("cpu", phases=3), TypeError, "phases"),
    ("StepMonitor.phases item", lambda: StepMonitor("cpu", phases=("forward", "")), TypeError,
     "phase name must be a non-empty str"),
    ("StepMonitor.phases reserved", lambda: StepMonitor("cpu", phases=("step",)), ValueError,
     "phase name 'step' is reserved"),
    ("StepMonitor.device", lambda: StepMonitor("bogus"), ValueError, "device"),
    ("StepMonitor.phase int", lambda: StepMonitor("cpu").phase(3), TypeError,
     "phase name must be a non-empty str"),
    ("StepMonitor.phase list", lambda: StepMonitor("cpu").phase(["forward"]), TypeError,
     "phase name"),
    ("StepMonitor.phase reserved", lambda: StepMonitor("cpu").phase("other"), ValueError,
     "phase name 'other' is reserved"),
    ("StepMonitor.phase unknown", lambda: StepMonitor("cpu", phases=("forward",)).phase("fwd"),
     ValueError, "unknown phase 'fwd'"),
    ("StepMonitor.step samples negative", lambda: StepMonitor("cpu").step(samples=-1),
     ValueError, "samples must be an int >= 0"),
    ("StepMonitor.step samples float", lambda: StepMonitor("cpu").step(samples=1.5), ValueError,
     "samples"),
    ("StepMonitor.step samples nan", lambda: StepMonitor("cpu").step(samples=NAN), ValueError,
     "samples"),
    ("StepMonitor.step samples str", lambda: StepMonitor("cpu").step(samples="8"), TypeError,
     "samples"),
    ("StepMonitor.step tokens bool", lambda: StepMonitor("cpu").step(tokens=True), ValueError,
     "tokens"),
    ("StepMonitor.every zero", lambda: StepMonitor("cpu", every=0), ValueError,
     "every must be an int >= 1"),
    ("StepMonitor.every float", lambda: StepMonitor("cpu", every=2.5), ValueError, "every"),
    ("StepMonitor.sinks str", lambda: StepMonitor("cpu", sinks="tb"), TypeError,
     "sinks must be a list or tuple"),
    ("StepMonitor.sinks item", lambda: StepMonitor("cpu", sinks=[print]), TypeError,
     r"sinks\[0\] must have a write\(window\) method"),
    ("StepMonitor.memory", lambda: StepMonitor("cpu", memory="rss"), TypeError,
     "memory must be a MemoryMonitor or None"),
    # sinks
    ("TensorBoardSink.log_dir", lambda: TensorBoardSink(3), TypeError,
     "log_dir must be a str or PathLike"),
    ("TensorBoardSink.flush_secs", lambda: TensorBoardSink("x", flush_secs=0), ValueError,
     "flush_secs must be a finite number > 0"),
    ("JsonLinesSink.path", lambda: JsonLinesSink(None), TypeError,
     "path must be a str or PathLike"),
    ("JsonLinesSink.run_id int", lambda: JsonLinesSink("x.jsonl", run_id=7), TypeError,
     "run_id must be a str or None"),
    ("JsonLinesSink.run_id empty", lambda: JsonLinesSink("x.jsonl", run_id=""), ValueError,
     "run_id must be a non-empty str"),
    ("read_json_lines.path", lambda: read_json_lines(3), TypeError,
     "path must be a str or PathLike"),
    ("PrometheusSink.port negative", lambda: PrometheusSink(port=-1), ValueError,
     r"port must be an int in \[0, 65535\]"),
    ("PrometheusSink.port str", lambda: PrometheusSink(port="9400"), TypeError, "port"),
    ("PrometheusSink.addr", lambda: PrometheusSink(addr=127), TypeError, "addr must be a str"),
    ("PrometheusSink.rank", lambda: PrometheusSink(rank=-1), ValueError,
     "rank must be an int >= 0"),
    ("PrometheusSink.buckets empty", lambda: PrometheusSink(buckets=()), ValueError,
     "buckets must hold at least one"),
    ("PrometheusSink.buckets order", lambda: PrometheusSink(buckets=(1.0, 0.5)), ValueError,
     "buckets must be increasing"),
    ("PrometheusSink.buckets nan", lambda: PrometheusSink(buckets=(NAN,)), ValueError,
     "buckets must be a finite number > 0"),
    ("window_scalars.window", lambda: window_scalars(summary()), TypeError,
     "window must be a StepWindow"),
    ("process_rank.RANK", bad_rank, ValueError, "RANK must be an int >= 0"),
    ("read_scalars.log_dir", lambda: read_scalars(3), TypeError,
     "log_dir must be a str or PathLike"),
    # alerts
    ("alert_rules.thresholds", lambda: alert_rules({"data": 0.1}), TypeError,
     "thresholds must be a Thresholds or None"),
    ("alert_rules.baseline_step_s zero", lambda: alert_rules(baseline_step_s=0), ValueError,
     "baseline_step_s must be a finite number > 0"),
    ("alert_rules.regression nan", lambda: alert_rules(regression=NAN), ValueError,
     "regression"),
    ("alert_rules.for_s negative", lambda: alert_rules(for_s=-1), ValueError,
     "for_s must be a finite number >= 0"),
    ("alert_rules.interval_s zero", lambda: alert_rules(interval_s=0), ValueError,
     "interval_s"),
    ("alert_rules.kinds unknown", lambda: alert_rules(kinds=["data", "slow"]), ValueError,
     r"kinds must be among .*got \['slow'\]"),
    ("alert_rules.kinds str", lambda: alert_rules(kinds="data"), TypeError,
     "kinds must be a list or tuple"),
    ("alert_rules.lookback_s inf", lambda: alert_rules(lookback_s=INF), ValueError,
     "lookback_s"),
    ("prometheus_config.targets str", lambda: prometheus_config("127.0.0.1:9400"), TypeError,
     "targets must be a list or tuple"),
    ("prometheus_config.targets empty", lambda: prometheus_config([]), ValueError,
     "targets must hold at least one"),
    ("prometheus_config.targets item", lambda: prometheus_config([9400]), TypeError,
     "targets must be a str"),
    ("prometheus_config.rule_files", lambda: prometheus_config(["h:1"], "r.yml"), TypeError,
     "rule_files must be a list or tuple"),
    ("prometheus_config.interval_s", lambda: prometheus_config(["h:1"], interval_s=0),
     ValueError, "interval_s"),
    ("prometheus_config.job", lambda: prometheus_config(["h:1"], job=None), TypeError,
     "job must be a str"),
    # MemoryMonitor
    ("MemoryMonitor.interval_s zero", lambda: MemoryMonitor("cpu", interval_s=0), ValueError,
     r"interval_s must be a finite number in \(0, "),
    ("MemoryMonitor.interval_s negative", lambda: MemoryMonitor("cpu", interval_s=-1),
     ValueError, "interval_s"),
    ("MemoryMonitor.interval_s nan", lambda: MemoryMonitor("cpu", interval_s=NAN), ValueError,
     "interval_s"),
    ("MemoryMonitor.interval_s inf", lambda: MemoryMonitor("cpu", interval_s=INF), ValueError,
     "interval_s"),
    ("MemoryMonitor.interval_s huge", lambda: MemoryMonitor("cpu", interval_s=1e300), ValueError,
     "interval_s"),
    ("MemoryMonitor.interval_s str", lambda: MemoryMonitor("cpu", interval_s="1"), TypeError,
     "interval_s"),
    ("MemoryMonitor.interval_s bool", lambda: MemoryMonitor("cpu", interval_s=True), ValueError,
     "interval_s"),
    ("MemoryMonitor.device", lambda: MemoryMonitor("bogus"), ValueError, "device"),
    # PhaseStats, StepSummary
    ("PhaseStats.of times empty", lambda: PhaseStats.of("x", [], 1.0), ValueError,
     "times_s must hold at least one"),
    ("PhaseStats.of times nan", lambda: PhaseStats.of("x", [NAN], 1.0), ValueError, "times_s"),
    ("PhaseStats.of step_mean_s nan", lambda: PhaseStats.of("x", [1.0], NAN), ValueError,
     "step_mean_s must be a finite number >= 0"),
    ("StepSummary.share unknown", lambda: summary().share("fwd"), KeyError,
     "unknown phase 'fwd'"),
    # Thresholds
    ("Thresholds.data zero", lambda: Thresholds(data=0.0), ValueError,
     r"data must be a finite number in \(0, 1\)"),
    ("Thresholds.data one", lambda: Thresholds(data=1.0), ValueError, "data"),
    ("Thresholds.data nan", lambda: Thresholds(data=NAN), ValueError, "data"),
    ("Thresholds.data str", lambda: Thresholds(data="0.1"), TypeError, "data"),
    ("Thresholds.compute bool", lambda: Thresholds(compute=True), ValueError, "compute"),
    ("Thresholds.jitter one", lambda: Thresholds(jitter=1.0), ValueError,
     "jitter must be a finite number > 1"),
    ("Thresholds.jitter nan", lambda: Thresholds(jitter=NAN), ValueError, "jitter"),
    ("Thresholds.jitter inf", lambda: Thresholds(jitter=INF), ValueError, "jitter"),
    ("Thresholds.jitter str", lambda: Thresholds(jitter="2"), TypeError, "jitter"),
    ("Thresholds.min_steps negative", lambda: Thresholds(min_steps=-1), ValueError,
     "min_steps must be an int >= 0"),
    ("Thresholds.min_steps float", lambda: Thresholds(min_steps=1.5), ValueError, "min_steps"),
    ("Thresholds.min_steps str", lambda: Thresholds(min_steps="20"), TypeError, "min_steps"),
    # diagnose_shares, StepShares
    ("diagnose_shares.record int", lambda: diagnose_shares(3), TypeError,
     "record must be a StepShares or StepSummary"),
    ("diagnose_shares.record None", lambda: diagnose_shares(None), TypeError, "record"),
    ("diagnose_shares.record list", lambda: diagnose_shares([("data", 0.5)]), TypeError,
     "record"),
    ("diagnose_shares.share nan", lambda: diagnose_shares({"data": NAN}), ValueError,
     r"share of phase 'data' must be in \[0, 1\]"),
    ("diagnose_shares.share above 1", lambda: diagnose_shares({"data": 1.5}), ValueError, "'data'"),
    ("diagnose_shares.share negative", lambda: diagnose_shares({"data": -0.1}), ValueError, "'data'"),
    ("diagnose_shares.share str", lambda: diagnose_shares({"data": "0.5"}), ValueError, "'data'"),
    ("diagnose_shares.thresholds", lambda: diagnose_shares(SHARES, thresholds={"data": 0.1}), TypeError,
     "thresholds must be a Thresholds"),
    ("diagnose_shares.aliases list", lambda: diagnose_shares(SHARES, aliases=["x"]), TypeError,
     "aliases must be a Mapping"),
    ("diagnose_shares.aliases kind", lambda: diagnose_shares(SHARES, aliases={"x": "gpu"}), ValueError,
     "alias 'x' -> 'gpu': kind must be one of"),
    ("StepShares.shares list", lambda: StepShares([("data", 0.5)]), TypeError,
     "shares must be a Mapping"),
    ("StepShares.shares above 1", lambda: StepShares({"sync": 1.5}), ValueError,
     r"share of phase 'sync' must be in \[0, 1\]"),
    ("StepShares.steps negative", lambda: StepShares(SHARES, steps=-1), ValueError,
     "steps must be an int >= 0"),
    ("StepShares.step_p99_s nan", lambda: StepShares(SHARES, step_p99_s=NAN), ValueError,
     "step_p99_s must be a finite number >= 0"),
    ("StepShares.syncs_per_step str", lambda: StepShares(SHARES, syncs_per_step="8"),
     TypeError, "syncs_per_step"),
    ("StepShares.rank_work_s list", lambda: StepShares(SHARES, rank_work_s=[0.1]), TypeError,
     "rank_work_s must be a Mapping"),
    ("StepShares.rank_work_s negative", lambda: StepShares(SHARES, rank_work_s={1: -0.1}),
     ValueError, r"rank_work_s\[1\] must be a finite number >= 0"),
    ("StepShares.comm_ranks zero", lambda: StepShares(SHARES, comm_ranks=0), ValueError,
     "comm_ranks must be an int >= 1"),
    ("StepShares.of aliases kind", lambda: StepShares.of(SHARES, {"x": "gpu"}), ValueError,
     "kind must be one of"),
    ("diagnose_shares.peak_flops", lambda: diagnose_shares(SHARES, peak_flops=-1.0),
     ValueError, "peak_flops must be a finite number > 0"),
    # measure_workload: every case fails before a workload is built or a step runs
    ("measure_workload.workload", lambda: measure_workload("resnet"), ValueError,
     "workload must be one of"),
    ("measure_workload.steps zero", lambda: measure_workload(steps=0), ValueError,
     "steps must be an int >= 1"),
    ("measure_workload.steps bool", lambda: measure_workload(steps=True), ValueError, "steps"),
    ("measure_workload.warmup", lambda: measure_workload(warmup=-1), ValueError,
     "warmup must be an int >= 0"),
    ("measure_workload.batch_size", lambda: measure_workload(batch_size=0), ValueError,
     "batch_size"),
    ("measure_workload.num_workers", lambda: measure_workload(num_workers=1.5), ValueError,
     "num_workers"),
    ("measure_workload.cost_ms", lambda: measure_workload(cost_ms=NAN), ValueError, "cost_ms"),
    ("measure_workload.device", lambda: measure_workload(device="bogus"), ValueError, "device"),
    ("measure_workload.kwargs", lambda: measure_workload("gpt2", n_embd=64, n_head=3),
     ValueError, "n_embd must be a multiple of n_head"),
    # ProfileConfig, Profiler
    ("ProfileConfig.wait negative", lambda: ProfileConfig(wait=-1), ValueError,
     "wait must be an int >= 0"),
    ("ProfileConfig.wait bool", lambda: ProfileConfig(wait=True), ValueError, "wait"),
    ("ProfileConfig.warmup float", lambda: ProfileConfig(warmup=1.5), ValueError, "warmup"),
    ("ProfileConfig.active zero", lambda: ProfileConfig(active=0), ValueError,
     "active must be an int >= 1"),
    ("ProfileConfig.trace_dir", lambda: ProfileConfig(trace_dir=3), TypeError,
     "trace_dir must be a str or PathLike"),
    ("Profiler.config", lambda: Profiler(config={"wait": 1}), TypeError,
     "config must be a ProfileConfig or None"),
    ("Profiler.name empty", lambda: Profiler(name=""), ValueError,
     "name must be a non-empty file stem"),
    ("Profiler.name slash", lambda: Profiler(name="a/b"), ValueError, "name"),
    ("Profiler.name int", lambda: Profiler(name=3), ValueError, "name"),
    ("Profiler.device", lambda: Profiler(device="bogus"), ValueError, "device"),
    ("Profiler.phase int", lambda: Profiler.phase(3), TypeError, "name must be a non-empty str"),
    ("Profiler.phase empty", lambda: Profiler.phase(""), TypeError, "name"),
    # trace_events, trace_breakdown, TraceBreakdown
    ("trace_events.trace int", lambda: trace_events(3), TypeError,
     "trace must be a str or PathLike or Mapping"),
    ("trace_events.trace not json", lambda: trace_events(__file__), ValueError,
     "trace '.*' is not a JSON file"),
    ("trace_events.trace list", lambda: trace_events({"traceEvents": {}}), ValueError,
     "trace must be a Chrome trace"),
    ("trace_breakdown.trace int", lambda: trace_breakdown(3), TypeError,
     "trace must be a str or PathLike or Mapping"),
    ("trace_breakdown.trace list", lambda: trace_breakdown([{}]), TypeError, "trace"),
    ("trace_breakdown.trace not json", lambda: trace_breakdown(__file__), ValueError,
     "trace '.*' is not a JSON file"),
    ("trace_breakdown.trace events", lambda: trace_breakdown({"traceEvents": 3}), ValueError,
     "trace must be a Chrome trace"),
    ("trace_breakdown.trace event keys", lambda: trace_breakdown({"traceEvents": [dict(EV)]}),
     ValueError, "trace has user_annotation events without a name"),
    ("trace_breakdown.trace no steps",
     lambda: trace_breakdown({"traceEvents": [dict(EV, name="phase:data", ts=0, dur=5)]}),
     ValueError, "trace has no ProfilerStep# events"),
    ("trace_breakdown.trace no phases",
     lambda: trace_breakdown({"traceEvents": [dict(EV, name="ProfilerStep#1", ts=0, dur=5)]}),
     ValueError, "trace has no 'phase:' markers"),
    ("TraceBreakdown.steps zero", lambda: TraceBreakdown(0, 1.0, SHARES), ValueError,
     "steps must be an int >= 1"),
    ("TraceBreakdown.steps bool", lambda: TraceBreakdown(True, 1.0, SHARES), ValueError,
     "steps"),
    ("TraceBreakdown.step_mean_s zero", lambda: TraceBreakdown(1, 0.0, SHARES), ValueError,
     "step_mean_s must be a finite number > 0"),
    ("TraceBreakdown.step_mean_s nan", lambda: TraceBreakdown(1, NAN, SHARES), ValueError,
     "step_mean_s"),
    ("TraceBreakdown.phase_mean_s", lambda: TraceBreakdown(1, 1.0, [0.5]), TypeError,
     "phase_mean_s must be a dict"),
]

CASES += [
    ("Thresholds.sync above 1", lambda: Thresholds(sync=1.5), ValueError,
     "sync must be a finite number in"),
    ("Thresholds.other nan", lambda: Thresholds(other=NAN), ValueError, "other"),
    ("Thresholds.other str", lambda: Thresholds(other="x"), TypeError, "other"),
    ("Thresholds.straggler one", lambda: Thresholds(straggler=1.0), ValueError,
     "straggler must be a finite number > 1"),
    ("Thresholds.straggler_wait zero", lambda: Thresholds(straggler_wait=0.0), ValueError,
     "straggler_wait"),
    ("Thresholds.syncs_per_step zero", lambda: Thresholds(syncs_per_step=0), ValueError,
     "syncs_per_step must be a finite number > 0"),
    ("Thresholds.op_overhead_us inf", lambda: Thresholds(op_overhead_us=INF), ValueError,
     "op_overhead_us"),
    ("Thresholds.peak_fallback zero", lambda: Thresholds(peak_fallback=0.0), ValueError,
     "peak_fallback"),
    ("build_report thresholds", lambda: build_report([{}], thresholds={"data": 0.2}),
     TypeError, "thresholds must be a Thresholds"),
    ("DiagnoseConfig.steps zero", lambda: DiagnoseConfig(steps=0), ValueError,
     "steps must be an int >= 1"),
    ("DiagnoseConfig.then", lambda: DiagnoseConfig(then="later"), ValueError,
     "then must be one of"),
    ("DiagnoseConfig.timeout_s inf", lambda: DiagnoseConfig(timeout_s=INF), ValueError,
     "timeout_s"),
    ("StepRecorder.then", lambda: StepRecorder(then="later"), ValueError,
     "then must be 'stop' or 'continue'"),
    ("StepRecorder.step_marker", lambda: StepRecorder(step_marker="no_colon"), ValueError,
     "step_marker must be 'module:function'"),
    ("StepRecorder.skip negative", lambda: StepRecorder(skip=-1), ValueError, "skip"),
    ("attribute_trace int", lambda: attribute_trace(3), TypeError, "trace must be"),
    ("attribute_trace no steps", lambda: attribute_trace({"traceEvents": []}), ValueError,
     "ProfilerStep"),
    ("build_report empty", lambda: build_report([]), ValueError, "records must hold"),
    ("build_report str", lambda: build_report("x"), TypeError, "records must be a list"),
    ("rank_record str", lambda: rank_record("x"), TypeError, "rec must be a StepRecorder"),
    ("render_text str", lambda: render_text("x"), TypeError, "rep must be a dict"),
    ("render_markdown partial", lambda: render_markdown({"command": "x"}), ValueError,
     "rep must be a report"),
    ("render_html None", lambda: render_html(None), TypeError, "rep must be a dict"),
    ("render_html images list", lambda: render_html(REPORT, images=[b"x"]), TypeError,
     "images must be a Mapping"),
    ("render_html images not png", lambda: render_html(REPORT, images={"shares": b"GIF89a"}),
     ValueError, r"images\['shares'\] must be the bytes of a PNG"),
    ("render_markdown images str", lambda: render_markdown(REPORT, images="a.png"), TypeError,
     "images must be a list"),
    ("memory_split item", lambda: memory_split([torch.nn.Linear(2, 2)]), TypeError,
     "optimizers item must be an Optimizer"),
    ("memory_split start negative", lambda: memory_split(start={"rss": -1, "cuda": 0}),
     ValueError, r"start\['rss'\] must be an int >= 0"),
    ("memory_split start int", lambda: memory_split(start=5), TypeError,
     "start must be a Mapping"),
    ("memory_split start keys", lambda: memory_split(start={"gpu": 0}), ValueError,
     "start must be a memory_in_use"),
    ("run_diagnosis int", lambda: run_diagnosis(3), TypeError, "target must be a str"),
    ("run_diagnosis plots", lambda: run_diagnosis("x.py", plots="png"), TypeError,
     "plots must be None or a callable"),
    ("run_diagnosis config", lambda: run_diagnosis("x.py", config="bad"), TypeError,
     "config must be a DiagnoseConfig"),
    # --- capstone: notebook 08's fix loop -----------------------------------------------
    ("CapstoneJob measure", lambda: cap.CapstoneJob(Path("x"), Path("y"), 5.0, measure=0),
     ValueError, "measure"),
    ("FixLoop job", lambda: cap.FixLoop("job", ("data",), {}, CAP_LIMITS), TypeError, "job must be"),
    ("percent2 share", lambda: profiling.percent2(-0.1), ValueError, "share must be"),
    ("bound_class share", lambda: profiling.bound_class(-0.1), ValueError, "share must be"),
    ("bound_class nan", lambda: profiling.bound_class(NAN), ValueError, "share must be"),
    ("bound_class broader", lambda: profiling.bound_class(0.5, broader=1), TypeError, "broader must be"),
    ("bound_class peak", lambda: profiling.bound_class(0.5, peak="yes"), TypeError, "peak must be"),
    ("window_gain before", lambda: profiling.window_gain([], {"step_times_s": [1.0]}), TypeError,
     "before must be"),
    ("window_gain after", lambda: profiling.window_gain({"step_times_s": [1.0]}, {}), ValueError,
     "after must be a diagnosis report"),
    ("window_gain tokens_x", lambda: profiling.window_gain({"step_times_s": [1.0]}, {"step_times_s": [1.0]},
                                                           0), ValueError, "tokens_x must be"),
    ("still_listed report", lambda: profiling.still_listed([], {}, [], [], []), TypeError, "report must be"),
    ("still_listed findings", lambda: profiling.still_listed({}, {}, [], [], []), ValueError,
     "report must be a diagnosis report with findings"),
    ("reads_pick report", lambda: cap.reads_pick([], "sync"), TypeError, "report must be"),
    ("reads_pick shares", lambda: cap.reads_pick({"step_times_s": [1.0]}, "sync"), ValueError,
     "report must be a diagnosis report with shares"),
    ("explain_round pick", lambda: cap.explain_round("data", 1.5, {}, 1.0, True), TypeError, "pick must be"),
    ("explain_round befores_tps", lambda: cap.explain_round(cap.Pick("sync", 0.5, 2.0, "m", "sync"), 1.5, {},
                                                           1.0, True, befores_tps=(9.0, -1.0)),
     ValueError, r"befores_tps\[1\] must be"),
    ("phase_ms list", lambda: profiling.phase_ms([0.1]), TypeError, "report must be"),
    ("phase_ms no steps", lambda: profiling.phase_ms({"shares": {}}), ValueError, "report must be"),
    ("job_peak limits", lambda: cap.job_peak({"float32": 1e9}, {"fixes": []}), TypeError, "limits must be"),
    ("next_fix peak", lambda: cap.next_fix({}, {}, JOB, [], (), {}, 0.0), ValueError, "peak"),
    ("round_speedup befores", lambda: cap.round_speedup(JOB, [], {}), ValueError, "befores"),
    # the machine's load
    ("cpu_snapshot.main zero", lambda: cpu_snapshot(main=0), ValueError, "main must be an int >= 1"),
    ("cpu_snapshot.main str", lambda: cpu_snapshot(main="1"), TypeError, "main"),
    ("load_between.before", lambda: load_between(None, None), TypeError,
     "before must be a CpuSnapshot"),
    ("load_between.after", lambda: load_between(SNAP, {}), TypeError, "after must be a CpuSnapshot"),
    ("load_between.order", lambda: load_between(SNAP, SNAP), ValueError,
     "after must be a later snapshot"),
    ("load_between.main", lambda: load_between(SNAP, dataclasses.replace(SNAP, t_s=2.0, main=9)),
     ValueError, "same main thread"),
    ("StepShares.core_wait_share", lambda: StepShares({}, core_wait_share=1.5), ValueError,
     r"core_wait_share must be a finite number in \[0, 1\]"),
    ("StepShares.cores", lambda: StepShares({}, cores=0), ValueError, "cores must be an int >= 1"),
    ("StepShares.other_cores", lambda: StepShares({}, other_cores=NAN), ValueError, "other_cores"),
    ("Thresholds.load", lambda: Thresholds(load=1.0), ValueError, "load must be"),
]

# Records perfkit returns (plain data built from checked input) and the exception that ends
# a diagnosed script's window; PHASES is a constant.
RECORDS = {"Finding", "MemoryRecord", "OpStat", "ProfileResult", "Rule", "StepWindow",
           "TraceAttribution", "WindowDone", "Pick", "Round", "Total", "CpuSnapshot",
           "LoadRecord",
           "context_kinds_text"}  # takes no argument: nothing to refuse


@pytest.mark.timeout(10)  # a bad interval or schedule that is not refused could hang
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(profiling, CASES, RECORDS)
    assert not missing, f"no bad-input case for {missing}"
