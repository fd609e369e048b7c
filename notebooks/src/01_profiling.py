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
# 5. **`perfkit diagnose`** on separate training scripts, each planted with one known bottleneck
#    (its thresholds were calibrated on these scripts, so this checks the calibration holds on
#    this machine, not that it generalizes): does its top finding name the cause? And the memory
#    split of its report;
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
SAMPLES_1C = 30 if QUICK else 150     # section 1c: steps per run, twice

# %%
import math
import time
from concurrent.futures import ThreadPoolExecutor

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from perfkit import ceilings, hw, models, roofline, stats, timing, viz
from perfkit.compute import (
    NEAR_ROOF,
    OpCount,
    backward_over_forward,
    compare,
    count_phases,
    roofline_s,
    step_roofline,
)
from perfkit.profiling import (
    MemoryMonitor,
    ProfileConfig,
    Profiler,
    StepMonitor,
    Thresholds,
    diagnose_shares,
    measure_workload,
)
from perfkit.verdict import Prediction, judge
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
# **Prediction.** The first training step pays one-time costs that later steps do not: the
# optimizer creating its state (AdamW's two moment buffers per parameter, at its first `step()`),
# fresh memory touched for the first time (on a CPU PyTorch has no caching allocator of its own:
# freed blocks go back to the C library's `malloc`, which keeps small ones for reuse and hands
# large ones back to the operating system; on a GPU the caching allocator keeps them), the math libraries setting themselves up at their first call
# (this GPT-2 is fp32, and on a CPU PyTorch sends fp32 matmuls to the BLAS library it was built
# with, MKL in x86 builds; oneDNN, which runs convolutions, creates its kernels, "primitives", for
# each new shape), and lazy initialisation inside PyTorch and `transformers` (on a GPU, also
# cuBLAS creating its handle and workspace at the first matmul and CUDA loading its modules
# lazily; cuBLAS picks its kernels by heuristics on every call, it does not autotune). So the first step should be slower
# than a typical one, and a benchmark that times it is measuring start-up, not training. How
# much slower depends on the machine and the libraries; the prediction here is only that the
# first step is slower than the steady steps' median. One step is one sample with no interval
# of its own, so the verdict judges it against the steady steps' spread (the first step over
# their p90 to over their p10): it holds only for a first step slower than nine in ten of them. One slow step cannot by itself prove a start-up cost: on a shared machine a steady
# step can stall as long (section 1c), so the cell counts the steady steps that did.
#
# **Measurement.** A fresh tiny GPT-2, each step timed on its own with `perfkit.timing.Timer`
# (which synchronises correctly on a GPU).

# %%
gpt_wl = models.gpt2_workload(device=DEVICE, **GPT)
step_times = timing.benchmark(lambda: models.train_steps(gpt_wl, 1), warmup=0, repeat=STEPS + 1,
                              device=DEVICE).times_s  # no warm-up: the first call is timed too
first, steady = step_times[0], stats.median(step_times[1:])
stalls = [t for t in step_times[1:] if t > 3 * steady]  # s: steady steps 3x their median or more (section 1c)
first_x, first_explain = vprof.first_step(step_times)  # one sample against the steady steps' spread
print(f"first step: {first * 1e3:.1f} ms; median of the next {STEPS}: {steady * 1e3:.1f} ms -> the first step is "
      f"{first_x.point('x')} the steady median"
      + (f"; {len(stalls)} of the {STEPS} steady steps stalled to 3x the median or more, the slowest "
         f"{max(stalls) * 1e3:.1f} ms" if stalls else ""))
p_first = Prediction("the first step's time over the steady steps' median", "one-time costs in step 1",
                     low=1.0, unit="x")
viz.verdict(p_first, first_x, explain=first_explain)

# %% [markdown]
# ### 1b. Asynchronous execution
#
# On a GPU, `a @ a` returns as soon as the kernel is *queued*; the matmul runs
# later. Reading the clock right after the call measures the launch (microseconds), not the
# work. The fix is to wait for the queue (`torch.cuda.synchronize()`, or CUDA events, which is
# what `perfkit.timing` does) before reading the clock.
#
# The work has a least time: its FLOPs at the fastest rate this machine has ever reached (the
# fp32 ceiling, raised by `perfkit.ceilings.observe` whenever a real, waited-for timing beats
# it, so no correct timing can come in under it). That is a measured bound, not a law of
# physics: it holds by construction for every correct timing, and catches a timing error only
# when the error is larger than the machine's speed can vary. **Prediction:** the naive timing reads less
# than that least time, which is impossible for work that ran: it is a timing error, not a
# speed. The waited-for timings read more.
#
# **Measurement.** On a GPU we time a real matmul both ways. A CPU runs PyTorch operators
# synchronously, so on a CPU the cell uses a one-thread pool as a stand-in for the GPU's queue
# (`submit` returns at once, like a kernel launch; `result()` waits, like a synchronize).
# The least time is computed after the waited-for timings, so it already counts any ceiling
# they beat. A time below the least time is how you catch this bug in practice.
#
# The pool is shut down as soon as its two timings are taken. A thread that runs a PyTorch
# operator gets its own team of OpenMP threads, which lives as long as the thread does. An idle
# team sleeps after a short spin (`OMP_WAIT_POLICY`, or `KMP_BLOCKTIME` in Intel's runtime), so
# it costs the main thread's operators cores only while both teams run or spin; this notebook
# does not measure that cost, it only leaves no second team alive. Code that hands PyTorch work
# to a long-lived thread pool (a data loader's transforms, a logger that reduces tensors) can
# pay the same. Section 4 compares the same step's medians across the notebook's runs.

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
if DEVICE.type == "cpu":
    pool.shutdown()  # a thread that ran torch ops keeps its own OpenMP thread team while it lives
bench = timing.benchmark(lambda: a @ a, warmup=2, repeat=10, device=DEVICE)
flops = roofline.matmul_flops(n, n, n)
notes = []
for what, t_s in ((f"the {n}x{n} matmul timed once", correct_s), (f"the {n}x{n} matmul's median", bench.median_s)):
    setter, obs = limits.sources.get("float32", ""), ceilings.observe(limits, "float32", flops / t_s, what)
    limits, notes = obs.limits, notes + ([vprof.ceiling_rise_note(obs, setter)] if obs.raised else [])  # raised
least_s = flops / ceilings.ceiling(limits, "float32")  # s: the work at the fastest rate reached here
print(f"least time of the {n}x{n} matmul: {viz.si(flops, 'FLOP')} at {viz.si(flops / least_s, 'FLOP/s')} = "
      f"{viz.si(least_s, 's')}" + "".join(f"; {n_}" for n_ in notes))
for label, t_s in (("naive (no wait)", naive_s), ("waiting for the work", correct_s),
                   ("benchmark, median of 10", bench.median_s)):
    print(f"{label:>23}: {t_s * 1e6:10.1f} µs = {t_s / least_s:6.3g}x the least time"
          + (": impossible, a timing error" if t_s < least_s else
             f" ({least_s / t_s:.0%} of the fp32 ceiling)"))
p_naive = Prediction("naive time over the least time the matmul can take", "the clock is read before the work runs",
                     high=1.0, unit="x", physical=(0, None))
viz.verdict(p_naive, naive_s / least_s, explain={
    "held": f"Read as a speed it would be {viz.si(flops / naive_s, 'FLOP/s')}, {least_s / naive_s:.3g}x the fastest "
            "rate this machine has reached: not a figure of the machine but of the clock, which stopped before the "
            "work ran. A correct timing never reads below the least time (one that beat the ceiling would raise it).",
    "above": "The launch took longer than the work's least time here (the pool's hand-off on a busy CPU); on a "
             "GPU a launch is microseconds against milliseconds of work."})

