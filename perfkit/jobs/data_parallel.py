"""Job: data parallelism experiments (from scratch vs DDP, bucket size, accumulation).

Run by :func:`perfkit.dist.launch`; configured by a JSON object of tasks::

    launch("perfkit.jobs.data_parallel", 2, ["--config", json.dumps(
        {"model": {"width": 512, "depth": 6}, "batch": 32,
         "compare": {"repeat": 5}, "buckets": {"caps_mb": [0.25, 25]},
         "accumulate": {"ks": [1, 4]}})])

* ``compare``: :class:`~perfkit.parallel.NaiveDP`, :class:`~perfkit.parallel.BucketedDP`,
  :class:`~perfkit.parallel.OverlappedDP` and DDP on the same model and data: gradients
  against DDP's (max abs difference), step time (``times_s``: every repetition, timed in
  alternation), and the measured share of communication hidden behind backward; in the same
  rounds, on the same model and batch without communication, ``compute_only`` (forward +
  backward), ``forward_only`` and ``backward_only`` (the backward of the graph the forward
  just built), ``comm_only`` (the bucketed all-reduces alone, one after another) and
  ``comm_together`` (the same, all launched asynchronously before any is waited for, as the
  overlapped step launches them); ``hidden_share``:
  ``(bucketed - overlapped) / (bucketed - compute_only)`` by the medians (``None`` where the
  bucketed step was not slower than compute alone), :func:`perfkit.comm.hidden_share`'s point.
* ``buckets``: DDP step time and all-reduce calls per step for each ``bucket_cap_mb``
  (``None``: left unset, DDP's default; the caps timed interleaved, with ``"balanced": true``
  in balanced orders over whole cycles, :func:`perfkit.timing.interleaved_balanced`), and the
  calls :func:`perfkit.parallel.assign_buckets` predicts.
* ``accumulate``: DDP with ``no_sync()`` over ``k`` micro-batches: time and bytes
  all-reduced per sample, and the gradient against one big batch.
* ``accumulate_synced``: the same without ``no_sync()``: DDP all-reduces after every
  micro-batch (what accumulation code that forgets ``no_sync()`` does).

Each rank draws its own micro-batches from a seeded generator (rank-dependent), so the
gradient average really mixes different data. Times are the slowest rank's median.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from perfkit import dist as pdist
from perfkit.parallel import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    BucketedDP,
    NaiveDP,
    OverlappedDP,
    assign_buckets,
)
from perfkit.timing import interleaved, interleaved_balanced


def make_mlp(width: int = 512, depth: int = 6, d_in: int = 64, classes: int = 10,
             seed: int = 0) -> nn.Module:
    """An MLP whose gradient size (and so communication) is set by ``width`` and ``depth``."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(d_in, width), nn.ReLU()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def _device() -> torch.device:
    """CUDA (the device init_worker bound) with nccl, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")


def _mlp(model_kw: dict[str, Any]) -> nn.Module:
    return make_mlp(**model_kw).to(_device())


def _batch(batch: int, step: int, d_in: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + dist.get_rank())
    x, y = torch.randn(batch, d_in, generator=g), torch.randint(0, 10, (batch,), generator=g)
    return x.to(_device()), y.to(_device())


def _slowest(values: Sequence[float]) -> list[float]:
    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _slowest_each(rows: Sequence[Sequence[float]]) -> list[list[float]]:
    """Element-wise maximum over ranks of equally long rows of times."""
    t = torch.tensor([list(r) for r in rows], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def compare(model_kw: dict[str, Any], batch: int, bucket_cap_mb: float, repeat: int
            ) -> dict[str, Any]:
    """Gradients and step times of the three from-scratch synchronisers and DDP."""
    x, y = _batch(batch, 0)
    loss_fn = nn.functional.cross_entropy
    models = {m: _mlp(model_kw) for m in ("ddp", "naive", "bucketed", "overlapped")}
    syncs: dict[str, Callable[[], None]] = {"ddp": lambda: None}
    runners = {"ddp": DDP(models["ddp"], bucket_cap_mb=bucket_cap_mb)}
    for name, cls in (("naive", NaiveDP), ("bucketed", BucketedDP), ("overlapped", OverlappedDP)):
        kw = {} if name == "naive" else {"bucket_cap_mb": bucket_cap_mb}
        dp = cls(models[name], **kw)
        runners[name], syncs[name] = models[name], dp.finish
    grads = {}
    for name, run in runners.items():
        loss_fn(run(x), y).backward()
        syncs[name]()
        grads[name] = _flat_grad(models[name]).clone()
    max_diff = {n: float((g - grads["ddp"]).abs().max()) for n, g in grads.items()}
    scale = float(grads["ddp"].abs().max())

    def step(name: str) -> Callable[[], None]:
        def fn() -> None:
            models[name].zero_grad(set_to_none=False)
            loss_fn(runners[name](x), y).backward()
            syncs[name]()
        return fn

    plain = _mlp(model_kw)
    bucketed = BucketedDP(_mlp(model_kw), bucket_cap_mb)

    def compute() -> None:  # forward + backward, no communication at all
        plain.zero_grad(set_to_none=False)
        loss_fn(plain(x), y).backward()

    graph: dict[str, torch.Tensor] = {}

    def forward() -> None:  # builds the graph that backward_only runs next in the round
        plain.zero_grad(set_to_none=False)
        graph["loss"] = loss_fn(plain(x), y)

    def backward() -> None:  # backward alone: the most the all-reduces can hide behind
        graph.pop("loss").backward()

    def comm_together() -> None:  # the same buckets, every all-reduce launched before any is waited for
        handles = []
        for k in range(len(bucketed.buckets)):
            bucketed._pack(k)
            handles.append(bucketed._all_reduce(bucketed.buffers[k], async_op=True))
        for k, h in enumerate(handles):
            h.wait()
            bucketed._unpack(k)

    loss_fn(bucketed.module(x), y).backward()
    names = list(runners)
    # the communication-only timings follow a step that ends in an all-reduce, so both processes
    # start them together (after compute-only work, the first all-reduce would wait out their skew)
    fns = [step(n) for n in names] + [bucketed.finish, comm_together, compute, forward, backward]
    # interleaved (A, B, C, ... A, B, C): load drifts on a shared machine; ratios stay fair
    keys = names + ["comm_only", "comm_together", "compute_only", "forward_only", "backward_only"]
    runs = interleaved(fns, warmup=2, repeat=repeat)
    # every repetition's time, the slower rank's: repetition i of each is taken back to back
    reps = dict(zip(keys, _slowest_each([m.times_s for m in runs]), strict=True))
    t = {k: statistics.median(v) for k, v in reps.items()}
    comm = t["bucketed"] - t["compute_only"]  # s: the communication inside the bucketed step
    hidden = (t["bucketed"] - t["overlapped"]) / comm if comm > 0 else None
    n_params = sum(p.numel() for p in plain.parameters())
    return {"max_abs_diff_vs_ddp": max_diff, "grad_scale": scale, "time_s": t,
            "times_s": reps, "hidden_share": hidden, "n_params": n_params,
            "grad_bytes": 4 * n_params, "buckets": len(bucketed.buckets), "batch": batch}


class _Counter:
    """DDP comm-hook state: counts all-reduce calls and bytes, then all-reduces as usual."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0


