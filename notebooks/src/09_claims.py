# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · Claims under the microscope: common advice, measured
#
# Optimisation guides repeat tips with confident numbers ("40-60 % faster", "80 % less
# memory") and settings ("4-8 workers", "500 MB buckets"), often without a measurement. This
# notebook takes the most common ones one at a time and, for each:
#
# 1. states the advice as it is usually written;
# 2. says how it is measured here (the tools of modules 00-07);
# 3. records what the **course's own models predict** (a `Prediction`, judged like every
#    other prediction of the course);
# 4. measures it, interleaved, with the spread of back-to-back pairs;
# 5. computes a **verdict on the advice** (`perfkit.verdict.assess`): *holds*, *holds partly*
#    (the right direction, not as far), *does not hold here*, *inconclusive* (the spread
#    reaches across the no-effect value: the noise is larger than the effect), or *GPU only*
#    (the advice is about a GPU; on a CPU its analogue is measured where one exists, and the
#    claim itself when CUDA is present).
#
# "Here" matters: a verdict is about this machine, this model size and this load. The summary
# table at the end collects them.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
REPEAT = 5 if QUICK else 9                     # interleaved timing rounds per comparison
FAST_REPEAT = 3 * REPEAT                       # rounds for comparisons of milliseconds
GPT = dict(n_embd=64, n_layer=2, n_head=2)     # the tiny GPT-2 of the memory and precision claims
SEQ, BATCH = 64, 8                             # tokens per sample, samples per batch
ACT_BATCHES = [1, 4, 16] if QUICK else [1, 4, 16, 64]  # batches of the activation sizing rule
CK_LAYERS = 4                                  # blocks of the checkpointing model
MLP_WIDTH = 1024                               # hidden width of the GELU/ReLU and compile MLPs
CONV = dict(channels=64, size=32, batch=4 if QUICK else 8, groups=8)
COMPILE_TRAIN = not QUICK  # compiling backward too costs tens of seconds on a cold CPU cache
WORKERS = [0, 1, 2, 4] if QUICK else [0, 1, 2, 4, 8]
LOAD_BATCHES = 20 if QUICK else 40             # batches per loader run (well past the prefetched ones)
LOAD_ROUNDS = 2 if QUICK else 3                # rounds over the worker counts (for a spread)
MICRO = 4                                      # micro-batches per step (empty_cache, accumulation)
DDP_MLP = dict(width=256, depth=6) if QUICK else dict(width=512, depth=8)
DDP_CAPS = [0.05, 25, 500]                     # MB: tiny, DDP's default, the advice's 500 MB
TOPK_STEPS = 20 if QUICK else 60               # training steps per method (claim 16)
SCALER_BATCH = 4                               # samples per fp16 step of the loss-scaler claim (19)
MHA = dict(embed=64, heads=4, batch=4, seq=128)  # the attention of claim 20 (T well above head_dim)
ULTRA = dict(samples=8 if QUICK else 16, accumulate=8, workers=8)  # claim 21: batch, micro-batches, workers
ULTRA_ROUNDS = 5 if QUICK else 7               # interleaved rounds of claim 21 (a bf16 step is slow on a CPU)
COMPILE_ULTRA = not QUICK                      # compiling the GPT-2 blocks costs tens of seconds on a cold cache

# %% [markdown]
# The 2-process DDP experiments (claims 14-16) start first, in a background thread: each
# process spends seconds importing torch, and the claims before the first timing need only
# counting, not the cores. The notebook waits for the job before it times anything.

# %%
import json
from concurrent.futures import ThreadPoolExecutor

from perfkit import dist

DDP_CFG = {"model": DDP_MLP, "batch": 32,
           "buckets": {"caps_mb": DDP_CAPS, "repeat": REPEAT},
           "accumulate": {"ks": [1, MICRO], "repeat": 3},
           "accumulate_synced": {"ks": [MICRO], "repeat": 3}}
TOPK_CFG = {"workload": "digits", "steps": TOPK_STEPS, "batch": 32, "methods": ["none", "topk_1pct_ef"]}
pool = ThreadPoolExecutor(max_workers=1)
ddp_job = pool.submit(dist.launch, "perfkit.jobs.suite", 2,
                      ["--config", json.dumps({"data_parallel": DDP_CFG, "compression": TOPK_CFG})],
                      timeout_s=600)

# %%
import gzip
import itertools
import math
import statistics
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from perfkit import compute, hw, timing, viz
from perfkit.compute import compiling
from perfkit.compute.flops import Speedup
from perfkit.data import LoaderConfig, SlowDataset, measure_loader, simulate_pipeline
from perfkit.memory import (
    SavedTensorMeter,
    activations,
    count_parameters,
    gpt2_saved_activation_bytes,
    optimizer_state_bytes,
    zero_model_states,
)
from perfkit.memory.anatomy import trim_heap
from perfkit.models import SmallCNN, tiny_gpt2
from perfkit.verdict import Claim, Prediction, assess, busy, judge
from perfkit.viz import si
from perfkit.jobs.data_parallel import make_mlp

DEVICE = timing.resolve_device()
CUDA = DEVICE.type == "cuda"
CORES = os.cpu_count()
limits = hw.cached_limits(quick=QUICK)  # measured by notebook 00 (or now, if missing)
THREADS = 1 if not CUDA else torch.get_num_threads()
torch.set_num_threads(THREADS)  # one compute thread: ratios on a shared CPU stay readable
VERDICTS = {}  # claim -> perfkit.verdict.ClaimVerdict, for the summary table
print(f"torch {torch.__version__} on {limits.name}; {CORES} CPU cores, {THREADS} compute thread(s), "
      f"load average {os.getloadavg()[0]:.1f}")


def speedup_of(baseline, candidate, repeat=REPEAT):
    """Interleaved timing of two callables: a Speedup (ratio, pair spread low-high)."""
    return compute.compare(baseline, candidate, warmup=1, repeat=repeat)


def pairs(sp):
    """A Speedup as printed here: the median of back-to-back pair ratios (what the verdicts use)."""
    return (f"{sp.pair_median:.2f}x (median of {len(sp.pair_ratios)} back-to-back pairs, p10-p90 "
            f"{sp.low:.2f}-{sp.high:.2f}x; {sp.baseline.median_s * 1e3:.1f} -> {sp.candidate.median_s * 1e3:.1f} ms)")


def claim_verdict(name, claim, measured, spread=None, reasons=None, gpu_only=False, not_judged=None):
    """Assess the advice from the measurement, show the verdict, keep it for the table."""
    VERDICTS[name] = v = assess(claim, measured, spread, reasons, gpu_only, not_judged)
    viz.show_claim(v)


# %% [markdown]
# **Why one compute thread.** On a 2-core machine shared with other jobs, two OpenMP threads
# stall at every barrier whenever the OS deschedules one, and step times swing severalfold;
# ratios of single-threaded steps are far steadier. Claim 13 measures the thread count itself.

# %% [markdown]
# ## 1. "Adam needs 2x the model's memory, activations 4x" (a sizing rule)
#
# **The advice.** Size a training job as: weights `W`, Adam's state `2W`, activations `4W`.
#
# **The model** (module 04). fp32 Adam keeps two fp32 moments per parameter: 8 bytes against
# the weight's 4, exactly 2x (plus a step counter per tensor). With mixed precision the rule
# breaks: bf16 weights (2 bytes) against fp32 moments and an fp32 master copy (12 bytes) is 6x.
# Activations are a different kind of quantity: they grow with batch x sequence, the weights do
# not, so no fixed multiple of `W` can describe them. **Prediction:** the Adam ratio is 2 within
# 1 %; the activation/weight ratio grows in proportion to the batch.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
for recipe in ("fp32_adam", "mixed_adam"):
    s = zero_model_states(1e9, recipe=recipe)
    print(f"{recipe}: per parameter {s.params / 1e9:g} B weights, {s.grads / 1e9:g} B gradients, "
          f"{s.optimizer / 1e9:g} B optimizer state -> optimizer / weights = {s.optimizer / s.params:g}x")

# %%
torch.manual_seed(0)
gpt = tiny_gpt2(block_size=SEQ, **GPT)
opt = torch.optim.AdamW(gpt.parameters(), lr=1e-3)
ids = torch.randint(0, 1024, (BATCH, SEQ))
gpt(input_ids=ids, labels=ids).loss.backward()
opt.step()  # Adam creates its state at the first step
weights = count_parameters(gpt).total_bytes
adam_ratio = optimizer_state_bytes(opt) / weights
print(f"tiny GPT-2: {count_parameters(gpt).total:,} parameters, {weights / 2**20:.2f} MiB of weights; "
      f"AdamW state {optimizer_state_bytes(opt) / 2**20:.2f} MiB = {adam_ratio:.4f}x the weights")
act_ratio = {}
for b in ACT_BATCHES:
    x_b = torch.randint(0, 1024, (b, SEQ))
    act_ratio[b] = compute.activation_bytes(lambda x_b=x_b: gpt(input_ids=x_b, labels=x_b).loss, gpt) / weights
print(f"activations saved for backward / weights at sequence length {SEQ}: "
      + ", ".join(f"batch {b}: {r:.2f}x" for b, r in act_ratio.items()))

# %%
viz.show_verdict(judge(Prediction("AdamW state over fp32 weights", "two fp32 moments per parameter",
                                  value=2.0, rel_tol=0.01, unit="x"), adam_ratio))
b_lo, b_hi = ACT_BATCHES[0], ACT_BATCHES[-1]
growth = act_ratio[b_hi] / act_ratio[b_lo]
viz.show_verdict(judge(Prediction(f"activation/weight ratio at batch {b_hi} over batch {b_lo}",
                                  "activations are linear in batch x sequence", value=b_hi / b_lo,
                                  rel_tol=0.05, unit="x"), growth))
claim_verdict("Adam state = 2x the model", Claim(
    "Adam needs 2x the model's memory", "AdamW state / fp32 weights", low=1.98, high=2.02, unit="x"),
    adam_ratio, reasons={
        "holds": "True for fp32 weights. With mixed precision (bf16 weights, fp32 master copy and "
                 "moments) the same rule gives 6x, as the formula above shows."})
near4 = min(act_ratio, key=lambda b: abs(act_ratio[b] - 4))
claim_verdict("activations = 4x the model", Claim(
    "activations need 4x the model's memory", f"activations / weights, largest over smallest "
    f"(batch {b_hi} vs {b_lo})", low=0.8, high=1.25, unit="x"), growth, reasons={
        "does not hold here": f"The ratio is not a constant: it moved {growth:.0f}x between batch {b_lo} "
                              f"and {b_hi} (closest to 4x at batch {near4}: {act_ratio[near4]:.2f}x). "
                              "Size activations from batch x sequence x per-token bytes (module 04), "
                              "not from the weights."})

# %% [markdown]
# ## 2. "Save the checkpoint as `.pt.gz` to compress it"
#
# **The advice.** `torch.save(model.state_dict(), "ckpt.pt.gz")` writes a compressed file.
#
# **The model.** `torch.save` writes a zip archive (stored, not deflated) whatever the file is
# called; nothing in it reads the extension. Compressing needs `gzip.open(...)` (or
# `torch.save` into a gzip stream). And even then fp32 weights compress poorly: their
# mantissa bits are close to random. **Predictions:** the `.pt.gz` file is the `.pt` file's
# size within 1 %, and starts with a zip header (`PK`), not gzip's (`1f 8b`); real gzip saves
# at most 20 %.

# %%
state = gpt.state_dict()
with tempfile.TemporaryDirectory() as tmp:
    plain, named_gz, real_gz = Path(tmp, "ckpt.pt"), Path(tmp, "ckpt.pt.gz"), Path(tmp, "real.pt.gz")
    torch.save(state, plain)
    torch.save(state, named_gz)
    with gzip.open(real_gz, "wb") as f:
        torch.save(state, f)
    sizes = {p.name: p.stat().st_size for p in (plain, named_gz, real_gz)}
    magic = named_gz.read_bytes()[:2]
    with gzip.open(real_gz, "rb") as f:
        back = torch.load(f)
assert all(torch.equal(back[k], v) for k, v in state.items())  # the gzip stream round-trips
for name, n in sizes.items():
    print(f"{name:>11}: {n / 2**20:.3f} MiB")
