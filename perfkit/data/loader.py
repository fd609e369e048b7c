"""How long a training loop waits for a ``DataLoader``: measurements and the model that predicts them.

:func:`measure_loader` runs a loop over a ``DataLoader`` built from a
:class:`LoaderConfig` and times each step's wait for data and its compute (a
:class:`LoaderRecord`); :func:`simulate_pipeline` predicts the same waits from the load and
compute times, following how ``torch.utils.data`` hands batches to workers and back (a
:class:`PipelineRecord`). Notebook 07 puts the two side by side.

Usage::

    from perfkit.data.loader import LoaderConfig, measure_loader, simulate_pipeline
    rec = measure_loader(dataset, LoaderConfig(batch_size=32, num_workers=2), compute=0.02)
    sim = simulate_pipeline(load_s=0.05, compute_s=0.02, workers=2)  # compare wait shares
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from perfkit._checks import check_callable, check_choice, check_int, check_real, check_type
from perfkit.data.prefetch import END
from perfkit.timing import Timer

__all__ = ["LoaderConfig", "LoaderRecord", "PipelineRecord", "beyond_model", "handoff_part", "measure_loader",
           "simulate_pipeline"]

@dataclass(frozen=True)
class LoaderConfig:
    """The ``DataLoader`` knobs notebook 07 turns.

    ``prefetch_factor`` None means torch's default (2); ``start_method`` None means the
    platform's default way to start workers (``"fork"`` on Linux; ``"spawn"``, which
    re-imports torch in every worker, on macOS and Windows).
    """

    batch_size: int = 32
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    start_method: str | None = None

    def __post_init__(self) -> None:
        check_int("batch_size", self.batch_size, 1)
        check_int("num_workers", self.num_workers, 0)
        if self.prefetch_factor is not None:
            check_int("prefetch_factor", self.prefetch_factor, 1)
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor):
            raise ValueError("persistent_workers and prefetch_factor need num_workers >= 1")
        if self.pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory=True needs CUDA (pinned memory is for DMA to a GPU)")
        check_choice("start_method", self.start_method, (None, "fork", "spawn", "forkserver"))
        if self.start_method is not None and self.num_workers == 0:
            raise ValueError("start_method needs num_workers >= 1")

    def loader(self, dataset: Dataset, collate_fn: Callable | None = None) -> DataLoader:
        """A ``DataLoader`` over ``dataset`` with these settings (no shuffling).

        Raises:
            TypeError: if ``dataset`` is neither indexable nor iterable, or ``collate_fn``
                is not callable.
        """
        if not hasattr(dataset, "__getitem__") and not isinstance(dataset, Iterable):
            raise TypeError(f"dataset must be a map-style or iterable dataset, got "
                            f"{type(dataset).__name__}")
        check_callable("collate_fn", collate_fn, optional=True)
        return DataLoader(dataset, batch_size=self.batch_size, num_workers=self.num_workers,
                          pin_memory=self.pin_memory, persistent_workers=self.persistent_workers,
                          prefetch_factor=self.prefetch_factor, collate_fn=collate_fn,
                          multiprocessing_context=self.start_method)


@dataclass(frozen=True)
class LoaderRecord:
    """Per-step host seconds blocked in ``next(loader)`` and in compute, per epoch."""

    config: LoaderConfig
    wait_s: tuple[tuple[float, ...], ...]
    compute_s: tuple[tuple[float, ...], ...]
    samples: int

    @property
    def steps(self) -> int:
        return sum(len(w) for w in self.wait_s)

    @property
    def wall_s(self) -> float:
        """Seconds of the loops, worker start-up included."""
        return sum(map(sum, self.wait_s)) + sum(map(sum, self.compute_s))

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s

    @property
    def wait_share(self) -> float:
        """Share of the loop's time spent waiting for data (start-up included)."""
        return sum(map(sum, self.wait_s)) / self.wall_s

    @property
    def startup_s(self) -> float:
        """Mean wait for each epoch's first batch: worker start-up plus one batch."""
        return sum(w[0] for w in self.wait_s) / len(self.wait_s)

    @property
    def steady_wait_share(self) -> float:
        """Wait share without each epoch's first step (worker start-up, first batch)."""
        wait = sum(sum(w[1:]) for w in self.wait_s)
        rest = self.wall_s - sum(w[0] + c[0] for w, c in zip(self.wait_s, self.compute_s))
        return wait / rest if rest > 0 else 0.0

    @property
    def steady_step_s(self) -> float:
        """Mean seconds per step without each epoch's first step."""
        rest = [w + c for ws, cs in zip(self.wait_s, self.compute_s)
                for w, c in list(zip(ws, cs))[1:]]
        return sum(rest) / len(rest) if rest else self.wall_s / self.steps


