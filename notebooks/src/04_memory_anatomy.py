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
# 5. gives a **widget** over the model, checked against the point measured here.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
MODEL = dict(vocab_size=1024, block_size=64, n_embd=64, n_layer=2, n_head=2)  # the widget's default
BATCH, SEQ = 8, 64                    # sequences per step, tokens per sequence
REPEAT = 8 if QUICK else 30           # timed steps per variant (interleaved)
LONG_SEQ = 256 if QUICK else 512      # a longer sequence for the attention T^2 term

# %%
import matplotlib.pyplot as plt
import psutil
import torch

from perfkit import timing, viz
from perfkit.compute import Speedup
from perfkit.memory import (
    SavedTensorMeter,
    activations,
    gpt2_saved_activation_bytes,
    gpt2_step_memory,
    measure_step_anatomy,
)
from perfkit.models import tiny_gpt2
from perfkit.verdict import Prediction, busy, judge
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
# transformers GPT-2 block saves (section 2 checks that count). At this size the logits'
# log-softmax (batch x sequence x vocabulary floats) is a large share of the activations.

# %%
B, T, C, L, H, V = BATCH, SEQ, MODEL["n_embd"], MODEL["n_layer"], MODEL["n_head"], MODEL["vocab_size"]
predicted = gpt2_step_memory(C, L, H, V, B, T, precision="fp32")
psi = activations.gpt2_num_params(C, L, V, MODEL["block_size"])
print(f"Ψ = {psi:,} parameters")
for kind, b in predicted.items():
    print(f"{kind:>16}: {b / 1e6:8.2f} MB")
print(f"{'sum':>16}: {sum(predicted.values()) / 1e6:8.2f} MB")
p_tensors = Prediction("bytes of live tensors in one step (all four kinds)",
                       "Ψ x (4 + 4 + 8) B + the per-operation activation count",
                       value=sum(predicted.values()), rel_tol=0.01, unit=" B")

# %% [markdown]
# **Measurement.** `perfkit.memory.measure_step_anatomy` runs one step (zero_grad, forward,
# backward, `optimizer.step()` of a fresh AdamW, so its state is allocated inside the step)
# and reports each kind by counting the live tensors' storages, plus the step's **peak**:
# on a GPU the CUDA allocator's `max_memory_allocated`; on the CPU the process's peak
# resident memory (Linux lets a process reset that mark), after handing freed heap blocks
# back to the OS so that reused blocks do not hide new allocations. A first step with a
# throw-away optimizer runs before, so one-time initialisation is not counted. On a GPU it
# also writes a memory snapshot that opens in https://pytorch.org/memory_viz.

# %%
torch.manual_seed(0)
model = tiny_gpt2(**MODEL).to(DEVICE).train()
x = torch.randint(0, V, (B, T), device=DEVICE)            # (B, T) token ids
loss_fn = lambda: model(input_ids=x, labels=x).loss
measure_step_anatomy(model, loss_fn, torch.optim.AdamW(model.parameters()))  # warm-up
snapshot = None
if DEVICE.type == "cuda":
    os.makedirs("build", exist_ok=True)
    snapshot = "build/04_memory_snapshot.pickle"
anatomy = measure_step_anatomy(model, loss_fn, torch.optim.AdamW(model.parameters()),
                               snapshot_path=snapshot)
measured = {"parameters": anatomy.params, "gradients": anatomy.grads,
            "optimizer state": anatomy.optimizer_state, "activations": anatomy.activations}
for kind, b in measured.items():
    print(f"{kind:>16}: measured {b / 1e6:8.2f} MB, predicted {predicted[kind] / 1e6:8.2f} MB")
print(f"peak of the step above what was held before it ({anatomy.peak_source}): "
      f"{anatomy.peak / 1e6:.2f} MB = {anatomy.peak / RAM:.3%} of this device's memory")
if anatomy.snapshot_path:
    print("memory snapshot:", anatomy.snapshot_path)

# %%
fig = vmem.plot_memory_stack({
    "predicted": predicted,
    "measured (tensors)": measured,
    "measured peak of the step": {"other": anatomy.peak},
}, title="One AdamW step of the tiny GPT-2")

