# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Compute: precision, compilation, fusion, attention, shapes and MFU
#
# Module 01 found where a training step spends its time; this module makes the compute part
# faster and asks how close it gets to what the machine can do. Six levers, each measured on
# this machine against the ceilings notebook 00 measured (raised where a later operation beat one):
#
# 1. **mixed precision**: bf16 autocast (and fp16 with loss scaling on a GPU);
# 2. **fusion**: an elementwise chain run op by op against one fused kernel;
# 3. **`torch.compile`**: what compiling costs, when it pays off, and graph breaks;
# 4. **attention**: a naive implementation against PyTorch's fused `scaled_dot_product_attention`;
# 5. **shapes**: matmul throughput against its dimensions, and padding a vocabulary;
# 6. **model FLOPs**: per step, over the measured ceiling (MFU's numerator; its denominator here is
#    no vendor peak, so the share is not an MFU), batch size, and the largest batch that fits a
#    memory budget.
#
# Every section asks a question, predicts the answer from a model, measures, and explains
# the gap. Speedups are ratios of steps timed **interleaved** (A, B, A, B, ...) in one run, so
# a busy machine slows both sides alike. Where a speedup is printed with an interval, it is the
# median of the pairs' ratios with an interval between two of the sorted ratios
# (`perfkit.stats.median_ratio`, an order-statistic interval) that covers the true median with
# at least 90 % probability (with 11 pairs, the third smallest and third largest ratio, which
# cover it with 93 %), if the rounds are independent draws: drift between cells is not in it, so
# ratios are taken within a cell. A figure printed without one (a timing table's ratio, a ratio of two ratios, a
# step timed alone) is a ratio of medians, and the text says so where it appears.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import collections
import statistics
from dataclasses import replace

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from perfkit import ceilings, compute, hw, sizing, stats, timing, viz
from perfkit.compute import autocast_parts, autocast_record, budget, compiling, fusion, kernels, throughput
from perfkit.compute import experiments as ex
from perfkit.models import gpt2_workload, tiny_gpt2
from perfkit.verdict import Prediction, judge
from perfkit.viz import compute as vc
from perfkit.viz import machine as vm
from perfkit.viz import si

# %%
DEVICE = timing.resolve_device()
GPT = dict(n_embd=128, n_layer=2, n_head=4)   # the tiny GPT-2 of sections 1, 5 and 6
SEQ, BATCH = (64, 8) if QUICK else (128, 8)
LOSS_STEPS = 10 if QUICK else 30              # training steps per precision in section 1
REPEAT = 5 if QUICK else 11                   # interleaved timing rounds
CHAIN_ROWS = 2048 if QUICK else 8192          # (rows, 1024) fp32 tensors: 8 or 32 MiB
CORPUS_BYTES = 200_000 if QUICK else 1_000_000  # text the tokenizer is trained on and encodes
ATTN_T = [128, 256, 512] if QUICK else [128, 256, 512, 1024]
ATTN_B = 2 if QUICK else 4                     # batch of the attention sweep
GPT_ATTN_T = [256] if QUICK else [128, 256, 512]
MATMUL_N = ([960, 1018, *range(1021, 1028), 1030, 1031, 1034, 1038, 1088, 1089] if QUICK
            else [896, 960, *range(1016, 1040), 1088, 1089, 1152, 1216])  # n of (1024, 256) @ (256, n)
# both hold 6 or more odd widths and 6 even ones off the vector grid (n % 4 == 2), the full size 6
# multiples of 64 too: the fewest for which section 5's ratios have an interval of at least 90 % at all
# (whether it decides is the run's)
BATCHES = [2, 8, 16] if QUICK else [1, 4, 8, 16, 32]
BUDGET = (64 if QUICK else 256) * 2**20        # bytes, for the largest-batch search
COMPILE_STEP = not QUICK  # compiling a whole training step costs seconds to minutes on a CPU

# %%
if DEVICE.type == "cuda":  # a model big enough to keep a GPU busy
    GPT, SEQ, BATCH, CHAIN_ROWS = dict(n_embd=768, n_layer=4, n_head=12), 512, 16, 32768
    BATCHES, BUDGET = [4, 16, 64], 8 * 2**30
BUDGET_S = 90 if QUICK else 180               # this notebook's time budget in `make course`

limits = hw.cached_limits(quick=QUICK)  # notebook 00's ceilings, and any a later run raised (or measured now)
print(f"torch {torch.__version__} on {limits.name}, {torch.get_num_threads()} threads; DRAM ceiling "
      f"{si(limits.copy_bytes_per_s, 'B/s')} (every buffer read or written counted, as STREAM counts them: "
      f"{limits.sources.get('dram', 'the best copy or x + y')})\n{vm.bf16_sentence(limits)}")
if raised_note := sizing.after_sweep_note(limits, "bfloat16"):  # an operation beat the sweep's bf16 point
    print(raised_note)  # its source, and where it was set on 1 thread, the ratio on matching threads

# %% [markdown]
# **Sizes from this machine.** The bf16 work below is sized from one bf16 call timed now at the
# smallest size of each sweep (`perfkit.sizing.plan_dtype`): a larger size is predicted in
# proportion to it, which errs long (a call's fixed costs do not grow with it), and each bf16
# sweep keeps the sizes that fit its share of this notebook's budget. Where bf16 is emulated (no
# bf16 units: slower than fp32 by the factor printed above) that is fewer sizes; the sentences
# below say which. Timings run on the threads other processes leave free
# (`sizing.timing_threads`): on a loaded machine an OpenMP thread that loses its core stalls its
# siblings at every barrier, which can swing one step several-fold between cells; a step's model FLOP/s is
# then held against the ceiling measured on that many threads (notebook 00's, or a later rate that beat it). The rule reads the 1-minute load average,
# a damped average that counts runnable threads (and, on Linux, those in uninterruptible sleep)
# and still carries, for a minute or so, work that has just ended (in `make course`, the previous notebook): it errs towards fewer threads, which
# makes the timings slower and less prone to several-fold swings, not equal between cells (section 6 lists
# the same steps timed in different cells), and each share fair against its own threads' ceiling.

# %%
THREADS = sizing.timing_threads()
SHARE = limits.thread_share(THREADS) if DEVICE.type == "cpu" else 1.0  # these threads' own ceiling, measured
CEIL_THREADS = THREADS if DEVICE.type == "cpu" else None  # the ceilings' thread count for these timings
print(sizing.threads_note(THREADS, SHARE))
per_sample = compute.gpt2_shape(tiny_gpt2(block_size=SEQ, **GPT), SEQ).train_flops(1)  # FLOPs
with sizing.pinned_threads(THREADS):  # one bf16 call at each sweep's smallest size: what its plan scales
    probe = {b: timing.benchmark(ex.gpt_step(GPT, torch.randint(0, 1024, (b, SEQ), device=DEVICE), "bf16"),
                                 warmup=1, repeat=1, device=DEVICE).median_s for b in {1, BATCHES[0]}}  # s
    pa, pb = (torch.randn(*s, device=DEVICE, dtype=torch.bfloat16) for s in ((1024, 256), (256, min(MATMUL_N))))
    probe_mm = timing.benchmark(lambda: pa @ pb, warmup=1, repeat=1, device=DEVICE).median_s  # s
AMP_PLAN = sizing.plan_dtype(limits, "bfloat16", per_sample, sorted({1, 2, 4, BATCH}), threads=CEIL_THREADS,
                             calls=LOSS_STEPS + 2 * REPEAT + 4, budget_s=0.12 * BUDGET_S, probe_s=probe[1])
AMP_BATCH = AMP_PLAN.batches[-1]              # sections 1's loss curves and step timings
BENCH_PLAN = sizing.plan_dtype(limits, "bfloat16", per_sample, BATCHES, calls=(3 if QUICK else REPEAT) + 1,
                               budget_s=0.1 * BUDGET_S, probe_s=probe[BATCHES[0]], threads=CEIL_THREADS)
SHAPE_PLAN = sizing.plan_dtype(limits, "bfloat16", 2 * 1024 * 256, MATMUL_N, calls=REPEAT + 3,
                               budget_s=0.05 * BUDGET_S, label="n", probe_s=probe_mm, threads=CEIL_THREADS)
PAD_PRECISION = "fp32" if limits.support("bfloat16") == "emulated" else "bf16"
plans = {f"training steps (section 1 times batch {AMP_BATCH}, the largest planned, alone)": AMP_PLAN, "batch sweep": BENCH_PLAN, "shape sweep": SHAPE_PLAN}
cut = os.path.commonprefix([p.note for p in plans.values()]).rfind(": ")  # the shared sentence, said once
if cut > 0:
    print(next(iter(plans.values())).note[:cut] + ".")
for what, plan in plans.items():
    note = plan.note[cut + 2:] if cut > 0 else plan.note
    print(f"bf16 {what}: {note.replace('timed at', 'planned at') if plan is AMP_PLAN else note}")

# %% [markdown]
# ## 1. Mixed precision: is bf16 faster, and does the model learn the same?
#
# **The model.** Under `torch.autocast(dtype=torch.bfloat16)` matmuls (and the fused attention)
# run in bf16, and the weights and optimizer stay fp32 ("mixed" precision). Which other ops
# autocast forces to fp32 depends on the device: on a GPU its fp32 list holds softmax, layer
# norm and the loss; on a CPU (PyTorch's "CPU ops that can autocast to float32") it holds the
# loss but not softmax or layer norm, which run in whatever dtype they receive. In this model
# layer norm receives the fp32 residual stream and softmax runs inside the fused attention, so
# both devices keep them where a GPU would. bf16 keeps fp32's 8 exponent bits,
# so nothing overflows and no loss scaling is needed; it keeps only 8 bits of significand (7 stored), so
# each matmul is rounded more coarsely. (The three formats, sign / exponent / stored mantissa
# bits: fp32 1/8/23, bf16 1/8/7, fp16 1/5/10; bf16 is the upper half of fp32's 32 bits, which is
# why converting between them is cheap: bf16 to fp32 appends 16 zero bits, and fp32 to bf16 drops
# the low 16, rounding to nearest even, as PyTorch's conversion does, rather than cutting them off.) **Predictions:** (a) the loss curve's mean over
# its last 5 steps matches fp32's within 1 % (single steps differ more), since rounding errors of at most about 0.4 % per rounded input (so up to about 0.8 % per product) average out over
# long sums; (b) the step's speed changes by Amdahl's law: only the ops autocast runs in bf16
# change speed, each by its own bf16-over-fp32 speed ratio (below 1 where bf16 is slower); the model
# assumes the rest (layer norms, the loss, the optimizer) keeps its speed, a premise measured below.
#
# First (a): the same tiny GPT-2, the same initial weights and the same batches of text,
# trained in each precision (at batch `AMP_BATCH`, sized above; `experiments.precision_curves`
# restores the initial weights and builds a fresh AdamW for each precision).

