"""Sentences of module 09's verdicts, computed from their measurements: where an interval lies
against a reference weighed by the A/A control (:func:`control_gap_text`), against the cost of the
ops timed alone (:func:`ops_gap_text`), and where a median of order-balanced pairs lies against
each order's median (:func:`pair_order_text`), a verdict weighed by the gap between its orders
(:func:`order_gap_text`), where other statistics of an undecided figure
lie (:func:`others_side_text`), what a larger DDP bucket cap's gain comes from
(:func:`bucket_figure`, :func:`bucket_source_text`), and which timed verdicts would change status
weighed by the largest reading of identical work instead of the A/A control's reach
(:func:`identical_work_reach`, :func:`reweighed_statuses`, :func:`reweighed_text`). Re-exported
by :mod:`perfkit.viz.claims`.

Usage::

    print("GELU's step ..." + ops_gap_text(pin, step_speedup, ops_speedup))
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from perfkit._checks import check_real, check_type
from perfkit.data.claims import PinTiming, interval_gap
from perfkit.estimate import Estimate
from perfkit.verdict import Claim, ClaimVerdict, assess

__all__ = ["bucket_figure", "bucket_source_text", "control_gap_text", "gap_statuses",
           "identical_work_reach", "ops_gap_text", "order_gap_text", "others_side_text",
           "pair_order_text", "reweighed_statuses", "reweighed_text", "same_work_text"]


def control_gap_text(pin: PinTiming, est: Estimate, reference: float, unit: str = "x") -> str:
    """Where ``est``'s interval lies against ``reference``, weighed by the A/A control:
    ``"lies 2.0% below 1x, within the A/A control's 5.9%: not asserted"``, ``"... beyond the A/A
    control's 5.9%"``, or, with no control (CUDA: the two loops differ), the gap alone.

    Raises:
        TypeError, ValueError: for a ``pin`` that is not a PinTiming, an ``est`` that is not an
            Estimate, a ``reference`` that is not a finite number > 0 or a ``unit`` not a str.
    """
    if not isinstance(pin, PinTiming):
        raise TypeError(f"pin must be a perfkit.data.claims.PinTiming, got {type(pin).__name__}")
    gap = interval_gap(est, reference)  # checks est and reference
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a str, got {unit!r}")
    ref = f"{reference:.3g}{unit}"
    if gap == 0:
        return f"holds {ref}"
    out = f"lies {gap:.1%} {'above' if est.low > reference else 'below'} {ref}"
    reach = pin.reach()
    if reach is None:
        return out + " (no A/A control ran: with CUDA the two loops differ)"
    return out + (f", beyond the A/A control's {reach:.1%}" if pin.resolves(est, reference) else
                  f", within the A/A control's {reach:.1%}: not asserted")


def _apart(readings: Mapping[str, float | Estimate]) -> dict[str, float]:
    """How far each reading of identical work lies from 1x (see :func:`same_work_text`)."""
    if not isinstance(readings, Mapping):
        raise TypeError(f"readings must map names to ratios, got {type(readings).__name__}")
    apart = {}
    for name, r in readings.items():
        if isinstance(r, Estimate) and r.has_interval and 0 < r.low <= r.high < math.inf:
            apart[name] = max(1 - r.low, r.high - 1, 0.0)
            continue
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r < math.inf:
            raise ValueError(f"readings[{name!r}] must be a finite ratio > 0 or an Estimate of one with an "
                             f"interval, got {r!r}")
        apart[name] = max(r, 1 / r) - 1
    return apart


def identical_work_reach(pin: PinTiming, readings: Mapping[str, float | Estimate]) -> float | None:
    """The largest of the A/A control's reach and how far each of ``readings`` (as
    :func:`same_work_text` reads them) lies from 1x: the least this design's own error reaches by
    every reading of identical work. ``None`` without a control (CUDA).

    Raises:
        TypeError, ValueError: for a ``pin`` that is not a PinTiming or a bad reading.
    """
    check_type("pin", pin, PinTiming)
    apart, reach = _apart(readings), pin.reach()
    return None if reach is None else max([reach, *apart.values()])


def reweighed_statuses(judged: Mapping[str, tuple[Claim, float | Estimate, Mapping]],
                       verdicts: Mapping[str, ClaimVerdict], error: float) -> dict[str, tuple[str, str]]:
    """For each timed claim of ``judged`` (name -> ``(claim, measured, assess's other keywords)``)
    whose verdict judged it, ``(its status in verdicts, the status assess gives weighed by error
    instead)``.

    Raises:
        TypeError, ValueError: for a ``judged`` name not in ``verdicts``, or as :func:`assess`.
    """
    check_type("judged", judged, Mapping)
    check_real("error", error, 0)
    out = {}
    for name, (claim, measured, kw) in judged.items():
        if name not in verdicts:
            raise ValueError(f"judged[{name!r}] has no verdict")
        if claim.timed and verdicts[name].judged:
            out[name] = (verdicts[name].status, assess(claim, measured, **{**kw, "error": error}).status)
    return out


def reweighed_text(statuses: Mapping[str, tuple[str, str]], error: float, control: float) -> str:
    """Which timed verdicts (``statuses``, :func:`reweighed_statuses`) would change status weighed by
    ``error`` (the largest reading of identical work) instead of ``control`` (the A/A control's
    reach), named with both statuses, or that none would.

    Raises:
        TypeError, ValueError: for ``error`` or ``control`` that is not a finite number >= 0.
    """
    check_real("error", error, 0)
    check_real("control", control, 0)
    changed = {n: s for n, s in statuses.items() if s[0] != s[1]}
    head = (f"Weighed by {error:.1%}, the largest reading of identical work, instead of the A/A control's "
            f"{control:.1%}, of the {len(statuses)} timed verdict(s) so far: ")
    if not changed:
        return head + "none changes status."
    return head + f"{len(changed)} would change: " + "; ".join(
        f"{n}: {a} -> {b}" for n, (a, b) in changed.items()) + "."


def same_work_text(pin: PinTiming, readings: Mapping[str, float], est: Estimate, what: str,
                   than: str) -> str:
    """How far identical work read apart across the notebook, and ``est``'s interval against 1x
    weighed by the largest: the A/A control's reach beside each of ``readings`` (a name -> what
    one comparison of identical work read: a ratio without an interval, read as ``max(r, 1/r) - 1``,
    or an :class:`~perfkit.stats.Estimate` with one, read as the A/A control's reach is, how far its
    interval reaches from 1x: one yardstick for every reading that has an interval), so that the
    design's own error is said to reach at least the largest of them; then where ``est`` (``what``, over
    ``than``) lies against 1x: within that error, it is not shown faster or slower than ``than``.
    "" without a control (CUDA: the two loops differ).

    Raises:
        TypeError, ValueError: for a ``pin`` that is not a PinTiming, a reading that is not a
            finite ratio > 0 or an Estimate of one with an interval, an ``est`` that is not an
            Estimate, or an empty ``what`` or ``than``.
    """
    if not isinstance(pin, PinTiming):
        raise TypeError(f"pin must be a perfkit.data.claims.PinTiming, got {type(pin).__name__}")
    gap = interval_gap(est, 1.0)  # checks est
    for name, v in (("what", what), ("than", than)):
        if not isinstance(v, str) or not v:
            raise ValueError(f"{name} must be a non-empty str, got {v!r}")
    apart = _apart(readings)
    reach = pin.reach()
    if reach is None:
        return ""
    most = max([reach, *apart.values()])
    out = (f"Identical work, read apart in this notebook: the A/A control's interval {reach:.1%} from 1x"
           + "".join(f"; {name}, {d:.1%}" for name, d in apart.items())
           + f": this design's own error reaches at least {most:.1%}"
           + (", more than the A/A control's reach alone" if most > reach else "") + ". ")
    side = "slower" if est.high < 1 else "faster"
    if gap == 0:
        return out + f"{what}'s interval holds 1x: it is not shown faster or slower than {than}."
    return out + (f"{what}'s interval lies {gap:.1%} {'below' if est.high < 1 else 'above'} 1x, "
                  + (f"beyond even that: {side} than {than} by more than identical work read apart here."
                     if gap > most else f"within that: this run does not show it {side} than {than}."))


def ops_gap_text(pin: PinTiming, est: Estimate, reference: float, what: str = "the two ops") -> str:
    """A step's speedup interval ``est`` against ``reference``, the speedup ``what`` (ops timed
    alone) imply: ``"The step's interval holds 0.967x; the two ops can account for the step's
    difference."``, or where it lies clear of it, on which side, weighed by the A/A control
    (:func:`control_gap_text`): a gap within the control's reach is said, not asserted, and never
    read as the ops accounting for the step.

    Raises:
        TypeError, ValueError: as :func:`control_gap_text`, or for an empty ``what``.
    """
    if not isinstance(what, str) or not what:
        raise ValueError(f"what must name the ops timed alone, got {what!r}")
    where = control_gap_text(pin, est, reference)  # checks pin, est and reference
    if interval_gap(est, reference) == 0:
        return f"The step's interval {where}; {what} can account for the step's difference."
    side = (f"the step lost more than {what} cost alone" if est.high < reference else
            f"{what} cost less inside the step than alone")
    return (f"The step's interval {where}; " + (f"{side}, which this run does not break down." if
            pin.resolves(est, reference) else f"by this interval {side}, by less than the A/A control's "
                                              "reach."))


def pair_order_text(value: float, by_order: Mapping[str, float], ratios: list[float]) -> str:
    """Where the judged median of order-balanced pairs (``value``) lies against the median ratio
    of each order (``by_order``), with the per-step ``ratios`` it was made from: ``""`` where it
    lies between them; else a clause (starting ``"; "``) with how far, how far apart the orders
    lie, and whether the ratios' geometric mean lies on the same side of their median (a skew
    that a mean of two steps draws toward) or not (then this run does not say what moved it).

    Raises:
        ValueError: for ratios or medians that are not finite numbers > 0.
    """
    orders, steps = list(by_order.values()), list(ratios)
    if not orders or not steps or not all(isinstance(r, (int, float)) and 0 < r < math.inf
                                          for r in (value, *orders, *steps)):
        raise ValueError("value, by_order's medians and ratios must be finite numbers > 0")
    lo, hi = min(orders), max(orders)
    if lo <= value <= hi:
        return ""
    below = value < lo
    geo, med = math.exp(sum(map(math.log, steps)) / len(steps)), statistics.median(steps)
    off, apart, side = abs(value / (lo if below else hi) - 1), hi / lo - 1, "below" if below else "above"
    skew = (geo / med - 1 <= -off / 2) if below else (geo / med - 1 >= off / 2)  # a tail worth half the shift
    where = "above" if geo > med else "below" if geo < med else "at"
    return (f"; the judged median of the pairs lies {off:.1%} {side} both orders' medians, which lie "
            f"{apart:.1%} apart" + (", so the order does not explain it" if apart < off else "")
            + (f": the per-step ratios' geometric mean, {geo:.3g}x, lies {side} their median, {med:.3g}x, a "
               "tail on that side, which each pair's mean of two steps draws toward" if skew else
               ": no tail of the per-step ratios on that side explains it (their geometric mean, "
               f"{geo:.3g}x, lies {where} their median, {med:.3g}x"
               + (", by less than half that gap" if where == side else "")
               + "), so this run does not say what moved it"))


def others_side_text(est: Estimate, others: Mapping[str, float], edge: float = 1.0, unit: str = "x") -> str:
    """Where other statistics of the figure ``est`` estimates (``others``: name -> value, each
    without an interval) lie against ``edge``, where ``est``'s interval reaches across it: a clause
    (starting ``"; "``) saying whether they all lie on one side, and that they decide nothing, the
    verdict judging ``est``'s interval only; ``""`` where that interval lies clear of ``edge`` (or
    has none) or there are no others.

    Raises:
        TypeError, ValueError: for an ``est`` that is not an Estimate, or an ``edge`` or a value in
            ``others`` that is not a finite number > 0.
    """
    if not isinstance(est, Estimate):
        raise TypeError(f"est must be a perfkit.estimate.Estimate, got {type(est).__name__}")
    if not isinstance(others, Mapping):
        raise TypeError(f"others must map names to values, got {type(others).__name__}")
    values = list(others.values())
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf
               for v in (edge, *values)):
        raise ValueError("edge and others' values must be finite numbers > 0")
    if not values or not est.has_interval or est.low == est.high or est.clear_of(edge, unit):
        return ""
    listed = ", ".join(f"{name} {v:.3g}{unit}" for name, v in others.items())
    sides = {"below" if v < edge else "above" if v > edge else "at" for v in values}
    e = f"{edge:.3g}{unit}"
    lean = (f"every other statistic of these samples lies {sides.pop()} {e}" if len(sides) == 1 else
            f"the other statistics of these samples do not lie on one side of {e}")
    return (f"; {lean} ({listed}), but none carries an interval, so none decides the side: the verdict "
            f"judges its own statistic, whose interval reaches across {e}")


def gap_statuses(claim: Claim, measured: Estimate, error: float, pair: Mapping[str, float],
                 kind: str) -> tuple[float, str, str]:
    """The relative gap between the two figures of ``pair`` (name -> a positive figure, checked
    as a finite ``kind``, e.g. "ratio > 0"), and the statuses :func:`perfkit.verdict.assess`
    gives ``measured`` weighed by ``error`` and by that gap: one job's own reading of its error
    set beside the A/A control's (:func:`order_gap_text`, ``same_layout_text``)."""
    for name, v in pair.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise ValueError(f"{name} must be a finite {kind}, got {v!r}")
    a, b = pair.values()
    gap = max(a, b) / min(a, b) - 1
    return gap, assess(claim, measured, error=error).status, assess(claim, measured, error=gap).status


