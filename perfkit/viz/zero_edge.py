"""The step-time edge of notebook 05: how long a perfkit ZeRO stage's step should take over
DDP + AdamW's, built only from times the same job measured before any ratio is taken, and the
collective calls it charges (re-exported by :mod:`perfkit.viz.zero`).

Usage::

    more = gloo_calls_per_step(zero1, 2) - calls_per_step(ddp)   # calls beyond DDP's, as gloo runs them
    e = stage_edge(1, ddp, more, t_link, t_call, 2)
    print(e.edge, e.text())                             # the most ZeRO-1's step should take over DDP's
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfkit._checks import check_int, check_real, check_type
from perfkit.viz.core import si

__all__ = ["StageEdge", "after_backward_edge", "broadcast_sentence", "call_cost", "calls_per_step",
           "gloo_calls_note", "gloo_calls_per_step", "other_edge_text", "stage_edge"]


def calls_per_step(r: Any) -> int:
    """Collective calls of one step (rank 0): each is a rendezvous of every process."""
    return sum((r.calls or {}).values())


def gloo_calls_per_step(r: Any, world_size: int) -> int:
    """Collective calls of one step (rank 0) as gloo runs them: each list-form ``reduce_scatter``
    (what :func:`perfkit.parallel.flat.reduce_scatter_flat` calls on gloo) is one all-reduce per
    rank (PyTorch pull request 149869), so it counts ``world_size`` calls, each with its own fixed
    cost; every other call counts one (gloo's single-tensor reduce-scatter all-reduces the whole
    buffer once, pull request 118911). :func:`calls_per_step` counts the calls as made.

    Raises:
        ValueError, TypeError: ``world_size`` is not an int >= 1.
    """
    check_int("world_size", world_size, 1)
    return sum(k * (world_size if name == "reduce_scatter" else 1) for name, k in (r.calls or {}).items())


def gloo_calls_note(r: Any, world_size: int) -> str:
    """A clause, starting with ", ", saying how :func:`gloo_calls_per_step` counted ``r``'s
    list-form reduce-scatters (``world_size`` all-reduces each); ``""`` where it makes none."""
    check_int("world_size", world_size, 1)
    k = (r.calls or {}).get("reduce_scatter", 0)
    if not k:
        return ""
    which = "its reduce-scatter" if k == 1 else f"each of its {k} reduce-scatters"
    return (f", {which} counted as the {world_size} all-reduces, one per rank's slice, that gloo runs "
            "for the list form perfkit calls there")



_LONE_CALL = "a 4-byte all-reduce's"  # StageEdge.call_how for a charge of one call timed alone


def _factor(x: float, above: float = 1.0) -> str:
    """A per-byte factor above ``above`` printed with the decimals it takes not to read as
    ``above``: 3.3 prints "3.3x", 1.007 prints "1.007x" (at one decimal it would read as the rate
    already charged); with ``above=2``, 2.04 prints "2.04x" (beside a sentence on twice the rate,
    "2.0x" would read as that rate)."""
    d = next((d for d in (1, 2, 3) if float(f"{x:.{d}f}") > above), 4)
    return f"{x:.{d}f}x"


@dataclass(frozen=True)
class StageEdge:
    """The most a perfkit ZeRO stage's step should take over DDP + AdamW's, and its parts (s).

    Attributes:
        stage: 1, 2 or 3.
        ddp_s: DDP + AdamW's median step.
        bytes_s: the parameter all-gathers the stage waits for, where DDP's overlap does not
            cover them, each half an all-reduce's bytes: stages 1-2 all-gather the updated
            parameters after the step, and the next forward waits for them (one); stage 3
            all-gathers each block in forward and again in backward (two).
        calls: collective calls per step beyond DDP's; ``call_s`` the time charged to each
            (described by ``call_how``).
        update_saved_s: the ``(N - 1) / N`` of AdamW's update a rank no longer runs.
        call_how: what ``call_s`` is, as a phrase before its value.
        link_s, lone_s: the gradient's all-reduce and a 4-byte all-reduce, each timed alone,
            from which ``bytes_s`` was taken (half their difference per all-gather); ``None``
            where not given.
        calls_note: how ``calls`` was counted, a clause printed after it (:func:`gloo_calls_note`).
        all_reduces: for stage 1 communicating after the whole backward (:func:`after_backward_edge`),
            the all-reduces' worth of bytes it moves there, all charged unhidden (``bytes_s``); 0 for
            the stages built by :func:`stage_edge`, whose reduce-scatters overlap backward.
    """

    stage: int
    ddp_s: float
    bytes_s: float
    calls: int
    call_s: float
    update_saved_s: float
    call_how: str = _LONE_CALL
    link_s: float | None = None
    lone_s: float | None = None
    calls_note: str = ""
    all_reduces: float = 0.0

    @property
    def edge(self) -> float:
        """The step-time ratio over DDP + AdamW's the model allows at most."""
        return 1 + (self.bytes_s + self.calls * self.call_s - self.update_saved_s) / self.ddp_s

    def text(self) -> str:
        """The edge as a sum of its measured parts."""
        gather = ("half an all-reduce's bytes all-gathered after the step" if self.stage < 3 else
                  "half an all-reduce's bytes all-gathered in forward, and as many again in backward")
        times = "twice half" if self.stage == 3 else "half"
        if self.all_reduces:
            gather = f"{self.all_reduces:.2f} all-reduces' bytes moved after the whole backward"
            times = f"{self.all_reduces:.2f} x"
        how = ("" if self.link_s is None or self.lone_s is None else
               f"{times}{'' if self.all_reduces else ' of'} (the gradient's all-reduce, "
               f"{si(self.link_s, 's')}, less a 4-byte call's {si(self.lone_s, 's')}, its latency "
               "charged with the calls): ")
        return (f"DDP + AdamW's step ({si(self.ddp_s, 's')}), plus {gather} ({how}{si(self.bytes_s, 's')}), "
                f"plus {self.calls} calls{self.calls_note}, at {self.call_how} "
                f"{si(self.call_s, 's')} ({si(self.calls * self.call_s, 's')}), less the share of AdamW's "
                f"update a rank no longer runs ({si(self.update_saved_s, 's')}): at most {self.edge:.4f}x")

    def beyond(self, ratio: float, listed_in: str | None = None) -> str:
        """What a measured step ratio over DDP's leaves beyond the edge's parts, in seconds and
        as a share of the step's growth (a share only where both are positive). The growth is
        ``(ratio - 1)`` times DDP's median step, named as such: it is not a difference of the
        two medians, which can differ from it. ``listed_in``: the verdict that already lists
        what the model leaves out; that list is then pointed to rather than repeated."""
        check_real("ratio", ratio, 0, lo_open=True)
        grew, charged = (ratio - 1) * self.ddp_s, (self.edge - 1) * self.ddp_s  # s over DDP's step
        how = "The median of the paired ratios, less 1, times DDP's median step"
        said = (f"{how}: the step grew by {si(grew, 's')} over DDP's" if grew >= 0 else
                f"{how}: the step was {si(-grew, 's')} shorter than DDP's")
        net = f"{si(charged, 's')}" if charged >= 0 else f"a net saving of {si(-charged, 's')}"
        if grew <= charged:
            return said + f", within the edge's {net}."
        rest = grew - charged
        left = round(100 * rest / grew)  # %: the two shares printed add up to 100
        share = f" ({left}% of that growth)" if charged >= 0 else ""
        told = f" ({100 - left}%: the share of that growth the model explains)" if charged >= 0 else ""
        alone = ("" if self.call_how == _LONE_CALL else
                 "calls waited for alone rather than in flight together (up to a lone call's time each), ")
        parts = (f"the parts the {listed_in} verdict lists" if listed_in else
                 f"copies into and out of flat buffers, Python hooks, {alone}and gloo's threads slowing the "
                 "compute they share the cores with")
        return (said + f"; the edge charges {net} of it{told}, and the other {si(rest, 's')}{share} is what "
                f"the model leaves out: {parts}{self._gather_candidate(rest)}; this run does not time them "
                "apart.")

    def _gather_candidate(self, rest: float) -> str:
        """A clause naming the all-gathers' price as a candidate for ``rest`` (s): the edge
        charges each at the all-reduce's time per byte, and what per-byte factor would
        explain all of ``rest``; where that factor exceeds 2, also how much of ``rest`` twice
        the all-reduce's time per byte would explain, so that a reader can set notebook 03's
        printed factor against it. ``""`` where the edge charges no all-gather bytes."""
        gather_s = self.bytes_s / (2 * self.all_reduces) if self.all_reduces else self.bytes_s  # s
        if gather_s <= 0:
            return ""
        n = "its two all-gathers" if self.stage == 3 else "its all-gather"
        twice = ("" if gather_s >= rest else
                 f"at twice the all-reduce's time per byte it would explain {si(gather_s, 's')} "
                 f"({round(100 * gather_s / rest)}%) of the {si(rest, 's')}; ")
        return (f"; and the price of {n}, charged at the all-reduce's time per byte "
                f"({si(gather_s, 's')}), though notebook 03 timed gloo's all-gather slower per byte "
                "than its all-reduce (one large call, not these buckets, so a candidate, not a finding; it "
                f"prints its factor): {twice}at {_factor(1 + rest / gather_s, 2.0 if twice else 1.0)} the "
                f"all-reduce's time per byte it would explain all of the {si(rest, 's')}")

    def digits(self, est: Any) -> str:
        """A sentence, starting with a space, giving the edge and ``est``'s interval (a step
        ratio, ``low`` and ``high``) to four decimals, where at two they print alike and a
        reader could not see which side of the edge the interval lies; ``""`` otherwise."""
        ends = (est.low, est.high)
        if not any(f"{x:.2f}" == f"{self.edge:.2f}" for x in ends):
            return ""
        return (f" The edge is {self.edge:.4f}x, the interval {est.low:.4f}x to {est.high:.4f}x "
                "(to four decimals: at two they read alike).")

    def against_plain(self, plain: StageEdge, plain_name: str = "perfkit", name: str = "zero1") -> str:
        """A sentence, starting with a space, on how this stage 1 or 2 edge and ``plain``'s (the same
        algorithm communicating after the whole backward, :func:`after_backward_edge`) differ. Both
        are built by one rule (DDP's step, plus the bytes the step waits for, plus the calls beyond
        DDP's at one charge each, less the update a rank no longer runs), so they differ only in the
        bytes charged unhidden and in the calls counted. ``""`` for stage 3, which is not the same
        algorithm.

        Raises:
            TypeError: ``plain`` is not a :class:`StageEdge`.
        """
        check_type("plain", plain, StageEdge)
        if self.stage == 3:
            return ""
        return (f" {name}'s edge ({self.edge:.4f}x) and {plain_name}'s ({plain.edge:.4f}x) are built by one "
                "rule: DDP's step, plus the bytes the step waits for, plus the calls beyond DDP's, less the "
                f"update a rank no longer runs ({si(self.update_saved_s, 's')} in both). They differ in "
                f"what the step waits for: {plain_name} all {plain.all_reduces:.2f} all-reduces' bytes "
                f"({si(plain.bytes_s, 's')}), as it communicates after the whole backward; {name} only the "
                f"all-gather after the step ({si(self.bytes_s, 's')}), as its reduce-scatters run during "
                f"backward and are taken as hidden as DDP's all-reduce; and in their calls, {plain.calls} "
                f"against {self.calls}{self.calls_note} ({si(plain.calls * plain.call_s, 's')} against "
                f"{si(self.calls * self.call_s, 's')}).")

    def interleave_note(self) -> str:
        """A sentence, starting with a space, on what rounds that interleave the variants can hide.

        Stages 1 and 2 all-gather after the step, asynchronously: in interleaved rounds the
        other variants' steps run before this one's next forward waits, so the all-gather (the
        edge's ``bytes_s``) can finish behind them, leaving this variant's time and, with gloo's
        threads on the same cores, landing in theirs, the baseline's included. Both lower the
        ratio over DDP's. Stage 3 waits for its all-gathers inside its own step.
        """
        if self.stage == 3:
            return (" Its all-gathers are waited for inside its own step, so interleaving the variants "
                    "cannot move them into another variant's time.")
        return (" In these interleaved rounds its all-gather after the step (charged "
                f"{si(self.bytes_s, 's')}, {self.bytes_s / self.ddp_s:.1%} of DDP's step) can finish behind "
                "the other variants' steps, DDP's included, on the cores they compute on: that would leave "
                "this step shorter and theirs longer, so this ratio can read low, by an amount this run does "
                "not measure.")


