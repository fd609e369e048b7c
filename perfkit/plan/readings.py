"""What lecture 13's comparisons say, in sentences computed from their numbers.

* :func:`tp_step_split` splits a tensor-parallel step (:mod:`perfkit.jobs.tp_plan`'s ``step``
  task) into parts that add up to it: the all-reduces with every rank present, and the rest,
  in which a rank computes. The time one rank waits at a call for the other lies inside that
  rest (it overlaps the other rank's compute), so it is never added as a third part.
* :func:`one_sided` reads the signs of several predictions' errors together: all on one side
  says more than each verdict alone.
* :func:`without_collectives` says whether a ratio's tolerance window also holds what the model
  predicts with every collective term dropped: then the verdict cannot test those terms.
* :func:`zero2_over_zero1` sets the measured ZeRO-2 / ZeRO-1 step ratio beside the model's, which
  charges the two stages alike, and names what the model leaves out between them.
* :func:`ring_priced` says where a ZeRO step's predicted difference would lie against its
  measured interval had the model priced the reduce-scatter as NCCL's ring runs it, not as gloo.
* :func:`worst_row_cause` names what sets the worst published row apart from its peers (the
  same model and sequence in the same table), from the rows' own settings
  (:meth:`perfkit.plan.PublishedRun.settings`), before any cause outside the model is named.
* :func:`paired_error` (from :mod:`perfkit.plan.search`) is the planner's error on the *ratio*
  of two published rows of one model and sequence in one table: its 80th percentile is the
  resolution at which it can rank two layouts of one run (:data:`perfkit.plan.search.TIE_BAND`),
  not its error on one run's throughput.

Usage::

    print(tp_step_split(step_s, compute_s, transfer_s, skew_s, 13, comm_pred_s, compute_pred_s))
    print(one_sided({"zero1": (1.04, 1.23, "x"), "TP step": (54.3, 57.3, " ms")}))
    print(worst_row_cause(cmp.worst, peers, [0.355, 0.207]))
    print(without_collectives(zero1.terms, ddp.terms, (0.78, 1.30), "x"))
    print(paired_error(compare(megatron_runs() + foundry_runs())).text())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from perfkit import stats
from perfkit._checks import check_items, check_real, check_type
from perfkit.estimate import Estimate
from perfkit.plan.local import CollectiveCost, CoursePredictions
from perfkit.plan.published import RowResult
from perfkit.plan.search import PairedError, paired_error, published_choices

__all__ = ["COLLECTIVE_TERMS", "FLAGS_TERM", "PairedError", "one_sided", "paired_error", "point_and_window",
           "published_choices", "ring_priced", "rules_out", "tp_step_split", "with_call",
           "without_collectives", "worst_row_cause", "zero2_over_zero1"]

# perfkit's ZeroOptimizer all-reduces one flag per parameter every step: a call the planner does not count
FLAGS_TERM = "flags all-reduce"
# the step-time terms (:class:`perfkit.plan.StepTime`) that a collective or a send pays
COLLECTIVE_TERMS = ("data-parallel", "ZeRO-3 collectives", "tensor-parallel", "context-parallel",
                    "pipeline sends", FLAGS_TERM)


def with_call(pred: CoursePredictions, seconds: float, layouts: Sequence[str] = ("zero1", "zero2", "zero3"),
              term: str = FLAGS_TERM) -> CoursePredictions:
    """``pred`` with one more call charged to each of ``layouts``' steps: a term ``term`` of ``seconds``
    added to its terms and its total (throughput, MFU and HFU scaled to the longer step), so the model
    prices a call the code makes that the planner does not count (perfkit's ZeroOptimizer's flags'
    all-reduce). The efficiency stays as fitted, on a layout that must not be among ``layouts``.

    Raises:
        TypeError, ValueError: ``pred`` not :class:`CoursePredictions`, ``seconds`` not a finite number
            >= 0, a layout ``pred`` does not hold, or its fitted layout among ``layouts``.
    """
    check_type("pred", pred, CoursePredictions)
    s = check_real("seconds", seconds, 0)
    for n in layouts:
        if n not in pred.times or n == pred.fitted_on:
            raise ValueError(f"layouts must name predicted layouts other than the fitted "
                             f"{pred.fitted_on!r}, got {n!r}")
    times = dict(pred.times)
    for n in layouts:
        t, k = times[n], times[n].total_s / (times[n].total_s + s)
        times[n] = replace(t, terms={**t.terms, term: s}, total_s=t.total_s + s,
                           tokens_per_s=t.tokens_per_s * k, mfu=t.mfu * k, hfu=t.hfu * k)
    return replace(pred, times=times)


def tp_step_split(step_s: Sequence[float], compute_s: Sequence[float], transfer_s: Sequence[float],
                  skew_s: Sequence[float], calls: int, comm_pred_s: float, compute_pred_s: float) -> str:
    """The TP step's median in parts that add up: the all-reduces with both ranks present
    (``transfer_s``), the rest, and against the same step with its all-reduces skipped
    (``compute_s``) how much longer that rest ran; then the model's charge for the calls.

    Args:
        step_s, compute_s, transfer_s, skew_s: per round, seconds (``skew_s``: from the first
            rank's arrival at each call to the last one's, summed over the calls).
        calls: all-reduces per step.
        comm_pred_s, compute_pred_s: the model's charge for the calls and for the rest.
    """
    for name, xs in (("step_s", step_s), ("compute_s", compute_s), ("transfer_s", transfer_s),
                     ("skew_s", skew_s)):
        check_items(name, xs)
    ms = {k: stats.median(v) * 1e3 for k, v in (("step", step_s), ("alone", compute_s),
                                                  ("present", transfer_s), ("apart", skew_s))}
    step, alone, present, apart = ms["step"], ms["alone"], ms["present"], ms["apart"]
    rest, pred = step - present, comm_pred_s * 1e3
    longer = rest - alone
    out = (f"Of the {step:.1f} ms step, its {calls} all-reduces held both ranks {present:.1f} ms; in the "
           f"other {rest:.1f} ms a rank computed or waited for the other")
    if apart <= rest:
        out += (f" (one rank's {apart:.1f} ms of waiting for the other lie inside those, beside the other's "
                "compute: no third part)")
    out += (f". With its all-reduces skipped the step took {alone:.1f} ms (predicted "
            f"{compute_pred_s * 1e3:.1f}): ")
    if longer >= 0:
        out += (f"the all-reduces cost the step {present:.1f} ms of transfer and {longer:.1f} ms more "
                "outside them (longer compute and waiting for the other rank, which this split does not "
                f"tell apart), {present + longer:.1f} ms in all")
    else:
        out += (f"the compute inside the TP step took {-longer:.1f} ms less (the two steps met different "
                f"load), so only the transfer's {present:.1f} ms can be set against the model")
    near = abs(round(pred, 1) - round(present, 1)) <= 0.1 + 1e-9  # one step of the printed 0.1 ms
    verdict = (f"as printed, within 0.1 ms of the transfer's {present:.1f} ms" + (
               f", and nothing for the {longer:.1f} ms outside them" if longer >= 0.05 else "") if near
               else "less than the transfer alone" if pred < present
               else "more than the transfer" if longer < 0
               else "more than both" if pred > present + longer
               else "more than the transfer and less than both, so it covers part of the time outside them")
    return out + f". The model charges them {pred:.1f} ms: {verdict}."


def one_sided(points: Mapping[str, tuple]) -> str:
    """Whether predictions err one way: ``points`` maps a name to ``(predicted, measured, unit)``
    or ``(predicted, measured, unit, low, high)``, the last two the measured figure's interval.

    A point whose interval holds its prediction is told apart from neither side and counted
    apart; the sign test reads only the others. All of those on one side is stated with the
    chance of that under independent errors that fall either way at random (``2 / 2^n``), which
    predictions sharing a fitted figure exceed; otherwise the split is."""
    check_type("points", points, Mapping)
    if not points:
        raise ValueError("points must name at least one prediction")
    for k, v in points.items():
        if not isinstance(v, tuple) or len(v) not in (3, 5):
            raise ValueError(f"points[{k!r}] must be (predicted, measured, unit) or (predicted, measured, "
                             f"unit, low, high), got {v!r}")

    def said(k, v):
        p, m, u = v[:3]
        held = f" (interval {v[3]:.3g} to {v[4]:.3g}{u})" if len(v) == 5 else ""
        return f"{k}: {p:.3g}{u} predicted, {m:.3g}{u} measured{held}"

    tied = [k for k, v in points.items() if len(v) == 5 and v[3] <= v[0] <= v[4]]
    told = {k: v for k, v in points.items() if k not in tied}
    where = ("; ".join(said(k, v) for k, v in points.items() if k not in tied))
    one = len(tied) == 1
    holds, errs = ("holds its", "that one errs") if one else ("hold their", "those err")
    apart = (f" {len(tied)} of the {len(points)} measured intervals {holds} prediction "
             f"({'; '.join(said(k, points[k]) for k in tied)}): {errs} neither way that this run can "
             "tell." if tied else "")
    n, slow = len(told), sum(v[1] > v[0] for v in told.values())  # predicted faster than measured
    if n == 0:
        every = "; ".join(said(k, v) for k, v in points.items())
        return f"Every measured interval holds its prediction ({every}): no error to read a sign from."
    if 0 < slow < n:
        return (f"{slow} of the {n} predictions told apart from their measurement lie below it and "
                f"{n - slow} above ({where}): the errors fall on both sides.{apart}")
    return (f"All {n} predictions told apart from their measurement lie on one side of it ({where}): the "
            f"model expected every one {'faster' if slow else 'slower'} than it ran.{apart} No verdict "
            f"alone could decide, but errors that fall either way at random, each independently of the "
            f"others, put all {n} on one side with a chance of {200 * 0.5 ** n:.3g}% (predictions that share "
            "a fitted figure or a measured denominator err together, so more often than that); "
            + ("a cost the layouts pay that the model leaves out" if slow else
               "a cost the model charges that the layouts do not pay") + " would put them there every time.")


def without_collectives(terms: Mapping[str, float], base_terms: Mapping[str, float],
                        window: tuple[float, float], unit: str = "x", measured: float | None = None,
                        collectives_ms: tuple[float, float] | None = None) -> str:
    """What the model predicts for the ratio of two steps (``terms`` over ``base_terms``, each a
    step's terms in seconds) with every :data:`COLLECTIVE_TERMS` term dropped from both, and
    whether that lies inside the prediction's tolerance ``window`` ``(low, high)``. Where it
    does, a measured ratio inside the window is as close to a model without any collective as
    to the model: the verdict does not test the collective terms, and the sentence says what it
    does test: the other terms, with at most ``high`` less that ratio left for the collectives
    and any uncharged cost. Where the ``measured`` ratio lies outside the window that holds the
    model without collectives, the collectives (with what the model leaves uncharged) put it
    there (a miss, or an interval reaching back in), and the sentence says so with
    ``collectives_ms``: what they cost, with the compute at its fitted cost, and what the model
    charged them (ms).

    Raises:
        TypeError, ValueError: terms not mappings of seconds, a base without any other term,
            a window that is not two finite numbers, low <= high, a ``measured`` that is not a
            finite number, or ``collectives_ms`` not two finite numbers.
    """
    for name, t in (("terms", terms), ("base_terms", base_terms)):
        check_type(name, t, Mapping)
        for k, v in t.items():
            check_real(f"{name}[{k!r}]", v, 0)
    if not isinstance(window, tuple) or len(window) != 2:
        raise ValueError(f"window must be (low, high), got {window!r}")
    low, high = (check_real(f"window[{i}]", w) for i, w in enumerate(window))
    if low > high:
        raise ValueError(f"window must have low <= high, got {window!r}")
    if measured is not None:
        check_real("measured", measured)
    if collectives_ms is not None and (not isinstance(collectives_ms, tuple) or len(collectives_ms) != 2):
        raise ValueError(f"collectives_ms must be (cost, charge), got {collectives_ms!r}")
    cost = [check_real(f"collectives_ms[{i}]", c) for i, c in enumerate(collectives_ms or ())]
    bare = {k: sum(v for n, v in t.items() if n not in COLLECTIVE_TERMS)
            for k, t in (("terms", terms), ("base", base_terms))}
    if bare["base"] <= 0:
        raise ValueError("base_terms must hold a term other than the collectives")
    ratio = bare["terms"] / bare["base"]
    inside = low <= ratio <= high
    head = (f"With every collective term dropped from both steps the model would predict {ratio:.3g}{unit}, "
            f"{'inside' if inside else 'outside'} the window {low:.3g}{unit} to {high:.3g}{unit}: ")
    if not inside:
        return head + "the window rules out collectives that cost nothing, and no more."
    if measured is None or low <= measured <= high:
        rest = [n for n in dict.fromkeys([*terms, *base_terms]) if n not in COLLECTIVE_TERMS
                and (terms.get(n, 0) or base_terms.get(n, 0))]
        return head + ("this verdict does not test the collective terms. What a figure inside the window "
                       f"tests is the rest of the model ({', '.join(rest)}, at the fitted efficiency): that "
                       "with those terms the collectives and any cost left uncharged add at most "
                       f"{high - ratio:.3g}{unit} to the ratio.")
    return (head + f"the window alone does not tell the model from one without collectives, yet the measured "
            f"{measured:.3g}{unit} lies outside it: with the compute at its fitted cost, the collectives, "
            "with whatever else the model leaves uncharged, put it there (no step was timed without its "
            "collectives to part the two)" + (
                f"; found by subtraction they cost {cost[0]:.1f} ms against the {cost[1]:.1f} ms charged."
                if cost else "."))


def rules_out(measured: Estimate, alternatives: Mapping[str, float], unit: str = "") -> str:
    """Which of the ``alternatives`` (name -> the figure each would give) the measured interval
    leaves out, as its printed ends read: for an inconclusive verdict whose window edge the
    interval crosses, what the measurement still settles. ``""`` without an interval.

    Raises:
        TypeError, ValueError: ``measured`` not an Estimate, no alternatives, or one not finite.
    """
    check_type("measured", measured, Estimate)
    check_type("alternatives", alternatives, Mapping)
    if not alternatives:
        raise ValueError("alternatives must name at least one figure")
    alt = {k: check_real(f"alternatives[{k!r}]", v) for k, v in alternatives.items()}
    if not measured.has_interval or measured.low == measured.high:
        return ""
    out = [k for k, v in alt.items() if measured.clear_of(v, unit)]
    kept = [k for k in alt if k not in out]
    u = f" {unit}" if unit not in ("", "x", "%") else unit
    said = "; ".join(f"{k} {v:.3g}{u}" for k, v in alt.items())
    iv = f"the measured interval ({measured.low:.3g} to {measured.high:.3g}{u})"
    if not out:
        return f"{iv[0].upper() + iv[1:]} holds every alternative ({said}): it rules none out."
    if not kept:
        return (f"Yet {iv} leaves out every alternative ({said}): the window is undecided, "
                "but this run rules those out.")
    return f"Yet {iv} leaves out {', '.join(out)} ({said}), though not {', '.join(kept)}."


def point_and_window(measured: Estimate, predicted: float, window: tuple[float, float],
                     unit: str = "x") -> str:
    """What the ``measured`` interval excludes of a prediction: its point ``predicted`` and its
    tolerance ``window`` ``(low, high)``, each as the interval's printed ends read. A verdict
    judges the window; an interval clear of the point with a window edge inside it leaves that
    verdict undecided while the point itself is refuted, and this sentence says both. ``""``
    without an interval.

    Raises:
        TypeError, ValueError: ``measured`` not an Estimate, ``predicted`` not finite, or a
            window that is not two finite numbers with low <= high.
    """
    check_type("measured", measured, Estimate)
    p = check_real("predicted", predicted)
    if not isinstance(window, tuple) or len(window) != 2:
        raise ValueError(f"window must be (low, high), got {window!r}")
    a, b = (check_real(f"window[{i}]", w) for i, w in enumerate(window))
    if a > b:
        raise ValueError(f"window must have low <= high, got {window!r}")
    if not measured.has_interval or measured.low == measured.high:
        return ""
    iv = "Its interval"
    if not measured.clear_of(p, unit):
        return f"{iv} holds the predicted {p:.3g}{unit} itself."
    edges = [e for e in (a, b) if not measured.clear_of(e, unit)]
    if edges:
        return (f"{iv} leaves out the predicted {p:.3g}{unit} itself but holds the window's edge "
                f"{' and '.join(f'{e:.3g}{unit}' for e in edges)}: the point prediction errs by more than "
                "this run's noise, while whether the figure lies inside the window this run cannot tell.")
    if a <= measured.low and measured.high <= b:
        return (f"{iv} leaves out the predicted {p:.3g}{unit} itself, though it lies inside the window: "
                "the point errs by more than this run's noise, within the tolerance.")
    return (f"{iv} leaves out the whole window ({a:.3g} to {b:.3g}{unit}), the predicted {p:.3g}{unit} "
            "with it.")


def zero2_over_zero1(measured: Estimate, predicted: float) -> str:
    """ZeRO-2's step over ZeRO-1's (``measured``, paired by round) beside the model's ratio
    (``predicted``), and what the model leaves out between the two stages: it charges both the
    same collectives and the same optimizer step, while :class:`perfkit.parallel.ZeroOptimizer`
    at stage 2 allocates, zeroes and fills a fresh full-gradient bucket every step and frees it
    once reduced (stage 1 keeps its bucket across steps).

    Raises:
        TypeError, ValueError: ``measured`` not an :class:`~perfkit.estimate.Estimate` or
            ``predicted`` not a finite number > 0.
    """
    check_type("measured", measured, Estimate)
    p = check_real("predicted", predicted, 0, lo_open=True)
    side = measured.clear_of(p, "x")
    read = (f"the interval lies {side} the model's {p:.3g}x: the two stages ran apart, which the model "
            "cannot show" if side else
            f"the model's {p:.3g}x lies inside the interval: this run cannot tell the two apart" if
            measured.has_interval else f"without an interval, set beside the model's {p:.3g}x")
    return (f"zero2's step over zero1's, per round: {measured.text('x')}; {read}. The model charges both "
            "stages the same collectives and the same optimizer step; what perfkit's ZeroOptimizer does "
            "differently at stage 2 (it allocates, zeroes and fills a fresh full-gradient bucket every "
            "step and frees it once reduced, where stage 1 keeps its bucket) has no term in it, and this "
            "run does not time it apart.")


def worst_row_cause(worst: RowResult, peers: Sequence[RowResult],
                    fixed_per_micro_batch_s: Sequence[float]) -> str:
    """Why the worst row may stand apart from ``peers`` (the same model and sequence, same
    table): each setting the rows differ in, by name; with a different micro-batch, how much
    more a fixed cost per micro-batch (``fixed_per_micro_batch_s``, measured elsewhere) weighs
    per token. A cause outside the model is named only where the GPU count is all that
    differs and the peers are predicted within half the worst row's error."""
    check_type("worst", worst, RowResult)
    if not peers or max(abs(r.error) for r in peers) >= abs(worst.error) / 2:
        return ("No term the planner counts is off by that much for this row alone; section 5 lists "
                "what it leaves out")
    mine = worst.run.settings()
    differ = {k: [r.run.settings()[k] for r in peers] for k, v in mine.items()
              if any(r.run.settings()[k] != v for r in peers)}
    if list(differ) == ["GPUs"]:
        return ("The rows differ in the GPU count alone, and no term that changes with it explains one "
                "row alone, so this run lost time to something outside the model (section 5)")
    out = "The rows differ in " + ", ".join(f"{k} ({mine[k]} against {', '.join(map(str, v))})"
                                            for k, v in differ.items())
    fixed = list(fixed_per_micro_batch_s)
    if "micro-batch" in differ and fixed:
        run, lay = worst.run, worst.run.layout
        tokens = run.global_batch * run.model.seq  # per step
        gap_s = tokens / (run.reported_tokens_per_gpu * lay.gpus) - tokens / (worst.predicted * lay.gpus)
        per_rank = run.global_batch / (lay.micro_batch * lay.dp)  # micro-batches each rank runs a step
        out += (f": a cost paid once per micro-batch (llm-foundry's sweep measured {min(fixed):.2f} to "
                f"{max(fixed):.2f} s of it beyond the sequences' cost, for its smaller models on one node of "
                f"8 A100s) weighs {differ['micro-batch'][0] / mine['micro-batch']:.2g}x as much per token at "
                f"this row's micro-batch ({mine['micro-batch']}) as at the other's. At that size it would "
                f"add {per_rank * min(fixed):.2g} to {per_rank * max(fixed):.2g} s to a step of "
                f"{per_rank:.3g} micro-batch{'es' * (per_rank != 1)} per rank, against the "
                f"{abs(gap_s):.2g} s by which the prediction {'misses' if gap_s > 0 else 'overshoots'} the "
                "reported step" + (f": {per_rank * max(fixed) / gap_s:.0%} of it at most, at the measured "
                                   "figures" if gap_s > 0 else "") +
                "; a larger model's collectives per micro-batch take longer, by an amount no published "
                "figure here gives")
        if gap_s > 0 and per_rank * max(fixed) < gap_s:
            return (out + ". The rest of the miss the planner does not explain: which of these settings "
                    "cost the time, the published rows cannot tell")
    return out + "; which of these cost the time, the published rows cannot tell"


def ring_priced(cost: CollectiveCost, ring_predicted_s: float, backend: str = "gloo") -> str:
    """A sentence, starting with a space, on where ``cost``'s predicted difference would lie had the
    model priced each reduce-scatter as NCCL's ring runs it (half an all-reduce's steps and bytes)
    instead of as ``backend`` runs it (a whole all-reduce: gloo has no ring reduce-scatter), against the
    measured interval; ``""`` where the two prices agree or the difference has no interval.

    Args:
        cost: what :func:`collective_cost` read, its ``predicted_s`` at ``backend``'s price.
        ring_predicted_s: the model's difference with every reduce-scatter at the ring's price, s.
        backend: the backend that ran (and whose price ``cost`` carries).

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or not finite.
    """
    check_type("cost", cost, CollectiveCost)
    check_type("backend", backend, str)
    ring = check_real("ring_predicted_s", ring_predicted_s)
    g, nd = cost.gap.scaled(1e3), cost.digits
    if not (g.has_interval and g.low < g.high) or round(ring * 1e3, nd) == round(cost.predicted_s * 1e3, nd):
        return ""

    def where(d_s: float) -> str:
        return {"above": "below", "below": "above"}.get(g.clear_of(d_s * 1e3, "ms"), "inside")

    here, there = where(cost.predicted_s), where(ring)
    return (f" On {backend}, which ran here, a reduce-scatter all-reduces the buffer and keeps its slice, a "
            f"whole all-reduce's bytes, and the model charges it so ({cost.predicted_s * 1e3:.{nd}f} ms "
            f"predicted); priced as NCCL's ring reduce-scatter, half an all-reduce, the predicted difference "
            f"would be {ring * 1e3:.{nd}f} ms, {there} the measured interval "
            f"({g.low:.{nd}f} to {g.high:.{nd}f} ms)"
            + (f": on either price it lies {here} it." if here == there else
               f": where it lies against the interval rests on pricing the reduce-scatter as {backend} "
               "runs it."))
