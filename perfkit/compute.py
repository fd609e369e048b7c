"""Compute efficiency of a training step: model FLOPs, MFU, precision, compile, fusion, shapes.

Model FLOPs follow the PaLM paper (Chowdhery et al., 2022, appendix B) as nanoGPT's
``estimate_mfu`` does: a decoder-only transformer with ``N`` parameters taking part in
matmuls does ``6 N`` FLOPs per trained token (2 in the forward pass, 4 in the backward),
plus ``12 L d T`` per token for the attention scores and their weighted sum (``L`` layers,
width ``d``, sequence length ``T``). MFU is those FLOPs per second over the machine's
measured matmul ceiling (:mod:`perfkit.hw`). The rest measures what the course's module 06
changes: precision (:func:`make_train_step`), ``torch.compile`` (:func:`measure_compile`,
:func:`graph_breaks`), memory traffic of unfused elementwise chains
(:func:`elementwise_chain_bytes`), matmul shapes (:func:`matmul_shape_sweep`), and the largest
batch that fits (:func:`largest_batch` with :class:`BudgetProbe` on CPU or :class:`OOMProbe`
on GPU).

Usage::

    shape = gpt2_shape(model)                       # a transformers GPT-2
    flops = shape.train_flops(batch=8)              # FLOPs of one training step
    print(mfu(flops, step_s=0.05, peak=hw.cached_limits(), dtype="bfloat16"))
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from perfkit.hw import MachineLimits
from perfkit.memory import SavedTensorMeter
from perfkit.timing import (
    Measurement,
    Timer,
    calibrate_number,
    interleaved,
    resolve_device,
)

__all__ = [
    "PRECISIONS", "AttentionPoint", "BatchSearch", "BudgetProbe", "ChainBytes", "CompileRecord",
    "GPTShape", "GraphReport", "OOMProbe", "ShapePoint", "Speedup", "StepBench", "ThroughputPoint",
    "activation_bytes", "attention_matrix_bytes", "attention_sweep", "compare",
    "elementwise_chain_bytes", "gpt2_shape", "gpt_train_flops", "graph_breaks", "largest_batch",
    "make_train_step", "matmul_shape_sweep",
    "measure_compile", "mfu", "pad_to_multiple", "precision_dtype",
]

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def _torch_dtype(dtype: str) -> torch.dtype:
    """``"float32"``/``"fp32"`` (and bf16, fp16 likewise) as a ``torch.dtype``."""
    name = PRECISIONS.get(dtype, dtype)
    if name not in PRECISIONS.values():
        raise ValueError(f"dtype must be one of {sorted(PRECISIONS.values())}, got {dtype!r}")
    return getattr(torch, name)


# --- model FLOPs and MFU ------------------------------------------------------------------


def gpt_train_flops(n_params: int, n_layer: int, d_model: int, seq_len: int, tokens: int) -> int:
    """FLOPs of one training step of a GPT: ``6 N D + 12 L d T D`` for ``D`` tokens.

    ``6 N`` per token: every parameter that takes part in a matmul does a multiply and an
    add in the forward pass (2) and twice that in the backward pass (gradients of the
    activations and of the weights: 4). Attention adds ``Q K^T`` and ``softmax(.) V``: each
    ``2 T d`` FLOPs per token and layer forward, ``12 L d T`` per token with the backward.
    The full ``T x T`` score matrix is counted, as PaLM and nanoGPT do; a causal kernel that
    skips the masked half does less work, so this is the work a dense implementation does.

    Args:
        n_params: parameters used in matmuls (exclude position embeddings: a lookup).
        n_layer, d_model, seq_len: ``L``, ``d`` and ``T``.
        tokens: tokens trained in the step (``batch * seq_len``).

    Returns:
        FLOPs of one forward + backward pass (the optimizer's few FLOPs per parameter are
        not counted).

    Raises:
        ValueError: if any argument is not a positive int.
    """
    for name, v in (("n_params", n_params), ("n_layer", n_layer), ("d_model", d_model),
                    ("seq_len", seq_len), ("tokens", tokens)):
        _positive_int(name, v)
    return 6 * n_params * tokens + 12 * n_layer * d_model * seq_len * tokens


@dataclass(frozen=True)
class GPTShape:
    """What :func:`gpt_train_flops` needs to know about a GPT.

    Attributes:
        n_params: parameters that take part in matmuls (tied embeddings counted once).
        n_layer, d_model, seq_len: layers, width and the sequence length trained on.
    """

    n_params: int
    n_layer: int
    d_model: int
    seq_len: int

    def train_flops(self, batch: int) -> int:
        """FLOPs of one training step on ``batch`` sequences of ``seq_len`` tokens."""
        return gpt_train_flops(self.n_params, self.n_layer, self.d_model, self.seq_len,
                               _positive_int("batch", batch) * self.seq_len)


def gpt2_shape(model: nn.Module, seq_len: int | None = None) -> GPTShape:
    """The :class:`GPTShape` of a ``transformers`` GPT-2 (``config.n_layer``, ``n_embd``).

    The position embedding is excluded (a lookup, no FLOPs). The token embedding counts
    once when it is tied to the LM head (the head's matmul uses it); untied, the lookup
    copy is excluded too.

    Args:
        model: a ``GPT2LMHeadModel`` (or anything with a GPT-2 ``config`` and ``transformer``).
        seq_len: tokens per sequence; default ``config.n_positions``.

    Raises:
        TypeError: if ``model`` has no GPT-2 config.
    """
    cfg = getattr(model, "config", None)
    if not all(hasattr(cfg, a) for a in ("n_layer", "n_embd", "n_positions")):
        raise TypeError(f"model must be a transformers GPT-2 with a config, got {type(model).__name__}")
    skip = {id(model.transformer.wpe.weight)}
    if model.get_input_embeddings().weight is not model.get_output_embeddings().weight:
        skip.add(id(model.get_input_embeddings().weight))
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    return GPTShape(n, cfg.n_layer, cfg.n_embd,
                    _positive_int("seq_len", seq_len if seq_len is not None else cfg.n_positions))


def precision_dtype(precision: str) -> str:
    """The dtype name the matmuls of ``precision`` run in: ``"bf16" -> "bfloat16"``.

    Raises:
        ValueError: for a precision other than ``fp32``, ``bf16`` or ``fp16``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def mfu(flops_per_step: float, step_s: float, peak: float | MachineLimits,
        dtype: str = "float32") -> float:
    """Model FLOPs utilisation: ``flops_per_step / step_s`` over the peak FLOP/s (a fraction).

    Args:
        flops_per_step: model FLOPs of one step (e.g. :meth:`GPTShape.train_flops`).
        step_s: measured seconds per step.
        peak: a FLOP/s ceiling, or measured :class:`perfkit.hw.MachineLimits`.
        dtype: with ``MachineLimits``, the dtype whose ceiling applies (the one the matmuls
            run in: bf16 autocast is measured against the bf16 ceiling).

    Raises:
        ValueError: if ``flops_per_step``, ``step_s`` or the peak is not positive.
    """
    if flops_per_step <= 0 or step_s <= 0:
        raise ValueError(f"flops_per_step and step_s must be > 0, got {flops_per_step}, {step_s}")
    ceiling = peak.peak_flops(dtype) if isinstance(peak, MachineLimits) else float(peak)
    if ceiling <= 0:
        raise ValueError(f"peak must be > 0 FLOP/s, got {ceiling}")
    return flops_per_step / step_s / ceiling


# --- precision: one training step ---------------------------------------------------------


def make_train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
                    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
                    precision: str = "fp32") -> Callable[[Any], torch.Tensor]:
    """A training step ``step(batch) -> loss`` in ``precision``.

    ``bf16`` runs the forward pass under ``torch.autocast`` (matmuls in bf16, reductions
    such as softmax and the loss in fp32; the weights and the optimizer stay fp32). ``fp16``
    adds a ``GradScaler``: fp16's 5 exponent bits underflow small gradients unless the loss
    is scaled up before backward and the gradients scaled down before the update. The loss
    is returned detached and never read (``.item()`` would synchronise a GPU every step).

    Args:
        model: the module; its first parameter's device decides where autocast applies.
        optimizer: optimizer over ``model``'s parameters.
        loss_fn: ``loss_fn(model, batch)`` returns a scalar loss (a ``perfkit.models.Workload``
            has one).
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (CUDA only).

    Raises:
        ValueError: for an unknown precision, or ``fp16`` without CUDA.
    """
    precision_dtype(precision)
    device = next(model.parameters()).device
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision='fp16' needs a CUDA model: fp16 training relies on a GPU's "
                         "fp16 units and GradScaler; on a CPU use 'bf16'")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def step(batch: Any) -> torch.Tensor:
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model, batch)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # skips the update if the gradients overflowed
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


