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
# do**: "the training step reached 31 % of the matmul ceiling", "the all-reduce moved data at
# 60 % of memory bandwidth". A share needs a ceiling, and a data sheet's ceiling is not yours:
# your laptop's clock, cores, cache and PyTorch build all matter. So we measure the ceilings
# here, once, on the machine you are using:
#
# 1. **compute**: how many floating-point operations per second (FLOP/s) a large matmul
#    reaches, in fp32 and bf16;
# 2. **memory**: how many bytes per second a large copy moves;
# 3. **host to device**: how fast pinned memory reaches the GPU (GPU only).
#
# Then we combine them into a **roofline** (Williams, Waterman and Patterson, 2009): the
# fastest an operation can possibly run, given how many FLOPs it does per byte it moves.
#
# Run the cells from top to bottom. `QUICK = True` (what CI uses) runs smaller sweeps.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import torch

from perfkit import hw, roofline, sizing, stats, timing, viz
from perfkit.verdict import Prediction
from perfkit.viz import machine as vm
from perfkit.viz import si

DEVICE = timing.resolve_device()  # CUDA if present, else CPU
MATMUL_SIZES = [128, 256, 512] if QUICK else [128, 256, 512, 1024, 2048]
if DEVICE.type == "cuda":
    MATMUL_SIZES = [512, 1024, 2048, 4096] if QUICK else [512, 1024, 2048, 4096, 8192]
COPY_SIZES = [2**p for p in range(16, 29, 2)]  # 64 KiB .. 256 MiB per buffer (and one >= 4x the LLC)
print(f"torch {torch.__version__} on {hw.device_name(DEVICE)}")

# %% [markdown]
# ## 1. How many FLOPs does a matmul do, and how many bytes must it move?
#
# **The model.** Multiplying an `(m, k)` matrix by a `(k, n)` one computes `m·n` inner
# products of length `k`: one multiply and one add per term, so `2·m·n·k` FLOPs. At the very
# least it reads both inputs and writes the output once: `(m·k + k·n + m·n)` elements. Their
# ratio is the **arithmetic intensity**, FLOPs per byte. For a square fp32 matmul it is
# `2n³ / (3n²·4) = n/6`: it grows with `n`, which is why big matmuls are the one operation
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
# **Prediction.** Large matmuls should approach a ceiling set by the cores' vector units;
# small ones should fall short, because fixed costs (dispatch, thread start-up, memory
# traffic) weigh more when there is little work: the smallest size should run slower than the
# largest. bf16 halves the bytes per element; whether it
# also doubles FLOP/s depends on the hardware (CPUs with AVX-512 BF16 or AMX and all recent
# GPUs have bf16 instructions; older CPUs emulate it and get slower).
#
# **Measurement.** `perfkit.hw.measure_limits` times each size with `perfkit.timing.benchmark`:
# warm-up calls first, then repeated timed batches, the median reported (a shared machine has
# stalls of milliseconds; the median ignores them). The **ceiling** is the best size's rate
# over its fastest tenth of repetitions: what this machine does when nothing else competes for
# it, which a shared laptop or CI runner rarely grants for a whole sweep. A size whose one call
# would take over a second (extrapolated as `n^3` from the size before) is skipped: the rate has
# flattened long before, and emulated bf16 would spend minutes there.

# %%
limits = hw.measure_limits(quick=QUICK, device=DEVICE, matmul_sizes=MATMUL_SIZES,
                           copy_sizes=COPY_SIZES)
for p in limits.matmul_points:
    print(f"{p.dtype:>9} n={p.n:5d}: {si(p.flops_per_s, 'FLOP/s'):>14}  "
          f"({p.flops_per_s / limits.peak_flops(p.dtype):4.0%} of that dtype's best)")
print("\n".join(vm.skipped_sizes(limits, MATMUL_SIZES)))

# %%
import matplotlib.pyplot as plt

vm.plot_matmul_sweep(limits)
plt.show()

# %% [markdown]
# **Reading the plot.** The curve rises while fixed costs are amortised over more work and
# flattens (or dips, once the matrices outgrow the cache) near the ceiling. The best point is
# the **compute ceiling** used from here on. The bf16/fp32 ratio printed next tells you whether
# this machine has native bf16 arithmetic (a ratio near or above 2), converts bf16 to fp32 for the
# arithmetic (about 0.5), or emulates it (about 0.01: `perfkit.hw.MachineLimits.support`).
#
# The sweep's points were timed seconds apart, so the ratio of two of them has no interval. To
# judge the prediction, the smallest and the largest fp32 sizes are timed again in alternation
# on the **same FLOPs** (the small matmul repeated `(n_large / n_small)³` times per round;
# `perfkit.sizing.matmul_ratio`), with the threads the sweep used, and the ratio of their rates
# gets its 90 % bootstrap interval.

