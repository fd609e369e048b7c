# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 02 · Ring all-reduce and top-k with error feedback
#
# Graded lab for modules 02-03. You will write
#
# 1. `ring_all_reduce`: the ring all-reduce, built only from point-to-point messages;
# 2. `topk_compress` / `topk_decompress`: top-k gradient sparsification;
# 3. `TopKWithErrorFeedback`: top-k that remembers what it did not send.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab02_communication.ipynb
# ```
#
# The grader runs your `ring_all_reduce` **on 2 and 3 real processes** (torchrun, gloo) and
# compares it with `dist.all_reduce` on sizes divisible by neither 2 nor 3; it checks that
# top-k sends exactly `k` values, that error feedback conserves the gradient (what was sent
# plus the residual equals the sum of the inputs), and that training with it converges. Do
# not rename the functions or change their arguments.
#
# How your function reaches the worker processes: the grader pickles it with `cloudpickle`
# (which copies a notebook function *by value*, with the modules it uses by reference) into a
# temporary file, and `tools.labs.ring_check` loads it in every process. So your
# function may use anything imported in the notebook, but not variables that only exist in
# this notebook's process (a process group, an open file).

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import json
import math
import os
import tempfile
from pathlib import Path

import cloudpickle
import torch
import torch.distributed as dist

import perfkit
from perfkit import compress
from perfkit import dist as pdist
from perfkit.compress import simulate_dp_training

ROOT = Path(perfkit.__file__).resolve().parents[1]  # the course's folder: tools/ grades the labs

# %% [markdown]
# ## Q1 · `ring_all_reduce(tensor, group=None) -> tensor`
#
# Sum a contiguous tensor over all processes **in place** and return it, using only
# `dist.isend` / `dist.irecv` (or `dist.send` / `dist.recv`); calling `dist.all_reduce` or
# another collective is not allowed.
#
# 1. `n = dist.get_world_size(group)`, `r = dist.get_rank(group)`; with one process there is
#    nothing to do. The right neighbour is `(r + 1) % n`, the left one `(r - 1) % n` (with a
#    `group`, turn them into global ranks with `dist.get_global_rank(group, i)`).
# 2. `chunks = tensor.view(-1).tensor_split(n)`: `n` views whose sizes differ by at most one.
# 3. **Reduce-scatter**, steps `s = 0 .. n-2`: send chunk `(r - s) % n` to the right,
#    receive chunk `(r - s - 1) % n` from the left into a buffer and **add** it to your copy.
# 4. **All-gather**, steps `s = 0 .. n-2`: send chunk `(r + 1 - s) % n` to the right, receive
#    chunk `(r - s) % n` from the left and **copy** it into place.
#
# Post the send and the receive of a step before waiting on either (`isend`/`irecv`, then
# `wait()` on both): if every process first waits for its send to finish, large messages can
# deadlock. Skip empty chunks (when `numel < n`) on both sides.

# %%
def ring_all_reduce(tensor, group=None):
    ### BEGIN SOLUTION
    n = dist.get_world_size(group)
    if n == 1:
        return tensor
    r = dist.get_rank(group)
    glob = (lambda i: dist.get_global_rank(group, i)) if group is not None else (lambda i: i)
    right, left = glob((r + 1) % n), glob((r - 1) % n)
    chunks = tensor.view(-1).tensor_split(n)
    buf = torch.empty_like(chunks[0])

    def exchange(send_idx, recv_idx):
        out = buf[: chunks[recv_idx].numel()]
        reqs = []
        if chunks[send_idx].numel():
            reqs.append(dist.isend(chunks[send_idx], right, group=group))
        if out.numel():
            reqs.append(dist.irecv(out, left, group=group))
        for q in reqs:
            q.wait()
        return out

    for s in range(n - 1):
        i = (r - s - 1) % n
        chunks[i].add_(exchange((r - s) % n, i))
    for s in range(n - 1):
        i = (r - s) % n
        chunks[i].copy_(exchange((r + 1 - s) % n, i))
    return tensor
    ### END SOLUTION


