"""Notebook 02's summary of its alpha-beta fits: for every collective, whether the fit's median
relative error lies within the limit the notebook expected, and whether its busbw fell at the large
sizes, where the model expects it to approach a bandwidth.

Usage::

    print(fits_text({op: fit_quality(pts, fits[op]) for op, pts in by_op.items()}, by_op, 0.25))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfkit._checks import check_real, check_type
from perfkit.comm.alpha_beta import UNRESOLVED_BANDWIDTH, AlphaBeta
from perfkit.comm.collectives import CollectivePoint, busbw_fall_text
from perfkit.comm.experiments import FitQuality
from perfkit.units import si

__all__ = ["fits_text"]


def _printed(x: float) -> float:
    """``x`` at the 3 significant digits :func:`~perfkit.units.si` prints it with."""
    return float(f"{x:.3g}")


def _beside_line_text(fits: Mapping[str, AlphaBeta], points: Mapping[str, Sequence[CollectivePoint]],
                      below: float) -> str:
    """Sentences (each starting with a space) on what no line ``t = alpha + S / bandwidth`` with
    ``alpha > 0`` allows: a size whose algbw (``S / t``) beat the fit's bandwidth, and a larger size
    that took under ``below`` times the next smaller one's time beyond the first such pair
    (:func:`~perfkit.comm.fit_quality` names that one)."""
    beat, pairs = [], []
    for op, f in fits.items():
        check_type(f"fits[{op!r}]", f, AlphaBeta)
        pts = sorted(points[op], key=lambda p: p.nbytes)
        fast = [p for p in pts if f.bandwidth < UNRESOLVED_BANDWIDTH and f.alpha_s > 0
                and _printed(p.nbytes / p.time_s) > _printed(f.bandwidth)]
        if fast:
            top = max(fast, key=lambda p: p.nbytes / p.time_s)
            beat.append(f"{op} at {', '.join(si(p.nbytes, 'B') for p in fast)} (up to "
                        f"{si(top.nbytes / top.time_s, 'B/s')} at {si(top.nbytes, 'B')} against "
                        f"{si(f.bandwidth, 'B/s')}; the line charges {si(f.predict(top.nbytes), 's')} there, "
                        f"{f.predict(top.nbytes) / top.time_s:.2g}x the {si(top.time_s, 's')} measured)")
        inv = [(a, b) for a, b in zip(pts, pts[1:]) if b.time_s < below * a.time_s][1:]
        pairs += [f"{op}'s {si(b.nbytes, 'B')} took {si(b.time_s, 's')}, {b.time_s / a.time_s:.2f}x "
                  f"{si(a.nbytes, 'B')}'s {si(a.time_s, 's')}" for a, b in inv]
    return ((" Measured rates beat the fit's bandwidth, which no line with alpha above 0 gives any size, so "
             "there the line charges more time than the call took: " + "; ".join(beat) + "." if beat else "")
            + (f" Beyond the first pair named above, a larger size also ran under {below}x the next smaller "
               "one's time: " + "; ".join(pairs) + "." if pairs else ""))


def fits_text(quality: Mapping[str, FitQuality], points: Mapping[str, Sequence[CollectivePoint]],
              limit: float = 0.25, fits: Mapping[str, AlphaBeta] | None = None) -> str:
    """For every collective, whether its fit's median relative error (``quality``, from
    :func:`fit_quality`) lies within ``limit``, and whether its busbw fell at the large sizes
    (:func:`~perfkit.comm.busbw_fall_text` on its ``points``): a sentence that says of how many
    collectives the line describes the typical size, and of how many the large end, never that the
    model fits one where either fails. With the ``fits`` (the AlphaBeta of each collective), it
    also names every size whose algbw beat its fit's bandwidth, which no line with ``alpha > 0``
    allows, and every larger size that took under 0.8x the next smaller one's time beyond the first
    such pair (the one :func:`~perfkit.comm.fit_quality` names).

    Raises:
        TypeError, ValueError: for mappings that are not over the same collectives, a ``quality``
            value that is not a FitQuality, a ``fits`` value that is not an AlphaBeta, or a
            ``limit`` not above 0.
    """
    check_type("quality", quality, Mapping)
    check_type("points", points, Mapping)
    check_real("limit", limit, 0, lo_open=True)
    if not quality or set(quality) != set(points):
        raise ValueError(f"quality and points must name the same collectives, got {sorted(quality)} and "
                         f"{sorted(points)}")
    for op in quality:
        check_type(f"quality[{op!r}]", quality[op], FitQuality)
    if fits is not None:
        check_type("fits", fits, Mapping)
        if set(fits) != set(quality):
            raise ValueError(f"fits must name the same collectives as quality, got {sorted(fits)}")
    tail = "" if fits is None else _beside_line_text(fits, points, 0.8)
    ops = list(quality)
    within = [op for op in ops if quality[op].median_rel_error <= limit]
    fell = [op for op in ops if busbw_fall_text(points[op])]

    def named(xs: list[str]) -> str:
        return ", ".join(f"{op} ({quality[op].median_rel_error:.0%})" for op in xs)

    out = (f"Against the {limit:.0%} expected of the median relative error: "
           + (f"within it, {named(within)}" if within else "no fit within it")
           + (f"; above it, {named([op for op in ops if op not in within])}: for "
              + ("that collective" if len(ops) - len(within) == 1 else "those collectives")
              + " the line does not describe even the typical size" if len(within) < len(ops) else "") + ". ")
    if not fell:
        return out + "No collective's busbw fell at the large sizes, as the model expects." + tail
    typical = f"the typical size of {len(within)} of the {len(ops)} collectives"
    return out + (f"The busbw of {'every collective' if len(fell) == len(ops) else ', '.join(fell)} fell at "
                  "the large sizes (above), where the model expects it to approach the bandwidth: the line "
                  + (f"describes {typical} and the large end of none of them." if len(fell) == len(ops) else
                     f"does not describe their large end; it describes {typical}.") + tail)
