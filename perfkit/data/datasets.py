"""Datasets with a known or a real per-sample cost, padding collation, sharded streams.

What notebook 07 loads:

* :func:`spend`, :class:`SlowDataset` and :class:`Delayed` plant a known cost, as I/O
  (a sleep) or as Python work that holds the GIL;
* :class:`TextChunks` and :class:`AugmentedDigits` do real tokenizing and augmenting, on
  :mod:`perfkit.models`' data; :class:`PadCollate` pads token sequences to a multiple of 8;
* :class:`ShardedStream`, an ``IterableDataset`` over JSON-lines files (:func:`write_shards`)
  that gives every (rank, worker) pair a disjoint share of the samples, splitting by
  ``get_worker_info()`` as the ``torch.utils.data.IterableDataset`` documentation does.

Usage::

    from perfkit.data.datasets import SlowDataset
    ds = SlowDataset(1024, cost_s=0.002, kind="spin")   # 2 ms of GIL-holding work a sample
    loader = DataLoader(ds, batch_size=32, num_workers=2)
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from perfkit._checks import check_callable, check_choice, check_int, check_items, check_real

__all__ = [
    "AugmentedDigits", "Delayed", "PadCollate", "ShardedStream", "SlowDataset", "TextChunks",
    "spend", "write_shards",
]

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
        TypeError, ValueError: for ``seconds`` that is not a finite number >= 0, or an
            unknown ``kind``.
    """
    check_real("seconds", seconds, 0)
    check_choice("kind", kind, ("sleep", "spin"))
    if kind == "sleep":
        if seconds > 0:
            time.sleep(seconds)
    elif kind == "spin":
        for _ in range(int(seconds * _loop_rate()) if seconds > 0 else 0):
            pass


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
        check_int("n", n, 1)
        spend(0.0, kind)  # validates kind
        for name, v in (("cost_s", cost_s), ("jitter", jitter)):
            check_real(name, v, 0)
        shape = tuple(check_items("shape", shape, nonempty=False))  # () is a scalar sample
        for d in shape:
            check_int("shape entries", d, 0)
        self.n, self.cost_s, self.kind, self.shape = n, float(cost_s), kind, shape
        self.jitter = float(jitter)

    def __len__(self) -> int:
        return self.n

    def cost(self, i: int) -> float:
        """Seconds that sample ``i`` (an int in ``[0, n)``) costs."""
        check_int("i", i, 0, self.n - 1)
        if not self.jitter:
            return self.cost_s
        sigma = math.sqrt(math.log1p(self.jitter ** 2))  # mean 1, CV = jitter
        return self.cost_s * random.Random(i).lognormvariate(-sigma ** 2 / 2, sigma)

    def __getitem__(self, i: int) -> torch.Tensor:
        i = operator.index(i)  # numpy ints from a sampler are fine; a str is not
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
        if not isinstance(source, Iterable) and not hasattr(source, "__getitem__"):
            raise TypeError(f"source must be iterable, got {type(source).__name__}")
        spend(0.0, kind)
        check_real("seconds", seconds, 0)
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
        min_chars: shortest paragraph kept, in characters (>= 0).
    """

    def __init__(self, text: str, tokenizer: Any, max_len: int = 256,
                 min_chars: int = 40) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not callable(getattr(tokenizer, "encode", None)):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        check_int("max_len", max_len, 1)
        check_int("min_chars", min_chars, 0)
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

        check_int("size", size, 8)
        check_real("max_degrees", max_degrees, 0)
        check_real("max_shift", max_shift, 0)
        check_int("seed", seed, 0, 2**32 - 1)  # seed * 1_000_003 + i stays a valid torch seed
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
        check_int("pad_id", self.pad_id, 0)  # a token id
        check_int("multiple_of", self.multiple_of, 1)
        label = self.label_pad_id
        if label is not None and (isinstance(label, bool) or not isinstance(label, int)):
            raise TypeError(f"label_pad_id must be an int or None, got {label!r}")

    def __call__(self, batch: Sequence[torch.Tensor | Sequence[int]]) -> dict[str, torch.Tensor]:
        seqs = [torch.as_tensor(s, dtype=torch.int64) for s in check_items("batch", batch)]
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

    Raises:
        TypeError, ValueError: for ``samples`` that is not iterable, a ``directory`` that
            is not a path, or ``n_files`` not an int >= 1.
    """
    if isinstance(samples, str) or not isinstance(samples, Iterable):
        raise TypeError(f"samples must be an iterable of samples, got {type(samples).__name__}")
    if not isinstance(directory, str | os.PathLike):
        raise TypeError(f"directory must be a str or os.PathLike, got {directory!r}")
    check_int("n_files", n_files, 1)
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
        files = check_items("files", files)  # a lone path string would be read letter by letter
        check_choice("by", by, ("auto", "files", "samples"))
        check_callable("transform", transform, optional=True)
        check_int("seed", seed, 0)
        dist = torch.distributed
        on = dist.is_available() and dist.is_initialized()
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if on else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if on else 0)
        check_int("world_size", self.world_size, 1)
        check_int("rank", self.rank, 0, self.world_size - 1)
        self.files, self.transform, self.by = [Path(f) for f in files], transform, by
        self.shuffle_files, self.seed, self.epoch = shuffle_files, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the file order of the next pass (call it on every rank with the same value)."""
        self.epoch = check_int("epoch", epoch, 0)

    def shard(self, index: int, count: int) -> Iterator[Any]:
        """The samples of shard ``index`` of ``count`` (``0 <= index < count``).

        Raises:
            TypeError, ValueError: at the call (not at the first ``next``) for a bad
                ``index`` or ``count``, or ``by='files'`` with files not divisible by ``count``.
        """
        check_int("count", count, 1)
        check_int("index", index, 0, count - 1)
        files = list(self.files)
        if self.shuffle_files:
            random.Random(self.seed + self.epoch).shuffle(files)
        by_files = self.by == "files" or (self.by == "auto" and len(files) % count == 0)
        if self.by == "files" and len(files) % count:
            raise ValueError(f"by='files' needs len(files) ({len(files)}) divisible by "
                             f"world_size * num_workers ({count})")
        return self._read(files[index::count] if by_files else files, by_files, index, count)

    def _read(self, files: list[Path], by_files: bool, index: int, count: int) -> Iterator[Any]:
        seen = 0
        for path in files:
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

