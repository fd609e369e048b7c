"""How a verdict reads a measurement and words what decided it.

:mod:`perfkit.verdict` decides; this module says why, with the numbers that decided: the
figure and its interval printed at one precision (the point visibly inside), how far the
figure lies from the edge it was judged against and how far its interval reaches past it,
the interval's width against the prediction's tolerance and the samples behind it, too few
samples for an interval, and, where the machine's load is named, its size (the load
average per core) beside the noise it left in the measurement (the interval's width).

Usage::

    r = reading(stats.median_ratio(t_new, t_old), None)
    r.shown("x")                       # '1.31x (90% interval 1.2x to 1.45x, median of 7 paired ratios)'
    r.across(1.34, (1.0, 1.34), "x")   # why an interval across the edge 1.34x decides nothing
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from perfkit.estimate import Estimate
from perfkit.units import si, si_interval

__all__ = ["Reading", "busy", "machine_state", "machine_text", "reading"]


def _apart(d: float, unit: str) -> str:
    """A distance between two figures in ``unit``: bare for a ratio (``"x"``), since the
    difference of two ratios is no factor (1.42x and 1.71x lie 0.29 apart, not "0.29x")."""
    return si(d, "" if unit == "x" else unit)


def machine_state() -> dict[str, float]:
    """What a verdict may cite about the machine now: the 1-minute ``load``, ``cores`` and
    torch's intra-op ``threads`` (when torch is imported). Missing readings are left out."""
    out: dict[str, float] = {"cores": float(os.cpu_count() or 1)}
    try:
        out["load"] = os.getloadavg()[0]
    except OSError:  # not available on this platform
        pass
    if (torch := sys.modules.get("torch")) is not None:
        out["threads"] = float(torch.get_num_threads())
    return out


def busy() -> str:
    """``"the machine was busy (load average 5.2 on 2 cores)"`` when the 1-minute load average
    exceeds the cores (timings taken one after the other can then differ by load alone), else ``""``."""
    m = machine_state()
    if "load" not in m or m["load"] <= m["cores"]:
        return ""
    return f"the machine was busy (load average {m['load']:.1f} on {m['cores']:.0f} cores)"


def machine_text() -> str:
    """``"load average 5.2 on 2 cores, 2 torch threads"``: the machine now, for a disturbed figure."""
    m = machine_state()
    parts = [f"load average {m['load']:.1f} on {m['cores']:.0f} cores" if "load" in m
             else f"{m['cores']:.0f} cores"]
    if "threads" in m:
        parts.append(f"{m['threads']:.0f} torch threads")
    return ", ".join(parts)