# %%
print(vm.bf16_sentence(limits))
fp32_pts = sorted((p for p in limits.matmul_points if p.dtype == "float32"), key=lambda p: p.n)
small_large = sizing.matmul_ratio(fp32_pts[0].n, fp32_pts[-1].n, device=DEVICE)
print(f"fp32 n={fp32_pts[0].n} over n={fp32_pts[-1].n}, the same FLOPs in alternation: {small_large.value:.3g}x "
      f"({small_large.describe('x')})")
viz.verdict(Prediction(f"fp32 rate at n={fp32_pts[0].n} over n={fp32_pts[-1].n}",
                       "fixed costs per call weigh more when there is little work", high=1.0, unit="x"),
            small_large, explain={
    "above": f"The largest size here ({fp32_pts[-1].n}) already outgrows a cache level"
             + (": the default sizes go further." if QUICK else ".")})

# %% [markdown]
# ## 3. How fast does memory move?
#
# **Prediction.** A copy of `N` bytes reads `N` and writes `N`, so we count `2N` bytes moved,
# as STREAM's Copy kernel does (nccl-tests counts differently: its algbw is the buffer's size
# over the time). Buffers that fit in the last-level cache should copy faster than those that
# stream from DRAM. The DRAM figure is the ceiling that matters for tensors of realistic size,
# and STREAM's rule measures it with arrays at least 4x the last-level cache, so that no level
# of cache holds them: a buffer only twice the cache still partly hits in it and reads as much
# faster than DRAM. `measure_limits` keeps the two ceilings apart; to judge the prediction, the
# fastest buffer whose source and destination fit in half the cache and the smallest DRAM-sized
# one are copied again in alternation on the same bytes (`perfkit.sizing.copy_ratio`), on the
# threads other processes leave free (`perfkit.sizing.timing_threads`): under load, each of the
# many small copies would otherwise wait at its barrier for a thread that lost its core.

# %%
vm.plot_copy_sweep(limits)
plt.show()
if limits.cache_bytes_per_s:
    cached, dram = vm.cache_and_dram_points(limits)
    in_cache = sizing.copy_ratio(cached.nbytes, dram.nbytes, device=DEVICE, threads=sizing.timing_threads())
    print(f"copy of {si(cached.nbytes, 'B')} over {si(dram.nbytes, 'B')}, the same bytes in alternation: "
          f"{in_cache.value:.3g}x ({in_cache.describe('x')})")
    viz.verdict(Prediction("copy rate in cache over DRAM", "the caches are closer to the cores than DRAM",
                           low=1.0, unit="x"), in_cache)
first = limits.copy_points[0]
fixed_s = max(0.0, first.seconds - 2 * first.nbytes / (limits.cache_bytes_per_s or limits.copy_bytes_per_s))
best_cached = max(limits.copy_points[1:], key=lambda p: p.bytes_per_s)
print(f"the smallest buffer ({si(first.nbytes, 'B')}) took {si(first.seconds, 's')} per copy, of which about "
      f"{si(fixed_s, 's')} is the fixed cost of one call (dispatch, synchronisation): "
      f"{fixed_s / first.seconds:.0%} of its time"
      + (f", which is why it reads as slower than the {si(best_cached.nbytes, 'B')} buffer."
         if first.bytes_per_s < best_cached.bytes_per_s else "."))

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
# adding more compute units would not help) from compute-bound ones (right). Below, three real
# operations are measured and placed on the measured roofline:
#
# * `x + y` on large fp32 vectors: 1 FLOP per 12 bytes (two reads, one write);
# * a `(4096, 256) @ (256, 256)` fp32 matmul, a typical linear layer at batch 4096;
# * the best square fp32 matmul from section 2.

