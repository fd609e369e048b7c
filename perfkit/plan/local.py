"""The planner on this machine: its measured link, the course's tiny GPT-2, the layouts it runs.

``perfkit plan --machine local`` plans with the ceilings notebook 00 measures
(:func:`perfkit.hw.cached_limits`) and an alpha-beta fit of 2-process all-reduces (gloo over loopback)
issued one at a time between computations, as a step issues them. :func:`local_link` measures them once
through :func:`perfkit.dist.launch` and caches the fit beside the ceilings; :func:`tiny_gpt2_spec` is the
model :mod:`perfkit.jobs.zero_bench` trains (fp32, fused attention, no dropout), and
:data:`COURSE_LAYOUTS` the layouts the course measures at 2 processes, by the job's variant names. Tensor
parallelism on this machine: :mod:`perfkit.plan.local_tp`.

Usage::

    link = local_link()                                  # measured once, then cached
    cluster = local_cluster(hw.cached_limits(), link, processes=2)
    t = step_time(tiny_gpt2_spec(), COURSE_LAYOUTS["zero2"], cluster, global_batch=16, recipe="fp32_adam")
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfkit import dist
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit._files import write_atomic
from perfkit.comm.alpha_beta import UNRESOLVED_BANDWIDTH, AlphaBeta, fit_alpha_beta
from perfkit.estimate import Estimate
from perfkit.hw import default_limits_path
from perfkit.plan.cluster import Cluster
from perfkit.plan.layout import Layout
from perfkit.plan.memory_model import MemoryBreakdown, memory_per_gpu
from perfkit.plan.model import ModelSpec
from perfkit.plan.step_time import StepTime, step_time

__all__ = ["COURSE_LAYOUTS", "LINK_METHOD", "LINK_SIZES", "CollectiveCost", "CoursePredictions",
           "collective_cost", "course_predictions", "fit_step_efficiency", "link_cache_path", "local_link",
           "pipeline_prediction", "ring_step", "step_spans", "tiny_gpt2_spec"]

LINK_SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22)  # bytes: latency- to bandwidth-bound

# zero_bench's variant names -> their layouts at 2 processes (DDP is ZeRO stage 0)
COURSE_LAYOUTS = {"ddp_adamw": Layout(dp=2, zero=0), "zero1": Layout(dp=2, zero=1),
                  "zero2": Layout(dp=2, zero=2), "zero3": Layout(dp=2, zero=3)}

def tiny_gpt2_spec(vocab_size: int = 1024, block_size: int = 64, n_embd: int = 64,
                   n_layer: int = 2, n_head: int = 2) -> ModelSpec:
    """:func:`perfkit.models.tiny_gpt2` as a :class:`ModelSpec`: GELU MLP of ``4 n_embd``,
    biases, learned positions, tied head, fp32 activations, fused attention, no dropout.

    Raises:
        ValueError: for a size below 1 or ``n_embd`` not divisible by ``n_head``.
    """
    return ModelSpec("tiny GPT-2", layers=n_layer, hidden=n_embd, heads=n_head, ffn=4 * n_embd,
                     vocab=vocab_size, seq=block_size, positions=block_size, bias=True, act_bytes=4)


def link_cache_path() -> Path:
    """Where the fitted link is cached: beside the machine's ceilings."""
    return default_limits_path().with_name("link_alpha_beta.json")


def ring_step(nbytes: list[float], times_s: list[float]) -> AlphaBeta:
    """One step of a 2-rank ring from its all-reduce times: the fit ``t = alpha + n / B``
    (:func:`perfkit.comm.alpha_beta.fit_alpha_beta`) halved in start-up, since a 2-rank ring all-reduce is
    two steps of half the buffer (:func:`perfkit.comm.alpha_beta.ring_allreduce_time`).

    Raises:
        TypeError, ValueError: as :func:`~perfkit.comm.alpha_beta.fit_alpha_beta`.
    """
    fit = fit_alpha_beta(nbytes, times_s)
    return AlphaBeta(fit.alpha_s / 2, fit.bandwidth)


LINK_METHOD = "isolated all-reduces after 1 ms of matmul, means over calls and ranks"