def _counting_hook(state, bucket):  # no annotations: DDP checks them against real types
    state.calls += 1
    state.bytes += bucket.buffer().numel() * bucket.buffer().element_size()
    return default_hooks.allreduce_hook(None, bucket)


def buckets(model_kw: dict[str, Any], batch: int, caps_mb: Sequence[float | None], repeat: int,
            balanced: bool = False) -> list[dict[str, Any]]:
    """DDP step time and all-reduce calls per step for each ``bucket_cap_mb``.

    A cap of ``None`` leaves ``bucket_cap_mb`` unset: DDP's default, 25 MiB buckets and a
    1 MiB first one; an explicit cap (25 included) caps the first bucket too. The caps are
    timed interleaved (one step of each in turn; with ``balanced``, in balanced orders over
    whole cycles: each cap before each other one in half the rounds); ``times_s`` holds every
    repetition's time (the slowest rank's), so ratios between caps come with a spread.
    """
    x, y = _batch(batch, 0)
    fns, calls, predicted = [], [], []
    for cap in caps_mb:
        model = DDP(_mlp(model_kw), bucket_cap_mb=cap)
        counter = _Counter()
        model.register_comm_hook(counter, _counting_hook)

        def fn(model: DDP = model) -> None:
            model.zero_grad(set_to_none=False)
            nn.functional.cross_entropy(model(x), y).backward()

        fn()  # DDP rebuilds its buckets in the order gradients arrived after step 1
        counter.calls = counter.bytes = 0
        fn()
        fns.append(fn)
        calls.append(counter.calls)
        caps = (DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES) if cap is None else (int(cap * 2**20), None)
        predicted.append(len(assign_buckets(list(model.module.parameters()), *caps)))
    runs = (interleaved_balanced if balanced else interleaved)(fns, warmup=1, repeat=repeat)
    out = []
    for cap, m, c, p in zip(caps_mb, runs, calls, predicted, strict=True):
        times = _slowest(m.times_s)
        out.append({"bucket_cap_mb": cap, "calls_per_step": c, "step_s": statistics.median(times),
                    "times_s": times, "predicted_calls": p})
    return out