def call_cost(tz: Any, ddp: Any, ratio: float, link_s: float, call_s: float, world_size: int) -> float:
    """The most each of ``tz``'s collective calls beyond ``ddp``'s can cost, by
    :func:`stage_edge`'s rules, given ``ratio``, the median of ``tz``'s paired step ratios over
    ``ddp``'s: its step's excess over DDP's, ``(ratio - 1)`` times DDP's median step (the rule
    :meth:`StageEdge.beyond` sizes a step's growth by), less its extra bytes (half an all-reduce's:
    PyTorch's ``ZeroRedundancyOptimizer`` broadcasts each shard from its owner), plus the
    ``(N - 1) / N`` of AdamW's update it no longer runs, shared among its extra calls; clipped to
    ``[0, call_s]``.

    Calls issued together overlap their fixed costs (``ZeroRedundancyOptimizer._sync_params``
    issues every broadcast with ``async_op=True`` and then waits on them all), so this is the
    per-call charge for calls in flight together, where ``call_s`` (one call timed alone, the
    processes' arrival spread included) is what a lone call pays. Without extra calls, ``call_s``.

    Args:
        tz: the variant's result (``calls``).
        ddp: DDP + AdamW's result (``step_s``, ``update_s``, s; ``calls``).
        ratio: the median of ``tz``'s paired step ratios over ``ddp``'s (> 0).
        link_s: one all-reduce of the gradient's bytes, timed alone, s (> 0).
        call_s: one 4-byte all-reduce, timed alone, s (>= 0).
        world_size: processes (>= 2).
    """
    check_real("ratio", ratio, 0, lo_open=True)
    check_real("link_s", link_s, 0, lo_open=True)
    check_real("call_s", call_s, 0)
    check_int("world_size", world_size, 2)
    extra = calls_per_step(tz) - calls_per_step(ddp)
    if extra <= 0:
        return call_s
    left = ((ratio - 1) * ddp.step_s - 0.5 * max(link_s - call_s, 0.0)
            + (world_size - 1) / world_size * ddp.update_s)  # s: the excess the model leaves to the calls
    return min(max(left / extra, 0.0), call_s)


