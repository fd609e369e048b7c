# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · ZeRO and LoRA: fewer model-state bytes per process
#
# Notebook 04 showed that with Adam in fp32 every parameter costs 16 bytes of *model states*
# (4 weight + 4 gradient + 8 optimizer state) before a single activation is stored. In plain
# data parallelism every process holds all of them. Two ways out:
#
# 1. **ZeRO** (Rajbhandari et al., 2020): the N data-parallel processes hold the same
#    optimizer state N times, so give each process 1/N of it (stage 1), then 1/N of the
#    gradients (stage 2), then of the weights (stage 3). Same maths, less memory per process.
# 2. **LoRA** (Hu et al., 2021): train a small low-rank update instead of every weight; the
#    frozen weights need no gradient and no optimizer state.
#
# This notebook reproduces the ZeRO paper's memory table from formulas, runs **three ZeRO-1
# implementations for real** on 2 processes (perfkit's `ZeroOneOptimizer`, PyTorch's
# `ZeroRedundancyOptimizer`, DeepSpeed's stage 1, plus plain DDP + AdamW as the baseline),
# and measures LoRA with `peft` against full fine-tuning.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
NPROC = 2                                           # data-parallel processes (gloo)
MODEL = dict(n_embd=64, n_layer=2, n_head=2) if QUICK else dict(n_embd=128, n_layer=4, n_head=4)
VARIANTS = (["ddp_adamw", "perfkit", "torch_zero", "deepspeed_1"] if QUICK else
            ["ddp_adamw", "perfkit", "perfkit_ddp", "torch_zero", "deepspeed_0", "deepspeed_1", "deepspeed_2"])
STEPS, WARMUP = (3, 1) if QUICK else (10, 2)        # timed / untimed steps per variant
BATCH = 8                                           # sequences per process and step
CORPUS_BYTES = 300_000 if QUICK else 1_000_000      # stdlib source (the tokenizer of notebook 01)
LORA_REPEAT = 8 if QUICK else 30                    # interleaved timed steps, LoRA vs full

# %% [markdown]
# The 2-process comparison takes a while to start (each process imports torch, transformers
# and DeepSpeed), so it is launched first, in a background thread, and collected in
# section 2. `perfkit.workers.zero_bench.compare` runs `perfkit.dist.launch`, which starts
# real `torchrun` on a free port.

# %%
from concurrent.futures import ThreadPoolExecutor

from perfkit.workers.zero_bench import compare

pool = ThreadPoolExecutor(max_workers=1)
job = pool.submit(compare, VARIANTS, nproc=NPROC, batch=BATCH, steps=STEPS, warmup=WARMUP,
                  model=MODEL, rss=True, corpus_bytes=CORPUS_BYTES)

# %%
import torch
from IPython.display import Markdown, display

from perfkit import timing, viz
from perfkit.memory import (
    count_parameters,
    gpt2_num_params,
    optimizer_state_bytes,
    zero_model_states,
    zero_table,
)
from perfkit.models import tiny_gpt2
from perfkit.verdict import Prediction, judge
from perfkit.viz import memory as vmem

DEVICE = timing.resolve_device()   # LoRA runs here; the 2-process comparison runs on CPUs

# %% [markdown]
# ## 1. The ZeRO stages, from formulas
#
# **Question.** How much memory does each ZeRO stage need per process?
#
# **Model** (the paper's section 3). Mixed-precision Adam holds per parameter 2 bytes of
# 16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer state (fp32 master weights,
# momentum, variance). With Ψ parameters and N processes, per process:
#
# | stage | partitions | bytes per process |
# |---|---|---|
# | 0 (plain DP) | nothing | (2 + 2 + K) Ψ |
# | 1 (P_os) | optimizer state | 2Ψ + 2Ψ + KΨ/N |
# | 2 (P_os+g) | + gradients | 2Ψ + (2 + K)Ψ/N |
# | 3 (P_os+g+p) | + weights | (2 + 2 + K)Ψ/N |
#
# The paper's example (Figure 1): Ψ = 7.5 B parameters, N = 64. `perfkit.memory` reproduces
# its figures (120 GB, 31.4 GB, 16.6 GB, 1.9 GB; the paper rounds 1.875 GB up):

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
for s in zero_table(7.5e9, 64, "mixed_adam"):
    print(f"stage {s.stage}: parameters {s.params / 1e9:6.3f} GB + gradients {s.grads / 1e9:6.3f} GB "
          f"+ optimizer {s.optimizer / 1e9:7.3f} GB = {s.total_gb:8.4f} GB per process")

