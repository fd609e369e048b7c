"""What lecture 13's comparisons say, in sentences computed from their numbers.

* :func:`one_sided` reads the signs of several predictions' errors together: all on one side
  says more than each verdict alone.
* :func:`without_collectives` says whether a ratio's tolerance window also holds what the model
  predicts with every collective term dropped: then the verdict cannot test those terms.
* :func:`step_ratio_text` makes such a ratio context, not a verdict; :func:`pipeline_bias` reads
  the sleeping pipeline stages' errors together.
* :func:`zero2_over_zero1` sets the measured ZeRO-2 / ZeRO-1 step ratio beside the model's, which
  charges the two stages alike, and names what the model leaves out between them.
* :func:`~perfkit.plan.step_time.ring_priced` says where a ZeRO step's predicted difference would
  lie against its measured interval had the model priced the reduce-scatter as NCCL's ring runs
  it, not as gloo.
* :func:`worst_row_cause` names what sets the worst published row apart from its peers (the
  same model and sequence in the same table), from the rows' own settings
  (:meth:`perfkit.plan.PublishedRun.settings`), before any cause outside the model is named.
* :func:`paired_error` (from :mod:`perfkit.plan.search`) is the planner's error on the *ratio*
  of two published rows of one model and sequence in one table: its 80th percentile is the
  resolution at which it can rank two layouts of one run (:data:`perfkit.plan.search.TIE_BAND`),
  not its error on one run's throughput.

Usage::

    print(one_sided({"zero1": (1.04, 1.23, "x"), "TP step": (54.3, 57.3, " ms")}))
    print(worst_row_cause(cmp.worst, peers, [0.355, 0.207]))
    print(without_collectives(zero1.terms, ddp.terms, (0.78, 1.30), "x"))
    print(paired_error(compare(megatron_runs() + foundry_runs())).text())
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from perfkit._checks import check_real, check_type
from perfkit.estimate import Estimate
from perfkit.plan.local import CoursePredictions
from perfkit.plan.published import RowResult
from perfkit.plan.search import PairedError, paired_error, published_choices
from perfkit.plan.windows import window_on_difference
from perfkit.verdict import Prediction

__all__ = ["COLLECTIVE_TERMS", "FLAGS_TERM", "PairedError", "one_sided", "paired_error",
           "pipeline_bias", "point_and_window", "published_choices", "rules_out",
           "step_ratio_text", "with_call",
           "without_collectives", "worst_row_cause",
           "zero2_over_zero1"]

# a sign test is read only where all its points on one side would be this rare (2 / 2^n) or rarer
SIGN_ALPHA = 0.10
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


def pipeline_bias(rows: Mapping[str, tuple[float, Estimate, float, float]]) -> str:
    """The pipeline steps' errors read together: ``rows`` maps a schedule to ``(predicted ms,
    measured step ms as an Estimate, the busier rank's time in its actions ms, the model's m v
    slots ms)``. Says how many intervals lie clear of their prediction on each side, each step's
    error and its actions' overrun, and the source of a one-sided error: the stages sleep, and a
    sleep ends late, never early, while the model charges the sleep asked for.

    Raises:
        TypeError, ValueError: ``rows`` empty, or not of that shape with finite numbers.
    """
    check_type("rows", rows, Mapping)
    if not rows:
        raise ValueError("rows must hold at least one schedule")
    for n, row in rows.items():
        if not isinstance(row, tuple) or len(row) != 4 or not isinstance(row[1], Estimate):
            raise TypeError(f"rows[{n!r}] must be (predicted, Estimate, actions, slots), got {row!r}")
        for i in (0, 2, 3):
            check_real(f"rows[{n!r}][{i}]", row[i])
    side = [m.clear_of(p, " ms") if m.has_interval and m.low < m.high else None
            for p, m, _, _ in rows.values()]
    over = {n: (m.value - p, a - sl) for n, (p, m, a, sl) in rows.items()}  # the error, the actions' part
    each = "; ".join(f"{n} {e:+.1f} ms, its actions {a:+.1f} ms past the model's slots"
                     for n, (e, a) in over.items())
    rest = [e - a for e, a in over.values()]
    counts, k = {"above their prediction": side.count("above"), "below it": side.count("below"), "around it":
                 side.count(""), "with too few samples for an interval": side.count(None)}, len(rows)
    head = (f"All {k} pipeline steps ran above their predictions, each interval clear of it: the model "
            "errs one way, by more than this run's noise" if counts["above their prediction"] == k else
            f"Of {k} pipeline steps, " + ", ".join(f"{c} {w}" for w, c in counts.items() if c))
    return (f"{head} ({each}). The stages sleep, and a sleep ends late, never early, while the model "
            "charges the sleep asked for, so its slots can only be short; the rest of each error, "
            f"{min(rest):+.1f} to {max(rest):+.1f} ms, lies outside the actions (the waits and sends "
            "measured against the model's bubble and sends).")


def _sign_needs(n: int) -> str:
    """How many of ``n`` errors a two-sided sign test at :data:`SIGN_ALPHA` needs on one side."""
    k = next((k for k in range(n // 2 + 1, n + 1)
              if 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n <= SIGN_ALPHA), None)
    if k is not None:
        return f"A two-sided sign test at {SIGN_ALPHA:.0%} would need {k} of these {n} on one side."
    need = next(m for m in range(1, 64) if 2 * 0.5 ** m <= SIGN_ALPHA)
    return (f"A two-sided sign test at {SIGN_ALPHA:.0%} could not reject chance with {n}, even all on one "
            f"side ({200 * 0.5 ** n:.3g}%): it needs {need} told apart, all on one side.")


def one_sided(points: Mapping[str, tuple]) -> str:
    """Whether predictions err one way: ``points`` maps a name to ``(predicted, measured, unit)``
    or ``(predicted, measured, unit, low, high)``, the last two the measured figure's interval.

    A point whose interval holds its prediction is told apart from neither side and counted
    apart; the sign test reads only the others. All of those on one side is stated with the
    chance of that under independent errors that fall either way at random (``2 / 2^n``), which
    predictions sharing a fitted figure exceed, where there are enough of them for that chance to
    reach :data:`SIGN_ALPHA` (5 at 10 %; fewer are listed with that count); otherwise the split is."""
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
                f"{n - slow} above ({where}): the errors fall on both sides.{apart} " + _sign_needs(n))
    if 2 * 0.5 ** n > SIGN_ALPHA:   # even all of them on one side would be no rarer than that
        need = next(k for k in range(1, 64) if 2 * 0.5 ** k <= SIGN_ALPHA)
        return (f"{'The 1 prediction' if n == 1 else f'All {n} predictions'} told apart from "
                f"{'its' if n == 1 else 'their'} measurement {'lies' if n == 1 else 'lie'} on one side of it "
                f"({where}): the model expected {'it' if n == 1 else 'every one'} "
                f"{'faster' if slow else 'slower'} than it ran.{apart} No sign test is read from "
                + ("it: one error lies on one side by construction" if n == 1 else
                   f"them: errors that fall either way at random put all {n} on one side with a chance of "
                   f"{200 * 0.5 ** n:.3g}%") + f"; only from {need} told apart is all on one side that rare "
                f"by chance ({SIGN_ALPHA:.0%} or less).")
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
    ratio = _bare_ratio(terms, base_terms)
    inside = low <= ratio <= high
    head = (f"With every collective term dropped from both steps the model would predict {ratio:.3g}{unit}, "
            f"{'inside' if inside else 'outside'} the window {low:.3g}{unit} to {high:.3g}{unit}: ")
    if not inside:
        return head + "the window rules out collectives that cost nothing, and no more."
    if measured is None or low <= measured <= high:
        rest = [n for n in dict.fromkeys([*terms, *base_terms]) if n not in COLLECTIVE_TERMS
                and (terms.get(n, 0) or base_terms.get(n, 0))]
        return head + ("the window does not test the collective terms. What a figure inside the window "
                       f"tests is the rest of the model ({', '.join(rest)}, at the fitted efficiency): that "
                       "with those terms the collectives and any cost left uncharged add at most "
                       f"{high - ratio:.3g}{unit} to the ratio.")
    return (head + f"the window alone does not tell the model from one without collectives, yet the measured "
            f"{measured:.3g}{unit} lies outside it: with the compute at its fitted cost, the collectives, "
            "with whatever else the model leaves uncharged, put it there (no step was timed without its "
            "collectives to part the two)" + (
                f"; found by subtraction they cost {cost[0]:.1f} ms against the {cost[1]:.1f} ms charged."
                if cost else "."))


def _bare_ratio(terms: Mapping[str, float], base_terms: Mapping[str, float]) -> float:
    """The ratio of two steps' terms (seconds) with every :data:`COLLECTIVE_TERMS` term dropped."""
    bare = {k: sum(v for n, v in t.items() if n not in COLLECTIVE_TERMS)
            for k, t in (("terms", terms), ("base", base_terms))}
    if bare["base"] <= 0:
        raise ValueError("base_terms must hold a term other than the collectives")
    return bare["terms"] / bare["base"]


