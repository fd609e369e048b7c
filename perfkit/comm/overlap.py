"""What an overlapped data-parallel step saved, and beyond launching its all-reduces together.

:func:`hidden_share` is the share of the communication the bucketed step exposes (``bucketed -
compute``) that the overlapped step saved, with its ceiling; :func:`step_comm_text` holds that exposed
communication against the all-reduces timed alone and against a shorter reading of compute.
Notebook 02's overlapped step launches each bucket's all-reduce as backward produces it. Part of
what it saves can come from launching the all-reduces together rather than from hiding them
behind backward: :func:`together_share` measures that part on the all-reduces timed alone,
:func:`overlap_apart_text` holds the overlapped step's saving against it, :func:`overlap_held_text` says
what the saving inside its predicted range shows, and :func:`overlap_said` puts the overlap verdict's
outcome in a few words for a summary. :func:`backward_reading` gives the backward time the overlap's
ceiling rests on, and :func:`ddp_against_text` what DDP's step over the overlapped one shows.

Usage::

    hidden, ceiling = hidden_share(times_s)   # times_s: the job's paired rounds
    apart = together_share(times_s)
    print(overlap_apart_text(hidden, apart))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from perfkit import stats
from perfkit._checks import check_items, check_real, check_type
from perfkit.units import si

__all__ = ["backward_reading", "ddp_against_text", "hidden_share", "overlap_apart_text", "overlap_held_text",
           "overlap_said", "step_comm_text", "together_share"]


def together_share(times_s: Mapping[str, Sequence[float]]) -> stats.Estimate:
    """Share of the bucketed step's exposed communication (as :func:`hidden_share`'s) that launching its
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
                       if beyond else
                       ": this run does not show overlap with backward beyond that" if both else
                       ": without intervals this run cannot tell the two apart")
    said += " of the bucketed step's exposed communication"
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


def ddp_against_text(ratio: stats.Estimate, caps: Sequence[Mapping[str, object]], cap_mb: float,
                     cores: int) -> str:
    """A sentence (starting with a space) on DDP's step over the from-scratch overlapped one
    (``ratio``, paired rounds), which does the same bucketing and overlap in C++: which side of 1x its
    interval lies, as printed, and, where DDP ran slower, what the bucket-cap timings (``caps``: the
    data-parallel job's ``buckets`` rows, ``bucket_cap_mb``, ``calls_per_step`` and ``step_s``, from
    other rounds, without an interval) say of ``cap_mb``, the cap both steps used: where another cap
    with fewer all-reduces ran faster, the bucket count is the cause those timings point at, on
    ``cores`` cores shared by backward and gloo's threads; else that this run does not measure why.

    Raises:
        TypeError, ValueError: for a ``ratio`` that is not an Estimate, a ``caps`` row without
            ``calls_per_step`` and ``step_s``, or ``cores`` below 1.
    """
    check_type("ratio", ratio, stats.Estimate)
    check_real("cores", cores, 1)
    for i, c in enumerate(check_items("caps", caps)):
        if not isinstance(c, Mapping) or not {"calls_per_step", "step_s"} <= set(c):
            raise TypeError(f"caps[{i}] must be a mapping with 'calls_per_step' and 'step_s', got {c!r}")
    side = ratio.clear_of(1.0, "x")
    if side == "below":
        return " DDP's step was the faster of the two here, by its whole interval."
    if side != "above":
        return (" This run cannot tell DDP's step from the overlapped one's: its interval holds 1x."
                if ratio.has_interval else " Without an interval this run cannot place DDP's step.")
    rows = [(c.get("bucket_cap_mb"), int(c["calls_per_step"]), float(c["step_s"]))  # type: ignore[call-overload,arg-type]
            for c in caps]
    own = next((r for r in rows if r[0] == cap_mb), None)
    best = min(rows, key=lambda r: r[2], default=None)
    text = (f" DDP does the same bucketing and overlap in C++, yet its step ran {ratio.value:.2f}x the "
            "from-scratch overlapped one here, slower by its whole interval")
    if own is None or best is None or best[2] >= own[2] or best[1] >= own[1]:
        return text + "; this run does not measure why."
    same = [[r[2] for r in rows if r[1] == n] for n in {r[1] for r in rows}]
    spread = max((max(x) - min(x) for x in same), default=0.0)  # s: how far caps with equal counts ran apart
    if own[2] - best[2] <= spread:
        return text + (f"; section 5's caps, timed in other rounds, differ by no more than caps with equal "
                       f"counts ran apart ({si(spread, 's')}): this run does not measure why.")
    return text + (
        f". Section 5 times DDP at each cap in other rounds: at this cap, {cap_mb:g} MiB, its {own[1]} "
        f"all-reduces per step took {si(own[2], 's')}; at {_cap(best[0])}, {best[1]} per step, "
        f"{si(best[2], 's')}, the fastest cap"
        + (", whose one bucket starts only after backward: no overlap at all" if best[1] == 1 else "")
        + f". Those timings tie DDP's cost here to its bucket count: with {best[1]} all-reduce(s) per step "
        f"it ran faster than with {own[1]}, by more than caps with equal counts ran apart "
        f"({si(spread, 's')}), on {cores} cores shared by backward and gloo's threads; this run does not "
        "measure why DDP's buckets cost more than the from-scratch step's.")


