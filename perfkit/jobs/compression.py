"""Job: 2-process DDP training with each gradient-compression method, side by side.

Run by :func:`perfkit.dist.launch`; configured by JSON::

    launch("perfkit.jobs.compression", 2, ["--config", json.dumps(
        {"workload": "digits", "steps": 150, "methods": ["none", "topk_1pct_ef"]})])

Methods (``METHODS``): ``none`` (DDP's all-reduce), torch's ``fp16_hook``, ``bf16_hook``
and ``powersgd_r{1,2,4}``, and perfkit compressors through
:func:`perfkit.compress.compression_hook`: ``topk_1pct``, ``randomk_1pct``, ``qsgd``,
``sign``, each also with ``_ef`` (error feedback), ``qsgd`` and ``sign`` also as
``qsgd_fused``/``qsgd_eager`` (a forced kernel path, :mod:`perfkit.compress.fused`); any
``topk_<p>pct`` / ``randomk_<p>pct`` works (``topk_0p5pct``: 0.5 %), and ``dense`` sends the
uncompressed gradient through the same hook (``dense_ef`` too, through error feedback,
which must change nothing: both train exactly like ``none``). Every method trains a fresh
model from the same seed on the same batches.

Workloads are the module-01 ones from :mod:`perfkit.models`: ``digits`` (``SmallCNN``
on sklearn's digits, 80/20 split) and ``gpt2`` (tiny GPT-2 on the stdlib corpus). The
optimizer is SGD with momentum, the setting Deep Gradient Compression studies.

Rank 0's result, per method: per-step losses (mean over ranks), ``final_loss`` (the whole
training split, after the last step), ``eval_accuracy`` (digits only), payload bytes per
step against dense fp32 bytes (a torch hook's: what it hands to the all-reduce), every step's
time (the slower rank's) and the median of those (``step_s``).
With ``"interleave": true`` the methods train side by side, taking turns every
``"round_steps"`` steps on the same batches, and each also reports ``round_times_s``: its
time in every round, paired with the other methods' (a speed comparison one can trust on a
shared machine, where the load drifts between two runs made one after the other).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

from perfkit import compress
from perfkit import dist as pdist
from perfkit._checks import check_int, check_items
from perfkit.compress import HookState, compression_hook
from perfkit.timing import Timer, balanced_orders

METHODS = ("none", "fp16_hook", "bf16_hook", "powersgd_r1", "powersgd_r2", "powersgd_r4",
           "topk_1pct", "topk_1pct_ef", "randomk_1pct", "randomk_1pct_ef", "qsgd", "qsgd_ef",
           "sign", "sign_ef")


POWERSGD_START = 2  # PowerSGD's first compressed step (torch's default, 1000, would leave a short run dense)


class _Counted:
    """State of a torch hook run through :func:`_counted_hook`: the dense bytes DDP handed it
    and the bytes the hook handed to its all-reduces (counted by :class:`_Tap`)."""

    def __init__(self, inner_state: Any) -> None:
        self.inner = inner_state
        self.wire_bytes = self.dense_bytes = 0


class _Tap:
    """Stands in for ``torch.distributed`` inside torch's hook modules: every tensor they
    all-reduce adds its bytes to the :class:`_Counted` state of the hook being run, so their
    payload is counted on its way to the wire, not taken from their own formula. A callback
    that all-reduces later (PowerSGD's ``Q``) still falls within the step that set ``state``."""

    def __init__(self, real: Any) -> None:
        self.real, self.state = real, None

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.state is not None:
            self.state.wire_bytes += tensor.numel() * tensor.element_size()
        return self.real.all_reduce(tensor, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_TAP = _Tap(dist)


def _counted_hook(inner_hook):
    default_hooks.dist = psgd.dist = _TAP  # idempotent: torch's hooks all-reduce through the tap

    def hook(state, bucket):  # no annotations: DDP checks real types
        buf = bucket.buffer()
        state.dense_bytes += buf.numel() * buf.element_size()
        _TAP.state = state
        return inner_hook(state.inner, bucket)
    return hook


def powersgd_wire_ratio(model: nn.Module, rank: int, steps: int, start: int = POWERSGD_START) -> float:
    """PowerSGD's payload over the dense fp32 gradient of ``model``, averaged over ``steps``
    steps, by its own rule: each matrix gradient (rows = ``shape[0]``) that PyTorch compresses
    sends ``(rows + cols) · rank`` values, the others (biases, matrices too small to gain) all
    of theirs; the first ``start`` steps all-reduce the dense gradient.

    Raises:
        TypeError, ValueError: for ``rank`` or ``steps`` below 1, ``start`` below 0.
    """
    check_int("rank", rank, 1)
    check_int("steps", steps, 1)
    check_int("start", start, 0)
    sent = dense = 0
    for p in model.parameters():
        dense += p.numel()
        if p.ndim > 1:
            rows, cols = p.shape[0], p.numel() // p.shape[0]
            ok, _, small = psgd._should_compress(rows, cols, rank, 2)  # PowerSGDState's default rate
            sent += small if ok else p.numel()
        else:
            sent += p.numel()
    dense_steps = min(start, steps)
    return (dense_steps + (steps - dense_steps) * sent / dense) / steps


def make_compressor(method: str, seed: int = 0) -> compress.Compressor:
    """A perfkit compressor from a method name (``topk_1pct_ef``, ``qsgd``, ...).

    ``qsgd`` and ``sign`` take their default kernel path; a ``_fused`` or ``_eager`` suffix
    (before ``_ef``) forces one (``qsgd_fused``, ``sign_eager_ef``).
    """
    ef = method.endswith("_ef")
    base = method.removesuffix("_ef")
    path = re.fullmatch(r"(qsgd|sign)_(fused|eager)", base)
    kernel = None if path is None else path.group(2) == "fused"
    base = base if path is None else path.group(1)
    m = re.fullmatch(r"(topk|randomk)_(\d+(?:p\d+)?)pct", base)
    if m:
        ratio = float(Fraction(m.group(2).replace("p", ".")) / 100)  # "0p1" -> 0.001, rounded once
        comp = (compress.TopK(ratio, "sampled") if m.group(1) == "topk"
                else compress.RandomK(ratio, seed))
    elif base == "qsgd":
        comp = compress.QSGD(seed + dist.get_rank(), fused=kernel)  # own rounding per rank
    elif base == "sign":
        comp = compress.Sign(fused=kernel)
    elif base == "dense":
        comp = compress.Compressor()  # the identity, through the hook: checks the adapter
    else:
        raise ValueError(f"unknown method {method!r}; known: {METHODS}")
    return compress.ErrorFeedback(comp) if ef else comp


def attach(model: DDP, method: str, seed: int = 0) -> Any:
    """Register ``method``'s comm hook on ``model``; return the state holding byte counts."""
    if method == "none":
        st: Any = _Counted(None)
        model.register_comm_hook(st, _counted_hook(default_hooks.allreduce_hook))
    elif method in ("fp16_hook", "bf16_hook"):
        inner = (default_hooks.fp16_compress_hook if method == "fp16_hook"
                 else default_hooks.bf16_compress_hook)
        st = _Counted(None)
        model.register_comm_hook(st, _counted_hook(inner))
    elif method.startswith("powersgd_r"):
        ps = psgd.PowerSGDState(None, matrix_approximation_rank=int(method[10:]),
                                start_powerSGD_iter=POWERSGD_START, random_seed=seed)
        st = _Counted(ps)
        model.register_comm_hook(st, _counted_hook(psgd.powerSGD_hook))
    else:
        st = HookState(make_compressor(method, seed))
        model.register_comm_hook(st, compression_hook)
    return st


def _digits(seed: int):
    from perfkit.models import SmallCNN, digits_data

    x, y = digits_data()
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    cut = int(0.8 * len(x))
    torch.manual_seed(seed)
    return SmallCNN(), (x[:cut], y[:cut]), (x[cut:], y[cut:]), nn.functional.cross_entropy


def _gpt2(seed: int):
    from perfkit.models import encode_corpus, text_corpus, tiny_gpt2, train_bpe_tokenizer

    tok = train_bpe_tokenizer(1024, 300_000)
    ids = encode_corpus(tok, text_corpus(300_000))
    n = (len(ids) - 1) // 64
    xs = ids[: n * 64].view(n, 64)
    ys = ids[1: n * 64 + 1].view(n, 64)
    torch.manual_seed(seed)
    model = tiny_gpt2(1024, 64, 64, 2, 2)

    def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.logits.reshape(-1, 1024), y.reshape(-1))
    cut = int(0.9 * n)
    return model, (xs[:cut], ys[:cut]), (xs[cut:], ys[cut:]), loss_fn


@dataclass
class _Trainer:
    """One method's model, DDP wrapper, hook state, optimizer and data, and what its steps gave."""

    method: str
    model: nn.Module
    ddp: DDP
    state: Any
    opt: torch.optim.Optimizer
    loss_fn: Callable[..., torch.Tensor]
    train: tuple[torch.Tensor, torch.Tensor]
    held_out: tuple[torch.Tensor, torch.Tensor]
    losses: list[torch.Tensor] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # s, this rank's, one per step


def _trainer(workload: str, method: str, lr: float, seed: int) -> _Trainer:
    """A fresh model from ``seed`` (the same weights for every method) with ``method``'s hook."""
    model, (xt, yt), (xe, ye), loss_fn = {"digits": _digits, "gpt2": _gpt2}[workload](seed)
    if dist.get_backend() == "nccl":  # init_worker bound this rank's GPU
        dev = torch.device("cuda", torch.cuda.current_device())
        model, xt, yt, xe, ye = model.to(dev), xt.to(dev), yt.to(dev), xe.to(dev), ye.to(dev)
    ddp = DDP(model)
    state = attach(ddp, method, seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return _Trainer(method, model, ddp, state, opt, loss_fn, (xt, yt), (xe, ye))


def _indices(g: torch.Generator, n: int, batch: int) -> torch.Tensor:
    """This rank's share of one global batch (``g`` is seeded alike on every rank)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    return torch.randint(n, (batch * world,), generator=g)[rank::world]


def _step(tr: _Trainer, idx: torch.Tensor) -> None:
    """One timed SGD step of ``tr`` on the rows ``idx`` of its training split."""
    xt, yt = tr.train
    idx = idx.to(xt.device)
    with Timer() as t:
        loss = tr.loss_fn(tr.ddp(xt[idx]), yt[idx])
        tr.opt.zero_grad(set_to_none=True)
        loss.backward()
        tr.opt.step()
    tr.losses.append(loss.detach())
    tr.times.append(t.elapsed_s)


def _record(tr: _Trainer, workload: str) -> dict[str, Any]:
    """``tr``'s result (losses averaged over ranks, each step's time the slower rank's).

    Warning:
        Collective: every rank must call it, for the same trainers in the same order.
    """
    world = dist.get_world_size()
    losses = torch.stack(tr.losses)
    dist.all_reduce(losses)
    (xt, yt), (xe, ye) = tr.train, tr.held_out
    with torch.no_grad():
        final = sum(float(tr.loss_fn(tr.model(xt[i: i + 256]), yt[i: i + 256])) * len(xt[i: i + 256])
                    for i in range(0, len(xt), 256)) / len(xt)
        acc = (float((tr.model(xe).argmax(1) == ye).float().mean()) if workload == "digits"
               else None)
    steps = len(tr.times)
    per_step = torch.tensor(tr.times, dtype=torch.float64)  # the slower rank's time of each step
    dist.all_reduce(per_step, op=dist.ReduceOp.MAX)
    # the median of that series, so that step_s and any ratio of step_times_s speak of one statistic
    times_t = per_step.sort().values[steps // 2]
    return {"method": tr.method, "losses": (losses / world).tolist(), "final_loss": final,
            "eval_accuracy": acc, "wire_bytes_per_step": tr.state.wire_bytes / steps,
            "dense_bytes_per_step": tr.state.dense_bytes / steps,
            "step_s": float(times_t), "step_times_s": per_step.tolist(),
            "n_params": sum(p.numel() for p in tr.model.parameters())}


def train(workload: str, method: str, steps: int, batch: int, lr: float, seed: int = 0
          ) -> dict[str, Any]:
    """Train ``workload`` for ``steps`` SGD-momentum steps with ``method``'s hook.

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    check_int("steps", steps, 1)
    tr = _trainer(workload, method, lr, seed)
    g = torch.Generator().manual_seed(seed)  # the same on every rank: one global batch
    for _ in range(steps):
        _step(tr, _indices(g, len(tr.train[0]), batch))
    return _record(tr, workload)


def round_order(n: int, r: int) -> list[int]:
    """The order of ``n`` methods in round ``r``: the rows of a Williams design
    (:func:`perfkit.timing.balanced_orders`), one per round, cycling.

    Over a cycle every method takes every position, and runs right after every other,
    equally often. A step can leave a cost to the next one (a method whose collectives end
    with the processes out of step makes the next step's first all-reduce wait; its buffers
    evict the next one's from the caches): under a fixed rotation that cost always falls on
    the same successor, and biases its paired ratios, where here it falls on every method
    alike. For odd ``n`` the reversed rows run in an order that keeps a method from running
    last in one round and first in the next.

    Raises:
        ValueError: for ``n`` not an int >= 1 or ``r`` not an int >= 0.
    """
    check_int("n", n, 1)
    check_int("r", r, 0)
    rows = balanced_orders(n)
    if n % 2 and n > 1:  # rows n.. are rows 0.. reversed: row k reversed ends with k
        rows = rows[:n] + [rows[n + k] for k in (*range(n - 2, -1, -1), n - 1)]
    return rows[r % len(rows)]


def train_interleaved(workload: str, methods: Sequence[str], steps: int, batch: int, lr: float,
                      seed: int = 0, round_steps: int = 1) -> list[dict[str, Any]]:
    """Train every method in ``methods`` side by side, in rounds of ``round_steps`` steps each.

    Each method has its own model (the same initial weights), hook and optimizer; every
    round draws ``round_steps`` batches and each method takes them in turn, in the order
    :func:`round_order` gives (a balanced design: every method runs in every position, and
    after every other, equally often; with three methods or more none runs twice in a row
    across a round's end). Trained
    one after the other, a change of load between the runs would decide their ratio; here
    round ``i`` of every method runs under the same load, so per-round times are paired.

    Returns:
        One record per method as :func:`train` gives (the same losses as a run of its own),
        plus ``round_times_s``: each round's seconds (its steps' times, the slower rank's).

    Raises:
        TypeError, ValueError: for no ``methods`` or ``steps``/``round_steps`` below 1.

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    check_int("steps", steps, 1)
    check_int("round_steps", round_steps, 1)
    trainers = [_trainer(workload, m, lr, seed) for m in check_items("methods", methods)]
    g = torch.Generator().manual_seed(seed)  # the same on every rank: one global batch
    n = len(trainers[0].train[0])
    for r, start in enumerate(range(0, steps, round_steps)):
        idxs = [_indices(g, n, batch) for _ in range(min(round_steps, steps - start))]
        for tr in (trainers[k] for k in round_order(len(trainers), r)):
            for idx in idxs:
                _step(tr, idx)
    out = []
    for tr in trainers:
        rec = _record(tr, workload)
        t = rec["step_times_s"]
        rec["round_times_s"] = [sum(t[i: i + round_steps]) for i in range(0, steps, round_steps)]
        out.append(rec)
    return out


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Train every method in ``cfg["methods"]``, one after the other, or side by side with
    ``"interleave": true`` (:func:`train_interleaved`, rounds of ``"round_steps"``); return
    this rank's results.

    Warning:
        Collective: every rank must call it with the same ``cfg``.
    """
    torch.set_num_threads(1)
    workload = cfg.get("workload", "digits")
    if workload not in ("digits", "gpt2"):
        raise ValueError(f"workload must be 'digits' or 'gpt2', got {workload!r}")
    args = (cfg.get("steps", 150), cfg.get("batch", 32),
            cfg.get("lr", {"digits": 0.05, "gpt2": 0.3}[workload]), cfg.get("seed", 0))
    methods = cfg.get("methods", list(METHODS))
    if cfg.get("interleave", False):
        runs = train_interleaved(workload, methods, *args, round_steps=cfg.get("round_steps", 1))
    else:
        runs = [train(workload, m, *args) for m in methods]
    return {"world_size": dist.get_world_size(), "workload": workload,
            "interleaved": bool(cfg.get("interleave", False)), "runs": runs}


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
