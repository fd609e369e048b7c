"""Precision and attention advice under the microscope (course module 09).

Mixed precision's speed (timed in alternation against fp32, with Amdahl's model from the
machine's ceilings, and from the ops autocast changes timed alone at the step's own shapes:
:mod:`perfkit.compute.autocast_parts`) and memory; what fp16 and bf16 flush to zero in a real backward and how
many steps a dynamic ``GradScaler`` skips from a start scale; what
``nn.MultiheadAttention(kdim=...)`` keeps for backward. Records only; the verdicts are the
notebook's.

Usage::

    amp = time_precision_step(batch=8, seq=64, repeat=9, parts=True)
    print(amp.speedup(), amp.amdahl(cached_limits()), amp.parts.predicted())
    print(gradient_flush(batch=4, seq=64).lost)      # {"fp16": ..., "bf16": 0}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from perfkit import stats, timing
from perfkit._checks import check_int, check_real, check_type
from perfkit.compute.autocast_parts import AutocastParts, time_autocast_parts
from perfkit.compute.flops import gpt2_shape, make_train_step, mfu
from perfkit.compute.kernels import activation_bytes, attention_matrix_bytes
from perfkit.hw import MachineLimits
from perfkit.models import tiny_gpt2
from perfkit.timing import Measurement

__all__ = ["AttentionKeep", "AutocastMemory", "GradientFlush", "PrecisionTiming", "autocast_activation_ratio",
           "autocast_memory",
           "gradient_flush", "kdim_attention_check", "predicted_skips", "scaler_first_update",
           "time_precision_step"]

VOCAB = 1024
FP16 = torch.finfo(torch.float16)


def _gpt(seq: int, model_kw: dict | None, device: torch.device | None = None) -> nn.Module:
    """A seeded tiny GPT-2 of ``block_size=seq``; refuses a bad ``seq`` or ``model_kw`` by name."""
    check_int("seq", seq, 1)
    check_type("model_kw", model_kw, dict, optional=True)
    torch.manual_seed(0)
    return tiny_gpt2(block_size=seq, **(model_kw or {})).to(device or "cpu")


# --- 8: mixed precision's speed and memory --------------------------------------------------


@dataclass(frozen=True)
class PrecisionTiming:
    """AdamW steps of a tiny GPT-2 in fp32 and in ``precision``, timed in alternation; with
    ``parts``, the ops autocast changes, timed alone in the same rounds."""

    precision: str
    fp32: Measurement
    mixed: Measurement
    flops: float  # model FLOPs of one training step
    parts: AutocastParts | None = None
    threads: int | None = None  # intra-op threads the steps ran on (None: all cores)

    def speedup(self) -> stats.Estimate:
        """fp32 time over mixed-precision time."""
        return stats.median_ratio(self.fp32.times_s, self.mixed.times_s)

    def amdahl(self, limits: MachineLimits) -> tuple[float, float, float, float]:
        """``(f, f_raw, r, predicted)``: the matmul share ``f`` of the fp32 step at the fp32 ceiling
        (capped at 1; ``f_raw`` above 1 says the cached ceiling is too low), the ratio ``r`` of the
        bf16 and fp32 ceilings, and Amdahl's speedup ``1 / ((1 - f) + f / r)``; every ceiling at
        the thread count the steps ran on."""
        f_raw = mfu(self.flops, self.fp32.median_s, limits, "float32", threads=self.threads)
        f = min(1.0, f_raw)
        r = (limits.peak_flops("bfloat16", threads=self.threads)
             / limits.peak_flops("float32", threads=self.threads))
        return f, f_raw, r, 1 / ((1 - f) + f / r)


def sweep_ceiling_ratio(limits: MachineLimits, threads: int) -> float | None:
    """The bf16 over fp32 ratio of notebook 00's sweep points alone (square and course shapes, the
    best point of each dtype on ``threads`` threads), beside :meth:`PrecisionTiming.amdahl`'s ratio
    of the two ceilings, which later work may have raised; ``None`` where a dtype has no point.

    Raises:
        TypeError, ValueError: for limits that are not MachineLimits, or ``threads`` not an int >= 1.
    """
    check_type("limits", limits, MachineLimits)
    check_int("threads", threads, 1)
    pts = (*limits.matmul_points, *limits.shape_points)
    best = {dt: max((p.best_flops_per_s for p in pts if p.dtype == dt and p.threads == threads), default=0.0)
            for dt in ("float32", "bfloat16")}
    return best["bfloat16"] / best["float32"] if all(best.values()) else None


def time_precision_step(batch: int = 8, seq: int = 64, model_kw: dict | None = None, repeat: int = 9,
                        precision: str = "bf16", device: torch.device | str | None = None,
                        parts: bool = False) -> PrecisionTiming:
    """Time a seeded tiny GPT-2's AdamW step in fp32 and in ``precision`` (``"bf16"``, or
    ``"fp16"`` on CUDA), interleaved in balanced orders (whole cycles: ``repeat`` rounded up,
    :func:`perfkit.timing.interleaved_balanced`); with ``parts``, also the ops autocast changes, replayed
    alone in fp32 and in ``precision`` in the same rounds
    (:func:`perfkit.compute.autocast_parts.time_autocast_parts`).

    Raises:
        TypeError: for ``parts`` that is not a bool.
        ValueError: for sizes that are not ints >= 1, or a precision ``make_train_step`` refuses.
    """
    check_type("parts", parts, bool)
    for name, v in (("batch", batch), ("seq", seq), ("repeat", repeat)):
        check_int(name, v, 1)
    dev = timing.resolve_device(device)

    def step(p: str) -> Callable[[], object]:
        m = _gpt(seq, model_kw, dev)
        ids = torch.randint(0, VOCAB, (batch, seq), device=dev)  # (B, T)
        run = make_train_step(m, torch.optim.AdamW(m.parameters(), lr=1e-3),
                              lambda mm, b: mm(input_ids=b, labels=b).loss, p)
        return lambda: run(ids)

    flops = gpt2_shape(_gpt(seq, model_kw), seq).train_flops(batch)
    if parts:
        ap = time_autocast_parts(step("fp32"), step(precision), warmup=1, repeat=repeat, device=dev,
                                 balanced=True)
        return PrecisionTiming(precision, ap.steps.baseline, ap.steps.candidate, flops, ap,
                               torch.get_num_threads())
    fp32, mixed = timing.interleaved_balanced([step("fp32"), step(precision)], warmup=1, repeat=repeat,
                                              device=dev)
    return PrecisionTiming(precision, fp32, mixed, flops, threads=torch.get_num_threads())


@dataclass(frozen=True)
class AutocastMemory:
    """A training step's memory in fp32 and under bf16 autocast (CPU, exact counts): the bytes
    saved for backward in each (``fp32``, ``bf16``; autocast's bf16 weight copies included),
    and the model states both keep, ``params`` x 16 bytes (fp32 weights, gradients and
    AdamW's two moments: autocast changes none of them)."""

    fp32: int
    bf16: int
    params: int

    @property
    def state_bytes(self) -> int:
        """Model states in both precisions: fp32 weights, gradients and AdamW's two moments."""
        return 16 * self.params

    @property
    def activation_ratio(self) -> float:
        """Saved activations, bf16 over fp32."""
        return self.bf16 / self.fp32

    @property
    def step_ratio(self) -> float:
        """The step's memory (model states + saved activations), bf16 over fp32."""
        return (self.state_bytes + self.bf16) / (self.state_bytes + self.fp32)


def autocast_memory(batch: int = 8, seq: int = 64, model_kw: dict | None = None) -> AutocastMemory:
    """Count a tiny GPT-2's bytes saved for backward in fp32 and under bf16 autocast, and its
    parameters.

    Raises:
        ValueError, TypeError: for sizes that are not ints >= 1, or a ``model_kw`` not a dict.
    """
    check_int("batch", batch, 1)
    m = _gpt(seq, model_kw)
    ids = torch.randint(0, VOCAB, (batch, seq))
    fp32 = activation_bytes(lambda: m(input_ids=ids, labels=ids).loss, m)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = activation_bytes(lambda: m(input_ids=ids, labels=ids).loss, m)
    return AutocastMemory(fp32, bf16, sum(p.numel() for p in m.parameters()))


def autocast_activation_ratio(batch: int = 8, seq: int = 64, model_kw: dict | None = None) -> float:
    """Bytes saved for backward under bf16 autocast over those in fp32 (CPU, exact counts)."""
    return autocast_memory(batch, seq, model_kw).activation_ratio


def ceiling_terms_text(f_c: float, r_c: float, f_s: float, r_s: float, tol: float = 0.25) -> str:
    """Amdahl's terms from the ceilings (``f_c``, ``r_c``) against those measured at the step's
    shapes (``f_s``, ``r_s``), and whether the ceilings' prediction agrees with the shapes' only
    because its errors cancel, computed: a term is off where the two differ by more than ``tol``
    (either way); the predictions, ``1 / ((1 - f) + f / r)``, agree where within ``tol``.

    Raises:
        ValueError: for an ``f`` outside (0, 1], an ``r`` or ``tol`` that is not a finite number > 0.
    """
    for name, v in (("f_c", f_c), ("f_s", f_s)):
        if not 0 < v <= 1:
            raise ValueError(f"{name} must be a share in (0, 1], got {v!r}")
    for name, v in (("r_c", r_c), ("r_s", r_s), ("tol", tol)):
        if not 0 < v < math.inf:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    pred_c, pred_s = 1 / ((1 - f_c) + f_c / r_c), 1 / ((1 - f_s) + f_s / r_s)
    off = [n for n, k in (("f", f_c / f_s), ("r", r_c / r_s)) if not 1 / (1 + tol) <= k <= 1 + tol]
    head = (f"The ceilings' terms against the step's shapes': f {f_c:.1%} against {f_s:.1%} "
            f"({f_c / f_s:.2f}x), r {r_c:.3g} against {r_s:.3g} ({r_c / r_s:.2f}x)")
    agree = 1 / (1 + tol) <= pred_c / pred_s <= 1 + tol
    if not off:
        return head + f": each within {tol:.0%}, and the predictions, {pred_c:.3g}x and {pred_s:.3g}x, too."
    terms = " and ".join(off) + (" are" if len(off) > 1 else " is")
    if not agree:
        return (head + f": {terms} off by more than {tol:.0%}, and so is the ceilings' prediction, "
                f"{pred_c:.3g}x, {pred_c / pred_s:.2f}x the shapes' {pred_s:.3g}x.")
    return (head + f": {terms} off by more than {tol:.0%}, yet the predictions, {pred_c:.3g}x and "
            f"{pred_s:.3g}x, lie within {tol:.0%} of each other" + (
                f": the errors cancel (the slowed part's weight f / r, {f_c / r_c:.3g} against "
                f"{f_s / r_s:.3g}), so the ceilings' agreement is that accident, not a model of this step"
                if len(off) > 1 else f": the agreement does not test {off[0]}") + ".")


# --- 19: loss scaling ------------------------------------------------------------------------


@dataclass(frozen=True)
class GradientFlush:
    """One batch's gradients of a tiny GPT-2, fp32 against fp16 and bf16 autocast, value by value."""

    kept: int                 # nonzero values in fp32
    max_abs: float            # the largest |gradient| in fp32
    lost: dict[str, int]      # "fp16"/"bf16" -> values fp32 keeps that are 0 there, unscaled
    subnormal: float          # share of the kept values below fp16's smallest normal
    flush_at: Callable[[str, float], int]  # (dtype name, loss scale) -> values flushed at that scale
    below_normal_at: Callable[[float], int]  # loss scale -> kept values below fp16's smallest normal, scaled

    def kept_by_scale(self, dtype: str, scale: float) -> int:
        """Values a loss scale keeps from flushing: lost unscaled minus lost at ``scale``."""
        return self.lost[dtype] - self.flush_at(dtype, scale)

    def lifted_by_scale(self, scale: float) -> int:
        """Values a loss scale lifts out of fp16's subnormal range and zero (where a value keeps
        fewer significant bits, or none): below fp16's smallest normal unscaled, at or above it
        times ``scale``, fp32's gradient standing in for fp16's (as in ``subnormal``).

        Raises:
            TypeError, ValueError: for a ``scale`` that is not a finite number > 0.
        """
        return self.below_normal_at(1.0) - self.below_normal_at(scale)

    def span(self, scale: float) -> tuple[float, float]:
        """fp16's claim measured two ways at ``scale``, as shares of the nonzero values, lowest first:
        the stand-in (:meth:`lifted_by_scale`) and the direct count of the values the fp16 backward
        flushed to zero that the scale kept (:meth:`kept_by_scale`, the bf16 claim's measure). The
        verdict judges the stand-in with this as its range (``assess``'s ``spread``), so one rule
        decides: both past the line holds, the two on either side of it holds partly.

        Raises:
            TypeError, ValueError: for a ``scale`` that is not a finite number > 0.
        """
        lifted, kept = self.lifted_by_scale(scale) / self.kept, self.kept_by_scale("fp16", scale) / self.kept
        return min(lifted, kept), max(lifted, kept)

    def criterion_label(self, scale: float, line: float) -> str:
        """fp16's row and headline label: its two counts at ``scale`` (:meth:`span`), and whether they
        lie on one side of the share ``line`` or on both.

        Raises:
            TypeError, ValueError: for a ``scale`` or ``line`` that is not a finite number > 0.
        """
        check_real("line", line, 0, lo_open=True)
        lifted, kept = self.lifted_by_scale(scale) / self.kept, self.kept_by_scale("fp16", scale) / self.kept
        sides = "one side" if (lifted >= line) == (kept >= line) else "both sides"
        return f"two counts, {lifted:.2%} lifted from subnormal, {kept:.3%} from zero: {sides} of {line:.0%}"

    def criteria(self, scale: float, line: float) -> str:
        """The two counts of fp16's claim at ``scale`` (:meth:`span`) against the share ``line``, and
        what the one rule makes of them: the same status where they lie on one side, holds partly
        (at most) where they lie on both.

        Raises:
            TypeError, ValueError: for a ``scale`` or ``line`` that is not a finite number > 0.
        """
        check_real("line", line, 0, lo_open=True)
        lifted, kept = self.lifted_by_scale(scale) / self.kept, self.kept_by_scale("fp16", scale) / self.kept
        side, one = {True: "at or above", False: "below"}, (lifted >= line) == (kept >= line)
        return (f"Two counts measure it: {lifted:.2%} lifted out of fp16's subnormal range (fp32 gradients "
                f"times the scale: values fp16 keeps with fewer bits, or loses), {side[lifted >= line]} the "
                f"{line:.0%} line; {kept:.3%} kept of the values the fp16 backward itself flushed to zero "
                f"({self.lost['fp16']:,} unscaled), {side[kept >= line]} it. The verdict takes the two as "
                "the figure's range: " + ("they lie on one side of the line." if one else "they lie on both "
                                          "sides: the scale rescues precision, not values from zero."))


def gradient_flush(batch: int = 4, seq: int = 64, model_kw: dict | None = None,
                   device: torch.device | str | None = None) -> GradientFlush:
    """Backward one batch in fp32, then under fp16 and bf16 autocast; count what is flushed to zero.

    Raises:
        ValueError: for sizes that are not ints >= 1.
    """
    check_int("batch", batch, 1)
    dev = timing.resolve_device(device)
    model = _gpt(seq, model_kw, dev)
    ids = torch.randint(0, VOCAB, (batch, seq), device=dev)
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}

    def grads(dtype: torch.dtype | None, scale: float = 1.0) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = model(input_ids=ids, labels=ids).loss
        (loss * scale).backward()  # every gradient is `scale` times larger while it is low precision
        return torch.cat([p.grad.flatten() for p in model.parameters()]).float() / scale

    g32 = grads(None)
    kept = g32 != 0

    def flush_at(dtype: str, scale: float) -> int:
        return int(((grads(dtypes[dtype], check_real("scale", scale, 0, lo_open=True)) == 0) & kept).sum())

    kept_abs = g32.abs()[kept]

    def below_normal_at(scale: float) -> int:
        return int((kept_abs * check_real("scale", scale, 0, lo_open=True) < FP16.smallest_normal).sum())

    n_kept = int(kept.sum())
    return GradientFlush(n_kept, float(g32.abs().max()), {d: flush_at(d, 1.0) for d in dtypes},
                         below_normal_at(1.0) / n_kept, flush_at, below_normal_at)


def predicted_skips(init_scale: float, max_abs_grad: float) -> int:
    """Steps a dynamic ``GradScaler`` skips before its first update: halvings until
    ``init_scale x max|g|`` fits fp16's largest value (65,504)."""
    check_real("init_scale", init_scale, 0, lo_open=True)
    check_real("max_abs_grad", max_abs_grad, 0, lo_open=True)
    return max(0, math.ceil(math.log2(init_scale * max_abs_grad / FP16.max)))


def scaler_first_update(init_scale: float, batch: int = 4, seq: int = 64, model_kw: dict | None = None,
                        max_steps: int = 64, device: torch.device | str | None = None) -> tuple[int, float]:
    """Train with a real ``GradScaler`` under fp16 autocast on one batch until it takes a step:
    ``(steps skipped before it, the scale of that step)``.

    Raises:
        ValueError: for ``init_scale`` not > 0 or sizes that are not ints >= 1.
    """
    check_real("init_scale", init_scale, 0, lo_open=True)
    check_int("max_steps", max_steps, 1)
    check_int("batch", batch, 1)  # before the model is built: a bad size fails at once
    dev = timing.resolve_device(device)
    m = _gpt(seq, model_kw, dev)
    ids = torch.randint(0, VOCAB, (batch, seq), device=dev)  # (B, T)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(dev.type, init_scale=init_scale)
    for k in range(max_steps):
        with torch.autocast(dev.type, dtype=torch.float16):
            loss = m(input_ids=ids, labels=ids).loss
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(opt)   # skipped when a gradient is inf or NaN
        scaler.update()    # and then the scale is halved
        opt.zero_grad(set_to_none=True)
        if scaler.get_scale() >= before:
            return k, before
    return max_steps, scaler.get_scale()


# --- 20: MultiheadAttention(kdim=head_dim) --------------------------------------------------


@dataclass(frozen=True)
class AttentionKeep:
    """Per attention call: the ``T^2`` part of its saved bytes in ``(B, H, T, T)`` fp32 matrices,
    and its saved bytes at ``T``; plus the parameter counts and whether ``kdim`` self-attention ran."""

    matrices: dict[str, float]
    saved: dict[str, int]
    params: dict[str, int]  # "default", "kdim" -> parameters
    self_attention_error: str | None


def kdim_attention_check(embed: int = 64, heads: int = 4, batch: int = 4, seq: int = 128) -> AttentionKeep:
    """Count what ``nn.MultiheadAttention`` with and without ``kdim=head_dim`` (and with
    ``need_weights=False``) and ``F.scaled_dot_product_attention`` keep for backward at ``T`` and
    ``2T``: with ``s(T) = aT + bT^2``, ``(s(2T) - 2 s(T)) / 2 = bT^2`` is the part that grows as ``T^2``.

    Raises:
        ValueError: for sizes that are not ints >= 1, or ``embed`` not a multiple of ``heads``.
    """
    for name, v in (("embed", embed), ("heads", heads), ("batch", batch), ("seq", seq)):
        check_int(name, v, 1)
    if embed % heads:
        raise ValueError(f"embed ({embed}) must be a multiple of heads ({heads})")
    hd = embed // heads
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(embed, heads, batch_first=True)
    mha_kd = nn.MultiheadAttention(embed, heads, batch_first=True, kdim=hd)  # the advice
    try:
        x = torch.randn(batch, seq, embed)
        mha_kd(x, x, x)  # self-attention: the keys have `embed` features, not kdim
        error = None
    except (AssertionError, RuntimeError) as e:
        error = f"{type(e).__name__}: {e}"

    def heads_of(x: torch.Tensor) -> torch.Tensor:  # (B, T, E) -> (B, H, T, hd), a leaf with a gradient
        return x.view(batch, -1, heads, hd).transpose(1, 2).detach().requires_grad_()

    calls = {"MultiheadAttention": (lambda x, k: mha(x, x, x)[0], mha),
             "kdim": (lambda x, k: mha_kd(x, k, x)[0], mha_kd),
             "kdim, need_weights=False": (lambda x, k: mha_kd(x, k, x, need_weights=False)[0], mha_kd),
             "F.scaled_dot_product_attention": (
                 lambda x, k: F.scaled_dot_product_attention(heads_of(x), heads_of(x), heads_of(x)), None)}
    matrices, saved = {}, {}
    for name, (attend, module) in calls.items():
        s = {}
        for t in (seq, 2 * seq):
            x_t, k_t = torch.randn(batch, t, embed), torch.randn(batch, t, hd)  # keys of kdim features
            s[t] = activation_bytes(lambda f=attend, x_t=x_t, k_t=k_t: f(x_t, k_t), module, inputs=[x_t, k_t])
        matrices[name] = (s[2 * seq] - 2 * s[seq]) / 2 / attention_matrix_bytes(batch, heads, seq)
        saved[name] = s[seq]
    params = {n: sum(p.numel() for p in mod.parameters()) for n, mod in (("default", mha), ("kdim", mha_kd))}
    return AttentionKeep(matrices, saved, params, error)
