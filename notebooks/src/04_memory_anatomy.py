# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Memory anatomy: where the bytes of a training step go
#
# A model that "does not fit" rarely fails because of its weights alone. One training step
# with Adam holds four kinds of memory:
#
# | kind | what | fp32 bytes per parameter |
# |---|---|---|
# | parameters | the weights | 4 |
# | gradients | one per weight, written by `backward()` | 4 |
# | optimizer state | Adam's momentum and variance | 8 |
# | activations | what the forward pass saves for the backward pass | depends on batch x sequence |
#
# The first three are the **model states** (ZeRO's name, notebook 05); they scale with the
# number of parameters Ψ. Activations scale with batch and sequence length and, for long
# sequences, dominate. This notebook
#
# 1. predicts the memory of one step of a tiny GPT-2 from formulas, then **measures** it
#    (tensor accounting and the process's peak memory on CPU, the CUDA allocator on a GPU);
# 2. counts **exactly what autograd saves** with `saved_tensors_hooks`
#    (`perfkit.memory.SavedTensorMeter`) and checks the per-operation activation model;
# 3. measures **activation checkpointing**: bytes saved against time paid, per block with
#    `torch.utils.checkpoint` and with transformers' own switch;
# 4. measures what **mixed precision** does to activation memory;
# 5. gives a **widget** over the model, beside the tensors counted and the peak measured here.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
MODEL = dict(vocab_size=1024, block_size=64, n_embd=64, n_layer=2, n_head=2)  # the widget's default
BATCH, SEQ = 8, 64                    # sequences per step, tokens per sequence
REPEAT = 8 if QUICK else 32           # timed steps per variant (balanced rounds: a multiple of 4)

# %%
import matplotlib.pyplot as plt
import psutil
import torch

from perfkit import stats, timing, viz
from perfkit.memory import (
    CHECKPOINTING,
    activations,
    blocks_forward,
    gpt2_saved_activation_bytes,
    gpt2_step_memory,
    gpt2_variant,
    measure_saved,
    measure_step_anatomy,
    steady_peak_text,
    train_step,
)
from perfkit.verdict import Prediction
from perfkit.viz import memory as vmem

DEVICE = timing.resolve_device()
RAM = psutil.virtual_memory().total if DEVICE.type == "cpu" else torch.cuda.get_device_properties(0).total_memory
print(f"torch {torch.__version__} on {DEVICE}; memory limit of this device: {viz.si(RAM, 'B')}")

# %% [markdown]
# ## 1. One training step, predicted and measured
#
# **Question.** How many bytes does one AdamW step of the tiny GPT-2 need, and which kind
# dominates?
#
# **Prediction.** `perfkit.memory.gpt2_step_memory` adds the model states (Ψ parameters x
# (4 + 4 + 8) bytes in fp32) and the activations from a per-operation count of what a
# transformers GPT-2 block saves (section 2 checks that count): about 30 C floats per token
# in each block (its GELU is a Python composition that saves three intermediate tensors besides its input), and outside the blocks the logits' log-softmax, V floats per token.

# %%
B, T, C, L, H, V = BATCH, SEQ, MODEL["n_embd"], MODEL["n_layer"], MODEL["n_head"], MODEL["vocab_size"]
predicted = gpt2_step_memory(C, L, H, V, B, T, precision="fp32")
psi = activations.gpt2_num_params(C, L, V, MODEL["block_size"])
logsoftmax = B * T * V * 4  # bytes: one fp32 value per token and vocabulary entry
print(f"Ψ = {psi:,} parameters; " + ", ".join(f"{k} {b / 1e6:.2f} MB" for k, b in predicted.items() if b)
      + f"; sum {sum(predicted.values()) / 1e6:.2f} MB")
print(f"the log-softmax alone: {logsoftmax / 1e6:.2f} MB = {logsoftmax / predicted['activations']:.0%} "
      f"of the activations")
p_tensors = Prediction("bytes of live tensors in one step (all four kinds)",
                       "Ψ x (4 + 4 + 8) B + the per-operation activation count",
                       value=sum(predicted.values()), rel_tol=0.01, unit=" B")

