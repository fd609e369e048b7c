# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 07 · Model parallelism: Megatron's f and g, split linears, a 1F1B schedule
#
# Graded lab for modules 10-11. You will write
#
# 1. `copy_to_tp` / `reduce_from_tp`: Megatron-LM's two conjugate autograd operators, which
#    carry all of tensor parallelism's communication;
# 2. `ColumnParallelLinear` / `RowParallelLinear`: a linear layer split over processes by
#    output features and by input features, built from an unsplit `nn.Linear`;
# 3. `schedule_1f1b`: the 1F1B pipeline schedule as data, a list of actions per rank.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab07_model_parallel.ipynb
# ```
#
# The grader runs Q1 and Q2 first in its own process on a one-process group (a quick
# check of what ran in forward and in backward), then **on 2 real processes**
# (torchrun, gloo) in float64: values and gradients must equal the unsplit computation, and
# it counts **which collectives ran in forward and in backward** (one all-reduce each way
# for a column-then-row MLP) and checks that each got the `group` it was given. Q3 runs in
# perfkit's pipeline simulator: your order must not deadlock, must hold at most `p - r`
# micro-batches' activations on rank `r`, and must have 1F1B's bubble. Do not rename the
# functions or change their arguments; call collectives through the module
# (`dist.all_reduce(...)`) so that the grader can record them.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import perfkit
from perfkit.parallel import (
    Action,
    DeadlockError,
    Schedule,
    bubble_formula,
    gpipe,
    simulate,
    validate,
)

sys.path.insert(0, str(Path(perfkit.__file__).resolve().parents[1]))  # the course's folder
from tools.labs.record import record_collectives  # noqa: E402  (what the grader records)
from tools.labs.tp_check import one_process_group  # noqa: E402  (a gloo group of 1 process)

# %% [markdown]
# ## Q1 · `copy_to_tp(x, group=None)` and `reduce_from_tp(x, group=None)`
#
# Tensor parallelism splits a layer's weight over the `t` processes of a group. Two
# operators, each the other's conjugate, carry all of its communication (Shoeybi et al.
# 2019, Megatron-LM):
#
# * **f = `copy_to_tp`** enters a column-parallel region. Forward: the **identity** (`x` is
#   already whole on every process). Backward: each process's columns produced only its
#   share of dL/dx, so the gradient is **all-reduced** (summed).
# * **g = `reduce_from_tp`** leaves a row-parallel region. Forward: each process holds a
#   partial sum of the output, so `x` is **all-reduced**. Backward: the **identity** (dL/dy
#   is whole on every process and each partial sum gets all of it).
#
# Write the two `torch.autograd.Function`s: `forward(ctx, x, group)` and `backward(ctx, grad)`,
# which returns one gradient per forward argument (`None` for `group`). `dist.all_reduce`
# sums **in place**: reduce a contiguous copy (`t.contiguous().clone()`), not the tensor
# autograd handed you, and pass `group=group` to it.