# %% [markdown]
# In your own code the bug looks like `t0 = time.time(); y = model(x); print(time.time() - t0)`
# on a GPU: the forward pass "takes" only the time the CPU needs to queue its kernels (Python and
# dispatch, microseconds per kernel, not the kernels' work), and the rest reappears in whatever
# line next waits for the device (`loss.item()`, a copy to the CPU, a synchronize). A profile
# then blames that line. Time with `perfkit.timing` (CUDA events, or a synchronize before
# each clock read), or with the profiler, which records when the kernels actually ran.
#
# ### 1c. One sample
#
# **Prediction.** A shared machine (a laptop with a browser open, a CI runner, a GPU node
# with a noisy neighbour) has stalls: other processes take the cores. One measurement can land anywhere in the
# distribution; the median of many, after a warm-up, is stable as long as the machine's speed
# is: two medians of `SAMPLES_1C` (150) samples taken one after the other should agree within
# 10 %. Why 150: the interval of a median narrows only as 1/sqrt(samples), and from 30 steps that
# spread as these can on a busy CPU it can be wider than the whole band; then no outcome can hold. Load
# that changes between the two runs moves both medians, and nothing in a median protects
# against that; only timing the candidates in alternation does (section 4 sets the separate
# runs of one step side by side to show how far apart they land here). A miss says that the medians
# moved, not why: a warm-up that had not finished when the first run began moves its median too.
#
# **Measurement.** Twice `SAMPLES_1C` timed steps of the digits CNN with `perfkit.timing.benchmark`
# (warm-up, synchronisation, repeats; it returns every sample, and prints the median with the
# 10th and 90th percentiles, p10 and p90). The second run follows the first
# directly, on the same warm model, so it takes no warm-up of its own.

# %%
cnn = models.digits_workload(device=DEVICE)
m = timing.benchmark(lambda: models.train_steps(cnn, 1), warmup=3, repeat=SAMPLES_1C, device=DEVICE)
m2 = timing.benchmark(lambda: models.train_steps(cnn, 1), warmup=0, repeat=SAMPLES_1C, device=DEVICE)  # warm: m ran just now
print(f"digits CNN step: {m}\n      the second run: {m2}")
print(f"a single sample could have been anywhere from {m.min_s * 1e3:.2f} to "
      f"{max(m.times_s) * 1e3:.2f} ms: {m.min_s / m.median_s - 1:+.0%} to "
      f"{max(m.times_s) / m.median_s - 1:+.0%} around the median")
p_median = Prediction("second median over the first", f"medians of {SAMPLES_1C} samples are stable", value=1.0, rel_tol=0.1,
                      unit="x")
# two separate runs: the ratio of their medians (paired ratios would pretend sample i of each ran together)
viz.verdict(p_median, (rm := stats.median_ratio(m2.times_s, m.times_s, paired=False)), explain={
    "held": f"The medians lie {abs(rm.value - 1):.1%} apart; single samples of the first run ranged over {max(m.times_s) / m.min_s:.2f}x (slowest over fastest).",
    "inconclusive": f"The samples spread from {m.p10_s * 1e3:.1f} to {m.p90_s * 1e3:.1f} ms (p10-p90) in the first "
                    f"run and from {m2.p10_s * 1e3:.1f} to {m2.p90_s * 1e3:.1f} ms in the second. " + (
                    f"The interval lies {rm.clear_of(1.0, 'x')} 1x: the second median moved, by a share this run "
                    "cannot place on either side of the 10 % allowed." if rm.clear_of(1.0, 'x') else "The interval "
                    f"holds 1x and the edge: {len(m.times_s)} samples cannot say whether the medians differ at all."),
    **dict.fromkeys(("above", "below"), vprof.medians_moved_text(m, m2, bool(rm.clear_of(1.0, "x")))
                    + ", which is why every comparison in this course alternates its candidates (perfkit.timing.interleaved).")})

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
# mean, std, p50, p95, p99 per phase and each phase's share of the step, both of the means and
# median over the steps; whatever the phases do not cover is `other`. One stalled step moves
# every mean and every share of the means, not the medians: so the figure and the lines below
# read medians (a later figure that draws means says so in its title), and the table's footnote
# names any phase whose p99 is over 3x its median (and over 5 % of the median step longer). From
# a few dozen steps, as here, the p99 lies between the two slowest steps and the p95 among the
# three slowest: read them as "the slowest steps", not as a rare tail (a p99 means one step in
# a hundred only from a few hundred steps on).
#
# **Prediction.** The GPT-2 reads token blocks sliced from one pre-tokenized tensor; the digits
# CNN decodes each of its 64 samples from raw bytes (a few small tensor ops per sample, no
# planted cost). Either way `data` is the DataLoader's own work per batch (sampling indices,
# decoding and collating the samples, the copy to the device), which grows with the batch size.
# That work is timed below on the same loader alone, with no model between batches; in the step
# it runs after a forward and backward that evicted the samples from the caches, so we allow it
# up to 1.5x its time alone (an allowance, not a measurement). Its share is that time over the step, which weighs more the shorter
# the step, whatever the analyzer's threshold (section 4). Only the digits CNN is judged: its
# step is the short one, where this cost shows. The share is a ratio of two medians with no
# interval of its own, so the verdict judges it on its value alone.
# In the GPT-2, almost all FLOPs are matmuls, and the backward pass computes two matmuls (the
# gradient for the input and for the weight) for each forward one: the backward has **twice**
# the forward's FLOPs (whether it takes twice the time is asked after the data share). The
# optimizer touches each parameter a few times, with no matmul: a small share.

# %%
healthy = {}
with MemoryMonitor(DEVICE) as mem:
    healthy["digits CNN"] = measure_workload("digits", steps=STEPS, warmup=WARMUP, device=DEVICE)
    healthy["tiny GPT-2"] = measure_workload("gpt2", steps=STEPS, warmup=WARMUP, device=DEVICE, **GPT)
gpt = healthy["tiny GPT-2"]
display(Markdown(vprof.summary_markdown(gpt)))
print(f"peak memory while measuring ({mem.record().kind}): "
      f"{mem.record().peak_bytes / 2**20:.0f} MiB, +{mem.record().peak_increase_bytes / 2**20:.0f} MiB")
print(f"This monitored step's median, {gpt.step.p50_s * 1e3:.1f} ms, is {gpt.step.p50_s / steady:.2f}x section 1a's "
      f"unmonitored one ({steady * 1e3:.1f} ms): the shares are of the step as it ran here"
      + (" (section 4 compares the runs)." if gpt.step.p50_s > 1.1 * steady else "."))

# %%
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 4.4))
vprof.plot_phase_bars(healthy, unit="ms", ax=ax1, title="Each phase's median (ms; need not sum to the median step)",
                      stat="median")
vprof.plot_phase_bars(healthy, unit="%", ax=ax2, title="Median share of the step (medians need not sum to 100 %)",
                      stat="median")
plt.show()

# %%
for name, sm in healthy.items():
    print(f"{name}: data's median {sm['data'].p50_s * 1e3:.2f} ms is {sm['data'].p50_s / sm.step.p50_s:.1%} of "
          f"the median step, {sm.step.p50_s * 1e3:.1f} ms (the figure's median share over the steps: "
          f"{sm['data'].median_share:.1%}). " + (vprof.stall_note(sm) or "No phase stalled by the rule above."))
batches = (b for _ in iter(int, 1) for b in models.digits_workload(device=DEVICE).loader)  # endless epochs
alone = stats.median_interval(timing.benchmark(lambda: [t.to(DEVICE) for t in next(batches)], warmup=3,
                                               repeat=30).times_s)  # s per batch, the loader alone
dg = healthy["digits CNN"]  # medians: a stall of the whole process lands in the means
print(f"digits loader alone: {alone.text('s')} per batch; in the step "
      f"{dg['data'].p50_s * 1e3:.2f} ms of a {dg.step.p50_s * 1e3:.1f} ms step (medians)")
p_data = Prediction("digits CNN's median data share", "the loader's own work per batch (timed alone, up to "
                    "1.5x it) over the step", low=alone.low / dg.step.p50_s, high=1.5 * alone.high / dg.step.p50_s,
                    physical=(0, 1))
viz.verdict(p_data, share := dg['data'].p50_s / dg.step.p50_s, explain=vprof.loader_explain(
    dg['data'].p50_s, alone, shares=(share, dg['data'].median_share, (p_data.low, p_data.high))))

