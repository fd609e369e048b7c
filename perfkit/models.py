"""Small real workloads that need no download: a CNN on digits and a tiny GPT-2 on code.

Two models that train for real (the loss goes down) in seconds on a laptop CPU, so every
module of the course measures an actual training step rather than a synthetic one:

* ``SmallCNN`` on scikit-learn's bundled 8x8 digits (1,797 images, shipped with sklearn);
* a tiny GPT-2 built from a ``transformers.GPT2Config`` (no weights downloaded), trained on
  the installed Python standard library's own ``.py`` files, tokenized by a byte-level BPE
  tokenizer trained on that text with ``tokenizers`` and cached under ``build/``.

Both datasets have a deliberately slow data path for teaching data bottlenecks:
``cost_ms`` adds a per-sample CPU cost (like decoding a JPEG) and, for text,
``tokenize_per_sample=True`` tokenizes raw text inside ``__getitem__`` instead of once.

Usage::

    wl = digits_workload(batch_size=64)
    losses = train_steps(wl, steps=50)      # list of floats, read once at the end
    assert losses[-1] < losses[0]
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from perfkit._checks import check_int, check_real
from perfkit.timing import resolve_device

__all__ = [
    "DigitsDataset", "SmallCNN", "TokenBlockDataset", "Workload", "digits_data",
    "digits_workload", "encode_corpus", "gpt2_workload", "text_corpus", "tiny_gpt2",
    "train_bpe_tokenizer", "train_steps",
]

EOS_TOKEN = "<|endoftext|>"  # id 0 in every tokenizer trained here; GPT-2's bos and eos


def _check_cost(cost_ms: float) -> None:
    if isinstance(cost_ms, bool) or not isinstance(cost_ms, int | float) or not 0 <= cost_ms <= 1000:
        raise ValueError(f"cost_ms must be a number in [0, 1000] ms, got {cost_ms!r}")


def _check_gpt2(vocab_size: int, block_size: int, n_embd: int, n_layer: int, n_head: int) -> None:
    for name, v in (("vocab_size", vocab_size), ("block_size", block_size), ("n_embd", n_embd),
                    ("n_layer", n_layer), ("n_head", n_head)):
        check_int(name, v, 1)
    if n_embd % n_head:  # each head gets n_embd / n_head channels
        raise ValueError(f"n_embd must be a multiple of n_head, got n_embd={n_embd}, "
                         f"n_head={n_head}")


def _spin(ms: float) -> None:
    """Busy-wait ``ms`` milliseconds: CPU work that holds a core, as decoding would."""
    if ms > 0:
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass


# --- digits -------------------------------------------------------------------------------


def digits_data() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled digits: images ``(1797, 1, 8, 8)`` float32 in [0, 1], labels int64."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    return x, torch.tensor(d.target, dtype=torch.int64)


class DigitsDataset(Dataset):
    """Digits stored as raw bytes (like files on disk) and decoded per sample.

    Args:
        cost_ms: extra CPU time per sample (busy-wait), simulating an expensive decode or
            augmentation; 0 for the fast path.
    """

    def __init__(self, cost_ms: float = 0.0) -> None:
        _check_cost(cost_ms)
        x, self.labels = digits_data()
        self.raw = [bytes((img * 16).round().to(torch.uint8).flatten().tolist()) for img in x]
        self.cost_ms = float(cost_ms)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        _spin(self.cost_ms)
        img = torch.frombuffer(bytearray(self.raw[i]), dtype=torch.uint8)
        return img.view(1, 8, 8).float() / 16.0, self.labels[i]


class SmallCNN(nn.Module):
    """Two conv layers and a linear head for ``(B, 1, 8, 8)`` digits; ~10k parameters."""

    def __init__(self, channels: int = 32, classes: int = 10) -> None:
        check_int("channels", channels, 1)
        check_int("classes", classes, 1)
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),                   # (B, C, 8, 8)
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),                                                   # (B, C, 4, 4)
            nn.Flatten(), nn.Linear(channels * 16, classes),                   # (B, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# --- text ---------------------------------------------------------------------------------


def text_corpus(max_bytes: int = 1_000_000) -> str:
    """Source text of the installed Python standard library, in sorted path order.

    Skips tests, ``site-packages`` and ``idlelib``; stops once ``max_bytes`` UTF-8 bytes are
    collected (the last file is cut). Deterministic for one Python installation.

    Raises:
        ValueError: if ``max_bytes`` is not a positive int.
    """
    # checked outside the cache, which would take True for 1 and fail on an unhashable value
    return _stdlib_text(check_int("max_bytes", max_bytes, 1))


@functools.lru_cache(maxsize=4)  # a str is immutable; re-reading ~700 files costs ~0.3 s
def _stdlib_text(max_bytes: int) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idlelib", "__pycache__"}
    files = sorted(p for p in root.rglob("*.py")
                   if not skip.intersection(p.relative_to(root).parts))
    parts, size = [], 0
    for path in files:
        data = path.read_bytes()[: max_bytes - size]
        parts.append(data.decode("utf-8", errors="ignore"))
        size += len(data)
        if size >= max_bytes:
            break
    return "\n".join(parts)


def train_bpe_tokenizer(vocab_size: int = 1024, max_bytes: int = 1_000_000,
                        cache_dir: str | os.PathLike = "build/tokenizers") -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on :func:`text_corpus`, cached.

    Token 0 is ``<|endoftext|>``. The cache file name hashes the settings, the Python
    version and the corpus, so a different standard library retrains.

    Raises:
        ValueError: if ``vocab_size`` is below 300 (256 bytes + specials + merges).
        TypeError: if ``cache_dir`` is not a path.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    check_int("vocab_size", vocab_size, 300)
    if not isinstance(cache_dir, str | os.PathLike):
        raise TypeError(f"cache_dir must be a str or os.PathLike, got {cache_dir!r}")
    text = text_corpus(max_bytes)
    key = hashlib.sha1(f"{vocab_size}|{text}".encode()).hexdigest()[:12]
    path = Path(cache_dir) / f"stdlib_bpe_{vocab_size}_{key}.json"
    if path.exists():
        return Tokenizer.from_file(str(path))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return tok


def encode_corpus(tokenizer: Any, text: str) -> torch.Tensor:
    """All of ``text`` as one int64 tensor of token ids ``(N,)``.

    Raises:
        TypeError: if ``text`` is not a str or ``tokenizer`` has no ``encode``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
    return torch.tensor(tokenizer.encode(text).ids, dtype=torch.int64)