def local_link(nproc: int = 2, refresh: bool = False, timeout_s: float = 120.0) -> AlphaBeta:
    """One point-to-point step of this machine's gloo ring, as a training step pays it.

    A step issues its collectives one at a time between computations, so a 2-process all-reduce of each of
    :data:`LINK_SIZES` is timed that way (:func:`perfkit.comm.isolated_times`: each call after 1 ms of
    matmul work, averaged over the ranks, which counts what the ranks' arrival spread adds to a step) and
    each size counts at its mean over the calls: a step pays every call it makes, including those that
    wait for a thread the OS must wake or took off its core, which a median hides
    (:func:`perfkit.plan.local_tp.rounds_link` reads TP's rounds the same way). Notebook 02's sweep times
    calls back to back in batches, which keeps the ranks in lockstep and hides those costs: its start-up
    is lower. A 2-rank ring all-reduce is two steps of half the buffer: the fit ``t = alpha + n / B``
    gives a step of ``alpha / 2`` start-up and bandwidth ``B`` (:func:`ring_step`). Cached in
    :func:`link_cache_path` (``$PERFKIT_CACHE`` moves it) with the method (:data:`LINK_METHOD`); measured
    again with ``refresh`` or when the cache was made another way.

    Args:
        nproc: processes of the measurement (>= 2).
        refresh: measure even when a cached fit exists.
        timeout_s: limit for the job.

    Returns:
        The per-step :class:`AlphaBeta`.

    Raises:
        ValueError: for ``nproc`` below 2; :class:`perfkit.dist.WorkerError` if the job fails.
    """
    check_int("nproc", nproc, 2)
    path = link_cache_path()
    if path.exists() and not refresh:
        try:
            d = json.loads(path.read_text())
            if d.get("method") == LINK_METHOD:
                return AlphaBeta(float(d["alpha_s"]), float(d["bandwidth"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # unreadable: measure again
    cfg = {"isolated": {"op": "all_reduce", "sizes": list(LINK_SIZES), "gap_s": 1e-3,
                        "repeat": 30}}
    res = dist.launch("perfkit.jobs.collectives", nproc, ["--config", json.dumps(cfg)],
                      timeout_s=timeout_s)[0]["isolated"]
    means = [sum(ts) / len(ts) for ts in res["times_s"]]
    link = ring_step([float(n) for n in res["sizes"]], means)
    if link.bandwidth >= UNRESOLVED_BANDWIDTH:
        return link  # the times saw no bandwidth term (a loaded machine): measure again next time
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"alpha_s": link.alpha_s, "bandwidth": link.bandwidth,
                                   "method": LINK_METHOD, "measured_with": f"{nproc} gloo processes",
                                   "sizes": res["sizes"], "means_s": means, "pid": os.getpid()}))
    return link


def fit_step_efficiency(model: ModelSpec, layout: Layout, cluster: Cluster, global_batch: int,
                        measured_s: float, recipe: str = "fp32_adam", grad_bytes: float = 4.0
                        ) -> float:
    """The matmul efficiency at which :func:`step_time` predicts ``measured_s`` (bisection on a log scale
    between 1e-5 and 1: the predicted time falls as the efficiency grows). Fitted on one layout, it is the
    one figure the other layouts' predictions share.

    Returns:
        The efficiency, clipped to [1e-5, 1].

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or ``measured_s`` not > 0.
    """
    check_type("cluster", cluster, Cluster)
    check_real("measured_s", measured_s, 0, lo_open=True)

    def predicted(e: float) -> float:
        return step_time(model, layout, cluster.with_efficiency(e), global_batch, recipe,
                         grad_bytes).total_s

    lo, hi = 1e-5, 1.0
    if predicted(hi) >= measured_s:
        return hi
    if predicted(lo) <= measured_s:
        return lo
    for _ in range(50):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if predicted(mid) > measured_s else (lo, mid)
    return (lo * hi) ** 0.5


@dataclass(frozen=True)
class CoursePredictions:
    """The planner's step time and memory of each course layout, one efficiency fitted on one."""

    efficiency: float
    fitted_on: str
    layouts: dict[str, Layout]
    times: dict[str, StepTime]
    memory: dict[str, MemoryBreakdown]


