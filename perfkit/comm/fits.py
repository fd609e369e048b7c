"""Notebook 02's summary of its alpha-beta fits: for every collective, whether the fit's median
relative error lies within the limit the notebook expected, and whether its busbw fell at the large
sizes, where the model expects it to approach a bandwidth.

Usage::

    print(fits_text({op: fit_quality(pts, fits[op]) for op, pts in by_op.items()}, by_op, 0.25))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfkit._checks import check_choice, check_int, check_items, check_real, check_type
from perfkit.comm.alpha_beta import UNRESOLVED_BANDWIDTH, AlphaBeta
from perfkit.comm.collectives import OPS, CollectivePoint, bus_factor, busbw_fall_text
from perfkit.comm.experiments import FitQuality
from perfkit.comm.ring import fit_below_text
from perfkit.units import si

__all__ = ["fits_table", "fits_text", "loopback_copy_share"]


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


def loopback_copy_share(op: str, world_size: int) -> float:
    """The share of a one-buffer copy rate (a buffer's bytes copied once per second) that ``op``'s
    busbw is expected to stay below, by counting copies, on ``world_size`` gloo processes on one
    machine over loopback TCP: every byte a process sends is copied into a kernel buffer by the
    sender and out of one by the receiver, 2 copies per byte sent, all on one memory, while busbw
    counts ``bus_factor(op, n) * S`` per call (:func:`~perfkit.comm.bus_factor`). So the share is
    that busbw count over twice the bytes all processes send:

    - a ring all-reduce, reduce-scatter or all-gather: each process sends ``bus_factor * S``, so
      ``1 / (2n)``: a quarter on 2 processes;
    - gloo's reduce-scatter all-reduces the whole buffer and keeps a slice (PyTorch pull request
      118911): an all-reduce's bytes for half its busbw factor, ``1 / (4n)``;
    - a broadcast: each of the ``n - 1`` other processes receives ``S`` once, so
      ``1 / (2(n - 1))``: a half on 2 processes (only the root sends, only the peer receives).

    An expectation, not a physical bound: a copy through kernel buffers the cache holds runs faster
    than a DRAM-sized one.

    Raises:
        ValueError: for an op not in :data:`~perfkit.comm.OPS`, or ``world_size`` below 2.
    """
    check_choice("op", op, OPS)
    n = check_int("world_size", world_size, 2)
    sent = {"all_reduce": 2 * (n - 1), "reduce_scatter": 2 * (n - 1),  # x S, by all processes together
            "all_gather": n - 1, "broadcast": n - 1}[op]
    return bus_factor(op, n) / (2 * sent)


def _cells(op: str, q: FitQuality, pts: list[CollectivePoint], f: AlphaBeta, buffer_rate: float,
           limit: float, notes: list[str]) -> list[str]:
    """One row of :func:`fits_table`; appends the row's notes."""
    resolved = f.bandwidth < UNRESOLVED_BANDWIDTH
    top, last = max(pts, key=lambda p: p.busbw), pts[-1]
    share, expected = top.busbw / buffer_rate, loopback_copy_share(op, pts[0].world_size)
    fell = busbw_fall_text(pts)
    fast = [p for p in pts
            if resolved and f.alpha_s > 0 and _printed(p.nbytes / p.time_s) > _printed(f.bandwidth)]
    beat = "-"
    if fast:
        p = max(fast, key=lambda p: p.nbytes / p.time_s)
        beat = (f"{', '.join(si(x.nbytes, 'B') for x in fast)} (top {si(p.nbytes / p.time_s, 'B/s')} at "
                f"{si(p.nbytes, 'B')}, line {f.predict(p.nbytes) / p.time_s:.2g}x its {si(p.time_s, 's')})")
    inv = "-"
    if q.inversion is not None:
        notes.append(f"[{len(notes) + 1}] {op}: {q.why}")
        small, large = q.inversion
        inv = f"{si(large.nbytes, 'B')} < {si(small.nbytes, 'B')} [{len(notes)}]"
        more = [(a, b) for a, b in zip(pts, pts[1:]) if b.time_s < 0.8 * a.time_s][1:]
        inv += "".join(f"; {si(b.nbytes, 'B')} {si(b.time_s, 's')} = {b.time_s / a.time_s:.2f}x "
                       f"{si(a.nbytes, 'B')}'s {si(a.time_s, 's')}" for a, b in more)
    if below := fit_below_text(pts, f).strip():
        notes.append(f"[{len(notes) + 1}] {op}: {below}")
        beat = (f"{si(pts[-1].nbytes, 'B')} under the line" if beat == "-" else beat) + f" [{len(notes)}]"
    return [op, si(f.alpha_s, "s"), si(f.bandwidth, "B/s") if resolved else "none (all latency-bound)",
            f"{q.median_rel_error:.1%}", "yes" if q.median_rel_error <= limit else "NO",
            f"{si(top.busbw, 'B/s')} at {si(top.nbytes, 'B')}",
            f"{share:.2g} (<= {expected:.3g}: {'below' if share <= expected else 'ABOVE'})",
            f"{si(last.busbw, 'B/s')} ({last.busbw / top.busbw:.2g}x peak)" if fell else "-", beat, inv]