# %% [markdown]
# **Measurement.** `perfkit.memory.measure_step_anatomy` runs one step (zero_grad, forward,
# backward, `optimizer.step()` of a fresh AdamW, so its state is allocated inside the step)
# and reports each kind by counting the live tensors' storages, plus the step's **peak**:
# on a GPU the CUDA allocator's `max_memory_allocated` (the tensors' bytes; running out of
# memory is decided by more: the allocator's reserved memory, `max_memory_reserved`, which
# adds its blocks' rounding and fragmentation, plus the CUDA context and library workspaces
# outside the allocator, so a GPU job is sized by those); on the CPU the process's peak
# resident set size (RSS: the bytes of its pages held in physical memory; Linux lets a
# process reset that mark), after handing freed heap blocks
# back to the OS so that reused blocks do not hide new allocations. A first step with a
# throw-away optimizer runs before, so one-time initialisation is not counted. On a GPU it
# also writes a memory snapshot that opens in https://pytorch.org/memory_viz. The four kinds
# are counts of the very tensors the formulas describe (the activations through the meter of
# section 2), so the verdict below checks the bookkeeping: a library version that keeps other
# tensors breaks it. The peak, after it, is the measurement no formula here was fitted to.

# %%
model = gpt2_variant(MODEL, device=DEVICE)
x = torch.randint(0, V, (B, T), device=DEVICE)            # (B, T) token ids
loss_fn = lambda: model(input_ids=x, labels=x).loss
measure_step_anatomy(model, loss_fn, torch.optim.AdamW(model.parameters()))  # warm-up
snapshot = "build/04_memory_snapshot.pickle" if DEVICE.type == "cuda" else None
os.makedirs("build", exist_ok=True) if snapshot else None  # only a GPU writes a snapshot
opt = torch.optim.AdamW(model.parameters())  # fresh: its state is allocated inside the step measured
anatomy = measure_step_anatomy(model, loss_fn, opt, snapshot_path=snapshot)
steady = measure_step_anatomy(model, loss_fn, opt)  # step 2: Adam's state held before it starts (section 1's peak)
measured = {"parameters": anatomy.params, "gradients": anatomy.grads,
            "optimizer state": anatomy.optimizer_state, "activations": anatomy.activations}
for kind, b in measured.items():
    print(f"{kind:>16}: measured {b / 1e6:8.2f} MB, predicted {predicted[kind] / 1e6:8.2f} MB")
if anatomy.snapshot_path:
    print("memory snapshot:", anatomy.snapshot_path)

# %%
fig = vmem.plot_memory_stack({
    "predicted": predicted,
    "measured (tensors)": measured,
    # the parameters (and, on the second step, AdamW's state) were held before the step: its peak above its start stacks on them
    "peak, first step": {"parameters": anatomy.params, "peak above the step's start": anatomy.peak},
    "peak, second (steady) step": {"parameters": anatomy.params, "optimizer state": steady.optimizer_state, "peak above the step's start": steady.peak},
}, title="One AdamW step of the tiny GPT-2 (gray: each step's peak above its start)")

# %%
extra = anatomy.optimizer_state - predicted["optimizer state"]
n_tensors = len(list(model.parameters()))
print(f"optimizer state: {extra:,.0f} bytes more than 8 Ψ = {extra / n_tensors:g} B for each of the "
      f"{n_tensors} parameter tensors: AdamW keeps a 'step' counter per tensor")
off = {k: measured[k] - predicted[k] for k in measured if measured[k] != predicted[k]}
differ = ("The kinds that differ: " + ", ".join(f"{k} by {d:+,.0f} B" for k, d in off.items()) + "."
          if off else "Every kind matches to the byte.")
viz.verdict(p_tensors, sum(measured.values()), explain=dict.fromkeys(("held", "above", "below"), differ))

# %% [markdown]
# **The peak.** The four kinds are counts of bytes; the *peak* is another matter, and two
# effects pull it in opposite directions. The kinds do not all live at once: activations
# are freed during `backward()` while gradients are written, and on this first step of a fresh
# AdamW its state is allocated after the activations are gone; that puts the peak *below* their
# sum. But `backward()` allocates temporaries (the gradient of the logits is as large as the
# logits) and, on the CPU, the resident set also counts whole pages and allocator bookkeeping;
# that pushes it *above*. The first step is not the one a trainer repeats: AdamW allocates its
# state at its first `step()` and keeps it, so on every later step the state is already held
# through forward and backward. A second step with the same optimizer measures that steady
# peak (counted above the parameters, as the first one's is). No model here sizes these
# effects, so these are measurements, not a test of one. On the CPU the peak is the kernel's
# `VmHWM` counter, which proc(5) calls inaccurate: the kernel sums its per-CPU counts of
# resident pages lazily (`/proc/self/smaps_rollup` is exact, but keeps no peak), so a difference
# of a few tenths of a MB between two peaks below may be the counter's, not the step's:

