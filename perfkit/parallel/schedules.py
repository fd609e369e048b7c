"""Pipeline schedules as data: per-rank lists of actions, built, checked and printed.

A pipeline cuts a model into ``n_stages`` consecutive stages; stage ``s`` lives on rank
``s % n_ranks`` (with ``v = n_stages / n_ranks`` virtual stages per rank, the looping
placement of Megatron-LM's interleaved schedule, Narayanan et al. 2021). An :class:`Action`
is one piece of work on one micro-batch at one stage: ``F`` (forward), ``B`` (whole
backward), or, for zero-bubble schedules (Qi et al. 2023), ``I`` (gradient of the stage's
input, which the previous stage waits for) and ``W`` (gradient of its weights, which nobody
waits for). A :class:`Schedule` is the order in which each rank runs its actions; the same
object is printed, checked and simulated (:mod:`perfkit.parallel.simulate`: ``validate``,
``play``, ``simulate``) and executed (:mod:`perfkit.parallel.pipeline`).

Dependencies between actions: ``F(s, j)`` needs ``F(s-1, j)``; ``B(s, j)`` and ``I(s, j)``
need ``F(s, j)`` and the input gradient of ``(s+1, j)`` (its ``B`` or ``I``); ``W(s, j)``
needs ``I(s, j)``.

Usage::

    sched = one_f_one_b(n_ranks=4, n_micro=8)
    print(sched.text())                   # one line of actions per rank
    deps = dependencies(sched, Action("B", 1, 0))   # [F1.0, B2.0]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from perfkit._checks import check_choice, check_int, check_items

__all__ = ["KINDS", "SCHEDULES", "Action", "Schedule", "dependencies", "gpipe",
           "interleaved_1f1b", "make_schedule", "one_f_one_b", "parse_actions", "zb_h1"]

KINDS = ("F", "B", "I", "W")
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb_h1")


@dataclass(frozen=True, order=True)
class Action:
    """One piece of work: ``kind`` (F, B, I or W) of micro-batch ``mb`` at stage ``stage``.

    Raises:
        ValueError: for an unknown ``kind`` or a negative ``stage``/``mb``.
    """

    kind: str
    stage: int
    mb: int

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)
        check_int("stage", self.stage, 0)
        check_int("mb", self.mb, 0)

    def __str__(self) -> str:
        return f"{self.kind}{self.stage}.{self.mb}"


@dataclass(frozen=True)
class Schedule:
    """The order of every rank's actions.

    Attributes:
        name: what built it (``"gpipe"``, ``"1f1b"``, ...; free text for a hand-written one).
        n_ranks: pipeline ranks ``p``.
        n_stages: stages ``p * v``; stage ``s`` runs on rank ``s % n_ranks``.
        n_micro: micro-batches ``m`` per step.
        ranks: ``ranks[r]`` is rank ``r``'s actions, in the order it runs them.

    Raises:
        ValueError, TypeError: for counts that are not ints >= 1, ``n_stages`` not a
            multiple of ``n_ranks``, or ``ranks`` not ``n_ranks`` lists of :class:`Action`.
            (:func:`perfkit.parallel.simulate.validate` checks the order itself.)
    """

    name: str
    n_ranks: int
    n_stages: int
    n_micro: int
    ranks: tuple[tuple[Action, ...], ...]

    def __post_init__(self) -> None:
        check_int("n_ranks", self.n_ranks, 1)
        check_int("n_stages", self.n_stages, 1)
        check_int("n_micro", self.n_micro, 1)
        if self.n_stages % self.n_ranks:
            raise ValueError(f"n_stages ({self.n_stages}) must be a multiple of n_ranks "
                             f"({self.n_ranks}): every rank holds the same number of stages")
        rows = check_items("ranks", self.ranks)
        if len(rows) != self.n_ranks:
            raise ValueError(f"ranks must hold one list per rank ({self.n_ranks}), got {len(rows)}")
        fixed = []
        for r, row in enumerate(rows):
            acts = tuple(check_items(f"ranks[{r}]", row, nonempty=False))
            for a in acts:
                if not isinstance(a, Action):
                    raise TypeError(f"ranks[{r}] must hold Actions, got {type(a).__name__}")
            fixed.append(acts)
        object.__setattr__(self, "ranks", tuple(fixed))

    @property
    def n_virtual(self) -> int:
        """Stages per rank ``v``."""
        return self.n_stages // self.n_ranks

    def rank_of(self, stage: int) -> int:
        """The rank that holds ``stage``."""
        return stage % self.n_ranks

    def text(self) -> str:
        """One line per rank: ``rank 0: F0.0 F0.1 B0.0 ...`` (kind, stage, micro-batch)."""
        return "\n".join(f"rank {r}: " + " ".join(map(str, row)) for r, row in enumerate(self.ranks))

    def __str__(self) -> str:
        return (f"{self.name}: p={self.n_ranks}, v={self.n_virtual}, m={self.n_micro}\n"
                + self.text())


def _sizes(n_ranks: int, n_micro: int) -> None:
    check_int("n_ranks", n_ranks, 1)
    check_int("n_micro", n_micro, 1)


def gpipe(n_ranks: int, n_micro: int) -> Schedule:
    """All-forward-all-backward (GPipe, Huang et al. 2019): every forward, then every backward.

    Each rank holds the activations of all ``n_micro`` micro-batches at its peak.
    """
    _sizes(n_ranks, n_micro)
    rows = [[Action("F", r, j) for j in range(n_micro)] + [Action("B", r, j) for j in range(n_micro)]
            for r in range(n_ranks)]
    return Schedule("gpipe", n_ranks, n_ranks, n_micro, tuple(map(tuple, rows)))


def one_f_one_b(n_ranks: int, n_micro: int) -> Schedule:
    """1F1B (PipeDream-Flush, Narayanan et al. 2021): rank ``r`` runs ``p - r - 1`` warm-up
    forwards, then alternates one forward and one backward, then drains the backwards.

    The same bubble as GPipe, but a rank holds at most ``p - r`` micro-batches' activations.

    Raises:
        ValueError: if ``n_micro < n_ranks`` (the warm-up alone would not fill the pipe).
    """
    _sizes(n_ranks, n_micro)
    if n_micro < n_ranks:
        raise ValueError(f"1F1B needs n_micro >= n_ranks, got n_micro={n_micro} < "
                         f"n_ranks={n_ranks}; use gpipe for fewer micro-batches")
    rows = []
    for r in range(n_ranks):
        warm = n_ranks - r - 1
        row = [Action("F", r, j) for j in range(warm)]
        for j in range(n_micro - warm):
            row += [Action("F", r, warm + j), Action("B", r, j)]
        row += [Action("B", r, j) for j in range(n_micro - warm, n_micro)]
        rows.append(tuple(row))
    return Schedule("1f1b", n_ranks, n_ranks, n_micro, tuple(rows))


def interleaved_1f1b(n_ranks: int, n_micro: int, n_virtual: int) -> Schedule:
    """Interleaved 1F1B (Narayanan et al. 2021) with ``v = n_virtual`` stages per rank.

    Megatron-LM's order: micro-batches go through a rank's chunks in groups of ``p``;
    rank ``r`` warms up with ``2 (p - r - 1) + (v - 1) p`` forwards. Each stage does ``1/v`` of
    a rank's layers, so the bubble shrinks ``v``-fold: ``(p - 1) / (v m + p - 1)`` of the step
    with unit costs, at the price of ``v`` times more point-to-point messages. With
    ``v = 1`` it is :func:`one_f_one_b` (Megatron-LM falls back to it too).

    Raises:
        ValueError: if ``n_virtual < 1``, or ``n_micro`` is not a multiple of ``n_ranks``
            (the groups of ``p`` would not close).
    """
    _sizes(n_ranks, n_micro)
    check_int("n_virtual", n_virtual, 1)
    if n_virtual == 1:
        return one_f_one_b(n_ranks, n_micro)
    if n_micro % n_ranks:
        raise ValueError(f"interleaved 1F1B needs n_micro a multiple of n_ranks, got "
                         f"n_micro={n_micro}, n_ranks={n_ranks}")
    p, v = n_ranks, n_virtual
    total = n_micro * v

    def act(kind: str, r: int, k: int) -> Action:
        group, within = divmod(k, p * v)
        chunk = within // p if kind == "F" else v - 1 - within // p
        return Action(kind, chunk * p + r, group * p + within % p)

    rows = []
    for r in range(p):
        warm = min(2 * (p - r - 1) + (v - 1) * p, total)
        row = [act("F", r, k) for k in range(warm)]
        for i in range(total - warm):
            row += [act("F", r, warm + i), act("B", r, i)]
        row += [act("B", r, k) for k in range(total - warm, total)]
        rows.append(tuple(row))
    return Schedule("interleaved", p, p * v, n_micro, tuple(rows))


def zb_h1(n_ranks: int, n_micro: int) -> Schedule:
    """ZB-H1 (Qi et al. 2023): 1F1B with backward split into ``I`` and ``W``.

    Rank ``r`` runs 1F1B's order of ``F`` and ``I``, each ``I`` followed by a ``W``, except
    that rank ``r`` lags its ``W`` s by ``r`` micro-batches and drains them at the end: the
    later a stage, the sooner its input gradients reach the earlier stages, which fill the
    drain where 1F1B idles. With unit cost for ``F``, ``I`` and ``W`` the bubble is ``p - 1``
    slots per rank instead of 1F1B's ``3 (p - 1)``, and no rank holds more than ``p``
    micro-batches (1F1B's peak; ``W`` still needs the activations).

    Raises:
        ValueError: if ``n_micro < n_ranks``.
    """
    _sizes(n_ranks, n_micro)
    if n_micro < n_ranks:
        raise ValueError(f"ZB-H1 needs n_micro >= n_ranks, got n_micro={n_micro} < "
                         f"n_ranks={n_ranks}")
    rows = []
    for r in range(n_ranks):
        warm = n_ranks - r - 1
        row = [Action("F", r, j) for j in range(warm)]
        for j in range(n_micro):
            if j < n_micro - warm:
                row.append(Action("F", r, warm + j))
            row.append(Action("I", r, j))
            if j >= r:   # W of micro-batch j - r: rank r lags its weight gradients by r
                row.append(Action("W", r, j - r))
        row += [Action("W", r, j) for j in range(max(n_micro - r, 0), n_micro)]
        rows.append(tuple(row))
    return Schedule("zb_h1", n_ranks, n_ranks, n_micro, tuple(rows))


def make_schedule(name: str, n_ranks: int, n_micro: int, n_virtual: int = 1) -> Schedule:
    """Build a schedule by name: one of :data:`SCHEDULES`.

    Raises:
        ValueError: for an unknown ``name``, ``n_virtual != 1`` for a schedule without
            virtual stages, and the builders' own errors.
    """
    check_choice("name", name, SCHEDULES)
    check_int("n_virtual", n_virtual, 1)
    if name == "interleaved":
        return interleaved_1f1b(n_ranks, n_micro, n_virtual)
    if n_virtual != 1:
        raise ValueError(f"n_virtual must be 1 for {name!r} (only 'interleaved' has virtual "
                         f"stages), got {n_virtual}")
    return {"gpipe": gpipe, "1f1b": one_f_one_b, "zb_h1": zb_h1}[name](n_ranks, n_micro)


def dependencies(schedule: Schedule, action: Action) -> list[Action]:
    """The actions that must finish before ``action`` can start (see the module docstring).

    The input gradient of stage ``s + 1`` is its ``B``, or its ``I`` in a split schedule.

    Raises:
        TypeError: if ``schedule`` is not a :class:`Schedule` or ``action`` not an :class:`Action`.
        ValueError: for an action of a stage or micro-batch the schedule does not have.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    if not isinstance(action, Action):
        raise TypeError(f"action must be an Action, got {type(action).__name__}")
    s, j, last = action.stage, action.mb, schedule.n_stages - 1
    if s > last or j >= schedule.n_micro:
        raise ValueError(f"action {action} is outside the schedule (stages < {schedule.n_stages}, "
                         f"micro-batches < {schedule.n_micro})")
    if action.kind == "F":
        return [Action("F", s - 1, j)] if s > 0 else []
    if action.kind == "W":
        return [Action("I", s, j)]
    deps = [Action("F", s, j)]
    if s < last:
        split = any(a.kind == "I" and a.stage == s + 1 for a in schedule.ranks[schedule.rank_of(s + 1)])
        deps.append(Action("I" if split else "B", s + 1, j))
    return deps


def parse_actions(items: Iterable[str | Sequence]) -> tuple[Action, ...]:
    """Actions from ``"F0.1"`` strings or ``(kind, stage, mb)`` triples (for hand-written orders).

    Raises:
        ValueError: for a string not of the form ``<kind><stage>.<mb>``.
        TypeError: for an item that is neither a string nor a ``(kind, stage, mb)`` triple.
    """
    out = []
    for it in check_items("items", items, nonempty=False):
        if isinstance(it, str):
            try:
                stage, mb = it[1:].split(".")
                out.append(Action(it[:1], int(stage), int(mb)))
            except ValueError:
                raise ValueError(f"an action string looks like 'F0.1' (kind, stage, micro-batch), "
                                 f"got {it!r}") from None
        elif isinstance(it, Sequence) and len(it) == 3:
            out.append(Action(*it))
        else:
            raise TypeError(f"items must hold 'F0.1' strings or (kind, stage, mb) triples, "
                            f"got {it!r}")
    return tuple(out)
