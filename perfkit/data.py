"""Data loading that keeps the model fed: a prefetcher, sharded streams, padding, measurements.

A training step waits for data whenever the next batch takes longer to prepare than the
work that could hide it. This module holds what notebook 07 measures:

* :class:`Prefetcher` prepares the next batches while the model runs: a background thread
  with a bounded queue; on CUDA the thread also copies each batch from pinned memory on
  the prefetcher's own side stream, the pattern of NVIDIA apex's ``data_prefetcher`` and
  of ``torch.utils.data``'s pin-memory thread;
* :class:`ShardedStream`, an ``IterableDataset`` over JSON-lines files that gives every
  (rank, worker) pair a disjoint share of the samples; :class:`PadCollate` pads token
  sequences to a multiple of 8;
* :class:`SlowDataset` (a known per-sample cost), :class:`TextChunks` and
  :class:`AugmentedDigits` (real tokenizing and augmenting, on :mod:`perfkit.models`'
  data), :func:`measure_loader` (how long a loop waits for a ``DataLoader``) and
  :func:`simulate_pipeline`, the model that predicts it.

Usage::

    from perfkit.data import Prefetcher
    for x, y in Prefetcher(loader, device="cuda"):   # next batch copies during this step
        loss = model(x, y)
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import queue
import random
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from perfkit.timing import Timer, resolve_device

__all__ = [
    "AugmentedDigits", "Delayed", "LoaderConfig", "LoaderRecord", "PadCollate", "PipelineRecord",
    "Prefetcher", "ShardedStream", "SlowDataset", "TextChunks", "map_tensors",
    "measure_loader", "simulate_pipeline", "spend", "write_shards",
]

_POLL_S = 0.05  # s: how often a blocked queue operation re-checks the stop flag
_END = object()


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in a batch of nested tuples, lists and dicts.

    Namedtuples and dict subclasses keep their type; non-tensor leaves pass unchanged.
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        out = {k: map_tensors(v, fn) for k, v in batch.items()}
        return out if type(batch) is dict else type(batch)(out)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(v, fn) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


# --- the prefetcher -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Failure:
    exc: BaseException
    index: int  # the batch the source was producing when it raised


def _put(q: queue.Queue, stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            pass
    return False


def _produce(it: Iterator, q: queue.Queue, stop: threading.Event, device: torch.device,
             pin: bool, stream: Any) -> None:
    """Body of the prefetch thread. It holds no reference to its consumer, so a consumer
    that breaks out of its loop is garbage collected, and its ``__del__`` stops us."""
    index = 0
    try:
        if stream is not None:
            torch.cuda.set_device(device)  # the current device is per thread
        while not stop.is_set():
            try:
                batch = next(it)
            except StopIteration:
                _put(q, stop, _END)
                return
            if pin:  # page-locked, so the DMA engine can copy it while the GPU computes
                batch = map_tensors(batch, lambda t: t if t.is_cuda or t.is_pinned()
                                    else t.pin_memory())
            if stream is not None:
                with torch.cuda.stream(stream):  # copies queue behind earlier copies only
                    batch = map_tensors(batch, lambda t: t.to(device, non_blocking=True))
                    ready = torch.cuda.Event()
                    ready.record(stream)
                batch = (batch, ready)
            if not _put(q, stop, batch):
                return
            index += 1
    except BaseException as exc:  # handed to the consumer, raised there
        _put(q, stop, _Failure(exc, index))
    finally:
        if inspect.isgenerator(it):
            it.close()  # runs the source generator's own ``finally`` blocks


class _PrefetchIterator:
    """One pass over a :class:`Prefetcher`'s source, with its own thread and queue."""

    def __init__(self, owner: Prefetcher) -> None:
        self._device, self._stream = owner.device, owner.stream
        self._queue: queue.Queue = queue.Queue(maxsize=owner.depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=_produce, name="perfkit-prefetch", daemon=True,
            args=(iter(owner.source), self._queue, self._stop, owner.device,
                  owner.pin_memory, owner.stream))
        self._thread.start()

    def __iter__(self) -> _PrefetchIterator:
        return self

    def _get(self) -> Any:
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _Failure(RuntimeError("the prefetch thread ended without a batch"), -1)

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            if hasattr(item.exc, "add_note"):
                item.exc.add_note(f"(raised by the source in perfkit.data.Prefetcher's thread, "
                                  f"while loading batch {item.index})")
            raise item.exc  # its __traceback__ still holds the source's frames
        if self._stream is None:
            return item
        batch, ready = item
        compute = torch.cuda.current_stream(self._device)
        compute.wait_event(ready)  # the GPU waits for the copy; the host does not
        # The copy was allocated on the side stream: tell the caching allocator this
        # stream uses it too, or it could reuse the memory while the step still reads it.
        map_tensors(batch, lambda t: t.record_stream(compute) if t.is_cuda else None)
        return batch

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread and wait for it (for the source's current ``next`` to return)."""
        self._done = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                warnings.warn(f"perfkit prefetch thread still blocked in the source after "
                              f"{timeout} s; it is a daemon and ends with the process",
                              RuntimeWarning, stacklevel=2)
        while not self._queue.empty():  # drop prepared batches (and their GPU memory)
            self._queue.get_nowait()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass


class Prefetcher:
    """Prepare the next ``depth`` batches while the model runs on the current one.

    Iterating starts a background thread that pulls from ``source`` into a bounded queue.
    On CUDA the thread also pins each batch and copies it to ``device`` with
    ``non_blocking=True`` on a side stream; the consumer's stream waits on an event for
    that copy (on the GPU, not the host) and ``record_stream`` marks the memory as used
    by the consumer's stream. The side stream lives as long as the prefetcher: the caching
    allocator pools memory per stream, so a new stream per epoch would strand each
    epoch's cached blocks and let reserved memory grow.

    Order is preserved; an exception raised by the source is re-raised in the consumer
    with its original traceback; breaking out of the loop stops and joins the thread
    (or call :meth:`close`, or use ``with Prefetcher(...) as pf``).

    Args:
        source: any iterable of tensors, tuples/lists/namedtuples or dicts of them
            (non-tensor leaves pass through), e.g. a ``DataLoader``.
        device: where batches go; ``None`` means CUDA if present, else CPU (no copy).
        depth: batches prepared ahead (the queue's size), >= 1.
        pin_memory: pin host tensors before copying; default: on for CUDA.

    Raises:
        TypeError: if ``source`` is not iterable.
        ValueError: for ``depth`` < 1, or ``pin_memory=True`` without CUDA.
    """

    def __init__(self, source: Iterable, device: torch.device | str | None = None,
                 depth: int = 2, pin_memory: bool | None = None) -> None:
        if not isinstance(source, Iterable) and not hasattr(source, "__getitem__"):
            raise TypeError(f"source must be iterable (a DataLoader, list or generator), "
                            f"got {type(source).__name__}")
        _check_int("depth", depth, 1)
        self.source, self.depth = source, depth
        self.device = resolve_device(device)
        cuda = self.device.type == "cuda"
        if cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory=True needs CUDA (pinned memory is for DMA to a GPU)")
        self.pin_memory = cuda if pin_memory is None else bool(pin_memory)
        self.stream = torch.cuda.Stream(self.device) if cuda else None
        self._live: weakref.WeakSet[_PrefetchIterator] = weakref.WeakSet()

    def __iter__(self) -> Iterator:
        it = _PrefetchIterator(self)
        self._live.add(it)
        return it

    def __len__(self) -> int:
        try:
            return len(self.source)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"this Prefetcher has no len(): its source "
                            f"({type(self.source).__name__}) has none") from None

    def close(self) -> None:
        """Stop every pass still running over this prefetcher."""
        for it in list(self._live):
            it.close()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- datasets with a per-sample cost --------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _loop_rate() -> float:
    """Iterations per second of an empty Python loop on an idle core (best of 7 tries)."""
    n, best = 20_000, 0.0
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            pass
        best = max(best, n / (time.perf_counter() - t0))
    return best


