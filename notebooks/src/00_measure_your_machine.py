# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Measure your machine
#
# Every later module in this course reports its results as a **share of what this machine can
# do**: "the training step reached 31 % of the matmul ceiling", "the copy moved data at 80 % of
# memory bandwidth". A share needs a ceiling, and a data sheet's ceiling is not yours:
# your laptop's clock, cores, cache and PyTorch build all matter. So we measure the ceilings
# here, on the machine you are using, and keep each one's highest figure over every run in a
# limits file that later modules divide by; section 6 prints which figures are this run's and
# which an earlier run's:
#
# 1. **compute**: how many floating-point operations per second (FLOP/s) matmuls reach, in
#    fp32 and bf16, on every core and on one;
# 2. **memory**: how many bytes per second a copy moves, from cache and from DRAM;
# 3. **host to device**: how fast pinned memory reaches the GPU (GPU only).
#
# Each ceiling is the fastest this machine was seen to run the course's own work (its matmul
# shapes, buffer sizes and thread counts), the best of several rounds. A later measurement that
# beats one raises it, and says so where it happens: no share is ever printed above 100 %, so a
# share near 100 % says only that nothing measured ran faster (one exception, for the DRAM
# ceiling, is explained in section 4). Then we combine them into a
# **roofline** (Williams, Waterman and Patterson, 2009): the fastest an operation can run, given
# how many FLOPs it does per byte it moves. Williams et al. take the compute roof from the
# processor's peak and the memory roof from a measured, STREAM-like bandwidth; here the compute
# roof is measured too.
#
# Run the cells from top to bottom. `QUICK = True` (what CI uses) runs smaller sweeps.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import re

import torch

from perfkit import ceilings, hw, roofline, sizing, stats, timing, viz
from perfkit.imitate import IMITATIONS
from perfkit.verdict import Prediction
from perfkit.verdict_text import machine_text
from perfkit.viz import machine as vm
from perfkit.viz import si

DEVICE = timing.resolve_device()  # CUDA if present, else CPU
MATMUL_SIZES = [128, 256, 512] if QUICK else [128, 256, 512, 1024, 2048]
if DEVICE.type == "cuda":
    MATMUL_SIZES = [512, 1024, 2048, 4096] if QUICK else [512, 1024, 2048, 4096, 8192]
COPY_SIZES = [2**p for p in range(16, 29, 2)]  # 64 KiB .. 256 MiB per buffer (and one DRAM-sized)
print(f"torch {torch.__version__} on {hw.device_name(DEVICE)}")
if (imitated := os.environ.get("PERFKIT_IMITATE")) in IMITATIONS and DEVICE.type == "cpu":
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())  # the library fp32 matmuls go to, if any
    print(f"PERFKIT_IMITATE={imitated}: this process caps oneDNN's (Intel's CPU kernel library, which PyTorch "
          "calls for bf16 matmuls and convolutions) and ATen's (PyTorch's own operators) kernels ("
          + ", ".join(f"{k}={v}" for k, v in IMITATIONS[imitated].items())
          + "): bf16 matmuls take the emulated path, and copies run ATen's capped kernels. "
          + (f"fp32 matmuls go to the BLAS library this PyTorch was built with ({blas.group(1)}), which reads "
             "neither variable: the fp32 ceilings below are not capped by them." if blas else
             "fp32 matmuls run ATen's own kernels here (no BLAS library in this build), capped too."))


def on(t):  # "on 1 thread", "on 2 threads"
    return f"on {t} thread{'s' * (t != 1)}" if t else "on every thread"


def pct(share):  # "44%", "0.47%": a small share keeps its digits
    return f"{share:.0%}" if share >= 0.01 else f"{share:.2%}"

# %% [markdown]
# ## 1. How many FLOPs does a matmul do, and how many bytes must it move?
#
# **The model.** Multiplying an `(m, k)` matrix by a `(k, n)` one computes `m·n` inner
# products of length `k`: one multiply and one add per term, so `2·m·n·k` FLOPs. At the very
# least it reads both inputs and writes the output once: `(m·k + k·n + m·n)` elements. Their
# ratio is the **arithmetic intensity**, FLOPs per byte. For a square fp32 matmul it is
# `2n³ / (3n²·4) = n/6`: it grows with `n`, which is why big matmuls, and the operations that run
# as matmuls (convolutions lowered to one, attention fused into one kernel), are the ones
# that can keep a processor's arithmetic units busy. These numbers are exact, so the cell
# below keeps its output and CI checks it.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
for n in (128, 1024, 8192):
    flops, nbytes = roofline.matmul_flops(n, n, n), roofline.matmul_bytes(n, n, n, 4)
    print(f"n={n:5d}: {flops:>16,d} FLOPs, {nbytes:>12,d} bytes (fp32), "
          f"intensity {roofline.matmul_intensity(n, n, n, 4):7.1f} FLOP/byte")

# %% [markdown]
# ## 2. How fast does this machine multiply?
#
# **Prediction.** Large matmuls should approach a ceiling set by the cores' vector units. Each
# call also pays fixed costs (dispatch, setting up the call): a microsecond or two on a CPU,
# small against the 4.2 MFLOP of arithmetic even an n=128 matmul does (about 20 µs on one thread
# at 200 GFLOP/s; the verdict prints this machine's figure), and packing the operands copies
# `n²` elements, small against the `n³` arithmetic. So on one
# thread the smallest size should reach at least half the largest one's rate. On several
# threads a call also waits at a barrier for the slowest thread, a cost that depends on what
# else holds the cores. bf16 halves the bytes per element; whether it also doubles FLOP/s
# depends on the hardware (CPUs with AVX-512 BF16 or AMX and recent GPUs have bf16
# instructions; older CPUs emulate it and get slower).
#
# **Measurement.** `perfkit.hw.measure_limits` times each square size and the non-square
# matmuls later notebooks run (`perfkit.hw.COURSE_SHAPES`) with `perfkit.timing.benchmark`
# (a warm-up call, then repeated timed batches, the median reported), on every core and on one
# thread, in several rounds seconds apart; each point keeps its best round. The **ceiling** is
# the best point's rate over its fastest tenth of repetitions. A dtype whose smallest size runs
# below `hw.EMULATED_BELOW` of fp32 is emulated: past that size it is swept on every core only,
# once. A size whose one call would take over a second (extrapolated from the rate before it) is
# skipped to keep the sweep short; the line after the sweep says how that dtype's rate moved
# over its last two sizes, and so whether a skipped size could have raised its ceiling.

