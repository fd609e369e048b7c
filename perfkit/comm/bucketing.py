"""What bucketing saved on a data-parallel step, against the alpha-beta model's start-ups.

Notebook 02 times a naive step (one all-reduce per gradient tensor) and a bucketed one (one per
bucket) in the same rounds. The alpha-beta model says bucketing saves ``alpha`` per call it
removes. :func:`bucket_saving` holds the measured saving against that, with the two things the
model leaves out, each from a figure the run already has: the copies of every gradient into its
bucket and back out (only the bucketed step pays them), at the fastest DRAM-sized copy measured;
and what one call costs at the step's tensor sizes, read off the sweep's own points instead of the
fitted line's intercept. The record's sentences say which of them can account for a gap, and by
how much, rather than naming a cause the numbers cannot carry. :func:`bucket_count_effect` holds
DDP's steps at several bucket caps against the same model, with the overlap that more buckets
allow behind backward (what an overlapped step saved beyond running its all-reduces together:
:mod:`perfkit.comm.overlap`).

Usage::

    s = bucket_saving(points, fit, naive_calls=16, bucket_calls=7, grad_bytes=6_457_384,
                      largest_bytes=1 << 20, naive_s=31.3e-3, bucketed_s=23.4e-3, copy_bytes_per_s=32.6e9)
    print(s.explain())          # the verdict's sentence
    print(s.short())            # the takeaway's clause
    print(bucket_count_effect(ddp_caps, fit.alpha_s, hidden_s=backward_alone_s))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta
from perfkit.comm.collectives import CollectivePoint
from perfkit.estimate import Estimate
from perfkit.units import si

__all__ = ["BucketSaving", "alone_against_model_text", "bucket_count_effect", "bucket_saving"]


@dataclass(frozen=True)
class BucketSaving:
    """A bucketed step's measured saving over a naive one, and what the model leaves out.

    Attributes:
        extra_calls: all-reduces the naive step makes beyond the bucketed one's.
        alpha_s: what the model charges each call, s (the fit's intercept, or a measured small call:
            :func:`perfkit.comm.small_call_cost`).
        measured_s: naive's median step less bucketed's, s.
        copy_bytes: counted bytes of the bucket copies, per process (each gradient read and a
            bucket written, then the bucket read and the gradient written: 4x the gradients).
        copies_s: those bytes at the copy rate given, s (one process copying alone).
        sweep_low_s, sweep_high_s: the fastest and slowest median call of the sweep at sizes up
            to ``largest_bytes`` (``None`` when the sweep has no size there).
        largest_bytes: the largest gradient tensor, bytes.
        bucketed_s: bucketed's median step, s.
        model_naive_s: the model's communication for the naive step, s (``alpha`` per call plus the
            gradients over the bandwidth), or ``None``: above the whole measured naive step, the
            sentences say that the model fails on this run's numbers.
        ratio: naive's step over bucketed's, the median of paired rounds with its interval, or
            ``None``. Given, the model is held against it (:attr:`model_ratio` inside or outside
            its interval), not against the medians' difference alone, so the verdict's sentence
            and a summary quoting the ratio say the same.
    """

    extra_calls: int
    alpha_s: float
    measured_s: float
    copy_bytes: float
    copies_s: float
    sweep_low_s: float | None
    sweep_high_s: float | None
    largest_bytes: int
    bucketed_s: float = 0.0
    ratio: Estimate | None = None
    model_naive_s: float | None = None

    @property
    def model_ratio(self) -> float:
        """Naive's step over bucketed's by the model: bucketed's median plus ``alpha`` per call removed."""
        return 1 + self.model_s / self.bucketed_s if self.bucketed_s > 0 else 1.0

    def side(self) -> str:
        """``"above"``/``"below"`` where the measured saving is larger/smaller than the model's, by
        the ratio's printed interval when given (by the medians otherwise); ``""`` where that
        interval holds the model's ratio, or the medians and the interval disagree on the side."""
        by_medians = "above" if self.measured_s > self.model_s else "below"
        if self.ratio is None:
            return by_medians
        return by_medians if self.ratio.clear_of(self.model_ratio, "x") == by_medians else ""

    def _inside(self) -> str:  # only where side() is "": a ratio was given
        r, m = self.ratio, self.model_ratio
        if r is None:
            raise ValueError("no paired ratio to hold the model against")
        where = (f"cannot be held against the paired rounds' {r.text('x')}" if not r.has_interval else
                 f"lies inside the paired rounds' interval ({r.text('x')})" if not r.clear_of(m, "x")
                 else f"lies {'below' if r.clear_of(m, 'x') == 'above' else 'above'} the paired rounds' "
                 f"interval ({r.text('x')}), on the other side from the medians' saving")
        return (f"naive's step over bucketed's by the model, {m:.2f}x, {where}: this run does not tell the "
                "measured saving from the model's")

    @property
    def model_s(self) -> float:
        """The model's saving, s: ``alpha`` per call removed."""
        return self.extra_calls * self.alpha_s

    @property
    def per_call_s(self) -> float:
        """The measured saving per call removed, s (0 when no call was removed)."""
        return self.measured_s / self.extra_calls if self.extra_calls else 0.0

    def _copies(self, gap_s: float) -> str:
        both = 2 * self.copies_s  # the two processes' copies taking turns on one memory
        text = (f"The copies the model leaves out (every gradient into its bucket and back out, "
                f"{si(self.copy_bytes, 'B')} counted per process) take {si(self.copies_s, 's')} at the "
                f"fastest DRAM-sized copy measured, {si(both, 's')} if the two processes' copies take "
                "turns on one memory")
        return text + (f": {both / gap_s:.0%} of the {si(gap_s, 's')} gap even then." if both < gap_s
                       else f": enough to cover the {si(gap_s, 's')} gap.")

    def _calls(self) -> str:
        text = (f"Each of naive's {self.extra_calls} extra calls saved {si(self.per_call_s, 's')} by the "
                f"medians, against the model's alpha of {si(self.alpha_s, 's')}")
        lo, hi = self.sweep_low_s, self.sweep_high_s
        if lo is None or hi is None:
            return text + "."
        return (text + f"; the sweep's own calls at sizes up to the largest tensor "
                f"({si(self.largest_bytes, 'B')}) took {si(lo, 's')} to {si(hi, 's')} each"
                + (", so a call's cost at these sizes is not pinned to alpha" if lo < self.alpha_s < hi
                   else "") + ".")

    def _over(self) -> str:
        """A sentence where the model's naive communication alone exceeds the whole naive step, else ""."""
        m, naive = self.model_naive_s, self.bucketed_s + self.measured_s
        if m is None or m <= naive:
            return ""
        return (f" The model's communication alone for the naive step, {si(m, 's')}, exceeds the whole "
                f"measured naive step, {si(naive, 's')}, compute included: the model's absolute figures "
                "fail on this run's numbers; the verdict judges only its direction (naive at least "
                "bucketed).")

    def explain(self) -> str:
        """The measured saving against the model's, with what can and cannot account for the gap, and
        where the model's naive communication alone exceeds the whole naive step."""
        return self._explain() + self._over()

    def _explain(self) -> str:
        text = (f"The model's saving, {si(self.model_s, 's')}, against {si(self.measured_s, 's')} by "
                "the medians")
        if self.measured_s <= 0 or self.extra_calls == 0:
            return text + "."
        if not self.side():
            return text + "; " + self._inside() + ". " + self._calls()
        if self.side() == "above":
            return (text + ". The saving is larger than the model's. The copies the model leaves out "
                    "(every gradient into and out of the buckets) cannot explain that: only the bucketed "
                    "step pays them, so they shrink the saving. " + self._calls()
                    + " This run does not measure what naive's extra calls cost beyond alpha.")
        gap = self.model_s - self.measured_s
        return (text + f": {si(gap, 's')} less. " + self._copies(gap) + " " + self._calls()
                + " This run does not time the calls or the copies inside the step apart.")

    def short(self) -> str:
        """A clause for a summary: what the model charges, and what this run says of the gap."""
        m = self.model_naive_s
        text = f"the model charges each of naive's {self.extra_calls} extra calls alpha" + (
            f" (its naive communication alone, {si(m, 's')}, exceeds the whole naive step)"
            if m is not None and m > self.bucketed_s + self.measured_s else "")
        if self.measured_s > 0 and self.extra_calls and not self.side():  # a ratio given: see _inside
            r = self.ratio
            inside = r is not None and r.has_interval and not r.clear_of(self.model_ratio, "x")
            return text + ("; the paired rounds give no interval" if r is not None and not r.has_interval else
                           "; the model's ratio lies inside the paired rounds' interval" if inside else
                           "; the paired rounds and the medians put the saving on opposite sides of the "
                           "model's") + ": this run does not tell the measured saving from the model's"
        if self.measured_s <= 0 or self.side() == "above":
            return text
        gap, both = self.model_s - self.measured_s, 2 * self.copies_s
        return (text + f"; here each saved {si(self.per_call_s, 's')}, and the copies into buckets, "
                "which only the bucketed step pays, "
                + (f"cover {both / gap:.0%} of the gap at the fastest copy measured, the two processes "
                   "taking turns" if both < gap else "are enough to cover the gap"))


