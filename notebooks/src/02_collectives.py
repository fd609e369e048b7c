# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Collective communication, measured
#
# Data-parallel training keeps one copy of the model per process and, every step, averages
# the gradients of all processes with an **all-reduce**. How long that takes decides whether
# adding processes speeds training up. This notebook measures the collectives on this
# machine, fits a model to them, builds the ring all-reduce from point-to-point messages,
# and builds data parallelism itself three ways (naive, bucketed, overlapped with backward)
# next to PyTorch's `DistributedDataParallel` (DDP).
#
# Every distributed measurement runs in real worker processes started by `torchrun`
# (`perfkit.dist.launch`), with the `gloo` backend on a CPU (NCCL on a GPU). On one machine,
# gloo's "network" is the loopback TCP stack: every byte goes through the kernel's socket
# buffers, so the ceiling to compare with is the machine's memory bandwidth, measured by
# notebook 00.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
SIZES = [2**p for p in range(10, 21, 2)] if QUICK else [2**p for p in range(10, 27, 2)]  # bytes
RING_SIZES = [1, 5, 7, 1001, 100_003]      # elements: none divisible by 2 or 3
REPEAT = 3 if QUICK else 7                 # timed repetitions per point (median)
DP_MODEL = dict(width=256, depth=6) if QUICK else dict(width=512, depth=8)  # MLP
DP_BATCH, DP_CAP_MB = 32, 0.25             # samples per process; bucket cap of section 4
DDP_CAPS = [0.05, 0.25, 1, 25] if QUICK else [0.05, 0.1, 0.25, 1, 4, 25]   # MB
KS = [1, 2, 4] if QUICK else [1, 2, 4, 8]  # micro-batches per all-reduce (section 5)

# %% [markdown]
# The 2-process experiments are started first, in a background thread (each process has to
# import torch, which takes seconds), and collected in section 2. One job runs all of them:
# `perfkit.workers.suite` dispatches to `perfkit.workers.collectives` (sweeps, ring checks)
# and `perfkit.workers.data_parallel` (sections 4 and 5).

# %%
import json
from concurrent.futures import ThreadPoolExecutor

from perfkit import comm, dist

CFG2 = {
    "collectives": {"sweep": {"ops": list(comm.OPS), "sizes": SIZES, "repeat": REPEAT},
                    "ring": {"sizes": RING_SIZES, "repeat": REPEAT}},
    "data_parallel": {"model": DP_MODEL, "batch": DP_BATCH,
                      "compare": {"repeat": REPEAT, "bucket_cap_mb": DP_CAP_MB},
                      "buckets": {"caps_mb": DDP_CAPS, "repeat": REPEAT},
                      "accumulate": {"ks": KS, "repeat": REPEAT}},
}
pool = ThreadPoolExecutor(max_workers=1)
job2 = pool.submit(dist.launch, "perfkit.workers.suite", 2, ["--config", json.dumps(CFG2)],
                   timeout_s=900)

# %%

import matplotlib.pyplot as plt
import torch

from perfkit import hw, viz
from perfkit.viz import comm as vcomm
from perfkit.viz import si

limits = hw.cached_limits(quick=QUICK)  # notebook 00's ceilings (measured now if missing)
memcpy = limits.copy_bytes_per_s / 2     # bytes of a buffer copied once per second
print(f"{limits.name}: copy bandwidth {si(limits.copy_bytes_per_s, 'B/s')} read + written, "
      f"so one buffer is copied at {si(memcpy, 'B/s')}")

# %% [markdown]
# ## 1. What each collective moves
#
# With `n` processes each holding a buffer of `S` bytes:
#
# | collective | result | bytes each process must send (ring algorithm) |
# |---|---|---|
# | all-reduce | every process gets the sum | `2 (n-1)/n · S` |
# | reduce-scatter | process `r` gets the sum of slice `r` | `(n-1)/n · S` |
# | all-gather | every process gets every slice | `(n-1)/n · S` (`S`: the gathered output) |
# | broadcast | every process gets process 0's buffer | `S` (pipelined) |
#
# nccl-tests turns a measured time `t` into two bandwidths: **algbw** `= S / t`, and **busbw**
# `= algbw ×` the factor in the last column over `S`. busbw is what each link actually
# carried, so it is comparable across collectives and process counts, and with the
# hardware's bandwidth. The factors (exact, so CI checks this output):

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
for n in (2, 3, 4, 8, 64):
    print(f"n={n:2d}: " + ", ".join(f"{op} {comm.bus_factor(op, n):.3f}" for op in comm.OPS))