@dataclass(frozen=True)
class Speedup:
    """Two callables timed in alternation; ``ratio`` = baseline median / candidate median.

    ``pair_ratios`` are the ratios of back-to-back pairs: their 10th-90th percentile range
    (``low``, ``high``) is the spread quoted beside the ratio.
    """

    baseline: Measurement
    candidate: Measurement

    @property
    def ratio(self) -> float:
        return self.baseline.median_s / self.candidate.median_s

    @property
    def pair_ratios(self) -> tuple[float, ...]:
        return tuple(b / c for b, c in zip(self.baseline.times_s, self.candidate.times_s, strict=True))

    @property
    def low(self) -> float:
        return Measurement(self.pair_ratios, 0).p10_s

    @property
    def high(self) -> float:
        return Measurement(self.pair_ratios, 0).p90_s

    def __str__(self) -> str:
        return (f"{self.ratio:.2f}x (pairs p10-p90 {self.low:.2f}-{self.high:.2f}x, "
                f"{self.baseline.median_s * 1e3:.1f} -> {self.candidate.median_s * 1e3:.1f} ms, "
                f"n={self.baseline.n})")


def compare(baseline: Callable[[], object], candidate: Callable[[], object], warmup: int = 2,
            repeat: int = 10, threads: int | None = None,
            device: torch.device | str | None = None) -> Speedup:
    """Time ``baseline`` and ``candidate`` interleaved (:func:`perfkit.timing.interleaved`).

    Args:
        baseline, candidate: callables doing one unit of work each (a training step).
        warmup, repeat: untimed and timed rounds (each round runs both).
        threads: run with this many intra-op threads, then restore the setting. On a
            shared machine a descheduled OpenMP thread stalls its siblings at every
            barrier, so multi-threaded timings swing by integer factors; one thread
            measures a *ratio* more reliably. ``None`` keeps the current setting.
        device: where they run; ``None`` means CUDA if present, else CPU.

    Raises:
        ValueError: for ``threads`` below 1 (and bad ``warmup``/``repeat``).
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(_positive_int("threads", threads))
    try:
        base, cand = interleaved([baseline, candidate], warmup=warmup, repeat=repeat,
                                 device=device)
    finally:
        torch.set_num_threads(before)
    return Speedup(base, cand)


# --- torch.compile ------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileRecord:
    """What compiling bought: the first compiled call's cost and the steady-state speed.

    Attributes:
        compile_s: first compiled call minus one eager call, in seconds (tracing,
            lowering, C++/Triton code generation and compilation).
        eager, compiled: steady-state timings, measured interleaved.
        fx_cache_hits: inductor FX-graph cache hits during the first call (a hit reuses
            code compiled by an earlier process, so the compile is much cheaper).
    """

    compile_s: float
    eager: Measurement
    compiled: Measurement
    fx_cache_hits: int = 0

    @property
    def speedup(self) -> float:
        return self.eager.median_s / self.compiled.median_s

    @property
    def break_even_calls(self) -> float:
        """Calls after which compiling has paid for itself (``inf`` if it is not faster)."""
        saved = self.eager.median_s - self.compiled.median_s
        return max(self.compile_s, 0.0) / saved if saved > 0 else math.inf


def measure_compile(eager_fn: Callable[[], object], compiled_fn: Callable[[], object],
                    warmup: int = 2, repeat: int = 10,
                    device: torch.device | str | None = None) -> CompileRecord:
    """Time the first call of ``compiled_fn`` (the compile), then both interleaved.

    Build ``compiled_fn`` from a fresh ``torch.compile`` (dynamo caches compiled code per
    function, so a function compiled earlier in the process costs nothing the second time).

    Args:
        eager_fn: the work without compiling.
        compiled_fn: the same work through a ``torch.compile``-d model or function.
        warmup, repeat: as for :func:`perfkit.timing.interleaved`.
        device: ``None`` means CUDA if present, else CPU.
    """
    from torch._dynamo.utils import counters

    dev = resolve_device(device)
    eager_fn()  # eager's own first-call costs must not count as compile time
    with Timer(dev) as one:
        eager_fn()
    hits = counters["inductor"]["fxgraph_cache_hit"]
    with Timer(dev) as first:
        compiled_fn()
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits
    eager, compiled = interleaved([eager_fn, compiled_fn], warmup=warmup, repeat=repeat,
                                  device=dev)
    return CompileRecord(first.elapsed_s - one.elapsed_s, eager, compiled, hits)


@dataclass(frozen=True)
class GraphReport:
    """What ``torch._dynamo.explain`` found: graphs captured, breaks, and why."""

    graphs: int
    breaks: int
    reasons: list[str] = field(default_factory=list)


def graph_breaks(fn: Callable[..., object], *args: Any, **kwargs: Any) -> GraphReport:
    """Trace ``fn(*args, **kwargs)`` with dynamo (no code generation) and report its breaks.

    Each break splits the program into separately compiled graphs with Python in between,
    which stops fusion across the break and adds guard checks. Resets dynamo's caches.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    log = logging.getLogger("torch._dynamo")
    level = log.level
    log.setLevel(logging.ERROR)  # the report carries each break's reason; skip the warnings
    try:
        torch._dynamo.reset()
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        log.setLevel(level)
        torch._dynamo.reset()
    reasons = [r.reason.strip().splitlines()[0] for r in out.break_reasons]
    return GraphReport(out.graph_count, out.graph_break_count, reasons)