print(f"ckpt.pt.gz starts with {magic!r} ({'a zip archive' if magic == b'PK' else 'gzip' if magic == bytes([31, 139]) else 'other'})")

# %%
name_ratio = sizes["ckpt.pt.gz"] / sizes["ckpt.pt"]
gzip_ratio = sizes["real.pt.gz"] / sizes["ckpt.pt"]
viz.show_verdict(judge(Prediction(".pt.gz size over .pt size", "torch.save ignores the file name",
                                  value=1.0, rel_tol=0.01, unit="x"), name_ratio))
viz.show_verdict(judge(Prediction("gzip'd checkpoint over raw", "fp32 mantissas are close to random",
                                  low=0.8, high=1.0, unit="x"), gzip_ratio, explain={
    "below": "These weights compress better than trained ones would: a freshly initialised model has "
             "structure (zero biases, unit layer-norm weights) that training removes."}))
claim_verdict(".pt.gz compresses", Claim("saving to a .pt.gz file name compresses the checkpoint",
                                         ".pt.gz size / .pt size", high=0.99, partly=1.0, unit="x"),
              name_ratio, reasons={
    "does not hold here": f"The name changes nothing; real gzip (gzip.open) gives {gzip_ratio:.2f}x, "
                          "and costs a compression pass over every byte."})

# %% [markdown]
# ## 3. "Memory efficiency = batch x sequence x 4 bytes / allocated memory"
#
# **The advice.** Track this ratio as the memory efficiency of a training setup.
#
# **The model.** The numerator is the bytes of the input token ids stored as 4-byte integers.
# The memory of a step (module 04) is model states `S` (weights, gradients, optimizer state)
# plus activations, `a` bytes per token: the metric is `4BT / (S + aBT)`. It can never exceed
# `4 / a`, whatever the setup, and `a` (hundreds of bytes per token per layer) is set by the
# architecture, not by how well memory is used. **Prediction:** the metric measured on the
# tiny GPT-2 equals `4BT / (S + aBT)` with `S` counted and `a` from the activation model
# (module 04's formula) within 10 %, and stays below `4 / a`.

# %%
S = weights + weights + optimizer_state_bytes(opt)          # weights, gradients, AdamW state
a_pred = gpt2_saved_activation_bytes(BATCH, SEQ, GPT["n_embd"], GPT["n_layer"], GPT["n_head"],
                                     1024).total / (BATCH * SEQ)  # bytes per token, modelled
saved_b = compute.activation_bytes(lambda: gpt(input_ids=ids, labels=ids).loss, gpt)
metric = BATCH * SEQ * 4 / (S + saved_b)
predicted_metric = BATCH * SEQ * 4 / (S + a_pred * BATCH * SEQ)
print(f"batch {BATCH} x {SEQ}: model states {S / 2**20:.2f} MiB, activations {saved_b / 2**20:.2f} MiB "
      f"({saved_b / (BATCH * SEQ):.0f} B/token; the model says {a_pred:.0f})")
print(f"metric = {BATCH * SEQ * 4:,} B / {(S + saved_b) / 2**20:.2f} MiB = {metric:.2e}; "
      f"its ceiling 4 / a = {4 / a_pred:.2e}")

# %%
viz.show_verdict(judge(Prediction("the metric", "4BT / (S + aBT), module 04's memory model",
                                  value=predicted_metric, rel_tol=0.1), metric))
claim_verdict("memory efficiency metric", Claim(
    "memory efficiency = batch x seq x 4 bytes / allocated memory (1 = all memory useful)",
    "the metric on a tiny GPT-2 step", low=0.5, high=1.0), metric, reasons={
        "does not hold here": f"It measures the input ids against everything else: at most 4 / a = "
                              f"{4 / a_pred:.1e} for this architecture, however well memory is used. "
                              "Useful instead: the share of memory the model accounts for "
                              "(module 04) and MFU for time (module 06)."})

# %% [markdown]
# The two-process job has had the time it needed to start; wait for it before timing anything,
# so that its processes do not compete with the timings for the cores.

# %%
job = ddp_job.result()[0]  # rank 0's result (each time is the slower rank's)
ddp, topk = job["data_parallel"], job["compression"]
pool.shutdown()
print(f"DDP job done: {len(ddp['buckets'])} bucket sizes, accumulation with and without no_sync(), "
      f"{len(topk['runs'])} compression methods")

# %% [markdown]
# ## 4. "GELU is more efficient than ReLU"
#
# **The advice.** Prefer GELU to ReLU for efficiency.
#
# **The model.** Both are elementwise: they read and write each element once (the same
# bytes), but GELU evaluates `erf` per element where ReLU compares with zero, and its backward
# needs the Gaussian density as well. In an MLP the matmuls dominate the step, so the activation
# changes the step time little (Amdahl). **Prediction:** the GELU op alone is slower than ReLU's
# (ratio at least 1); whether a whole step notices is for the measurement to say.

# %%
h = torch.randn(BATCH * SEQ, MLP_WIDTH)  # (tokens, hidden): the MLP's hidden activations
n_call = timing.calibrate_number(lambda: F.gelu(h), target_s=0.02)  # calls per timing: >= 20 ms
ops = timing.interleaved([lambda: [F.relu(h) for _ in range(n_call)], lambda: [F.gelu(h) for _ in range(n_call)]],
                         warmup=1, repeat=FAST_REPEAT)
op = Speedup(ops[1], ops[0])  # ratio = GELU time / ReLU time


