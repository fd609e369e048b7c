"""Tokens/s against batch size, predicted from each batch's operators on the roofline, the page
faults its steps take, and a fixed cost per step, each measured or counted on this machine.

"Throughput rises with the batch, then flattens" is the crude model: per-step costs spread over
more tokens until the matmuls are large. Two costs can make it fall instead, and this model
separates them. A step at batch ``b`` takes

    T(b) = F + R(b) / eta + n(b) * c

``R(b)``: the step's operators each at its roof (:func:`perfkit.compute.intensity.roofline_s`, with
the cache: an op whose counted bytes are at most twice the largest copy buffer notebook 00's sweep
saw served by the cache, :func:`perfkit.compute.intensity.cache_fit_bytes`, moves them at the
cache's bandwidth), counted at batch ``b``, on the bandwidths and matmul ceiling measured on the
steps' threads; ``R(b)`` per token rises where the big ops' bytes outgrow the cache. Where an op's
bytes actually come from, cache or DRAM, the count cannot tell (a producer may have evicted them, a
prefetcher may hide DRAM), so ``R`` is taken at both ends: with the cache as above, and with every
op at DRAM's bandwidth (``R_dram``, no cache at all); the prediction spans the two. ``n(b)``: minor
page faults per step, counted in the timed rounds (``getrusage``): glibc hands freed memory above
its trim threshold back to the operating system, and the next step's new tensors fault it in again,
page by page. ``c``: seconds per fault, timed by touching a fresh anonymous mapping against
touching it again in each round, or given (a cost measured before, e.g.
:meth:`perfkit.compute.fusion.NewTensorCost.fault_rounds`, so that one figure of a fault's cost
serves a whole notebook). ``F``: a step of 1 x 2 tokens, less its roofline seconds. ``eta``, the
share of their roofs the ops reach, is the one figure fitted, on one batch (for each end of ``R``);
the others are predicted. The predicted range spans the two ends of ``R`` and the intervals of
``F``, ``c`` and the fitted batch's time.

Usage::

    curve = measure_batch_curve(lambda b, t: gpt_step(GPT, torch.randint(0, 1024, (b, t))),
                                [1, 4, 8, 16, 32], 128, hw.cached_limits(), fit=16)
    print("\\n".join(curve.lines()), curve.predicted_ratio(), curve.gain(-1, curve.rival()))
"""

from __future__ import annotations

import itertools
import math
import mmap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from perfkit import stats
from perfkit._checks import check_callable, check_int, check_items, check_real, check_type
from perfkit.compute.intensity import cache_fit_bytes, count_phases, roofline_s
from perfkit.hw import MachineLimits
from perfkit.sizing import pinned_threads
from perfkit.timing import Timer, resolve_device

try:  # POSIX only; elsewhere no fault is counted and the fault term vanishes
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = ["BatchCurve", "measure_batch_curve", "minor_faults", "page_fault_s"]


