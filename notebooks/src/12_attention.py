# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 12 · Long sequences: FlashAttention's tiles and ring attention
#
# Attention compares every query with every key, so a sequence of `T` tokens builds a
# `T x T` score matrix per head. Written plainly, autograd keeps that matrix for backward:
# memory grows with the square of the sequence. This notebook opens the box that
# `scaled_dot_product_attention` hides and measures, on the machine running it:
#
# 1. **the online softmax**: a row's softmax-weighted sum computed one key tile at a time,
#    with a running maximum and sum, equal to the whole-row version (FlashAttention, Dao et
#    al. 2022; FlashAttention-2, Dao 2023);
# 2. **memory**: the exact bytes saved for backward against `T`, eager against tiled;
# 3. **FLOPs**: what the tiled backward's recomputation costs, counted and timed;
# 4. **the tile size**: a two-term time model, and a widget over `T` and the tile;
# 5. **ring attention** (context parallelism, CP): the sequence split over processes, key and
#    value blocks passed round a ring, partial results merged by their log-sum-exp; the
#    bytes each rank sends and the work each rank does under two ways of splitting;
# 6. **the longest sequence** that fits a memory budget, against the number of processes.
#
# `perfkit.compute.flash` holds the tiles, `perfkit.parallel.context` the ring.
# `QUICK = True` (what CI uses) runs smaller sizes. A cell whose first line is `# NBVAL_...`
# tells the course's tests whether to compare its output; the line does nothing when you run it.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it; a runner may set it below

# %%
B, H, D = 1, 4, 32                                   # batch, heads, head dim
SAVED_LENS = [256, 320, 384, 512] if QUICK else [256, 512, 1024, 2048]
TIME_LEN = 512 if QUICK else 1024                    # section 3
SWEEP_LENS = [256, 512, 1024] if QUICK else [256, 512, 1024, 1536]
TILES = [32, 64, 256] if QUICK else [16, 32, 64, 128, 256]
REPEAT = 3 if QUICK else 5
RING = {"equal": {"seq_len": 28, "tile": 4},         # 2P chunks of 7 rows, tile 4
        "time": {"seq_len": 512 if QUICK else 2048, "tile": 64, "repeat": 3 if QUICK else 15}}

# %%
import json
import math
import statistics

import torch
from IPython.display import Markdown, display
from torch.utils.flop_counter import FlopCounterMode

from perfkit import dist, sizing, stats, timing, viz
from perfkit.compute import attention_cost as ac
from perfkit.compute import flash as fl
from perfkit.parallel import context_model as cm
from perfkit.verdict import Prediction, judge
from perfkit.viz import attention as va

THREADS = sizing.timing_threads()  # the cores other processes leave free
print(f"torch {torch.__version__}; timing on {THREADS} thread(s)")

# %% [markdown]
# ## 1. The online softmax, one tile at a time
#
# **Question.** Can a softmax-weighted sum over a row of scores be computed without ever
# holding the whole row?
#
# **Model.** Keep, for the keys seen so far, the largest score `m`, the sum
# `l = Σ exp(s - m)` and the unnormalised output `o = Σ exp(s - m) v`. When a tile brings a
# larger maximum `m'`, everything summed so far was scaled by `exp(-m)` and must be rescaled
# by `exp(m - m')` before the tile's own terms are added. At the end `o / l` is the output
# and `L = m + log l` the log-sum-exp, which is all backward needs to rebuild any tile's
# probabilities `exp(s - L)`.
#
# The toy below does it for one query row in plain PyTorch, then checks itself against the
# whole-row softmax and against `perfkit.compute.flash.attention_forward_tiles`.

# %%
g = torch.Generator().manual_seed(0)
s_row = torch.randn(40, generator=g, dtype=torch.float64) * 3   # scores of one query, 40 keys
v_row = torch.randn(40, 8, generator=g, dtype=torch.float64)    # their values
m, total, o = -math.inf, 0.0, torch.zeros(8, dtype=torch.float64)
for j in range(0, 40, 16):                                       # key tiles of 16 (the last: 8)
    s, v = s_row[j:j + 16], v_row[j:j + 16]
    m_new = max(m, s.max().item())
    scale = math.exp(m - m_new)                                  # rescale the stale sums
    total = total * scale + torch.exp(s - m_new).sum().item()
    o = o * scale + torch.exp(s - m_new) @ v
    m = m_new
whole = torch.softmax(s_row, 0) @ v_row
print(f"toy against the whole row: {(o / total - whole).abs().max().item():.1e}")

# %%
q1 = s_row.reshape(1, 1, 40)        # one query whose dot product with key j is s_row[j]
k1 = torch.eye(40, dtype=torch.float64).reshape(1, 40, 40)
o_lib, lse_lib = fl.attention_forward_tiles(q1, k1, v_row.reshape(1, 40, 8), 1.0, tile=16)
print(f"toy against perfkit: {(o / total - o_lib[0, 0]).abs().max().item():.1e}; "
      f"log-sum-exp {m + math.log(total):.6f} against {lse_lib.item():.6f}")

# %% [markdown]
# `perfkit.compute.flash.flash_attention` wraps those tiles in a `torch.autograd.Function`:
# forward walks query tiles and key tiles, saves only `O` and `L`; backward recomputes each
# tile's probabilities from them and accumulates `dQ`, `dK`, `dV`. With `causal=True` every
# tile wholly above the diagonal is skipped.
#
# **Prediction.** Forward and all three gradients, in fp32, within 1e-5 of attention
# computed in float64, for a length that is not a multiple of the tile, causal.

