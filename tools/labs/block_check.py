"""Job: one ZeRO-3 block (gather, use, free) on N ranks against the unsharded blocks.

How lab 03's ``ShardedBlock`` is graded. A factory ``(block) -> module`` (the student's
class, handed over as a cloudpickle file) wraps each of three residual MLP blocks of 187
parameters (12 -> 7 -> 12: 187 divides by neither 2 nor 3, so the flat buffers need
padding). :func:`run_impl` then records, in order, what a check needs to name a mistake:

1. ``shard_numel``: the size of each wrapper's ``shard`` (``ceil(187 / N)`` with padding),
   and ``param_numel_after_init``: what the block's own parameters still hold (0: freed);
2. ``gather_max_abs_diff``: each block's parameters after ``gather()`` against the
   unsharded block's (the shards in rank order), and ``param_numel_after_free``;
3. ``max_rel_diff``: after ``steps`` steps of ``torch.optim.AdamW`` over the shards, the
   gathered parameters against single-process AdamW on the whole global batch;
4. ``peak_param_bytes``: the largest bytes of parameter storage alive at once, probed
   inside every block's forward (in forward and in backward's recomputation): the distinct
   storages of the blocks' parameters and of every tensor a wrapper holds in its attributes
   (its shard, and any gathered buffer kept there, in lists and dicts too); ``shard_bytes``
   and ``block_bytes`` (one gathered block, padded) bound it. Attributes, not weak
   references to the all-gather outputs: gloo's work objects release their output a moment
   after the call returns, which made such a probe see a freed buffer now and then.

An exception stops the run; ``error`` holds the stage and the traceback's end.

Run by :func:`perfkit.dist.launch`::

    launch("tools.labs.block_check", 2, ["--config", json.dumps({"impl": path})],
           pythonpath=[ROOT])
"""

from __future__ import annotations

import argparse
import json
import math
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit import dist as pdist
from perfkit._checks import check_callable, check_int

__all__ = ["BLOCKS", "Residual", "make_blocks", "run_impl"]

BLOCKS, WIDTH, HIDDEN, GLOBAL_BATCH = 3, 12, 7, 12  # 187 parameters per block
LR, WD = 1e-2, 0.1


class Residual(nn.Module):
    """``x + proj(tanh(fc(x)))``: 12 -> 7 -> 12, 187 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.proj = nn.Linear(WIDTH, HIDDEN), nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(torch.tanh(self.fc(x)))  # (B, 12)


def make_blocks(seed: int = 0) -> list[nn.Module]:
    """The test blocks; the same seed gives the same weights on every rank."""
    torch.manual_seed(seed)
    return [Residual() for _ in range(BLOCKS)]


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2000 + step)
    return torch.randn(GLOBAL_BATCH, WIDTH, generator=g), torch.randn(GLOBAL_BATCH, WIDTH,
                                                                     generator=g)


def _forward(blocks: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for b in blocks:
        x = b(x)
    return x


def _tensors(obj: Any, depth: int = 3) -> Iterator[torch.Tensor]:
    """Tensors held by ``obj``: itself, or in its attributes, lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v, depth - 1)
    elif depth and isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v, depth - 1)
    elif depth and isinstance(obj, nn.Module):
        yield from _tensors(vars(obj), depth - 1)


def _live_bytes(wrapped: list[nn.Module], inner: list[nn.Module]) -> int:
    """Bytes of distinct parameter storages alive now (see the module docstring)."""
    storages: dict[int, int] = {}
    tensors = [p for b in inner for p in b.parameters()]
    tensors += [t for w in wrapped for t in _tensors(w)]
    for t in tensors:
        s = t.untyped_storage()
        if s.nbytes():
            storages[s.data_ptr()] = s.nbytes()
    return sum(storages.values())