# %% [markdown]
# The data shares are what the DataLoader costs with nothing slow in it; section 4 holds the
# analyzer's data threshold against them, and says when one of them crosses it.
#
# ### Does the backward take twice the forward?
#
# **Prediction.** Time follows FLOPs only where FLOPs are what takes the time: big matmuls at
# the compute roof. At 64 wide they are not alone. The elementwise ops (GELU, layer norms,
# residual adds, the loss) are memory-bound, and their backward moves other bytes than their
# forward; and every operator has a fixed cost that does not grow with the batch (Python in
# the forward's `transformers` modules, dispatch, autograd's bookkeeping in the backward). So
# each phase takes `fixed + R / η`:
#
# - `R`: the phase's operators, counted one by one under the phase they ran in
#   (`perfkit.compute.intensity.count_phases`), each at its roof `max(FLOPs / peak, bytes /
#   bandwidth)` with notebook 00's ceilings (the cache's bandwidth for an op whose bytes fit in
#   twice the largest copy buffer notebook 00 saw served by the cache, DRAM's for the others);
# - `fixed`: the same phase timed at 2 tokens, where the arithmetic vanishes (less its own `R`);
# - `η`: the share of their roofs the ops reach, taken to be the same in both phases.
#
# Whatever `η` is, backward over forward then lies between `(fixed_b + R_b) / (fixed_f + R_f)`
# (every op at its roof) and `R_b / R_f` (fixed costs negligible). The fixed costs are
# measured, so the band is widened by their intervals: its lower end takes `fixed_b` at
# its interval's low end and `fixed_f` at its high end (so it lies below what the formula gives
# with the medians printed), the upper end the opposite where that end is the higher. Nothing is fitted to the outcome; the FLOP ratio, the crude
# model, is printed beside it. The band is a model's range, not a bound: the verdict judges its
# edges as soft (missed only when the whole interval lies outside), and outside it prints the
# one `η` the measured ratio would need.
#
# **Measurement.** `perfkit.compute.phase_roofline.backward_over_forward` times the batch's
# forward and backward, then the 2-token ones, back to back in every round (so both sizes
# share the machine's load); the verdict judges the median of the rounds' own ratios (each
# round's backward over its forward).

# %%
pm = backward_over_forward(gpt_wl, limits, rounds=15 if QUICK else 30)
print(f"crude model, time follows FLOPs: {pm.flops_ratio:.2f}x ({viz.si(pm.flops_bwd, 'FLOP')} backward, "
      f"{viz.si(pm.flops_fwd, 'FLOP')} forward)")
print(f"R: forward {pm.roof_fwd_s * 1e3:.2f} ms over {pm.ops_fwd} ops, backward {pm.roof_bwd_s * 1e3:.2f} ms over "
      f"{pm.ops_bwd} ops; fixed: forward {pm.fixed_fwd.value * 1e3:.2f} ms, backward {pm.fixed_bwd.value * 1e3:.2f} ms")
p_bwd = Prediction("backward time over forward time (tiny GPT-2)", "each phase: fixed + R / η, one η for both",
                   low=pm.low, high=pm.high, unit="x", soft=("low", "high"))  # a model's range, not a bound
eta_f, eta_b = pm.reach()  # each phase's share of its roofs: the model takes them equal
why = pm.explain()
if abs(eta_f - eta_b) > 0.1 * max(eta_f, eta_b):  # over a tenth apart, as point figures with no interval
    why["held"] = ("The ratio lies in the band; whether one eta fits both phases, as the band assumes, this run cannot say. "
                   + why["held"].replace("not the one eta the model assumes", "point figures with no interval").replace("; their times can", ""))
viz.verdict(p_bwd, pm.measured, explain=why)

# %% [markdown]
# The crude model, the FLOP ratio, is what `R_b / R_f` would be if every operator were a
# matmul at the compute roof; the memory-bound elementwise ops in `R` move it either way, so
# the band's upper end may lie on either side of it (both are printed above). What pulls the
# measured ratio below `R_b / R_f` is each phase's fixed cost, a larger share of the shorter forward, and any difference
# between the shares of their roofs the two phases' ops reach: the model assumes none, and
# where the measurement falls outside its range the verdict prints both phases' splits. Fixed
# costs are per-operator costs; the next section weighs them for the whole step.

# %% [markdown]
# ### Is the step compute-bound?
#
# Forward and backward take most of the step; section 4's analyzer reports that as a
# `compute` finding (above 60 % of the step). That says where the time goes, not what limits
# it. Whether a step is compute-bound is the roofline's question (notebook 00): the step's
# **arithmetic intensity** I, FLOPs per byte its operators move, against the machine's
# **ridge point**, peak FLOP/s over DRAM bandwidth, says which roof is the lower one,
# `min(peak, I x bandwidth)`. The standard roofline reading stops there: intensity above the
# ridge makes a step compute-bound, and one far under that roof is called inefficient (or,
# where fixed costs dominate, overhead-bound). This course's convention is stricter: a step is bound by its roof
# only if it runs near it (at least half of it, `NEAR_ROOF`), and "bound by neither roof"
# otherwise. `perfkit.compute.intensity.count_phases` counts one step's
# FLOPs (torch's flop counter's formulas) and the bytes every operator reads and writes, each
# input and output once (eager: no reuse between operators). That is the usual approximation,
# not a bound: an operator whose tiles fall out of cache moves more, and fusion would move less.
# `step_roofline` places the measured step time on the roofline, with one roof read from the
# step's total intensity, as for one kernel. Its memory roof is the time the step would take if
# every byte its operators count came from DRAM: for small operators whose tensors stay in cache
# that is a yardstick, not a bound (a step can run above it, the cell after the verdict says
# when). For a mix of operators this one roof is the highest the mix can have: each operator at
# its own roof takes `sum max(F_i / P, B_i / BW)`, at least `max(sum F / P, sum B / BW)`. The
# line below prints both for the whole step at DRAM's bandwidth, and the sum again with the
# cache's bandwidth for the operators that fit in it (as `R` does for forward and backward alone).
#
# **Prediction.** At 64 wide each operator is small, and every operator pays a fixed cost
# (dispatch, Python) besides its work. The step should reach less than half of the roof above
# it. How its time splits between the fixed costs and the operators' own speed (`η`, each
# phase's share of its operators' roofs) the phase split of the previous section measures; the
# verdict prints that split, and holds each `η` against `NEAR_ROOF`.

# %%
step_ops = [r for rs in count_phases(lambda m: models.train_steps(gpt_wl, 1, monitor=m)).values() for r in rs]
count = OpCount(sum(r.flops for r in step_ops), sum(r.bytes for r in step_ops), len(step_ops))  # the whole step
steps = timing.benchmark(lambda: models.train_steps(gpt_wl, 1), warmup=2, repeat=STEPS, device=DEVICE)
where = step_roofline(count, stats.median_interval(steps.times_s), limits)
each_dram, each_cache = roofline_s(step_ops, limits, cache=False), roofline_s(step_ops, limits)  # s: op by op
print(f"one step: {viz.si(count.flops, 'FLOP')} and {viz.si(count.bytes, 'B')} moved by {count.ops} operators: "
      + vprof.ridge_text(where.intensity, limits.peak_flops("float32"), limits, where, NEAR_ROOF))
print(f"HFU from counted FLOPs: {where.mfu.scaled(100).text('%')} = {where.of_roof.value:.0%} of the {where.roof} roof "
      f"(the step's {steps.median_s * 1e3:.1f} ms median against {viz.si(count.flops / where.attainable, 's')} at that "
      f"roof). The step's {count.ops} operators, each at its own roof: {viz.si(each_dram, 's')} at DRAM's bandwidth "
      f"(at least the one roof's time, as above), {viz.si(each_cache, 's')} with the cache's for those that fit "
      f"(forward's and backward's alone, R: {viz.si(pm.roof_fwd_s + pm.roof_bwd_s, 's')})")
p_roof = Prediction("the tiny GPT-2 step's FLOP/s over the roof above it",
                    "small operators, each paying a fixed cost besides its work", high=NEAR_ROOF, physical=(0, None))
