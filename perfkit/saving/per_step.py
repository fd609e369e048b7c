"""Per-step fault tolerance: the share of steps that survive when a replica fails, as torchft
recovers.

torchft (PyTorch's fault-tolerance library, github.com/pytorch/torchft, "Easy Per Step Fault
Tolerance for PyTorch") keeps the healthy replica groups of a data-parallel job training
while a failed one restarts: its README says it does "per-step fault tolerance so you can
keep training if errors occur without interrupting the entire training job", allowing
"membership changes at the training step granularity", and its ``Manager.report_error``
says an error "will cause the manager to skip the current step and will be reconfigured on
the next step". A lighthouse forms a quorum of the replica groups before each step; a group
whose gradient all-reduce failed (its peer died) gets ``should_commit() == False`` and does
not step its optimizer; the next step's quorum leaves the dead group out, and a restarted
group heals by fetching the weights from a live one, while the others keep stepping.

The model, for a surviving group: each failure costs the steps in flight when it strikes,
``lost_steps`` (one: the step whose all-reduce broke), and nothing else, so out of the
``failure_interval / step`` steps between two failures ``lost_steps`` are not committed:

    committed / attempted = 1 - lost_steps * step_s / failure_interval_s

(:func:`per_step_goodput`). What it leaves out: the time a surviving group waits at the next
quorum until the lighthouse declares the dead one gone (its heartbeat timeout), which slows
the steps but loses none of them; a restarted group's healing step, which the model assumes
costs the survivors nothing (the healing group joins with zero gradients, and the survivors
average over the participants that were healthy); and the restarted group's own lost steps.
Compare with checkpoint and restart (:mod:`perfkit.saving.interval`), where every failure
costs the whole job half an interval of work and a restart.

Usage::

    g = per_step_goodput(step_s=0.12, failure_interval_s=20.0)      # 0.994
    p = per_step_prediction(step_s=0.12, failure_interval_s=20.0)   # 0.006 ± half a step
    print(judge(p, 1 - committed / attempted).text)
"""

from __future__ import annotations

from collections.abc import Mapping

from perfkit._checks import check_int, check_real, check_type
from perfkit.verdict import Prediction

__all__ = ["per_step_goodput", "per_step_prediction", "whole_job_text"]


def per_step_goodput(step_s: float, failure_interval_s: float, lost_steps: float = 1.0) -> float:
    """The share of a surviving replica group's steps that commit: ``1 - lost_steps * step_s /
    failure_interval_s``, and 0 where failures come faster than the steps they cost.

    Args:
        step_s: seconds per attempted step (> 0).
        failure_interval_s: mean seconds between failures of the other groups (> 0): the
            wall time over the number of failures.
        lost_steps: steps lost per failure (>= 0); 1, the step in flight, for torchft.

    Returns:
        committed steps over attempted steps, in [0, 1].

    Raises:
        TypeError, ValueError: a non-number, NaN, inf, or a value outside its range.
    """
    step_s = check_real("step_s", step_s, 0, lo_open=True)
    failure_interval_s = check_real("failure_interval_s", failure_interval_s, 0, lo_open=True)
    lost_steps = check_real("lost_steps", lost_steps, 0)
    return max(0.0, 1.0 - lost_steps * step_s / failure_interval_s)


def per_step_prediction(step_s: float, failure_interval_s: float, lost_steps: float = 1.0,
                        tol_steps: float = 0.5) -> Prediction:
    """The model's prediction of the share of a surviving group's steps that do *not* commit,
    ``1 - committed / attempted = lost_steps * step_s / failure_interval_s``, for
    :func:`perfkit.verdict.judge`.

    The lost share rather than the committed one: at tens of seconds between failures and a
    step of a tenth of a second both are within a percent of 1, and a tolerance written on
    the committed share would print as "± 0%". The tolerance is ``tol_steps`` steps per
    failure (default half a step, ``rel_tol = tol_steps / lost_steps``): half a step tells
    one lost step per failure apart from none (a failure that costs nothing) and from two (a
    healing step lost as well), whatever the step time and the failure interval.

    Args:
        step_s, failure_interval_s: as for :func:`per_step_goodput`.
        lost_steps: steps lost per failure (> 0).
        tol_steps: the tolerance in steps per failure (> 0).

    Returns:
        A point :class:`perfkit.verdict.Prediction` with ``physical=(0, 1)``, judged on
        exact counts (``timed=False``).

    Raises:
        TypeError, ValueError: as for :func:`per_step_goodput`; ``lost_steps`` or
            ``tol_steps`` not > 0; failures so frequent that no step would commit.
    """
    share = per_step_goodput(step_s, failure_interval_s, lost_steps)
    check_real("lost_steps", lost_steps, 0, lo_open=True)
    tol_steps = check_real("tol_steps", tol_steps, 0, lo_open=True)
    if share <= 0.0:
        raise ValueError(f"failure_interval_s ({failure_interval_s}) must exceed lost_steps * step_s "
                         f"({lost_steps * step_s}): no step would commit")
    return Prediction(
        "the share of a surviving replica group's attempted steps that did not commit",
        f"per-step fault tolerance: {lost_steps:g} x {step_s:.3g} s step lost per failure, "
        f"one failure per {failure_interval_s:.3g} s of wall time; that time holds the stalls after each "
        "failure, in which no step is attempted, so the model counts more steps per failure than a run "
        "attempts and reads low",
        value=1.0 - share, rel_tol=tol_steps / lost_steps, physical=(0.0, 1.0), timed=False)


def whole_job_text(result: Mapping, groups: int = 2) -> str:
    """What the whole job lost, beside what the survivor lost, from a stored run of
    ``benchmarks/torchft_goodput.py``: ``groups`` replica groups, one of them killed ``failures``
    times and down ``restart_s`` (its mean, kill to its first committed step again) after each,
    the others each training ``time_goodput`` of the ``wall_s`` as the survivor did. The killed
    group trains at most the time it was up, so the job's share is an upper bound.

    Raises:
        TypeError, ValueError: ``result`` lacking those keys or holding figures out of range,
            ``groups`` < 2.
    """
    check_type("result", result, Mapping)
    g = check_int("groups", groups, 2)
    try:
        n = check_int("failures", result["failures"], 0)
        wall = check_real("wall_s", result["wall_s"], 0, lo_open=True)
        tg = check_real("time_goodput", result["time_goodput"], 0, 1)
        lost = check_int("uncommitted", result["uncommitted"], 0)
        tried = check_int("attempted", result["attempted"], 1)
        r = float(f"{check_real('restart_s', result['restart_s'], 0):.4g}")   # as printed: sums add up
    except KeyError as e:
        raise ValueError(f"result lacks {e}: a torchft_goodput.py result is needed") from None
    down = min(wall, n * r)
    up = 1 - down / wall
    every = "both groups" if g == 2 else f"all {g} groups"
    return (f"For the whole job, {every}: the killed group was down {n} x {r:.4g} s (kill to its first "
            f"committed step again, the mean over kills) = {down:.3g} s of the {wall:.0f} s, so it trained "
            f"at most {up:.1%} of its time; with {'the' if g == 2 else 'each'} survivor's {tg:.1%}, the {g} "
            f"groups together trained at most {((g - 1) * tg + up) / g:.1%} of theirs. The survivor's {lost} "
            f"of {tried} steps lost ({lost / tried:.2%}) count its own steps only.")