def order_gap_text(claim: Claim, measured: Estimate, first: float, second: float, error: float) -> str:
    """A timed verdict on order-balanced pairs weighed again by the gap between its two orders:
    the paired ratios' medians with one setting first (``first``) and with the other first
    (``second``) read apart by a position effect the balanced pairs cancel by design, one that the
    A/A control's reach ``error`` (paired noise of one loop within one run) does not measure. Says,
    computed, how the gap compares with ``error`` and which status :func:`perfkit.verdict.assess`
    gives weighed by the gap instead.

    Raises:
        TypeError, ValueError: for ratios that are not finite numbers > 0, or as :func:`assess`.
    """
    gap, base, alt = gap_statuses(claim, measured, error, {"first": first, "second": second}, "ratio > 0")
    against = (f"{'more' if gap > error else 'no more'} than the {error:.1%} the A/A control read, "
               "which measures only the paired noise of one loop within one run" if error else
               "with no A/A control to weigh the verdict")
    return (f"The two orders read {gap:.1%} apart, {against}; the balanced pairs cancel the order by design, "
            "yet weighed by that gap instead, the rule "
            f"gives {alt}" + (" as well." if alt == base else f", not {base}: the label rests on which error "
                              "is used."))


def _bucket_calls(calls: Mapping) -> tuple[int, int, int]:
    """All-reduces per step at 500 MB, DDP's default (``None``) and 25 MB written out."""
    if not isinstance(calls, Mapping) or any(k not in calls for k in (500, None, 25)):
        raise ValueError(f"calls must map the caps 500, None (DDP's default) and 25 to counts, got {calls!r}")
    got = tuple(calls[k] for k in (500, None, 25))
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in got):
        raise ValueError(f"calls must be ints >= 1, got {calls!r}")
    return got  # type: ignore[return-value]


