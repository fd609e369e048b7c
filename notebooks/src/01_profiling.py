# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Profiling: where does a training step go?
#
# Before optimizing a training loop you need to know **which part of the step is slow**. Guessing
# is how people spend a week tuning a model whose GPU sits idle waiting for data. This notebook
# builds the measuring habit the rest of the course relies on:
#
# 1. **why naive timing lies**: no warm-up, asynchronous execution, a single sample;
# 2. **a phase breakdown** of two real training steps (a CNN on digits and a tiny GPT-2 on
#    Python source) with `perfkit.profiling.StepMonitor`;
# 3. **the PyTorch profiler**: top operators, a trace you can open in Perfetto, and a phase
#    breakdown derived from the trace that must agree with the monitor;
# 4. **the bottleneck analyzer** `perfkit.profiling.diagnose_shares`: its thresholds, a planted data
#    bottleneck, its diagnosis before and after the fix, and the measured speedup; the same loop
#    watched through TensorBoard, and the Prometheus alert rule that would catch it;
# 5. **`perfkit diagnose`** on training scripts it has never seen, each planted with one known
#    bottleneck: does its top finding name the cause? And the memory split of its report;
# 6. a **widget** to move batch size, DataLoader workers and per-sample data cost yourself.
#
# Every number below is measured on the machine running the notebook. `QUICK = True` (what CI
# uses) runs fewer steps on a smaller corpus.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
STEPS = 8 if QUICK else 30            # measured steps per run
WARMUP = 3                            # steps run first and left out
CORPUS_BYTES = 300_000 if QUICK else 1_000_000   # stdlib source the GPT-2 trains on
GPT = dict(batch_size=16, block_size=64, max_bytes=CORPUS_BYTES)
SLOW_COST_MS = 1.0                    # planted per-sample decode cost, ms

# %%
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from perfkit import hw, models, roofline, timing, viz
from perfkit.compute import compare
from perfkit.profiling import (
    MemoryMonitor,
    ProfileConfig,
    Profiler,
    StepMonitor,
    Thresholds,
    diagnose_shares,
    measure_workload,
)
from perfkit.verdict import Prediction, busy, judge
from perfkit.viz import profiling as vprof

DEVICE = timing.resolve_device()
limits = hw.cached_limits(quick=QUICK)  # measured by notebook 00 (or now, if missing)
print(f"torch {torch.__version__} on {hw.device_name(DEVICE)}, {torch.get_num_threads()} threads")
print(f"fp32 matmul ceiling of this machine: {viz.si(limits.peak_flops('float32'), 'FLOP/s')}")

# %% [markdown]
# ## 1. Why naive timing lies
#
# ### 1a. No warm-up
#
# **Prediction.** The first training step pays one-time costs that later steps do not: memory
# allocations the caching allocator keeps afterwards, oneDNN/cuBLAS choosing kernels for each
# new shape, lazy initialisation inside PyTorch and `transformers` (on a GPU, also cuBLAS
# creating its handle and workspace at the first matmul). So the first step should be slower
# than a typical one, and a benchmark that times it is measuring start-up, not training. How
# much slower depends on the machine and the libraries; the prediction here is only that the
# first step is slower than every one of the steady steps.
#
# **Measurement.** A fresh tiny GPT-2, each step timed on its own with `perfkit.timing.Timer`
# (which synchronises correctly on a GPU).

# %%
gpt_wl = models.gpt2_workload(device=DEVICE, **GPT)
step_times = []
for _ in range(STEPS + 1):
    with timing.Timer(DEVICE) as t:
        models.train_steps(gpt_wl, 1)
    step_times.append(t.elapsed_s)
first, steady = step_times[0], statistics.median(step_times[1:])
print(f"first step: {first * 1e3:.1f} ms; median of the next {STEPS}: {steady * 1e3:.1f} ms "
      f"-> the first step is {first / steady:.1f}x a steady one")
p_first = Prediction("the first step's time over the slowest steady step", "one-time costs in step 1",
                     low=1.0, unit="x")
viz.show_verdict(judge(p_first, first / max(step_times[1:]), explain={
    "held": f"A benchmark that included it in a mean of {STEPS + 1} steps would be off by "
            f"{(sum(step_times) / len(step_times)) / steady - 1:+.0%}; warm up first.",
    "below": "Some later step was slower still: the machine stalled during the run (see section 1c)"
             + (f"; {busy()}." if busy() else ".")}))

# %% [markdown]
# ### 1b. Asynchronous execution
#
# **Prediction.** On a GPU, `a @ a` returns as soon as the kernel is *queued*; the matmul runs
# later. Reading the clock right after the call measures the launch (microseconds), not the
# work. The fix is to wait for the queue (`torch.cuda.synchronize()`, or CUDA events, which is
# what `perfkit.timing` does) before reading the clock.
#
# So the naive timing should imply a FLOP rate above the machine's measured ceiling (physically
# impossible), and the waited one a rate below it.
#
# **Measurement.** On a GPU we time a real matmul both ways. A CPU runs PyTorch operators
# synchronously, so on a CPU the cell uses a one-thread pool as a stand-in for the GPU's queue
# (`submit` returns at once, like a kernel launch; `result()` waits, like a synchronize). The
# FLOP/s each timing implies is compared with this machine's measured ceiling: a share above
# 100 % is physically impossible, which is how you catch this bug in practice.