# %%
limits = hw.measure_limits(quick=QUICK, device=DEVICE, matmul_sizes=MATMUL_SIZES, copy_sizes=COPY_SIZES)
swept = limits  # the sweep's own ceilings, before any later operation raises one
print("\n".join(vm.sweep_lines(limits) + vm.skipped_sizes(limits, MATMUL_SIZES)))
print("\nthe ceilings (the fastest tenth of a point's repetitions in its best round, so at or above the medians "
      "listed), and the point each came from:")
print("\n".join(line for line in vm.source_lines(limits) if "matmul" in line))
for dt in limits.matmul_flops:  # an emulated dtype: swept on fewer threads past its smallest size
    pts = [p for p in limits.matmul_points if p.dtype == dt]
    later = sorted({p.threads for p in pts if p.n > min(q.n for q in pts)})
    if limits.support(dt) == "emulated" and later:
        print(f"\n{dt}'s ceiling is {limits.peak_flops(dt) / limits.peak_flops('float32'):.2g}x fp32's: emulated, so "
              f"past n={min(q.n for q in pts)} it was swept {' and '.join(on(t) for t in later)} only, at the square "
              "sizes, in one round")

# %%
import matplotlib.pyplot as plt

vm.plot_matmul_sweep(limits)
plt.show()

# %% [markdown]
# **Reading the plot.** The model says a curve rises while fixed costs are amortised over more
# work and flattens near the ceiling, or dips once the matrices outgrow a cache. What each curve
# did here is printed next: its smallest size's rate and its largest's as shares of its best.
# On a busy machine the curves for all cores can lie *below* the one-thread curves: every
# matmul waits for its slowest thread, and a thread whose core another process holds makes all
# of them wait. The bf16/fp32 ratio tells you whether the CPU this process runs on has native bf16 arithmetic
# (a ratio near or above 2), converts bf16 to fp32 for the arithmetic (below 1: fp32's speed
# less what the conversions cost, which depends on the CPU and the library), or emulates it (far
# below: `perfkit.hw.MachineLimits.support` calls anything below `hw.EMULATED_BELOW`, a quarter
# of fp32's rate, emulated). Under `PERFKIT_IMITATE` that CPU is the imitated one, capped below
# this machine's instruction set: the line below says so, and its bf16 ceiling is the imitation's.
#
# The sweep's points were timed seconds apart, so the ratio of two of them has no interval. To
# judge the prediction, the smallest and the largest fp32 sizes are timed again in alternation
# on the **same FLOPs** (the small matmul repeated `(n_large / n_small)³` times per round;
# `perfkit.sizing.matmul_ratio`), on **one thread**, where no barrier waits for another thread,
# and the ratio of their rates gets an interval. The course prints two kinds of span. An
# **interval** is a confidence interval: the narrowest symmetric order-statistic interval (the k-th smallest
# to the k-th largest sample) that covers the median with at least 90 % probability, printed with its exact coverage rounded down to
# a whole percent (93 % at 5 samples, 98 % at 7, 90 % at 30). A **range** is the spread of single repeats (p10 to
# p90, or as its label says), printed as "range" or "spread": it claims no confidence, and a
# verdict judged on one says only where the repeats fell. An interval covers, with its stated
# probability, the median of the distribution these repeats are drawn from, under this session's
# load (the repeats' own median always lies inside it): not the machine across sessions, so a figure timed
# minutes earlier (the sweep's) can lie outside it without contradicting it. Beside this interval,
# the sweep's own ratio of the two sizes on one thread, and what it saw of the smallest size on every core.

# %%
print(vm.bf16_sentence(limits))
for dt in limits.matmul_flops:  # each curve: where it starts and ends against its best point
    for t in sorted({p.threads for p in limits.matmul_points if p.dtype == dt}):
        pts = sorted((p for p in limits.matmul_points if p.dtype == dt and p.threads == t), key=lambda p: p.n)
        top = max(pts, key=lambda p: p.flops_per_s)
        ends = (f"; n={pts[0].n} at {pct(pts[0].flops_per_s / top.flops_per_s)} of it, n={pts[-1].n} at "
                f"{pct(pts[-1].flops_per_s / top.flops_per_s)}" if len(pts) > 1 else " (its only size)")
        print(f"  {dt} {on(t)}: best {si(top.flops_per_s, 'FLOP/s')} at n={top.n}{ends}")
fp32_pts = sorted((p for p in limits.matmul_points if p.dtype == "float32"), key=lambda p: p.n)
n_small, n_large = fp32_pts[0].n, fp32_pts[-1].n
small_large = sizing.matmul_ratio(n_small, n_large, repeat=15, device=DEVICE, threads=1)  # 15: a busy machine
sweep1 = {p.n: p.flops_per_s for p in fp32_pts if p.threads == 1}  # the sweep's one-thread rates, timed apart
print(f"fp32 n={n_small} over n={n_large} on 1 thread, the same FLOPs in alternation: {small_large.text('x')}."
      + (small_large.beside(sweep1[n_small] / sweep1[n_large], "the sweep's ratio of their one-thread rates")
         if {n_small, n_large} <= sweep1.keys() else ""))