# %%
extra = anatomy.optimizer_state - predicted["optimizer state"]
held = anatomy.grads + anatomy.optimizer_state + anatomy.activations  # new during the step
n_tensors = len(list(model.parameters()))
print(f"optimizer state: {extra:,.0f} bytes more than 8 Ψ = {extra / n_tensors:g} B for each of the "
      f"{n_tensors} parameter tensors: AdamW keeps a 'step' counter per tensor")
off = {k: measured[k] - predicted[k] for k in measured if measured[k] != predicted[k]}
print(f"gradients + optimizer state + activations = {held / 1e6:.2f} MB; "
      f"the measured peak is {anatomy.peak / held:.2f}x that sum")
viz.show_verdict(judge(p_tensors, sum(measured.values()), explain={
    "held": "The kinds that differ: " + ", ".join(f"{k} by {d:+,.0f} B" for k, d in off.items()) + "."
            if off else "Every kind matches to the byte.",
    "above": "Look at the kind that differs in the table above.",
    "below": "Look at the kind that differs in the table above."}))


# %% [markdown]
# **The peak.** The four kinds are counts of bytes, not estimates; the *peak* is another
# matter. It is not the sum of the kinds, because they do not all live at once: activations are freed during `backward()` while gradients are being
# written, and Adam's state is allocated after the activations are gone. It is also not
# below the activations alone: `backward()` allocates temporaries (the gradient of the
# logits is as large as the logits) and, on the CPU, the resident set also counts whole
# pages and allocator bookkeeping. The printed ratio says which effect wins at this size.

# %% [markdown]
# ## 2. What exactly does autograd keep?
#
# **Question.** Which tensors does the forward pass keep alive for the backward pass?
#
# **Prediction.** Per GPT-2 block (dropout 0), in elements, with B, T, C, H = batch, sequence,
# width, heads (the docstring of `gpt2_saved_activation_bytes` lists each operation): two
# LayerNorms keep input and output (4 BTC); the MLP keeps its 4C-wide input, GELU's
# intermediate terms and output (20 BTC); attention keeps q, k, v and the softmax
# probabilities (3 BTC + B H T^2) in the eager implementation, or the fused projection,
# copies and a log-sum-exp (5 BTC + BHT) with PyTorch's fused `scaled_dot_product_attention`,
# which never stores the T x T matrix.
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
def saved_bytes(attention, seq, model_kw=MODEL, dtype=torch.float32, autocast=False):
    torch.manual_seed(0)
    m = tiny_gpt2(**{**model_kw, "block_size": max(seq, model_kw["block_size"])}).to(dtype).train()
    m.config._attn_implementation = attention
    ids = torch.randint(0, V, (B, seq))
    with SavedTensorMeter(m) as meter, torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        m(input_ids=ids, labels=ids).loss
    return meter.report()

meter_vs_model = []
for attention in ("eager", "sdpa"):
    for seq in (SEQ, 256):
        r = saved_bytes(attention, seq)
        model_b = gpt2_saved_activation_bytes(B, seq, C, L, H, V, attention).total
        meter_vs_model.append(abs(r.activation_bytes - model_b))
        print(f"{attention:>5}, T={seq:4d}: meter {r.activation_bytes:>10,} B, model {model_b:>10,} B, "
              f"parameters saved {r.parameter_bytes:,} B")


# %%
p_meter = Prediction("largest difference between meter and model over the four shapes",
                     "the per-operation count of gpt2_saved_activation_bytes", value=0, rel_tol=0, unit=" B")
viz.show_verdict(judge(p_meter, max(meter_vs_model), explain={
    "held": "The unit tests check the same identity at more shapes and dtypes.",
    "above": "A transformers or PyTorch version that saves other tensors changes the count: "
             "compare the meter's per-dtype split with the model's terms."}))

# %% [markdown]
# In the model, the eager implementation's B·H·T² softmax term grows with the square of the
# sequence length; the fused kernel never stores it (it recomputes attention scores in the
# backward pass), so its activation memory is linear in T.