def course_predictions(cluster: Cluster, measured_s: float, fitted_on: str = "ddp_adamw",
                       batch: int = 8, model: ModelSpec | None = None,
                       layouts: dict[str, Layout] | None = None,
                       activation_bytes: float | None = None) -> CoursePredictions:
    """Fit the efficiency on ``fitted_on``'s measured step, then predict every layout.

    Korthikanti et al.'s activation count describes Megatron's GPT; the course runs transformers' GPT-2,
    which saves more (LayerNorm outputs, GELU's intermediate terms, the fp32 log-softmax): give its
    op-by-op count (:func:`perfkit.memory.gpt2_saved_activation_bytes`) as ``activation_bytes`` and the
    memory predictions use that instead.

    Args:
        cluster: this machine (:func:`perfkit.plan.cluster.local_cluster`).
        measured_s: the measured step of ``fitted_on``, s (> 0).
        fitted_on: a key of ``layouts``.
        batch: sequences per process, one micro-batch per step (zero_bench's ``batch``).
        model: the model (default :func:`tiny_gpt2_spec`).
        layouts: name -> layout (default :data:`COURSE_LAYOUTS`).
        activation_bytes: bytes one process saves for backward in the model actually run
            (> 0); ``None``: the planner's Korthikanti-style count.

    Returns:
        A :class:`CoursePredictions` (fp32 Adam states, fp32 gradients).

    Raises:
        TypeError, ValueError: for arguments of the wrong kind, an unknown ``fitted_on``.
    """
    model = model or tiny_gpt2_spec()
    lays = {k: replace(v, micro_batch=check_int("batch", batch, 1))
            for k, v in (layouts or COURSE_LAYOUTS).items()}
    if fitted_on not in lays:
        raise ValueError(f"fitted_on must be one of {sorted(lays)}, got {fitted_on!r}")
    gb = {k: lay.dp * batch for k, lay in lays.items()}
    eff = fit_step_efficiency(model, lays[fitted_on], cluster, gb[fitted_on], measured_s)
    c = cluster.with_efficiency(eff)
    mem = {k: memory_per_gpu(model, lay, gb[k], "fp32_adam") for k, lay in lays.items()}
    if activation_bytes is not None:
        acts = check_real("activation_bytes", activation_bytes, 0, lo_open=True)
        mem = {k: replace(m, activations=acts) for k, m in mem.items()}
    return CoursePredictions(
        eff, fitted_on, lays,
        {k: step_time(model, lay, c, gb[k], "fp32_adam", 4.0) for k, lay in lays.items()}, mem)


@dataclass(frozen=True)
class CollectiveCost:
    """What :func:`collective_cost` read from paired rounds: ``gap`` is the median of the rounds' differences
    (the step minus the base step, s, with its interval), ``predicted_s`` the model's difference,
    ``charge_s`` its charge for the step's collectives, ``text`` the sentences, ``uncharged_s`` a cost the
    model leaves out, ``digits`` the decimals of the ms figures, ``base`` the base step's name."""

    gap: Estimate
    predicted_s: float
    charge_s: float
    text: str
    uncharged_s: float = 0.0
    digits: int = 1   # decimals of the sentence's ms figures
    base: str = "DDP"

    @property
    def cost_s(self) -> float:
        """The collectives' cost at the median difference, if the base's took their charge and the compute
        its fitted cost: the charge plus the measured less the predicted difference (s; may be <= 0)."""
        return self.charge_s + self.gap.value - self.predicted_s

    @property
    def said_cost_ms(self) -> float:
        """:attr:`cost_s` in ms as the sentences print it: the sum of their printed figures (the
        charge, plus the measured less the predicted difference), so a later sentence that repeats
        the cost repeats the same figure."""
        c, g, p = (round(x * 1e3, self.digits) for x in (self.charge_s, self.gap.value, self.predicted_s))
        return round(c + g - p, self.digits)

    @property
    def over_charge(self) -> float:
        """:attr:`cost_s` over the charge."""
        return self.cost_s / self.charge_s

    def headline(self) -> str:
        """The predicted and measured differences and the collectives' cost in one line: the median's
        multiple of the charge, the bound at the top of the difference's own interval (printed)."""
        g, most = self.gap, f"{self.over_charge:.2f}x their charge, a median with no interval"
        if g.has_interval and g.low < g.high:
            top = max(self.charge_s + g.high - self.predicted_s, 0.0) / self.charge_s
            most = (f"{self.over_charge:.2f}x their charge at the median, at most {top:.2f}x with the "
                    f"difference at the top of its {g.label}, {g.high * 1e3:.{self.digits}f} ms")
        return (f"{self.predicted_s * 1e3:.1f} / {g.value * 1e3:.1f} ms (its collectives, if "
                f"{self.base}'s took their charge and the compute its fitted cost: {most})")

    def point(self) -> tuple:
        """``(predicted, measured, " ms", low, high)`` for :func:`~perfkit.plan.readings.one_sided`."""
        g = self.gap.scaled(1e3)
        return (self.predicted_s * 1e3, g.value, " ms") + ((g.low, g.high) if g.has_interval else ())

    def __str__(self) -> str:
        return self.text


