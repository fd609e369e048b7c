"""Job: data-parallel optimizers side by side on the tiny GPT-2 (gloo, any world size).

Variants (names used in results):

* ``ddp_adamw``: ``DistributedDataParallel`` + ``torch.optim.AdamW`` (no sharding);
* ``perfkit``: ``perfkit.parallel.ZeroOptimizer(stage=1, overlap=False)``: reduce-scatter
  after backward and all-gather, both blocking in ``step()``;
* ``perfkit_ddp``: DDP all-reduces, then ``ZeroOptimizer(stage=1, reduce_grads=False)``;
* ``torch_zero``: DDP + ``torch.distributed.optim.ZeroRedundancyOptimizer(AdamW)``;
* ``zero1``, ``zero2``, ``zero3``, ``fsdp2``, ``deepspeed_0`` to ``deepspeed_3``: see
  :mod:`perfkit.jobs.zero_variants` (perfkit's overlapped ZeRO stages, PyTorch's
  ``fully_shard``, DeepSpeed with a client ``torch.optim.AdamW``).

Two phases, run in the order given by ``phases`` in the config (one job, one start-up):

* ``"time"``: every variant trains the same batches; steps are timed interleaved (A, B,
  C, ... per round, :func:`perfkit.timing.interleaved`), so their ratios are measured under
  the same load (with ``link_sizes``, each round also times one isolated all-reduce per
  size; with ``settle``, a timed step also waits for its own all-gathers still in flight,
  which ZeRO-1/2 otherwise leave running into the next step's forward). Returns per
  variant: median step seconds, the median of its ``optimizer.step()`` alone
  (``ddp_adamw``: AdamW's update; the ZeRO wrappers' includes their waits and
  collectives), optimizer-state bytes on this rank, the loss curve (global mean), and the
  largest relative parameter difference (``max |p - p_ref| / max |p_ref|``, worst tensor) to
  single-process ``torch.optim.AdamW`` trained afterwards on the whole global batch of every
  step. One more, untimed step per variant measures the model states alive after backward
  (:func:`perfkit.jobs.zero_variants.model_states`) and the bytes of each collective
  (:func:`perfkit.comm.count_traffic`; DDP runs its Python all-reduce hook so it is seen).
* ``"rss"``: one variant at a time: build it, train ``rss_steps`` steps, and report the
  process's peak RSS above what it held before building it. Freed heap memory is handed
  back to the OS first (:func:`perfkit.memory.trim_heap`), so that one variant's
  leftovers, reused without new pages, do not hide the next one's allocations.

Launcher side, :func:`compare` runs both phases and returns a :class:`Comparison`;
:func:`step_ratio` divides two variants' step times, with the uncertainty of that ratio::

    from perfkit.jobs.zero_bench import compare, step_ratio
    c = compare(["ddp_adamw", "perfkit", "torch_zero", "deepspeed_1"], nproc=2, steps=10)
    print(step_ratio(c.variants["perfkit"], c.variants["ddp_adamw"]))   # 1.02 (90% interval ...)
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from perfkit import comm, stats
from perfkit import dist as pdist
from perfkit._checks import check_type
from perfkit.comm.traffic import count_traffic
from perfkit.jobs import zero_variants as zv
from perfkit.memory import optimizer_state_bytes, peak_rss_bytes, reset_peak_rss, rss_bytes, trim_heap
from perfkit.models import tiny_gpt2
from perfkit.parallel import ZeroOptimizer
from perfkit.stats import Estimate
from perfkit.timing import interleaved

VARIANTS = ("ddp_adamw", "perfkit", "perfkit_ddp", "torch_zero", "zero1", "zero2", "zero3",
            "fsdp2", "deepspeed_0", "deepspeed_1", "deepspeed_2", "deepspeed_3")
SHARDED = ("zero1", "zero2", "zero3", "fsdp2", "deepspeed_0", "deepspeed_1", "deepspeed_2",
           "deepspeed_3")  # built by perfkit.jobs.zero_variants
STAGE = {"ddp_adamw": 0, "perfkit": 1, "perfkit_ddp": 1, "torch_zero": 1, "zero1": 1,
         "zero2": 2, "zero3": 3, "fsdp2": 3, "deepspeed_0": 0, "deepspeed_1": 1,
         "deepspeed_2": 2, "deepspeed_3": 3}  # the ZeRO stage each one implements
MODEL_KEYS = ("vocab_size", "block_size", "n_embd", "n_layer", "n_head")


class Variant:
    """One model + optimizer; ``step(x)`` trains one batch and returns the loss tensor."""

    def __init__(self, name: str, cfg: dict[str, Any]) -> None:
        if name not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {name!r}")
        self.name, self.losses, self.update_s = name, [], []  # update_s: s per optimizer.step()
        self.settle = bool(cfg.get("settle", False))  # step() waits for its own all-gathers
        torch.manual_seed(cfg.get("seed", 0))  # the same initial weights in every variant
        self.model = tiny_gpt2(**{k: cfg[k] for k in MODEL_KEYS if k in cfg})
        lr = cfg.get("lr", 3e-3)
        self.engine = None
        if name in SHARDED:
            self.net, self.opt, self.engine = zv.build(name, self.model, lr, cfg["batch"])
            return
        params = list(self.model.parameters())
        if name == "perfkit":
            self.net = self.model
            self.opt = ZeroOptimizer(params, torch.optim.AdamW, stage=1, overlap=False, lr=lr)
            return
        self.net = nn.parallel.DistributedDataParallel(self.model)
        # the Python all-reduce hook (what DDP's C++ default does): seen by count_traffic
        self.net.register_comm_hook(None, default_hooks.allreduce_hook)
        if name == "ddp_adamw":
            self.opt = torch.optim.AdamW(params, lr=lr)
        elif name == "perfkit_ddp":
            self.opt = ZeroOptimizer(params, torch.optim.AdamW, stage=1, reduce_grads=False, lr=lr)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            self.opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=lr)

    def step(self, x: torch.Tensor, measure: bool = False) -> Any:
        """Forward, backward, optimizer step on ``x`` ``(B, T)``. Collective.

        With ``measure``: returns ``(LiveModelStates after backward, Traffic of the step)``.
        """
        with count_traffic(zv.traffic_targets(self.engine) if measure else ()) as traffic:
            loss = zv.step_fn(self.net, self.opt, self.engine)(x)
            if measure and isinstance(self.opt, ZeroOptimizer):
                self.opt.sync_grads()  # the reduce-scatters done: only the slices remain
            states = zv.model_states(self.name, self.model, self.net, self.opt,
                                     self.engine) if measure else None
            if self.engine is not None:
                self.engine.step()
            else:
                t0 = time.perf_counter()
                self.opt.step()
                self.update_s.append(time.perf_counter() - t0)
                self.opt.zero_grad(set_to_none=True)
                if self.settle and hasattr(self.opt, "wait_params"):
                    self.opt.wait_params()
        self.losses.append(loss.detach())
        return (states, traffic) if measure else None

    def state_bytes(self) -> int:
        """Optimizer-state bytes held by this rank."""
        inner = getattr(self.opt, "optim", self.opt)  # the ZeRO wrappers' local optimizer
        return optimizer_state_bytes(inner) if self.name != "fsdp2" else \
            sum(t.numel() * t.element_size() for s in inner.state.values()
                for t in s.values() if isinstance(t, torch.Tensor) and t.dim())

    def params(self) -> list[torch.Tensor]:
        """Whole parameters (collective for the sharded variants)."""
        return zv.full_parameters(self.name, self.model, self.net, self.opt)


def batches(tokens: torch.Tensor | None, cfg: dict[str, Any], rank: int | None, world: int,
            n: int) -> list[torch.Tensor]:
    """``n`` per-rank batches ``(B, T)``: rank r's chunk of the same global batch per step
    (``rank=None``: the whole global batch ``(N B, T)``)."""
    b, t, v = cfg["batch"], cfg.get("block_size", 64), cfg.get("vocab_size", 1024)
    g = torch.Generator().manual_seed(123)
    out = []
    for _ in range(n):
        if tokens is None:
            glob = torch.randint(0, v, (world * b, t), generator=g)
        else:
            starts = torch.randint(0, len(tokens) - t, (world * b,), generator=g)
            glob = torch.stack([tokens[s:s + t] for s in starts.tolist()])
        out.append(glob if rank is None else glob[rank * b:(rank + 1) * b])
    return out


def _rel_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
               for x, y in zip(a, b, strict=True))


def time_phase(cfg: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """Interleaved timing, state bytes, loss curves and differences to ``ddp_adamw``."""
    names = cfg.get("variants", list(VARIANTS))
    tokens = torch.load(cfg["tokens"]) if cfg.get("tokens") else None
    warmup, steps = int(cfg.get("warmup", 2)), int(cfg.get("steps", 10))
    data = batches(tokens, cfg, rank, world, warmup + steps + 1)  # + 1: the measured step
    variants = [Variant(n, cfg) for n in names]
    counters = {v.name: 0 for v in variants}

    def stepper(v: Variant) -> Any:
        def fn() -> None:
            v.step(data[counters[v.name]])
            counters[v.name] += 1
        return fn

    link_sizes, link_rounds = list(cfg.get("link_sizes") or []), []

    def link() -> None:  # one isolated all-reduce of each size, as the steps issue theirs
        link_rounds.append([t for (t,) in comm.isolated_times("all_reduce", link_sizes, repeat=1,
                                                              warmup=0)])

    times = interleaved([stepper(v) for v in variants] + ([link] if link_sizes else []),
                        warmup=warmup, repeat=steps)[:len(variants)]
    # one more step each, untimed: model states after backward, bytes of every collective
    measured = [v.step(data[-1], measure=True) for v in variants]
    ref = reference_adamw(cfg, batches(tokens, cfg, None, world, warmup + steps + 1))
    out: dict[str, Any] = {"rank": rank, "world_size": world, "variants": {},
                           "total_state_bytes": optimizer_state_bytes(ref.opt),
                           "numel": sum(p.numel() for p in ref.params()),
                           "n_tensors": len(ref.params())}
    if link_sizes:  # the timed rounds' calls, one list per size (the warm-up rounds left out)
        out["link"] = {"sizes": link_sizes,
                       "times_s": [list(ts) for ts in zip(*link_rounds[warmup:], strict=True)]}
    ddp = next((v for v in variants if v.name == "ddp_adamw"), None)
    for v, m, (states, traffic) in zip(variants, times, measured, strict=True):
        losses = torch.stack(v.losses)
        dist.all_reduce(losses)  # every rank's loss on its chunk -> the global mean
        out["variants"][v.name] = {
            "step_s": m.median_s, "step_s_p10": m.p10_s, "step_s_p90": m.p90_s,
            "update_s": stats.quantile(v.update_s[warmup:warmup + steps], 0.5) if v.update_s else 0.0,
            "step_times_s": list(m.times_s),
            "state_bytes": v.state_bytes(), "losses": (losses / world).tolist(),
            "max_rel_diff_vs_adamw": _rel_diff(v.params(), ref.params()),
            "max_rel_diff_vs_ddp_adamw": _rel_diff(v.params(), ddp.params()) if ddp else None,
            "model_states": {"params": states.params, "grads": states.grads,
                             "optimizer": states.optimizer},
            "calls": traffic.calls, "sent_bytes": traffic.sent_bytes(world),
            "transient_peak_bytes": getattr(v.opt, "buffer_peak_bytes", 0)
            + getattr(v.net, "gathered_peak_bytes", 0),
        }
    return out


def reference_adamw(cfg: dict[str, Any], global_batches: list[torch.Tensor]) -> Variant:
    """Single-process ``torch.optim.AdamW`` trained on the whole global batch of each step.

    Not collective: built without DDP, it is the reference every variant must equal.
    """
    ref = Variant.__new__(Variant)
    ref.name, ref.losses, ref.engine, ref.update_s, ref.settle = "adamw", [], None, [], False
    torch.manual_seed(cfg.get("seed", 0))
    ref.model = ref.net = tiny_gpt2(**{k: cfg[k] for k in MODEL_KEYS if k in cfg})
    ref.opt = torch.optim.AdamW(ref.model.parameters(), lr=cfg.get("lr", 3e-3))
    for x in global_batches:
        ref.step(x)
    return ref


def rss_phase(cfg: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """Peak RSS of each variant, built and trained on its own (see the module docstring)."""
    names = cfg.get("variants", list(VARIANTS))
    tokens = torch.load(cfg["tokens"]) if cfg.get("tokens") else None
    data = batches(tokens, cfg, rank, world, int(cfg.get("rss_steps", 3)))
    out: dict[str, Any] = {"rank": rank, "world_size": world, "peak_rss_bytes": {}}
    for name in names:
        gc.collect()
        trim_heap()
        dist.barrier()
        base = rss_bytes()
        reset_peak_rss()
        v = Variant(name, cfg)
        for x in data:
            v.step(x)
        out["peak_rss_bytes"][name] = peak_rss_bytes() - base
        del v
        gc.collect()
    return out


# --- launcher side ---------------------------------------------------------------------


@dataclass(frozen=True)
class VariantResult:
    """One variant across ranks: the median step (each step the slower rank's), largest per-rank figures."""

    name: str
    step_s: float  # s, median over the timed steps, each step's time the slowest rank's
    state_bytes: int  # optimizer state on the rank holding the most
    peak_rss_bytes: int | None  # peak RSS above the pre-build level, largest rank
    losses: list[float]  # global mean loss per step (warm-up steps included)
    max_rel_diff_vs_adamw: float  # vs single-process AdamW on the global batch
    max_rel_diff_vs_ddp_adamw: float | None  # vs DDP + AdamW (the same averaged gradients)
    model_states: dict[str, int] | None = None  # bytes after backward, largest rank
    calls: dict[str, int] | None = None  # collectives of one step, rank 0
    sent_bytes: dict[str, float] | None = None  # per collective, one rank, ring model
    transient_peak_bytes: int = 0  # perfkit's bucket buffers and gathered blocks, largest rank
    step_p10_s: float = 0.0  # s, 10th and 90th percentiles of step_times_s
    step_p90_s: float = 0.0
    step_times_s: tuple[float, ...] = ()  # s, each timed step's slowest rank, in round order
    update_s: float = 0.0  # s, median optimizer.step() alone (the job's docstring), slowest rank


def step_ratio(a: VariantResult, b: VariantResult) -> Estimate:
    """``a``'s step time over ``b``'s: the median of the rounds' ratios, with the narrowest
    order-statistic interval covering at least 90 %, its exact coverage printed with it
    (:func:`perfkit.stats.median_ratio`; the rounds were timed interleaved, so each pair shared
    the machine's load).

    Raises:
        TypeError: for an ``a`` or ``b`` that is not a :class:`VariantResult`.
        ValueError: when they hold no step times or not the same number.
    """
    check_type("a", a, VariantResult)
    check_type("b", b, VariantResult)
    if not a.step_times_s or len(a.step_times_s) != len(b.step_times_s):
        raise ValueError(f"a and b must hold the same number (>= 1) of step times, got "
                         f"{len(a.step_times_s)} and {len(b.step_times_s)}")
    return stats.median_ratio(a.step_times_s, b.step_times_s)


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` measured; ``total_state_bytes`` is unsharded AdamW's state."""

    world_size: int
    numel: int
    n_tensors: int
    total_state_bytes: int
    variants: dict[str, VariantResult]
    config: dict[str, Any] = field(default_factory=dict)
    link: dict[str, list] | None = None  # {"sizes", "times_s"}: all-reduces of the same rounds



def _merge_ranks(name: str, per_rank: list[dict[str, Any]], peak_rss: list[int] | None) -> VariantResult:
    """One variant's :class:`VariantResult` from every rank's time-phase record (and peak RSS)."""
    # a synchronous step ends when its slower rank does: each step's time is that rank's,
    # and the median and percentiles are of that one series (the ratios use it too)
    steps_s = [max(ts) for ts in zip(*(r["step_times_s"] for r in per_rank), strict=True)]
    return VariantResult(
        name=name, step_s=stats.quantile(steps_s, 0.5),
        state_bytes=max(r["state_bytes"] for r in per_rank),
        peak_rss_bytes=max(peak_rss) if peak_rss else None,
        losses=per_rank[0]["losses"],
        max_rel_diff_vs_adamw=max(r["max_rel_diff_vs_adamw"] for r in per_rank),
        max_rel_diff_vs_ddp_adamw=None if per_rank[0]["max_rel_diff_vs_ddp_adamw"] is None
        else max(r["max_rel_diff_vs_ddp_adamw"] for r in per_rank),
        model_states=max((r["model_states"] for r in per_rank), key=lambda st: sum(st.values())),
        calls=per_rank[0]["calls"], sent_bytes=per_rank[0]["sent_bytes"],
        transient_peak_bytes=max(r["transient_peak_bytes"] for r in per_rank),
        step_p10_s=stats.quantile(steps_s, 0.1), step_p90_s=stats.quantile(steps_s, 0.9),
        step_times_s=tuple(steps_s), update_s=max(r.get("update_s", 0.0) for r in per_rank))

def compare(variants: Sequence[str] = VARIANTS, nproc: int = 2, batch: int = 8,
            steps: int = 10, warmup: int = 2, model: dict[str, int] | None = None,
            rss: bool = True, corpus_bytes: int = 200_000,
            timeout_s: float = 600.0, link_sizes: Sequence[int] = (), settle: bool = False) -> Comparison:
    """Launch the ``time`` phase (and the ``rss`` phase) on ``nproc`` gloo processes.

    The batches are blocks of the standard-library corpus (:mod:`perfkit.models`),
    tokenized here once and handed to the workers as a file.

    Args:
        variants: names from :data:`VARIANTS`.
        nproc: world size.
        batch: sequences per rank and step (the global batch is ``nproc * batch``).
        steps, warmup: timed and untimed steps per variant.
        model: :func:`perfkit.models.tiny_gpt2` keyword arguments.
        rss: also run the peak-RSS phase (after the timing, in the same job).
        corpus_bytes: bytes of standard-library source to tokenize.
        timeout_s: limit for each job.
        link_sizes: bytes; each timed round also makes one all-reduce of each size, alone
            after 1 ms of compute (:func:`perfkit.comm.isolated_times`), so that a link can be
            fitted under the load the steps ran under (``Comparison.link``;
            :func:`perfkit.plan.rounds_link`).
        settle: each timed step waits for its optimizer's all-gathers still in flight
            (``wait_params``) before it returns; by default they run on into the next step.

    Returns:
        A :class:`Comparison`.

    Raises:
        ValueError: for an unknown variant or a bad size.
    """
    from perfkit import models

    check_type("settle", settle, bool)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {bad}")
    for k, v in dict(nproc=nproc, batch=batch, steps=steps).items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be an int >= 1, got {v!r}")
    for i, n in enumerate(link_sizes):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"link_sizes[{i}] must be an int >= 1 (bytes), got {n!r}")
    model = {"vocab_size": 1024, "block_size": 64, "n_embd": 64, "n_layer": 2, "n_head": 2,
             **(model or {})}
    with tempfile.TemporaryDirectory() as tmp:
        ids = models.encode_corpus(models.train_bpe_tokenizer(model["vocab_size"], corpus_bytes),
                                   models.text_corpus(corpus_bytes))
        torch.save(ids, f"{tmp}/ids.pt")
        cfg = {**model, "batch": batch, "steps": steps, "warmup": warmup,
               "variants": list(variants), "tokens": f"{tmp}/ids.pt",
               "link_sizes": [int(n) for n in link_sizes], "settle": bool(settle),
               "phases": ["time", "rss"] if rss else ["time"]}
        # CPU processes on gloo everywhere (several processes cannot share one GPU under
        # NCCL); hiding CUDA also makes DeepSpeed pick its CPU accelerator.
        results = pdist.launch("perfkit.jobs.zero_bench", nproc,
                               ["--config", json.dumps(cfg)], timeout_s=timeout_s,
                               backend="gloo",
                               env={"CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"})
    timed = [r["time"] for r in results]
    peaks = [r["rss"] for r in results] if rss else None
    out = {name: _merge_ranks(name, [r["variants"][name] for r in timed],
                              [r["peak_rss_bytes"][name] for r in peaks] if peaks else None)
           for name in variants}
    r0 = timed[0]
    return Comparison(nproc, r0["numel"], r0["n_tensors"], r0["total_state_bytes"], out,
                      {k: v for k, v in cfg.items() if k != "tokens"}, r0.get("link"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="JSON object; see the module docstring")
    cfg = json.loads(p.parse_args().config)
    ctx = pdist.init_worker(backend="gloo")
    torch.set_num_threads(1)  # one core per rank: the ranks share the machine's cores
    phases = cfg.get("phases", ["time"])
    if not phases or any(p not in ("time", "rss") for p in phases):
        raise ValueError(f"phases must be a non-empty list of 'time' and 'rss', got {phases!r}")
    run = {"time": time_phase, "rss": rss_phase}
    out = {}
    for phase in phases:
        out[phase] = run[phase](cfg, ctx.rank, ctx.world_size)
        gc.collect()  # the time phase's variants are gone before the rss phase measures
    pdist.worker_result(out)
    pdist.shutdown()


if __name__ == "__main__":
    main()