# %%
n = 1024 if DEVICE.type == "cuda" else 512
a = torch.randn(n, n, device=DEVICE)
if DEVICE.type == "cuda":
    launch, wait = (lambda: a @ a), (lambda r: torch.cuda.synchronize())
else:
    pool = ThreadPoolExecutor(1)  # stand-in for the GPU queue (CPU ops are synchronous)
    launch, wait = (lambda: pool.submit(torch.mm, a, a)), (lambda r: r.result())
wait(launch())  # warm-up
t0 = time.perf_counter()
r = launch()
naive_s = time.perf_counter() - t0  # read the clock before the work is done
wait(r)
t0 = time.perf_counter()
wait(launch())
correct_s = time.perf_counter() - t0  # read it after waiting for the work
share = {}
for label, s in (("naive (no wait)", naive_s), ("waiting for the work", correct_s)):
    rate = roofline.matmul_flops(n, n, n) / s
    share[label] = limits.share_of_peak(rate)
    print(f"{label:>21}: {s * 1e6:10.1f} µs -> {viz.si(rate, 'FLOP/s'):>12}, "
          f"{share[label]:8.0%} of this machine's fp32 ceiling")
bench = timing.benchmark(lambda: a @ a, warmup=2, repeat=10, device=DEVICE)
bench_share = limits.share_of_peak(roofline.matmul_flops(n, n, n) / bench.median_s)
top = max((p for p in limits.matmul_points if p.dtype == "float32"), key=lambda p: p.best_flops_per_s, default=None)
top = top if top and abs(top.best_flops_per_s / limits.peak_flops("float32") - 1) < 0.01 else None  # the ceiling's size
p_naive = Prediction("share of the ceiling implied by the naive timing", "the clock is read before the work runs",
                     low=1.0)
viz.show_verdict(judge(p_naive, share["naive (no wait)"], explain={
    "held": "No machine beats its own ceiling: a share above 100 % always means the work was not waited for.",
    "below": "The launch took long enough to look plausible here; on a GPU the gap is orders of magnitude."}))
p_wait = Prediction("share of the ceiling implied by waiting for the work", "a correct timing cannot beat the ceiling",
                    high=1.0, physical=(0, None))
viz.show_verdict(judge(p_wait, share["waiting for the work"], explain={
    "held": f"{n}x{n} matmuls timed properly (benchmark, median of 10) reach {bench_share:.0%} of the ceiling"
            + (": the single sample above carries the pool's hand-off and whatever the machine did at that "
               "moment." if bench_share > share["waiting for the work"] else
               ", no more than the single sample: " + (busy() or "the machine's speed varies from call to call")
               + ".")
            + (f" The ceiling is the fastest tenth of the samples at notebook 00's best size, {top.n}x{top.n}"
               + (", where a matmul's fixed costs weigh less." if top.n > n else ".") if top else ""),
    "above": "Above the ceiling even when waiting: the ceiling was measured while the machine was busier "
             "(rerun notebook 00)."}))

# %% [markdown]
# ### 1c. One sample
#
# **Prediction.** A shared machine (a laptop with a browser open, a CI runner, a GPU node
# with a noisy neighbour) has stalls: other processes take the cores. One measurement can land anywhere in the
# distribution; the median of many, after a warm-up, is stable: two medians of 30 samples
# taken one after the other should agree within 10 %.
#
# **Measurement.** Twice 30 timed steps of the digits CNN with `perfkit.timing.benchmark`
# (warm-up, synchronisation, repeats; it returns every sample).

# %%
cnn = models.digits_workload(device=DEVICE)
m = timing.benchmark(lambda: models.train_steps(cnn, 1), warmup=3, repeat=30, device=DEVICE)
m2 = timing.benchmark(lambda: models.train_steps(cnn, 1), warmup=0, repeat=30, device=DEVICE)
print(f"digits CNN step: {m}")
print(f"a single sample could have been anywhere from {m.min_s * 1e3:.2f} to "
      f"{max(m.times_s) * 1e3:.2f} ms: {m.min_s / m.median_s - 1:+.0%} to "
      f"{max(m.times_s) / m.median_s - 1:+.0%} around the median")
p_median = Prediction("second median over the first", "medians of 30 samples are stable", value=1.0, rel_tol=0.1)
moved = ("The machine's load changed between the two runs" + (f"; {busy()}" if busy() else "")
         + ". Even medians move then, which is why every comparison in this course alternates its "
           "candidates (perfkit.timing.interleaved).")
viz.show_verdict(judge(p_median, m2.median_s / m.median_s, explain={
    "held": f"Single samples of the first run ranged over {max(m.times_s) / m.min_s:.2f}x (slowest over "
            f"fastest); the two medians are {abs(m2.median_s / m.median_s - 1):.1%} apart.",
    "above": moved, "below": moved}))

