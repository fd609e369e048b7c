"""Job: what ``perfkit plan --machine local`` holds tensor parallelism and DP x TP against.

Run by :func:`perfkit.dist.launch`; configured by a JSON object (every task optional)::

    launch("perfkit.jobs.tp_plan", 2, ["--config", json.dumps(
        {"model": {"vocab_size": 1024, "block_size": 64, "n_embd": 64, "n_layer": 2, "n_head": 2},
         "batch": 8, "step": {"repeat": 10}, "memory": {"dp": 1}, "block": {"widths": [128]}})])

* ``step`` (2 processes or more, TP over all of them): the plain GPT
  (:mod:`perfkit.parallel.gpt`) trained with AdamW under PyTorch's DDP (``batch`` sequences
  per rank) and split by tensor parallelism (:func:`~perfkit.parallel.tp_gpt.parallelize_gpt`,
  the same global batch on every rank), timed in alternation with: the same TP step with its
  collectives skipped (``tp_compute``: the work without the waits), and all-reduces of the
  TP step's two message sizes (one block's output, the loss's ``B T`` fp32 numbers), which
  give the link under the same load. Every call starts after an untimed barrier, so one
  rank's lag is never charged to the next call, and the slowest rank's time counts. The
  TP step's all-reduces are clocked on every rank (``tp_comm``: their time, split into ranks
  arriving apart and every rank present).
* ``memory``: a ``(dp, world / dp)`` mesh, TP inside it and
  :class:`~perfkit.parallel.BucketedDP` across; after two AdamW steps, one more step measures
  the model states alive after backward, the bytes one forward saves for backward
  (:class:`perfkit.memory.SavedTensorMeter`) and the collectives
  (:func:`perfkit.comm.count_traffic`).
* ``block``: one block's forward and backward, unsplit and split over the ranks (and split
  with its collectives skipped), its replicated ops alone (two LayerNorms and two residual
  adds, which TP without SP runs whole on every rank) and an all-reduce of its output, at
  each width, synchronised as ``step``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit import dist as pdist
from perfkit.comm.traffic import count_traffic
from perfkit.jobs.tp_training import global_batch, gpt_config, make_optimizer, seeded_gpt
from perfkit.memory.model_states import live_model_states
from perfkit.memory.saved_tensors import SavedTensorMeter
from perfkit.parallel.data_parallel import BucketedDP
from perfkit.parallel.gpt import GPTConfig, gpt_loss
from perfkit.parallel.tp_gpt import parallelize_gpt
from perfkit.timing import Timer


def synced_rounds(fns: dict[str, Callable[[], object]], warmup: int,
                  repeat: int) -> dict[str, list[float]]:
    """Each callable once per round, in order, each after an untimed barrier; per round the
    slowest rank's seconds (collective: every rank runs the same callables)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + repeat):
        for k, fn in fns.items():
            dist.barrier()   # the ranks start together: the lag of the last call is not timed
            with Timer() as t:
                fn()
            if r >= warmup:
                times[k].append(t.elapsed_s)
    t = torch.tensor([times[k] for k in fns], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)   # a call ends when its slowest rank does
    return {k: t[i].tolist() for i, k in enumerate(fns)}


class _CommClock:
    """When each ``torch.distributed.all_reduce`` call entered and left, while patched in
    (``skip``: return at once, as if the collective were free; the numbers are then wrong,
    the work the same). The ranks of one machine share ``perf_counter``'s clock."""

    def __init__(self, skip: bool = False) -> None:
        self.skip, self.spans, self._orig = skip, [], dist.all_reduce

    def __enter__(self) -> _CommClock:
        def patched(*a: Any, **kw: Any) -> Any:
            if self.skip:
                return None
            t0 = time.perf_counter()
            try:
                return self._orig(*a, **kw)
            finally:
                self.spans.append((t0, time.perf_counter()))
        dist.all_reduce = patched
        return self

    def __exit__(self, *exc: object) -> None:
        dist.all_reduce = self._orig


def _clocked(fn: Callable[[], object], clocks: list[_CommClock]) -> Callable[[], None]:
    def run() -> None:
        with _CommClock() as c:
            fn()
        clocks.append(c)
    return run


