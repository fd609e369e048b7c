"""What lecture 13's comparisons say, in sentences computed from their numbers.

* :func:`tp_step_split` splits a tensor-parallel step (:mod:`perfkit.jobs.tp_plan`'s ``step``
  task) into parts that add up to it: the all-reduces with every rank present, and the rest,
  in which a rank computes. The time one rank waits at a call for the other lies inside that
  rest (it overlaps the other rank's compute), so it is never added as a third part.
* :func:`one_sided` reads the signs of several predictions' errors together: all on one side
  says more than each verdict alone.
* :func:`worst_row_cause` names what sets the worst published row apart from its peers (the
  same model and sequence in the same table), from the rows' own settings
  (:meth:`perfkit.plan.PublishedRun.settings`), before any cause outside the model is named.

Usage::

    print(tp_step_split(step_s, compute_s, transfer_s, skew_s, 13, comm_pred_s, compute_pred_s))
    print(one_sided({"zero1": (1.04, 1.23, "x"), "TP step": (54.3, 57.3, " ms")}))
    print(worst_row_cause(cmp.worst, peers, [0.355, 0.207]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfkit import stats
from perfkit._checks import check_items, check_type
from perfkit.plan.published import RowResult

__all__ = ["one_sided", "tp_step_split", "worst_row_cause"]


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
    out = (f"Of the {step:.1f} ms step, its {calls} all-reduces held both ranks {present:.1f} ms (medians "
           f"over the rounds); in the other {rest:.1f} ms a rank computed")
    if apart <= rest:
        out += (f". The {apart:.1f} ms in which one rank waited at a call for the other lie inside those: "
                "a rank waits while the other still computes, so the wait overlaps compute and is no "
                "third part")
    out += (f". With its all-reduces skipped the step took {alone:.1f} ms (predicted "
            f"{compute_pred_s * 1e3:.1f}): ")
    if longer >= 0:
        out += (f"the compute inside the TP step took {longer:.1f} ms longer (each call waits for the "
                "later rank; a change of load would show here too), so the all-reduces cost the step "
                f"{present:.1f} ms of transfer and {longer:.1f} ms of longer compute, "
                f"{present + longer:.1f} ms in all")
    else:
        out += (f"the compute inside the TP step took {-longer:.1f} ms less (the two steps met different "
                f"load), so only the transfer's {present:.1f} ms can be set against the model")
    verdict = ("less than the transfer alone" if pred < present else "more than the transfer" if longer < 0
               else "more than both" if pred > present + longer
               else "more than the transfer and less than both, so it covers part of the longer compute")
    return out + f". The model charges the all-reduces {pred:.1f} ms: {verdict}."


def one_sided(points: Mapping[str, tuple[float, float, str]]) -> str:
    """Whether predictions err one way: ``points`` maps a name to (predicted, measured, unit).

    All on one side is stated with the chance of that under errors that fall either way at
    random (``2 / 2^n``); otherwise the split is."""
    check_type("points", points, Mapping)
    if not points:
        raise ValueError("points must name at least one prediction")
    said = "; ".join(f"{k}: {p:.3g}{u} predicted, {m:.3g}{u} measured" for k, (p, m, u) in points.items())
    n, slow = len(points), sum(m > p for p, m, _ in points.values())  # predicted faster than measured
    if 0 < slow < n:
        return (f"{slow} of the {n} predictions lie below their measured points and {n - slow} above "
                f"({said}): the errors fall on both sides.")
    return (f"All {n} predictions lie on one side of their measured points ({said}): the model expected "
            f"every one {'faster' if slow else 'slower'} than it ran. No verdict alone could decide, but "
            f"errors that fall either way at random put all {n} on one side with a chance of "
            f"{2 * 0.5 ** n:.0%}; " + ("a cost the layouts pay that the model leaves out" if slow else
                                       "a cost the model charges that the layouts do not pay")
            + " would put them there every time.")


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
                "reported step; a larger model's collectives per micro-batch take longer, by an amount no "
                "published figure here gives")
    return out + "; which of these cost the time, the published rows cannot tell"
