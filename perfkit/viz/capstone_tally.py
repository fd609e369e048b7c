"""The capstone's headline tally: its rounds' verdicts counted by what bounded them, the rounds
shown as context, and how far the profiler's factor, which scaled every share, moved; and the line
and outcome of a round shown as context (:func:`round_context`, :func:`context_outcome`).

Consumes the outcomes the capstone notebook records; nothing here measures. Re-exported by
:mod:`perfkit.viz.capstone` and :mod:`perfkit.viz`.

Usage::

    tally_text({"data": "inconclusive", "batch": "held"},
               {"data": "the diagnosed share", "batch": "its factor of tokens"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.capstone_text import Round

__all__ = ["context_outcome", "round_context", "tally_text"]


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
    median, in the order run, a dropped fix's configuration included (the factor the shares were
    scaled by, taken as 1 where below 1): with it, the text also counts the rounds shown as
    context, not judged (``outcomes`` ``"context, slower"``: an interval wholly below 1x, said as
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
    slower = [f for f in ctx if outcomes[f] == "context, slower"]
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
    """A round shown as context, for the headlines: ``"context, faster"`` (its interval above 1x;
    with ``", within the runs' drift"`` where its runs before lay at least as far apart as its gain
    lies from 1x, :attr:`~perfkit.profiling.capstone_text.Round.within_drift`), ``"context, slower"``
    (wholly below 1x) or ``"context, interval holds 1x"``.

    Raises:
        TypeError: for ``r`` that is not a Round.
    """
    check_type("r", r, Round)
    side = r.speedup.clear_of(1.0, "x")
    return ("context, " + {"above": "faster", "below": "slower"}.get(side, "interval holds 1x")
            + (f", within the runs' drift ({r.runs_apart:.2f}x apart)" if side == "above" and r.within_drift
               else ""))


def round_context(r: Round) -> str:
    """The Markdown line of a round whose bound cannot test its fix (too loose, or too tight)
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
            f"{s.text('x')}. The bound cannot test the fix: {r.pick.untested}. As for the gain, {gain}."
            + (f" {r.past}" if r.past else "") + (f" {r.explain['inconclusive']}"
                                                  if r.explain.get("inconclusive") else ""))
