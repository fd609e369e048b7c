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
# 4. measures it, the settings timed in alternation and in balanced orders (A B, B A, A B, B A
#    ...: each setting runs first in half the rounds, so what a round's position does to a time,
#    the second call finding a warm cache or a changed clock, falls on both alike: it cancels
#    exactly from the geometric mean of an A-B and a B-A ratio (claim 16 judges that), and from
#    the median of all the paired ratios only where the two orders' ratios spread alike; an A/A
#    control, one loop timed against itself before the first timed claim, prints each order's
#    median to check that, and measures the design's own error): the figure is the median
#    of the rounds' paired ratios, with the narrowest order-statistic interval covering at least
#    90 % (distribution-free; its exact coverage is printed with it);
#    where two settings ran one after the other, not in alternation, the ratio of their median
#    times with the interval of two separate runs (each claim says which);
# 5. computes a **verdict on the advice** (`perfkit.verdict.assess`): *holds*, *holds partly*
#    (the right direction, not as far, or not shown as far: an interval that reaches outside the
#    promise, or lies within the A/A control's reach of its edge), *does not hold here* (this too
#    where the side of the no-effect value is undecided but the whole interval lies outside the
#    promise, beyond that reach: the promise fails on either side, and the verdict says so),
#    *inconclusive* (the interval reaches across the no-effect value, or, for a timed figure, lies
#    within the A/A control's reach of it: the effect is smaller than its uncertainty), or *GPU only*
#    (the advice is about a GPU; on a CPU its analogue is measured where one exists, and the
#    claim itself when CUDA is present).
#
# One scale for every speed claim: a speedup of 1 is no effect, and advice that promises "faster"
# without a number is held to a visible 5 % (`FASTER` below); advice that names a number is held to
# it. The experiments themselves are library functions (`perfkit.memory.claims`,
# `perfkit.compute.claims_speed`, `claims_precision`, `claims_ultra`, `perfkit.data.claims`), so
# each claim below reads as the advice, the promise, one call that measures, and the verdict.
#
# "Here" matters: a verdict is about this machine, this model size and this load. The summary
# table at the end collects them.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
REPEAT = 5 if QUICK else 15                    # interleaved timing rounds per comparison (rounded up
                                               # to whole cycles of the balanced order: 16 for two)
FAST_REPEAT = 3 * REPEAT                       # rounds for comparisons of milliseconds
GPT = dict(n_embd=64, n_layer=2, n_head=2)     # the tiny GPT-2 of the memory and precision claims
SEQ, BATCH = 64, 8                             # tokens per sample, samples per batch
ACT_BATCHES = [1, 4, 16] if QUICK else [1, 4, 16, 64]  # batches of the activation sizing rule
MLP_WIDTH = 1024                               # hidden width of the GELU/ReLU and compile MLPs
CONV = dict(channels=64, size=32, batch=4 if QUICK else 8, groups=8)
WORKERS = [0, 1, 2, 4] if QUICK else [0, 1, 2, 4, 8]
LOAD_BATCHES, LOAD_ROUNDS = (20, 5) if QUICK else (40, 5)  # batches per loader pass, rounds over the counts
                                    # (5: the fewest an interval of a median at 90 % needs; rounded up to whole cycles)
MICRO = 4                                      # micro-batches per step (empty_cache, accumulation)
DDP_MLP = dict(width=256, depth=6) if QUICK else dict(width=512, depth=8)
DDP_CAPS = [0.05, None, 25, 500]               # MB: tiny, DDP's default (left unset), 25 written out, the advice's 500
TOPK_STEPS = 20 if QUICK else 60               # training steps per method, in alternation (claim 16)
ULTRA = dict(samples=8 if QUICK else 16, accumulate=8, workers=8)  # claim 21: batch, micro-batches, workers
ULTRA_ROUNDS = 5 if QUICK else 7               # interleaved rounds of claim 21, rounded up to whole
                                               # cycles (a bf16 step is slow on a CPU)
COMPILE = not QUICK  # compiling backward (claim 9) and the GPT-2 blocks (21) costs seconds to minutes cold
FASTER = dict(low=1.05, partly=1.0, unit="x")  # "faster", no number: a visible 5 %; 1x is no effect

# %% [markdown]
# The 2-process DDP experiments (claims 14-16) are set up here and run after claims 1-3, alone:
# the notebook's own work would share the cores with the job's timed steps. Its settings take
# turns (the bucket caps in balanced rounds, the two compression methods step by step), so a load
# that moves during the job spreads over every setting rather than on one.

# %%
import json
import time

from perfkit import dist

DDP_CFG = {"model": DDP_MLP, "batch": 32,
           "buckets": {"caps_mb": DDP_CAPS, "repeat": REPEAT if QUICK else 25,  # steps of tens of ms: cheap
                       "balanced": True},  # each cap first in as many rounds as every other
           "accumulate": {"ks": [1, MICRO], "repeat": 3},
           "accumulate_synced": {"ks": [MICRO], "repeat": 3}}
TOPK_CFG = {"workload": "digits", "steps": TOPK_STEPS, "batch": 32, "methods": ["none", "topk_1pct_ef"],
            "interleave": True, "round_steps": 1}  # the two methods take turns, step by step
JOB_ARGS = ["--config", json.dumps({"data_parallel": DDP_CFG, "compression": TOPK_CFG})]  # run after claims 1-3

# %%
import math
from dataclasses import replace

import torch
import torch.nn as nn

from perfkit import ceilings, hw, stats, timing, viz
from perfkit.ceilings import ceiling_note, ceiling_source
from perfkit.compute import claims_precision as cp
from perfkit.compute import claims_speed as cs
from perfkit.compute import claims_ultra as cu
from perfkit.data import claims as cd
from perfkit.imitate import IMITATIONS
from perfkit.jobs.data_parallel import make_mlp
from perfkit.memory import claims as cm
from perfkit.memory import gpt2_saved_activation_bytes, zero_model_states
from perfkit.models import tiny_gpt2
from perfkit.verdict import Claim, Prediction, assess, kinds_text
from perfkit.viz import si
from perfkit.viz.claims import control_gap_text, control_order_text, control_text, weighed_verdict

DEVICE = timing.resolve_device()
CUDA = DEVICE.type == "cuda"
CORES = os.cpu_count()
limits = LOADED = hw.cached_limits(quick=QUICK)  # notebook 00's sweep, raised by later work (or now)
THREADS = 1 if not CUDA else torch.get_num_threads()
torch.set_num_threads(THREADS)  # one compute thread (see "Why one compute thread" below)
VERDICTS = {}  # claim -> perfkit.verdict.ClaimVerdict, for the summary table
JUDGED = {}  # claim -> (Claim, what was measured, assess's other keywords): to weigh it again by another error
CONTROL = 0.0  # the A/A control's reach: the timing design's own error, measured before the first timed claim
print(f"torch {torch.__version__} on {limits.name}; {CORES} CPU cores, {THREADS} compute thread(s)")
if (imitated := hw.imitation()) in IMITATIONS and not CUDA:
    print(f"imitating {imitated}: this process caps its kernels (" + ", ".join(f"{k}={v}" for k, v in
          IMITATIONS[imitated].items()) + ") as on a CPU without bf16 instructions: bf16 matmuls take the "
          "emulated path, so the bf16 figures below (claims 8 and 21) are that CPU's, not this one's native ones")

# %%
WHERE = {"holds": "inside the promise", "holds partly": "between no effect and the promise",
         "does not hold here": "on the far side of no effect from the promise"}  # where a point lies, per status


def claim_verdict(name, claim, measured, why="", reasons=None, **kw):
    """Judge the advice (`assess`, a timed claim weighed by the A/A control's reach), show the
    verdict, keep it for the table. `why`: a sentence built from the measurement, appended
    whatever the verdict."""
    if reasons is None and assess(claim, measured, error=CONTROL, **kw).status == "inconclusive":
        # an inconclusive verdict says where its point lies first: "the figure lies where the advice holds partly:"
        reasons = {s: f"{where}. {why}" for s, where in WHERE.items()}
    VERDICTS[name] = v = assess(claim, measured, reasons=reasons or {s: why for s in WHERE},  # inconclusive: said once
                                error=CONTROL, **kw)  # a timed claim is weighed by the A/A control
    JUDGED[name] = (claim, measured, kw)
    viz.show_claim(v)


def x(est):
    """An Estimate of a ratio as printed beside its verdict."""
    return est.text('x')


def medians(before_s, after_s, judged="the median of the rounds' paired ratios"):
    """Each setting's median step (ms), and why their ratio is not the figure judged (by
    default the median of the rounds' paired ratios, another statistic)."""
    return (f"{before_s * 1e3:.2f} and {after_s * 1e3:.2f} ms (each setting's median; their ratio, "
            f"{before_s / after_s:.3g}x, is not the figure judged, {judged})")

# %% [markdown]
# **Why one compute thread.** On a 2-core machine shared with other jobs, two OpenMP threads
# stall at every barrier whenever the OS deschedules one, so a step's time depends on what else
# runs at that moment; one thread has no barrier to wait at. That is a reason to expect one
# thread to be steadier, not a measurement: claim 13 times each thread count and says which
# count's rounds spread least on this run (a spread without an interval: no test). Either way the claims' ratios come from paired
# rounds in balanced orders, and the A/A control below measures the error that design leaves.

# %% [markdown]
# ## 1. "Adam needs 2x the model's memory, activations 4x" (a sizing rule)
#
# **The advice.** Size a training job as: weights `W`, Adam's state `2W`, activations `4W`.
#
# **The model** (module 04). fp32 Adam keeps two fp32 moments per parameter: 8 bytes against
# the weight's 4, exactly 2x (plus a step counter per tensor). Mixed precision as the ZeRO paper
# counts it (DeepSpeed's ZeRO) breaks the rule: 16-bit weights (2 bytes: the paper's fp16, bf16
# alike) against fp32 moments and an fp32 master copy (12 bytes, the paper's K = 12) is 6x. (Megatron-LM, training with `--bf16`, accumulates and
# all-reduces its gradients in fp32 unless `--grad-reduce-in-bf16` is given: 4 bytes instead of the 2 below; with
# `--fp16` they stay 16-bit unless `--accumulate-allreduce-grads-in-fp32` is given. The 6x of the optimizer over
# the weights is the same either way.) `torch.autocast` (claim 8) keeps the
# weights in fp32 and casts per op, so there Adam's state stays 2x the weights.
# Activations are a different kind of quantity: they grow with batch x sequence, the weights do
# not, so no fixed multiple of `W` can describe them. **Prediction:** the Adam ratio is 2 within
# 1 % (counted from the tensors a real `AdamW` holds after a step, step counters included: with
# `amsgrad=True` it would read 3x); the activation/weight ratio grows in proportion to the batch.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
per_param = {}
for recipe in ("fp32_adam", "mixed_adam"):
    s = zero_model_states(1e9, recipe=recipe)
    per_param[recipe] = s.optimizer / s.params
    print(f"{recipe}: per parameter {s.params / 1e9:g} B weights, {s.grads / 1e9:g} B gradients, "
          f"{s.optimizer / 1e9:g} B optimizer state -> optimizer / weights = {per_param[recipe]:g}x")

# %%
sizing = cm.sizing_ratios(sorted({*ACT_BATCHES, BATCH}), SEQ, **GPT)
b_lo, b_hi = min(ACT_BATCHES), max(ACT_BATCHES)
print(f"tiny GPT-2: {sizing.params:,} parameters, {sizing.weight_bytes / 2**20:.2f} MiB of weights; "
      f"AdamW state {sizing.adam_ratio:.4f}x the weights")
print(f"activations saved for backward / weights at sequence length {SEQ}: "
      + ", ".join(f"batch {b}: {sizing.activation_ratio(b):.2f}x" for b in ACT_BATCHES))

