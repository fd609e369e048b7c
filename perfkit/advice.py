"""Advice under the microscope: a piece of advice as usually stated, the range it promises for
one measured figure, and the verdict on it computed by :mod:`perfkit.verdict`'s one rule.

Notebook 09 puts common performance advice ("mixed precision gives a 40-60 % speedup") to
the test on this machine. A :class:`Claim` holds the promise and the no-effect value that
separates "holds partly" (the right direction, not as far) from "does not hold here";
:func:`assess` judges a measurement and its interval against it, naming what decided (the
interval across the no-effect value, too few samples, the machine's load).

Usage::

    c = Claim("mixed precision gives a 40-60% speedup", "bf16 step speedup", low=1.4,
              high=1.6, partly=1.0, unit="x")
    v = assess(c, stats.median_ratio(t_fp32, t_bf16))
    print(v.status, v.text)   # holds partly ... measured 1.2x (93% interval ...)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from perfkit.estimate import Estimate
from perfkit.units import si
from perfkit.verdict_text import busy, reading

__all__ = ["CLAIM_STATUSES", "Claim", "ClaimVerdict", "assess"]

CLAIM_STATUSES = ("holds", "holds partly", "does not hold here", "inconclusive", "GPU only")


def _num(name: str, v: float | None) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise TypeError(f"{name} must be a number, got {v!r}")
    return float(v)


def _gap(spread: tuple[float, float], edge: float) -> float:
    """How far ``spread`` lies from ``edge``, as a fraction of it (0 where it holds it)."""
    if spread[0] > edge:
        return (spread[0] - edge) / abs(edge)
    return (edge - spread[1]) / abs(edge) if spread[1] < edge else 0.0


def _near(spread: tuple[float, float], edge: float, err: float) -> bool:
    """Whether ``spread`` lies within ``err`` (a fraction of ``edge``) of ``edge``: an interval that
    close cannot be told, by a design whose own error is ``err``, from one across it."""
    return edge != 0 and _gap(spread, edge) <= err


# a verdict that puts an interval on one side of an edge by less than this share of the A/A control's
# reach is decided by the reach's last digits, finer than one control measures it: said, not hidden
THIN = 0.1


def _beyond(gap: float, err: float) -> tuple[str, str, str]:
    """``gap`` and ``err`` (fractions) in percent, with the digits that tell them apart, and, where
    they lie within :data:`THIN` of ``err`` apart, the words that say how thin the margin is
    (``""`` otherwise)."""
    d = 1
    while d < 6 and f"{gap:.{d}%}" == f"{err:.{d}%}":
        d += 1
    m = abs(gap - err)
    thin = ("" if not err or m >= THIN * err else
            f" (by {100 * m:.2g} percentage points, {100 * m / err:.2g}% of that reach: one A/A control does "
            "not measure its reach that finely, so this side of the edge is the rule's call, not a finding)")
    return f"{gap:.{d}%}", f"{err:.{d}%}", thin


@dataclass(frozen=True)
class Claim:
    """A piece of advice as usually stated, and the range it promises for one measured figure.

    ``low``/``high`` is what the advice promises (an open side is ``None``): a 40-60 %
    speedup is ``low=1.4, high=1.6``. ``partly`` is the no-effect value (1 for a speedup or a
    memory ratio): a measurement between it and the promised range goes the advice's way
    but less far ("holds partly"); past it, the advice "does not hold here". ``None`` gives
    no partial credit. ``timed=False``: a figure the machine's load cannot move (a count,
    bytes, a loss from fixed seeds); its verdict never names the load.
    """

    statement: str
    figure: str
    low: float | None = None
    high: float | None = None
    partly: float | None = None
    unit: str = ""
    timed: bool = True

    def __post_init__(self) -> None:
        if not self.statement or not self.figure:
            raise ValueError("statement and figure must be non-empty: say what the advice is and "
                             "what is measured")
        if not isinstance(self.timed, bool):
            raise TypeError(f"timed must be a bool, got {type(self.timed).__name__}")
        for name in ("low", "high", "partly"):
            _num(name, getattr(self, name))
        if self.low is None and self.high is None:
            raise ValueError("give the promised range: low and/or high")
        lo, hi = self.bounds()
        if lo > hi:
            raise ValueError(f"low ({lo}) must not exceed high ({hi})")
        if self.partly is not None and lo <= self.partly <= hi:
            raise ValueError(f"partly ({self.partly}) must lie outside the promised range: it is the "
                             "no-effect value")

    def bounds(self) -> tuple[float, float]:
        """The promised interval, ``(-inf, inf)`` on an open side."""
        return (-math.inf if self.low is None else self.low, math.inf if self.high is None else self.high)

    def describe(self) -> str:
        """The promise as a phrase, e.g. ``"between 1.4x and 1.6x"`` or ``"exactly 0"``."""
        u = self.unit
        if self.low is not None and self.low == self.high:
            return f"exactly {si(self.low, u)}"
        if self.low is not None and self.high is not None:
            return f"between {si(self.low, u)} and {si(self.high, u)}"
        return f"at most {si(self.high, u)}" if self.low is None else f"at least {si(self.low, u)}"

    def zone(self, x: float) -> str:
        """``"holds"``, ``"holds partly"`` or ``"does not hold here"`` for a measured ``x``."""
        lo, hi = self.bounds()
        if lo <= x <= hi:
            return "holds"
        if self.partly is not None and (self.partly < x < lo or hi < x < self.partly):
            return "holds partly"
        return "does not hold here"


@dataclass(frozen=True)
class ClaimVerdict:
    """The computed verdict on a :class:`Claim`: one of :data:`CLAIM_STATUSES`, with its text."""

    claim: Claim
    measured: float
    spread: tuple[float, float] | None
    status: str
    text: str
    measured_text: str  # the figure as measured, for a summary table
    judged: bool = True  # False: the measurement has no bearing on the advice here (``not_judged``)
    refuted: bool = False  # undecided on no effect, yet wholly outside the promise: does not hold
    thin: bool = False  # an edge's side set by a margin under THIN of the A/A control's reach

    def record(self) -> dict:
        """A JSON-able record."""
        return {**asdict(self), "claim": asdict(self.claim)}


def assess(claim: Claim, measured: float | Estimate, spread: tuple[float, float] | None = None,
           reasons: Mapping[str, str] | None = None, gpu_only: bool = False,
           not_judged: str | None = None, error: float = 0.0) -> ClaimVerdict:
    """Judge ``claim`` by ``measured`` with the module's one rule.

    ``inconclusive``: the figure is not finite or its interval reaches across the no-effect
    value (``claim.partly``; else the promised range's edges). A figure inside the promise
    whose interval reaches outside it only ``holds partly``. An interval that would be
    inconclusive so, yet lies wholly outside the promise beyond ``error`` (``refuted``), ``does
    not hold here``: on either side of the no-effect value the promise fails. ``gpu_only=True``
    (a CPU analogue of GPU advice) makes the status ``"GPU only"`` and names the analogue's zone. A verdict
    other than "holds" names the machine's load when it was busy, unless the claim is
    ``timed=False`` (a count or bytes, which no load moves).

    ``error`` is the timing design's own error, as a fraction: how far an A/A control (one
    setting timed against itself the same way) read identical code apart. A timed claim's
    interval that lies within it of an edge is not asserted past that edge: within it of the
    no-effect value, the claim is inconclusive; inside the promise but within it of the
    promise's edge, it holds partly.

    Args:
        claim: the advice and its promised range.
        measured: a :class:`perfkit.stats.Estimate`, or a plain number (exact, or with ``spread``).
        spread: ``(low, high)`` around a plain number, or ``None``.
        reasons: sentences by status (``"holds"``, ``"holds partly"``, ``"does not hold here"``,
            ``"inconclusive"``); the one matching what was measured is appended.
        gpu_only: the measurement is a CPU analogue of a GPU-only claim.
        not_judged: with ``gpu_only``, why the measurement has *no* bearing on the advice here
            (e.g. a flag a CPU ignores, so one loop was timed twice): the figure is shown,
            no zone is named and no reason appended.
        error: the design's own error (a fraction >= 0, e.g. 0.059), applied to a timed claim
            with an interval; 0 applies none.

    Returns:
        A :class:`ClaimVerdict`.

    Raises:
        TypeError: if ``claim`` is not a :class:`Claim` or ``measured`` is not a number.
        ValueError: for a bad ``spread``, unknown ``reasons`` keys, ``not_judged``
            without ``gpu_only``, or an ``error`` that is not a finite number >= 0.
    """
    if not_judged is not None and (not gpu_only or not isinstance(not_judged, str) or not not_judged.strip()):
        raise ValueError("not_judged must be a non-empty sentence, and only with gpu_only=True")
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a Claim, got {type(claim).__name__}")
    if isinstance(error, bool) or not isinstance(error, (int, float)) or not 0 <= error < math.inf:
        raise ValueError(f"error must be a finite fraction >= 0 (an A/A control's reach), got {error!r}")
    r = reading(measured, spread)
    measured, spread = r.value, r.interval
    reasons = dict(reasons or {})
    unknown = set(reasons) - set(CLAIM_STATUSES[:4])
    if unknown:
        raise ValueError(f"reasons keys must be among {CLAIM_STATUSES[:4]}; got {sorted(unknown)}")
    u = claim.unit
    err = float(error) if claim.timed else 0.0  # no load, and no timing design, moves a count
    edges = ([claim.partly] if claim.partly is not None
             else [e for e in (claim.low, claim.high) if e is not None])
    shown = r.shown(u)
    lo, hi = claim.bounds()
    if not math.isfinite(measured):
        status, why = "inconclusive", "the measurement is not a finite number"
    elif r.needs is not None:
        status, why = "inconclusive", r.too_few()
    elif spread is not None and any(spread[0] < e < spread[1] for e in edges):
        edge = next(e for e in edges if spread[0] < e < spread[1])
        status, why = "inconclusive", r.across(edge, (lo, hi), u)
    elif spread is not None and err and any(_near(spread, e, err) for e in edges):
        edge = next(e for e in edges if _near(spread, e, err))
        g, e_, note = _beyond(_gap(spread, edge), err)
        status, why = "inconclusive", (f"its {r.words} lies {g} from {si(edge, u)}, "
                                       f"within the {e_} an A/A control read between identical code{note}: "
                                       f"not asserted on either side of {si(edge, u)}")
    else:
        status, why = claim.zone(measured), ""
        # an interval just beyond the reach from the no-effect value: the side is the rule's call, said
        near = [e for e in edges if spread is not None and err and e and _beyond(_gap(spread, e), err)[2]]
        if near:
            g, e_, note = _beyond(_gap(spread, near[0]), err)
            why = (f"its {r.words} lies {g} from {si(near[0], u)}, beyond the {e_} an A/A control read "
                   f"between identical code{note}")
    said = claim.zone(measured) if math.isfinite(measured) else status  # the figure's own zone
    if status == "holds" and spread is not None and (spread[0] < lo or spread[1] > hi):
        status, why = "holds partly", f"the figure is inside the promise, its {r.words} reaches outside it"
    elif status == "holds" and spread is not None and err and any(_near(spread, e, err) for e in (lo, hi)
                                                                  if math.isfinite(e)):
        status, why = "holds partly", (f"the figure is inside the promise, its {r.words} within the "
                                       f"{err:.1%} an A/A control read between identical code of the "
                                       "promise's edge")
    # undecided on the no-effect value, yet wholly outside the promise beyond the design's error:
    # whichever side of no effect the truth lies, the promise does not hold, and the label says so
    outside = (None if spread is None or status != "inconclusive" or r.needs is not None else
               lo if spread[1] < lo else hi if spread[0] > hi else None)  # the promise's edge it lies past
    refuted = outside is not None and _gap(spread, outside) > err
    thin = bool(why) and "the rule's call" in why
    if refuted:
        g, e_, note = _beyond(_gap(spread, outside), err)
        thin = thin or bool(note)
        status = "does not hold here"
        why += (f"; but its whole {r.words} lies {g} "
                f"{'below' if outside == lo else 'above'} the promise ({claim.describe()})"
                + (f", beyond the {e_} an A/A control read{note}" if err else "")
                + f": on which side of {si(claim.partly, u)} (no effect) the figure lies this run cannot "
                "tell, and on either side the promise does not hold here")
    label = "GPU only" if gpu_only else status
    text = (f"**Verdict on the advice: {label}.** {claim.figure}: the advice promises "
            f"{claim.describe()}; measured {shown}" + (f": {why}." if why else "."))
    if not_judged is not None:
        text = (f"**Verdict on the advice: GPU only.** {claim.figure}: the advice promises "
                f"{claim.describe()}; measured {shown}. Not judged: {not_judged.strip().rstrip('.')}, "
                "so this figure says nothing about the advice. Run it on a GPU machine to judge it.")
        return ClaimVerdict(claim, float(measured), spread, "GPU only", text, shown, judged=False)
    if status == "inconclusive" and reasons.get("inconclusive"):
        text += " " + reasons["inconclusive"].strip()
    if reasons.get(said):
        where = (f"The figure lies where the advice {said}: "
                 if status == "inconclusive" or refuted and said != status else "")
        text += " " + where + reasons[said].strip()
    if status != "holds" and claim.timed and "busy" not in reasons.get(said, ""):
        text += r.load() if spread is not None or r.needs is not None else (
            f" ({busy()[0].upper()}{busy()[1:]}.)" if busy() else "")
    if gpu_only:
        verb = "is " if status == "inconclusive" else ""
        text += f" (A CPU analogue of GPU advice; on it the advice {verb}{status}.)"
    return ClaimVerdict(claim, float(measured), spread, label, text, shown, refuted=refuted, thin=thin)
