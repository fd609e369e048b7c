"""Plausible wrong answers to lab 02 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_EF = """
import torch
class TopKWithErrorFeedback:
    def __init__(self, ratio):
        self.ratio = ratio
        self.residual = None

    def compress(self, grad):
        BODY
"""

MUTANTS = [
    Mutant("ring_all_reduce", "gather to rank 0 with isend/irecv, then send the sum back", """
import torch, torch.distributed as dist
def ring_all_reduce(tensor, group=None):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    if n == 1:
        return tensor
    if r == 0:
        buf = torch.empty_like(tensor)
        for src in range(1, n):
            dist.irecv(buf, src).wait()
            tensor += buf
        for dst in range(1, n):
            dist.isend(tensor, dst).wait()
    else:
        dist.isend(tensor, 0).wait()
        dist.irecv(tensor, 0).wait()
    return tensor
""", expect="not a ring"),
    Mutant("ring_all_reduce", "dist.all_reduce inside", """
import torch.distributed as dist
def ring_all_reduce(tensor, group=None):
    dist.all_reduce(tensor, group=group)
    return tensor
""", expect="build the ring"),
    Mutant("ring_all_reduce", "perfkit's own ring called instead of writing one", """
from perfkit.comm import ring_all_reduce as library_ring
def ring_all_reduce(tensor, group=None):
    return library_ring(tensor, group)
""", expect="ran perfkit's own .*perfkit.comm.ring.ring_all_reduce"),
    Mutant("ring_all_reduce", "perfkit's ring called only on several processes", """
import torch.distributed as dist
from perfkit import comm
def ring_all_reduce(tensor, group=None):
    if dist.get_world_size(group) == 1:
        return tensor
    return comm.ring.ring_all_reduce(tensor, group)
""", expect="on 2 processes, rank 0, ring_all_reduce ran perfkit's own"),
    Mutant("ring_all_reduce", "dist.all_reduce under another name", """
import torch.distributed as dist
reduce_all = getattr(dist, "all_" + "reduce")
def ring_all_reduce(tensor, group=None):
    if dist.get_world_size(group) > 1:
        reduce_all(tensor, group=group)
    return tensor
""", expect="not a ring|build the ring"),
    Mutant("ring_all_reduce", "whole buffers passed around the ring", """
import torch, torch.distributed as dist
def ring_all_reduce(tensor, group=None):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    if n == 1:
        return tensor
    passing, buf, total = tensor.clone(), torch.empty_like(tensor), tensor.clone()
    for _ in range(n - 1):
        reqs = [dist.isend(passing, (r + 1) % n), dist.irecv(buf, (r - 1) % n)]
        for q in reqs:
            q.wait()
        total += buf
        passing = buf.clone()
    tensor.copy_(total)
    return tensor
""", expect="whole buffer"),
    Mutant("ring_all_reduce", "reduce-scatter chunk indices off by one", """
import torch, torch.distributed as dist
def ring_all_reduce(tensor, group=None):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    if n == 1:
        return tensor
    chunks = tensor.view(-1).tensor_split(n)
    buf = torch.empty_like(chunks[0])
    def exchange(send_idx, recv_idx):
        out = buf[: chunks[recv_idx].numel()]
        reqs = []
        if chunks[send_idx].numel():
            reqs.append(dist.isend(chunks[send_idx], (r + 1) % n))
        if out.numel():
            reqs.append(dist.irecv(out, (r - 1) % n))
        for q in reqs:
            q.wait()
        return out
    for s in range(n - 1):
        i = (r - s) % n
        chunks[i].add_(exchange((r - s) % n, i))
    for s in range(n - 1):
        i = (r - s) % n
        chunks[i].copy_(exchange((r + 1 - s) % n, i))
    return tensor
""", expect="chunk indices|a process waits"),
    Mutant("topk_compress", "the largest values, not the largest magnitudes", """
import math, torch
def topk_compress(x, ratio):
    if not 0 < ratio <= 1 or not torch.isfinite(x).all():
        raise ValueError("bad")
    flat = x.reshape(-1)
    idx = torch.topk(flat, max(1, math.ceil(ratio * flat.numel()))).indices
    return flat[idx], idx
""", expect=r"magnitudes \(\|x\|, not x\)"),
    Mutant("topk_compress", "k rounded down", """
import math, torch
def topk_compress(x, ratio):
    if not 0 < ratio <= 1 or not torch.isfinite(x).all():
        raise ValueError("bad")
    flat = x.reshape(-1)
    idx = torch.topk(flat.abs(), max(1, int(ratio * flat.numel()))).indices
    return flat[idx], idx
""", expect="exactly k"),
    Mutant("topk_compress", "magnitudes sent instead of signed values", """
import math, torch
def topk_compress(x, ratio):
    if not 0 < ratio <= 1 or not torch.isfinite(x).all():
        raise ValueError("bad")
    flat = x.reshape(-1)
    vals, idx = torch.topk(flat.abs(), max(1, math.ceil(ratio * flat.numel())))
    return vals, idx
""", expect="with their signs"),
    Mutant("topk_compress", "NaN passed through silently", """
import math, torch
def topk_compress(x, ratio):
    if not 0 < ratio <= 1:
        raise ValueError("bad")
    flat = x.reshape(-1)
    idx = torch.topk(flat.abs(), max(1, math.ceil(ratio * flat.numel()))).indices
    return flat[idx], idx
""", expect="must raise ValueError for a tensor holding"),
    Mutant("TopKWithErrorFeedback", "the residual replaced by each gradient", _EF.replace("BODY", """self.residual = grad.clone()
        values, indices = topk_compress(self.residual, self.ratio)
        self.residual.view(-1)[indices] -= values
        return values, indices"""), expect="sent \\+ residual differs"),
    Mutant("TopKWithErrorFeedback", "what was sent never subtracted", _EF.replace("BODY", """if self.residual is None:
            self.residual = torch.zeros_like(grad)
        self.residual += grad
        return topk_compress(self.residual, self.ratio)"""), expect="sent \\+ residual differs"),
    Mutant("TopKWithErrorFeedback", "the whole residual cleared after sending", _EF.replace("BODY", """if self.residual is None:
            self.residual = torch.zeros_like(grad)
        self.residual += grad
        values, indices = topk_compress(self.residual, self.ratio)
        self.residual.zero_()
        return values, indices"""), expect="sent \\+ residual differs"),
    Mutant("TopKWithErrorFeedback_training", "no memory between calls (plain top-k)", _EF.replace("BODY", """self.residual = torch.zeros_like(grad)
        return topk_compress(grad, self.ratio)"""), expect="within 20 %|below plain top-k"),
    Mutant("TopKWithErrorFeedback_training", "the residual sent but never reduced", _EF.replace("BODY", """if self.residual is None:
            self.residual = torch.zeros_like(grad)
        self.residual += grad
        return topk_compress(self.residual, self.ratio)"""), expect="diverged|within 20 %|below plain top-k"),
    Mutant("TopKWithErrorFeedback_training", "what was sent added back instead of subtracted", _EF.replace("BODY", """if self.residual is None:
            self.residual = torch.zeros_like(grad)
        self.residual += grad
        values, indices = topk_compress(self.residual, self.ratio)
        self.residual.view(-1)[indices] += values
        return values, indices"""), expect="diverged|within 20 %|below plain top-k"),
]