# %% [markdown]
# **Correct timing, in one place.** `perfkit.timing.benchmark` (whole calls) and
# `perfkit.profiling.StepMonitor` (phases inside a loop) warm up, synchronise where the device
# needs it, repeat, and report medians and quantiles. Everything else in the course times
# through them.
#
# ## 2. The phase breakdown of a real training step
#
# `StepMonitor` times named phases inside every step: `with mon.phase("forward"): ...`, then
# `mon.step()` at the end. On a CPU each phase costs two `perf_counter` reads; on a GPU it
# records two CUDA events and reads them only once they have completed, so the loop never
# waits (`benchmarks/monitor_overhead.py` measures the cost). `summary()` returns a plain record:
# mean, std, p50, p95, p99 per phase and each phase's share of the step; whatever the phases do
# not cover is `other`.
#
# **Prediction.** Both models read pre-decoded tensors from memory, so `data` is only the
# DataLoader's own work per batch (sampling indices, collating the samples): it should stay
# under the analyzer's data threshold (section 4) in both.
# In the GPT-2, almost all FLOPs are matmuls, and the backward pass computes two matmuls (the
# gradient for the input and for the weight) for each forward one, so backward should take
# about **twice** the forward. The optimizer touches each parameter a few times, with no matmul:
# a small share.

# %%
healthy = {}
with MemoryMonitor(DEVICE) as mem:
    healthy["digits CNN"] = measure_workload("digits", steps=STEPS, warmup=WARMUP, device=DEVICE)
    healthy["tiny GPT-2"] = measure_workload("gpt2", steps=STEPS, warmup=WARMUP, device=DEVICE, **GPT)
gpt = healthy["tiny GPT-2"]
display(Markdown(vprof.summary_markdown(gpt)))
print(f"peak memory while measuring ({mem.record().kind}): "
      f"{mem.record().peak_bytes / 2**20:.0f} MiB, +{mem.record().peak_increase_bytes / 2**20:.0f} MiB")

# %%
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 4.4))
vprof.plot_phase_bars(healthy, unit="ms", ax=ax1, title="Mean time per step (ms)")
vprof.plot_phase_bars(healthy, unit="%", ax=ax2, title="Share of the step")
plt.show()

# %%
ratio = gpt["backward"].mean_s / gpt["forward"].mean_s
n_params = sum(p.numel() for p in gpt_wl.model.parameters())
tokens = GPT["batch_size"] * GPT["block_size"]
achieved = 6 * n_params * tokens / gpt.step.mean_s  # ~6 FLOPs per parameter per token (fwd + bwd)
print(f"backward / forward = {ratio:.2f}")
print(f"GPT-2: {n_params:,} parameters, {gpt.tokens_per_s:,.0f} tokens/s, ~{viz.si(achieved, 'FLOP/s')} "
      f"= {limits.share_of_peak(achieved):.0%} of the fp32 matmul ceiling")
for name, s in healthy.items():
    print(f"{name}: data takes {s.share('data'):.1%} of a {s.step.p50_s * 1e3:.1f} ms step "
          f"({s['data'].mean_s * 1e3:.2f} ms)")
load = f". Also, {busy()}: load does not hit the two phases alike" if busy() else ""
p_bwd = Prediction("backward time over forward time (tiny GPT-2)", "two matmuls per forward matmul",
                   value=2.0, rel_tol=0.25, unit="x")
viz.show_verdict(judge(p_bwd, ratio, explain={
    "below": "The forward includes work whose backward is cheap: the loss over the vocabulary (a "
             "log_softmax), memory-bound layer norms and attention, and Python overhead per operator, "
             f"which does not double{load}.",
    "above": "The backward does more than its matmuls here: memory-bound gradients of layer norms, "
             f"attention and the loss, and the accumulation of gradients, weigh more than their FLOPs{load}."}))
top_data = max(healthy, key=lambda k: healthy[k].share("data"))
td = healthy[top_data]
p_data = Prediction("largest data share of the two healthy steps", "pre-decoded tensors: the loader only "
                    "samples and collates", high=Thresholds().data, physical=(0, 1))
viz.show_verdict(judge(p_data, td.share("data"), explain={
    "held": f"Even the larger one ({top_data}) is below the analyzer's data threshold (section 4): a healthy "
            "pipeline is not flagged.",
    "above": f"The {top_data}'s DataLoader costs {td['data'].mean_s * 1e3:.2f} ms per batch (sampling "
             f"indices, collating its samples one by one) against a {td.step.mean_s * 1e3:.1f} ms step: "
             "nothing is slow in it, the step is short. Section 4 shows what that means for the "
             "analyzer's threshold."}))

# %% [markdown]
# The model-FLOPs estimate above is a share of the matmul ceiling; module 06 measures what
# decides it (at 64 wide, each operator's fixed cost and memory traffic). The data shares are
# what the DataLoader costs with nothing slow in it; section 4 sets the analyzer's threshold
# against them.
#
# ## 3. The PyTorch profiler: operators and a trace
#
# `perfkit.profiling.Profiler` wraps `torch.profiler.profile` with a schedule: `wait` steps run
# unprofiled, `warmup` steps are profiled and thrown away (the profiler's own start-up lands
# there), `active` steps are recorded. With `StepMonitor(annotate=True)` each phase is also a
# `record_function("phase:NAME")` range, so the trace carries the phases too.
#
# **Prediction.** Since almost all FLOPs are matmuls, `aten::mm`/`aten::addmm` should top the
# operator table (rank 1 by self time).