fixed_s = pm.fixed_fwd.value + pm.fixed_bwd.value  # s: forward's and backward's fixed costs
fb_s = stats.median(pm.fwd_s) + stats.median(pm.bwd_s)  # s: forward + backward, the same rounds
roof_s = count.flops / where.attainable  # s: the one roof's time for the whole step
of_each = each_cache / steps.median_s  # the step's FLOP/s over the per-op roofs' with the cache's bandwidth
yardstick = (f"the one roof's {viz.si(roof_s, 's')} ("
             + (f"the {viz.si(count.bytes, 'B')} its eager operators count, each one's reads and writes once, at "
                f"the limits file's DRAM {viz.si(limits.copy_bytes_per_s, 'B/s')}" if where.roof == "memory" else
                "its counted FLOPs at the fp32 ceiling")
             + f") against the step's {steps.median_s * 1e3:.1f} ms median decided it"
             + ("; that roof is a yardstick, not a bound: the operators each at its own roof, with the cache's "
                f"bandwidth for those that fit, take {viz.si(each_cache, 's')}, and against them the step sits at "
                f"{of_each:.0%}" if where.roof == "memory" else ""))
eta_text = vprof.eta_split_text(fixed_s, fb_s, (eta_f, eta_b), NEAR_ROOF)  # every outcome prints it
viz.verdict(p_roof, where.of_roof, explain={
    "held": f"{count.ops} operators per step, {viz.si(count.flops / count.ops, 'FLOP')} each on average; "
            f"{yardstick}. Where forward and backward's time went: {eta_text}.",
    "above": f"{yardstick[0].upper()}{yardstick[1:]}. Where forward and backward's time went: {eta_text}.",
    "inconclusive": f"{yardstick[0].upper()}{yardstick[1:]}. Where forward and backward's time went: {eta_text}."})
if where.roof == "memory":  # the one memory roof is a yardstick: the step is placed against it, not on it
    placed = (f"at {where.of_roof.value:.0%} of the all-DRAM yardstick (every counted byte at DRAM's bandwidth; "
              f"not a bound: the per-op roofs with the cache's bandwidth put it at {of_each:.0%})")
else:
    placed = {"neither": f"under {NEAR_ROOF:.0%} of its compute roof", "undecided": "not placed by that run",
              "compute": "compute-bound (near its compute roof)"}[where.bound]

# %% [markdown]
# Which roof is the lower one follows from the intensity: left of the ridge point DRAM's, right
# of it the compute roof. The bytes printed above are every operator's reads and writes added
# up, not what DRAM moved: many of the step's operators touch tensors small enough for the
# caches, whose roof (notebook 00 measures their bandwidth too) lies above DRAM's. So where DRAM's
# roof is the lower one, a step under half of it is under half of the cache's roof as well; a
# step above it is one the cache serves. Neither says the step is memory-bound: that needs the
# bytes DRAM really moved, which a hardware counter measures (on a GPU, Nsight Compute's DRAM
# throughput), not this count.
#
# ## 3. The PyTorch profiler: operators and a trace
#
# `perfkit.profiling.Profiler` wraps `torch.profiler.profile` with a schedule: `wait` steps run
# unprofiled, `warmup` steps are profiled and thrown away (the profiler's own start-up lands
# there), `active` steps are recorded. With `StepMonitor(annotate=True)` each phase is also a
# `record_function("phase:NAME")` range, so the trace carries the phases too.
#
# The operator table ranks operators by **self time**: time inside the operator minus the
# operators it called (`aten::linear` calls `aten::addmm`; its self time is the bookkeeping
# around that call). Total time includes the children, so the totals of nested operators add
# up to more than the step; self times do not, and each row's share is of their sum.
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
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")  # the fused attention kernels also multiply; counted apart
attn_share = sum(o.share for o in res.top_ops if "scaled_dot_product" in o.name)
mm_share = sum(o.share for o in res.top_ops if o.name in MATMULS)
mm_rank = next((i + 1 for i, o in enumerate(res.top_ops) if o.name in MATMULS), len(res.top_ops) + 1)
rank, top = next(((i + 1, o) for i, o in enumerate(res.top_ops)  # the first that multiplies no matrices
                  if o.name not in MATMULS and "scaled_dot_product" not in o.name), (0, None))
print(f"matmul operators: {mm_share:.0%} of all operator self time; the first is rank {mm_rank}"
      + (f"; the first operator that multiplies no matrices, {top.name}, is rank {rank} with {top.share:.1%}"
         + (" (the loss's log-softmax over the vocabulary, one logit per token and vocabulary entry: few FLOPs, "
            "many bytes)" if "log_softmax" in top.name else "") if top else ""))
p_top = Prediction("rank of the first matmul operator by self time", "matmuls carry almost all FLOPs",
                   value=1, rel_tol=0)
viz.verdict(p_top, mm_rank, explain={
    "held": f"All matmuls together are {mm_share:.0%} of operator self time"
            + (f"; the fused attention kernels, which multiply too, {attn_share:.0%}; the other "
               f"{1 - mm_share - attn_share:.0%} goes to operators that carry few or no FLOPs (elementwise ops, "
               "copies, the optimizer's updates): at this width the FLOPs take no more of the time than "
               "the rest, as the roofline of section 2 found." if mm_share + attn_share < 0.5 else "."),
    "above": f"{res.top_ops[0].name} ({res.top_ops[0].share:.0%} of operator self time) outranks every "
             f"matmul ({mm_share:.0%} together): the roofline of section 2 found the step far from its FLOPs."})

# %% [markdown]
# The table and its shares leave out the ranges PyTorch itself marks (`Optimizer.step#...`,
# `enumerate(DataLoader)...`, `ProfilerStep#N`) and the `phase:` markers: they are not operators,
# and their self time is the Python between the operators they hold. The trace shows them.
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
# Two clocks on the same run: `StepMonitor`'s own timer and the profiler's timestamps. They are
# not independent: the monitor (`annotate=True`) opens and closes the `record_function("phase:…")`
# ranges the trace reads, so both share the phases' boundaries, and agreement checks the
# trace's timestamps and the breakdown's bookkeeping, not where the boundaries were drawn. `perfkit.profiling.trace_breakdown` derives the phase shares from the trace file
# alone (each `phase:` range inside its `ProfilerStep#` window). **Prediction.** They should
# agree closely, since they time the same ranges: within 10 percentage points on every phase.
# The figure judged is the largest printed difference, with no interval: the verdict reads only
# whether it lies under the bound.

# %%
ours, theirs = mon.summary().shares(), res.breakdown.shares()
for k in ours:
    a, b = round(100 * ours[k], 2), round(100 * theirs[k], 2)  # as printed, so the columns subtract
    print(f"{k:>10}: monitor {a:6.2f}%   trace {b:6.2f}%   diff {round(a - b, 2) + 0.0:+6.2f} pp")
worst_pp = max(abs(round(100 * ours[k], 2) - round(100 * theirs[k], 2)) for k in ours)  # the printed columns
p_agree = Prediction("largest disagreement between monitor and trace", "both time the same ranges",
                     high=10, unit=" pp", physical=(0, 100))
worst_k = max(ours, key=lambda k: abs(ours[k] - theirs[k]))
viz.verdict(p_agree, worst_pp, explain={
    "above": f"The gap is in '{worst_k}', over {cfg.active} profiled steps: the two clocks disagree on "
             "where that phase's time went, not only by noise."})

# %% [markdown]
# ## 4. The bottleneck analyzer
#
# `diagnose_shares(summary)` compares each phase's share with a threshold and returns `Finding`
# records: what is slow, the evidence, what to try, and the course notebook that teaches the
# fix. From a `StepMonitor` summary it reads each phase's share of its step, median over the steps
# (`StepSummary.median_shares`): one stalled step lengthens the mean step and shrinks every other
# phase's share of the means, and the stall itself is the `jitter` finding's. The PyTorch profiler's TensorBoard plugin (`torch_tb_profiler`, in
# `RunProfileData.analyze`) published two such rules: **data loading above 5 % of the step**
# and **communication above 10 %**. Ours, with the reasons in `Thresholds`' docstring (the jitter
# rule's p99 from 20 steps is about the slowest step, section 2 says why: it compares the worst
# step with the median, and is as noisy as that one step):

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
th = Thresholds()
plugin = {"data": "5%", "communication": "10%"}
print(f"{'rule':>14} {'perfkit':>8} {'TB plugin':>10}")
for k in ("data", "communication", "optimizer", "other", "compute"):
    print(f"{k:>14} {getattr(th, k):>8.0%} {plugin.get(k, '-'):>10}")
