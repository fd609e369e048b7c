"""Plausible wrong answers to lab 07 (see tests/labs/test_mutants.py).

Most are caught by the one-process run in the grading process; those that only a second
process can show (a sum that is a mean, a bias counted twice, a split along the wrong
dimension) cost one 2-process launch each.
"""

from tools.grade import Mutant

_OP = """
import torch, torch.distributed as dist
class NAME(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        FORWARD

    @staticmethod
    def backward(ctx, grad):
        BACKWARD
"""


def _op(name: str, forward: str, backward: str) -> str:
    return _OP.replace("NAME", name).replace("FORWARD", forward).replace("BACKWARD", backward)


_COL = """
import torch.distributed as dist, torch.nn.functional as F
from torch import nn
class ColumnParallelLinear(nn.Module):
    def __init__(self, linear, group=None):
        super().__init__()
        self.group = group
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = linear.out_features
        rows = slice(r * n // t, (r + 1) * n // t)
        INIT

    def forward(self, x):
        FORWARD
"""
_COL_INIT = """self.weight = nn.Parameter(linear.weight[rows].detach().clone())
        self.bias = nn.Parameter(linear.bias[rows].detach().clone())"""


def _col(forward: str, init: str = _COL_INIT) -> str:
    return _COL.replace("INIT", init).replace("FORWARD", forward)


_ROW = """
import torch.distributed as dist, torch.nn.functional as F
from torch import nn
class RowParallelLinear(nn.Module):
    def __init__(self, linear, group=None):
        super().__init__()
        self.group = group
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = linear.in_features
        cols = slice(r * n // t, (r + 1) * n // t)
        self.weight = nn.Parameter(linear.weight[:, cols].detach().clone())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x):
        FORWARD
"""

_SCHED = """
from perfkit.parallel import Action, Schedule
def schedule_1f1b(n_ranks, n_micro):
    if n_ranks < 1 or n_micro < n_ranks:
        raise ValueError("need n_micro >= n_ranks >= 1")
    rows = []
    for r in range(n_ranks):
        warm = WARM
        row = [Action("F", r, j) for j in range(warm)]
        for j in range(n_micro - warm):
            row += [Action("F", r, warm + j), Action("B", r, j)]
        row += [Action("B", r, j) for j in range(n_micro - warm, n_micro)]
        rows.append(tuple(row))
    return Schedule("1f1b", n_ranks, n_ranks, n_micro, tuple(rows))
"""

Q1, Q2, Q3 = ("copy_to_tp / reduce_from_tp", "ColumnParallelLinear / RowParallelLinear",
              "schedule_1f1b")