def _agree(ok: bool, world: int) -> bool:
    """True on every rank only if ``ok`` on every rank (so that all stop together)."""
    if world == 1:
        return ok
    flag = torch.tensor([float(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def run_impl(factory: Callable[[nn.Module], nn.Module], rank: int, world: int,
             steps: int = 20) -> dict[str, Any]:
    """Check ``factory`` on this rank (see the module docstring); not collective itself,
    but the factory's collectives are: every rank runs it with the same ``steps``.

    Raises:
        TypeError, ValueError: for a ``factory`` that is not callable, a ``world`` below 1, a
            ``rank`` outside ``[0, world)`` or ``steps`` below 1 (the answer's own errors
            are caught and reported under ``error``).
    """
    check_callable("factory", factory)
    check_int("world", world, 1)
    check_int("rank", rank, 0, world - 1)
    check_int("steps", steps, 1)
    out: dict[str, Any] = {"rank": rank, "world_size": world, "numel": 0}
    stage = "building ShardedBlock"
    try:
        inner, ref = make_blocks(), make_blocks()
        numels = [sum(p.numel() for p in b.parameters()) for b in inner]
        out["numel"] = numels[0]
        wrapped = [factory(b) for b in inner]
        out["shard_numel"] = [int(w.shard.numel()) for w in wrapped]
        out["param_numel_after_init"] = sum(p.numel() for b in inner for p in b.parameters())
        if not _agree(out["shard_numel"] == [math.ceil(n / world) for n in numels], world):
            return out
        stage = "gather()"
        diffs = []
        with torch.no_grad():
            for w, b, r in zip(wrapped, inner, ref, strict=True):
                w.gather()
                diffs.append(max(float((p - q).abs().max()) for p, q in
                                 zip(b.parameters(), r.parameters(), strict=True)))
                stage = "free()"
                w.free()
        out["gather_max_abs_diff"] = max(diffs)
        out["param_numel_after_free"] = sum(p.numel() for b in inner for p in b.parameters())
        stage = "training"
        opt = torch.optim.AdamW([w.shard for w in wrapped], lr=LR, weight_decay=WD)
        ref_opt = torch.optim.AdamW([p for b in ref for p in b.parameters()], lr=LR,
                                    weight_decay=WD)
        chunk, peak = GLOBAL_BATCH // world, [0]
        for b in inner:  # inside a block's forward its parameters are in use
            b.register_forward_hook(lambda *_: peak.__setitem__(
                0, max(peak[0], _live_bytes(wrapped, inner))))
        for s in range(steps):
            x, y = _batch(s)
            mine = slice(rank * chunk, (rank + 1) * chunk)
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(_forward(wrapped, x[mine]), y[mine]).backward()
            opt.step()
            ref_opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(_forward(ref, x), y).backward()
            ref_opt.step()
        out["peak_param_bytes"] = peak[0]
        out["shard_bytes"] = sum(w.shard.numel() * w.shard.element_size() for w in wrapped)
        out["block_bytes"] = world * math.ceil(max(numels) / world) * 4  # fp32, padded
        stage = "gather() after training"
        diffs = []
        with torch.no_grad():
            for w, b, r in zip(wrapped, inner, ref, strict=True):
                w.gather()
                diffs.append(max(float((p - q).abs().max() / q.abs().max()) for p, q in
                                 zip(b.parameters(), r.parameters(), strict=True)))
                w.free()
        out["max_rel_diff"] = max(diffs)
    except Exception:  # noqa: BLE001 - a student's answer may raise anything; the check says where
        out["error"] = f"{stage}: {traceback.format_exc()[-1200:]}"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help='JSON object: {"impl": path, "steps": 20}')
    cfg = json.loads(p.parse_args().config)
    ctx = pdist.init_worker(backend="gloo")
    import cloudpickle

    with open(cfg["impl"], "rb") as f:
        factory = cloudpickle.load(f)
    pdist.worker_result(run_impl(factory, ctx.rank, ctx.world_size, int(cfg.get("steps", 20))))
    pdist.shutdown()


if __name__ == "__main__":
    main()
