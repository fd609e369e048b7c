"""Notebook 02's analyses: the alpha-beta fit's quality and the ring model on more processes (the
overlap of gradient all-reduces with backward: :mod:`perfkit.comm.overlap`; what bucketing saved:
:mod:`perfkit.comm.bucketing`).

Each takes what a 2- or 3-process job measured (:class:`~perfkit.comm.CollectivePoint`,
per-round step times) and returns a record or an :class:`~perfkit.stats.Estimate`, so the
notebook shows the question, the prediction and the verdict, and tests check the arithmetic.

Usage::

    q = fit_quality([p for p in points if p.op == "all_reduce"], fits["all_reduce"])
    check = ring_check(points3, fits["all_reduce"])  # a 3-process sweep against the 2-process fit
    print(q.median_rel_error, check.median_ratio)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfkit import stats
from perfkit._checks import check_int, check_items, check_type
from perfkit.comm.alpha_beta import UNRESOLVED_BANDWIDTH, AlphaBeta, fit_alpha_beta, ring_allreduce_time
from perfkit.comm.collectives import CollectivePoint
from perfkit.comm.ring import held_by_text, measured_rate_text
from perfkit.units import si

__all__ = ["FitQuality", "RingCheck", "fit_quality",
           "ring_check", "ring_check_text", "ring_regime_text", "small_sizes_text"]


@dataclass(frozen=True)
class FitQuality:
    """How well an alpha-beta fit describes its points: the median relative error, the point
    it misses most, the first pair of sizes whose larger one took clearly less time (no model
    in which time grows with size fits it; ``None`` if none), and ``why``: a sentence for a
    miss, built from those measured points."""

    median_rel_error: float
    worst: CollectivePoint
    inversion: tuple[CollectivePoint, CollectivePoint] | None
    why: str


def _spread(p: CollectivePoint) -> str:
    if p.p10_s is None or p.p90_s is None:
        return "unknown"
    return f"{si(p.p10_s, 's')}-{si(p.p90_s, 's')}"


def _points(points: Sequence[CollectivePoint]) -> list[CollectivePoint]:
    """The points as a list, each a :class:`CollectivePoint` (a dict from a job's JSON is not)."""
    items = check_items("points", points)
    return [check_type(f"points[{i}]", p, CollectivePoint) for i, p in enumerate(items)]


def fit_quality(points: Sequence[CollectivePoint], fit: AlphaBeta) -> FitQuality:
    """The fit's median relative error over ``points`` (one collective) and why it misses.

    Args:
        points: the measured points of one collective (>= 1).
        fit: the alpha-beta fit of those points.

    Returns:
        A :class:`FitQuality`. An inversion counts when the larger size took under 0.8x the
        smaller's time; ``why`` then says whether the two sizes' repetitions (p10-p90) overlap
        (which cannot tell noise from a real inversion: it does not compare the medians) or
        not (something other than size set the time).

    Raises:
        TypeError, ValueError: for no points, a point that is not a CollectivePoint, or a
            ``fit`` that is not an AlphaBeta.
    """
    pts = sorted(_points(points), key=lambda p: p.nbytes)
    check_type("fit", fit, AlphaBeta)
    errs = [abs(fit.predict(p.nbytes) / p.time_s - 1) for p in pts]
    worst = pts[int(np.argmax(errs))]
    inv = next(((a, b) for a, b in zip(pts, pts[1:]) if b.time_s < 0.8 * a.time_s), None)
    if inv is None:
        why = (f"Time grows with size, but not along one line: the fit is furthest off at "
               f"{si(worst.nbytes, 'B')} (measured {si(worst.time_s, 's')}, fit "
               f"{si(fit.predict(worst.nbytes), 's')}).")
    else:
        small, large = inv
        why = (f"{si(large.nbytes, 'B')} took {si(large.time_s, 's')}, less than {si(small.nbytes, 'B')}'s "
               f"{si(small.time_s, 's')}; their repetitions (p10-p90: {_spread(large)} against "
               f"{_spread(small)}) ")
        overlap = large.p90_s is None or small.p10_s is None or large.p90_s >= small.p10_s
        why += ("overlap, and the sweep keeps no interval for its medians: this run cannot tell "
                "whether the inversion is noise." if overlap else
                "do not overlap: something other than size set the time, which this run does not "
                "measure.")
    return FitQuality(float(np.median(errs)), worst, inv, why)


def small_sizes_text(points: Sequence[CollectivePoint], fit: AlphaBeta, short: bool = False) -> str:
    """What the sizes at or below the fit's crossover (``alpha x bandwidth``; every size where
    the fit has no bandwidth term) measured, against the model's claim that a small message
    costs about ``alpha`` whatever its size: their fastest and slowest times, how far apart,
    and the furthest any of them lies from the fitted line. It says they cost about alpha only
    where they lie within 1.3x of each other and within 25 % of the line; ``short`` gives
    one clause for a summary.

    Raises:
        TypeError, ValueError: for no points, a point that is not a CollectivePoint, or a
            ``fit`` that is not an AlphaBeta.
    """
    pts = sorted(_points(points), key=lambda p: p.nbytes)
    check_type("fit", fit, AlphaBeta)
    cross = fit.half_bandwidth_bytes if fit.bandwidth < UNRESOLVED_BANDWIDTH else math.inf
    where = "below the crossover" + (f" ({si(cross, 'B')})" if math.isfinite(cross) else " (every size: no "
                                     "bandwidth term)")
    low = [p for p in pts if p.nbytes <= cross]
    if not low:
        return f"No size measured lies {where}."
    fast, slow = min(low, key=lambda p: p.time_s), max(low, key=lambda p: p.time_s)
    far = max(low, key=lambda p: abs(p.time_s / fit.predict(p.nbytes) - 1))
    dev = far.time_s / fit.predict(far.nbytes) - 1
    flat = slow.time_s <= 1.3 * fast.time_s and abs(dev) <= 0.25
    span = (f"{len(low)} size{'s' * (len(low) != 1)} {where} took {si(fast.time_s, 's')} "
            f"({si(fast.nbytes, 'B')}) to {si(slow.time_s, 's')} ({si(slow.nbytes, 'B')}), "
            f"{slow.time_s / fast.time_s:.2g}x apart")
    if short:
        return span + (": about alpha each" if flat else ": not one fixed cost per call")
    return (f"The {span}, against the fit's alpha of {si(fit.alpha_s, 's')}; the furthest from the line is "
            f"{si(far.nbytes, 'B')}, {si(far.time_s, 's')} against the line's "
            f"{si(fit.predict(far.nbytes), 's')} ({dev:+.0%})" + (
                ". There a call costs about alpha whatever its size." if flat else
                (". A larger size ran faster than a smaller one there" if fast.nbytes > slow.nbytes else "")
                + ". So alpha is here no fixed cost each small call pays, only the line's intercept; the "
                "small calls' own times are the measurements above."))


@dataclass(frozen=True)
class RingCheck:
    """Measured all-reduce times against the ring model on ``world_size`` processes:
    ``ratios`` (measured / model, by size; ``low_ratios``/``high_ratios`` the same for each size's
    p10 and p90 repetitions, ``None`` where unknown), the processes-over-cores ``stretch`` the model
    is multiplied by, and the model's ``crossover_bytes`` (its latency term equal to its bytes'
    term): the first ``split`` sizes lie at or below it (latency-bound), the rest above it."""

    world_size: int
    cores: int
    stretch: float
    nbytes: tuple[int, ...]
    model_s: tuple[float, ...]
    ratios: tuple[float, ...]
    median: float
    crossover_bytes: float
    split: int
    low_ratios: tuple[float | None, ...] = ()
    high_ratios: tuple[float | None, ...] = ()

    def regime(self, latency_bound: bool) -> stats.Estimate | None:
        """The median ratio of the sizes at or below the crossover (``True``) or above it, with the
        sizes' own range (their smallest to largest ratio: a spread over sizes, not a confidence
        interval; for one size, its p10 to p90 repetitions, where known); ``None`` when no size lies
        there."""
        part = slice(0, self.split) if latency_bound else slice(self.split, None)
        r, lo, hi = self.ratios[part], self.low_ratios[part], self.high_ratios[part]
        if not r:
            return None
        v, n = float(np.median(r)), len(r)
        if n > 1:
            return stats.Estimate(v, min(r), max(r), None, n, f"the {n} sizes' own spread, smallest to "
                                  "largest ratio; a spread, not a confidence interval")
        known = len(lo) == 1 == len(hi) and lo[0] is not None and hi[0] is not None
        return stats.Estimate(v, min(v, lo[0]) if known else v, max(v, hi[0]) if known else v, None, 1,
                              "p10 to p90 of its repetitions, one size" if known else "one size")


def ring_check(points: Sequence[CollectivePoint], fit2: AlphaBeta, cores: int | None = None) -> RingCheck:
    """Hold an all-reduce sweep on ``n`` processes against the ring built from a 2-process fit.

    A 2-process ring makes two steps of ``S/2``, so one step costs ``alpha / 2`` plus the
    bytes over the same bandwidth; ``P`` processes on ``C`` cores run at ``C / P`` speed once
    ``P > C``, and the 2-process fit already carries its own share of that, so the model is
    stretched by ``max(1, n / C) / max(1, 2 / C)``. The ring's latency term, ``(n-1) alpha``,
    equals its bytes' term, ``2(n-1)/n S / bandwidth``, at ``S = n alpha bandwidth / 2`` (infinite
    where the fit has no bandwidth term: every size latency-bound).

    Args:
        points: one all-reduce sweep, every point on the same ``world_size`` (>= 2).
        fit2: the 2-process all-reduce fit.
        cores: cores this process may use (default: its affinity set).

    Returns:
        A :class:`RingCheck`.

    Raises:
        TypeError, ValueError: for no points, mixed world sizes, or ``cores`` below 1.
    """
    pts = sorted(_points(points), key=lambda p: p.nbytes)
    check_type("fit2", fit2, AlphaBeta)
    n = pts[0].world_size
    if any(p.world_size != n for p in pts) or n < 2:
        raise ValueError(f"points must share one world_size >= 2, got {sorted({p.world_size for p in pts})}")
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    check_int("cores", cores, 1)
    stretch = max(1, n / cores) / max(1, 2 / cores)
    link = AlphaBeta(fit2.alpha_s / 2, fit2.bandwidth)
    model = [ring_allreduce_time(p.nbytes, n, link) for p in pts]
    ratios = [p.time_s / m for p, m in zip(pts, model, strict=True)]
    cross = n * fit2.alpha_s * fit2.bandwidth / 2 if fit2.bandwidth < UNRESOLVED_BANDWIDTH else math.inf  # B
    return RingCheck(n, cores, stretch, tuple(p.nbytes for p in pts), tuple(model), tuple(ratios),
                     float(np.median(ratios)), cross, sum(p.nbytes <= cross for p in pts),
                     tuple(None if p.p10_s is None else p.p10_s / m for p, m in zip(pts, model, strict=True)),
                     tuple(None if p.p90_s is None else p.p90_s / m for p, m in zip(pts, model, strict=True)))


def _moved(x: float) -> str:
    """How a measured term compares with the model's: ``"grew 2.6x"``, ``"fell to 0.78x"``."""
    return (f"grew {x:.2g}x" if x >= 1.1 else f"fell to {x:.2g}x" if x <= 1 / 1.1 else
            f"stayed near it ({x:.2g}x)")


def _regimes(check: RingCheck) -> str:
    """Where the ratios split, from the ratios alone: at the largest jump between neighbouring sizes,
    when the two sides' ranges lie further apart than either side spreads."""
    r, b = check.ratios, check.nbytes
    rng = f"{min(r):.2f}x to {max(r):.2f}x"
    if len(r) < 2:
        return f"The one size ran {rng} the ring model."
    j = max(range(len(r) - 1), key=lambda i: abs(math.log(r[i + 1] / r[i])))
    a, c = r[:j + 1], r[j + 1:]
    gap = max(min(a) / max(c), min(c) / max(a))  # > 1: the two sides' ranges do not overlap
    if gap <= max(max(a) / min(a), max(c) / min(c)):
        return (f"Per size, the ratios ran from {rng} the ring model, with no jump between neighbouring "
                "sizes that splits them into two regimes (the verdicts below split the sizes at the model's "
                "crossover).")
    side = [f"{si(b[0], 'B')} to {si(b[j], 'B')} at {min(a):.2f}x to {max(a):.2f}x",
            f"{si(b[j + 1], 'B')} to {si(b[-1], 'B')} at {min(c):.2f}x to {max(c):.2f}x"]
    at = ("at that jump" if check.split == j + 1 else "above that jump" if check.split > j + 1 else
          "below that jump")
    return (f"Per size, the ratios fall into two regimes: {side[0]} the ring model, {side[1]}. "
            + (f"The model's crossover, {si(check.crossover_bytes, 'B')}, where the verdicts below split the "
               f"sizes, lies {at}." if math.isfinite(check.crossover_bytes) else
               "The 2-process fit has no bandwidth term, so the model calls every size latency-bound."))


def ring_check_text(check: RingCheck, points: Sequence[CollectivePoint], fit2: AlphaBeta,
                    points2: Sequence[CollectivePoint] | None = None) -> str:
    """Why a ring check lands where it does, from what it measured: where the per-size ratios split
    into two regimes (if they do), any larger size that ran over 1.2x faster than a smaller one (the
    widest such pair), then an alpha-beta fit to the ``n``-process ``points`` themselves
    against the ring model's latency (its time at 0 bytes) and bandwidth on ``n`` processes, and how
    each term moved (processes waiting to be scheduled stretch the latency; a shared core's copying
    and summing stretch the bytes' time). Where the bytes moved faster than the 2-process fit's
    bandwidth allows, ``points2`` (the 2-process sweep fitted to ``fit2``) gives the ring's rate on
    ``n`` processes from the 2-process largest message's own algbw (``n / (2(n-1))`` of it), which a
    log-time fit's bandwidth can lie below.

    Raises:
        TypeError, ValueError: for a ``check`` that is not a :class:`RingCheck`, fewer than two
            points, or a ``fit2`` that is not an :class:`AlphaBeta`.
    """
    check_type("check", check, RingCheck)
    check_type("fit2", fit2, AlphaBeta)
    pts = check_items("points", points)
    for p in pts:
        check_type("points[i]", p, CollectivePoint)
    if len(pts) < 2:
        raise ValueError(f"points must hold at least 2 sizes to fit, got {len(pts)}")
    fit = fit_alpha_beta([p.nbytes for p in pts], [p.time_s for p in pts])
    ring0 = ring_allreduce_time(0, check.world_size, AlphaBeta(fit2.alpha_s / 2, fit2.bandwidth))  # s
    lat_x = fit.alpha_s / ring0 if ring0 > 0 else float("inf")
    n = check.world_size
    model_bw = fit2.bandwidth * n / (2 * (n - 1))  # the ring's algbw on n processes: 2(n-1)/n of S per link
    srt = sorted(pts, key=lambda p: p.nbytes)  # below: the widest inversion, srt[i] smaller and slower
    x, i, j = max((srt[i].time_s / srt[j].time_s, i, j) for j in range(len(srt)) for i in range(j))
    inverted = ("" if x <= 1.2 else " A larger message ran faster than a smaller one: "
                f"{si(srt[j].nbytes, 'B')} in {si(srt[j].time_s, 's')}, {si(srt[i].nbytes, 'B')} in "
                f"{si(srt[i].time_s, 's')}; not measured why.")
    text = (f"{_regimes(check)}{inverted} Fitted to the {n} processes' own times, the latency is "
            f"{si(fit.alpha_s, 's')} against the ring model's {si(ring0, 's')}, and the bandwidth ")
    if fit.bandwidth >= UNRESOLVED_BANDWIDTH:
        return text + f"unresolved (the times did not grow with size): the latency {_moved(lat_x)}."
    if fit2.bandwidth >= UNRESOLVED_BANDWIDTH:
        return text + (f"{si(fit.bandwidth, 'B/s')}, where the 2-process fit has none to compare: the "
                       f"latency {_moved(lat_x)}.")
    bytes_x = model_bw / fit.bandwidth  # the bytes' time, measured over the model's
    pace = ("about as fast" if abs(bytes_x - 1) < 0.05 else
            f"{max(bytes_x, 1 / bytes_x):.2g}x {'faster' if bytes_x < 1 else 'slower'}")
    text += (f"{si(fit.bandwidth, 'B/s')} against its {si(model_bw, 'B/s')} ({pace}): against the model, "
             f"the latency {_moved(lat_x)} and the bytes' time {_moved(bytes_x)}")
    if lat_x >= 1.1 and lat_x > bytes_x:
        return text + (": the pattern processes waiting to be scheduled would give, but this run does not "
                       "measure scheduling waits." if bytes_x > 1 / 1.1 else
                       ". Waiting to be scheduled can lengthen the latency, but does not explain bytes that "
                       "moved faster than the 2-process fit, as these did, against the core stretch"
                       + (measured_rate_text(points2, n, fit) if points2 else
                          ", and this run does not measure why."))
    if bytes_x >= 1.1 and bytes_x >= lat_x:
        return text + ", as a shared core's slower copying and summing would make it."
    return text + "."


def ring_regime_text(check: RingCheck, latency_bound: bool, band: tuple[float, float] | None = None,
                     held: bool = False) -> str:
    """A sentence on one regime of a ring check (the sizes at or below the crossover, or above it):
    their ratios to the plain ring model and to the stretched one, and which the median lies nearer
    (on a log scale, where the stretch is a factor). Between the two models, the nearer one is
    named only when the median's distances to them differ by more than half the sizes' own spread
    (the log of their largest ratio over their smallest); else the sentence says the spread
    leaves it open. By the same rule, a median above the stretched model (below the plain one)
    is called above (below) it only when it lies further from it than half that spread. With
    ``band`` (the ``(low, high)`` a verdict judges the median against), it names each size
    whose own ratio lies outside it; ``held``: first ``held_by_text``.

    Raises:
        TypeError, ValueError: for a ``check`` that is not a :class:`RingCheck`, or no size there.
    """
    check_type("check", check, RingCheck)
    if band is not None:
        part = slice(0, check.split) if latency_bound else slice(check.split, None)
        out = [(nb, x) for nb, x in zip(check.nbytes[part], check.ratios[part], strict=True)
               if not band[0] <= x <= band[1]]
        said = ring_regime_text(check, latency_bound)
        if held and check.stretch != 1 and band[0] <= 1 and check.stretch <= band[1]:
            said = held_by_text(check.ratios[part], check.stretch, band) + " " + said
        return said if len(check.ratios[part]) < 2 else said + (" Per size, "
                       + ", ".join(f"{si(nb, 'B')} ({x:.2f}x)" for nb, x in out)
                       + f" lie{'s' * (len(out) == 1)} outside {band[0]:.2f}x to {band[1]:.2f}x." if out else
                       f" Every size's own ratio lies inside {band[0]:.2f}x to {band[1]:.2f}x too.")
    part = slice(0, check.split) if latency_bound else slice(check.split, None)
    r, b = check.ratios[part], check.nbytes[part]
    if not r:
        raise ValueError(f"no size lies {'at or below' if latency_bound else 'above'} the crossover")
    s, m = check.stretch, float(np.median(r))
    text = (f"{si(b[0], 'B')} to {si(b[-1], 'B')} ran {min(r):.2f}x to {max(r):.2f}x the plain ring model"
            if len(r) > 1 else f"{si(b[0], 'B')} ran {r[0]:.2f}x the plain ring model")
    if s == 1:
        return text + " (no stretch on these cores)."
    text += (f", {min(r) / s:.2f}x to {max(r) / s:.2f}x" if len(r) > 1 else f", {r[0] / s:.2f}x") + (
        f" the model stretched x {s:.2f}")
    to_plain, to_stretched = math.log(m), math.log(s / m)  # >= 0 between the two models
    half = math.log(max(r) / min(r)) / 2  # half the sizes' own spread, in log terms
    open_ = abs(to_plain - to_stretched) <= half  # the sizes' spread decides nothing
    spread = f"the sizes' own spread ({min(r):.2f}x to {max(r):.2f}x) allows"
    where = (f"near the stretched model: above it by less than {spread}" if 0 < math.log(m / s) <= half else
             f"near the plain model: below it by less than {spread}" if 0 < -math.log(m) <= half else
             "above even the stretched model" if m > s else "below even the plain model" if m < 1 else
             f"between the two, nearer neither by more than {spread}" if open_ else
             "nearer the plain model than the stretched one: this run does not show the stretch there, "
             "nor measure why" if to_plain < to_stretched else
             "nearer the stretched model than the plain one")
    below = sum(x < s for x in r)  # sizes faster than the stretched model, as stated
    return text + f": their median lies {where}." + (
        (" Every one of them" if len(r) > 1 else " It") + f" ran below the model stretched x {s:.2f}: the "
        "stretch by max(1, P / C) misses at these sizes, and the verdict's band, wide enough for the plain "
        "model too, "
        "does not judge it." if below == len(r) else "")