# %%
cfg = ProfileConfig(wait=1, warmup=1, active=3 if QUICK else 6)
wl = models.gpt2_workload(device=DEVICE, **GPT)
mon = StepMonitor(DEVICE, warmup=cfg.wait + cfg.warmup, annotate=True)
with Profiler(cfg, name="01_tiny_gpt2", device=DEVICE) as prof:
    models.train_steps(wl, cfg.total_steps, monitor=mon, on_step=prof.step)
res = prof.result()
display(Markdown(vprof.top_ops_markdown(res.top_ops, 10)))
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")
mm_share = sum(o.share for o in res.top_ops if o.name in MATMULS)
mm_rank = next((i + 1 for i, o in enumerate(res.top_ops) if o.name in MATMULS), len(res.top_ops) + 1)
print(f"matmul operators: {mm_share:.0%} of all operator self time; the first is rank {mm_rank}")
p_top = Prediction("rank of the first matmul operator by self time", "matmuls carry almost all FLOPs",
                   value=1, rel_tol=0)
viz.show_verdict(judge(p_top, mm_rank, explain={
    "held": (f"Yet matmuls are only {mm_share:.0%} of operator time: with matrices this small the loss "
             "(log_softmax over the vocabulary), attention, layer norms and the optimizer's elementwise "
             "updates take the rest." if mm_share < 0.5 else
             f"Matmuls are {mm_share:.0%} of operator time."),
    "above": f"{res.top_ops[0].name} outranks every matmul: at 64 wide, per-operator fixed costs and "
             "memory-bound work outweigh the FLOPs."}))

# %% [markdown]
# Rows named `Optimizer.step#...` or `enumerate(DataLoader)...`, when the table shows them, are
# ranges PyTorch itself marks, not operators.
#
# ### Opening the trace
#
# The trace is a Chrome trace-event JSON file:
#
# * **Perfetto** (recommended): open https://ui.perfetto.dev and drag the file in (or
#   `chrome://tracing` in Chrome). Each `ProfilerStep#N` is one step; the `phase:` ranges sit
#   above the operators they contain; on a GPU the kernels appear on their own stream rows.
# * **TensorBoard**: the `torch-tb-profiler` plugin reads `*.pt.trace.json` files in a folder
#   (`tensorboard --logdir build/traces`); PyTorch has deprecated that plugin in favour of
#   Perfetto, but its rules are still the reference for the analyzer below.

# %%
print(f"trace: {res.trace_path} ({res.trace_path.stat().st_size / 2**20:.1f} MiB)")

# %% [markdown]
# ### Does the trace agree with the monitor?
#
# Two independent instruments on the same run: `StepMonitor`'s clocks and the profiler's
# timestamps. `perfkit.profiling.trace_breakdown` derives the phase shares from the trace file
# alone (each `phase:` range inside its `ProfilerStep#` window). **Prediction.** They should
# agree closely, since they time the same ranges: within 10 percentage points on every phase.

# %%
ours, theirs = mon.summary().shares(), res.breakdown.shares()
for k in ours:
    diff_pp = 100 * (ours[k] - theirs[k])
    print(f"{k:>10}: monitor {ours[k]:6.1%}   trace {theirs[k]:6.1%}   diff {diff_pp:+5.1f} pp")
worst_pp = 100 * max(abs(ours[k] - theirs[k]) for k in ours)
p_agree = Prediction("largest disagreement between monitor and trace", "both time the same ranges",
                     high=10, unit=" pp", physical=(0, 100))
viz.show_verdict(judge(p_agree, worst_pp, explain={
    "above": "The profiler's own overhead lands inside some ranges and not others; with only "
             f"{cfg.active} profiled steps one stalled step moves a share by points."}))

# %% [markdown]
# ## 4. The bottleneck analyzer
#
# `diagnose_shares(summary)` compares each phase's share with a threshold and returns `Finding`
# records: what is slow, the evidence, what to try, and the course notebook that teaches the
# fix. The PyTorch profiler's TensorBoard plugin (`torch_tb_profiler`, in
# `RunProfileData.analyze`) published two such rules: **data loading above 5 % of the step**
# and **communication above 10 %**. Ours, with the reasons in `Thresholds`' docstring:

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
th = Thresholds()
plugin = {"data": "5%", "communication": "10%"}
print(f"{'rule':>14} {'perfkit':>8} {'TB plugin':>10}")
for k in ("data", "communication", "optimizer", "other", "compute"):
    print(f"{k:>14} {getattr(th, k):>8.0%} {plugin.get(k, '-'):>10}")
print(f"{'jitter':>14} {th.jitter:>7}x {'-':>10}   (p99/p50 of the step, from {th.min_steps} steps)")

# %%
data_shares = {k: s.share("data") for k, s in healthy.items()}
worst = max(data_shares, key=data_shares.get)
over = {k: v for k, v in data_shares.items() if v > th.data}
verdict_10 = (
    f"On this machine even a healthy pipeline exceeds 10 % ({', '.join(over)}): its fixed cost per batch "
    f"is large against this short step, so the analyzer flags it too. Here, read a data finding together "
    f"with the data milliseconds, or lengthen the step (a larger batch) before trusting the share."
    if over else
    f"Every healthy pipeline here stays under 10 %, so a data finding at 10 % means something "
    f"per-sample is slow{' (a 5 % rule would already flag ' + worst + ')' if data_shares[worst] > 0.05 else ''}.")
