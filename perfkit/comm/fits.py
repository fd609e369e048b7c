"""Notebook 02's summary of its alpha-beta fits: for every collective, whether the fit's median
relative error lies within the limit the notebook expected, and whether its busbw fell at the large
sizes, where the model expects it to approach a bandwidth.

Usage::

    print(fits_text({op: fit_quality(pts, fits[op]) for op, pts in by_op.items()}, by_op, 0.25))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfkit._checks import check_real, check_type
from perfkit.comm.collectives import CollectivePoint, busbw_fall_text
from perfkit.comm.experiments import FitQuality

__all__ = ["fits_text"]


def fits_text(quality: Mapping[str, FitQuality], points: Mapping[str, Sequence[CollectivePoint]],
              limit: float = 0.25) -> str:
    """For every collective, whether its fit's median relative error (``quality``, from
    :func:`fit_quality`) lies within ``limit``, and whether its busbw fell at the large sizes
    (:func:`~perfkit.comm.busbw_fall_text` on its ``points``): a sentence that says of how many
    collectives the line describes the typical size, and of how many the large end, never that the
    model fits one where either fails.

    Raises:
        TypeError, ValueError: for mappings that are not over the same collectives, a ``quality``
            value that is not a FitQuality, or a ``limit`` not above 0.
    """
    check_type("quality", quality, Mapping)
    check_type("points", points, Mapping)
    check_real("limit", limit, 0, lo_open=True)
    if not quality or set(quality) != set(points):
        raise ValueError(f"quality and points must name the same collectives, got {sorted(quality)} and "
                         f"{sorted(points)}")
    for op in quality:
        check_type(f"quality[{op!r}]", quality[op], FitQuality)
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
        return out + "No collective's busbw fell at the large sizes, as the model expects."
    typical = f"the typical size of {len(within)} of the {len(ops)} collectives"
    return out + (f"The busbw of {'every collective' if len(fell) == len(ops) else ', '.join(fell)} fell at "
                  "the large sizes (above), where the model expects it to approach the bandwidth: the line "
                  + (f"describes {typical} and the large end of none of them." if len(fell) == len(ops) else
                     f"does not describe their large end; it describes {typical}."))