print(f"{'jitter':>14} {th.jitter:>7}x {'-':>10}   (p99/p50 of the step, from {th.min_steps} steps)")

# %%
data_shares = {k: sm.median_shares()["data"] for k, sm in healthy.items()}  # what the analyzer reads
over = [k for k, v in data_shares.items() if v > th.data]
over5 = [k for k, v in data_shares.items() if v > 0.05]
named = lambda ks: f" ({', '.join(ks)})" if ks else ""  # noqa: E731
display(Markdown(
    f"**Data: perfkit's 10 % against the plugin's 5 %.** Section 2 measured the healthy (unplanted) pipelines "
    f"at {', '.join(f'{v:.1%} ({k})' for k, v in data_shares.items())} of the step on this machine (median "
    "shares, as the analyzer reads them): the "
    "DataLoader's work per batch (for the digits, decoding each sample), which weighs more the shorter the step. Of these "
    f"{len(data_shares)} healthy pipelines, the plugin's 5 % would flag {len(over5)}{named(over5)} and 10 % "
    f"flags {len(over)}{named(over)}. "
    + ("This run gives no reason to prefer either: the two thresholds change a verdict only where a healthy "
       "loader's share lies between 5 % and 10 %, which none does here; 10 % is kept for the case where one "
       "does, a short step whose loader is healthy. " if len(over) == len(over5) else
       f"The wider margin leaves {len(over5) - len(over)} of them unflagged here: the case for 10 %. ")
    + (f"10 % still flags {', '.join(over)}: a healthy loader there, but a cost to the step all the same "
       f"(without it the step would run {1 / (1 - max(data_shares[k] for k in over)):.2f}x faster were the rest "
       "unchanged: 1 / (1 - share), Amdahl's law, used again below); a share says what a loader costs the step, not "
       "whether it is slow for its work: read a data finding with its milliseconds. " if over
       else "None crosses 10 %, so a data finding at 10 % means the loader costs more than these healthy ones. ")
    + "On a GPU with long steps, use `Thresholds(data=0.05)`. Communication keeps the plugin's 10 %: "
    "the ring's bytes per rank, 2(n-1)/n of the buffer, grow with the ranks but never past twice it, while "
    "its start-ups grow with every rank added, and a job "
    "that crosses from NVLink to the network gets a slower link."))

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
# The figure judged is the data phase's median over the steps, with no interval; the planted
# loop alone accounts for the bound, so only a monitor that missed part of it could fail it.

# %%
slow = measure_workload("gpt2", steps=STEPS, warmup=WARMUP, device=DEVICE,
                        tokenize_per_sample=True, cost_ms=SLOW_COST_MS, **GPT)
print(f"data: {slow['data'].p50_s * 1e3:.1f} ms of a {slow.step.p50_s * 1e3:.1f} ms step (medians); the analyzer "
      f"below reads each phase's share of its step, median over the steps: data {slow['data'].median_share:.1%}"
      + (f". The phases' means give {slow.share('data'):.1%}: the mean step, {slow.step.mean_s * 1e3:.1f} ms against "
         f"the median's {slow.step.p50_s * 1e3:.1f}, carries the slow steps (p99 {slow.step.p99_s * 1e3:.0f} ms), which "
         "lengthen the phase they fell in and shrink every other phase's share of the means"
         if abs(slow.share("data") - slow["data"].median_share) > 0.05 else ""))
p_slow = Prediction("data time per step with the planted cost", f"{GPT['batch_size']} samples x "
                    f"{SLOW_COST_MS:g} ms, plus tokenizing", low=GPT["batch_size"] * SLOW_COST_MS, unit=" ms")
viz.verdict(p_slow, slow["data"].p50_s * 1e3, explain={
    "held": f"The rest ({slow['data'].p50_s * 1e3 - GPT['batch_size'] * SLOW_COST_MS:.1f} ms) is the "
            "per-sample tokenizing and the loader's own cost.",
    "below": "Less than the planted busy loop itself: the monitor's data phase missed part of the loader's work."})
display(Markdown(vprof.findings_markdown(diagnose_shares(slow))))

# %% [markdown]
# **The fix** follows the first recommendation: do the per-sample work **once**, before
# training, and keep the result (the fast path of `TokenBlockDataset` tokenizes the corpus once
# and slices token blocks from one tensor). We measure the fixed pipeline again now for its
# healthy data time `d`. The speedup itself is measured with the two pipelines alternating step
# by step (`perfkit.compute.compare`), so a change in the machine's load hits both alike. Each
# pipeline carries a `StepMonitor` there, so the same rounds give Amdahl's figure for removing
# the data phase, `T / (T - D)` for the slow step's median `T` and its data phase's median `D`
# (medians: a stalled step inflates a mean, section 1c): the speedup if the rest of the step is
# unchanged. It is no bound: removing per-sample work from the training process also removes
# its contention with the model for the cores and caches, so the rest of the step can speed up
# too (the lines after the run compare the model's own phases in both pipelines). By the same
# rule, the prediction is `T / (T - D + d)`: the slow step with its data phase swapped for a
# healthy one, with the rest unchanged. The prediction is computed
# after the alternating run, from its slow rounds and the healthy run's `d`: what it tests is
# the fixed step's time, whether it is the slow step's time outside its data phase plus `d`.

# %%
fixed = measure_workload("gpt2", steps=STEPS, warmup=WARMUP, device=DEVICE, **GPT)
slow_wl = models.gpt2_workload(device=DEVICE, tokenize_per_sample=True, cost_ms=SLOW_COST_MS, **GPT)
fixed_wl = models.gpt2_workload(device=DEVICE, **GPT)
# phases only: in alternation a monitor's step would span the other pipeline's too, so the steps are compare's
alt = {k: StepMonitor(DEVICE, warmup=WARMUP) for k in ("slow", "fixed")}
fix = compare(lambda: models.train_steps(slow_wl, 1, monitor=alt["slow"]),
              lambda: models.train_steps(fixed_wl, 1, monitor=alt["fixed"]), warmup=WARMUP, repeat=STEPS, device=DEVICE)
speedup = fix.estimate  # slow over fixed: the median of the alternating rounds' ratios

# %%
phases = {k: m.summary() for k, m in alt.items()}  # the alternating rounds' phases
t_slow, d_slow = fix.baseline.median_s, phases["slow"]["data"].p50_s  # s: medians over the same rounds
amdahl = t_slow / (t_slow - d_slow)  # x: the slow step with its data phase removed, the rest unchanged
rest_ms = (t_slow - d_slow) * 1e3  # ms: the slow step outside its data phase
p_fix = Prediction("speedup of the fixed pipeline", "slow step - slow data + healthy data, the rest unchanged (Amdahl)",
                   value=t_slow / (t_slow - d_slow + fixed["data"].p50_s), rel_tol=0.15, unit="x")
printed = lambda a, b: round(round(a, 1) - round(b, 1), 1)  # noqa: E731 - ms: the difference of the printed figures
beat_ms = printed(rest_ms, fix.candidate.median_s * 1e3)  # ms: how far the fixed step came in under it
work = {k: sum(a[p].p50_s for p in ("forward", "backward", "optimizer")) * 1e3 for k, a in phases.items()}  # ms
gain_ms = printed(work["slow"], work["fixed"])  # ms: the model's own phases, slow pipeline over fixed
above = (f"The fixed step's median, {fix.candidate.median_s * 1e3:.1f} ms, came in {beat_ms:.1f} ms under the slow "
         f"step's {rest_ms:.1f} ms outside its data phase; forward, backward and optimizer took {work['slow']:.1f} ms "
         f"in the slow pipeline against {work['fixed']:.1f} ms in the fixed one (sums of medians)"
         + (f": the rest of the step changed, the model's own phases {gain_ms:.1f} ms faster without the planted "
            "work beside them, at least the gap." if gain_ms >= beat_ms else
            f": the model's own phases account for {gain_ms:.1f} ms of it; this run does not split the rest."
            if gain_ms > 0 else ": not slower, so the part of the step no phase times made the difference; this "
            "run does not split it.") if beat_ms > 0 else
         f"By the medians the fixed step ({fix.candidate.median_s * 1e3:.1f} ms) did not come in under the slow "
         f"step's {rest_ms:.1f} ms outside its data phase: the rounds' paired ratios beat Amdahl's figure, their medians not.")