# %%
n_vec = (limits.llc_bytes or 2**25)  # fp32 elements: each array 4x the last-level cache (STREAM's rule)
x, y = torch.rand(n_vec, device=DEVICE), torch.rand(n_vec, device=DEVICE)
out = torch.empty_like(x)
add = timing.benchmark(lambda: torch.add(x, y, out=out), warmup=2, repeat=10, device=DEVICE)
a, w = torch.randn(4096, 256, device=DEVICE), torch.randn(256, 256, device=DEVICE)
lin = timing.benchmark(lambda: a @ w, warmup=2, repeat=10, device=DEVICE)
best = max((p for p in limits.matmul_points if p.dtype == "float32"), key=lambda p: p.flops_per_s)
ops = [  # (label, FLOPs, bytes, seconds of each repeat)
    ("x + y", n_vec, 3 * 4 * n_vec, add.times_s),
    ("linear 4096x256x256", roofline.matmul_flops(4096, 256, 256), roofline.matmul_bytes(4096, 256, 256), lin.times_s),
    (f"matmul n={best.n}", roofline.matmul_flops(best.n, best.n, best.n),
     roofline.matmul_bytes(best.n, best.n, best.n), [best.seconds]),
]
rows, share_of_roof = [], {}
for label, flops, nbytes, times in ops:
    intensity, roof = flops / nbytes, limits.attainable(flops / nbytes, "float32")
    share_of_roof[label] = stats.median_interval(times).inverse().scaled(flops / roof)  # of the median
    rows.append((label, intensity, share_of_roof[label].value * roof))
    print(f"{label:>22}: {intensity:7.2f} FLOP/B, measured {si(rows[-1][2], 'FLOP/s'):>14}, "
          f"roofline {si(roof, 'FLOP/s'):>14} -> {share_of_roof[label].value:5.0%} of attainable "
          f"({roofline.bound(intensity, limits.peak_flops(), limits.copy_bytes_per_s)}-bound)")

# %%
viz.plot_roofline(limits.matmul_flops, limits.copy_bytes_per_s, rows)
plt.show()

# %% [markdown]
# **Prediction.** No operation beats the roof. The square matmul sits at or just under it by
# construction: it *defines* the compute ceiling (its median is a little slower than the
# fastest tenth of runs that set the ceiling). `x + y` is far left of the ridge, so memory
# decides its speed: it should reach at least half of its roof (it reads two streams and
# writes a third, where the ceiling was measured with one read and one write). It can also
# read slightly *above* the roof, because the roof counts bytes the program asks for, not
# bytes the memory moves: on a CPU a store first reads the cache line it writes
# (write-allocate), so a copy really moves 3 bytes for the 2 counted and `x + y` 4 for the 3
# counted. At the same real bandwidth, `x + y`'s counted rate can reach `(3/2) / (4/3) = 9/8`
# of the copy ceiling, and no more.

# %%
viz.verdict(Prediction("x + y's FLOP/s over its roof", "memory-bound: bytes over the DRAM ceiling, "
                       "write-allocate traffic", low=0.5, high=9 / 8, physical=(0, None)), share_of_roof["x + y"],
            explain={
    "held": ("Above the counted roof, and within what write-allocate traffic allows: the copy that set the "
             "ceiling moved more bytes than it counted." if share_of_roof["x + y"].value > 1 else
             "Under the roof, as the bytes it must move allow."),
    "above": "Faster than DRAM allows even with write-allocate traffic: part of x, y and the output stayed "
             "in cache between repetitions.",
    "below": "Far below the memory roof: the add's per-call cost and the machine's load weigh more here "
             "than the bytes."})
viz.verdict(Prediction("the linear layer's FLOP/s over its roof", "minimum bytes, measured ceilings",
                       high=1.05, physical=(0, None)), share_of_roof["linear 4096x256x256"], explain={
    "held": f"It reaches {share_of_roof['linear 4096x256x256'].value:.0%} of it: a matrix this thin gives each core "
            "less reuse than the big square one, so the minimum-bytes model is optimistic about its traffic. "
            "Module 06 returns to these gaps (fusion, shapes, MFU).",
    "above": "Above the roof: the ceiling was measured while the machine was busier, or at sizes where this "
             "machine is slower than at this shape."})

# %% [markdown]
# ## 5. Try it: where does a matmul of size n sit?
#
# Move the slider: small matmuls are memory-bound (left of the ridge), large ones
# compute-bound. The widget calls `perfkit.hw.matmul_roofline`, a pure function of the
# measured limits; a static plot of the default follows for readers of the rendered page.

# %%
# NBVAL_IGNORE_OUTPUT
spec = viz.roofline_widget(limits)
viz.build_widget(spec)

# %%
fig = spec.fn(**spec.defaults())  # the static plot of the default setting