def mlp_step(act):
    """One SGD step of Linear -> act -> Linear on the same batch, as a no-argument callable."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(256, MLP_WIDTH), act, nn.Linear(MLP_WIDTH, 256))
    o = torch.optim.SGD(m.parameters(), lr=1e-3)
    xb = torch.randn(BATCH * SEQ, 256)
    def step():
        m(xb).square().mean().backward()
        o.step()
        o.zero_grad(set_to_none=True)
    return step


act = speedup_of(mlp_step(nn.GELU()), mlp_step(nn.ReLU()))  # ratio = GELU step / ReLU step
print(f"op alone on ({BATCH * SEQ}, {MLP_WIDTH}), {n_call} calls per timing: GELU "
      f"{ops[1].median_s / n_call * 1e6:.0f} µs, ReLU {ops[0].median_s / n_call * 1e6:.0f} µs per call; "
      f"GELU / ReLU {op.pair_median:.2f}x (pairs p10-p90 {op.low:.2f}-{op.high:.2f}x)")
print(f"MLP training step: GELU / ReLU time {pairs(act)}")

# %%
viz.show_verdict(judge(Prediction("GELU op time over ReLU op time", "erf per element against a comparison",
                                  low=1.0, unit="x"), op.pair_median, spread=(op.low, op.high)))
claim_verdict("GELU more efficient than ReLU", Claim(
    "GELU is more efficient than ReLU", "ReLU step time / GELU step time (> 1: GELU faster)",
    low=1.0, unit="x"), 1 / act.pair_median, (1 / act.high, 1 / act.low), reasons={
        "does not hold here": "GELU costs more per element and the step pays it. Its reason to exist is "
                              "model quality (smoother gradients), not speed.",
        "inconclusive": f"GELU's extra forward time ({(ops[1].median_s - ops[0].median_s) / n_call * 1e6:.0f} µs a "
                        f"call, measured above) is {(ops[1].median_s - ops[0].median_s) / n_call / act.baseline.median_s:.1%}"
                        f" of a {act.baseline.median_s * 1e3:.1f} ms step, and the pairs differ by more"
                        + (f"; {busy()}." if busy() else "."),
        "holds": f"The GELU step was faster here although the op alone cost {op.pair_median:.2f}x ReLU's: "
                 "the step's difference is the run's noise, not the activation."})

# %% [markdown]
# ## 5. "Grouped convolutions reduce computation"
#
# **The advice.** Use grouped convolutions (`groups=g`) to cut the cost of a convolution.
#
# **The model.** With `g` groups each output channel sees `C / g` input channels: FLOPs and
# weights fall by exactly `g`. The bytes of the input and output do not change. By the
# roofline (module 00), time is at least `max(FLOPs / peak, bytes / bandwidth)`, so the time can
# fall by at most the ratio of those bounds, and the kernels for grouped convolutions are less
# tuned than dense ones. **Predictions:** the FLOP count falls by `g` exactly (counted below); the
# time falls by at most the roofline ratio.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
C, HW, B, G = CONV["channels"], CONV["size"], 1, CONV["groups"]
conv_flops = {}
for g in (1, G):
    with FlopCounterMode(display=False) as fc:
        nn.Conv2d(C, C, 3, padding=1, groups=g)(torch.zeros(B, C, HW, HW))
    conv_flops[g] = fc.get_total_flops()
print(f"3x3 conv, {C} -> {C} channels, {HW}x{HW}, batch {B}: groups=1 {conv_flops[1]:,} FLOPs, "
      f"groups={G} {conv_flops[G]:,} FLOPs ({conv_flops[1] / conv_flops[G]:g}x fewer)")

# %%
B = CONV["batch"]
xc = torch.randn(B, C, HW, HW, device=DEVICE)  # on the device whose ceilings the roofline uses
convs = {g: nn.Conv2d(C, C, 3, padding=1, groups=g).to(DEVICE).eval() for g in (1, G)}
def conv_call(g):
    def run():  # cuDNN's TF32 off: fp32 arithmetic, as the fp32 ceiling assumes
        with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            convs[g](xc)
    return run
grp = speedup_of(conv_call(1), conv_call(G), FAST_REPEAT)
io_bytes = 2 * xc.numel() * 4  # read the input, write the output (fp32)
terms = {g: (conv_flops[g] * B / limits.peak_flops("float32"),  # s: compute, then bytes, at the ceilings
             (io_bytes + 9 * C * C // g * 4) / limits.copy_bytes_per_s) for g in (1, G)}
bound = {g: max(t) for g, t in terms.items()}
roof = bound[1] / bound[G]
kind = {g: "compute-bound" if t[0] >= t[1] else "memory-bound" for g, t in terms.items()}
print(f"batch {B}: groups={G} against groups=1 {pairs(grp)}; roofline bound on the speedup {roof:.2f}x "
      f"(groups=1 {kind[1]} at {si(bound[1], 's')}, groups={G} {kind[G]} at {si(bound[G], 's')})")
if grp.baseline.median_s < bound[1]:
    print(f"groups=1 ran in {si(grp.baseline.median_s, 's')}, faster than its roofline bound: the fp32 ceiling "
          f"notebook 00 cached ({si(limits.peak_flops('float32'), 'FLOP/s')}) is too low (probably measured on a "
          "busy machine or at QUICK sizes); rerun notebook 00 on a quiet machine")

# %%
rate = {g: conv_flops[g] * B / m.median_s for g, m in ((1, grp.baseline), (G, grp.candidate))}  # FLOP/s
bound_io = terms[G][1]  # s: the grouped call's bytes alone
rates_conv = (f"the dense kernel ran at {si(rate[1], 'FLOP/s')} ({rate[1] / limits.peak_flops('float32'):.0%} of the "
              f"fp32 ceiling), the grouped one at {si(rate[G], 'FLOP/s')}")
noisy = (f"Time fell more than the FLOPs ({G}x): the pairs spread {grp.low:.2f}-{grp.high:.2f}x, too widely "
         "to tell" + (f"; {busy()}" if busy() else "") + ".")
viz.show_verdict(judge(Prediction(f"groups={G} speedup", "roofline: max(FLOPs / peak, bytes / bandwidth)",
                                  high=roof, unit="x"), grp.pair_median, spread=(grp.low, grp.high), explain={
    "above": f"Faster than the roofline allows: {rates_conv}. " + (noisy if grp.pair_median > G else
             "The dense convolution ran below the ceiling, so its bound is not what limited it.")}))
claim_verdict("grouped convolutions", Claim(
    f"grouped convolutions reduce computation (FLOPs fall {G}x: does time?)",
    f"groups={G} speedup over groups=1", low=0.75 * G, partly=1.0, unit="x"), grp.pair_median, (grp.low, grp.high),
    reasons={"holds partly": f"FLOPs fall {G}x, time less: {rates_conv}. Moving the input and output (which "
                             f"stay) takes {si(bound_io, 's')} at the copy bandwidth, "
                             f"{bound_io / grp.candidate.median_s:.0%} of the grouped call.",
             "holds": noisy if grp.pair_median > G else f"Time fell nearly as much as the FLOPs: {rates_conv}.",
             "does not hold here": f"Fewer FLOPs, no faster: {rates_conv}, slower per FLOP by more than the "
                                   "FLOPs saved."})

# %% [markdown]
# ## 6. "Gradient checkpointing reduces memory by up to 80 %"
#
# **The advice.** Turn on activation (gradient) checkpointing to cut memory by up to 80 %.
#
# **The model** (module 04). A checkpoint per block keeps only each block's input and
# recomputes the rest in backward. It shrinks *activations* only: weights, gradients and Adam's
# state stay. `gpt2_saved_activation_bytes` counts both cases op by op. **Prediction:** the
# activation memory saved matches that model within 5 %; the share of the whole step's memory
# saved is smaller, by the share of model states.

# %%
ck_kw = dict(GPT, n_layer=CK_LAYERS)
x_ck = torch.randint(0, 1024, (BATCH, SEQ))
saved_ck = {}
for on in (False, True):
    torch.manual_seed(0)
    m = tiny_gpt2(block_size=SEQ, **ck_kw)
    if on:
        activations.checkpoint_blocks(m.transformer.h)
    with SavedTensorMeter(m) as meter:
        m(input_ids=x_ck, labels=x_ck).loss.backward()
    saved_ck[on] = meter.report().activation_bytes
states_ck = 4 * count_parameters(m).total_bytes  # fp32 weights, gradients, two Adam moments
model_ck = [gpt2_saved_activation_bytes(BATCH, SEQ, ck_kw["n_embd"], CK_LAYERS, ck_kw["n_head"], 1024,
                                        checkpointing=c).total for c in (False, True)]
act_saved = 1 - saved_ck[True] / saved_ck[False]
step_saved = (saved_ck[False] - saved_ck[True]) / (states_ck + saved_ck[False])
print(f"{CK_LAYERS} blocks, batch {BATCH} x {SEQ}: activations {saved_ck[False] / 2**20:.2f} -> "
      f"{saved_ck[True] / 2**20:.2f} MiB ({act_saved:.0%} saved; model {1 - model_ck[1] / model_ck[0]:.0%}); "
      f"model states {states_ck / 2**20:.2f} MiB; whole step {step_saved:.0%} saved")

# %%
viz.show_verdict(judge(Prediction("share of activation memory checkpointing saves", "module 04's op-by-op count",
                                  value=1 - model_ck[1] / model_ck[0], rel_tol=0.05, physical=(0, 1)), act_saved))
claim_verdict("checkpointing: up to 80 % less memory", Claim(
    "gradient checkpointing reduces memory by up to 80 %", "share of the step's memory saved "
    "(model states + activations)", low=0.6, high=0.8, partly=0.0), step_saved, reasons={
        "holds partly": f"Activations shrank {act_saved:.0%}; the model states do not shrink at all, and "
                        "what lies outside the blocks (the logits and their log-softmax) stays. The share "
                        "grows with batch x sequence and the number of blocks.",
        "holds": "Here activations dominate the step's memory, so saving most of them saves most of it."})

# %% [markdown]
# ## 7. `checkpoint_sequential(custom_forward, chunks=2, module=..., inputs=...)`, as guides write it
#
# **The advice.** Checkpoint a sequential model with
# `checkpoint_sequential(custom_forward, chunks=2, module=model, inputs=x)`.
#
# **The model.** PyTorch's signature is `checkpoint_sequential(functions, segments, input,
# use_reentrant=...)`: `functions` is an `nn.Sequential` (or a list of modules) run in order,
# split into `segments` pieces whose inputs are kept and whose insides are recomputed in
# backward. There are no `chunks`, `module` or `inputs` arguments, so the call as written
# cannot run. **Predictions:** the correct call gives the plain model's gradients (up to fp32
# rounding, 1e-6) and keeps fewer bytes for backward than the plain forward.

# %%
from torch.utils.checkpoint import checkpoint_sequential

torch.manual_seed(0)
seq_model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(8)])
xs = torch.randn(BATCH * SEQ, 256, requires_grad=True)
try:
    checkpoint_sequential(lambda *a: seq_model(*a), chunks=2, module=seq_model, inputs=xs)
    as_written = 1.0
except TypeError as e:
    as_written = 0.0
    print(f"as written: TypeError: {e}")
grads, kept = {}, {}
for name in ("plain", "checkpoint_sequential"):
    seq_model.zero_grad()
    with SavedTensorMeter(seq_model, inputs=[xs]) as meter:
        out = seq_model(xs) if name == "plain" else checkpoint_sequential(seq_model, 2, xs, use_reentrant=False)
    out.square().mean().backward()
    kept[name] = meter.report().activation_bytes
    grads[name] = torch.cat([p.grad.flatten() for p in seq_model.parameters()])
diff = float((grads["plain"] - grads["checkpoint_sequential"]).abs().max())
print(f"checkpoint_sequential(seq_model, 2, x, use_reentrant=False): max |grad difference| {diff:.1e}; "
      f"kept for backward {kept['plain'] / 2**20:.2f} -> {kept['checkpoint_sequential'] / 2**20:.2f} MiB")

# %%
viz.show_verdict(judge(Prediction("max gradient difference, checkpointed against plain", "recomputation "
                                  "repeats the same ops", high=1e-6), diff))
viz.show_verdict(judge(Prediction("bytes kept for backward, checkpointed over plain", "only segment inputs "
                                  "and the last segment are kept", high=1.0, unit="x"),
                       kept["checkpoint_sequential"] / kept["plain"]))
claim_verdict("checkpoint_sequential as guides write it", Claim(
    "checkpoint_sequential(custom_forward, chunks=2, module=..., inputs=...)", "the call runs (1) or raises (0)",
    low=1.0, high=1.0), as_written, reasons={
        "does not hold here": "The call raises TypeError; the working call is "
                              "checkpoint_sequential(model, segments, x, use_reentrant=False), checked above."})

# %% [markdown]
# ## 8. "Mixed precision gives a 40-60 % speedup and halves memory"
#
# **The advice.** Turn on mixed precision: 40-60 % faster ("2x on modern GPUs"), half the memory.
#
# **The model** (module 06). Autocast runs matmuls in bf16 and keeps reductions, weights and
# the optimizer in fp32. The speedup is Amdahl's: only the matmul share `f` of the step speeds
# up, by the ratio `r` of the bf16 and fp32 ceilings notebook 00 measured; on a CPU without
# bf16 units `r < 1`. The speed claim comes from GPUs (tensor cores); a CPU whose bf16 ceiling is
# above its fp32 one (`r > 1`) runs the same autocast on fast bf16 instructions, so there the claim
# is judged on the CPU, while on a CPU without them it is GPU only (its CPU analogue measured). The
# GPU claim itself runs when CUDA is present. Memory: only what autocast saves in bf16 halves; fp32
# tensors (layer norms, the loss) stay. **Predictions:** the step speedup is Amdahl's within 25 %;
# saved activations fall to between 50 % and 100 % of fp32's.

# %%
def gpt_step(precision, model_kw=GPT, batch=BATCH, seq=SEQ):
    """One AdamW step of a seeded tiny GPT-2 in `precision`, as a no-argument callable."""
    torch.manual_seed(0)
    m = tiny_gpt2(block_size=seq, **model_kw).to(DEVICE)
    xb = torch.randint(0, 1024, (batch, seq), device=DEVICE)
    step = compute.make_train_step(m, torch.optim.AdamW(m.parameters(), lr=1e-3),
                                   lambda mm, b: mm(input_ids=b, labels=b).loss, precision)
    return lambda: step(xb)


amp = speedup_of(gpt_step("fp32"), gpt_step("bf16"))
flops = compute.gpt2_shape(tiny_gpt2(block_size=SEQ, **GPT), SEQ).train_flops(BATCH)
f_mm_raw = compute.mfu(flops, amp.baseline.median_s, limits, "float32")
f_mm = min(1.0, f_mm_raw)
r = limits.peak_flops("bfloat16") / limits.peak_flops("float32")
amdahl = 1 / ((1 - f_mm) + f_mm / r)
with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
    mem_bf16 = compute.activation_bytes(lambda: gpt(input_ids=ids, labels=ids).loss, gpt)
mem_ratio = mem_bf16 / saved_b
print(f"bf16 autocast against fp32: {pairs(amp)}; matmul share f = {f_mm:.1%}, ceilings r = {r:.2f} "
      f"-> Amdahl {amdahl:.2f}x"
      + (f" (f capped: at the ceiling notebook 00 cached the matmuls alone would take {f_mm_raw:.0%} of the "
         "step, so that ceiling is too low; rerun notebook 00 on a quiet machine)" if f_mm_raw > 1 else ""))
print(f"saved for backward: fp32 {saved_b / 2**20:.2f} MiB, bf16 {mem_bf16 / 2**20:.2f} MiB ({mem_ratio:.0%})")

# %%
viz.show_verdict(judge(Prediction("bf16 step speedup (CPU)", "Amdahl: only the matmuls change speed",
                                  value=amdahl, rel_tol=0.25, unit="x"), amp.pair_median, spread=(amp.low, amp.high),
                       explain={"below": "Slower than Amdahl allows: besides the slower matmuls, the casts "
                                         "autocast inserts and its bf16 weight copies cost time.",
                                "above": "Faster than the matmuls alone allow: elementwise work in bf16 moved "
                                         "half the bytes too."}))
viz.show_verdict(judge(Prediction("bf16 saved activations over fp32's", "only autocast's bf16 outputs halve",
                                  low=0.5, high=1.0, unit="x"), mem_ratio))
claim_verdict("mixed precision: 40-60 % faster", Claim(
    "mixed precision gives a 40-60 % speedup (2x on modern GPUs)", "bf16 autocast step speedup over fp32",
    low=1.4, partly=1.0, unit="x"), amp.pair_median, (amp.low, amp.high), gpu_only=not CUDA and r <= 1, reasons={
        "does not hold here": (f"This CPU's bf16 matmul ceiling is {r:.2f}x its fp32 one: there is nothing "
                               "for autocast to gain." if r < 1 else
                               f"The bf16 ceiling is {r:.2f}x fp32's, but the matmuls are only {f_mm:.0%} of "
                               "this small model's step, and the casts cost extra."),
        "holds partly": f"Faster, but the matmuls are only {f_mm:.0%} of this small model's step, and only they "
                        f"run on the {r:.2f}x faster bf16 units (Amdahl: {amdahl:.2f}x).",
        "holds": f"The bf16 ceiling is {r:.2f}x fp32's; with the matmuls at {f_mm:.0%} of the step Amdahl "
                 f"allows {amdahl:.2f}x" + (": more than that is elementwise work in bf16 or the run's noise "
                                            "(see the prediction above)." if amp.pair_median > 1.25 * amdahl else "."),
        "inconclusive": "The pairs differ by more than autocast changed" + (f"; {busy()}." if busy() else ".")})
claim_verdict("mixed precision: half the memory", Claim(
    "mixed precision halves memory", "bf16 saved activations / fp32", low=0.45, high=0.55, partly=1.0,
    unit="x"), mem_ratio, reasons={
        "holds partly": "Layer norms, softmax and the loss stay fp32, and autocast also saves the bf16 copies "
                        "of the weights it made; weights, gradients and Adam state stay fp32 and do not "
                        "shrink at all."})

# %%
if not CUDA:
    print("No CUDA: the GPU claim (bf16 and fp16 autocast on tensor cores) is skipped; "
          + (f"the claim was judged on this CPU above (bf16 ceiling {r:.2f}x fp32's)" if r > 1
             else "its CPU analogue is above"))
else:
    big = dict(n_embd=768, n_layer=4, n_head=12)
    for p in ("bf16", "fp16"):
        gpu_amp = speedup_of(gpt_step("fp32", big, 16, 512), gpt_step(p, big, 16, 512))
        print(f"GPU, GPT-2 768 x 4 layers, batch 16 x 512: {p} against fp32 {pairs(gpu_amp)}")
        claim_verdict(f"mixed precision on the GPU ({p})", Claim(
            "mixed precision gives a 40-60 % speedup (2x on modern GPUs)", f"{p} step speedup over fp32",
            low=1.4, partly=1.0, unit="x"), gpu_amp.pair_median, (gpu_amp.low, gpu_amp.high))

# %% [markdown]
# ## 9. "`torch.compile` gives a 10-30 % speedup"
#
# **The advice.** Wrap the model in `torch.compile` for 10-20 % (or 20-30 %) more speed.
#
# **The model** (module 06). Inductor fuses chains of elementwise ops into one loop and calls
# the same BLAS for the matmuls. So only the non-matmul share of the step can shrink, and the
# compile itself (seconds to minutes) must be paid back. **Prediction:** the speedup is at most
# `1 / f`, with `f` the share of the eager step that the matmuls take at the fp32 ceiling.
# (QUICK mode compiles the forward pass only; the default compiles forward and backward.)

# %%
def mlp_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, MLP_WIDTH), nn.GELU(approximate="tanh"), nn.LayerNorm(MLP_WIDTH),
                         nn.Linear(MLP_WIDTH, 256))


xm = torch.randn(BATCH * SEQ, 256)  # (tokens, features)
def mlp_call(model):
    if COMPILE_TRAIN:
        return lambda: model(xm).square().mean().backward()
    def forward():
        with torch.no_grad():
            model(xm)
    return forward


rec = compiling.measure_compile(mlp_call(mlp_model()), mlp_call(torch.compile(mlp_model())), repeat=REPEAT)
comp = Speedup(rec.eager, rec.compiled)
mm_flops = 2 * 2 * BATCH * SEQ * 256 * MLP_WIDTH * (3 if COMPILE_TRAIN else 1)  # two matmuls, x3 with backward
f_raw = mm_flops / limits.peak_flops("float32") / rec.eager.median_s
f_c = min(1.0, f_raw)
print(f"{'forward + backward' if COMPILE_TRAIN else 'forward'}: compiled against eager {pairs(comp)}; compile "
      f"{rec.compile_s:.1f} s (inductor cache hits {rec.fx_cache_hits}); matmul share f = {f_c:.0%}"
      + (f" (capped: the matmul time at the ceiling came out as {f_raw:.0%} of the step, so the ceiling "
         "notebook 00 cached is too low, probably measured on a busier machine or at QUICK sizes)"
         if f_raw > 1 else ""))
print("break-even after " + (f"{rec.break_even_calls:,.0f} calls" if rec.break_even_calls != float("inf")
                             else "never: compiled is not faster"))

# %%
viz.show_verdict(judge(Prediction("compiled speedup", "only the non-matmul share can shrink", high=1 / f_c,
                                  unit="x"), comp.pair_median, spread=(comp.low, comp.high)))
claim_verdict("torch.compile: 10-30 %", Claim(
    "torch.compile gives a 10-20 % (or 20-30 %) speedup", "compiled speedup over eager",
    low=1.1, partly=1.0, unit="x"), comp.pair_median, (comp.low, comp.high), reasons={
        "does not hold here": "For a small model on a CPU the generated code is no faster than PyTorch's own "
                              "kernels, and the compile costs seconds; module 06 shows where fusion pays "
                              "(long memory-bound chains).",
        "holds partly": f"Faster, by less than promised: the matmuls, {f_c:.0%} of this step at the fp32 ceiling, "
                        "do not change."})

# %% [markdown]
# ## 10. "`channels_last` speeds up a transformer's inference"
#
# **The advice.** Convert the model with `model.to(memory_format=torch.channels_last)`.
#
# **The model.** `channels_last` is a layout for 4-D tensors `(N, C, H, W)`: it stores the
# channels of one pixel together, which convolution kernels like. `Module.to(memory_format=...)`
# changes only 4-D parameters; a transformer has none (its weights are 2-D), so the call changes
# nothing. **Predictions:** the call re-lays no parameter (counted: the parameters whose storage
# it replaced), and inference time is unchanged (ratio 1 within 10 %). Where nothing is re-laid
# the two timings differ by noise alone, so the advice is judged on the count.

# %%
tr_plain = tiny_gpt2(block_size=SEQ, **GPT).eval()
tr_cl = tiny_gpt2(block_size=SEQ, **GPT).eval()
before = [p.data_ptr() for p in tr_cl.parameters()]
tr_cl = tr_cl.to(memory_format=torch.channels_last)
relaid = sum(p.data_ptr() != b for p, b in zip(tr_cl.parameters(), before))  # parameters the call replaced
n4d = sum(p.dim() == 4 for p in tr_plain.parameters())
def infer(model, x):
    def run():
        with torch.no_grad():
            model(x)
    return run
cl = speedup_of(infer(tr_plain, ids), infer(tr_cl, ids))
cnn, cnn_cl = SmallCNN().eval(), SmallCNN().eval().to(memory_format=torch.channels_last)
img = torch.randn(256, 1, 8, 8)  # (N, C, H, W) digits
cl_cnn = speedup_of(infer(cnn, img), infer(cnn_cl, img.to(memory_format=torch.channels_last)))
print(f"4-D parameters in the transformer: {n4d}; parameters the call re-laid: {relaid}; "
      f"channels_last against default {pairs(cl)}")
print(f"for contrast, a small CNN (4-D weights, batch 256 of 8x8 digits): {pairs(cl_cnn)}")

# %%
loaded = busy()
noop = f"the model has {n4d} 4-D parameters, so the call re-laid {relaid} tensors and both models run the same kernels"
machine = f"this difference is the machine's, not the layout's{'; ' + loaded if loaded else ''}"
viz.show_verdict(judge(Prediction("parameters channels_last re-lays", "only 4-D tensors have that layout", value=0,
                                  rel_tol=0), relaid))
viz.show_verdict(judge(Prediction("transformer inference speedup with channels_last", "no 4-D tensors to "
                                  "re-lay", value=1.0, rel_tol=0.1, unit="x"), cl.pair_median, spread=(cl.low, cl.high),
                       explain={side: f"Yet {noop}: {machine}." for side in ("above", "below")} if relaid == 0 else {}))
timed = f"Timed against each other, the two models gave {pairs(cl)}: with nothing re-laid, that is noise."
if relaid == 0:  # nothing changed: the timing is an A/A comparison, and the advice is judged on what the call did
    claim_verdict("channels_last for a transformer", Claim(
        "channels_last speeds up a transformer's inference", "parameters the call re-lays (a speedup needs at "
        "least one)", low=1), relaid, reasons={
            "does not hold here": f"{noop[0].upper()}{noop[1:]}. {timed} channels_last is for convolutions."})
else:
    claim_verdict("channels_last for a transformer", Claim(
        "channels_last speeds up a transformer's inference", "speedup with channels_last", low=1.05,
        partly=1.0, unit="x"), cl.pair_median, (cl.low, cl.high), reasons={
            "does not hold here": f"{relaid} parameters were re-laid, and inference got no faster."})

# %% [markdown]
# ## 11. "Call `torch.cuda.empty_cache()` before each accumulation step"
#
# **The advice.** Free the allocator's cache before every micro-batch to save memory.
#
# **The model.** PyTorch's CUDA caching allocator keeps freed blocks to reuse them without
# asking the driver; `empty_cache()` hands them back, so the next micro-batch must allocate them
# again (slow `cudaMalloc` calls), and the peak, set by the micro-batch itself, does not fall.
# It is GPU advice. The CPU analogue: glibc's allocator keeps freed heap the same way, and
# `malloc_trim(0)` (`perfkit.memory.anatomy.trim_heap`) returns it to the OS, so the next
# micro-batch page-faults its memory in again. **Prediction:** trimming before each micro-batch
# does not make the step faster (ratio at most 1 within noise).

# %%
acc_model = tiny_gpt2(block_size=SEQ, **GPT).to(DEVICE)
acc_opt = torch.optim.AdamW(acc_model.parameters(), lr=1e-3)
micro = [torch.randint(0, 1024, (BATCH // 2, SEQ), device=DEVICE) for _ in range(MICRO)]
def accumulation_step(empty):
    def step():
        for xb in micro:
            if empty:
                torch.cuda.empty_cache() if CUDA else trim_heap()
            (acc_model(input_ids=xb, labels=xb).loss / MICRO).backward()
        acc_opt.step()
        acc_opt.zero_grad(set_to_none=True)
    return step
ec = speedup_of(accumulation_step(False), accumulation_step(True))  # ratio = plain / emptied time
print(f"{MICRO} micro-batches per step, {'empty_cache()' if CUDA else 'malloc_trim(0)'} before each: {pairs(ec)} "
      "(> 1x: emptying is faster)")

# %%
viz.show_verdict(judge(Prediction("step speedup from emptying the cache", "freed memory is reused, not "
                                  "needed back", high=1.0, unit="x"), ec.pair_median, spread=(ec.low, ec.high)))
claim_verdict("empty_cache before each micro-batch", Claim(
    "torch.cuda.empty_cache() before each accumulation step helps", "step speedup with the cache emptied",
    low=1.02, partly=1.0, unit="x"), ec.pair_median, (ec.low, ec.high), gpu_only=not CUDA, reasons={
        "does not hold here": "Memory handed back is asked for again a moment later; the cost is the "
                              "re-allocation (page faults here, cudaMalloc on a GPU).",
        "inconclusive": "The extra work is small next to a step's compute at this size."})

# %% [markdown]
# ## 12. "`pin_memory=True` always helps"
#
# **The advice.** Always set `DataLoader(pin_memory=True)`.
#
# **The model** (module 07). Pinned (page-locked) host memory lets the GPU copy by DMA,
# asynchronously; a pageable tensor is first staged into a pinned buffer by the driver. Pinning
# is itself a host copy, done by the loader's pin thread. So it helps when the copy to the GPU
# is on the critical path, and it is meaningless without a GPU: on a CPU-only machine PyTorch
# warns and ignores it, so the two loops below run the same code: there is no CPU analogue to
# judge the advice by, and without CUDA it is recorded as GPU only. **Prediction (CPU):** the
# loop runs at the same speed with and without it (ratio 1 within 15 %); on a GPU, a pinned copy
# is faster than a pageable one.

# %%
from torch.utils.data import DataLoader, TensorDataset

tensors = TensorDataset(torch.randn(BATCH * LOAD_BATCHES, 3, 64, 64))
def loop(pin):
    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "pin_memory ... no accelerator": the point of the comparison
            for (xb,) in DataLoader(tensors, batch_size=BATCH, pin_memory=pin):
                xb.to(DEVICE, non_blocking=pin)
        timing.synchronize(DEVICE)
    return run
pin = speedup_of(loop(False), loop(True), FAST_REPEAT)
print(f"a loop over {LOAD_BATCHES} batches of {BATCH} images, copied to {DEVICE}: pin_memory=True against False {pairs(pin)}")

# %%
same_code = f"the flag is ignored without a GPU, so both loops ran the same code{'; ' + busy() if busy() else ''}"
viz.show_verdict(judge(Prediction("loop speedup with pin_memory=True" + ("" if CUDA else " (CPU)"),
                                  "pinned memory is for DMA to a GPU" if not CUDA else "DMA from pinned memory",
                                  **(dict(low=1.0) if CUDA else dict(value=1.0, rel_tol=0.15)), unit="x"),
                       pin.pair_median, spread=(pin.low, pin.high), explain={} if CUDA else {
    side: f"A difference between two runs of one loop, not pinning: {same_code}." for side in ("above", "below")}))
pin_claim = Claim("pin_memory=True always helps", "loop speedup with pin_memory=True", low=1.02, partly=1.0, unit="x")
if CUDA:
    claim_verdict("pin_memory always helps", pin_claim, pin.pair_median, (pin.low, pin.high), reasons={
        "does not hold here": "Pinning is a host copy; it pays only when the copy to the GPU is on the "
                              "critical path and overlaps with compute.",
        "inconclusive": "The copies are small next to this loop's noise."})
else:  # no CPU analogue: the timing is one loop against itself, so no zone is named
    claim_verdict("pin_memory always helps", pin_claim, pin.pair_median, (pin.low, pin.high), gpu_only=True,
                  not_judged=same_code)

# %% [markdown]
# ## 13. "`torch.set_num_threads(min(8, cores))` is best"
#
# **The advice.** Set intra-op threads to `min(8, cores)` (and inter-op threads to 1).
#
# **The model.** An intra-op parallel matmul splits its work over the threads; with `c` idle
# cores it runs up to `c` times faster, never more. On a shared machine the other jobs take
# cores, and a thread that is descheduled stalls its siblings at every barrier. Inter-op threads
# run independent ops side by side (TorchScript's `fork`); an eager training step does not use
# them, and `set_num_interop_threads` can be called only once, before any parallel work, so it
# is not measured here. **Prediction:** `min(8, cores)` threads against 1 are between 1x and
# `cores`x faster on the MLP step of claim 4. `2 x cores` threads (oversubscribed) are timed too.

# %%
rec_threads = min(8, CORES)
counts = sorted({1, rec_threads, 2 * CORES})
gelu_step = mlp_step(nn.GELU())
def with_threads(n):
    def run():
        torch.set_num_threads(n)
        gelu_step()
    return run
runs_t = dict(zip(counts, timing.interleaved([with_threads(n) for n in counts], warmup=1, repeat=REPEAT)))
torch.set_num_threads(THREADS)
for n, m in runs_t.items():
    print(f"{n:2d} threads: {m.median_s * 1e3:6.1f} ms/step (p10-p90 {m.p10_s * 1e3:.1f}-{m.p90_s * 1e3:.1f})")
other = min((n for n in counts if n != rec_threads), key=lambda n: runs_t[n].median_s)
thr = Speedup(runs_t[other], runs_t[rec_threads])  # ratio = best other / recommended
vs1 = Speedup(runs_t[1], runs_t[rec_threads])

# %%
loaded = busy()
stall = ("each barrier waits for the slowest thread, and a core that another job takes even for a moment stalls "
         "them all" + (f"; {loaded}" if loaded else ""))
rec_m, one_m = runs_t[rec_threads], runs_t[1]
bimodal = (f"{rec_threads}-thread steps took {rec_m.median_s * 1e3:.1f} ms at the median but {rec_m.p90_s * 1e3:.1f} ms "
           f"at p90, slower than one thread's {one_m.median_s * 1e3:.1f} ms: " if rec_m.p90_s > one_m.median_s else "")
viz.show_verdict(judge(Prediction(f"{rec_threads} threads over 1", "work split over idle cores",
                                  low=1.0, high=float(CORES), unit="x"), vs1.pair_median, spread=(vs1.low, vs1.high),
                       explain={"below": f"More threads were slower: {stall}."}))
claim_verdict("set_num_threads(min(8, cores))", Claim(
    "torch.set_num_threads(min(8, cores)) is best", f"best other count ({other}) time / "
    f"{rec_threads} threads' time", low=1.0, unit="x"), thr.pair_median, (thr.low, thr.high), reasons={
        "does not hold here": f"{other} thread(s) ran faster: {stall}.",
        "holds": f"{rec_threads} threads were the fastest count here"
                 + (f", although {loaded}; on a busy machine, measure again." if loaded else "."),
        "inconclusive": (bimodal or "the counts differ by less than the pairs do: ") + stall + "."})

# %% [markdown]
# ## 14. "Larger DDP buckets (500 MB to 1 GB) reduce communication overhead"
#
# **The advice.** Raise `DistributedDataParallel(bucket_cap_mb=...)` to 500-1000 MB.
#
# **The model** (module 02). DDP all-reduces gradients in buckets of about `bucket_cap_mb`,
# each paying the start-up `alpha`, and overlaps each bucket with the rest of backward. A cap
# larger than the whole gradient yields one bucket (plus DDP's small first bucket), so above
# that size the cap changes nothing; and one huge bucket cannot start before backward ends.
# **Prediction:** 500 MB gives as many all-reduces per step as DDP's default 25 MB whenever the
# gradient is smaller than 25 MB (counted by a communication hook); a tiny cap gives many more.
# Where the two caps give the same buckets, their communication is the same, so the advice is
# judged on the all-reduces per step, and the two step times only show the run's noise.

# %%
bk = {b["bucket_cap_mb"]: b for b in ddp["buckets"]}
grad_mb = sum(4 * p.numel() for p in make_mlp(**DDP_MLP).parameters()) / 2**20
spans = {cap: timing.Measurement(tuple(b["times_s"]), 1) for cap, b in bk.items()}
for cap, b in bk.items():
    print(f"bucket_cap_mb={cap:>6}: {b['calls_per_step']:3d} all-reduces/step, step {si(b['step_s'], 's')} "
          f"(p10-p90 {si(spans[cap].p10_s, 's')}-{si(spans[cap].p90_s, 's')})")
print(f"gradient: {grad_mb:.2f} MB per step")
buckets = Speedup(spans[25], spans[500])  # ratio = 25 MB time / 500 MB time
tiny = Speedup(spans[DDP_CAPS[0]], spans[25])  # ratio = tiny-cap time / 25 MB time
tiny_text = (f"the {DDP_CAPS[0]} MB cap's {bk[DDP_CAPS[0]]['calls_per_step']} all-reduces per step took "
             f"{tiny.pair_median:.2f}x the 25 MB step (pairs p10-p90 {tiny.low:.2f}-{tiny.high:.2f}x)")
print(tiny_text)

# %%
viz.show_verdict(judge(Prediction("all-reduces per step at 500 MB minus at 25 MB", "one bucket once the cap "
                                  "exceeds the gradient", value=0, rel_tol=0),
                       bk[500]["calls_per_step"] - bk[25]["calls_per_step"]))
viz.show_verdict(judge(Prediction(f"all-reduces per step at {DDP_CAPS[0]} MB over 25 MB", "a tiny cap splits "
                                  "the gradient into many buckets", low=2.0, unit="x"),
                       bk[DDP_CAPS[0]]["calls_per_step"] / bk[25]["calls_per_step"]))
same = bk[500]["calls_per_step"] == bk[25]["calls_per_step"]
layout = (f"With a {grad_mb:.1f} MB gradient both caps give {bk[500]['calls_per_step']} all-reduce(s) per step: "
          "the larger cap has nothing to change, so the time difference between them does not come from the "
          "buckets." if same else f"The caps gave {bk[25]['calls_per_step']} and {bk[500]['calls_per_step']} "
          "all-reduces per step.")
if same:  # the same buckets: the same communication, and the two step times an A/A comparison
    claim_verdict("DDP buckets of 500 MB-1 GB", Claim(
        "larger DDP buckets (500 MB-1 GB) reduce communication overhead", "all-reduces per step (of the same "
        "bytes) with 25 MB buckets over 500 MB", low=1.05, partly=1.0, unit="x"),
        bk[25]["calls_per_step"] / bk[500]["calls_per_step"], reasons={
            "does not hold here": layout + f" The steps took {buckets.pair_median:.2f}x as long at 25 MB as at 500 MB "
                                  f"(pairs p10-p90 {buckets.low:.2f}-{buckets.high:.2f}x): the noise of two runs of "
                                  f"the same communication. Against the tiny cap: {tiny_text}."})
else:
    claim_verdict("DDP buckets of 500 MB-1 GB", Claim(
        "larger DDP buckets (500 MB-1 GB) reduce communication overhead",
        "step speedup of 500 MB over 25 MB buckets", low=1.05, partly=1.0, unit="x"),
        buckets.pair_median, (buckets.low, buckets.high), reasons={
            "inconclusive": layout + f" Against the tiny cap: {tiny_text}.",
            "does not hold here": layout + " One giant bucket waits for the whole backward pass instead of "
                                           "overlapping with it.",
            "holds partly": layout,
            "holds": layout})

# %% [markdown]
# ## 15. "Gradient accumulation reduces communication N times"
#
# **The advice.** Accumulate gradients over `N` micro-batches: communication falls `N` times.
#
# **The model** (module 02). DDP all-reduces after *every* `backward()` unless it runs inside
# `model.no_sync()`. Accumulation code that forgets `no_sync()` computes the same gradient and
# communicates after every micro-batch. (DDP runs at its default settings here: its small first
# bucket makes two all-reduces per step.) **Prediction:** with `no_sync()` the bytes all-reduced
# per sample fall to exactly `1/N` (counted by a communication hook); without it, they do not
# fall at all (ratio 1).

# %%
acc = {a["k"]: a for a in ddp["accumulate"]}
(synced,) = ddp["accumulate_synced"]
per_sample = {"no_sync": acc[MICRO]["allreduce_bytes_per_sample"] / acc[1]["allreduce_bytes_per_sample"],
              "without": synced["allreduce_bytes_per_sample"] / acc[1]["allreduce_bytes_per_sample"]}
for name, a in (("k=1", acc[1]), (f"k={MICRO}, no_sync()", acc[MICRO]), (f"k={MICRO}, without", synced)):
    print(f"{name:>17}: {a['allreduce_calls']} all-reduce call(s) per step, {a['allreduce_bytes_per_sample']:9.0f} "
          f"B/sample, {si(a['s_per_sample'], 's')}/sample; max |grad - one big batch| "
          f"{a['max_abs_diff_vs_big_batch']:.1e}")

# %%
viz.show_verdict(judge(Prediction(f"bytes per sample at k={MICRO} with no_sync() over k=1", "one all-reduce "
                                  f"per {MICRO} micro-batches", value=1 / MICRO, rel_tol=1e-6),
                       per_sample["no_sync"]))
viz.show_verdict(judge(Prediction(f"bytes per sample at k={MICRO} without no_sync() over k=1", "an all-reduce "
                                  "after every backward", value=1.0, rel_tol=1e-6), per_sample["without"]))
for name, key in (("accumulation with no_sync()", "no_sync"), ("accumulation without no_sync()", "without")):
    claim_verdict(f"gradient {name}", Claim(
        f"gradient accumulation over N={MICRO} micro-batches reduces communication N times",
        f"bytes all-reduced per sample, {name}, over N=1", low=0.99 / MICRO, high=1.01 / MICRO, partly=1.0,
        unit="x"), per_sample[key], reasons={
            "holds": "One all-reduce per optimizer step, and the gradient equals one big batch's (printed).",
            "does not hold here": "Without no_sync() DDP all-reduces after every micro-batch: the same gradient, "
                                  "the full communication."})

# %% [markdown]
# ## 16. "Top-k gradient compression speeds up the all-reduce"
#
# **The advice.** Send only the largest 1 % of the gradient's entries (top-k) to speed up
# communication.
#
# **The model** (modules 02 and 03). Top-k sends values and int32 indices: 8 bytes per kept
# entry against 4 per dense entry, so `2k` of the dense bytes, 2 % at `k` = 1 %. But the ranks
# keep different entries, which an all-reduce cannot sum in place: they are all-gathered and
# every rank decodes them all, and choosing the top `k` costs a pass over the gradient. A
# collective costs `alpha + bytes / bandwidth`: for a small gradient `alpha` dominates and fewer
# bytes save little, while the selection stays. The run: the small CNN on digits (module 01),
# 2 processes, DDP's all-reduce against top-k 1 % with error feedback, each step timed.
# **Prediction:** the payload is 2 % of the dense bytes, within 5 %.

# %%
runs_c = {r["method"]: r for r in topk["runs"]}
dense_r, topk_r = runs_c["none"], runs_c["topk_1pct_ef"]
wire = topk_r["wire_bytes_per_step"] / topk_r["dense_bytes_per_step"]
skip = 3  # the first steps build DDP's buckets and warm up the kernels
tk = Speedup(timing.Measurement(tuple(dense_r["step_times_s"][skip:]), skip),
             timing.Measurement(tuple(topk_r["step_times_s"][skip:]), skip))  # ratio = dense / top-k time
print(f"gradient {dense_r['n_params']:,} parameters = {dense_r['dense_bytes_per_step'] / 1e3:.0f} kB per step; "
      f"top-k 1 % sends {topk_r['wire_bytes_per_step'] / 1e3:.1f} kB ({wire:.2%})")
print(f"step time: all-reduce {dense_r['step_s'] * 1e3:.2f} ms, top-k {topk_r['step_s'] * 1e3:.2f} ms; "
      f"speedup {tk.pair_median:.2f}x (step-by-step pairs p10-p90 {tk.low:.2f}-{tk.high:.2f}x)")
print(f"after {TOPK_STEPS} steps: eval accuracy {dense_r['eval_accuracy']:.1%} (all-reduce), "
      f"{topk_r['eval_accuracy']:.1%} (top-k with error feedback)")

# %%
viz.show_verdict(judge(Prediction("top-k 1 % payload over dense bytes", "values + int32 indices: 2k",
                                  value=0.02, rel_tol=0.05), wire))
claim_verdict("top-k compression", Claim(
    "top-k gradient compression speeds up the all-reduce", "step speedup of top-k 1 % over DDP's all-reduce",
    low=1.05, partly=1.0, unit="x"), tk.pair_median, (tk.low, tk.high), reasons={
        "does not hold here": f"{wire:.1%} of the bytes, but a slower step: a {dense_r['dense_bytes_per_step'] / 1e3:.0f} "
                              "kB all-reduce is start-up bound, so the bytes saved were worth less than "
                              "the selection and the all-gather cost.",
        "inconclusive": f"The medians differ ({dense_r['step_s'] * 1e3:.2f} ms against {topk_r['step_s'] * 1e3:.2f} ms), "
                        f"but step by step the pairs spread {tk.low:.2f}-{tk.high:.2f}x, across 1"
                        + (f"; {busy()}." if busy() else "."),
        "holds partly": "Faster, but far less than the bytes fell: start-up costs and the selection stay.",
        "holds": "The gradient is large enough that its bytes, not start-ups, set the communication time."})

# %% [markdown]
# ## 17. "The best number of DataLoader workers is 4-8"
#
# **The advice.** `num_workers=4` to `8` (or 4 per GPU, or 2 per core up to 16).
#
# **The model** (module 07, `simulate_pipeline`). A worker prepares whole batches; `W` workers
# deliver up to `W` times faster until they saturate the cores (CPU-bound decoding) or the
# training step becomes the limit. Past `min(cores, load / compute)` workers nothing improves,
# and each extra worker costs a process and its memory. Each sample costs `COST_MS` of CPU work
# (measured again here, under this machine's load); each step `COMPUTE_MS` of sleep (a GPU step:
# the host is free). Throughput is a whole pass over the data, timed on the second pass
# (`persistent_workers=True`: the workers' start-up is left out, the pipeline's fill is not), and
# the model simulates the same number of steps. (Counting only the steps after the first few
# would credit the many-worker runs with batches their workers prepared before the count began:
# `2W` batches are in flight, a large share of a short run.) **Prediction:** the best
# throughput of the advised counts (4, 8) over the best of the rest is what the pipeline model
# with this machine's cores predicts, within 20 %.

# %%
COST_MS, COMPUTE_MS = (1.0 if QUICK else 2.0), 2.0  # per-sample CPU work, per-step compute (a GPU step)
ds = SlowDataset(BATCH * LOAD_BATCHES, COST_MS / 1e3, kind="spin")
cost_s = timing.benchmark(lambda: [ds[i] for i in range(BATCH)], warmup=1, repeat=3).median_s / BATCH
rates = {w: [] for w in WORKERS}  # samples/s per round, the counts taking turns


def pass_rate(rec):
    """Samples/s of the last pass over the data: fill included, the workers' start-up not."""
    waits, computes = rec.wait_s[-1], rec.compute_s[-1]
    return BATCH * len(waits) / (sum(waits) + sum(computes))


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # more workers than cores, on purpose
    for _ in range(LOAD_ROUNDS):
        for w in WORKERS:  # the first pass starts the workers; the second is timed
            rec_w = measure_loader(ds, LoaderConfig(BATCH, w, persistent_workers=w > 0),
                                   compute=COMPUTE_MS / 1e3, epochs=2 if w else 1)
            rates[w].append(pass_rate(rec_w))