def minor_faults() -> int:
    """This process's minor page faults so far (``getrusage``); always 0 without it (not POSIX)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


def page_fault_s(nbytes: int = 16 * 2**20) -> float:
    """Seconds one minor page fault costs here: first touch of a fresh ``nbytes`` anonymous
    mapping (every page faults in, zeroed by the kernel) less a second touch (no faults), over
    the faults counted. ``0.0`` where no fault was counted (no ``getrusage``).

    Raises:
        ValueError: for ``nbytes`` below one page (4096).
    """
    check_int("nbytes", nbytes, 4096)
    region = mmap.mmap(-1, nbytes)
    buf = torch.frombuffer(region, dtype=torch.uint8)  # (nbytes,), no copy
    before = minor_faults()
    with Timer("cpu") as first:
        buf.fill_(1)
    faults = minor_faults() - before
    with Timer("cpu") as again:
        buf.fill_(2)
    del buf  # the mapping cannot close while a tensor exports it
    region.close()
    return max(0.0, first.elapsed_s - again.elapsed_s) / faults if faults > 0 else 0.0


@dataclass(frozen=True)
class BatchCurve:
    """A training step at each batch: counted roofline seconds, timed rounds with their page
    faults, the fixed cost and the cost of a fault; the model ``F + R(b) / eta + n(b) c``.

    Attributes:
        batches: batch sizes, ascending; seq_len: tokens per sample.
        roof_s: ``R(b)``, each batch's step ops at their roofs (s), the cache's bandwidth for an
            op whose counted bytes are at most ``cache_fit``.
        roof_dram_s: the same ops with every op's bytes at DRAM's bandwidth (s).
        over_cache: ops per step whose counted bytes exceed ``cache_fit``, per batch.
        times_s: per batch, the step's time in each round (s).
        faults: per batch, the minor page faults of its step in each round.
        fixed_s: the 1 x 2-token step's time in each round (s); roof_fixed_s: its ``R`` (s).
        fault_s: seconds per page fault: one probe per round (:func:`page_fault_s`), or the
            figures given to :func:`measure_batch_curve` (any number of them).
        fit: the index in ``batches`` of the batch ``eta`` is fitted on.
        cache_fit: the most counted bytes an op moved at the cache's bandwidth in ``roof_s``
            (:func:`perfkit.compute.intensity.cache_fit_bytes`); ``-1``: no cache figure, every
            op at DRAM's (then ``over_cache`` counts none).
    """

    batches: tuple[int, ...]
    seq_len: int
    roof_s: tuple[float, ...]
    roof_dram_s: tuple[float, ...]
    over_cache: tuple[int, ...]
    times_s: tuple[tuple[float, ...], ...]
    faults: tuple[tuple[int, ...], ...]
    fixed_s: tuple[float, ...]
    roof_fixed_s: float
    fault_s: tuple[float, ...]
    fit: int
    cache_fit: int = -1

    def __post_init__(self) -> None:
        bs = [check_int(f"batches[{i}]", b, 1) for i, b in enumerate(check_items("batches", self.batches))]
        if len(bs) < 2 or bs != sorted(set(bs)):
            raise ValueError(f"batches must be at least two distinct sizes, ascending; got {self.batches}")
        check_int("seq_len", self.seq_len, 1)
        check_int("fit", self.fit, 0, len(bs) - 1)
        check_int("cache_fit", self.cache_fit, -1)
        check_real("roof_fixed_s", self.roof_fixed_s, 0)
        rounds = len(check_items("fixed_s", self.fixed_s))
        for name in ("roof_s", "roof_dram_s", "over_cache", "times_s", "faults"):
            if len(check_items(name, getattr(self, name))) != len(bs):
                raise ValueError(f"{name} must hold one entry per batch ({len(bs)}), "
                                 f"got {len(getattr(self, name))}")
        for name in ("roof_s", "roof_dram_s"):
            for i, r in enumerate(getattr(self, name)):
                check_real(f"{name}[{i}]", r, 0, lo_open=True)
        for name in ("times_s", "faults"):
            for i, row in enumerate(getattr(self, name)):
                if len(check_items(f"{name}[{i}]", row)) != rounds:
                    raise ValueError(f"{name}[{i}] must hold one value per round ({rounds}), got {len(row)}")
        for i, c in enumerate(check_items("fault_s", self.fault_s)):
            check_real(f"fault_s[{i}]", c, 0)

    def cache_reach(self) -> str:
        """``cache_fit`` in words, as :meth:`lines` and :meth:`explain` name it."""
        return (f"the cache's {self.cache_fit / 1e6:.1f} MB" if self.cache_fit >= 0
                else "the cache (no cache figure: every op at DRAM's bandwidth)")

    def tokens(self, i: int) -> int:
        """Tokens per step at ``batches[i]``."""
        return self.batches[i] * self.seq_len

    @property
    def fixed(self) -> stats.Estimate:
        """``F`` (s): the 2-token step's rounds less its roofline seconds, median and interval."""
        return stats.median_interval([t - self.roof_fixed_s for t in self.fixed_s])

    @property
    def fault_cost(self) -> stats.Estimate:
        """``c`` (s per fault): the probes' median and interval."""
        return stats.median_interval(self.fault_s)

    def faults_per_step(self, i: int) -> float:
        """``n(b)``: the median of ``batches[i]``'s step's faults over the rounds."""
        return stats.median(self.faults[i])

    def step_s(self, i: int) -> stats.Estimate:
        """The measured step time at ``batches[i]`` (s), median and interval."""
        return stats.median_interval(self.times_s[i])

    def _predict(self, fixed: float, cost: float, fit_s: float, roofs: Sequence[float]) -> list[float]:
        fixed = max(fixed, 0.0)  # a fixed cost below 0 is noise in the 2-token step's rounds
        n = [self.faults_per_step(i) * cost for i in range(len(self.batches))]
        work = fit_s - fixed - n[self.fit]
        # eta = R(fit) / work; no work left over means the roofline terms predict nothing
        inv_eta = work / roofs[self.fit] if work > 0 else 0.0
        return [fixed + r * inv_eta + f for r, f in zip(roofs, n, strict=True)]

    @property
    def eta(self) -> float:
        """The share of their roofs the ops reach, fitted on ``batches[fit]`` (inf when the fixed
        cost and the faults explain all of its time)."""
        work = self.step_s(self.fit).value - max(self.fixed.value, 0.0) - self.faults_per_step(self.fit) * \
            self.fault_cost.value
        return self.roof_s[self.fit] / work if work > 0 else math.inf

    def predicted_s(self, cache: bool = True) -> list[float]:
        """The model's step time per batch (s), from the point values; ``R`` with the cache, or
        (``cache=False``) every op at DRAM's bandwidth."""
        check_type("cache", cache, bool)
        return self._predict(self.fixed.value, self.fault_cost.value, self.step_s(self.fit).value,
                             self.roof_s if cache else self.roof_dram_s)

    def _ratio(self, times: Sequence[float], i: int) -> float:
        rates = [self.tokens(j) / t for j, t in enumerate(times)]
        return rates[i % len(rates)] / rates[self.rival(i)]  # against the batch the verdict holds it to

    def predicted_ratio(self, i: int = -1, faults: bool = True) -> tuple[float, float, float]:
        """Predicted tokens/s at ``batches[i]`` over :meth:`rival`'s (the other batch that
        measured the most tokens/s, which the verdict holds it against), ``(value, low, high)``:
        the value from the point figures with the cache, the ends from every corner of the two
        ends of ``R`` and the intervals of ``F``, ``c`` and the fitted batch's time.
        ``faults=False``: the model without its fault term (``c = 0``)."""
        check_type("faults", faults, bool)
        costs = self.fault_cost if faults else stats.exact(0.0)
        fit_s = self.step_s(self.fit)
        value = self._ratio(self._predict(self.fixed.value, costs.value, fit_s.value, self.roof_s), i)
        corners = [self._ratio(self._predict(f, c, t, r), i) for f, c, t, r in itertools.product(
            self.fixed.spread, costs.spread, fit_s.spread, (self.roof_s, self.roof_dram_s))]
        return value, min(value, *corners), max(value, *corners)

    def rival(self, i: int = -1) -> int:
        """The index of the batch other than ``batches[i]`` with the most measured tokens/s
        (medians): what ``batches[i]`` is held against, never itself (a ratio of one batch to
        itself would be 1 by construction)."""
        i = i % len(self.batches)
        return max((j for j in range(len(self.batches)) if j != i),
                   key=lambda j: self.tokens(j) / self.step_s(j).value)

    def gain(self, i: int, j: int) -> stats.Estimate:
        """Measured tokens/s at ``batches[i]`` over ``batches[j]``: ``j``'s step time over
        ``i``'s, paired by round, times the token ratio."""
        return stats.median_ratio(self.times_s[j], self.times_s[i]).scaled(self.tokens(i) / self.tokens(j))

    def _rates(self, i: int) -> tuple[int, int, int, int]:
        """Tokens/s at ``batches[i]`` as :meth:`lines` prints them (whole numbers): the measured
        interval's ends (the point twice without an interval) and the predicted range's ends."""
        tok, ends = self.tokens(i), (self.predicted_s()[i], self.predicted_s(cache=False)[i])
        est = self.step_s(i)
        a, b = (est.high, est.low) if est.has_interval and est.low < est.high else (est.value, est.value)
        return round(tok / a), round(tok / b), round(tok / max(ends)), round(tok / min(ends))

    def placement(self, i: int) -> str:
        """Where ``batches[i]``'s measured tokens/s lie against its predicted range (the two ends
        of ``R``), judged with the measured step's interval as :meth:`lines` prints both (whole
        tokens/s): ``"inside"`` where the interval lies within the range, ``"outside"`` where it
        lies clear of it, ``"at the edge"`` where it reaches across an edge. Without an interval
        (too few rounds) the point alone decides, inside or outside."""
        lo, hi, plo, phi = self._rates(i % len(self.batches))
        return ("inside" if plo <= lo and hi <= phi else "outside" if hi < plo or lo > phi else "at the edge")

    def out_of_sample(self) -> str:
        """The batches ``eta`` was not fitted on, counted by :meth:`placement`, and what the counts
        say: ``"0 inside, 3 outside, 1 at the edge: it held for none (1 unresolved at the edge)"``."""
        counts = dict.fromkeys(("inside", "outside", "at the edge"), 0)
        for i in range(len(self.batches)):
            if i != self.fit:
                counts[self.placement(i)] += 1
        n, inside, out, edge = len(self.batches) - 1, *counts.values()
        unresolved = f"{edge} unresolved at the edge" if edge else ""
        said = ("it held for every one" if inside == n else "it failed for every one" if out == n
                else "none resolved: every one at the edge" if edge == n
                else f"it held for none ({unresolved})" if not inside
                else f"it held for {inside} of {n}, failed for {out}" + (f", {unresolved}" if edge else "")
                if out else f"it held for {inside} of {n}, {unresolved}")
        return ", ".join(f"{v} {k}" for k, v in counts.items()) + f": {said}"

    def lines(self) -> list[str]:
        """One line per batch: measured tokens/s with its interval, predicted tokens/s (the two
        ends of ``R``) and :meth:`placement` (but at the fitted batch), ``R`` per token with the
        cache, faults per step."""
        out = []
        for i, b in enumerate(self.batches):
            tag = " (eta fitted here)" if i == self.fit else ""
            per_token_ns = self.roof_s[i] / self.tokens(i) * 1e9
            lo, hi, plo, phi = self._rates(i)
            est = self.step_s(i)
            spread = f" ({est.label} {lo:,} to {hi:,})" if lo < hi else ""
            where = "" if i == self.fit else f": {self.placement(i)}"
            out.append(f"batch {b:>3}: {self.tokens(i) / est.value:>8,.0f} tokens/s measured{spread}, "
                       f"{plo:>8,} to {phi:,} predicted{where}; roofline {per_token_ns:,.0f} ns/token "
                       f"({self.over_cache[i]} ops past {self.cache_reach()}), "
                       f"{self.faults_per_step(i):,.0f} page faults/step{tag}")
        return out

    def explain(self, i: int = -1) -> dict[str, str]:
        """``viz.verdict``'s sentences for ``batches[i]`` over :meth:`rival`, each naming the
        measured terms: ``R`` per token against the rival's, the faults' time, the miss."""
        i, j = i % len(self.batches), self.rival(i)
        lo, hi = sorted((self.predicted_s()[i], self.predicted_s(cache=False)[i]))
        t = self.step_s(i).value
        def rise(roofs: Sequence[float]) -> float:  # R per token at i over j's
            return roofs[i] / self.tokens(i) / (roofs[j] / self.tokens(j)) - 1
        fault_ms = self.faults_per_step(i) * self.fault_cost.value * 1e3
        parts = (f"at batch {self.batches[i]} the roofline per token is {rise(self.roof_s):+.0%} against "
                 f"batch {self.batches[j]}'s with the cache ({self.over_cache[i]} ops past "
                 f"{self.cache_reach()}), "
                 f"{rise(self.roof_dram_s):+.0%} without, and "
                 f"{self.faults_per_step(i):,.0f} page faults per step at "
                 f"{self.fault_cost.value * 1e6:.2f} us each cost {fault_ms:.1f} ms of its {t * 1e3:.1f} ms")
        off = f"the step took {t * 1e3:.1f} ms against {lo * 1e3:.1f}-{hi * 1e3:.1f} ms predicted"
        tp, lop, hip = (round(x * 1e3, 1) for x in (t, lo, hi))   # ms, as printed
        span = sorted({round(abs(tp - hip), 1), round(abs(tp - lop), 1)})
        gap = " to ".join(f"{x:.1f}" for x in span) + " ms " + (
            "more than its terms add up to" if tp > hip else "less than its terms add up to")
        gap = gap if tp > hip or tp < lop else ""
        why = (f", {gap}; {parts}: both terms are already in the prediction, so the gap lies beyond them, "
               "and this run does not time what it is" if gap else
               f", inside that range, so the miss is not in this step's time against the model; {parts}")
        return {"held": f"{parts[0].upper()}{parts[1:]}.",
                "below": f"Slower than the model: {off}{why}.",
                "above": f"Faster than the model: {off}{why}."}