# --- fusion: bytes moved by an elementwise chain -------------------------------------------


@dataclass(frozen=True)
class ChainBytes:
    """Bytes an elementwise chain moves run op by op (``eager``) and as one kernel."""

    eager: int
    fused: int
    kernels: int

    @property
    def ratio(self) -> float:
        """How many times more bytes eager moves: the memory-bound speedup fusion can give."""
        return self.eager / self.fused


def elementwise_chain_bytes(reads_per_op: Sequence[int], numel: int, bytes_per_element: int = 4,
                            inputs: int = 1) -> ChainBytes:
    """Memory traffic of a chain of elementwise ops on ``numel``-element tensors.

    Eager PyTorch runs one kernel per op: op ``i`` reads ``reads_per_op[i]`` full-size
    tensors from memory and writes one. A fused kernel reads the chain's ``inputs``
    full-size tensors once and writes only the final result; the intermediates stay in
    registers. Scalars and broadcast vectors (a bias) are not counted: they are tiny.

    Args:
        reads_per_op: full-size tensors each op reads (``x * y``: 2; ``x * 0.5``: 1).
        numel: elements per tensor.
        bytes_per_element: 4 for fp32, 2 for bf16.
        inputs: distinct full-size tensors the whole chain reads.

    Raises:
        ValueError: for an empty chain or non-positive counts.
    """
    if len(reads_per_op) == 0:
        raise ValueError("reads_per_op must list at least one op")
    for r in reads_per_op:
        _positive_int("reads_per_op entries", r)
    for name, v in (("numel", numel), ("bytes_per_element", bytes_per_element), ("inputs", inputs)):
        _positive_int(name, v)
    eager = sum(r + 1 for r in reads_per_op) * numel * bytes_per_element
    return ChainBytes(eager, (inputs + 1) * numel * bytes_per_element, len(reads_per_op))