class TokenBlockDataset(Dataset):
    """Next-token blocks: item ``i`` is ``(x, y)``, both ``(T,)`` int64, ``y`` shifted by one.

    Args:
        text: the corpus.
        tokenizer: a ``tokenizers.Tokenizer``.
        block_size: ``T``, tokens per sample.
        tokenize_per_sample: the slow path: keep raw text and tokenize each sample's slice in
            ``__getitem__`` (real tokenizer work per sample) instead of once up front.
        cost_ms: extra CPU time per sample (busy-wait).
    """

    def __init__(self, text: str, tokenizer: Any, block_size: int = 64,
                 tokenize_per_sample: bool = False, cost_ms: float = 0.0) -> None:
        check_int("block_size", block_size, 2)
        _check_cost(cost_ms)
        self.tokenizer, self.block_size, self.cost_ms = tokenizer, block_size, float(cost_ms)
        self.slow = tokenize_per_sample
        ids = encode_corpus(tokenizer, text)
        self.n = (len(ids) - 1) // block_size
        if self.n < 1:
            raise ValueError(f"text holds {len(ids)} tokens, too few for block_size={block_size}")
        self.ids = ids[: self.n * block_size + 1]
        if self.slow:
            # Raw text slices sized so that each yields at least T + 1 tokens.
            chars = int(len(text) / len(ids) * (block_size + 1) * 1.5) + 16
            self.texts = [text[i * chars:(i + 1) * chars] for i in range(len(text) // chars)]
            self.n = len(self.texts)
            # Tokenizers warns (and may deadlock) when a process forks after parallel use.
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        _spin(self.cost_ms)
        T = self.block_size
        if self.slow:
            ids = self.tokenizer.encode(self.texts[i]).ids[: T + 1]
            ids = ids + [0] * (T + 1 - len(ids))  # pad with <|endoftext|> (rare)
            block = torch.tensor(ids, dtype=torch.int64)
        else:
            block = self.ids[i * T: i * T + T + 1]
        return block[:-1], block[1:]


ATTENTIONS = ("sdpa", "eager")  # transformers' names: fused scaled_dot_product_attention, or op by op
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # GPT-2's tanh GELU: five elementwise ops, or one kernel


def tiny_gpt2(vocab_size: int = 1024, block_size: int = 64, n_embd: int = 64,
              n_layer: int = 2, n_head: int = 2, attention: str = "sdpa",
              activation: str = "gelu_new") -> nn.Module:
    """A randomly initialised ``GPT2LMHeadModel`` from a config (no download, no dropout).

    Args:
        vocab_size, block_size, n_embd, n_layer, n_head: the model's sizes.
        attention: ``"sdpa"`` (``scaled_dot_product_attention``: fused, keeps no ``(B, H, T, T)``
            matrix for backward) or ``"eager"`` (matmul, softmax, matmul: keeps it).
        activation: ``"gelu_new"`` (GPT-2's tanh GELU written as elementwise ops) or
            ``"gelu_pytorch_tanh"`` (the same function as one fused kernel).

    Raises:
        ValueError: for a size that is not a positive int, ``n_embd`` not a multiple
            of ``n_head``, or an unknown ``attention``/``activation``.
    """
    _check_gpt2(vocab_size, block_size, n_embd, n_layer, n_head)
    for name, v, allowed in (("attention", attention, ATTENTIONS), ("activation", activation, ACTIVATIONS)):
        if v not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {v!r}")
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=vocab_size, n_positions=block_size, n_embd=n_embd,
                     n_layer=n_layer, n_head=n_head, bos_token_id=0, eos_token_id=0,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     activation_function=activation, attn_implementation=attention)
    model = GPT2LMHeadModel(cfg)
    model.loss_type = "ForCausalLM"  # transformers cannot infer it from the class name and warns
    return model


# --- workloads ----------------------------------------------------------------------------


@dataclass
class Workload:
    """A model, its data, its optimizer and how to compute the loss of one batch."""

    name: str
    model: nn.Module
    loader: DataLoader
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    device: torch.device
    tokens_per_sample: int = 1
    batch_size: int = 1


def _check_workload(batch_size: int, num_workers: int, cost_ms: float, seed: int,
                    lr: float) -> None:
    check_int("batch_size", batch_size, 1)
    check_int("num_workers", num_workers, 0)
    _check_cost(cost_ms)
    check_int("seed", seed, -(2**63), 2**64 - 1)  # torch.manual_seed's range
    check_real("lr", lr, 0, lo_open=True)


def _loader(ds: Dataset, batch_size: int, num_workers: int, seed: int) -> DataLoader:
    if batch_size > len(ds):  # drop_last would leave no batch, and train_steps would spin
        raise ValueError(f"batch_size={batch_size} exceeds the dataset's {len(ds)} samples")
    # persistent workers: restarting worker processes every epoch would show up as data time
    return DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True,
                      num_workers=num_workers, persistent_workers=num_workers > 0,
                      generator=torch.Generator().manual_seed(seed))