load = {w: statistics.median(r) for w, r in rates.items()}
model_rate = {w: BATCH / simulate_pipeline(BATCH * cost_s, COMPUTE_MS / 1e3, w, 2, steps=LOAD_BATCHES,
                                           cores=CORES).step_s for w in WORKERS}  # the same pass, simulated
print(f"one sample costs {cost_s * 1e3:.1f} ms here ({COST_MS} ms on an idle core)")
for w in WORKERS:
    print(f"num_workers={w}: {load[w]:6.0f} samples/s measured (median of {LOAD_ROUNDS} rounds), "
          f"{model_rate[w]:6.0f} predicted")
advised = [w for w in WORKERS if 4 <= w <= 8]
rest = [w for w in WORKERS if w not in advised]
best_adv, best_rest = max(advised, key=load.get), max(rest, key=load.get)
ratio_w = load[best_adv] / load[best_rest]
per_round = timing.Measurement(tuple(max(rates[w][i] for w in advised) / max(rates[w][i] for w in rest)
                                     for i in range(LOAD_ROUNDS)), 0)
spread_w = (per_round.p10_s, per_round.p90_s)
pred_w = max(model_rate[w] for w in advised) / max(model_rate[w] for w in rest)

# %%
loaded = busy()  # a phrase when the load average exceeds the cores, else ""
share_text = (f"{loaded}: more processes win a larger share of the CPU time from the other jobs than the "
              f"model's {CORES} cores" if loaded else
              "the cost per sample was timed once, in one process, and a burst of load then inflates it")