# %%
held = anatomy.grads + anatomy.optimizer_state + anatomy.activations  # new during the step, bytes
print(f"first step (a fresh AdamW), peak above what was held before it ({anatomy.peak_source}): "
      f"{anatomy.peak / 1e6:.2f} MB = {anatomy.peak / RAM:.3%} of this device's memory; gradients + optimizer state + "
      f"activations = {held / 1e6:.2f} MB, so the peak is {anatomy.peak / held:.2f}x their sum: "
      + ("the temporaries and the allocator's pages outweigh what is freed before the peak."
         if anatomy.peak > held else "what is freed before the peak outweighs the temporaries."))
print(steady_peak_text(anatomy, steady))  # steady: the second step, measured in section 1's first cell

# %% [markdown]
# ## 2. What exactly does autograd keep?
#
# **Question.** Which tensors does the forward pass keep alive for the backward pass?
#
# **Prediction.** Per GPT-2 block (dropout 0), in elements, with B, T, C, H = batch, sequence,
# width, heads (the docstring of `gpt2_saved_activation_bytes` lists each operation): the two
# LayerNorms keep their inputs (2 BTC) and a mean and a reciprocal deviation per token (4 BT),
# and the matmuls after them keep the LayerNorms' outputs as their own inputs (2 BTC); the MLP keeps `c_fc`'s 4C-wide output (GELU's input), GELU's intermediate terms and output (20 BTC);
# `c_proj` keeps the attention output (BTC); attention itself keeps q, k, v and the softmax
# probabilities (3 BTC + B H T^2) in the eager implementation, or the fused projection,
# copies and a log-sum-exp (5 BTC + BHT; the log of each query row's softmax
# denominator, all the backward needs to rebuild the probabilities) with PyTorch's fused `scaled_dot_product_attention`,
# which never stores the T x T matrix. In all, 28 BTC + B H T^2 (eager) or 30 BTC + BHT
# (fused) per block, plus the 4 BT. 20 of those BTC are the MLP's, because transformers'
# GPT-2 GELU (`gelu_new`) is a Python composition that saves its `tanh`, `1 + tanh` and
# `0.5 x` terms; a fused GELU saves only its input, and Megatron-LM's count (Korthikanti et
# al., 2022: 34 bytes per token and hidden unit in 16 bits, dropout masks included) comes to
# about 16 C values per token and block without dropout.
#
# The model is exact (bytes are counted, not estimated), so the prediction is that the meter
# and the model agree to the byte at every shape.
#
# **Measurement.** `SavedTensorMeter` installs `torch.autograd.graph.saved_tensors_hooks`:
# every tensor an operation saves passes through its pack hook. Views share storage (q, k
# and v are slices of one projection), so bytes are counted per unique storage; parameters
# (a matmul saves its weight) are reported apart, since they exist anyway.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
meter_vs_model = []
for attention in ("eager", "sdpa"):
    for seq in (SEQ, 256):
        r = measure_saved(gpt2_variant(MODEL, seq=seq, attention=attention), torch.randint(0, V, (B, seq)))
        model_b = gpt2_saved_activation_bytes(B, seq, C, L, H, V, attention).total
        meter_vs_model.append(abs(r.activation_bytes - model_b))
        print(f"{attention:>5}, T={seq:4d}: meter {r.activation_bytes:>10,} B, model {model_b:>10,} B, "
              f"parameters saved {r.parameter_bytes:,} B")

# %%
p_meter = Prediction("largest difference between meter and model over the four shapes",
                     "the per-operation count of gpt2_saved_activation_bytes", value=0, rel_tol=0, unit=" B")
viz.verdict(p_meter, max(meter_vs_model), explain={
    "above": "A transformers or PyTorch version that saves other tensors changes the count: "
             "compare the meter's per-dtype split with the model's terms."})