def digits_workload(batch_size: int = 64, num_workers: int = 0, cost_ms: float = 0.0,
                    device: torch.device | str | None = None, seed: int = 0,
                    lr: float = 3e-3) -> Workload:
    """``SmallCNN`` + Adam on :class:`DigitsDataset`; see its ``cost_ms``.

    Raises:
        TypeError, ValueError: for a bad size, ``cost_ms``, ``device``, ``seed`` or ``lr``.
    """
    _check_workload(batch_size, num_workers, cost_ms, seed, lr)
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = SmallCNN().to(dev)
    return Workload("digits_cnn", model, _loader(DigitsDataset(cost_ms), batch_size,
                                                 num_workers, seed),
                    torch.optim.Adam(model.parameters(), lr=lr),
                    lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]), dev,
                    1, batch_size)


def gpt2_workload(batch_size: int = 16, block_size: int = 64, num_workers: int = 0,
                  cost_ms: float = 0.0, tokenize_per_sample: bool = False,
                  vocab_size: int = 1024, max_bytes: int = 1_000_000, n_embd: int = 64,
                  n_layer: int = 2, n_head: int = 2, device: torch.device | str | None = None,
                  seed: int = 0, lr: float = 3e-3) -> Workload:
    """:func:`tiny_gpt2` + AdamW on :class:`TokenBlockDataset` over the stdlib corpus.

    Raises:
        TypeError, ValueError: for a bad size, ``cost_ms``, ``device``, ``seed`` or ``lr``
            (checked before the tokenizer is trained).
    """
    _check_workload(batch_size, num_workers, cost_ms, seed, lr)
    _check_gpt2(vocab_size, block_size, n_embd, n_layer, n_head)
    dev = resolve_device(device)
    tok = train_bpe_tokenizer(vocab_size, max_bytes)
    ds = TokenBlockDataset(text_corpus(max_bytes), tok, block_size, tokenize_per_sample,
                           cost_ms)
    torch.manual_seed(seed)
    model = tiny_gpt2(vocab_size, block_size, n_embd, n_layer, n_head).to(dev)
    return Workload("tiny_gpt2", model, _loader(ds, batch_size, num_workers, seed),
                    torch.optim.AdamW(model.parameters(), lr=lr),
                    # transformers shifts labels itself: pass the unshifted ids (``b[1]`` as
                    # labels would train on the token two ahead)
                    lambda m, b: m(input_ids=b[0], labels=b[0]).loss, dev,
                    block_size, batch_size)