def spend(seconds: float, kind: str = "sleep") -> None:
    """Spend ``seconds`` like a loader does.

    ``"sleep"`` waits like I/O (a read from disk or network): it frees the core and the
    GIL. ``"spin"`` runs a fixed amount of Python work, calibrated to take ``seconds`` on
    an idle core, like pure-Python decoding: it holds a core and the GIL, so a *thread*
    doing it competes with the training loop, and it takes longer when it must share its
    core (a busy-wait until a deadline would not: it ends on time however little CPU it got).

    Raises:
        ValueError: for a negative ``seconds`` or an unknown ``kind``.
    """
    if not seconds >= 0:
        raise ValueError(f"seconds must be >= 0, got {seconds!r}")
    if kind == "sleep":
        if seconds > 0:
            time.sleep(seconds)
    elif kind == "spin":
        for _ in range(int(seconds * _loop_rate()) if seconds > 0 else 0):
            pass
    else:
        raise ValueError(f"kind must be 'sleep' or 'spin', got {kind!r}")


class SlowDataset(Dataset):
    """``n`` samples that each cost about ``cost_s`` to load; sample ``i`` is ``full(shape, i)``.

    Args:
        n: number of samples (>= 1).
        cost_s: mean seconds per sample (>= 0), spent as :func:`spend` ``kind``.
        kind: ``"sleep"`` (I/O) or ``"spin"`` (CPU work holding the GIL; see :func:`spend`).
        shape: shape of each sample tensor (float32).
        jitter: coefficient of variation of the cost (log-normal, seeded by the index, so
            every worker sees the same costs); 0 for a constant cost.
    """

    def __init__(self, n: int, cost_s: float, kind: str = "sleep",
                 shape: tuple[int, ...] = (16,), jitter: float = 0.0) -> None:
        _check_int("n", n, 1)
        spend(0.0, kind)  # validates kind
        for name, v in (("cost_s", cost_s), ("jitter", jitter)):
            if not (isinstance(v, int | float) and 0 <= v < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        self.n, self.cost_s, self.kind, self.shape = n, float(cost_s), kind, tuple(shape)
        self.jitter = float(jitter)

    def __len__(self) -> int:
        return self.n

    def cost(self, i: int) -> float:
        """Seconds that sample ``i`` costs."""
        if not self.jitter:
            return self.cost_s
        sigma = math.sqrt(math.log1p(self.jitter ** 2))  # mean 1, CV = jitter
        return self.cost_s * random.Random(i).lognormvariate(-sigma ** 2 / 2, sigma)

    def __getitem__(self, i: int) -> torch.Tensor:
        if not -self.n <= i < self.n:
            raise IndexError(f"index {i} out of range for {self.n} samples")
        spend(self.cost(i % self.n), self.kind)
        return torch.full(self.shape, float(i % self.n))


class Delayed:
    """Any iterable with a known load cost added before each item (re-iterable, sized).

    Wrap a ``DataLoader`` to plant a data bottleneck of exactly ``seconds`` per batch.

    Args:
        source: the iterable.
        seconds: added per item (>= 0), spent as :func:`spend` ``kind``.
        kind: ``"sleep"`` (I/O) or ``"spin"`` (CPU work holding the GIL).
    """

    def __init__(self, source: Iterable, seconds: float, kind: str = "sleep") -> None:
        spend(0.0, kind)
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        self.source, self.seconds, self.kind = source, float(seconds), kind

    def __iter__(self) -> Iterator:
        for item in self.source:
            spend(self.seconds, self.kind)
            yield item

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]