# %%
class CopyToTP(torch.autograd.Function):
    """f: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx, x, group):
        ### BEGIN SOLUTION
        ctx.group = group
        return x.view_as(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
        ### END SOLUTION


class ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        ### BEGIN SOLUTION
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad, None
        ### END SOLUTION


def copy_to_tp(x, group=None):
    return CopyToTP.apply(x, group)


def reduce_from_tp(x, group=None):
    return ReduceFromTP.apply(x, group)


# %% [markdown]
# On one process an all-reduce returns its input, so values cannot show a mistake; what
# ran in forward and in backward can. f should list nothing forward and one `all_reduce`
# backward, g the reverse.

# %%
with one_process_group() as group:
    for op in (copy_to_tp, reduce_from_tp):
        x = torch.randn(3, 4, requires_grad=True)
        with record_collectives() as fwd:
            y = op(x, group)
        with record_collectives() as bwd:
            y.sum().backward()
        print(f"{op.__name__:15s} forward {[n for n, _ in fwd]}, backward {[n for n, _ in bwd]}")


# %% [markdown]
# ## Q2 · `ColumnParallelLinear(linear, group=None)` and `RowParallelLinear(linear, group=None)`
#
# Both are built from an unsplit `nn.Linear` that every process created identically, and
# keep only this process's slice of it. Process `r` of `t = dist.get_world_size(group)`
# (`r = dist.get_rank(group)`) owns features `[r n / t, (r + 1) n / t)` of the split
# dimension; raise `ValueError` when `n` is not divisible by `t`. `linear.weight` has shape
# `(out_features, in_features)`.
#
# * **Column-parallel** splits the **output** features: `self.weight` is rows
#   `r n / t .. (r + 1) n / t` of `linear.weight`, `self.bias` the same slice of
#   `linear.bias`. `forward(x)`: `x` is whole, `(..., in)`; return `(..., out / t)`:
#   `F.linear(copy_to_tp(x, self.group), self.weight, self.bias)`.
# * **Row-parallel** splits the **input** features: `self.weight` is those columns of
#   `linear.weight`, `self.bias` the **whole** bias. `forward(x)`: `x` is this process's
#   slice, `(..., in / t)` (what a column-parallel layer returns); each process computes a
#   partial `(..., out)` product, `reduce_from_tp` sums them, and the bias is added
#   **once, after** the sum.
#
# Make `weight` and `bias` `nn.Parameter`s holding **copies** of the slices
# (`.detach().clone()`), keep `self.group`, and keep nothing else of `linear` (each process
# must hold 1/t of the layer). A `bias=False` linear gives `self.bias = None`. The grader runs
# your classes with perfkit's f and g under the names `copy_to_tp` / `reduce_from_tp`, so a
# mistake in Q1 does not fail Q2 as well.

# %%
class ColumnParallelLinear(nn.Module):
    def __init__(self, linear, group=None):
        super().__init__()
        self.group = group
        ### BEGIN SOLUTION
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = linear.out_features
        if n % t:
            raise ValueError(f"out_features ({n}) must be divisible by the group's size {t}")
        rows = slice(r * n // t, (r + 1) * n // t)
        self.weight = nn.Parameter(linear.weight[rows].detach().clone())
        self.bias = (None if linear.bias is None
                     else nn.Parameter(linear.bias[rows].detach().clone()))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)  # (..., out / t)
        ### END SOLUTION


class RowParallelLinear(nn.Module):
    def __init__(self, linear, group=None):
        super().__init__()
        self.group = group
        ### BEGIN SOLUTION
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = linear.in_features
        if n % t:
            raise ValueError(f"in_features ({n}) must be divisible by the group's size {t}")
        cols = slice(r * n // t, (r + 1) * n // t)
        self.weight = nn.Parameter(linear.weight[:, cols].detach().clone())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        y = reduce_from_tp(F.linear(x, self.weight), self.group)   # (..., out), summed
        return y if self.bias is None else y + self.bias
        ### END SOLUTION


# %% [markdown]
# An MLP split column then row: no communication between the two layers (the hidden
# activation stays split), one all-reduce forward (g) and one backward (f). On one process
# it must equal the unsplit MLP exactly; the grader checks the same on 2 processes.

# %%
torch.manual_seed(0)
fc1, fc2 = nn.Linear(6, 8), nn.Linear(8, 5)
x = torch.randn(4, 6, requires_grad=True)   # as a layer's input is: f's backward then runs
with one_process_group() as group:
    col, row = ColumnParallelLinear(fc1, group), RowParallelLinear(fc2, group)
    with record_collectives() as fwd:
        y = row(torch.tanh(col(x)))
    with record_collectives() as bwd:
        y.sum().backward()
with torch.no_grad():
    err = float((y - fc2(torch.tanh(fc1(x)))).abs().max())
print(f"largest difference to the unsplit MLP: {err:.1e}; forward ran {[n for n, _ in fwd]}, "
      f"backward {[n for n, _ in bwd]}")


# %% [markdown]
# ## Q3 · `schedule_1f1b(n_ranks, n_micro) -> Schedule`
#
# A pipeline cuts the model into `p = n_ranks` stages, stage `r` on rank `r`, and the batch
# into `m = n_micro` micro-batches. perfkit writes a schedule as data: `Action(kind, stage,
# mb)` with `kind` `"F"` (forward) or `"B"` (backward), and `Schedule(name, n_ranks,
# n_stages, n_micro, ranks)` where `ranks[r]` lists rank `r`'s actions in the order it runs
# them (here `n_stages = n_ranks`). `F(s, j)` waits for `F(s - 1, j)`; `B(s, j)` waits for
# `F(s, j)` and `B(s + 1, j)`.
#
# GPipe runs every forward, then every backward: rank `r` holds all `m` micro-batches'
# activations at once. **1F1B** (PipeDream-Flush, Narayanan et al. 2021) has the same bubble,
# `(p - 1) / (m + p - 1)` of the step with unit costs, but frees activations early:
#
# 1. **warm-up**: rank `r` runs `p - r - 1` forwards (micro-batches `0 .. p - r - 2`);
# 2. **steady state**: then, while forwards remain, one forward and one backward in turn
#    (`F` of the next micro-batch, `B` of the oldest one still held);
# 3. **cool-down**: the remaining backwards, oldest first.
#
# So rank `r` never holds more than `p - r` micro-batches. Raise `ValueError` when
# `n_ranks < 1` or `n_micro < n_ranks` (the warm-up alone would not fill the pipe).

# %%
def schedule_1f1b(n_ranks, n_micro):
    ### BEGIN SOLUTION
    if n_ranks < 1 or n_micro < n_ranks:
        raise ValueError(f"1F1B needs n_ranks >= 1 and n_micro >= n_ranks, got "
                         f"n_ranks={n_ranks}, n_micro={n_micro}")
    rows = []
    for r in range(n_ranks):
        warm = n_ranks - r - 1
        row = [Action("F", r, j) for j in range(warm)]
        for j in range(n_micro - warm):
            row += [Action("F", r, warm + j), Action("B", r, j)]
        row += [Action("B", r, j) for j in range(n_micro - warm, n_micro)]
        rows.append(row)
    return Schedule("1f1b", n_ranks, n_ranks, n_micro, tuple(map(tuple, rows)))
    ### END SOLUTION


# %% [markdown]
# The simulator plays a schedule with a cost per action; `.` in the grid is a rank idling
# (the bubble). GPipe first, then yours, for `p = 4`, `m = 8`, unit costs:

# %%
P, M = 4, 8
for sched in (gpipe(P, M), schedule_1f1b(P, M)):
    validate(sched)   # raises DeadlockError for an order that would hang
    tl = simulate(sched, {"F": 1, "B": 1})
    print(f"{sched.name}: bubble {tl.bubble_share:.3f} (formula {bubble_formula('1f1b', P, M):.3f}), "
          f"micro-batches held at the peak per rank {list(tl.peak_in_flight)}")
    print(tl.text())

# %% [markdown]
# An order that would hang is caught on paper, never by a hanging job: give every rank the
# same warm-up as rank 0 but in reverse (rank `r` warms up with `r` forwards), and rank 0
# waits for a backward that rank 1 cannot start.

# %%
rows = []
for r in range(P):
    row = [Action("F", r, j) for j in range(r)]
    for j in range(M - r):
        row += [Action("F", r, r + j), Action("B", r, j)]
    rows.append(row + [Action("B", r, j) for j in range(M - r, M)])
try:
    validate(Schedule("reversed warm-up", P, P, M, tuple(map(tuple, rows))))
except DeadlockError as e:
    print(e)

# %% [markdown]
# ## Grade here
#
# The cell below runs the grader's checks in this notebook, including the 2-process runs of
# Q1 and Q2 (about 10-20 s; skipped in QUICK mode, where `make grade` runs them).

# %%
if not QUICK:
    from tools.labs.checks_lab07 import QUESTIONS

    for name, check in QUESTIONS.items():
        try:
            check(globals())
            print(f"[PASS] {name}")
        except (AssertionError, NotImplementedError) as e:
            print(f"[FAIL] {name}: {type(e).__name__}: {e}")