def _batches(loader: DataLoader) -> Iterator[Any]:
    while True:  # cycle over epochs
        yield from loader


def train_steps(wl: Workload, steps: int, monitor: Any = None,
                on_step: Callable[[], None] | None = None) -> list[float]:
    """Run ``steps`` optimizer steps of ``wl``; return the loss of each step.

    Losses are kept as tensors and read once at the end: ``loss.item()`` in the loop
    would synchronise with the GPU every step.

    Args:
        wl: the workload.
        steps: number of steps (>= 1).
        monitor: a :class:`perfkit.profiling.StepMonitor` (or anything with ``phase(name)``
            and ``step(samples=, tokens=)``) timing the phases data, forward, backward and
            optimizer.
        on_step: called after every step, e.g. a profiler's ``step``.

    Raises:
        TypeError, ValueError: for a ``wl`` that is not a :class:`Workload`, ``steps`` not
            an int >= 1, a ``monitor`` without ``phase`` and ``step``, or an ``on_step``
            that is not callable.
    """
    if not isinstance(wl, Workload):
        raise TypeError(f"wl must be a perfkit.models.Workload, got {type(wl).__name__}")
    check_int("steps", steps, 1)
    if monitor is not None and not all(callable(getattr(monitor, a, None)) for a in ("phase", "step")):
        raise TypeError(f"monitor must be None or have phase() and step(), got {type(monitor).__name__}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be None or a callable, got {type(on_step).__name__}")
    phase = monitor.phase if monitor is not None else lambda _: contextlib.nullcontext()
    wl.model.train()
    it, losses = _batches(wl.loader), []
    for _ in range(steps):
        with phase("data"):
            x, y = (t.to(wl.device, non_blocking=True) for t in next(it))
        with phase("forward"):
            loss = wl.loss_fn(wl.model, (x, y))
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            wl.optimizer.step()
            wl.optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if monitor is not None:
            monitor.step(samples=len(x), tokens=len(x) * wl.tokens_per_sample)
        if on_step is not None:
            on_step()
    return torch.stack(losses).tolist()