# %%
fig = vmem.plot_zero_stages(7.5e9, 64, "mixed_adam", highlight=1)

# %% [markdown]
# Stage 1 alone cuts 120 GB to 31.4 GB because optimizer state is 12 of the 16 bytes. Our
# comparison runs in fp32 (`fp32_adam`: 4 + 4 + 8 bytes, K = 8) on N = 2 processes, where
# stage 1 can at best halve the optimizer state and save a quarter of the model states.

# %%
psi = gpt2_num_params(MODEL["n_embd"], MODEL["n_layer"], 1024, 64)
pred = {s: zero_model_states(psi, NPROC, s, "fp32_adam") for s in (0, 1, 2)}
for s, m in pred.items():
    print(f"stage {s}: optimizer state {m.optimizer / 1e6:.3f} MB, model states {m.total / 1e6:.3f} MB per process")

# %% [markdown]
# ## 2. Three ZeRO-1 implementations, run for real
#
# **Question.** Do perfkit's `ZeroOneOptimizer`, PyTorch's `ZeroRedundancyOptimizer` and
# DeepSpeed's ZeRO stage 1 hold 1/N of the optimizer state, train the same model as plain
# AdamW, and cost no time?
#
# **Prediction.** Optimizer state per process: 8Ψ/N bytes (the line above) for the flat
# partitions. Loss curves identical to DDP + AdamW's (the same averaged gradient). Step time:
# the bytes differ by implementation. perfkit used alone reduce-scatters the gradients and
# all-gathers the updated parameters: together the same bytes as DDP's all-reduce, so it should
# be no slower than DDP + AdamW (within 10 %), and each process updates 1/N of the parameters.
# The variants built on DDP (PyTorch's, `perfkit_ddp`) all-reduce the full gradient *and* then
# share the updated parameters: about 1.5x DDP's bytes, so they may cost time.
#
# **How the three partition.** perfkit and DeepSpeed flatten the parameters into one buffer
# and cut it into N equal slices (a parameter may straddle two processes). PyTorch assigns
# *whole* parameter tensors to processes, greedily by size; with one large embedding the
# slices cannot be equal. perfkit used alone reduce-scatters the gradients itself; PyTorch
# and DeepSpeed (and `perfkit_ddp`) let DDP or their engine all-reduce first.
#
# **Measurement.** The job launched at the top: every variant trains the same batches from
# the same initial weights; steps are timed interleaved (one step of each variant in turn);
# then each variant is built alone and its peak resident memory measured.

# %%
cmp = job.result()
pool.shutdown()
rows = ["| variant | ms / step | optimizer state / process | of unsharded | peak RSS | rel. diff vs AdamW |",
        "|---|---|---|---|---|---|"]
for name, v in cmp.variants.items():
    rows.append(f"| {name} | {v.step_s * 1e3:.1f} | {viz.si(v.state_bytes, 'B')} | "
                f"{v.state_bytes / cmp.total_state_bytes:.1%} | {viz.si(v.peak_rss_bytes, 'B')} | "
                f"{v.max_rel_diff_vs_adamw:.1e} |")
display(Markdown("\n".join(rows)))
print(f"Ψ = {cmp.numel:,} (predicted {psi:,}); unsharded AdamW state {cmp.total_state_bytes:,} B "
      f"(8Ψ = {8 * psi:,} B + one 4-byte step counter per tensor)")
viz.show_verdict(judge(Prediction("perfkit's optimizer state per process", "8Ψ/N: one flat slice of both moments",
                                  value=8 * cmp.numel / NPROC, rel_tol=0.01, unit=" B"),
                       cmp.variants["perfkit"].state_bytes, explain={
    "held": "Plus one step counter per parameter piece: the wrapped AdamW sees each parameter's part of "
            "the slice as its own tensor, so a parameter without a gradient keeps its state, as in "
            "torch.optim."}))

# %%
fig = vmem.plot_zero_comparison(cmp)
fig2 = vmem.plot_loss_curves({n: v.losses for n, v in cmp.variants.items()},
                             title="Global mean loss per step (same batches)")

# %%
v = cmp.variants
ddp = v["ddp_adamw"]
for name in v:
    if name != "ddp_adamw":
        print(f"{name:>12}: {v[name].step_s / ddp.step_s:.2f}x DDP + AdamW's step time, "
              f"{v[name].state_bytes / ddp.state_bytes:.1%} of its optimizer state, "
              f"loss after the last step {v[name].losses[-1]:.4f} (DDP + AdamW {ddp.losses[-1]:.4f})")

