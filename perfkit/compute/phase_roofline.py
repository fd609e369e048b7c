"""Backward time over forward time, predicted from each phase's operators on the roofline plus
each phase's fixed cost, both measured on this machine.

"Two matmuls per forward matmul" makes the backward twice the forward in FLOPs, and in time
where big matmuls at the compute roof fill both phases. A narrow model is not there: many of
its operators are memory-bound (an elementwise op's backward moves other bytes than its
forward), and every operator pays a fixed cost (Python in the forward's modules, dispatch,
autograd's bookkeeping in the backward). So each phase is modelled as

    T = fixed + R / eta

``R``: the phase's operators each at its roof, ``max(FLOPs / peak, bytes / bandwidth)``
with the cache's bandwidth for an op that fits in it (:func:`perfkit.compute.intensity.roofline_s`),
counted at the real size; ``fixed``: the phase timed at 2 tokens, where arithmetic vanishes,
less its own roofline time; ``eta`` (0 < eta <= 1): the share of their roofs the ops reach,
taken to be the same in both phases. Then, whatever ``eta``, the ratio lies between its two
ends: ``(fixed_b + R_b) / (fixed_f + R_f)`` (ops at their roofs) and ``R_b / R_f`` (fixed
costs negligible: near the FLOP ratio when matmuls dominate ``R``). Nothing is fitted; each
phase's measured ``eta`` (:meth:`PhaseModel.reach`) checks the one assumption.

Usage::

    pm = backward_over_forward(models.gpt2_workload(), hw.cached_limits(), rounds=20)
    print(pm.flops_ratio, pm.low, pm.high, pm.measured, pm.reach())  # 2.05x, 1.3x, 2.0x, ...
    viz.verdict(Prediction("backward / forward", "...", low=pm.low, high=pm.high), pm.measured)
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit import stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.compute.intensity import count_phases, roofline_s
from perfkit.hw import MachineLimits
from perfkit.models import Workload
from perfkit.timing import Timer

__all__ = ["PhaseModel", "backward_over_forward"]


@dataclass(frozen=True)
class PhaseModel:
    """Forward and backward: counted operators, roofline seconds, and times measured in rounds.

    Attributes:
        flops_fwd, flops_bwd: FLOPs each phase counts at the real size.
        ops_fwd, ops_bwd: operators each phase runs.
        roof_fwd_s, roof_bwd_s: each phase's ops at their roofs, summed (s).
        fwd_s, bwd_s: the phases' times at the real size, one per round (s).
        fixed_fwd_s, fixed_bwd_s: the phases' times at a few tokens, one per round (s), each
            timed right after the same round's real-size phases, under the same load.
        roof_fixed_fwd_s, roof_fixed_bwd_s: the roofline seconds of the few-token phases, taken
            off their times (the fixed costs), since the real size's ``R`` counts that work too.
    """

    flops_fwd: int
    flops_bwd: int
    ops_fwd: int
    ops_bwd: int
    roof_fwd_s: float
    roof_bwd_s: float
    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    fixed_fwd_s: tuple[float, ...]
    fixed_bwd_s: tuple[float, ...]
    roof_fixed_fwd_s: float = 0.0
    roof_fixed_bwd_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("flops_fwd", "flops_bwd", "ops_fwd", "ops_bwd"):
            check_int(name, getattr(self, name), 1)
        for name in ("roof_fwd_s", "roof_bwd_s"):
            check_real(name, getattr(self, name), 0, lo_open=True)
        for name in ("roof_fixed_fwd_s", "roof_fixed_bwd_s"):
            check_real(name, getattr(self, name), 0)
        n = len(check_items("fwd_s", self.fwd_s))
        for name in ("bwd_s", "fixed_fwd_s", "fixed_bwd_s"):
            if len(check_items(name, getattr(self, name))) != n:
                raise ValueError(f"{name} must hold one time per round ({n}), got {len(getattr(self, name))}")

    @property
    def flops_ratio(self) -> float:
        """The crude model: backward FLOPs over forward FLOPs (about 2)."""
        return self.flops_bwd / self.flops_fwd

    @property
    def fixed_fwd(self) -> stats.Estimate:
        """The forward's fixed cost (s): the median of its rounds at a few tokens less their
        roofline seconds, with its interval."""
        return stats.median_interval([t - self.roof_fixed_fwd_s for t in self.fixed_fwd_s])

    @property
    def fixed_bwd(self) -> stats.Estimate:
        """The backward's fixed cost (s), as :attr:`fixed_fwd`."""
        return stats.median_interval([t - self.roof_fixed_bwd_s for t in self.fixed_bwd_s])

    def _ends(self) -> tuple[float, float]:
        at_roof_lo = (self.fixed_bwd.low + self.roof_bwd_s) / (self.fixed_fwd.high + self.roof_fwd_s)
        at_roof_hi = (self.fixed_bwd.high + self.roof_bwd_s) / (self.fixed_fwd.low + self.roof_fwd_s)
        no_fixed = self.roof_bwd_s / self.roof_fwd_s
        # the ratio moves monotonically from one end to the other as eta falls from 1 towards 0;
        # the fixed costs' intervals widen the end they enter
        return min(at_roof_lo, no_fixed), max(at_roof_hi, no_fixed)

    @property
    def low(self) -> float:
        """The predicted ratio's lower end (usually the ops at their roofs, fixed costs added)."""
        return self._ends()[0]

    @property
    def high(self) -> float:
        """The predicted ratio's upper end (usually the roofline ratio ``R_b / R_f``)."""
        return self._ends()[1]

    @property
    def measured(self) -> stats.Estimate:
        """Backward over forward, the median of the rounds' ratios (paired: each round's two
        phases ran back to back), with its order-statistic interval."""
        return stats.median_ratio(self.bwd_s, self.fwd_s)

    def reach(self) -> tuple[float, float]:
        """``eta`` of each phase, (forward, backward): its roofline seconds over its measured time
        less its fixed cost (medians). Equal values are the model's assumption; a time not above
        its fixed cost gives ``inf``."""
        def eta(roof: float, times: tuple[float, ...], fixed: stats.Estimate) -> float:
            work = stats.median(times) - fixed.value
            return roof / work if work > 0 else float("inf")
        return (eta(self.roof_fwd_s, self.fwd_s, self.fixed_fwd),
                eta(self.roof_bwd_s, self.bwd_s, self.fixed_bwd))

    def one_eta(self) -> float:
        """The one ``eta`` that gives the measured ratio ``m`` at the medians: the root of
        ``(F_b + R_b / eta) / (F_f + R_f / eta) = m``, ``(R_b - m R_f) / (m F_f - F_b)``; ``inf``
        where no positive root exists (a ratio beyond the band's at-roof end, or a zero
        denominator), a value above 1 where the model's inputs (``R``, the fixed costs) cannot give the
        ratio with ops at or under their roofs."""
        m = self.measured.value
        den = m * self.fixed_fwd.value - self.fixed_bwd.value
        num = self.roof_bwd_s - m * self.roof_fwd_s
        return num / den if den > 0 and num > 0 else float("inf")

    def explain(self) -> dict[str, str]:
        """``viz.verdict``'s explanations, computed from the measurement: each phase's time split
        into its fixed cost and its roofline seconds over ``eta``, and which assumption failed; outside
        the band, the one ``eta`` the measured ratio would need (:meth:`one_eta`). Each phase's
        ``eta`` comes from the same times it explains, so an ``eta`` above 1 is read as the model's
        inputs being off (the per-op roofs ``R`` or the few-token fixed costs), not as ops beating
        their roofs: the texts name that alternative, which this model cannot exclude. Where each
        phase's own ``eta`` lies in (0, 1] but they differ by over a tenth, the texts name the part
        that failed: the model's one ``eta`` for both phases."""
        f, b = self.reach()
        off = ("an eta above 1 says the model's inputs are off, not that ops beat their roofs: the per-op "
               "roofs R or the fixed-cost reading (the phases timed at a few tokens) is wrong, and this run "
               "does not say which")
        parts = (f"forward {stats.median(self.fwd_s) * 1e3:.2f} ms = {self.fixed_fwd.value * 1e3:.2f} ms "
                 f"fixed + {self.roof_fwd_s * 1e3:.2f} ms of roofline at {f:.0%} of its speed; backward "
                 f"{stats.median(self.bwd_s) * 1e3:.2f} ms = {self.fixed_bwd.value * 1e3:.2f} ms + "
                 f"{self.roof_bwd_s * 1e3:.2f} ms at {b:.0%}")
        smaller = "The {} ops reached a smaller share of their roofs than the {}: {}."
        same = abs(f - b) <= 0.1 * max(f, b)  # within a tenth of each other: one eta, as assumed
        one = self.one_eta()
        fits = (f"one eta of {one:.0%} for both phases gives the measured ratio at the medians, so the "
                "ratio alone cannot tell the phases apart; their times can" if 0 < one <= 1 else
                "no one eta in (0, 1] gives the measured ratio at the medians"
                + (f" (it would take {one:.2f}; {off})" if one > 1 else "")
                + ": the ratio fell inside the band only through the fixed costs' intervals")
        held = (f"{parts[0].upper()}{parts[1:]}"
                + ("." if same else ". Taken apart, the two phases' ops reach shares of their roofs "
                   f"{max(f, b) / min(f, b):.2f}x apart, not the one eta the model assumes; {fits}."))
        none = " No one eta in (0, 1] gives the measured ratio at the medians"
        apart = not same and 0 < min(f, b) and max(f, b) <= 1  # two etas fit, each under its roof
        blame = (f" Each phase's own eta lies in (0, 1], {f:.0%} (forward) and {b:.0%} (backward), "
                 f"{max(f, b) / min(f, b):.2f}x apart: what failed is the model's one eta for both phases, "
                 "not the per-op roofs R or the fixed-cost reading, which give each phase's time with its "
                 "ops under their roofs (this run does not exclude that they are off as well).")
        needs = (f": it would take {one:.2f}, and an eta above 1 does not say that ops beat their roofs."
                 if one < float("inf") else ".")
        implied = (f" One eta of {one:.0%} for both phases gives the measured ratio at the medians."
                   if 0 < one <= 1 else none + (needs + blame if apart else
                                                f": it would take {one:.2f}; {off}." if one < float("inf")
                                                else "."))
        return {"held": held,
                "above": smaller.format("backward's", "forward's", parts) + implied,
                "below": (f"By this split an eta exceeds 1: {parts}." if max(f, b) > 1
                          else smaller.format("forward's", "backward's", parts)) + implied
                + (f" By itself {off}." if max(f, b) > 1 and not 1 < one < float("inf") else "")}


