"""Check and simulate a pipeline schedule: deadlocks, the grid, the bubble, the memory.

Each rank runs its actions in order; an action starts when the rank is free and its
dependencies (:func:`perfkit.parallel.schedules.dependencies`) have finished, plus a
point-to-point latency when a dependency ran on another rank. The result is a
:class:`Timeline`: every action's start and end per rank, where the gaps are the bubble;
the bubble's share of ``ranks x step time``; and the peak number of micro-batches whose
activations a rank holds at once (a forward adds one, the matching ``B`` or ``W`` frees it).
A measured run (:mod:`perfkit.parallel.pipeline`) gives a :class:`Timeline` of the same form,
so the model and the measurement are drawn and compared alike. Sends never block (the
executor posts them with ``isend``) unless ``blocking_sends`` asks for a rendezvous per
message, as blocking ``send``/``recv`` would: :func:`play` walks a schedule under these rules
and raises :class:`DeadlockError`, naming the ranks that wait on each other, for an order
that would hang; :func:`validate` checks the structure first. :func:`stage_costs` and
:func:`split_costs` turn layer times measured before a run into per-stage costs, so a cut's
uneven stages enter the prediction.

Usage::

    validate(one_f_one_b(4, 8))                            # raises if it would hang
    tl = simulate(one_f_one_b(4, 8), costs={"F": 1, "B": 1})
    print(tl.bubble_share, bubble_formula("1f1b", 4, 8))   # 3/11 both
    print(tl.text())                                       # the grid; '.' is the bubble
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from perfkit._checks import check_choice, check_int, check_items, check_real
from perfkit.parallel.schedules import KINDS, SCHEDULES, Action, Schedule, dependencies

__all__ = ["DEFAULT_COSTS", "DeadlockError", "Slot", "Timeline", "bubble_formula",
           "execution_order", "peak_in_flight", "play", "simulate", "split_costs", "stage_costs",
           "timeline_from", "validate"]

# backward about twice the forward (two matmuls per weight against one); I and W half each
DEFAULT_COSTS = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}


@dataclass(frozen=True)
class Slot:
    """One action on one rank, from ``start`` to ``end`` (simulated units or seconds)."""

    action: Action
    start: float
    end: float


def peak_in_flight(row: Sequence[Action]) -> int:
    """The most (stage, micro-batch) activations one rank holds at once, running ``row`` in order.

    A forward saves a micro-batch's activations; its ``B`` (or, split, its ``W``: the weight
    gradient still needs the layer inputs) frees them. With ``v`` virtual stages per rank the
    count is in chunks, each ``1/v`` of the rank's layers: divide by ``v`` for micro-batches of
    a whole stage (interleaved 1F1B at ``p = 4``, ``m = 8``: 11 chunks, 5.5 micro-batches).

    Raises:
        TypeError: if ``row`` holds something other than :class:`Action` s.
    """
    held = peak = 0
    for a in row:
        if not isinstance(a, Action):
            raise TypeError(f"row must hold Actions, got {type(a).__name__}")
        held += 1 if a.kind == "F" else -1 if a.kind in ("B", "W") else 0
        peak = max(peak, held)
    return peak


@dataclass(frozen=True)
class Timeline:
    """Per-rank slots of a schedule, simulated or measured.

    Attributes:
        schedule: what ran.
        slots: ``slots[r]`` is rank ``r``'s :class:`Slot` s in the order they ran.
    """

    schedule: Schedule
    slots: tuple[tuple[Slot, ...], ...]

    @property
    def start(self) -> float:
        """The first action's start."""
        return min(row[0].start for row in self.slots if row)

    @property
    def makespan(self) -> float:
        """From the first action's start to the last one's end."""
        return max(row[-1].end for row in self.slots if row) - self.start

    def busy(self, rank: int) -> float:
        """Time rank ``rank`` spent in actions."""
        return sum(s.end - s.start for s in self.slots[rank])

    @property
    def bubble_share(self) -> float:
        """Idle share of ``n_ranks x makespan``: ``1 - busy / (p * makespan)``."""
        total = self.makespan * len(self.slots)
        return 1.0 - sum(self.busy(r) for r in range(len(self.slots))) / total if total else 0.0

    @property
    def peak_in_flight(self) -> tuple[int, ...]:
        """Per rank, the most (stage, micro-batch) activations held at once, in chunks of
        ``1/n_virtual`` of a rank's layers (:func:`peak_in_flight`)."""
        return tuple(peak_in_flight([s.action for s in row]) for row in self.slots)

    def text(self, dt: float | None = None) -> str:
        """The grid as text: a cell per ``dt`` (default: the shortest action), the action
        running at its middle (``F3`` = forward of micro-batch 3; ``F3:1`` on stage 1 with
        virtual stages), ``.`` where the rank idles: the bubble.

        Raises:
            ValueError: for a ``dt`` that is not a finite number > 0, or one that would draw
                more than 2,000 cells per rank.
        """
        durations = [s.end - s.start for row in self.slots for s in row if s.end > s.start]
        dt = check_real("dt", dt if dt is not None else min(durations, default=1.0), 0, lo_open=True)
        n = math.ceil(self.makespan / dt - 1e-9)
        if n > 2000:
            raise ValueError(f"dt={dt} draws {n} cells per rank; at most 2000 are allowed")
        v = self.schedule.n_virtual

        def label(a: Action) -> str:
            return f"{a.kind}{a.mb}" + (f":{a.stage}" if v > 1 else "")

        width = max((len(label(s.action)) for row in self.slots for s in row), default=2)
        lines = []
        for r, row in enumerate(self.slots):
            cells = []
            for i in range(n):
                t = self.start + (i + 0.5) * dt
                hit = next((s for s in row if s.start <= t < s.end), None)
                cells.append((label(hit.action) if hit else ".").ljust(width))
            lines.append(f"rank {r}: " + " ".join(cells))
        return "\n".join(lines)