def broadcast_sentence(tz: Any, ddp: Any, n_tensors: int, per_call_s: float, call_s: float) -> str:
    """What PyTorch's ``ZeroRedundancyOptimizer`` (``tz``, built with its defaults) does beyond
    DDP per step, from its counted calls, and what each extra call cost at most
    (``per_call_s``, from :func:`call_cost`) against one call timed alone (``call_s``)."""
    b, extra = (tz.calls or {}).get("broadcast", 0), calls_per_step(tz) - calls_per_step(ddp)
    n, nb = calls_per_step(tz), calls_per_step(ddp)
    text = (f"{n} collective calls per step against DDP + AdamW's {nb}: after DDP's all-reduce it makes "
            f"{b} broadcasts, one per parameter tensor (the model has {n_tensors}), each from the tensor's "
            "owner; one per tensor because `parameters_as_bucket_view` defaults to False (True sends one "
            "flat buffer per process). It issues them all asynchronously and then waits for them together, "
            "so their fixed costs can overlap")
    if extra <= 0:
        return text + "."
    if per_call_s < call_s:
        return text + (f": its step leaves at most {si(per_call_s, 's')} per extra call (the median of its "
                       "paired ratios, less 1, times DDP's median step, once its extra bytes are charged "
                       "and the update it no longer runs is taken off, shared among those calls), against "
                       f"{si(call_s, 's')} for one 4-byte all-reduce timed alone.")
    return text + (f"; here its step leaves each extra call as much as one 4-byte all-reduce timed alone "
                   f"({si(call_s, 's')}) or more, so this run does not show that overlap.")