def measure_batch_curve(make_step: Callable[[int, int], Callable[[], object]], batches: Sequence[int],
                        seq_len: int, limits: MachineLimits, fit: int, rounds: int = 5, warmup: int = 1,
                        threads: int | None = None, dtype: str = "float32",
                        device: torch.device | str | None = None,
                        fault_s: Sequence[float] | None = None) -> BatchCurve:
    """Count and time a training step at each batch, in rounds, with the model's other terms.

    After ``warmup`` rounds, one round counts every step's operators (no timing); then each
    timed round runs every batch's step (ascending), counting its page faults, then the
    1 x 2-token step and, unless ``fault_s`` is given, one fault probe (:func:`page_fault_s`),
    all under the same load.

    Args:
        make_step: ``make_step(b, t)`` returns one training step (a callable) on ``b`` samples
            of ``t`` tokens, its own model and optimizer (e.g. ``experiments.gpt_step``).
        batches: batch sizes (at least two distinct, >= 1), sorted here.
        seq_len: tokens per sample (>= 2).
        limits: the machine's ceilings (:func:`perfkit.hw.cached_limits`).
        fit: the batch ``eta`` is fitted on (one of ``batches``).
        rounds: timed rounds (>= 2); warmup: untimed rounds before the counting round (>= 0;
            the count should see a warm step: an optimizer's first step allocates its state).
        threads: intra-op threads to run with (restored after); ``None`` keeps the setting. On a
            CPU the roofline's matmul ceiling is the one measured on that many threads.
        dtype: whose matmul peak the roofline uses; device: where the steps run.
        fault_s: seconds per page fault measured before (each >= 0; their median and interval
            are ``c``), instead of a probe per round; ``None`` probes.

    Returns:
        A :class:`BatchCurve`.

    Raises:
        TypeError: for a ``make_step`` that is not callable or ``limits`` of another type.
        ValueError: for bad batches, counts or threads, a ``fit`` not among ``batches``, a
            ``dtype`` the limits did not measure or an empty or negative ``fault_s``.
    """
    check_callable("make_step", make_step)
    bs = sorted({check_int(f"batches[{i}]", b, 1) for i, b in enumerate(check_items("batches", batches))})
    check_int("seq_len", seq_len, 2)
    check_type("limits", limits, MachineLimits)
    if fit not in bs:
        raise ValueError(f"fit must be one of batches {bs}, got {fit!r}")
    check_int("rounds", rounds, 2)
    check_int("warmup", warmup, 0)
    limits.peak_flops(dtype)  # refuses an unmeasured dtype before any work
    given = None if fault_s is None else tuple(
        check_real(f"fault_s[{i}]", c, 0) for i, c in enumerate(check_items("fault_s", fault_s)))
    dev = resolve_device(device)
    steps = [check_callable("make_step(b, t)", make_step(b, seq_len)) for b in bs]
    tiny = check_callable("make_step(b, t)", make_step(1, 2))
    fits = cache_fit_bytes(limits)  # bytes: the threshold roofline_s serves from the cache
    times: list[list[float]] = [[] for _ in bs]
    faults: list[list[int]] = [[] for _ in bs]
    fixed, probes = [], []
    with pinned_threads(threads or torch.get_num_threads()):
        for _ in range(warmup):
            for step in [*steps, tiny]:
                step()
        # the counting round warms the timed ones: its ops run as in any step
        ops = [[r for rs in count_phases(lambda _m, s=s: s()).values() for r in rs] for s in [*steps, tiny]]
        for _ in range(rounds):
            for k, step in enumerate(steps):
                before = minor_faults()
                with Timer(dev) as t:
                    step()
                times[k].append(t.elapsed_s)
                faults[k].append(minor_faults() - before)
            with Timer(dev) as t:
                tiny()
            fixed.append(t.elapsed_s)
            if given is None:
                probes.append(page_fault_s())
    on = threads if dev.type == "cpu" else None  # the matmul ceiling measured on the threads the steps ran on
    roof = lambda o, cache=True: roofline_s(o, limits, dtype, cache, threads=on, thread_bandwidths=True)  # noqa: E731
    return BatchCurve(tuple(bs), seq_len, tuple(roof(o) for o in ops[:-1]),
                      tuple(roof(o, False) for o in ops[:-1]),
                      tuple(sum(op.bytes > fits for op in o) if fits >= 0 else 0 for o in ops[:-1]),
                      tuple(map(tuple, times)), tuple(map(tuple, faults)), tuple(fixed),
                      roof(ops[-1]), given or tuple(probes), bs.index(fit), fits)