# %%
loss_gap = max(abs(a - b) / abs(b) for n, r in v.items() if n != "ddp_adamw"
               for a, b in zip(r.losses, ddp.losses))
viz.show_verdict(judge(Prediction("largest relative loss difference from DDP + AdamW, any variant, any step",
                                  "the same averaged gradient, the same AdamW update", high=1e-4), loss_gap))
viz.show_verdict(judge(Prediction("perfkit's step time over DDP + AdamW's", "reduce-scatter + all-gather = "
                                  "DDP's all-reduce bytes; 1/N of the update", high=1.10, unit="x"),
                       v["perfkit"].step_s / ddp.step_s, explain={
    "held": "Sharding's time win, 1/N of the optimizer step, grows with the share of the step the "
            "optimizer takes.",
    "above": f"At this size a step is mostly forward and backward plus fixed overheads, and with "
             f"{STEPS} timed steps one slow step moves the median: perfkit's separate reduce-scatter and "
             "all-gather wait for the whole backward, where DDP overlaps its all-reduce with it."}))
for name in ("torch_zero", "perfkit_ddp"):
    if name in v:
        print(f"{name}: {v[name].step_s / ddp.step_s:.2f}x DDP's step time, against about 1.5x its bytes "
              "(the full all-reduce, then the updated parameters shared again)")
saving = (8 * cmp.numel) * (NPROC - 1) / NPROC
rss = v["perfkit"].peak_rss_bytes
if rss:
    print(f"the optimizer-state saving, 8Ψ(N-1)/N = {viz.si(saving, 'B')}, is {saving / rss:.1%} of a process's "
          f"peak RSS ({viz.si(rss, 'B')}): "
          + ("too small a share for RSS to show; the state column counts it exactly"
             if saving / rss < 0.05 else "large enough to see in the RSS column"))

# %% [markdown]
# **The gaps.**
#
# * *State bytes.* PyTorch's whole-parameter partition cannot cut inside a tensor, so its
#   processes hold unequal shares (the table shows the larger one). DeepSpeed's client AdamW
#   sees one flat slice like perfkit's; DeepSpeed also keeps an fp32 copy of the slice and
#   gradient partitions, which are not in the optimizer-state column. Peak RSS is context
#   only: it counts the interpreter, libraries and activations too.
# * *Same training.* The "rel. diff vs AdamW" column compares with *single-process* AdamW on
#   the concatenated batch: the gradient is summed in a different order there, and Adam
#   divides by the root of its second moment, so elements whose gradient is as small as that
#   rounding move by up to the learning rate differently. DDP + AdamW itself shows the same
#   difference; it is data parallelism's, not the optimizer's
#   (`tests/distributed/test_zero_distributed.py` checks 1e-6 against single-process AdamW on
#   a model without such elements).
# * *Step time.* `benchmarks/zero.py` runs a larger model with more steps. Sharding's memory
#   win, K Ψ (N - 1)/N bytes, grows with Ψ and N.

# %% [markdown]
# ## 3. LoRA with `peft`: train fewer parameters
#
# **Question.** How many parameters does LoRA train on the tiny GPT-2, how much optimizer
# state does it save, and is a step faster?
#
# **Which modules.** GPT-2's linear layers are transformers' `Conv1D` (weight stored as
# (in, out), the transpose of `nn.Linear`, hence `fan_in_fan_out=True`): `c_attn` (the fused
# q, k, v projection, C -> 3C), `c_proj` (attention output C -> C, and the MLP's 4C -> C) and
# `c_fc` (C -> 4C). The LoRA paper adapted the query and value projections; in GPT-2 they
# are fused into `c_attn`, so targeting `c_attn` adapts q, k and v together.
#
# **Prediction.** A rank-r adapter on a (in -> out) weight has r (in + out) parameters:
# for `c_attn`, r (C + 3C) = 4rC per block. The optimizer state is 8 bytes per trainable
# parameter. A step still runs the whole forward and the backward through every layer (the
# input gradients), but skips the frozen weights' gradients, about half of the backward's
# matmuls: roughly (1 + 1) / (1 + 2) = 2/3 of a full step.

# %%
import warnings

from peft import LoraConfig, get_peft_model

warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # peft calls a renamed API

RANK = 8
V, T = 1024, 64
torch.manual_seed(0)
full = tiny_gpt2(vocab_size=V, block_size=T, **MODEL).to(DEVICE)
torch.manual_seed(0)
lora = get_peft_model(tiny_gpt2(vocab_size=V, block_size=T, **MODEL),
                      LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0,
                                 target_modules=["c_attn"], fan_in_fan_out=True)).to(DEVICE)