# %%
q, k, v = (torch.randn(2, 3, 100, 16, generator=g) for _ in range(3))
errs = fl.errors_against_float64(q, k, v, causal=True, tile=32)
print("max abs difference from float64: " + ", ".join(f"{n} {e:.1e}" for n, e in errs.items()))
viz.verdict(Prediction("largest difference from float64 (O, dQ, dK, dV)", "fp32 rounding only: sums "
                       "over D = 16 and over up to 100 keys or queries", high=1e-5), max(errs.values()))

# %% [markdown]
# ## 2. Memory saved for backward
#
# **Question.** How do the bytes autograd keeps for backward grow with the sequence?
#
# **Model.** Eager attention (`softmax(Q Kᵀ / √D) V` op by op) keeps the probabilities
# `softmax(S)`, one `T x T` matrix per head: `B H T²` values of 4 bytes. FlashAttention keeps
# `O` (`B H T D` values) and `L` (`B H T`): nothing grows with `T²`. The inputs `Q, K, V`
# are kept by both and not counted. `perfkit.memory.SavedTensorMeter` counts every saved
# tensor's storage exactly, so a fit of `a T² + b T + c` over four lengths gives the terms.
#
# **Prediction.** Eager's `T²` coefficient is exactly `B H x 4` bytes; FlashAttention's is
# zero; between the two longest lengths, eager's bytes grow as `T^2` and FlashAttention's
# as `T^1`.

# %%
saved = ac.saved_bytes_sweep(SAVED_LENS, B, H, D)
terms = {name: fl.length_terms(SAVED_LENS, ys) for name, ys in saved.items()}
slope = {name: math.log(ys[-1] / ys[-2]) / math.log(SAVED_LENS[-1] / SAVED_LENS[-2])
         for name, ys in saved.items()}
for name, (a2, a1, a0) in terms.items():   # round, then + 0.0: a fit's -1e-13 prints as 0, not -0
    a2, a1, a0 = round(a2, 3) + 0.0, round(a1, 1) + 0.0, round(a0) + 0.0
    print(f"{name:>5}: {a2:8.3f} T² + {a1:8.1f} T + {a0:6.0f} bytes; exponent {slope[name]:.3f}")
fig = va.plot_saved_bytes(SAVED_LENS, saved, B, H, D)

# %%
viz.verdict(Prediction("eager attention's T² term", "softmax(S) kept: B H T² x 4 bytes",
                       value=B * H * 4, rel_tol=1e-9, unit=" B per T²"), terms["eager"][0])
viz.verdict(Prediction("FlashAttention's T² term", "only O and L kept", low=-1e-6, high=1e-6,
                       unit=" B per T²"), terms["flash"][0])
viz.verdict(Prediction("eager's growth exponent", "T² term", value=2.0, rel_tol=0.05), slope["eager"])
viz.verdict(Prediction("FlashAttention's growth exponent", "linear in T", value=1.0,
                       rel_tol=0.05), slope["flash"])

# %% [markdown]
# At `T = 32768` with 32 heads of 128 dimensions (a long-context model's layer), the cell below
# prints what eager attention and FlashAttention keep per layer and per sequence. This notebook
# runs in fp32; in bf16 training eager's figure depends on where softmax runs, and the cell
# counts each case's bytes per score at a small length (`attention_cost.eager_bytes_per_score`).
# Under `torch.autocast` on CUDA, softmax is on the list of ops that autocast to float32
# (PyTorch's AMP docs, "CUDA Ops that can autocast to float32"): softmax's backward keeps the
# fp32 probabilities and `P @ V` keeps their bf16 copy, more than fp32 alone. Hugging Face's
# eager attention, `softmax(..., dtype=torch.float32).to(q.dtype)`, keeps the same two. Only
# where softmax itself runs in bf16 (CPU autocast, whose float32 list does not hold it, or a
# model cast wholly to bf16) is a single bf16 `P` kept. FlashAttention's kernels keep `O` in
# the inputs' dtype and the log-sum-exp `L` in fp32. The gap alone would make long-context
# training need tiles, before section 3 counts what moving those bytes costs in time.

# %%
per_score = ac.eager_bytes_per_score()   # B per score of the T x T matrix, counted at T = 64
scores = 32 * 32768**2                   # H T² values per layer and sequence
print("T = 32768, 32 heads, per layer: eager attention "
      + "; ".join(f"{name} {viz.si(b * scores, 'B')} ({b:g} B per score)" for name, b in per_score.items())
      + f". FlashAttention's algorithm: this course's tiles in fp32 {viz.si(fl.flash_saved_bytes(1, 32, 32768, 128), 'B')}; "
      f"FlashAttention's CUDA kernels, which run fp16 or bf16 only, in bf16 (O in bf16, L in fp32) "
      f"{viz.si(32 * 32768 * (2 * 128 + 4), 'B')}")
# %% [markdown]
# ## 3. FLOPs, and what recomputing costs
#
# **Question.** What does recomputing the probabilities in backward cost, in FLOPs and in time?
#
# **Model.** Each computed tile of `bq x bk` queries and keys costs `4 bq bk D` FLOPs forward
# (`Q Kᵀ` and `P V`). Backward recomputes `Q Kᵀ`, then `dV = Pᵀ dO`, `dP = dO Vᵀ`,
# `dQ = dS K`, `dK = dSᵀ Q`: `10 bq bk D`, where eager attention's backward needs 8 (it kept
# `P`). Torch's own FLOP counter counts the matmuls that really run.
#
# **Prediction.** Counted FLOPs equal the formula (causal: only the tiles on or below the
# diagonal). Time: forward + backward over the forward alone. The model (section 4 fits it):
# a tile visit costs a fixed overhead, its operator calls, plus its FLOPs at one rate; forward
# visits each tile once, backward once more. If the FLOPs set the time, the ratio is
# `(4 + 10) / 4 = 3.5`. If the calls' fixed cost sets it, the ratio is 1 plus backward's calls
# over forward's, counted below before the timing. Not every call pays alike: a view (`view`,
# `expand`, `transpose`, a slice) only relabels a tensor's shape and launches no kernel, while
# every other call runs one. The calls' end therefore counts kernel calls only, each charged
# alike and the views free (`attention_cost.call_mix` splits the two). Backward reshapes
# through more views than forward (the cell counts both), so this end lies below the ratio of
# all calls, which is printed beside it. A real tile pays calls, views and FLOPs, so the model
# expects the ratio between the kernel calls' end and 3.5: an expected range, not a bound,
# since it assumes backward's kernel calls cost what forward's do and its matmuls run at
# forward's rate; the verdict names which assumption a miss breaks.
# (`call_mix` counts what PyTorch's dispatcher sees, the level at which each call pays its fixed
# cost: Python, argument checks, a kernel launch on a GPU; an op that PyTorch builds from others
# is counted as those others.)