def measure_loader(dataset: Dataset, config: LoaderConfig,
                   compute: float | Callable[[Any], object] = 0.0, epochs: int = 1,
                   max_steps: int | None = None, collate_fn: Callable | None = None
                   ) -> LoaderRecord:
    """Run a loop over a ``DataLoader`` and time each step's wait for data and compute.

    Args:
        dataset: map-style or iterable dataset.
        config: the loader's settings; one ``DataLoader`` serves every epoch, so
            ``persistent_workers`` keeps its processes between epochs.
        compute: seconds slept per step (a GPU step: the host's cores stay free for the
            loader) or a callable run on each batch (a CPU step: it competes with the
            workers for cores; synchronise inside it if it runs on a GPU).
        epochs: passes (>= 1); each starts a new iterator, as a training loop does.
        max_steps: steps per epoch at most.
        collate_fn: passed to the ``DataLoader``.

    Returns:
        A :class:`LoaderRecord` (host wall-clock seconds, through :class:`perfkit.timing.Timer`).

    Raises:
        TypeError, ValueError: for a ``config`` that is not a :class:`LoaderConfig`, bad
            counts, a ``compute`` that is neither a callable nor a finite number of seconds
            >= 0, or a dataset that yields no batch.
    """
    check_type("config", config, LoaderConfig)
    check_int("epochs", epochs, 1)
    if max_steps is not None:
        check_int("max_steps", max_steps, 1)
    if not callable(compute):
        check_real("compute", compute, 0)
    step = compute if callable(compute) else (lambda _: time.sleep(compute))
    loader = config.loader(dataset, collate_fn)
    waits, computes, samples = [], [], 0
    for _ in range(epochs):
        w: list[float] = []
        c: list[float] = []
        with Timer("cpu") as t:
            it = iter(loader)  # starts the workers (unless persistent and started)
        start_s = t.elapsed_s
        while max_steps is None or len(w) < max_steps:
            with Timer("cpu") as t:
                batch = next(it, END)
            if batch is END:
                break
            w.append(t.elapsed_s + (start_s if not w else 0.0))
            with Timer("cpu") as t:
                step(batch)
            c.append(t.elapsed_s)
            leaf = batch if isinstance(batch, torch.Tensor) else next(iter(
                batch.values() if isinstance(batch, Mapping) else batch))
            samples += len(leaf)
        del it  # shuts non-persistent workers down before the next epoch starts
        waits.append(tuple(w))
        computes.append(tuple(c))
    if not samples:  # an empty record: its rates would divide by zero
        raise ValueError("dataset must yield at least one sample, got none")
    return LoaderRecord(config, tuple(waits), tuple(computes), samples)


