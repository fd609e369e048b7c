"""What attention costs against sequence length and tile size: saved bytes, time, a model.

Saved-for-backward bytes are counted exactly (:class:`perfkit.memory.SavedTensorMeter`); the
forward + backward of perfkit's FlashAttention (PyTorch, per tile size), eager attention and
SDPA are timed interleaved, with a control: one fixed matmul (:data:`CONTROL_SIZE`), the same
call at every length, whose change between lengths is the machine's speed, not attention's.
:class:`TileCostModel` explains the tiled times with two terms:
matmul FLOPs at a fitted rate, plus a fixed cost per tile (Python and kernel launches, or on a
GPU the tile's trip through shared memory), so small tiles pay overhead and large ones pay
nothing more here; eager attention is its FLOPs at its rate at the longest length fitted.
:func:`eager_bytes_per_score` counts what eager attention keeps per score in fp32 and in bf16
(where softmax runs decides it), and :func:`call_mix` splits a function's operator calls into
views (metadata only) and kernels, the calls a per-call cost model charges.

Usage::

    pts = time_attention([512, 1024], tiles=[32, 128], repeat=3)
    model = TileCostModel.fit(pts)
    print(model.flash_s(4096, 64, batch=1, heads=4, head_dim=32), saved_bytes_sweep([256, 512]))
    q = torch.randn(1, 1, 128, 16)
    print(eager_bytes_per_score(), call_mix(lambda: flash_attention(q, q, q)).views)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from perfkit._checks import check_int, check_items, check_type
from perfkit.compute._call_mix import CallMix, call_mix
from perfkit.compute.flash import check_tile, eager_attention, flash_attention, flash_flops
from perfkit.estimate import Estimate
from perfkit.memory.saved_tensors import SavedTensorMeter
from perfkit.timing import interleaved
from perfkit.units import si, si_interval

__all__ = ["IMPLS", "SOFTMAX_PRECISIONS", "AttentionTiming", "CallMix", "TileCostModel", "call_mix",
           "eager_bytes_per_score", "same_call_note", "saved_bytes_sweep", "tile_band", "tile_miss_note",
           "time_attention"]

IMPLS = ("flash", "eager", "sdpa")
CONTROL, CONTROL_SIZE = "control", 512   # the control's impl name; its matmul is n x n by n x n, fp32
SOFTMAX_PRECISIONS = ("fp32", "bf16, softmax in fp32", "bf16, softmax in bf16")


def _qkv(batch: int, heads: int, seq_len: int, head_dim: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq_len, head_dim, generator=g).requires_grad_()
            for _ in range(3)]


def saved_bytes_sweep(seq_lens: Sequence[int], batch: int = 1, heads: int = 4,
                      head_dim: int = 32, causal: bool = False) -> dict[str, list[int]]:
    """Exact bytes eager attention and FlashAttention save for backward, per length (fp32;
    the inputs ``q, k, v`` not counted).

    Raises:
        ValueError, TypeError: for an empty ``seq_lens`` or a non-positive size.
    """
    lens = [check_int("seq_lens[]", t, 1) for t in check_items("seq_lens", seq_lens)]
    for name, n in (("batch", batch), ("heads", heads), ("head_dim", head_dim)):
        check_int(name, n, 1)
    check_type("causal", causal, bool)
    out: dict[str, list[int]] = {"eager": [], "flash": []}
    for t in lens:
        q, k, v = _qkv(batch, heads, t, head_dim)
        for name, fn in (("eager", eager_attention), ("flash", flash_attention)):
            with SavedTensorMeter(inputs=[q, k, v]) as meter:
                fn(q, k, v, causal)
            out[name].append(meter.report().activation_bytes)
    return out


def eager_bytes_per_score(seq_len: int = 64, heads: int = 2, head_dim: int = 16) -> dict[str, float]:
    """Bytes eager attention keeps for backward per score (per value of its ``B H T x T``
    matrix), counted by :class:`SavedTensorMeter` at one small length (``q, k, v`` not counted),
    for each of :data:`SOFTMAX_PRECISIONS`:

    - ``"fp32"``: the probabilities ``P`` in fp32, 4 bytes;
    - ``"bf16, softmax in fp32"``: ``q, k, v`` in bf16 and softmax run in fp32, as
      ``torch.autocast`` runs it on CUDA (softmax is on CUDA's autocast-to-float32 list) and as
      ``softmax(s, dtype=torch.float32).to(q.dtype)`` (Hugging Face's eager attention) writes it:
      softmax's backward keeps its fp32 output and ``P @ V`` its bf16 copy, 4 + 2 = 6 bytes;
    - ``"bf16, softmax in bf16"``: everything bf16, as CPU autocast runs it (its float32 list
      does not hold softmax) or a model cast to bf16: one bf16 ``P`` that softmax's backward and
      the matmul's share, 2 bytes.

    Raises:
        ValueError, TypeError: for a non-positive size.
    """
    for name, n in (("seq_len", seq_len), ("heads", heads), ("head_dim", head_dim)):
        check_int(name, n, 1)
    out = {}
    for name in SOFTMAX_PRECISIONS:
        dt = torch.float32 if name == "fp32" else torch.bfloat16
        q, k, v = (x.detach().to(dt).requires_grad_() for x in _qkv(1, heads, seq_len, head_dim))
        with SavedTensorMeter(inputs=[q, k, v]) as meter:
            s = q @ k.transpose(-2, -1) * head_dim ** -0.5             # (1, H, T, T)
            p = (torch.softmax(s, -1, dtype=torch.float32).to(dt) if name == "bf16, softmax in fp32"
                 else torch.softmax(s, -1))
            p @ v
        out[name] = meter.report().activation_bytes / (heads * seq_len ** 2)
    return out


@dataclass(frozen=True)
class AttentionTiming:
    """One implementation's forward + backward at one length (``tile`` 0 unless tiled).

    Attributes:
        impl: ``"flash"``, ``"eager"``, ``"sdpa"`` or ``"control"`` (the fixed matmul, the
            same call at every ``seq_len``: its ``flops`` are the matmul's, ``2 n³``).
        seq_len, tile: the shape timed.
        times_s: each round's seconds, in the interleaved order.
        flops: matmul FLOPs of forward + backward (recomputation included for ``flash``).
        tiles: tiles the tiled forward computes (0 for the others).
    """

    impl: str
    seq_len: int
    tile: int
    times_s: tuple[float, ...]
    flops: int
    tiles: int

    @property
    def median_s(self) -> float:
        """The median round, seconds."""
        return statistics.median(self.times_s)


def _step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, name: str,
          tile: int, causal: bool) -> None:
    """One forward + backward of ``name`` (the control: its fixed matmul, forward only)."""
    if name == CONTROL:
        torch.mm(q, k)
        return
    if name == "flash":
        o = flash_attention(q, k, v, causal, tile)
    elif name == "eager":
        o = eager_attention(q, k, v, causal)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(g)


def time_attention(seq_lens: Sequence[int], tiles: Sequence[int] = (64,), batch: int = 1,
                   heads: int = 4, head_dim: int = 32, causal: bool = False, repeat: int = 3,
                   impls: Sequence[str] = IMPLS) -> list[AttentionTiming]:
    """Time forward + backward of each implementation (FlashAttention once per tile size),
    interleaved at each length, after one warm-up round; with them, in the same rounds, the
    control (impl ``"control"``, last at each length): one ``CONTROL_SIZE``-square fp32 matmul,
    the same call at every length, so a change in its time between lengths is the machine's
    speed moving (load, clocks), which no attention model holds.

    Raises:
        ValueError, TypeError: for empty lists, bad sizes, tiles that are not powers of two,
            or an unknown implementation.
    """
    lens = [check_int("seq_lens[]", t, 1) for t in check_items("seq_lens", seq_lens)]
    tile_list = [check_tile(t) for t in check_items("tiles", tiles)]
    names = check_items("impls", impls)
    for name in names:
        if name not in IMPLS:
            raise ValueError(f"impls must hold names from {IMPLS}, got {name!r}")
    for name, n in (("batch", batch), ("heads", heads), ("head_dim", head_dim), ("repeat", repeat)):
        check_int(name, n, 1)
    check_type("causal", causal, bool)
    out = []
    for t in lens:
        q, k, v = _qkv(batch, heads, t, head_dim)
        g = torch.randn(batch, heads, t, head_dim)
        runs: list[tuple[str, int]] = [("flash", tile) for tile in tile_list if "flash" in names]
        runs += [(n, 0) for n in names if n != "flash"]
        a, b = (torch.randn(CONTROL_SIZE, CONTROL_SIZE, generator=torch.Generator().manual_seed(i))
                for i in (1, 2))
        ms = interleaved([lambda r=r, x=(q, k, v, g): _step(*x, *r, causal) for r in runs]
                         + [lambda x=(a, b, a, a): _step(*x, CONTROL, 0, causal)], warmup=1, repeat=repeat)
        for (name, tile), m in zip(runs, ms):
            f = flash_flops(batch, heads, t, head_dim, causal, tile or 64)
            flops = f.forward + f.backward if name == "flash" else f.eager_forward + f.eager_backward
            out.append(AttentionTiming(name, t, tile, m.times_s, flops,
                                       f.tiles if name == "flash" else 0))
        out.append(AttentionTiming(CONTROL, t, 0, ms[-1].times_s, 2 * CONTROL_SIZE ** 3, 0))
    return out


@dataclass(frozen=True)
class TileCostModel:
    """``t_flash = FLOPs / flop_rate + tiles x per_tile_s`` (forward + backward: each tile is
    visited once in each pass, so the count is doubled); ``t_eager = FLOPs / eager_rate``.

    Attributes:
        flop_rate: the FLOP term's rate, a fitted parameter: not a rate every call stays under.
        per_tile_s: seconds each tile visit costs beyond its FLOPs.
        eager_rate: eager attention's FLOP/s at the longest length fitted (0 where it was not
            timed). Beyond that length ``eager_s`` is an estimate, not a bound either way: the
            rate falls where the ``T x T`` scores leave a cache and can rise again between
            such steps (a measured rate above the fitted one puts the time below the model's).
    """

    flop_rate: float
    per_tile_s: float
    eager_rate: float

    @classmethod
    def fit(cls, points: Sequence[AttentionTiming]) -> TileCostModel:
        """Least squares over the ``flash`` points (medians), both terms kept non-negative.

        Raises:
            ValueError: with fewer than 2 distinct tiled shapes to fit.
            TypeError: for points that are not :class:`AttentionTiming`.
        """
        pts = [check_type(f"points[{i}]", p, AttentionTiming)
               for i, p in enumerate(check_items("points", points))]
        flash = [p for p in pts if p.impl == "flash"]
        if len({(p.seq_len, p.tile) for p in flash}) < 2:
            raise ValueError("points must hold flash timings at 2 or more (seq_len, tile) shapes")
        import numpy as np

        a = np.array([[p.flops, 2 * p.tiles] for p in flash], dtype=np.float64)
        y = np.array([p.median_s for p in flash])
        w = 1 / y  # relative errors: the long runs must not drown the short ones
        (inv_rate, per_tile), *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
        if inv_rate <= 0 or per_tile < 0:  # one term explains it all: keep the FLOP term
            inv_rate, per_tile = float(np.median(y / a[:, 0])), 0.0
        # eager's rate falls where its T x T scores leave a cache, so a median over shorter
        # lengths would run fast beyond them: keep the rate at the longest length fitted
        eager = max((p for p in pts if p.impl == "eager"), key=lambda p: p.seq_len, default=None)
        return cls(1 / float(inv_rate), float(per_tile),
                   eager.flops / eager.median_s if eager else 0.0)

    def flash_s(self, seq_len: int, tile: int, batch: int = 1, heads: int = 4,
                head_dim: int = 32, causal: bool = False) -> float:
        """Predicted forward + backward seconds of the tiled attention."""
        f = flash_flops(batch, heads, seq_len, head_dim, causal, tile)
        return (f.forward + f.backward) / self.flop_rate + 2 * f.tiles * self.per_tile_s

    def flash_forward_s(self, seq_len: int, tile: int, batch: int = 1, heads: int = 4,
                        head_dim: int = 32, causal: bool = False) -> float:
        """Predicted forward seconds of the tiled attention: its FLOPs and one visit per tile,
        each visit charged as in backward (so ``flash_s / flash_forward_s`` lies between 2,
        all visits, and 3.5, all FLOPs)."""
        f = flash_flops(batch, heads, seq_len, head_dim, causal, tile)
        return f.forward / self.flop_rate + f.tiles * self.per_tile_s

    def eager_s(self, seq_len: int, batch: int = 1, heads: int = 4, head_dim: int = 32) -> float:
        """Predicted forward + backward seconds of eager attention (nan if never timed)."""
        f = flash_flops(batch, heads, seq_len, head_dim)
        return (f.eager_forward + f.eager_backward) / self.eager_rate if self.eager_rate else float("nan")


def same_call_note(sweep: Estimate, other: Estimate, call: str, where: str = "section 3") -> str:
    """For a verdict that rests on a sweep: where the sweep's timing of ``call`` (``sweep``)
    and another section's timing of the same call (``other``) have intervals that do not
    overlap, a sentence saying so, with the ratio of their medians (the rounds ran at another
    speed, which the outcome does not mark); ``""`` where they overlap or either has no
    interval.

    Raises:
        TypeError: for ``sweep`` or ``other`` not an :class:`~perfkit.estimate.Estimate`, or
            ``call`` or ``where`` not a string.
    """
    a, b = check_type("sweep", sweep, Estimate), check_type("other", other, Estimate)
    check_type("call", call, str)
    check_type("where", where, str)
    if not (a.has_interval and b.has_interval) or (a.low <= b.high and b.low <= a.high):
        return ""
    ratio, pace = max(a.value, b.value) / min(a.value, b.value), "slower" if a.value > b.value else "faster"
    return (f" This sweep ran {call} {ratio:.2f}x {pace} than {where} did, the two intervals apart: the fit "
            f"and this prediction rest on rounds that ran at another speed than {where}'s, which the outcome "
            "does not mark.")


def _fitted_misses(points: Sequence[AttentionTiming], model: TileCostModel, batch: int, heads: int,
                   head_dim: int) -> list[tuple[AttentionTiming, float]]:
    """Each flash timing at a fitted length (all but the longest) with its miss against ``model``,
    largest miss (in size) first."""
    flash = [p for p in points if p.impl == "flash"]
    longest = max((p.seq_len for p in flash), default=0)
    return sorted(((p, p.median_s / model.flash_s(p.seq_len, p.tile, batch, heads, head_dim) - 1)
                   for p in flash if p.seq_len < longest), key=lambda pm: -abs(pm[1]))


def tile_band(points: Sequence[AttentionTiming], model: TileCostModel, tile: int, batch: int = 1,
              heads: int = 4, head_dim: int = 32) -> float:
    """The relative band for predicting ``tile``'s time at the longest length: that tile's own
    largest miss (in size) against ``model`` at the fitted lengths (every length but the
    longest), the error the model shows for this prediction on the data it was fitted on. Other
    tile sizes' misses do not enter it.

    Raises:
        TypeError: for points that are not :class:`AttentionTiming`.
        ValueError: if ``tile`` has no flash timing at a fitted length.
    """
    pts, tile = [check_type(f"points[{i}]", p, AttentionTiming)
                 for i, p in enumerate(check_items("points", points))], check_int("tile", tile, 1)
    own = [m for p, m in _fitted_misses(pts, model, batch, heads, head_dim) if p.tile == tile]
    if not own:
        raise ValueError(f"tile {tile} needs a flash timing at a fitted length (shorter than the longest)")
    return abs(own[0])


def band_note(points: Sequence[AttentionTiming], model: TileCostModel, tile: int, batch: int = 1,
              heads: int = 4, head_dim: int = 32) -> str:
    """The band :func:`tile_band` sets for ``tile``, and the point that sets it; then the range
    every tile size's fitted points lie in and whose miss is largest (context: those misses do
    not enter the band). A clause, for the line that prints the fit.

    Raises:
        TypeError: for points that are not :class:`AttentionTiming`.
        ValueError: if ``tile`` has no flash timing at a fitted length.
    """
    big, ranked = tile_band(points, model, tile, batch, heads, head_dim), _fitted_misses(points, model, batch,
                                                                                          heads, head_dim)
    own, (worst, most), ms = next(p for p, _ in ranked if p.tile == tile), ranked[0], [m for _, m in ranked]
    text = (f"the band is ±{abs(big):.0%}, tile {tile}'s own largest miss at the fitted lengths "
            f"(at T = {own.seq_len}); over every tile size the {len(ms)} fitted points lie within "
            f"{min(ms):+.0%} to {max(ms):+.0%}")
    return text + ("" if worst is own else f", the largest tile {worst.tile}'s at T = {worst.seq_len} "
                   f"({most:+.0%})")


def tile_miss_note(points: Sequence[AttentionTiming], model: TileCostModel, tile: int, batch: int = 1,
                   heads: int = 4, head_dim: int = 32, measured: Estimate | None = None) -> str:
    """Where one tile size's medians lay against ``model`` at each length, the fitted ones
    (every length but the longest) and the longest, and whether the fitted lengths' misses share
    one side (a steady bias) and the longest length's lies on it too; with the band,
    :func:`tile_band`, the tile's own largest fitted miss. With ``measured`` (the judged timing
    of ``tile`` at the longest length) where the predicted time lies outside its interval, that
    first: how far, and the narrowest bands that keep the outcome from missed and that hold it.
    Sentences, for a verdict's explanation.

    Raises:
        TypeError: for points that are not :class:`AttentionTiming`, or ``measured`` not an
            :class:`~perfkit.estimate.Estimate`.
        ValueError: if ``tile`` has no flash timing at the longest length and one shorter.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    check_int("tile", tile, 1)
    flash = [p for p in pts if p.impl == "flash"]
    longest = max((p.seq_len for p in flash), default=0)

    def miss(p: AttentionTiming) -> float:
        return p.median_s / model.flash_s(p.seq_len, p.tile, batch, heads, head_dim) - 1

    mine = sorted((p for p in flash if p.tile == tile), key=lambda p: p.seq_len)
    fitted = [p for p in mine if p.seq_len < longest]
    if not fitted or mine[-1].seq_len != longest:
        raise ValueError(f"tile {tile} needs flash timings at T = {longest} and at a shorter length")
    last, rs = miss(mine[-1]), [miss(p) for p in fitted]
    one_side, big = all(r > 0 for r in rs) or all(r < 0 for r in rs), max(rs, key=abs)   # fitted, together
    band, pred, text = abs(big), model.flash_s(longest, tile, batch, heads, head_dim), ""  # tile_band's
    side = measured.clear_of(pred, "s") if check_type("measured", measured, Estimate, optional=True) else None
    if side:
        end, far = (measured.low, measured.high) if side == "above" else (measured.high, measured.low)
        free, whole = (math.ceil(100 * abs(x / pred - 1) - 1e-9) for x in (end, far))
        (_, lo, hi) = si_interval(measured.value, measured.low, measured.high, "s")
        text += (f"The predicted {si(pred, 's')} itself lies {'below' if side == 'above' else 'above'} the "
                 f"measured {measured.label} ({lo} to {hi}), {pred / end:.2f}x its "
                 f"{'low' if side == 'above' else 'high'} end: a band of ±{free}% or wider keeps the outcome "
                 f"from missed, of ±{whole}% or wider holds it; this one is ±{band:.0%}. ")
    text += (f"Tile {tile} lay {', '.join(f'{r:+.0%}' for r in rs)} from the model at the fitted "
             f"T = {', '.join(str(p.seq_len) for p in fitted)}, and {last:+.0%} at T = {longest}: ")
    text += ("on the same side at every fitted length, a bias the shorter lengths already showed, " + (
        "though not this large" if abs(last) > abs(big) else "within their largest") + f" ({big:+.0%})"
        if one_side and big * last > 0 else
        f"the fitted lengths all on one side, a steady bias ({min(rs, key=abs):+.0%} to {big:+.0%}) where "
        "the model was fitted, and the longest length's median on the other side: at its point the bias did "
        "not carry over" if one_side else
        "not on the same side at every fitted length: the shorter lengths do not show it as a steady misfit")
    text += f". The band, ±{band:.0%}, is this tile's own largest miss where the model was fitted."
    if one_side:
        text += (" Its fitted misses all on one side, that band measures the model's bias for this tile, not "
                 "scatter: the prediction tests if the bias carried over, not if the model extrapolates.")
    return text
