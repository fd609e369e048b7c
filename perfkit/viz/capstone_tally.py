"""The capstone's headline tally: its rounds' verdicts counted by what bounded them, the rounds
shown as context, and how far the profiler's factor, which scaled every share, moved; and the line
and outcome of a round shown as context (:func:`round_context`, :func:`context_outcome`); which way
each repeat run went against the run it repeats, counted one comparison per run repeated
(:func:`repeats_text`, for the seams).

Consumes the outcomes the capstone notebook records; nothing here measures. Re-exported by
:mod:`perfkit.viz.capstone` and :mod:`perfkit.viz`.

Usage::

    tally_text({"data": "inconclusive", "batch": "held"},
               {"data": "the diagnosed share", "batch": "its factor of tokens"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.capstone_text import Round, Total

__all__ = ["context_outcome", "every_repeat_text", "repeats_text", "round_context", "tally_text"]


def tally_text(outcomes: Mapping[str, str], judged_by: Mapping[str, str],
               tests: tuple[str, str] | None = None, factors: Sequence[float] | None = None) -> str:
    """``"against the diagnosed share: 0 held, 0 missed, 3 inconclusive of 3; ..."``: the rounds'
    verdicts counted by what bounded them (``judged_by``: fix -> bound; ``outcomes``: fix -> its
    outcome, ``"missed (above)"`` counted as missed); ``"none"`` when no round was judged.

    ``tests``: ``(bound, what its rounds test)``, e.g. ``("the diagnosed share", "whether the
    diagnosed shares predict the gains")``: where no round judged against that bound held or
    missed (all inconclusive, or none judged), the text ends by saying this run did not test it,
    whatever the rounds judged against other bounds showed.

    ``factors``: each diagnosed configuration's profiled steps' mean over its unprofiled steps'
    mean, in the order run, a dropped fix's configuration included (the factor the shares were
    scaled by, taken as 1 where below 1): with it, the text also counts the rounds shown as
    context, not judged (``outcomes`` ``"context (...), slower"``: an interval wholly below 1x, said as
    such), and says, computed, how far the factor moved, which values fell below 1, and what that
    means for bounds built by scaling shares with it.

    Raises:
        TypeError, KeyError: for arguments that are not mappings, a ``tests`` that is not a pair of
            str, or a judged fix without outcome.
        ValueError: for ``factors`` empty or not all finite and > 0.
    """
    check_type("outcomes", outcomes, Mapping)
    check_type("judged_by", judged_by, Mapping)
    if tests is not None and (not isinstance(tests, tuple) or len(tests) != 2
                              or not all(isinstance(x, str) for x in tests)):
        raise TypeError(f"tests must be a (bound, what it tests) pair of str, got {tests!r}")
    parts = []
    for bound in dict.fromkeys(judged_by.values()):
        got = [outcomes[f].split(" (")[0] for f, b in judged_by.items() if b == bound]
        counts = ", ".join(f"{got.count(o)} {o}" for o in ("held", "missed", "inconclusive", "disturbed")
                           if o != "disturbed" or o in got)
        parts.append(f"against {bound}: {counts} of {len(got)}")
    text = "; ".join(parts) or "none"
    if tests is not None:
        decided = [f for f, b in judged_by.items() if b == tests[0]
                   and outcomes[f].split(" (")[0] in ("held", "missed")]
        if not decided:
            text += f"; no round judged against {tests[0]} held or missed: this run did not test {tests[1]}"
    return text + ("" if factors is None else _factors_text(outcomes, judged_by, factors))


def _factors_text(outcomes: Mapping[str, str], judged_by: Mapping[str, str], factors: Sequence[float]) -> str:
    """For :func:`tally_text`: the rounds not judged, and the profiled over unprofiled factor's moves."""
    got = check_items("factors", factors)
    _ = [check_real("factors", x, 0, lo_open=True) for x in got]
    ctx = [f for f in outcomes if f not in judged_by]
    out = (f"; {len(ctx)} of the {len(outcomes)} rounds shown as context, not judged ({', '.join(ctx)})"
           if ctx else "")
    slower = [f for f in ctx if outcomes[f].startswith("context") and ", slower" in outcomes[f]]
    if slower:  # a context round's interval wholly below 1x: what the slowdown rule calls missed
        out += (f"; of them, {', '.join(slower)} measured an interval wholly below 1x: slower beyond its "
                "interval, which the rule for a slowdown calls missed, but its bound could not test the fix, "
                "so it is counted neither as missed nor above")
    moved = max(got) / min(got)
    below = [x for x in got if x < 1]
    out += ("; the profiled over unprofiled step, the factor that scaled every share, went "
            + " -> ".join(f"{x:.2f}" for x in got) + " across the configurations diagnosed, in the order run"
            + (f" (a bound takes it as 1 where it fell below 1, as {' and '.join(f'{x:.2f}' for x in below)} "
               "did: its unprofiled steps ran slower than its profiled window's, which the profiler's "
               "cost alone cannot do)"
               if below else ""))
    premise = "a share so scaled bounds its phases only if they took no longer unprofiled than profiled"
    if moved > 1.1:
        return out + (f", {moved:.2f}x from its lowest to its highest: the profiler's cost (which grows "
                      "with the operators a step runs, which the fixes change), the load, or both, moved; "
                      f"{premise}, which load on the runs that the window did not bear can break, so these "
                      "bounds hold only as well as that premise does")
    return out + f", within a tenth of each other, as a steady profiler cost would be; {premise}"