def attention_matrix_bytes(batch: int, heads: int, seq_len: int, bytes_per_element: int = 4) -> int:
    """Bytes of one ``(B, H, T, T)`` attention matrix: what unfused attention saves per layer."""
    for name, v in (("batch", batch), ("heads", heads), ("seq_len", seq_len),
                    ("bytes_per_element", bytes_per_element)):
        _positive_int(name, v)
    return batch * heads * seq_len * seq_len * bytes_per_element


def activation_bytes(fn: Callable[[], object], params: nn.Module | None = None,
                     inputs: Sequence[torch.Tensor] = ()) -> int:
    """Bytes autograd saves for backward while ``fn()`` runs a forward pass (exact).

    Uses :class:`perfkit.memory.SavedTensorMeter`: saved parameters and ``inputs`` are not
    counted (they exist anyway); the graph is dropped afterwards.
    """
    with SavedTensorMeter(params, inputs) as meter:
        out = fn()
    del out
    return meter.report().activation_bytes


@dataclass(frozen=True)
class AttentionPoint:
    """One attention implementation at one sequence length: forward + backward seconds
    (median) and the bytes it saves for backward."""

    impl: str
    seq_len: int
    seconds: float
    saved_bytes: int


def attention_sweep(impls: dict[str, Callable[..., torch.Tensor]], seq_lens: Sequence[int],
                    batch: int = 4, heads: int = 4, head_dim: int = 16, dtype: str = "float32",
                    repeat: int = 5, device: torch.device | str | None = None) -> list[AttentionPoint]:
    """Time and activation memory of causal attention implementations against ``T``.

    Each ``impls[name](q, k, v)`` takes ``(B, H, T, head_dim)`` tensors and returns the
    ``(B, H, T, head_dim)`` output of causal attention; the implementations are timed
    interleaved at each ``T`` (forward and backward of ``out.sum()``).

    Raises:
        ValueError: for no implementations, no sequence lengths or non-positive sizes.
    """
    if not impls or len(seq_lens) == 0:
        raise ValueError("impls and seq_lens must not be empty")
    for name, v in (("batch", batch), ("heads", heads), ("head_dim", head_dim)):
        _positive_int(name, v)
    dev, dt = resolve_device(device), _torch_dtype(dtype)
    points = []
    for t in seq_lens:
        qkv = [torch.randn(batch, heads, _positive_int("seq_len", t), head_dim, device=dev,
                           dtype=dt, requires_grad=True) for _ in range(3)]  # (B, H, T, hd)
        fns = [lambda f=f, qkv=qkv: f(*qkv).sum().backward() for f in impls.values()]
        times = interleaved(fns, warmup=1, repeat=repeat, device=dev)
        for (name, f), m in zip(impls.items(), times, strict=True):
            saved = activation_bytes(lambda f=f, qkv=qkv: f(*qkv), inputs=qkv)
            points.append(AttentionPoint(name, t, m.median_s, saved))
    return points