viz.show_verdict(judge(Prediction(f"best of workers {advised} over best of {rest}", "simulate_pipeline with "
                                  f"{CORES} cores", value=pred_w, rel_tol=0.2, unit="x"), ratio_w, spread=spread_w,
                       explain={"above": f"More workers beat the model, which gives the loader {CORES} cores at "
                                         f"the measured cost per sample: {share_text}.",
                                "below": "The extra workers cost more than the model allows: each is a "
                                         "process that takes memory and CPU time from the training loop"
                                         + (f"; {loaded}." if loaded else ".")}))
rates_text = ", ".join(f"{w}: {load[w]:.0f}" for w in WORKERS)
claim_verdict("DataLoader workers: 4-8", Claim(
    "the best number of DataLoader workers is 4-8", f"samples/s of the best advised count over the best "
    f"other (num_workers={best_rest})", low=1.05, partly=1.0, unit="x"), ratio_w, spread_w, reasons={
        "holds partly": f"Faster than {best_rest} worker(s) by less than 5 % ({rates_text} samples/s): with "
                        f"{CORES} cores CPU-bound workers saturate at the core count.",
        "does not hold here": f"{best_rest} worker(s) did better ({rates_text} samples/s): with {CORES} cores, "
                              "extra workers only compete with each other and the training process"
                              + (f"; {loaded}." if loaded else "."),
        "holds": f"More workers than this machine's {CORES} cores helped ({rates_text} samples/s)"
                 + (f": {loaded}, and more processes win a larger share of it from the other jobs; on a "
                    "machine of your own, past the core count they only compete with each other." if loaded
                    else "; the model above says by how much the cores allow."),
        "inconclusive": f"The rounds differ more than the counts do ({rates_text} samples/s, medians)"
                        + (f"; {loaded}." if loaded else ".")})