# %% [markdown]
# In the model, the eager implementation's B·H·T² softmax term grows with the square of the
# sequence length; the fused kernel never stores it (it recomputes attention scores in the
# backward pass), so its activation memory is linear in T. The unit tests check the same
# identity at more shapes and dtypes.
#
# ## 3. Activation checkpointing: memory for time
#
# **Question.** How much activation memory does checkpointing each block save, and what
# does it cost in step time? A "step" in this section is `perfkit.memory.train_step`: forward
# and backward, without the optimizer's update, which checkpointing leaves unchanged (a full
# training step adds that update to both sides, so its ratio lies closer to 1).
#
# **Prediction, memory.** With a checkpoint per block, the forward pass keeps only each
# block's input (BTC elements per block) and the parts outside the blocks.
#
# **Measurement.** Three models with the same weights: plain; each block wrapped in
# `torch.utils.checkpoint` by `perfkit.memory.checkpoint_blocks`; and transformers' own
# switch (`activation_checkpointing_enable()`, called `gradient_checkpointing_enable()`
# before transformers 5). The meter counts what each forward pass leaves saved for the
# backward pass. It runs the backward too, but the blocks' recompute there saves its tensors
# through checkpoint's own `saved_tensors_hooks`, which take precedence over the meter's, so
# the meter does not see them: those are sized from the model below.

# %%
models_ck = {k: gpt2_variant(MODEL, checkpointing=k, device=DEVICE) for k in CHECKPOINTING}
saved = {k: measure_saved(m, x, backward=True).activation_bytes for k, m in models_ck.items()}
pred_ck = gpt2_saved_activation_bytes(B, T, C, L, H, V, checkpointing=True)
pred_full = gpt2_saved_activation_bytes(B, T, C, L, H, V)
print(f"predicted: {pred_full.total / 1e6:.2f} MB without, {pred_ck.total / 1e6:.2f} MB with checkpointing")
for k, b in saved.items():
    print(f"{k:>34}: {b / 1e6:.2f} MB saved for backward ({b / saved['none']:.0%} of none)")
p_ck_mem = Prediction("bytes saved for backward with a checkpoint per block",
                      "block inputs + what lies outside the blocks", value=pred_ck.total, rel_tol=0.01, unit=" B")
viz.verdict(p_ck_mem, saved[CHECKPOINTING[1]], explain={
    "held": f"What lies outside the blocks is now {pred_ck.outside_layers / pred_ck.total:.0%} of it, "
            f"the log-softmax alone {logsoftmax / pred_ck.total:.0%}."})
per_block = (pred_full.total - pred_full.outside_layers) / L  # bytes one block saves without checkpointing
ck_peak = pred_ck.total + pred_ck.recompute_peak  # bytes: the backward's peak of saved activations, model
print(f"That is what the forward pass leaves. The backward pass first frees what lies outside the blocks (it "
      f"runs the loss, the log-softmax and the final LayerNorm first; autograd frees a node's saved tensors once "
      f"it has run), then rebuilds one block at a time with all its activations ({per_block / 1e6:.2f} MB per "
      f"block, from the model; its input, already held, among them), so saved activations peak near {ck_peak / 1e6:.2f} MB, "
      f"{ck_peak / pred_full.total:.0%} of none (Chen et al., 2016: the checkpoints plus one segment)"
      + (": at this size the forward's end is the peak." if pred_ck.recompute_peak == 0 else "."))