class TextChunks(Dataset):
    """Paragraphs of a corpus, tokenized on every access: variable-length ``(L,)`` int64.

    Real per-sample tokenizer work, as a loader that reads raw text does; pad the batches
    with :class:`PadCollate`. Build it on :mod:`perfkit.models`' corpus and tokenizer::

        tok = models.train_bpe_tokenizer(); TextChunks(models.text_corpus(), tok)

    Args:
        text: the corpus; split on blank lines, pieces shorter than ``min_chars`` dropped.
        tokenizer: a ``tokenizers.Tokenizer``.
        max_len: tokens kept per sample (>= 1).
    """

    def __init__(self, text: str, tokenizer: Any, max_len: int = 256,
                 min_chars: int = 40) -> None:
        _check_int("max_len", max_len, 1)
        self.chunks = [c for c in text.split("\n\n") if len(c.strip()) >= min_chars]
        if not self.chunks:
            raise ValueError(f"text holds no paragraph of at least {min_chars} characters")
        self.tokenizer, self.max_len = tokenizer, max_len

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, i: int) -> torch.Tensor:
        ids = self.tokenizer.encode(self.chunks[i]).ids[: self.max_len]
        return torch.tensor(ids, dtype=torch.int64)  # (L,)


class AugmentedDigits(Dataset):
    """Digits decoded from bytes, upsampled to ``size`` and randomly rotated and shifted.

    Real per-sample CPU work (``affine_grid`` + ``grid_sample``) on top of
    :class:`perfkit.models.DigitsDataset`'s decode; each sample's augmentation is seeded by
    ``(seed, i)``, so a sample is the same in every worker.

    Returns ``(image (1, size, size) float32, label int64)``.
    """

    def __init__(self, size: int = 32, max_degrees: float = 15.0, max_shift: float = 0.1,
                 seed: int = 0, cost_ms: float = 0.0) -> None:
        from perfkit.models import DigitsDataset

        _check_int("size", size, 8)
        self.base, self.size, self.seed = DigitsDataset(cost_ms), size, seed
        self.max_rad, self.max_shift = math.radians(max_degrees), max_shift

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img, label = self.base[i]  # (1, 8, 8)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        a, dx, dy = (torch.rand(3, generator=g) * 2 - 1).tolist()
        a, dx, dy = a * self.max_rad, dx * self.max_shift, dy * self.max_shift
        theta = torch.tensor([[[math.cos(a), -math.sin(a), dx], [math.sin(a), math.cos(a), dy]]])
        grid = torch.nn.functional.affine_grid(theta, [1, 1, self.size, self.size],
                                               align_corners=False)  # (1, S, S, 2)
        out = torch.nn.functional.grid_sample(img[None], grid, align_corners=False)
        return out[0], label  # (1, S, S)