# %% [markdown]
# ## 3. Activation checkpointing: memory for time
#
# **Question.** How much activation memory does checkpointing each block save, and what
# does it cost in step time?
#
# **Prediction.** With a checkpoint per block, the forward pass keeps only each block's
# input (BTC elements per block) and the parts outside the blocks; the backward pass runs
# each block's forward again. Counted in FLOPs, a block's forward is a third of its forward
# + backward (the backward does two matmuls per forward matmul), so on a large model, where
# time follows FLOPs, the step takes at most 4/3 as long. At 64 wide it does not: each
# operator's fixed cost and memory traffic weigh as much as its matmul. So the time model
# here uses time, not FLOPs: the recompute costs what the blocks' forward costs, timed alone
# (autograd recording, as in the recompute) against the plain step, and the checkpointed
# step should take **at least 1 + that share**. On top of it comes `torch.utils.checkpoint`'s
# bookkeeping, a Python hook for every tensor a block saves (in the forward, and twice in the
# backward: the recompute stores it, the backward fetches it); the model does not size it,
# the verdict measures it.
#
# **Measurement.** Three models with the same weights: plain; each block wrapped in
# `torch.utils.checkpoint` by `perfkit.memory.checkpoint_blocks`; and transformers' own
# switch (`activation_checkpointing_enable()`, called `gradient_checkpointing_enable()`
# before transformers 5). Saved bytes come from the meter, step times from
# `perfkit.timing.interleaved` (the three alternate, so machine load hits all alike).

# %%
def make(kind):
    torch.manual_seed(0)
    m = tiny_gpt2(**MODEL).to(DEVICE).train()
    if kind == "torch.utils.checkpoint per block":
        activations.checkpoint_blocks(m.transformer.h)
    elif kind == "transformers switch":
        enable = getattr(m, "activation_checkpointing_enable", None) or m.gradient_checkpointing_enable
        enable()
    return m

kinds = ["none", "torch.utils.checkpoint per block", "transformers switch"]
models_ck = {k: make(k) for k in kinds}
saved = {}
for k, m in models_ck.items():
    with SavedTensorMeter(m) as meter:
        m(input_ids=x, labels=x).loss.backward()
    saved[k] = meter.report().activation_bytes
pred_ck = gpt2_saved_activation_bytes(B, T, C, L, H, V, checkpointing=True)
pred_full = gpt2_saved_activation_bytes(B, T, C, L, H, V)
print(f"predicted: {pred_full.total / 1e6:.2f} MB without, {pred_ck.total / 1e6:.2f} MB with checkpointing")
for k, b in saved.items():
    print(f"{k:>34}: {b / 1e6:.2f} MB saved for backward")
p_ck_mem = Prediction("bytes saved for backward with a checkpoint per block",
                      "block inputs + what lies outside the blocks", value=pred_ck.total, rel_tol=0.01, unit=" B")
viz.show_verdict(judge(p_ck_mem, saved["torch.utils.checkpoint per block"], explain={
    "held": f"That is {pred_ck.total / pred_full.total:.0%} of the {pred_full.total / 1e6:.2f} MB "
            "without checkpointing: the logits' log-softmax and the ids, outside the blocks, now dominate."}))


# %%
def step_fn(m):
    def fn():
        m.zero_grad(set_to_none=True)
        m(input_ids=x, labels=x).loss.backward()
    return fn

plain = models_ck["none"]
block_in = {}  # each block's input hidden states (B, T, C), as the plain forward passes them
grab = [b.register_forward_pre_hook(lambda mod, args, i=i: block_in.__setitem__(i, args[0].detach()))
        for i, b in enumerate(plain.transformer.h)]
plain(input_ids=x, labels=x)
for h in grab:
    h.remove()

def blocks_forward():  # what the recompute runs: every block's forward, autograd recording
    for i, b in enumerate(plain.transformer.h):
        b(block_in[i].requires_grad_())