def fits_table(quality: Mapping[str, FitQuality], points: Mapping[str, Sequence[CollectivePoint]],
               fits: Mapping[str, AlphaBeta], buffer_rate: float, limit: float = 0.25) -> str:
    """A fixed-width table of every collective's alpha-beta fit: alpha, bandwidth, median relative
    error and whether it lies within ``limit``; the peak busbw, as a share of ``buffer_rate`` (a
    buffer's bytes copied once per second), against that collective's own copy-count expectation
    (:func:`loopback_copy_share`); the largest size's busbw where it fell under 0.8x the peak
    (:func:`~perfkit.comm.busbw_fall_text`); the sizes whose algbw beat the fit's bandwidth, which no
    line with ``alpha > 0`` allows; and the larger sizes that took under 0.8x a smaller neighbour's
    time. Then a legend, one sentence on which collectives' busbw lay above their expectation, and
    numbered notes (the first inversion's repetitions, :func:`~perfkit.comm.fit_below_text`).

    Raises:
        TypeError, ValueError: for mappings that are not over the same collectives, a value of the
            wrong type, an op not in :data:`~perfkit.comm.OPS`, or ``buffer_rate`` or ``limit`` not
            above 0.
    """
    check_type("quality", quality, Mapping)
    check_type("points", points, Mapping)
    check_type("fits", fits, Mapping)
    check_real("buffer_rate", buffer_rate, 0, lo_open=True)
    check_real("limit", limit, 0, lo_open=True)
    if not quality or not set(quality) == set(points) == set(fits):
        raise ValueError(f"quality, points and fits must name the same collectives, got {sorted(quality)}, "
                         f"{sorted(points)} and {sorted(fits)}")
    notes: list[str] = []
    rows = [["collective", "alpha", "bandwidth", "median error", f"<= {limit:.0%}", "peak busbw",
             "share of copy (expected)", "busbw at largest", "rates beating the fit", "inversions"]]
    for op in quality:
        check_type(f"quality[{op!r}]", quality[op], FitQuality)
        check_type(f"fits[{op!r}]", fits[op], AlphaBeta)
        pts = sorted((check_type("points[i]", p, CollectivePoint) for p in check_items(f"points[{op!r}]",
                                                                                         points[op])),
                     key=lambda p: p.nbytes)
        rows.append(_cells(op, quality[op], pts, fits[op], buffer_rate, limit, notes))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    above = [r[0] for r in rows[1:] if r[6].endswith("ABOVE)")]
    within = sum(r[4] == "yes" for r in rows[1:])
    fell = sum(r[7] != "-" for r in rows[1:])
    lines += [
        f"bandwidth: the fit's, as algbw. share of copy: peak busbw over {si(buffer_rate, 'B/s')}; expected: "
        "at most, by counting copies, each byte sent copied into the kernel and out again on one memory "
        "(an expectation, not a bound).",
        "busbw at largest: where it fell under 0.8x the peak, larger messages did not approach a "
        "bandwidth, against the model; this run does not measure why.",
        "rates beating the fit: sizes whose algbw beat the fit's bandwidth, which no line with alpha above 0 "
        "gives any size: there the line charges more time than the call took (at the fastest, its time "
        "over the measured one).",
        "inversions: a larger size that took under 0.8x a smaller neighbour's time (the first with a note, "
        "any further with the two times); no line in which time grows with size describes it.",
        f"The median error lies within {limit:.0%} for {within} of the {len(rows) - 1} collectives; busbw "
        f"fell at the large sizes, where the model expects it to approach a bandwidth, for {fell} of them. "
        + ("Every collective's peak busbw lies below its own expectation." if not above else
           f"Above its own expectation: {', '.join(above)}; the copies there ran faster than a DRAM-sized "
           "copy, which the count does not allow, and this run does not measure which of them the cache "
           "served."),
        *notes]
    return "\n".join(lines)