@dataclass(frozen=True)
class PadCollate:
    """Stack variable-length 1-D token tensors into ``(B, T)``, ``T`` a multiple of ``multiple_of``.

    Rounding ``T`` up keeps the number of distinct shapes small (fewer kernel choices and
    ``torch.compile`` recompiles) and, on GPUs, gives tensor cores the multiples of 8
    they need, for a few padding tokens per row.

    Returns a dict: ``input_ids`` and ``attention_mask`` ``(B, T)`` int64, and ``labels``
    (pads set to ``label_pad_id``, which loss functions ignore) unless it is ``None``.
    """

    pad_id: int = 0
    multiple_of: int = 8
    label_pad_id: int | None = -100

    def __post_init__(self) -> None:
        _check_int("multiple_of", self.multiple_of, 1)

    def __call__(self, batch: Sequence[torch.Tensor | Sequence[int]]) -> dict[str, torch.Tensor]:
        if len(batch) == 0:
            raise ValueError("batch must hold at least one sequence")
        seqs = [torch.as_tensor(s, dtype=torch.int64) for s in batch]
        if any(s.dim() != 1 for s in seqs):
            raise ValueError("every sample must be a 1-D sequence of token ids")
        longest = max(len(s) for s in seqs)
        T = max(1, math.ceil(longest / self.multiple_of)) * self.multiple_of
        ids = torch.full((len(seqs), T), self.pad_id, dtype=torch.int64)  # (B, T)
        mask = torch.zeros((len(seqs), T), dtype=torch.int64)
        for row, s in enumerate(seqs):
            ids[row, : len(s)] = s
            mask[row, : len(s)] = 1
        out = {"input_ids": ids, "attention_mask": mask}
        if self.label_pad_id is not None:
            out["labels"] = ids.masked_fill(mask == 0, self.label_pad_id)
        return out


# --- streaming from files, sharded over ranks and workers ---------------------------------


def write_shards(samples: Iterable[Any], directory: str | Path, n_files: int) -> list[Path]:
    """Write JSON-serialisable ``samples`` round-robin into ``n_files`` JSON-lines files.

    Returns:
        The file paths, in order (``shard-00000.jsonl``, ...).
    """
    _check_int("n_files", n_files, 1)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / f"shard-{k:05d}.jsonl" for k in range(n_files)]
    handles = [p.open("w") for p in paths]
    try:
        for i, s in enumerate(samples):
            handles[i % n_files].write(json.dumps(s) + "\n")
    finally:
        for h in handles:
            h.close()
    return paths