# %% [markdown]
# ## 18. "ZeRO stage 1 below 1 B parameters, stage 2 for 1-10 B, stage 3 above"
#
# **The advice.** Pick the ZeRO stage by model size.
#
# **The model** (module 05, the ZeRO paper's formulas). Mixed-precision Adam keeps 16 bytes
# per parameter: 2 (bf16 weights) + 2 (gradients) + 12 (fp32 master copy and moments). With `N`
# ranks, stage 1 shards the 12, stage 2 also the gradients, stage 3 everything:
# `(4 + 12/N) Ψ`, `(2 + 14/N) Ψ`, `16 Ψ / N` bytes per rank. Which stage a model needs is set by
# these bytes against the GPU's memory, so it depends on `N` and the memory, not on `Ψ` alone.
# Stages 1 and 2 communicate as much as plain data parallelism (a reduce-scatter and an
# all-gather make one all-reduce); stage 3 about 1.5x as much (it gathers the weights in the
# forward and again in the backward pass). So the rule is wrong for a size where its stage does
# not fit, or where it asks for stage 3 although stage 1 or 2 fits. **Prediction:** the largest
# model stage 1 fits on 8 GPUs of 80 GB, found by searching with `zero_model_states`, is
# `80 GB / (4 + 12/8)` parameters, and the rule is wrong for at least one of the sizes below.
# (Model states only: activations need room too.)

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
GPU_GB, N_GPUS = 80, 8
SIZES_B = [0.5, 1, 3, 7, 13, 30, 70]                 # billions of parameters
rule = lambda b: 1 if b < 1 else 2 if b <= 10 else 3  # noqa: E731 (the advice, as a function)
def lowest_fitting(b, n=N_GPUS):
    """The lowest ZeRO stage whose model states fit, or "none" (more GPUs needed)."""
    fits = [st for st in range(4) if zero_model_states(b * 1e9, n, st).total_gb <= GPU_GB]
    return fits[0] if fits else "none"
lo_b, hi_b = 0.0, 1000.0  # bisection for the largest model stage 1 fits
for _ in range(60):
    mid = (lo_b + hi_b) / 2
    lo_b, hi_b = (mid, hi_b) if zero_model_states(mid * 1e9, N_GPUS, 1).total_gb <= GPU_GB else (lo_b, mid)
def rule_wrong(b, n=N_GPUS):
    """The rule's stage does not fit, or it is stage 3 (1.5x communication) where 1 or 2 fits."""
    low = lowest_fitting(b, n)
    return low == "none" or rule(b) < low or (rule(b) == 3 and low < 3)
for b in SIZES_B:
    print(f"{b:>4g} B parameters: the rule says stage {rule(b)}; lowest stage that fits {N_GPUS} x {GPU_GB} GB: "
          f"{lowest_fitting(b)} ({'rule wrong' if rule_wrong(b) else 'rule fine'}); "
          f"on 64 GPUs: {lowest_fitting(b, 64)} ({'rule wrong' if rule_wrong(b, 64) else 'rule fine'})")
mismatch = sum(rule_wrong(b) for b in SIZES_B)
print(f"largest model stage 1 fits: {lo_b:.2f} B parameters; sizes where the rule is wrong on {N_GPUS} GPUs: "
      f"{mismatch} of {len(SIZES_B)}")

# %%
viz.show_verdict(judge(Prediction("largest model (B parameters) stage 1 fits on 8 x 80 GB",
                                  "(4 + 12/N) bytes per parameter", value=GPU_GB / (4 + 12 / N_GPUS),
                                  rel_tol=1e-6), lo_b))
viz.show_verdict(judge(Prediction("sizes where the rule's stage is wrong",
                                  "bytes per rank against memory, not size alone", low=1), mismatch))
claim_verdict("ZeRO stage by model size", Claim(
    "ZeRO stage 1 below 1 B parameters, stage 2 for 1-10 B, stage 3 above",
    f"sizes (of {len(SIZES_B)}) where the rule's stage does not fit {N_GPUS} x {GPU_GB} GB or needlessly is 3",
    low=0, high=0), mismatch, reasons={
        "does not hold here": "The rule asks for stage 3 (1.5x the communication) where stage 1 or 2 fits, or "
                              "for a stage that does not fit; compute the bytes per rank for your "
                              "GPU count and memory (perfkit.memory.zero_model_states, module 05).",
        "holds": "For this GPU count and memory the rule happens to match; it would not for others."})