@dataclass(frozen=True)
class Reading:
    """A measurement as a verdict reads it: the ``value``, its ``interval`` (``None`` when it
    has none: exact, tied samples, or too few samples), the interval's ``level`` and
    ``words`` ("90% interval", "spread"), the ``n`` samples behind it and, when they are too
    few for an interval, the number it ``needs``; ``estimate`` is the one it came from."""

    value: float
    interval: tuple[float, float] | None
    level: float | None
    words: str
    n: int | None = None
    needs: int | None = None
    estimate: Estimate | None = None

    def shown(self, unit: str, edges: tuple[float, ...] = ()) -> str:
        """The figure and its interval at one precision: ``"1.31x (90% interval 1.2x to
        1.45x, median of 7 paired ratios)"``; a tie or a missing interval says so. Where the
        figure would print like one of ``edges`` (a prediction's ends) without equalling it,
        it prints with the digits that show its side: ``0.89973x`` against ``0.9x``, not ``0.900x``."""
        digits = 3
        while digits < 8 and any(math.isfinite(e) and e != self.value and math.isfinite(self.value)
                                 and si(e, unit, digits) == si(self.value, unit, digits) for e in edges):
            digits += 1
        if self.needs is not None:
            return (f"{si(self.value, unit, digits)} ({self.n} sample{'s' * (self.n != 1)}: "
                    "too few for an interval)")
        if self.estimate is not None and self.interval is None and self.estimate.level is not None:
            return self.estimate.text(unit)
        if self.interval is None:
            return si(self.value, unit, digits)
        lo, hi = self.interval
        if not (math.isfinite(self.value) and math.isfinite(lo) and math.isfinite(hi)):
            return f"{si(self.value, unit)} ({self.words} {si(lo, unit)} to {si(hi, unit)})"
        v, lo, hi = si_interval(self.value, lo, hi, unit, digits)
        how = f", {self.estimate.method}" if self.estimate is not None else ""
        return f"{v} ({self.words} {lo} to {hi}{how})"

    def too_few(self) -> str:
        """``"3 samples, fewer than the 5 an interval at this level needs"``."""
        return (f"{self.n} sample{'s' * (self.n != 1)}, fewer than the {self.needs} an interval at "
                f"this level ({self.level:.0%}) needs")

    def gap(self, edge: float, unit: str, direction: str) -> str:
        """``"1.53x is 14% above 1.34x"``: how far the figure lies past ``edge``."""
        measured = self.value
        gap = abs(measured / edge - 1) if edge else 0.0
        pct = f"{gap:.0%}" if gap >= 0.005 else f"{gap * 100:.2g}%"  # a miss never reads "0% above"
        shown, edge_shown = si(measured, unit), si(edge, unit)
        if shown == edge_shown:  # 3 digits hide the gap: show the digits that differ
            shown, edge_shown = f"{measured:.6g}{unit}", f"{edge:.6g}{unit}"
        return (f"{shown} is {pct} {direction} {edge_shown}" if edge
                else f"{shown} is {si(abs(measured - edge), unit)} {direction} {edge_shown}")

    def reaches_back(self, edge: float, unit: str) -> str:
        """For a crossed bound whose interval reaches back across it: how far, and why the
        point still decides."""
        lo, hi = self.interval
        back = edge - lo if self.value > edge else hi - edge
        return (f"; its {self.words} reaches back across the bound by {_apart(back, unit)}, "
                "so a repeat could land inside it and this one run is weak evidence of the miss; but a "
                "bound claims that no measurement crosses it, and this one did")

    def across(self, edge: float, band: tuple[float, float], unit: str) -> str:
        """Why an interval across ``edge`` decides nothing: the figure's distance from the edge,
        how far the interval reaches past it on the other side, and the interval's width
        from its samples against the width of the predicted ``band`` (when both ends are finite)."""
        lo, hi = self.interval
        past = edge - lo if self.value >= edge else hi - edge
        side = "below" if self.value >= edge else "above"
        digits = 3  # more where the edge and an end of the interval would print alike
        while digits < 8 and (si(edge, unit, digits) in si_interval(self.value, lo, hi, unit, digits)[1:]):
            digits += 1
        _, slo, shi = si_interval(self.value, lo, hi, unit, digits)
        text = (f"the {self.words} ({slo} to {shi}) reaches across the edge {si(edge, unit, digits)}: the "
                f"figure lies {_apart(abs(self.value - edge), unit)} from it, the interval reaches "
                f"{_apart(past, unit)} {side} it")
        other = band[1] if edge == band[0] else band[0]  # the band's other edge
        if math.isfinite(other) and lo < other < hi:
            text += (f", and across the other edge, {si(other, unit)}, too, by "
                     f"{_apart(hi - other if other > edge else other - lo, unit)}")
        samples = f" from {self.n} samples" if self.n else ""
        width = hi - lo
        if all(math.isfinite(b) for b in band) and band[1] > band[0]:
            text += (f"; the interval is {_apart(width, unit)} wide{samples}, the predicted range "
                     f"{_apart(band[1] - band[0], unit)} wide")
            if width > band[1] - band[0]:
                text += " (narrower than the interval: only more samples, or less noise, can decide)"
        elif samples:
            text += f"; the interval is {_apart(width, unit)} wide{samples}"
        return text

    def load(self) -> str:
        """``" (When judged: load average 5.2 on 2 cores, 2.6 runnable tasks per core, this
        run's own processes included; the 90% interval is 23% of the figure wide.)"`` when the
        load exceeds the cores, else ``""``. The load average counts every runnable task, the
        measurement's own processes and threads too: it sizes the contention, and does not
        say that other jobs ran."""
        m = machine_state()
        if "load" not in m or m["load"] <= m["cores"]:
            return ""
        text = (f" (When judged: load average {m['load']:.1f} on {m['cores']:.0f} cores, "
                f"{m['load'] / m['cores']:.1f} runnable tasks per core, this run's own processes included")
        if self.interval is not None and self.value:
            spans = (self.interval[1] - self.interval[0]) / abs(self.value)
            wide = f"{spans:.2g}x the figure" if spans >= 1 else f"{spans:.0%} of the figure"
            text += f"; the {self.words} is {wide} wide"
        return text + ".)"


def reading(measured: float | Estimate, spread: tuple[float, float] | None) -> Reading:
    """``measured`` as a :class:`Reading`: from an :class:`Estimate` (its interval, or none
    when it is exact, tied or short of samples), or from a plain number, exact or with
    ``spread`` (``(low, high)``, widened to hold the number: a figure outside its own spread
    reads wrong).

    Raises:
        TypeError: for a ``measured`` that is neither a number nor an Estimate.
        ValueError: for a ``spread`` given with an Estimate, or one that is not
            ``(low, high)`` with ``low <= high``.
    """
    if isinstance(measured, Estimate):
        if spread is not None:
            raise ValueError("give spread only with a plain number: an Estimate carries its interval")
        e = measured
        words = e.label if e.level is not None else "range"
        interval = None if e.low == e.high else e.spread
        return Reading(e.value, interval, e.level, words, e.n, e.needs, e)
    if isinstance(measured, bool) or not isinstance(measured, (int, float)):
        raise TypeError(f"measured must be a number or a perfkit.stats.Estimate, got {measured!r}")
    if spread is None:
        return Reading(float(measured), None, None, "")
    if len(spread) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in spread) \
            or spread[0] > spread[1]:
        raise ValueError(f"spread must be (low, high) with low <= high, got {spread!r}")
    lo, hi = float(spread[0]), float(spread[1])
    if math.isfinite(measured):
        lo, hi = min(lo, measured), max(hi, measured)
    return Reading(float(measured), (lo, hi) if lo < hi else None, None, "spread")