class DeadlockError(RuntimeError):
    """A schedule whose order would hang: ``waits`` maps each stuck rank to
    ``(its next action, the action it waits for, the rank that owes it)``."""

    def __init__(self, message: str, waits: dict[int, tuple[Action, Action, int]]) -> None:
        super().__init__(message)
        self.waits = waits




def validate(schedule: Schedule, blocking_sends: bool = False) -> None:
    """Check a schedule's structure and that its order runs to the end without hanging.

    Every ``(stage, mb)`` has one ``F`` and either one ``B`` or one ``I`` and one ``W``, each
    on the rank that holds the stage, after what it depends on on that rank; then
    :func:`execution_order` plays it across ranks (with ``blocking_sends``, as blocking
    ``send``/``recv`` pairs would run it: 1F1B then hangs unless sends and receives are paired).

    Raises:
        TypeError: if ``schedule`` is not a :class:`Schedule`.
        ValueError: naming the first missing, repeated, misplaced or out-of-range action.
        DeadlockError: for an order that would hang.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    seen: dict[Action, int] = {}
    for r, row in enumerate(schedule.ranks):
        for a in row:
            if a.stage >= schedule.n_stages or a.mb >= schedule.n_micro:
                raise ValueError(f"rank {r}: {a} is out of range (stages < {schedule.n_stages}, "
                                 f"micro-batches < {schedule.n_micro})")
            if schedule.rank_of(a.stage) != r:
                raise ValueError(f"rank {r}: {a} belongs to rank {schedule.rank_of(a.stage)}")
            if a in seen:
                raise ValueError(f"rank {r}: {a} appears twice")
            for d in dependencies(schedule, a):
                if schedule.rank_of(d.stage) == r and d not in seen:
                    raise ValueError(f"rank {r}: {a} comes before {d}, which it needs")
            seen[a] = r
    for s in range(schedule.n_stages):
        for j in range(schedule.n_micro):
            kinds = "".join(k for k in KINDS if Action(k, s, j) in seen)
            if kinds not in ("FB", "FIW"):
                missing = "B (or I and W)" if kinds == "F" else ("F" if "F" not in kinds else kinds)
                raise ValueError(f"stage {s}, micro-batch {j}: has {kinds or 'no action'}, needs "
                                 f"F and B, or F, I and W (missing or mixed: {missing})")
    execution_order(schedule, blocking_sends)


def _consumer(schedule: Schedule, a: Action) -> Action | None:
    """The action on another rank that receives ``a``'s output (activation or gradient)."""
    r = schedule.rank_of(a.stage)
    if a.kind == "F" and a.stage < schedule.n_stages - 1 and schedule.rank_of(a.stage + 1) != r:
        return Action("F", a.stage + 1, a.mb)
    if a.kind in ("B", "I") and a.stage > 0 and schedule.rank_of(a.stage - 1) != r:
        row = schedule.ranks[schedule.rank_of(a.stage - 1)]
        split = any(b.kind == "I" and b.stage == a.stage - 1 for b in row)
        return Action("I" if split else "B", a.stage - 1, a.mb)
    return None