# %%
viz.verdict(Prediction("AdamW state over fp32 weights", "two fp32 moments per parameter", value=2.0, rel_tol=0.01,
                       unit="x"), sizing.adam_ratio)
viz.verdict(Prediction(f"activation/weight ratio at batch {b_hi} over batch {b_lo}", "activations are linear in "
                       "batch x sequence", value=b_hi / b_lo, rel_tol=0.05, unit="x"), sizing.growth())
claim_verdict("Adam state = 2x the model", Claim("Adam needs 2x the model's memory", "AdamW state / fp32 weights", low=1.98,
     high=2.02, unit="x", timed=False), sizing.adam_ratio, f"With mixed precision the formula above gives {per_param['mixed_adam']:g}x.")
claim_verdict(f"activations = 4x the model (the ratio's growth, batch {b_lo} to {b_hi})", Claim("activations need 4x the model's memory", "activations / weights, largest "
     f"over smallest batch ({b_hi} vs {b_lo})", low=0.8, high=1.25, unit="x", timed=False), sizing.growth(), f"The ratio moved "
     f"{sizing.growth():.0f}x from batch {b_lo} to {b_hi}: activations follow batch x sequence, not the weights.")

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
torch.manual_seed(0)
files = cm.checkpoint_file_sizes(tiny_gpt2(block_size=SEQ, **GPT).state_dict())
assert files.round_trips  # the gzip stream loads back the same tensors
print(f"ckpt.pt {files.plain / 2**20:.3f} MiB, ckpt.pt.gz {files.named_gz / 2**20:.3f} MiB, "
      f"gzip.open {files.real_gz / 2**20:.3f} MiB; ckpt.pt.gz starts with {files.magic!r} ({files.format})")

# %%
viz.verdict(Prediction(".pt.gz size over .pt size", "torch.save ignores the file name", value=1.0, rel_tol=0.01,
                       unit="x"), files.name_ratio)
viz.verdict(Prediction("gzip'd checkpoint over raw", "fp32 mantissas are close to random", low=0.8, high=1.0, unit="x"),
            files.gzip_ratio, explain={"below": "A freshly initialised model has structure (zero biases, unit "
                                                "layer-norm weights) that training removes."})
claim_verdict(".pt.gz compresses", Claim("saving to a .pt.gz file name compresses the checkpoint", ".pt.gz size / .pt size",
     high=0.99, partly=1.0, unit="x", timed=False), files.name_ratio, f"The file is a {files.format} archive whatever its name; "
     f"real gzip (gzip.open) gives {files.gzip_ratio:.2f}x, at the cost of a compression pass over every byte.")

# %% [markdown]
# ## 3. "Memory efficiency = batch x sequence x 4 bytes / allocated memory"
#
# **The advice.** Track this ratio as the memory efficiency of a training setup.
#
# **The model.** The numerator is the bytes of the input token ids stored as 4-byte integers.
# The memory of a step (module 04) is model states `S` (weights, gradients, optimizer state)
# plus activations, `a` bytes per token: the metric is `4BT / (S + aBT)`. It can never exceed
# `4 / a`, whatever the setup, and `a` (thousands of bytes per token per layer even for this
# 64-wide toy, printed below; about `34C + 5HT` bytes per token per layer in 16-bit at width `C`,
# `H` heads and sequence `T`, Korthikanti et al. 2022) is set by the architecture, not by how
# well memory is used. **Prediction:** the metric measured on the
# tiny GPT-2 equals `4BT / (S + aBT)` with `S` counted and `a` from the activation model
# (module 04's formula) within 10 %, and stays below `4 / a`. The measured activations are the
# bytes saved-tensor hooks record, so this prediction tests module 04's count of `a`: the formula
# lists the tensors it expects autograd to save, op by op, and the two agree to the byte when it
# knows every one of them (a tensor it missed would open a gap). The advice is judged apart.

# %%
act_model = gpt2_saved_activation_bytes(BATCH, SEQ, **GPT, vocab_size=1024)
a_pred, a_layer = (act_model.total / (BATCH * SEQ), act_model.per_layer / (BATCH * SEQ))  # B/token, modelled
metric = sizing.input_metric(BATCH)
predicted_metric = BATCH * SEQ * 4 / (sizing.state_bytes + a_pred * BATCH * SEQ)
print(f"batch {BATCH} x {SEQ}: model states {sizing.state_bytes / 2**20:.2f} MiB, activations {sizing.activation_bytes[BATCH] / 2**20:.2f} MiB "
      f"({sizing.activation_bytes[BATCH] / (BATCH * SEQ):.0f} B/token; the model says {a_pred:.0f}, "
      f"{a_layer:.0f} of them per layer); metric {metric:.2e}, its ceiling 4 / a = {4 / a_pred:.2e}")

# %%
viz.verdict(Prediction("the metric", "4BT / (S + aBT), module 04's memory model", value=predicted_metric, rel_tol=0.1), metric)
claim_verdict("memory efficiency metric", Claim("memory efficiency = batch x seq x 4 bytes / allocated memory (1 = all memory "
     "useful)", "the metric on a tiny GPT-2 step", low=0.5, high=1.0, timed=False), metric, "It weighs the input ids against "
     f"everything else: at most 4 / a = {4 / a_pred:.1e} for this architecture, however well memory is used.")

# %% [markdown]
# The two-process job runs now, with nothing else of this notebook running: the notebook waits for
# it, so that its processes and the notebook's own timings never compete for the cores.

# %%
launched = time.perf_counter()
job = dist.launch("perfkit.jobs.suite", 2, JOB_ARGS, timeout_s=600)[0]  # rank 0's (each time the slower rank's)
ddp, topk = job["data_parallel"], job["compression"]
job_s = time.perf_counter() - launched
print(f"DDP job done: {len(ddp['buckets'])} bucket sizes, accumulation with and without no_sync(), "
      f"{len(topk['runs'])} compression methods; it took {job_s:.1f} s, alone: the notebook waited for it")

# %% [markdown]
# ## The control: one loop timed against itself
#
# Every speed figure below is the median of paired ratios of settings timed in alternation,
# with its order-statistic interval (at least 90 %; its exact coverage is printed with it).
# Before any of them, one DataLoader loop (claim 12's) is timed against itself the same way: an
# A/A test. In balanced orders each copy runs first in
# half the rounds, so what a round's position does to a time falls on both copies alike (it cancels
# exactly from the geometric mean of a pair of rounds of opposite orders; from the median of all the
# paired ratios, used here, only where the two orders' ratios spread alike); the rounds of each
# order, taken apart, show how large that effect is. What the ratio still reads apart
# from 1 is the design's own error. (The order-statistic interval treats rounds as independent
# draws; rounds that drift together make it too narrow, and the control shows that too.) Its
# **reach**, how far its interval lies from 1x, weighs every timed verdict on the advice below
# alike: an interval within that reach of the edge that decides the verdict (no effect, or the
# promise) is not asserted past that edge, in the verdict, the table and the headlines; one put
# past it by less than a tenth of the reach is the rule's call, not a finding, and they say so.
# The reach is a margin of caution, not an estimate of any claim's error: it comes from one
# single-process loop, while the claims time other work, with fewer rounds, some in two processes;
# each claim's own interval already carries its sampling error, so the margin counts some of that
# twice and can only make a verdict more cautious. The control's estimate of the design's bias is
# its figure (how far the ratio lies from 1x), not its reach. The
# predictions keep the course's one rule on their own intervals; where the control's reach
# would change a timed prediction's outcome, a line after its verdict says so.
# Without CUDA `pin_memory` would only be ignored (with a warning each pass), so both copies run
# with `pin_memory=False`, the same code; with CUDA the two loops are claim 12's pageable and
# pinned ones, which differ: then there is no control.
# The control takes more rounds than a claim, `20 * REPEAT` (a loop of milliseconds: about two
# seconds in all), because its interval must be narrow enough to decide a 2 % band: its width
# shrinks about as one over the square root of the rounds.
# **Prediction (CPU):** the ratio is 1 within 2 %, under half the 5 % a claim without a number
# must show (`FASTER`), so that this loop's own noise alone decides no such claim. Its reach is
# the noise of this one loop at this many rounds, not the error of the other designs below (other
# work, fewer rounds, two processes): claim 14 sets it beside every reading of identical work in
# this notebook and names the timed verdicts that the largest of them would change.

# %%
pin = cd.time_pin_memory(BATCH, LOAD_BATCHES, 20 * REPEAT, DEVICE)  # without CUDA: one loop, twice
CONTROL = pin.reach() or 0.0  # None with CUDA: no control
print(f"a loop over {LOAD_BATCHES} batches of {BATCH} images, copied to {DEVICE}, "
      + ("against itself" if pin.same_code else "pinned over pageable") + f": {x(pin.speedup())}, both orders balanced")
if pin.same_code:  # the rounds of each order apart show the position effect
    print(control_order_text(pin))

# %%
if pin.same_code:
    apart = pin.speedup().clear_of(1.0, "x")  # "above"/"below" where identical code read apart beyond the interval
    viz.verdict(Prediction("one loop's speedup over itself (A/A)", "identical code", value=1.0, rel_tol=0.02, unit="x"),
                pin.speedup(), explain={apart: "Identical code read apart beyond its interval: a miss "
                f"its {pin.speedup().label} allows in {1 - pin.speedup().confidence:.0%} of runs, or rounds that drift together (not independent draws), which would make every "
                "interval of this design too narrow; this run does not tell which. The reach below covers either: "
                "every timed verdict on the advice is weighed by it."} if apart else None)
    print(control_text(pin, FASTER["low"] - 1, target=0.02))  # the prediction above: within 2 %
else:
    print("with CUDA the two loops differ (claim 12 judges them): no A/A control, and no verdict below is weighed "
          "by one")

# %% [markdown]
# ## 4. "GELU is more efficient than ReLU"
#
# **The advice.** Prefer GELU to ReLU for efficiency.
#
# **The model.** Both are elementwise: they read and write each element once (the same
# bytes), but GELU evaluates `erf` per element where ReLU compares with zero, and its backward
# needs the Gaussian density as well. The activation's two ops change a step by their own share
# of it (Amdahl), which the ops timed alone below give. **Prediction:** the GELU op alone is slower than ReLU's
# (ratio at least 1); whether a whole step notices is for the measurement to say. The figure judged
# is the step's speedup, on the same scale as every other speed claim (`FASTER`).

# %%
act = cs.time_activations(BATCH * SEQ, MLP_WIDTH, REPEAT, FAST_REPEAT)
op, step = act.op_cost(), act.step_speedup()
print(f"op alone on ({BATCH * SEQ}, {MLP_WIDTH}), {act.calls} calls per timing: GELU / ReLU time {x(op)}; "
      f"their backward ops {x(cs.speedup_estimate(act.gelu_backward, act.relu_backward))}")
print(f"MLP training step: GELU's speedup over ReLU {x(step)}")
gelu_longer = 1 / step.value - 1                     # how much longer GELU's step took, forward and backward
op_share = act.extra_op_s / act.relu_step.median_s   # the forward op's extra time, as a share of ReLU's step

# %%
weighed_verdict(pin, Prediction("GELU op time over ReLU op time", "erf per element against a comparison", low=1.0, unit="x"), op)
bwd_share = act.extra_backward_s / act.relu_step.median_s  # the backward op's extra time, the same way
ops_share = op_share + bwd_share
ops_speed = 1 / (1 + ops_share)  # the step speedup the two ops' extra time alone implies
claim_verdict("GELU more efficient than ReLU", Claim("GELU is more efficient than ReLU", "GELU step speedup over ReLU", **FASTER),
     step, (f"GELU's step took {gelu_longer:.1%} longer than ReLU's" if gelu_longer > 0 else
            f"GELU's step took {-gelu_longer:.1%} less time than ReLU's") + " (the paired ratios' median); its forward "
     f"op alone adds {act.extra_op_s * 1e6:.0f} µs a call and its backward op {act.extra_backward_s * 1e6:.0f} µs, "
     f"together {ops_share:.1%} of ReLU's {act.relu_step.median_s * 1e3:.1f} ms step, a speedup of {ops_speed:.3g}x. "
     + viz.claims.ops_gap_text(pin, step, ops_speed))  # where the step's interval lies, weighed by the A/A control