def _forward_backward(wl: Workload, batch: tuple, phase) -> None:  # noqa: ANN001 - a monitor's phase()
    with phase("forward"):
        loss = wl.loss_fn(wl.model, batch)
    with phase("backward"):
        loss.backward()
    wl.model.zero_grad(set_to_none=True)  # as train_steps leaves it: no gradient kept


def _timed(wl: Workload, batch: tuple) -> dict[str, float]:
    """One forward and backward of ``batch``, each phase timed (s)."""
    timers: dict[str, Timer] = {}
    _forward_backward(wl, batch, lambda name: timers.setdefault(name, Timer(wl.device)))
    return {name: t.elapsed_s for name, t in timers.items()}


def backward_over_forward(wl: Workload, limits: MachineLimits, rounds: int = 20, warmup: int = 2,
                          tokens: int = 2, dtype: str = "float32") -> PhaseModel:
    """Count one batch's forward and backward, then time them at the real size and at ``tokens``.

    Each round times the real batch's forward and backward, then the same model's on its
    first sample's first ``tokens`` tokens (the fixed costs), back to back. No optimizer
    step runs; the parameters' gradients are left as ``None``.

    Args:
        wl: a token workload (batches of ``(B, T)`` ids, e.g. :func:`perfkit.models.gpt2_workload`).
        limits: the machine's measured ceilings (:func:`perfkit.hw.cached_limits`).
        rounds: timed rounds (>= 2); warmup: untimed rounds first (>= 0).
        tokens: the fixed costs' sequence length (>= 2: a language model's loss needs a next token).
        dtype: whose matmul peak the roofline uses (the model's).

    Returns:
        A :class:`PhaseModel`.

    Raises:
        TypeError: for a ``wl`` or ``limits`` of another type.
        ValueError: for bad counts, ``tokens`` above the batch's length, a batch that is not
            ``(B, T)`` ids, or a ``dtype`` the limits did not measure.
    """
    check_type("wl", wl, Workload)
    check_type("limits", limits, MachineLimits)
    check_int("rounds", rounds, 2)
    check_int("warmup", warmup, 0)
    check_int("tokens", tokens, 2)
    limits.peak_flops(dtype)  # refuses an unmeasured dtype before any work
    x, y = (t.to(wl.device) for t in next(iter(wl.loader)))
    if x.dim() != 2 or tokens > x.shape[1]:
        raise ValueError(f"tokens must be <= the batch's length, in (B, T) ids; got tokens={tokens} "
                         f"for a batch of shape {tuple(x.shape)}")
    real, few = (x, y), (x[:1, :tokens].contiguous(), y[:1, :tokens].contiguous())
    wl.model.train()
    for _ in range(warmup + 1):  # + 1: the count below should see a warm step, not a first one
        _forward_backward(wl, real, lambda _: Timer(wl.device))
    ops = count_phases(lambda m: _forward_backward(wl, real, m.phase))
    few_ops = count_phases(lambda m: _forward_backward(wl, few, m.phase))
    fwd, bwd = ops.get("forward", []), ops.get("backward", [])
    short = {"forward": "fwd", "backward": "bwd"}
    times: dict[str, list[float]] = {}
    for i in range(warmup + rounds):
        for size, batch in (("", real), ("fixed_", few)):  # back to back: under the same load
            for name, t in _timed(wl, batch).items():
                if i >= warmup:
                    times.setdefault(f"{size}{short[name]}_s", []).append(t)
    return PhaseModel(sum(r.flops for r in fwd), sum(r.flops for r in bwd), len(fwd), len(bwd),
                      roofline_s(fwd, limits, dtype), roofline_s(bwd, limits, dtype),
                      **{k: tuple(v) for k, v in times.items()},
                      roof_fixed_fwd_s=roofline_s(few_ops.get("forward", []), limits, dtype),
                      roof_fixed_bwd_s=roofline_s(few_ops.get("backward", []), limits, dtype))