def bucket_saving(points: Sequence[CollectivePoint], fit: AlphaBeta, *, naive_calls: int, bucket_calls: int,
                  grad_bytes: float, largest_bytes: int, naive_s: float, bucketed_s: float,
                  copy_bytes_per_s: float, ratio: Estimate | None = None) -> BucketSaving:
    """Hold a bucketed step's measured saving over a naive one against the alpha-beta model's.

    Args:
        points: the all-reduce sweep the fit came from (its own points give a call's cost at the
            step's sizes).
        fit: the all-reduce fit: the model charges ``fit.alpha_s`` per call.
        naive_calls, bucket_calls: all-reduces per step of each (``naive_calls >= bucket_calls >= 1``).
        grad_bytes: the gradients' bytes (> 0).
        largest_bytes: the largest gradient tensor's bytes (>= 1).
        naive_s, bucketed_s: each step's median, s (> 0).
        copy_bytes_per_s: the copy rate the bucket copies are charged at, counted bytes (read +
            written) per second (> 0; :func:`perfkit.ceilings.dram_copy`).
        ratio: naive's step over bucketed's from paired rounds (``perfkit.stats.median_ratio``), or
            ``None``: given, the model is judged against its interval, not the medians alone.

    Returns:
        A :class:`BucketSaving`.

    Raises:
        TypeError, ValueError: for no points or one that is not a CollectivePoint, a ``fit``
            that is not an AlphaBeta, call counts below 1 or naive's below bucketed's, or a
            size, time or rate out of range.
    """
    items = check_items("points", points)
    pts = [check_type(f"points[{i}]", p, CollectivePoint) for i, p in enumerate(items)]
    check_type("fit", fit, AlphaBeta)
    check_int("bucket_calls", bucket_calls, 1)
    check_int("naive_calls", naive_calls, bucket_calls)
    check_real("grad_bytes", grad_bytes, 0, lo_open=True)
    check_int("largest_bytes", largest_bytes, 1)
    for name, v in (("naive_s", naive_s), ("bucketed_s", bucketed_s), ("copy_bytes_per_s", copy_bytes_per_s)):
        check_real(name, v, 0, lo_open=True)
    check_type("ratio", ratio, Estimate, optional=True)
    near = [p.time_s for p in pts if p.nbytes <= largest_bytes]  # s: the sweep's calls at the step's sizes
    copy_bytes = 4 * grad_bytes  # B: gradient read + bucket written, then bucket read + gradient written
    return BucketSaving(naive_calls - bucket_calls, fit.alpha_s, naive_s - bucketed_s, copy_bytes,
                        copy_bytes / copy_bytes_per_s, min(near, default=None), max(near, default=None),
                        largest_bytes, bucketed_s, ratio,
                        naive_calls * fit.alpha_s + grad_bytes / fit.bandwidth)  # s: the model's naive comm


