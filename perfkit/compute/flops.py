"""Model FLOPs of a training step, MFU, mixed precision, and fair speed comparisons.

Model FLOPs follow the PaLM paper (Chowdhery et al., 2022, appendix B) as nanoGPT's
``estimate_mfu`` does: a decoder-only transformer with ``N`` parameters taking part in
matmuls does ``6 N`` FLOPs per trained token (2 in the forward pass, 4 in the backward),
plus ``12 L d T`` per token for the attention scores and their weighted sum (``L`` layers,
width ``d``, sequence length ``T``). MFU is those FLOPs per second over the machine's
measured matmul ceiling (:mod:`perfkit.hw`); the same ratio with the FLOPs the step really ran
(counted by ``FlopCounterMode``, :func:`perfkit.compute.intensity.count_ops`) is HFU, hardware
FLOPs utilisation, which also counts recomputation and skips what autograd never computes.
:func:`make_train_step` builds a step in fp32, bf16 autocast or fp16 with loss scaling
(mixed-precision training, Micikevicius et al., 2018), and :func:`compare` times two steps
interleaved. The rest of the course's module 06 lives beside it: ``torch.compile`` in
:mod:`perfkit.compute.compiling`, bytes and matmul shapes in :mod:`perfkit.compute.kernels`, the
largest batch in :mod:`perfkit.compute.budget`, and the widget's cached step measurements in
:mod:`perfkit.compute.throughput`.

Usage::

    shape = gpt2_shape(model)                       # a transformers GPT-2
    flops = shape.train_flops(batch=8)              # FLOPs of one training step
    print(mfu(flops, step_s=0.05, peak=hw.cached_limits(), dtype="bfloat16"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from perfkit import stats
from perfkit._checks import check_callable, check_choice, check_int, check_real, check_type
from perfkit.hw import MachineLimits
from perfkit.stats import Estimate
from perfkit.timing import Measurement, interleaved

__all__ = [
    "PRECISIONS", "GPTShape", "Speedup", "compare", "counted_flops", "dispatched_calls",
    "gpt2_shape", "gpt_train_flops", "make_train_step", "mfu", "model_over_counted", "precision_dtype",
]

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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
        check_int(name, v, 1)
    return 6 * n_params * tokens + 12 * n_layer * d_model * seq_len * tokens


def model_over_counted(model_flops: float, counted_flops: float, flat_flops: float) -> str:
    """The model's count (``6N + 12 L d T`` a token) over the FLOPs a counter found
    (``FlopCounterMode``, attention on its causal entries only), split by the computation each
    part of the gap comes from: ``flat_flops``, the ``6N`` charge on parameters that do no
    matmul (biases and layer norms, 6 FLOPs per token each), and the rest, attention's masked
    entries, which the formula's full ``T x T`` square counts and a causal kernel skips.

    Returns:
        ``"1.05x the FLOPs counted here: of its 5.4 points, 0.6 are ..."`` (points: hundredths
        of the counted FLOPs); where the counter found more than the formula less
        ``flat_flops``, the words say so instead of crediting attention with a negative share.

    Raises:
        TypeError, ValueError: for counts that are not finite numbers, ``model_flops`` and
            ``counted_flops`` not > 0, or a negative ``flat_flops``.
    """
    check_real("model_flops", model_flops, 0, lo_open=True)
    check_real("counted_flops", counted_flops, 0, lo_open=True)
    check_real("flat_flops", flat_flops, 0)
    gap = (model_flops - counted_flops) / counted_flops * 100  # points: hundredths of the counted FLOPs
    flat = flat_flops / counted_flops * 100  # points
    head = f"{model_flops / counted_flops:.2f}x the FLOPs counted here"
    if gap - flat >= 0:
        return (f"{head}: of its {gap:.1f} points, {flat:.1f} are the 6N charge on the parameters that do no "
                f"matmul (biases, layer norms) and {gap - flat:.1f} attention's masked entries, which the "
                "formula's T x T square counts and the causal kernel skips")
    return (f"{head}: the 6N charge on the parameters that do no matmul (biases, layer norms) is "
            f"{flat:.1f} points, more than the whole gap of {gap:.1f}: the counter found work the formula "
            "does not count")


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

    def __post_init__(self) -> None:
        for k in ("n_params", "n_layer", "d_model", "seq_len"):
            check_int(k, getattr(self, k), 1)

    def train_flops(self, batch: int) -> int:
        """FLOPs of one training step on ``batch`` sequences of ``seq_len`` tokens."""
        return gpt_train_flops(self.n_params, self.n_layer, self.d_model, self.seq_len,
                               check_int("batch", batch, 1) * self.seq_len)


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
        ValueError: if ``seq_len`` is not None or an int >= 1.
    """
    if seq_len is not None:
        check_int("seq_len", seq_len, 1)
    cfg = getattr(model, "config", None)
    if not all(hasattr(cfg, a) for a in ("n_layer", "n_embd", "n_positions")):
        raise TypeError(f"model must be a transformers GPT-2 with a config, got {type(model).__name__}")
    skip = {id(model.transformer.wpe.weight)}
    if model.get_input_embeddings().weight is not model.get_output_embeddings().weight:
        skip.add(id(model.get_input_embeddings().weight))
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    return GPTShape(n, cfg.n_layer, cfg.n_embd,
                    check_int("seq_len", seq_len if seq_len is not None else cfg.n_positions, 1))


