"""Predictions recorded before a measurement, and verdicts computed from it by one rule.

A course section states a model, records what it predicts (a value with a tolerance, or a
bound), measures, and ends with a verdict *computed* from the measurement and its
uncertainty (a :class:`perfkit.stats.Estimate`, a confidence interval). The one rule:

- **disturbed**: the figure is not finite or lies outside the range it can physically take
  (a share above 1): the run was disturbed, not the model wrong; the machine's load, cores
  and threads are named;
- **held** / **missed** (above or below, by how much): the whole interval lies inside /
  outside the prediction;
- **inconclusive**: the interval straddles an edge; the text gives the distance from the
  edge against the interval's half-width.

A figure without an interval (an exact count) is judged on its value alone. A verdict on an
interval that did not hold names a busy machine (load above its cores) itself. Advice is judged the same
way (:class:`Claim`, :func:`assess`): the range it promises, and the no-effect value that
separates "holds partly" (the right direction, not as far) from "does not hold here".

Usage::

    p = Prediction("checkpointing's time cost", "one extra forward: (F + F + B) / (F + B)",
                   high=1.34, low=1.0, unit="x")
    v = judge(p, stats.median_ratio(t_ckpt, t_plain),
              explain={"above": "recomputation also re-runs the dropout and layer norms"})
    print(v.text)   # ... missed: 1.41x is 5% above the bound 1.34x ...
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from perfkit.stats import Estimate
from perfkit.units import si

__all__ = ["CLAIM_STATUSES", "OUTCOMES", "Claim", "ClaimVerdict", "Prediction", "Verdict", "assess",
           "busy", "judge", "machine_state"]

OUTCOMES = ("held", "missed", "inconclusive", "disturbed")
CLAIM_STATUSES = ("holds", "holds partly", "does not hold here", "inconclusive", "GPU only")
EXPLAIN_KEYS = ("held", "above", "below", "inconclusive", "disturbed")


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
    ``measured_here=False``: a figure from elsewhere (a published run); load is never named.
    """

    what: str
    model: str
    value: float | None = None
    rel_tol: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = ""
    physical: tuple[float | None, float | None] = (None, None)
    measured_here: bool = True

    def __post_init__(self) -> None:
        if not self.what or not self.model:
            raise ValueError("what and model must be non-empty: say what is predicted and from which model")
        if not isinstance(self.measured_here, bool):
            raise TypeError(f"measured_here must be a bool, got {type(self.measured_here).__name__}")
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
                return f"exactly {si(self.value, u)}"
            return f"{si(self.value, u)} ± {self.rel_tol:.0%}"
        if self.low is not None and self.high is not None:
            return f"between {si(self.low, u)} and {si(self.high, u)}"
        return f"at most {si(self.high, u)}" if self.low is None else f"at least {si(self.low, u)}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of one prediction (one of :data:`OUTCOMES`), with its text; ``level`` is the
    confidence of the interval it was judged on (``None``: none, or a plain range)."""

    prediction: Prediction
    measured: float
    spread: tuple[float, float] | None
    outcome: str
    direction: str  # "inside", "above", "below", or "" when inconclusive or disturbed
    text: str
    level: float | None = None

    @property
    def held(self) -> bool:
        return self.outcome == "held"

    def record(self) -> dict:
        """A JSON-able record (for the course's scorecard)."""
        return {**asdict(self), "prediction": asdict(self.prediction)}


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


def _machine_text() -> str:
    m = machine_state()
    parts = [f"load average {m['load']:.1f} on {m['cores']:.0f} cores" if "load" in m
             else f"{m['cores']:.0f} cores"]
    if "threads" in m:
        parts.append(f"{m['threads']:.0f} torch threads")
    return ", ".join(parts)


def _measurement(measured: float | Estimate, spread) -> tuple[float, tuple[float, float] | None,
                                                            float | None, str]:
    """``(value, interval, level, how)`` from a number (with an optional ``(low, high)``) or
    an :class:`Estimate`. An interval is widened to hold its value: a figure outside its own
    spread reads wrong."""
    if isinstance(measured, Estimate):
        if spread is not None:
            raise ValueError("give spread only with a plain number: an Estimate carries its interval")
        if measured.low == measured.high:
            return measured.value, None, measured.level, measured.method
        return measured.value, measured.spread, measured.level, measured.method
    if isinstance(measured, bool) or not isinstance(measured, (int, float)):
        raise TypeError(f"measured must be a number or a perfkit.stats.Estimate, got {measured!r}")
    if spread is None:
        return float(measured), None, None, ""
    if len(spread) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in spread) \
            or spread[0] > spread[1]:
        raise ValueError(f"spread must be (low, high) with low <= high, got {spread!r}")
    lo, hi = float(spread[0]), float(spread[1])
    if math.isfinite(measured):
        lo, hi = min(lo, measured), max(hi, measured)
    return float(measured), (lo, hi), None, "spread"