rate = {p.threads: p.flops_per_s for p in fp32_pts if p.n == n_small}
if len(rate) > 1 and 1 in rate:
    t_all = max(rate)
    call_s = roofline.matmul_flops(n_small, n_small, n_small) / rate[t_all]  # s per call, its median
    print(f"In the sweep, n={n_small} {on(t_all)} ran at {rate[t_all] / rate[1]:.2g}x its one-thread rate"
          + ("." if rate[t_all] >= rate[1] else
             f": {si(call_s, 's')} per call, far beyond the microseconds of waking the pool's threads; the call "
             "waits at a barrier for its slowest thread, and a thread whose core another process holds waits "
             "for a slice of the scheduler's time." if call_s > 1e-3 else
             f": {si(call_s, 's')} per call; waking the pool's threads and waiting at the barrier for the "
             "slowest cost more than the work the extra threads took over."))
work_s = roofline.matmul_flops(n_small, n_small, n_small) / limits.peak_flops("float32", 1)  # s per call
viz.verdict(Prediction(f"fp32 rate at n={n_small} over n={n_large}, on 1 thread", "a call's fixed costs, "
                       "microseconds, are small against its arithmetic", low=0.5, unit="x"), small_large, explain={
    "held": f"At the one-thread ceiling n={n_small} computes for {si(work_s, 's')} per call; "
            + (f"were all the gap fixed cost, it would be {si(work_s / small_large.value - work_s, 's')} per call."
               if small_large.value < 1 else "no fixed cost shows against the larger size's rate."),
    "below": f"Against the {si(work_s, 's')} n={n_small} computes for per call at the one-thread ceiling, its fixed "
             "costs weighed more than the model's microseconds."})

# %% [markdown]
# ## 3. How fast does memory move?
#
# **Prediction.** A copy of `N` bytes reads `N` and writes `N`: we count `2N` bytes moved, as
# STREAM's Copy kernel does, and `3N` for `x + y` (STREAM's Add); nccl-tests counts differently
# (its algbw is the buffer's size over the time). Buffers that fit in the last-level cache should
# copy faster than those that stream from DRAM.
#
# **Measurement.** The DRAM ceiling is measured on arrays sized by STREAM's rule, at least 4x the
# last-level cache the OS reports, but capped at 1 GiB (256 MiB in QUICK runs: a virtual machine
# can report its host's whole L3, and then the cap leaves them under 4x; the line after the
# plot prints the multiple, and the arrays against the cache the sweep shows): the best copy of that size, or an `x + y` of it credited at most 9/8 of that
# copy's rate (section 4 says why). The cache ceiling is the best copy whose buffers fit in half
# the cache. Every buffer is written before it is timed (a page's first write faults: that is
# allocation, not bandwidth). To judge the prediction, the cache ceiling's buffer and the
# smallest DRAM-sized one are copied again in alternation on the same bytes
# (`perfkit.sizing.copy_ratio`), on **one thread**: on several, each of the hundreds of small
# calls would wait at a barrier for its slowest thread. Even a cache that held none of the buffer
# leaves each small copy streaming at DRAM's rate plus one call's fixed cost, so the ratio cannot
# fall below `perfkit.ceilings.copy_ratio_floor` (just under 1x): below it the run reads
# *disturbed*. What counts as "in cache" later is read off the sweep
# (`perfkit.ceilings.cached_copy_bytes`: the largest buffer whose median copy kept half the cache
# ceiling), since the OS can report a host's cache, not this process's.

# %%
vm.plot_copy_sweep(limits)
plt.show()
if limits.cache_bytes_per_s:
    cached, dram = vm.cache_and_dram_points(limits)
    in_cache = sizing.copy_ratio(cached.nbytes, dram.nbytes, device=DEVICE, threads=1)  # 1: no barrier per call
    floor = ceilings.copy_ratio_floor(limits, cached.nbytes)  # were the cache to hold none of the buffer
    print(f"copy of {si(cached.nbytes, 'B')} over {si(dram.nbytes, 'B')} on 1 thread, the same bytes in alternation: "
          f"{in_cache.text('x')}")
    one = {p.nbytes: p.bytes_per_s for p in limits.copy_points if p.op == "copy" and p.threads == 1}
    rate = {p.nbytes: one.get(p.nbytes, p.bytes_per_s) for p in (cached, dram)}  # B/s: the sweep's medians
    sweep_said = (f"The sweep's medians{' on 1 thread' * (cached.nbytes in one and dram.nbytes in one)}: "
                  f"{si(cached.nbytes, 'B')} copies at {si(rate[cached.nbytes], 'B/s')}, {si(dram.nbytes, 'B')} at "
                  f"{si(rate[dram.nbytes], 'B/s')} ({rate[cached.nbytes] / rate[dram.nbytes]:.2g}x)")
    viz.verdict(Prediction("copy rate in cache over DRAM, on 1 thread", "the caches are closer to the cores than DRAM",
                           low=1.0, unit="x", physical=(floor, None)), in_cache, explain={
        "held": f"{sweep_said}." + in_cache.beside(rate[cached.nbytes] / rate[dram.nbytes], "the sweep's ratio"),
        "below": f"{sweep_said}; the machine now: {machine_text()}. The figure is above the {floor:.2f}x a copy keeps "
                 "even when the cache holds none of its buffer: this run's small copies gained nothing from the cache, "
                 "and it does not measure what evicted them.",
        "disturbed": f"{sweep_said}. Not even a cache that held none of the buffer explains a figure below "
                     f"{floor:.2f}x: something other than the memory slowed the many small calls."})
print("\n".join(line for line in vm.source_lines(limits) if "bandwidth" in line))
fit = ceilings.cached_copy_bytes(limits)  # bytes per buffer: the cache these copies really saw
cache_bytes = 2 * fit if fit else (limits.llc_bytes or 0) // 2  # counted bytes (read + written) it holds
print(vm.cache_sentence(limits))
print(vm.dram_size_sentence(limits))

# %% [markdown]
# **Reading the plot.** On one thread the model has the curve step down from the small caches to DRAM. On
# all cores a busy machine can bend it far lower at middle sizes; the next cell says whether it
# did here, and why.