# %%
wl = gpt2_workload(batch_size=AMP_BATCH, block_size=SEQ, device=DEVICE, seed=0, lr=3e-3,
                   max_bytes=CORPUS_BYTES, **GPT)
it = iter(wl.loader)
batches = [tuple(t.to(DEVICE) for t in next(it)) for _ in range(LOSS_STEPS)]
precisions = ["fp32", "bf16"] + (["fp16"] if DEVICE.type == "cuda" else [])
curves = ex.precision_curves(wl.model, wl.loss_fn, batches, precisions)

# %%
TAIL, TOL = 5, 0.01  # compare the mean loss of the last 5 steps; tolerance 1 % of fp32's
tail = {p: statistics.fmean(c[-TAIL:]) for p, c in curves.items()}
print("\n".join(vc.loss_lines(curves, TAIL)))
vc.plot_loss_curves(curves)  # no tolerance line: the 1 % holds for the tail's mean, not for single steps
plt.show()

# %%
viz.verdict(Prediction("bf16's final loss (mean of the last steps) against fp32's", "rounding of up to 0.4 % per "
                       "input averages out (one seed, one data order)", low=-100 * TOL, high=100 * TOL, unit=" %",
                       timed=False),
            100 * (tail["bf16"] / tail["fp32"] - 1), explain={
    "held": "One seed and one data order: bf16 did not move this run's course off fp32's by more than 1 %; how "
            "far another seed moves either curve, this run does not measure, so it says nothing of bf16 in general.",
    "above": "bf16 ended worse: at this learning rate the coarser rounding changed the trajectory.",
    "below": "bf16 ended better: a different trajectory, not a better method; another seed may reverse it."})
print(ex.largest_rise(curves))

# %% [markdown]
# Production runs keep fp32 master weights and fp32 reductions for the same reason as autocast
# and an fp32 optimizer do here: an update smaller than half the spacing between bf16 values near
# a weight (2⁻⁹ to 2⁻⁸ of the weight's size) would be rounded away entirely, so small updates would be lost
# (Micikevicius et al., *Mixed Precision Training*, 2018). Now (b), the speed.
#
# **Amdahl's law, with measured parts.** If the ops autocast changes take a share `f` of the
# fp32 step and run `r` times as fast in bf16, the step becomes `(1 - f) + f / r` of what it
# was: a speedup of `1 / ((1 - f) + f / r)`, if the rest (layer norms on the fp32 residual stream,
# the loss, AdamW, Python and dispatch) runs the same in both, as the model assumes. **The forecast** reads `f` and
# `r` off figures measured before this notebook, on the threads the step runs on: `f` = the fp32
# step's model FLOPs at the fp32 ceiling (notebook 00's, or an operation of another notebook that
# beat it) over the fp32 step's time (timed alone, so the forecast prints before any bf16 step is
# timed), `r` = bf16's rate over fp32's in notebook 00's
# sweep, at the square size nearest the step's matmuls in FLOPs among those swept in both dtypes on
# these threads, which can be the only one and then not near (`autocast_parts.swept_ratio`). Not
# the ratio of the two ceilings: a ceiling rises whenever an operation beats it, and the bf16
# ceiling can have been set by this very step in an earlier run, which would make a forecast
# from it restate the result; sweep points stay as swept. The ceilings serve below only as the
# denominators of shares (a bound on each rate). Square matmuls are not this step's, whose
# matmuls are small and narrow (`(B·T, d) @ (d, 3d)` and the like, `d` the tiny model's width),
# and at such shapes each precision reaches its own share of its ceiling: how far that moves the
# forecast is the first verdict's question.
# The second verdict measures `f` and `r` at the step's own shapes
# (`compute.autocast_parts`): it records, from one bf16 step, every op that runs on a bf16
# tensor (the matmuls and fused attention autocast runs in bf16, and the ops that receive their
# bf16 outputs: the GELU between two linear layers, the bias gradients) and every cast autocast
# inserts; it replays them alone, as recorded and upcast to fp32, in the same rounds as the two
# steps (A, B, A, B, ...). The predicted bf16 step is `t_fp32 - parts_fp32 + parts_bf16`. The
# parts are timed beside the steps, so that verdict is an account of the step by its parts, not a
# forecast (the forecast is the first verdict's): it can miss only where the time outside the parts
# moved by more than its band admits, and its output says whether that band has room for that
# time to vanish or double. The premise of Amdahl's law here (the step is its parts: nothing else
# changed speed) has its own test, printed with the verdict: the two rests, each step's time
# outside the parts, which the model keeps equal.

# %%
x = torch.randint(0, 1024, (BATCH, SEQ), device=DEVICE)  # (B, T) token ids
shape = compute.gpt2_shape(tiny_gpt2(block_size=SEQ, **GPT), SEQ)
flops = shape.train_flops(BATCH)  # model FLOPs of one step (section 6 explains the formula)
xa = x[:AMP_BATCH]  # (AMP_BATCH, T): the batch sized for bf16 above
found = limits  # the ceilings and sweep as this notebook found them: the forecast reads these
with sizing.pinned_threads(THREADS):  # the forecast's f: the fp32 step timed alone, before any bf16 timing
    fp32_alone = timing.benchmark(ex.gpt_step(GPT, xa, "fp32"), warmup=1, repeat=REPEAT, device=DEVICE)
bf16_per_sample = compute.counted_flops(ex.gpt_step(GPT, xa, "bf16")) / AMP_BATCH  # FLOPs per sample (counted)
calls = collections.Counter(c.kind for c in autocast_record.record_parts(ex.gpt_step(GPT, xa, "bf16")))
f_ceil = min(1.0, compute.mfu(shape.train_flops(AMP_BATCH), fp32_alone.median_s,
                              found.peak_flops("float32", CEIL_THREADS)))  # the forecast's f
per_call = bf16_per_sample * AMP_BATCH / (calls["matmul"] + calls["attention"])  # FLOPs per call
swept = autocast_parts.swept_ratio(found, "bfloat16", per_call, threads=CEIL_THREADS)  # the forecast's r
crude = autocast_parts.amdahl(f_ceil, swept.ratio) if swept else None
on = f"on {THREADS} thread{'s' * (THREADS != 1)}"
print(f"forecast {on}, before any bf16 step is timed: f = {f_ceil:.1%} (the fp32 step's model FLOPs at the fp32 "
      f"ceiling, over its time alone, {fp32_alone.median_s * 1e3:.1f} ms), "
      + (f"r = {swept.ratio:.3g} ({swept.describe()}; the step's matmul and attention calls average "
         f"{si(per_call, 'FLOP')}) -> {crude:.3g}x" if swept else
         "and no r: notebook 00's sweep holds no size timed in both bf16 and fp32, so nothing is forecast"))

# %%
parts = autocast_parts.time_autocast_parts(ex.gpt_step(GPT, xa, "fp32"), ex.gpt_step(GPT, xa, "bf16"),
                                           repeat=REPEAT, threads=THREADS)
amp = parts.steps  # the two steps, timed in the same rounds as the parts
print(f"bf16 autocast against fp32 at batch {AMP_BATCH}: {ex.ratio_text(amp)}")
for name, m in (("fp32", amp.baseline), ("bf16", amp.candidate)):
    print(f"  {name}: {m.median_s * 1e3:6.1f} ms/step, {si(shape.train_flops(AMP_BATCH) / m.median_s, 'FLOP/s')}"
          " of model FLOPs" + (" (section 6 holds such rates against a measured ceiling)" if name == "bf16" else ""))
# FLOPs that ran (FlopCounterMode: every matmul, and the fused attention's on its causal entries; no
# elementwise work, so a lower bound), over the bf16 matmuls and attention replayed alone (the parts
# below) and over the whole bf16 step; a rate that beats the bf16 ceiling raises it (perfkit.ceilings)
mm_s = sum(parts.parts[k].candidate.median_s for k in ("matmul", "attention"))  # s, medians
for what, sec in ((f"the bf16 step's matmuls replayed alone at batch {AMP_BATCH}", mm_s),
                  (f"the bf16 step at batch {AMP_BATCH}", amp.candidate.median_s)):
    limits = ceilings.observe(limits, "bfloat16", bf16_per_sample * AMP_BATCH / sec, what, threads=CEIL_THREADS).limits
bf16_found, bf16_now = (lim.peak_flops("bfloat16", CEIL_THREADS) for lim in (found, limits))  # FLOP/s
print(f"  bf16's counted FLOPs ran at {si(bf16_per_sample * AMP_BATCH / mm_s, 'FLOP/s')} in its matmuls and "
      f"attention replayed alone, which take {mm_s / amp.candidate.median_s:.0%} of the step's time; "
      + (f"the bf16 ceiling {on} ({si(bf16_found, 'FLOP/s')}, from "
         f"{found.sources.get('bfloat16, 1 thread' if SHARE < 1 else 'bfloat16', 'the sweep')}; "
         f"{bf16_found / found.peak_flops('float32', CEIL_THREADS):.3g}x fp32's {on}) is raised "
         f"{bf16_now / bf16_found:.2f}x, to that rate, for what follows: the bf16 'ceiling' is the best bf16 rate "
         "measured so far, not a peak, and a ceiling this step set is no measure of its utilisation"
         if bf16_now > bf16_found else
         throughput.own_ceiling_note(limits, "bfloat16", bf16_per_sample * AMP_BATCH / mm_s, CEIL_THREADS, "bf16 step", found,
                                     f"batch {AMP_BATCH}")))

# %%
print("\n".join(parts.lines()))
print(f"measured at the step's shapes: f = {parts.share():.0%}" + (" (capped at 1)" if parts.share() > 1 else "")
      + f", r = {parts.total().ratio:.3g} -> {parts.predicted():.3g}x (f: every row of the table, summed round by "
      f"round, {parts.total().baseline.median_s * 1e3:.1f} ms, over the fp32 step's "
      f"{amp.baseline.median_s * 1e3:.1f} ms; r: the median of those sums' paired ratios, fp32 over bf16 time, "
      "not the ratio of the rows' medians)")
fc = judge(Prediction("bf16 step speedup over fp32", "the forecast: Amdahl with f from the fp32 ceiling and r from "
                      "notebook 00's sweep", value=crude, rel_tol=0.25, unit="x"), amp.estimate,
           explain=dict.fromkeys(("above", "below"), parts.forecast_terms(f_ceil, swept.ratio))) if swept else None