display(Markdown(
    f"**Why 10 % for data, not 5 %.** Section 2 measured the healthy pipelines of this course at "
    f"{', '.join(f'{v:.1%} ({k})' for k, v in data_shares.items())} of the step on this "
    f"machine. Those milliseconds are the DataLoader's fixed cost per batch, which weighs more "
    f"the shorter the step is. {verdict_10} On a GPU with long steps, use `Thresholds(data=0.05)`. "
    f"Communication keeps the plugin's 10 %: exposed all-reduce time grows with the number of "
    f"ranks, so a share that is tolerable on 2 ranks is not on 16."))

# %% [markdown]
# The rule itself is simple arithmetic on the shares, so it can be checked on a hand-made record
# (this output is exact and CI compares it):

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
example = {"data": 0.34, "forward": 0.22, "backward": 0.30, "optimizer": 0.04, "other": 0.10}
for f in diagnose_shares(example):
    print(f)

# %% [markdown]
# ### A planted data bottleneck, diagnosed and fixed
#
# A common real mistake: the dataset keeps raw text and **tokenizes every sample inside
# `__getitem__`**, plus some per-sample decoding (simulated here with `SLOW_COST_MS` of CPU
# work per sample), all in the training process. The model waits while that happens.
#
# **Prediction.** With 16 samples per batch and at least `SLOW_COST_MS` each, `data` grows by at
# least `16 × SLOW_COST_MS` per step and the analyzer should name it, pointing at notebook 07.

# %%
slow = measure_workload("gpt2", steps=STEPS, warmup=WARMUP, device=DEVICE,
                        tokenize_per_sample=True, cost_ms=SLOW_COST_MS, **GPT)
print(f"data: {slow['data'].p50_s * 1e3:.1f} ms of a {slow.step.p50_s * 1e3:.1f} ms step")
p_slow = Prediction("data time per step with the planted cost", f"{GPT['batch_size']} samples x "
                    f"{SLOW_COST_MS:g} ms, plus tokenizing", low=GPT["batch_size"] * SLOW_COST_MS, unit=" ms")
viz.show_verdict(judge(p_slow, slow["data"].p50_s * 1e3, explain={
    "held": f"The rest ({slow['data'].p50_s * 1e3 - GPT['batch_size'] * SLOW_COST_MS:.1f} ms) is the "
            "per-sample tokenizing and the loader's own cost.",
    "below": "Less than the planted cost itself: the cost is spent in a busy loop, so this means the "
             "monitor's data phase missed part of the loader's work."}))
display(Markdown(vprof.findings_markdown(diagnose_shares(slow))))

# %% [markdown]
# **The fix** follows the first recommendation: do the per-sample work **once**, before
# training, and keep the result (the fast path of `TokenBlockDataset` tokenizes the corpus once
# and slices token blocks from one tensor). We measure the fixed pipeline again now, and
# predict its step from the slow run's breakdown: the slow step minus its data time plus a
# healthy data time. The speedup itself is measured with the two pipelines alternating step by
# step (`perfkit.compute.compare`), so a change in the machine's load hits both alike.

# %%
fixed = measure_workload("gpt2", steps=STEPS, warmup=WARMUP, device=DEVICE, **GPT)
predicted = slow.step.mean_s - slow["data"].mean_s + fixed["data"].mean_s
p_fix = Prediction("speedup of the fixed pipeline", "slow step - slow data + healthy data (Amdahl)",
                   value=slow.step.mean_s / predicted, rel_tol=0.15, unit="x")
slow_wl = models.gpt2_workload(device=DEVICE, tokenize_per_sample=True, cost_ms=SLOW_COST_MS, **GPT)
fixed_wl = models.gpt2_workload(device=DEVICE, **GPT)
fix = compare(lambda: models.train_steps(slow_wl, 1), lambda: models.train_steps(fixed_wl, 1),
              warmup=WARMUP, repeat=STEPS, device=DEVICE)
speedup = fix.ratio
print(f"step, alternating: {fix}")
viz.show_verdict(judge(p_fix, speedup, spread=(fix.low, fix.high), explain={
    "held": "Removing the data time is all the fix does, as the breakdown said.",
    "above": "The model's own phases got faster too once the tokenizer stopped competing with them "
             "for caches and cores" + (f", or the load moved between the runs the prediction came from "
                                       f"({busy()})." if busy() else "."),
    "below": "The model's own phases got slower in the fixed run: the machine's load changed while the "
             "breakdown was measured (the interleaved measurement is the one to trust)."}))
display(Markdown(vprof.findings_markdown(diagnose_shares(fixed))))
vprof.plot_phase_bars({"planted bottleneck": slow, "fixed": fixed}, unit="ms",
                      title="Before and after the fix (mean ms per step)")
plt.show()

