"""Predictions recorded before a measurement, and verdicts computed from it.

A course section states a model, records what it predicts (a value with a tolerance, or
a bound), measures, and ends with a verdict that is *computed*: held, missed by how much
(above or below), or inconclusive, when the measurement's spread straddles the bound or a
figure leaves its physical range (a negative hidden fraction, a share above 1). The
sentence explaining the outcome is chosen by the outcome, never written in advance.

A piece of common advice is judged the same way (:class:`Claim`, :func:`assess`): the
range the advice promises for one figure, and the no-effect value that separates "holds
partly" (the right direction, not as far) from "does not hold here".

Usage::

    p = Prediction("checkpointing's time cost", "one extra forward: (F + F + B) / (F + B)",
                   high=1.34, low=1.0, unit="x")
    v = judge(p, measured=1.41, spread=(1.36, 1.47),
              explain={"above": "recomputation also re-runs the dropout and layer norms"})
    print(v.text)   # ... missed: 1.41x is 5% above the bound 1.34x ...
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["CLAIM_STATUSES", "OUTCOMES", "Claim", "ClaimVerdict", "Prediction", "Verdict", "assess",
           "busy", "judge"]

OUTCOMES = ("held", "missed", "inconclusive")
CLAIM_STATUSES = ("holds", "holds partly", "does not hold here", "inconclusive", "GPU only")


def _num(name: str, v: float | None, allow_none: bool = True) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise TypeError(f"{name} must be a number, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class Prediction:
    """What a model predicts for one measurement, recorded before it is taken.

    Give ``value`` with ``rel_tol`` (a point prediction: held within ``value * (1 ± rel_tol)``)
    or ``low`` and/or ``high`` (a bound or a range; an open side is ``None``).
    ``physical`` is the range the measured quantity can take at all (e.g. ``(0, 1)`` for a
    share); a measurement outside it says the run was disturbed, not that the model failed.
    """

    what: str
    model: str
    value: float | None = None
    rel_tol: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = ""
    physical: tuple[float | None, float | None] = (None, None)

    def __post_init__(self) -> None:
        if not self.what or not self.model:
            raise ValueError("what and model must be non-empty: say what is predicted and from which model")
        for name in ("value", "rel_tol", "low", "high"):
            _num(name, getattr(self, name))
        if (self.value is None) == (self.low is None and self.high is None):
            raise ValueError("give either value (with rel_tol) or a bound (low and/or high)")
        if self.value is not None and (self.rel_tol is None or not 0 <= self.rel_tol < math.inf):
            raise ValueError(f"a point prediction needs rel_tol >= 0, got {self.rel_tol!r}")
        lo, hi = self.bounds()
        if lo > hi:
            raise ValueError(f"low ({lo}) must not exceed high ({hi})")

    def bounds(self) -> tuple[float, float]:
        """The predicted interval, ``(-inf, inf)`` on an open side."""
        if self.value is not None:
            half = abs(self.value) * self.rel_tol
            return self.value - half, self.value + half
        return (-math.inf if self.low is None else self.low, math.inf if self.high is None else self.high)

    def describe(self) -> str:
        """The prediction as a phrase, e.g. ``"1.33x ± 10%"`` or ``"at most 1.34x"``."""
        u = self.unit
        if self.value is not None:
            if self.rel_tol == 0:
                return f"exactly {_fmt(self.value, u)}"
            return f"{_fmt(self.value, u)} ± {self.rel_tol:.0%}"
        if self.low is not None and self.high is not None:
            return f"between {_fmt(self.low, u)} and {_fmt(self.high, u)}"
        return f"at most {_fmt(self.high, u)}" if self.low is None else f"at least {_fmt(self.low, u)}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of one prediction: ``held``, ``missed`` or ``inconclusive``, with its text."""

    prediction: Prediction
    measured: float
    spread: tuple[float, float] | None
    outcome: str
    direction: str  # "inside", "above", "below", or "" when inconclusive
    text: str

    @property
    def held(self) -> bool:
        return self.outcome == "held"

    def record(self) -> dict:
        """A JSON-able record (for the course's scorecard)."""
        return {**asdict(self), "prediction": asdict(self.prediction)}


