"""Plausible wrong answers to lab 03 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_ZB = """
def zero_bytes_per_rank(num_params, world_size, stage, param_bytes=2, grad_bytes=2,
                        optimizer_bytes=12):
    if stage not in (0, 1, 2, 3) or world_size < 1 or not num_params > 0:
        raise ValueError("bad")
    n = float(world_size)
    BODY
"""

_ZERO = """
import torch, torch.distributed as dist
class ZeroOne:
    def __init__(self, params, optimizer_class, **defaults):
        self.params = list(params)
        ready = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if ready else 1
        self.rank = dist.get_rank() if ready else 0
        self.numel = sum(p.numel() for p in self.params)
        start, end = shard_range(self.numel, self.world_size, self.rank)
        p0 = self.params[0]
        self.flat = torch.zeros((end - start) * self.world_size, dtype=p0.dtype)
        self.offsets, off = [], 0
        with torch.no_grad():
            for p in self.params:
                self.flat[off:off + p.numel()].copy_(p.reshape(-1))
                p.data = self.flat[off:off + p.numel()].view_as(p)
                self.offsets.append(off)
                off += p.numel()
        self.start, self.end = start, end
        self.shard = torch.nn.Parameter(self.flat[start:end])
        self.optim = optimizer_class([self.shard], **defaults)

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        n = self.world_size
        flat_grad = torch.zeros_like(self.flat)
        for p, off in zip(self.params, self.offsets):
            if p.grad is not None:
                flat_grad[off:off + p.numel()].copy_(p.grad.reshape(-1))
        REDUCE
        self.shard.grad = shard_grad
        self.optim.step()
        self.shard.grad = None
        GATHER
"""
_RS = """if n > 1:
            shard_grad = torch.empty_like(self.shard)
            dist.reduce_scatter(shard_grad, list(flat_grad.chunk(n)))
            shard_grad.div_(n)
        else:
            shard_grad = flat_grad"""
_AG = """if n > 1:
            dist.all_gather_into_tensor(self.flat, self.shard.detach().clone())"""

MUTANTS = [
    Mutant("zero_bytes_per_rank", "stage 1 shards the gradients too", _ZB.replace("BODY", """return (param_bytes * num_params / (n if stage >= 3 else 1) + grad_bytes * num_params / (n if stage >= 1 else 1)
            + optimizer_bytes * num_params / (n if stage >= 1 else 1))"""), expect="Which of P, G, K"),
    Mutant("zero_bytes_per_rank", "stage 3 leaves the parameters whole", _ZB.replace("BODY", """return (param_bytes * num_params + grad_bytes * num_params / (n if stage >= 2 else 1)
            + optimizer_bytes * num_params / (n if stage >= 1 else 1))"""), expect="Which of P, G, K"),
    Mutant("zero_bytes_per_rank", "the defaults used instead of the byte arguments", _ZB.replace("BODY", """return (2 * num_params / (n if stage >= 3 else 1) + 2 * num_params / (n if stage >= 2 else 1)
            + 12 * num_params / (n if stage >= 1 else 1))"""), expect="Use the byte arguments"),
    Mutant("shard_range", "the remainder dropped: floor division", """
def shard_range(numel, world_size, rank):
    if numel < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("bad")
    size = numel // world_size
    return rank * size, (rank + 1) * size
""", expect=r"equal slices of ceil"),
    Mutant("shard_range", "the remainder given to the last rank", """
def shard_range(numel, world_size, rank):
    if numel < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("bad")
    size = numel // world_size
    return rank * size, numel if rank == world_size - 1 else (rank + 1) * size
""", expect=r"equal slices of ceil"),
    Mutant("shard_range", "no error for a rank out of range", """
import math
def shard_range(numel, world_size, rank):
    if numel < 1 or world_size < 1:
        raise ValueError("bad")
    size = math.ceil(numel / world_size)
    return rank * size, (rank + 1) * size
""", expect="must raise ValueError"),
    Mutant("ZeroOne", "the whole gradient all-reduced, then the slice stepped",
           _ZERO.replace("REDUCE", """if n > 1:
            dist.all_reduce(flat_grad)
            flat_grad.div_(n)
        shard_grad = flat_grad[self.start:self.end].clone()""").replace("GATHER", _AG),
           expect="twice the bytes"),
    Mutant("ZeroOne", "the gradient summed, not averaged", _ZERO.replace("REDUCE", _RS.replace(
        "            shard_grad.div_(n)\n", "")).replace("GATHER", _AG), expect="divide by N"),
    Mutant("ZeroOne", "no all-gather of the updated slices", _ZERO.replace("REDUCE", _RS).replace(
        "GATHER", "pass"), expect="all-gather|ZeRO-1 reduce-scatters"),
]

_BLOCK = """
import torch, torch.distributed as dist
from torch import nn
class ShardedBlock(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block
        ready = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if ready else 1
        self.rank = dist.get_rank() if ready else 0
        params = list(block.parameters())
        self.shapes = [p.shape for p in params]
        self.numels = [p.numel() for p in params]
        numel = sum(self.numels)
        INIT
        self.free()

    def gather(self):
        full = torch.empty(self.world_size * self.shard.numel())
        GATHER
        off = 0
        for p, n, shape in zip(self.block.parameters(), self.numels, self.shapes):
            p.data = full[off:off + n].view(shape)
            off += n
        return full

    def free(self):
        FREE

    def forward(self, x):
        return GatherUseFree.apply(self, self.shard, x)
"""
_INIT = """start, end = shard_range(numel, self.world_size, self.rank)
        flat = torch.zeros(self.world_size * (end - start))
        flat[:numel] = torch.cat([p.detach().reshape(-1) for p in params])
        self.shard = torch.nn.Parameter(flat[start:end].clone())"""
_GATHER = """if self.world_size > 1:
            dist.all_gather_into_tensor(full, self.shard.detach().clone())
        else:
            full.copy_(self.shard.detach())"""
_FREE = """for p in self.block.parameters():
            p.data = torch.empty(0)"""


def _block(init=_INIT, gather=_GATHER, free=_FREE):
    return _BLOCK.replace("INIT", init).replace("GATHER", gather).replace("FREE", free)


MUTANTS += [
    Mutant("ShardedBlock", "free() never frees: the gathered parameters stay", _block(free="pass"),
           expect="empty tensor"),
    Mutant("ShardedBlock", "gathered in the wrong rank order: its own shard first", _block(gather="""chunks = [torch.empty_like(self.shard) for _ in range(self.world_size)]
        if self.world_size > 1:
            dist.all_gather(chunks, self.shard.detach().clone())
        else:
            chunks[0] = self.shard.detach()
        full = torch.cat(chunks[self.rank:] + chunks[:self.rank])"""), expect="rank order"),
    Mutant("ShardedBlock", "no padding: shards of floor(numel / N) values", _block(init="""size = numel // self.world_size
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        self.shard = torch.nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone())"""),
           expect="padding"),
    Mutant("ShardedBlock", "the gathered buffer kept as self.full", _block(gather=_GATHER + """
        self.full = full"""), expect="peak parameter bytes|kept alive"),
    Mutant("ShardedBlock", "the shard a view of the whole flat buffer", _block(
        init=_INIT.replace("flat[start:end].clone()", "flat[start:end]")), expect="kept alive"),
]