# %%
qc, kc, vc = (torch.randn(1, 2, 100, 8, generator=g).requires_grad_() for _ in range(3))
with FlopCounterMode(display=False) as fwd:
    oc = fl.flash_attention(qc, kc, vc, causal=True, tile=16)
with FlopCounterMode(display=False) as bwd:
    oc.sum().backward()
want = fl.flash_flops(1, 2, 100, 8, causal=True, tile=16)
print(f"forward: counted {fwd.get_total_flops()}, formula {want.forward}; backward: counted "
      f"{bwd.get_total_flops()}, formula {want.backward}; {want.tiles} of 49 tiles computed")
viz.verdict(Prediction("backward FLOPs counted over the formula", "10 bq bk D per computed tile",
                       value=1.0, rel_tol=0.0), bwd.get_total_flops() / want.backward)

# %% [markdown]
# Why pay 25 % more backward FLOPs? Because the alternative is keeping `P`: `B H T²` values
# written in forward and read again in backward. On a GPU those bytes cross the memory bus
# (HBM) several times: the two matmuls that write and read `S` and `P` do `2D` FLOPs per
# element, `D` per byte in bf16: 128 for `D` = 128. A GPU's ridge is the FLOPs per byte at
# which its compute and its memory bandwidth take equal time: an A100 SXM4 80GB's is about 153
# (312 TFLOP/s over 2.04 TB/s), so these matmuls sit near it (the 40GB part's 1.56 TB/s gives
# about 200, above them), an H100 SXM's about 295 (989 over 3.35), so they sit below it (NVIDIA's
# datasheet figures, stored with their sources in `perfkit.plan.cluster.GPUS`). The passes between them (mask, softmax, dropout) do a handful of
# FLOPs per element, far below either ridge, at every length. Those
# elementwise passes over `T x T` matrices make eager attention's time its traffic's, not its
# FLOPs' (Dao et al. 2022, section 2.2); recomputing from `Q`, `K` and the `T`-long `L` keeps
# every tile in on-chip memory (section 3 there). On this CPU the timing
# below also carries each tile's fixed cost of its operator calls (the cell counts them), which
# section 4 models.
# Forward alone and forward + backward run alternately, one of each per round; the figure
# judged is the median of the rounds' own ratios (load that hits both members of a round
# cancels in it), which need not equal the ratio of the two medians printed beside it.

# %%
qt, kt, vt = (torch.randn(B, H, TIME_LEN, D, generator=g).requires_grad_() for _ in range(3))
gt = torch.randn(B, H, TIME_LEN, D, generator=g)
out_t = fl.flash_attention(qt, kt, vt, tile=64)
fwd_mix = ac.call_mix(lambda: fl.flash_attention(qt, kt, vt, tile=64))
bwd_mix = ac.call_mix(lambda: out_t.backward(gt))
call_end = 1 + bwd_mix.kernels / fwd_mix.kernels   # kernel calls alike, views free: the model's low end
all_end = 1 + bwd_mix.total / fwd_mix.total         # every call alike, views included: context only
ends = sorted((call_end, 3.5))                      # (4 + 10) / 4: FLOP-bound tiles, the other end
print(f"operator calls at T = {TIME_LEN}, tiles of 64: forward {fwd_mix.kernels:,} kernel calls and {fwd_mix.views:,} "
      f"views, backward {bwd_mix.kernels:,} and {bwd_mix.views:,} -> {call_end:.2f}x with kernel calls alike and views "
      f"free ({all_end:.2f}x with every call alike); the model's range {ends[0]:.2f}x to {ends[1]:.2f}x")
with sizing.pinned_threads(THREADS):
    f_only, f_and_b = timing.interleaved(
        [lambda: fl.flash_attention(qt, kt, vt, tile=64),
         lambda: fl.flash_attention(qt, kt, vt, tile=64).backward(gt)], warmup=1, repeat=3 * REPEAT)
ratio = stats.median_ratio(f_and_b.times_s, f_only.times_s)   # rounds interleaved: paired
print(f"T = {TIME_LEN}: forward {viz.si(f_only.median_s, 's')}, forward + backward "
      f"{viz.si(f_and_b.median_s, 's')} (medians; their ratio {f_and_b.median_s / f_only.median_s:.2f}x); "
      f"the median of the {len(f_only.times_s)} rounds' own ratios, the figure judged: {ratio.text('x')}")
mix_txt = (f"Backward's calls are {bwd_mix.views / bwd_mix.total:.0%} views, forward's "
           f"{fwd_mix.views / fwd_mix.total:.0%}; with every call charged alike, views included, the calls' end "
           f"would be {all_end:.2f}x, " + ("above" if ratio.value < all_end else "below") + " the ratio measured.")
