"""Job: ring attention (:mod:`perfkit.parallel.context`) against one process, and its costs.

Run by :func:`perfkit.dist.launch`::

    launch("perfkit.jobs.context_parallel", 4, ["--config", json.dumps(
        {"equal": {"seq_len": 56, "tile": 4}, "time": {"seq_len": 1024, "repeat": 3}})])

Tasks (keys of the config):

* ``equal``: for each case (non-causal contiguous, causal contiguous, causal zig-zag) and
  dtype (float64, float32), every rank draws the same full ``q, k, v`` and output gradient,
  runs ring attention on its part, and compares its output and ``dQ, dK, dV`` with float64
  attention on the whole sequence, cut the same way (max abs differences); plus the bytes
  this rank sent against :func:`perfkit.parallel.context_model.ring_bytes` and the ring steps.
* ``missing_peer``: rank 0 runs ring attention with ``timeout_s`` while the others never
  call it: rank 0 must fail with the transfer's timeout instead of hanging.
* ``time``: causal forward + backward per split, timed in alternation (``repeat`` rounds):
  each rank's compute seconds per round (the per-rank work imbalance, measured), its wait
  seconds (transfers not hidden), the part of them after both neighbours had sent
  (``ready_wait_s``: :func:`perfkit.parallel.context.waits_after_ready`), and the seconds one
  K/V block's exchange takes alone (``exchange_s``) and a K/V block's and a dK/dV block's
  posted together (``pair_exchange_s``), as backward posts and waits for them.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from perfkit import dist as pdist
from perfkit.compute.flash import reference_attention
from perfkit.parallel.context import RingStats, ring_attention, shard_sequence, waits_after_ready
from perfkit.parallel.context_model import ring_bytes
from perfkit.timing import Timer

CASES = (("full", False, "contiguous"), ("causal", True, "contiguous"),
         ("zigzag", True, "zigzag"))


def _full_inputs(shape: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)  # the same on every rank
    return [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(4)]


def equal(seq_len: int, tile: int, batch: int = 2, heads: int = 2, head_dim: int = 8,
          seed: int = 0) -> list[dict[str, Any]]:
    """Ring attention against float64 attention on the whole sequence, per case and dtype.

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    q, k, v, do = _full_inputs((batch, heads, seq_len, head_dim), seed)
    out = []
    for name, causal, split in CASES:
        qd, kd, vd = (t.clone().requires_grad_() for t in (q, k, v))
        ref, _ = reference_attention(qd, kd, vd, causal)
        ref_grads = torch.autograd.grad(ref, (qd, kd, vd), do)
        for dtype in (torch.float64, torch.float32):
            local = [shard_sequence(t, rank, world, split).to(dtype).requires_grad_()
                     for t in (q, k, v)]
            stats = RingStats()
            o = ring_attention(*local, causal=causal, split=split, tile=tile, stats=stats)
            grads = torch.autograd.grad(o, local, shard_sequence(do, rank, world, split).to(dtype))
            cut = [shard_sequence(t, rank, world, split) for t in (ref, *ref_grads)]
            errs = [(a.double() - b).abs().max().item() for a, b in zip((o, *grads), cut)]
            want = ring_bytes(batch, heads, seq_len, head_dim, world, dtype)
            out.append({"case": name, "dtype": str(dtype).removeprefix("torch."),
                        "out_err": errs[0], "dq_err": errs[1], "dk_err": errs[2],
                        "dv_err": errs[3], "finite": all(bool(torch.isfinite(t).all())
                                                         for t in (o, *grads)),
                        "stats": asdict(stats), "want_bytes": asdict(want)})
    return out


def _exchange_alone(blocks: Sequence[torch.Tensor], repeat: int) -> list[float]:
    """Seconds of sending ``blocks`` to the next rank and receiving as many from the previous,
    all posted together and waited for together."""
    world, rank = dist.get_world_size(), dist.get_rank()
    times = []
    for _ in range(repeat):
        ops = []
        for tag, block in enumerate(blocks):
            ops += [dist.P2POp(dist.isend, block, (rank + 1) % world, tag=tag),
                    dist.P2POp(dist.irecv, torch.empty_like(block), (rank - 1) % world, tag=tag)]
        with Timer() as t:
            reqs = dist.batch_isend_irecv(ops)
            for req in reqs:
                req.wait(datetime.timedelta(seconds=60))  # a missing peer fails, never hangs
        times.append(t.elapsed_s)
    return times


def time_splits(seq_len: int, tile: int = 64, repeat: int = 3, batch: int = 1, heads: int = 4,
                head_dim: int = 32, seed: int = 0) -> dict[str, Any]:
    """Causal forward + backward per split, in alternation: this rank's compute and wait
    seconds per round, and the exchanges alone: one K/V block, and a K/V and a dK/dV block
    posted together (what backward waits for at each step but its last).

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    q, k, v, do = (t.float() for t in _full_inputs((batch, heads, seq_len, head_dim), seed))
    rounds: dict[str, dict[str, list[float]]] = {s: {"compute_s": [], "wait_s": [], "ready_wait_s": [],
                                                     "step_s": []} for s in ("contiguous",
                                                                              "zigzag")}
    for _ in range(repeat + 1):  # the first round warms up and is dropped
        for split, rec in rounds.items():
            local = [shard_sequence(t, rank, world, split).requires_grad_() for t in (q, k, v)]
            stats = RingStats()
            dist.barrier()
            with Timer() as t:
                o = ring_attention(*local, causal=True, split=split, tile=tile, stats=stats)
                o.backward(shard_sequence(do, rank, world, split))
            every: list[Any] = [None] * world   # each rank's waits: what was late, what was not
            dist.all_gather_object(every, stats.waits)
            for key, val in (("compute_s", stats.compute_s), ("wait_s", stats.wait_s),
                             ("ready_wait_s", waits_after_ready(every)[rank]), ("step_s", t.elapsed_s)):
                rec[key].append(val)
    for rec in rounds.values():
        for key in rec:
            rec[key] = rec[key][1:]
    block = torch.stack([shard_sequence(k, rank, world), shard_sequence(v, rank, world)]).contiguous()
    return {"splits": rounds, "exchange_s": _exchange_alone([block], repeat + 1)[1:],
            "pair_exchange_s": _exchange_alone([block, torch.zeros_like(block)], repeat + 1)[1:]}


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the tasks in ``cfg`` (see the module docstring); return this rank's results.

    Warning:
        Collective: every rank must call it with the same ``cfg``.
    """
    result: dict[str, Any] = {"world_size": dist.get_world_size(), "rank": dist.get_rank()}
    if "equal" in cfg:
        result["equal"] = equal(**cfg["equal"])
    if "time" in cfg:
        result["time"] = time_splits(**cfg["time"])
    if "missing_peer" in cfg:
        if dist.get_rank() == 0:
            x = torch.zeros(1, 1, 4, 8)
            ring_attention(x, x, x, timeout_s=cfg["missing_peer"]["timeout_s"])
        else:
            time.sleep(cfg["missing_peer"]["sleep_s"])  # never joins the ring
    return result


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