# %%
print(vm.threads_sentence(limits) or "One thread count only: nothing to compare.")
one = [p for p in limits.copy_points if p.op == "copy" and p.threads == min(q.threads for q in limits.copy_points)]
first, best_small = one[0], max(one[1:], key=lambda p: p.bytes_per_s)
fastest = max(one, key=lambda p: p.bytes_per_s)  # the fastest copy on these threads, by its median
fixed_s = max(0.0, first.seconds - 2 * first.nbytes / fastest.bytes_per_s)
print(f"{on(first.threads).capitalize()} the smallest buffer ({si(first.nbytes, 'B')}) took "
      f"{si(first.seconds, 's')} per copy; at the fastest copy rate on the same thread count "
      f"({si(fastest.bytes_per_s, 'B/s')}, {si(fastest.nbytes, 'B')} buffers, medians) its bytes take "
      f"{si(2 * first.nbytes / fastest.bytes_per_s, 's')}, so about {si(fixed_s, 's')} is the fixed cost of one "
      f"call (dispatch, the call's setup): {fixed_s / first.seconds:.0%} of its time"
      + (f", which is why it reads as slower than the {si(best_small.nbytes, 'B')} buffer."
         if first.bytes_per_s < best_small.bytes_per_s else "."))

# %% [markdown]
# **Host to device** (GPU only). Data reaches a GPU over PCIe or NVLink-C2C; pinned
# (page-locked) host memory lets the copy engine read it directly. On a CPU-only machine this
# cell says so and skips.

# %%
if limits.h2d_bytes_per_s is None:
    print("No CUDA device: host-to-device bandwidth is not measured (skipped on CPU).")
else:
    print(f"pinned host -> device: {si(limits.h2d_bytes_per_s, 'B/s')}")

# %% [markdown]
# ## 4. The roofline: both ceilings in one picture
#
# An operation with intensity `I` FLOP/byte cannot run faster than `min(peak FLOP/s, I ×
# bandwidth)`. The **ridge point** `peak / bandwidth` separates memory-bound operations (left:
# more compute units would not help) from compute-bound ones (right). Three real operations,
# measured on the cores other processes leave free, placed on the roofline of those threads:
#
# * `x + y` on fp32 vectors of the sweep's DRAM size: 1 FLOP per 12 bytes (two reads, one
#   write), timed in alternation with a copy of the same buffers;
# * a `(4096, 256) @ (256, 256)` fp32 matmul, a linear layer at batch 4096;
# * the fastest square fp32 matmul of section 2 on the same threads.
#
# An operation whose counted bytes fit in what the copy sweep showed cached is held against the
# cache's bandwidth, the others against DRAM's. Each is held against its roof with
# `perfkit.ceilings.observe`: a rate above the roof raises it, and the line says by how much.
# These roofs are this run's ceilings; section 6 adopts the limits file's, which an earlier run
# may have set higher, and against which the same rate is then a smaller share.
#
# **Prediction.** `x + y` streams the same buffers as the copy beside it: its counted bytes per
# second should reach at least half of the fastest copy of that size measured (load slows a
# median, but not by half on a machine that leaves a core free); its share of the DRAM roof is
# context only, since an `x + y` may have set that roof. The linear layer is compute-bound, and
# the sweep timed this very shape: it should reach at least half of its roof. The square matmul
# is context, with no verdict: its point is the sweep's median for that size, its roof the
# fastest tenth of the best round of the fastest shape (or a faster later run), so it sits at or
# under the roof, by what separates a median from the fastest runs of any shape: where this shape
# set the ceiling on a quiet machine that gap can vanish at the printed precision (100 %). Where an operation's
# own run raised its roof, its share's upper end is 1 by construction, and its verdict says so.

# %%
threads = sizing.timing_threads()  # the cores other processes leave free
add_bytes = next((p.nbytes for p in limits.copy_points if p.op == "add"), limits.dram_nbytes or 2**29)
n_vec = add_bytes // 4  # fp32 elements per array: the size of the sweep's x + y
x, y = torch.rand(n_vec, device=DEVICE), torch.rand(n_vec, device=DEVICE)
out = torch.empty_like(x)
a, w = torch.randn(4096, 256, device=DEVICE), torch.randn(256, 256, device=DEVICE)
o = torch.empty(4096, 256, device=DEVICE)
with sizing.pinned_threads(threads):  # x + y beside a copy of the same buffers: one load weighs on both
    cp, add = timing.interleaved([lambda: out.copy_(x), lambda: torch.add(x, y, out=out)], warmup=1, repeat=7,
                                 device=DEVICE)
    lin = timing.benchmark(lambda: torch.mm(a, w, out=o), warmup=2, repeat=10, device=DEVICE)
lin1 = None  # the same call on one thread: what the extra threads add or cost (for the verdict below)
if threads > 1 and DEVICE.type == "cpu":
    with sizing.pinned_threads(1):
        lin1 = timing.benchmark(lambda: torch.mm(a, w, out=o), warmup=2, repeat=10, device=DEVICE)
squares = [p for p in limits.matmul_points if p.dtype == "float32"]
best = max([p for p in squares if p.threads in (threads, 0)] or squares,
           key=lambda p: p.flops_per_s)  # the fastest square on these threads, by its median
