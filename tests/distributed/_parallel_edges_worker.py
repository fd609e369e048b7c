"""torchrun worker for tests/distributed/test_parallel_edges.py: model parallelism's edge cases
on 2, 3 and 4 gloo processes, in float64 where precision is the point.

Tasks (``--config '{"tasks": [...]}'``, run in order, one record each):

* ``ce``: :func:`vocab_parallel_cross_entropy` over a vocabulary split unevenly (widths differ
  by rank), float64, against ``F.cross_entropy`` on the whole logits: the loss and the logits'
  gradient for every ``reduction``, with ``ignore_index`` targets, with every target ignored;
  and the errors for a target ``>= V`` and a negative one, recorded on every rank.
* ``emb``: :class:`VocabParallelEmbedding` over an uneven split (``vocab_size`` asked of the
  group) against ``nn.Embedding``, and its errors for ids ``>= V``, ``< 0`` and float ids.
* ``zb``: a pipeline whose stages use a weight both through its Linear's call and outside it
  (a tied embedding and head, ``F.linear(h, lin.weight)``), float64, under GPipe, 1F1B and
  ZB-H1 against the unsplit model.
* ``mismatch`` (last: it leaves receives posted on a side group): a stage output whose dtype
  or shape is not ``act_dtype``/``act_shape``; each rank's error and how long it took.

Usage::

    launch(str(Path(__file__).with_name("_parallel_edges_worker.py")), 2,
           ["--config", json.dumps({"tasks": [{"task": "ce"}]})])
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfkit import dist as pdist
from perfkit.parallel import (
    VocabParallelEmbedding,
    gpipe,
    one_f_one_b,
    run_schedule,
    vocab_parallel_cross_entropy,
    zb_h1,
)

V, C, B, T, M = 11, 6, 2, 5, 3   # vocabulary, width, micro-batch, sequence, micro-batches


def uneven_split(vocab: int, world: int) -> list[tuple[int, int]]:
    """``(start, width)`` per rank: the first ``vocab % world`` ranks one column more."""
    base, extra = divmod(vocab, world)
    out, start = [], 0
    for r in range(world):
        w = base + (r < extra)
        out.append((start, w))
        start += w
    return out


def _err(fn: Any) -> str | None:
    try:
        fn()
    except Exception as e:   # the test reads the class and the message
        return f"{type(e).__name__}: {e}"
    return None


def _ce(task: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    full = torch.randn(B, T, V, generator=g, dtype=torch.float64) * 3   # the same on every rank
    tgt = torch.randint(V, (B, T), generator=g)
    tgt[0, 1], tgt[1, 3] = -100, -100
    start, width = uneven_split(V, world)[rank]
    out: dict[str, Any] = {"widths": [w for _, w in uneven_split(V, world)]}
    for reduction in ("mean", "sum", "none"):
        for case, t in (("some_ignored", tgt), ("all_ignored", torch.full_like(tgt, -100))):
            mine = full[..., start:start + width].clone().requires_grad_()
            ref = full.clone().requires_grad_()
            loss = vocab_parallel_cross_entropy(mine, t, start, reduction=reduction)
            want = F.cross_entropy(ref.transpose(1, 2), t, reduction=reduction)
            w = torch.randn(loss.shape, generator=g, dtype=torch.float64)   # a weighted sum
            (loss * w).sum().backward()
            (want * w).sum().backward()
            gref = ref.grad[..., start:start + width]
            out[f"{reduction}/{case}"] = {
                "dtype": str(loss.dtype), "shape": list(loss.shape),
                "loss_nan": bool(loss.isnan().any()), "want_nan": bool(want.isnan().any()),
                "loss_err": float((loss - want).abs().nan_to_num(0.0).max()),
                "grad_err": float((mine.grad - gref).abs().max()),
                "grad_finite": bool(mine.grad.isfinite().all())}
    logits = full[..., start:start + width]
    for name, bad in (("over", V), ("negative", -1)):
        t = tgt.clone()
        t[1, 0] = bad
        out[f"error_{name}"] = _err(lambda t=t: vocab_parallel_cross_entropy(logits, t, start))
        out[f"error_{name}_sized"] = _err(
            lambda t=t: vocab_parallel_cross_entropy(logits, t, start, vocab_size=V))
    # a padding label inside the vocabulary is ignored as F.cross_entropy ignores it
    pad = vocab_parallel_cross_entropy(logits, tgt.clamp_min(0), start, ignore_index=0)
    out["pad_err"] = float((pad - F.cross_entropy(full.transpose(1, 2), tgt.clamp_min(0),
                                                  ignore_index=0)).abs())
    return out


def _emb(task: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    ref = nn.Embedding(V, C).double()
    start, width = uneven_split(V, world)[rank]
    emb = VocabParallelEmbedding(ref.weight.detach()[start:start + width].clone(), start)
    ids = torch.randint(V, (B, T), generator=torch.Generator().manual_seed(1))
    out = {"vocab_size": emb.vocab_size,
           "err": float((emb(ids) - ref(ids)).abs().max())}
    for name, bad in (("over", torch.full((1, 2), V)), ("negative", torch.tensor([[0, -1]])),
                      ("float", ids.double())):
        out[f"error_{name}"] = _err(lambda bad=bad: emb(bad))
        out[f"torch_{name}"] = _err(lambda bad=bad: ref(bad))
    return out


class TiedEmbedHead(nn.Module):
    """``(B, T)`` ids to ``(B, T, C)``: an embedding whose table is also a Linear head's weight
    (tied), read back through the table: the weight used through the Linear's call, by
    ``F.embedding`` and by a matmul."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.head = nn.Linear(C, V, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)                          # (B, T, C)
        p = torch.softmax(self.head(h), -1)        # (B, T, V)
        return h + p @ self.emb.weight             # (B, T, C)