def play(schedule: Schedule, cost: Callable[[Action], float] | None = None, latency: float = 0.0,
         blocking_sends: bool = False) -> list[tuple[int, Action, float, float]]:
    """Play the schedule: each rank runs its next action once its inputs have arrived.

    With ``blocking_sends`` a rank that produced a message for another rank waits, before its
    next action, until that rank has reached the action that receives it (a rendezvous, as a
    blocking ``send`` does); otherwise sends never block (``isend``, as the executor does).

    Args:
        schedule: the schedule.
        cost: seconds (or units) per action; default 1 each.
        latency: added between an action and a dependent one on another rank.
        blocking_sends: model sends as blocking rendezvous.

    Returns:
        ``(rank, action, start, end)`` in an order in which they can run.

    Raises:
        TypeError, ValueError: for a ``schedule`` that is not a :class:`Schedule`, or a bad
            ``latency``.
        DeadlockError: when no rank can move and some have not finished; the message names
            each stuck rank, its next action (or the send it blocks in) and what it waits for.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    check_real("latency", latency, 0)
    cost = cost or (lambda a: 1.0)
    rows, n = schedule.ranks, schedule.n_ranks
    heads, free = [0] * n, [0.0] * n
    end: dict[Action, float] = {}
    arrive: dict[Action, float] = {}             # when an output reached its consumer's rank
    sending: list[tuple | None] = [None] * n      # (action, consumer, its rank, ready time)
    out: list[tuple[int, Action, float, float]] = []

    def ready(r: int, d: Action) -> bool:
        return d in end and (schedule.rank_of(d.stage) == r or d in arrive)

    progressed = True
    while progressed:
        progressed = False
        for r in range(n):
            while True:
                if sending[r] is not None:
                    a, c, q, t = sending[r]
                    if sending[q] is not None or heads[q] >= len(rows[q]) or rows[q][heads[q]] != c:
                        break   # the receiver has not posted its receive yet
                    arrive[a] = free[r] = max(t, free[q])
                    sending[r], progressed = None, True
                    continue
                if heads[r] >= len(rows[r]):
                    break
                a = rows[r][heads[r]]
                deps = dependencies(schedule, a)
                if not all(ready(r, d) for d in deps):
                    break
                t0 = max([free[r]] + [end[d] if schedule.rank_of(d.stage) == r else arrive[d] + latency
                                      for d in deps])
                end[a] = free[r] = t0 + cost(a)
                out.append((r, a, t0, end[a]))
                heads[r] += 1
                progressed = True
                c = _consumer(schedule, a)
                if c is not None and blocking_sends:
                    sending[r] = (a, c, schedule.rank_of(c.stage), end[a])
                elif c is not None:
                    arrive[a] = end[a]
    waits, lines = {}, []
    for r in range(n):
        if sending[r] is not None:
            a, c, q, _ = sending[r]
            waits[r] = (a, c, q)
            lines.append(f"rank {r} blocks sending {a}'s output until rank {q} reaches {c}")
        elif heads[r] < len(rows[r]):
            a = rows[r][heads[r]]
            d = next(d for d in dependencies(schedule, a) if not ready(r, d))
            waits[r] = (a, d, schedule.rank_of(d.stage))
            lines.append(f"rank {r} waits at {a} for {d} (rank {schedule.rank_of(d.stage)})")
    if waits:
        raise DeadlockError("deadlock: " + "; ".join(lines), waits)
    return out


def execution_order(schedule: Schedule, blocking_sends: bool = False) -> list[tuple[int, Action]]:
    """``(rank, action)`` pairs in an order in which they can run (:func:`play` without times).

    Raises:
        DeadlockError: for an order that would hang (see :func:`play`).
    """
    return [(r, a) for r, a, _, _ in play(schedule, blocking_sends=blocking_sends)]


def _cost_fn(costs: Mapping[str, float] | Callable[[Action], float]) -> Callable[[Action], float]:
    if callable(costs):
        return costs
    if not isinstance(costs, Mapping):
        raise TypeError(f"costs must be a mapping of kind to cost or a callable, got "
                        f"{type(costs).__name__}")
    for k, c in costs.items():
        check_choice("costs key", k, KINDS)
        check_real(f"costs[{k!r}]", c, 0)
    table = {**DEFAULT_COSTS, **costs}
    return lambda a: table[a.kind]


def simulate(schedule: Schedule, costs: Mapping[str, float] | Callable[[Action], float] | None = None,
             latency: float = 0.0, blocking_sends: bool = False) -> Timeline:
    """Run ``schedule`` on paper with per-action ``costs`` and a point-to-point ``latency``.

    Args:
        schedule: a :class:`Schedule`.
        costs: ``{"F": tf, "B": tb, "I": ti, "W": tw}`` (missing kinds from
            :data:`DEFAULT_COSTS`), or a callable ``action -> cost`` (per-stage costs, say).
        latency: added between an action and a dependent one on another rank.
        blocking_sends: sends as rendezvous (see :func:`play`).

    Returns:
        The :class:`Timeline`.

    Raises:
        TypeError, ValueError: for bad ``costs`` (negative, NaN, unknown kind) or ``latency``.
        DeadlockError: if the order would hang.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    cost = _cost_fn(DEFAULT_COSTS if costs is None else costs)
    check_real("latency", latency, 0)
    slots: list[list[Slot]] = [[] for _ in range(schedule.n_ranks)]
    for r, a, t0, t1 in play(schedule, lambda a: check_real(f"cost of {a}", cost(a), 0), latency,
                             blocking_sends):
        slots[r].append(Slot(a, t0, t1))
    return Timeline(schedule, tuple(map(tuple, slots)))