acct = judge(Prediction("bf16 step speedup over fp32", "Amdahl with the changed ops timed alone at the step's shapes "
                        "in the steps' own rounds: an account of the step by its parts, not a forecast",
                        value=parts.predicted(), rel_tol=0.25, unit="x"), amp.estimate, explain=parts.explain(band=0.25))
for v in filter(None, (fc, acct)):
    viz.show_verdict(v)

# %% [markdown]
# The forecast's `f` counts only the model's FLOPs, at the fp32 ceiling's speed, so it is at most
# the matmuls' real share; its `r` is the two dtypes' ratio at one square size notebook 00 swept,
# which the step's own shapes need not share (the `matmul` line's ratio against it says by how
# much here). A bigger model, with more of its step in large matmuls, brings both closer to the
# sweep's.

# %% [markdown]
# **Memory.** bf16 halves the bytes of what autocast saves for backward in bf16, but not of
# everything: tensors that stay fp32 (layer-norm inputs, the logits upcast for the loss) do
# not shrink, and autocast also saves the bf16 *copies of the weights* it made for the
# matmuls. Counted exactly with `SavedTensorMeter`:

# %%
saved = ex.autocast_saved_bytes(tiny_gpt2(block_size=SEQ, **GPT).to(DEVICE), x)  # bytes, fp32 and bf16
print(f"saved for backward at batch {BATCH} x {SEQ}: fp32 {saved['fp32'] / 2**20:.2f} MiB, "
      f"bf16 {saved['bf16'] / 2**20:.2f} MiB ({saved['bf16'] / saved['fp32']:.0%} of fp32; "
      f"a pure halving would be 50 %)")

# %% [markdown]
# **fp16 on a GPU.** fp16 has 5 exponent bits: its smallest subnormal is 2⁻²⁴ ≈ 6e-8, so
# gradients below about 3e-8 (half of it) round to zero. A
# `GradScaler` multiplies the loss by a large factor before backward, divides the gradients
# before the optimizer step, and skips the step (halving the factor) when it finds inf or NaN.
# `compute.make_train_step(..., "fp16")` does this; on a GPU its loss curve is in the plot
# above. On a CPU the course skips it (PyTorch has a CPU `GradScaler` too,
# `torch.amp.GradScaler("cpu")`): some CPUs do compute fp16 natively (AVX512-FP16 since
# Intel's Sapphire Rapids, AMX-FP16 on Granite Rapids), but they compute bf16 at least as fast
# (AMX-BF16), and bf16 needs no scaler.

# %%
if DEVICE.type != "cuda":
    print("fp16 with GradScaler: skipped on a CPU, untimed here; bf16 needs no scaler, and "
          + ("on this CPU it runs natively" if limits.support("bfloat16") == "native" else
             f"this CPU {dict(emulated='emulates', converted='converts')[limits.support('bfloat16')]} bf16 (section "
             f"1: {amp.estimate.point('x')} fp32's speed), so "
             "the AMX argument above does not apply: this run does not say which is faster here"))
else:
    fp16 = compute.compare(ex.gpt_step(GPT, x, "fp32"), ex.gpt_step(GPT, x, "fp16"), repeat=REPEAT)
    print(f"fp16 + GradScaler against fp32: {ex.ratio_text(fp16)}; loss gap "
          f"{abs(tail['fp16'] - tail['fp32']) / tail['fp32']:.3%}")

# %% [markdown]
# ## 2. Fusion: what one kernel saves over nine
#
# **Question.** The chain below is a standalone bias add followed by GPT-2's tanh-approximated
# GELU, written out in PyTorch: nine elementwise operations, the add and the GELU's eight. (In
# GPT-2 itself the bias is added inside the matmul, `addmm` in Hugging Face's `Conv1D` and
# `nn.Linear` in nanoGPT, which leaves the GELU's eight; nanoGPT uses the exact GELU, not tanh.)
# Each one is a separate kernel: it reads its inputs from memory and writes its result back.
# How much slower is that than one kernel that
# reads `x` once and writes the result once?
#
# **The bytes model.** An elementwise op does a few FLOPs per element and moves 8-12 bytes per
# element: its arithmetic intensity lies left of the ridge point (notebook 00), where the roofline
# says memory decides. If it does, each op's time is its bytes / bandwidth, and counting the bytes
# of the chain below (the comment on each line lists how many full-size tensors each op reads)
# predicts the speedup of fusing it. Even fused, the chain does about 10 FLOPs per element for 8
# bytes (read `x`, write the result: 1.25 FLOP/byte), left of the ridge (the next cell prints this
# machine's): fusion removes bytes, it cannot make the chain compute-bound on paper. (tanh, counted
# as one FLOP, costs tens of instructions, which can make it so in practice; the cell after the
# roofline below measures which.)

# %%
def gelu_chain(x, bias):
    """Bias add + tanh GELU, written the way eager PyTorch runs it: one kernel per op."""
    y = x + bias                                   # 1 read (the bias is a small vector)
    inner = 0.7978845608 * (y + 0.044715 * y**3)   # pow: 1, mul: 1, add: 2, mul: 1
    return 0.5 * y * (1.0 + torch.tanh(inner))     # tanh: 1, add: 1, mul: 1, mul: 2
READS = [1, 1, 1, 2, 1, 1, 1, 1, 2]

xc = torch.randn(CHAIN_ROWS, 1024, device=DEVICE)  # (rows, 1024) fp32
bias = torch.randn(1024, device=DEVICE)
torch.testing.assert_close(gelu_chain(xc, bias), F.gelu(xc + bias, approximate="tanh"))
chain = kernels.elementwise_chain_bytes(READS, xc.numel(), 4, inputs=1)
dram = vc.dram_on_threads(limits, CEIL_THREADS)  # B/s: DRAM's roof on the timings' threads, where measured
ridge = limits.peak_flops("float32", CEIL_THREADS) / (dram or limits.copy_bytes_per_s)  # FLOP/byte, the roofline's below
print(f"{chain.kernels} kernels move {chain.eager / 2**20:.0f} MiB eager; fused {chain.fused / 2**20:.0f} MiB "
      f"({chain.ratio:.1f}x fewer bytes: the predicted speedup if memory decides). Fused, 1.25 FLOP/byte against "
      f"a float32 ridge of {ridge:.2f} FLOP/byte (compute " + (f"and DRAM {on}, {si(dram, 'B/s')}, the roofline's below): "
      if dram else f"{on}, DRAM on all cores, the most any thread count draws: with DRAM measured {on} too, the ridge "
      "could only lie further right): at least ") + f"{ridge / 1.25:.2g}x left of it")

# %% [markdown]
# **What else a new tensor costs.** Each eager op returns a *new* tensor. On Linux, glibc's
# allocator serves blocks above its mmap threshold (128 KiB at first, raised up to 32 MiB as
# large blocks are freed) straight from the operating system and gives them back when they are
# freed; such a tensor's pages fault in one by one on first write, a cost per new tensor that
# the bytes model leaves out. Blocks below it come from the heap, which hands a freed block to the
# next request without a fault, as a GPU's caching allocator reuses its blocks, for as long as it
# keeps the memory (the exception: glibc trims free memory at the heap's top back to the system,
# and what it trimmed faults in again; section 6 counts its steps' page faults to see whether it
# meets it). Which case applies depends on the size and on what
# the program freed before, so it is measured, before the chain is timed: filling a new tensor
# against an existing one, in alternating rounds, counting the new one's page faults
# (`perfkit.compute.fusion`; its cost per fault, the median of the rounds, is the one figure of a
# fault's cost this notebook uses, in section 6 too). **The model** of the eager chain, recorded
# here: its bytes at the DRAM ceiling (notebook 00's, which counts every buffer an operation reads
# or writes, as the chain's bytes are counted; its copy on the timings' threads where notebook 00
# measured one, as the roofline below draws it, else all cores') plus one new tensor per kernel; of the fused kernel,
# its bytes and its one new output tensor. That ceiling is credited as x + y's rate, up to 9/8 of the
# fastest copy's (a write also reads its line: a copy moves 3 buffers for the 2 it counts, x + y 4
# for 3); most of the chain's kernels are unary, copy-like, so their bytes term can be up to 1/9 short.

# %%
with sizing.pinned_threads(THREADS):
    cost = fusion.new_tensor_cost(xc, repeat=REPEAT)
model_s = fusion.chain_model(chain, cost.extra_s, dram or limits.copy_bytes_per_s)  # s: bytes + new tensors
print(cost.describe(xc.numel() * 4, dram or limits.copy_bytes_per_s))  # against the roof the model uses
print(f"predicted: eager {model_s.bytes_s * 1e3:.2f} ms of bytes + {chain.kernels} new tensors = "
      f"{model_s.eager_s * 1e3:.2f} ms; fused {model_s.fused_s * 1e3:.2f} + {model_s.new_s * 1e3:.2f} ms = "
      f"{model_s.fused_total_s * 1e3:.2f} ms; fusing's speedup {model_s.speedup:.2f}x "
      f"(by the bytes alone, {chain.ratio:.1f}x)")

# %% [markdown]
# The teaching version agrees with PyTorch's own `F.gelu(approximate="tanh")` (checked above).
# Now three ways to run it: eager op by op, compiled by `torch.compile` (inductor generates one
# fused C++/OpenMP loop on a CPU, one Triton kernel on a GPU), and PyTorch's hand-written GELU
# kernel after the bias add (two kernels). The first call of the compiled function is the
# compile; `measure_compile` times it, then times eager and compiled interleaved (the
# `F.gelu` row is timed on its own after them, so it is not part of that pairing). Like every
# timing here, they run on the `THREADS` threads chosen at the top.

# %%
def where(rate):  # modelled bytes/s (each read and write counted) against the roofline's DRAM roof, in-cache copy's
    cache_bw, roof = limits.cache_bytes_per_s, dram or limits.copy_bytes_per_s  # the roof drawn below
    named = on if dram else "(the best of any thread count)"
    return (f"= {rate / roof:4.0%} of the DRAM ceiling {named}"
            if rate <= roof else f"above the DRAM ceiling {named} ({si(roof, 'B/s')}): part of it stayed in "
            + (f"cache, {rate / cache_bw:.0%} of the in-cache copy's" if cache_bw and rate <= cache_bw
               else "cache, and above the in-cache copy's too: the model counts bytes that did not move"))

compiled_chain = torch.compile(gelu_chain)  # mode="default"
with sizing.pinned_threads(THREADS):
    rec = compiling.measure_compile(lambda: gelu_chain(xc, bias), lambda: compiled_chain(xc, bias),
                                    repeat=REPEAT)
    builtin = timing.benchmark(lambda: F.gelu(xc + bias, approximate="tanh"), warmup=2, repeat=REPEAT)