# --- shapes ---------------------------------------------------------------------------------


def pad_to_multiple(n: int, multiple: int = 64) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n`` (nanoGPT pads 50257 to 50304)."""
    _positive_int("n", n)
    _positive_int("multiple", multiple)
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class ShapePoint:
    """One ``(m, k) @ (k, n)`` matmul: dtype, median seconds per call and FLOP/s."""

    m: int
    n: int
    k: int
    dtype: str
    seconds: float
    flops_per_s: float


def matmul_shape_sweep(shapes: Sequence[tuple[int, int, int]], dtype: str = "float32",
                       device: torch.device | str | None = None, repeat: int = 7,
                       target_s: float = 0.004) -> list[ShapePoint]:
    """FLOP/s of ``(m, k) @ (k, n)`` for each ``(m, n, k)``, measured interleaved.

    Each shape's call is batched (:func:`perfkit.timing.calibrate_number`) to about
    ``target_s`` seconds, and the shapes take turns, so load changes hit them alike.

    Raises:
        ValueError: for no shapes, a non-positive dimension or an unknown dtype.
    """
    if len(shapes) == 0:
        raise ValueError("shapes must hold at least one (m, n, k)")
    dev, dt = resolve_device(device), _torch_dtype(dtype)
    fns, numbers = [], []
    for m, n, k in shapes:
        for name, v in (("m", m), ("n", n), ("k", k)):
            _positive_int(name, v)
        a = torch.randn(m, k, device=dev).to(dt)  # (m, k)
        b = torch.randn(k, n, device=dev).to(dt)  # (k, n)
        out = torch.empty(m, n, device=dev, dtype=dt)

        def mm(a: torch.Tensor = a, b: torch.Tensor = b, out: torch.Tensor = out) -> None:
            torch.mm(a, b, out=out)

        mm()  # oneDNN builds a kernel per shape on its first call
        number = calibrate_number(mm, target_s, dev)
        fns.append(lambda mm=mm, number=number: [mm() for _ in range(number)])
        numbers.append(number)
    ms = interleaved(fns, warmup=1, repeat=repeat, device=dev)
    return [ShapePoint(m, n, k, str(dt).removeprefix("torch."), t.median_s / num,
                       2 * m * n * k * num / t.median_s)
            for (m, n, k), t, num in zip(shapes, ms, numbers, strict=True)]


# --- the largest batch that fits -----------------------------------------------------------


@dataclass(frozen=True)
class BatchSearch:
    """Result of :func:`largest_batch`: the best batch and every ``(batch, fits)`` tried."""

    best: int
    trials: list[tuple[int, bool]]


def largest_batch(fits: Callable[[int], bool], start: int = 1, limit: int = 1 << 16) -> BatchSearch:
    """Largest batch ``b <= limit`` with ``fits(b)``: double from ``start``, then bisect.

    Assumes memory grows with the batch (if ``b`` fits, every smaller batch fits), so it
    needs about ``2 log2(best)`` trials. ``best`` is 0 when not even ``start`` fits.

    Raises:
        ValueError: if ``start`` or ``limit`` is not a positive int or ``start > limit``.
        TypeError: if ``fits`` is not callable.
    """
    if not callable(fits):
        raise TypeError(f"fits must be callable, got {type(fits).__name__}")
    _positive_int("start", start)
    _positive_int("limit", limit)
    if start > limit:
        raise ValueError(f"start must be <= limit, got start={start}, limit={limit}")
    trials: list[tuple[int, bool]] = []

    def probe(b: int) -> bool:
        ok = bool(fits(b))
        trials.append((b, ok))
        return ok

    good, bad = 0, None
    b = start
    while b <= limit:  # doubling phase: find a batch that does not fit
        if not probe(b):
            bad = b
            break
        good, b = b, b * 2
    if bad is None:
        if good == limit:
            return BatchSearch(good, trials)
        bad = limit + 1  # limit itself was skipped by the doubling: bisect up to it
    lo = max(good, start - 1)
    while bad - lo > 1:  # invariant: lo fits (or is below start), bad does not
        mid = (lo + bad) // 2
        lo, bad = (mid, bad) if probe(mid) else (lo, mid)
    return BatchSearch(lo if lo >= start else 0, trials)


class BudgetProbe:
    """CPU: does a training step at batch ``b`` fit ``budget_bytes``? (``fits`` for search)

    The step's memory is modelled as model states (parameters, gradients and
    ``state_bytes_per_param`` of optimizer state, from the live parameters) plus the
    activations autograd saves, measured exactly by running the forward pass at that batch
    (:func:`activation_bytes`). A CPU process does not fail at a memory limit the way a GPU
    does (it swaps, or the OS kills it), so the budget is applied to this count instead.

    Attributes:
        bytes: batch -> counted bytes, for every batch probed.
    """

    def __init__(self, model: nn.Module, forward: Callable[[int], torch.Tensor], budget_bytes: int,
                 state_bytes_per_param: int = 8) -> None:
        """Args:
            model: the module trained (its parameters are the model states).
            forward: ``forward(b)`` runs the forward pass on a batch of ``b`` and returns the loss.
            budget_bytes: the memory the step may use.
            state_bytes_per_param: optimizer bytes per parameter (Adam in fp32: 8).

        Raises:
            ValueError: for a non-positive budget or negative state bytes.
        """
        _positive_int("budget_bytes", budget_bytes)
        if state_bytes_per_param < 0:
            raise ValueError(f"state_bytes_per_param must be >= 0, got {state_bytes_per_param}")
        self.model, self.forward, self.budget_bytes = model, forward, budget_bytes
        params = [p for p in model.parameters() if p.requires_grad]
        self.state_bytes = sum(p.numel() * (2 * p.element_size() + state_bytes_per_param)
                               for p in params)
        self.bytes: dict[int, int] = {}

    def __call__(self, batch: int) -> bool:
        self.bytes[batch] = self.state_bytes + activation_bytes(lambda: self.forward(batch),
                                                                self.model)
        return self.bytes[batch] <= self.budget_bytes


class OOMProbe:
    """GPU: run ``step(b)`` and report whether it fit, surviving out-of-memory errors.

    An OOM raises ``torch.OutOfMemoryError`` from inside the step; the tensors it had
    allocated are only freed once the exception (and its traceback, which references the
    step's frames) is gone. So the probe leaves the ``except`` block first, then collects
    garbage and returns cached blocks to the driver before the next trial. With
    ``budget_bytes`` a batch that ran but peaked above the budget counts as not fitting.

    Attributes:
        bytes: batch -> peak allocated bytes of the step (absent for batches that OOMed).
    """

    def __init__(self, step: Callable[[int], object], budget_bytes: int | None = None,
                 device: torch.device | str | None = None) -> None:
        """Args:
            step: ``step(b)`` runs a full training step at batch ``b`` (and zeroes the
                gradients with ``set_to_none=True`` so trials do not accumulate memory).
            budget_bytes: optional cap below the device's capacity.
            device: a CUDA device; default the current one.

        Raises:
            ValueError: if the device is not CUDA.
        """
        dev = resolve_device(device or "cuda")
        if dev.type != "cuda":
            raise ValueError(f"OOMProbe needs a CUDA device, got {str(dev)!r}; use BudgetProbe on CPU")
        if budget_bytes is not None:
            _positive_int("budget_bytes", budget_bytes)
        self.step, self.budget_bytes, self.device = step, budget_bytes, dev
        self.bytes: dict[int, int] = {}

    def __call__(self, batch: int) -> bool:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        oom = False
        try:
            self.step(batch)
            torch.cuda.synchronize(self.device)  # an asynchronous OOM surfaces here at the latest
        except torch.OutOfMemoryError:
            oom = True
        gc.collect()  # after the except block: the traceback no longer pins the step's tensors
        torch.cuda.empty_cache()
        if oom:
            return False
        self.bytes[batch] = torch.cuda.max_memory_allocated(self.device)
        return self.budget_bytes is None or self.bytes[batch] <= self.budget_bytes


# --- cached step measurements (the notebook's widget) --------------------------------------


@dataclass(frozen=True)
class ThroughputPoint:
    """A training step measured at one setting, with its model FLOPs and ceiling.

    Attributes:
        precision, compiled, batch: the setting.
        step: timings of the step (after ``warmup`` untimed steps).
        first_call_s: the first step's seconds (includes compiling when ``compiled``).
        tokens_per_step, flops_per_step: work per step.
        peak_flops: the measured ceiling of the dtype the matmuls run in.
    """

    precision: str
    compiled: bool
    batch: int
    step: Measurement
    first_call_s: float
    tokens_per_step: int
    flops_per_step: int
    peak_flops: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step.median_s

    @property
    def mfu(self) -> float:
        return mfu(self.flops_per_step, self.step.median_s, self.peak_flops)


class StepBench:
    """Training-step throughput and MFU per (precision, compiled, batch), measured once each.

    Every setting gets its own model from ``make_model`` (same seed, so the same weights),
    an AdamW optimizer and a step from :func:`make_train_step`; a compiled setting wraps
    the model in ``torch.compile`` (compiled once per precision; a new batch size may
    recompile). Results are cached, so a widget can revisit a setting instantly.

    Example::

        bench = StepBench.gpt2(hw.cached_limits(), seq_len=64, n_embd=64)
        p = bench.measure("bf16", compiled=False, batch=8)
        print(p.tokens_per_s, p.mfu)
    """

    def __init__(self, make_model: Callable[[], nn.Module], make_batch: Callable[[int], Any],
                 loss_fn: Callable[[nn.Module, Any], torch.Tensor],
                 flops_per_step: Callable[[int], int], tokens_per_sample: int,
                 limits: MachineLimits, warmup: int = 2, repeat: int = 5,
                 compile_backend: str = "inductor", lr: float = 1e-3,
                 device: torch.device | str | None = None) -> None:
        """Args:
            make_model: builds the (seeded) model on the target device.
            make_batch: ``make_batch(b)`` returns one batch of ``b`` samples.
            loss_fn: ``loss_fn(model, batch)`` returns the loss.
            flops_per_step: ``flops_per_step(b)`` model FLOPs of a step at batch ``b``.
            tokens_per_sample: tokens (or samples) one sample counts as, for throughput.
            limits: measured ceilings (:func:`perfkit.hw.cached_limits`).
            warmup, repeat: untimed and timed steps per setting.
            compile_backend: ``torch.compile`` backend (``"eager"`` only traces: for tests).
            lr: AdamW learning rate.
            device: where the steps run (for timing); ``None`` means CUDA if present.

        Raises:
            TypeError: if a ``make_*``/``*_fn`` argument is not callable.
        """
        for name, fn in (("make_model", make_model), ("make_batch", make_batch),
                         ("loss_fn", loss_fn), ("flops_per_step", flops_per_step)):
            if not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        self.make_model, self.make_batch, self.loss_fn = make_model, make_batch, loss_fn
        self.flops_per_step, self.tokens_per_sample = flops_per_step, tokens_per_sample
        self.limits, self.warmup, self.repeat, self.lr = limits, warmup, repeat, lr
        self.compile_backend, self.device = compile_backend, resolve_device(device)
        self._steps: dict[tuple[str, bool], Callable[[Any], torch.Tensor]] = {}
        self._batches: dict[int, Any] = {}
        self._points: dict[tuple[str, bool, int], ThroughputPoint] = {}

    @classmethod
    def gpt2(cls, limits: MachineLimits, seq_len: int = 64, vocab_size: int = 1024,
             n_embd: int = 64, n_layer: int = 2, n_head: int = 2,
             device: torch.device | str | None = None, **kwargs: Any) -> StepBench:
        """A bench over :func:`perfkit.models.tiny_gpt2` on random token batches (speed
        does not depend on the token values). ``kwargs`` go to the constructor."""
        from perfkit.models import tiny_gpt2

        dev = resolve_device(device)

        def make_model() -> nn.Module:
            torch.manual_seed(0)
            return tiny_gpt2(vocab_size, seq_len, n_embd, n_layer, n_head).to(dev)

        shape = gpt2_shape(make_model(), seq_len)
        gen = torch.Generator().manual_seed(0)
        return cls(make_model,
                   lambda b: torch.randint(0, vocab_size, (b, seq_len), generator=gen).to(dev),
                   lambda m, x: m(input_ids=x, labels=x).loss, shape.train_flops, seq_len,
                   limits, device=dev, **kwargs)

    @property
    def points(self) -> list[ThroughputPoint]:
        """Every setting measured so far, in measurement order."""
        return list(self._points.values())

    def measure(self, precision: str, compiled: bool, batch: int) -> ThroughputPoint:
        """The setting's :class:`ThroughputPoint`, measured on first request, then cached.

        Raises:
            ValueError: for an unknown precision or a batch below 1.
        """
        return self.measure_all([(precision, compiled, batch)])[0]

    def measure_all(self, settings: Sequence[tuple[str, bool, int]]) -> list[ThroughputPoint]:
        """Measure the uncached ``(precision, compiled, batch)`` settings *interleaved*.

        Their steps take turns (:func:`perfkit.timing.interleaved`), so a burst of load on a
        shared machine slows all of them alike and their ratios stay fair.

        Raises:
            ValueError: for an unknown precision or a batch below 1.
        """
        keys = []
        for precision, compiled, batch in settings:
            precision_dtype(precision)
            keys.append((precision, bool(compiled), _positive_int("batch", batch)))
        todo = list(dict.fromkeys(k for k in keys if k not in self._points))
        calls, firsts = [], []
        for precision, compiled, batch in todo:
            if (precision, compiled) not in self._steps:
                model = self.make_model()
                opt = torch.optim.AdamW(model.parameters(), lr=self.lr)
                run = torch.compile(model, backend=self.compile_backend) if compiled else model
                self._steps[precision, compiled] = make_train_step(
                    model, opt, lambda _m, b, run=run: self.loss_fn(run, b), precision)
            if batch not in self._batches:
                self._batches[batch] = self.make_batch(batch)
            calls.append(lambda s=self._steps[precision, compiled], x=self._batches[batch]: s(x))
            with Timer(self.device) as first:  # includes compiling for a compiled setting
                calls[-1]()
            firsts.append(first.elapsed_s)
        if todo:
            times = interleaved(calls, warmup=max(self.warmup - 1, 0), repeat=self.repeat,
                                device=self.device)
            for (precision, compiled, batch), m, first_s in zip(todo, times, firsts, strict=True):
                self._points[precision, compiled, batch] = ThroughputPoint(
                    precision, compiled, batch, m, first_s, batch * self.tokens_per_sample,
                    self.flops_per_step(batch), self.limits.peak_flops(precision_dtype(precision)))
        return [self._points[k] for k in keys]