# %% [markdown]
# ## 5. "Grouped convolutions reduce computation"
#
# **The advice.** Use grouped convolutions (`groups=g`) to cut the cost of a convolution.
#
# **The model.** With `g` groups each output channel sees `C / g` input channels: FLOPs and
# weights fall by exactly `g`. The bytes of the input and output do not change. By the
# roofline (module 00), the grouped call takes at least `max(FLOPs / peak, bytes / bandwidth)`
# (the ceilings of the one thread the calls run on), so the speedup is at most the dense call's
# measured time over that floor. (The ratio of the two calls' floors bounds nothing: the dense
# call runs at some fraction of its ceiling, the grouped one at another, and the kernels for
# grouped convolutions are less tuned than dense ones.) A dense call far below its ceiling
# puts that bound far above the speedup a grouped kernel reaches. Worse, a call that beats the
# ceiling raises it first, and a floor at or below the grouped call's own time makes the bound at
# least the ratio of the two medians by construction: then it cannot fail and is printed as
# context, not judged (the line says which). That the FLOP count falls by `g` exactly is checked (torch's
# `FlopCounterMode` counts convolutions by this very formula, so it is a check, not a
# prediction). **Bound (context, not judged, when it cannot fail):** the speedup is at most the dense time over the grouped call's
# roofline floor. Whether the time follows the FLOPs is the advice's question: its literal
# claim, fewer FLOPs, holds by construction, so the advice is judged on time, the cost a user
# means. The line is this course's own reading of "reduce": it holds where the time falls at
# least three quarters as far as the FLOPs (`0.75 g`: the grouped kernel within a quarter of the
# dense one's FLOP rate), partly where it falls at all.

# %%
conv = cs.time_grouped_conv(**CONV, repeat=FAST_REPEAT, device=DEVICE)
G, grp, rate = CONV["groups"], conv.speedup(), conv.rates()
for g in (1, G):  # a call that beats the ceiling raises it first: a floor below a measured time is none
    obs = ceilings.observe(limits, "float32", rate[g], f"the groups={g} convolution", threads=conv.threads)
    limits = obs.limits
    if obs.raised:
        print(obs.note)
roof, peak = conv.roofline_bound(limits), conv.peak(limits)  # the fp32 ceiling of the threads the calls ran on
CEIL = f"the {THREADS}-thread fp32 ceiling, {si(peak, 'FLOP/s')} ({(src := ceiling_source(limits, 'float32', THREADS, LOADED))}" + ("; that is the dense call's own best rate, so its share measures the call against itself, not the machine" if "groups=1 convolution" in src else "") + ")"
print(f"FLOPs per call: groups=1 {conv.flops[1]:,}, groups={G} {conv.flops[G]:,} ({conv.flops[1] / conv.flops[G]:g}x fewer)")
print(f"groups={G} speedup over groups=1 {x(grp)}; bound: dense {conv.dense.median_s * 1e3:.2f} ms over the grouped "
      f"call's roofline floor {max(conv.terms(limits)[G]) * 1e3:.3f} ms = {roof:.2f}x; achieved {si(rate[1], 'FLOP/s')} "
      f"dense, {si(rate[G], 'FLOP/s')} grouped ({rate[1] / peak:.0%} and {rate[G] / peak:.0%} of {CEIL})")

# %%
rates_conv = f"the dense call ran at {rate[1] / peak:.0%} of {CEIL}, the grouped one at {rate[G] / peak:.0%}"
assert conv.flops[1] == G * conv.flops[G]  # the check: FlopCounterMode's formula, C / g input channels each
weighed_verdict(pin, Prediction(f"groups={G} speedup", "dense time over the grouped call's roofline floor", high=roof, unit="x"),
            grp, explain={"above": f"Faster than the roofline allows: {rates_conv}."}, floor=(max(conv.terms(limits)[G]), conv.grouped.median_s))
claim_verdict("grouped convolutions", Claim(f"grouped convolutions reduce computation (FLOPs fall {G}x: does time?)",
     f"groups={G} speedup over groups=1", low=0.75 * G, partly=1.0, unit="x"), grp, f"FLOPs fell {G}x; {rates_conv}.")

# %% [markdown]
# ## 6. "Gradient checkpointing reduces memory by up to 80 %"
#
# **The advice.** Turn on activation (gradient) checkpointing to cut memory by up to 80 %.
#
# **The model** (module 04). A checkpoint per block keeps only each block's input and
# recomputes the rest in backward. It shrinks *activations* only: the weights and Adam's state
# stay (the gradients are freed between steps, `zero_grad(set_to_none=True)`, so none exists at
# the end of forward, where the activations peak; claims 3 and 8 count them with the model
# states, 16 B per parameter, as a whole step holds them, against this claim's 12 B). `gpt2_saved_activation_bytes` counts both cases op by op. The advice is about the
# peak: in backward one block at a time is recomputed, and its activations live again (the
# model's `recompute_peak`) while the gradients fill in, so the advice is judged on the peak's
# saving with every gradient counted (a worst case, so the smallest saving: backward frees each
# block's checkpoint as the gradients fill in, which the model does not track), not on the bytes
# held at the end of forward. That peak is part measured (model states and the activations kept
# after forward, counted) and part modelled (the one block rebuilt in backward). "Up to 80 %" is
# read as this course's band of 60 % to 80 % of the step's peak: within a quarter of the
# promised figure holds, any saving at all holds partly. **Prediction:** the activation memory
# saved matches that model within 5 %; the share of the whole step's memory saved is smaller,
# by the share of model states. (The model and the hooks agree to the byte when the model knows
# every tensor autograd saves, as in claim 3.)

# %%
ck = cm.checkpointing_savings(BATCH, SEQ, n_layer=4, n_embd=GPT["n_embd"], n_head=GPT["n_head"])
print(f"4 blocks, batch {BATCH} x {SEQ}: activations {ck.plain / 2**20:.2f} -> {ck.checkpointed / 2**20:.2f} MiB "
      f"({ck.activations_saved:.0%} saved; model {ck.model_saved:.0%}); model states "
      f"{ck.state_bytes / 2**20:.2f} MiB; whole step {ck.step_saved:.0%} saved at the end of forward")
ck_peak = gpt2_saved_activation_bytes(BATCH, SEQ, GPT["n_embd"], 4, GPT["n_head"], 1024, checkpointing=True).recompute_peak
grad_bytes = ck.state_bytes / 3  # weights, Adam's two moments; gradients as large as the weights
# share of the plain step's peak: gradients fill in while backward recomputes, so the checkpointed peak lies
# between none of them and all of them beside the rebuilt block; the claim is judged on the smaller saving
peak_saved_most = (ck.plain - ck.checkpointed - ck_peak) / (ck.state_bytes + ck.plain)
peak_saved = (ck.plain - ck.checkpointed - ck_peak - grad_bytes) / (ck.state_bytes + ck.plain)
print(f"one block recomputed in backward adds {ck_peak / 2**20:.2f} MiB back (modelled), and the gradients "
      f"({grad_bytes / 2**20:.2f} MiB) fill in as backward goes: the peak falls {peak_saved:.1%} if all of "
      f"them are there at the rebuilt block's peak, {peak_saved_most:.1%} if none are")

# %%
viz.verdict(Prediction("share of activation memory checkpointing saves", "module 04's op-by-op count",
                       value=ck.model_saved, rel_tol=0.05, physical=(0, 1)), ck.activations_saved)
claim_verdict("checkpointing: up to 80 % less memory" + (" (the model's cases span 60 %)" if peak_saved < 0.6 <= peak_saved_most else ""), Claim("gradient checkpointing reduces memory by up to 80 %", "share of "
     "the step's peak memory saved (model states + activations measured, plus the recomputed block as modelled, "
     "with every gradient present)", low=0.6, high=0.8, partly=0.0,
     timed=False), peak_saved, f"Activations held after forward shrank {ck.activations_saved:.0%}, less the "
     f"{ck_peak / 2**20:.2f} MiB of the recomputed block and the {grad_bytes / 2**20:.2f} MiB of gradients at "
     "the backward's peak; the model states "
     f"({ck.state_bytes / (ck.state_bytes + ck.plain):.0%} of the step) do not shrink."
     + (f" Counted with no gradient present at that peak, the saving is {peak_saved_most:.1%}: by this model the saving at the true peak lies between {peak_saved:.1%} and "
        f"{peak_saved_most:.1%} (backward holds neither case while a block is rebuilt: that block has no gradient yet, and the layers after it, the output head at least, have theirs), across the band's 60% edge. "
        + ("Under the one rule a figure whose range has one end inside the promise and one below it holds only partly, whichever point of the range is taken as the figure, so the label does not rest on the case printed; only the other end, taken alone, would read holds."
           if 0 < peak_saved and peak_saved_most <= 0.8 else "The label is the rule's call on the least saving the model allows, the case printed.")
        if peak_saved < 0.6 <= peak_saved_most else ""))

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
seq_check = cm.checkpoint_sequential_check(width=256, depth=8, rows=BATCH * SEQ)
print(f"as written: {seq_check.as_written_error or 'ran'}")
print(f"checkpoint_sequential(model, 2, x, use_reentrant=False): max |grad difference| "
      f"{seq_check.max_grad_diff:.1e}; kept for backward {seq_check.kept_plain / 2**20:.2f} -> "
      f"{seq_check.kept_checkpointed / 2**20:.2f} MiB")

# %%
viz.verdict(Prediction("max gradient difference, checkpointed against plain", "recomputation repeats the same ops",
                       high=1e-6), seq_check.max_grad_diff)
viz.verdict(Prediction("bytes kept for backward, checkpointed over plain", "only segment inputs and the last segment "
                       "are kept", high=1.0, unit="x"), seq_check.kept_checkpointed / seq_check.kept_plain)
claim_verdict("checkpoint_sequential as guides write it", Claim("checkpoint_sequential(custom_forward, chunks=2, module=..., "
     "inputs=...)", "the call runs (1) or raises (0)", low=1.0, high=1.0, timed=False), float(seq_check.runs_as_written),
     reasons={"does not hold here": f"It raises {seq_check.as_written_error}; the call above is the working one."})

# %% [markdown]
# ## 8. "Mixed precision gives a 40-60 % speedup and halves memory"
#
# **The advice.** Turn on mixed precision: 40-60 % faster ("2x on modern GPUs"), half the memory.
#
# **The model** (module 06). Autocast runs matmuls and attention (on a CPU as on CUDA) in bf16 and keeps
# the weights and the optimizer in fp32; on a CPU its fp32 list (PyTorch's AMP docs, "CPU Ops
# that can autocast to float32") holds the losses and dozens of others, but not softmax or layer
# norm as on CUDA, and ops like layer norm stay fp32 where their input, the residual stream, is
# fp32. The speedup is Amdahl's, `1 / ((1 - f) + f / r)`: only the ops autocast
# changes (a share `f` of the fp32 step) change speed, by a ratio `r`. Read off the cached
# ceilings of the one thread the steps run on (notebook 00's sweep, or a rate a later notebook
# measured above it: the output names whose each one is), `f` is the step's model FLOPs at the fp32
# ceiling over its time and `r` the ratio of the bf16 and fp32 ceilings (below 1 on a CPU without
# bf16 units); but a tiny model's matmuls
# are far from a ceiling's square shapes, so the prediction judged here measures both at the
# step's own shapes, as notebook 06 does: the ops that ran on bf16 tensors in one bf16 step, and
# autocast's casts, replayed alone in bf16 and upcast to fp32, in the same rounds as the two
# steps (`compute.autocast_parts`). The speed claim comes from GPUs (tensor cores); a CPU whose
# bf16 ceiling is above its fp32 one runs autocast on fast bf16 instructions, so there the claim
# is judged on the CPU, while on a CPU without them it is GPU only (its CPU analogue measured).
# The GPU claim itself runs when CUDA is present. Memory: only what autocast saves in bf16
# halves; fp32 tensors (layer norms, the loss) stay, and so do the model states (fp32 weights,
# gradients and Adam's moments): the advice is judged on the whole step's memory, states
# included. **Predictions:** the step speedup is
# Amdahl's with the measured parts, within 25 %; saved activations fall to between 50 % and
# 100 % of fp32's.