def alone_against_model_text(alone_s: float, model_s: float, buckets: int) -> str:
    """A sentence (starting with a space) on the bucketed all-reduces timed alone against the
    alpha-beta model's figure for them: where they took over 1.1x the model, or under 1/1.1 of it
    (the model overcharges them on this run's numbers); ``""`` within that.

    Raises:
        ValueError: for a time that is not positive, or fewer than 1 bucket.
    """
    check_real("alone_s", alone_s, 0, lo_open=True)
    check_real("model_s", model_s, 0, lo_open=True)
    check_int("buckets", buckets, 1)
    x = alone_s / model_s
    if x > 1.1:
        return (f" Even timed alone they took {x:.2g}x the model: its fit repeated one size back to back, "
                f"these are {buckets} buckets of different sizes in a row; this run does not measure which "
                "difference costs the time.")
    if x < 1 / 1.1:
        return (f" Timed alone they took {x:.2g}x the model: on this run's numbers the model charges these "
                f"{buckets} calls more than they cost; it is not a floor they pay.")
    return ""


def _signed(x: float) -> str:
    """``"2.86 ms slower"``, ``"718 µs faster"``: a step-time difference, s."""
    return f"{si(abs(x), 's')} {'slower' if x >= 0 else 'faster'}"


def bucket_count_effect(buckets: Sequence[Mapping[str, float]], alpha_s: float,
                        hidden_s: float | None = None, hidden_said: str = "backward alone",
                        call_range_s: tuple[float, float] | None = None) -> str:
    """A sentence: most against fewest all-reduces per step, measured and by the model.

    The model's scope: each extra all-reduce pays ``alpha`` more in start-ups, and, given
    ``hidden_s``, more buckets let up to that much more communication run behind backward (one
    bucket starts only after backward is over; at most backward's own time can hide). So the
    step with more buckets is between ``(more - fewer) x alpha - hidden_s`` and
    ``(more - fewer) x alpha`` slower. It leaves out the copies into and out of the buckets, the
    all-reduces overlapping one another, and gloo's threads competing with backward for the cores.

    Caps that gave the same call count set the yardstick: their spread (the range of their medians,
    printed with its ratio; named a spread, not noise: identical bucket layouts can differ by the
    position or order in which they ran, which a fixed-order sweep does not separate). Against it:
    does the measured difference stand out (by more than twice it: the spread is the range of a few medians;
    between once and twice it the sentence says it is too close to call), and does the model's
    range lie within twice it of the measured difference (if not, the data reject the model, by the
    same margin a difference needs to stand out; a difference outside the range by less than the spread
    is called outside it, the spread too wide to judge, and by once to twice it, neither rejected nor
    confirmed). Where
    the spread is as large as the largest effect the model predicts, the run can test nothing,
    and the sentence says so instead of calling the model not rejected.

    Args:
        buckets: records with ``calls_per_step`` and ``step_s`` (one per cap).
        alpha_s: the fitted all-reduce latency, s (>= 0).
        hidden_s: the most communication more buckets can hide behind backward (backward timed
            alone), s (>= 0); ``None``: start-ups only.
        hidden_said: which reading of backward ``hidden_s`` is, as the sentence names it.
        call_range_s: the fastest and slowest small call the sweep measured, s (``None`` in it: not
            measured): the sentence also gives the start-ups at those costs per call (the judgement
            stays on ``alpha_s``).

    Raises:
        TypeError, ValueError: for no records, a record without those keys, or a negative
            ``alpha_s`` or ``hidden_s``.
    """
    recs = check_items("buckets", buckets)
    check_real("alpha_s", alpha_s, 0)
    if hidden_s is not None:
        check_real("hidden_s", hidden_s, 0)
    check_type("hidden_said", hidden_said, str)
    same: dict[int, list[float]] = {}
    for i, b in enumerate(recs):
        if not isinstance(b, Mapping) or not {"calls_per_step", "step_s"} <= set(b):
            raise TypeError(f"buckets[{i}] must be a mapping with 'calls_per_step' and 'step_s', got {b!r}")
        same.setdefault(int(b["calls_per_step"]), []).append(float(b["step_s"]))
    calls = sorted(same)
    extra = calls[-1] - calls[0]
    diff = min(same[calls[-1]]) - min(same[calls[0]])  # s: best cap of each count
    hi = extra * alpha_s  # s: the start-ups alone
    lo = hi - (hidden_s or 0.0) if extra else hi  # s: less all the overlap more buckets can add
    text = (f"{calls[-1]} against {calls[0]} all-reduce(s) per step: {_signed(diff)} measured (the fastest "
            f"cap of each count); by the model, {extra} x alpha ({si(alpha_s, 's')}) = {si(hi, 's')} more in "
            "start-ups")
    if call_range_s is not None and None not in call_range_s and extra:
        a, b = (check_real("call_range_s", x, 0) for x in call_range_s)
        text += (f" ({si(extra * a, 's')} to {si(extra * b, 's')} at the sweep's small calls, {si(a, 's')} "
                 f"to {si(b, 's')} each; the range below uses alpha)")
    if lo < hi:
        text += (f", less up to {si(hi - lo, 's')} that more buckets can hide behind backward ({hidden_said}"
                 f"): between {_signed(lo)} and {_signed(hi)}")
    noise = max((max(v) - min(v) for v in same.values() if len(v) > 1), default=None)
    if noise is None:
        return text + ("; no two caps share a count here, so this run does not show how far equal counts "
                       "spread.")
    stands = abs(diff) > 2 * noise
    pair = max((v for v in same.values() if len(v) > 1), key=lambda v: max(v) - min(v))  # the widest count
    text += (f"; caps with the same count ran up to {si(noise, 's')} apart (the slower "
             f"{max(pair) / min(pair):.2g}x the faster), a spread this run does not explain, so the measured "
             "difference "
             + ("stands out of that spread" if stands else "is within that spread"
                if abs(diff) <= noise else f"is only {abs(diff) / noise:.2g}x that spread: too close to "
                "it to call"))
    if stands and diff < 0:
        text += (": more all-reduces were faster, their overlap with backward outweighing the start-ups "
                 "(one huge bucket cannot start until backward is over)")
    gap = lo - diff if diff < lo else diff - hi if diff > hi else 0.0  # s: to the model's nearest end
    largest = max(abs(lo), abs(hi))  # s: the largest effect the model predicts
    if gap <= noise and noise >= largest:
        side = "below" if diff < lo else "above"
        where = f"{si(gap, 's')} {side} the model's range, less than that spread" if gap else "in its range"
        return text + (f". The measured difference lies {where}; the model's largest effect, "
                       f"{si(largest, 's')}, is within that spread too: this run can neither support the "
                       "model nor reject it.")
    if gap and gap <= noise:  # outside the model's range, by less than equal counts spread
        return text + (f". The measured difference lies outside the model's range, {si(gap, 's')} "
                       f"{'below' if diff < lo else 'above'} it, but equal counts spread further than that: "
                       "this run's spread is too wide to judge the model, neither rejecting nor confirming "
                       "it.")
    if noise < gap <= 2 * noise:  # past the spread, by less than a difference needs to stand out of it
        return text + (f". The model's range lies {si(gap, 's')} {'above' if diff < lo else 'below'} it, "
                       f"{gap / noise:.2f}x that spread: beyond it, but not twice it, the margin a "
                       "difference needs to stand out, so this run neither rejects the model nor confirms it"
                       + (", as it cannot call the measured difference itself." if not stands else "."))
    if gap <= noise:
        return text + (". The measured difference lies inside the model's range: the data do not reject it"
                       + (", and it stands out of the spread: they agree with it." if stands else
                          " (nor can they confirm it)."))
    why = ("which paid more per extra all-reduce than the sweep's alpha (inside a step each bucket also pays "
           "its copies in and out and a peer to wake)." if diff > hi else
           "whose all-reduces overlap backward and one another, so their start-ups do not add up."
           if hidden_s is None else
           "whose extra all-reduces cost less than their start-ups even with all the overlap backward "
           "allows: they also overlap one another, which the model does not count.")
    return text + (f". The model lies {si(gap, 's')} {'above' if diff < lo else 'below'} it, more than twice "
                   f"that spread: the data reject it for DDP's buckets, {why}")