# %% [markdown]
# **Prediction, time.** The backward pass runs each block's forward again. Counted in FLOPs,
# a block's forward is a third of its forward + backward (the backward does two matmuls per
# forward matmul), so in FLOPs the checkpointed step is at most 4/3 of the plain one; less
# here, where the tied output layer, which is not recomputed, holds a large share of this small
# model's FLOPs (its figure is printed with the measurement). That is a count of FLOPs, not a
# bound on time: at 64 wide time need not follow FLOPs (each operator's fixed cost and memory traffic weigh as
# much as its matmul), so the model here uses time: the recompute costs what the blocks'
# forward costs, timed alone (autograd recording, as in the recompute). The checkpointed
# step should take **at least the plain step plus the blocks' forward**: a floor, where the
# FLOP rule's 4/3 is a ceiling that holds only where time follows FLOPs (both are printed). On top of it comes
# `torch.utils.checkpoint`'s bookkeeping, a Python hook for every tensor a block saves (in
# the forward, and twice in the backward: the recompute stores it, the backward fetches it);
# the model does not size it; the measurement shows only the total beyond the recompute.
# The two checkpointing variants do the same work (`perfkit.memory.gpt2_variant` asks
# transformers' switch for `torch.utils.checkpoint` with `use_reentrant=False`, as
# `checkpoint_blocks` uses it: transformers 5's default, where 4.x defaulted to the reentrant
# variant; the non-reentrant one recomputes through saved-tensor hooks inside the ordinary
# backward rather than by running a second, nested backward), so their times should agree
# within 10 %.
#
# **Measurement.** `perfkit.timing.interleaved` times the plain step, the blocks' forward
# alone and the two checkpointed steps in rounds (one of each per round, in a balanced order:
# over the rounds each runs in every position, and after each other one, equally often), so
# machine load and what one leaves in the caches hit all four alike; each ratio is the median
# of the paired rounds' ratios, with its interval (`perfkit.stats.median_ratio`: from the k-th
# smallest to the k-th largest ratio, for the largest k covering at least 90 %, its exact
# coverage printed with it).

# %%
p_ck_time = Prediction("checkpointed step over (plain step + the blocks' forward)",
                       "one more forward of every block, at its measured time", low=1.0, unit="x")
p_same = Prediction("transformers' switch over checkpoint per block (step time)",
                    "the same recompute through the same torch.utils.checkpoint", value=1.0, rel_tol=0.1, unit="x")
plain, ckpt, switch = (train_step(models_ck[k], x) for k in CHECKPOINTING)
t_plain, t_blocks, t_ckpt, t_switch = (m.times_s for m in timing.interleaved(
    [plain, blocks_forward(models_ck["none"], x), ckpt, switch], warmup=2, repeat=REPEAT, device=DEVICE,
    order="balanced"))
f_blocks = stats.median_ratio(t_blocks, t_plain)   # the recompute, in plain steps
slow = stats.median_ratio(t_ckpt, t_plain)         # checkpointed step, in plain steps
medians = stats.median(t_ckpt) / stats.median(t_plain)  # the same, as the ratio of the medians the figure draws
print(f"plain step: {stats.median(t_plain) * 1e3:.2f} ms (median of {REPEAT} rounds)")
share = activations.recompute_flop_share(C, L, V, T)  # the blocks' forward matmul FLOPs, in steps
print(f"the {L} blocks' forward alone: {f_blocks.point()} plain steps ({f_blocks.describe()}); their matmul FLOPs are "
      f"{share:.2f} of a step (at most 1/3; the output layer, not recomputed, holds {1 - 3 * share:.0%} of the forward's)")
print(f"checkpointed step: {slow.point()} plain steps ({slow.describe()})." + slow.beside(medians, judged=False)
      + activations.flop_rule_text(slow, f_blocks, share))

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
axes[0].barh(CHECKPOINTING, [saved[k] / 1e6 for k in CHECKPOINTING], color="tab:red")
axes[0].set_xlabel("MB saved for backward")
axes[1].barh(CHECKPOINTING, [stats.median(t) * 1e3 for t in (t_plain, t_ckpt, t_switch)], color="tab:blue")
axes[1].set(xlabel="ms per forward + backward (median; no optimizer step)", title=f"medians: checkpointed / plain {medians:.2f}x (paired ratios' median {slow.point('x')})")
for a in axes:
    a.invert_yaxis()
fig.tight_layout()

# %%
extra = slow.value - 1 - f_blocks.value   # beyond the recompute, in plain steps: printed to 3 decimals everywhere
flop_rule = ("exceeded." if slow.low > 4 / 3 else "not exceeded." if slow.high <= 4 / 3 else
             "neither clearly exceeded nor kept: the step's interval holds 4/3.")
