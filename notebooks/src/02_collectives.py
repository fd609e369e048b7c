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
from perfkit.verdict import Prediction, busy, judge
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
# out again on the other side, so we expect busbw below one memcpy of this machine, and the
# fit to describe every size within a median relative error of 25 %.
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
rel_err = {}
for op, f in fits.items():
    errs = sorted(abs(f.predict(p.nbytes) / p.time_s - 1) for p in points2 if p.op == op)
    rel_err[op] = errs[len(errs) // 2]
    bw = (f"bandwidth {si(f.bandwidth, 'B/s'):>10} (algbw), half of it reached at "
          f"{si(f.half_bandwidth_bytes, 'B')}" if f.bandwidth < 1e15 else
          "no bandwidth term: every size here is latency-bound")
    print(f"{op:>14}: alpha {si(f.alpha_s, 's'):>9}, {bw}; median relative error {rel_err[op]:.0%}")

# %%
ar_big = max((p for p in points2 if p.op == "all_reduce"), key=lambda p: p.nbytes)
p_bus = Prediction(f"all-reduce busbw at {si(ar_big.nbytes, 'B')} as a share of one memcpy",
                   "loopback TCP: each byte copied into the kernel and out again", high=1.0, physical=(0, None))
viz.show_verdict(judge(p_bus, ar_big.busbw / memcpy, explain={
    "held": "Both processes share the same cores and memory bus, and the bytes cross the kernel twice "
            "(the send and the receive copies).",
    "above": "Faster than one memcpy: the largest size still fits in cache here, or the memcpy ceiling was "
             "measured while the machine was busier."}))
p_fit = Prediction("median relative error of the all-reduce fit", "t = alpha + S / bandwidth",
                   high=0.25, physical=(0, None))
ar_pts = sorted((p for p in points2 if p.op == "all_reduce"), key=lambda p: p.nbytes)
# a larger message that took clearly less time: no model where time grows with size fits it
inv = [(a, b) for a, b in zip(ar_pts, ar_pts[1:]) if b.time_s < 0.8 * a.time_s]
worst = max(ar_pts, key=lambda p: abs(fits["all_reduce"].predict(p.nbytes) / p.time_s - 1))
def spread_of(p):  # the slowest rank's p10-p90 of the repetitions
    return f"{si(p.p10_s, 's')}-{si(p.p90_s, 's')}"


if inv:
    small, large = inv[0]
    spreads = f"({spread_of(large)} against {spread_of(small)}, p10-p90)"
    why_fit = (f"The time is not monotone in size here: {si(large.nbytes, 'B')} took {si(large.time_s, 's')}, "
               f"less than {si(small.nbytes, 'B')}'s {si(small.time_s, 's')}, and no model in which time grows "
               "with size fits that. ")
    if large.p90_s >= small.p10_s:  # the two sizes' repetitions overlap
        why_fit += (f"Their repetitions overlap {spreads}: the inversion is within this run's noise"
                    + (f" ({busy()})." if busy() else "."))
    else:
        why_fit += (f"Their repetitions do not overlap {spreads}: the smaller message was slower every time, so "
                    "something other than its size set its time (gloo picks its algorithm and buffers by size, "
                    "and a process that sleeps while it waits pays to be woken up)."
                    + (f" Also, {busy()}." if busy() else ""))
else:
    why_fit = (f"Time grows with size, but not along one line: the fit is furthest off at "
               f"{si(worst.nbytes, 'B')} (measured {si(worst.time_s, 's')}, fit "
               f"{si(fits['all_reduce'].predict(worst.nbytes), 's')}); read the plot for where it departs.")
viz.show_verdict(judge(p_fit, rel_err["all_reduce"], explain={
    "held": ("Both ends of the curve follow the model: a flat floor of alpha, then time proportional to size."
             if fits["all_reduce"].bandwidth < 1e15 else
             "But only its flat end was tested: every size here is latency-bound, so the fit is alpha "
             "alone" + (" (the default sizes reach further)." if QUICK else ".")),
    "above": why_fit}))


# %% [markdown]
# **Reading the fit.** The printed `alpha` is the fixed price of one collective: each one wakes
# a gloo thread in each process and exchanges TCP messages through the kernel, and on a machine
# whose cores are all busy a waiting process must also be *scheduled* again before it can answer. The fit
# weights each point by its relative error, so small and large messages count alike.
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
# equal) and random data (equal up to rounding), and timed both in alternation (ring, gloo,
# ring, gloo, ...: `REPEAT` pairs), so a change of load hits both alike.

# %%
ring2 = res2["collectives"]["ring"]
for rec in ring2:
    print(f"numel {rec['numel']:>7,}: exact {rec['int_exact']}, float error "
          f"{rec['float_max_abs_err']:.1e}; ring {si(rec['time_s'], 's'):>9} vs "
          f"gloo all_reduce {si(rec['ref_time_s'], 's'):>9} ({rec['time_s'] / rec['ref_time_s']:.2f}x; pairs "
          f"{min(rec['ratios']):.2f}x to {max(rec['ratios']):.2f}x)")
p_exact = Prediction("sizes where the ring's integer sum differs from dist.all_reduce's",
                     "the same sums in any order are exact for integers", value=0, rel_tol=0)
viz.show_verdict(judge(p_exact, sum(not r["int_exact"] for r in ring2)))

# %% [markdown]
# **Prediction (latency).** For a few elements (the smallest size that leaves no chunk empty)
# both algorithms are pure latency, and both exchange messages over the same TCP connections
# (the ring `2(n-1)` of them). The ring posts each from Python
# (`isend`, `irecv`, `wait`: microseconds each); gloo's all-reduce (on a CPU) is one call, but
# `ProcessGroupGloo` runs every collective on its own worker thread, so the caller waits for a
# thread hand-off (`isend`/`irecv` are posted from the calling thread). Both extras are small next
# to a message's latency here (`alpha` above), so the model predicts the same time: a ratio of
# 1 within 30 %. The spread is the range of the `REPEAT` alternated pairs.

# %%
small = min((r for r in ring2 if r["numel"] >= 2), key=lambda r: r["numel"])  # no empty chunk
p_lat = Prediction(f"ring time over gloo's all_reduce at {small['numel']} element(s)",
                   "the same TCP messages; Python posting against a thread hand-off",
                   value=1.0, rel_tol=0.3, unit="x")
lat = small["time_s"] / small["ref_time_s"]
viz.show_verdict(judge(p_lat, lat, spread=(min(small["ratios"]), max(small["ratios"])), explain={
    "held": f"The ring took {si(abs(small['time_s'] - small['ref_time_s']), 's')} "
            f"{'more' if lat > 1 else 'less'} per call: small next to one call's "
            f"{si(small['ref_time_s'], 's')}.",
    "above": f"Python's posting costs more than {res2['collectives']['backend']}'s one collective call here: "
             "where messages take tens of microseconds, the interpreter's share shows.",
    "below": "gloo's hand-off to its worker thread cost more than Python's posting here"
             + (f" ({busy()}: a woken thread waits to be scheduled)." if busy() else "."),
    "inconclusive": f"The {len(small['ratios'])} pairs disagree: "
                    + (busy() if busy() else "this run's noise is larger than the difference")
                    + "."}))

# %% [markdown]
# **Prediction for more processes.** A ring step is one point-to-point message, so the
# 2-process all-reduce fit gives one step's cost: a 2-process ring makes two steps of `S/2`,
# hence `alpha_link = alpha / 2` with the same bandwidth. With `n` processes the ring predicts
# `2(n-1) · (alpha_link + S / (n · bandwidth))`.
#
# That assumes every process has a core. Each process here does its copying, summing and
# system calls on one thread at a time, so `P` processes on `C` cores run at `C / P` of their
# speed once `P > C`: every time is stretched by `max(1, P / C)`. The 2-process fit already
# carries its own stretch, so 3 processes should take `max(1, 3 / C) / max(1, 2 / C)` times the
# ring model (1 on a machine with 3 cores or more). The model is coarse, so the prediction is
# that factor within a factor of 2 either way, at the median size. The cell below measures 3
# processes (same sweep, plus the ring check) to test it.

# %%
CFG3 = {"collectives": {"sweep": {"ops": ["all_reduce"], "sizes": SIZES, "repeat": REPEAT},
                        "ring": {"sizes": RING_SIZES}}}
res3 = dist.launch("perfkit.workers.suite", 3, ["--config", json.dumps(CFG3)],
                   timeout_s=900)[0]
points3 = [comm.CollectivePoint(**p) for p in res3["collectives"]["sweep"]]
ring3_exact = all(r["int_exact"] for r in res3["collectives"]["ring"])
print(f"ring on 3 processes exact on every size: {ring3_exact}")
link = comm.AlphaBeta(fits["all_reduce"].alpha_s / 2, fits["all_reduce"].bandwidth)
ratios3 = []
for p in points3:
    pred = comm.ring_allreduce_time(p.nbytes, 3, link)
    ratios3.append(p.time_s / pred)
    print(f"3 processes, {si(p.nbytes, 'B'):>8}: measured {si(p.time_s, 's'):>9}, ring model "
          f"{si(pred, 's'):>9} (measured / model = {p.time_s / pred:4.2f})")
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
stretch = max(1, 3 / cores) / max(1, 2 / cores)  # P processes on C cores run at C / P speed
print(f"{cores} cores for this process: 3 processes predicted at {stretch:.2f}x the ring model")
p_three = Prediction("3-process all-reduce time over the ring model (median over sizes)",
                     f"a ring on 3 processes, from the 2-process fit, x {stretch:.2f} for {cores} cores",
                     low=stretch / 2, high=2 * stretch, unit="x")
r3 = sorted(ratios3)[len(ratios3) // 2]
half = len(ratios3) // 2  # small sizes (latency) against large ones (bandwidth)
lat3, bw3 = sorted(ratios3[:half])[half // 2], sorted(ratios3[half:])[(len(ratios3) - half) // 2]
part = ("the latency part" if lat3 > bw3 else "the bandwidth part")
viz.show_verdict(judge(p_three, r3, explain={
    "held": f"Sizes ran from {min(ratios3):.2f}x to {max(ratios3):.2f}x the ring model.",
    "above": "Slower than the model" + (f" even stretched by {stretch:.2f}" if stretch > 1 else "")
             + f", most in {part} (median {lat3:.2f}x on the smaller "
             f"half of the sizes, {bw3:.2f}x on the larger): " + (
                 "a message whose receiver is not running waits until the scheduler runs it, a delay "
                 "the C / P share of a core does not capture"
                 if 3 > cores else "each step waits for the slowest of three processes")
             + (f"; and {busy()}." if busy() else "."),
    "below": "Faster than the ring model at most sizes: gloo's all-reduce needs fewer message start-ups "
             "than a ring's 2(n-1) here."}))

# %% [markdown]
# The widget scales the model to up to 16 processes; only 2 and 3 are measured here.

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
# Three gradient synchronisers from `perfkit.parallel`, each a step towards DDP, on the same MLP and
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
# both then pay the same bytes over the bandwidth, so the naive step should take at least as
# long as the bucketed one. Overlapped can at best hide communication behind the backward
# pass: step time `max(compute, communication)` instead of their sum. The hidden share,
# `(compute + communication - overlapped) / communication`, is then between 0 and its ceiling
# `min(compute, communication) / communication`: communication longer than the backward pass
# cannot all hide behind it (provided the all-reduces take as long inside the step as alone).
# All three should give DDP's gradients up to rounding.
#
# The six timings (DDP, the three, compute alone, the bucketed all-reduces alone) are taken in
# alternation, `REPEAT` rounds; each ratio's spread below is its range over those rounds.

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
t, reps = cmp["time_s"], cmp["times_s"]
rounds = range(len(reps["ddp"]))
ceiling = min(t["compute_only"], t["comm_only"]) / t["comm_only"]
hid = [(reps["compute_only"][i] + reps["comm_only"][i] - reps["overlapped"][i]) / reps["comm_only"][i]
       for i in rounds]
print(f"compute only {si(t['compute_only'], 's')}, communication only "
      f"{si(t['comm_only'], 's')} (bucketed sync alone; model said {si(pred_bucket, 's')}); "
      f"overlap hid {cmp['hidden_share']:.0%} of the communication (the backward pass could cover {ceiling:.0%}; "
      f"rounds {min(hid):.0%} to {max(hid):.0%})")
worst_rel = max(cmp["max_abs_diff_vs_ddp"].values()) / cmp["grad_scale"]
viz.show_verdict(judge(Prediction("largest gradient difference from DDP, relative to the largest gradient",
                                  "the same sums, divided by the world size as DDP does", high=1e-5),
                       worst_rel))
nb = [reps["naive"][i] / reps["bucketed"][i] for i in rounds]
viz.show_verdict(judge(Prediction("naive step time over bucketed", "alpha per tensor against alpha per bucket",
                                  low=1.0, unit="x"), t["naive"] / t["bucketed"], spread=(min(nb), max(nb)),
                       explain={
    "held": f"The model says bucketing saves {n_tensors - cmp['buckets']} start-ups, "
            f"{si(pred_naive - pred_bucket, 's')}; measured {si(t['naive'] - t['bucketed'], 's')}.",
    "below": f"Every round agrees: copying gradients into buckets cost more than the model's saving of "
             f"{si(pred_naive - pred_bucket, 's')} in start-ups.",
    "inconclusive": f"The model's saving ({si(pred_naive - pred_bucket, 's')}) is smaller than the "
                    "differences between rounds" + (f"; {busy()}." if busy() else ".")}))
viz.show_verdict(judge(Prediction("share of the communication the overlap hid",
                                  "at best max(compute, communication)", low=0.0, high=ceiling,
                                  physical=(None, 1)),
                       cmp["hidden_share"], spread=(min(hid), max(hid)), explain={
    "held": f"{cmp['hidden_share'] / ceiling:.0%} of what could hide did. On a GPU, NCCL runs on its own "
            "stream and hides most of it; here the 'network' is the same "
            f"{os.cpu_count()} cores that compute the backward pass.",
    "above": "More than the backward pass could cover: the overlapped version launches its all-reduces "
             "asynchronously, so gloo's worker threads also run them back to back, overlapping one another's "
             "start-ups, while 'communication only' waits for each bucket before sending the next. The "
             "share counts both kinds of overlap.",
    "inconclusive": ("The rounds disagree on "
                     + ("whether overlapping helped at all" if min(hid) < 0 < max(hid) else
                        "whether more hid than the backward pass could cover")
                     + (f" ({busy()})." if busy() else ".")) if cmp["hidden_share"] <= 1 else "",
    "below": "Overlapping cost more than it saved: gloo's send and receive threads compete with the "
             f"backward pass for the same {os.cpu_count()} cores"
             + (f"; and {busy()}, so the three timings, taken one after the other, may also "
                "differ by load." if busy() else ", so nothing can run beside it.")}))
ddp_ov = [reps["ddp"][i] / reps["overlapped"][i] for i in rounds]
fastest = min(("ddp", "naive", "bucketed", "overlapped"), key=lambda k: t[k])
print(f"fastest synchroniser in this run: {fastest}; DDP's step over the from-scratch overlapped one: "
      f"{t['ddp'] / t['overlapped']:.2f}x (rounds {min(ddp_ov):.2f}x to {max(ddp_ov):.2f}x: "
      + ("DDP faster in every round)" if max(ddp_ov) < 1 else "the overlapped one faster in every round)"
         if min(ddp_ov) > 1 else "no consistent winner)"))

# %% [markdown]
# DDP does the same bucketing and overlap in C++, and also handles what the from-scratch
# versions skip: unused parameters, buckets rebuilt in the order gradients arrive, and, with
# `gradient_as_bucket_view=True`, gradients written straight into the buckets (no copy; the
# default copies them). The line above says how its step compared here.
#
# ## 5. DDP's bucket size and gradient accumulation
#
# **Prediction.** `bucket_cap_mb` sets how many all-reduces DDP issues per step. DDP's
# reducer walks the parameters in reverse order, appends each to the open bucket and closes
# it once it holds the cap or more, never splitting a tensor (`perfkit.parallel.assign_buckets`
# follows the same rule; left at its default, DDP also caps the first bucket at 1 MB so that
# communication starts early). So the count is about `gradient bytes / cap` for large caps,
# but never more than the number of tensors for tiny ones. Tiny buckets pay `alpha` many
# times; one huge bucket cannot start until backward is over. With gradient accumulation over
# `k` micro-batches under `no_sync()`, the all-reduce runs once per `k` micro-batches: bytes
# communicated per sample should fall as `1/k` exactly, while the gradient equals one big
# batch's. Time per sample falls less: only the communication shrinks.

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

# %%
viz.show_verdict(judge(Prediction("caps where DDP's all-reduce count differs from the reducer's rule",
                                  "reverse order, close at the cap, never split a tensor", value=0, rel_tol=0),
                       sum(b["calls_per_step"] != b["predicted_calls"] for b in bk)))
dev_bytes = max(abs(a["allreduce_bytes_per_sample"] * a["k"] / acc[0]["allreduce_bytes_per_sample"] - 1)
                for a in acc)
viz.show_verdict(judge(Prediction("largest relative deviation of bytes per sample from 1/k",
                                  "one all-reduce per k micro-batches", high=1e-9), dev_bytes))
k_max = acc[-1]
per = [(k_max["times_s"][i] / k_max["samples_per_step"]) / (acc[0]["times_s"][i] / acc[0]["samples_per_step"])
       for i in range(len(acc[0]["times_s"]))]  # the ks were timed in alternation, round by round
viz.show_verdict(judge(Prediction(f"time per sample at k={k_max['k']} over k=1",
                                  "only the communication part shrinks", low=1 / k_max["k"], high=1.0,
                                  physical=(1 / k_max["k"], None)),
                       k_max["s_per_sample"] / acc[0]["s_per_sample"], spread=(min(per), max(per)), explain={
    "held": "Forward and backward work per sample stays; only the all-reduce is paid less often.",
    "above": "Slower per sample with accumulation: accumulating cost more per sample than the "
             "all-reduces it saved.",
    "inconclusive": "The rounds disagree" + (f" ({busy()})." if busy() else ".")}))

# %% [markdown]
# The bytes per sample are counted by a communication hook, not timed. Step times respond to the
# bucket count only as far as `alpha` matters: a few buckets more or less change the step by a
# few `alpha`. How that compares with this run's noise:

# %%
same = {}
for b in bk:
    same.setdefault(b["calls_per_step"], []).append(b["step_s"])
noise = max((max(v) - min(v) for v in same.values() if len(v) > 1), default=None)
calls = sorted(same)
diff = min(same[calls[-1]]) - min(same[calls[0]])  # s: most against fewest all-reduces, best cap each
print(f"{calls[-1]} against {calls[0]} all-reduce(s) per step: {si(abs(diff), 's')} "
      f"{'slower' if diff >= 0 else 'faster'} measured, "
      f"{calls[-1] - calls[0]} x alpha = {si((calls[-1] - calls[0]) * fits['all_reduce'].alpha_s, 's')} by the fit; "
      + (f"caps with the same count differ by up to {si(noise, 's')}, the noise of this run, so the "
         f"difference {'stands out of' if abs(diff) > noise else 'is within'} the noise"
         if noise is not None else "no two caps share a count here, so this run does not show its noise")
      + (": more all-reduces were faster, their overlap with backward outweighing the start-ups (one "
         "huge bucket cannot start until backward is over)." if diff < 0 and noise is not None
         and abs(diff) > noise else "."))
#
# ## Summary

# %%
big = max((p for p in points2 if p.op == "all_reduce"), key=lambda p: p.nbytes)
viz.show_headlines({
    "all-reduce latency (alpha, 2 processes)": si(fits["all_reduce"].alpha_s, "s"),
    f"all-reduce busbw at {si(big.nbytes, 'B')}": f"{si(big.busbw, 'B/s')} "
                                                  f"({big.busbw / memcpy:.0%} of one memcpy)",
    "overlap hid (share of communication)": f"{cmp['hidden_share']:.0%} (the backward pass alone "
                                            f"could cover {ceiling:.0%})",
    "DDP step vs naive DP": f"{cmp['time_s']['ddp'] / cmp['time_s']['naive']:.2f}x the time",
})