def _interval_words(level: float | None, how: str) -> str:
    if level is not None:
        return f"{level:.0%} interval"
    return "spread" if how in ("", "spread") else how


def _gap(measured: float, edge: float, u: str, direction: str) -> str:
    """``"14% above 1.34x"``: how far ``measured`` lies past ``edge``."""
    gap = abs(measured / edge - 1) if edge else 0.0
    pct = f"{gap:.0%}" if gap >= 0.005 else f"{gap * 100:.2g}%"  # a miss never reads "0% above"
    shown, edge_shown = si(measured, u), si(edge, u)
    if shown == edge_shown:  # 3 digits hide the gap: show the digits that differ
        shown, edge_shown = f"{measured:.6g}{u}", f"{edge:.6g}{u}"
    return (f"{shown} is {pct} {direction} {edge_shown}" if edge
            else f"{shown} is {si(abs(measured - edge), u)} {direction} {edge_shown}")


def _across(value: float, edge: float, interval: tuple[float, float], words: str, u: str) -> str:
    """Why an interval across ``edge`` decides nothing: the figure's distance from the edge, and
    how far the interval reaches past it on the other side."""
    past = edge - interval[0] if value >= edge else interval[1] - edge
    side = "below" if value >= edge else "above"
    return (f"the {words} ({si(interval[0], u)} to {si(interval[1], u)}) reaches across the edge "
            f"{si(edge, u)}: the figure lies {si(abs(value - edge), u)} from it, the interval "
            f"reaches {si(past, u)} {side} it")


def judge(prediction: Prediction, measured: float | Estimate, spread: tuple[float, float] | None = None,
          explain: Mapping[str, str] | None = None) -> Verdict:
    """Compare a measurement and its interval with ``prediction`` by the module's one rule.

    Args:
        prediction: recorded before the measurement.
        measured: a :class:`perfkit.stats.Estimate` (the figure and its confidence interval;
            the usual case), or a plain number: exact (a count), or with ``spread``.
        spread: ``(low, high)`` around a plain number, e.g. a range of repeats; ``None`` for an
            exact figure. Not allowed with an Estimate.
        explain: optional sentences by outcome: keys ``"held"``, ``"above"``, ``"below"``,
            ``"inconclusive"``, ``"disturbed"``; the one matching what was measured is appended
            after the computed reason.

    Returns:
        A :class:`Verdict`, outcome one of :data:`OUTCOMES`.

    Raises:
        TypeError: if ``prediction`` is not a :class:`Prediction` or ``measured`` not a number
            or Estimate.
        ValueError: for a bad ``spread``, a spread with an Estimate, or unknown ``explain`` keys.
    """
    if not isinstance(prediction, Prediction):
        raise TypeError(f"prediction must be a Prediction, got {type(prediction).__name__}")
    value, interval, level, how = _measurement(measured, spread)
    explain = dict(explain or {})
    unknown = set(explain) - set(EXPLAIN_KEYS)
    if unknown:
        raise ValueError(f"explain keys must be among {EXPLAIN_KEYS}; got {sorted(unknown)}")
    p, u = prediction, prediction.unit
    lo, hi = p.bounds()
    plo, phi = (-math.inf if p.physical[0] is None else p.physical[0],
                math.inf if p.physical[1] is None else p.physical[1])
    words = _interval_words(level, how)
    head = f"**Prediction** ({p.model}): {p.what}, {p.describe()}. **Measured:** {si(value, u)}"
    if interval is not None:
        head += f" ({words} {si(interval[0], u)} to {si(interval[1], u)})"
    direction = ""
    if not math.isfinite(value) or not plo <= value <= phi:
        outcome = "disturbed"
        what = ("is not a finite number" if not math.isfinite(value) else
                f"lies outside the range this figure can take ({si(plo, u)} to {si(phi, u)})")
        why = (f"disturbed: {si(value, u)} {what}, so the run was disturbed, not the model wrong"
               + (f" (machine now: {_machine_text()})" if p.measured_here else ""))
    elif interval is not None and (interval[0] < lo <= interval[1] or interval[0] <= hi < interval[1]):
        outcome = "inconclusive"
        crossed = [e for e in (lo, hi) if interval[0] < e <= interval[1] or interval[0] <= e < interval[1]]
        edge = min(crossed, key=lambda e: abs(value - e))  # the edge the figure is nearest
        why = f"inconclusive: {_across(value, edge, interval, words, u)}"
    elif lo <= value <= hi:
        outcome, direction, why = "held", "inside", "held"
    else:
        outcome = "missed"
        direction = "above" if value > hi else "below"
        why = "missed: " + _gap(value, hi if direction == "above" else lo, u, direction)
    extra = explain.get(direction if outcome == "missed" else outcome) or ""
    text = f"{head}: {why}." + (" " + extra.strip() if extra else "")
    timed = interval is not None and p.measured_here  # load cannot move an exact count
    if outcome in ("missed", "inconclusive") and timed and (b := busy()) and "busy" not in extra:
        text += f" ({b[0].upper()}{b[1:]}.)"
    return Verdict(p, float(value), interval, outcome, direction, text, level)


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
            return f"exactly {si(self.low, self.unit)}"
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