viz.verdict(p_ck_time, stats.median_ratio(t_ckpt, [p + b for p, b in zip(t_plain, t_blocks)]), explain={
    "held": (f"By medians of paired ratios, of the {slow.value - 1:.3f} plain steps added, the recompute "
             f"accounts for {f_blocks.value:.3f}; "
             f"the other {extra:.3f} ({extra * stats.median(t_plain) * 1e3 / L:.2f} ms per block and step) is "
             "what the model leaves out and this run does not split up: checkpoint's hooks for every saved "
             "tensor, and the recompute running inside the backward pass instead of alone." if extra >= 0 else
             f"The blocks' forward timed alone ({f_blocks.value:.2f} plain steps) took more than the "
             f"{slow.value - 1:.2f} the checkpointed step added, by medians of paired ratios: this run leaves "
             "nothing beyond the recompute to explain.") + " The FLOP count's 4/3 was " + flop_rule,
    "below": f"The checkpointed step added {slow.value - 1:.2f} plain steps, less than the {f_blocks.value:.2f} "
             "the blocks' forward took alone: the recompute inside the backward pass ran faster than "
             "the same blocks called on their own."})
same = stats.median_ratio(t_switch, t_ckpt)
gap = (f"Its interval excludes 1: the switch's step was {abs(same.value - 1):.1%} "
       + ("faster" if same.value < 1 else "slower") + " here (the rounds ran the four in a balanced order, "
       "each in every position alike, so not by its place in the round); this run does not measure its cause."
       if same.clear_of(1.0, "x")
       else "Its interval holds 1.") + same.beside(stats.median(t_switch) / stats.median(t_ckpt))
viz.verdict(p_same, same, explain={"held": gap, "above": gap, "below": gap})

# %% [markdown]
# ## 4. Mixed precision and activation memory
#
# **Question.** Does computing in bfloat16 halve the activation memory?
#
# **Prediction.** If every saved tensor were 2 bytes instead of 4, yes. A model converted
# to bfloat16 as a whole comes close, except where transformers upcasts: it computes the
# loss's log-softmax in fp32. The count with `dtype_bytes=2` includes that upcast, and the
# converted model should match it within 2 %. `torch.autocast` is different: it runs
# matmuls in bfloat16 and leaves most other operators in their input's dtype. (On CUDA it also
# casts LayerNorm, softmax and log-softmax to fp32; CPU autocast's fp32 list holds neither
# LayerNorm nor log-softmax: it lists pooling, padding, linear-algebra and FFT operators and
# nearly all the losses, cross-entropy among them.)
# Here that still keeps much in fp32: the residual stream starts as the fp32 embeddings, and a
# bfloat16 matmul's output added to it is promoted to fp32, so each LayerNorm reads, and saves,
# an fp32 input; and transformers upcasts the logits to fp32 before the loss's log-softmax.
# Autocast also casts each matmul's fp32 weight to bfloat16 and caches the copy for the rest of
# the forward pass: 2 bytes per value of the weights it casts, so at most half the fp32 weights'
# bytes. A matmul saves its weight for the backward, and under autocast that is the copy, a
# storage of its own: the meter reports apart only the model's own parameters, so it counts the
# copies with the activations, and names their bytes (`parameter_copy_bytes`). Every other saved
# tensor takes 2 or 4 bytes per value where fp32 takes 4, so autocast's saved bytes should lie
# between half of fp32's and all of them plus the copies: at most `2Ψ` bytes more (every weight
# cast), an upper edge of `1 + 2Ψ / A` of fp32's, with `A` the count of fp32's saved bytes above.
#
# **Measurement.** The meter, with the saved bytes split by dtype.

# %%
ids = torch.randint(0, V, (B, SEQ))
rows = {"fp32": measure_saved(gpt2_variant(MODEL), ids),
        "bf16 model": measure_saved(gpt2_variant(MODEL, dtype=torch.bfloat16), ids),
        "fp32 + autocast(bf16)": measure_saved(gpt2_variant(MODEL), ids, autocast=True)}
pred16 = gpt2_saved_activation_bytes(B, T, C, L, H, V, dtype_bytes=2).total
print(f"model: fp32 {pred_full.total / 1e6:.2f} MB, all-16-bit {pred16 / 1e6:.2f} MB")
for k, r in rows.items():
    parts = ", ".join(f"{d} {b / 1e6:.2f}" for d, b in sorted(r.activation_bytes_by_dtype.items()))
    print(f"{k:>22}: {r.activation_bytes / 1e6:.2f} MB ({parts} MB); "
          f"{r.activation_bytes / rows['fp32'].activation_bytes:.0%} of fp32"
          + (f"; {r.parameter_copy_bytes / 1e6:.2f} MB of it are bfloat16 copies of weights, not activations"
             if r.parameter_copy_bytes else ""))