def context_outcome(r: Round) -> str:
    """A round shown as context, for the headlines, with why its bound cannot test the fix
    (``r.pick.context``, :func:`~perfkit.profiling.capstone_text.bound_class`): ``"context (too tight),
    faster"`` (its interval above 1x;
    with ``", within the runs' drift"`` where its runs before lay at least as far apart as its gain
    lies from 1x, :attr:`~perfkit.profiling.capstone_text.Round.within_drift`), ``"context, slower"``
    (wholly below 1x) or ``"context (...), interval holds 1x"``.

    Raises:
        TypeError: for ``r`` that is not a Round.
    """
    check_type("r", r, Round)
    side = r.speedup.clear_of(1.0, "x")
    return ("context" + (f" ({r.pick.context})" if r.pick.context else "") + ", "
            + {"above": "faster", "below": "slower"}.get(side, "interval holds 1x")
            + (f", within the runs' drift ({r.runs_apart:.2f}x apart)" if side == "above" and r.within_drift
               else ""))


def round_context(r: Round) -> str:
    """The Markdown line of a round whose bound cannot test its fix (``r.pick.context`` says why)
    (``r.pick.untested``): the bound as context beside the measured speedup, why it cannot
    test the fix, whether the speedup's interval lies above 1x, what decided a speedup past the
    bound (``r.past``), and what the round measured
    (``r.explain["inconclusive"]``: the bound's phases, the profiled window's gain where it differs
    from the runs', the runs before where they drifted apart). Recorded as no verdict.

    Raises:
        TypeError, ValueError: for ``r`` that is not a Round, or one whose bound can be tested.
    """
    check_type("r", r, Round)
    if not r.pick.untested:
        raise ValueError(f"r's bound can fail ({r.pick.model}): judge it with a verdict, not as context")
    s = r.speedup
    side = s.clear_of(1.0, "x")
    gain = ((f"its interval lies above 1x, but the runs before lay {r.runs_apart:.2f}x apart, at least as "
             f"far as the {s.value:.2f}x measured lies from 1x: drift between two runs of one configuration "
             "could make this gain alone, so this run cannot credit it to the fix" if r.within_drift else
             "its interval lies above 1x: a gain this run can show") if side == "above" else
            "its interval lies wholly below 1x: the job ran slower with the fix here, beyond its interval "
            "(the fix's cost, or load its run bore and the runs before did not: this run does not separate "
            "them), which the rule for a slowdown calls missed; but this bound cannot test the fix, so no "
            "verdict is recorded" if side == "below" else
            "its interval holds 1x: no gain this run can tell from none" if s.has_interval else
            "it has no interval, so the run cannot tell a gain from none")
    return (f"ℹ️ **Context, not a prediction** ({r.pick.model}): tokens/s speedup of `--fix {r.pick.fix}`, "
            + ("no finite bound" if r.pick.void else f"at most {r.pick.bound:.3g}x") + f". **Measured:** "
            f"{s.text('x')}. The bound cannot test the fix"
            + (f", {r.pick.context}" if r.pick.context else "")
            + f": {r.pick.untested}. As for the gain, {gain}."
            + (f" {r.past}" if r.past else "") + (f" {r.explain['inconclusive']}"
                                                  if r.explain.get("inconclusive") else ""))