ops = [  # (label, FLOPs, bytes, seconds: the median and its interval, threads)
    ("x + y", n_vec, 3 * 4 * n_vec, stats.median_interval(add.times_s), threads),
    ("linear 4096x256x256", roofline.matmul_flops(4096, 256, 256), roofline.matmul_bytes(4096, 256, 256),
     stats.median_interval(lin.times_s), threads),
    (f"matmul n={best.n}", roofline.matmul_flops(best.n, best.n, best.n), roofline.matmul_bytes(best.n, best.n, best.n),
     stats.exact(best.seconds, "the sweep's median"), best.threads or None),
]
rows, share_of_roof, own_roof = [], {}, {}  # own_roof: label -> the observation where its own run raised its roof
for label, flops, nbytes, est, t in ops:
    near = "cache" if nbytes <= cache_bytes else "dram"  # the cache the copy sweep showed
    memory = roofline.bound(flops / nbytes, limits.peak_flops("float32", t), ceilings.ceiling(limits, near)) == "memory"
    # the fastest plausible median (the interval's lower time) must fit under the roof; an order-statistic
    # interval's end is one of the runs, so that rate was reached
    obs = ceilings.observe(limits, near if memory else "float32", (nbytes if memory else flops) / est.low,
                           f"{label} {on(t)} (one of its runs, the fast end of its median's interval)",
                           threads=None if memory else t)
    limits = obs.limits
    own_roof.update({label: obs} if obs.raised else {})
    roof = roofline.attainable_flops(flops / nbytes, limits.peak_flops("float32", t), ceilings.ceiling(limits, near))
    share_of_roof[label] = est.inverse().scaled(flops / roof)  # of the median
    rows.append((label, flops / nbytes, share_of_roof[label].value * roof))
    print(f"{label:>22}: {flops / nbytes:7.2f} FLOP/B, measured {si(rows[-1][2], 'FLOP/s'):>14}, roofline "
          f"{si(roof, 'FLOP/s'):>14} {on(t)} -> {share_of_roof[label].value:5.0%} of this run's roof "
          f"({'memory' if memory else 'compute'}-bound, bytes from {'the cache' if near == 'cache' else 'DRAM'})"
          + (f"; {obs.said(show_rise=True)}" if obs.raised else ""))
for label, o in own_roof.items():  # beaten by far: the sweep's best round was no uncontested rate
    if o.after > 1.1 * o.before:
        print(f"{label} beat the sweep's ceiling by {o.after / o.before - 1:.0%} minutes after it: the sweep's rounds "
              "ran below what this machine can do (the machine now: " + machine_text() + "), and the ceiling "
              "is now this run's faster figure.")

# %%
roofs = {f"float32 {on(threads)} (the shares' roof)": limits.peak_flops("float32", threads)}
if limits.peak_flops("float32") != limits.peak_flops("float32", threads):
    roofs[f"float32 {on(limits.threads)}"] = limits.peak_flops("float32")
viz.plot_roofline(roofs, limits.copy_bytes_per_s, rows, title="Roofline: measured ceilings, DRAM's roof" + "".join(
    f"; {label} held against the cache's roof (that roof not drawn)" for label, _, nbytes, _, _ in ops if nbytes <= cache_bytes))
plt.show()

# %% [markdown]
# The roof counts the bytes a program asks for, not those the memory moves: on a CPU an ordinary
# store first reads the cache line it writes (write-allocate; non-temporal "streaming" stores skip
# that read), so a copy really moves 3 bytes for the 2 counted and `x + y` 4 for its 3. At the same
# real bandwidth `x + y`'s counted rate is `(3/2) / (4/3) = 9/8` of the copy's. That is why the
# DRAM ceiling takes the better of the two, and why it credits `x + y` with at most 9/8 of the
# fastest copy of the same buffers (`perfkit.hw.credited_dram`; the limits file holds to it too,
# so one fast `x + y` run cannot lift the DRAM roof past what a copy showed). The copy and `x + y`
# timed in alternation above give the ratio on this machine. Where one of those copies ran faster
# than the sweep's, the limits file records it (`perfkit.ceilings.observe_copy`); notebook 02
# divides by the file's fastest copy of DRAM-sized buffers (section 6 prints it).

# %%
add_over_copy = stats.median_ratio(cp.times_s, add.times_s).scaled(3 / 2)  # (3N / t_add) / (2N / t_copy), paired
wa_side, no_wa = add_over_copy.clear_of(hw.ADD_OVER_COPY, "x"), add_over_copy.clear_of(1.0, "x")
print(f"x + y's counted bytes per second over a copy's, {si(add_bytes, 'B')} buffers {on(threads)}: "
      f"{add_over_copy.text('x')}; write-allocate alone would give {hw.ADD_OVER_COPY}x, none 1x: "
      + ("both lie inside the interval, so this run cannot tell them apart." if not wa_side and not no_wa else
         f"{hw.ADD_OVER_COPY}x inside the interval{add_over_copy.on_end(hw.ADD_OVER_COPY, 'x')}, 1x outside it."
         if not wa_side else f"1x inside the interval, {hw.ADD_OVER_COPY}x above it: no write-allocate gain shows "
         "(stores that skip the read, or a cost x + y pays that the copy does not); this run does not measure "
         "which." if not no_wa else
         "both below the interval: x + y gained more than write-allocate explains, and this run does not "
         "measure what else helps it." if wa_side == "above" else
         "the interval lies between them: x + y gained on a copy, but less than write-allocate alone gives."
         if no_wa == "above" else
         "both above the interval: x + y ran slower per counted byte than a copy; this run does not measure "
         "why."))
same_size = [p for p in limits.copy_points if p.op == "copy" and p.nbytes == add_bytes]
sweep_copy = max([p for p in same_size if p.threads == threads] or same_size, key=lambda p: p.best_bytes_per_s)
run_copy = 2 * add_bytes / cp.median_s  # B/s counted: this run's median copy, beside x + y
limits = ceilings.observe_copy(limits, 2 * add_bytes / stats.median_interval(cp.times_s).low,  # a run's rate
                               f"copy of {add_bytes:,} B buffers {on(threads)} timed beside x + y (one of its runs, "
                               "the fast end of its median's interval)", threads=threads)
copy_rate, copy_src = ceilings.dram_copy(limits)  # the fastest copy of these buffers, now
add_vs_copy = stats.median_interval(add.times_s).inverse().scaled(3 * add_bytes / copy_rate)
print(f"context: x + y reached {share_of_roof['x + y'].value:.0%} of the DRAM roof, set by {limits.sources['dram']}")
apart = sweep_copy.best_bytes_per_s / run_copy  # the sweep's fastest tenth over this run's median copy
filed = hw.MachineLimits.from_json(hw.save_limits(limits).read_text())  # the limits file, this run merged in
file_copy = max((p.best_bytes_per_s for p in filed.copy_points
                 if (p.op, p.nbytes, p.threads) == ("copy", add_bytes, threads)),
                default=copy_rate)  # B/s counted: the fastest such copy any run on this machine measured
