"""Sentences notebook 12 prints beside its attention timings (:mod:`perfkit.viz.attention`
re-exports them): whether tiled calls outran the tile model's fitted rate (:func:`rate_note`),
what a median's rounds were (:func:`rounds_note`), and whether the machine's speed moved
between the two longest lengths, read from the control, one fixed matmul timed in the same
rounds at every length (:func:`row_note`, :func:`row_flag`).

Usage::

    pts = time_attention([512, 1024], tiles=[32, 128], repeat=5)   # compute.attention_cost
    print(rate_note(pts, TileCostModel.fit(pts)) + row_note(pts, "eager") + row_flag(pts))
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from perfkit._checks import check_items, check_real, check_type
from perfkit.compute.attention_cost import CONTROL, CONTROL_SIZE, AttentionTiming, TileCostModel
from perfkit.estimate import Estimate
from perfkit.stats import median_interval
from perfkit.units import si, si_beside

__all__ = ["CONTROL_OUTLIER", "rate_note", "rounds_note", "row_flag", "row_note"]

CONTROL_OUTLIER = 2.0
"""A control round that took more than this many times its length's median is named: with a few
rounds per length it can set an interval's end by itself, and so make two lengths' intervals
overlap that the other rounds would keep apart."""


def rate_note(points: Sequence[AttentionTiming], model: TileCostModel, fitted: bool = False) -> str:
    """Whether any tiled call in ``points``, whole (its per-tile overheads included), ran above
    ``model``'s fitted FLOP-rate parameter, above which the model's own times never run: where
    some did, a sentence naming them with their whole-call rates (the fit's rate is then not one
    the tiles run at: one rate and one cost per visit do not fit every tile size); where none
    did, a sentence saying that each call of ``points`` stayed below it, naming the lengths they
    cover (``fitted``: the lengths the model was fitted on, said so), so that it is never read
    as a claim about calls outside them. Starts with a space.

    Raises:
        TypeError: for points that are not :class:`AttentionTiming` or ``model`` not a
            :class:`TileCostModel`.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    check_type("model", model, TileCostModel)
    check_type("fitted", fitted, bool)
    flash = [p for p in pts if p.impl == "flash"]
    fast = [p for p in flash if p.flops / p.median_s > model.flop_rate]
    digits = 3  # enough that each call named "above" prints above the fit's rate

    def alike(d: int) -> bool:
        return any(si(p.flops / p.median_s, "FLOP/s", d) == si(model.flop_rate, "FLOP/s", d) for p in fast)

    while digits < 6 and alike(digits):
        digits += 1
    rate = si(model.flop_rate, "FLOP/s", digits)
    if not fast:
        lens = sorted({p.seq_len for p in flash})
        at = " and ".join(x for x in (", ".join(map(str, lens[:-1])), str(lens[-1]) if lens else "") if x)
        return (f" Every {'fitted ' if fitted else ''}tiled call (T = {at}) ran below the fitted rate "
                f"parameter, {rate}, as the model's own times, which add each tile visit's cost to the "
                "FLOPs' time, do.")
    names = ", ".join(f"tile {p.tile} at T = {p.seq_len} ({si(p.flops / p.median_s, 'FLOP/s', digits)})"
                      for p in fast)
    return (f" Whole calls, their tile visits included, ran above the fitted rate parameter, {rate}: "
            f"{names}. The model's own times, which add each visit's cost to the FLOPs' time, never run "
            "above that rate, so it is a fitted parameter, not a rate the tiles run at: one rate and one "
            "cost per visit do not fit every tile size alike.")