def repeats_text(t: Total) -> str:
    """Which way each configuration's repeat inside a round went against the run it repeats, in
    the order they ran: a kept configuration's seam reads its run, then the mean of that run and
    its later repeat, so it reads slower exactly when the repeat ran slower; the slow job's seam
    sets the mean of its first and last runs against the mean of its first run and its repeat, so
    its repeat is set against its first run here (the first of ``t.slow_runs_tps``). Under load
    drifting both ways alike, all ``n`` the way they point has probability ``1 / 2 ** n``, and
    all one way, either way, ``2 / 2 ** n``: both are said for 3 or more, all one way. For
    :func:`perfkit.viz.capstone.seams_text`.

    Raises:
        TypeError: for ``t`` that is not a :class:`Total`.
    """
    check_type("t", t, Total)
    runs = [(f"after --fix {name}", b < a) for name, a, b in t.seams[1:]]
    if len(t.slow_runs_tps) > 1:  # the slow job's repeat ran slower than its first run
        runs.insert(0, ("the slow job", t.seams[0][2] < t.slow_runs_tps[0]))
    slower, faster = ([name for name, s in runs if s == way] for way in (True, False))
    n = len(runs)
    if t.repeats:  # every repeat run, the dropped rounds' and the last one's included
        return every_repeat_text(t) + _seam_against_time(t, runs)
    if n >= 3 and not (slower and faster):
        chance = (f" (under load drifting both ways alike, a 1 in {2 ** n} chance, and 1 in {2 ** (n - 1)} "
                  f"for all {n} one way, either way)")
        return (f" In the order the runs ran, all {n} repeats inside a round ran "
                + ("slower than the run they repeat" + chance + ": a repeat slower than the run it repeats "
                   "biases its round's \"before\" low, and its speedup high" + _high(t) if slower else
                   "faster than the run they repeat" + chance + ": each round's \"before\" then reads high, "
                   "and its speedup low."))
    parts = ([f"slower than the run it repeats for {_names(slower)}, which biases {_rounds(slower)} "
              "\"before\" low, and its speedup high"] if slower else [])
    if faster:
        parts.append(("and faster for " if slower else "faster than the run it repeats for ")
                     + f"{_names(faster)}, which biases {_rounds(faster)} \"before\" high, and its "
                     "speedup low")
    out = " In the order the runs ran, the repeat inside a round ran " + "; ".join(parts) + "." if n else ""
    return out + _seam_against_time(t, runs)


def _seam_against_time(t: Total, runs: list[tuple[str, bool]]) -> str:
    """Where the slow job's seam reads the other way than its repeat in the first kept round ran."""
    seam_slower = t.seams[0][2] < t.seams[0][1]
    if len(t.slow_runs_tps) > 1 and runs and seam_slower != runs[0][1]:
        return (f" The slow job's seam reads {'slower' if seam_slower else 'faster'} although "
                f"its repeat ran {'slower' if runs[0][1] else 'faster'}: its first reading holds its last "
                f"run, {t.slow_runs_tps[-1]:,.0f} tokens/s.")
    return ""