calls_v = judge(Prediction("forward + backward over forward", "kernel calls alike, views free (1 + backward's kernel "
                           "calls over forward's) up to FLOP-bound tiles ((4 + 10) / 4)", low=ends[0], high=ends[1],
                           unit="x", soft=("low", "high")), ratio, explain={
    "above": "Backward does more than its matmuls and calls: the exps and the in-place accumulations "
             "into dQ, dK and dV cost more per tile than forward's rescaling, or its matmuls ran below "
             "forward's rate. " + mix_txt,
    "held": mix_txt,
    "below": "Backward's kernel calls cost less each than forward's, which the model charges alike (this run "
             "does not time the calls apart). " + mix_txt})
viz.show_verdict(calls_v)

# %% [markdown]
# ## 4. The tile size
#
# **Question.** How does the tile size set the time of the tiled attention on this CPU?
#
# **Model.** In PyTorch each tile is dozens of small operator calls (section 3 counted them), so
# a tile costs a fixed overhead on top of its FLOPs: `t = FLOPs / rate + tiles x t_tile`, with the tile count
# visited twice (forward and backward). Small tiles pay the overhead many times; large ones
# little more than their FLOPs, so the model's own times never run faster than `rate`; fitted,
# `rate` is a parameter that a measured call can outrun (the cells below say whether one did).
# On a GPU there is no such per-call cost: the whole loop is one fused
# kernel. There the tile size trades on-chip memory (shared memory and registers, which cap
# the tile and how many run at once) against re-reads of `K` and `V` from HBM: Dao et al. 2022
# (Theorem 2) count `Θ(T² D² / M)` HBM accesses for an on-chip memory (SRAM) of `M` elements
# (values, not bytes; the theorem takes `D <= M <= T D`), so larger tiles read less.
# `perfkit.compute.attention_cost` times FlashAttention at every tile size, eager attention and
# SDPA, interleaved at each length, and fits the two terms on all lengths but the longest. In
# the same rounds it times a control: one fixed 512 x 512 matmul, the same call at every length,
# so a change in its time between lengths is the machine's speed (load, clocks), not attention's.
# SDPA cannot serve as that control: its fused kernel's speed per FLOP moves with `T` by itself.
# Eager attention's model is its FLOP rate at the longest length fitted, carried to longer
# lengths: an estimate, not a bound either way, since the rate falls where the `T x T` scores
# leave a cache and can rise again between such steps, and a machine that slows between
# lengths moves it too (the control shows whether it did). SDPA
# (`torch.nn.functional.scaled_dot_product_attention`) is PyTorch's fused attention; on this
# CPU it runs a tiled, FlashAttention-style kernel written in C++ (forward and backward), so it
# pays neither eager's `T²` traffic nor the Python tiles' per-call cost.
#
# **Prediction.** The model fitted on the shorter lengths predicts the longest one's time
# with 64-wide tiles within that tile's own largest miss at the lengths it was fitted on
# (printed with the fit, before the longest length's times are read): the error the model
# showed for this prediction on its own data. Other tile sizes' misses are printed as context
# and do not widen the band. In the model a tile
# size's time per FLOP does not move with `T` (the FLOPs and the tiles both grow as `T²`), so
# a tile's miss at the longest length either repeats its misses at the shorter lengths (the
# model misfits that tile) or the shorter lengths do not show it; the verdict prints which,
# from each length's miss, and whether the control's time moved between the two longest lengths
# (the machine, not the model).

# %%
with sizing.pinned_threads(THREADS):
    points = ac.time_attention(SWEEP_LENS, TILES, B, H, D, repeat=REPEAT)
model = ac.TileCostModel.fit([p for p in points if p.seq_len < SWEEP_LENS[-1]])
tol = ac.tile_band(points, model, 64, B, H, D)   # tile 64's own largest miss where it was fitted: the band
p_tile = Prediction(f"FlashAttention (tiles of 64) at T = {SWEEP_LENS[-1]}", "FLOPs / rate + tiles x t_tile, fitted "
                    "on shorter T", value=model.flash_s(SWEEP_LENS[-1], 64, B, H, D), rel_tol=tol, unit=" s")
print(f"fit (two parameters): rate {viz.si(model.flop_rate, 'FLOP/s')} for the FLOP term, {viz.si(model.per_tile_s, 's')} per tile visit; eager {viz.si(model.eager_rate, 'FLOP/s')} (its rate at T = {SWEEP_LENS[-2]}); "
      + ac.band_note(points, model, 64, B, H, D) + "." + va.rate_note([p for p in points if p.seq_len < SWEEP_LENS[-1]], model, fitted=True) + f" Recorded before the times below are shown: {p_tile.what}, {p_tile.describe()}")

# %%
display(Markdown(va.times_table(points)))
fig = va.plot_tile_times(points, model, B, H, D, fitted_lens=SWEEP_LENS[:-1])

# %% [markdown]
# Section 3 timed one of these shapes too: forward + backward with tiles of 64 at its length,
# the same call. Each section judges only figures taken within its own rounds (section 3 a
# ratio inside each round, this one a fit over its own sweep), so their absolute times need not
# agree: on a shared machine the speed moves from one minute to the next. The intervals assume
# rounds that are independent draws; a drift over the rounds breaks that, and shows as times of
# one call that disagree between sections. This fit charges a backward tile visit the fixed
# cost of a forward one (one cost per visit, not per call), so its ratio, printed below, lies
# between 2 and 3.5 by construction; section 3's low end counted the kernel calls instead.

# %%
same = next(p for p in points if p.impl == "flash" and p.tile == 64 and p.seq_len == TIME_LEN)
here, there = stats.median_interval(same.times_s), stats.median_interval(f_and_b.times_s)
overlap = here.low <= there.high and there.low <= here.high
print(f"forward + backward, tiles of 64, T = {TIME_LEN}: {here.text('s')} here, {there.text('s')} in section 3, "
      f"{max(same.median_s, f_and_b.median_s) / min(same.median_s, f_and_b.median_s):.2f}x apart: "
      + ("one of them has too few rounds for an interval: this run cannot say whether they differ."
         if not (here.has_interval and there.has_interval) else
         "the intervals overlap." if overlap else "the intervals do not overlap: this one call ran at another "
         "speed in the two sections (other calls around it, or the machine's load a minute apart; this run does "
         "not separate the two), which neither section's interval holds."))
