"""What fusing an elementwise chain saves (module 06): bytes, and a new tensor per op.

The bytes model (:func:`perfkit.compute.kernels.elementwise_chain_bytes`) prices each eager
op by what it reads and writes at the DRAM ceiling (:attr:`perfkit.hw.MachineLimits.copy_bytes_per_s`:
every buffer an operation reads or writes counted once, as STREAM counts them; the best copy or
``x + y``). A CPU adds one more cost per op: each
op returns a new tensor, and glibc serves blocks above its mmap threshold straight from the
operating system, so their pages fault in on first write. :func:`new_tensor_cost` measures
that cost on this machine, per tensor and per page fault (the one figure of a fault's cost the
course uses, here and in the batch curve of :mod:`perfkit.compute.batch_curve`);
:func:`chain_model` puts both into one prediction, and
:func:`chain_explanations` says which term a measurement contradicts; :func:`what_fusion_saved`
says which term the saving came from, and which of them a GPU shares.

Usage::

    cost = new_tensor_cost(x)                                  # fill new vs existing
    model = chain_model(chain, cost.extra_s, limits.copy_bytes_per_s)
    print(model.eager_s, cost.describe(x.numel() * 4))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from perfkit import stats
from perfkit._checks import check_int, check_real, check_tensor, check_type
from perfkit.compute.batch_curve import minor_faults
from perfkit.compute.compiling import CompileRecord
from perfkit.compute.kernels import ChainBytes
from perfkit.timing import Measurement, interleaved
from perfkit.units import si

__all__ = ["FILL_OVER_ROOF", "ChainModel", "NewTensorCost", "chain_explanations", "chain_model",
           "new_tensor_cost", "what_fusion_saved"]

# The DRAM roof is the better of a copy and x + y of DRAM-sized buffers, both measured on each thread
# count. With write-allocate (each written line read first) a copy moves 3 buffers for the 2 it
# counts and x + y 4 for its 3, so at one real bandwidth W the roof is x + y's, 3/4 W; a fill with
# streaming stores moves 1 buffer for the 1 it counts, W: at most 4/3 of the roof from DRAM alone
FILL_OVER_ROOF = 4 / 3


@dataclass(frozen=True)
class NewTensorCost:
    """Filling a new tensor against filling an existing one of the same size, in alternating
    rounds (round ``i`` of ``fresh`` beside round ``i`` of ``reuse``).

    ``extra_s`` is the median over the rounds of the new fill's time less the existing one's
    (0 when the new one filled faster): the cost of its pages faulting in, when the allocator
    hands back memory from the operating system. ``faults``: the minor page faults counted in
    each round's new fill (empty where none were counted); :meth:`fault_rounds` gives each
    round's difference over its faults, and :attr:`per_fault_s` their median, the same
    statistic as ``extra_s`` per fault.
    """

    fresh: Measurement
    reuse: Measurement
    faults: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_type("fresh", self.fresh, Measurement)
        check_type("reuse", self.reuse, Measurement)
        for i, n in enumerate(check_type("faults", self.faults, tuple)):
            check_int(f"faults[{i}]", n, 0)
        if self.faults and len(self.faults) != self.fresh.n:
            raise ValueError(f"faults must hold one count per round ({self.fresh.n}), got {len(self.faults)}")

    def _differences(self) -> list[float]:  # s per round, paired; medians' difference if unpaired
        if self.fresh.n != self.reuse.n:
            return [self.fresh.median_s - self.reuse.median_s]
        return [f - r for f, r in zip(self.fresh.times_s, self.reuse.times_s, strict=True)]

    @property
    def extra_s(self) -> float:
        return max(0.0, stats.median(self._differences()))

    def fault_rounds(self) -> tuple[float, ...]:
        """Seconds per page fault in each round that counted any: the round's extra time (at
        least 0) over its faults. Empty where no fault was counted."""
        if not self.faults or self.fresh.n != self.reuse.n:
            return ()
        return tuple(max(0.0, d) / n for d, n in zip(self._differences(), self.faults, strict=True) if n > 0)

    @property
    def per_fault_s(self) -> float:
        """Seconds one page fault costs: the median of :meth:`fault_rounds` (0.0 without faults)."""
        rounds = self.fault_rounds()
        return stats.median(rounds) if rounds else 0.0

    def describe(self, nbytes: int, copy_bytes_per_s: float | None = None) -> str:
        """What the two fills of ``nbytes`` measured, in words, with the existing one's rate of
        bytes written. No share of the DRAM roof ``copy_bytes_per_s`` is printed: the roof counts a
        copy's or ``x + y``'s reads and writes (the better of the two), not the read each written
        line costs first (write-allocate), while a fill only writes, and streaming stores can skip
        that read-for-ownership. So a fill from DRAM can pass the roof by up to
        :data:`FILL_OVER_ROOF` (``x + y`` moves 4 buffers for the 3 it counts, a copy 3 for 2, a
        streaming fill 1 for 1: at one real bandwidth the roof is ``x + y``'s, 3/4 of it), and the
        words say so; only a rate past that many times the roof shows that part of its pages stayed
        in cache."""
        rate = nbytes / self.reuse.median_s  # B/s, written
        roof = "" if copy_bytes_per_s is None else f"the DRAM roof of {si(copy_bytes_per_s, 'B/s')}"
        where = (f" ({si(rate, 'B/s')} written" + (
            "" if not roof or rate <= copy_bytes_per_s else
            f", {rate / copy_bytes_per_s:.2f}x {roof}, which counts x + y's reads and writes and not its "
            "write-allocate read: a fill only writes, and with streaming stores that skip the "
            "read-for-ownership it can pass that roof by up to 4/3 from DRAM alone"
            if rate <= FILL_OVER_ROOF * copy_bytes_per_s else
            f", above 4/3 of {roof}, the most a fill from DRAM alone can reach (x + y moves 4 buffers for "
            "the 3 it counts, a streaming fill 1 for 1): part of its pages stayed in cache between "
            "fills") + ")")
        head = (f"filling a new {nbytes / 2**20:.0f} MiB tensor: {self.fresh.median_s * 1e3:.2f} ms, an "
                f"existing one: {self.reuse.median_s * 1e3:.2f} ms{where}: ")
        if self.extra_s > self.reuse.median_s:
            faults = stats.median(self.faults) if self.fault_rounds() else 0
            return head + (f"a new tensor costs {self.extra_s * 1e3:.2f} ms more (the median of the rounds' "
                           "differences, not the difference of those medians; its pages fault in") + (
                f": {faults:,.0f} faults, {si(self.per_fault_s, 's')} each, medians of the rounds)"
                if faults else ")")
        if self.fresh.median_s >= self.reuse.median_s:
            return head + (f"a new tensor costs {self.extra_s * 1e3:.2f} ms more, less than the fill "
                           "itself: no page faults to speak of at this size (the allocator reused the "
                           "memory)")
        return head + "the new one filled faster, which only noise explains: counted as no extra cost"


def new_tensor_cost(like: torch.Tensor, repeat: int = 7) -> NewTensorCost:
    """Time ``torch.empty_like(like).fill_(1)`` against filling one existing buffer, in
    alternation, counting the minor page faults of each new fill (``getrusage``; none counted
    where it is missing).

    Raises:
        TypeError, ValueError: for ``like`` that is not a tensor, or ``repeat`` below 1.
    """
    check_tensor("like", like)
    check_int("repeat", repeat, 1)
    buf = torch.empty_like(like)
    counts: list[int] = []

    def fresh() -> None:
        before = minor_faults()
        torch.empty_like(like).fill_(1.0)
        counts.append(minor_faults() - before)

    new, old = interleaved([fresh, lambda: buf.fill_(1.0)], warmup=2, repeat=repeat, device=like.device)
    faults = tuple(counts[-repeat:])  # the timed rounds' (the warm-up calls counted first)
    return NewTensorCost(new, old, faults if any(faults) else ())


@dataclass(frozen=True)
class ChainModel:
    """The eager chain's predicted time: its bytes at the DRAM ceiling (``bytes_s``) plus
    one new tensor per kernel (``faults_s``); ``fused_s`` is the fused kernel's bytes' time,
    ``new_s`` one new tensor's (the fused kernel returns one too). All in seconds."""

    bytes_s: float
    faults_s: float
    fused_s: float
    new_s: float = 0.0

    @property
    def eager_s(self) -> float:
        return self.bytes_s + self.faults_s

    @property
    def fused_total_s(self) -> float:
        """The fused kernel's predicted time: its bytes and its one new tensor (no arithmetic)."""
        return self.fused_s + self.new_s

    @property
    def speedup(self) -> float:
        """Fusing's predicted speedup: the eager chain's time over the fused kernel's."""
        return self.eager_s / self.fused_total_s


def chain_model(chain: ChainBytes, extra_s: float, copy_bytes_per_s: float) -> ChainModel:
    """The bytes model of ``chain`` plus ``extra_s`` per new tensor (one per kernel).

    Raises:
        TypeError, ValueError: for a bad ``chain``, a negative ``extra_s`` or a bandwidth <= 0.
    """
    check_type("chain", chain, ChainBytes)
    check_real("extra_s", extra_s, 0)
    check_real("copy_bytes_per_s", copy_bytes_per_s, 0, lo_open=True)
    return ChainModel(chain.eager / copy_bytes_per_s, chain.kernels * extra_s, chain.fused / copy_bytes_per_s,
                      float(extra_s))


def chain_explanations(model: ChainModel, rec: CompileRecord,
                       dram: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """The sentences of the two fusion verdicts (the eager time against ``model``; compiled
    over eager against the byte ratio), each naming the measured term that explains it.
    ``dram`` names the DRAM ceiling ``model`` charged the bytes at (``"the DRAM ceiling on 1
    thread"``: that of the timings' threads); ``None``: the all-core one."""
    check_type("model", model, ChainModel)
    if dram is not None and (not isinstance(dram, str) or not dram):
        raise ValueError(f"dram must name the DRAM ceiling the model used, or be None, got {dram!r}")
    check_type("rec", rec, CompileRecord)
    compiled_s, fused_x = rec.compiled.median_s, rec.compiled.median_s / model.fused_s
    if fused_x > 1.5:
        slower = (f"The compiled chain, which does the same arithmetic in one pass, took "
                  f"{compiled_s * 1e3:.2f} ms, {fused_x:.1f}x its own bytes' time: the arithmetic (tanh, "
                  "tens of instructions per element; the cube is two multiplies) costs more than the "
                  "bytes on this machine's cores, and the eager ops pay it too.")
    else:
        slower = (f"Not from arithmetic: the compiled chain, doing the same arithmetic, ran near its "
                  f"bytes' time ({compiled_s * 1e3:.2f} ms against {model.fused_s * 1e3:.2f} ms); the "
                  "eager ops lose time the model does not count (per-op dispatch, intermediates that "
                  "miss the cache).")
    faults = model.faults_s / model.eager_s if model.eager_s else 0.0
    eager_x = rec.eager.median_s / model.eager_s  # each side of the speedup against its own model
    eager = {"held": f"The median is {eager_x:.2f}x the model's {model.eager_s * 1e3:.1f} ms. "
                     f"Bytes alone would predict {model.bytes_s * 1e3:.2f} ms; the new tensors are "
                     f"{faults:.0%} of the model" + (
                         ": on this machine, at this size, page faults are most of why the eager chain "
                         "runs far below the DRAM ceiling." if faults > 0.5 else "."),
             "above": "Slower still. " + slower,
             "below": "Faster than the model: intermediates stayed in cache, or the allocator reused blocks."}
    fused_over = compiled_s / model.fused_total_s
    took = (f"The compiled loop took {compiled_s * 1e3:.2f} ms against the model's "
            f"{model.fused_total_s * 1e3:.2f} ms (its bytes at {dram or 'the all-core DRAM ceiling'}, "
            f"{model.fused_s * 1e3:.2f} ms, and its one new tensor, {model.new_s * 1e3:.2f} ms)")
    terms = (f"Of the speedup's two terms the {{}} one carries the miss: the compiled loop took "
             f"{fused_over:.2f}x its model's time, the eager chain {eager_x:.2f}x its own "
             f"({model.eager_s * 1e3:.2f} ms). ")
    speedup = {"held": f"{took}: fusion removes the intermediate tensors, their bytes and their page faults.",
               "above": terms.format("eager") + "The eager chain lost time the model does not count (per-op "
                        "dispatch, intermediates that miss the cache), which fusion removed too.",
               "below": terms.format("compiled" if fused_over >= eager_x else "eager") + f"{took}: "
                        "the model leaves out the loop's arithmetic (tanh, tens of instructions per element; "
                        "the cube is two multiplies, as ATen's pow kernel and inductor's lowering both run "
                        "it)" + (" and charges the bytes at the bandwidth of all cores, which the cell after "
                                 "the roofline times on these threads." if dram is None else
                                 "; the cell after the roofline times the same bytes alone on these "
                                 "threads.")}
    return eager, speedup


def what_fusion_saved(model: ChainModel, rec: CompileRecord, kernels: int, byte_ratio: float) -> str:
    """What fusing the chain saved per call (``rec``: eager and compiled, medians), and the
    model's two terms for it: the ``kernels - 1`` new tensors the fused kernel no longer faults
    in, and the bytes it no longer moves. A GPU's caching allocator reuses freed blocks without
    faults, so only the bytes' part describes what fusing buys there.

    Where the two terms cover under half the saving, or over 1.5x it, the sentence says so
    (what neither term counts, or the fused loop's arithmetic taking part of it back); between,
    it prints the milliseconds they leave unexplained (or overshoot by); a compiled chain no
    faster than eager gets no attribution at all.

    Which term is the larger part of the saving is not which one moved the speedup off
    ``byte_ratio`` (the bytes' speedup): faults that scale with the kernels as the bytes do leave
    the ratio nearly where it was. The measured speedup (the medians' ratio) is ``byte_ratio``
    times three factors, each printed: the page faults' (the model's speedup over the byte
    ratio), the compiled loop's time over its model's (the arithmetic the model leaves out), and
    the eager chain's time over its own model's (per-op work it leaves out); the sentence names
    the factor farthest from 1 as the one that moved it.

    Raises:
        TypeError, ValueError: for a bad ``model`` or ``rec``, ``kernels`` below 1 or a
            ``byte_ratio`` not > 0.
    """
    check_type("model", model, ChainModel)
    check_type("rec", rec, CompileRecord)
    check_int("kernels", kernels, 1)
    check_real("byte_ratio", byte_ratio, 0, lo_open=True)
    saved = rec.eager.median_s - rec.compiled.median_s  # s per call
    faults, moved = max(0.0, model.faults_s - model.new_s), max(0.0, model.bytes_s - model.fused_s)  # s
    if saved <= 0:
        return (f"Fusing saved nothing here: the compiled chain took {-saved * 1e3:.1f} ms more per call "
                "than the eager one, so this run says nothing of which term fusing removes.")
    cover = (faults + moved) / saved
    head = (f"Fusing saved {saved * 1e3:.1f} ms per call here; the model's terms for it: "
            f"{faults * 1e3:.1f} ms of page faults ({kernels - 1} fewer new tensors) and "
            f"{moved * 1e3:.1f} ms of bytes" + (
                f", together {cover:.0%} of it: the rest is time neither term counts (the eager ops' own "
                "per-element work and per-op costs). " if cover < 0.5 else
                f", together {cover:.1f}x it: the fused loop's arithmetic took back part of what fusing "
                "removed. " if cover > 1.5 else
                f", together {cover:.0%} of it: {(saved - faults - moved) * 1e3:.1f} ms of the saving is "
                "time neither term counts. " if cover < 1 else
                f", together {cover:.0%} of it, {(faults + moved - saved) * 1e3:.1f} ms more than fusing "
                "saved. "))
    gpu = (f"the fused kernel moves {byte_ratio:.1f}x fewer bytes than the {kernels} kernels, the speedup "
           "memory-bound work allows, less the arithmetic where that binds")
    moved_by = _what_moved_the_speedup(model, rec, byte_ratio)
    if faults > moved:
        return head + moved_by + (
            "Of the saving the model counts, the new tensors' page faults are the larger part, not the "
            "bytes. The faults come from the allocator, not the CPU: glibc hands "
            "blocks above its mmap threshold back to the operating system, and each new one "
            "faults in page by page (an allocator that keeps freed blocks, jemalloc or tcmalloc "
            "by LD_PRELOAD, or glibc with MALLOC_MMAP_MAX_=0 and MALLOC_TRIM_THRESHOLD_ set "
            "high, is the usual CPU remedy, untested here; raising MALLOC_MMAP_THRESHOLD_ "
            "cannot help, as glibc caps it at 32 MiB on 64-bit); a GPU's caching allocator "
            "keeps freed blocks and reuses them without faults, so that part does not carry "
            f"over. What carries is the bytes: {gpu} (how much the arithmetic binds on a GPU, this CPU run "
            "does not test).")
    return head + moved_by + ("Of the saving the model counts, the bytes are the larger part, as on a GPU, "
                              f"whose caching allocator faults in no new tensor: {gpu}.")


def _what_moved_the_speedup(model: ChainModel, rec: CompileRecord, byte_ratio: float) -> str:
    """The measured speedup (medians' ratio) as ``byte_ratio`` times three factors, and the one
    farthest from 1 named: the faults' (model speedup over byte ratio), the compiled loop's own
    and the eager chain's own (each measured over its model)."""
    measured = rec.eager.median_s / rec.compiled.median_s
    terms = {  # name: (factor on the speedup, what it stands for)
        "faults": (model.speedup / byte_ratio,
                   f"the page faults the model counts (its {model.speedup:.2f}x)"),
        "compiled": (model.fused_total_s / rec.compiled.median_s,
                     "the compiled loop's time over its model's"),
        "eager": (rec.eager.median_s / model.eager_s, "the eager chain's time over its model's")}

    def move(x: float) -> str:
        return f"multiplied by {x:.2f}" if x >= 1 else f"divided by {1 / x:.2f}"

    parts = [f"{move(x)} for {what}" for x, what in terms.values()]
    said = ", ".join(parts[:-1]) + f", and {parts[-1]}"
    top = max(terms, key=lambda k: abs(math.log(terms[k][0])))
    down = terms[top][0] < 1  # the named factor lowered the speedup
    small_faults = abs(math.log(terms["faults"][0])) < math.log(1.25)  # faults moved the model < 25 %
    named = {
        ("faults", True): f"the page faults lowered it most: the model's {model.speedup:.2f}x, not the "
                          f"{byte_ratio:.1f}x byte ratio, was the speedup on offer",
        ("faults", False): f"the page faults raised it most: the model's {model.speedup:.2f}x, not the "
                           f"{byte_ratio:.1f}x byte ratio, was the speedup on offer",
        ("compiled", True): "the compiled loop's own time lowered it most" + (
            f", not the page faults, which move the model's speedup only to {model.speedup:.2f}x: the "
            "byte ratio was nearly on offer, and the fused loop's arithmetic took it back"
            if small_faults else f", more than the page faults (the model's {model.speedup:.2f}x)"),
        ("compiled", False): "the compiled loop's own time raised it most: it ran faster than its bytes "
                             "and its new tensor predict (its data stayed in cache, or its new tensor "
                             "took fewer faults)",
        ("eager", True): "the eager chain's own time lowered it most: it ran faster than its model "
                         "(intermediates stayed in cache, or the allocator reused blocks)",
        ("eager", False): "the eager chain's own time raised it most: per-op work the model leaves out "
                          "made it slower than its model, and fusing removed that work too"}[top, down]
    return (f"The measured {measured:.2f}x (the medians' ratio) is the {byte_ratio:.1f}x byte ratio {said}; "
            f"{named}. ")