def collective_cost(steps_s: Sequence[float], base_steps_s: Sequence[float], predicted_s: float,
                    comm_s: float, uncharged_s: float = 0.0, base: str = "DDP") -> CollectiveCost:
    """What a step's error is worth in time, set against the model's charge for the step's
    collectives, whatever the verdict on the step's ratio says.

    ``steps_s`` and ``base_steps_s`` are the two layouts' steps, timed round by round (each pair shared
    the machine's load); one statistic serves every figure: the median of the rounds' differences
    ``steps_s[i] - base_steps_s[i]`` with its order-statistic interval. ``predicted_s`` is the model's
    difference of the two steps and ``comm_s`` its charge for the step's collectives. With the compute at
    the fitted cost, what the measured difference adds to the predicted one is put on the collectives:
    ``comm_s`` plus that (over the interval too), an upper bound if the base's own collectives took their
    charge (its fitted compute holds any excess of theirs). Where the predicted difference lies outside
    the measured interval, the sentences say so; where ``uncharged_s`` (> 0: a cost left out) is given,
    where charging it alone would put the prediction.

    Args:
        steps_s, base_steps_s: seconds per step, one per round, equally many (>= 1).
        predicted_s: the model's step minus its base step, s (finite).
        comm_s: the model's charge for the collectives, s (> 0).
        uncharged_s: a cost the model leaves out of ``predicted_s``, s (>= 0).
        base: the base step's name.

    Returns:
        A :class:`CollectiveCost`; ``str()`` of it is the sentences, in ms and multiples of the charge.

    Raises:
        TypeError, ValueError: a figure not finite or out of range, or unequal rounds.
    """
    from perfkit import stats

    check_type("base", base, str)
    pred = check_real("predicted_s", predicted_s)
    charge = check_real("comm_s", comm_s, 0, lo_open=True)
    extra = check_real("uncharged_s", uncharged_s, 0)
    a, b = list(steps_s), list(base_steps_s)
    if not a or len(a) != len(b):
        raise ValueError(f"steps_s and base_steps_s must hold the same number of rounds (>= 1), "
                         f"got {len(a)} and {len(b)}")
    gap = stats.median_interval([check_real("steps_s", x, 0) - check_real("base_steps_s", y, 0)
                                 for x, y in zip(a, b)])

    # every ms figure at one precision, each sum taken of printed figures: a reader's arithmetic agrees
    nd = 2 if max(abs(gap.value), abs(gap.low), abs(gap.high), abs(pred), charge, extra) < 0.010 else 1

    def ms(x: float) -> float:
        return round(x * 1e3, nd)

    def f(x: float) -> str:
        return f"{x:.{nd}f}"
    g, p, c = ms(gap.value), ms(pred), ms(charge)

    def cost(d_ms: float) -> float:  # ms the collectives took, the compute (and base's calls) as fitted
        return round(c + d_ms - p, nd)

    off = round(g - p, nd)
    out = (f"Paired by round, the step {'exceeds' if gap.value >= 0 else 'falls short of'} {base}'s by "
           f"{f(abs(g))} ms (median of {gap.n} rounds' differences) against "
           f"a predicted {f(abs(p))} ms {'more' if pred >= 0 else 'less'}: {f(abs(off))} ms "
           f"{'above' if off >= 0 else 'below'} the prediction. The model charged the collectives "
           f"{f(c)} ms; "
           f"with the compute at {base}'s fitted cost, the whole difference is put on them: ")
    if cost(g) <= 0:
        out += (f"it exceeds the whole charge, so on this reading the collectives cost nothing and "
                f"the compute ran faster than {base}'s fitted cost")
    else:
        # each multiple from the unrounded figures, rounded once: CollectiveCost.over_charge's value
        def times(d_s: float) -> float:
            return max(charge + d_s - pred, 0.0) / charge

        lo, hi = max(cost(ms(gap.low)), 0.0), cost(ms(gap.high))   # the median the point, the top the bound
        out += (f"they cost {f(cost(g))} ms at the median, {times(gap.value):.2f}x the charge, and at most "
                f"{f(hi)} ms, {times(gap.high):.2f}x, with the difference at the top of its {gap.label} "
                f"({f(ms(gap.low))} to {f(ms(gap.high))} ms; the collectives' cost over it: {f(lo)} to "
                f"{f(hi)} ms, {times(gap.low):.2f}x to {times(gap.high):.2f}x)"
                if gap.has_interval and gap.low < gap.high
                else f"they cost {f(cost(g))} ms, {times(gap.value):.2f}x the charge (a median, no interval)")
        out += (f", an upper bound if {base}'s own collectives took their charge (its fitted compute holds "
                "any excess of theirs): no step here is timed with its collectives skipped, and the "
                "difference also holds what the step pays that the model leaves out")

    def where(d: float) -> str:
        ok = gap.has_interval and gap.low < gap.high
        side = gap.scaled(1e3).clear_of(d * 1e3, "ms") if ok else ""
        return {"above": "below", "below": "above"}.get(side, "inside" if ok else "")

    iv = f"({f(ms(gap.low))} to {f(ms(gap.high))} ms)"
    if where(pred) in ("below", "above"):
        out += (f". The predicted difference lies {where(pred)} the measured interval {iv}: the model "
                "errs by more than this run's noise, whatever the tolerance window lets through")
    elif where(pred):
        out += f". The predicted difference lies inside the measured interval {iv}: no error this run shows"
    if extra > 0 and where(pred):
        moved = where(pred + extra)
        still = "still " if moved == where(pred) else ""
        # unrounded sums rounded once, a digit finer: the printed parts add up, as full_charge prints
        e = f"{{:.{nd + 1}f}}"
        big = f" ({extra / abs(pred):.2f}x the whole predicted difference)" if 0 < abs(pred) < extra else ""
        out += (f". Charging the uncharged {e.format(extra * 1e3)} ms{big} alone would put the predicted "
                f"{e.format(pred * 1e3)} ms at {e.format((pred + extra) * 1e3)} ms, {still}{moved} the "
                "measured interval")
    return CollectiveCost(gap, pred, charge, out + ".", extra, nd, base)