def precision_dtype(precision: str) -> str:
    """The dtype name the matmuls of ``precision`` run in: ``"bf16" -> "bfloat16"``.

    Raises:
        ValueError: for a precision other than ``fp32``, ``bf16`` or ``fp16``.
    """
    return PRECISIONS[check_choice("precision", precision, PRECISIONS)]


def _causal_share(s_q: int, s_k: int) -> float:
    """The share of a causal (top-left aligned) ``s_q x s_k`` score matrix left unmasked:
    row ``i`` keeps ``min(i + 1, s_k)`` entries."""
    kept = sum(min(i + 1, s_k) for i in range(s_q))
    return kept / (s_q * s_k)


def _cpu_flash_forward(q, k, v, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kw) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    full = sdpa_flop_count(q, k, v)
    return round(full * _causal_share(q[2], k[2])) if is_causal else full


def _cpu_flash_backward(grad_out, q, k, v, out, lse, dropout_p=0.0, is_causal=False, *args,
                        out_shape=None, **kw) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    full = sdpa_backward_flop_count(grad_out, q, k, v)
    return round(full * _causal_share(q[2], k[2])) if is_causal else full


def cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    """FLOP formulas for the CPU's fused attention kernels, which ``FlopCounterMode`` has none
    for (PyTorch registers the CUDA ones only): the two matmuls of the forward pass and the
    five of the backward pass, as PyTorch's own ``sdpa_flop_count`` counts them, scaled for a
    causal mask to the entries left unmasked (PyTorch's CUDA formulas count the whole square;
    the CPU kernel skips the blocks above the diagonal). For ``FlopCounterMode(custom_mapping=...)``."""
    aten = torch.ops.aten
    out = {}
    for name, fn in (("_scaled_dot_product_flash_attention_for_cpu", _cpu_flash_forward),
                     ("_scaled_dot_product_flash_attention_for_cpu_backward", _cpu_flash_backward)):
        if hasattr(aten, name):
            out[getattr(aten, name)] = fn
    return out


def counted_flops(step: Callable[[], object]) -> int:
    """FLOPs that ``FlopCounterMode`` counts in one call of ``step`` (a training step: forward,
    backward, optimizer): the matmuls that really ran, for an HFU and for
    :func:`perfkit.ceilings.observe`. The CPU's fused attention is counted with
    ``cpu_attention_formulas`` (a causal mask's unmasked entries only); elementwise work
    counts nothing, so this is a lower bound of the arithmetic done.

    Raises:
        TypeError: for a ``step`` that is not callable.
    """
    from torch.utils.flop_counter import FlopCounterMode

    check_callable("step", step)
    with FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas()) as counter:
        step()
    return int(counter.get_total_flops())


