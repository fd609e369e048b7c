"""Predictions recorded before a measurement, and verdicts computed from it by one rule.

A course section states a model, records what it predicts (a value with a tolerance, or a
bound), measures, and ends with a verdict *computed* from the measurement and its
uncertainty (a :class:`perfkit.stats.Estimate`, a confidence interval). The one rule:

- **disturbed**: the figure is not finite or lies outside the range it can physically take
  (a share above 1): the run was disturbed, not the model wrong; the machine's load, cores
  and threads are named;
- **missed** (above or below, by how much): a *bound* (``low``/``high``) is missed when the
  figure crosses it, even where its interval reaches back (a bound claims that no
  measurement crosses it); a *tolerance* (``value`` with ``rel_tol``), or an edge a model
  only expects (``soft``: a model's range, or "a fix should not slow the step", which is no
  bound), when the whole interval lies outside it;
- **held**: the whole interval lies inside the prediction;
- **inconclusive**: the figure is inside a bound, or anywhere near a tolerance or a soft
  edge, and its interval reaches across an edge (a held verdict never stands on an interval that a
  repeat could carry past the edge); or it has no interval (fewer samples than one needs),
  except a bound's figure past its edge, which is missed all the same (the text names the
  samples).

Every verdict says what decided it (:mod:`perfkit.verdict_text`): the distance from the
edge, the interval's reach and width against the tolerance, the samples behind it, and the
section's own cause for the side the figure lies on (``explain``: ``"above"``, ``"below"``,
``"held"``), shown for an inconclusive verdict too. Where the machine was busy, its load per
core and the noise left in the interval are named. A figure without an interval (an exact
count) is judged on its value alone.

A bound that cannot fail (it covers every value the figure can take, ``physical``, or a
narrower range you know it keeps at this machine's sizes) is no prediction:
:meth:`Prediction.can_fail` says so, :func:`judge` refuses it, and :func:`context` prints
it beside the measurement as context. Advice is judged the same way (:class:`Claim`,
:func:`assess`): the range it promises, and the no-effect value that separates "holds
partly" (the right direction, not as far) from "does not hold here".

Usage::

    p = Prediction("checkpointing's time cost", "one extra forward: (F + F + B) / (F + B)",
                   high=1.34, low=1.0, unit="x")
    v = judge(p, stats.median_ratio(t_ckpt, t_plain),
              explain={"above": "recomputation also re-runs the dropout and layer norms"})
    print(v.text)   # ... missed: 1.41x is 5% above 1.34x ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from perfkit.advice import CLAIM_STATUSES, Claim, ClaimVerdict, assess
from perfkit.stats import Estimate
from perfkit.units import si, si_bound
from perfkit.verdict_text import Reading, busy, machine_state, machine_text, reading

__all__ = ["CLAIM_STATUSES", "KINDS", "OUTCOMES", "Claim", "ClaimVerdict", "Prediction", "Verdict", "assess",
           "busy", "context", "judge", "kinds_text", "machine_state"]

OUTCOMES = ("held", "missed", "inconclusive", "disturbed")
# what a verdict's prediction can test (Prediction.kind), from the strongest evidence to the weakest
KINDS = ("test", "floor", "ceiling", "exact check", "stored run")
EXPLAIN_KEYS = ("held", "above", "below", "inconclusive", "disturbed")


def _num(name: str, v: float | None, allow_none: bool = True) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise TypeError(f"{name} must be a number, got {v!r}")
    return float(v)


def _range(name: str, r: object) -> tuple[float, float]:
    """``r`` as ``(low, high)``, an open side (``None``) infinite."""
    if not isinstance(r, tuple) or len(r) != 2:
        raise TypeError(f"{name} must be a (low, high) tuple, None for an open side, got {r!r}")
    lo, hi = (_num(name, v) for v in r)
    lo, hi = -math.inf if lo is None else lo, math.inf if hi is None else hi
    if lo > hi:
        raise ValueError(f"{name} must have low <= high, got {r!r}")
    return lo, hi


@dataclass(frozen=True)
class Prediction:
    """What a model predicts for one measurement, recorded before it is taken.

    Give ``value`` with ``rel_tol`` (a point prediction: held within ``value * (1 ± rel_tol)``)
    or ``low`` and/or ``high`` (a bound or a range; an open side is ``None``). A bound is
    missed when the figure crosses it; a tolerance when its whole interval lies outside.
    ``physical`` is the range the measured quantity can take at all (e.g. ``(0, 1)`` for a
    share); a measurement outside it says the run was disturbed, not that the model failed.
    ``measured_here=False``: a figure from elsewhere (a published run, a stored run, a model's
    output held against a published figure): the verdict labels it "Figure, not measured in
    this run", not "Measured", and never names this machine's load.
    ``timed=False``: a figure the machine's load cannot move (a loss from fixed seeds, bytes,
    a count) though it has an interval; load is never named for it either.
    ``counted=True``: a figure counted in this run rather than timed (bytes handed to the
    calls, calls made): the verdict labels it "Counted", not "Measured"; it implies ``timed``
    is ``False``.
    ``soft``: the edges (``"low"``, ``"high"``) a model only expects rather than bounds, judged
    as a tolerance's: two ends of a model's range, or the 1x below which a fix would slow a
    step (nothing forbids it), beside an upper edge that is a real bound (Amdahl's).
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
    timed: bool = True
    soft: tuple[str, ...] = ()
    counted: bool = False

    def __post_init__(self) -> None:
        if not self.what or not self.model:
            raise ValueError("what and model must be non-empty: say what is predicted and from which model")
        for flag in ("measured_here", "timed", "counted"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {type(getattr(self, flag)).__name__}")
        for name in ("value", "rel_tol", "low", "high"):
            _num(name, getattr(self, name))
        if self.counted and (self.timed or not self.measured_here):
            raise ValueError("counted=True is a figure counted in this run: give it with timed=False "
                             "and measured_here=True")
        if (self.value is None) == (self.low is None and self.high is None):
            raise ValueError("give either value (with rel_tol) or a bound (low and/or high)")
        if self.value is not None and (self.rel_tol is None or not 0 <= self.rel_tol < math.inf):
            raise ValueError(f"a point prediction needs rel_tol >= 0, got {self.rel_tol!r}")
        lo, hi = self.bounds()
        if lo > hi:
            raise ValueError(f"low ({lo}) must not exceed high ({hi})")
        _range("physical", self.physical)
        if not isinstance(self.soft, tuple) or any(e not in ("low", "high") for e in self.soft):
            raise ValueError(f"soft must be a tuple of 'low' and/or 'high', got {self.soft!r}")
        missing = [e for e in self.soft if getattr(self, e) is None]
        if missing:
            raise ValueError(f"soft names {missing}, but the prediction has no such edge (give low/high)")

    def is_hard(self, side: str) -> bool:
        """Whether the edge a figure ``"above"`` or ``"below"`` the prediction crossed is a bound,
        missed when crossed (not a tolerance's edge, nor one the model only expects)."""
        return self.is_bound and ("high" if side == "above" else "low") not in self.soft

    @property
    def is_bound(self) -> bool:
        """Whether this is a bound (``low``/``high``), missed when the figure crosses it."""
        return self.value is None

    def bounds(self) -> tuple[float, float]:
        """The predicted interval, ``(-inf, inf)`` on an open side."""
        if self.value is not None:
            half = abs(self.value) * self.rel_tol
            return self.value - half, self.value + half
        return (-math.inf if self.low is None else self.low, math.inf if self.high is None else self.high)

    def can_fail(self, within: tuple[float | None, float | None] | None = None) -> bool:
        """Whether some value in ``within`` lies outside the prediction: ``within`` is the
        range the figure can take here (default: ``physical``, all it can take at all); give
        a narrower one you know, e.g. the most a fix can gain at this machine's sizes. A
        prediction that cannot fail tests nothing: tighten it, or print it with :func:`context`.

        Raises:
            TypeError, ValueError: for a ``within`` that is not ``(low, high)``, low <= high.
        """
        lo, hi = _range("within", self.physical if within is None else within)
        plo, phi = self.bounds()
        return lo < plo or hi > phi

    def kind(self) -> str:
        """What kind of evidence a verdict on this prediction is, from how it was built, one
        rule (:data:`KINDS`): ``"stored run"`` for a figure not measured in this run; ``"exact
        check"`` where its edges, clipped to ``physical``, leave one value; ``"test"`` for a
        window (a point with a tolerance > 0, or a low and a high edge); ``"floor"`` for a low
        edge alone and ``"ceiling"`` for a high edge alone: a one-sided bound tests little where
        the figure lies far from it, so a held floor or ceiling is weaker evidence than a held
        window."""
        lo, hi = self.bounds()
        plo, phi = (d if x is None else x for x, d in zip(self.physical, (-math.inf, math.inf)))
        if not self.measured_here:
            return "stored run"
        if max(lo, plo) == min(hi, phi):
            return "exact check"
        if self.value is not None or (self.low is not None and self.high is not None):
            return "test"
        return "floor" if self.low is not None else "ceiling"

    def label(self) -> str:
        """How the verdict names its figure: ``"Counted"`` (bytes or calls counted in this run),
        ``"Measured"``, or ``"Figure, not measured in this run"``."""
        if not self.measured_here:
            return "Figure, not measured in this run"
        return "Counted" if self.counted else "Measured"

    def describe(self) -> str:
        """The prediction as a phrase, e.g. ``"1.33x ± 10%"`` or ``"at most 1.34x"``."""
        u = self.unit
        if self.value is not None:
            if self.rel_tol == 0:
                return f"exactly {si(self.value, u)}"
            return f"{si(self.value, u)} ± {self.rel_tol:.0%}"
        if self.low is not None and self.high is not None:
            text = f"between {si_bound(self.low, u, 'low')} and {si_bound(self.high, u, 'high')}"
        else:
            text = (f"at most {si_bound(self.high, u, 'high')}" if self.low is None else
                    f"at least {si_bound(self.low, u, 'low')}")
        if set(self.soft) == {"low", "high"} or (self.soft and (self.low is None or self.high is None)):
            return text + " (a model's expected range, not a bound)"
        if self.soft:
            e = self.soft[0]
            return text + (f" ({si(getattr(self, e), u)} expected, not a bound; "
                           f"{si(self.high if e == 'low' else self.low, u)} a bound)")
        return text


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


def kinds_text(verdicts: Sequence[Verdict]) -> str:
    """One line: how many of ``verdicts`` held, and the held ones counted by
    :meth:`Prediction.kind` (windows, floors, ceilings, exact checks, stored runs), so that a
    row of held verdicts is not read as that many tests. "" for no verdicts.

    Raises:
        TypeError: for an item that is not a :class:`Verdict`.
    """
    for i, v in enumerate(verdicts):
        if not isinstance(v, Verdict):
            raise TypeError(f"verdicts[{i}] must be a perfkit.verdict.Verdict, got {type(v).__name__}")
    if not verdicts:
        return ""
    held = [v.prediction.kind() for v in verdicts if v.held]
    counts = {k: held.count(k) for k in KINDS if held.count(k)}
    return (f"{len(held)} of {len(verdicts)} verdicts held" + (
        ": by what each prediction could test, " + ", ".join(
            f"{n} {k}{'s' * (n != 1)}" for k, n in counts.items())
        + "; a floor or a ceiling held far from its edge tests little" if held else "") + ".")


def _side(r: Reading, lo: float, hi: float) -> str:
    """Where the figure lies against the prediction: ``"above"``, ``"below"`` or ``"inside"``."""
    return "above" if r.value > hi else "below" if r.value < lo else "inside"


def _cause(explain: Mapping[str, str], outcome: str, side: str, has_interval: bool = True) -> str:
    """The section's own sentences for this outcome: a missed or held verdict's side; for an
    inconclusive one, its own sentence and the cause for the side the figure lies on."""
    if outcome in ("held", "missed"):
        return (explain.get("held" if outcome == "held" else side) or "").strip()
    if outcome == "disturbed":
        return (explain.get("disturbed") or "").strip()
    said = [(explain.get("inconclusive") or "").strip()]
    key = "held" if side == "inside" else side
    if (explain.get(key) or "").strip():
        where = "inside the predicted range" if side == "inside" else f"{side} the predicted range"
        cause = explain[key].strip()
        if len(cause) > 1 and cause[0].isupper() and cause[1].islower():  # "Its ..." -> "its ...", not "DDP"
            cause = cause[0].lower() + cause[1:]
        # the point, not the interval: an inconclusive interval reaches past an edge
        reach = ("its interval reaching past the range's edge" if side == "inside" else
                 "its interval reaching into the range")  # the range the verdict judged, not a point in it
        said.append(f"The point estimate lies {where}, "
                    f"{reach if has_interval else 'with no interval'}: {cause}")
        if said[0] and said[0] in cause:  # the side's sentences already hold it: say it once
            said[0] = ""
    return " ".join(s for s in said if s)


def judge(prediction: Prediction, measured: float | Estimate, spread: tuple[float, float] | None = None,
          explain: Mapping[str, str] | None = None) -> Verdict:
    """Compare a measurement and its interval with ``prediction`` by the module's one rule.

    Args:
        prediction: recorded before the measurement; one that can fail
            (:meth:`Prediction.can_fail`).
        measured: a :class:`perfkit.stats.Estimate` (the figure and its confidence interval;
            the usual case), or a plain number: exact (a count), or with ``spread``.
        spread: ``(low, high)`` around a plain number, e.g. a range of repeats; ``None`` for an
            exact figure. Not allowed with an Estimate.
        explain: optional sentences by outcome: keys ``"held"``, ``"above"``, ``"below"``,
            ``"inconclusive"``, ``"disturbed"``; the one matching what was measured is appended
            after the computed reason (for an inconclusive verdict: its own, and the one for
            the side the figure lies on, ``"held"`` inside).

    Returns:
        A :class:`Verdict`, outcome one of :data:`OUTCOMES`.

    Raises:
        TypeError: if ``prediction`` is not a :class:`Prediction` or ``measured`` not a number
            or Estimate.
        ValueError: for a bad ``spread``, a spread with an Estimate, unknown ``explain`` keys,
            or a prediction that cannot fail (print that one with :func:`context`).
    """
    if not isinstance(prediction, Prediction):
        raise TypeError(f"prediction must be a Prediction, got {type(prediction).__name__}")
    r = reading(measured, spread)
    explain = dict(explain or {})
    unknown = set(explain) - set(EXPLAIN_KEYS)
    if unknown:
        raise ValueError(f"explain keys must be among {EXPLAIN_KEYS}; got {sorted(unknown)}")
    p, u = prediction, prediction.unit
    if not p.can_fail():
        raise ValueError(f"prediction {p.describe()} covers every value the figure can take "
                         f"({p.physical}): it cannot fail; tighten it, or print it with context()")
    lo, hi = p.bounds()
    plo, phi = _range("physical", p.physical)
    value, interval = r.value, r.interval
    label = p.label()
    head = f"**Prediction** ({p.model}): {p.what}, {p.describe()}. **{label}:** {r.shown(u, p.bounds())}"
    side = _side(r, lo, hi) if math.isfinite(value) else ""
    direction = ""
    if not math.isfinite(value) or not plo <= value <= phi:
        outcome = "disturbed"
        what = ("is not a finite number" if not math.isfinite(value) else
                "lies outside the range this figure can take ("
                + (f"{si(plo, u)} to {si(phi, u)}" if math.isfinite(plo) and math.isfinite(phi) else
                   f"{si(plo, u)} and above" if math.isfinite(plo) else f"{si(phi, u)} and below") + ")")
        why = (f"disturbed: {si(value, u)} {what}, so the run was disturbed, not the model wrong"
               + (f" (machine now: {machine_text()})" if p.measured_here else ""))
    elif side != "inside" and p.is_hard(side):  # a crossed bound is missed, even with too few samples
        outcome, direction = "missed", side
        edge = hi if side == "above" else lo
        why = "missed: " + r.gap(edge, u, side)
        if interval is not None and interval[0] <= edge <= interval[1]:
            why += r.reaches_back(edge, u)
        elif r.needs is not None:
            why += f" ({r.too_few()}: a repeat may land elsewhere)"
    elif r.needs is not None:
        outcome, why = "inconclusive", f"inconclusive: {r.too_few()}"
    elif interval is not None and (interval[0] < lo <= interval[1] or interval[0] <= hi < interval[1]):
        outcome = "inconclusive"
        crossed = [e for e in (lo, hi) if interval[0] < e <= interval[1] or interval[0] <= e < interval[1]]
        edge = min(crossed, key=lambda e: abs(value - e))  # the edge the figure is nearest
        why = f"inconclusive: {r.across(edge, (lo, hi), u)}"
    elif side == "inside":
        outcome, direction, why = "held", "inside", "held"
    else:
        outcome, direction = "missed", side
        why = "missed: " + r.gap(hi if side == "above" else lo, u, side)
    extra = _cause(explain, outcome, side, has_interval=r.needs is None)
    if extra and extra[-1] not in ".!?)":
        extra += "."
    text = f"{head}: {why}." + (" " + extra if extra else "")
    timed = (interval is not None or r.needs is not None) and p.measured_here and p.timed  # nor a count
    if outcome in ("missed", "inconclusive") and timed and "busy" not in extra:
        text += r.load()
    return Verdict(p, float(value), interval, outcome, direction, text, r.level)


def context(prediction: Prediction, measured: float | Estimate,
            within: tuple[float | None, float | None] | None = None) -> str:
    """A bound printed as context beside its measurement, with no verdict: for a bound that
    cannot fail here (see :meth:`Prediction.can_fail`), which a verdict would count as held.

    Args:
        prediction: the bound or range, as it would have been predicted.
        measured: an :class:`Estimate` or a plain number.
        within: the range the figure can take here (default: ``prediction.physical``).

    Returns:
        A markdown sentence: the bound, the measurement, and how far the bound lies from
        everything ``within`` (or, where it could fail, that it is a test and belongs in
        :func:`judge`).

    Raises:
        TypeError, ValueError: for a ``prediction`` that is not a :class:`Prediction`, a
            ``measured`` that is neither a number nor an Estimate, or a bad ``within``.
    """
    if not isinstance(prediction, Prediction):
        raise TypeError(f"prediction must be a Prediction, got {type(prediction).__name__}")
    r = reading(measured, None)
    p, u = prediction, prediction.unit
    lo, hi = _range("within", p.physical if within is None else within)
    text = (f"**Context, not a prediction** ({p.model}): {p.what}, {p.describe()}. "
            f"**{p.label()}:** {r.shown(u)}.")
    if p.can_fail(within):
        return text + " (This bound can fail here: judge it with a verdict.)"
    plo, phi = p.bounds()
    room = []
    if math.isfinite(plo):
        room.append(f"{si(plo, u)} lies {si(lo - plo, u)} below")
    if math.isfinite(phi):
        room.append(f"{si(phi, u)} lies {si(phi - hi, u)} above")
    return text + (f" The bound cannot fail here: {' and '.join(room)} every value this figure can "
                   f"take ({si(lo, u)} to {si(hi, u)}).")