rows = [("eager, 9 kernels", rec.eager.median_s, chain.eager),  # (label, s, modelled bytes)
        ("F.gelu, 2 kernels", builtin.median_s, 4 * xc.numel() * 4),  # timed alone after the pair
        ("compiled, 1 kernel", rec.compiled.median_s, chain.fused)]
for label, sec, nbytes in rows:
    print(f"{label:>19}: {sec * 1e3:7.2f} ms, modelled traffic {si(nbytes / sec, 'B/s'):>10} {where(nbytes / sec)}")
fused_x = stats.median_ratio(rec.eager.times_s, rec.compiled.times_s)  # eager over compiled, paired
print(f"eager / compiled (compiling's speedup): {fused_x.point('x')} ({fused_x.describe('x')}; predicted {model_s.speedup:.2f}x, "
      f"{chain.ratio:.1f}x by the bytes alone); first call (compile) {rec.compile_s:.2f} s, inductor cache hits: "
      f"{rec.fx_cache_hits}")
print(compiling.cold_compile_cost("the GELU chain", rec)[1])

# %%
bytes_x = rec.eager.median_s / model_s.bytes_s  # the eager chain over its bytes alone
print(f"the bytes model alone: eager {model_s.bytes_s * 1e3:.2f} ms predicted, {rec.eager.median_s * 1e3:.2f} ms "
      f"measured ({bytes_x:.1f}x): " + ("memory bandwidth alone did not set the chain's time here"
                                        if bytes_x > 1.5 else "the bytes set the chain's time here"))
why_eager, why_fused = fusion.chain_explanations(model_s, rec, f"the DRAM ceiling {on}" if dram else None)
viz.verdict(Prediction("eager chain time", "bytes at the DRAM ceiling + one page-faulted tensor per op",
                       value=model_s.eager_s * 1e3, rel_tol=0.5, unit=" ms"),
            stats.median_interval(rec.eager.times_s).scaled(1e3), explain=why_eager)
fused_v = judge(Prediction("compiled chain's speedup over eager", f"the model above: bytes and {chain.kernels} new "
                          "tensors eager, over bytes and 1 new tensor fused", value=model_s.speedup, rel_tol=0.25,
                          unit="x"), fused_x, explain=why_fused)
viz.show_verdict(fused_v)  # its outcome goes to the headlines

# %% [markdown]
# On the roofline of notebook 00 (FLOPs counted as about 10 per element: 7 multiplies and adds,
# the pow as 2 multiplies, tanh as one):

# %%
points = [(label, 10 * xc.numel() / nbytes, 10 * xc.numel() / sec) for label, sec, nbytes in rows]
vc.plot_thread_roofline(limits, CEIL_THREADS, points, intensity_range=(1 / 16, max(64, 4 * ridge)),
                        title="The GELU chain on this machine's roofline, tanh counted as 1 FLOP")  # roofs of these threads
plt.show()

# %% [markdown]
# **Is the compiled chain bound by its bytes or by its arithmetic?** The fused loop reads `x`
# once and writes the result once, the bytes of adding the bias into an existing tensor. That
# add (one kernel, one FLOP per element) is timed in alternation with the compiled chain: the
# add's time is what the chain's bytes cost (both read the same `x`, so whatever of it a cache
# keeps between rounds serves both alike). The compiled chain also returns a *new* tensor on
# every call, whose cost was measured before the chain was timed (a new tensor against an
# existing one); what remains of its time is charged to its arithmetic (tanh, counted above as one
# FLOP, is a polynomial of tens of instructions): a remainder, on the assumption that the three
# parts add without overlapping, not a separate measurement of the arithmetic.

# %%
out = torch.empty_like(xc)  # existing: no new tensor to fault in
with sizing.pinned_threads(THREADS):
    add_m, comp_m = timing.interleaved([lambda: torch.add(xc, bias, out=out), lambda: compiled_chain(xc, bias)],
                                       warmup=2, repeat=max(REPEAT, 5), device=DEVICE)
over_add = stats.median_ratio(comp_m.times_s, add_m.times_s)  # compiled chain over the same bytes
new_s = min(cost.extra_s, max(0.0, comp_m.median_s - add_m.median_s))  # its one new output tensor (s)
arith_s = comp_m.median_s - add_m.median_s - new_s  # what neither the bytes nor the new tensor explain (s)
mem_s = add_m.median_s + new_s  # the bytes and the new tensor (s)
print(f"the same bytes, one add per element: {si(add_m.median_s, 's')} at {si(chain.fused / add_m.median_s, 'B/s')} "
      f"{where(chain.fused / add_m.median_s)}; "
      f"compiled chain: {si(comp_m.median_s, 's')}, {over_add.text('x')} the add's time"
      + (f": of the {si(comp_m.median_s - add_m.median_s, 's')} beyond the bytes, its new output tensor "
         f"accounts for {si(new_s, 's')} (measured above) and {si(arith_s, 's')} "
         f"({arith_s / comp_m.median_s:.0%} of the loop) is arithmetic, against "
         f"{si(mem_s, 's')} for memory (the bytes and the new tensor). "
         + ("The two are within a quarter of each other, closer than this split (which assumes they add "
            "without overlapping) can tell apart: the fused loop is bound by neither alone."
            if max(arith_s, mem_s) < 1.25 * min(arith_s, mem_s) else
            "The arithmetic is the larger part: the fused loop is bound by its instructions more than by "
            "its memory (instructions, not the FLOPs the roofline above counts, tanh as one)." if arith_s > mem_s
            else "Memory is the larger part: the fused loop is bound by its bytes and page faults more than by "
            "its instructions.") if over_add.clear_of(1.25, "x") == "above" else
         ": within a quarter of it, so the compiled loop runs at about its bytes' speed: memory-bound."
         if over_add.clear_of(1.25, "x") == "below" else ": this run cannot say which (the interval reaches across 1.25x)."))
print(fusion.what_fusion_saved(model_s, rec, chain.kernels, chain.ratio))

# %% [markdown]
# ## 3. `torch.compile`: when does compiling pay for itself?
#
# **The model.** Compiling costs a fixed time `C` once (dynamo traces Python into an FX graph,
# AOTAutograd derives the backward graph from it, inductor fuses and lowers both and compiles C++
# or Triton code) and saves `e - c` seconds on every later
# call, where `e` and `c` are the eager and compiled times per call (medians). It pays off after
# `C / (e - c)` calls; where a range is printed beside it (the GPT-2 step's, when compiled below), it is
# `C / (c (ρ - 1))` at the ends of the interval of `ρ`, eager's time over compiled's round by round: the rounds
# are paired, so the range comes from the paired statistic (`CompileRecord.break_even_between`). Inductor keeps compiled code in an on-disk cache (`/tmp/torchinductor_<user>`
# unless `TORCHINDUCTOR_CACHE_DIR` names another; the course gives each imitated machine its own),
# so a second run of the same program on the same machine compiles much faster: the cache hits
# printed above say which case you are in, and what a cold cache (a fresh machine, CI) cost
# here, as measured by the last run that found the cache empty.

# %%
vc.plot_break_even(rec, title=f"GELU chain: compiling pays off after {rec.break_even_calls:,.0f} calls")
plt.show()

# %% [markdown]
# For a whole training step the compile takes longer (forward and backward graphs, many more
# kernels), and on a CPU with a cold cache it takes seconds to minutes, so QUICK mode (CI) skips it
# and the chain above is QUICK's measured compile. At default size the next cell compiles the
# tiny GPT-2's training step (`torch.compile(model)`, mode `"default"`; the optimizer stays eager).

# %%
step_rec = step_x = None
if COMPILE_STEP:
    with sizing.pinned_threads(THREADS):
        step_rec = compiling.measure_compile(ex.gpt_step(GPT, x), ex.gpt_step(GPT, x, compiled=True),
                                             repeat=REPEAT)
    step_x = stats.median_ratio(step_rec.eager.times_s, step_rec.compiled.times_s)  # interleaved pairs

    print(f"GPT-2 step: compile {step_rec.compile_s:.1f} s (cache hits {step_rec.fx_cache_hits}), "
          f"{step_rec.eager.median_s * 1e3:.1f} -> {step_rec.compiled.median_s * 1e3:.1f} ms/step (medians, "
          f"{step_rec.speedup:.3f}x); eager's time over compiled's round by round {step_x.text('x')}"
          + ("" if step_x.low <= step_rec.speedup <= step_x.high else
             " (the medians' ratio lies outside it: the paired ratios are another statistic)")
          + f"; pays off after {step_rec.break_even_text()}")
    cold_s, cold_text = compiling.cold_compile_cost("the tiny GPT-2 training step", step_rec)
    print(cold_text + (f"; at that cost it pays off after {replace(step_rec, compile_s=cold_s).break_even_text()}"
                       if cold_s else ""))
    vc.plot_break_even(step_rec, title="tiny GPT-2 training step, fp32", unit="steps", between=True)  # both
    plt.show()
else:
    print("QUICK mode: the training-step compile is skipped (seconds to minutes on a CPU with a cold "
          "cache); run with QUICK = False to measure it")

# %% [markdown]
# **Modes.** `torch.compile(model, mode=...)`:
#
# | mode | what it adds | where it helps |
# |---|---|---|
# | `"default"` | fusion, code generation | everywhere; measured above |
# | `"reduce-overhead"` | CUDA graphs: records each compiled graph's kernels (forward and AOTAutograd backward, per input shape, split at graph breaks) and replays them with one launch; an eager optimizer step stays outside unless it is compiled too | GPU steps dominated by launch overhead (small batches) |
# | `"max-autotune"` | benchmarks several matmul/conv implementations per shape at compile time, plus CUDA graphs on a GPU | long runs that amortise a much longer compile |
# | `"max-autotune-no-cudagraphs"` | autotuning without CUDA graphs | as above, when CUDA graphs do not fit |
#
# On a CPU the CUDA graphs do not apply, but autotuning does: since PyTorch 2.5 inductor's
# `max-autotune` can also time its own C++ GEMM template against the usual library matmul on a
# CPU (introduced as a prototype; not timed here). The next cell measures `"reduce-overhead"`
# when a GPU is present.

# %%
if DEVICE.type == "cuda" and COMPILE_STEP:
    ro = compiling.measure_compile(ex.gpt_step(GPT, x), ex.gpt_step(GPT, x, compiled=True, mode="reduce-overhead"),
                                   repeat=REPEAT)
    print(f"reduce-overhead: compile {ro.compile_s:.1f} s, {ro.speedup:.2f}x per step")
else:
    print("mode='reduce-overhead' uses CUDA graphs: measured only on a GPU at default size")