def rounds_note(times_s: Sequence[float], measured: Estimate, where: str) -> str:
    """A sentence on the rounds behind ``measured`` (their median interval): their range, the
    slowest round over their median and the next slowest over it, and, where the slowest is over
    twice the next slowest and is the interval's high end, that this one round sets that end
    (an order-statistic interval's ends are rounds' own times). ``where`` names the rounds
    (``"at T = 1536"``).

    Raises:
        TypeError, ValueError: for times not numbers > 0, ``measured`` not an
            :class:`~perfkit.estimate.Estimate` or ``where`` not a string.
    """
    ts = sorted(check_real(f"times_s[{i}]", t, 0, lo_open=True)
                for i, t in enumerate(check_items("times_s", times_s)))
    est = check_type("measured", measured, Estimate)
    check_type("where", where, str)
    med = statistics.median(ts)
    text = f"Its {len(ts)} rounds {where} ran from {si(ts[0], 's')} to {si(ts[-1], 's')}"
    if len(ts) < 3:
        return text + "."
    text += f", the slowest {ts[-1] / med:.3g}x their median, the next slowest {ts[-2] / med:.3g}x"
    if ts[-1] > 2 * ts[-2] and est.has_interval and est.high >= ts[-1]:
        text += (f": one round, {ts[-1] / ts[-2]:.3g}x the next slowest, sets the interval's high end by "
                 "itself (a round the machine slowed, or a call that ran so; this run does not tell which)")
    return text + "."


def _per_flop_change(pts: Sequence[AttentionTiming], impl: str, tile: int = 0) -> float | None:
    """One column's change in time per FLOP over the two longest lengths (None if not timed at both)."""
    lens = sorted({p.seq_len for p in pts})[-2:]
    at = {p.seq_len: p.median_s / p.flops for p in pts if p.impl == impl and p.tile == tile}
    return at[lens[1]] / at[lens[0]] - 1 if len(lens) == 2 and all(t in at for t in lens) else None


def _control_move(pts: Sequence[AttentionTiming]) -> tuple[int, int, float, str, str] | None:
    """The control's change in median time over the two longest lengths: ``(a, b, change, state,
    intervals)``, ``state`` ``"apart"`` where its median intervals at the two lengths do not
    overlap, ``"overlap"`` where they do, ``"few"`` where either has too few rounds for one;
    ``intervals`` prints both in one unit, the prefix and decimals of the one with the smaller
    median. None without the control at both lengths."""
    lens = sorted({p.seq_len for p in pts})[-2:]
    ctl = {p.seq_len: median_interval(p.times_s) for p in pts if p.impl == CONTROL}
    if len(lens) < 2 or not all(t in ctl for t in lens):
        return None
    ea, eb = ctl[lens[0]], ctl[lens[1]]
    if not (ea.has_interval and eb.has_interval):
        return lens[0], lens[1], eb.value / ea.value - 1, "few", ""
    apart = ea.high < eb.low or eb.high < ea.low
    ref = min(ea, eb, key=lambda e: e.value)
    shown = " and ".join(" to ".join(si_beside(x, ref.value, ref.low, ref.high, "s") for x in (e.low, e.high))
                         for e in (ea, eb))
    return lens[0], lens[1], eb.value / ea.value - 1, "apart" if apart else "overlap", shown


def _control_outliers(pts: Sequence[AttentionTiming], lens: Sequence[int]) -> tuple[str, bool]:
    """``(clause, sets_end)``: a clause naming each control round at ``lens`` that took over
    :data:`CONTROL_OUTLIER` times its length's median, in the unit :func:`_control_move` prints
    the intervals in, and whether it is that interval's high end (``sets_end`` where one is);
    ``""`` where none did."""
    ctl = [(p.seq_len, p.times_s, median_interval(p.times_s))
           for p in pts if p.impl == CONTROL and p.seq_len in lens]
    if not ctl:
        return "", False
    ref = min((e for _, _, e in ctl), key=lambda e: e.value)
    said, sets_end = [], False
    for n, times, e in ctl:
        slowest = max(times)
        if slowest > CONTROL_OUTLIER * e.value:
            ends = e.has_interval and e.high >= slowest
            sets_end = sets_end or ends
            shown = si_beside(slowest, ref.value, ref.low, ref.high, "s")   # in the intervals' unit
            said.append(f"one control round at T = {n}, {shown}, took {slowest / e.value:.1f}x that length's "
                        "median" + (" and sets its interval's high end by itself" if ends else ""))
    return ("; " + " and ".join(said) if said else ""), sets_end