print(f"step, alternating: {fix}; Amdahl's figure (the rest of the step unchanged) in the same rounds, the slow "
      f"step's median {t_slow * 1e3:.1f} ms "
      f"less its data phase's {d_slow * 1e3:.1f} ms: {amdahl:.2f}x; the speedup: {vprof.against_bound(speedup, amdahl)}"
      + (f". {above}" if speedup.clear_of(amdahl, "x") == "above" else ".") + speedup.beside(t_slow / fix.candidate.median_s))

# %%
fix_v = judge(p_fix, speedup, explain=dict.fromkeys(("above", "below", "held"), (
    f"The prediction takes the fixed step to be the slow step's {rest_ms:.1f} ms outside its data phase plus the "
    f"healthy run's data median ({viz.si(fixed['data'].p50_s, 's')}), {rest_ms + fixed['data'].p50_s * 1e3:.1f} ms in all; "
    f"in the same rounds the fixed step's median was {fix.candidate.median_s * 1e3:.1f} ms, and forward, backward and optimizer took "
    f"{work['slow']:.1f} ms in the slow pipeline against {work['fixed']:.1f} ms in the fixed one (sums of medians). "
    f"Against Amdahl's figure for the rest unchanged, {amdahl:.2f}x, the measured speedup has {vprof.against_bound(speedup, amdahl)}.")))
viz.show_verdict(fix_v)

# %% [markdown]
# The diagnosis of the fixed pipeline. A `compute` finding, when there is one, is information,
# not a bottleneck: it says that forward + backward take most of the step, a share. What
# bounds that time is the roofline's answer from section 2, quoted beside it. Its fix line's
# "MFU against the machine's measured ceiling" (here or in section 5's reports) is a share of
# notebook 00's measured ceiling: it reads higher than MFU as PaLM defines it, against a data
# sheet's peak, and cannot be compared with published MFU.

# %%
fixed_findings = diagnose_shares(fixed)
display(Markdown(vprof.findings_markdown(fixed_findings)))
compute = next((f for f in fixed_findings if f.kind == "compute"), None)
if compute:
    print(f"'compute': forward + backward take {compute.share:.0%} of the step; by the roofline of section 2 "
          f"the step is {placed} (HFU {where.mfu.value:.1%} at that run's "
          f"{steps.median_s * 1e3:.1f} ms step; the same FLOPs at this run's {fixed.step.p50_s * 1e3:.1f} ms: "
          f"{where.mfu.value * steps.median_s / fixed.step.p50_s:.1%}).")
vprof.plot_phase_bars({"planted bottleneck": slow, "fixed": fixed}, unit="ms", stat="median",
                      title="Before and after the fix, two separate runs (each phase's median ms)")
plt.show()
fb = {k: [(r["forward"].mean_s + r["backward"].mean_s) * 1e3, (r["forward"].p50_s + r["backward"].p50_s) * 1e3]
      for k, r in (("slow", slow), ("fixed", fixed))}  # ms: forward + backward, [means, medians]
alt_fb = {k: (a["forward"].p50_s + a["backward"].p50_s) * 1e3 for k, a in phases.items()}  # ms: alternating rounds
print(f"Forward + backward, the same model in both runs: {fb['slow'][1]:.1f} against {fb['fixed'][1]:.1f} ms by the "
      f"medians drawn, {fb['slow'][0]:.1f} against {fb['fixed'][0]:.1f} ms by the means"
      + (": the means carry stalled steps that the medians leave out." if fb["slow"][0] / fb["fixed"][0] > 1.25 *
         fb["slow"][1] / fb["fixed"][1] or fb["fixed"][0] / fb["slow"][0] > 1.25 * fb["fixed"][1] / fb["slow"][1]
         else ".") + ("" if abs(fb["slow"][1] / fb["fixed"][1] - 1) <= 0.1 else  # beyond 1c's 10 %: say which runs
      f" These are separate runs; in the alternating rounds above the same phases took {alt_fb['slow']:.1f} against "
      f"{alt_fb['fixed']:.1f} ms" + (": most of the gap between these runs is their drift, not the fix."
      if abs(alt_fb["slow"] / alt_fb["fixed"] - 1) < abs(fb["slow"][1] / fb["fixed"][1] - 1) / 2 else ".")))

# %%
runs = {"section 1a (steady steps)": steady, "section 2 (monitored)": gpt.step.p50_s,
        "section 2 (roofline, unmonitored)": steps.median_s,
        "section 4 (alternating with the slow pipeline)": fix.candidate.median_s,
        "now (monitored)": fixed.step.p50_s}  # s: medians of the same model's step, separate runs
spread = max(runs.values()) / min(runs.values())
mon = [v for k, v in runs.items() if "(monitored)" in k]  # measure_workload's fresh workloads
bare = [v for k, v in runs.items() if "(monitored)" not in k]  # the notebook's own loop
print(f"The same tiny GPT-2 step, timed in {len(runs)} separate runs: "
      + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in runs.items())
      + f"; the slowest is {spread:.2f}x the fastest, " + ("within" if spread <= 1.1 else "beyond")
      + " the 10 % section 1c predicted for two medians back to back (these were not: other work ran between them)."
      + ("" if spread <= 1.1 else
         (f" The two runs of measure_workload (a freshly built workload, its DataLoader and phase markers) "
          f"took {min(mon) / max(bare):.2f}x to {max(mon) / min(bare):.2f}x the {len(bare)} of the notebook's own "
          "loop, "
          f"which agree within {max(bare) / min(bare):.2f}x: the split is between the two loops, not in time."
          if min(mon) > 1.1 * max(bare) and max(bare) / min(bare) <= 1.1 else
          " The medians moved between runs, and not by loop alone.")
         + " This run does not measure which part of the loop (or the machine's load) costs it; a median is "
         "only comparable within one run, which is why the fix's speedup above was timed with both "
         "pipelines alternating."))

# %% [markdown]
# The fix is not free. Done once, before training, the per-sample work still costs its time for
# every sample of the corpus (the planted decode stands for work a real pipeline cannot skip, so
# it is counted once per sample), and tokenizing the whole corpus takes time too. Each step saves
# about a batch's worth of that work, and the one-off cost is a corpus's worth: expect the fix to
# pay for itself in about an epoch. Is it worth it?