# %%
drift = fixed.step.p50_s / gpt.step.p50_s
display(Markdown(
    f"**The same model, measured twice.** The healthy tiny GPT-2 of section 2 stepped in "
    f"{gpt.step.p50_s * 1e3:.1f} ms (p50); the fixed pipeline, the same model and data path, in "
    f"{fixed.step.p50_s * 1e3:.1f} ms now: {drift - 1:+.0%}. "
    + ("Within the 10 % that section 1c allows two medians." if abs(drift - 1) < 0.1 else
       "More than the 10 % that section 1c allows two medians: the machine's load (or its clock) "
       "changed between the two measurements" + (f"; {busy()}" if busy() else "") + ". Numbers taken "
       "minutes apart are not comparable; that is why every comparison in this course alternates its "
       "candidates in one run.")))

# %% [markdown]
# The fix is not free: tokenizing the whole corpus takes time once. Is it worth it?

# %%
tok = models.train_bpe_tokenizer(max_bytes=CORPUS_BYTES)
text = models.text_corpus(CORPUS_BYTES)
once = timing.benchmark(lambda: models.encode_corpus(tok, text), warmup=0, repeat=1)
saved = fix.baseline.median_s - fix.candidate.median_s
print(f"tokenizing the corpus once: {once.median_s:.2f} s; saves {saved * 1e3:.1f} ms per step "
      + (f"-> pays for itself after {once.median_s / saved:.0f} steps" if saved > 0 else
         "-> no saving measured on this run (see the spread of the speedup above)"))

# %% [markdown]
# ### Watching a long job: TensorBoard and an alert rule
#
# A notebook run ends; a training job runs for days, and is watched while it runs. The same
# monitor hands each window of `every` steps to **sinks**, one argument:
# `StepMonitor(sinks=[TensorBoardSink(dir)], every=...)` writes the window's per-phase p50 and
# share, step time and throughput as TensorBoard scalars (`JsonLinesSink` and `PrometheusSink`
# take the same place). Below, the loop trains on the fixed pipeline for a few windows; then the
# slow pipeline comes back mid-run, as when a change to the data format lands in a long job.
# The event file is read back with TensorBoard's own reader and plotted.
#
# **Prediction.** Every window after the switch carries the planted per-sample cost of the
# slow run above, so its data share should be above the analyzer's data threshold: the alert
# rule generated from that threshold would fire on it.

# %%
import tempfile

from perfkit.profiling import TensorBoardSink, alert_rules, read_scalars

EVERY, WINDOWS = (3, 2) if QUICK else (5, 3)   # steps per window; windows before and after
run_dir = tempfile.mkdtemp(prefix="perfkit_01_tb_")
watch = StepMonitor(DEVICE, every=EVERY, sinks=[TensorBoardSink(run_dir)])
models.train_steps(fixed_wl, EVERY * WINDOWS, monitor=watch)
switch_step = watch.steps                        # the slow pipeline starts after this step
models.train_steps(slow_wl, EVERY * WINDOWS, monitor=watch)
watch.close()                                    # flushes the event file
scalars = read_scalars(run_dir)
print(f"TensorBoard run: {run_dir} (tensorboard --logdir {run_dir}); {len(scalars)} tags")
vprof.plot_scalars(scalars, ["phase/data/share", "phase/forward/share", "phase/backward/share"],
                   threshold=th.data, events={"slow pipeline from here": switch_step + 0.5},
                   ylabel="share of the step", title="Phase shares per window, read back from TensorBoard")
plt.show()

# %%
shares = scalars["phase/data/share"]
before = [v for step, v in shares if step <= switch_step]
after = [v for step, v in shares if step > switch_step]
p_watch = Prediction("lowest data share of the windows after the switch",
                     "the planted per-sample cost", low=th.data, physical=(0, 1))
viz.show_verdict(judge(p_watch, min(after), explain={
    "held": f"Before the switch the windows' data shares were {', '.join(f'{v:.1%}' for v in before)}"
            + (f": on this machine the healthy loader crosses {th.data:.0%} too (see 'Why 10 %' above)."
               if max(before) > th.data else f", under {th.data:.0%}: only the bottleneck crosses it."),
    "below": "Some window after the switch stayed under the threshold: the machine's load stretched "
             "the model's phases in it, which lowers every other phase's share."}))

# %% [markdown]
# The alert rule that watches for this in Prometheus, generated from the same `Thresholds` that
# `diagnose_shares` uses, with the fix in its annotations (`alert_rules()` writes all six: data- and
# communication-bound, optimizer, untimed work, step-time regression, a straggling rank):

# %%
print(alert_rules(th, for_s=0, kinds=["data"]))
fires = [step for step, v in shares if v > th.data]
print(f"On the windows read back above it is true at steps {fires}; the slow pipeline started "
      f"after step {switch_step}.")