MUTANTS = [
    Mutant(Q1, "the two operators swapped", """
def copy_to_tp(x, group=None):
    return ReduceFromTP.apply(x, group)
def reduce_from_tp(x, group=None):
    return CopyToTP.apply(x, group)
""", expect="the two operators are swapped"),
    Mutant(Q1, "f all-reduces in both directions", _op(
        "CopyToTP", "x = x.clone()\n        dist.all_reduce(x, group=group)\n        return x",
        "grad = grad.clone()\n        dist.all_reduce(grad, group=ctx.group)\n        return grad, None"),
        expect=r"copy_to_tp \(f\) ran \['all_reduce'\] in forward"),
    Mutant(Q1, "g all-reduces in both directions", _op(
        "ReduceFromTP", "x = x.clone()\n        dist.all_reduce(x, group=group)\n        return x",
        "grad = grad.clone()\n        dist.all_reduce(grad, group=ctx.group)\n        return grad, None"),
        expect=r"reduce_from_tp \(g\) ran \['all_reduce'\] in backward"),
    Mutant(Q1, "the group argument ignored", _op(
        "CopyToTP", "return x.view_as(x)",
        "grad = grad.clone()\n        dist.all_reduce(grad)\n        return grad, None"),
        expect="without the group it was given"),
    Mutant(Q1, "g averages the partial sums instead of summing them", _op(
        "ReduceFromTP", "x = x.clone()\n        dist.all_reduce(x, group=group)\n"
        "        return x / dist.get_world_size(group)", "return grad, None"),
        expect="on 2 processes, rank 0: reduce_from_tp returned the partial sums' mean"),
    Mutant(Q1, "f's backward returns the local gradient, not the reduced one", _op(
        "CopyToTP", "return x.view_as(x)",
        "total = grad.clone()\n        dist.all_reduce(total, group=ctx.group)\n"
        "        return grad, None"),
        expect="only this rank's share of the gradient"),
    Mutant(Q1, "perfkit's own operators", """
from perfkit.parallel import copy_to_tp, reduce_from_tp
""", expect="ran perfkit's own"),
    Mutant(Q2, "column-parallel input not passed through f", _col(
        "return F.linear(x, self.weight, self.bias)"),
        expect="backward ran no collective.*copy_to_tp"),
    Mutant(Q2, "column-parallel output all-reduced (g instead of f)", _col(
        "return reduce_from_tp(F.linear(x, self.weight, self.bias), self.group)"),
        expect=r"ran \['all_reduce', 'all_reduce'\] in forward"),
    Mutant(Q2, "row-parallel bias added on every rank before the all-reduce", _ROW.replace(
        "FORWARD", "return reduce_from_tp(F.linear(x, self.weight, self.bias), self.group)"),
        expect="on 2 processes.*added its bias on every rank BEFORE the all-reduce"),
    Mutant(Q2, "column split along the wrong dimension (input features)", _col(
        "return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)",
        "cols = slice(r * linear.in_features // t, (r + 1) * linear.in_features // t)\n"
        "        self.weight = nn.Parameter(linear.weight[:, cols].detach().clone())\n"
        "        self.bias = nn.Parameter(linear.bias[rows].detach().clone())"),
        expect="on 2 processes.*the column split is along the wrong dimension"),
    Mutant(Q2, "the unsplit linear kept as a submodule", _col(
        "return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)",
        _COL_INIT + "\n        self.linear = linear"),
        expect="registers 112 parameter values; its slice has 56"),
    Mutant(Q2, "an uneven split accepted silently (tensor_split, no ValueError)", _ROW.replace(
        "cols = slice(r * n // t, (r + 1) * n // t)",
        "cols = torch.arange(n).tensor_split(t)[r]").replace(
        "import torch.distributed", "import torch, torch.distributed").replace(
        "FORWARD", "y = reduce_from_tp(F.linear(x, self.weight), self.group)\n"
        "        return y + self.bias"),
        expect="RowParallelLinear built from a linear whose split dimension has 7 features did "
        "not raise ValueError"),
    Mutant(Q2, "perfkit's own ColumnParallelLinear wrapped", """
from perfkit.parallel import ColumnParallelLinear as Library
def ColumnParallelLinear(linear, group=None):
    return Library.from_linear(linear, group)
""", expect="ran perfkit's own"),
    Mutant(Q3, "a GPipe order called 1F1B", """
from perfkit.parallel import Action, Schedule
def schedule_1f1b(n_ranks, n_micro):
    if n_ranks < 1 or n_micro < n_ranks:
        raise ValueError("need n_micro >= n_ranks >= 1")
    rows = [tuple([Action("F", r, j) for j in range(n_micro)]
                  + [Action("B", r, j) for j in range(n_micro)]) for r in range(n_ranks)]
    return Schedule("1f1b", n_ranks, n_ranks, n_micro, tuple(rows))
""", expect="that is GPipe"),
    Mutant(Q3, "warm-up one forward too long (p - r)", _SCHED.replace("WARM", "n_ranks - r"),
           expect="warm-up one forward too long"),
    Mutant(Q3, "warm-up one forward too short (p - r - 2)",
           _SCHED.replace("WARM", "max(n_ranks - r - 2, 0)"),
           expect=r"simulated bubble is .* \(p - 1\) / \(m \+ p - 1\)"),
    Mutant(Q3, "warm-up reversed (r forwards on rank r): deadlocks", _SCHED.replace("WARM", "r"),
           expect="the order would hang"),
    Mutant(Q3, "perfkit's own one_f_one_b", """
from perfkit.parallel import one_f_one_b
def schedule_1f1b(n_ranks, n_micro):
    return one_f_one_b(n_ranks, n_micro)
""", expect="ran perfkit's own"),
    Mutant(Q3, "fewer micro-batches than stages accepted silently", _SCHED.replace(
        'if n_ranks < 1 or n_micro < n_ranks:', 'if n_ranks < 1 or n_micro < 1:').replace(
        "WARM", "min(n_ranks - r - 1, n_micro)"), expect="must raise ValueError"),
]