# %%
fp32_in = {k: r.activation_bytes_by_dtype.get("float32", 0) / 1e6 for k, r in rows.items()}
copies = rows["fp32 + autocast(bf16)"].parameter_copy_bytes  # bytes: autocast's bf16 weights, saved by matmuls
fp32_weights = 4 * psi  # bytes
p_bf16 = Prediction("bytes saved for backward by the bfloat16 model", "the count with dtype_bytes=2",
                    value=pred16, rel_tol=0.02, unit=" B")
viz.verdict(p_bf16, rows["bf16 model"].activation_bytes, explain={
    "held": f"The count knows the {fp32_in['bf16 model']:.2f} MB that stay float32 even in the bfloat16 "
            f"model: transformers upcasts the logits to fp32 for the loss ({logsoftmax / 1e6:.2f} MB).",
    "above": f"{fp32_in['bf16 model']:.2f} MB of what the bfloat16 model saves is float32: compare the "
             "dtype split above with the count's terms."})
p_auto = Prediction("autocast's saved bytes as a share of fp32's", "matmuls in bf16, the rest in its input's "
                    "dtype (fp32 along the residual stream and the loss), plus bf16 weight copies of at most 2Ψ B",
                    low=0.5, high=1 + 2 * psi / pred_full.total)
viz.verdict(p_auto, rows["fp32 + autocast(bf16)"].activation_bytes / rows["fp32"].activation_bytes, explain={
    "held": f"Between the two: autocast keeps {fp32_in['fp32 + autocast(bf16)']:.2f} MB in float32, "
            f"{fp32_in['fp32 + autocast(bf16)'] - fp32_in['bf16 model']:.2f} MB more than the bfloat16 model; "
            f"its bfloat16 bytes include {copies / 1e6:.2f} MB of weight copies ({copies / fp32_weights:.0%} of the "
            "fp32 weights' bytes), which the bfloat16 model saves as its parameters instead.",
    "above": "More than fp32's saved bytes plus a bfloat16 copy of every weight: autocast saved something the "
             "model leaves out (a value kept in both dtypes, say); compare the dtype split above with fp32's."})

# %% [markdown]
# **Model states.** Autocast does not shrink them at all: weights, gradients and Adam state
# stay fp32 (4 + 4 + 8 = 16 bytes per parameter). Mixed precision as the ZeRO paper defines
# it keeps 16-bit weights and gradients (2 + 2 bytes) and an fp32 master copy with momentum
# and variance (4 + 4 + 4 = 12 bytes): 2 + 2 + 12 = 16 bytes per parameter, as many
# model-state bytes as fp32 Adam. Recipes that accumulate the gradients in fp32 (Megatron-LM's
# main gradients) hold 2 + 4 + 12 = 18, more than fp32 Adam. Mixed precision saves activations and
# time, not model-state bytes. `perfkit.memory` counts fp32 Adam and the ZeRO paper's recipe alike:

# %%
# NBVAL_CHECK_OUTPUT
for recipe, kw in (("fp32_adam", "fp32"), ("mixed_adam", "mixed")):
    st = gpt2_step_memory(C, L, H, V, B, T, precision=kw)
    print(f"{recipe:>10}: parameters {st['parameters'] / psi:g} + gradients {st['gradients'] / psi:g} + "
          f"optimizer state {st['optimizer state'] / psi:g} = "
          f"{(st['parameters'] + st['gradients'] + st['optimizer state']) / psi:g} bytes per parameter")

# %% [markdown]
# ## 5. Widget: the model, checked against this machine
#
# Move width, depth, batch, sequence length, precision and checkpointing; the bar is the
# model of sections 1-4. At the default setting (the one measured in section 1) it also shows
# the live tensors counted there, the same tensors the model counts (a check of the
# bookkeeping), and the second (steady) step's measured peak (the parameters and the state
# held, plus the peak above the step's start, gray), the step a trainer repeats, which no
# formula here predicts: size a job by that peak (on a GPU, by the reserved peak plus the CUDA
# context, section 1). This device's memory is a
# dashed line when the bars come within reach of it, and a share in the title otherwise.

# %%
# NBVAL_IGNORE_OUTPUT
spec = vmem.memory_widget(vocab_size=V, n_head=H, measured=measured, limit_bytes=RAM, peak={"parameters": anatomy.params, "optimizer state": steady.optimizer_state, "peak above the step's start": steady.peak}, peak_label="second (steady) step's peak measured here")
viz.build_widget(spec)