beside = ("" if file_copy <= copy_rate else
          f" The limits file holds a faster copy of the same buffers {on(threads)} from an earlier run, "
          f"{si(file_copy, 'B/s')}: "
          f"against it x + y's median is {add_vs_copy.value * copy_rate / file_copy:.2f}x.")
viz.verdict(Prediction("x + y's counted bytes/s over the fastest copy's of that size",
                       "both stream the same buffers from DRAM", low=0.5, unit="x", physical=(0, None)),
            add_vs_copy, explain={
    "held": f"x + y's median reached {add_vs_copy.value:.2f}x this run's fastest copy of {si(add_bytes, 'B')} buffers, "
            f"{si(copy_rate, 'B/s')} ({copy_src}; the interval is x + y's repeats').{beside} The sweep's fastest tenth of its "
            f"best round of that copy, {si(sweep_copy.best_bytes_per_s, 'B/s')}, was {apart:.2f}x this run's median "
            f"copy timed beside x + y ({si(run_copy, 'B/s')})"
            + (": the sweep's rounds of it were slowed." if apart < 1 else ".")
            + (" This run's limits now hold the faster copy in its place." if copy_rate > sweep_copy.best_bytes_per_s
               else ""),
    "below": f"Below half of the copy's {si(copy_rate, 'B/s')}: this add ran {on(threads)}, its "
             f"repeats spread {add.p10_s * 1e3:.0f}-{add.p90_s * 1e3:.0f} ms (p10-p90)."})
square = share_of_roof[f"matmul n={best.n}"].value
lin_sweep = max((p.best_flops_per_s for p in limits.shape_points if p.mnk == (4096, 256, 256) and p.threads == threads),
                default=None)
lin_cause = (f"the square n={best.n} reached {square:.0%} of its roof, and the fastest tenth of the sweep's best "
             "round of this very "
             + (f"shape {on(threads)} {lin_sweep / limits.peak_flops('float32', threads):.0%}" if lin_sweep else
                "shape was not timed on these threads")
             + (": the same call ran slower here than in the sweep, and this run does not measure what slowed it"
                if lin_sweep and share_of_roof["linear 4096x256x256"].value < 0.9 * lin_sweep
                / limits.peak_flops("float32", threads) else ""))
lin_own = own_roof.get("linear 4096x256x256")  # its own fastest run raised the roof it is held against
viz.verdict(Prediction("the linear layer's FLOP/s over its roof", "compute-bound; the sweep timed this shape",
                       low=0.5, physical=(0, 1)), share_of_roof["linear 4096x256x256"], explain={
    "held": f"It reaches {share_of_roof['linear 4096x256x256'].value:.0%} of its roof: {lin_cause}."
            + (f" Its own fastest run raised that roof from the sweep's {si(lin_own.before, 'FLOP/s')} to "
               f"{si(lin_own.after, 'FLOP/s')} ({lin_own.after / lin_own.before - 1:.1%}), so the interval's upper "
               "end, 1, compares the layer with itself." if lin_own and lin_own.kind == "float32" else "")
            + " Module 06 returns to what a matrix's shape costs.",
    "below": f"Below half of its roof: {lin_cause}; its repeats spread {lin.p10_s * 1e3:.1f}-"
             f"{lin.p90_s * 1e3:.1f} ms (p10-p90)" + (
                 "." if lin1 is None else
                 f"; on 1 thread the same call took {lin1.median_s * 1e3:.2f} ms against {lin.median_s * 1e3:.2f} ms "
                 + (f"on {threads}: the extra threads made this shape slower, so its time here is lost to running "
                    "it across threads (their split and wake-ups), not to its arithmetic." if lin1.median_s < lin.median_s
                    else f"on {threads}: the threads did speed it up, so this run does not show what held it "
                    "below the sweep's round."))})

# %% [markdown]
# ## 5. Try it: where does a matmul of size n sit?
#
# Move the slider (the widget starts in float32): small matmuls are memory-bound (left of the
# ridge), large ones compute-bound. The point drawn is the model's, the roof at that intensity, not
# a measurement: the title names the ceiling that roof is, where it came from, and what this run's
# sweep measured at that size when it timed it. An emulated bf16's roof is so low that its ridge
# sits far left, and its ceiling comes from whichever shape ran fastest, so a square size can run
# well below it. The widget calls `perfkit.hw.matmul_roofline`, a pure function of the limits
# file's ceilings (this run merged in: what every later notebook divides by; section 6 prints
# them). A static plot of the widget's default setting follows for readers of the rendered page
# (run headless, as in CI, the widget cell itself shows that figure, once).

# %%
# NBVAL_IGNORE_OUTPUT
saved = hw.MachineLimits.from_json(hw.save_limits(limits).read_text())  # the limits file, this run merged in
spec = vm.matmul_roofline_widget(saved, measured=swept)  # the roofs: the file's; the rates: this sweep's
viz.build_widget(spec)

# %%
if os.environ.get(viz.HEADLESS_ENV) != "1":  # headless (CI, the book), the widget cell already drew it
    fig = spec.fn(**spec.defaults())  # the static plot of the default setting