fit_ratio = model.flash_s(TIME_LEN, 64, B, H, D) / model.flash_forward_s(TIME_LEN, 64, B, H, D)
print(f"forward + backward over forward at T = {TIME_LEN}, tiles of 64: this fit {fit_ratio:.2f}x, the kernel "
      f"calls counted in section 3 {call_end:.2f}x; measured there {ratio.point('x')} "
      f"(its verdict against {ends[0]:.2f}x to {ends[1]:.2f}x: {calls_v.outcome}).")

# %%
eager_pts = [p for p in points if p.impl == "eager"]
print("eager's FLOP rate: " + ", ".join(f"T = {p.seq_len}: {viz.si(p.flops / p.median_s, 'FLOP/s')}"
                                        for p in eager_pts)
      + f"; at T = {eager_pts[-1].seq_len} its model gives {viz.si(model.eager_s(eager_pts[-1].seq_len, B, H, D), 's')}"
      f", measured {viz.si(eager_pts[-1].median_s, 's')} "
      f"({eager_pts[-1].median_s / model.eager_s(eager_pts[-1].seq_len, B, H, D) - 1:+.0%})." + va.row_note(points, "eager"))
best = min((p for p in points if p.impl == "flash" and p.seq_len == SWEEP_LENS[-1]), key=lambda p: p.median_s)
sdpa = next(p for p in points if p.impl == "sdpa" and p.seq_len == SWEEP_LENS[-1])
print(f"T = {SWEEP_LENS[-1]}: SDPA {viz.si(sdpa.median_s, 's')}, the best tile ({best.tile}) "
      f"{viz.si(best.median_s, 's')}: SDPA {best.median_s / sdpa.median_s:.1f}x faster (ratio of medians)")

# %% [markdown]
# The table sets every implementation's time per FLOP at each length; its last row is each
# column's change over the two longest lengths, where the tile model expects none for a tile
# size. The FLOPs are counted, not measured: the tiled columns' include the backward's
# recomputation of the scores (`4 + 10` units of `bq bk D` per tile), eager's and SDPA's the
# `4 + 8` of a backward that keeps them, though SDPA's kernel recomputes too: its column is
# time per FLOP of eager's count, not of what it runs. The control's column is its fixed matmul's
# time per FLOP: the same call at every length, so its change is the machine's alone. Then the
# verdict on the prediction recorded with the fit.

# %%
last = max((p for p in points if p.impl == "flash" and p.tile == 64), key=lambda p: p.seq_len)
display(Markdown(va.times_table(points, per_flop=True)))
fitted = ac.tile_miss_note(points, model, 64, B, H, D, measured=(est := stats.median_interval(last.times_s))) + va.row_note(points, "flash", 64, miss=last.median_s / p_tile.value - 1, band=tol) + va.rate_note(points, model) + " This run does not time why a point missed." + ac.same_call_note(here, there, "section 3's call")
tile_v = judge(p_tile, est, explain={"above": fitted, "below": fitted, "held": fitted,
                                     "inconclusive": va.rounds_note(last.times_s, est, f"at T = {last.seq_len}")})
viz.show_verdict(tile_v)

# %% [markdown]
# The widget moves the sequence length and the tile size over both models: the bytes saved
# for backward (left) and the predicted time (right), with the measured medians as points and
# the chosen length as a dotted line. A headless build shows its opening setting as a static
# image; the sliders move in a live kernel.
# Beyond the longest length measured both time lines are extrapolations; eager's carries one
# length's FLOP rate to every length, though its rate moves with `T` (the rates are printed
# above), so at the other lengths it can lie off the measured points too.

# %%
# NBVAL_IGNORE_OUTPUT
spec = va.attention_widget(model, points, B, H, D)
viz.build_widget(spec)

