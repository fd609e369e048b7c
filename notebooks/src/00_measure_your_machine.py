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

from perfkit import hw, timing, viz
from perfkit.viz import si

DEVICE = timing.resolve_device()  # CUDA if present, else CPU
MATMUL_SIZES = [128, 256, 512] if QUICK else [128, 256, 512, 1024, 2048]
if DEVICE.type == "cuda":
    MATMUL_SIZES = [512, 1024, 2048, 4096] if QUICK else [512, 1024, 2048, 4096, 8192]
COPY_SIZES = [2**p for p in range(16, 29, 2)]  # 64 KiB .. 256 MiB per buffer
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
    flops, nbytes = hw.matmul_flops(n, n, n), hw.matmul_bytes(n, n, n, 4)
    print(f"n={n:5d}: {flops:>16,d} FLOPs, {nbytes:>12,d} bytes (fp32), "
          f"intensity {hw.matmul_intensity(n, n, n, 4):7.1f} FLOP/byte")

# %% [markdown]
# ## 2. How fast does this machine multiply?
#
# **Prediction.** Large matmuls should approach a ceiling set by the cores' vector units;
# small ones should fall short, because fixed costs (dispatch, thread start-up, memory
# traffic) weigh more when there is little work. bf16 halves the bytes per element; whether it
# also doubles FLOP/s depends on the hardware (CPUs with AVX-512 BF16 or AMX and all recent
# GPUs have bf16 instructions; older CPUs emulate it and get slower).
#
# **Measurement.** `perfkit.hw.measure_limits` times each size with `perfkit.timing.benchmark`:
# warm-up calls first, then repeated timed batches, the median reported (a shared machine has
# stalls of milliseconds; the median ignores them). The **ceiling** is the best size's rate
# over its fastest tenth of repetitions: what this machine does when nothing else competes for
# it, which a shared laptop or CI runner rarely grants for a whole sweep.

# %%
limits = hw.measure_limits(quick=QUICK, device=DEVICE, matmul_sizes=MATMUL_SIZES,
                           copy_sizes=COPY_SIZES)
for p in limits.matmul_points:
    print(f"{p.dtype:>9} n={p.n:5d}: {si(p.flops_per_s, 'FLOP/s'):>14}  "
          f"({p.flops_per_s / limits.peak_flops(p.dtype):4.0%} of that dtype's best)")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
for dtype in limits.matmul_flops:
    pts = [p for p in limits.matmul_points if p.dtype == dtype]
    ax.plot([p.n for p in pts], [p.flops_per_s for p in pts], "o-", label=dtype)
ax.set(xscale="log", yscale="log", xlabel="matrix size n (n x n @ n x n)",
       ylabel="FLOP/s (median)", title=f"Matmul throughput on {hw.device_name(DEVICE)}")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# **Reading the plot.** The curve rises while fixed costs are amortised over more work and
# flattens (or dips, once the matrices outgrow the cache) near the ceiling. The best point is
# the **compute ceiling** used from here on. The bf16/fp32 ratio printed next tells you whether
# this machine has native bf16 arithmetic (a ratio near or above 2) or emulates it (below 1).

# %%
bf16_ratio = limits.peak_flops("bfloat16") / limits.peak_flops("float32")
print(f"fp32 ceiling: {si(limits.peak_flops('float32'), 'FLOP/s')}")
print(f"bf16 ceiling: {si(limits.peak_flops('bfloat16'), 'FLOP/s')} "
      f"({bf16_ratio:.2f}x fp32)")

# %% [markdown]
# ## 3. How fast does memory move?
#
# **Prediction.** A copy of `N` bytes reads `N` and writes `N`, so we count `2N` bytes moved
# (STREAM and nccl-tests count the same way). Small buffers fit in the CPU's caches and should
# copy much faster than large ones, which stream from DRAM. The sustained DRAM figure is the
# ceiling that matters for tensors of realistic size, so `measure_limits` takes the best of the
# two largest buffers.

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([p.nbytes for p in limits.copy_points], [p.bytes_per_s for p in limits.copy_points], "o-")
ax.axhline(limits.copy_bytes_per_s, ls="--", c="gray",
           label=f"ceiling used: {si(limits.copy_bytes_per_s, 'B/s')}")
ax.set(xscale="log", yscale="log", xlabel="buffer size (bytes)",
       ylabel="bytes read + written per s", title="Copy bandwidth against buffer size")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()