@dataclass(frozen=True)
class PipelineRecord:
    """A simulated loop: per-step waits and the settings that produced them (seconds)."""

    load_s: float
    compute_s: float
    workers: int
    depth: int
    wait_s: tuple[float, ...] = field(repr=False)
    step_s: float = 0.0  # mean seconds per step

    @property
    def wait_share(self) -> float:
        """Share of the loop spent waiting for data, the first batch included."""
        return sum(self.wait_s) / (self.step_s * len(self.wait_s)) if self.step_s else 0.0

    @property
    def steady_wait_share(self) -> float:
        """Wait share without the first step (compare with :class:`LoaderRecord`'s)."""
        rest = self.step_s * len(self.wait_s) - self.wait_s[0] - self.compute_s
        return sum(self.wait_s[1:]) / rest if rest > 0 else 0.0

    @property
    def steady_step_s(self) -> float:
        """Mean seconds per step without the first step."""
        n = len(self.wait_s)
        if n == 1:
            return self.step_s
        return (self.step_s * n - self.wait_s[0] - self.compute_s) / (n - 1)

    @property
    def batches_per_s(self) -> float:
        return 1.0 / self.step_s if self.step_s else math.inf  # free loads, no compute


def simulate_pipeline(load_s: float, compute_s: float, workers: int = 0, depth: int = 2,
                      steps: int = 200, jitter: float = 0.0, cores: int | None = None,
                      handoff_s: float = 0.0, seed: int = 0,
                      loads: Sequence[float] | None = None) -> PipelineRecord:
    """Predict a ``DataLoader`` loop: ``workers`` loaders, in-order delivery, a step each.

    The model follows ``torch.utils.data``: batch ``i`` goes to worker ``i % workers``; at
    most ``depth * workers`` batches (``prefetch_factor * num_workers``) are requested
    ahead, one more each time the loop receives one; the loop takes batches in order.
    ``workers=0`` loads in the loop itself (step = load + compute). A thread
    :class:`perfkit.data.Prefetcher` of queue size ``d`` is close to ``workers=1, depth=d + 1``.

    Args:
        load_s: seconds to load one batch (per-sample cost x batch size).
        compute_s: seconds of compute per step.
        workers: loader processes (0: in the loop).
        depth: batches requested ahead per worker (>= 1).
        steps: simulated steps (>= 1).
        jitter: coefficient of variation of each load (log-normal), 0 for constant loads.
        cores: CPU-bound loads share this many cores: each load takes
            ``load_s * max(1, workers / cores)``; ``None`` for I/O-bound loads.
        handoff_s: seconds the loop spends receiving each batch from a worker (unpickling
            it, mapping its shared memory), counted as waiting; measure it with a free
            dataset and no compute. Ignored without workers.
        seed: seeds the jitter's draws.
        loads: the seconds of each batch's load, when they are known (a seeded dataset's
            costs summed per batch): the simulation replays exactly that run, so a short
            measured run is compared with the same batches, not with the long-run average
            of random draws. Replaces ``load_s`` (kept in the record) and ``jitter``;
            ``steps`` becomes ``len(loads)``.

    Returns:
        A :class:`PipelineRecord` of per-step waits and the mean step time.

    Raises:
        ValueError: for a negative or non-finite time, bad counts, or ``loads`` that is
            empty or given with ``jitter``.
    """
    for name, v in (("load_s", load_s), ("compute_s", compute_s), ("jitter", jitter),
                    ("handoff_s", handoff_s)):
        check_real(name, v, 0)
    check_int("workers", workers, 0)
    check_int("depth", depth, 1)
    check_int("steps", steps, 1)
    if cores is not None:
        check_int("cores", cores, 1)
    check_int("seed", seed, 0)
    slow = max(1.0, workers / cores) if cores else 1.0
    if loads is not None:
        if isinstance(loads, str) or not isinstance(loads, Sequence) or not loads:
            raise ValueError(f"loads must be a non-empty sequence of seconds, got {loads!r}")
        if jitter:
            raise ValueError("give loads or jitter, not both: loads are the batches' exact costs")
        for x in loads:
            check_real("loads entries", x, 0)
        loads, steps = [x * slow for x in loads], len(loads)
    else:
        rng = random.Random(seed)
        sigma = math.sqrt(math.log1p(jitter ** 2))  # log-normal with mean 1 and CV = jitter
        loads = [load_s * slow * (rng.lognormvariate(-sigma ** 2 / 2, sigma) if jitter else 1.0)
                 for _ in range(steps)]
    if workers == 0:
        return PipelineRecord(load_s, compute_s, 0, depth, tuple(loads),
                              (sum(loads) + steps * compute_s) / steps)
    ahead = depth * workers
    free = [0.0] * workers      # s: when each worker finishes its queued batches
    got = [0.0] * steps         # s: when the loop received batch i
    waits, asked = [], 0.0      # asked: when the loop asked for the next batch
    for i in range(steps):
        requested = 0.0 if i < ahead else got[i - ahead]  # index sent to the worker
        w = i % workers
        free[w] = max(free[w], requested) + loads[i]
        got[i] = max(free[w], asked) + handoff_s
        waits.append(got[i] - asked)
        asked = got[i] + compute_s
    return PipelineRecord(load_s, compute_s, workers, depth, tuple(waits), asked / steps)


