# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 08 · FlashAttention's online softmax and ring attention's merge
#
# Graded lab for module 12. You will write
#
# 1. `online_softmax_update`: one key tile's step of the online softmax, the heart of
#    FlashAttention: running maximum, running sum and unnormalised output, rescaled when
#    the maximum grows;
# 2. `merge_partials`: the log-sum-exp merge of two partial attention results over disjoint
#    key sets, the step ring attention takes after every block;
# 3. `tiled_causal_attention`: causal attention for one head, tile by tile with your update,
#    computing **no tile above the diagonal**.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab08_attention.ipynb
# ```
#
# The grader compares your results with attention computed in float64, feeds logits large
# enough to overflow an unshifted `exp`, rows whose keys are all masked (their
# log-sum-exp is `-inf`: no NaN may appear), and counts the FLOPs your Q3 runs with
# PyTorch's FLOP counter. Q3 is graded with the reference `online_softmax_update`, so a
# mistake in Q1 does not fail it twice. Do not rename the functions or change their
# arguments.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import math

import torch
from torch.utils.flop_counter import FlopCounterMode

from perfkit.compute import flash

torch.manual_seed(0)

# %% [markdown]
# ## Q1 · `online_softmax_update(m, total, o, s, v) -> (m, total, o)`
#
# For `R` query rows that have seen some keys: `m` `(R,)` is the largest score so far
# (`-inf` before any key), `total` `(R,)` the sum of `exp(score - m)`, `o` `(R, D)` the sum of
# `exp(score - m) * value`. A new tile brings scores `s` `(R, N)` (masked ones are `-inf`)
# and values `v` `(N, D)`. Return the updated `(m, total, o)`: with the new maximum `m'`, what
# was summed under `m` is worth `exp(m - m')` times as much. After the last tile, `o / l` is
# the attention output and `m + log(total)` the log-sum-exp.
#
# Careful: a row whose scores so far are all `-inf` has `m = -inf`, and
# `exp(-inf - (-inf))` is NaN. Such a row must keep `total = 0`, `o = 0`.

# %%
def online_softmax_update(m, total, o, s, v):
    ### BEGIN SOLUTION
    m_new = torch.maximum(m, s.amax(-1))
    shift = torch.where(m_new == -math.inf, 0.0, m_new)  # rows that saw nothing yet
    p = torch.exp(s - shift[:, None])
    alpha = torch.exp(m - shift)
    return m_new, alpha * total + p.sum(-1), alpha[:, None] * o + p @ v
    ### END SOLUTION


# %%
s_all, v_all = torch.randn(3, 40, dtype=torch.float64) * 4, torch.randn(40, 5, dtype=torch.float64)
m, total, o = torch.full((3,), -math.inf, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), torch.zeros(3, 5, dtype=torch.float64)
for j in range(0, 40, 16):
    m, total, o = online_softmax_update(m, total, o, s_all[:, j:j + 16], v_all[j:j + 16])
print("largest difference from softmax(s) @ v:",
      (o / total[:, None] - torch.softmax(s_all, -1) @ v_all).abs().max().item())

# %% [markdown]
# ## Q2 · `merge_partials(o_a, lse_a, o_b, lse_b) -> (o, lse)`
#
# Attention of the same queries over two disjoint key sets gave normalised outputs `o_a`,
# `o_b` `(R, D)` and log-sum-exps `lse_a`, `lse_b` `(R,)`. Return attention over both key
# sets: `lse = log(exp(lse_a) + exp(lse_b))` and the outputs weighted by `exp(lse_x - lse)`.
# Logits can be large (`lse` of 1000 is fine in float64, `exp(1000)` is not), and a row may
# have seen no key on one side (`lse = -inf`, `o = 0`) or on both (then return `o = 0`,
# `lse = -inf`).

# %%
def merge_partials(o_a, lse_a, o_b, lse_b):
    ### BEGIN SOLUTION
    m = torch.maximum(lse_a, lse_b)
    shift = torch.where(m == -math.inf, 0.0, m)
    total = torch.exp(lse_a - shift) + torch.exp(lse_b - shift)
    lse = torch.where(total > 0, shift + torch.log(torch.where(total > 0, total, 1.0)), -math.inf)
    safe = torch.where(lse == -math.inf, 0.0, lse)
    w_a = torch.where(lse_a == -math.inf, 0.0, torch.exp(lse_a - safe))
    w_b = torch.where(lse_b == -math.inf, 0.0, torch.exp(lse_b - safe))
    return w_a[:, None] * o_a + w_b[:, None] * o_b, lse
    ### END SOLUTION


# %%
q1, k1, v1 = (torch.randn(6, 8, dtype=torch.float64) * 20 for _ in range(3))
halves = [flash.reference_attention(q1, k1[i:i + 4], v1[i:i + 4]) for i in (0, 4)]
o, lse = merge_partials(*halves[0], *halves[1])
whole, whole_lse = flash.reference_attention(q1, k1, v1)
print(f"merged against whole: {(o - whole).abs().max().item():.1e}, "
      f"log-sum-exp {(lse - whole_lse).abs().max().item():.1e} (largest {whole_lse.max().item():.0f})")

# %% [markdown]
# ## Q3 · `tiled_causal_attention(q, k, v, tile) -> Tensor`
#
# Causal self-attention of one head, `q`, `k`, `v` of shape `(T, D)`, scaled by
# `1 / sqrt(D)`: query `i` sees keys `j <= i`. Walk query tiles of `tile` rows and, for each,
# key tiles, updating `(m, l, o)` with `online_softmax_update`. A tile whose keys all come
# after its last query contributes nothing: **do not compute it**. A tile that straddles the
# diagonal is computed whole, its upper part masked with `-inf`. `T` need not be a multiple
# of `tile`. The grader counts your matmul FLOPs: at most `4 D` per (query, key) pair of the
# tiles on or below the diagonal.

# %%
def tiled_causal_attention(q, k, v, tile):
    ### BEGIN SOLUTION
    t, d = q.shape
    out = torch.empty_like(q)
    for i0 in range(0, t, tile):
        i1 = min(i0 + tile, t)
        m = torch.full((i1 - i0,), -math.inf, dtype=q.dtype)
        total, o = torch.zeros(i1 - i0, dtype=q.dtype), torch.zeros(i1 - i0, d, dtype=q.dtype)
        for j0 in range(0, i1, tile):  # key tiles after the last query i1 - 1 never start
            j1 = min(j0 + tile, t)
            s = q[i0:i1] @ k[j0:j1].T / math.sqrt(d)
            if j1 - 1 > i0:  # the tile straddles the diagonal
                later = torch.arange(j0, j1)[None, :] > torch.arange(i0, i1)[:, None]
                s = s.masked_fill(later, -math.inf)
            m, total, o = online_softmax_update(m, total, o, s, v[j0:j1])
        out[i0:i1] = o / total[:, None]
    return out
    ### END SOLUTION


# %%
q3, k3, v3 = (torch.randn(50, 8, dtype=torch.float64) for _ in range(3))
with FlopCounterMode(display=False) as counter:
    got = tiled_causal_attention(q3, k3, v3, 16)
want, _ = flash.reference_attention(q3, k3, v3, causal=True)
print(f"largest difference: {(got - want).abs().max().item():.1e}; FLOPs {counter.get_total_flops()} "
      f"(at most {flash.flash_flops(1, 1, 50, 8, causal=True, tile=16).forward})")