# %% [markdown]
# ## 5. `perfkit diagnose`: a script you did not write, unchanged
#
# Sections 2-4 measured loops written around `StepMonitor`. The slow training script someone
# hands you was not written that way, and rewriting it to find out why it is slow is the
# wrong first step. `python -m perfkit diagnose train.py [its args]` runs it unchanged:
#
# * a **step** ends where an optimizer step ends (torch's global optimizer step hooks, which
#   plain loops, Hugging Face `Trainer`, DeepSpeed and DDP all pass through);
# * **data wait** is the time spent in the DataLoader iterator's `__next__`;
# * after `--skip` warm-up steps, `--steps` steps are recorded with `torch.profiler`, and each
#   microsecond of them is counted once, in the first of: data, host-device **sync**
#   (`.item()`, `.cpu()`, printing a tensor), exposed communication, optimizer, backward,
#   forward, other;
# * the **findings** are ranked by Amdahl's bound on what removing each cause can gain,
#   `1 / (1 - share)`, with thresholds calibrated on planted scripts
#   (`perfkit.profiling.Thresholds.for_command()`; its docstring has the measured ranges).
#
# `examples/diagnose/` holds small training scripts, each slow for one known reason that its
# docstring names ("`perfkit diagnose` should name: data"), and healthy ones. We run the
# command on them as a user would, in a fresh process with one intra-op thread (what torchrun
# sets). **Prediction**, recorded before any run: each planted cause is the **top** finding
# (rank 1 among the findings); a healthy script gets **no finding above information level**.

# %%
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import perfkit

ROOT = Path(perfkit.__file__).resolve().parents[1]   # the repository: examples/ sits beside perfkit/
EXAMPLES = ROOT / "examples" / "diagnose"
SCRIPTS = (["data_bound", "sync_bound", "healthy_cnn"] if QUICK else
           ["data_bound", "sync_bound", "optimizer_bound", "overhead_bound", "healthy_mlp", "healthy_cnn"])


def planted_cause(name):
    """The cause a script's docstring says it plants ('should name: data'), None if healthy."""
    found = re.search(r"should name: (\w+)", ast.get_docstring(ast.parse((EXAMPLES / f"{name}.py").read_text())))
    return found.group(1) if found else None


planted = {name: planted_cause(name) for name in SCRIPTS}
predicted = {name: Prediction(f"rank of '{cause}' among the findings for {name}.py", f"{cause} is planted in it",
                              value=1, rel_tol=0) if cause else
             Prediction(f"findings above information level for {name}.py", "a healthy script", value=0, rel_tol=0)
             for name, cause in planted.items()}
for name, cause in planted.items():
    print(f"{name:>16}: {'planted ' + cause if cause else 'healthy'}")

# %% [markdown]
# Each run is the command line itself, `python -m perfkit diagnose --out DIR --skip 2 --steps 8
# script.py` (the window the thresholds were calibrated with); its `report.json` holds every
# number the terminal report prints.