class ShardedStream(IterableDataset):
    """Stream JSON-lines samples so every (rank, worker) reads a disjoint share.

    Without sharding, every ``DataLoader`` worker of every rank replays the whole stream:
    each sample is seen ``world_size * num_workers`` times. Here shard
    ``rank * num_workers + worker_id`` of ``world_size * num_workers`` reads

    * ``by="files"``: every ``num_shards``-th file (cheap: one reader per file; needs
      ``len(files) % num_shards == 0`` so that no shard gets fewer files),
    * ``by="samples"``: every ``num_shards``-th sample of the whole stream (every shard
      parses all files; shard sizes differ by at most one sample),
    * ``by="auto"``: files when they divide evenly, else samples.

    Shard sizes can still differ by a sample (or a file's length): under DDP a rank that
    runs out first leaves the others blocked in a collective, so cap the steps per epoch.

    Args:
        files: JSON-lines paths (see :func:`write_shards`).
        rank, world_size: default from ``torch.distributed`` when initialised, else 0 and 1.
        transform: applied to each decoded sample (e.g. tokenize).
        shuffle_files: shuffle the file order each epoch (:meth:`set_epoch`), identically on
            every rank (seeded by ``seed + epoch``) so shards stay disjoint.
    """

    def __init__(self, files: Sequence[str | Path], rank: int | None = None,
                 world_size: int | None = None, transform: Callable[[Any], Any] | None = None,
                 by: str = "auto", shuffle_files: bool = False, seed: int = 0) -> None:
        if len(files) == 0:
            raise ValueError("files must name at least one file")
        if by not in ("auto", "files", "samples"):
            raise ValueError(f"by must be 'auto', 'files' or 'samples', got {by!r}")
        dist = torch.distributed
        on = dist.is_available() and dist.is_initialized()
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if on else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if on else 0)
        _check_int("world_size", self.world_size, 1)
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {self.rank!r}")
        self.files, self.transform, self.by = [Path(f) for f in files], transform, by
        self.shuffle_files, self.seed, self.epoch = shuffle_files, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the file order of the next pass (call it on every rank with the same value)."""
        self.epoch = epoch

    def shard(self, index: int, count: int) -> Iterator[Any]:
        """The samples of shard ``index`` of ``count``."""
        if not 0 <= index < count:
            raise ValueError(f"index must be in [0, {count}), got {index}")
        files = list(self.files)
        if self.shuffle_files:
            random.Random(self.seed + self.epoch).shuffle(files)
        by_files = self.by == "files" or (self.by == "auto" and len(files) % count == 0)
        if self.by == "files" and len(files) % count:
            raise ValueError(f"by='files' needs len(files) ({len(files)}) divisible by "
                             f"world_size * num_workers ({count})")
        seen = 0
        for path in files[index::count] if by_files else files:
            with path.open() as f:
                for line in f:
                    if by_files or seen % count == index:
                        sample = json.loads(line)
                        yield self.transform(sample) if self.transform else sample
                    seen += 1

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.shard(self.rank * workers + worker, self.world_size * workers)


# --- DataLoader measurements and the model that predicts them ------------------------------


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
        _check_int("batch_size", self.batch_size, 1)
        _check_int("num_workers", self.num_workers, 0)
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor):
            raise ValueError("persistent_workers and prefetch_factor need num_workers >= 1")
        if self.prefetch_factor is not None:
            _check_int("prefetch_factor", self.prefetch_factor, 1)
        if self.pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory=True needs CUDA (pinned memory is for DMA to a GPU)")
        if self.start_method not in (None, "fork", "spawn", "forkserver"):
            raise ValueError(f"start_method must be None, 'fork', 'spawn' or 'forkserver', "
                             f"got {self.start_method!r}")
        if self.start_method is not None and self.num_workers == 0:
            raise ValueError("start_method needs num_workers >= 1")

    def loader(self, dataset: Dataset, collate_fn: Callable | None = None) -> DataLoader:
        """A ``DataLoader`` over ``dataset`` with these settings (no shuffling)."""
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
    """
    _check_int("epochs", epochs, 1)
    if max_steps is not None:
        _check_int("max_steps", max_steps, 1)
    if not callable(compute) and not (isinstance(compute, int | float) and compute >= 0):
        raise TypeError(f"compute must be seconds >= 0 or a callable, got {compute!r}")
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
                batch = next(it, _END)
            if batch is _END:
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
        return sum(self.wait_s) / (self.step_s * len(self.wait_s))

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
        return 1.0 / self.step_s


def simulate_pipeline(load_s: float, compute_s: float, workers: int = 0, depth: int = 2,
                      steps: int = 200, jitter: float = 0.0, cores: int | None = None,
                      handoff_s: float = 0.0, seed: int = 0) -> PipelineRecord:
    """Predict a ``DataLoader`` loop: ``workers`` loaders, in-order delivery, a step each.

    The model follows ``torch.utils.data``: batch ``i`` goes to worker ``i % workers``; at
    most ``depth * workers`` batches (``prefetch_factor * num_workers``) are requested
    ahead, one more each time the loop receives one; the loop takes batches in order.
    ``workers=0`` loads in the loop itself (step = load + compute). A thread
    :class:`Prefetcher` of queue size ``d`` is close to ``workers=1, depth=d + 1``.

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

    Returns:
        A :class:`PipelineRecord` of per-step waits and the mean step time.
    """
    for name, v in (("load_s", load_s), ("compute_s", compute_s), ("jitter", jitter),
                    ("handoff_s", handoff_s)):
        if not (isinstance(v, int | float) and v >= 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    _check_int("workers", workers, 0)
    _check_int("depth", depth, 1)
    _check_int("steps", steps, 1)
    if cores is not None:
        _check_int("cores", cores, 1)
    rng = random.Random(seed)
    sigma = math.sqrt(math.log1p(jitter ** 2))  # log-normal with mean 1 and CV = jitter
    slow = max(1.0, workers / cores) if cores else 1.0
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