def busy() -> str:
    """A phrase for a verdict's explanation when the machine is busy, else ``""``.

    Busy: the 1-minute load average exceeds the number of cores. Then timings taken one
    after the other can differ by load alone, and an explanation that names a cause in the
    code should say so. Returns e.g. ``"the machine was busy (load average 5.2 on 2 cores)"``.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return ""
    cores = os.cpu_count() or 1
    return f"the machine was busy (load average {load:.1f} on {cores} cores)" if load > cores else ""


def _fmt(x: float, unit: str) -> str:
    """``x`` with ``unit``: SI prefixes from 10^4 on (``12.98 MB``), whole numbers in full, else
    3 significant digits."""
    if math.isfinite(x) and abs(x) >= 1e4:
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(x) >= scale:
                return f"{x / scale:.4g} {prefix}{unit.strip()}"
    if math.isfinite(x) and float(x).is_integer():
        return f"{int(x):,}{unit}"
    return f"{x:.3g}{unit}"


def _spread(spread, measured) -> tuple[float, float] | None:
    """``spread`` checked, as floats, widened to hold ``measured`` (a ratio of medians can fall
    just outside the quantiles of the paired ratios; a figure outside its own spread reads wrong)."""
    if spread is None:
        return None
    if len(spread) != 2 or spread[0] > spread[1]:
        raise ValueError(f"spread must be (low, high) with low <= high, got {spread!r}")
    lo, hi = float(spread[0]), float(spread[1])
    if math.isfinite(measured):
        lo, hi = min(lo, measured), max(hi, measured)
    return lo, hi


def judge(prediction: Prediction, measured: float, spread: tuple[float, float] | None = None,
          explain: Mapping[str, str] | None = None) -> Verdict:
    """Compare ``measured`` (and its ``spread``, e.g. the 10th-90th percentiles) with ``prediction``.

    Args:
        prediction: recorded before the measurement.
        measured: the measured figure (a median, a ratio of medians).
        spread: ``(low, high)`` range of the measurement across repeats, or ``None``.
        explain: optional sentences by outcome: keys ``"held"``, ``"above"``, ``"below"``,
            ``"inconclusive"``; the one matching what was measured is appended.

    Returns:
        A :class:`Verdict`: ``inconclusive`` when the measurement is not finite, leaves the
        physical range, or its spread reaches both inside and outside the prediction.

    Raises:
        TypeError: if ``prediction`` is not a :class:`Prediction` or a number is not one.
        ValueError: if ``spread`` is not ``(low, high)`` with ``low <= high``.
    """
    if not isinstance(prediction, Prediction):
        raise TypeError(f"prediction must be a Prediction, got {type(prediction).__name__}")
    if isinstance(measured, bool) or not isinstance(measured, (int, float)):
        raise TypeError(f"measured must be a number, got {measured!r}")
    spread = _spread(spread, measured)
    explain = dict(explain or {})
    unknown = set(explain) - {"held", "above", "below", "inconclusive"}
    if unknown:
        raise ValueError(f"explain keys must be held, above, below or inconclusive; got {sorted(unknown)}")
    p, u = prediction, prediction.unit
    lo, hi = p.bounds()
    plo, phi = (-math.inf if p.physical[0] is None else p.physical[0],
                math.inf if p.physical[1] is None else p.physical[1])
    head = f"**Prediction** ({p.model}): {p.what}, {p.describe()}. **Measured:** {_fmt(measured, u)}"
    if spread is not None:
        head += f" (spread {_fmt(spread[0], u)} to {_fmt(spread[1], u)})"
    if not math.isfinite(measured) or not plo <= measured <= phi:
        outcome, direction = "inconclusive", ""
        why = (f"inconclusive: {_fmt(measured, u)} is outside the range this figure can take "
               f"({_fmt(plo, u)} to {_fmt(phi, u)}): the run was disturbed (other programs on the "
               "machine, too few repeats); run it again on a quieter machine")
    elif spread is not None and (spread[0] < lo <= spread[1] or spread[0] <= hi < spread[1]):
        outcome, direction = "inconclusive", ""
        why = ("inconclusive: the spread reaches both inside and outside the prediction, so the run "
               "was too noisy to tell; repeat it with more repeats or on a quieter machine")
    elif lo <= measured <= hi:
        outcome, direction, why = "held", "inside", "held"
    else:
        outcome = "missed"
        direction = "above" if measured > hi else "below"
        edge = hi if direction == "above" else lo
        gap = abs(measured / edge - 1) if edge else 0.0
        # a miss never reads "0% above": small gaps get the digits that show them
        pct = f"{gap:.0%}" if gap >= 0.005 else f"{gap * 100:.2g}%"
        shown, edge_shown = _fmt(measured, u), _fmt(edge, u)
        if shown == edge_shown:  # 3 digits hide the gap: show the digits that differ
            shown, edge_shown = f"{measured:.6g}{u}", f"{edge:.6g}{u}"
        by = (f"{pct} {direction} {edge_shown}" if edge
              else f"{abs(measured - edge):.3g}{u} {direction} {edge_shown}")
        why = f"missed: {shown} is {by}"
    text = f"{head}: {why}."
    extra = explain.get("inconclusive" if outcome == "inconclusive" else
                        ("held" if outcome == "held" else direction))
    if extra:
        text += " " + extra.strip()
    return Verdict(p, float(measured), spread, outcome, direction, text)


# --- advice under the microscope: claims ---------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A piece of advice as usually stated, and the range it promises for one measured figure.

    ``low``/``high`` is what the advice promises (an open side is ``None``): a 40-60 %
    speedup is ``low=1.4, high=1.6``. ``partly`` is the no-effect value (1 for a speedup or a
    memory ratio): a measurement between it and the promised range goes the advice's way
    but less far ("holds partly"); past it, the advice "does not hold here". ``None`` gives
    no partial credit.
    """

    statement: str
    figure: str
    low: float | None = None
    high: float | None = None
    partly: float | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.statement or not self.figure:
            raise ValueError("statement and figure must be non-empty: say what the advice is and "
                             "what is measured")
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
        if self.low is not None and self.low == self.high:
            return f"exactly {_fmt(self.low, self.unit)}"
        return Prediction(self.figure, self.statement, low=self.low, high=self.high,
                          unit=self.unit).describe()

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

    def record(self) -> dict:
        """A JSON-able record."""
        return {**asdict(self), "claim": asdict(self.claim)}