# %% [markdown]
# **Graph breaks.** Dynamo can only compile what it can trace. When Python needs a tensor's
# *value* (an `if` on `.item()`, a `print`, a call into an unsupported library), dynamo stops
# the graph, runs that bit in Python and starts a new graph after it: a **graph break**. Each
# break costs a round trip to Python and stops fusion across it. `torch._dynamo.explain`
# (wrapped by `compiling.graph_breaks`) traces without generating code and lists the breaks.
# Below, an MLP (`experiments.RescaledMLP`) rescales large activations with a Python `if`:
#
# ```python
# peak = h.abs().max()
# if peak.item() > 4.0:        # Python needs the value: a graph break
#     h = h / peak
# ```
#
# **Prediction:** it breaks once; the same logic written as
# `h = torch.where(peak > 4.0, h / peak, h)` (`experiments.WhereRescaledMLP`) keeps the branch
# in the graph and compiles into one. (Setting `torch._dynamo.config.capture_scalar_outputs =
# True` lets dynamo trace `.item()` as a symbolic number instead, which the break's reason
# below names; the `if` on it still breaks, as Python must choose a branch.)

# %%
xm = torch.randn(32, 64, device=DEVICE) * 3
broken, fixed = ex.RescaledMLP().to(DEVICE), ex.WhereRescaledMLP().to(DEVICE)
fixed.load_state_dict(broken.state_dict())
torch.testing.assert_close(broken(xm), fixed(xm))  # same function
for name, m, want in (("with .item()", broken, 1), ("with torch.where", fixed, 0)):
    r = compiling.graph_breaks(m, xm)
    print(f"{name:>16}: {r.graphs} graph(s), {r.breaks} break(s) {r.reasons}")
    viz.verdict(Prediction(f"graph breaks {name}", "a break wherever Python needs a tensor's value",
                           value=want, rel_tol=0), r.breaks)

# %% [markdown]
# ## 4. Attention: naive against fused
#
# **The model.** Naive attention computes the `(T, T)` score matrix per head, masks it,
# applies softmax and multiplies by `V`. Autograd must keep the softmax output for backward:
# `B·H·T²` floats per layer, growing with the *square* of the sequence length. A fused kernel
# (FlashAttention's algorithm; PyTorch's `scaled_dot_product_attention` has fused kernels on
# CPUs too) processes the scores tile by tile and saves, besides its inputs `Q`, `K`, `V`, only
# the output and one log-sum-exp per row, recomputing the tiles in backward (FlashAttention-2,
# Dao 2023, Algorithms 1 and 2; the first FlashAttention, Dao et al. 2022, kept two statistics
# per row, the running maximum and sum). The inputs are counted below neither for naive nor for
# fused: the meter counts what each saves beyond them. **Predictions:** naive saves one `T x T` matrix per
# head (the table's "predicted" column below); fused saves `B·H·T·(d_head + 1)` floats; fused time grows
# more slowly with `T` because it never writes the matrix to memory.
#
# The teaching version, checked against PyTorch's:

# %%
def naive_attention(q, k, v):  # (B, H, T, d) -> (B, H, T, d)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5           # (B, H, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return att.masked_fill(~causal, float("-inf")).softmax(-1) @ v  # saves the (T, T) softmax

def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

q, k, v = (torch.randn(2, 4, 64, 16, device=DEVICE) for _ in range(3))
torch.testing.assert_close(naive_attention(q, k, v), sdpa(q, k, v), atol=1e-5, rtol=1e-4)
B, H, D = ATTN_B, 4, 16
with sizing.pinned_threads(THREADS):  # measured again if disturbed
    pts, note = ex.attention_sweep_checked({"naive": naive_attention, "sdpa": sdpa}, ATTN_T, batch=B, heads=H,
                                          head_dim=D, repeat=REPEAT, device=DEVICE)
by = {(p.impl, p.seq_len): p for p in pts}
print("\n".join([*vc.attention_table(pts, B, H, D), note]))
vc.plot_attention_sweep(pts, title=f"Causal attention, fp32, B={B}, H={H}, d_head={D}")
plt.show()

# %%
mem_err = max(abs(by["naive", T].saved_bytes / kernels.attention_matrix_bytes(B, H, T) - 1) for T in ATTN_T)
viz.verdict(Prediction("largest relative gap, naive's saved bytes against one T x T matrix per head",
                       "autograd keeps the softmax output", high=0.05, physical=(0, None)), mem_err,
            explain={"held": "The rest is the small boolean mask: memory is where the model is exact."})
r_short, r_long = (by["naive", T].seconds / by["sdpa", T].seconds for T in (ATTN_T[0], ATTN_T[-1]))
grow = {i: by[i, ATTN_T[-1]].seconds / by[i, ATTN_T[0]].seconds for i in ("naive", "sdpa")}  # time, last over first
att_mib = kernels.attention_matrix_bytes(B, H, ATTN_T[-1]) / 2**20  # one T x T fp32 tensor (MiB)
jump = ex.disturbed_text(pts)  # a length whose time fell, or grew over 16x for 4x the work: "" if none
viz.show_verdict(ex.disturbed_verdict(
    Prediction(f"naive/fused time ratio at T={ATTN_T[-1]} over at T={ATTN_T[0]}",
               "naive writes and rereads T x T matrices", low=1.0, unit="x"), r_long / r_short, jump, explain={
        "held": f"Naive over fused (a ratio of medians) went from {r_short:.2f}x at T={ATTN_T[0]} to {r_long:.2f}x "
                f"at T={ATTN_T[-1]}: naive's time grew {grow['naive']:.3g}x and fused's {grow['sdpa']:.3g}x for "
                f"{(ATTN_T[-1] / ATTN_T[0]) ** 2:.0f}x the T x T work. The sweep does not split naive's growth "
                "between the T x T traffic and the page faults of its T x T tensors"
                + (f" (each {att_mib:.0f} MiB at T={ATTN_T[-1]}, above glibc's 32 MiB mmap cap, so each one is "
                   "a fresh mapping whose pages fault in one by one, the more of them the larger the tensor)" if att_mib > 32 else
                   f" (each {att_mib:.0f} MiB at T={ATTN_T[-1]}, within glibc's 32 MiB mmap cap)") + ".",
        "below": f"Naive over fused went from {r_short:.2f}x at T={ATTN_T[0]} to {r_long:.2f}x at T={ATTN_T[-1]}: "
                 f"naive's time grew {grow['naive']:.3g}x and fused's {grow['sdpa']:.3g}x for "
                 f"{(ATTN_T[-1] / ATTN_T[0]) ** 2:.0f}x the work, so the fused kernel's time grew faster here, "
                 "which the T x T traffic does not explain; the memory difference above is the part that scales.",
        "disturbed": "The memory verdict above is exact; the times and their ratios in the table are not "
                     "evidence either way."}))

# %% [markdown]
# Precision matters too: fused kernels are tuned per dtype and head size, and on CPUs the bf16
# flash-attention backward is not always the faster path. The next cell repeats one length in
# bf16 and says which of the two won in bf16, beside each one's fp32 time
# (the top of this notebook says whether bf16 is emulated here).

# %%
T16 = ATTN_T[1]
with sizing.pinned_threads(THREADS):
    p16 = kernels.attention_sweep({"naive": naive_attention, "sdpa": sdpa}, [T16], batch=B, heads=H,
                                  head_dim=D, dtype="bfloat16", repeat=REPEAT, device=DEVICE)
print(f"bf16, T={T16}: naive {p16[0].seconds * 1e3:.2f} ms, sdpa {p16[1].seconds * 1e3:.2f} ms "
      f"(fp32, in the sweep's own rounds above: naive {by['naive', T16].seconds * 1e3:.2f}, sdpa "
      f"{by['sdpa', T16].seconds * 1e3:.2f}; no ratio taken across the two cells); in bf16 the "
      f"{'fused' if p16[1].seconds < p16[0].seconds else 'naive'} version was faster here")

# %% [markdown]
# **In the model.** `transformers` switches the tiny GPT-2 between its attention implementations
# with `model.set_attn_implementation("eager" | "sdpa")`. The whole forward and backward, and
# the activations of the whole model (`experiments.attention_in_model`: batch 4, 4 heads, 2
# layers of width 64). The prediction for the difference is notebook 04's exact count
# (`perfkit.memory.activations.gpt2_saved_activation_bytes`), eager minus sdpa: per layer,
# eager's `B·H·T²` softmax and its q, k, v copies (`3·B·T·C`), against what the fused kernel saves
# instead: the fused q/k/v projection (`3·B·T·C`), copies of q and of the output (`2·B·T·C`) and
# one fp32 log-sum-exp per row (`B·H·T`):

# %%
for T in GPT_ATTN_T:
    print(ex.attention_in_model(T, repeat=REPEAT, threads=THREADS, device=DEVICE).describe())

# %% [markdown]
# ## 5. Shapes: do odd matrix sizes cost throughput?
#
# **The model.** Matmul kernels work on vectors and tiles: 16 fp32 or 32 bf16 values per
# AVX-512 register (8 fp32 with AVX2), tensor-core fragments of 8-16 elements on a GPU, where
# NVIDIA's guidance is dimensions that are multiples of 8 in fp16/bf16. A width off the vector
# grid misaligns every row of `B` and `C` and ends each in a partial vector; this section takes the
# narrowest grid, 4 fp32 (16 bytes, one 128-bit SSE or NEON vector), so a width off it (`n % 4 != 0`)
# is a multiple of no vector width, while `n % 8 == 4` lies on it, off AVX2's and AVX-512's wider
# grids, and is printed apart ("other even n"), in neither group the prediction compares. The partial vector alone would cost about `lanes / n` of the work, 1 % at
# `n` near 1024; the library the matmul goes to (on a CPU, the BLAS library the build names; the
# sweep's cell prints which) can also take a slower path for every such width, which only a sweep
# shows (the next cell prints the rate by the largest power of two dividing `n`: the widths the
# kernel treats as aligned share one grid). A width that is a large power of two can cost
# instead, since rows `n` floats apart map to the same cache sets (Intel's oneMKL guide
# advises leading dimensions that are not such powers). So on a CPU "a multiple of 64" is no
# promise of speed. Oddness adds no partial vector beyond what any width off the grid has, but it
# does change how each row is aligned: fp32 rows `n` floats apart start on 4-byte boundaries when
# `n` is odd, on 8-byte ones when `n % 4 == 2`, on 16-byte ones when `n % 8 == 4`. A kernel can pay
# for every coarser alignment with slower unaligned loads, so a graded effect is possible; the
# prediction tests the simpler model, that alignment below a vector costs nothing more:
# **Prediction.** odd widths run at the rate of even widths that are multiples of no vector
# width (`n % 4 == 2`), within 10 % (the widths differ by up to 7 % in size). How both groups
# compare with the multiples of 64 is measured and printed, without a prediction. Below,
# `(1024, 256) @ (256, n)` for `n` around 1024 in fp32, the widths interleaved; bf16 too, at the
# widths its plan kept, but only where those hold an aligned and an odd width (the cell prints
# whether they do: where bf16 is emulated, the plan usually keeps too few, and only fp32 runs).
# The intervals printed after the sweep take each width's median as one sample of its group and
# carry both groups' spread (a ratio of two groups' medians); neither counts each width's own
# timing noise, so both are narrower than the whole uncertainty.