class DoubleUse(nn.Module):
    """A Linear called, and its weight used again outside the call: ``F.linear(h, lin.weight)``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.out = nn.Linear(C, C), nn.Linear(C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(x))
        return self.out(h + F.linear(h, self.lin.weight))


def tied_stages(n: int, seed: int = 0) -> list[nn.Module]:
    """``n >= 2`` float64 stages: the tied embedding, ``n - 2`` double uses, a double use and
    a readout."""
    torch.manual_seed(seed)
    mods = [TiedEmbedHead()] + [DoubleUse() for _ in range(n - 2)]
    mods.append(nn.Sequential(DoubleUse(), nn.Linear(C, C)))
    return [m.double() for m in mods]


def batches(seed: int = 1) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randint(V, (B, T), generator=g) for _ in range(M)]
    ys = [torch.randn(B, T, C, generator=g, dtype=torch.float64) for _ in range(M)]
    return xs, ys


def mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out - y).pow(2).mean()


def unsplit_grads(stages: list[nn.Module]) -> list[list[torch.Tensor]]:
    """Each stage's gradients for the whole batch (mean of the micro-batch losses)."""
    xs, ys = batches()
    for s in stages:
        s.zero_grad(set_to_none=True)
    for x, y in zip(xs, ys):
        h = x
        for s in stages:
            h = s(h)
        (mse(h, y) / M).backward()
    return [[q.grad.clone() for q in s.parameters()] for s in stages]


def _rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max() / y.abs().max()) for x, y in zip(a, b, strict=True))


def _zb(task: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    stages = tied_stages(world)
    want = unsplit_grads(stages)[rank]
    xs, ys = batches()
    out = {}
    for sched in (gpipe(world, M), one_f_one_b(world, M), zb_h1(world, M)):
        stages[rank].zero_grad(set_to_none=True)
        run_schedule(sched, {rank: stages[rank]}, xs if rank == 0 else None,
                     ys if rank == world - 1 else None, mse, (B, T, C), torch.float64,
                     timeout_s=60.0, count_memory=False)
        out[sched.name] = {"rel": _rel([q.grad for q in stages[rank].parameters()], want),
                           "W": sum(1 for a in sched.ranks[rank] if a.kind == "W")}
    return out


def _mismatch(task: dict) -> dict:
    """Stage 0 sends float64 (or the wrong shape) where act_dtype/act_shape say otherwise."""
    rank = dist.get_rank()
    timeout_s = task.get("timeout_s", 3.0)
    xs = [torch.ones(1, 4, dtype=torch.float64) for _ in range(2)]
    out = {}
    for case, shape, dtype in (("dtype", (1, 4), torch.float32),
                               ("shape", (1, 8), torch.float64)):
        side = dist.new_group(backend="gloo")   # a timed-out receive closes its pairs
        stage = nn.Linear(4, 4).double()
        t0 = time.perf_counter()
        err = _err(lambda stage=stage, shape=shape, dtype=dtype, side=side: run_schedule(
            gpipe(2, 2), {rank: stage}, xs if rank == 0 else None, xs if rank == 1 else None,
            mse, shape, dtype, timeout_s=timeout_s, count_memory=False, group=side))
        out[case] = {"error": err, "took_s": time.perf_counter() - t0}
        dist.barrier()
    return out


TASKS = {"ce": _ce, "emb": _emb, "zb": _zb, "mismatch": _mismatch}


def run(cfg: dict) -> list[dict]:
    torch.set_num_threads(1)
    return [TASKS[task["task"]](task) for task in cfg["tasks"]]


if __name__ == "__main__":
    pdist.worker_main(run, __doc__)