# %% [markdown]
# ## 6. How later modules use these limits
#
# Every later notebook loads the same ceilings (`perfkit.hw.cached_limits()` reads the file
# section 5 saved; if it is missing, from another machine, or measured another way, it measures
# again). The file keeps each ceiling's highest figure measured on this machine, each with its
# own source, and each sweep point at its best run. Load slows a run, so the highest of several
# runs is nearer what the machine can do than their median; it is also their luckiest (a quiet
# moment, a timer's error), so a ceiling errs high, and shares against it read low, never above
# 100 %. A ceiling only rises, and from whatever operation beat it (a convolution can set the
# fp32 matmul ceiling, another shape the bf16 one): a share against it depends on the file's
# history as well as on the step, and shares from two machines compare only as far as their
# files' histories do. Two rules bound what the file keeps: a change in how perfkit measures (`perfkit.hw.METHOD`)
# replaces the file instead of merging into it, and the DRAM ceiling credits `x + y` at most 9/8
# of the file's fastest copy of the same buffers (section 4). A DRAM figure from larger buffers
# replaces one from smaller (a QUICK run's 256 MiB buffers can partly sit in a large cache). A
# later notebook that beats a ceiling raises it the same way (`perfkit.ceilings.observe`) and
# prints where. The cell below prints what the file holds and whose each figure is; from there
# on this notebook divides by the file's ceilings, as every later one does. Two shares of the
# compute ceiling are in use, and they differ in what they count:
#
# * **MFU** (model FLOPs utilisation, after PaLM; computed below for an MLP step, used from module 06
#   on): the FLOPs the *model* needs by formula, `6 × parameters` per sample or token (2 per weight for the forward matmul,
#   4 for the two backward ones: the gradient of the weights and that of the layer's input), plus
#   attention's, per second of step;
# * **HFU** (hardware FLOPs utilisation): the FLOPs the step *really runs*, counted by PyTorch's
#   `FlopCounterMode`, per second of step. It counts the operators in its registry (matmuls,
#   convolutions, attention), not elementwise ones (ReLU, the loss, gradient accumulation): the
#   matmul FLOPs the step runs, which is what a matmul ceiling can bound.
#
# Both are divided here by the **measured** fp32 ceiling of the threads the step ran on, not by a
# data sheet's peak as PaLM divides: a measured ceiling is lower, so these shares read higher than
# PaLM's MFU of the same step and cannot be compared with published MFU; quote one as "MFU against
# the measured ceiling", with its thread count. The HFU cell at the end of this section also prints
# the share against this run's own ceiling where the file's is higher.
#
# The file's "matmul" ceilings are the fastest FLOP rate of their dtype and threads that any of the
# course's counted work reached: a convolution, or a later module's bf16 step (its matmuls replayed
# alone), can raise one, and the source line names it. For an emulated dtype the rate depends on
# the shape, so its ceiling in the file can sit well above this run's square sweep.
#
# They part where a step runs FLOPs the formula does not count (recomputed activations: HFU
# above MFU), or skips FLOPs it counts: autograd computes no gradient nobody needs, and the
# input of a network's first layer is data. **Prediction 1:** for a two-layer MLP without biases,
# the counted FLOPs are the rule's exactly when its input is an activation that needs a
# gradient (the MLP as a block inside a deeper network, as every transformer block is), and
# 5/6 of it when its input is data (one of the six matmuls never runs).
#
# **Prediction 2.** Those six matmuls do all the step's FLOPs; the ReLU, the loss and the
# gradient accumulation are elementwise, memory-bound and small. So the step should take at
# most twice as long as its six matmuls run alone (a bound: how much of the rest shows is measured). The step (with an
# activation input) and the six matmuls alone, at the step's shapes, are timed in alternation on
# the cores other processes leave free, so that the load of the moment weighs on both alike:
# on a busy machine an OpenMP thread that loses its core stalls the others at every barrier,
# which can slow a step tens of times. HFU and MFU are then held against those threads' measured ceiling.

# %%
from torch.utils.flop_counter import FlopCounterMode

run_limits = limits  # this run's ceilings, raised where section 4 beat them; `saved`: the file (section 5)
print("limits merged into this machine's limits file (perfkit.hw.default_limits_path(); $PERFKIT_CACHE moves it); "
      "what it holds now, and what every later notebook divides by:")
print("\n".join(vm.cache_lines(run_limits, saved)))
if "bfloat16" in run_limits.matmul_flops:  # an emulated dtype's ceiling depends on the shape that set it
    bf_run, bf_file = (lim.peak_flops("bfloat16") / lim.peak_flops("float32") for lim in (run_limits, saved))
    if not 0.8 < bf_file / bf_run < 1.25:
        print(f"bf16 over fp32: {bf_file:.2g}x in the file against {bf_run:.2g}x in this run's sweep (section 2): the "
              f"file's bf16 ceiling came from {saved.sources.get('bfloat16', 'an earlier run')}")
limits = saved  # from here on, the shares are of the cached ceilings, as in every later notebook

batch, width = (256, 512) if QUICK else (1024, 1024)
mlp = torch.nn.Sequential(torch.nn.Linear(width, width, bias=False), torch.nn.ReLU(),
                          torch.nn.Linear(width, width, bias=False)).to(DEVICE)
inputs = {"data": torch.randn(batch, width, device=DEVICE),  # (B, C): no gradient needed
          "activation": torch.randn(batch, width, device=DEVICE, requires_grad=True)}  # (B, C)
def step(inp):
    mlp(inp).square().mean().backward()
xa, wt, dy = inputs["activation"].detach(), mlp[0].weight.detach(), torch.randn(batch, width, device=DEVICE)
def six_matmuls():  # per layer: x @ W^T forward, dY @ W (input gradient), dY^T @ x (weight gradient)
    for _ in range(2):
        torch.mm(xa, wt.t()), torch.mm(dy, wt), torch.mm(dy.t(), xa)
with sizing.pinned_threads(threads):
    m, mm = timing.interleaved([lambda: step(inputs["activation"]), six_matmuls], warmup=2, repeat=10,
                               device=DEVICE)

# %%
rule, counted = 6 * sum(p.numel() for p in mlp.parameters()) * batch, {}
for name, inp in inputs.items():
    with FlopCounterMode(display=False) as counter:
        step(inp)
    counted[name] = counter.get_total_flops()
print(f"FLOPs per step: rule 6 x params x batch = {si(rule, 'FLOP')}; counted with an activation input "
      f"{si(counted['activation'], 'FLOP')} ({counted['activation'] / rule:.0%} of the rule), with a data input "
      f"{si(counted['data'], 'FLOP')} ({counted['data'] / rule:.0%})")
viz.verdict(Prediction("counted FLOPs over the 6N rule, the input an activation", "every matmul's gradients run",
                       value=1.0, rel_tol=0.01), counted["activation"] / rule)