# %%
SHAPE_N = {"float32": MATMUL_N, "bfloat16": [n for n in MATMUL_N if n in SHAPE_PLAN.batches]}
with sizing.pinned_threads(THREADS):
    shape_pts, shapes = ex.shape_sweep(SHAPE_N, repeat=REPEAT, device=DEVICE)  # (1024, 256) @ (256, n)
if "bfloat16" not in shapes:
    print(f"bf16: {SHAPE_PLAN.note} That leaves no aligned and odd pair: bf16 is not swept here.")
print("\n".join(s.describe() for s in shapes.values()))
blas = kernels.fp32_matmul_library() if DEVICE.type == "cpu" else None  # where fp32 matmuls go, if not ATen
print(vc.alignment_line(shape_pts, "float32") + (
    f"; fp32 matmuls go to {blas}, the BLAS library of this build, which picks its own kernels for this CPU: the "
    "grid above is that library's choice" if blas else
    f"; fp32 matmuls run ATen's own kernels, vector ISA {torch.backends.cpu.get_cpu_capability()} (AVX2: 8 fp32 "
    "lanes, AVX512: 16)" if DEVICE.type == "cpu" else ""))
vc.plot_shape_sweep(shape_pts, vary="n", multiple=64)
plt.show()

# %%
s32 = shapes["float32"]
odd_vs_64 = s32.odd_share  # odd n's median rate over the multiples of 64's, both groups' spread carried
n64, nodd = [n for n in SHAPE_N["float32"] if n % 64 == 0], [n for n in SHAPE_N["float32"] if n % 2]
print(f"fp32 off the vector grid: odd n's rate over the multiples of 64's, {odd_vs_64.text('x')}: "
      + {"above": "odd widths ran faster than the multiples of 64 here (the interval lies above 1x)",
         "below": "odd widths ran slower than the multiples of 64 here (the interval lies below 1x)"}.get(
             odd_vs_64.clear_of(1.0, "x"), "this sweep resolves no alignment effect ("
             + ("the interval holds 1x)" if odd_vs_64.has_interval else
                f"the sweep's {min(len(n64), len(nodd))} "
                f"{'multiples of 64' if len(n64) <= len(nodd) else 'odd widths'} are too few for a 90 % interval)"))
      + f". The multiples of 64 are {min(n64)} to {max(n64)} wide and the odd widths {min(nodd)} to {max(nodd)}, "
      "so this ratio also mixes matrix size with alignment.")
par = s32.parity  # odd widths' median rate over the off-grid even widths'
side = {"below": f"the interval lies wholly below 1, so odd widths ran slower than the even ones off the grid, by "
                 f"{1 - par.value:.0%} at the median (rows 4-byte aligned against 8-byte ones)",
        "above": f"the interval lies wholly above 1, so odd widths ran faster than the even ones off the grid, by "
                 f"{par.value - 1:.0%} at the median"}.get(par.clear_of(1.0), "its interval holds 1, so this run "
                                                                        "resolves no difference between the parities")
viz.verdict(Prediction("odd n's median rate over off-grid even n's (fp32)", "parity costs nothing beyond "
                       "leaving the vector grid (widths within 7 % of each other)", value=1.0, rel_tol=0.1),
            par, explain={k: f"{side[0].upper()}{side[1:]}; the multiples of 64 spread {s32.aligned_spread}."
                          for k in ("held", "above", "below")})  # an inconclusive verdict adds its side's

# %% [markdown]
# **Padding the vocabulary.** GPT-2's vocabulary is 50,257 tokens (50,256 plus the end-of-text
# token); nanoGPT pads it to 50,304, a multiple of 64, and reported a large speedup on GPUs. Our
# tiny model's analogue: 1,024 tokens plus one special token, 1,025, padded to 1,088. Padding adds
# 6 % more logits (LM-head FLOPs) that are never targets; it can only win if the aligned shapes run more
# than that much faster. Measured on the bf16 training step (fp32 where bf16 is emulated):

# %%
V, VP = 1025, kernels.pad_to_multiple(1025, 64)
xv = torch.randint(0, V, (BATCH, SEQ), device=DEVICE)  # targets never use the padded ids
pad = compute.compare(ex.gpt_step(GPT, xv, PAD_PRECISION, vocab=V), ex.gpt_step(GPT, xv, PAD_PRECISION, vocab=VP),
                      repeat=REPEAT, threads=THREADS)
print(f"vocab {V} -> {VP} ({VP / V - 1:.1%} more logits), {PAD_PRECISION} step: padded {ex.ratio_text(pad)}: "
      + {"above": "padding is faster", "below": "padding is slower"}.get(
          pad.estimate.clear_of(1.0, "x"), "the interval holds 1x, no difference measured")
      + ("; fp32, since bf16 is emulated here (the top of this notebook)" if PAD_PRECISION == "fp32" else ""))

# %% [markdown]
# Whether padding helps here is decided by the printed ratio and its interval: an interval that
# holds 1 means no difference was resolved on this CPU at this size, not that there is none: the
# shape may still matter by as much as the interval reaches on either side (the head is one
# matmul among many; section 5's sweep measured what an odd width costs one matmul alone); on a
# GPU, the same change is worth trying first.

# %% [markdown]
# ## 6. Model FLOPs: how much of the machine does a training step use?
#
# **The formula** (PaLM, appendix B; nanoGPT's `estimate_mfu`). With `N` the model's parameters,
# each trained token costs `6N` FLOPs: 2 per parameter for the forward matmuls, 4 for the backward
# (gradients with respect to activations and to weights). `N` counts every parameter but the
# position embeddings, as nanoGPT does, though only the matmuls' weights do those FLOPs (the
# check below says how much that adds). Attention adds `12·L·d·T` per token
# (`Q·Kᵀ` and `softmax·V`, each `2·T·d` forward per layer, times 3 with backward). Position
# embeddings are a lookup, so they are not in `N`; the token embedding counts once because the
# tied LM head multiplies by it. MFU = model FLOPs per step / step time / peak. PaLM and nanoGPT
# divide by the vendor's theoretical peak (nanoGPT: an A100's 312 TFLOP/s in bf16), at full use of
# the chip. This CPU has no peak this course trusts, so this section divides the same model FLOP/s
# by the matmul ceiling this machine measured (notebook 00's sweep, or a faster operation since) on
# the threads the step ran on: a lower denominator, which a later operation can raise, so the
# figure is higher than an MFU of the same step. It is printed as what it is, a **share of the
# measured ceiling** on those threads (beside it, where the step had part of the machine, the
# share of the all-core ceiling), not as an MFU, and never compared with the field's. The same
# ratio with the FLOPs the hardware really ran (counted, recomputation included: activation
# checkpointing re-runs the forward, FlashAttention's backward recomputes the scores) is HFU,
# hardware FLOPs utilisation (PaLM appendix B; Korthikanti et al. 2022): the same accounting with
# the recomputed FLOPs added, so at or above the MFU where the formula counts just the work that ran.
# Counted by a FLOP counter it can fall below the MFU, since the formula also counts work that
# does not run: it charges attention's full `T x T` square where a causal kernel skips the masked
# half, and the input gradient of a first matmul fed data (no gradient needed), which autograd skips.
# This notebook uses the formula's model FLOPs; counted FLOPs appear only where a rate is held
# against a ceiling (section 1's bf16 step), since only work that ran can beat one. These
# counts are exact, so CI checks the output:

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
n_gpt2 = 124_439_808 - 1024 * 768  # GPT-2 small: all parameters minus the position embedding
total = compute.gpt_train_flops(n_gpt2, n_layer=12, d_model=768, seq_len=1024, tokens=8 * 1024)
print(f"GPT-2 small, batch 8 x 1024: 6N x 8,192 tokens {6 * n_gpt2 * 8 * 1024:.4g} + attention "
      f"{12 * 12 * 768 * 1024 * 8 * 1024:.4g} = {total:.4g} FLOPs per step")
tiny = compute.gpt2_shape(tiny_gpt2(block_size=64, **GPT), 64)
print(f"our tiny GPT-2: N = {tiny.n_params:,}, L = {tiny.n_layer}, d = {tiny.d_model}; "
      f"{tiny.train_flops(8):,} FLOPs per step at batch 8 x 64 (a fixed shape, so that this "
      f"output never changes; the timed steps below use their own sequence length)")

# %% [markdown]
# A check of the formula against PyTorch's `FlopCounterMode`, which counts the FLOPs of every
# matmul actually dispatched (with eager attention, whose two score matmuls cover the whole
# `T x T` square, masked half included, as the formula's `12 L d T` does; PyTorch registers no
# formula for the CPU's fused attention kernel, which `compute.counted_flops` adds). Elementwise
# work is not counted by the counter, but `6N` counts every parameter in `N`, the biases and layer norms
# that do no matmul too: the two should differ by 6 FLOPs per such parameter per token and no
# more; a larger gap, the counter's per-operator counts (`counter.get_flop_counts()`) name the
# matmul the formula misses or charges twice. The count below is at the timings' own shape,
# sequence length `SEQ`, not the fixed 64 of the check above.

# %%
from torch.utils.flop_counter import FlopCounterMode

m = tiny_gpt2(block_size=SEQ, **GPT).to(DEVICE)
m.set_attn_implementation("eager")
with FlopCounterMode(display=False) as counter:
    m(input_ids=x, labels=x).loss.backward()
n_flat = sum(p.numel() for p in m.parameters() if p.dim() == 1)  # biases and layer norms: in 6N, in no matmul
print(f"formula {flops:,} FLOPs, counted {counter.get_total_flops():,} "
      f"({counter.get_total_flops() / flops:.3f} of the formula); the gap, {flops - counter.get_total_flops():,}, "
      f"against 6 x {n_flat:,} such parameters x {x.numel():,} tokens = {6 * n_flat * x.numel():,}")
viz.verdict(Prediction("FlopCounterMode's count over the 6N + attention formula",
                       "every matmul of forward and backward", value=1.0, rel_tol=0.02),
            counter.get_total_flops() / flops)