def every_repeat_text(t: Total) -> str:
    """Which way every repeat run went against the run it repeats (:attr:`Total.repeats`, in the
    order run), then :func:`_independent_text`'s count of independent comparisons (one per run
    repeated: repeats of one run share it, so they are not separate draws), the selection of the
    runs repeated, and a chance only where that count can fall below 5 %. "" without repeats.

    Raises:
        TypeError: for ``t`` that is not a :class:`Total`.
    """
    check_type("t", t, Total)
    if not t.repeats:
        return ""
    way = {"faster": [w for w, a, b in t.repeats if b > a], "slower": [w for w, a, b in t.repeats if b < a]}
    said = [f"{k} in {len(v)} ({_names(v)})" for k, v in way.items() if v] or [
        f"as fast in all {len(t.repeats)}"]
    last = any(w.startswith("the slow job") for w, _, _ in t.repeats)
    out = (f" In the order the runs ran, {len(t.repeats)} runs repeated a configuration (each round's "
           "configuration before, run again after its fix, whether the fix was kept or dropped"
           + (", and the slow job after the rounds" if last else "")
           + "): against the run it repeats, the repeat ran " + " and ".join(said)
           + (f", and as fast in {len(t.repeats) - sum(map(len, way.values()))}"
              if 0 < sum(map(len, way.values())) < len(t.repeats) else "") + ".")
    out += _independent_text(t)
    if way["slower"] and not way["faster"]:
        return out + (" A repeat slower than the run it repeats biases its comparison's \"before\" low, and "
                      "its speedup high" + _high(t))
    return out + "".join([" A repeat faster than the run it repeats biases its comparison's \"before\" high, "
                          "and its speedup low" + ("; a slower one, the reverse." if way["slower"] else ".")]
                         if way["faster"] else [])


def _independent_text(t: Total) -> str:
    """One comparison per run repeated (its first repeat, in the order run: repeats of one run share
    it and are not independent draws); how many of the runs repeated were selected to read high (a
    kept fix's "after" run: kept because its median gained, so a repeat of it is expected lower by
    regression to the mean alone, with no drift; the slow job's first run is not selected); and, under
    load drifting both ways alike, the chance of all of them one way, either way, ``2 / 2 ** m``,
    printed only where it falls below 5 % and no comparison is selected; else why it cannot tell."""
    first: dict[float, float] = {}
    for _, a, b in t.repeats:
        first.setdefault(a, b)
    signs = [b < a for a, b in first.items() if b != a]
    m, slower = len(signs), sum(signs)
    base = (t.slow_runs_tps or t.every_slow_tps or (None,))[0]
    chosen = sum(1 for a in first if a != base)
    out = (f" They repeat {len(first)} separate run{'s' * (len(first) != 1)}"
           + (f" ({len(t.repeats) - len(first)} repeat{'s' * (len(t.repeats) - len(first) != 1)} share a run "
              "with an earlier one, so they are not separate draws)" if len(first) < len(t.repeats) else "")
           + f": one comparison per run repeated, its first repeat ran slower in {slower} and faster in "
           f"{m - slower}" + (f" ({len(first) - m} read alike)" if m < len(first) else "") + ".")
    if chosen:
        out += (f" {chosen} of those {len(first)} runs were the \"after\" run of a fix kept because its "
                "median gained, selected for reading high: a repeat of such a run is expected to read lower "
                "by regression to the mean alone, with no drift")
    least = Fraction(2, 2 ** m) if m else Fraction(1)
    if m and (slower in (0, m)) and least < 0.05 and not chosen:
        return out + (f" Under load drifting both ways alike, all {m} one way, either way, has a chance of "
                      f"{least.numerator} in {least.denominator} ({float(least):.0%}).")
    why = (f"{m} comparison{' is' if m == 1 else 's are'} too few for any count to show drift" if m < 3 else
           f"even all {m} one way, either way, would have a chance of {least.numerator} in "
           f"{least.denominator} ({float(least):.0%}) under load drifting both ways alike"
           if least >= 0.05 else "their directions are split" if 0 < slower < m else "")
    tail = "these repeats cannot tell drift between runs from " + ("that selection" if chosen else "chance")
    tail = (why + ", so " + tail) if why else tail
    return out + ("; " + tail if chosen else " " + tail[0].upper() + tail[1:]) + "."


def _high(t: Total) -> str:
    """After "all repeats ran slower": what that bias did to the rounds' product, computed."""
    p, d = t.product.value, t.direct.value
    return (f": every round's speedup, as the figure draws it, reads higher than against its first run "
            f"before alone, and their product, {p:.2f}x, "
            f"lies {p / d:.2f}x above the {d:.2f}x measured directly." if p > d else
            f"; their product, {p:.2f}x, still lies at or below the {d:.2f}x measured directly.")


def _rounds(names: list[str]) -> str:
    """Whose "before" a repeat biases: one round's or several."""
    return "that round's" if len(names) == 1 else "each such round's"


def _names(names: list[str]) -> str:
    """``"a, b and c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