# %% [markdown]
# Try it on 2 processes. The cell ships your function to the workers exactly as the grader
# does; `tools.labs.ring_check` compares it with `dist.all_reduce` (integer-valued data:
# the sums must be *equal*; random data: equal up to rounding).

# %%
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "ring.pkl")
    with open(path, "wb") as f:
        cloudpickle.dump(ring_all_reduce, f)
    cfg = {"impl": {"path": path, "sizes": [1, 7, 1001]}}
    res = pdist.launch("tools.labs.ring_check", 2, ["--config", json.dumps(cfg)],
                       timeout_s=120, pythonpath=[ROOT])
for rec in res[0]["impl"]:
    print(rec)


# %% [markdown]
# ## Q2 · `topk_compress(x, ratio) -> (values, indices)` and `topk_decompress(values, indices, shape) -> tensor`
#
# `topk_compress` keeps the `k = max(1, ceil(ratio * x.numel()))` entries of largest
# **magnitude** of the flattened `x`: return their values (as in `x`, with their signs) and
# their flat indices (`torch.int64`). Raise `ValueError` if `ratio` is not in `(0, 1]` or `x`
# contains NaN or inf. `topk_decompress` returns a dense tensor of `shape`: zeros, with
# `values` at `indices` (of the flattened tensor).

# %%
def topk_compress(x, ratio):
    ### BEGIN SOLUTION
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or inf")
    flat = x.reshape(-1)
    k = max(1, math.ceil(ratio * flat.numel()))
    idx = torch.topk(flat.abs(), k, sorted=False).indices
    return flat[idx], idx
    ### END SOLUTION


def topk_decompress(values, indices, shape):
    ### BEGIN SOLUTION
    out = torch.zeros(math.prod(shape), dtype=values.dtype)
    out[indices] = values
    return out.view(shape)
    ### END SOLUTION


# %%
g = torch.tensor([[0.1, -3.0, 0.2], [2.0, -0.05, 0.4]])
vals, idx = topk_compress(g, 0.34)   # k = ceil(0.34 * 6) = 3
print(vals, idx)
print(topk_decompress(vals, idx, g.shape))


# %% [markdown]
# ## Q3 · `TopKWithErrorFeedback(ratio)`
#
# A compressor with memory. `compress(grad) -> (values, indices)`:
#
# 1. add `grad` to `self.residual` (create it as zeros of `grad`'s shape on the first call);
# 2. take the top-k of the residual with your `topk_compress`;
# 3. subtract what you send from `self.residual` (so it keeps exactly what was not sent);
# 4. return the values and indices.
#
# After any number of calls, `sum of topk_decompress(sent) + self.residual` must equal the sum
# of the gradients passed in: nothing is lost, only delayed.

# %%
class TopKWithErrorFeedback:
    def __init__(self, ratio):
        self.ratio = ratio
        self.residual = None

    def compress(self, grad):
        ### BEGIN SOLUTION
        if self.residual is None:
            self.residual = torch.zeros_like(grad)
        self.residual += grad
        values, indices = topk_compress(self.residual, self.ratio)
        self.residual.view(-1)[indices] -= values
        return values, indices
        ### END SOLUTION


# %% [markdown]
# Error feedback in training: two simulated workers each compress their own gradient
# (`perfkit.compress.simulate_dp_training`, softmax regression on the digits). The adapter
# below turns your class into a perfkit `Compressor`.

# %%
class Adapter(compress.Compressor):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def compress(self, t):
        values, indices = self.inner.compress(t)
        return compress.Compressed((values, indices), t.shape, t.dtype)

    def decompress(self, c, out=None):
        return topk_decompress(c.tensors[0], c.tensors[1], c.shape)


steps = 40 if QUICK else 150
base = simulate_dp_training(None, steps=steps)
mine = simulate_dp_training(lambda: Adapter(TopKWithErrorFeedback(0.01)), steps=steps)
print(f"after {steps} steps: uncompressed {sum(base[-5:]) / 5:.3f}, "
      f"top-k 1% + error feedback {sum(mine[-5:]) / 5:.3f} nats")