# %% [markdown]
# ## 5. Ring attention across processes
#
# **Question.** Split over processes, does ring attention give the same numbers, send the
# bytes counted, share the work evenly, and hide its transfers: once both neighbours have sent,
# does a rank still wait?
#
# **Model.** Ring attention (Liu, Zaharia and Abbeel 2023, "Ring Attention with Blockwise
# Transformers for Near-Infinite Context") splits the sequence over `P` processes. Each holds
# `T/P` queries, keys and values;
# in `P` steps it computes its queries against the key/value block in hand while that block
# goes to the next rank and the previous rank's arrives (`dist.batch_isend_irecv`, so the
# transfer can hide behind the compute). The partial results `(O_a, L_a)` and `(O_b, L_b)`
# merge as `L = log(e^La + e^Lb)` (shifted by the larger one, so large logits cannot
# overflow) and `O = e^(La - L) O_a + e^(Lb - L) O_b`. Backward sends the blocks round again
# with the `dK, dV` accumulated for them, which arrive home after `P` moves.
#
# Each rank therefore sends `(P-1)/P` of the full `K` and `V` per forward. With causal
# attention and contiguous pieces, rank `r` computes `r` full blocks and one diagonal block:
# the last rank does `(2P-1)/P` times the mean work if the diagonal block costs half
# (`2P/(P+1)` if it is computed whole). The zig-zag split gives rank `i` chunks `i` and
# `2P-1-i` of `2P`, pairing a short row of blocks with a long one: every rank the same work.
# The kernel computes each tile on the diagonal whole, so its count lies between the two
# formulas; the code below prints both beside that count, as context (a count that halves the
# diagonal block is the formula by construction, so it is not judged).
#
# **Another way: all-gather.** Llama 3's context parallelism (CP) (Llama Team, "The Llama 3 Herd of
# Models", 2024, section 3.3.2) splits the sequence the same zig-zag way, into `2 x CP` chunks,
# rank `i` holding chunks `i` and `2 x CP - 1 - i`, but passes nothing round a ring: each rank
# all-gathers the whole `K` and `V`, then computes its local queries against them. The
# all-gather's time is exposed, not hidden behind compute; the paper accepts it because with
# grouped-query attention `K` and `V` are much smaller than `Q`, and because any mask (its
# document mask) is simple once a rank holds every key. The ring here differs in what it pays
# for that: each transfer hides behind a block's compute, and a rank holds two `K/V` blocks of
# `T/P` rows at a time instead of the whole sequence's `K` and `V`, at the price of `P - 1`
# exchanges that each wait for a neighbour.
#
# **Prediction.** On 2 processes: output and gradients within 1e-5 of one process (fp32);
# bytes sent exactly as counted; the timed
# per-rank compute imbalance within 25 % of the counted one for both splits; and the slower
# rank's wait for transfers per round (the larger of the two ranks' waits) at most the transfers
# alone (overlapped, some of it hides), judged on its median over the rounds: a claim about a
# typical round, which single rounds may exceed (the verdict prints how many did, and by how
# much). The
# transfers alone are counted as the code posts them: forward waits for one K/V block at each
# of its `P - 1` steps; backward, at each of its first `P - 1` steps, posts the next K/V block
# and then the dK/dV accumulators and waits for both at once, so the two count as one exchange
# of two blocks, timed alone the same way; its last step waits for dK/dV alone
# (`context_model.ring_transfers_s`). A wait also holds the time its neighbour was still
# computing, or off its core, before it sent: a straggler, not a transfer. Each rank stamps when
# it posts its messages and when it enters and leaves each wait (one clock for the processes of
# a machine), so the prediction judges the part of the waits after both neighbours had sent
# (`waits_after_ready`): whether the transfers hide. What a training step pays is the whole
# wait, stragglers included, which overlap cannot hide and no model here predicts; the table
# after the verdict splits each rank's whole wait into the two parts, as means over the rounds,
# which add up.

# %%
res = dist.launch("perfkit.jobs.context_parallel", 2, ["--config", json.dumps(RING)], timeout_s=300)
eq = [e for r in res for e in r["equal"]]
largest = {dt: max(e[k] for e in eq if e["dtype"] == dt for k in ("out_err", "dq_err", "dk_err", "dv_err"))
           for dt in ("float64", "float32")}
worst = largest["float32"]
sent = [(e["stats"]["sent_forward"], e["want_bytes"]["forward"]) for e in eq]
print(f"ring on 2 processes, 3 cases x 2 dtypes: largest difference from float64 attention on one "
      f"process: fp64 {largest['float64']:.1e}, fp32 {worst:.1e}; "
      f"bytes sent per forward {sent[0][0]} (counted {sent[0][1]})")
viz.verdict(Prediction("ring attention's largest difference (fp32)", "fp32 rounding only",
                       high=1e-5), worst)
viz.verdict(Prediction("bytes sent over bytes counted", "(P-1)/P of K and V per forward",
                       value=1.0, rel_tol=0.0), sum(a for a, _ in sent) / sum(b for _, b in sent))

# %%
# context, not a verdict: a count that halves the diagonal block equals (2P-1)/P by construction
display(Markdown("| P | contiguous: (2P-1)/P, diagonal blocks half | tiles of 64 counted (diagonal tiles whole) | "
                 "2P/(P+1), diagonal blocks whole | zig-zag, tiles of 64 counted |\n|---|---|---|---|---|\n"
                 + "\n".join(f"| {p} | {cm.contiguous_imbalance(p):.3f}x | "
                             f"{cm.imbalance(cm.ring_work(4096, p, 'contiguous', tile=64)):.3f}x | "
                             f"{cm.contiguous_imbalance(p, 'full'):.3f}x | "
                             f"{cm.imbalance(cm.ring_work(4096, p, 'zigzag', tile=64)):.3f}x |" for p in (2, 4, 8))
                 + "\n\nThe busiest rank's work over the mean, causal attention over T = 4096."))

# %% [markdown]
# The picture shows which rank computes each (query tile, key tile) of causal attention
# over 64 positions on 4 ranks, tiles of 4. The white upper triangle is skipped. With
# contiguous pieces the last rank owns the longest rows; with zig-zag rank `i` owns chunks `i`
# and `2P - 1 - i` of `2P`: rank 0 the first (shortest) and the last (longest) band, each next
# rank a pair closer to the middle, until the last rank's two chunks meet there. In each pair
# the shorter band is as much shorter than the mean as the other is longer, so the two add up
# to the same area on every rank. The titles count the tiles the kernel computes: a tile on the diagonal is
# computed whole, so a diagonal block costs more than the half the formula `(2P-1)/P` assumes.
# Printed after the figure, the same per-rank work measured on 2 processes: the compute seconds
# each rank spent in its tiles in each round; the figure judged is, per round, the busier rank's
# seconds over the two ranks' mean, its median over the rounds.

# %%
fig = va.plot_tiles(64, 4, 4)
print(f"contiguous at P = 4 over 64 positions: {cm.imbalance(cm.ring_work(64, 4, 'contiguous', tile=4)):.3f}x "
      f"with tiles of 4, between {cm.contiguous_imbalance(4):.3f}x (diagonal blocks half, the formula) and "
      f"{cm.contiguous_imbalance(4, 'full'):.3f}x (diagonal blocks whole); tiles of 1: "
      f"{cm.imbalance(cm.ring_work(64, 4, 'contiguous', tile=1)):.3f}x")

