"""What a tensor-parallel sweep says against its bounds and charges, in sentences: each bound
at the figure's precision, which charge (the fit's line or the sweep's own calls) is the
stricter at each width, how a crossover's biased inputs can offset, and what the fit's
intercept charges a call of no bytes against the calls a block really makes.

The numbers come from :mod:`perfkit.parallel.tp_costs` and notebook 10's sweeps; these
functions only word them, each sentence computed from the figures it names.

Usage::

    bound_text(1.9586, 1.94, 1.97)              # "1.96x": the range shows only where visible
    charge_choice([128, 256], [2.2e-3, 2.9e-3], [1.4e-3, 1.5e-3])
    intercept_note([65536, 262144], [9e-4, 7e-4], 1.5e-3)
"""

from __future__ import annotations

from collections.abc import Sequence

from perfkit._checks import check_int, check_items, check_real
from perfkit.parallel.tp_costs import sweep_time
from perfkit.units import si

__all__ = ["bound_text", "charge_choice", "charge_dips", "intercept_note", "offset_note", "sweep_charge_note"]


def bound_text(value: float, low: float, high: float, unit: str = "x") -> str:
    """A figure and the range its inputs' intervals move it over, each at 3 significant digits:
    ``"1.34x (1.33x to 1.35x)"``, or ``"1.96x"`` alone where the range does not show at that
    precision (no extra digits to part two ends that differ by less than the figure's own
    precision, which the inputs held fixed do not have).

    Raises:
        TypeError, ValueError: for numbers not finite, or ``low > high``.
    """
    value, low, high = (check_real(n, v) for n, v in (("value", value), ("low", low), ("high", high)))
    if low > high:
        raise ValueError(f"low must be <= high, got {low!r} > {high!r}")
    v, lo, hi = (si(x, unit) for x in (value, low, high))
    return v if lo == hi == v else f"{v} ({lo} to {hi})"


def charge_choice(widths: Sequence[float], sweep_s: Sequence[float], fit_s: Sequence[float]) -> str:
    """Which way charging the sweep's calls, not the fit's line, moves each width's bound
    ``U / (U / t + comm)``: where the sweep charged more, the bound is lower (stricter) than the
    fit's line would make it; where less, higher. One clause, from the two charges.

    Raises:
        TypeError, ValueError: for lists that are not numbers > 0 or differ in length.
    """
    ws, ss = check_items("widths", widths), check_items("sweep_s", sweep_s)
    fs = check_items("fit_s", fit_s)
    if not len(ws) == len(ss) == len(fs):
        raise ValueError(f"widths, sweep_s and fit_s differ in length: {len(ws)}, {len(ss)}, {len(fs)}")
    for name, vs in (("sweep_s", ss), ("fit_s", fs)):
        for i, v in enumerate(vs):
            check_real(f"{name}[{i}]", v, 0, lo_open=True)
    parts = []
    for how, effect, keep in (("more than", "lower, stricter, than the fit's would be", lambda r: r > 1),
                              ("less than", "higher than the fit's would be", lambda r: r < 1),
                              ("the same as", "the fit's", lambda r: r == 1)):
        rs = [(w, s / f) for w, s, f in zip(ws, ss, fs) if keep(s / f)]
        if rs:
            lo, hi = min(r for _, r in rs), max(r for _, r in rs)
            span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"
            at = ", ".join(f"{w:g}" for w, _ in rs)
            parts.append(f"{how} the fit's line at C = {at} ({span}: the bound there {effect})")
    return "the sweep charged a block's call " + "; ".join(parts)