def _checked(ddp: Any, calls: int, link_s: float, call_s: float, world_size: int,
             per_call_s: float | None, calls_note: str) -> str:
    """Checks the arguments :func:`stage_edge` and :func:`after_backward_edge` share; returns how
    the calls are charged (``StageEdge.call_how``)."""
    check_int("calls", calls, 0)
    check_real("link_s", link_s, 0, lo_open=True)
    check_real("call_s", call_s, 0)
    check_int("world_size", world_size, 2)
    check_type("calls_note", calls_note, str)
    check_real("ddp.step_s", getattr(ddp, "step_s", None), 0, lo_open=True)
    check_real("ddp.update_s", getattr(ddp, "update_s", None), 0)
    if per_call_s is None:
        return _LONE_CALL
    check_real("per_call_s", per_call_s, 0)
    return "the most torch_zero's step leaves a call in flight with others (section 2),"


def after_backward_edge(ddp: Any, all_reduces: float, calls: int, link_s: float, call_s: float,
                        world_size: int, per_call_s: float | None = None, calls_note: str = "") -> StageEdge:
    """:func:`stage_edge`'s rule for ZeRO stage 1 communicating after the whole backward (perfkit's
    ``ZeroOptimizer(overlap=False)`` used alone): every byte it moves is charged unhidden,
    ``all_reduces`` all-reduces' worth (1 where its reduce-scatter and all-gather move a ring's
    bytes; 1.5 on gloo, whose reduce-scatter all-reduces), each at the gradient's all-reduce less a
    4-byte call's time; the calls beyond DDP's and the update a rank no longer runs as there.

    Args:
        all_reduces: all-reduces' worth of bytes moved after backward (> 0); the others as
            :func:`stage_edge`'s.

    Returns:
        A :class:`StageEdge` at stage 1 whose ``all_reduces`` is set.

    Raises:
        TypeError, ValueError: for an argument outside those ranges.
    """
    check_real("all_reduces", all_reduces, 0, lo_open=True)
    how = _checked(ddp, calls, link_s, call_s, world_size, per_call_s, calls_note)
    return StageEdge(1, ddp.step_s, all_reduces * max(link_s - call_s, 0.0), calls,
                     call_s if per_call_s is None else per_call_s,
                     (world_size - 1) / world_size * ddp.update_s, how, link_s, call_s, calls_note,
                     all_reduces)