# %% [markdown]
# ## 6. How later modules use these limits
#
# Every later notebook loads the same ceilings (`perfkit.hw.cached_limits()` reads the file
# saved below; if it is missing, from another machine, or measured another way, it measures
# again). The file keeps the highest ceilings measured on this machine so far, the same way:
# a busy machine only ever measures slower, so on a shared machine the highest value is the
# best estimate of what it can do, and re-running this notebook on a quiet machine can only
# raise them. That is only right while every measurement is an honest one, which is why a
# change in how perfkit measures (a new `perfkit.hw.METHOD`) replaces the file instead of
# merging into it. Later notebooks
# report their results as a share of these ceilings. Two shares of the compute ceiling are in
# use, and they differ in what they count:
#
# * **MFU** (model FLOPs utilisation, PaLM's definition, used from module 06 on): the FLOPs the
#   *model* needs by formula, `6 × parameters` per sample or token (2 per weight for the forward
#   matmul, 4 for the two backward ones: the gradient of the weights and that of the layer's
#   input), over the step time and the ceiling;
# * **HFU** (hardware FLOPs utilisation): the FLOPs the step *really runs*, counted by PyTorch's
#   `FlopCounterMode`.
#
# Autograd skips what nobody needs: the first layer's input is data, so its gradient is never
# computed. **Prediction:** for this two-layer MLP, the counted FLOPs are 5/6 of the rule (one of
# the six matmuls never runs), so its HFU is 5/6 of its MFU. The step is timed on the cores other
# processes leave free (`perfkit.sizing.timing_threads`) and held against that share of the
# ceiling: on a busy machine an OpenMP thread that loses its core stalls the others at every
# barrier, which can slow a step tens of times.

# %%
from torch.utils.flop_counter import FlopCounterMode

print("limits saved to", hw.save_limits(limits))  # later notebooks: hw.cached_limits()

batch, width = (256, 512) if QUICK else (1024, 1024)
mlp = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                          torch.nn.Linear(width, width)).to(DEVICE)
xb = torch.randn(batch, width, device=DEVICE)
def step():
    mlp(xb).square().mean().backward()
threads = sizing.timing_threads()
with sizing.pinned_threads(threads):
    m = timing.benchmark(step, warmup=2, repeat=10, device=DEVICE)
peak = limits.peak_flops() * (sizing.ceiling_share(threads) if DEVICE.type == "cpu" else 1.0)  # FLOP/s

# %%
with FlopCounterMode(display=False) as counter:
    step()
rule, counted = 6 * sum(p.numel() for p in mlp.parameters()) * batch, counter.get_total_flops()
print(f"FLOPs per step: rule 6 x params x batch = {si(rule, 'FLOP')}, counted {si(counted, 'FLOP')} "
      f"({counted / rule:.0%} of the rule)")
achieved = counted / m.median_s
hfu, mfu = achieved / peak, rule / m.median_s / peak
print(f"MLP step on {threads} thread(s): {m}; {si(achieved, 'FLOP/s')} run = HFU {hfu:.0%}, MFU {mfu:.0%} (of "
      f"the measured fp32 ceiling{f' x {peak / limits.peak_flops():.0%} for these threads' if peak < limits.peak_flops() else ''})")
print(f"MFU is HFU x rule / counted = HFU x {rule / counted:.2f}: it credits the step with the first layer's "
      "input gradient, which never runs" + (", which is how it reads above 100 % while the step itself ran "
                                            f"at {hfu:.0%} of the ceiling." if mfu > 1 >= hfu else "."))
viz.verdict(Prediction("counted FLOPs over the 6N rule", "autograd skips the first layer's input gradient",
                       value=5 / 6, rel_tol=0.01), counted / rule)
hfu_est = stats.median_interval(m.times_s).inverse().scaled(counted / peak)  # of the median step
viz.verdict(Prediction("the MLP step's HFU", "a step cannot run faster than the matmul ceiling",
                       low=0.0, high=1.0, physical=(0, 1.2)), hfu_est, explain={
    "held": (f"The step's repeats spread {m.p10_s * 1e3:.1f}-{m.p90_s * 1e3:.1f} ms (p10-p90), so the load "
             "moved this figure; apart from that, it is b" if m.p90_s > 2 * m.p10_s else "B")
            + "elow 100 % for the reasons section 4 showed: the elementwise ReLU and the loss are memory-bound "
            "and the step's timing is a median while the ceiling is the fastest tenth of runs"
            + (f"; its {width}-wide matmuls are smaller than the best one (n={best.n})" if width < best.n
               else "") + ". Module 01 breaks a training step into its phases to find where the rest of "
            "the time goes.",
    "above": "Above the ceiling: the ceiling was measured while the machine was busier than during this step."})

# %%
viz.show_headlines({
    "fp32 matmul": si(limits.peak_flops("float32"), "FLOP/s"),
    "bf16 matmul": si(limits.peak_flops("bfloat16"), "FLOP/s"),
    "copy bandwidth (DRAM)": si(limits.copy_bytes_per_s, "B/s"),
    "fp32 ridge point": f"{limits.ridge_point('float32'):.3g} FLOP/B",
    "MLP step HFU / MFU": f"{hfu:.0%} / {mfu:.0%}",
})
