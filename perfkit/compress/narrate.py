"""Sentences notebook 03 prints about its DDP step times and error-feedback runs, each built
from the numbers it speaks of, so a sentence changes with the run.

Usage::

    print(resolution_note(paired["fp16_hook"], 0.997))       # what a floor below 1x can show
    print(ef_gap_text(0.0536, 0.0579))                        # "widened it by 8%: ..."
    print(slowdown_text(paired, 6.22e-3, [628e-6, 1.27e-3]))  # the slower steps, in small calls
    print(medians_outside_text(paired, med))                   # where the two step ratios disagree
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfkit._checks import check_real, check_type
from perfkit.compress.fused import FUSED_MIN_NUMEL
from perfkit.stats import quantile
from perfkit.units import si

__all__ = ["cast_floor_text", "ef_gap_text", "fusion_text", "medians_outside", "medians_outside_text",
           "narrow_miss_note", "resolution_note", "slowdown_text"]


def resolution_note(ratio: Any, edge: float) -> str:
    """Whether a step-time ratio's interval can resolve the gain an edge below 1x allows.

    Args:
        ratio: a paired step-time ratio (an estimate with ``low``, ``high`` and, optionally, a
            ``level``; e.g. :func:`perfkit.stats.median_ratio`).
        edge: the least ratio a model allows (< 1 for a gain: ``1 - edge`` of a step).

    Returns:
        ``""`` where the edge allows no gain. Otherwise, where the interval is wider than that
        gain, a sentence, starting with a space, giving the gain as a share of the interval's
        width: the run can show a step shorter than the edge by more than its noise, not a gain
        of the edge's own size; then, in every case, a sentence that the edge is a floor only,
        which a hook that made the step slower passes too, and, where the whole interval lies
        above 1x, that this hook did make the step slower.

    Raises:
        TypeError, ValueError: ``ratio`` lacks real ``low`` and ``high``, or ``edge`` is not real.
    """
    lo, hi = (check_real(f"ratio.{k}", getattr(ratio, k, None)) for k in ("low", "high"))
    gain, width = 1 - check_real("edge", edge), hi - lo
    if gain <= 0:
        return ""
    floor = (f" The edge, {edge:.3f}x, is a floor only: a hook that made the step slower, by any amount, "
             "passes it too, so holding it does not show the gain.")
    if lo > 1:  # the whole interval above 1x: the hook made this step slower
        floor += (" Here the whole interval lies above 1x: this hook made the step slower, "
                  "which the floor passes.")
    if width <= gain:
        return floor
    what = getattr(ratio, "label", None) if getattr(ratio, "level", None) is not None else None
    what = what or "interval"
    return (f" The gain its bytes allow, {gain:.1%} of a step, is {gain / width:.0%} of the {what}'s width "
            f"({width:.1%} of a step): this run can show a step shorter than the edge by more than its "
            "noise, not resolve a gain of that size." + floor)

def ef_gap_text(g0: float, g1: float) -> str:
    """What error feedback did to one run's loss gap to uncompressed training.

    Args:
        g0: the final loss above uncompressed training's without error feedback, nats.
        g1: the same with error feedback, nats.

    Returns:
        A clause (no capital, no stop): ``"no gap to close"`` where ``g0 <= 0``, else the share of
        the gap closed, or how far it widened.

    Raises:
        TypeError, ValueError: either is not a finite real.
    """
    g0, g1 = check_real("g0", g0), check_real("g1", g1)
    if g0 <= 0:
        return "no gap to close"
    if g1 <= g0:
        return f"closed {(g0 - g1) / g0:.0%} of it"
    return f"widened it by {(g1 - g0) / g0:.0%}: error feedback made this run worse"


def slowdown_text(ratios: Mapping[str, Any], step_s: float, call_s: Sequence[float]) -> str:
    """What a run shows of the hooks that made a DDP step slower, by the median paired ratios.

    Args:
        ratios: method -> its paired step-time ratio to uncompressed (``value``: the median);
            PowerSGD's methods start with ``"powersgd"``, the others go through
            :func:`perfkit.compress.compression_hook`.
        step_s: uncompressed training's median step, s (> 0).
        call_s: small all-reduces timed alone, s (> 0 each; at least one).

    Returns:
        ``""`` where no method's median ratio exceeds 1; else sentences giving the time the
        slower methods added per step (median paired ratio less 1, times ``step_s``: one statistic,
        named in the sentence, not the difference of the two medians), that time in small calls
        timed alone, and the calls each hook issues per bucket, which the run does not time inside the step.

    Raises:
        TypeError, ValueError: for a bad mapping, a non-positive ``step_s``, or bad ``call_s``.
    """
    check_type("ratios", ratios, Mapping)
    step = check_real("step_s", step_s, 0.0)
    check_type("call_s", call_s, Sequence)
    calls = [check_real("call_s[i]", c, 0.0) for c in call_s]
    if step <= 0 or not calls or min(calls) <= 0:
        raise ValueError("step_s and every call_s must be > 0, with at least one call")
    extra = {m: (check_real(f"ratios[{m!r}].value", getattr(e, "value", None)) - 1) * step
             for m, e in ratios.items()}
    slow = {m: x for m, x in extra.items() if x > 0}
    if not slow:
        return ""

    def span(xs: list[float]) -> str:
        a, b = min(xs), max(xs)
        return si(a, "s") if si(a, "s") == si(b, "s") else f"{si(a, 's')} to {si(b, 's')}"
    said = [f"By the median paired ratios (less 1, times none's median step, {si(step, 's')}), the slower "
            f"steps took {span(list(slow.values()))} more than none's; a small all-reduce timed alone took "
            f"{span(calls)}, so that is the time "
            f"of {min(slow.values()) / max(calls):.1f} to {max(slow.values()) / min(calls):.1f} such calls."]
    psgd = [x for m, x in slow.items() if m.startswith("powersgd")]
    if psgd:
        n_lo, n_hi = min(psgd) / max(calls), max(psgd) / min(calls)
        fit = ("two more calls per bucket lie inside that range" if n_lo <= 2 <= n_hi else
               "more than two calls' worth, so the two extra calls per bucket, at the times timed alone, do "
               "not account for all of it" if n_lo > 2 else "less than two calls' worth")
        said.append(f"PyTorch's PowerSGD hook chains three all-reduces per bucket (the uncompressed tensors, "
                    f"then P, then Q) once it compresses, where none's hook issues one; its steps added "
                    f"{span(psgd)}, the time of {n_lo:.1f} to {n_hi:.1f} small calls: {fit}.")
    if len(psgd) < len(slow):
        said.append("perfkit's hook waits inside backward for its collectives (an all-gather per payload "
                    "tensor, two for top-k, QSGD and sign; one all-reduce for random-k) and runs its codec "
                    "on every bucket.")
    said.append("This run does not time a hook inside the step, so it does not split that time between "
                "calls, codecs and waiting.")
    return " ".join(said)


def medians_outside(ratios: Mapping[str, Any], medians: Mapping[str, float]) -> dict[str, float]:
    """How far each method's ratio of the medians lies outside its paired ratio's interval.

    Args:
        ratios: method -> its paired step-time ratio (``low`` and ``high``: the interval).
        medians: method -> its median step over the baseline's median step (every key of ``ratios``).

    Returns:
        method -> distance, in x, from the interval to the ratio of the medians, for the methods
        whose ratio of the medians lies outside it (> 0 each), in ``ratios``' order.

    Raises:
        TypeError, ValueError: for a bad mapping, a missing method or a non-real number.
    """
    check_type("ratios", ratios, Mapping)
    check_type("medians", medians, Mapping)
    out = {}
    for m, e in ratios.items():
        if m not in medians:
            raise ValueError(f"medians lacks {m!r}")
        lo, hi = (check_real(f"ratios[{m!r}].{k}", getattr(e, k, None)) for k in ("low", "high"))
        r = check_real(f"medians[{m!r}]", medians[m])
        d = max(lo - r, r - hi)
        if d > 0:
            out[m] = d
    return out


def medians_outside_text(ratios: Mapping[str, Any], medians: Mapping[str, float],
                         times: Mapping[str, Sequence[float]] | None = None, baseline: str = "none") -> str:
    """A sentence: for how many methods the ratio of the medians lies outside the paired interval.

    Args:
        ratios, medians: as for :func:`medians_outside`; ``ratios``' estimates also carry ``value``.
        times: each method's step times, s, ``baseline``'s included (optional): where every method
            lies outside on one side, the upper tail of each (90th percentile over median) is set
            against ``baseline``'s.
        baseline: the method every ratio divides by.

    Returns:
        The count and the method furthest outside (its ratio of the medians, the distance, and its
        paired interval around its median paired ratio), or that every one lies inside. Where five
        or more all lie on one side, that they share one baseline, so their sides are not
        independent and no chance of the pattern is given, and, with ``times``, how the
        baseline's spread compares with the others'.

    Raises:
        TypeError, ValueError: as for :func:`medians_outside`; ``times`` not a mapping holding
            ``baseline`` and every method of ``ratios``, or a series that is empty or not finite.
    """
    off = medians_outside(ratios, medians)
    check_type("baseline", baseline, str)
    if times is not None:
        check_type("times", times, Mapping)
        missing = [m for m in (baseline, *ratios) if m not in times]
        if missing:
            raise ValueError(f"times lacks {missing}")
    if not off:
        return "Every method's ratio of the medians lies inside its paired ratio's interval."
    far = max(off, key=off.__getitem__)
    e = ratios[far]
    n_up = sum(medians[m] > ratios[m].high for m in off)  # above the interval; the rest lie below
    side = ("all above it" if n_up == len(off) else "all below it" if n_up == 0 else
            f"{n_up} above it, {len(off) - n_up} below")
    text = (f"For {len(off)} of {len(ratios)} methods the ratio of the medians lies outside the paired "
            f"ratio's interval, {side} (furthest outside: {far}, {medians[far]:.3f}x, {off[far]:.2g}x "
            f"{'below' if medians[far] < e.low else 'above'} its paired {getattr(e, 'label', 'interval')}, "
            f"{e.low:.3f}x to "
            f"{e.high:.3f}x around {e.value:.3f}x).")
    if len(off) < 5 or 0 < n_up < len(off):
        return text
    text += (f" Outside on one side every time, but not as {len(off)} independent outcomes: every ratio "
             f"divides by the same baseline, {baseline}'s steps (its median in each ratio of the medians, "
             "its step of the round in each paired ratio), so one feature of that one series can move them "
             "all the same way, and no chance of the pattern applies. The two ratios agree only where a "
             f"method's steps are {baseline}'s scaled by one factor.")
    if times is not None:
        tail = {m: quantile(times[m], 0.9) / quantile(times[m], 0.5) for m in (baseline, *ratios)}
        b, rest = tail.pop(baseline), tail.values()
        lo, hi = min(rest), max(rest)
        text += (f" {baseline}'s 90th percentile step is {b:.2f}x its median, the other methods' {lo:.2f}x "
                 f"to {hi:.2f}x" + (
                     f": {baseline}'s steps spread further above their median than any other method's, so "
                     "their distributions differ in shape." if round(b, 2) > round(hi, 2) else
                     f": {baseline}'s steps spread less above their median than any other method's, so "
                     "their distributions differ in shape." if round(b, 2) < round(lo, 2) else
                     f": by this measure {baseline}'s spread lies among theirs; the shapes differ in a way "
                     "it does not show."))
    return text + (" The paired intervals, which treat consecutive rounds as independent, cover the median "
                   "of the paired ratios, not the ratio of the medians.")


def cast_floor_text(name: str, ratio: Any, floor: float, median_ratio: float, short: bool = False) -> str:
    """A step-time ratio set, as context, against the floor a hook's removed bytes allow, where
    no verdict is judged: the gain the floor allows against the interval's width, and where the
    interval and the ratio of the medians lie against the floor, and, where the ratio of the
    medians lies below the floor, that the medians gained more than the bytes can save.

    Args:
        name: the hook ("fp16_hook").
        ratio: its paired step-time ratio to uncompressed (``value``, ``low``, ``high``, and
            optionally ``label``, e.g. :func:`perfkit.stats.median_ratio`).
        floor: the least ratio its removed bytes allow (1 less the gain, as a share of a step; > 0).
        median_ratio: its median step over the uncompressed median step (> 0).
        short: one clause for a summary, not the sentences.

    Raises:
        TypeError, ValueError: ``ratio`` lacks real ``value``, ``low`` and ``high``, or a number is not > 0.
    """
    check_type("name", name, str)
    v, lo, hi = (check_real(f"ratio.{k}", getattr(ratio, k, None)) for k in ("value", "low", "high"))
    f, r = check_real("floor", floor, 0.0), check_real("median_ratio", median_ratio, 0.0)
    if f <= 0 or r <= 0:
        raise ValueError("floor and median_ratio must be > 0")
    gain, width = 1 - f, hi - lo
    f3, lo3, hi3 = round(f, 3), round(lo, 3), round(hi, 3)  # as printed
    where = ("the whole interval lies below it" if hi3 < f3 else
             "the whole interval lies above it" if lo3 > f3 else "the interval reaches across it")
    small = 0 < gain < width
    why = (f"the gain its bytes allow, {gain:.1%} of a step, is {gain / width:.0%} of the interval's width "
           f"of {width:.1%}, so this run cannot tell a step that gained it from one that did not"
           if small else f"the gain its bytes allow is {gain:.1%} of a step, the interval's width "
           f"{width:.1%}")
    if short:
        return f"{name} ran {v:.3f}x against a floor of {f:.3f}x ({where}; not judged: {why})"
    label = getattr(ratio, "label", None) or "interval"
    mr = ("below" if round(r, 3) < round(lo, 3) else "above" if round(r, 3) > round(hi, 3) else "inside")
    k = (1 - r) / gain if gain > 0 else 0.0  # the medians' gain over what the bytes allow
    beaten = ""
    if gain > 0 and round(r, 3) < f3:
        beaten = (f" That ratio lies below the floor as well: by the medians the step gained {1 - r:.1%}, "
                  f"{k:.{0 if k >= 10 else 1}f}x the {gain:.1%} halving the bytes can save by this model")
        beaten += (f"; the paired interval holds the floor ({lo:.3f}x to {hi:.3f}x against {f:.3f}x), so the "
                   "paired steps do not support that excess: it is the medians' reading alone."
                   if lo3 <= f3 <= hi3 else
                   f"; the paired interval lies wholly below the floor too ({hi:.3f}x against {f:.3f}x), so "
                   "the paired steps support a gain beyond what the bytes can save, which this model does "
                   "not explain." if hi3 < f3 else
                   f"; the paired interval lies wholly above the floor ({lo:.3f}x against {f:.3f}x), so the "
                   "paired steps do not support that excess: the two estimates disagree, and the paired "
                   "one, which sets each round's steps against each other, is the one judged.")
    return (f"{name}: step over uncompressed {v:.3f}x paired ({label} {lo:.3f}x to {hi:.3f}x), against the "
            f"floor its halved bytes allow, {f:.3f}x: {where}. Context, not a verdict: {why}"
            + ("; and a hook that made the step slower passes a floor too." if small else ".")
            + f" The ratio of the medians, {r:.3f}x, lies {mr} the paired interval." + beaten)


def narrow_miss_note(ratio: Any, median_ratio: float, floor: float) -> str:
    """A sentence, starting with a space, for a step-time ratio judged missed below a floor on its
    paired interval, which takes consecutive rounds as independent and so likely comes out too
    narrow: whether the other estimate of the same figure, the ratio of the medians, lies below the
    floor too (as printed, to 3 decimals), so how far the miss stands on that interval alone.

    Args:
        ratio: the paired step-time ratio (``low`` and ``high``).
        median_ratio: the method's median step over the baseline's median step (> 0).
        floor: the verdict's floor (> 0).

    Raises:
        TypeError, ValueError: ``ratio`` lacks real ``low`` and ``high``, or a number is not > 0.
    """
    check_real("ratio.low", getattr(ratio, "low", None))
    check_real("ratio.high", getattr(ratio, "high", None))
    r, f = check_real("median_ratio", median_ratio, 0.0), check_real("floor", floor, 0.0)
    if r <= 0 or f <= 0:
        raise ValueError("median_ratio and floor must be > 0")
    head = (" This miss is judged on the paired interval, which takes consecutive rounds as independent "
            "and so likely comes out too narrow (section 3): ")
    if round(r, 3) < round(f, 3):
        return head + (f"the ratio of the medians, {r:.3f}x, lies below the floor ({f:.3f}x) too, so both "
                       "estimates put the step below what its bytes explain, by an amount no interval here "
                       "bounds reliably.")
    return head + (f"the ratio of the medians, {r:.3f}x, does not lie below the floor ({f:.3f}x), so this "
                   "run does not establish a lead beyond what its bytes explain.")


def fusion_text(ratio: Any, model_x: float) -> str:
    """What a fused-over-eager speed verdict, judged on the floor 1x, shows against its bytes model.

    Args:
        ratio: the fused path's speed over the eager one (``value``, ``low``, ``high``; e.g.
            :func:`perfkit.stats.median_ratio`).
        model_x: the bytes model's figure for that ratio (> 0).

    Returns:
        Sentences: the floor is all that is judged; the share of the model's figure the run
        reached (and, where the whole interval lies below the figure, that it does); then, by
        the interval, whether the fused path, the default at :data:`FUSED_MIN_NUMEL` values, ran
        faster (held as a floor only where it fell short of the model), was not shown faster
        (interval reaching 1x), or ran slower.

    Raises:
        TypeError, ValueError: ``ratio`` lacks real ``value``, ``low`` and ``high``, or
        ``model_x`` is not > 0.
    """
    v, lo, hi = (check_real(f"ratio.{k}", getattr(ratio, k, None)) for k in ("value", "low", "high"))
    fx = check_real("model_x", model_x, 0.0)
    if fx <= 0:
        raise ValueError("model_x must be > 0")
    short = hi < fx
    said = (f"The verdict judges only the floor, 1x; the bytes model's figure is {fx:.2f}x, and this ran "
            f"{v / fx:.2f} of it"
            + (f" (whole interval, {lo:.3g}x to {hi:.3g}x, below it)" if short else "") + ". ")
    default = f"The fused path, the default for tensors of at least {FUSED_MIN_NUMEL:,} values, "
    if lo > 1:
        return said + default + ("ran faster than the eager one, but the mark holds a floor only: the "
                                 "speed-up fell short of what its bytes allow." if short
                                 else "ran faster than the eager one.")
    if hi < 1:
        return said + default + "ran slower than the eager one here (whole interval below 1x)."
    return said + default + "was not shown faster than the eager one here (its interval reaches 1x)."


def timing_noise_note(margin_s: float, alt_margin_s: float, noise_s: float, short: bool = False,
                      other: str = "the other timing of the dense call") -> str:
    """Where a judged margin lies against how far two definitions of its dense call's time differ.

    The margin's interval covers each set of samples' own spread only. A second timing of the
    same dense call by another definition (notebook 03: the sweep's slowest rank's median of
    back-to-back calls, against the mean over ranks of calls issued alone) differs by
    ``noise_s``: a gap between definitions, not replicate noise, which the interval does not
    cover. Where the margin is larger, either definition gives it the same sign.

    Args:
        margin_s: the judged margin (dense time less payload time less codec time), s (median).
        alt_margin_s: the same margin with the dense call's other timing, s.
        noise_s: how far apart the two definitions put the dense call's time, s (>= 0).
        short: a clause for a takeaway (no leading space, no final stop) instead of a sentence.
        other: what gave ``alt_margin_s``, as a phrase after "with".

    Returns:
        A sentence starting with a space (or, with ``short``, a clause starting with "; ").

    Raises:
        TypeError, ValueError: an argument is not a finite real, or ``noise_s`` is negative.
    """
    m, alt = check_real("margin_s", margin_s), check_real("alt_margin_s", alt_margin_s)
    noise = check_real("noise_s", noise_s, 0.0)
    sgn = lambda x: ("+" if x >= 0 else "-") + si(abs(x), "s")  # noqa: E731
    timings = (f"the {si(noise, 's')} by which this run's two definitions of the dense all-reduce's time "
               "differ (the sweep's slowest rank's median of back-to-back calls, the mean over ranks of "
               "calls issued alone: a gap of definitions, not noise)")
    if abs(m) > noise:
        return (f"; its margin ({sgn(m)}) lies beyond {timings}, so either gives it the same sign" if short
                else f" The margin ({sgn(m)}) lies beyond {timings}, so either gives it the same sign.")
    flips = (alt > 0) != (m > 0)
    if not isinstance(other, str) or not other:
        raise ValueError(f"other must name the other timing, got {other!r}")
    tail = (f"with {other} it comes out {sgn(alt)}, "
            + ("on the other side of 0, so this run cannot tell whether it paid" if flips else
               "on the same side of 0, though by an amount the interval does not cover"))
    if short:
        return (f"; but that interval covers only each set of samples' own spread, and the margin lies "
                f"within {timings}: {tail}")
    return (f" The interval covers each set of samples' own spread, not {timings}: the margin "
            f"({sgn(m)}) lies within it, and {tail}.")