def accumulate(model_kw: dict[str, Any], batch: int, ks: Sequence[int], repeat: int,
               no_sync: bool = True) -> list[dict[str, Any]]:
    """DDP over ``k`` micro-batches of ``batch`` samples per rank, one optimizer step's worth.

    With ``no_sync`` the first ``k - 1`` backward passes run under ``model.no_sync()`` and
    only the last all-reduces; without it every micro-batch's backward all-reduces. The
    ks are timed in alternation; ``times_s`` holds every repetition's time (slowest rank).
    """
    out, fns = [], []
    for k in ks:
        model = DDP(_mlp(model_kw))
        counter = _Counter()
        model.register_comm_hook(counter, _counting_hook)
        micro = [_batch(batch, s) for s in range(k)]

        def fn(model: DDP = model, micro: list = micro) -> None:
            model.zero_grad(set_to_none=False)
            for j, (x, y) in enumerate(micro):
                if j < len(micro) - 1 and no_sync:
                    with model.no_sync():  # gradients accumulate locally, no all-reduce
                        (nn.functional.cross_entropy(model(x), y) / len(micro)).backward()
                else:
                    (nn.functional.cross_entropy(model(x), y) / len(micro)).backward()

        fn()
        counter.calls = counter.bytes = 0
        fn()
        acc = _flat_grad(model.module).clone()
        calls, nbytes = counter.calls, counter.bytes
        big = DDP(_mlp(model_kw))  # one batch of k * batch samples, same data
        xs, ys = torch.cat([m[0] for m in micro]), torch.cat([m[1] for m in micro])
        nn.functional.cross_entropy(big(xs), ys).backward()
        diff = float((acc - _flat_grad(big.module)).abs().max())
        samples = k * batch * dist.get_world_size()
        fns.append(fn)
        out.append({"k": k, "samples_per_step": samples, "allreduce_calls": calls,
                    "allreduce_bytes_per_sample": nbytes / samples,
                    "max_abs_diff_vs_big_batch": diff})
    # the ks timed in alternation: a load change on a shared machine hits every k alike
    runs = interleaved(fns, warmup=1, repeat=repeat)
    for rec, times in zip(out, _slowest_each([m.times_s for m in runs]), strict=True):
        t = statistics.median(times)
        rec.update(step_s=t, s_per_sample=t / rec["samples_per_step"], times_s=times)
    return out


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the tasks in ``cfg`` (see the module docstring); return this rank's results.

    Warning:
        Collective: every rank must call it with the same ``cfg``.
    """
    torch.set_num_threads(1)
    model_kw = cfg.get("model", {})
    batch = cfg.get("batch", 32)
    result: dict[str, Any] = {"world_size": dist.get_world_size()}
    if "compare" in cfg:
        c = cfg["compare"]
        result["compare"] = compare(model_kw, batch, c.get("bucket_cap_mb", 1.0),
                                    c.get("repeat", 5))
    if "buckets" in cfg:
        b = cfg["buckets"]
        result["buckets"] = buckets(model_kw, batch, b["caps_mb"], b.get("repeat", 5),
                                    b.get("balanced", False))
    if "accumulate" in cfg:
        a = cfg["accumulate"]
        result["accumulate"] = accumulate(model_kw, batch, a["ks"], a.get("repeat", 3))
    if "accumulate_synced" in cfg:
        a = cfg["accumulate_synced"]
        result["accumulate_synced"] = accumulate(model_kw, batch, a["ks"], a.get("repeat", 3),
                                                 no_sync=False)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