def pipeline_prediction(layout: Layout, n_micro: int, t_f: float, t_b: float, link: AlphaBeta,
                        nbytes: float = 16.0) -> float:
    """The planner's step of a pipeline whose every stage chunk takes ``t_f`` forward and ``t_b`` backward
    per micro-batch (sleeps: :mod:`perfkit.jobs.pipeline_parallel`'s ``bubble`` task): the ideal ``m v
    (t_f + t_b)`` on each rank, the bubble (:meth:`Layout.bubble_fraction`) and the stage-to-stage sends,
    as :func:`step_time` counts them.

    Args:
        layout: ``pp`` ranks, ``interleave`` chunks each, ``schedule``; dp, tp, cp of 1.
        n_micro: micro-batches per step (>= 1).
        t_f, t_b: seconds per chunk and micro-batch, forward and backward (>= 0).
        link: the link between ranks.
        nbytes: bytes of one activation sent between stages.

    Returns:
        Seconds per step.

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or out of range.
    """
    check_type("layout", layout, Layout)
    check_int("n_micro", n_micro, 1)
    check_real("t_f", t_f, 0)
    check_real("t_b", t_b, 0)
    check_type("link", link, AlphaBeta)
    if (layout.dp, layout.tp, layout.cp, layout.micro_batch) != (1, 1, 1, 1):
        raise ValueError(f"layout must be a pipeline alone (dp, tp, cp, micro_batch of 1), got "
                         f"{layout.label()}")
    ideal = n_micro * layout.interleave * (t_f + t_b)
    sends = layout.sends_per_micro_batch() * n_micro * link.predict(nbytes)
    return ideal * (1 + layout.bubble_fraction(n_micro)) + sends


def step_spans(steps: list) -> list[float]:
    """Seconds from the first action's start to the last one's end of each step, over every rank:
    ``steps[i][rank]`` holds ``(kind, stage, mb, start_s, end_s)`` slots (one clock for the processes of
    one machine).

    Raises:
        ValueError: for a step without any slot.
    """
    out = []
    for i, rows in enumerate(check_items("steps", steps)):
        slots = [sl for row in rows for sl in (row or [])]
        if not slots:
            raise ValueError(f"steps[{i}] holds no slot")
        out.append(max(sl[4] for sl in slots) - min(sl[3] for sl in slots))
    return out