n_full, n_lora = count_parameters(full), count_parameters(lora)
pred_lora = MODEL["n_layer"] * 4 * RANK * MODEL["n_embd"]
print(f"full fine-tuning: {n_full.trainable:,} trainable parameters")
print(f"LoRA r={RANK} on c_attn: {n_lora.trainable:,} trainable (predicted {pred_lora:,}) = "
      f"{n_lora.trainable_fraction:.2%} of {n_lora.total:,}")

# %%
x = torch.randint(0, V, (BATCH, T), device=DEVICE)   # (B, T) token ids
def trainer(m):
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
    def step():
        opt.zero_grad(set_to_none=True)
        m(input_ids=x, labels=x).loss.backward()
        opt.step()
    return step, opt

(step_full, opt_full), (step_lora, opt_lora) = trainer(full), trainer(lora)
t_full, t_lora = timing.interleaved([step_full, step_lora], warmup=2, repeat=LORA_REPEAT, device=DEVICE)
s_full, s_lora = optimizer_state_bytes(opt_full), optimizer_state_bytes(opt_lora)
print(f"optimizer state: full {s_full:,} B, LoRA {s_lora:,} B (predicted 8 x {n_lora.trainable:,} "
      f"+ 4 per tensor = {8 * n_lora.trainable + 4 * sum(p.requires_grad for p in lora.parameters()):,} B)")
print(f"step time: full {t_full.median_s * 1e3:.1f} ms, LoRA {t_lora.median_s * 1e3:.1f} ms "
      f"= {t_lora.median_s / t_full.median_s:.2f}x (p10 ratio {t_lora.p10_s / t_full.p10_s:.2f}x)")
viz.show_verdict(judge(Prediction("LoRA's trainable parameters", "r (C + 3C) per block on c_attn",
                                  value=pred_lora, rel_tol=0), n_lora.trainable))
pairs = sorted(b / a for a, b in zip(t_full.times_s, t_lora.times_s))
viz.show_verdict(judge(Prediction("LoRA step time over the full step", "half of the backward's matmuls skipped: "
                                  "(1 + 1) / (1 + 2)", value=2 / 3, rel_tol=0.15, unit="x"),
                       t_lora.median_s / t_full.median_s,
                       spread=(pairs[len(pairs) // 10], pairs[-1 - len(pairs) // 10]), explain={
    "above": "LoRA adds its own small matmuls (x A, then B) to every adapted layer, forward and backward, "
             "and at this width many operations are launch-bound, so skipping a weight-gradient matmul "
             "saves less than its FLOP share.",
    "below": "The frozen weights include the tied token embedding, whose V x C gradient (the LM head's) is "
             "a large share of this small model's backward, and the optimizer step over so few parameters "
             "is almost free."}))

# %% [markdown]
# Where LoRA shines is memory: gradients and Adam state only for the trainable fraction
# printed above.

# %% [markdown]
# ## 4. Widget: ZeRO per-process memory
#
# Parameters Ψ, processes N, stage and precision; the bars are the paper's formulas.

# %%
spec = vmem.zero_widget()
fig = spec.fn(**spec.defaults())   # static plot of the default setting

# %%
# NBVAL_IGNORE_OUTPUT
viz.build_widget(spec)

# %%
viz.show_headlines({
    "ZeRO-1 optimizer state / process (perfkit)": f"{v['perfkit'].state_bytes / cmp.total_state_bytes:.1%} of AdamW's",
    "ZeRO-1 step time (perfkit / DDP+AdamW)": f"{v['perfkit'].step_s / ddp.step_s:.2f}x",
    "ZeRO-1 step time (perfkit / torch ZeRO)": f"{v['perfkit'].step_s / v['torch_zero'].step_s:.2f}x",
    "LoRA trainable fraction": f"{n_lora.trainable_fraction:.2%}",
    "LoRA step time / full": f"{t_lora.median_s / t_full.median_s:.2f}x",
})

# %% [markdown]
# **Takeaways.** Model states, not weights, fill memory in training; ZeRO removes their
# redundancy across data-parallel processes at no cost in maths (identical losses) and,
# done with a reduce-scatter and an all-gather, at little or no cost in time. LoRA removes
# most of them outright, at the price of training a restricted update. Lab 03 has you write
# the ZeRO formula and the ZeRO-1 step yourself.