# %% [markdown]
# ## 19. "A dynamic loss scaler starting at 2^32 is needed"
#
# **The advice.** Train in mixed precision with `torch.amp.GradScaler(init_scale=2**32)`: without
# a loss scaler, or with a smaller start, the gradients underflow.
#
# **The model** (module 06). A format's exponent bits set its range. fp16 has 5: its largest
# value is 65,504, its smallest normal value 6.1e-5; below that it keeps fewer significant bits,
# and a value below half its smallest subnormal (2^-25, about 3e-8) becomes zero. bf16 has
# fp32's 8 exponent bits, so what fp32 holds bf16 holds too, with fewer mantissa bits. A loss
# scaler multiplies the loss by `S` before backward, so every gradient is `S` times larger while
# it is fp16, and divides by `S` before the update. `GradScaler` is dynamic: a step whose scaled
# gradients overflow (inf or NaN) is skipped and `S` halved; after 2,000 steps without overflow
# `S` doubles. From a start `S0` it skips `k = ceil(log2(S0 · max|g| / 65,504))` steps before
# its first update (none when that is negative), each a forward and backward pass thrown away;
# PyTorch's default start is 2^16. fp16's range is the same on a CPU (only its speed differs),
# so the run below is the claim itself (on the GPU when CUDA is present): the tiny GPT-2's
# gradients under fp16 and bf16 autocast, compared value by value with fp32's.
# **Predictions:** bf16 flushes no gradient value that fp32 keeps (exactly 0); from 2^32 and
# from 2^16, the scaler skips the `k` steps computed from the fp32 gradient's largest value,
# within one step.

# %%
for dt in (torch.float16, torch.bfloat16, torch.float32):
    fi = torch.finfo(dt)
    mantissa = round(-math.log2(fi.eps))  # stored mantissa bits
    print(f"{str(dt).removeprefix('torch.'):>8}: {fi.bits - 1 - mantissa} exponent bits, {mantissa} mantissa bits; "
          f"largest {fi.max:.3g}, smallest normal {fi.smallest_normal:.2g}, "
          f"smallest subnormal {fi.smallest_normal * fi.eps:.2g}")

# %%
sc_ids = torch.randint(0, 1024, (SCALER_BATCH, SEQ), device=DEVICE)
def fresh_gpt():
    torch.manual_seed(0)
    return tiny_gpt2(block_size=SEQ, **GPT).to(DEVICE)
sc_model = fresh_gpt()
def grads_in(dtype, scale=1.0):
    """All parameters' gradients (flat, fp32, divided by `scale`) of one backward of scale x loss
    under autocast to `dtype` (None: plain fp32)."""
    sc_model.zero_grad(set_to_none=True)
    with torch.autocast(DEVICE.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = sc_model(input_ids=sc_ids, labels=sc_ids).loss
    (loss * scale).backward()
    return torch.cat([p.grad.flatten() for p in sc_model.parameters()]).float() / scale

# %%
g32 = grads_in(None)
kept = g32 != 0  # the values fp32 keeps
n_kept, g_max = int(kept.sum()), float(g32.abs().max())
def flushed(g):
    """How many values that fp32 keeps are zero in g."""
    return int(((g == 0) & kept).sum())
lost = {"fp16": flushed(grads_in(torch.float16)), "bf16": flushed(grads_in(torch.bfloat16))}
subnormal = int(((g32.abs() < torch.finfo(torch.float16).smallest_normal) & kept).sum()) / n_kept
print(f"{n_kept:,} nonzero gradient values in fp32 (largest {g_max:.3g}); an unscaled backward flushes "
      f"{lost['fp16']:,} of them to zero in fp16, {lost['bf16']:,} in bf16")
print(f"{subnormal:.1%} of them lie below fp16's smallest normal value, where it keeps fewer significant bits")

# %%
FP16_MAX = torch.finfo(torch.float16).max
def predicted_skips(init_scale):
    """Steps GradScaler skips before its first update: halvings until init_scale x max|g| fits fp16."""
    return max(0, math.ceil(math.log2(init_scale * g_max / FP16_MAX)))
def scaler_run(init_scale, max_steps=64):
    """Train with a real GradScaler under fp16 autocast on one batch until it takes a step:
    (steps skipped before it, the scale of that step)."""
    m = fresh_gpt()
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(DEVICE.type, init_scale=init_scale)
    for k in range(max_steps):
        with torch.autocast(DEVICE.type, dtype=torch.float16):
            loss = m(input_ids=sc_ids, labels=sc_ids).loss
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(o)   # skipped when a gradient is inf or NaN
        scaler.update()  # and then the scale is halved
        o.zero_grad(set_to_none=True)
        if scaler.get_scale() >= before:
            return k, before
    return max_steps, scaler.get_scale()

# %%
DEFAULT = "2^16 (the default)"
starts = {"2^32": 2.0 ** 32, DEFAULT: 2.0 ** 16}
skips = {name: scaler_run(s) for name, s in starts.items()}  # name -> (steps skipped, scale of the first update)
lost_at = {name: flushed(grads_in(torch.float16, skips[name][1])) for name in starts}
for name, s in starts.items():
    k, at = skips[name]
    print(f"GradScaler(init_scale={name}): {k} step(s) skipped before the first update (predicted "
          f"{predicted_skips(s)}); at its scale 2^{math.log2(at):g} fp16 flushes {lost_at[name]:,} value(s)")
kept_by_scaling = {"fp16": lost["fp16"] - lost_at[DEFAULT],  # flushed unscaled, not at the default's scale
                   "bf16": lost["bf16"] - flushed(grads_in(torch.bfloat16, 2.0 ** 16)),
                   "2^32": lost_at[DEFAULT] - lost_at["2^32"]}  # kept by starting higher
print(f"values a loss scale keeps from flushing to zero: fp16 {kept_by_scaling['fp16']:,}, bf16 "
      f"{kept_by_scaling['bf16']:,}; starting at 2^32 over the default: {kept_by_scaling['2^32']:,}")

# %%
viz.show_verdict(judge(Prediction("gradient values bf16 flushes to zero that fp32 keeps", "bf16 has fp32's "
                                  "exponent range", value=0, rel_tol=0), lost["bf16"]))
for name, s in starts.items():
    kp = predicted_skips(s)
    viz.show_verdict(judge(Prediction(f"steps skipped from init_scale={name}", "halve until init_scale x max|g| "
                                      "fits 65,504", low=max(0, kp - 1), high=kp + 1), skips[name][0]))

# %%
ppm = 1e6 / n_kept  # parts per million of the gradient's nonzero values
d_at = skips[DEFAULT][1]
sub_at = int(((g32.abs() * d_at < torch.finfo(torch.float16).smallest_normal) & kept).sum()) / n_kept
claim_verdict("fp16 needs a loss scaler", Claim(
    "mixed precision in fp16 needs a loss scaler", "gradient values per million that a loss scale keeps from "
    "flushing to zero in fp16 (unscaled against the default's scale)", low=1, unit=" ppm"),
    kept_by_scaling["fp16"] * ppm, reasons={
        "holds": f"Unscaled, fp16 flushed {lost['fp16']:,} of {n_kept:,} values to zero; at scale "
                 f"2^{math.log2(d_at):g} it flushed {lost_at[DEFAULT]:,}. And {subnormal:.0%} lie below its smallest "
                 f"normal, where it keeps fewer significant bits ({sub_at:.1%} at that scale).",
        "does not hold here": f"Unscaled, fp16 flushed {lost['fp16']:,} of this small model's {n_kept:,} values; at "
                              f"scale 2^{math.log2(d_at):g} it flushed {lost_at[DEFAULT]:,}. Still, {subnormal:.0%} lie "
                              f"below its smallest normal, with fewer significant bits ({sub_at:.1%} at that "
                              "scale). Smaller gradients (larger models) underflow sooner."})
claim_verdict("bf16 needs a loss scaler", Claim(
    "mixed precision in bf16 needs a loss scaler too", "gradient values per million that a loss scale keeps from "
    "flushing to zero in bf16 (unscaled against 2^16)", low=1, unit=" ppm"), kept_by_scaling["bf16"] * ppm, reasons={
        "does not hold here": f"bf16 has fp32's exponent range: unscaled it flushed {lost['bf16']:,} values that "
                              "fp32 keeps. It needs no scaler.",
        "holds": f"In bf16 the scale kept {kept_by_scaling['bf16']:,} values that unscaled rounding flushed."})

# %%
k32, at32 = skips["2^32"]
doubling = "GradScaler raises the scale by itself, doubling it after every 2,000 steps without overflow."
claim_verdict("loss scale starting at 2^32", Claim(
    "a dynamic loss scaler must start at 2^32 (PyTorch's default start is 2^16)", "gradient values per million "
    "that starting at 2^32 keeps from flushing to zero in fp16, over the default start", low=1, unit=" ppm"),
    kept_by_scaling["2^32"] * ppm, reasons={
        "does not hold here": f"At the default start's first update (scale 2^{math.log2(d_at):g}) fp16 flushed "
                              f"{lost_at[DEFAULT]:,} values, at 2^32's (scale 2^{math.log2(at32):g}) "
                              f"{lost_at['2^32']:,}; starting at 2^32 cost {k32} skipped step(s), forward and "
                              f"backward passes thrown away. {doubling}",
        "holds": f"Starting at 2^32 kept {kept_by_scaling['2^32']:,} more values from its first update on, at "
                 f"the cost of {k32} skipped step(s). {doubling}"})

# %% [markdown]
# ## 20. "`nn.MultiheadAttention(kdim=head_dim)` is memory-efficient attention"
#
# **The advice.** Build attention as `nn.MultiheadAttention(embed_dim, num_heads, kdim=head_dim)`
# to make it memory-efficient.
#
# **The model** (module 06). `kdim` is the number of features of the *key input* (default
# `embed_dim`), for attending to keys that come from elsewhere: it changes the key projection's
# weight from `(E, E)` to `(E, kdim)`, and with it the keys a call must be given. It does not
# change the attention: each head still forms its `(T, T)` matrix of scores, and the explicit
# path keeps softmax's `(B, H, T, T)` output for backward (the weighted sum and softmax's own
# backward both read it). Memory-efficient attention (FlashAttention and its CPU kernel, behind
# `F.scaled_dot_product_attention`) keeps `q`, `k`, `v`, the output and one log-sum-exp per row:
# bytes linear in `T`. In training, `nn.MultiheadAttention` calls it only with
# `need_weights=False`; by default it returns the averaged attention weights, so it forms them
# explicitly. Counted here: the bytes saved for backward at sequence lengths `T` and `2T`. With
# `s(T) = aT + bT²`, `(s(2T) - 2 s(T)) / 2 = bT²` is the part that grows as `T²`, counted in
# `(B, H, T, T)` fp32 matrices (`compute.attention_matrix_bytes`). **Predictions:** with
# `kdim=head_dim`, exactly one matrix (within 1 %); with `need_weights=False` added, none (at
# most 0.01 of one).

# %%
E_A, H_A, B_A, T_A = MHA["embed"], MHA["heads"], MHA["batch"], MHA["seq"]
head_dim = E_A // H_A
torch.manual_seed(0)
mha = nn.MultiheadAttention(E_A, H_A, batch_first=True)
mha_kd = nn.MultiheadAttention(E_A, H_A, batch_first=True, kdim=head_dim)  # the advice
mods = {"default": mha, f"kdim={head_dim}": mha_kd}
n_params = {name: sum(p.numel() for p in m.parameters()) for name, m in mods.items()}
for name, m in mods.items():
    print(f"{name:>9}: " + ", ".join(f"{n} {tuple(p.shape)}" for n, p in m.named_parameters())
          + f"; {n_params[name]:,} parameters")
fewer = n_params["default"] - n_params[f"kdim={head_dim}"]

# %%
xa = torch.randn(B_A, T_A, E_A)  # (B, T, E)
try:
    mha_kd(xa, xa, xa)  # self-attention: the keys have E features, not kdim
    self_attention_runs = True
except (AssertionError, RuntimeError) as e:
    self_attention_runs = False
    print(f"mha_kd(x, x, x): {type(e).__name__}: {e}")

# %%
def t2_matrices(attend, module=None):
    """The T² part of the bytes `attend(x, keys)` saves for backward, in (B, H, T, T) fp32 matrices;
    and the bytes saved at T."""
    saved = {}
    for t in (T_A, 2 * T_A):
        x_t, keys_t = torch.randn(B_A, t, E_A), torch.randn(B_A, t, head_dim)  # keys of kdim features
        saved[t] = compute.activation_bytes(lambda x_t=x_t, keys_t=keys_t: attend(x_t, keys_t), module,
                                            inputs=[x_t, keys_t])
    return (saved[2 * T_A] - 2 * saved[T_A]) / 2 / compute.attention_matrix_bytes(B_A, H_A, T_A), saved[T_A]
def heads(x):
    """(B, T, E) -> (B, H, T, head_dim), a leaf that needs a gradient."""
    return x.view(B_A, -1, H_A, head_dim).transpose(1, 2).detach().requires_grad_()
KD, NW = f"MultiheadAttention(kdim={head_dim})", f"MultiheadAttention(kdim={head_dim}, need_weights=False)"
variants = {"MultiheadAttention": (lambda x, k: mha(x, x, x)[0], mha), KD: (lambda x, k: mha_kd(x, k, x)[0], mha_kd),
            NW: (lambda x, k: mha_kd(x, k, x, need_weights=False)[0], mha_kd),
            "F.scaled_dot_product_attention": (lambda x, k: F.scaled_dot_product_attention(heads(x), heads(x), heads(x)), None)}
t2 = {name: t2_matrices(f, m) for name, (f, m) in variants.items()}
print(f"B={B_A}, H={H_A}, T={T_A}: one (B, H, T, T) fp32 matrix is "
      f"{compute.attention_matrix_bytes(B_A, H_A, T_A) / 2**20:.2f} MiB")
for name, (mats, b) in t2.items():
    print(f"{name:>52}: {b / 2**20:5.2f} MiB saved for backward at T={T_A}, of which the T² part is {mats:.2f} matrices")

# %%
viz.show_verdict(judge(Prediction(f"(B, H, T, T) matrices {KD} keeps", "softmax's output, read again in "
                                  "backward", value=1.0, rel_tol=0.01), t2[KD][0]))
viz.show_verdict(judge(Prediction("(B, H, T, T) matrices it keeps with need_weights=False", "scaled_dot_product"
                                  "_attention keeps bytes linear in T", high=0.01), t2[NW][0]))
claim_verdict("MultiheadAttention(kdim=head_dim)", Claim(
    "nn.MultiheadAttention(kdim=head_dim) is memory-efficient attention", f"(B, H, T, T) matrices {KD} keeps for "
    "backward (the T² part of its saved bytes)", high=0.05), t2[KD][0], reasons={
        "does not hold here": f"kdim is the key input's width: it shrank the key projection to (E, {head_dim}) "
                              f"({fewer:,} fewer parameters)"
                              + ("" if self_attention_runs else " and made self-attention raise") + "; the "
                              f"attention still keeps its T x T matrix. With need_weights=False it kept "
                              f"{t2[NW][0]:.2f}: that argument, or F.scaled_dot_product_attention, selects "
                              "memory-efficient attention.",
        "holds": "This PyTorch keeps no T x T matrix for it even with need_weights=True; kdim still only sets the "
                 "key input's width."})

# %% [markdown]
# ## 21. "An 'ultra' level that turns everything on beats a tuned subset"
#
# **The advice.** Switch everything on at once: `torch.compile`, mixed precision, fused
# attention, 8 DataLoader workers and gradient accumulation over 8 micro-batches.
#
# **The model** (modules 06 and 07). Each switch removes one bottleneck and pays only where that
# bottleneck is (Amdahl): bf16 autocast speeds up the matmuls only where the hardware has fast
# bf16 units (claim 8 measured this machine's), fused attention and a fused GELU save round
# trips to memory, workers hide loading time but cannot beat the cores there are, accumulation
# splits the batch into smaller micro-batches to save memory, and compiling costs its compile
# first (claim 9). Tuning measures each switch alone and keeps those that helped. The run: the
# tiny GPT-2 trained on random tokens from a `DataLoader`, the same number of samples per
# optimizer step in every setting. The plain setting is fp32, attention op by op
# (`attention="eager"`), GPT-2's GELU as separate elementwise ops, no workers, no accumulation,
# no compile. Each switch is timed alone against it, interleaved; the tuned subset keeps the
# switches that were faster beyond the noise (the 10th percentile of their pair speedups above
# 1), and compile if claim 9 found it so; then
# everything-on and the tuned subset are timed against each other. Workers persist across
# steps (`persistent_workers=True`), so they start once, before the timing. At default size
# everything-on compiles its transformer blocks (`block.compile()`, regional compilation: the
# identical blocks share one graph), and its first step, compile included, is reported apart;
# QUICK mode leaves compile out. **Prediction:** the switches' costs add up: everything-on's step
# takes the tuned subset's time plus the time each switch it adds cost alone over the plain
# step (as a share of the plain step, which is timed again beside the two; compile: claim 9's
# speedup, applied to the whole step), within 30 %. The tuned subset with accumulation added is
# timed beside them too: it shows whether accumulation's cost depends on the setting it joins.

# %%
warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)  # more workers than cores: the advice
TOKENS = TensorDataset(torch.randint(0, 1024, (8 * ULTRA["samples"], SEQ)))  # (N, T) token ids, cycled
PLAIN = dict(attention="eager", activation="gelu_new", precision="fp32", workers=0, accumulate=1, compiled=False)
SWITCHES = {"fused attention": dict(attention="sdpa"), "fused GELU": dict(activation="gelu_pytorch_tanh"),
            "bf16 autocast": dict(precision="bf16"), f"{ULTRA['workers']} workers": dict(workers=ULTRA["workers"]),
            f"accumulation {ULTRA['accumulate']}": dict(accumulate=ULTRA["accumulate"])}