viz.verdict(Prediction("counted FLOPs over the 6N rule, the input data", "autograd skips the first layer's input "
                       "gradient", value=5 / 6, rel_tol=0.01), counted["data"] / rule)

# %%
over = stats.median_ratio(m.times_s, mm.times_s)  # the step's time over its six matmuls', paired rounds
other_ms = (m.median_s - mm.median_s) * 1e3  # ms: the step beyond its matmuls
medians = f"the six matmuls' median {mm.median_s * 1e3:.1f} ms, the step's {m.median_s * 1e3:.1f} ms"
held = (f"With {medians}, the ReLU, the loss, autograd and the gradient accumulation took about {other_ms:.1f} ms "
        f"more (the ratio's interval is above 1x)." if over.clear_of(1.0, "x") == "above" else
        f"The step ran faster than its six matmuls alone ({medians}; the ratio's interval is below 1x): autograd "
        "lays its weight-gradient matmuls out another way (which operand is transposed), and one layout can run "
        "faster than another." if over.clear_of(1.0, "x") == "below" else
        f"With {medians}, the {other_ms:+.1f} ms between them is not resolved: the paired ratio's "
        f"{over.describe('x')}, includes 1x, so what the rest of the step costs is within the noise.")
viz.verdict(Prediction("the MLP step's time over its six matmuls' alone", "the matmuls do all its FLOPs; the "
                       "elementwise rest is small", high=2.0, unit="x", physical=(0, None)), over, explain={
    "held": held + over.beside(m.median_s / mm.median_s),
    "above": f"Beyond its matmuls' {mm.median_s * 1e3:.1f} ms the step took {other_ms:.1f} ms more: the ReLU, the "
             "loss, autograd's bookkeeping and the gradient accumulation weigh more than their FLOPs say."})

# %%
for label, times, flops in (("the six matmuls alone", mm.times_s, rule), ("the MLP step", m.times_s, counted["activation"])):
    est = stats.median_interval(times)  # s
    obs = ceilings.observe(limits, "float32", flops / est.low, f"{label} {on(threads)}", threads=threads)
    limits = obs.limits
    if obs.raised:
        print(obs.said(show_rise=True))
        hw.save_limits(limits)  # a raised ceiling is kept, as section 6's text says
peak = limits.peak_flops("float32", threads)  # FLOP/s of these threads
hfu_est = stats.median_interval(m.times_s).inverse().scaled(counted["activation"] / peak)  # of the median step
hfu, mfu = hfu_est.value, rule / m.median_s / peak
print(f"MLP step {on(threads)}: {m}; {si(counted['activation'] / m.median_s, 'FLOP/s')} run: HFU "
      f"{hfu_est.scaled(100).text('%')} of the limits file's fp32 ceiling {on(threads)}, "
      f"{si(peak, 'FLOP/s')}; its six matmuls alone ran at {rule / mm.median_s / peak:.0%} of it")
run_peak = run_limits.peak_flops("float32", threads)  # FLOP/s: this run's own ceiling, before the merge
if run_peak < peak:
    print(f"against this run's own ceiling {on(threads)} ({si(run_peak, 'FLOP/s')}, below the file's) the same "
          f"step's HFU is {counted['activation'] / m.median_s / run_peak:.0%}")
if peak != limits.peak_flops("float32"):
    print(f"against the all-cores ceiling ({si(limits.peak_flops('float32'), 'FLOP/s')} {on(limits.threads)}) the "
          f"same step is {counted['activation'] / m.median_s / limits.peak_flops('float32'):.0%}: a share means "
          "nothing without its ceiling")
same = abs(mfu - hfu) < 0.005
print(f"MFU of the measured ceiling (the rule's FLOPs over it; PaLM divides by a data-sheet peak): {mfu:.0%}"
      + (", the same as HFU, as nothing is recomputed and every gradient the rule counts runs" if same else
         f", against HFU's {hfu:.0%}") + f"; with a data input the rule would credit the step with "
      f"{rule / counted['data'] - 1:.0%} more FLOPs than it ran. Module 01 breaks a training step into its phases.")

# %%
viz.show_headlines({
    "fp32 matmul ceiling (limits file), all cores / 1 thread": f"{si(limits.peak_flops('float32'), 'FLOP/s')} / "
                                         f"{si(limits.peak_flops('float32', 1), 'FLOP/s')} (this run measured "
                                         f"{si(run_limits.peak_flops('float32'), 'FLOP/s')} / "
                                         f"{si(run_limits.peak_flops('float32', 1), 'FLOP/s')})",
    "bf16 matmul ceiling (limits file)": f"{si(limits.peak_flops('bfloat16'), 'FLOP/s')} (this run measured "
                                         f"{si(run_limits.peak_flops('bfloat16'), 'FLOP/s')})",
    "DRAM bandwidth ceiling (limits file)": f"{si(limits.copy_bytes_per_s, 'B/s')} ({si(limits.dram_nbytes or 0, 'B')} "
                                            f"buffers; this run's sweep {si(swept.copy_bytes_per_s, 'B/s')}"
                                            + (f", raised to {si(run_limits.copy_bytes_per_s, 'B/s')} by section 4's "
                                               "operations" if run_limits.copy_bytes_per_s > swept.copy_bytes_per_s
                                               else "") + f" on {si(run_limits.dram_nbytes or 0, 'B')})",
    "DRAM-sized copy (limits file; notebook 02's reference)": f"{si(ceilings.dram_copy(limits)[0], 'B/s')} (this run's "
                                                             f"fastest: {si(ceilings.dram_copy(run_limits)[0], 'B/s')})",
    "fp32 ridge point, all cores (limits file / this run's)":
        f"{limits.ridge_point('float32'):.3g} / {run_limits.ridge_point('float32'):.3g} FLOP/B",
    f"MLP step HFU{' (= MFU here)' * same} of the measured fp32 ceiling {on(threads)} (limits file; "
    "not comparable with published MFU, which divides by a data sheet's peak)": f"{hfu:.0%}",
})