def row_flag(points: Sequence[AttentionTiming]) -> str:
    """A clause for a headline where the control's median intervals at the two longest lengths
    lie apart (the machine's speed moved between them, which the outcome does not mark), as
    :func:`row_note` reads it; ``""`` otherwise. Starts with a space.

    Raises:
        TypeError, ValueError: for no points or points that are not :class:`AttentionTiming`.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    move = _control_move(pts)
    if move is None or move[3] != "apart":
        return ""
    a, b, ctl, _, _ = move
    return (f" (the control, a fixed matmul timed in the same rounds, changed {ctl:+.0%} in time from "
            f"T = {a} to {b}, its intervals apart: the machine's speed moved, which the outcome does not "
            "mark)")


def row_note(points: Sequence[AttentionTiming], impl: str, tile: int = 0, miss: float | None = None,
             band: float | None = None) -> str:
    """One column's change in time per FLOP over the two longest lengths beside the control's
    change in time (one fixed matmul, the same call at every length, timed in the same rounds):
    where the control's median intervals at the two lengths lie apart, the machine's speed moved
    and this run does not separate the column's own change from it; with ``miss`` (the column's
    miss at the longest length) and ``band``, also that miss were the control's change every
    call's. Where they overlap, the control does not show the machine's speed moving; with too
    few rounds for intervals, this run cannot say. Both intervals print in one unit, and a control
    round over :data:`CONTROL_OUTLIER` times its length's median is named, with whether it sets
    its interval's end (then the overlap may be that round's, not a steady machine's). Starts
    with a space; ``""`` without the control and the column at both lengths.

    Raises:
        TypeError: for points that are not :class:`AttentionTiming`.
        ValueError: for fewer than two lengths timed, or ``miss`` without ``band``.
    """
    pts = [check_type(f"points[{i}]", p, AttentionTiming)
           for i, p in enumerate(check_items("points", points))]
    if len({p.seq_len for p in pts}) < 2 or (miss is None) != (band is None):
        raise ValueError("row_note needs timings at two lengths or more, and miss and band together")
    own, move = _per_flop_change(pts, impl, tile), _control_move(pts)
    if own is None or move is None or impl == CONTROL:
        return ""
    a, b, ctl, state, shown = move
    name = f"tile {tile}'s" if impl == "flash" else f"{impl.replace('sdpa', 'SDPA')}'s"
    text = (f" From T = {a} to {b} {name} time per FLOP changed {own:+.0%}; the control, one "
            f"{CONTROL_SIZE} x {CONTROL_SIZE} matmul timed in the same rounds at every length, {ctl:+.0%}")
    if state == "few":
        return text + (": too few rounds for an interval, so this run cannot say whether the machine's "
                       "speed moved.")
    odd, sets_end = _control_outliers(pts, (a, b))
    if state == "overlap":
        return text + (f", its intervals at the two lengths overlapping ({shown}){odd}: the control does not "
                       "show the machine's speed moving between them"
                       + (", though that round, not a steady machine, may be what keeps the intervals from "
                          "lying apart." if sets_end else "."))
    text += (f", its intervals at the two lengths apart ({shown}){odd}: the machine's speed moved, which no "
             f"model here holds, so this run does not separate {name} own change from the machine's")
    if miss is None or band is None:
        return text + (f"; were the control's change every call's, {name} own would be "
                       f"{(1 + own) / (1 + ctl) - 1:+.0%}.")
    net = (1 + miss) / (1 + ctl) - 1
    return text + (f". Were the control's change every call's, the miss at T = {b} would be {net:+.0%}, "
                   f"{'within' if abs(net) <= band else 'beyond'} the band (±{band:.0%}).")