# %%
DIAG_DIR = Path(tempfile.mkdtemp(prefix="perfkit_01_diagnose_"))
env = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
reports, seconds = {}, {}
for name in SCRIPTS:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfkit", "diagnose", "--out", str(DIAG_DIR / name),
                           "--skip", "2", "--steps", "8", str(EXAMPLES / f"{name}.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds[name] = time.perf_counter() - t0
    assert proc.returncode == 0, f"{name}: exit code {proc.returncode}\n{proc.stderr[-2000:]}"
    reports[name] = json.loads((DIAG_DIR / name / "report.json").read_text())
print(", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()), "(each run: a fresh Python, torch imported)")
print(proc.stdout)   # the last one, as the terminal shows it

# %% [markdown]
# The top finding of each run, with its evidence (numbers from that run):

# %%
rows = ["| script | planted | top finding | evidence | fix can gain at most |", "|---|---|---|---|---|"]
for name, rep in reports.items():
    top = rep["findings"][0] if rep["findings"] else None
    gain = f"{top['max_speedup']:.2f}x" if top and top["severity"] != "info" else "-"
    rows.append(f"| `{name}` | {planted[name] or 'nothing'} | "
                + (f"**{top['kind']}** ({top['severity']}) | {top['evidence']} | {gain} |" if top else "none | - | - |"))
display(Markdown("\n".join(rows)))

# %%
for name, rep in reports.items():
    kinds = [f["kind"] for f in rep["findings"]]
    loud = [f"{f['kind']} ({f['severity']})" for f in rep["findings"] if f["severity"] != "info"]
    if planted[name]:
        measured = kinds.index(planted[name]) + 1 if planted[name] in kinds else len(kinds) + 1
        viz.show_verdict(judge(predicted[name], measured, explain={
            "held": f"Removing it can speed the step up at most {rep['findings'][0]['max_speedup']:.2f}x "
                    f"(Amdahl's bound on its {rep['findings'][0]['share']:.1%} of the step).",
            "above": f"The findings were {kinds or 'none'}: the planted cause "
                     + ("ranked below another one" if planted[name] in kinds else "did not cross its threshold")
                     + " on this run, so the thresholds do not fit this machine's load; see "
                       "`Thresholds.for_command` and `benchmarks/diagnose.py`."}))
    else:
        viz.show_verdict(judge(predicted[name], len(loud), explain={
            "held": "Its findings: " + (", ".join(f"{f['kind']} ({f['severity']})" for f in rep["findings"])
                                        or "none") + ".",
            "above": f"A false alarm: {', '.join(loud)}."}))

# %% [markdown]
# The command also writes `report.md` and `report.html`, with plots drawn by
# `perfkit.viz.report_pngs` (embedded in the HTML page as PNGs), and the Chrome trace of the
# window for Perfetto. The plot of where the data-bound script's step goes:

# %%
fig = viz.plot_report_shares(reports["data_bound"], title="data_bound.py: where the step goes")
plt.show()
print(sorted(p.name for p in (DIAG_DIR / "data_bound").iterdir()))

# %% [markdown]
# The planted communication-bound script and the DDP straggler need two processes:
# `torchrun --nproc_per_node 2 -m perfkit diagnose examples/diagnose/comm_bound.py`, where every
# rank records and rank 0 writes one merged report with each rank's step time (the test suite
# and `benchmarks/diagnose.py` run them).
#
# ### Memory: the peak, and the model states' part of it
#
# The report gives the peak memory (on a CPU the process's resident-set high-water mark, on a
# GPU the CUDA allocator's peak) and, since every optimizer that steps passes through the
# hooks, the bytes of the parameters, gradients and optimizer state it holds, counted from
# their tensors (`perfkit.profiling.memory_split`). **Prediction.** `healthy_cnn.py` trains
# with SGD with momentum in fp32: the gradients are as large as the parameters, and so is the
# momentum buffer, so the model states are exactly 3x the parameter bytes (notebook 04's
# formula).

# %%
mem = reports["healthy_cnn"]["memory"]
states = mem["params_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"]
print(f"{mem['kind']} {mem['bytes'] / 2**20:.0f} MiB, {mem['start_bytes'] / 2**20:.0f} MiB of it in use "
      f"before the script ran; {', '.join(mem['optimizers'])} holds {mem['params_bytes']:,} B of parameters "
      f"({mem['params_bytes'] // 4:,} fp32 values), {mem['grads_bytes']:,} B of gradients and "
      f"{mem['optimizer_bytes']:,} B of state")
p_states = Prediction("model-state bytes over parameter bytes (healthy_cnn.py)",
                      "fp32 weights + gradients + one momentum buffer: 1 + 1 + 1", value=3, rel_tol=0, unit="x")
viz.show_verdict(judge(p_states, states / mem["params_bytes"], explain={
    "held": f"Yet the model states are {states / mem['bytes']:.2%} of the peak: for a model this small the "
            f"memory is the {mem['start_bytes'] / 2**20:.0f} MiB resident before the script ran (Python and "
            f"torch's libraries) and the {(mem['bytes'] - mem['start_bytes'] - states) / 2**20:.0f} MiB "
            "the run added (torch modules the script imported, its batch and activations, the "
            "profiler's recorded events).",
    "above": "The optimizer holds more than one buffer per parameter: another optimizer than the "
             "script's SGD, or state the formula leaves out."}))
fig = viz.plot_memory_split(reports["healthy_cnn"])
plt.show()

# %% [markdown]
# ## 6. Try it: batch size, workers and per-sample cost
#
# The widget re-runs a short measurement of the digits CNN (`perfkit.profiling.measure_workload`)
# whenever a slider moves, and shows the phase shares with the diagnosis. Things to try:
#
# * raise the **per-sample cost**: `data` grows linearly with it and with the batch size;
# * add **DataLoader workers**: the decoding moves to other processes and overlaps the model.
#   On a 2-core machine, the workers compete with the model's own threads for the same cores,
#   so the gain is smaller than the number of workers suggests;
# * raise the **batch size** with no data cost: fixed per-step costs (Python, the optimizer,
#   the DataLoader's per-batch work) are spread over more samples.
#
# Below the widget, a static plot of its default setting.

# %%
# NBVAL_IGNORE_OUTPUT
spec = vprof.breakdown_widget("digits", steps=4 if QUICK else 10)
viz.build_widget(spec)

# %%
fig = spec.fn(**spec.defaults())
plt.show()

# %% [markdown]
# ## Summary
#
# * Time **after a warm-up**, **wait for asynchronous work**, and take the **median of many**
#   samples: `perfkit.timing` does all three.
# * A **phase breakdown** (`StepMonitor`) says which part of the step to work on; the
#   **profiler** says which operators, and its trace is a second, independent clock on the
#   phases (section 3's verdict says how closely the two agreed here).
# * `diagnose_shares` turns shares into findings with thresholds you can defend; section 4 shows what
#   it found on the planted bottleneck, and the verdicts there say how closely the breakdown
#   predicted what the fix would buy on this run.
# * `python -m perfkit diagnose train.py` does the same for a script nobody changed: steps
#   from the optimizer hooks, the split from a profiled window, the findings ranked by Amdahl's
#   bound, the peak memory with its model states; section 5 checks it on planted scripts.
#
# Next: modules 02-03 (communication), 04-05 (memory), 06 (compute) and 07 (data loading)
# each start from a diagnosis like the ones above.

# %%
named_ok = {n: bool(r["findings"]) and r["findings"][0]["kind"] == planted[n] for n, r in reports.items() if planted[n]}
named = sum(named_ok.values())
viz.show_headlines({
    "tiny GPT-2 step (p50)": f"{fixed.step.p50_s * 1e3:.1f} ms",
    "planted data bottleneck": f"{slow.share('data'):.0%} of the step",
    "speedup after the fix": f"{speedup:.2f}x",
    "trace vs monitor": f"{worst_pp:.1f} pp apart",
    "perfkit diagnose, planted causes ranked first": f"{named} of {len(named_ok)}",
})