# %% [markdown]
# An all-reduce is a reduce-scatter followed by an all-gather, hence twice the traffic. As `n`
# grows the factor tends to 2: the bytes per process stay constant however many processes
# share the work, the property that makes ring all-reduce scale.
#
# ## 2. How long does a collective take? The alpha-beta model
#
# **Prediction.** The simplest model (Hockney's) charges every message a fixed start-up time
# `alpha` (system calls, waking the peer, synchronisation) plus its size over a bandwidth:
# `t(S) = alpha + S / bandwidth`. Small messages should cost about `alpha` whatever their size
# (latency-bound); large ones should approach the bandwidth (bandwidth-bound); the crossover is
# near `S = alpha × bandwidth`. On loopback TCP each byte is copied into a kernel buffer and
# out again on the other side, so we expect busbw below one memcpy of this machine.
#
# **Measurement.** `perfkit.comm.sweep` times each collective on each size on every process
# (warm-up, then the median of repeated calls, small messages batched) and reports the slowest
# process's median.

# %%
res2 = job2.result()[0]  # rank 0's result (every rank agreed on the slowest median)
points2 = [comm.CollectivePoint(**p) for p in res2["collectives"]["sweep"]]
fits = {op: comm.fit_alpha_beta([p.nbytes for p in points2 if p.op == op],
                                [p.time_s for p in points2 if p.op == op]) for op in comm.OPS}