# %% [markdown]
# **Share of the ceiling against batch size.** **Prediction.** Small batches waste the machine, because some costs
# are per *step*, not per token (the optimizer touches every parameter once per step; Python and
# dispatch overhead is per op), and small matmuls run below the ceiling (notebook 00). The crude
# model: throughput rises with batch size and flattens once the matmuls are large, so the largest
# batch is at least as fast per token as the smallest and within 10 % of the best (both halves
# are judged after the refined model below, on its paired rounds). At one
# precision the share is tokens/s times the model FLOPs per token over the ceiling, so its curve has
# the shape of the tokens/s curve: the two differ only in the scale. `StepBench` measures each
# setting with a few real steps, all settings in turn in each round, and caches them (the widget
# below reuses the cache):

# %%
bench = throughput.StepBench.gpt2(limits, seq_len=SEQ, device=DEVICE, warmup=1, repeat=3 if QUICK else REPEAT,
                                  threads=THREADS, **GPT)
settings = [("fp32", False, b) for b in BATCHES] + [("bf16", False, b) for b in BENCH_PLAN.batches]
bench.measure_all(settings + ([("fp32", True, BATCH)] if COMPILE_STEP else []))  # interleaved
print("\n".join(vc.throughput_lines(bench.points, SHARE)))
bf16_top = max((p for p in bench.points if p.precision == "bf16"), key=lambda p: p.batch)
bf16_mfu, against, _ = sizing.meaningful_mfu(limits, bf16_top.flops_per_step, bf16_top.step.median_s, "bfloat16",
                                             threads=CEIL_THREADS)
bf16_rate = bf16_per_sample * bf16_top.batch / bf16_top.step.median_s  # counted FLOP/s (section 1's count)
obs = ceilings.observe(limits, "bfloat16", bf16_rate, f"the bf16 step at batch {bf16_top.batch}", threads=CEIL_THREADS)
every = f" ({bf16_mfu * SHARE:.1%} of the all-core one)" if SHARE < 1 and against == "float32" else ""
print(f"bf16 (timed at batch {', '.join(map(str, BENCH_PLAN.batches))}, as planned at the top), batch "
      f"{bf16_top.batch}: " + (throughput.model_share(limits, "bfloat16", bf16_mfu, CEIL_THREADS, "bf16 step", found) if against == "bfloat16" else
                               f"model FLOP/s {bf16_mfu:.1%} of the float32 ceiling {on}{every}: "
                               "autocast ran the matmuls in bfloat16, which this CPU emulates, so the step is "
                               "held against the roof of what the machine does without bf16")
      + f". Its counted FLOPs ran at {si(bf16_rate, 'FLOP/s')}, "
      + ("the rate of its ceiling now: " + obs.note.replace("than the sweep", "than " + (src.removesuffix(  # its setter
          sizing.AFTER_SWEEP) if (src := limits.sources.get("bfloat16, 1 thread" if SHARE < 1 else "bfloat16", ""))
          .endswith(sizing.AFTER_SWEEP) else "the sweep")) + ", so it is no measure of its utilisation" if obs.raised else
         throughput.own_ceiling_note(limits, "bfloat16", bf16_rate, CEIL_THREADS, "bf16 step", found, f"batch {bf16_top.batch}")) + "." + throughput.model_rate_note(
          bf16_top, bf16_per_sample * bf16_top.batch, obs.limits.peak_flops("bfloat16", CEIL_THREADS), f"the bfloat16 ceiling {on}",
          6 * n_flat * bf16_top.tokens_per_step))  # the 6N charge on the biases and norms, in no matmul
limits = obs.limits  # the ceilings from here on, with the one this step raised
vc.plot_throughput(bench.points)
plt.show()

# %% [markdown]
# "Flattens" leaves out two costs that grow faster than the batch, and a model can count both.
# A step at batch `b` takes `T(b) = F + R(b) / eta + n(b) c` (`compute.measure_batch_curve`). `R(b)`: the
# step's operators each at its roof, `max(FLOPs / peak, bytes / bandwidth)`, counted at batch `b`.
# With the cache, an op whose counted bytes are at most twice the largest copy buffer notebook 00's
# sweep saw served by the cache (the size notebook 00 printed, not the last-level cache the operating
# system reports, which a virtual machine's can be its host's) moves them at the cache's bandwidth and
# the others at DRAM's, each measured by notebook 00 on the threads these steps run on (section 2's
# roof; all cores' where it measured none there), beside the matmul ceiling of those threads. So
# `R(b)` per token rises when the big ops' activations pass that size (each batch's line prints how
# many ops per step do); without the cache, every op at DRAM's. A count cannot tell
# which one the hardware does (a producer may have evicted an op's input, a prefetcher may hide
# DRAM), so the model takes both ends. `n(b)`: the minor page faults of each timed step, counted
# (`getrusage`): glibc hands freed memory back to the operating system once the free space at
# the top of its heap passes a threshold, and the next step's new tensors fault it in again,
# page by page (section 2 met the same cost for one tensor). `c`: a fault's cost, section 2's
# figure (a new tensor's extra time over its counted faults, the median of its rounds, with their
# interval), so that one figure of it serves the notebook; where section 2's tensors took no fault
# at their size, it is probed in each round instead (fresh memory touched against touched again).
# `F`: the per-step cost that does not grow with
# the batch (optimizer, Python, dispatch), read off a step of 2 tokens as its time less its `R`.
# `eta`, the share of their roofs the ops reach, is the one figure fitted, on the batch next to
# the largest; the model then gives the largest batch's tokens/s over the best of the others'.
# That is no forecast made before the measurement: the fitted batch is often that best other, the
# ratio's own denominator, and `n(b)` is counted in the very steps it judges, so this verdict
# checks whether the terms account for the ratio, while the crude model's is the forecast.
# Each batch's printed range is the model at the point values of `F` and `c`, between the two
# ends of `R`; the verdict's range on the ratio adds the intervals of `F`, `c` and the fitted
# batch's time, and no margin beyond them. That range is the model's expectation, not a
# bound: the verdict misses it only when the whole interval lies outside. Each batch is judged
# the same way, with its measured interval: inside its range, outside it, or at its edge where the
# interval reaches across one. Within the model, a batch outside its range reached another share of
# its roofs than the fitted one (`eta` is one number for every batch, a simplification the next
# cell counts against), and the verdict names the terms.

# %%
FIT = BATCHES[-2]
tokens = lambda b, t: torch.randint(0, 1024, (b, t), device=DEVICE)  # (b, t) ids, their own targets
curve = compute.measure_batch_curve(lambda b, t: ex.gpt_step(GPT, tokens(b, t)), BATCHES, SEQ, limits, fit=FIT,
                                    rounds=REPEAT, threads=THREADS, device=DEVICE,
                                    fault_s=cost.fault_rounds() or None)  # section 2's c (None: probed here)
print("\n".join(curve.lines()))
print(f"c = {si(curve.fault_cost.value, 's')} per page fault: " + (
    "section 2's figure" if cost.fault_rounds() else "probed in these rounds (section 2's tensors took no fault)"))
placed = {k: [b for i, b in enumerate(curve.batches) if i != curve.fit and curve.placement(i) == k]
          for k in ("inside", "outside", "at the edge")}  # each batch judged with its measured interval
others = len(curve.batches) - 1
print(f"of the {others} batches eta was not fitted on, judged with their measured intervals against their printed "
      "ranges: " + "; ".join(f"{len(v)} {k}" + (f" ({', '.join(map(str, v))})" if v else "") for k, v in placed.items())
      + (": one eta does not describe every batch's ops on this machine" if placed["outside"] else ""))
ratio, lo, hi = curve.predicted_ratio()
print(f"batch {BATCHES[-1]} over the best other batch: the refined model gives {lo:.2f}x to {hi:.2f}x ({ratio:.2f}x with the cache);"
      f" without the page faults {curve.predicted_ratio(faults=False)[0]:.2f}x with the cache; the crude model, "
      "'flattens within 10 %', says at least 0.90x")

# %%
sweep = {p.batch: p for p in bench.points if p.precision == "fp32" and not p.compiled}  # the sweep's, beside
viz.verdict(Prediction(f"fp32 tokens/s at batch {BATCHES[-1]} over batch {BATCHES[0]}",
                       "per-step costs spread over more tokens", low=1.0, unit="x"),
            curve.gain(-1, 0), explain={"below": curve.explain()["held"]})
print(throughput.sweep_beside_curve(sweep, curve, 0, 1.0, "the verdict's"))
viz.verdict(Prediction(f"fp32 tokens/s at batch {BATCHES[-1]} over the best other ({curve.batches[curve.rival()]})",
                       "the crude model: throughput flattens, within 10 %", low=0.9, unit="x", soft=("low",)),
            curve.gain(-1, curve.rival()), explain={
    k: ex.hidden_side(curve.gain(-1, curve.rival()).value, 0.9, "x") + "The refined model's terms: "
       f"{curve.explain()['held'][0].lower()}{curve.explain()['held'][1:]}" for k in ("below", "held")})
print(throughput.sweep_beside_curve(sweep, curve, curve.rival(), 0.9))  # the same ratio in the sweep's rounds
refined_v = judge(Prediction(f"fp32 tokens/s at batch {BATCHES[-1]} over the best other ({curve.batches[curve.rival()]})",
                            f"F + R(b)/eta + n(b)c, eta fitted at batch {FIT}" + (", the denominator's own batch: an "
                            "account, not a forecast" if curve.batches[curve.rival()] == FIT else "")
                            + f"; {len(placed['outside'])} of the {others} batches it was not fitted on measured "
                            f"outside their printed ranges, {len(placed['at the edge'])} at their edge",
                            low=lo, high=hi, unit="x", soft=("low", "high")),
                 curve.gain(-1, curve.rival()), explain=curve.explain())
viz.show_verdict(refined_v)  # its outcome goes to the headlines

# %%
top = max(bench.points, key=lambda p: p.mfu)
swept = max(q.n for q in limits.matmul_points if q.dtype == top.ceiling)  # notebook 00's largest size
print(ex.largest_mfu_text(top, swept, SHARE, THREADS, sizing.CORES))
at_batch = bench.measure("fp32", False, BATCH)  # measured above: the one fp32 share of this setting
# every cell that timed an fp32 step at batch BATCH, each in its own rounds beside other steps (ms)
timed = {"this sweep, beside every batch and bf16": at_batch.step.median_s * 1e3}
if AMP_BATCH == BATCH:
    timed["section 1, beside its bf16 copy and the autocast parts"] = amp.baseline.median_s * 1e3