def _cap(cap: object) -> str:
    """``"25 MiB"``, or DDP's default where a bucket-cap row left ``bucket_cap_mb`` unset."""
    return "the default cap" if cap is None else f"{cap:g} MiB"


def backward_reading(times_s: Mapping[str, Sequence[float]]) -> tuple[float, str]:
    """Backward's time for a ceiling on what it can cover, from the same rounds' medians, and a
    sentence (starting with ". ", or "" where there is nothing to flag) on the readings it came from.

    ``backward`` is the larger of two readings: ``backward_only``'s median and, where ``forward_only``
    was timed too, ``compute_only``'s less ``forward_only``'s (a bound takes the reading that allows
    the most; the halves timed apart need not add up to the whole), but never more than
    ``compute_only``'s median itself: backward is a part of forward and backward timed together, so a
    backward alone that took longer than that whole is no reading of backward inside a step; the
    sentence then says so, with both figures. Otherwise it speaks only where the halves timed apart
    add up to over 10 % more or less than the whole.

    Raises:
        TypeError, ValueError: for ``times_s`` that is not a mapping, or a missing, empty or
            non-positive ``compute_only`` or ``backward_only`` series.
    """
    check_type("times_s", times_s, Mapping)
    if missing := [k for k in ("compute_only", "backward_only") if k not in times_s]:
        raise ValueError(f"times_s must hold compute_only and backward_only, missing {missing}")
    c, b = (float(np.median(_positive(f"times_s[{k!r}]", times_s[k])))
            for k in ("compute_only", "backward_only"))
    f = (float(np.median(_positive("times_s['forward_only']", times_s["forward_only"])))
         if "forward_only" in times_s else None)
    backward = min(max([b] if f is None else [b, c - f]), c)
    if b > c:
        return backward, (
            f". Backward alone, {si(b, 's')}, took {b / c:.2g}x forward and backward timed together "
            f"({si(c, 's')}" + ("" if f is None else f", forward alone {si(f, 's')}")
            + "): a part longer than its whole, so backward alone is no reading of the backward inside a "
            "step; each figure is the slower process's median, and this run does not measure what slowed "
            f"backward alone. The ceilings below take backward as that whole, {si(c, 's')}, the most a part "
            "of it can take"
            + ("" if f is None else f" (compute only less forward alone gives {si(c - f, 's')})"))
    if f is None or abs(1 - (f + b) / c) <= 0.1:
        return backward, ""
    which = "backward alone" if b >= c - f else "compute only less forward alone"
    return backward, (
        f". Forward and backward timed apart add to {si(f + b, 's')}, {abs(1 - (f + b) / c):.0%} "
        f"{'less' if f + b < c else 'more'} than the two timed together: each figure is the slower "
        "process's median, and this run does not time what the whole step adds (or saves) between the "
        "two halves; the ceilings below take the larger of the two readings of backward, here "
        f"{which} ({si(backward, 's')}), as a bound must")