def stage_costs(layer_s: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """Each stage's seconds, the sum of its layers' (``sizes``: layers per stage, in order).

    A cut of whole layers rarely splits evenly; with :func:`split_costs` the simulator predicts
    that cut's bubble from layer times measured before the schedule runs
    (:func:`perfkit.parallel.pipeline.layer_costs`), where the formula assumes equal stages.

    Raises:
        TypeError, ValueError: for a time not >= 0, a stage of no layers, or sizes that do
            not add up to the layers.
    """
    xs = [check_real(f"layer_s[{i}]", x, 0) for i, x in enumerate(check_items("layer_s", layer_s))]
    ns = [check_int(f"sizes[{i}]", n, 1) for i, n in enumerate(check_items("sizes", sizes))]
    if sum(ns) != len(xs):
        raise ValueError(f"sizes add up to {sum(ns)} layers, but layer_s holds {len(xs)}")
    return [float(sum(xs[sum(ns[:s]):sum(ns[:s + 1])])) for s in range(len(ns))]


def split_costs(stage_s: Sequence[float], shares: Mapping[str, float] | None = None
                ) -> Callable[[Action], float]:
    """``action -> seconds`` for :func:`simulate`: each stage's forward + backward seconds
    split among the kinds in ``shares``' proportions to ``F + B`` (default :data:`DEFAULT_COSTS`:
    ``F`` a third of a stage, ``B`` two thirds, ``I`` and ``W`` a third each).

    Raises:
        TypeError, ValueError: for a stage time not >= 0, an unknown kind, a share not >= 0,
            or ``F + B`` not > 0.
    """
    cs = [check_real(f"stage_s[{i}]", x, 0) for i, x in enumerate(check_items("stage_s", stage_s))]
    table = dict(DEFAULT_COSTS)
    for k, v in (shares or {}).items():
        check_choice("shares key", k, KINDS)
        table[k] = check_real(f"shares[{k!r}]", v, 0)
    whole = check_real("shares F + B", table["F"] + table["B"], 0, lo_open=True)
    return lambda a: cs[a.stage] * table[a.kind] / whole


def timeline_from(schedule: Schedule, measured: Sequence[Sequence[Sequence]]) -> Timeline:
    """A :class:`Timeline` from measured ``(kind, stage, mb, start_s, end_s)`` rows, one list per rank
    (what :func:`perfkit.parallel.pipeline.run_schedule` records, gathered from every rank).

    Raises:
        ValueError: if the rows do not match the schedule's actions rank by rank, or an end
            precedes its start.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    if len(measured) != schedule.n_ranks:
        raise ValueError(f"measured must hold one list per rank ({schedule.n_ranks}), got {len(measured)}")
    slots = []
    for r, rows in enumerate(measured):
        got = [Slot(Action(k, s, j), float(t0), float(t1)) for k, s, j, t0, t1 in rows]
        if [x.action for x in got] != list(schedule.ranks[r]):
            raise ValueError(f"rank {r}: the measured actions differ from the schedule's")
        if any(x.end < x.start for x in got):
            raise ValueError(f"rank {r}: an action ends before it starts")
        slots.append(tuple(got))
    return Timeline(schedule, tuple(slots))


def bubble_formula(name: str, n_ranks: int, n_micro: int, n_virtual: int = 1) -> float:
    """The textbook bubble share of a step with unit costs.

    ``(p - 1) / (m + p - 1)`` for GPipe and 1F1B (Huang et al. 2019; Narayanan et al. 2021),
    ``(p - 1) / (v m + p - 1)`` for interleaved 1F1B (each stage is ``1/v`` of a rank's
    layers), ``(p - 1) / (3 m + p - 1)`` for ZB-H1 with equal ``F``, ``I`` and ``W``.

    Raises:
        ValueError: for an unknown ``name`` or counts that are not ints >= 1.
    """
    check_choice("name", name, SCHEDULES)
    p, m, v = (check_int(k, x, 1) for k, x in (("n_ranks", n_ranks), ("n_micro", n_micro),
                                              ("n_virtual", n_virtual)))
    per_mb = {"gpipe": 1, "1f1b": 1, "interleaved": v, "zb_h1": 3}[name]
    return (p - 1) / (per_mb * m + p - 1)