# %%
for split in ("contiguous", "zigzag"):
    want_imb = cm.imbalance(cm.ring_work(RING["time"]["seq_len"], 2, split, tile=64))
    per_rank = [r["time"]["splits"][split]["compute_s"] for r in res]
    timed = cm.timed_imbalance(per_rank)
    print(f"{split}: compute per round over {len(per_rank[0])} rounds, " + "; ".join(
        f"rank {i} median {viz.si(statistics.median(xs), 's')} ({viz.si(min(xs), 's')} to {viz.si(max(xs), 's')}, the slowest {max(xs) / statistics.median(xs):.2f}x it)"
        for i, xs in enumerate(per_rank)))
    viz.verdict(Prediction(f"{split} split: busier rank's compute over the mean (P = 2)",
                           "tile FLOPs counted per rank", value=want_imb, rel_tol=0.25,
                           unit="x", physical=(1, 2)), timed)
    print(cm.imbalance_noise_note(per_rank, timed, want_imb))
    if split == "contiguous":   # what the 25 % band can tell apart
        diag = {"diagonal blocks half": cm.contiguous_imbalance(2), "tiles counted": want_imb,
                "diagonal blocks whole": cm.contiguous_imbalance(2, "full")}
        inside = [k for k, x in diag.items() if abs(x / want_imb - 1) <= 0.25]
        print(f"the band {0.75 * want_imb:.2f}x to {1.25 * want_imb:.2f}x holds "
              + ("all three" if len(inside) == 3 else f"{len(inside)} of the 3") + " models of a diagonal block "
              "at P = 2 (" + ", ".join(f"{k} {x:.3f}x" for k, x in diag.items()) + ")"
              + (": it tests that the contiguous split is unbalanced, not what a diagonal block costs"
                 if len(inside) == 3 else f": {', '.join(inside)}") + "".join(f"; the measured {timed.label} lies " + " and ".join(sides) for sides in [[f"{timed.clear_of(x, 'x')} {k}" for k, x in diag.items() if timed.clear_of(x, "x")]] if sides))
print(cm.split_cost_note(*([r["time"]["splits"][s]["compute_s"] for r in res] for s in ("contiguous", "zigzag")), RING["time"]["seq_len"]).lstrip())

# %%
exchange = statistics.median(x for r in res for x in r["time"]["exchange_s"])   # s: one K/V block alone
pair = statistics.median(x for r in res for x in r["time"]["pair_exchange_s"])   # s: K/V and dK/dV together
transfers = cm.ring_transfers_s(2, exchange, pair)   # as posted: P single exchanges and P - 1 pairs
zz = [r["time"]["splits"]["zigzag"] for r in res]
rounds = RING["time"]["repeat"]
ready = [max(z["ready_wait_s"][i] for z in zz) for i in range(rounds)]   # s: the longer of the ranks' waits
over = sum(r > transfers for r in ready)   # rounds whose wait after both had sent passed the transfers alone
print(f"one K/V block's exchange alone {viz.si(exchange, 's')}, a K/V and a dK/dV block posted together "
      f"{viz.si(pair, 's')} ({pair / exchange:.2f}x, for twice the bytes): {viz.si(transfers, 's')} of transfers alone per forward + backward")
ring_v = judge(Prediction("the slower rank's wait after both neighbours had sent, per forward + backward (zig-zag; "
                          "each round's larger wait of the two ranks, its median over rounds)",
                          "overlapped: at most the transfers alone", high=transfers, unit=" s"),
               stats.median_interval(ready), explain={
    "above": "The transfers took longer than alone though both neighbours had sent: on a shared 2-core machine a "
             "message can also wait for the receiving process's thread to run.",
    "held": f"The rounds' waits after both neighbours had sent ran from {viz.si(min(ready), 's')} to "
            f"{viz.si(max(ready), 's')}, above the transfers alone in {over} of {rounds} rounds; a round in which "
            f"the receiving process waits for its core pays that wait whole. The bound is {transfers / statistics.median(x for z in zz for x in z['compute_s']):.1%} "
            "of a rank's median compute per forward + backward: a held verdict says little of what a step pays waiting (the table below)."})
viz.show_verdict(ring_v)

# %%
mean = statistics.fmean
rows = [(mean(z["compute_s"]), mean(z["wait_s"]), mean(z["ready_wait_s"])) for z in zz]   # s, per rank
display(Markdown("| rank | compute | waited in all | after both neighbours had sent | for a neighbour not yet sent |\n"
                 "|---|---|---|---|---|\n" + "\n".join(
                     f"| {i} | {viz.si(c, 's')} | {viz.si(w, 's')} | {viz.si(r, 's')} | {viz.si(w - r, 's')} |"
                     for i, (c, w, r) in enumerate(rows))))
late = sum(w - r for _, w, r in rows)   # s: both ranks' waits for a neighbour not yet sent, per round
apart = mean(abs(a - b) for a, b in zip(zz[0]["compute_s"], zz[1]["compute_s"]))
whole, compute_s = mean(w for _, w, _ in rows), mean(c for c, _, _ in rows)
print(f"means over the {rounds} rounds, so each rank's two parts add up to its whole; per round the ranks' compute "
      f"differed by a mean of {viz.si(apart, 's')}, "
      + ("as much as" if apart >= late else f"{apart / late:.0%} of")
      + f" the {viz.si(late, 's')} the two ranks waited for a neighbour not yet sent"
      + ("." if apart >= late else "; this run does not time the rest (a rank descheduled on the shared cores "
         "waits the same way)."))
mid, means_r = statistics.median(ready), [r for _, _, r in rows]
side = "below both" if mid < min(means_r) else "above both" if mid > max(means_r) else "between the"
print(f"the verdict's figure, the median over rounds of the slower rank's wait after both had sent, {viz.si(mid, 's')}, "
      f"lies {side} ranks' means in the table ({', '.join(viz.si(r, 's') for r in means_r)})"
      + (f": long rounds, such as the longest, {viz.si(max(ready), 's')} ({max(ready) / mid:.1f}x that median), pull "
         "a mean up where a median does not move" if side == "below both" else ""))