sweep_x = None  # the compiled step's speedup in this sweep's rounds (ratio of medians, with its interval)
if step_rec is not None:
    timed["section 3, beside its compiled copy"] = step_rec.eager.median_s * 1e3
    comp_step = bench.measure("fp32", True, BATCH).step
    sweep_x, agree = compiling.compiled_elsewhere(step_rec, at_batch.step, comp_step)
    print(f"eager over compiled at batch {BATCH}: {step_x.point('x')} in section 3's rounds (median of paired "
          f"ratios), {sweep_x.text('x')} in this sweep's (each setting's steps took turns with every other "
          "setting's, so its two steps are not paired). From section 3 to this sweep "
          + ex.drift_text({"eager": step_rec.eager, "compiled": step_rec.compiled},
                          {"eager": at_batch.step, "compiled": comp_step}) + agree)
if PAD_PRECISION == "fp32":
    timed[f"section 5, with vocabulary {V} (not 1024), beside the padded {VP}"] = pad.baseline.median_s * 1e3
if BATCH in curve.batches:
    timed["the batch curve, beside the other batches"] = curve.step_s(curve.batches.index(BATCH)).value * 1e3
print(f"fp32 at batch {BATCH}: model FLOP/s {at_batch.mfu:.1%} of the measured float32 matmul ceiling" + (
      f" on {THREADS} of {sizing.CORES} threads (that ceiling is {SHARE:.0%} of the all-core one; against the "
      f"all-core one, {at_batch.mfu * SHARE:.1%})" if SHARE < 1 else "") + ", not an MFU (no vendor peak), the "
      "figure the summary reports, from this sweep's step time")
print(f"the fp32 batch-{BATCH} step in this notebook: " + "; ".join(f"{k}: {v:.1f} ms" for k, v in timed.items())
      + f". They spread {max(timed.values()) / min(timed.values()):.2f}x" + throughput.cross_run_spread(
          {b: p.step.median_s for b, p in sweep.items()}, {b: curve.step_s(i).value for i, b in enumerate(curve.batches)})
      + ": each cell times its step in its own rounds, beside other steps and under the load of its own minutes (load average now "
      f"{os.getloadavg()[0]:.1f} on {sizing.CORES} cores), so each ratio in this notebook is taken inside one cell's "
      "rounds, never across cells.")

# %% [markdown]
# **The largest batch that fits.** Throughput grows with the batch until memory runs out. On a
# GPU the search is empirical: try a step, catch the out-of-memory error, free what it allocated,
# bisect (`budget.OOMProbe`). On a CPU that search cannot be relied on: PyTorch does raise a
# catchable `RuntimeError` when an allocation itself fails (under `ulimit -v`, or with Linux's
# overcommit off), but by default Linux overcommits, so the allocation succeeds and the process
# swaps or is killed by the out-of-memory killer later, when it touches the pages (as under a
# cgroup's memory limit). So here the budget applies to a count: model states (weights,
# gradients, AdamW's two
# moments: 4 + 4 + 8 = 16 bytes per fp32 parameter) plus the activations autograd saves, measured
# exactly per batch (`budget.BudgetProbe`).
# **Prediction:** bytes grow linearly in the batch, `states + b·per_sample`, so two probes predict
# the answer; the search (doubling, then bisection) measures it. Activations are linear in the
# batch for a transformer at fixed sequence length, so the two should differ by at most one
# (rounding). The count leaves out what a real limit would also have to hold: backward's
# transient gradient buffers and the allocator's overhead, so a process capped at this budget
# would fit a smaller batch than the count says.

# %%
mb = tiny_gpt2(block_size=SEQ, **GPT).to(DEVICE)
ids = lambda b: torch.randint(0, 1024, (b, SEQ), device=DEVICE)
probe = budget.BudgetProbe(mb, lambda b: mb(input_ids=ids(b), labels=ids(b)).loss, BUDGET)
probe(1), probe(2)
per_sample = probe.bytes[2] - probe.bytes[1]  # bytes per extra sample
predicted = 1 + (BUDGET - probe.bytes[1]) // per_sample  # bytes(b) = bytes(1) + (b - 1) * per_sample
search = budget.largest_batch(probe, limit=4096)
print(f"budget {BUDGET / 2**20:.0f} MiB: model states {probe.state_bytes / 2**20:.1f} MiB, "
      f"{per_sample / 2**20:.2f} MiB of activations per sample -> predicted largest batch {predicted}")
print(f"search: largest batch {search.best} after {len(search.trials)} probes "
      f"{[b for b, _ in search.trials]}; at it {probe.bytes[search.best] / 2**20:.1f} MiB")
viz.verdict(Prediction("largest batch found by the search minus the linear prediction",
                       "bytes(b) = states + b x per-sample activations", low=-1, high=1), search.best - predicted,
            explain={"above": "Bytes grow less than linearly: some saved tensor does not scale with the batch.",
                     "below": "Bytes grow more than linearly: some saved tensor grows faster than the batch."})

# %%
if DEVICE.type != "cuda":
    print("OOMProbe (try, catch torch.OutOfMemoryError, free, bisect) needs a GPU: skipped on CPU")
else:
    mg = tiny_gpt2(block_size=SEQ, **GPT).to(DEVICE)
    gstep = compute.make_train_step(mg, torch.optim.AdamW(mg.parameters()),
                                    lambda m, b: m(input_ids=b, labels=b).loss, "bf16")
    oom = budget.OOMProbe(lambda b: gstep(ids(b)), budget_bytes=BUDGET)
    gsearch = budget.largest_batch(oom, limit=1 << 14)
    print(f"GPU: largest batch {gsearch.best} within {BUDGET / 2**30:.0f} GiB "
          f"(peak {oom.bytes[gsearch.best] / 2**30:.2f} GiB)")

# %% [markdown]
# ## 7. Try it: precision, compile and batch size
#
# Each setting runs a few real training steps of the tiny GPT-2 the first time it is chosen
# (switching `torch.compile` on compiles the model: seconds to minutes on a CPU with a cold cache);
# settings already measured, including those of section 6, come back instantly. A static plot
# of the default setting follows for readers of the rendered page (run headless, as in CI, the
# widget cell itself shows that figure, once).

# %%
# NBVAL_IGNORE_OUTPUT
spec = vc.compute_widget(bench, batches=BATCHES, batch=BATCH)
viz.build_widget(spec)

# %%
if os.environ.get(viz.HEADLESS_ENV) != "1":  # headless (CI, the book), the widget cell already drew it
    spec.fn(**spec.defaults())
    plt.show()

# %% [markdown]
# ## Summary
#
# * **bf16 autocast**: the mean loss over the last steps should stay within 1 % of fp32's (single
#   steps differ more), and Amdahl's law models the speed from the share and the speed ratio of
#   the ops autocast changes, assuming the rest of the step keeps its speed: section 1's first
#   verdict tests a forecast from notebook 00's square matmuls, its second how the step divides
#   into those parts at its own shapes, and the time outside them tests the premise; the headlines
#   below say which held and what that time measured.
# * **Fusion** removes memory traffic and, on a CPU, the page faults of every new intermediate
#   tensor above the allocator's mmap threshold (section 2 measured whether there were any at its
#   size); `torch.compile` generates the fused kernel, at a compile cost that must be amortised.
# * **Fused attention** never stores the `T x T` matrices (quadratic memory); its time advantage
#   grows with `T` (section 4 does not split that growth between their traffic and the page faults of
#   tensors that large).
# * **Shapes**: on tensor cores, fp16/bf16 matmuls whose dimensions are multiples of 8 run faster
#   (NVIDIA's matrix multiplication performance guide); here section 5 measured what widths off
#   the vector grid cost one matmul and whether padding the vocabulary pays at the step level: the
#   headline below says what it resolved.
# * **MFU** puts every number on one scale: model FLOPs per second over the vendor's peak. With
#   no trusted peak here, section 6 divides by the ceiling measured on the threads the step ran on
#   (and prints the all-core share beside it): a share of a measured ceiling, not an MFU.
# * **Batch size** spreads per-step costs over more tokens; past some size, activations that
#   outgrow the cache and memory the allocator hands back (to fault in again every step) can
#   cost more per token; section 6 counts both terms at each batch (ops past the cache, page
#   faults per step); its verdicts judge the largest batch against the smallest and the best other in
#   the batch curve's paired rounds, and the headlines below say how many batches the refined model's one
#   fitted `eta` missed out of sample.

# %%
viz.show_headlines({
    f"bf16 step, fp32's time over bf16's (batch {AMP_BATCH}; below 1x: bf16 slower)": ex.ratio_text(amp),
    "bf16 step by Amdahl's law (section 1's verdicts)": parts.summary(acct, fc),
    "GELU chain compiled (section 2's verdict)": f"{fused_x.text('x')} against {fused_v.prediction.value:.2f}x "
    f"predicted (bytes and page faults): {fused_v.outcome}; compile {rec.compile_s:.1f} s",
    f"SDPA vs naive at T={ATTN_T[-1]}": f"{r_long:.2f}x, ratio of medians" + (" (disturbed: not evidence)" * bool(jump)),
    "model FLOP/s over the measured matmul ceiling (section 6; not an MFU: no vendor peak)": (
        f"on {THREADS} of {sizing.CORES} threads, against the ceilings on them ({SHARE:.0%} of the all-core fp32 "
        "one): " if SHARE < 1 else "") + f"fp32 batch {BATCH}: {at_batch.mfu:.1%} of the measured fp32 ceiling"
    + (f" ({at_batch.mfu * SHARE:.1%} of the all-core one)" if SHARE < 1 else "") + f"; bf16 batch {bf16_top.batch}: "
    + (throughput.model_share(limits, "bfloat16", bf16_top.mfu, CEIL_THREADS, "bf16 step", found).removeprefix("model FLOP/s ") if bf16_top.ceiling == "bfloat16" else
       f"{bf16_top.mfu:.1%} of the float32 ceiling (emulated bf16)"),
    "refined batch model (section 6)": f"batch {BATCHES[-1]} over the best other, {refined_v.prediction.low:.2f}x to "
    f"{refined_v.prediction.high:.2f}x predicted: {refined_v.outcome}; of the {others} batches eta was not fitted on, "
    "against their printed ranges, judged with their intervals: " + curve.out_of_sample(),
    "shapes on this machine (section 5)": "; ".join(
        f"{what}: " + {"above": "faster", "below": "slower"}.get(est.clear_of(1.0, "x"), "no difference resolved")
        + f", {est.text('x')}" for what, est in (
            ("odd widths over multiples of 64", odd_vs_64), ("odd over off-grid even widths", par),
            (f"the step with its vocabulary padded to {VP}", pad.estimate))),
    f"largest batch whose counted bytes fit {BUDGET / 2**20:.0f} MiB": str(search.best),
    **({"GPT-2 step compiled (section 3's rounds)": f"{step_x.point('x')} ({step_x.describe('x')}), compile "
        f"{step_rec.compile_s:.1f} s" + (f"; section 6's sweep: {sweep_x.text('x')}" if sweep_x else "")}
       if step_rec else {}),
})