def _positive(name: str, xs: Sequence[float]) -> np.ndarray:
    """``xs`` as an array of seconds, each > 0 and finite."""
    return np.asarray([check_real(name, x, 0, lo_open=True) for x in check_items(name, xs)], dtype=float)


def hidden_share(times_s: Mapping[str, Sequence[float]],
                 comm_s: float | None = None) -> tuple[stats.Estimate, float]:
    """Share of the step's exposed communication an overlapped step hid, and the most it could hide.

    The baseline is the **bucketed** step: the same forward, backward, bucket copies and
    all-reduces as the overlapped one, with the all-reduces after backward instead of during it,
    timed in the same rounds. Its communication is defined as what it exposes,
    ``bucketed - compute_only`` (medians; ``compute_only``: forward + backward without
    communication, a reference rather than a floor), the time communication adds to a step that
    overlaps none of it, whatever the all-reduces take alone; the overlap hid
    ``(bucketed - overlapped) / (bucketed - compute_only)``: per round the time the overlapped
    step saved, over that median communication (its denominator's own spread is not in the
    interval), as the median over rounds with its order-statistic interval
    (:func:`perfkit.stats.per_round`; no interval below 5 rounds). The all-reduces timed alone
    are not the baseline: inside a step each bucket is packed first and the processes reach
    each all-reduce at different times, which the step's own communication includes and a
    timing of the all-reduces alone does not. Only backward can cover
    communication (the gradients exist only during it), so the ceiling is
    ``min(backward, comm) / comm``, ``backward`` from the same rounds by :func:`backward_reading`:
    the larger of ``backward_only``'s median and, where ``forward_only`` was timed too,
    ``compute_only``'s median less ``forward_only``'s, but never above ``compute_only``'s median (a part
    cannot outlast its whole).

    Args:
        times_s: per-round seconds under ``compute_only``, ``bucketed``, ``overlapped`` and
            ``backward_only`` (and optionally ``forward_only``), round ``i`` of each timed
            back to back.
        comm_s: the communication to share out, in seconds, in place of ``bucketed - compute_only``
            (to read the same rounds against another measure of it, such as the all-reduces timed
            alone); ``None``: the step's own.

    Returns:
        ``(hidden, ceiling)``: an :class:`~perfkit.stats.Estimate` and a number in (0, 1].

    Raises:
        TypeError, ValueError: for ``times_s`` that is not a mapping, a missing, empty or
            unequal series, a time that is not > 0, or a bucketed step whose median is not
            above compute's (no communication showed in it to hide).
    """
    check_type("times_s", times_s, Mapping)
    keys = ("compute_only", "bucketed", "overlapped", "backward_only")
    if missing := [k for k in keys if k not in times_s]:
        raise ValueError(f"times_s must hold the series {keys}, missing {missing}")
    c, s, o, b = (_positive(f"times_s[{k!r}]", times_s[k]) for k in keys)
    if not len(c) == len(s) == len(o) == len(b):
        raise ValueError(f"times_s series must hold the same number of rounds, got "
                         f"{len(c)}, {len(s)}, {len(o)}, {len(b)}")
    comm = float(np.median(s)) - float(np.median(c))  # s: the communication inside the bucketed step
    if comm_s is not None:
        comm = check_real("comm_s", comm_s, 0, lo_open=True)
    elif comm <= 0:
        raise ValueError(f"times_s['bucketed'] must take longer than times_s['compute_only'] by the "
                         f"medians (no communication showed in the step to hide), got {comm:+.3g} s")
    backward = backward_reading(times_s)[0]
    ceiling = min(backward, comm) / comm
    est = stats.per_round(lambda step, overlapped: (step - overlapped) / comm, [s, o], what="paired rounds")
    return est, ceiling