def assess(claim: Claim, measured: float | Estimate, spread: tuple[float, float] | None = None,
           reasons: Mapping[str, str] | None = None, gpu_only: bool = False,
           not_judged: str | None = None) -> ClaimVerdict:
    """Judge ``claim`` by ``measured`` with the module's one rule.

    ``inconclusive``: the figure is not finite or its interval reaches across the no-effect
    value (``claim.partly``; else the promised range's edges). A figure inside the promise
    whose interval reaches outside it only ``holds partly``. ``gpu_only=True`` (a CPU analogue
    of GPU advice) makes the status ``"GPU only"`` and names the analogue's zone.

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
    measured, spread, level, how = _measurement(measured, spread)
    words = _interval_words(level, how)
    reasons = dict(reasons or {})
    unknown = set(reasons) - set(CLAIM_STATUSES[:4])
    if unknown:
        raise ValueError(f"reasons keys must be among {CLAIM_STATUSES[:4]}; got {sorted(unknown)}")
    u = claim.unit
    edges = ([claim.partly] if claim.partly is not None
             else [e for e in (claim.low, claim.high) if e is not None])
    shown = si(measured, u) + (f" ({words} {si(spread[0], u)} to {si(spread[1], u)})" if spread else "")
    if not math.isfinite(measured):
        status, why = "inconclusive", "the measurement is not a finite number"
    elif spread is not None and any(spread[0] < e < spread[1] for e in edges):
        edge = next(e for e in edges if spread[0] < e < spread[1])
        status, why = "inconclusive", _across(measured, edge, spread, words, u)
    else:
        status, why = claim.zone(measured), ""
    said = status  # the reason appended: the median's zone, even where the spread downgrades it
    lo, hi = claim.bounds()
    if status == "holds" and spread is not None and (spread[0] < lo or spread[1] > hi):
        status, why = "holds partly", f"the figure is inside the promise, its {words} reaches outside it"
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
    if status != "holds" and busy() and "busy" not in reasons.get(said, ""):
        text += f" ({busy()[0].upper()}{busy()[1:]}.)"
    if gpu_only:
        verb = "is " if status == "inconclusive" else ""
        text += f" (A CPU analogue of GPU advice; on it the advice {verb}{status}.)"
    return ClaimVerdict(claim, float(measured), spread, label, text, shown)
