"""Notebook 03's measurements on one gradient: each compressor's error against its Gaussian
model, error feedback's conservation and residual, and the encode + decode kernels timed
against a copy of the same tensor.

Each returns a record the notebook prints and judges, so the notebook shows the question,
the prediction and the verdict, and tests check what is measured.

Usage::

    rows = error_rows(grad, ratios=[0.01, 0.1])            # one row per compressor
    k = time_codecs(numel=1 << 22, repeat=5)               # Measurements, interleaved
    print(rows[0], k.times["memcpy"].median_s / k.times["qsgd fused"].median_s)
    print(copy_share_range("qsgd"))                        # that ratio if memory alone: 8/19 to 12/19
    print(codec_split(k, "qsgd").text())                   # where the time beyond the bytes went
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from perfkit._checks import check_int, check_items, check_real, check_seed, check_tensor, check_type
from perfkit.compress.codecs import QSGD, Compressor, RandomK, Sign, TopK
from perfkit.compress.feedback import ErrorFeedback
from perfkit.compress.fused import BYTES_PER_VALUE, FUSED_MIN_NUMEL, WRITTEN_PER_VALUE
from perfkit.compress.simulate import gaussian_error
from perfkit.timing import Measurement, Timer, interleaved
from perfkit.units import si

__all__ = ["CodecSplit", "CodecTimes", "codec_split", "conservation_error", "copy_share_range", "error_rows",
           "medians_paid_text",
           "fused_default_note", "residual_norms", "time_codecs"]


def _grad(grad: torch.Tensor) -> torch.Tensor:
    check_tensor("grad", grad, floating=True, ndim=1)
    if grad.numel() == 0 or not bool(torch.isfinite(grad).all()) or float(grad.norm()) == 0:
        raise ValueError("grad must be a non-empty, finite, non-zero 1-d tensor")
    return grad


def error_rows(grad: torch.Tensor, ratios: Sequence[float]) -> list[dict]:
    """Every compressor's relative error ``||g - decompress(compress(g))|| / ||g||`` on ``grad``.

    Top-k and random-k at each ratio, QSGD and sign once; each row also holds the error the
    Gaussian model predicts (:func:`~perfkit.compress.gaussian_error`) and the wire bytes.

    Args:
        grad: a 1-d float gradient, finite and not all zeros.
        ratios: shares kept by top-k and random-k, each in (0, 1].

    Returns:
        Rows ``{"name", "method", "ratio", "wire_bytes", "wire_ratio", "rel_error", "predicted"}``.

    Raises:
        TypeError, ValueError: for a bad ``grad`` or a ratio outside (0, 1].
    """
    grad = _grad(grad)
    rs = [check_real("ratios", r, 0, 1, lo_open=True) for r in check_items("ratios", ratios)]
    cases = [(f"topk {r:g}", TopK(r), "topk", r) for r in rs]
    cases += [(f"randomk {r:g}", RandomK(r), "randomk", r) for r in rs]
    cases += [("qsgd", QSGD(), "qsgd", 1.0), ("sign", Sign(), "sign", 1.0)]
    rows = []
    for name, comp, method, r in cases:
        c = comp.compress(grad)
        err = float((comp.decompress(c) - grad).norm() / grad.norm())
        rows.append({"name": name, "method": method, "ratio": r, "wire_bytes": c.wire_bytes,
                     "wire_ratio": c.wire_bytes / (4 * grad.numel()), "rel_error": err,
                     "predicted": gaussian_error(method, r, grad.numel())})
    return rows


def conservation_error(grad: torch.Tensor, steps: int = 20, ratio: float = 0.01) -> float:
    """Error feedback's bookkeeping error: ``max |sent + residual - sum of inputs|`` over top-k
    with feedback fed ``steps`` scaled copies of ``grad``, relative to the largest summed value.
    Exact arithmetic gives 0; fp32 rounding leaves about 1e-7.

    Raises:
        TypeError, ValueError: for a bad ``grad``, ``steps`` below 1 or ``ratio`` outside (0, 1].
    """
    grad = _grad(grad)
    check_int("steps", steps, 1)
    ef = ErrorFeedback(TopK(check_real("ratio", ratio, 0, 1, lo_open=True)))
    total, sent = torch.zeros_like(grad), torch.zeros_like(grad)
    for step in range(steps):
        g = grad * (1 + 0.1 * step)  # a gradient that changes from step to step
        total += g
        sent += ef.decompress(ef.compress(g, key="all"))
    return float((sent + ef.residuals["all"] - total).abs().max() / total.abs().max())


def residual_norms(grad: torch.Tensor, steps: int = 200, ratio: float = 0.01) -> dict[str, float]:
    """How many gradients' worth each residual holds after ``steps`` steps of the same ``grad``:
    ``||residual|| / ||grad||`` for top-k, random-k (seed 0) at ``ratio`` and sign, with
    error feedback. Random-k sends each coordinate about once per ``1 / ratio`` steps, with
    everything it gathered since, so its residual grows to many gradients' worth.

    Raises:
        TypeError, ValueError: for a bad ``grad``, ``steps`` below 1 or ``ratio`` outside (0, 1].
    """
    grad = _grad(grad)
    check_int("steps", steps, 1)
    check_real("ratio", ratio, 0, 1, lo_open=True)
    pct = f"{ratio:.0%}" if ratio >= 0.01 else f"{ratio:g}"
    out = {}
    for name, comp in ((f"top-k {pct}", TopK(ratio)), (f"random-k {pct}", RandomK(ratio, seed=0)),
                       ("sign", Sign())):
        ef = ErrorFeedback(comp)
        for _ in range(steps):
            ef.decompress(ef.compress(grad, key="g"))
        out[name] = float(ef.residuals["g"].norm() / grad.norm())
    return out


def copy_share_range(method: str) -> tuple[float, float]:
    """The range a fused encode + decode's speed, as a share of a copy's (the copy's time
    over the path's), takes if memory traffic alone sets both times.

    Counting bytes read plus written, a copy moves 8 per fp32 value and the path ``b``
    (:data:`~perfkit.compress.BYTES_PER_VALUE`). In DRAM a store through the cache first
    reads its line (write-allocate). Inductor's C++ loops store through the cache, so the
    path moves ``b + w`` (``w`` written, :data:`~perfkit.compress.WRITTEN_PER_VALUE`); a
    copy moves 12 when it stores through the cache too, 8 when it uses non-temporal stores,
    which skip that read (a large copy may). So the share lies between ``8 / (b + w)`` and
    ``12 / (b + w)``; ``8 / b``, the count without write-allocate, lies inside. Both ends
    are the model's expectation, not bounds: a loop's arithmetic, or the code Inductor
    wrote, can slow a path below the bottom, and a pass that mostly reads can move bytes
    faster than a copy, half of whose bytes are writes (STREAM's read-heavy kernels
    usually report more bandwidth than its Copy), and so land above the top.

    Args:
        method: ``"qsgd"`` or ``"sign"``.

    Returns:
        ``(low, high)`` shares (QSGD: 8 / 19 = 0.421 to 12 / 19 = 0.632; sign: 8 / 12.375 =
        0.646 to 12 / 12.375 = 0.970).

    Raises:
        ValueError: for a method without a fused path.
    """
    if method not in WRITTEN_PER_VALUE:
        raise ValueError(f"method must be one of {sorted(WRITTEN_PER_VALUE)}, got {method!r}")
    moved = sum(BYTES_PER_VALUE[method]["fused"].values()) + WRITTEN_PER_VALUE[method]["fused"]  # B/value
    return 8 / moved, 12 / moved


@dataclass(frozen=True)
class CodecTimes:
    """Encode + decode of one fp32 tensor, timed in alternation with a copy of it.

    ``times`` maps ``"memcpy"``, ``"fp16 cast"``, ``"qsgd eager"``, ``"qsgd fused"``,
    ``"sign eager"``, ``"sign fused"``, ``"topk exact"`` and ``"topk sampled"`` (encode +
    decode), and ``"qsgd fused decode"``, ``"sign fused decode"`` and ``"topk sampled decode"``
    (one decode of a payload encoded beforehand: an all-gathering hook decodes every rank's
    payload, so its codec cost at ``n`` ranks is encode + decode + ``(n - 1)`` decodes) to their
    :class:`~perfkit.timing.Measurement` (round ``i`` of each taken back to back);
    ``first_fused_s`` is the fused kernels' first calls (compile or disk cache), s;
    ``sampled_mass`` the share of exact top-k's magnitude sum that sampled top-k kept."""

    numel: int
    times: dict[str, Measurement]
    first_fused_s: float
    sampled_mass: float


def time_codecs(numel: int, repeat: int = 5, ratio: float = 0.01, seed: int = 0) -> CodecTimes:
    """Time every codec's encode + decode on ``numel`` Gaussian values against a plain copy.

    Outputs go into preallocated buffers (time the kernels, not the allocator). The fused
    kernels are called once before timing: their first call compiles.

    Args:
        numel: values in the tensor (>= 1024).
        repeat: alternated rounds (>= 1).
        ratio: top-k's kept share, in (0, 1].
        seed: seeds the tensor.

    Returns:
        A :class:`CodecTimes`.

    Raises:
        TypeError, ValueError: for counts, ``ratio`` or ``seed`` out of range.
    """
    check_int("numel", numel, 1024)
    check_int("repeat", repeat, 1)
    check_real("ratio", ratio, 0, 1, lo_open=True)
    check_seed("seed", seed)
    big = torch.randn(numel, generator=torch.Generator().manual_seed(seed))
    dst, out = torch.empty_like(big), torch.empty_like(big)
    half = torch.empty_like(big, dtype=torch.float16)
    codecs: dict[str, Compressor] = {f"{m} {p}": (QSGD if m == "qsgd" else Sign)(fused=p == "fused")
                                     for m in ("qsgd", "sign") for p in ("eager", "fused")}
    with Timer() as first:
        for name in ("qsgd fused", "sign fused"):
            codecs[name].decompress(codecs[name].compress(big), out=out)
    codecs["topk exact"], codecs["topk sampled"] = TopK(ratio), TopK(ratio, "sampled")

    def run(c: Compressor) -> Callable[[], object]:
        return lambda: c.decompress(c.compress(big), out=out)

    def decode(c: Compressor) -> Callable[[], object]:
        payload = c.compress(big)  # encoded once, outside the timing
        return lambda: c.decompress(payload, out=out)

    fns = {"memcpy": lambda: dst.copy_(big), "fp16 cast": lambda: dst.copy_(half.copy_(big)),
           **{name: run(c) for name, c in codecs.items()},
           **{f"{name} decode": decode(codecs[name])
              for name in ("qsgd fused", "sign fused", "topk sampled")}}
    ms = interleaved(list(fns.values()), warmup=1, repeat=repeat)
    ex, sa = codecs["topk exact"], codecs["topk sampled"]
    mass = float(sa.compress(big).tensors[0].abs().sum() / ex.compress(big).tensors[0].abs().sum())
    return CodecTimes(numel, dict(zip(fns, ms, strict=True)), first.elapsed_s, mass)


@dataclass(frozen=True)
class CodecSplit:
    """A fused round trip split into its encode and its decode, each beside its bytes at the
    copy's speed (:func:`codec_split`). Times in s, medians over the rounds.

    Attributes:
        method: ``"qsgd"`` or ``"sign"``.
        encode_s: the median over the rounds of each round trip less the decode timed alone
            in the same round (max, pool and all: everything ``compress`` does); not the round
            trip's median less the decode's, which ``whole_s`` gives.
        decode_s: one decode, timed alone.
        encode_bytes_s, decode_bytes_s: each half's bytes per value
            (:data:`~perfkit.compress.BYTES_PER_VALUE`), plus the line each of its stores reads
            first (write-allocate, as :func:`copy_share_range` counts them), at the copy's 8 per
            value: the time the low end of the predicted range allows that half.
        whole_s: the round trip's median, where known: the text then names both statistics.
    """

    method: str
    encode_s: float
    decode_s: float
    encode_bytes_s: float
    decode_bytes_s: float
    whole_s: float | None = None

    @property
    def excess(self) -> dict[str, float]:
        """Each half's time beyond its bytes at the copy's speed, s (negative: faster)."""
        return {"encode": self.encode_s - self.encode_bytes_s, "decode": self.decode_s - self.decode_bytes_s}

    def shares(self) -> dict[str, float] | None:
        """Each half's share of the summed excess, when both halves exceed their bytes' time
        (so both shares lie in [0, 1]); ``None`` otherwise."""
        ex = self.excess
        total = ex["encode"] + ex["decode"]
        if min(ex.values()) < 0 or total <= 0:
            return None
        return {k: x / total for k, x in ex.items()}

    def text(self, capped: str | None = None) -> str:
        """A sentence: both halves against their bytes (write-allocate counted, as in the
        predicted range), and where the excess lies; with ``capped`` (the imitation this run
        ran under, :func:`perfkit.hw.imitation`), a sentence that the fused loops were generated
        for the capped vector width, so the split does not tell the codec from the cap."""
        def half(name: str, t: float, b: float) -> str:
            x = t - b
            return (f"its {name} {si(t, 's')} against {si(b, 's')} for its bytes at the copy's speed ("
                    + (f"{si(x, 's')} over" if x >= 0 else f"{si(-x, 's')} under") + ")")
        said = ("Timed apart, with write-allocate counted as in the predicted range, "
                + half("decode", self.decode_s, self.decode_bytes_s) + ", "
                + half("encode (the median of each round's round trip less its decode"
                       + ("" if self.whole_s is None else f"; the two medians printed above differ by "
                          f"{si(self.whole_s - self.decode_s, 's')}") + ")",
                       self.encode_s, self.encode_bytes_s))
        sh, ex = self.shares(), self.excess
        if sh is not None:
            most = max(sh, key=sh.__getitem__)
            said += f": the {most} holds {sh[most]:.0%} of the time beyond the bytes."
        elif max(ex.values()) > 0:
            said += f": all of the time beyond the bytes lies in the {max(ex, key=ex.__getitem__)}."
        else:
            said += ": neither half took longer than its bytes."
        return said + (f" This run imitates {capped}, and Inductor generated these loops for its capped "
                       "vector width (printed above); this run does not tell how much of the time is "
                       "the cap's rather than the codec's." if capped else "")


def codec_split(times: CodecTimes, method: str) -> CodecSplit:
    """Split a fused path's encode + decode time (:func:`time_codecs`) into its two halves.

    The decode is timed alone in every round; the encode is that round's round trip less its
    decode (back to back, under the same load), and each half is set beside its own bytes at
    the copy's speed, so a path that misses its bytes model says which half the time went to.

    Args:
        times: a :class:`CodecTimes` (with ``"<method> fused"`` and its ``" decode"``).
        method: ``"qsgd"`` or ``"sign"``.

    Returns:
        A :class:`CodecSplit`.

    Raises:
        TypeError: ``times`` is not a :class:`CodecTimes`.
        ValueError: for a method without a fused path.
    """
    check_type("times", times, CodecTimes)
    if method not in WRITTEN_PER_VALUE:
        raise ValueError(f"method must be one of {sorted(WRITTEN_PER_VALUE)}, got {method!r}")
    whole, dec = times.times[f"{method} fused"], times.times[f"{method} fused decode"]
    enc = [w - d for w, d in zip(whole.times_s, dec.times_s, strict=True)]  # s, per round
    copy_s = times.times["memcpy"].median_s  # s for 8 B/value
    b = BYTES_PER_VALUE[method]["fused"]
    w_dec = 4.0  # B/value the decode writes (fp32 out); the encode writes the rest (codes or bits)
    w_enc = WRITTEN_PER_VALUE[method]["fused"] - w_dec
    return CodecSplit(method, statistics.median(enc), dec.median_s,
                      copy_s * (b["encode"] + w_enc) / 8, copy_s * (b["decode"] + w_dec) / 8, whole.median_s)


def fused_default_note(fusion: Mapping[str, Any], capped: str | None = None) -> str:
    """A sentence on the fused path being the default (tensors of at least
    :data:`~perfkit.compress.FUSED_MIN_NUMEL` values) where a run did not show it faster.

    Args:
        fusion: method -> the fused path's speed over the eager one (an estimate with ``low``
            and ``high``, e.g. :func:`perfkit.stats.median_ratio`).
        capped: the imitation the run ran under (:func:`perfkit.hw.imitation`), if any: then a
            sentence follows that the fused loops were generated for its capped vector width.

    Returns:
        ``""`` when every method's interval lies above 1x and nothing is ``capped``; otherwise a
        sentence, starting with a space, naming each method whose fused path ran slower
        (interval below 1x) or was not shown faster (interval reaching 1x); where one ran slower,
        what a user can do (keep the eager path with ``fused=False``; read the loops Inductor
        wrote with ``TORCH_LOGS=output_code``); then the cap's.

    Raises:
        TypeError: ``fusion`` is not a mapping, or an entry lacks real ``low`` and ``high``.
    """
    check_type("fusion", fusion, Mapping)
    said = []
    for m, e in fusion.items():
        lo, hi = (check_real(f"fusion[{m!r}].{k}", getattr(e, k, None)) for k in ("low", "high"))
        if hi < 1:
            said.append(f"{m}'s ran slower than its eager path (whole interval below 1x)")
        elif lo <= 1:
            said.append(f"{m}'s was not shown faster than its eager path (its interval reaches 1x)")
    cap = (f" This run imitates {capped}: Inductor generated the fused loops for its capped vector width, "
           "so this run does not tell how much of their time is the cap's rather than the codec's."
           if capped else "")
    if not said:
        return cap
    slower = [m for m, e in fusion.items() if e.high < 1]
    act = (f" On this machine `fused=False` on {', '.join(slower)} (or `PERFKIT_FUSED=0`) keeps the faster "
           "eager path; `TORCH_LOGS=output_code` prints the loops Inductor wrote, where to look for the time "
           "beyond their bytes (this run does not read them)." if slower else "")
    return (f" The fused path is the default for tensors of at least {FUSED_MIN_NUMEL:,} values, yet here "
            + "; ".join(said) + "." + act + cap)


def medians_paid_text(margins: Mapping[str, float], noise_s: float) -> str:
    """Which codecs paid on the link, by medians, where a margin within the noise decides nothing.

    Args:
        margins: codec -> the link time its bytes removed less its codec's time, s (medians).
        noise_s: how far apart two definitions of the same call's time came in the run, s (>= 0):
            a margin no larger than it is not told from 0.

    Returns:
        A clause (no leading capital, no final stop): the codecs that paid, those that did not,
        and those whose margin lies within ``noise_s``.

    Raises:
        TypeError, ValueError: ``margins`` is not a non-empty mapping of reals, or ``noise_s``
            is negative or not finite.
    """
    check_type("margins", margins, Mapping)
    if not margins:
        raise TypeError("margins must not be empty")
    m = {k: check_real(f"margins[{k!r}]", v) for k, v in margins.items()}
    noise = check_real("noise_s", noise_s, 0.0)
    won = [k for k, v in m.items() if v > noise]
    lost = [k for k, v in m.items() if v < -noise]
    close = [k for k in m if k not in won and k not in lost]

    def names(ks: list[str]) -> str:
        return ks[0] if len(ks) == 1 else ", ".join(ks[:-1]) + " and " + ks[-1]

    def codecs(ks: list[str]) -> str:
        return "its codec" if len(ks) == 1 else "their codecs"
    said = [f"{names(won)} removed more link time than {codecs(won)} took"] if won else []
    if lost:
        said.append(f"{names(lost)} less" if won else
                    f"{names(lost)} removed less link time than {codecs(lost)} took")
    if close:
        one = len(close) == 1
        said.append(names([f"{k}'s margin ({'+' if m[k] >= 0 else '-'}{si(abs(m[k]), 's')})" for k in close])
                    + f" {'lies' if one else 'lie'} within the {si(noise, 's')} by which this run's two "
                    "definitions of the dense all-reduce's time differ (a gap of definitions, not noise), "
                    f"so this run cannot tell whether {'it' if one else 'they'} paid")
    return "; ".join(said)