def step_comm_text(times_s: Mapping[str, Sequence[float]],
                   shorter_compute: tuple[str, float] | None = None) -> str:
    """Sentences on the communication the bucketed step exposes (``bucketed - compute_only``, medians:
    what communication adds to a step that overlaps none of it, the figure :func:`hidden_share` shares
    out) against the same all-reduces timed alone one after another (``comm_only``, as the bucketed
    step runs them), where the two differ by more than 10 %. Where the all-reduces alone took longer,
    compute plus them exceeds the bucketed step that holds both without overlap, and the sentence
    gives the overlap's ceiling and hidden share read against the timing alone beside the judged ones.

    ``compute_only`` is a reference, not a floor: ``shorter_compute``, ``(what, seconds)``, names
    another measured time that holds a step's forward and backward (say, an accumulation
    micro-batch with its share of the all-reduce); where it is shorter, the sentences say so and
    give the exposed communication, ceiling and share read against it.

    Raises:
        TypeError, ValueError: as :func:`hidden_share`, a missing ``comm_only`` series, or a
            ``shorter_compute`` that is not a ``(str, seconds > 0)`` pair.
    """
    check_type("times_s", times_s, Mapping)
    keys = ("compute_only", "bucketed", "comm_only")
    if missing := [k for k in keys if k not in times_s]:
        raise ValueError(f"times_s must hold the series {keys}, missing {missing}")
    if shorter_compute is not None:
        check_type("shorter_compute", shorter_compute, tuple)
        if len(shorter_compute) != 2:
            raise ValueError(f"shorter_compute must be (what, seconds), got {shorter_compute!r}")
        check_type("shorter_compute[0]", shorter_compute[0], str)
        check_real("shorter_compute[1]", shorter_compute[1], 0, lo_open=True)
    med = {k: float(np.median([check_real(f"times_s[{k!r}]", x, 0, lo_open=True)
                               for x in check_items(f"times_s[{k!r}]", times_s[k])])) for k in keys}
    inside, alone = med["bucketed"] - med["compute_only"], med["comm_only"]  # s
    judged = (" The verdict shares out the communication the step exposes, bucketed less compute alone, "
              "as defined above")
    if inside > 1.1 * alone:
        text = (" Inside the step each bucket is packed first, and the processes reach each all-reduce at "
                "different times, the first to arrive waiting for the other: the step exposes more than the "
                "all-reduces take alone." + judged + ".")
    elif inside <= 0 or alone <= 1.1 * inside:
        text = judged + "."
    else:
        (hidden, ceiling), (alt, alt_ceiling) = hidden_share(times_s), hidden_share(times_s, comm_s=alone)
        text = (f" Timed alone, one after another as the bucketed step runs them, the all-reduces took "
                f"{alone / inside:.2g}x the {si(inside, 's')} the step exposes: compute plus them, "
                f"{si(med['compute_only'] + alone, 's')}, exceeds the bucketed step's "
                f"{si(med['bucketed'], 's')}, which holds both without overlap. So the step ran its "
                "all-reduces faster than they ran alone, or its compute faster than compute alone, or the "
                "medians, each over separately scattered rounds, do not add; this run does not measure which."
                + judged
                + f" ({si(inside, 's')}: ceiling {ceiling:.2f}, share saved {hidden.value:.2f}), not the "
                f"all-reduces' own duration; read against the all-reduces alone ({si(alone, 's')}) the "
                f"ceiling would be {alt_ceiling:.2f} and the share saved {alt.value:.2f}.")
    if shorter_compute is None or inside <= 0 or shorter_compute[1] >= med["compute_only"]:
        return text
    what, short = shorter_compute
    (hidden, ceiling), (alt, alt_ceiling) = hidden_share(times_s), hidden_share(
        times_s, comm_s=med["bucketed"] - short)
    return text + (f" Compute alone ({si(med['compute_only'], 's')}) is the reference that definition "
                   f"subtracts, not a floor: {what} took {si(short, 's')}, less. Subtracting that instead, "
                   f"the step exposes {si(med['bucketed'] - short, 's')}, the ceiling would be "
                   f"{alt_ceiling:.2f} (against {ceiling:.2f}) and the share saved {alt.value:.2f} (against "
                   f"{hidden.value:.2f}).")