# %%
amp = cp.time_precision_step(BATCH, SEQ, GPT, REPEAT, device=DEVICE, parts=True)
speed, ap = amp.speedup(), amp.parts
f_mm, f_raw, r, amdahl = amp.amdahl(limits)
mem = cp.autocast_memory(BATCH, SEQ, GPT)
mem_ratio = mem.activation_ratio
print(f"bf16 autocast's speedup over fp32: {x(speed)}")
print("from the ceilings: " + "; ".join(ceiling_note(limits, d, limits.peak_flops(d, THREADS), THREADS, loaded=LOADED)
      .split(" of the ", 1)[1] for d in ("float32", "bfloat16")) + f": f = {f_mm:.1%}, r = {r:.3g} -> {amdahl:.3g}x"
      + (f" (f capped from {f_raw:.0%}: the cached fp32 ceiling is too low)" if f_raw > 1 else ""))
print("\n".join(ap.lines()))
print(f"measured at the step's shapes: f = {ap.share():.0%}" + (" (capped at 1)" if ap.share() > 1 else "")
      + f", r = {ap.total().ratio:.3g} -> {ap.predicted():.3g}x. " + cp.ceiling_terms_text(f_mm, r, min(ap.share(), 1.0), ap.total().ratio))
print(f"saved for backward, bf16 over fp32: {mem_ratio:.0%}; the whole step's memory (model states "
      f"{mem.state_bytes / 2**20:.2f} MiB, 16 B per parameter in both, gradients counted, + saved activations): {mem.step_ratio:.0%}")

# %%
parts_ms, step_ms = ap.total().baseline.median_s * 1e3, ap.steps.baseline.median_s * 1e3  # fp32, medians
amdahl_text = (f"the ops autocast changes (every row of the table, summed round by round: {parts_ms:.1f} ms of the "
               f"fp32 step's {step_ms:.1f} ms) are {ap.share():.0%} of this step" if ap.share() <= 1 else
               f"the ops autocast changes, replayed alone in fp32, took {ap.share():.0%} of this step's time (f "
               "capped at 1)") + (f" and run {ap.total().ratio:.2f}x as fast in bf16 (Amdahl: {ap.predicted():.2f}x)")
weighed_verdict(pin, Prediction("bf16 step speedup (CPU)", "Amdahl with the changed ops timed alone at the step's shapes",
                               value=ap.predicted(), rel_tol=0.25, unit="x"), speed, explain=ap.explain())
viz.verdict(Prediction("bf16 saved activations over fp32's", "only autocast's bf16 outputs halve", low=0.5, high=1.0,
                       unit="x"), mem_ratio)
claim_verdict("mixed precision: 40-60 % faster", Claim("mixed precision gives a 40-60 % speedup (2x on modern GPUs)", "bf16 "
     "autocast step speedup over fp32", low=1.4, partly=1.0, unit="x"), speed, f"Here {amdahl_text}.",
     gpu_only=not CUDA and r <= 1)
claim_verdict("mixed precision: half the memory", Claim("mixed precision halves memory", "the step's memory with bf16 "
     "autocast over fp32's (model states + saved activations)", low=0.45, high=0.55, partly=1.0, unit="x", timed=False),
     mem.step_ratio, f"Autocast kept {mem_ratio:.0%} of fp32's saved activations (what stays fp32, the loss and layer "
     "norms on the fp32 residual stream, and the bf16 weight copies it adds), and the fp32 weights, gradients and "
     "Adam state "
     f"({mem.state_bytes / 2**20:.2f} MiB) do not shrink at all.")

# %%
if not CUDA:
    print("No CUDA: the GPU claim (bf16 and fp16 autocast on tensor cores) is skipped; "
          + (f"the claim was judged on this CPU above (bf16 ceiling {r:.2f}x fp32's)" if r > 1
             else "its CPU analogue is above"))
else:
    for p in ("bf16", "fp16"):
        gpu_amp = cp.time_precision_step(16, 512, dict(n_embd=768, n_layer=4, n_head=12), REPEAT, p, DEVICE)
        print(f"GPU, GPT-2 768 x 4 layers, batch 16 x 512: {p} against fp32 {x(gpu_amp.speedup())}")
        claim_verdict(f"mixed precision on the GPU ({p})", Claim("mixed precision gives a 40-60 % speedup (2x on modern GPUs)",
             f"{p} step speedup over fp32", low=1.4, partly=1.0, unit="x"), gpu_amp.speedup())

# %% [markdown]
# ## 9. "`torch.compile` gives a 10-30 % speedup"
#
# **The advice.** Wrap the model in `torch.compile` for 10-20 % (or 20-30 %) more speed.
#
# **The model** (module 06). Inductor fuses chains of elementwise ops into one loop and calls
# the same BLAS for the matmuls. So only the non-matmul share of the step can shrink, and the
# compile itself (seconds to minutes) must be paid back. **Prediction:** the speedup is at most
# `1 / f`, with `f` the share of the eager step that the matmuls take at the fp32 ceiling (of
# the one thread the step runs on), their FLOPs counted by torch's `FlopCounterMode` on the eager
# step (5 matmuls in training, not 6: the input needs no gradient, so the first layer's backward
# computes only its weight's).
# The figure is the same kind as GELU's (claim 4), judged against the same no-effect value, 1x.
# (QUICK mode compiles the forward pass only; the default compiles forward and backward.)

# %%
comp = cs.time_compile(BATCH * SEQ, MLP_WIDTH, train=COMPILE, repeat=REPEAT)
comp_speed, (f_c, f_c_raw) = comp.speedup(), comp.matmul_share(limits)
print(f"{'forward + backward' if COMPILE else 'forward'}: compiled speedup {x(comp_speed)}; compile "
      f"{comp.record.compile_s:.1f} s (inductor cache hits {comp.record.fx_cache_hits}); matmuls "
      f"{si(comp.matmul_flops, 'FLOP')} a step (FlopCounterMode), share f = {f_c:.0%} "
      f"at the {THREADS}-thread fp32 ceiling, {si(limits.peak_flops('float32', threads=THREADS), 'FLOP/s')}"
      + (f" (capped from {f_c_raw:.0%}: the cached ceiling is too low)" if f_c_raw > 1 else ""))
print(comp.break_even_text())  # only for a speedup whose interval lies above 1x

# %%
weighed_verdict(pin, Prediction("compiled speedup", "only the non-matmul share can shrink", high=1 / f_c, unit="x"), comp_speed)
claim_verdict("torch.compile: 10-30 %", Claim("torch.compile gives a 10-20 % (or 20-30 %) speedup", "compiled speedup over "
     "eager", low=1.1, partly=1.0, unit="x"), comp_speed, f"The matmuls run the same BLAS compiled or not; at the "
     f"{THREADS}-thread fp32 ceiling alone they take {f_c:.0%} of this step (their share is at least that), which caps "
     f"the gain at {1 / f_c:.2f}x; the compile took {comp.record.compile_s:.1f} s"
     + (f" from a warm cache ({comp.record.fx_cache_hits} inductor cache hits; a cold one costs more)."
        if comp.record.fx_cache_hits else " with a cold cache.")
     + (f" Slower than eager? The compiled step's interval {control_gap_text(pin, comp_speed, 1.0)}"
        + (" (claim 14 sets it against every comparison of identical work in this notebook)" if pin.same_code else "") + "."
        + (" What would make it so is not measured here (the compiled graph is not profiled)."
           if pin.resolves(comp_speed, 1.0) else "") if comp_speed.high < 1 else ""))

# %% [markdown]
# ## 10. "`channels_last` speeds up a transformer's inference"
#
# **The advice.** Convert the model with `model.to(memory_format=torch.channels_last)`.
#
# **The model.** `channels_last` is a layout for 4-D tensors `(N, C, H, W)`: it stores the
# channels of one pixel together, which convolution kernels like. `Module.to(memory_format=...)`
# converts only 4-D and 5-D parameters (`channels_last` is the 4-D layout, `channels_last_3d` the
# 5-D one); a text transformer like this GPT-2 has none (its weights are 2-D and 1-D), so the call
# changes nothing. (A vision transformer has one: its patch embedding is a `Conv2d`,
# whose 4-D weight the call re-lays; the attention and MLP weights stay 2-D.) **Predictions:** the call re-lays no parameter (counted: the parameters whose storage
# it replaced), and inference time is unchanged (ratio 1 within 10 %). Where nothing is re-laid
# the two timings differ by noise alone, so the advice is judged on the count.

# %%
cl = cs.channels_last_check(lambda: tiny_gpt2(block_size=SEQ, **GPT), torch.randint(0, 1024, (BATCH, SEQ)), REPEAT)
print(f"4-D and 5-D parameters in the transformer: {cl.params_4d_5d}; parameters the call re-laid: {cl.relaid}; "
      f"channels_last's speedup {x(cl.speedup())}")
print(f"for contrast, a small CNN (4-D weights, batch 256 of 8x8 digits): {x(cl.cnn_speedup())}")

# %%
viz.verdict(Prediction("parameters channels_last re-lays", "only 4-D tensors have that layout", value=0, rel_tol=0),
            cl.relaid)
weighed_verdict(pin, Prediction("transformer inference speedup with channels_last", "no 4-D tensors to re-lay", value=1.0,
                               rel_tol=0.1, unit="x"), cl.speedup())
claim_verdict("channels_last for a transformer", Claim("channels_last speeds up a transformer's inference", "parameters the "
     "call re-lays (a speedup needs at least one)", low=1, timed=False), cl.relaid, f"The model has {cl.params_4d_5d} 4-D or 5-D parameters, "
     f"so both ran the same kernels: the timing ({cl.speedup().value:.2f}x) compares one model with itself.")

# %% [markdown]
# ## 11. "Call `torch.cuda.empty_cache()` before each accumulation step"
#
# **The advice.** Free the allocator's cache before every micro-batch to save memory.
#
# **What is judged.** Its cost, the step's speed. The memory it promises to save is the
# allocator's cache of freed blocks; by the model below the peak, set by the micro-batch itself,
# does not fall, and this notebook does not measure that side (a CPU process has no "reserved"
# figure to compare). The advice is read as "saves memory at no cost", and only the cost is
# judged: it holds where the step with the cache emptied is within 5 % of the plain one (the
# 5 % of `FASTER`, the other way), a verdict on what the advice costs, not on what it saves.
#
# **The model.** PyTorch's CUDA caching allocator keeps freed blocks to reuse them without
# asking the driver; `empty_cache()` hands them back, so the next micro-batch must allocate them
# again (slow `cudaMalloc` calls), and the peak, set by the micro-batch itself, does not fall.
# (PyTorch's documentation adds that it "may help reduce fragmentation of GPU memory in certain
# cases"; fragmentation is not measured here.) It is GPU advice. The CPU analogue: glibc's
# allocator keeps freed heap the same way, and `malloc_trim(0)`
# (`perfkit.memory.anatomy.trim_heap`) returns it to the OS, so the next micro-batch
# page-faults its memory in again. **Prediction:** trimming before each micro-batch
# does not make the step faster (ratio at most 1 within noise).