def beyond_model(workers: int, record: LoaderRecord, predicted: PipelineRecord) -> str:
    """The sentence on the steady waiting a run without jitter at ``workers`` workers had beyond
    its model's (``predicted``, :func:`perfkit.data.simulate_pipeline` with the handoff), at the
    printed whole percents: where the run waited more, waiting the model leaves out with no jitter
    at all, so that a jittered run's waiting beyond the model is not all jitter."""
    check_int("workers", workers, 0)
    m, p = round(100 * record.steady_wait_share), round(100 * predicted.steady_wait_share)
    head = (f"Without jitter (2a), {workers} workers waited {m}% of the steady steps, the model with the "
            f"handoff {p}%")
    if m <= p:
        return head + (": it left no waiting out there, so what the replay below leaves out comes with the "
                       "jitter.")
    return (head + f": {m - p} points it leaves out with no jitter at all, so not all waiting beyond the "
            "handoff below is jitter.")


def handoff_part(handoff_ms: float, unsplit_ms: float, stage: str = "loader", timed_on: str = "") -> str:
    """A clause, starting with ``"; "``, on how much of a step's unsplit remainder (``unsplit_ms``,
    as printed, to one decimal; :attr:`PipelineExcess.unsplit_ms`) one handoff of ``handoff_ms``
    per step can be; ``""`` where nothing was left unsplit. ``stage`` is
    :attr:`PipelineExcess.stage`: loader-bound, the rest is the worker's time per batch in the
    loop beyond its time alone; compute-bound, the loop's own work; ``"either"``, either stage's.
    ``timed_on`` names the batches the handoff was timed on where they are not the step's own
    (``"2a's batches of 16 free samples"``): the clause then says the figure is theirs, since a
    batch of another kind (other tensors, other sizes) may hand off in another time; ``""``: timed
    on the step's own batches.

    Raises:
        TypeError, ValueError: for a ``handoff_ms`` that is not a finite number >= 0, a
            ``stage`` other than ``"loader"``, ``"compute"`` and ``"either"``, or a ``timed_on``
            that is not a str.
    """
    check_real("handoff_ms", handoff_ms, 0)
    check_choice("stage", stage, ("loader", "compute", "either"))
    if not isinstance(timed_on, str):
        raise TypeError(f"timed_on must be a str naming the batches the handoff was timed on, "
                        f"got {timed_on!r}")
    if round(unsplit_ms, 1) <= 0:
        return ""
    head = f"; section 1's 1-worker step left {unsplit_ms:+.1f} ms unsplit, "
    one = ("one handoff per step this size" if not timed_on else
           f"one handoff per step as timed on {timed_on} (not section 1's batches, whose handoff this "
           "notebook does not time: a batch of another kind may take another time)")
    if round(handoff_ms, 2) >= round(unsplit_ms, 1):
        return head + f"which {one} covers"
    rest = {"loader": "is the worker taking longer per batch in the loop than alone, which this notebook "
                      "does not time apart",
            "compute": "is the loop's own work, which this notebook does not time",
            "either": "is either stage slower in the loop than alone, which this notebook does not split",
            }[stage]
    return (head + f"of which {one} is {handoff_ms:.2f} ms: the other "
            f"{unsplit_ms - handoff_ms:.1f} ms {rest}")