def stage_edge(stage: int, ddp: Any, calls: int, link_s: float, call_s: float, world_size: int,
               per_call_s: float | None = None, calls_note: str = "") -> StageEdge:
    """The step-time edge of perfkit's ZeRO ``stage`` over DDP + AdamW, from times measured
    in the same rounds: an expectation, not a bound.

    Stages 1 and 2 reduce-scatter during backward, as DDP all-reduces (taken as hidden as
    DDP's), then all-gather the updated slices after the step, which the next forward waits
    for: half an all-reduce's bytes, charged unhidden. Stage 3 waits for two parameter
    all-gathers on the critical path, in forward (in place of stages 1-2's after the step) and
    again in backward: each half an all-reduce's bytes, both charged unhidden by the same rule.
    Every call beyond DDP's is charged ``per_call_s`` (calls in flight together, from
    :func:`call_cost`) or, without it, a 4-byte all-reduce's time alone (a lone call's own cost),
    and none is hidden; a rank updates ``1 / N`` of the parameters, so ``(N - 1) / N`` of AdamW's update is
    taken off. Per-block copies and Python hooks are not in it.

    Args:
        stage: 1, 2 or 3.
        ddp: DDP + AdamW's result (``step_s`` and ``update_s``, s; a
            :class:`perfkit.jobs.zero_bench.VariantResult`).
        calls: collective calls per step beyond DDP's (>= 0).
        link_s: one all-reduce of the gradient's bytes, timed alone, s (> 0).
        call_s: one 4-byte all-reduce, timed alone, s (>= 0).
        world_size: processes (>= 2).
        per_call_s: the charge per extra call, s (>= 0), if not ``call_s``.
        calls_note: how ``calls`` was counted, printed after it (:func:`gloo_calls_note`: on gloo
            count ``calls`` with :func:`gloo_calls_per_step`, whose list-form reduce-scatter is
            ``world_size`` all-reduces, each paying its own fixed cost).

    Returns:
        A :class:`StageEdge`.

    Raises:
        TypeError, ValueError: for an argument outside those ranges, or a ``ddp`` without a
            positive ``step_s`` and a ``update_s`` >= 0.
    """
    check_int("stage", stage, 1, 3)
    how = _checked(ddp, calls, link_s, call_s, world_size, per_call_s, calls_note)
    gathers = 2 if stage == 3 else 1  # parameter all-gathers a step waits for
    return StageEdge(stage, ddp.step_s, gathers * 0.5 * max(link_s - call_s, 0.0), calls,
                     call_s if per_call_s is None else per_call_s,
                     (world_size - 1) / world_size * ddp.update_s, how, link_s, call_s, calls_note)


def other_edge_text(est: Any, edge: float, what: str) -> str:
    """A sentence, starting with a space, on where a ratio's median and interval lie against an
    edge that ``what`` would give, not the one judged: the verdict stays as judged.

    Args:
        est: the judged step-time ratio (an ``Estimate``: ``value``, ``clear_of``, ``label``).
        edge: the other edge, x.
        what: what the other edge adds, as a phrase after "With" ("that half charged too").

    Raises:
        ValueError: ``edge`` is not a finite number above 0, or ``what`` is empty.
    """
    check_real("edge", edge, 0, lo_open=True)
    if not isinstance(what, str) or not what:
        raise ValueError(f"what must say what the other edge adds, got {what!r}")
    v = est.value
    side = "below" if v < edge else "above" if v > edge else "at"
    whole = {"above": "lies above it", "below": "lies below it"}.get(est.clear_of(edge, "x"), "holds it")
    return (f" With {what}, the edge would be {edge:.4f}x: the median of the paired ratios ({v:.4f}x) lies "
            f"{side} it, and its {est.label} {whole}; the verdict stays judged against the edge recorded "
            "before the run.")