# %% [markdown]
# ## 6. The longest sequence in a memory budget
#
# **Model.** In forward a rank of the ring keeps its `Q, K, V, O`, the key/value block it
# computes with and the one arriving: `8 D` values per local row plus the 4-byte `L`. At the
# first step the block in hand is a stacked copy of the rank's own `K` and `V`, which this
# implementation makes to send them as one message; sending `K` and `V` from their own buffers
# would hold `2 D` less per row (`6 D` forward, `12 D` training), so the figures below are this
# implementation's, not every ring's. Training
# needs more: at backward's peak a rank also holds `dO` and its `dQ`, and the `dK, dV`
# accumulators travel with their `K, V` block, so `K, V, dK, dV` are in hand and arriving:
# `6 D + 8 D = 14 D` values per local row, plus `L` and `rowsum(dO * O)`
# (`perfkit.parallel.context_model.ring_memory_bytes(..., training=True)`, a count of the
# buffers `ring_attention`'s backward allocates, read from its code: a model, not measured
# here). One process with FlashAttention has no blocks
# in flight: `4 D` per row forward, `8 D` training. The local rows are `T/P`; the table uses a
# 1 GiB budget for attention alone, 32 heads of 128 dimensions, fp32.

# %%
PS = (1, 2, 4, 8, 16)
longest = {(p, tr): cm.longest_sequence(2**30, p, heads=32, head_dim=128, training=tr)
           for p in PS for tr in (False, True)}
for p in PS:
    print(f"P = {p:2d}: longest T forward {longest[p, False]:7d}, training {longest[p, True]:7d}")
print(f"eager attention on one process: longest T {int((2**30 / (32 * 4)) ** 0.5)} (its T² matrix alone)")
grow = [longest[q, True] / longest[p, True] for p, q in zip(PS[1:], PS[2:])]
by = f"{min(grow):.2f}" if f"{min(grow):.2f}" == f"{max(grow):.2f}" else f"{min(grow):.2f} to {max(grow):.2f}"
print(f"training: each doubling of P from 2 on multiplies the longest T by {by}; "
      f"from P = 1 to 2 by {longest[2, True] / longest[1, True]:.2f} (forward "
      f"{longest[2, False] / longest[1, False]:.2f}): the blocks in flight, which one process does not "
      "hold, eat into what halving the rows saves")

# %% [markdown]
# This is attention's share only: a whole layer also keeps its MLP and projections'
# activations (notebook 04), which grow linearly with `T/P` as well, so beyond `P = 2` the
# ring keeps the linear scaling. What it cannot remove is the time: each rank still computes
# `1/P` of the `T²` tiles, so the step's compute per rank grows with `T²/P`, and the transfers
# hide only while a block's compute takes longer than sending it.

# %% [markdown]
# ## What carries over to GPUs
#
# - Memory: eager attention keeps `B H T²` probabilities for backward, FlashAttention `O(T D)`
#   per head (counted exactly in section 2); that gap does not depend on the hardware.
# - Time: a GPU runs the tiles in one fused kernel (FlashAttention, or PyTorch's SDPA), so the
#   per-tile call cost that sets this CPU's tile size is absent; there the tile is sized by
#   on-chip memory against HBM re-reads, and recomputing in backward saves the `T²` traffic.
# - Ring attention divides the sequence's memory by `P`, plus the blocks in flight: here a
#   stacked copy of the rank's own `K` and `V` and the block arriving (an implementation that
#   sends `K` and `V` from their own buffers saves the copy). Its transfers hide only while a
#   block's compute outlasts sending them; what a step pays besides is the wait for a
#   neighbour that has not yet sent, which overlap cannot hide. Under a causal mask the
#   contiguous split leaves the ranks' work unequal; the zig-zag split evens the tiles, and
#   whether that shortens the step depends on what else it costs (section 5 prints both here).

# %%
viz.show_headlines({
    "eager T² term (bytes)": f"{terms['eager'][0]:.1f}",
    "FlashAttention fwd+bwd / fwd": f"{ratio.text('x')}: {calls_v.outcome} (a model's expected range, {ends[0]:.2f}x to {ends[1]:.2f}x, its high end {ends[1] / ends[0]:.2f}x its low" + ("; held says its interval lies between the calls' end and the FLOPs', not which end it lies nearer)" if calls_v.held else ")"),
    "ring fp32 difference (P=2)": f"{worst:.1e}",
    f"FlashAttention, tiles of 64, T = {last.seq_len}, tile model (judged)": f"{viz.si(est.value, 's')} against {viz.si(p_tile.value, 's')} ± {tol:.0%}: {tile_v.outcome}" + (f" (the predicted time lies {'above' if off == 'below' else 'below'} the measured {est.label}; the band is tile 64's own largest miss where the model was fitted)" if (off := est.clear_of(p_tile.value, 's')) else "") + va.row_flag(points),
    "zig-zag imbalance (P=2, timed)": f"{timed.value:.2f}x",
    "ring: the slower rank's wait after both neighbours had sent, per fwd+bwd (median over rounds) / transfers alone (judged)": f"{viz.si(statistics.median(ready), 's')} / {viz.si(transfers, 's')}: {ring_v.outcome}" + (f" (judged on the median; {over} of {rounds} rounds waited longer than the bound, the longest {max(ready) / transfers:.1f}x it)" if over else ""),
    "ring: a rank's whole wait per fwd+bwd, stragglers included (mean over ranks and rounds; not predicted)":
        f"{viz.si(whole, 's')}, {whole / compute_s:.0%} of its compute",
})