small = max(p.bytes_per_s for p in limits.copy_points if p.nbytes <= 2**20)
print(f"cache-sized buffers (<= 1 MiB): up to {si(small, 'B/s')}; "
      f"large buffers: {si(limits.copy_bytes_per_s, 'B/s')} "
      f"({small / limits.copy_bytes_per_s:.1f}x slower from DRAM)")

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
n_vec = 2**22 if QUICK else 2**24
x, y = torch.rand(n_vec, device=DEVICE), torch.rand(n_vec, device=DEVICE)
out = torch.empty_like(x)
add = timing.benchmark(lambda: torch.add(x, y, out=out), warmup=2, repeat=10, device=DEVICE)
a, w = torch.randn(4096, 256, device=DEVICE), torch.randn(256, 256, device=DEVICE)
lin = timing.benchmark(lambda: a @ w, warmup=2, repeat=10, device=DEVICE)
best = max((p for p in limits.matmul_points if p.dtype == "float32"), key=lambda p: p.flops_per_s)
ops = [  # (label, FLOPs, bytes, median seconds)
    ("x + y", n_vec, 3 * 4 * n_vec, add.median_s),
    ("linear 4096x256x256", hw.matmul_flops(4096, 256, 256), hw.matmul_bytes(4096, 256, 256), lin.median_s),
    (f"matmul n={best.n}", hw.matmul_flops(best.n, best.n, best.n),
     hw.matmul_bytes(best.n, best.n, best.n), best.seconds),
]
rows = []
for label, flops, nbytes, sec in ops:
    intensity, achieved = flops / nbytes, flops / sec
    roof = limits.attainable(intensity, "float32")
    rows.append((label, intensity, achieved))
    print(f"{label:>22}: {intensity:7.2f} FLOP/B, measured {si(achieved, 'FLOP/s'):>14}, "
          f"roofline {si(roof, 'FLOP/s'):>14} -> {achieved / roof:5.0%} of attainable "
          f"({hw.bound(intensity, limits.peak_flops(), limits.copy_bytes_per_s)}-bound)")

# %%
viz.plot_roofline(limits.matmul_flops, limits.copy_bytes_per_s, rows)
plt.show()

# %% [markdown]
# **The gap between prediction and measurement.** The square matmul sits at or just under the
# roof by construction: it *defines* the compute ceiling (its median is a little slower than the
# fastest tenth of runs that set the ceiling). `x + y` is far left of the ridge, so the
# model says memory decides its speed; its share of the attainable line says how close it
# gets (a single elementwise kernel usually lands somewhat below a pure copy, because it reads
# two streams and writes a third). The linear layer is right of the ridge on paper, yet
# usually below the roof: a matrix this thin gives each core less reuse than the big square
# one, so the "minimum bytes" model is optimistic about its traffic. Module 06 returns to these
# gaps (fusion, shapes, MFU).
#
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
spec.fn(**spec.defaults())

# %% [markdown]
# ## 6. How later modules use these limits
#
# Every later notebook loads the same ceilings (`perfkit.hw.cached_limits()` reads the file
# saved below; if it is missing or from another machine, it measures again). The file keeps the
# highest ceilings measured on this machine so far, since a busy machine only ever measures
# slower; re-running this notebook on a quiet machine can only raise them. Later notebooks
# report their results as a share of these ceilings. For example, **model FLOPs utilisation**
# (MFU) of a training step: the rule of thumb says an MLP's forward and backward cost
# `6 × parameters × batch` FLOPs (2 per weight and sample for the forward matmul, 4 for the two
# backward ones: the gradient of the weights and that of the layer's input). Autograd skips
# what nobody needs, though: the first layer's input is data, so its gradient is never
# computed. PyTorch's `FlopCounterMode` counts the matmuls a step really runs; the achieved
# FLOP/s over the fp32 ceiling is the MFU.

# %%
from torch.utils.flop_counter import FlopCounterMode

print("limits saved to", hw.save_limits(limits))  # later notebooks: hw.cached_limits()

batch, width = (256, 512) if QUICK else (1024, 1024)
mlp = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                          torch.nn.Linear(width, width)).to(DEVICE)
xb = torch.randn(batch, width, device=DEVICE)
def step():
    mlp(xb).square().mean().backward()
m = timing.benchmark(step, warmup=2, repeat=10, device=DEVICE)
params = sum(p.numel() for p in mlp.parameters())
with FlopCounterMode(display=False) as counter:
    step()
rule, counted = 6 * params * batch, counter.get_total_flops()
print(f"FLOPs per step: rule 6 x params x batch = {si(rule, 'FLOP')}, counted {si(counted, 'FLOP')} "
      f"({counted / rule:.0%} of the rule)")
achieved = counted / m.median_s
print(f"MLP step: {m}; {si(achieved, 'FLOP/s')} = "
      f"{limits.share_of_peak(achieved):.0%} MFU (of the measured fp32 ceiling)")

# %% [markdown]
# The counted FLOPs fall short of the rule by the first layer's input gradient: with two
# equal layers that is one of the six matmuls, so the count is 5/6 of the rule; the rule would
# overstate the MFU by 20 %. The MFU is below 100 % for the reasons section 4 showed: the
# elementwise ReLU and the loss are memory-bound, the step's timing is a median while the
# ceiling is the fastest tenth of runs, and in QUICK mode the matmuls are smaller than the best
# one. Module 01 breaks a
# training step into its phases to find where the rest of the time goes.

# %%
viz.show_headlines({
    "fp32 matmul": si(limits.peak_flops("float32"), "FLOP/s"),
    "bf16 matmul": si(limits.peak_flops("bfloat16"), "FLOP/s"),
    "copy bandwidth": si(limits.copy_bytes_per_s, "B/s"),
    "fp32 ridge point": f"{limits.ridge_point('float32'):.3g} FLOP/B",
    "MLP step MFU": f"{limits.share_of_peak(achieved):.0%}",
})