plain_t, blocks_t = timing.interleaved([step_fn(plain), blocks_forward], warmup=2, repeat=REPEAT, device=DEVICE)
f_blocks = blocks_t.median_s / plain_t.median_s
print(f"plain step {plain_t.median_s * 1e3:.2f} ms; the {L} blocks' forward alone {blocks_t.median_s * 1e3:.2f} ms "
      f"= {f_blocks:.2f} of it (FLOPs would say at most 1/3 = 0.33)" + (f"; {busy()}" if busy() else ""))
p_ck_time = Prediction("step time with a checkpoint per block over the plain step",
                       f"one more forward of every block, at its measured time: 1 + {f_blocks:.2f}",
                       low=1 + f_blocks, unit="x")

# %%
times = timing.interleaved([step_fn(m) for m in models_ck.values()], warmup=2, repeat=REPEAT, device=DEVICE)
base = times[0].median_s
for k, t in zip(kinds, times):
    print(f"{k:>34}: {t.median_s * 1e3:7.2f} ms per forward+backward ({t.median_s / base:.2f}x; "
          f"p10 {t.p10_s / times[0].p10_s:.2f}x), spread p10-p90 {t.p10_s * 1e3:.0f}-{t.p90_s * 1e3:.0f} ms, "
          f"activations {saved[k] / saved['none']:.0%} of none")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
axes[0].barh(kinds, [saved[k] / 1e6 for k in kinds], color="tab:red")
axes[0].set_xlabel("MB saved for backward")
axes[1].barh(kinds, [t.median_s * 1e3 for t in times], color="tab:blue")
axes[1].set_xlabel("ms per forward + backward")
for a in axes:
    a.invert_yaxis()
fig.tight_layout()

# %%
slow = Speedup(times[1], times[0])  # ratio = checkpointed / plain, with the spread of paired steps
extra = slow.ratio - 1 - f_blocks   # beyond the recompute, in plain steps
load = f"; {busy()}" if busy() else ""
viz.show_verdict(judge(p_ck_time, slow.ratio, spread=(slow.low, slow.high), explain={
    "held": f"Of the {slow.ratio - 1:.2f} plain steps added, the recompute accounts for {f_blocks:.2f}; the "
            f"other {extra:.2f} ({extra * base * 1e3 / L:.2f} ms per block and step) is checkpoint's bookkeeping"
            + (f", or load: {busy()}" if busy() else "") + ". It is paid per saved tensor, not per FLOP, so it weighs less the wider the model. "
            + ("The FLOP count's 4/3 would have been exceeded here." if slow.ratio > 4 / 3 else
               "The step stayed within the FLOP count's 4/3."),
    "below": "Less than the recompute alone: the blocks' forward and this comparison were timed at "
             f"different moments, and the machine's speed changed between them{load}.",
}))

# %% [markdown]
# Both checkpointing variants do the same work; if their times differ a lot, look at the
# p10-p90 spread first: on a shared machine a busy neighbour moves single medians. The trade
# pays when activations, not model states, decide whether a batch fits: large B x T, many
# layers.

# %% [markdown]
# ## 4. Mixed precision and activation memory
#
# **Question.** Does computing in bfloat16 halve the activation memory?
#
# **Prediction.** If every saved tensor were 2 bytes instead of 4, yes: the model with
# `dtype_bytes=2` predicts it, and a model converted to bfloat16 as a whole should match it.
# `torch.autocast` is different: it runs matmuls in bfloat16 but keeps LayerNorm, softmax
# and the residual stream in fp32, and it caches bfloat16 copies of the weights.
#
# **Measurement.** The meter, with the saved bytes split by dtype.

# %%
rows = {"fp32": saved_bytes("sdpa", SEQ), "bf16 model": saved_bytes("sdpa", SEQ, dtype=torch.bfloat16),
        "fp32 + autocast(bf16)": saved_bytes("sdpa", SEQ, autocast=True)}
