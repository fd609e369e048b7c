"""What autocast changes in a training step, timed alone: Amdahl's law with measured parts.

Mixed precision (``torch.autocast``) runs a step's matmuls and fused attention in bf16 (or
fp16) and inserts the casts they need; the ops that receive their low-precision outputs (the
GELU between two linear layers, the bias gradients) then run in bf16 too, and every other op
(layer norms on the fp32 residual stream, the loss, AdamW) keeps fp32. Amdahl's law with the
machine's ceilings (:mod:`perfkit.hw`: one square matmul per dtype) predicts the step from the
ratio of two ceilings, but the step's ops have their own shapes, at which each precision
reaches its own share of its ceiling (an emulated bf16 least of all). So here the ops autocast
changes are *recorded* from one mixed-precision step (op, shapes, strides, dtypes and values,
through a ``TorchDispatchMode``, which sits below autograd and autocast: it sees the backward's
ops and autocast's casts), *replayed* alone as recorded and upcast to fp32 (the same ops at the
same shapes, without the casts), and timed in alternation with the fp32 and mixed steps. The
prediction swaps the one for the other: ``t_mixed = t_fp32 - parts_fp32 + parts_mixed``, which
is Amdahl's ``1 / ((1 - f) + f / r)`` with the share ``f`` and speed ratio ``r`` of the changed
ops measured at the step's own shapes instead of read off the ceilings.

A forecast made before the parts are timed reads ``r`` off notebook 00's sweep instead
(:func:`swept_ratio`: the two dtypes' rates at one swept square size, never a ceiling that a
later operation raised, which may be this same step's own rate from an earlier run);
:meth:`AutocastParts.forecast_terms` then says which of its two terms the parts contradict.

Usage::

    ap = time_autocast_parts(gpt_step(gpt, ids, "fp32"), gpt_step(gpt, ids, "bf16"), repeat=7)
    print(ap.predicted(), ap.steps.estimate)   # predicted and measured step speedup
    print(ap.share(), ap.total().ratio, ap.explain())
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from perfkit._checks import check_callable, check_int, check_real, check_type
from perfkit.compute.autocast_record import PART_KINDS, record_parts, replay_parts
from perfkit.compute.flops import Speedup
from perfkit.hw import MachineLimits, dtype_name
from perfkit.timing import Measurement, interleaved, interleaved_balanced
from perfkit.units import si
from perfkit.verdict import Verdict

__all__ = ["AutocastParts", "SweptRatio", "amdahl", "swept_ratio", "time_autocast_parts"]



def amdahl(f: float, r: float) -> float:
    """Amdahl's law: the speedup of a whole whose share ``f`` runs ``r`` times as fast,
    ``1 / ((1 - f) + f / r)``.

    Raises:
        TypeError, ValueError: for an ``f`` outside [0, 1] or an ``r`` that is not a finite number > 0.
    """
    check_real("f", f, 0, 1)
    check_real("r", r, 0, lo_open=True)
    return 1 / ((1 - f) + f / r)


@dataclass(frozen=True)
class SweptRatio:
    """A low-precision dtype's matmul rate over fp32's at one square size of notebook 00's
    sweep (each point's best round, :attr:`perfkit.hw.MatmulPoint.best_flops_per_s`).

    Attributes:
        dtype: the low-precision dtype's name; n: the square size; threads: the thread count
            both points ran on (0: not recorded, a GPU).
        rate, fp32_rate: the two points' FLOP/s.
        exact_threads: whether ``threads`` is the count asked for (else the nearest swept one).
        sizes: how many square sizes both dtypes were swept at on ``threads`` (``n`` is the
            nearest in FLOPs among them, so with one it is the only choice, not a near one).
    """

    dtype: str
    n: int
    threads: int
    rate: float
    fp32_rate: float
    exact_threads: bool = True
    sizes: int = 0

    @property
    def ratio(self) -> float:
        """``r``: the dtype's rate over fp32's."""
        return self.rate / self.fp32_rate

    def describe(self) -> str:
        """``"notebook 00's sweep at n=128 on 1 thread: bfloat16 3.35 GFLOP/s, float32 96.9 GFLOP/s"``."""
        on = f" on {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else ""
        which = ("" if not self.sizes else " (the only size swept in both dtypes there)" if self.sizes == 1
                 else f" (of the {self.sizes} sizes swept in both dtypes there, the nearest in FLOPs "
                      "per call)")
        return (f"notebook 00's sweep at n={self.n}{on}" + ("" if self.exact_threads else
                                                            " (the nearest thread count it swept)")
                + f"{which}: {self.dtype} {si(self.rate, 'FLOP/s')}, float32 {si(self.fp32_rate, 'FLOP/s')}"
                + (" (each point's fastest tenth of repetitions, from the one sweep the limits file keeps "
                   "for that dtype: the notebook 00 run whose record held its higher all-core ceiling, not "
                   "necessarily this run's; not each point's best over runs)" if self.sizes else ""))


def swept_ratio(limits: MachineLimits, dtype: str, flops_per_call: float,
                threads: int | None = None) -> SweptRatio | None:
    """``dtype``'s speed over fp32's in notebook 00's own sweep (``limits.matmul_points``), at
    the square size nearest ``flops_per_call`` (a step's matmuls' mean FLOPs per call) among the
    sizes both dtypes were swept at on ``threads`` (``None``: all cores), or on the nearest
    thread count swept where none was on those.

    The sweep's points are not the ceilings: a ceiling can be raised later by any operation
    that beats it (:func:`perfkit.ceilings.observe`), the step being forecast included, and a
    forecast from such a ceiling restates that step's result. Sweep points stay as swept.

    Returns:
        A :class:`SweptRatio`, or ``None`` when no size was swept in both dtypes.

    Raises:
        TypeError, ValueError: for limits that are not :class:`~perfkit.hw.MachineLimits`, an
            unknown dtype, a ``flops_per_call`` that is not a finite number > 0 or ``threads``
            below 1.
    """
    check_type("limits", limits, MachineLimits)
    name = dtype_name(dtype)
    check_real("flops_per_call", flops_per_call, 0, lo_open=True)
    want = (limits.threads or 0) if threads is None else check_int("threads", threads, 1)
    best: dict[tuple[str, int, int], float] = {}  # (dtype, n, threads) -> FLOP/s
    for p in limits.matmul_points:
        if p.square and p.dtype in (name, "float32"):
            key = (p.dtype, p.n, p.threads)
            best[key] = max(best.get(key, 0.0), p.best_flops_per_s)
    both = [(n, t) for (d, n, t) in best if d == name and ("float32", n, t) in best]
    if not both:
        return None
    # the thread count asked for first, then the size nearest the calls' FLOPs (2 n^3 per call)
    n, t = min(both, key=lambda nt: (abs(nt[1] - want), abs(math.log(2 * nt[0] ** 3 / flops_per_call))))
    return SweptRatio(name, n, t, best[(name, n, t)], best[("float32", n, t)], t == want,
                      sum(1 for _, u in both if u == t))


def _summed(ms: list[Measurement]) -> Measurement:
    """Round by round, the sum of several measurements timed in the same rounds."""
    return Measurement(tuple(map(sum, zip(*(m.times_s for m in ms), strict=True))), ms[0].warmup)


@dataclass(frozen=True)
class AutocastParts:
    """The fp32 and mixed steps, and the ops autocast changes, timed in alternation.

    Attributes:
        steps: the fp32 step (baseline) against the mixed-precision step (candidate).
        parts: per kind of :data:`PART_KINDS`, the mixed step's recorded ops upcast to fp32
            (baseline; casts: none) against the same ops as recorded (candidate), replayed alone.
        counts: per kind, the calls recorded in one mixed step.
    """

    steps: Speedup
    parts: dict[str, Speedup]
    counts: dict[str, int]

    def __post_init__(self) -> None:
        check_type("steps", self.steps, Speedup)
        check_type("parts", self.parts, dict)
        if sorted(self.parts) != sorted(PART_KINDS) or sorted(self.counts) != sorted(PART_KINDS):
            raise ValueError(f"parts and counts must have the keys {PART_KINDS}, got {sorted(self.parts)} "
                             f"and {sorted(self.counts)}")
        for k, sp in self.parts.items():
            if check_type(f"parts[{k!r}]", sp, Speedup).baseline.n != self.steps.baseline.n:
                raise ValueError(f"parts[{k!r}] must come from the steps' {self.steps.baseline.n} rounds, "
                                 f"got {sp.baseline.n}")

    def total(self) -> Speedup:
        """All the changed ops, in fp32 (baseline) and mixed (candidate), summed round by round."""
        return Speedup(_summed([sp.baseline for sp in self.parts.values()]),
                       _summed([sp.candidate for sp in self.parts.values()]))

    def share(self) -> float:
        """``f``: the changed ops' fp32 time over the fp32 step's (medians; above 1 when they ran
        slower alone than the whole step took, a run disturbed while they were replayed)."""
        return self.total().baseline.median_s / self.steps.baseline.median_s

    def rest_s(self) -> tuple[float, float]:
        """Seconds each step spent outside the changed ops (its median minus theirs): fp32 and
        mixed. The model keeps the two equal."""
        tot = self.total()
        return (self.steps.baseline.median_s - tot.baseline.median_s,
                self.steps.candidate.median_s - tot.candidate.median_s)

    def predicted(self) -> float:
        """The predicted step speedup, Amdahl's ``1 / ((1 - f) + f / r)`` with ``f`` =
        :meth:`share` (capped at 1) and ``r`` = ``total().ratio``: up to the cap, the fp32 step
        with its changed ops swapped for theirs in low precision, ``t_fp32 / (t_fp32 - parts_fp32
        + parts_mixed)``."""
        return amdahl(min(1.0, self.share()), self.total().ratio)

    def forecast_terms(self, f: float, r: float) -> str:
        """Which term of a forecast ``amdahl(f, r)`` (figures read elsewhere: a ceiling, a
        sweep) the parts contradict: the forecast with the parts' ``r`` in place of its own,
        and with the parts' ``f``, each against the measured speedup. The term whose swap lands
        nearer the measurement (in ratio) is the one that missed most; where each swap alone
        crosses the measurement on opposite sides, the two terms' errors partly cancelled.

        Raises:
            TypeError, ValueError: for an ``f`` outside [0, 1] or an ``r`` not > 0.
        """
        fore = amdahl(f, r)
        fc, rc, got = min(1.0, self.share()), self.total().ratio, self.steps.estimate.value
        with_r, with_f = amdahl(f, rc), amdahl(fc, r)
        off = {"r": abs(math.log(with_r / got)), "f": abs(math.log(with_f / got))}
        worse = min(off, key=off.get)
        text = (f"With the parts' r ({rc:.3g}, against the forecast's {r:.3g}) the forecast reads "
                f"{with_r:.3g}x; with the parts' f ({fc:.0%}, against {f:.1%}) it reads {with_f:.3g}x; "
                f"measured {got:.3g}x, forecast {fore:.3g}x: {worse} is the term that missed most")
        crossed = (with_r - got) * (with_f - got) < 0 and (with_r - fore) * (with_f - fore) < 0
        return text + (", and each swap alone lands past the measurement on its own side: the two terms' "
                       "errors partly cancelled in the forecast." if crossed else ".")

    def predicted_s(self) -> float:
        """The mixed step's predicted seconds: the fp32 step's over :meth:`predicted`."""
        return self.steps.baseline.median_s / self.predicted()

    def lines(self) -> list[str]:
        """One line per kind: calls, median ms in fp32 and mixed, and the speed ratio."""
        out = []
        for k in PART_KINDS:
            sp = self.parts[k]
            b, c = sp.baseline.median_s * 1e3, sp.candidate.median_s * 1e3
            ratio = (f"{b / c:6.2f}x as fast" if k != "cast"
                     else "(fp32 has no casts: its time is the replay loop's own)")
            out.append(f"  {k:>9}: {self.counts[k]:3d} calls, fp32 {b:7.2f} ms, mixed {c:7.2f} ms {ratio}")
        return out

    def explain(self, band: float | None = None) -> dict[str, str]:
        """The verdict's sentences: how fast the rest of the mixed step ran against the fp32
        step's rest, the one term the model keeps fixed (both measured in these rounds). With
        ``band`` (the verdict's relative tolerance), a ``"held"`` one too, true whatever the
        outcome: the two rests, whether the band has room for the rest to vanish or double, and
        how far the rests (medians, no interval) put the premise off."""
        r32, r16 = (r * 1e3 for r in self.rest_s())  # ms
        if band is not None and r32 > 0 and r16 > 0:
            pred = self.predicted_s() * 1e3  # ms; lo, hi: the mixed steps the band admits
            lo, hi = pred / (1 + band), pred / (1 - band)
            moves = [w for w, room in (("vanished", pred - lo), ("doubled", hi - pred)) if room >= r32]
            by = ("the two rests test it, and by them it held: they are equal as printed (medians: no "
                  "interval)" if f"{r16 / r32:.2f}" == "1.00" else
                  f"the two rests test it, and by them the mixed step's rest took {r16 / r32:.2f}x the fp32 "
                  "step's (medians: no interval)")
            return self.explain() | {"held": (
                f"Outside the changed ops timed alone (each step's median less their round-by-round sum's) "
                f"the mixed step took {r16:.1f} ms and the fp32 step {r32:.1f} ms, {r16 / r32:.2f}x as long, "
                f"where the model keeps them equal; the ±{band:.0%} band admits any mixed step from {lo:.1f} "
                f"to {hi:.1f} ms (at the fp32 step's median), a span of {hi - lo:.1f} ms" + (
                    f", room enough for the rest to have {' or '.join(moves)}: this verdict cannot test that "
                    f"premise; {by}." if moves else
                    f", so the verdict tests that premise only to within that span; {by}."))}
        if r32 <= 0:
            alone, step = self.total().baseline.median_s * 1e3, self.steps.baseline.median_s * 1e3
            text = (f"The changed ops alone in fp32 ({alone:.1f} ms) took longer than the whole fp32 step "
                    f"({step:.1f} ms), so f was capped at 1 and the prediction is the replay's ratio r "
                    "alone: alone they ran slower than inside the step, which this run does not explain.")
            return {"held": text, "above": text, "below": text}
        if r16 <= 0:
            text = (f"A step took less than its changed ops replayed alone (fp32 {r32:+.1f} ms, mixed "
                    f"{r16:+.1f} ms left for the rest): inside the step they ran faster than alone, which "
                    "the model does not count.")
            return {"above": text, "below": text}
        text = (f"Outside the changed ops timed alone, the mixed step took {r16:.1f} ms where the fp32 step "
                f"took {r32:.1f} ms: that rest ran {r32 / r16:.2f}x as fast, where the model keeps it at 1x")
        return {"above": text + " (the ops ran faster inside the mixed step than alone, or the rest got "
                                "faster).",
                "below": text + " (the ops ran slower inside the mixed step than alone, or autocast's extra "
                                "autograd nodes cost time the replay does not count)."}

    def summary(self, account: Verdict, forecast: Verdict | None = None) -> str:
        """The section's finding in one sentence, from its verdicts: each one's outcome beside its
        predicted speedup (``forecast``: from figures read before the step; ``account``: from these
        parts), and the time outside the changed ops in the mixed step over
        the fp32 step's, the premise the model assumes to be 1x (medians, no interval).

        Raises:
            TypeError: for a verdict that is not a :class:`perfkit.verdict.Verdict`.
        """
        check_type("account", account, Verdict)
        if forecast is not None:
            check_type("forecast", forecast, Verdict)
        said = [f"{what}, {si(v.prediction.value, 'x')} predicted: {v.outcome}" for what, v in (
            ("the forecast from notebook 00's sweep", forecast), ("the account by the step's parts", account))
            if v is not None]
        r32, r16 = self.rest_s()
        rest = (f"outside the changed ops the mixed step took {r16 / r32:.2f}x the fp32 step's time, where "
                "the model assumes 1x (medians)" if r32 > 0 and r16 > 0 else
                "a step took less than its changed ops replayed alone, so the time outside them, which the "
                "model assumes equal, is not measured")
        return "; ".join([*said, rest])


def time_autocast_parts(fp32_step: Callable[[], object], mixed_step: Callable[[], object], warmup: int = 1,
                        repeat: int = 7, threads: int | None = None,
                        device: torch.device | str | None = None, balanced: bool = False) -> AutocastParts:
    """Record the ops autocast changes from one mixed step, then time the two steps and each
    kind's replays (fp32 and mixed) in alternation, all in the same rounds.

    Args:
        fp32_step, mixed_step: no-argument training steps of the same model and batch, without
            and with autocast (e.g. :func:`perfkit.compute.experiments.gpt_step`).
        warmup, repeat: untimed and timed rounds (the recording call is one more, untimed).
        threads: intra-op threads while timing (restored after), as in
            :func:`perfkit.compute.flops.compare`; ``None`` keeps the setting.
        device: where they run; ``None`` means CUDA if present, else CPU.
        balanced: rounds in balanced orders over whole cycles
            (:func:`perfkit.timing.interleaved_balanced`: each callable before each other one in
            half the rounds) instead of the order given in every round.

    Returns:
        An :class:`AutocastParts`.

    Raises:
        TypeError: if a step is not callable.
        ValueError: for ``threads`` below 1, bad ``warmup``/``repeat``, or a mixed step that ran
            no matmul in low precision (no autocast, or autocast disabled).
    """
    check_callable("fp32_step", fp32_step)
    check_callable("mixed_step", mixed_step)
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)
    check_type("balanced", balanced, bool)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(check_int("threads", threads, 1))
    try:
        calls = record_parts(mixed_step)
        if not any(c.kind == "matmul" for c in calls):
            raise ValueError("mixed_step ran no low-precision matmul (mm, addmm, bmm, convolution): is it "
                             "under torch.autocast?")
        by_kind = {k: [c for c in calls if c.kind == k] for k in PART_KINDS}
        fns = [replay_parts(by_kind[k], fp32) for fp32 in (True, False) for k in PART_KINDS]
        timed = interleaved_balanced if balanced else interleaved
        t32, t16, *ms = timed([fp32_step, mixed_step, *fns], warmup=warmup, repeat=repeat, device=device)
    finally:
        torch.set_num_threads(before)
    parts = {k: Speedup(ms[i], ms[len(PART_KINDS) + i]) for i, k in enumerate(PART_KINDS)}
    return AutocastParts(Speedup(t32, t16), parts, {k: len(v) for k, v in by_kind.items()})