def dispatched_calls(fn: Callable[[], object]) -> int:
    """How many operator calls PyTorch dispatches while ``fn`` runs (every ATen op, views and
    in-place ops included), counted with a ``TorchDispatchMode``: the count a model of per-call
    fixed costs charges, each call alike.

    Raises:
        TypeError: for an ``fn`` that is not callable.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    check_callable("fn", fn)

    class _Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.calls += 1
            return func(*args, **(kwargs or {}))

    with _Count() as counter:
        fn()
    return counter.calls


def mfu(flops_per_step: float, step_s: float, peak: float | MachineLimits,
        dtype: str = "float32", threads: int | None = None) -> float:
    """Model FLOPs utilisation: ``flops_per_step / step_s`` over the peak FLOP/s (a fraction).

    With model FLOPs (``6 N`` per token plus attention: :meth:`GPTShape.train_flops`) this is
    MFU; with FLOPs counted from what the step ran it is HFU, and a notebook labels it so. Only
    an HFU's rate may raise a ceiling (:func:`perfkit.ceilings.observe`): a formula's FLOPs can
    count work that never ran.

    Args:
        flops_per_step: FLOPs of one step: the model's (MFU) or the counted ones (HFU).
        step_s: measured seconds per step.
        peak: a FLOP/s ceiling, or measured :class:`perfkit.hw.MachineLimits`.
        dtype: with ``MachineLimits``, the dtype whose ceiling applies (the one the matmuls
            run in: bf16 autocast is measured against the bf16 ceiling).
        threads: with ``MachineLimits``, the intra-op threads the step ran on (``None``: all
            cores): their own ceiling (:meth:`perfkit.hw.MachineLimits.peak_flops`).

    Raises:
        TypeError, ValueError: if ``flops_per_step``, ``step_s`` or the peak is not a finite
            number > 0 (or ``peak`` not a number or ``MachineLimits``), or ``threads`` is below 1.
    """
    check_real("flops_per_step", flops_per_step, 0, lo_open=True)
    check_real("step_s", step_s, 0, lo_open=True)
    ceiling = (peak.peak_flops(dtype, threads) if isinstance(peak, MachineLimits)
               else check_real("peak", peak, 0, lo_open=True))
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
        TypeError: for a ``model`` that is not a module, an ``optimizer`` without ``step``
            and ``zero_grad``, or a ``loss_fn`` that is not callable.
        ValueError: for an unknown precision, a model without parameters, or ``fp16``
            without CUDA.
    """
    precision_dtype(precision)
    check_type("model", model, nn.Module)
    if not all(callable(getattr(optimizer, a, None)) for a in ("zero_grad", "step")):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    check_callable("loss_fn", loss_fn)
    if (first := next(model.parameters(), None)) is None:
        raise ValueError("model must have parameters to train")
    device = first.device
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
    """Two callables timed in alternation; ``ratio`` = the median of the back-to-back pairs'
    baseline / candidate ratios.

    ``estimate`` is that ratio with its order-statistic interval (at least 90 %) over the pairs
    (:func:`perfkit.stats.median_ratio`; none below 5 pairs): the uncertainty a verdict is
    judged on. ``low`` and ``high`` are its edges. ``pair_ratios`` are the single pairs'
    ratios, whose spread is how much one pair varies, not how uncertain the median is.
    """

    baseline: Measurement
    candidate: Measurement

    def __post_init__(self) -> None:
        check_type("baseline", self.baseline, Measurement)
        check_type("candidate", self.candidate, Measurement)

    @property
    def ratio(self) -> float:
        return self.estimate.value

    @property
    def pair_ratios(self) -> tuple[float, ...]:
        return tuple(b / c for b, c in zip(self.baseline.times_s, self.candidate.times_s, strict=True))

    @property
    def estimate(self) -> Estimate:
        """``ratio`` with its interval over the pairs (a :class:`perfkit.stats.Estimate`)."""
        return stats.median_ratio(self.baseline.times_s, self.candidate.times_s)

    @property
    def pair_median(self) -> float:
        """Median of the back-to-back pair ratios: robust to load that drifts during the run."""
        return stats.median(self.pair_ratios)

    @property
    def low(self) -> float:
        return self.estimate.low

    @property
    def high(self) -> float:
        return self.estimate.high

    def __str__(self) -> str:
        return (f"{self.estimate.text('x')}, {self.baseline.median_s * 1e3:.1f} -> "
                f"{self.candidate.median_s * 1e3:.1f} ms")


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
        TypeError: if ``baseline`` or ``candidate`` is not callable.
        ValueError: for ``threads`` below 1 (and bad ``warmup``/``repeat``).
    """
    check_callable("baseline", baseline)
    check_callable("candidate", candidate)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(check_int("threads", threads, 1))
    try:
        base, cand = interleaved([baseline, candidate], warmup=warmup, repeat=repeat,
                                 device=device)
    finally:
        torch.set_num_threads(before)
    return Speedup(base, cand)