# %%
ec = cm.time_emptied_cache(MICRO, BATCH // 2, SEQ, REPEAT, DEVICE)
ec_speed = ec.speedup()
print(f"{MICRO} micro-batches per step, {ec.how} before each: speedup {x(ec_speed)} (plain step time over "
      "emptied: a figure above 1x would mean emptying is faster)")

# %%
weighed_verdict(pin, Prediction("step speedup from emptying the cache", "freed memory is reused, not needed back", high=1.0,
                               unit="x"), ec_speed)
claim_verdict("empty_cache before each micro-batch", Claim("torch.cuda.empty_cache() before each accumulation step "
     "saves memory at no cost", "its cost only: step speedup with the cache emptied (no cost: within 5 % of the plain "
     "step; the memory side is not measured)", low=1 / FASTER["low"], unit="x"), ec_speed, f"Plain and with {ec.how}: "
     f"{medians(ec.plain.median_s, ec.emptied.median_s)}.", gpu_only=not CUDA)

# %% [markdown]
# ## 12. "`pin_memory=True` always helps"
#
# **The advice.** Always set `DataLoader(pin_memory=True)`.
#
# **The model** (module 07). Pinned (page-locked) host memory lets the GPU copy by DMA,
# asynchronously; a pageable tensor is first staged into a pinned buffer by the driver. Pinning
# is itself a host copy, done by the loader's pin thread. So it helps when the copy to the GPU
# is on the critical path, and it is meaningless without a GPU: on a CPU-only machine PyTorch
# warns and ignores it. There is no CPU analogue to judge the advice by: without CUDA the loops
# timed before the first claim (the control) ran `pin_memory=False` twice, and the advice is
# recorded as GPU only. **Prediction (GPU):** a pinned copy is faster than a pageable one.

# %%
if CUDA:  # the control's loops, pageable against pinned
    viz.verdict(Prediction("loop speedup with pin_memory=True", "DMA from pinned memory", low=1.0, unit="x"),
                pin.speedup())
claim_verdict("pin_memory always helps", Claim("pin_memory=True always helps", "loop speedup with pin_memory=True"
     if not pin.same_code else "one loop's speedup over itself (no CUDA: pin_memory=False twice)", **FASTER), pin.speedup(), gpu_only=pin.same_code, not_judged="without a GPU the flag would only be ignored, "
     "so both loops ran pin_memory=False (the A/A control)" if pin.same_code else None)

# %% [markdown]
# ## 13. "`torch.set_num_threads(min(8, cores))` is best"
#
# **The advice.** Set intra-op threads to `min(8, cores)` (and inter-op threads to 1).
#
# **The model.** An intra-op parallel matmul splits its work over the threads; with `c` idle
# cores it runs up to `c` times faster, rarely more (only where each thread's share fits a
# private cache). On a shared machine the other jobs take
# cores, and a thread that is descheduled stalls its siblings at every barrier. Inter-op threads
# run independent ops side by side (TorchScript's `fork`); an eager training step does not use
# them, and `set_num_interop_threads` can be called only once, before any parallel work, so it
# is not measured here. **Prediction:** `min(8, cores)` threads against 1 are between 1x and
# `cores`x faster on the MLP step of claim 4. `2 x cores` threads (oversubscribed) are timed too.
# The advice is judged on the advised count's speedup over the fastest other count (`FASTER`).

# %%
advised = min(8, CORES)
threads = cs.time_thread_counts(cs.mlp_step(nn.GELU(), BATCH * SEQ, MLP_WIDTH), [1, advised, 2 * CORES], REPEAT)
spread = {}  # threads -> the rounds' 10th-to-90th percentile range over their median
for n, m in threads.runs.items():
    q10, q90 = stats.quantile(m.times_s, 0.1) * 1e3, stats.quantile(m.times_s, 0.9) * 1e3
    spread[n] = (q90 - q10) / (m.median_s * 1e3)
    print(f"{n:2d} thread{'s' if n != 1 else ''}: {m.median_s * 1e3:6.1f} ms/step (median of {m.n} rounds; 10th to 90th percentile "
          f"{q10:.1f} to {q90:.1f} ms, a spread of {spread[n]:.0%} of the median)")
print(viz.claims.thread_spread_text(spread, threads.runs[1].n))  # the steadiest count, and why spreads test no premise
other = threads.best_other(advised)
vs_one, vs_other = threads.speedup(advised, 1), threads.speedup(advised, other)

# %%
t_one, t_adv = threads.runs[1].median_s, threads.runs[advised].median_s
busy = os.getloadavg()[0] / CORES  # runnable tasks per core just after the timing
weighed_verdict(pin, Prediction(f"{advised} threads' speedup over 1", "work split over idle cores", low=1.0, high=float(CORES),
                               unit="x"), vs_one, explain={
    "below": f"{advised} threads took {(t_adv - t_one) * 1e3:.1f} ms a step more than one thread, more than "
             f"losing the split's gain can cost. One thread and {advised}: {medians(t_one, t_adv)}. With {busy:.1f} runnable "
             f"tasks per core the cores were not idle: at every OpenMP barrier (each parallel op ends in one) "
             "a thread waits until the scheduler runs its sibling, a time slice of milliseconds against "
             "operators of microseconds.",
    "above": f"{advised} threads beat {CORES} cores' split: the load slowed the one-thread run more than the "
             f"split one. One thread and {advised}: {medians(t_one, t_adv)}."})
capped = advised < CORES  # else min(8, cores) is every core, and the cap at 8 is not exercised
claim_verdict("set_num_threads(min(8, cores))" + ("" if capped else f" (on {CORES} cores: every core; the cap at 8 untested)"), Claim("torch.set_num_threads(min(8, cores)) is best", f"{advised} threads' "
     f"speedup over the best other count ({other})" + ("" if capped else f"; min(8, cores) = cores = {CORES} here, so "
     "this tests 'every core, not more', not the cap at 8"), **FASTER), vs_other, f"{other} thread{'s' if other > 1 else ''} "
     f"and {advised}: {medians(threads.runs[other].median_s, threads.runs[advised].median_s)}." + ("" if capped else
     f" On {CORES} cores the advised count is every core: the cap at 8, the advice's own part, needs a machine with "
     "more than 8 cores to be tested."))

# %% [markdown]
# ## 14. "Larger DDP buckets (500 MB to 1 GB) reduce communication overhead"
#
# **The advice.** Raise `DistributedDataParallel(bucket_cap_mb=...)` to 500-1000 MB.
#
# **The model** (module 02). DDP all-reduces gradients in buckets of about `bucket_cap_mb`,
# each paying the start-up `alpha`, and overlaps each bucket with the rest of backward. Its
# default (`bucket_cap_mb` left unset) is 25 MiB buckets with a small first bucket of 1 MiB
# (`perfkit.parallel.DDP_BUCKET_CAP_BYTES`, `DDP_FIRST_BUCKET_BYTES`; `bucket_cap_mb` counts MiB,
# 1024² bytes, though its name and the advice say MB: "500 MB" here is `bucket_cap_mb=500`), so that the first
# all-reduce starts early in backward. Written out, **any** cap, 25 included, also caps the first
# bucket (`torch/nn/parallel/distributed.py`: the 1 MiB first bucket applies only to the unset
# default), so `bucket_cap_mb=25` is not DDP's default. A cap larger than the whole gradient
# yields one bucket, which cannot start before backward ends. **Predictions** (all-reduces per
# step, counted by a communication hook): each cap gives the buckets
# `perfkit.parallel.assign_buckets` lays out; 500 MB gives one all-reduce whenever the gradient is
# smaller than 500 MB, and 25 MB written out as many as 500 MB whenever it is smaller than 25 MB;
# a tiny cap gives many more. The advice is judged against DDP's real default, on the step time:
# once the gradient outgrows the 1 MiB first bucket, the two give different buckets (500 MB: fewer
# all-reduces, none overlapped with backward). The A/A control's reach, from one single-process
# loop, may understate this 2-process job's own error: 25 MB and 500 MB below lay out the same
# buckets here whenever their counts match, so the gap between their median steps is one reading of
# that error (it compares two medians; the judged interval is another reading, usually wider).

# %%
bk = {b["bucket_cap_mb"]: b for b in ddp["buckets"]}
calls = {cap: b["calls_per_step"] for cap, b in bk.items()}
grad_mb = sum(4 * p.numel() for p in make_mlp(**DDP_MLP).parameters()) / 2**20  # fp32 gradient, MiB
buckets = stats.median_ratio(bk[None]["times_s"], bk[500]["times_s"])  # default's time over 500 MB's: 500 MB's speedup
tiny = stats.median_ratio(bk[DDP_CAPS[0]]["times_s"], bk[None]["times_s"])
for cap, b in bk.items():
    name = "unset (default)" if cap is None else cap
    print(f"bucket_cap_mb={name!s:>15}: {calls[cap]:3d} all-reduces/step ({b['predicted_calls']} laid out by "
          f"assign_buckets), step {si(b['step_s'], 's')}")
print(f"gradient {grad_mb:.2f} MiB; 500 MB's speedup over DDP's default {x(buckets)}; "
      f"the {DDP_CAPS[0]} MB cap's step over the default's {x(tiny)}")

# %%
viz.verdict(Prediction("caps whose all-reduces per step differ from assign_buckets' layout", "DDP's bucket rule: "
                       "reverse order, closed at the cap; a 1 MiB first bucket only when the cap is unset",
                       value=0, rel_tol=0), sum(b["calls_per_step"] != b["predicted_calls"] for b in bk.values()))
viz.verdict(Prediction("all-reduces per step at 25 MB written out minus at 500 MB", "an explicit cap caps the first "
                       "bucket too: one bucket once the cap exceeds the gradient", value=0, rel_tol=0),
            calls[25] - calls[500])
viz.verdict(Prediction(f"all-reduces per step at {DDP_CAPS[0]} MB over DDP's default", "a tiny cap splits the "
                       "gradient into many buckets", low=2.0, unit="x"), calls[DDP_CAPS[0]] / calls[None])
claim_verdict("DDP buckets of 500 MB-1 GB", Claim("larger DDP buckets (500 MB-1 GB) reduce communication overhead",
     viz.claims.bucket_figure(calls), **FASTER), buckets,
     f"For a {grad_mb:.2f} MiB gradient DDP's default made {calls[None]} all-reduce(s) per step and 500 MB "
     f"{calls[500]}, at {bk[None]['step_s'] * 1e3:.2f} and {bk[500]['step_s'] * 1e3:.2f} ms (each setting's median)."
     f"{buckets.beside(bk[None]['step_s'] / bk[500]['step_s'])} The tiny cap's {calls[DDP_CAPS[0]]} took {tiny.value:.2f}x as long as the default by the median of the rounds' paired "
     f"ratios, {bk[DDP_CAPS[0]]['step_s'] / bk[None]['step_s']:.2f}x by the ratio of the two medians "
     f"({bk[DDP_CAPS[0]]['step_s'] * 1e3:.1f} and {bk[None]['step_s'] * 1e3:.1f} ms)." + viz.claims.bucket_source_text(calls, grad_mb) + (" " + viz.claims.same_layout_text(Claim("s", "s", **FASTER),
     buckets, bk[25]["step_s"], bk[500]["step_s"], CONTROL, "25 MB and 500 MB") if calls[25] == calls[500] and CONTROL else ""))
DESIGN_ERROR = None  # the largest reading of identical work (None with CUDA: no control)
if pin.same_code:  # claim 9's compiled step against how far identical work read apart: the A/A control, claims 10 and 14
    readings = ({} if cl.params_4d_5d else {"claim 10's one model against itself, its interval": cl.speedup()}) | ({
        "claim 14's 25 MB and 500 MB caps, the same buckets, their medians": bk[25]["step_s"] / bk[500]["step_s"]} if calls[25] == calls[500] else {})
    print(viz.claims.same_work_text(pin, readings, comp_speed, "Claim 9's compiled step", "eager"))
    DESIGN_ERROR = viz.claims.identical_work_reach(pin, readings)
    print(viz.claims.reweighed_text(viz.claims.reweighed_statuses(JUDGED, VERDICTS, DESIGN_ERROR), DESIGN_ERROR, CONTROL))

# %% [markdown]
# ## 15. "Gradient accumulation reduces communication N times"
#
# **The advice.** Accumulate gradients over `N` micro-batches: communication falls `N` times.
#
# **The model** (module 02). DDP all-reduces after *every* `backward()` unless it runs inside
# `model.no_sync()`. Accumulation code that forgets `no_sync()` computes the same gradient and
# communicates after every micro-batch. (DDP runs at its default settings here: its 1 MiB first
# bucket splits a larger gradient into two all-reduces per step.) **Prediction:** with `no_sync()` the bytes all-reduced
# per sample fall to exactly `1/N` (counted by a communication hook); without it, they do not
# fall at all (ratio 1).

# %%
acc = {a["k"]: a for a in ddp["accumulate"]}
(synced,) = ddp["accumulate_synced"]
per_sample = {"with no_sync()": acc[MICRO]["allreduce_bytes_per_sample"] / acc[1]["allreduce_bytes_per_sample"],
              "without no_sync()": synced["allreduce_bytes_per_sample"] / acc[1]["allreduce_bytes_per_sample"]}
for name, a in (("k=1", acc[1]), (f"k={MICRO}, no_sync()", acc[MICRO]), (f"k={MICRO}, without", synced)):
    print(f"{name:>17}: {a['allreduce_calls']} all-reduce call(s) per step, {a['allreduce_bytes_per_sample']:9.0f} "
          f"B/sample; max |grad - one big batch| {a['max_abs_diff_vs_big_batch']:.1e}")

# %%
viz.verdict(Prediction(f"bytes per sample at k={MICRO} with no_sync() over k=1", f"one all-reduce per {MICRO} "
                       "micro-batches", value=1 / MICRO, rel_tol=1e-6), per_sample["with no_sync()"])
viz.verdict(Prediction(f"bytes per sample at k={MICRO} without no_sync() over k=1", "an all-reduce after every "
                       "backward", value=1.0, rel_tol=1e-6), per_sample["without no_sync()"])
for name, ratio in per_sample.items():
    claim_verdict(f"gradient accumulation {name}", Claim(
        f"gradient accumulation over N={MICRO} micro-batches reduces communication N times", f"bytes all-reduced "
        f"per sample, {name}, over N=1", low=0.99 / MICRO, high=1.01 / MICRO, partly=1.0, unit="x", timed=False), ratio,
        f"{(synced if 'without' in name else acc[MICRO])['allreduce_calls']} all-reduce call(s) per step of "
        f"{MICRO} micro-batches, against {acc[1]['allreduce_calls']} per single-batch step.")

# %% [markdown]
# ## 16. "Top-k gradient compression speeds up the all-reduce"
#
# **The advice.** Send only the largest 1 % of the gradient's entries (top-k) to speed up
# communication.
#
# **The model** (modules 02 and 03). Top-k sends values and int32 indices: 8 bytes per kept
# entry against 4 per dense entry, so each rank's payload is `2k` of the dense bytes, 2 % at `k` =
# 1 %. But the ranks keep different entries, which an all-reduce cannot sum in place: they are
# all-gathered, so each rank receives the other `N - 1` ranks' payloads, `(N - 1) 2k D` bytes of a
# `D`-byte gradient, where a ring all-reduce moves `2 (N - 1) D / N` per rank: top-k moves `N k` of
# the all-reduce's bytes, 2 % at this run's `N` = 2 but 16 % at `N` = 16, growing with `N` where
# the all-reduce's does not. Every rank decodes them all, and choosing the top `k` costs a pass
# over the gradient. A
# collective costs `alpha + bytes / bandwidth`: for a small gradient `alpha` dominates and fewer
# bytes save little, while the selection stays. The run: the small CNN on digits (module 01),
# 2 processes, DDP's all-reduce against top-k 1 % with error feedback, each step timed. The two
# train side by side in one job, each with its own model and optimizer on the same batches, taking
# turns step by step (the order reversed every other step): step `i` of each ran under the same
# load. Which of the two runs first in a step may matter (the ratios are printed for each order),
# so two consecutive steps, one of each order, make one sample: the geometric mean of their two
# ratios, in which any effect of the order cancels. The speedup is the median of these samples, with
# its order-statistic interval. That interval treats the samples as independent; neighbouring
# steps of one job can drift together, which would make it too narrow.
# **Prediction:** the payload is 2 % of the dense bytes, within 5 %.

# %%
runs_c = {r["method"]: r for r in topk["runs"]}
dense_r, topk_r = runs_c["none"], runs_c["topk_1pct_ef"]
wire = topk_r["wire_bytes_per_step"] / topk_r["dense_bytes_per_step"]
skip = 3  # the first steps build DDP's buckets and warm up the kernels
d_t, k_t = dense_r["round_times_s"], topk_r["round_times_s"]
first = skip + skip % 2  # an even step: the all-reduce ran first (train_interleaved), the next top-k
balanced = [math.sqrt(d_t[i] / k_t[i] * d_t[i + 1] / k_t[i + 1]) for i in range(first, len(d_t) - 1, 2)]
tk, pairs = stats.median_interval(balanced), f"median of {len(balanced)} order-balanced pairs of steps"
tk_medians = stats.median(d_t[skip:]) / stats.median(k_t[skip:])  # the other statistic: the two median steps
tk = replace(tk, method=pairs + ("" if not tk.has_interval or tk.low <= tk_medians <= tk.high else
                                 f"; the ratio of the two median steps, {tk_medians:.3g}x, is another statistic, "
                                 "each setting's median over all steps, not the ratio within a pair, and lies outside it"))
print(f"gradient {dense_r['n_params']:,} parameters = {dense_r['dense_bytes_per_step'] / 1e3:.0f} kB per step; "
      f"top-k 1 % sends {topk_r['wire_bytes_per_step'] / 1e3:.1f} kB ({wire:.2%})")
print(f"top-k's step speedup over the all-reduce {x(tk)}; after {TOPK_STEPS} steps eval accuracy "
      f"{dense_r['eval_accuracy']:.1%} (all-reduce), {topk_r['eval_accuracy']:.1%} (top-k with error feedback)")
per_step = [d_t[i] / k_t[i] for i in range(skip, len(d_t))]  # step skip + j: the all-reduce first if even
by_order = {f: stats.median(per_step[(skip + (f == "top-k")) % 2::2]) for f in ("all-reduce", "top-k")}
print(f"median paired ratio with the all-reduce first in the step {by_order['all-reduce']:.3g}x, with top-k first "
      f"{by_order['top-k']:.3g}x; ratio of the two medians {tk_medians:.3g}x"
      + viz.claims.pair_order_text(tk.value, by_order, per_step))

# %%
viz.verdict(Prediction("top-k 1 % payload over dense bytes", "values + int32 indices: 2k",
                       value=0.02, rel_tol=0.05), wire)
claim_verdict("top-k compression", tkc := Claim("top-k gradient compression speeds up the all-reduce",
                                "step speedup of top-k 1 % over DDP's all-reduce", **FASTER), tk,
     f"It sent {wire:.1%} of the bytes of a {dense_r['dense_bytes_per_step'] / 1e3:.0f} kB gradient; the step "
     f"took {medians(stats.median(d_t[skip:]), stats.median(k_t[skip:]), pairs)} with the all-reduce and "
     "with top-k, selection and all-gather included; "
     + ("both statistics lie below" if max(tk.value, tk_medians) < FASTER["low"] else "both statistics lie above"
        if min(tk.value, tk_medians) >= FASTER["low"] else "the two statistics lie on both sides of")
     + f" the promised {FASTER['low']}x (a pair's ratio sets two steps under one load against each other; the "
     "medians do not pair steps, so where the load moves between steps the two part). By order within the step the paired ratios were "
     f"{by_order['all-reduce']:.3g}x (all-reduce first) and {by_order['top-k']:.3g}x (top-k first)"
     + viz.claims.others_side_text(tk, {"the ratio of the two median steps": tk_medians, "the per-step median "
        "ratio, all-reduce first": by_order["all-reduce"], "top-k first": by_order["top-k"], "the per-step ratios' "
        "geometric mean": math.exp(sum(map(math.log, per_step)) / len(per_step))})
     + ". " + viz.claims.order_gap_text(tkc, tk, by_order["all-reduce"], by_order["top-k"], CONTROL)
     + f" Speed aside, after {TOPK_STEPS} steps top-k reached {topk_r['eval_accuracy']:.1%} eval accuracy "
     f"against the all-reduce's {dense_r['eval_accuracy']:.1%}: {TOPK_STEPS} steps are too few to judge what "
     "top-k with error feedback converges to (Deep Gradient Compression, Lin et al. 2018, warms up before it "
     "compresses).")

# %% [markdown]
# ## 17. "The best number of DataLoader workers is 4-8"
#
# **The advice.** `num_workers=4` to `8` (or 4 per GPU, or 2 per core up to 16).
#
# **The model** (module 07, `simulate_pipeline`). A worker prepares whole batches; `W` workers
# deliver up to `W` times faster until they saturate the cores (CPU-bound decoding) or the
# training step becomes the limit. Past `min(cores, load / compute)` workers nothing improves,
# and each extra worker costs a process and its memory. Each sample asks for 1 ms (QUICK) or 2 ms
# of CPU work: a spin loop whose length comes from a loop rate timed once, briefly, in this
# process, so what a sample really costs is measured again here, under this machine's load, and
# that is the cost the model uses (timed alone, a few batches in a row: a pass can cost a sample
# more, the DataLoader's own calls, or less, a load that eased; the run at 0 workers shows which);
# each step 2 ms of sleep (a GPU step: the host is free).
# Throughput is a whole pass over the data, timed on the second pass (`persistent_workers=True`:
# the workers' start-up is left out, the pipeline's fill is not), and the model simulates the
# same number of steps. (Counting only the steps after the first few
# would credit the many-worker runs with batches their workers prepared before the count began:
# `2W` batches are in flight, a large share of a short run.) The counts take turns, round after
# round in balanced orders, so the ratio's interval comes from the paired rounds.
# **Prediction:** the best throughput of the advised counts (4, 8) over the best of the rest is
# what the pipeline model with this machine's cores predicts, within 20 %.

# %%
sweep = cd.worker_sweep(WORKERS, BATCH, LOAD_BATCHES, cost_s=(1.0 if QUICK else 2.0) / 1e3, compute_s=2e-3,
                        rounds=LOAD_ROUNDS, cores=CORES)
best_adv, best_rest = sweep.best()
ratio_w = sweep.advised_over_rest()
asked_ms = 1.0 if QUICK else 2.0
print(f"one sample costs {sweep.cost_s * 1e3:.2f} ms measured here; it asked for {asked_ms:.1f} ms, so its spin loop "
      f"ran {asked_ms / (sweep.cost_s * 1e3):.2f}x as fast as the loop rate it was sized by")
for w in WORKERS:
    print(f"num_workers={w}: {sweep.median(w):6.0f} samples/s measured (median of {len(sweep.rates[w])} rounds), "
          f"{sweep.model[w]:6.0f} predicted ({sweep.model[w] / sweep.median(w) - 1:+.0%})")
print(sweep.cost_text(BATCH, 2e-3))  # the sample cost the model uses against the 0-worker pass's
top = max(WORKERS)
print(f"from 0 to {top} workers the model, with {CORES} idle cores, gains {sweep.model[top] / sweep.model[0]:.2f}x; "
      f"measured {sweep.median(top) / sweep.median(0):.2f}x, with {os.getloadavg()[0] / CORES:.1f} runnable tasks "
      "per core now: workers gain only where cores are free")

# %%
rates_text = ", ".join(f"{w}: {sweep.median(w):.0f}" for w in WORKERS)
weighed_verdict(pin, Prediction("best of workers 4-8 over the best other count", f"simulate_pipeline with {CORES} cores",
                               value=sweep.predicted_advised_over_rest(), rel_tol=0.2, unit="x"), ratio_w)
claim_verdict("DataLoader workers: 4-8", Claim("the best number of DataLoader workers is 4-8", f"samples/s of the best "
                                      f"advised count ({best_adv}) over the best other ({best_rest})", **FASTER),
     ratio_w, f"Samples/s by workers: {rates_text}; the model, with {CORES} cores, predicted "
     f"{sweep.predicted_advised_over_rest():.2f}x.")

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
# not fit though another would, or where it asks for stage 3 although stage 1 or 2 fits; where
# no stage fits, stage 3 is the right stage and the run needs more GPUs or offload besides.
#
# Activations need room too. A rank keeps, for backward, about `34 h` bytes per token per layer
# in 16-bit at width `h` without recomputation (Korthikanti et al. 2022; their `5 a s` term for
# the attention scores left out, since a fused attention kernel keeps none). The sizes here are
# given by their parameter count only, so each gets a GPT-3/LLaMA shape, `12 L h²` parameters
# with `h = 128 L` (GPT-3 13B: 40 layers 5,140 wide; `cm.activation_gb`; LLaMA-2-70B is 80 layers
# 8,192 wide, `h` about 102 `L`, a little more activation per token), and a stage counts as
# fitting where its model states and one 2,048-token sequence's activations per rank fit
# together. (Activation checkpointing keeps about a seventeenth of that, the layers' inputs, so
# with it a lower stage can fit; the rule does not say whether it assumes recomputation.)
#
# This claim is arithmetic, not a measurement: the formulas above (module 05 checked them
# against stages run for real) applied to each size on 8 GPUs. An "80 GB" GPU (A100, H100)
# holds about 80 GiB, 85.9e9 bytes: the memory counted here. No prediction is recorded, since
# the formulas would only be tested against themselves. Each size the rule gets wrong is listed
# with what a rank holds at every stage, so the room left can be read. Model states and
# activations are not all a rank holds: the CUDA context (several hundred MiB), NCCL's buffers,
# ZeRO-3's gathered and prefetched weights (DeepSpeed's `stage3_max_live_parameters` defaults to
# 1e9 parameters, 2 GB in bf16), stages 1-2's reduce buckets and the allocator's fragmentation take
# more. So a stage **fits** here only where it leaves at least `RESERVE_GIB` = 4 GiB of the card
# free: an assumption, not a measurement (it varies with the framework, its settings and the
# model), and each row prints its headroom, the card less what a rank holds at its lowest fitting
# stage (where none fits, at stage 3), so a reader can apply another reserve.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
GPU_GIB, N_GPUS, TOKENS = 80, 8, 2048  # memory per GPU, ranks, tokens of activations a rank keeps
RESERVE_GIB = 4  # what a rank must leave free besides model states and activations (assumed: see above)
GPU_GB, RESERVE_GB = (g * 2**30 / 1e9 for g in (GPU_GIB, RESERVE_GIB))  # decimal GB, as zero_model_states counts
SIZES_B = [0.5, 1, 3, 7, 13, 30, 70]  # billions of parameters
rows, rows64 = (cm.zero_rule_rows(SIZES_B, GPU_GB, n, TOKENS, RESERVE_GB) for n in (N_GPUS, 64))


def fit_text(r):
    """The lowest stage that fits, with its headroom (GiB), or none, with stage 3's."""
    gib = r.headroom_gb * 1e9 / 2**30
    last = f"stage 3 leaves {gib:.1f} GiB" if gib >= 0 else f"stage 3 needs {-gib:.1f} GiB more than the card"
    return (f"none ({last}; more GPUs, recomputation or offload)" if r.lowest_fitting is None
            else f"{r.lowest_fitting} (headroom {gib:.1f} GiB)")


for r8, r64 in zip(rows, rows64):
    print(f"{r8.billions:>4g} B parameters ({r8.activations_gb * 1e9 / 2**30:.1f} GiB of activations a rank): the rule "
          f"says stage {r8.advised}; lowest stage that fits {N_GPUS} x {GPU_GIB} GiB with {RESERVE_GIB} GiB to spare: "
          f"{fit_text(r8)} ({'rule wrong' if r8.rule_wrong else 'rule fine'}); on 64 GPUs: {fit_text(r64)} "
          f"({'rule wrong' if r64.rule_wrong else 'rule fine'})")
largest = cm.largest_model_for_stage(1, GPU_GB, N_GPUS)
mismatch = sum(r.rule_wrong for r in rows)
print(f"largest model whose model states alone fit at stage 1: {largest:.2f} B parameters ({GPU_GB:.1f} GB / "
      f"(4 + 12/{N_GPUS}) bytes per parameter); sizes where the rule is wrong on {N_GPUS} GPUs: {mismatch} of "
      f"{len(SIZES_B)}")


# %%
def per_rank_gib(row):
    """What a rank holds at each stage (model states + activations, GiB), and whether it fits."""
    gib = {st: (zero_model_states(row.billions * 1e9, N_GPUS, st).total / 1e9 + row.activations_gb) * 1e9 / 2**30
           for st in range(4)}
    return ", ".join(f"stage {st} {gib[st]:.1f} GiB" + ("" if gib[st] <= GPU_GIB - RESERVE_GIB else " (does not fit)")
                     for st in range(4))


wrong = [f"{r.billions:g} B (rule: {r.advised}; model states and activations per rank: {per_rank_gib(r)})"
         for r in rows if r.rule_wrong]
claim_verdict("ZeRO stage by model size", Claim("ZeRO stage 1 below 1 B parameters, stage 2 for 1-10 B, stage 3 above",
                                       f"sizes (of {len(SIZES_B)}) where the rule's stage does not fit {N_GPUS} x "
                                       f"{GPU_GIB} GiB with {RESERVE_GIB} GiB to spare (an assumed reserve) or needlessly is 3 (model states "
                                       f"and one {TOKENS:,}-token sequence's activations per rank)", low=0, high=0,
                                       timed=False), mismatch,
     "Wrong at " + "; ".join(wrong) + "." if wrong else f"On {N_GPUS} x {GPU_GIB} GiB the rule matches every size.")

# %% [markdown]
# ## 19. "A dynamic loss scaler starting at 2^32 is needed"
#
# **The advice.** Train in mixed precision with `torch.amp.GradScaler(init_scale=2**32)`: without
# a loss scaler, or with a smaller start, the gradients underflow.
#
# **The model** (module 06). A format's exponent bits set its range. fp16 has 5: its largest
# value is 65,504, its smallest normal value 6.1e-5; below that it keeps fewer significant bits,
# and a value below half its smallest subnormal (2^-25, about 3e-8) becomes zero. bf16 has
# fp32's 8 exponent bits: the same smallest normal value (about 1.2e-38) and nearly the same
# largest value (3.39e38 against 3.40e38: with fewer mantissa bits its top value rounds lower).
# Only below that normal range do the two part: with 7 mantissa bits bf16's
# subnormals stop at about 9.2e-41, fp32's at 1.4e-45 (printed below). A loss
# scaler multiplies the loss by `S` before backward, so every gradient backward computes is `S`
# times larger, the ones autocast's fp16 ops produce included, and divides the parameters' fp32
# `.grad` by `S` before the update. An fp16 gradient that overflows inside backward becomes inf,
# and the inf reaches the fp32 `.grad`: `GradScaler` is dynamic, so such a step is skipped and
# `S` halved; after 2,000 steps without overflow `S` doubles. Taking the parameters' largest
# gradient `max|g|` as a stand-in for the largest fp16 gradient along the way (an approximation:
# an activation's gradient can be larger), from a start `S0` it skips
# `k = ceil(log2(S0 · max|g| / 65,504))` steps before
# its first update (none when that is negative), each a forward and backward pass thrown away;
# PyTorch's default start is 2^16. fp16's range is the same on a CPU (only its speed differs),
# so the run below is the claim itself (on the GPU when CUDA is present): the tiny GPT-2's
# gradients under fp16 and bf16 autocast, compared value by value with fp32's.
# **Predictions:** bf16 flushes no gradient value that fp32 keeps (exactly 0); from 2^32 and
# from 2^16, the scaler skips the `k` steps computed from the fp32 gradient's largest value,
# within one step. The fp16 claims below count the values a scale lifts out of fp16's subnormal
# range or zero (below its smallest normal value a value keeps fewer significant bits, or none),
# the fp32 gradient times the scale standing in for fp16's; the bf16 claim counts values flushed
# to zero (bf16's normal range reaches down as far as fp32's). fp16's claim is measured both ways,
# the stand-in and the values the fp16 backward itself flushed to zero that the scale kept (the
# bf16 claim's count), and judged by the one rule with the two as its figure's range: where they
# fall on both sides of the line, the advice holds partly (the scale rescues precision, not values
# from zero). Each holds where a scale rescues at
# least 1 % of the nonzero gradient values (`RESCUED`): the course's line for "the gradients
# underflow", as `FASTER`'s 5 % is for "faster". They count the parameters' gradients only: the
# activations' gradients, which Micikevicius et al. (2018, "Mixed Precision Training") found to
# flush most without scaling, are not counted here, so a small count is weak evidence of how much
# the scaler matters, not a measure of it.

# %%
for dt in (torch.float16, torch.bfloat16, torch.float32):
    fi = torch.finfo(dt)
    mantissa = round(-math.log2(fi.eps))  # stored mantissa bits
    print(f"{str(dt).removeprefix('torch.'):>8}: {fi.bits - 1 - mantissa} exponent bits, {mantissa} mantissa bits; "
          f"largest {fi.max:.3g}, smallest normal {fi.smallest_normal:.2g}, "
          f"smallest subnormal {fi.smallest_normal * fi.eps:.2g}")

# %%
flush = cp.gradient_flush(4, SEQ, GPT, DEVICE)
starts = {"2^32": 2.0 ** 32, "2^16 (the default)": 2.0 ** 16}
first = {name: cp.scaler_first_update(s, 4, SEQ, GPT, device=DEVICE) for name, s in starts.items()}  # (skips, scale)
kept = {name: flush.kept_by_scale("fp16", first[name][1]) for name in starts}  # values kept from flushing
print(f"{flush.kept:,} nonzero gradient values in fp32 (largest {flush.max_abs:.3g}); unscaled, fp16 flushes "
      f"{flush.lost['fp16']:,} of them to zero, bf16 {flush.lost['bf16']:,}; {flush.subnormal:.1%} lie below fp16's "
      "smallest normal value")
for name, (k, at) in first.items():
    print(f"GradScaler(init_scale={name}): {k} step(s) skipped (predicted {cp.predicted_skips(starts[name], flush.max_abs)}); "
          f"at its first update's scale 2^{math.log2(at):g} fp16 flushes {flush.lost['fp16'] - kept[name]:,} value(s)")

# %%
viz.verdict(Prediction("gradient values bf16 flushes to zero that fp32 keeps", "bf16 has fp32's exponent range",
                       value=0, rel_tol=0), flush.lost["bf16"])
for name, s in starts.items():
    kp = cp.predicted_skips(s, flush.max_abs)
    viz.verdict(Prediction(f"steps skipped from init_scale={name}", "halve until init_scale x max|g| fits 65,504",
                           low=max(0, kp - 1), high=kp + 1), first[name][0])

# %%
RESCUED, DEFAULT = 0.01, "2^16 (the default)"  # the line: a scale that rescues 1 % of the nonzero gradient values
lifted = {name: flush.lifted_by_scale(first[name][1]) / flush.kept for name in starts}  # at each first update
claim_verdict(f"fp16 needs a loss scaler ({flush.criterion_label(first[DEFAULT][1], RESCUED)})", Claim("mixed precision in fp16 needs a loss scaler", "share of the nonzero "
     "gradient values the default's scale lifts out of fp16's subnormal range or zero", low=RESCUED, partly=0.0, timed=False),
     lifted[DEFAULT], f"Unscaled, {flush.subnormal:.1%} of the {flush.kept:,} values lay below fp16's smallest normal "
     f"value ({flush.lost['fp16']:,} of them flushed to zero); the default's first update, at scale "
     f"2^{math.log2(first[DEFAULT][1]):g}, lifted {lifted[DEFAULT]:.1%} above it. "
     + flush.criteria(first[DEFAULT][1], RESCUED), spread=flush.span(first[DEFAULT][1]))
bf16_kept = flush.kept_by_scale("bf16", 2.0 ** 16)
claim_verdict("bf16 needs a loss scaler (by the flush count)", Claim("mixed precision in bf16 needs a loss scaler too", "share of the nonzero "
     "gradient values a loss scale of 2^16 keeps from flushing in bf16", low=RESCUED, timed=False),
     bf16_kept / flush.kept, f"Unscaled, bf16 flushed {flush.lost['bf16']:,} values that fp32 keeps; scaling kept "
     f"{bf16_kept:,}.")

# %%
gained = lifted["2^32"] - lifted[DEFAULT]
claim_verdict("loss scale starting at 2^32", Claim("a dynamic loss scaler must start at 2^32 (PyTorch's default start is 2^16)",
     "share of the nonzero gradient values that starting at 2^32 lifts out of fp16's subnormal range or zero, "
     "beyond the default start", low=RESCUED, timed=False), gained, f"Starting at 2^32 lifted {gained:.2%} more of "
     f"them at its first update (scale 2^{math.log2(first['2^32'][1]):g}) and cost {first['2^32'][0]} skipped "
     "step(s), each a forward and backward pass thrown away.")

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
MHA = dict(embed=64, heads=4, batch=4, seq=128)  # T well above head_dim
att = cp.kdim_attention_check(**MHA)
KD, NW = "kdim", "kdim, need_weights=False"
print(f"kdim=head_dim: {att.params['default'] - att.params['kdim']:,} fewer parameters; self-attention: "
      f"{att.self_attention_error or 'runs'}")
for name, mats in att.matrices.items():
    print(f"{name:>32}: {att.saved[name] / 2**20:5.2f} MiB saved for backward at T={MHA['seq']}, "
          f"of which the T² part is {mats:.2f} (B, H, T, T) matrices")

# %%
viz.verdict(Prediction("(B, H, T, T) matrices MultiheadAttention(kdim=head_dim) keeps", "softmax's output, "
                       "read again in backward", value=1.0, rel_tol=0.01), att.matrices[KD])
viz.verdict(Prediction("(B, H, T, T) matrices it keeps with need_weights=False", "scaled_dot_product_attention "
                       "keeps bytes linear in T", high=0.01), att.matrices[NW])
claim_verdict("MultiheadAttention(kdim=head_dim)", Claim("nn.MultiheadAttention(kdim=head_dim) is memory-efficient attention",
                                                "(B, H, T, T) matrices it keeps for backward (the T² part of its "
                                                "saved bytes)", high=0.05, timed=False), att.matrices[KD],
     f"kdim only narrowed the key projection ({att.params['default'] - att.params['kdim']:,} fewer parameters); with "
     f"need_weights=False the same module kept {att.matrices[NW]:.2f} matrices.")

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
# switches that were faster beyond their uncertainty (the whole interval of their speedup
# above 1), and compile if claim 9 found it so; then
# everything-on and the tuned subset are timed against each other. Workers persist across
# steps (`persistent_workers=True`), so they start once, before the timing. At default size
# everything-on compiles its transformer blocks (`block.compile()`, regional compilation: the
# identical blocks share one graph), and its first step, compile included, is reported apart;
# QUICK mode leaves compile out. **Prediction:** the switches' costs add up: everything-on's step
# takes the tuned subset's time plus the time each switch it adds cost alone over the plain
# step (as a share of the plain step, which is timed again beside the two; compile: claim 9's
# speedup, applied to the whole step), within 30 %. Where everything-on adds accumulation, the
# tuned subset with accumulation added is timed beside them too, and accumulation's cost in the
# plain and in the tuned step is printed: whether it depends on the setting it joins.
# (`perfkit.compute.claims_ultra` builds the settings and times them.) Everything-on includes bf16
# autocast: on a CPU without fast bf16 units that part of the advice is GPU advice, as in claim 8,
# so there the claim is labelled GPU only and the run is its CPU analogue, unless switches that
# are not GPU advice also lost alone on this machine: then the verdict is this machine's.

# %%
alone = cu.time_switches(ULTRA["samples"], ULTRA["accumulate"], ULTRA["workers"], SEQ, GPT, ULTRA_ROUNDS)
for name in alone.alone:
    print(f"{name:>16} alone: {x(alone.speedup(name))}")
ultra = cu.time_ultra(alone, comp_speed.value if COMPILE else None, COMPILE and comp_speed.low > 1, ULTRA_ROUNDS)
ultra_speed = ultra.speedup()
print(f"tuned subset: {', '.join(alone.kept()) or 'the plain setting'}; everything-on adds "
      f"{', '.join(ultra.added) or 'nothing'}; everything-on's speedup over it {x(ultra_speed)}")
print(f"everything-on's first step: {ultra.first_step_s:.1f} s, {ultra.first_step_s / ultra.ultra_times.median_s:.0f}x "
      "a later step" + ("" if COMPILE else "; QUICK mode leaves compile out"))

# %%
acc_s = ultra.accumulation_cost_s()  # s accumulation added to the plain and to the tuned step
if acc_s is not None:  # its cost in the two settings it joined (medians)
    print(f"accumulation added {acc_s[0] * 1e3:.1f} ms to the plain step and {acc_s[1] * 1e3:.1f} ms to the tuned "
          "one; the prediction assumes the first in both")
alone_x = {n: alone.speedup(n) for n in ultra.added_share()} | ({"compile": comp_speed} if "compile" in ultra.added else {})
added_text = ", ".join(f"{n} {e.value:.3g}x" + (" (claim 9's MLP step)" if n == "compile" else "") for n, e in alone_x.items())


def ultra_why(side):
    """Why everything-on came out `side` ("above"/"below") of the sum of the switches' costs alone."""
    text = f"The added switches alone: {added_text}."
    if acc_s is None:
        return text
    pushes = "below" if acc_s[1] > acc_s[0] else "above"  # where accumulation's real cost moves the figure
    text += (f" Accumulation added {acc_s[1] * 1e3:.1f} ms to the tuned step against {acc_s[0] * 1e3:.1f} ms to the "
             f"plain one, which the sum assumes: that alone moves the figure {pushes} the prediction")
    if pushes == side:
        return text + "."
    return text + f", so the other switches cost {'less' if side == 'above' else 'more'} together than alone."


weighed_verdict(pin, Prediction("everything-on speed over the tuned subset's", "the time each added switch costs alone adds up",
                               value=ultra.predicted(), rel_tol=0.3, unit="x"), ultra_speed,
            explain={side: ultra_why(side) for side in ("above", "below")})
lost_here = [n for n, e in alone_x.items()  # slower alone beyond their interval and the A/A control's reach
             if n != "bf16 autocast" and e.high is not None and e.high < 1 and pin.resolves(e, 1.0)]
slow_bf16 = not CUDA and r <= 1 and "bf16 autocast" in ultra.added and not lost_here  # only bf16 is GPU advice
if ultra.added:  # else the two settings are the same: nothing to judge
    claim_verdict("'ultra': everything on", Claim("an 'ultra' level with everything on (compile, mixed precision, fused attention, "
         "8 workers, accumulation 8) beats a tuned subset", "everything-on speedup over the tuned subset", **FASTER),
         ultra_speed, f"It adds switches that were not faster beyond their interval alone ({added_text})."
         + (f" Among them bf16 autocast, on a CPU whose bf16 ceiling is {r:.2f}x its fp32 one: as in claim 8, that part "
            "of the advice is about GPUs, so here everything-on is its CPU analogue." if slow_bf16 else "")
         + (f" Besides bf16 autocast it adds {', '.join(n + (' (by claim 9, on its MLP, not this GPT-2)' if n == 'compile' else '') for n in lost_here)}, slower alone on this machine beyond its "
            "interval and the A/A control's reach" + (f" (each; together {math.prod(alone_x[n].value for n in lost_here):.2f}x, "
            "multiplied)" if len(lost_here) > 1 else "") + ": the direction of the verdict is this machine's, not only a GPU question, while most of its size is bf16's, which "
            f"runs at {r:.2f}x fp32's ceiling on {hw.device_name()} (the ratio of the ceilings claim 8 printed, each the highest rate the limits file keeps, whatever operation or run "
            "set it" + ("" if all(ceiling_source(limits, d, THREADS).startswith("notebook 00") for d in ("float32", "bfloat16")) else ", so not like for like")
            + (f"; the like-for-like ratio, notebook 00's sweep points alone on {THREADS} thread{'s' * (THREADS != 1)} for both dtypes, is {sr:.3g}x" if (sr := cp.sweep_ceiling_ratio(
            limits, THREADS)) else "") + ")." if lost_here and "bf16 autocast"
            in ultra.added and not CUDA and r <= 1 else ""),
         gpu_only=slow_bf16)

# %% [markdown]
# ## Summary
#
# Each row is computed from the measurement above it: the advice, what was measured on this
# machine, and the verdict. The line under the table counts the course's own predictions (the
# ✅ marks above) by what each could test: a window (a value with a tolerance, or two edges) can
# fail either way; a floor or a ceiling held far from its edge tests little. A "GPU only" row is advice about a GPU: its CPU analogue was measured
# where one exists (pin_memory has none: a CPU ignores it); run the notebook on a GPU machine to
# judge the claim itself. With a control, a last column weighs each timed verdict again, by the
# largest reading of identical work in this notebook (claim 14) instead of the A/A control's reach,
# and the line under the table names the verdicts whose status that changes.

# %%
if DESIGN_ERROR is not None:  # each timed verdict weighed again by the largest reading of identical work
    reweighed = viz.claims.reweighed_statuses(JUDGED, VERDICTS, DESIGN_ERROR)
    viz.show_claims_table(VERDICTS, {n: b for n, (_, b) in reweighed.items()}, f"status weighed by {DESIGN_ERROR:.1%}")
    print(viz.claims.reweighed_text(reweighed, DESIGN_ERROR, CONTROL).replace(" so far", ""))
else:
    viz.show_claims_table(VERDICTS)
print("The course's own predictions above:", kinds_text(viz.shown_verdicts()))

# %% [markdown]
# The figure puts every verdict measured as a ratio on one axis: the grey band is what the advice
# promises, the point what was measured here and the line its interval, coloured by the verdict;
# a dashed tick marks a claim's no-effect value where it has one (1x for a speedup or a size
# ratio; Adam's ratio, promised at 2x, and the activation rule's growth have none). Only claims
# measured in x are drawn (speedups, byte ratios, and the activation rule's growth from the
# smallest to the largest batch, whose band 0.8x to 1.25x is what a fixed "4x the model"
# implies: no growth); claims judged on a count, on a share (of gradient values, or of the
# peak memory checkpointing saves) or on the memory metric, and figures that say nothing about
# the advice here (a flag ignored without a GPU), are in the table only. A point that does not
# hold, its whole interval outside the promise, yet whose direction against no effect is
# undecided is ringed grey. The table names each row's figure.

# %%
fig = viz.plot_claims_forest(VERDICTS)

# %%
viz.show_headlines(viz.claims_headlines(VERDICTS, reweighed, DESIGN_ERROR) if DESIGN_ERROR is not None
                   else viz.claims_headlines(VERDICTS))  # the headline states the more cautious status
