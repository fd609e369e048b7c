"""The sentences lecture 07's verdicts append, each computed from the figures it speaks of:
:func:`pipeline_excess` for the 1-worker step (which stage's slowdown can move it),
:func:`sleep_explain` and :func:`gil_explain` for the prefetcher's two verdicts,
:func:`rates_held` for the CPU-bound sweep's ratio, and :func:`rate_context`, the line that
prints that ratio as context where its sweep is too short to judge it (re-exported by
:mod:`perfkit.data.experiments`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfkit import stats
from perfkit._checks import check_int, check_real, check_type
from perfkit.data.overlap import (
    gil_hidden_bound,
    gil_least_step,
    hidden_fraction,
    overlap_floor,
    overlap_hidden,
)
from perfkit.stats import Estimate
from perfkit.units import printed_beside, printed_interval, si, si_beside
from perfkit.verdict import Prediction

__all__ = ["PipelineExcess", "gil_explain", "near_edge", "pipeline_excess", "rate_context", "rates_held",
           "sleep_explain"]


def rates_held(rates: Mapping[int, float], model_rates: Mapping[int, float], at: int,
               past: Sequence[int], measured: Estimate, bounds: tuple[float, float]) -> str:
    """The ``"held"`` sentence for the verdict on :func:`rate_ratio` of the last of ``past`` over
    ``at`` workers (``rates``, ``model_rates``: mean steady samples/s by worker count): the rates,
    and where their own ratio, the last over ``at``, lies against the prediction's ``bounds``
    beside the judged ratio of median block means, ``measured`` (both at 3 significant figures).
    An inconclusive verdict prints it after "the point estimate lies inside the predicted range", so a
    ratio of means outside says the two statistics lie on opposite sides of the edge.

    Raises:
        TypeError, ValueError: for a ``measured`` that is not an Estimate, an empty ``past``,
            worker counts missing from the rates, or rates that are not finite numbers > 0.
    """
    check_type("measured", measured, Estimate)
    if not past:
        raise ValueError("past must name at least one worker count")
    for w in (at, *past):
        check_real(f"rates[{w}]", rates.get(w, math.nan), 0, lo_open=True)
    check_real(f"model_rates[{at}]", model_rates.get(at, math.nan), 0, lo_open=True)
    lo, hi = bounds
    mean_x = float(f"{rates[past[-1]] / rates[at]:.3g}")
    side = "below" if mean_x < float(f"{lo:.3g}") else "above" if mean_x > float(f"{hi:.3g}") else "inside"
    text = (f"Samples/s at {at} workers {rates[at]:.0f} ({rates[at] / model_rates[at]:.0%} of the model's), "
            "past it: " + ", ".join(f"{w}: {rates[w]:.0f}" for w in past)
            + f"; the ratio of those mean rates, {past[-1]} over {at}, {mean_x:.3g}x (no interval), lies ")
    judged_in = float(f"{lo:.3g}") <= float(f"{measured.value:.3g}") <= float(f"{hi:.3g}")
    if side == "inside" or not judged_in:
        return text + f"{side} the prediction ({lo:.3g}x to {hi:.3g}x)."
    return (text + f"{side} the prediction ({lo:.3g}x to {hi:.3g}x), where the judged ratio of median "
            f"block means, {measured.point('x')}, lies inside: the two statistics of one ratio lie on "
            "opposite sides of its edge (a median block mean does not move with the few blocks that "
            "hold a run's slowest steps, which its mean rate counts in full), and the verdict judges the "
            "block means only.")


def near_edge(prediction: Prediction, measured: Estimate) -> str:
    """A sentence, starting with a space, for a ``"held"`` explanation: how far inside the
    prediction's nearer edge ``measured``'s interval ends, as both are printed, and, where that
    margin is no more than the interval's own width at the printed precision, that the verdict is
    weak for intervals that treat a run's steps as independent draws (narrower than the run's real
    uncertainty). ``""``
    without an interval, or where the interval reaches past an edge (the verdict then says so).

    Raises:
        TypeError: for a ``prediction`` that is not a Prediction or a ``measured`` that is not
            an Estimate.
    """
    check_type("prediction", prediction, Prediction)
    check_type("measured", measured, Estimate)
    if not measured.has_interval or measured.low == measured.high:
        return ""
    u = prediction.unit
    lo, hi = prediction.bounds()
    if measured.clear_of(lo, u) != "above" or measured.clear_of(hi, u) != "below":
        return ""
    v, a, b = measured.value, measured.low, measured.high
    plo, phi = printed_interval(v, a, b, u)  # the ends, edges and margin as the reader sees them
    elo, ehi = printed_beside(lo, v, a, b, u), printed_beside(hi, v, a, b, u)
    margin, edge, name = min((plo - elo, lo, "lower"), (ehi - phi, hi, "upper"))
    text = (f" Its {measured.label} ends {si_beside(margin, v, a, b, u)} inside the prediction's {name} "
            f"edge, {si_beside(edge, v, a, b, u)}")
    width = si_beside(phi - plo, v, a, b, u)
    shown = printed_beside(margin, v, a, b, u), printed_beside(phi - plo, v, a, b, u)  # as the reader sees
    if shown[0] <= shown[1]:
        return text + (f", {'less than' if shown[0] < shown[1] else 'no more than'} the interval's own width "
                       f"({width}): intervals that treat a run's steps as independent draws are narrower "
                       "than its real uncertainty, so this held verdict is weaker than it reads.")
    return text + f", more than the interval's own width ({width})."


def rate_context(prediction: Prediction, measured: Estimate, why: str, mean_x: float) -> str:
    """The line printed, in place of a verdict, for a ratio of two loader runs that their length
    cannot settle (``why``: the design's reason, a sentence): the prediction, ``measured`` with
    its interval, the interval's width against the model's range, where the point and the
    whole interval lie against that range, and where ``mean_x`` (the ratio of the two runs'
    mean rates, the throughput each delivered) lies against the interval and the range, saying
    where it and the median block means lie on opposite sides of 1x. An interval wider than the
    range cannot lie inside it, which the line says; one that lies wholly outside it is called
    what a verdict would call it, a miss, so that printing it as context hides no outcome.

    Raises:
        TypeError, ValueError: for a ``prediction`` that is not a Prediction, a ``measured``
            that is not an Estimate, an empty ``why`` or a ``mean_x`` that is not finite.
    """
    check_type("prediction", prediction, Prediction)
    check_type("measured", measured, Estimate)
    if not isinstance(why, str) or not why:
        raise ValueError(f"why must give the design's reason, got {why!r}")
    u = prediction.unit
    lo, hi = prediction.bounds()
    text = (f"[context] Context, not a verdict ({prediction.model}): {prediction.what}, "
            f"{prediction.describe()}. Measured, by the median block means: {measured.text(u)}. {why}")
    side = "below" if measured.value < lo else "above" if measured.value > hi else "inside"
    if measured.has_interval and measured.low < measured.high:
        width, band = measured.high - measured.low, hi - lo
        text += (f" Here the interval is {width:.3g} wide, {width / band:.2g}x the model's range "
                 f"({si(lo, u)} to {si(hi, u)}, {band:.3g} wide)" + (
                     ": an interval that wide cannot lie inside the range, so this run could not have "
                     "settled it" if width > band else ": narrower than the range this time"))
        out = "below" if measured.high < lo else "above" if measured.low > hi else ""
        text += (f"; its whole interval lies {out} the range, which a verdict would call a miss." if out else
                 f"; the point estimate lies {side} the range, and the interval reaches across "
                 + ("both its edges." if measured.low < lo and measured.high > hi else "an edge."
                    if measured.low < lo or measured.high > hi else "neither edge."))
    else:
        text += f" The point estimate lies {side} the range (no interval)."
    text += measured.beside(mean_x, what="the ratio of the runs' mean rates", unit=u, judged=False)
    mean_side = "below" if mean_x < lo else "above" if mean_x > hi else "inside"
    apart = (measured.value - 1) * (mean_x - 1) < 0  # the two statistics on opposite sides of 1x
    return (text + " The mean rates' ratio, each run's steady samples over its steady time, its slowest "
            f"blocks included (the throughput each run delivered), lies {mean_side} the model's range"
            + ("; the median block means put the ratio on the other side of 1x, as a median leaves out the "
               "slowest and fastest blocks, which throughput counts." if apart else "."))


def _below(pre: Estimate, x: float, name: str) -> str:
    """How far the prefetched loop's median (``pre``, ms/step) lies below ``x``, and whether its
    interval reaches ``x`` (noise) or not (a part ran faster inside the loop)."""
    gap = (f"the prefetched loop's {pre.value:.2f} ms/step lies {x - pre.value:.2f} ms "
           f"({(x - pre.value) / x:.0%}) below {name} ({x:.2f} ms/step)")
    ends = f"its {pre.label}, {pre.low:.2f} to {pre.high:.2f} ms/step ({pre.method})"
    if pre.has_interval and pre.high >= x:
        return gap + f", within its noise: {ends}, reaches it"
    return (gap + (f", beyond its noise ({ends})" if pre.has_interval else " (no interval)")
            + ": inside the loop a load or a step took less than the loops that timed them apart in the "
            "same rounds, which this run does not explain")


def sleep_explain(rounds: Mapping[str, Sequence[float]], n: int, exhausts: bool) -> dict[str, str]:
    """The sentences :func:`perfkit.verdict.judge` appends to the I/O-like (sleep) load's verdict
    on :func:`hidden_fraction_estimate`, keyed by outcome, each computed from ``rounds`` (loop
    name -> seconds per loop of ``n`` steps, one entry per round): where the prefetched loop lies
    against the two-stage floor (:func:`overlap_floor`) and its longer part, and whether its own
    interval reaches them.

    Raises:
        TypeError, ValueError: for ``rounds`` without the four ``"sleep"`` loops, ``n`` below 1
            or ``exhausts`` not a bool.
    """
    check_int("n", n, 1)
    check_type("rounds", rounds, Mapping)
    need = ("serial, sleep load", "Prefetcher, sleep load", "load only", "compute only")
    if missing := [k for k in need if k not in rounds]:
        raise ValueError(f"rounds must hold the loops {list(need)}, missing {missing}")
    ms = {k: stats.median_interval([t / n * 1e3 for t in rounds[k]]) for k in need}
    serial, pre = ms["serial, sleep load"].value, ms["Prefetcher, sleep load"]
    load, compute = ms["load only"].value, ms["compute only"].value
    floor, longer = overlap_floor(load, compute, n, exhausts) / n, max(load, compute)
    model = overlap_hidden(load + compute, load, compute, n, exhausts) if load + compute > longer else 1.0
    at_serial = overlap_hidden(serial, load, compute, n, exhausts) if serial > longer else 1.0
    below = _below(pre, floor, "that floor") if pre.value < floor else ""
    if hidden_fraction({k: v.value for k, v in ms.items()}, "sleep") > model:
        held = (f"The serial loop cost {serial - load - compute:+.2f} ms/step against its parts"
                + (", which the prefetcher hides too" if serial > load + compute else "")
                + f": at its floor, beside this serial loop, the fraction would be {at_serial:.3f}"
                + (f"; beyond that, {below}." if below else "."))
    else:
        held = (f"The prefetched loop took {pre.value:.2f} ms/step against its floor of {floor:.2f} and the "
                f"serial loop's {serial:.2f}" + (f": {below}." if below else "."))
    apart = _below(pre, longer, "its longer part timed apart")
    return {"held": held,
            "below": f"The prefetched loop took {pre.value:.2f} ms/step against its floor of {floor:.2f}: "
                     "each batch's handoff needs the GIL, and the digits DataLoader inside the load runs "
                     "Python that holds it.",
            "disturbed": f"{apart[0].upper()}{apart[1:]}; the loop cannot end before its thread has loaded "
                         f"all {n} batches and the step has computed each."}


def gil_explain(load: float, compute: float, planted: float, held: float, slowdown: Estimate,
                serial_sleep: float, serial_spin: float, measured: float | Estimate) -> dict[str, str]:
    """The sentences appended to the GIL-holding load's verdict on :func:`gil_least_step` (all
    figures ms per step, from the same rounds; ``held``: the spin the bound takes, ``planted``:
    its planted time, ``measured``: the prefetched spin loop's median): what the least step is
    made of, and, for a loop below it, the spin these rounds' serial loops put at least (the spin
    loop over the sleep loop, plus the sleep's planted time, which a sleep lasts at least), the
    least step with that spin, and how much of the miss it accounts for. Given ``measured`` as an
    Estimate (ms per step), the held text also says where the least step at the probe's *median*
    slowdown lies against the loop's interval, and the hidden fraction that leaves.

    Raises:
        TypeError, ValueError: for a ``slowdown`` that is not an Estimate, or figures that
            :func:`gil_least_step` refuses.
    """
    check_type("slowdown", slowdown, Estimate)
    est = measured if isinstance(measured, Estimate) else None
    measured = est.value if est is not None else measured
    fastest = gil_least_step(load, compute, slowdown.low, held)
    slowest = gil_least_step(load, compute, slowdown.high, held)
    took = f"The least step, {fastest:.2f} ms, is " + (
        f"the step's {compute:.2f} ms plus the {held:.2f} ms spin ({held / planted:.2f}x its planted "
        f"{planted:.2f} ms, by 2b's share capped at 1 and at the load), less the 1 / "
        f"{slowdown.low:.3g} of it during which the step still runs" if fastest > load else "the load alone")
    took += f"; at the probe's most slowdown it is {slowest:.2f} ms." if slowest - fastest >= 0.005 else "."
    here = planted + serial_spin - serial_sleep  # ms: the spin lasted at least this, by these rounds
    why = (f" In these rounds the serial spin loop took {serial_spin - serial_sleep:+.2f} ms/step against "
           f"the serial sleep loop, so a spin lasted at least about {here:.2f} ms here (a sleep lasts at "
           "least its planted time), ")
    kernel = "(inside a kernel that released the GIL the step runs at full speed on the other core)."
    mid = _gil_at_median(load, compute, held, slowdown, serial_spin, measured, est)
    if here >= held:
        return {"held": took + mid, "below": took + why + "no less than the bound takes: the step ran faster "
                "during the spins than its average beside the probe's thread, which the bound assumed it "
                "would not " + kernel}
    alt = gil_least_step(load, compute, slowdown.low, min(max(here, 0.0), load))
    why += (f"less than the {held:.2f} ms the bound takes from 2b; with it the least step would be "
            f"{alt:.2f} ms")
    if measured < alt:
        why += (f", which the loop still beats by {alt - measured:.2f} ms: the shorter spin accounts for "
                f"{fastest - alt:.2f} ms of the {fastest - measured:.2f} ms miss, and the rest says the step "
                "ran faster during the spins than its average beside the probe's thread " + kernel)
    else:
        why += (f", which the loop ({measured:.2f} ms) does not beat: a spin that short accounts for the "
                "whole miss, though these rounds time no spin alone.")
    return {"held": took + mid, "below": took + why}


def _gil_at_median(load: float, compute: float, held: float, slowdown: Estimate, serial_spin: float,
                   measured: float, est: Estimate | None) -> str:
    """:func:`gil_explain`'s sentence on the least step at the probe's median slowdown, against
    the prefetched loop's interval ``est`` (ms per step); "" without an interval on either."""
    if est is None or not est.has_interval or not slowdown.has_interval:
        return ""
    mid = gil_least_step(load, compute, slowdown.value, held)
    if mid - gil_least_step(load, compute, slowdown.low, held) < 0.005:
        return ""
    head = f" At the probe's median slowdown, {slowdown.value:.3g}x, the least step is {mid:.2f} ms"
    frac = ""
    if serial_spin > max(load, compute):
        most = gil_hidden_bound(serial_spin, load, compute, slowdown.value, held)
        hid = (serial_spin - measured) / (serial_spin - max(load, compute))
        frac = f" (as a hidden fraction at most {most:.3f}, against the {hid:.3f} hidden)"
    ends = f"the loop's {est.label}, {est.low:.2f} to {est.high:.2f} ms"
    if mid > est.high:
        return (head + f", above {ends}{frac}: judged there, the bound would be missed, so it stands only "
                "toward the low end of the probe's interval; at its point estimate the step ran faster "
                "during the spins than the probe's median slowdown allows.")
    if mid > measured:
        return head + f", above the loop's median {measured:.2f} ms but inside {ends}{frac}."
    return head + f", which the loop's median {measured:.2f} ms does not beat{frac}."


@dataclass(frozen=True)
class PipelineExcess:
    """What :func:`pipeline_excess` found: its ``text``, the stage the model says is longer
    (``"loader"`` or ``"compute"``; ``"either"`` where the model says the loader but the compute in
    the loop took at least the loader's time alone) and the step's excess over the model it leaves unsplit, in
    ms as printed (to one decimal; 0 where the step lies at or below the model)."""

    text: str
    stage: str
    unsplit_ms: float


def pipeline_excess(step_ms: float, wait_ms: float, rest_ms: float, load_ms: float, compute_ms: float,
                    jitter_ms: float, cores: int) -> PipelineExcess:
    """The sentences on a two-stage pipeline's median step (``step_ms``; the loop waited
    ``wait_ms`` for its batch and spent ``rest_ms`` computing, medians) against the model
    ``max(load_ms, compute_ms)``, each stage timed alone, by one rule: in steady state a step
    takes the longer stage's period, so only the slowdown of the stage the model says is longer
    can move the step. Loader-bound, the step is the worker's period per batch in the loop, and
    a compute slower (or faster) than alone changes the loop's wait, not the step: the compute's
    ratio is printed as evidence that the stages share the ``cores``, not as a share of the
    excess. Compute-bound, the compute's measured slowdown is a term of the excess. Where the
    model says loader-bound but the compute in the loop took at least ``load_ms``, either stage may
    set the step, and the excess beyond jitter is left unsplit between them. ``jitter_ms``
    (the median of the longer of two stages drawn independently, against the longer median;
    :func:`perfkit.data.balanced_max`) is a term in both.

    Raises:
        TypeError, ValueError: for times that are not finite numbers (``> 0`` for ``step_ms``,
            ``load_ms`` and ``compute_ms``, ``>= 0`` for the rest) or a ``cores`` below 1.
    """
    for name, v in (("step_ms", step_ms), ("load_ms", load_ms), ("compute_ms", compute_ms)):
        check_real(name, v, 0, lo_open=True)
    for name, v in (("wait_ms", wait_ms), ("rest_ms", rest_ms)):
        check_real(name, v, 0)
    check_real("jitter_ms", jitter_ms)
    check_int("cores", cores, 1)
    loader = load_ms >= compute_ms
    stage = "loader" if loader else "compute"
    over = round(round(step_ms, 1) - round(max(load_ms, compute_ms), 1), 1)   # ms, as printed
    jit, slow = round(jitter_ms, 1), round(rest_ms - compute_ms, 1)

    def ratio(a: float, b: float) -> float:   # of the figures as printed, where they print above 0
        return round(a, 1) / round(b, 1) if round(b, 1) > 0 else a / b

    took = (f"the compute took {ratio(rest_ms, compute_ms):.2f}x its {compute_ms:.1f} ms alone "
            f"({slow:+.1f} ms) beside the worker on {cores} core{'s' * (cores > 1)}")
    head = (f" Of the {over:+.1f} ms the median step lies above the model, jitter (the median of the longer "
            "of a load and a compute drawn independently from the runs measured apart, against the longer of "
            f"their medians) makes {jit:+.1f} ms")
    if loader and round(rest_ms, 1) >= round(load_ms, 1):   # the compute in the loop reached the loader
        stage = "either"
        text = (f"The model's longer stage is the loader (B*c = {load_ms:.1f} ms against t_compute = "
                f"{compute_ms:.1f} ms), but in the loop {took}, {rest_ms:.1f} ms, at least the loader's B*c "
                f"alone: either stage may have set the {step_ms:.1f} ms median step (the loop also waited "
                f"{wait_ms:.1f} ms for its batch; medians).")
        unsplit = round(over - jit, 1)
        split = head + "; " + (f"the other {unsplit:+.1f} ms this run does not split between the two stages' "
                               "slowdowns in the loop." if unsplit > 0 else "it covers all of it.")
    elif loader:
        text = (f"The model's longer stage is the loader (B*c = {load_ms:.1f} ms against t_compute = "
                f"{compute_ms:.1f} ms), so the step follows the worker: the loop waited {wait_ms:.1f} ms for "
                f"its batch and computed {rest_ms:.1f} ms (medians), and the worker delivered a batch every "
                f"{step_ms:.1f} ms (the median step) against B*c = {load_ms:.1f} ms alone "
                f"({ratio(step_ms, load_ms):.2f}x). {took[0].upper()}{took[1:]}: evidence that the two share "
                "the cores, but while the loop waits for the worker the compute's time changes the wait, not "
                "the step.")
        unsplit = round(over - jit, 1)
        split = head + "; " + (
            f"the other {unsplit:+.1f} ms is the worker's side, its time per batch in the loop beyond B*c "
            "alone, which this run does not split: the handoff of each batch (section 2a times it) and its "
            "tokenizing slower beside the loop than alone." if unsplit > 0 else "it covers all of it.")
    else:
        text = (f"The model's longer stage is the compute (t_compute = {compute_ms:.1f} ms against B*c = "
                f"{load_ms:.1f} ms), so the step follows the compute: the loop computed {rest_ms:.1f} ms and "
                f"waited {wait_ms:.1f} ms for its batch (medians); {took}.")
        unsplit = round(over - jit - slow, 1)
        split = head + (f" and the compute's slowdown {slow:+.1f} ms; " + (
            f"the other {unsplit:+.1f} ms this run does not split: the handoff of each batch (section 2a "
            "times it) and the loop's own work." if unsplit > 0 else "they cover all of it."))
    if over <= 0:
        return PipelineExcess(text, stage, 0.0)
    return PipelineExcess(text + split, stage, max(unsplit, 0.0))