def charge_dips(widths: Sequence[float], call_bytes: Sequence[float], call_s: Sequence[float],
                calls: int = 4, repeat: int | None = None) -> str:
    """Each width whose communication charge, ``calls`` x ``call_s`` for calls of ``call_bytes``,
    lies below the charge of a width that sends fewer bytes: a sweep of medians that is not
    monotone there, so the bound at that width rests on the few timed sizes its calls were read
    from, not on a trend over sizes, and the charge is a sample there, not exact. A sentence
    starting with a space, naming each such width against the smaller payload's largest charge
    (``repeat``: the repetitions behind each timed size, where given); ``""`` where every charge
    is at least every smaller payload's.

    Raises:
        TypeError, ValueError: for lists that are not numbers > 0 or differ in length, or
            ``calls``, ``repeat`` not >= 1.
    """
    ws, bs, ts = (check_items(n, v) for n, v in (("widths", widths), ("call_bytes", call_bytes),
                                                  ("call_s", call_s)))
    if not len(ws) == len(bs) == len(ts):
        raise ValueError(f"widths, call_bytes and call_s differ in length: {len(ws)}, {len(bs)}, {len(ts)}")
    for name, vs in (("call_bytes", bs), ("call_s", ts)):
        for i, v in enumerate(vs):
            check_real(f"{name}[{i}]", v, 0, lo_open=True)
    check_int("calls", calls, 1)
    if repeat is not None:
        check_int("repeat", repeat, 1)
    rows = sorted(zip(bs, ws, ts))
    said = []
    for b, w, t in rows:
        prior = max(((tp, wp, bp) for bp, wp, tp in rows if bp < b), default=None)
        if prior is not None and t < prior[0]:
            said.append(f"C = {w:g}'s, {si(calls * t, 's')} for {calls} x {si(b, 'B')}, is below C = "
                        f"{prior[1]:g}'s, {si(calls * prior[0], 's')} for {calls} x {si(prior[2], 'B')}")
    if not said:
        return ""
    reps = f" (each timed size the median of {repeat} repetitions)" if repeat is not None else ""
    return (f" The all-reduce charge falls as bytes grow: {'; '.join(said)}. The sweep is not monotone there"
            f"{reps}, so the bound at such a width rests on the one or two sizes its calls were read from, "
            "not on a trend over sizes: its charge is a sample, not exact.")


def offset_note(ceiling: float, rate: float, fit_s: Sequence[float], sweep_s: Sequence[float],
                beyond_s: Sequence[float], short: bool = False) -> str:
    """Why a crossover prediction judged against the measured crossing need not have any input
    right: the prediction's compute rate ``ceiling`` against the blocks' measured ``rate``
    (FLOP/s), the fit's line ``fit_s`` against the sweep's calls ``sweep_s`` at the blocks'
    sizes (s per call), and ``beyond_s``, each split block's time above its floor ``U / t +
    comm`` (s), which the model leaves out. A rate above the measured one and a line above the
    calls put the model's crossover higher (``U`` smaller, ``comm`` larger); time beyond the
    floor puts the measured crossing higher. Where the model's inputs push it up and the omitted
    time pushes the crossing up, the sentence says the two offset. A sentence; ``""`` where
    nothing is off. ``short``: a headline's clause instead, naming what was off and that agreement
    does not confirm it.

    Raises:
        TypeError, ValueError: for rates or times not > 0 (``beyond_s`` any finite number), or
            ``fit_s`` and ``sweep_s`` of different lengths.
    """
    r = check_real("ceiling", ceiling, 0, lo_open=True) / check_real("rate", rate, 0, lo_open=True)
    fs, ss = check_items("fit_s", fit_s), check_items("sweep_s", sweep_s)
    if len(fs) != len(ss):
        raise ValueError(f"fit_s and sweep_s differ in length: {len(fs)}, {len(ss)}")
    over = [check_real(f"fit_s[{i}]", f, 0, lo_open=True) / check_real(f"sweep_s[{i}]", x, 0, lo_open=True)
            for i, (f, x) in enumerate(zip(fs, ss))]
    beyond = [check_real(f"beyond_s[{i}]", b) for i, b in enumerate(check_items("beyond_s", beyond_s))]
    up, down = [], []
    if f"{r:.2f}" != "1.00":
        (up if r > 1 else down).append(f"its compute rate ({r:.2f}x the measured rate)")
    if over and (min(over) > 1 or max(over) < 1):
        span = f"{min(over):.2f}x" if f"{min(over):.2f}" == f"{max(over):.2f}" else \
            f"{min(over):.2f}x to {max(over):.2f}x"
        (up if min(over) > 1 else down).append(f"the fit's line ({span} what the sweep's calls took at the "
                                               "blocks' sizes)")
    if short:
        off = up + down + ([f"the split blocks {si(min(beyond), 's')} to {si(max(beyond), 's')} above their "
                            "floor"] if beyond and min(beyond) > 0 else [])
        return f"; the model's inputs were off, {', '.join(off)}: errors that can offset, so a match " \
            "does not confirm them" if off else ""
    said = [(" and ".join(xs), way) for xs, way in ((up, "higher"), (down, "lower")) if xs]
    text = "".join(f" {x[0].upper()}{x[1:]} put the model's crossover {way}." for x, way in said)
    if beyond and min(beyond) > 0:
        text += (f" The split blocks' {si(min(beyond), 's')} to {si(max(beyond), 's')} above their floor "
                 "U / t + comm, which the model leaves out, put the measured crossing higher")
        text += (": errors that offset, so the verdict shows how far they cancel here, not that any input "
                 "was right." if up and not down else ".")
    return text