def step_ratio_text(prediction: Prediction, measured: Estimate, other: float, said: str,
                    terms: Mapping[str, float], base_terms: Mapping[str, float],
                    difference: tuple[Estimate, float] | None = None) -> tuple[bool, str]:
    """Whether a step-ratio ``prediction`` is recorded as a verdict, and the text beside it.

    The prediction's window is set before the run; where it also holds the ratio the model
    predicts with every collective term dropped (``terms`` over ``base_terms``, seconds), no
    figure inside it tells the collective terms from none, so a held verdict would count them
    as tested: the ratio is then printed as context, not recorded (``(False, text)``, the text
    opening with why). Either way the text says where the ``measured`` interval lies against
    the point and the window (:func:`point_and_window`), where ``other`` (the ratio of the
    medians) lies against it as printed, and then ``said``; with ``difference`` (the paired
    difference's Estimate in ms and the base step planned, ms), a recorded verdict's text ends
    with :func:`window_on_difference`.

    Raises:
        TypeError, ValueError: as :func:`point_and_window` and :func:`without_collectives` do,
            for a ``prediction`` without a point value, or ``said`` not a string.
    """
    check_type("prediction", prediction, Prediction)
    check_type("said", said, str)
    if prediction.value is None:
        raise ValueError("prediction must have a point value (value=..., rel_tol=...)")
    low, high = prediction.bounds()
    bare = _bare_ratio(terms, base_terms)
    recorded = not low <= bare <= high
    beside, note = measured.beside(other, judged=recorded), measured.on_end(other, "x")
    beside = beside[:-1] + note + "." if note and beside.endswith(".") else beside  # the note inside
    body = (point_and_window(measured, prediction.value, (low, high)) + beside + " " + said).strip()
    if recorded:
        return True, body + (window_on_difference(prediction, measured, *difference) if difference else "")
    p = prediction
    return False, (f"Context, not a verdict ({p.model}): {p.what}, {p.describe()}. Measured: "
                   f"{measured.text('x')}. Not recorded as a verdict: its window ({low:.3g}x to {high:.3g}x) "
                   f"also holds {bare:.3g}x, the model's ratio with every collective term dropped, so it "
                   f"cannot test the collective terms; the paired difference is read against them. {body}")


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
        return f"{iv} holds the predicted {p:.3g}{unit} itself{measured.on_end(p, unit)}."
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