for p in points2:
    if p.nbytes in (SIZES[0], SIZES[len(SIZES) // 2], SIZES[-1]):
        print(f"{p.op:>14} {si(p.nbytes, 'B'):>8}: {si(p.time_s, 's'):>9}, algbw "
              f"{si(p.algbw, 'B/s'):>10}, busbw {si(p.busbw, 'B/s'):>10} "
              f"= {p.busbw / memcpy:6.1%} of one memcpy")

# %%
vcomm.plot_collectives(points2, fits, limits.copy_bytes_per_s)
plt.show()
for op, f in fits.items():
    print(f"{op:>14}: alpha {si(f.alpha_s, 's'):>9}, bandwidth {si(f.bandwidth, 'B/s'):>10} "
          f"(algbw), half of it reached at {si(f.half_bandwidth_bytes, 'B')}")


# %% [markdown]
# **Reading the gap.** The dashed fits follow the measurements at both ends: a flat floor of
# `alpha` for small messages, a slope of one (time proportional to size) for large ones. The
# printed `alpha` is the fixed price of one collective: each one wakes a gloo thread in each
# process and exchanges TCP messages through the kernel, and on a shared 2-core machine a
# waiting process must also be *scheduled* again before it can answer. The busbw of the
# largest messages, as a share of one memcpy (printed above), shows the bandwidth end: the
# bytes cross the kernel twice (the send and the receive copies), and both processes share
# the same cores and memory bus. Between the two ends the model is only roughly right (the middle sizes
# sit in cache, and gloo switches algorithms with size), which is why the fit weights each
# point by its relative error.
#
# ## 3. Ring all-reduce from send and receive
#
# **The algorithm.** Split the buffer into `n` chunks. In `n-1` **reduce-scatter** steps each
# process sends one chunk to its right neighbour and adds the chunk arriving from its left;
# afterwards process `r` holds the complete sum of chunk `(r+1) mod n`. In `n-1` **all-gather**
# steps the finished chunks travel once around the ring. Each step moves `S/n` bytes per
# process, so the total is `2(n-1)/n · S`: the busbw factor above.
#
# A toy first: the ring on `n` simulated processes in one Python process (a list of tensors),
# printing who sends which chunk. The chunk sizes differ by one when `n` does not divide the
# length (`tensor_split`), which is the case a real implementation must get right. The toy
# ends by checking its result against the exact sum.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
def toy_ring(buffers, verbose=True):
    n = len(buffers)
    chunks = [list(b.tensor_split(n)) for b in buffers]   # chunks[rank][c]: views
    for phase, steps in (("reduce-scatter", range(n - 1)), ("all-gather", range(n - 1))):
        for s in steps:
            if phase == "reduce-scatter":
                send = [(r - s) % n for r in range(n)]
            else:
                send = [(r + 1 - s) % n for r in range(n)]
            msgs = [chunks[r][send[r]].clone() for r in range(n)]  # all send at once
            for r in range(n):                                     # rank r receives from r-1
                left, c = (r - 1) % n, send[(r - 1) % n]
                if phase == "reduce-scatter":
                    chunks[r][c] += msgs[left]
                else:
                    chunks[r][c].copy_(msgs[left])
            if verbose:
                print(f"{phase:>14} step {s}: rank r sends chunk {send} (r = 0..{n - 1})")
    return buffers

n, numel = 3, 7
bufs = [torch.arange(numel, dtype=torch.float64) * (r + 1) for r in range(n)]
want = sum(b.clone() for b in bufs)
out = toy_ring(bufs)
print("chunk sizes:", [c.numel() for c in want.tensor_split(n)])
print("every rank holds the sum:", all(torch.equal(b, want) for b in out))

# %% [markdown]
# `perfkit.comm.ring_all_reduce` is the same schedule with real messages: `dist.isend` to the
# right neighbour and `dist.irecv` from the left, both posted before waiting (a blocking
# `send` on every rank at once could deadlock once messages outgrow the socket buffers).
# The 2-process job above checked it against `dist.all_reduce` on sizes divisible by neither 2
# nor 3, with integer-valued data (every summation order is exact, so the results must be
# equal) and random data (equal up to rounding).

# %%
for rec in res2["collectives"]["ring"]:
    print(f"numel {rec['numel']:>7,}: exact {rec['int_exact']}, float error "
          f"{rec['float_max_abs_err']:.1e}; ring {si(rec['time_s'], 's'):>9} vs "
          f"gloo all_reduce {si(rec['ref_time_s'], 's'):>9}")
assert all(r["int_exact"] for r in res2["collectives"]["ring"])

# %% [markdown]
# Exact on every size. The times compare two correct algorithms: for a few elements both are
# pure latency, and the ring pays `2(n-1)` message start-ups where gloo may use fewer
# messages; for large buffers both are bandwidth-bound. With few repetitions on a shared
# machine, differences of a millisecond are within the noise.

# %% [markdown]
# **Prediction for more processes.** A ring step is one point-to-point message, so the
# 2-process all-reduce fit gives one step's cost: a 2-process ring makes two steps of `S/2`,
# hence `alpha_link = alpha / 2` with the same bandwidth. With `n` processes the ring predicts
# `2(n-1) · (alpha_link + S / (n · bandwidth))`. The cell below measures 3 processes (same
# sweep, plus the ring check) to test that prediction.

# %%
CFG3 = {"collectives": {"sweep": {"ops": ["all_reduce"], "sizes": SIZES, "repeat": REPEAT},
                        "ring": {"sizes": RING_SIZES}}}
res3 = dist.launch("perfkit.workers.suite", 3, ["--config", json.dumps(CFG3)],
                   timeout_s=900)[0]
points3 = [comm.CollectivePoint(**p) for p in res3["collectives"]["sweep"]]
assert all(r["int_exact"] for r in res3["collectives"]["ring"])
link = comm.AlphaBeta(fits["all_reduce"].alpha_s / 2, fits["all_reduce"].bandwidth)
for p in points3:
    pred = comm.ring_allreduce_time(p.nbytes, 3, link)
    print(f"3 processes, {si(p.nbytes, 'B'):>8}: measured {si(p.time_s, 's'):>9}, ring model "
          f"{si(pred, 's'):>9} (measured / model = {p.time_s / pred:4.1f})")

# %% [markdown]
# **Reading the gap.** The ratio printed for each size says how far 3 processes are from the
# ring model built on 2. Expect it above 1 on a 2-core machine: three processes cannot all run
# at once, so every step waits for a process to be scheduled, and gloo's all-reduce is not
# necessarily a ring. The widget scales the model to up to 16 processes; only 2 and 3 are
# measured here.

# %%
# NBVAL_IGNORE_OUTPUT
ar2 = [p for p in points2 if p.op == "all_reduce"]
spec = vcomm.collectives_widget({2: ar2, 3: points3}, fits["all_reduce"])
viz.build_widget(spec)

# %%
spec.fn(**spec.defaults())
plt.show()

# %% [markdown]
# ## 4. Data parallelism from scratch: naive, bucketed, overlapped
#
# Three gradient synchronisers from `perfkit.dp`, each a step towards DDP, on the same MLP and
# data (every process its own batch):
#
# * **naive**: after `backward()`, one all-reduce per parameter tensor;
# * **bucketed**: after `backward()`, gradients packed into flat buckets of `DP_CAP_MB` and one
#   all-reduce per bucket;
# * **overlapped**: a hook on each parameter (`register_post_accumulate_grad_hook`) packs its
#   gradient as soon as backward produces it and launches the bucket's all-reduce
#   asynchronously once the bucket is full, while backward continues with earlier layers.
#
# **Prediction (alpha-beta).** Naive pays `alpha` once per tensor, bucketed once per bucket;
# both then pay the same bytes over the bandwidth. Overlapped can at best hide communication
# behind the backward pass: step time `max(compute, communication)` instead of their sum.

# %%
cmp = res2["data_parallel"]["compare"]
f_ar = fits["all_reduce"]
n_tensors = 2 * DP_MODEL["depth"]  # a weight and a bias per layer
pred_naive = n_tensors * f_ar.alpha_s + cmp["grad_bytes"] / f_ar.bandwidth
pred_bucket = cmp["buckets"] * f_ar.alpha_s + cmp["grad_bytes"] / f_ar.bandwidth
print(f"{cmp['n_params']:,} parameters = {si(cmp['grad_bytes'], 'B')} of gradients, "
      f"{n_tensors} tensors, {cmp['buckets']} buckets (cap {DP_CAP_MB} MB)")
print(f"model, communication only: naive {si(pred_naive, 's')}, bucketed {si(pred_bucket, 's')}")
for name, d in cmp["max_abs_diff_vs_ddp"].items():
    print(f"{name:>10}: step {si(cmp['time_s'][name], 's'):>9}, "
          f"max |grad - DDP grad| = {d:.1e} (largest gradient {cmp['grad_scale']:.1e})")

# %%
vcomm.plot_data_parallel(cmp)
plt.show()
t = cmp["time_s"]
print(f"compute only {si(t['compute_only'], 's')}, communication only "
      f"{si(t['comm_only'], 's')} (bucketed sync alone; model said {si(pred_bucket, 's')}); "
      f"overlap hid {cmp['hidden_share']:.0%} of the communication")

# %% [markdown]
# **Reading the gap.** All three synchronisers give DDP's gradients (the printed differences
# are zero or rounding): the same sums, divided by 2 before the all-reduce as DDP does. The
# times show what the model says about alphas: naive pays one start-up per tensor, bucketing
# removes most of them. The hidden share is `(compute + communication - overlapped) /
# communication`, measured; on a GPU, NCCL runs on its own stream and hides most of the
# communication, but here the "network" is the same two CPU cores that compute the backward
# pass: gloo's send/receive threads compete with it, so little can be hidden, and a negative
# share means overlapping cost more than it saved. DDP is usually fastest: it does the same
# bucketing and overlap in C++, with gradients written straight into the buckets (no copy).
#
# ## 5. DDP's bucket size and gradient accumulation
#
# **Prediction.** `bucket_cap_mb` sets how many all-reduces DDP issues per step. DDP's
# reducer walks the parameters in reverse order, appends each to the open bucket and closes
# it once it holds the cap or more, never splitting a tensor (`perfkit.parallel.assign_buckets`
# follows the same rule; left at its default, DDP also caps the first bucket at 1 MB so that
# communication starts early). So the count is about `gradient bytes / cap` for large caps,
# but never more than the number of tensors for tiny ones. Tiny buckets pay `alpha` many
# times; one huge bucket cannot start until backward is over. With gradient accumulation over `k` micro-batches under
# `no_sync()`, the all-reduce runs once per `k` micro-batches: bytes communicated per sample
# should fall as `1/k`, while the gradient equals one big batch's.

# %%
bk, acc = res2["data_parallel"]["buckets"], res2["data_parallel"]["accumulate"]
for b in bk:
    print(f"bucket_cap_mb={b['bucket_cap_mb']:>5}: {b['calls_per_step']:2d} all-reduces/step "
          f"(predicted {b['predicted_calls']:2d}; gradient bytes / cap = "
          f"{cmp['grad_bytes'] / (b['bucket_cap_mb'] * 2**20):5.1f}), step {si(b['step_s'], 's')}")
for a in acc:
    print(f"k={a['k']}: {a['allreduce_bytes_per_sample']:8.0f} B/sample "
          f"(k=1 value / k = {acc[0]['allreduce_bytes_per_sample'] / a['k']:8.0f}), "
          f"{si(a['s_per_sample'], 's')}/sample, max |grad - big batch| "
          f"{a['max_abs_diff_vs_big_batch']:.1e}")
vcomm.plot_buckets_accumulation(bk, acc)
plt.show()

# %% [markdown]
# **Reading the gap.** The bytes per sample follow `1/k` exactly (they are counted by a
# communication hook, not timed), and the accumulated gradient equals the big batch's up to
# rounding. Time per sample falls less than `1/k`: only the communication part shrinks, the
# forward and backward work per sample stays. The bucket counts are predicted exactly by the
# reducer's rule. Step times respond to the count only as far as `alpha` matters: a few
# buckets more or less change the step by a few `alpha`, which on a shared CPU can be less
# than the noise between repetitions.
#
# ## Summary

# %%
big = max((p for p in points2 if p.op == "all_reduce"), key=lambda p: p.nbytes)
viz.show_headlines({
    "all-reduce latency (alpha, 2 processes)": si(fits["all_reduce"].alpha_s, "s"),
    f"all-reduce busbw at {si(big.nbytes, 'B')}": f"{si(big.busbw, 'B/s')} "
                                                  f"({big.busbw / memcpy:.0%} of one memcpy)",
    "overlap hid (share of communication)": f"{cmp['hidden_share']:.0%}",
    "DDP step vs naive DP": f"{cmp['time_s']['ddp'] / cmp['time_s']['naive']:.2f}x the time",
})