pred16 = gpt2_saved_activation_bytes(B, T, C, L, H, V, dtype_bytes=2).total
print(f"model: fp32 {pred_full.total / 1e6:.2f} MB, all-16-bit {pred16 / 1e6:.2f} MB")
for k, r in rows.items():
    parts = ", ".join(f"{d} {b / 1e6:.2f}" for d, b in sorted(r.activation_bytes_by_dtype.items()))
    print(f"{k:>22}: {r.activation_bytes / 1e6:.2f} MB ({parts} MB); "
          f"{r.activation_bytes / rows['fp32'].activation_bytes:.0%} of fp32")

# %%
bf16, auto = rows["bf16 model"], rows["fp32 + autocast(bf16)"]
p_bf16 = Prediction("bytes saved for backward by the bfloat16 model", "the count with dtype_bytes=2",
                    value=pred16, rel_tol=0.02, unit=" B")
fp32_in_bf16 = bf16.activation_bytes_by_dtype.get("float32", 0)
viz.show_verdict(judge(p_bf16, bf16.activation_bytes, explain={
    "held": f"The count knows the {fp32_in_bf16 / 1e6:.2f} MB that stay float32 even in the bfloat16 "
            "model: transformers upcasts the logits to fp32 for the loss.",
    "above": f"{fp32_in_bf16 / 1e6:.2f} MB of what the bfloat16 model saves is float32: compare the "
             "dtype split above with the count's terms.",
    "below": "Fewer bytes than the 16-bit count: some saved tensor the model counts is not kept in this version."}))
p_auto = Prediction("autocast's saved bytes as a share of fp32's", "matmuls in bf16, the rest in fp32",
                    low=0.5, high=1.0, unit="")
viz.show_verdict(judge(p_auto, auto.activation_bytes / rows["fp32"].activation_bytes, explain={
    "held": "Between the two: the fp32 residual stream, LayerNorm inputs and log-softmax stay fp32, "
            "and the bfloat16 weight copies autocast caches count as new tensors kept for backward.",
    "above": "More than fp32 itself: the bfloat16 weight copies outweigh what the matmuls save at this size.",
    "below": "Less than half: autocast kept more in bfloat16 than this PyTorch version is expected to."}))

# %% [markdown]
# **Model states.** Autocast does not shrink them at all: weights, gradients and Adam state
# stay fp32 (4 + 4 + 8 = 16 bytes per parameter). Mixed precision as the ZeRO paper defines
# it keeps 16-bit weights and gradients (2 + 2 bytes) and an fp32 master copy with momentum
# and variance (4 + 4 + 4 = 12 bytes): 2 + 2 + 12 = 16 bytes per parameter, as many
# model-state bytes as fp32 Adam. Its savings are activations and time, not model states.
# `perfkit.memory` counts both recipes the same way:

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
# the measured tensors, so you can see the model hold at one real point. This device's memory
# is a dashed line when the bars come within reach of it, and a share in the title otherwise.

# %%
spec = vmem.memory_widget(vocab_size=V, n_head=H, measured=measured, limit_bytes=RAM)
fig = spec.fn(**spec.defaults())   # static plot of the default setting

# %%
# NBVAL_IGNORE_OUTPUT
viz.build_widget(spec)

# %%
viz.show_headlines({
    "measured step peak (tiny GPT-2)": viz.si(anatomy.peak, "B"),
    "activations / model states": f"{anatomy.activations / (anatomy.params + anatomy.grads + anatomy.optimizer_state):.1f}x",
    "checkpointing: activation memory": f"{saved[kinds[1]] / saved['none']:.0%} of none",
    "checkpointing: step time": f"{times[1].median_s / base:.2f}x",
    "autocast bf16: activation memory": f"{rows['fp32 + autocast(bf16)'].activation_bytes / rows['fp32'].activation_bytes:.0%} of fp32",
})

# %% [markdown]
# **Takeaways.** Count before you optimize: parameters, gradients and Adam state are
# 4 + 4 + 8 bytes per parameter in fp32, activations are B x T x (about 30 C per block) plus
# the logits, and the meter tells you exactly. Checkpointing trades one extra forward for
# most of the activation memory. Mixed precision shrinks activations but not model states;
# notebook 05 shards the model states across data-parallel ranks (ZeRO) and shrinks the
# trainable set (LoRA).
