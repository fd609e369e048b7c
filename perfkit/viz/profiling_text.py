"""Notebook 01's sentences on one step against its peers and its roofs: the first step judged as
one sample against the steady steps' spread (:func:`first_step`), and the DRAM figure above which
a step placed under ``NEAR_ROOF`` of its roof stays so on either side of the ridge point
(:func:`neither_floor`), and a phase split's fixed costs and operator shares of their roofs held
against ``NEAR_ROOF`` (:func:`eta_split_text`). :mod:`perfkit.viz.profiling` re-exports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfkit.estimate import Estimate
from perfkit.stats import median, quantile

__all__ = ["eta_split_text", "first_step", "neither_floor"]


def first_step(times_s: Sequence[float], stall_x: float = 3.0) -> tuple[Any, dict[str, str]]:
    """The first of ``times_s`` over the median of the rest (the steady steps), as one sample
    judged against their spread, and a verdict's ``explain`` texts for "at least 1x".

    One step has no confidence interval, and the steady median's interval scaled by it covers
    the denominator only; so the estimate's range is the first step over the steady steps' p90
    to over their p10 (no level): a verdict holds only for a first step slower than their p90.
    The texts name the first step's rank among the steady steps and the chance that a step with
    no start-up cost ranks as high (``(n - k + 1) / (n + 1)`` for a step slower than ``k`` of
    ``n``: all ``n + 1`` steps exchangeable), and what a mean over every step would read.

    Raises:
        ValueError: for fewer than 3 times or a time that is not above 0.
    """
    if len(times_s) < 3 or not all(t > 0 for t in times_s):
        raise ValueError(f"times_s must hold at least 3 times above 0, got {list(times_s)!r}")
    first, rest = float(times_s[0]), [float(t) for t in times_s[1:]]
    n, steady = len(rest), median(rest)
    est = Estimate(first / steady, first / quantile(rest, 0.9), first / quantile(rest, 0.1), None, n,
                   f"the one first step over the p90 and the p10 of the {n} steady steps")
    k = sum(t < first for t in rest)
    stalls = [t for t in rest if t > stall_x * steady]
    mean_off = sum(times_s) / len(times_s) / steady - 1  # the mean of every step against the steady median
    steady_off = sum(rest) / n / steady - 1  # the steady steps' own mean against their median
    held = ("The first step is one sample, judged against the steady steps' spread: it was slower than "
            + (f"every one of the {n}" + (", stalls included" if stalls else "") if k == n else
               f"{k} of the {n}")
            + "; a step with no start-up cost ranks this high or higher with chance "
            + f"{(n - k + 1) / (n + 1):.0%}. "
            + (f"A steady step stalled as long or longer ({max(stalls) * 1e3:.1f} ms): a stall of that size "
               "could account for the first step too. " if k < n and stalls and max(stalls) >= first else "")
            + f"A benchmark that took the mean of all {n + 1} steps would read {abs(mean_off):.1%} "
            f"{'above' if mean_off >= 0 else 'below'} the steady median: "
            f"{(first - steady) / len(times_s) / steady:+.1%} from step 1 itself"
            + (f", {steady_off * n / len(times_s):+.1%} from the steady steps' own mean lying "
               f"{abs(steady_off):.1%} {'above' if steady_off >= 0 else 'below'} their median"
               if abs(steady_off) > 6e-4 else "")
            + (f" (a few slow steps pull the mean of the {n} steady steps up)" if steady_off > 0.001 else
               f" (a few fast steps pull the mean of the {n} steady steps down)" if steady_off < -0.001
               else "")
            + "; warm up first, and read medians.")
    return est, {
        "held": held,
        "inconclusive": "Slower than the steady steps' median but not than their p90, one step cannot tell a "
                        "start-up cost from the steps' own jitter in this run.",
        "below": f"The steady steps' median was {steady / first:.2f}x the first step: whatever step 1 paid "
                 "once was smaller than the steps' own jitter, or the machine slowed down after it."}


def neither_floor(where: Any, peak: float, near: float) -> float | None:
    """The DRAM figure (B/s) above which a step placed "neither" (``where``, a
    :class:`perfkit.compute.StepRoofline`) stays under ``near`` of its lower roof whichever
    side of the ridge point it falls on: its FLOP/s at the top of its interval over ``near``
    times its intensity; ``None`` for a step not placed "neither" or not under ``near`` of
    ``peak``."""
    rate = where.mfu.high * peak  # FLOP/s: the step's rate at the top of its interval
    if where.bound != "neither" or rate >= near * peak:
        return None
    return rate / (near * where.intensity)


def eta_split_text(fixed_s: float, phases_s: float, etas: tuple[float, float], near: float) -> str:
    """Where forward and backward's time went by the phase model (:class:`perfkit.compute.PhaseModel`):
    ``fixed_s`` of their ``phases_s`` seconds in fixed costs, the rest to operators at ``etas``
    (forward, backward) of their own roofs, each held against ``near`` (``NEAR_ROOF``): "near"
    them at or above it, "below" them under it. It states the measured split only: a share of the
    time is not a cause, so it names none; fixed costs over half the time are the larger part.

    Raises:
        ValueError: for times not above 0, ``fixed_s`` above ``phases_s``, or ``near`` outside (0, 1].
    """
    if not 0 < phases_s or not 0 <= fixed_s <= phases_s or not 0 < near <= 1:
        raise ValueError(f"need 0 <= fixed_s <= phases_s, phases_s > 0 and 0 < near <= 1; got "
                         f"fixed_s={fixed_s!r}, phases_s={phases_s!r}, near={near!r}")
    f, b = etas
    words = {e: "at least" if e >= near else "under" for e in (f, b)}
    held = (f"{words[f]} NEAR_ROOF ({near:.0%}) of them, so " + ("near" if f >= near else "below") + " them"
            if words[f] == words[b] else
            f"forward's {words[f]} and backward's {words[b]} NEAR_ROOF ({near:.0%}) of theirs")
    return (f"the phase split above puts {fixed_s * 1e3:.1f} ms of forward and backward's "
            f"{phases_s * 1e3:.1f} ms in fixed costs ({fixed_s / phases_s:.0%}"
            + ("; more than half: the fixed costs are the larger part" if fixed_s > phases_s / 2 else "")
            + f"), and the rest to operators running at {f:.0%} (forward) and {b:.0%} (backward) of their "
            "own roofs: "
            + held + " (module 06 measures operators' fixed costs and what their shapes cost)")