def _alls(n: int) -> str:
    return f"{n} all-reduce{'s' * (n != 1)}"


def bucket_figure(calls: Mapping) -> str:
    """The 500 MB claim's figure, naming the all-reduces per step each cap made (``calls``: cap in
    MB -> count, ``None`` DDP's default, 25 and 500 among them): ``"step speedup of 500 MB buckets
    over DDP's default, 1 all-reduce a step against 2 (25 MB written out: 1 too)"``.

    Raises:
        ValueError: for ``calls`` without those caps, or counts that are not ints >= 1.
    """
    big, dflt, mid = _bucket_calls(calls)
    return (f"step speedup of 500 MB buckets over DDP's default, {_alls(big)} a step against {dflt}"
            f" (25 MB written out: {mid}{' too' if mid == big else ''})")


def bucket_source_text(calls: Mapping, grad_mib: float) -> str:
    """What 500 MB's speedup over DDP's default compares, computed from the all-reduces per step
    (``calls`` as in :func:`bucket_figure`) on a ``grad_mib`` MiB gradient: where 25 MB written out
    made as few as 500 MB, fewer buckets on a gradient that small, not a cap of 500 MB against one
    of 25 MB, whichever way the figure went (a sentence starting with a space); ``""`` where 500 MB
    made no fewer all-reduces than the default.

    Raises:
        ValueError: for bad ``calls`` or a ``grad_mib`` that is not a finite number > 0.
    """
    big, dflt, mid = _bucket_calls(calls)
    if isinstance(grad_mib, bool) or not isinstance(grad_mib, int | float) or not 0 < grad_mib < math.inf:
        raise ValueError(f"grad_mib must be a finite number > 0, got {grad_mib!r}")
    if big >= dflt:
        return ""
    if mid != big:
        return (f" This compares {_alls(big)} a step against the default's {dflt}; 25 MB written out made "
                f"{mid} here.")
    return (f" This compares {_alls(big)} a step against the default's {dflt}, not a cap of 500 MB against "
            f"a smaller one: on this {grad_mib:.2f} MiB gradient 25 MB written out made {mid} too, so the "
            "figure measures fewer buckets on a gradient this small, not caps of 500 MB-1 GB against 25 MB "
            "ones.")