def assess(claim: Claim, measured: float, spread: tuple[float, float] | None = None,
           reasons: Mapping[str, str] | None = None, gpu_only: bool = False,
           not_judged: str | None = None) -> ClaimVerdict:
    """Judge ``claim`` by ``measured`` (and its ``spread``, e.g. 10th-90th percentiles).

    The status is ``inconclusive`` when the measurement is not finite or its spread reaches
    across the no-effect value (``claim.partly``; the promised range's edges when there is
    none): the noise is larger than the effect. A median inside the promise whose spread
    reaches outside it only ``holds partly``. ``gpu_only=True`` (the advice is about a GPU
    and this is a CPU analogue) makes the status ``"GPU only"`` and names the analogue's zone.

    Args:
        claim: the advice and its promised range.
        measured: the measured figure.
        spread: ``(low, high)`` of the measurement across repeats, or ``None`` (exact counts).
        reasons: sentences by status (``"holds"``, ``"holds partly"``, ``"does not hold here"``,
            ``"inconclusive"``); the one matching what was measured is appended.
        gpu_only: the measurement is a CPU analogue of a GPU-only claim.
        not_judged: with ``gpu_only``, why the measurement has *no* bearing on the advice here
            (e.g. a flag a CPU ignores, so one loop was timed twice): the figure is shown,
            no zone is named and no reason appended.

    Returns:
        A :class:`ClaimVerdict`.

    Raises:
        TypeError: if ``claim`` is not a :class:`Claim` or ``measured`` is not a number.
        ValueError: for a bad ``spread``, unknown ``reasons`` keys, or ``not_judged``
            without ``gpu_only``.
    """
    if not_judged is not None and (not gpu_only or not isinstance(not_judged, str) or not not_judged.strip()):
        raise ValueError("not_judged must be a non-empty sentence, and only with gpu_only=True")
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a Claim, got {type(claim).__name__}")
    if isinstance(measured, bool) or not isinstance(measured, (int, float)):
        raise TypeError(f"measured must be a number, got {measured!r}")
    spread = _spread(spread, measured)
    reasons = dict(reasons or {})
    unknown = set(reasons) - set(CLAIM_STATUSES[:4])
    if unknown:
        raise ValueError(f"reasons keys must be among {CLAIM_STATUSES[:4]}; got {sorted(unknown)}")
    u = claim.unit
    edges = ([claim.partly] if claim.partly is not None
             else [e for e in (claim.low, claim.high) if e is not None])
    shown = _fmt(measured, u) + (f" (spread {_fmt(spread[0], u)} to {_fmt(spread[1], u)})" if spread else "")
    if not math.isfinite(measured):
        status, why = "inconclusive", "the measurement is not a finite number"
    elif spread is not None and any(spread[0] < e < spread[1] for e in edges):
        status, why = "inconclusive", ("the spread reaches across "
                                       + ("the no-effect value" if claim.partly is not None else
                                          "the edge of the promised range")
                                       + ": the noise is larger than the effect")
    else:
        status, why = claim.zone(measured), ""
    said = status  # the reason appended: the median's zone, even where the spread downgrades it
    lo, hi = claim.bounds()
    if status == "holds" and spread is not None and (spread[0] < lo or spread[1] > hi):
        status, why = "holds partly", "the median is inside the promise, the spread reaches outside it"
    label = "GPU only" if gpu_only else status
    text = (f"**Verdict on the advice: {label}.** {claim.figure}: the advice promises "
            f"{claim.describe()}; measured {shown}" + (f": {why}." if why else "."))
    if not_judged is not None:
        text = (f"**Verdict on the advice: GPU only.** {claim.figure}: the advice promises "
                f"{claim.describe()}; measured {shown}. Not judged: {not_judged.strip().rstrip('.')}, "
                "so this figure says nothing about the advice. Run it on a GPU machine to judge it.")
        return ClaimVerdict(claim, float(measured), spread, "GPU only", text, shown)
    if reasons.get(said):
        text += " " + reasons[said].strip()
    if gpu_only:
        verb = "is " if status == "inconclusive" else ""
        text += f" (A CPU analogue of GPU advice; on it the advice {verb}{status}.)"
    return ClaimVerdict(claim, float(measured), spread, label, text, shown)