def _free(fn: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with _CommClock(skip=True):
            fn()
    return run


def _trainer(loss_fn: Callable, params: list[nn.Parameter], batch_fn: Callable,
             after: Callable | None = None) -> Callable[[], None]:
    opt, step = make_optimizer(params, "adamw"), [0]

    def fn() -> None:
        loss_fn(*batch_fn(step[0])).backward()
        if after is not None:
            after()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step[0] += 1
    return fn


LINK_CALLS = 4  # all-reduces of each size per round: a few calls in 4 wait a time slice


def _link_fns(sizes: list[int]) -> dict[str, Callable[[], object]]:
    bufs = {n: torch.randn(n // 4) for n in sizes}   # fp32 buffers of n bytes
    return {f"allreduce_{n}_{k}": lambda b=b: dist.all_reduce(b)
            for k in range(LINK_CALLS) for n, b in bufs.items()}


def _link_times(times: dict[str, list[float]], n: int) -> list[float]:
    return [t for k in range(LINK_CALLS) for t in times[f"allreduce_{n}_{k}"]]


def _comm_split(clocks: list[_CommClock]) -> dict[str, Any]:
    """Per call of a clocked callable, over its all-reduces: ``comm_s``, seconds inside them
    (the slowest rank); ``skew_s``, from the first rank's arrival to the last one's (a rank
    waiting for another to finish its own compute); ``transfer_s``, from the last arrival to
    the first departure (the collective itself, every rank present)."""
    spans = torch.tensor([c.spans for c in clocks], dtype=torch.float64)   # (runs, calls, 2)
    every = [torch.empty_like(spans) for _ in range(dist.get_world_size())]
    dist.all_gather(every, spans)
    s = torch.stack(every)                                          # (ranks, runs, calls, 2)
    enter, leave = s[..., 0], s[..., 1]
    return {"comm_s": (leave - enter).sum(-1).max(0).values.tolist(),
            "skew_s": (enter.max(0).values - enter.min(0).values).sum(-1).tolist(),
            "transfer_s": (leave.min(0).values - enter.max(0).values).sum(-1).tolist(),
            "calls": int(spans.shape[1])}


def step(cfg: GPTConfig, batch: int, warmup: int, repeat: int) -> dict[str, Any]:
    """DDP and TP steps, TP's compute alone and the link, timed in synchronised rounds."""
    world, rank = dist.get_world_size(), dist.get_rank()
    gb = world * batch   # the global batch: DDP splits it over the ranks, TP gives it to each

    def local(s: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx, tgt = global_batch(cfg, gb, s)
        return idx[rank * batch:(rank + 1) * batch], tgt[rank * batch:(rank + 1) * batch]

    ddp = nn.parallel.DistributedDataParallel(seeded_gpt(cfg))
    tp, tp_free = parallelize_gpt(seeded_gpt(cfg)), parallelize_gpt(seeded_gpt(cfg))
    whole = lambda s: global_batch(cfg, gb, s)  # noqa: E731
    clocks: list[_CommClock] = []
    block, loss = gb * cfg.block_size * cfg.n_embd * 4, gb * cfg.block_size * 4  # bytes
    sizes = sorted({loss, block})   # the two messages the TP step all-reduces
    times = synced_rounds({
        "ddp": _trainer(lambda i, t: gpt_loss(ddp(i), t), list(ddp.parameters()), local),
        "tp": _clocked(_trainer(tp.loss, list(tp.parameters()), whole, tp.sync_grads), clocks),
        "tp_compute": _free(_trainer(tp_free.loss, list(tp_free.parameters()), whole)),
        **_link_fns(sizes)}, warmup, repeat)
    return {"times_s": {k: v for k, v in times.items() if not k.startswith("allreduce_")},
            "link": {"sizes": sizes, "times_s": [_link_times(times, n) for n in sizes]},
            "tp_comm": _comm_split(clocks[warmup:]),
            "message_bytes": {"block": block, "loss": loss}, "global_batch": gb}


def memory(cfg: GPTConfig, batch: int, dp: int) -> dict[str, Any]:
    """Model states, saved activations and collectives of one DP x TP step on this rank."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world % dp:
        raise ValueError(f"dp ({dp}) must divide the world size {world}")
    mesh = init_device_mesh("cpu", (dp, world // dp), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group, d = mesh.get_group("tp"), mesh.get_group("dp"), mesh.get_local_rank("dp")
    model = parallelize_gpt(seeded_gpt(cfg), tp_group)
    ddp = BucketedDP(model, group=dp_group) if dp > 1 else None
    opt = make_optimizer(list(model.parameters()), "adamw")
    out: dict[str, Any] = {}
    for s in range(3):
        idx, tgt = global_batch(cfg, dp * batch, s)
        idx, tgt = idx[d * batch:(d + 1) * batch], tgt[d * batch:(d + 1) * batch]
        with count_traffic() as traffic, SavedTensorMeter(model) as meter:
            loss = model.loss(idx, tgt)
        with count_traffic() as back:
            loss.backward()
            model.sync_grads()
            if ddp is not None:   # average over the data-parallel replicas
                ddp.finish()
        if s == 2:   # AdamW's state exists from the first step on
            params = list(model.parameters())
            st = live_model_states(params, [p.grad for p in params],
                                   [t for v in opt.state.values() for t in v.values()
                                    if isinstance(t, torch.Tensor) and t.dim()])
            out = {"model_states": {"params": st.params, "grads": st.grads,
                                    "optimizer": st.optimizer},
                   "saved_activation_bytes": meter.report().activation_bytes,
                   "calls": {k: traffic.calls.get(k, 0) + back.calls.get(k, 0)
                             for k in {*traffic.calls, *back.calls}},
                   "buffer_bytes": {k: traffic.buffer_bytes.get(k, 0) + back.buffer_bytes.get(k, 0)
                                    for k in {*traffic.buffer_bytes, *back.buffer_bytes}},
                   "loss": float(loss.detach()), "dp": dp, "tp": world // dp,
                   "numel": sum(p.numel() for p in params)}
        opt.step()
        opt.zero_grad(set_to_none=True)
    return out


def block(widths: list[int], batch: int, seq: int, warmup: int, repeat: int) -> dict[str, Any]:
    """One block unsplit, split, its replicated ops and its all-reduce, at each width."""
    out: dict[str, Any] = {}
    for w in widths:
        cfg = GPTConfig(vocab_size=64, block_size=seq, n_embd=w, n_layer=1, n_head=4)
        full, split = seeded_gpt(cfg).blocks[0], parallelize_gpt(seeded_gpt(cfg)).blocks[0]
        x = torch.randn(batch, seq, w, requires_grad=True)   # (B, T, C)

        def replicated(b: nn.Module = full, x: torch.Tensor = x) -> None:
            h = x + b.ln1(x)           # the branch's LayerNorm and residual add, run whole
            (h + b.ln2(h)).sum().backward()

        clocks: list[_CommClock] = []
        msg = batch * seq * w * 4   # bytes of the block's (B, T, C) output
        times = synced_rounds({"unsplit": lambda b=full, x=x: b(x).sum().backward(),
                               "split": _clocked(lambda b=split, x=x: b(x).sum().backward(), clocks),
                               "split_compute": _free(lambda b=split, x=x: b(x).sum().backward()),
                               "replicated": replicated, **_link_fns([msg])}, warmup, repeat)
        out[str(w)] = {"times_s": {k: v for k, v in times.items() if not k.startswith("allreduce_")},
                       "allreduce_s": _link_times(times, msg), "message_bytes": msg,
                       "split_comm": _comm_split(clocks[warmup:])}
    return out


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Every task named in ``config``; see the module docstring.

    Raises:
        ValueError: for a key that names no task, or a world size below 2 for ``step``.
    """
    cfg = gpt_config(config.get("model", {}))
    batch = int(config.get("batch", 8))
    known = {"step", "memory", "block", "model", "batch"}
    if set(config) - known:
        raise ValueError(f"unknown tasks {sorted(set(config) - known)}; known: {sorted(known)}")
    out: dict[str, Any] = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
    if "step" in config:
        c = config["step"]
        if dist.get_world_size() < 2:
            raise ValueError("step needs at least 2 processes")
        out["step"] = step(cfg, batch, int(c.get("warmup", 2)), int(c.get("repeat", 10)))
    if "memory" in config:
        out["memory"] = memory(cfg, batch, int(config["memory"].get("dp", 1)))
    if "block" in config:
        c = config["block"]
        out["block"] = block(list(c["widths"]), int(c.get("batch", 8)), int(c.get("seq", 64)),
                             int(c.get("warmup", 2)), int(c.get("repeat", 10)))
    return out


if __name__ == "__main__":
    pdist.worker_main(run, __doc__)
