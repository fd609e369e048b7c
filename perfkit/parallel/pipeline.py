"""Pipeline parallelism from scratch: balanced stages, and a schedule executed with send/recv.

A model given as a flat list of layers is cut into consecutive stages, balanced by
parameter count or by each layer's measured forward + backward time (:func:`balance`,
:func:`layer_costs`). :func:`run_schedule` then runs one training step's share of a
:class:`perfkit.parallel.schedules.Schedule` on this process: activations go to the next
stage and gradients to the previous one with ``isend``/``irecv`` (a send never blocks; every
receive waits under a timeout, so a wrong order fails instead of hanging), the loss is taken
on the last stage over ``m`` micro-batches and divided by ``m``, so the gradients accumulated
in ``.grad`` are those of the unsplit model on the whole batch (Huang et al. 2019). A
zero-bubble schedule's ``I`` runs the backward once for everything but the ``nn.Linear``
weight gradients through the Linears' own calls, which its ``W`` computes from their inputs
and output gradients (Qi et al. 2023); a weight also used outside its module's call (tied
weights, ``F.linear(x, lin.weight)``) gets that part of its gradient in ``I``. Every tensor
sent is checked against ``act_shape``/``act_dtype`` before it leaves. It records
every action's start and end (one clock, ``CLOCK_MONOTONIC``, shared by the processes of a
machine) and the bytes autograd saved for backward (:class:`perfkit.memory.SavedTensorMeter`)
held at once: the activation memory a schedule costs, counted exactly.

Usage (on every pipeline rank, after ``opt.zero_grad()``)::

    stages = {s: mods[s] for s in range(sched.n_stages) if sched.rank_of(s) == pp_rank}
    rec = run_schedule(sched, stages, xs, ys, gpt_loss, act_shape=(b, t, c))   # collective
    opt.step()                                                # rec.slots, rec.peak_saved_bytes
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from perfkit._checks import (
    check_callable,
    check_choice,
    check_int,
    check_items,
    check_real,
    check_type,
)
from perfkit.memory.saved_tensors import SavedTensorMeter
from perfkit.parallel._split_backward import input_grads, tap_linears, untap, weight_grads
from perfkit.parallel.gpt import split_layers
from perfkit.parallel.schedules import Action, Schedule
from perfkit.timing import benchmark

__all__ = ["StepRecord", "average_gradients", "balance", "build_stages", "layer_costs",
           "run_schedule"]


def balance(costs: Sequence[float], n_stages: int) -> list[int]:
    """Cut ``costs`` (one per layer) into ``n_stages`` consecutive groups with the smallest
    largest sum, exactly (dynamic programming); ties go to earlier cuts.

    Returns:
        The number of layers in each stage (what :func:`perfkit.parallel.split_layers` takes).

    Raises:
        ValueError: for no costs, a negative or non-finite cost, or more stages than layers.
    """
    cs = [check_real(f"costs[{i}]", c, 0) for i, c in enumerate(check_items("costs", costs))]
    check_int("n_stages", n_stages, 1)
    n = len(cs)
    if n_stages > n:
        raise ValueError(f"n_stages ({n_stages}) cannot exceed the number of layers ({n}): "
                         "every stage needs at least one layer")
    prefix = [0.0]
    for c in cs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][i]: the smallest largest stage sum of the first i layers in k stages
    best = [[inf] * (n + 1) for _ in range(n_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, n_stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                v = max(best[k - 1][j], prefix[i] - prefix[j])
                if v < best[k][i] - 1e-12 * max(1.0, abs(v)):
                    best[k][i], cut[k][i] = v, j
    sizes, i = [], n
    for k in range(n_stages, 0, -1):
        sizes.append(i - cut[k][i])
        i = cut[k][i]
    return sizes[::-1]


def layer_costs(layers: Sequence[nn.Module], by: str = "params",
                sample: torch.Tensor | None = None, repeat: int = 5,
                warmup_passes: int = 1) -> list[float]:
    """A cost per layer: its parameter count, or its measured forward + backward seconds.

    A cold process runs its first passes slower (the allocator grows, fresh pages are touched,
    libraries set themselves up), and a layer timed first would be charged that where the
    later ones are not: with ``by="time"`` every layer's forward + backward first runs
    ``warmup_passes`` times, untimed, in model order, before any layer is timed.

    Args:
        layers: the model as a flat list (``GPT.layers()``).
        by: ``"params"`` (no run needed) or ``"time"`` (median of ``repeat`` timed runs of
            each layer on the activation that reaches it from ``sample``).
        sample: the first layer's input, needed for ``by="time"``.
        repeat: timed runs per layer for ``by="time"``.
        warmup_passes: untimed forward + backward passes through every layer before the
            timing (``by="time"``).

    Raises:
        ValueError: for an unknown ``by``, no layers, or ``by="time"`` without ``sample``.
    """
    layers = check_items("layers", layers)
    check_choice("by", by, ("params", "time"))
    if by == "params":
        return [float(sum(p.numel() for p in m.parameters())) for m in layers]
    if not isinstance(sample, torch.Tensor):
        raise ValueError("layer_costs(by='time') needs sample, the first layer's input tensor")
    check_int("repeat", repeat, 1)
    check_int("warmup_passes", warmup_passes, 0)
    for _ in range(warmup_passes):
        x = sample
        for m in layers:
            y = m(x.detach().requires_grad_(x.is_floating_point()))
            y.float().sum().backward()
            x = y.detach()
    for m in layers:
        m.zero_grad(set_to_none=True)
    out, x = [], sample
    for m in layers:
        inp = x.detach().requires_grad_(x.is_floating_point())

        def step(m: nn.Module = m, inp: torch.Tensor = inp) -> None:
            m(inp).float().sum().backward()

        out.append(benchmark(step, warmup=1, repeat=repeat).median_s)
        m.zero_grad(set_to_none=True)
        with torch.no_grad():
            x = m(x)
    return out


def build_stages(layers: Sequence[nn.Module], n_stages: int, by: str = "params",
                 sample: torch.Tensor | None = None) -> tuple[list[int], list[nn.Sequential]]:
    """Balance ``layers`` into ``n_stages`` stages (:func:`layer_costs`, :func:`balance`).

    Returns:
        ``(sizes, stages)``: layers per stage, and the stages as ``nn.Sequential``.

    Raises:
        ValueError: for more stages than layers, and the errors of :func:`layer_costs`.
    """
    sizes = balance(layer_costs(layers, by, sample), n_stages)
    return sizes, split_layers(layers, sizes)


@dataclass
class StepRecord:
    """What one rank did in :func:`run_schedule`.

    Attributes:
        losses: the last stage's loss per micro-batch (unscaled), in micro-batch order; empty
            on other ranks.
        slots: ``(kind, stage, mb, start_s, end_s)`` per action in the order run
            (``time.perf_counter``: one clock for all processes of a machine on Linux);
            a receive's wait is before ``start_s``, so it shows as bubble.
        saved_bytes: bytes autograd saved in each forward, by ``"stage.mb"`` (stage inputs
            included).
        peak_saved_bytes: the most of those bytes held at once on this rank.
    """

    losses: list[float] = field(default_factory=list)
    slots: list[tuple[str, int, int, float, float]] = field(default_factory=list)
    saved_bytes: dict[str, int] = field(default_factory=dict)
    peak_saved_bytes: int = 0


def _tag(kind: str, stage: int, mb: int, n_micro: int) -> int:
    """One tag per message: activations out of ``stage`` (even), gradients into it (odd)."""
    return 2 * (stage * n_micro + mb) + (kind == "grad")


def run_schedule(schedule: Schedule, stages: Mapping[int, nn.Module],
                 inputs: Sequence[torch.Tensor] | None,
                 targets: Sequence[torch.Tensor] | None,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
                 act_shape: Sequence[int], act_dtype: torch.dtype = torch.float32,
                 pp_ranks: Sequence[int] | None = None, timeout_s: float = 60.0,
                 count_memory: bool = True, group: dist.ProcessGroup | None = None) -> StepRecord:
    """Run this rank's actions of ``schedule``; gradients accumulate into the stages' ``.grad``.

    Every inter-stage tensor has shape ``act_shape`` and dtype ``act_dtype`` (a GPT's
    ``(b, T, C)`` hidden state); a stage output that differs raises on its rank before it is
    sent (a receiver would read a message of the wrong size), and the ranks waiting for it
    raise after ``timeout_s``, naming it. In a split schedule ``I`` runs the backward once for
    the input gradient, every weight's gradient but those through ``nn.Linear`` calls, and
    each call's output gradient; ``W`` is then the Linears' weight-gradient matmuls alone (Qi
    et al.'s split: ``I + W`` costs what ``B`` costs, and ``W`` holds the Linears' inputs and
    output gradients until it runs; :mod:`perfkit.parallel._split_backward`).

    Warning:
        Collective over ``pp_ranks``: every pipeline rank calls it for the same step.

    Args:
        schedule: the schedule (checked by the caller with
            :func:`perfkit.parallel.simulate.validate`).
        stages: the modules of the stages this rank holds, by global stage index.
        inputs, targets: the ``m`` micro-batches, needed on the first stage's rank
            (``inputs``) and on the last stage's (``targets``); ``None`` elsewhere. Pass
            contiguous copies: a view's whole storage counts as the stage's saved input.
        loss_fn: ``loss_fn(output, target)``, the mean loss of one micro-batch.
        act_shape, act_dtype: shape and dtype of the tensors sent between stages.
        pp_ranks: global ranks of pipeline ranks ``0..p-1`` (default: ``range(p)``), each
            a member of ``group``.
        timeout_s: how long any receive or send waits before raising.
        count_memory: count saved-for-backward bytes (a pack hook per saved tensor).
        group: the process group the messages travel in (default: WORLD); a receive that
            timed out leaves gloo's connections of that group closed.

    Returns:
        This rank's :class:`StepRecord`.

    Raises:
        TypeError, ValueError: for ``stages`` that are not exactly this rank's modules,
            inputs/targets missing or not ``m`` long where needed, ``pp_ranks`` that are not
            ``p`` distinct members of ``group`` including this process (a schedule needing
            more ranks than the group has), a bad ``act_shape``, ``act_dtype`` or
            ``timeout_s``; a stage output that is not ``act_shape``/``act_dtype``.
        RuntimeError: if a receive or send waits past ``timeout_s`` (naming the action and
            the peer).
    """
    check_type("schedule", schedule, Schedule)
    p, m, last = schedule.n_ranks, schedule.n_micro, schedule.n_stages - 1
    check_type("group", group, dist.ProcessGroup, optional=True)
    ranks = list(range(p)) if pp_ranks is None else [
        check_int(f"pp_ranks[{i}]", r, 0) for i, r in enumerate(check_items("pp_ranks", pp_ranks))]
    if len(ranks) != p or len(set(ranks)) != p or dist.get_rank() not in ranks:
        raise ValueError(f"pp_ranks must list {p} distinct global ranks (the schedule's "
                         f"n_ranks) including this one ({dist.get_rank()}), got {ranks}")
    me = ranks.index(dist.get_rank())
    mine = {s for s in range(schedule.n_stages) if schedule.rank_of(s) == me}
    if set(stages) != mine:
        raise ValueError(f"stages must hold exactly this rank's stages {sorted(mine)}, got "
                         f"{sorted(stages)}")
    for s, mod in stages.items():
        check_type(f"stages[{s}]", mod, nn.Module)
    for name, seq, stage in (("inputs", inputs, 0), ("targets", targets, last)):
        if stage in mine and (seq is None or len(seq) != m):
            raise ValueError(f"{name} must hold the {m} micro-batches on the rank of stage {stage}")
    if last in mine:
        check_callable("loss_fn", loss_fn)
    check_real("timeout_s", timeout_s, 0, lo_open=True)
    timeout = datetime.timedelta(seconds=timeout_s)
    shape = tuple(check_int(f"act_shape[{i}]", d, 1)
                  for i, d in enumerate(check_items("act_shape", act_shape)))
    check_type("act_dtype", act_dtype, torch.dtype)
    members = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    if not set(ranks) <= set(members):   # else a receive from a rank that is not there waits
        raise ValueError(f"the schedule needs {p} pipeline ranks {ranks}, but the group has "
                         f"only ranks {members}: pass pp_ranks within it, or a schedule for "
                         f"{len(members)} ranks")
    local: dict[tuple[str, int, int], torch.Tensor] = {}   # same-rank hand-over, no message
    sends: list[tuple[dist.Work, tuple]] = []
    held: dict[tuple[int, int], list] = {}   # (stage, mb) -> [input, output, bytes, taps]
    rec, now = StepRecord(), 0

    def needs(a: Action) -> tuple[str, int, int, int] | None:
        """The message ``a`` receives from another rank: (kind, key stage, mb, from stage)."""
        if a.kind == "F" and a.stage > 0 and schedule.rank_of(a.stage - 1) != me:
            return ("act", a.stage - 1, a.mb, a.stage - 1)
        if a.kind in ("B", "I") and a.stage < last and schedule.rank_of(a.stage + 1) != me:
            return ("grad", a.stage, a.mb, a.stage + 1)
        return None

    def prepost(i: int) -> None:
        """Post the receive of the next action that needs one, so that its transfer overlaps
        this action's compute (one buffer ahead, not m: 1F1B's memory bound still holds)."""
        for b in actions[i:]:
            msg = needs(b)
            if msg is not None:
                if msg[:3] not in pending:
                    kind, stage, mb, peer = msg
                    buf = torch.empty(shape, dtype=act_dtype)
                    pending[msg[:3]] = (buf, dist.irecv(buf, src=ranks[schedule.rank_of(peer)],
                                                        group=group, tag=_tag(kind, stage, mb, m)))
                return

    def peer(stage: int) -> str:
        return f"stage {stage} (global rank {ranks[schedule.rank_of(stage)]})"

    def fetch(kind: str, stage: int, mb: int, peer_stage: int, a: Action) -> torch.Tensor:
        if schedule.rank_of(peer_stage) == me:
            return local.pop((kind, stage, mb))
        buf, work = pending.pop((kind, stage, mb))
        try:
            work.wait(timeout)
        except RuntimeError as e:
            raise RuntimeError(f"pipeline rank {me}: {a} waited past timeout_s={timeout_s} s "
                               f"for its {kind} from {peer(peer_stage)}, which failed, "
                               f"hangs or sent nothing: {e}") from None
        return buf

    def post(kind: str, stage: int, mb: int, peer_stage: int, t: torch.Tensor | None,
             a: Action) -> None:
        if t is None:   # a stage that ignores its input: that input's gradient is zero
            t = torch.zeros(shape, dtype=act_dtype)
        if tuple(t.shape) != shape or t.dtype != act_dtype:
            raise ValueError(f"pipeline rank {me}: {a} would send {peer(peer_stage)} its {kind} "
                             f"of shape {tuple(t.shape)} and dtype {t.dtype}, but act_shape="
                             f"{shape} and act_dtype={act_dtype}: every tensor between stages "
                             f"must be act_shape and act_dtype")
        t = t.detach().contiguous()
        if schedule.rank_of(peer_stage) == me:
            local[(kind, stage, mb)] = t
        else:   # isend: the peer may not have reached its receive yet; never block on it
            sends.append((dist.isend(t, dst=ranks[schedule.rank_of(peer_stage)], group=group,
                                     tag=_tag(kind, stage, mb, m)), (kind, stage, mb, peer_stage)))

    actions = schedule.ranks[me]
    split = any(a.kind == "I" for a in actions)
    pending: dict[tuple[str, int, int], tuple[torch.Tensor, dist.Work]] = {}
    for i, a in enumerate(actions):
        s, j = a.stage, a.mb
        prepost(i)       # this action's receive, if not posted yet
        prepost(i + 1)   # and the next one's, to arrive while this one computes
        outgoing = None
        if a.kind == "F":
            x = inputs[j] if s == 0 else fetch("act", s - 1, j, s - 1, a).requires_grad_()
            t0 = time.perf_counter()
            meter = SavedTensorMeter(stages[s], inputs=[x]) if count_memory else None
            if meter:
                meter.__enter__()
            taps: list = []   # split backward: each Linear's (module, input, output) for W
            tapped = tap_linears(stages[s], taps) if split else []
            try:
                y = stages[s](x)
            finally:
                untap(tapped)
            if s == last:
                loss = loss_fn(y, targets[j])
                rec.losses.append(float(loss.detach()))
                y = loss / m   # the mean over micro-batches: the whole batch's mean loss
            if meter:
                meter.__exit__(None, None, None)
                r = meter.report()
                nbytes = r.activation_bytes + r.input_bytes
                rec.saved_bytes[f"{s}.{j}"] = nbytes
                now += nbytes
                rec.peak_saved_bytes = max(rec.peak_saved_bytes, now)
            held[(s, j)] = [x, y, rec.saved_bytes.get(f"{s}.{j}", 0), taps]
            if s < last:
                outgoing = ("act", s, j, s + 1, y)
        else:
            x, y, nbytes, _ = held[(s, j)]
            if a.kind in ("B", "I"):
                g = None if s == last else fetch("grad", s, j, s + 1, a)
                t0 = time.perf_counter()
                if a.kind == "B":
                    torch.autograd.backward(y, g)
                else:
                    held[(s, j)][3] = input_grads(stages[s], x if s > 0 else None, y, g,
                                                  held[(s, j)][3])
                if s > 0:
                    outgoing = ("grad", s - 1, j, s - 1, x.grad)
            else:
                t0 = time.perf_counter()
                weight_grads(held[(s, j)][3])
            if a.kind in ("B", "W"):
                now -= nbytes
                del held[(s, j)]
        # the end is read before the send: a peer may start on the message at once
        rec.slots.append((a.kind, s, j, t0, time.perf_counter()))
        if outgoing is not None:
            post(*outgoing, a)
    for w, (kind, stage, mb, peer_stage) in sends:
        try:
            w.wait(timeout)
        except RuntimeError as e:
            raise RuntimeError(f"pipeline rank {me}: the {kind} of micro-batch {mb} sent by "
                               f"stage {stage} waited past timeout_s={timeout_s} s for "
                               f"{peer(peer_stage)} to take it: {e}") from None
    return rec


def average_gradients(modules: Sequence[nn.Module], group: dist.ProcessGroup | None = None) -> None:
    """Average the ``.grad`` of every parameter of ``modules`` over ``group`` (data parallelism
    across pipeline replicas: each replica of a stage saw its own share of the batch).

    Warning:
        Collective over ``group``: every member calls it with the same stages' modules.

    Raises:
        TypeError: for a ``group`` that is not a process group, or ``modules`` not modules.
    """
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be None or a ProcessGroup, got {type(group).__name__}")
    modules = check_items("modules", modules)
    for mod in modules:
        if not isinstance(mod, nn.Module):
            raise TypeError(f"modules must hold nn.Modules, got {type(mod).__name__}")
    n = dist.get_world_size(group)
    for mod in modules:
        for q in mod.parameters():
            if q.grad is not None:
                dist.all_reduce(q.grad, group=group)
                q.grad.div_(n)