# %%
tok = models.train_bpe_tokenizer(max_bytes=CORPUS_BYTES)
text = models.text_corpus(CORPUS_BYTES)
once = timing.benchmark(lambda: models.encode_corpus(tok, text), warmup=0, repeat=1)  # a one-off cost: cold, once
samples, epoch = len(fixed_wl.loader.dataset), len(fixed_wl.loader)  # samples, and steps per epoch
one_off = once.median_s + samples * SLOW_COST_MS / 1e3  # s: tokenizing, plus the decode once per sample
saved = fix.baseline.median_s - fix.candidate.median_s
print(f"the per-sample work done once: tokenizing the corpus, {once.median_s:.2f} s (one cold run, as a job pays "
      f"it; no interval), plus the planted decode for each of its {samples:,} samples, {samples:,} x "
      f"{SLOW_COST_MS:g} ms = {samples * SLOW_COST_MS / 1e3:.1f} s: {one_off:.1f} s; saves {saved * 1e3:.1f} ms per "
      "step (the alternating medians above) "
      + (f"-> pays for itself after {math.ceil(one_off / saved)} steps, {math.ceil(one_off / saved) / epoch:.2g} "
         f"epochs of {epoch} steps" if saved > 0 else
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
# rule generated from that threshold would fire on it. The figure judged is the lowest window's
# share, with no interval: the verdict reads whether it lies above the threshold.

# %%
import shutil
from pathlib import Path

from perfkit.profiling import TensorBoardSink, alert_rules, read_scalars

EVERY, WINDOWS = (3, 2) if QUICK else (5, 3)   # steps per window; windows before and after
run_dir = Path(cfg.trace_dir).parent / "tensorboard" / "01_watch"  # build/tensorboard/01_watch
shutil.rmtree(run_dir, ignore_errors=True)       # a fresh run: no windows of an earlier one
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
viz.verdict(p_watch, min(after), explain={
    "held": f"Before the switch the windows' data shares were {', '.join(f'{v:.1%}' for v in before)}"
            + (f": on this machine the healthy loader crosses {th.data:.0%} too (section 4's data paragraph says why)."
               if max(before) > th.data else f", under {th.data:.0%}: in these windows only the bottleneck crosses it"
               + (f"; in section 2's run the healthy {', '.join(over)} crossed it too." if over else ".")),
    "below": f"The windows after the switch: {', '.join(f'{v:.1%}' for v in after)}."})

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
# To use it on a real job: give each rank a `PrometheusSink(port=9400 + LOCAL_RANK)` (it
# serves the window's gauges at `/metrics`), write `alert_rules(th)` to a rules file, and
# `prometheus_config(targets, rule_files)` writes the `prometheus.yml` that scrapes the ranks
# and evaluates the rules. `for_s` is how long the condition must hold before the alert
# fires: a production rule waits a few minutes, so one slow window does not page anyone.
# %% [markdown]
# ## 5. `perfkit diagnose`: a script you did not write, unchanged
#
# Sections 2-4 measured loops written around `StepMonitor`. The slow training script someone
# hands you was not written that way, and rewriting it to find out why it is slow is the
# wrong first step. `python -m perfkit diagnose train.py [its args]` runs it unchanged:
#
# * a **step** ends where an optimizer step ends (torch's global optimizer step hooks, which
#   every `torch.optim` optimizer calls: plain loops, Hugging Face `Trainer` and DDP call one
#   `step()` per training step; an optimizer wrapping another nests its call and counts once).
#   Where a training step calls `step()` several times one after another, the hooks count each
#   call as a step: DeepSpeed's ZeRO stages 1 and 2 step the wrapped optimizer once per parameter
#   group, ZeRO-3 once per sub-group, and a loop with several optimizers steps each. There, name
#   a module-level function of the script that runs once per training step with
#   `--step-marker MODULE:FUNCTION`: its return ends a step instead;
# * **data wait** is the time spent in the DataLoader iterator's `__next__`;
# * after `--skip` warm-up steps, `--steps` steps are recorded with `torch.profiler`, and each
#   microsecond of them is counted once, in the first of: data, host-device **sync**
#   (`.item()`, `.cpu()`, printing a tensor), exposed communication, optimizer, backward,
#   forward, other;
# * the **findings** are ranked by what removing each cause gains if the rest of the step is
#   unchanged (Amdahl), `1 / (1 - share)`, with thresholds calibrated on planted scripts
#   (`perfkit.profiling.Thresholds.for_command()`; its docstring has the measured ranges).
#
# `examples/diagnose/` holds small training scripts, each slow for one known reason that its
# docstring names ("`perfkit diagnose` should name: data"), and healthy ones. We run the
# command on them as a user would, in a fresh process with one intra-op thread (what torchrun
# sets when it starts more than one process per node and `OMP_NUM_THREADS` is unset).
# **Prediction**, recorded before any run: each planted cause is the **top** finding
# (rank 1 among the findings); a healthy script gets **no finding above information level**.

# %%
import json
import re
import subprocess
import sys

import perfkit

ROOT = Path(perfkit.__file__).resolve().parents[1]   # the repository: examples/ sits beside perfkit/
EXAMPLES = ROOT / "examples" / "diagnose"
SCRIPTS = (["data_bound", "sync_bound", "healthy_cnn"] if QUICK else
           ["data_bound", "sync_bound", "optimizer_bound", "overhead_bound", "healthy_mlp", "healthy_cnn"])
# the cause each docstring plants ("should name: data"); None for a healthy script
planted = {n: (re.search(r"should name: (\w+)", (EXAMPLES / f"{n}.py").read_text()) or [None, None])[1]
           for n in SCRIPTS}
predicted = {name: Prediction(f"rank of '{cause}' among the findings for {name}.py", f"{cause} is planted in it",
                              value=1, rel_tol=0) if cause else
             Prediction(f"findings above information level for {name}.py", "a healthy script", value=0, rel_tol=0)
             for name, cause in planted.items()}
print(", ".join(f"{name}: {cause or 'healthy'}" for name, cause in planted.items()))

# %% [markdown]
# Each run is the command line itself, `python -m perfkit diagnose --out DIR --skip 2 --steps 8
# script.py` (the window the thresholds were calibrated with); its `report.json` holds every
# number the terminal report prints.
#
# The command does not use section 4's table. Its shares come from a profiled trace, split
# exclusively among the phases, where the table's come from a `StepMonitor` in the loop; so it
# reads its own set, `Thresholds.for_command()`, calibrated on these scripts: each value sits
# between the planted script's share and the largest share any other script reached
# (`benchmarks/diagnose.py`). The values that differ from the table:

# %%
cmd_th = Thresholds.for_command()
print(", ".join(f"{k} {getattr(cmd_th, k):.0%} (table: {getattr(th, k):.0%})" for k in ("data", "communication", "optimizer")
                if getattr(cmd_th, k) != getattr(th, k)) + "; other: not judged by the command (the overhead rule "
      "judges a trace's time between operators)")

# %%
DIAG_REL = Path("build") / "diagnose" / "01_profiling"  # in the repository, where the command runs
DIAG_DIR = ROOT / DIAG_REL
shutil.rmtree(DIAG_DIR, ignore_errors=True)
env = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
reports, seconds = {}, {}
for name in SCRIPTS:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfkit", "diagnose", "--out", str(DIAG_REL / name),
                           "--skip", "2", "--steps", "8", str((EXAMPLES / f"{name}.py").relative_to(ROOT))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds[name] = time.perf_counter() - t0
    assert proc.returncode == 0, f"{name}: exit code {proc.returncode}\n{proc.stderr[-2000:]}"
    reports[name] = json.loads((DIAG_DIR / name / "report.json").read_text())
print(", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()), "(each run: a fresh Python, torch imported)")
print(proc.stdout)   # the last one, as the terminal shows it

# %% [markdown]
# The top finding of each run, with its evidence (numbers from that run):

# %%
rows = ["| script | planted | top finding | evidence | speedup without it, the rest unchanged |", "|---|---|---|---|---|"]
for name, rep in reports.items():
    top = rep["findings"][0] if rep["findings"] else None
    gain = f"{top['max_speedup']:.2f}x" if top and top["severity"] != "info" else "-"
    rows.append(f"| `{name}` | {planted[name] or 'nothing'} | "
                + (f"**{top['kind']}** ({top['severity']}) | {top['evidence']} | {gain} |" if top else "none | - | - |"))
display(Markdown("\n".join(rows)))

# %%
for name, rep in reports.items():
    kinds, cause, top = [f["kind"] for f in rep["findings"]], planted[name], (rep["findings"] or [{}])[0]
    if cause:
        took = (f"; '{cause}' took {rep['shares'][cause]:.1%} of the step, threshold "
                f"{getattr(Thresholds.for_command(), cause):.0%}" if cause in rep["shares"] else "")
        viz.verdict(predicted[name], kinds.index(cause) + 1 if cause in kinds else len(kinds) + 1, explain={
            "held": f"Removing it speeds the step up {top.get('max_speedup') or 1:.2f}x if the rest of the step is "
                    "unchanged (Amdahl).",
            "above": f"The findings were {kinds or 'none'}{took}."})
    else:
        loud = [f"{f['kind']} ({f['severity']})" for f in rep["findings"] if f["severity"] != "info"]
        viz.verdict(predicted[name], len(loud), explain={"above": f"A false alarm: {', '.join(loud)}.",
                                                          "held": f"Its findings: {', '.join(kinds) or 'none'}."})

# %% [markdown]
# The command also writes `report.md` and `report.html`, with plots drawn by
# `perfkit.viz.report_pngs` (embedded in the HTML page as PNGs), and the Chrome trace of the
# window for Perfetto. The plot of where the data-bound script's step goes:

# %%
fig = viz.plot_report_shares(reports["data_bound"], title="data_bound.py: where the step goes")
plt.show()
print(f"written to {DIAG_REL / 'data_bound'}: " + ", ".join(sorted(p.name for p in (DIAG_DIR / "data_bound").iterdir())))

# %% [markdown]
# The planted communication-bound script and the DDP straggler need two processes:
# `torchrun --nproc_per_node 2 -m perfkit diagnose examples/diagnose/comm_bound.py`, where every
# rank records and rank 0 writes one merged report with each rank's step time (the test suite
# and `benchmarks/diagnose.py` run them).
#
# ### Memory: the peak, and the model states' part of it
#
# The report gives the peak memory (on a CPU the process's resident-set high-water mark, on a
# GPU the CUDA allocator's peak) and, for every `torch.optim` optimizer whose `step()` the
# hooks saw (under DeepSpeed, the one its engine wraps), the bytes of the parameters, gradients
# and optimizer state it holds, counted from
# their tensors (`perfkit.profiling.memory_split`). **Prediction.** `healthy_cnn.py` trains
# with SGD with momentum in fp32: the gradients are as large as the parameters, and so is the
# momentum buffer, so the model states are exactly 3x the parameter bytes (notebook 04's
# formula).

# %%
mem = reports["healthy_cnn"]["memory"]
states = mem["params_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"]
print(f"peak ({mem['kind']}) {mem['bytes'] / 2**20:.0f} MiB; {', '.join(mem['optimizers'])} holds "
      f"{mem['params_bytes']:,} B of parameters, {mem['grads_bytes']:,} B of gradients, {mem['optimizer_bytes']:,} B of state")
p_states = Prediction("model-state bytes over parameter bytes (healthy_cnn.py)",
                      "fp32 weights + gradients + one momentum buffer: 1 + 1 + 1", value=3, rel_tol=0, unit="x")
viz.verdict(p_states, states / mem["params_bytes"], explain={
    "held": f"Yet they are {states / mem['bytes']:.2%} of the peak: {mem['start_bytes'] / 2**20:.0f} MiB were "
            f"resident before the script ran, and the run added {(mem['bytes'] - mem['start_bytes'] - states) / 2**20:.0f} "
            "MiB besides its model states.",
    "above": f"{', '.join(mem['optimizers'])} holds {mem['optimizer_bytes'] / mem['params_bytes']:.2f} bytes "
             "of state per parameter byte, more than one momentum buffer."})
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 4.2))
viz.plot_memory_split(reports["healthy_cnn"], ax=ax1)
viz.plot_memory_split(reports["healthy_cnn"], ax=ax2)  # the same bar, zoomed on the model states
lo = (mem["start_bytes"] or 0) / 2**20  # MiB: where the model states begin on the bar
ax2.set_xlim(lo, lo + 1.25 * states / 2**20)
ax2.get_legend().remove()  # the top bar's legend names the same segments
ax2.set_title(f"zoomed on the model states ({states / 2**10:.0f} KiB)")
plt.show()

# %% [markdown]
# ## 6. Try it: batch size, workers and per-sample cost
#
# The widget re-runs a short measurement of the digits CNN (`perfkit.profiling.measure_workload`)
# whenever a slider moves, and shows the phase shares with the diagnosis. Things to try:
#
# * raise the **per-sample cost**: `data` grows linearly with it and with the batch size;
# * add **DataLoader workers**: the decoding moves to other processes and overlaps the model.
#   On a machine with few cores, the workers compete with the model's own threads for the same cores,
#   so the gain is smaller than the number of workers suggests;
# * raise the **batch size** with no data cost: fixed per-step costs (Python, the optimizer,
#   the DataLoader's own overhead per batch) are spread over more samples; the digits' per-sample
#   decode is not, it grows with the batch.
#
# Below the widget, a static plot of its default setting (run headless, as in CI, the widget
# cell itself shows that figure, once). Each figure is a fresh measurement of a few steps: drawn
# again it differs by the run-to-run spread, and by far more when a stall lands among so few
# steps (section 1c). The line under the figure gives what section 2's measurements predict for
# the default setting, to read the figure against.

# %%
# NBVAL_IGNORE_OUTPUT
spec = vprof.breakdown_widget("digits", steps=4 if QUICK else 10)
viz.build_widget(spec)

# %%
if os.environ.get(viz.HEADLESS_ENV) != "1":  # headless (CI, the book), the widget cell already drew it
    fig = spec.fn(**spec.defaults())
    plt.show()
print(vprof.widget_expectation_text(spec, dg))  # section 2's digits step plus the planted cost, against the figure

# %% [markdown]
# ## Summary
#
# * Time **after a warm-up**, **wait for asynchronous work**, and take the **median of many**
#   samples: `perfkit.timing` does all three. A median is only as steady as the machine
#   between runs, so compare candidates **in alternation** (`perfkit.compute.compare`,
#   `perfkit.timing.interleaved`), as the speedup of section 4 was.
# * In this course's convention (stricter than the standard roofline reading, which asks only
#   the first), a step is **compute-bound** only when its arithmetic intensity is above the
#   machine's ridge point *and* it runs near the compute roof; a phase share cannot say it, the
#   roofline and the HFU do (section 2 computes both, from the FLOPs the step ran).
# * A **phase breakdown** (`StepMonitor`) says which part of the step to work on; the
#   **profiler** says which operators, and its trace is a second clock on the same phase
#   boundaries (section 3's verdict says how closely the two agreed here).
# * `diagnose_shares` turns shares into findings by thresholds whose reasons `Thresholds`'
#   docstring gives; a share alone does not say a loader is slow: on a short step a healthy one's
#   work per batch can cross the threshold (section 4 says whether one did here). Section 4
#   shows what it found on the planted bottleneck, and whether the breakdown's prediction of what
#   the fix would buy held on this run (the headline below repeats the outcome, held or missed). Read
#   shares and predictions from medians: one stalled step moves every mean.
# * `python -m perfkit diagnose train.py` does the same for a script nobody changed: steps
#   from the optimizer hooks, the split from a profiled window, the findings ranked by what
#   removing each cause gains with the rest unchanged (Amdahl), the peak memory with its model
#   states; section 5 checks it on planted scripts.
#
# Next: modules 02-03 (communication), 04-05 (memory), 06 (compute) and 07 (data loading)
# each start from a diagnosis like the ones above.

# %%
named_ok = [bool(r["findings"]) and r["findings"][0]["kind"] == planted[n] for n, r in reports.items() if planted[n]]
viz.show_headlines({
    "tiny GPT-2 step (p50)": f"{fixed.step.p50_s * 1e3:.1f} ms monitored, {steps.median_s * 1e3:.1f} ms unmonitored",
    "planted data bottleneck": f"{slow['data'].median_share:.0%} of the step (median share, its own run); "
                               f"Amdahl's figure (rest unchanged) in the alternating rounds {amdahl:.2f}x",
    "speedup after the fix": f"{speedup.value:.2f}x (predicted {p_fix.value:.2f}x: {fix_v.outcome}; against Amdahl's "
                             f"figure {amdahl:.2f}x, {vprof.against_bound(speedup, amdahl).split(':')[0]})",
    "tiny GPT-2 step on the roofline": f"HFU {where.mfu.value:.1%} (its unmonitored step), {placed}" + (
        f" (under {NEAR_ROOF:.0%} of the lower roof for any DRAM figure above {viz.si(floor, 'B/s')})" if (floor := vprof.neither_floor(
            where, limits.peak_flops("float32"), NEAR_ROOF)) else " (by the limits file's roofs)"),
    "trace vs monitor": f"{worst_pp:.2f} pp apart",
    "perfkit diagnose, planted causes ranked first": f"{sum(named_ok)} of {len(named_ok)}",
})