def setting_step(attention, activation, precision, workers, accumulate, compiled):
    """One optimizer step over ULTRA["samples"] samples in this setting, as a no-argument callable."""
    torch.manual_seed(0)
    m = tiny_gpt2(block_size=SEQ, **GPT, attention=attention, activation=activation).to(DEVICE)
    if compiled:
        for block in m.transformer.h:
            block.compile()  # regional compilation: the identical blocks share one compiled graph
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    loader = DataLoader(TOKENS, batch_size=ULTRA["samples"] // accumulate, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)
    batches = itertools.chain.from_iterable(itertools.repeat(loader))  # epoch after epoch
    def step():
        for _ in range(accumulate):
            xb = next(batches)[0].to(DEVICE)  # (micro-batch, T)
            with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = m(input_ids=xb, labels=xb).loss / accumulate  # the mean over the whole batch
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step

# %%
alone = timing.interleaved([setting_step(**PLAIN)] + [setting_step(**{**PLAIN, **sw}) for sw in SWITCHES.values()],
                           warmup=1, repeat=ULTRA_ROUNDS)
speed = {name: Speedup(alone[0], m) for name, m in zip(SWITCHES, alone[1:])}  # ratio = plain / switched time
print(f"plain setting: {ULTRA['samples'] / alone[0].median_s:.0f} samples/s; each switch alone against it:")
for name, sp in speed.items():
    print(f"{name:>16}: {pairs(sp)}")
keep = [name for name, sp in speed.items() if sp.low > 1]  # faster beyond the noise
compile_kept = COMPILE_ULTRA and comp.low > 1  # claim 9's measurement
added = [name for name in SWITCHES if name not in keep] + (["compile"] if COMPILE_ULTRA and not compile_kept else [])
tuned_cfg = {**PLAIN, **{k: v for name in keep for k, v in SWITCHES[name].items()}, "compiled": compile_kept}
ultra_cfg = {**PLAIN, **{k: v for sw in SWITCHES.values() for k, v in sw.items()}, "compiled": COMPILE_ULTRA}
print(f"tuned subset: {', '.join(keep + (['compile'] if compile_kept else [])) or 'the plain setting'}; everything-on "
      f"adds {', '.join(added) or 'nothing'}")

# %%
ACC = f"accumulation {ULTRA['accumulate']}"
plain_step, tuned_step, ultra_step = (setting_step(**cfg) for cfg in (PLAIN, tuned_cfg, ultra_cfg))
extra = [setting_step(**{**tuned_cfg, **SWITCHES[ACC]})] if ACC in added else []  # to explain a miss
with timing.Timer(DEVICE) as first:
    ultra_step()  # starts the workers, and compiles when compile is on
plain_b, *both, tuned_acc = timing.interleaved([plain_step, tuned_step, ultra_step] + extra, warmup=1,
                                               repeat=ULTRA_ROUNDS) + ([] if extra else [None])
ultra = Speedup(*both)  # ratio = tuned time / everything-on time: everything-on's relative speed
added_share = {name: 1 / speed[name].pair_median - 1 for name in added if name != "compile"}  # of a plain step
predicted_s = ((both[0].median_s + plain_b.median_s * sum(added_share.values()))
               / (comp.pair_median if "compile" in added else 1.0))
predicted_ultra = both[0].median_s / predicted_s  # the tuned time over everything-on's, predicted
print(f"everything-on against the tuned subset: {pairs(ultra)}; per sample "
      f"{both[1].median_s / ULTRA['samples'] * 1e3:.1f} ms against {both[0].median_s / ULTRA['samples'] * 1e3:.1f} ms")
print(f"everything-on's first step: {first.elapsed_s:.1f} s (" + ("compile and " if COMPILE_ULTRA else "")
      + f"{ULTRA['workers']} workers' start-up), {first.elapsed_s / both[1].median_s:.0f}x a later step"
      + ("" if COMPILE_ULTRA else "; QUICK mode leaves compile out"))

# %%
acc_ms = None if tuned_acc is None else (speed[ACC].candidate.median_s - speed[ACC].baseline.median_s,
                                         tuned_acc.median_s - both[0].median_s)  # s added (medians): plain, tuned
acc_text = "" if acc_ms is None else (
    f" {ACC} added {acc_ms[0] * 1e3:.1f} ms to the plain step and {acc_ms[1] * 1e3:.1f} ms to the tuned one (timed "
    "beside the two)" + ((": more to the tuned step, whose every micro-batch casts each weight to bf16 again "
                          "(autocast's cast cache ends with each micro-batch's autocast region)."
                          if tuned_cfg["precision"] == "bf16" else ": more to the tuned step.")
                         if acc_ms[1] > 1.3 * acc_ms[0] else
                         ": about as the model assumes; the gap lies with the other switches together."))
caveat = ((" Compile's factor was measured on claim 9's MLP, not on this model." if "compile" in added else "")
          + (f" And {busy()}." if busy() else ""))
viz.show_verdict(judge(Prediction("everything-on speed over the tuned subset's", "the time each added switch "
                                  "costs alone adds up", value=predicted_ultra, rel_tol=0.3, unit="x"),
                       ultra.pair_median, spread=(ultra.low, ultra.high), explain={
    "above": "Together the added switches cost less than their costs alone add up to: they are not "
             "independent." + acc_text + caveat,
    "below": "Together the added switches cost more than their costs alone add up to: they are not "
             "independent." + acc_text + caveat}))
alone_text = ", ".join([f"{name} {speed[name].pair_median:.2f}x" for name in added_share]
                       + ([f"compile {comp.pair_median:.2f}x (claim 9)"] if "compile" in added else []))
same = "The tuned subset kept every switch: the two settings are the same, so any difference is noise."
claim_verdict("'ultra': everything on", Claim(
    "an 'ultra' level with everything on (compile, mixed precision, fused attention, 8 workers, accumulation 8) "
    "beats a tuned subset", "everything-on samples/s over the tuned subset's", low=1.05, partly=1.0, unit="x"),
    ultra.pair_median, (ultra.low, ultra.high), reasons={
        "does not hold here": same if not added else f"Everything-on adds switches that were not faster beyond "
                              f"the noise alone ({alone_text}), and together they cost it speed: a switch pays "
                              "only where its bottleneck is.",
        "holds partly": same if not added else f"Faster, by less than 5 %, with the added switches measuring "
                        f"{alone_text} alone.",
        "holds": same if not added else f"Everything-on was faster here, with the added switches measuring "
                 f"{alone_text} alone.",
        "inconclusive": "The two settings differ by less than this run's noise."})

# %% [markdown]
# ## Summary
#
# Each row is computed from the measurement above it: the advice, what was measured on this
# machine, and the verdict. A "GPU only" row is advice about a GPU: its CPU analogue was measured
# where one exists (pin_memory has none: a CPU ignores it); run the notebook on a GPU machine to
# judge the claim itself.

# %%
viz.show_claims_table(VERDICTS)

# %%
fig = viz.plot_claims(VERDICTS)

# %%
viz.show_headlines(viz.claims_headlines(VERDICTS))