def sweep_charge_note(nbytes: Sequence[float], times_s: Sequence[float], size: float, fit_s: float,
                      unsplit_s: float, t: int, measured: float | None = None, calls: int = 4) -> str:
    """What set a bound's communication charge at one width: the sweep's time for a call of
    ``size`` bytes (:func:`sweep_time`), against the sizes timed beside it and the fit's line
    ``fit_s``, and the bound ``U / (U / t + calls x fit_s)`` the fit's line would give, with
    where ``measured`` (a speedup) lies against it. Sentences, for a verdict's explanation.

    Raises:
        TypeError, ValueError: as :func:`sweep_time`, or for ``fit_s``, ``unsplit_s`` not > 0,
            ``t`` or ``calls`` not >= 1.
    """
    call = sweep_time(nbytes, times_s, size)
    check_real("fit_s", fit_s, 0, lo_open=True)
    check_real("unsplit_s", unsplit_s, 0, lo_open=True)
    check_int("t", t, 1)
    check_int("calls", calls, 1)
    pts = sorted(zip(nbytes, times_s))
    at = next((i for i, (x, _) in enumerate(pts) if x == size), None)
    if at is not None:
        beside = pts[max(at - 1, 0):at] + pts[at + 1:at + 2]
        above = [tb for _, tb in beside if call > tb]
        two = len(beside) == 2
        rank = ("above both sizes" if two and len(above) == 2 else "below both sizes" if two and not above
                else "between the sizes" if two else "against the size")
        where = f"the sweep's median at that size, {rank} timed beside it"
    else:
        beside = [p for p in pts if p[0] < size][-1:] + [p for p in pts if p[0] > size][:1]
        where = "read off the sweep between the sizes timed around it" if len(beside) == 2 else \
            "the nearest size's time, outside the sweep"
    near = "; ".join(f"{si(x, 'B')}: {si(tx, 's')}" for x, tx in beside)
    alt = unsplit_s / (unsplit_s / t + calls * fit_s)
    text = (f"Each of the {calls} calls ({si(size, 'B')}) was charged {si(call, 's')}, {where} ({near}), "
            f"{call / fit_s:.2f}x the fit's line ({si(fit_s, 's')}); charged the fit's line, the bound "
            f"would be {alt:.2f}x")
    if measured is None:
        return text + "."
    check_real("measured", measured, 0, lo_open=True)
    if measured <= alt:
        return text + (f", which the measured {measured:.3g}x lies under: the sweep's charge at this size "
                       "decided it.")
    return text + (f", which the measured {measured:.3g}x crosses too: the block's calls cost less than "
                   "either charge, or its half-size matmuls ran faster per FLOP than the whole block's (this "
                   "run does not time them apart).")


def intercept_note(nbytes: Sequence[float], times_s: Sequence[float], alpha_s: float) -> str:
    """Where a fit's intercept ``alpha_s`` (what its line charges a call of no bytes) lies
    against the sweep it was fitted to: a call timed faster than the intercept bounds the fixed
    cost of a call below it, so the intercept is then the fit's, not a latency of the library.
    One clause, from the sweep's own times.

    Raises:
        TypeError, ValueError: as :func:`sweep_time`, or for ``alpha_s`` not >= 0.
    """
    sweep_time(nbytes, times_s, 1.0)   # checks the sweep
    check_real("alpha_s", alpha_s, 0)
    under = sorted((t, x) for x, t in zip(nbytes, times_s) if t < alpha_s)
    if not under:
        return (f"every size timed took more than the fit's intercept, {si(alpha_s, 's')}: the sweep does "
                "not contradict it as a fixed cost per call")
    fastest, at = under[0]
    sizes = ", ".join(si(x, "B") for x in sorted(x for _, x in under))
    return (f"sizes timed below the fit's intercept, {si(alpha_s, 's')}: {sizes}; the fastest, {si(at, 'B')} "
            f"in {si(fastest, 's')}, puts a call's fixed cost on this run at most that, "
            f"{fastest / alpha_s:.2f}x the intercept: the intercept is the fit's, not a latency of the "
            "library")
