"""What an overlapped data-parallel step saved beyond launching its all-reduces together.

Notebook 02's overlapped step launches each bucket's all-reduce as backward produces it. Part of
what it saves can come from launching the all-reduces together rather than from hiding them
behind backward: :func:`together_share` measures that part on the all-reduces timed alone,
:func:`overlap_apart_text` holds the overlapped step's saving against it, :func:`overlap_held_text` says
what the saving inside its predicted range shows, and :func:`overlap_said` puts the overlap verdict's
outcome in a few words for a summary.

Usage::

    apart = together_share(times_s)           # times_s: the job's paired rounds
    print(overlap_apart_text(hidden, apart))  # hidden: perfkit.comm.hidden_share(times_s)[0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from perfkit import stats
from perfkit._checks import check_items, check_real, check_type
from perfkit.units import si

__all__ = ["overlap_apart_text", "overlap_held_text", "overlap_said", "together_share"]


def together_share(times_s: Mapping[str, Sequence[float]]) -> stats.Estimate:
    """Share of the bucketed step's communication (as :func:`hidden_share`'s) that launching its
    all-reduces together saved, timed alone: the median round's ``(comm_only - comm_together) / comm``
    with its interval. The overlapped step can save this without hiding anything behind backward.

    Raises:
        TypeError, ValueError: as :func:`hidden_share`, or a missing ``comm_only``/``comm_together``.
    """
    check_type("times_s", times_s, Mapping)
    keys = ("compute_only", "bucketed", "comm_only", "comm_together")
    if missing := [k for k in keys if k not in times_s]:
        raise ValueError(f"times_s must hold the series {keys}, missing {missing}")
    c, s, one, all_ = (np.asarray([check_real(f"times_s[{k!r}]", x, 0, lo_open=True)
                                   for x in check_items(f"times_s[{k!r}]", times_s[k])]) for k in keys)
    comm = float(np.median(s)) - float(np.median(c))  # s: as hidden_share's denominator
    if comm <= 0:
        raise ValueError(f"times_s['bucketed'] must take longer than times_s['compute_only'] by the "
                         f"medians (no communication showed in the step), got {comm:+.3g} s")
    return stats.per_round(lambda a, b: (a - b) / comm, [one, all_], what="paired rounds")


def overlap_apart_text(hidden: stats.Estimate, together: stats.Estimate, short: bool = False,
                       pct: bool = False) -> str:
    """What the overlapped step's saving (``hidden``, :func:`hidden_share`) shows beyond launching the
    all-reduces together (``together``, :func:`together_share`): a saving running them together does
    not explain only where ``hidden``'s interval lies wholly above ``together``'s, else none.
    ``short``: a clause for a summary (``pct``: ``together`` in percent), else a sentence.

    Raises:
        TypeError: for an argument that is not an Estimate.
    """
    check_type("hidden", hidden, stats.Estimate), check_type("together", together, stats.Estimate)
    both = hidden.has_interval and together.has_interval
    beyond = both and hidden.low > together.high  # the two intervals apart
    said = ("launching the same all-reduces together, timed alone without backward, saved "
            + (together.scaled(100).text("%") if pct else together.text()))
    if short:
        return said + (": the overlapped step saved more, part of it beyond running them together"
                       if beyond else ": this run shows no overlap with backward beyond that" if both else
                       ": without intervals this run cannot tell the two apart")
    said += " of the bucketed step's communication"
    if beyond:
        rel = (f"the overlapped step's interval lies above it: it saved {hidden.value - together.value:.2f} "
               "of the communication more (by the two medians), a part that running the all-reduces "
               "together does not explain and overlap with backward can give")
    else:
        d = next((d for d in range(2, 7) if f"{hidden.value:.{d}f}" != f"{together.value:.{d}f}"), 0)
        rel = ((f"the overlapped step saved {'more' if hidden.value > together.value else 'less'} by the "
                f"medians ({hidden.value:.{d}f} against {together.value:.{d}f}, at the digits that tell them "
                "apart), " if d > 2 else
                f"the overlapped step saved {'more' if hidden.value > together.value else 'less'} by the "
                f"medians ({hidden.value:.2f} against {together.value:.2f}), " if d else "")
               + (("the two intervals overlap" if hidden.high >= together.low else
                   "its interval lying below that one") + ": this run does not show" if both else
                  "without intervals: this run cannot tell whether it shows")
               + " the overlapped step hiding any communication behind backward beyond what launching its "
               "all-reduces together saves")
    return f" {said[0].upper()}{said[1:]}; {rel}."


def overlap_held_text(hidden: stats.Estimate, ceiling: float) -> str:
    """The sentence for an overlapped step's saving (``hidden``, :func:`hidden_share`) whose point
    lies inside 0 to ``ceiling`` (backward's share): a verdict that held, or an inconclusive one
    whose interval reaches past an edge. It says a share was saved only where the interval, as
    printed, lies above 0; else that the median round's saving is not established.

    Raises:
        TypeError, ValueError: for a ``hidden`` that is not an Estimate, or a ``ceiling`` not above 0.
    """
    check_type("hidden", hidden, stats.Estimate)
    check_real("ceiling", ceiling, 0, lo_open=True)
    share = f"{hidden.value / ceiling:.0%} of the ceiling, what backward could cover"
    if hidden.clear_of(0) == "above":
        return f"{share}, was saved."
    return (f"The median round saved {share}, but " + (
        f"its {hidden.label} reaches down to {hidden.low:.2f}, so this run does not establish that the "
        "overlapped step saved any of the communication." if hidden.has_interval else
        "without an interval this run does not establish that the overlapped step saved any of it."))


def overlap_said(outcome: str, hidden: stats.Estimate, ceiling: float, saved_s: float,
                 cover_s: float) -> str:
    """A few words on the overlap verdict's ``outcome`` for a summary: ``hidden`` the judged share,
    ``ceiling`` backward's (a share), ``saved_s`` the median round's saving and ``cover_s`` what
    backward could cover, s. An inconclusive one names the edge(s) its interval crosses.

    Raises:
        TypeError, ValueError: for an unknown outcome or an ``hidden`` that is not an Estimate.
    """
    check_type("hidden", hidden, stats.Estimate)
    cover = f"the {ceiling:.0%} of it backward could cover"
    if outcome == "held":
        return f"held: within {cover}"
    if outcome == "missed":
        return (f"missed: above {cover} (the overlapped step saved {si(saved_s, 's')} in the median "
                f"round, more than backward's {si(cover_s, 's')})" if hidden.value > ceiling else
                f"missed: below 0 (in the median round the overlapped step took {si(-saved_s, 's')} more "
                "than the bucketed one)")
    if outcome == "inconclusive":
        edges = [e for e, o in (("below 0", hidden.low < 0), (f"above {cover}", hidden.high > ceiling)) if o]
        return (f"inconclusive: its {hidden.label} reaches " + (" and ".join(edges) or f"an edge of 0 to "
                f"{ceiling:.0%}") if hidden.has_interval else "inconclusive: too few rounds for an interval")
    if outcome == "disturbed":
        return "disturbed: outside the range a share can take"
    raise ValueError(f"outcome must be held, missed, inconclusive or disturbed, got {outcome!r}")
