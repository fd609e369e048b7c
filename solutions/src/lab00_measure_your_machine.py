# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 00 · A correct micro-benchmark and the roofline
#
# Graded warm-up for module 00. You will write
#
# 1. `time_it`: a micro-benchmark that warms up, synchronises, repeats and reports the median;
# 2. `matmul_intensity`: FLOPs per byte of a matmul;
# 3. `roofline`: the attainable FLOP/s and whether an operation is memory- or compute-bound;
# 4. `matmul_flops_per_s`: a real measurement with your own `time_it`.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab00_measure_your_machine.ipynb
# ```
#
# The grader runs every cell of this notebook, then checks each function; the failure message
# says what to look at. Do not rename the functions or change their arguments.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import statistics
import time

import torch

from perfkit import hw

# %% [markdown]
# ## Q1 · `time_it(fn, warmup=3, repeat=10, sync=None) -> float`
#
# Return the **median** time of one call of `fn`, in seconds.
#
# * Call `fn` `warmup` times untimed first (caches, lazy initialisation).
# * Then time `repeat` calls **one by one** with `time.perf_counter()`.
# * GPUs run asynchronously: `fn()` may return before its work is done. If `sync` is given,
#   call it once after the warm-up and after *every* timed call, **before** reading the clock,
#   so the time includes the work that `fn` queued. (On a GPU you would pass
#   `torch.cuda.synchronize`.)
# * Return the median, not the mean: one stall must not move the result.

# %%
def time_it(fn, warmup=3, repeat=10, sync=None):
    ### BEGIN SOLUTION
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()  # wait for queued work before reading the clock
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
    ### END SOLUTION


# %%
print(f"sleep(5 ms) measured as {time_it(lambda: time.sleep(0.005)) * 1e3:.2f} ms")


# %% [markdown]
# ## Q2 · `matmul_intensity(m, n, k, bytes_per_element=4) -> float`
#
# Arithmetic intensity, in FLOP/byte, of `(m, k) @ (k, n)`: its FLOPs (one multiply and one
# add per inner-product term) over the minimum bytes it moves (read both inputs once, write the
# output once).

# %%
def matmul_intensity(m, n, k, bytes_per_element=4):
    ### BEGIN SOLUTION
    flops = 2 * m * n * k
    nbytes = (m * k + k * n + m * n) * bytes_per_element
    return flops / nbytes
    ### END SOLUTION


# %%
print(f"1024^3 fp32 matmul: {matmul_intensity(1024, 1024, 1024):.1f} FLOP/byte")


# %% [markdown]
# ## Q3 · `roofline(intensity, peak_flops, bandwidth) -> (float, str)`
#
# Return `(attainable FLOP/s, bound)` where `bound` is `"memory"` when the operation is left of
# the ridge point (`intensity < peak_flops / bandwidth`) and `"compute"` otherwise.

# %%
def roofline(intensity, peak_flops, bandwidth):
    ### BEGIN SOLUTION
    attainable = min(peak_flops, intensity * bandwidth)
    return attainable, ("memory" if intensity < peak_flops / bandwidth else "compute")
    ### END SOLUTION


# %%
print(roofline(0.25, peak_flops=1e11, bandwidth=2e10))


# %% [markdown]
# ## Q4 · `matmul_flops_per_s(n, dtype=torch.float32) -> float`
#
# Measure the FLOP/s of an `(n, n) @ (n, n)` matmul in `dtype` **with your `time_it`**. Create
# the inputs once, outside the timed function.

# %%
def matmul_flops_per_s(n, dtype=torch.float32):
    ### BEGIN SOLUTION
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return 2 * n**3 / time_it(lambda: a @ b, warmup=3, repeat=15)
    ### END SOLUTION


# %%
mine = matmul_flops_per_s(256)
ref = hw.measure_matmul(256, "float32")
print(f"yours: {mine / 1e9:.1f} GFLOP/s, perfkit: {ref.flops_per_s / 1e9:.1f} GFLOP/s")
