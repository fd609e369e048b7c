"""Sentences for notebook 11's verdicts on 1F1B and ZB-H1 with real layers: where a measured
ratio's interval lies against 1x at the digits it prints (:func:`zb_side`), the ZB-H1 model fed
with a measured ``F : I : W`` split (:func:`zb_split_step`), why ZB-H1's step lay where it did
(:func:`zb_step_note`), and what a measured ``F : B`` split does to 1F1B's bubble share
(:func:`fb_split_note`). Re-exported by :mod:`perfkit.parallel`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.estimate import Estimate
from perfkit.parallel.schedules import make_schedule
from perfkit.parallel.simulate import simulate, split_costs
from perfkit.units import si, si_interval

__all__ = ["band_side", "between_note", "fb_split_note", "zb_side", "zb_split_step", "zb_step_note"]


def zb_side(e: Estimate, x: float = 1.0) -> tuple[str, str]:
    """Where ratio ``e``'s interval lies against ``x``: ``("above" | "below" | "", "lo to hi")``,
    tested at the digits the interval is printed with in the second item. The digits start at 3
    and grow, up to 6, until the printed ends clear ``x`` (``0.9998x`` where 3 digits print
    ``1.00x``); where none does, ``""`` (the interval holds ``x``) with the ends at 3 digits.
    ``("", "")`` without an interval.

    Raises:
        TypeError, ValueError: for ``x`` not a finite number.
    """
    x = check_real("x", x)
    if not e.has_interval or e.low == e.high:
        return "", ""
    for digits in (3, 4, 5, 6):
        _, lo, hi = si_interval(e.value, e.low, e.high, "x", digits)
        lo_x, hi_x = (float(t[:-1].replace(",", "")) for t in (lo, hi))
        if lo_x > x or hi_x < x:
            return ("above" if lo_x > x else "below"), f"{lo} to {hi}"
    _, lo, hi = si_interval(e.value, e.low, e.high, "x")
    return "", f"{lo} to {hi}"


def between_note(resid: Estimate) -> str:
    """What each step's measured bubble share less its own simulated one, ``resid``, shows, read
    from its interval as printed: time between actions the simulator does not hold where the
    interval lies above 0, steps that idled less than the simulator charges where it lies below,
    and neither where it holds 0 or there is none. A clause starting with ": ", for after
    ``resid.text()``.

    Raises:
        TypeError: for ``resid`` not an :class:`~perfkit.estimate.Estimate`.
    """
    side = check_type("resid", resid, Estimate).clear_of(0.0)
    if side == "above":
        return (": time between actions the simulator does not hold (its cause is not measured here: Python "
                "between them, or a process waiting for its core).")
    if side == "below":
        return (": steps that idled less than the simulator, whose hop is the median of each step's delays, "
                "charges them.")
    held = "its interval holds 0" if resid.has_interval and resid.low != resid.high else "no interval"
    return (f": {held}, so this run shows neither time between actions that the simulator does not hold nor "
            "steps that idled less than it charges.")


def band_side(e: Estimate, low: float, high: float) -> str:
    """Where ratio ``e``'s point lies against a prediction's band ``low`` to ``high``, all three
    printed at one precision and compared as printed: ``"its point 0.989x lies above the band
    0.784x to 0.958x"`` (``"inside"``; ``"on an edge of"`` where the point prints as an edge).
    For a headline that prints an inconclusive verdict, whose interval reaches past an edge while
    its point may lie outside the band.

    Raises:
        TypeError, ValueError: for ``low`` or ``high`` not a finite number, or ``low > high``.
    """
    low, high = check_real("low", low), check_real("high", high)
    if low > high:
        raise ValueError(f"low must be at most high, got {low!r} > {high!r}")
    point = si_interval(e.value, min(low, e.value), max(high, e.value), "x")[0]   # one precision
    decimals = len(point[:-1].partition(".")[2])
    texts = [point] + [f"{x:,.{decimals}f}x" for x in (low, high)]
    v, lo, hi = (float(t[:-1].replace(",", "")) for t in texts)
    where = ("above" if v > hi else "below" if v < lo else
             "on an edge of" if v in (lo, hi) else "inside")
    return f"its point {texts[0]} lies {where} the band {texts[1]} to {texts[2]}"


def zb_split_step(stage_s: Sequence[float], f_i_w: Sequence[float], n_ranks: int, n_micro: int) -> float:
    """ZB-H1's step over 1F1B's that the simulator gives for stages of ``stage_s`` seconds (F +
    B each) split ``F : I : W`` as ``f_i_w`` (1F1B's ``B = I + W``), with the busy time held
    alike: ``(1 - 1F1B's bubble share) / (1 - ZB-H1's)``. The model fed with a measured split.

    Raises:
        TypeError, ValueError: for ``f_i_w`` not three times > 0, or as :func:`make_schedule`
            and :func:`perfkit.parallel.simulate.split_costs`.
    """
    f, i, w = _three("f_i_w", f_i_w)
    costs = split_costs(stage_s, {"F": f, "B": i + w, "I": i, "W": w})
    one, zb = (simulate(make_schedule(n, n_ranks, n_micro), costs).bubble_share for n in ("1f1b", "zb_h1"))
    return (1 - one) / (1 - zb)


def _two_fb(f_b: Sequence[float]) -> tuple[float, float]:
    times = check_items("f_b", f_b)
    if len(times) != 2:
        raise ValueError(f"f_b must hold two times, F and B, got {len(times)}")
    f, b = (check_real(f"f_b[{k}]", v, 0, lo_open=True) for k, v in enumerate(times))
    return f, b


def _three(name: str, f_i_w: Sequence[float]) -> tuple[float, float, float]:
    times = check_items(name, f_i_w)
    if len(times) != 3:
        raise ValueError(f"{name} must hold three times, F, I and W, got {len(times)}")
    f, i, w = (check_real(f"{name}[{k}]", v, 0, lo_open=True) for k, v in enumerate(times))
    return f, i, w


def busy_note(inside: Estimate, alone: float, drawn: float) -> str:
    """Where 1F1B's busy time per stage and micro-batch in the pipeline (``inside``, over the
    steps) lies against the same timed alone before the steps (``alone``, seconds), and where
    the drawn step's (``drawn``, the step nearest the median bubble, whose action times later
    sentences read) lies against that interval. A clause.

    Raises:
        TypeError, ValueError: for ``inside`` not an Estimate, or ``alone`` or ``drawn`` not > 0.
    """
    if not isinstance(inside, Estimate):
        raise TypeError(f"inside must be an Estimate, got {type(inside).__name__}")
    alone = check_real("alone", alone, 0, lo_open=True)
    drawn = check_real("drawn", drawn, 0, lo_open=True)
    way = {"above": "slower in the pipeline than alone", "below": "faster in the pipeline than alone"}.get(
        inside.clear_of(alone, "s"), "as fast in the pipeline as alone, within the interval")
    where = {"below": "above", "above": "below"}.get(inside.clear_of(drawn, "s"), "")
    text = (f"the actions ran {way}; the step drawn below, the one nearest the median bubble, was busy "
            f"{si(drawn, 's')} per stage and micro-batch, ")
    return text + (f"{where} this interval, so its bars are not the steps' typical ones (the action "
                   "times read below are medians over all the steps)" if where else
                   "within this interval" if inside.has_interval else "the steps too few for an interval")


def fb_split_note(stage_s: Sequence[float], f_b: Sequence[float], predicted: float, n_ranks: int,
                  n_micro: int) -> str:
    """What 1F1B's bubble share becomes when the simulator, fed with stages of ``stage_s``
    seconds (F + B each), splits them ``F : B`` as measured (``f_b``) instead of the
    prediction's ``1 : 2``, against ``predicted``: where the two agree at the 3 digits printed,
    the sentence says the split does not move the share (with equal stages 1F1B's share is
    ``(p - 1) / (m + p - 1)`` whatever ``F : B``), not that it tested a cause. A sentence.

    Raises:
        TypeError, ValueError: for ``f_b`` not two times > 0, ``predicted`` not in [0, 1], or as
            :func:`make_schedule` and :func:`perfkit.parallel.simulate.split_costs`.
    """
    f, b = _two_fb(f_b)
    predicted = check_real("predicted", predicted, 0, 1)
    x = simulate(make_schedule("1f1b", n_ranks, n_micro), split_costs(stage_s, {"F": f, "B": b})).bubble_share
    head = (f"With F : B = 1 : {b / f:.2f} as the steps ran them (the prediction's 1 : 2), the simulator fed "
            f"with the stage costs timed alone gives")
    if f"{x:.3f}" == f"{predicted:.3f}":
        return (f"{head} the prediction's {x:.3f} again: at these stage costs how a stage's time splits "
                "between F and B does not move 1F1B's share (with equal stages it is (p - 1) / (m + p - 1) "
                "whatever F : B), so the split explains none of the gap.")
    return f"{head} {x:.3f}, {x - predicted:+.3f} from the prediction."


def zb_step_note(step: Estimate, busy: Estimate, idle: Estimate, model_step: float,
                 f_i_w: Sequence[float], share: Estimate | None = None,
                 model_share: float | None = None, split_step: float | None = None,
                 f_b: Sequence[float] | None = None, busy_mb: float | None = None,
                 steps: int | None = None, stage_s: Sequence[float] | None = None) -> str:
    """Why ZB-H1's measured step over 1F1B's (``step``) lies where it does against the model's
    ``model_step``, a model that holds the busy time at 1F1B's: the measured busy time per
    stage (``busy``, ZB-H1's over 1F1B's) and bubble factor (``idle``, ``(1 - 1F1B's share) /
    (1 - ZB-H1's)``), each against the model's, with which moved the step more; the split's
    measured action times ``f_i_w`` (F, I, W) against the model's ``1 : 1 : 1`` through Qi et
    al.'s bubble ``(p - 1)(F + I - W)``: with ``stage_s`` (the stage costs the model was fed,
    seconds of F + B each) against the model's own ``F = I = W``, a third of their mean, and
    per the measured F beside it; without, per the measured F alone, labelled so; if given, the
    bubble share against the model's, and
    ``split_step``, what the model fed with the measured split would have predicted
    (:func:`zb_split_step`). With ``f_b``, 1F1B's F and B (seconds, from the same kind of
    step as ``f_i_w``), it sets ZB-H1's unsplit F against 1F1B's and I + W against B, and
    names the larger part of the change in busy time per micro-batch (this implementation's
    split schedules run a tapped forward, so F need not stay 1F1B's). Whether the step shows
    a gain is read from its interval, tested and printed at one precision (:func:`zb_side`).
    With ``f_b`` and ``busy_mb``, 1F1B's busy time per stage and micro-batch (seconds, the
    median over its steps), it sets the drawn steps' change beside the one the judged ``busy``
    implies (``(busy - 1) x busy_mb``, with its interval) and whether their change lies inside it.
    With ``steps``, ``f_i_w`` and ``f_b`` are each the median over that many steps of each
    schedule (of each step's median), not one drawn step's, and the sentences say so. Which
    factor moved the step more is said on the point figures, and flagged where that factor's
    interval holds the model's value. Sentences, for a verdict.

    Raises:
        TypeError, ValueError: for ``model_step`` or ``split_step`` not > 0, ``f_i_w`` not
            three times > 0, ``f_b`` not two times > 0, or ``stage_s`` not times >= 0 with a
            positive mean.
    """
    check_real("model_step", model_step, 0, lo_open=True)
    own = None if stage_s is None else check_real("stage_s mean", statistics.mean(
        check_real(f"stage_s[{k}]", x, 0) for k, x in enumerate(check_items("stage_s", stage_s))), 0,
        lo_open=True) / 3   # the model's F = I = W
    f, i, w = _three("f_i_w", f_i_w)
    side, ends = zb_side(step)
    moved = {"below": "shortened", "above": "lengthened"}.get(side)
    both = step.has_interval and not moved and model_step < 1 and not zb_side(step, model_step)[0]
    gain = ("too few rounds for an interval, so this run cannot tell whether ZB-H1 shortened the step"
            if not step.has_interval else
            f"ZB-H1 {moved} the step: {step.point('x')}, its interval {ends} {side} 1x" if moved else
            f"this run tells no gain from the predicted one: ZB-H1's step {step.point('x')} of 1F1B's, its "
            f"interval {ends} holds both 1x and the model's {model_step:.3f}x" if both else
            ("the predicted gain did not appear" if model_step < 1 else "no change shows")
            + f": ZB-H1's step {step.point('x')} of 1F1B's, its interval {ends} holds 1x")
    by_busy, by_idle = busy.value, idle.value / model_step   # the step over the model's, in two factors
    larger = "busy time" if abs(math.log(by_busy)) >= abs(math.log(by_idle)) else "bubble factor"
    unresolved = not zb_side(*((busy, 1.0) if larger == "busy time" else (idle, model_step)))[0]

    def against(e: Estimate, x: float, whose: str = "the model's") -> str:
        where, ends = zb_side(e, x)
        whose += " 1x" if x == 1 else f" {x:.3f}x"
        return f"its interval {ends} wholly {where} {whose}" if where else \
            f"its interval {ends} holds {whose}" if ends else "no interval"

    above = step.has_interval and not moved and model_step < 1 and zb_side(step, model_step)[0] == "above"
    model_txt = (f", and lies wholly above the model's {model_step:.3f}x: the step shows neither a gain "
                 "nor the one the model gave" if above else
                 "" if both else f", where the model gave {model_step:.3f}x")
    text = (f"{gain[0].upper()}{gain[1:]}{model_txt}. Measured, the busy time "
            f"per stage {busy.point('x')} ({against(busy, 1.0)}) and the bubble factor (1 - 1F1B's share) / "
            f"(1 - ZB-H1's) {idle.point('x')} "
            f"({against(idle, model_step)}): {by_busy:.2f}x and {by_idle:.2f}x the model's, the {larger} "
            f"moving the step more" + (" on the point figures, though its interval holds the model's: which "
                                       "moved it more is not resolved" if unresolved else "")
            + f". The split's actions ran F : I : W = 1 : {i / f:.2f} : {w / f:.2f}, the "
            f"model's 1 : 1 : 1; Qi et al.'s bubble, (p - 1)(F + I - W), is "
            + (f"{si(f + i - w, 's')} per (p - 1) at these times, {(f + i - w) / own:.2f}x the model's "
               f"(p - 1) F with its F = I = W = {si(own, 's')}, a third of a stage timed alone; per the "
               f"measured F, {(f + i - w) / f:.2f}x (p - 1) F" if own is not None else
               f"{(f + i - w) / f:.2f}x (p - 1) F at the measured F"))
    if share is not None and model_share is not None:
        (s1, e1), (sm, em) = zb_side(share), zb_side(share, model_share)   # direction read from the interval
        how = {"below": "fell to", "above": "rose to"}.get(s1, "was")

        def rel(side: str, what: str) -> str:
            return f"wholly {side} {what}" if side else f"holds {what}"

        text += (f"; the bubble share {how} {share.point('x')} of 1F1B's ("
                 + (f"its interval {max(e1, em, key=len)} {rel(s1, '1x')} and {rel(sm, 'the model')}'s "
                    f"{model_share:.3f}x" if e1 else "no interval") + ")")
    if split_step is not None:
        x = check_real("split_step", split_step, 0, lo_open=True)
        text += (f". Fed with this split (1F1B's B = I + W), the model would have predicted {x:.3f}x, not "
                 f"the recorded {model_step:.3f}x (the measured step: {against(step, x, 'that')})")
    if f_b is not None:
        f1, b1 = _two_fb(f_b)
        d_f, d_b = f - f1, i + w - b1
        over = (f"medians over the {check_int('steps', steps, 1)} steps of each schedule" if steps is not None
                else "medians over the one step drawn from each schedule")
        text += (f". Per action ({over}), ZB-H1's F, which it "
                 f"does not split, ran {f / f1:.2f}x 1F1B's ({si(f, 's')} against {si(f1, 's')}; in a split "
                 f"schedule every Linear's forward runs tapped, recording its call for W) and its I + W "
                 f"{(i + w) / b1:.2f}x 1F1B's B ({si(i + w, 's')} against {si(b1, 's')})")
        if d_f + d_b > 0:   # the actions' time per micro-batch rose: name the larger part
            part, other = ("the forward", "the split backward") if d_f >= d_b else \
                ("the split backward", "the forward")
            text += (f": of the {si(d_f + d_b, 's')} more per micro-batch, {part} carries "
                     + (f"{max(d_f, d_b) / (d_f + d_b):.0%}" if min(d_f, d_b) >= 0 else
                        f"all, {other} having run faster"))
        if busy_mb is not None:
            text += _judged_extra(busy, check_real("busy_mb", busy_mb, 0, lo_open=True), d_f + d_b,
                                  steps is not None)
    return text + "."


def _judged_extra(busy: Estimate, busy_mb: float, drawn: float, pooled: bool = False) -> str:
    """The drawn steps' change per micro-batch (``drawn``, seconds; with ``pooled``, the change
    in the medians over all steps) beside the one the judged busy-time ratio implies on 1F1B's
    ``busy_mb``: a clause."""
    head = (". Those are medians of each schedule's own steps, not paired by round, without an interval"
            if pooled else ". Those are one step of each schedule, without an interval")
    if not busy.has_interval or busy.value <= 1 or drawn <= 0:
        return f"{head}; the busy time per stage judged over the rounds is {busy.point('x')} of 1F1B's"
    implied, lo, hi = ((x - 1) * busy_mb for x in (busy.value, busy.low, busy.high))
    ends = f"{si(lo, 's')} to {si(hi, 's')} from its interval" if busy.low > 1 else "its interval holds 1x"
    where = ("" if busy.low <= 1 else ", inside that interval" if lo <= drawn <= hi else
             f", {'above' if drawn > hi else 'below'} that interval: the two estimates differ, and neither "
             "is a share of the other")   # unpaired medians against a paired ratio: no coverage above 100 %
    return (f"{head}: the busy time per stage judged over the rounds, {busy.point('x')} of 1F1B's median "
            f"{si(busy_mb, 's')} per micro-batch, implies about {si(implied, 's')} more ({ends}); "
            f"the {'medians' if pooled else 'drawn steps'}' change is {si(drawn, 's')}{where}")