# %%
viz.show_headlines({
    "measured step peak above the parameters (tiny GPT-2)": f"{viz.si(anatomy.peak, 'B')} on the first step, "
                                                            f"{viz.si(steady.peak + steady.optimizer_state, 'B')} on the second (the figure stacks each on the parameters' {viz.si(anatomy.params, 'B')})",
    "activations / model states": f"{anatomy.activations / (anatomy.params + anatomy.grads + anatomy.optimizer_state):.1f}x",
    "checkpointing: activation memory": f"{saved[CHECKPOINTING[1]] / saved['none']:.0%} of none after the forward, "
                                        f"about {ck_peak / pred_full.total:.0%} at the backward's peak (model)",
    "checkpointing: forward + backward time": f"{slow.text('x')}; the ratio of the medians {medians:.2f}x",
    "autocast bf16: saved bytes / fp32's": f"{(ac := rows['fp32 + autocast(bf16)'].activation_bytes) / (fp := rows['fp32'].activation_bytes):.0%}, activations alone {(ac - copies) / fp:.0%}",
})

# %% [markdown]
# **Takeaways.** Count before you optimize: parameters, gradients and Adam state are
# 4 + 4 + 8 bytes per parameter in fp32, activations are B x T x (28 C values per block with
# transformers' Python GELU and eager attention, 30 with the fused kernel; 12 fewer with a fused
# GELU), plus B x H x T² attention probabilities per block with eager attention (none with a
# fused kernel), plus the logits, and
# the meter tells you exactly. Mixed precision shrinks activations but not model states; notebook 05
# shards the model states across data-parallel ranks (ZeRO) and shrinks the trainable set
# (LoRA). What checkpointing traded here:

# %%
print(f"Checkpointing each block left {saved[CHECKPOINTING[1]] / saved['none']:.0%} of the saved activations "
      f"after the forward (about {ck_peak / pred_full.total:.0%} at the backward's peak, from the model) "
      + activations.checkpoint_cost_text(slow, stats.median_ratio(t_ckpt, [p + b for p, b in zip(t_plain, t_blocks)]),
                                         medians))
print(f"The FLOP rule (at most 4/3 = 1.33 plain steps, {1 + share:.2f} for this model's FLOPs, where time follows FLOPs) "
      + (f"was exceeded: the step took {slow.text('x')} plain steps. The recompute, the part the rule counts, took "
         f"{f_blocks.value:.3f} plain steps timed alone ({f_blocks.value / share:.1f}x its matmul FLOPs' {share:.2f}), "
         + ("within the rule's 1/3 (whole interval), so it was the "
         f"{extra:+.3f} beyond it (checkpoint's hooks, the recompute inside the backward; "
         "not split here) that carried the step past 4/3" if f_blocks.high <= 1 / 3 else "past the rule's 1/3 "
         "(whole interval): time does not follow FLOPs here" if f_blocks.low > 1 / 3 else "with an interval that "
         "holds the rule's 1/3") + "; time a checkpointed step rather than infer it from FLOPs."
         if slow.low > 4 / 3 else f"was not crossed here: the step took {slow.text('x')} plain steps."
         if slow.high <= 4 / 3 else f"cannot be judged from this run: the step took {slow.text('x')} plain steps."))

# %% [markdown]
# This ratio comes from a tiny model on CPU cores, where per-operator and per-hook costs weigh
# far more than at GPU widths, where the matmuls dominate a block's time. A published large run
# does not check the 4/3 rule either: Korthikanti et al. (2022, abstract) trained a 530B
# GPT-3-style model on 2,240 A100s at 42.1 % MFU (notebook 00: the model's FLOPs by formula per
# second, over the peak; recomputed FLOPs are not among them, so the MFU ratio is a step-time
# ratio) with full recomputation,
# and at 54.2 % with selective recomputation and sequence parallelism. The fully recomputed step
# took 54.2 / 42.1 = 1.29x as long as *that* step, which still recomputes part of each block and
# gains from sequence parallelism, not as long as a step without recomputation: the abstract
# gives no run without it, so 1.29x is not the rule's 4/3 measured. Their method recomputes
# only the attention part whose activations are large and cheap to recompute ("selective"
# recomputation).
