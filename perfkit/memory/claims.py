"""Memory advice under the microscope (course module 09): the counts behind six common claims.

Each function builds one small experiment and returns a record of exact counts (bytes,
parameters, file sizes), except :func:`time_emptied_cache`, which times a step with and
without handing freed memory back and returns both Measurements. The verdicts are the
notebook's: these records only measure.

Usage::

    s = sizing_ratios([1, 4, 16], seq=64)
    print(s.adam_ratio, s.growth())          # about 2.0; about 16 (batch 16 over batch 1)
    print(zero_rule_rows([0.5, 70], gpu_gb=80, n_gpus=8)[1].rule_wrong)
"""

from __future__ import annotations

import gzip
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from perfkit import stats, timing
from perfkit._checks import check_int, check_items, check_real
from perfkit.memory.activations import checkpoint_blocks, gpt2_saved_activation_bytes
from perfkit.memory.anatomy import trim_heap
from perfkit.memory.model_states import count_parameters, optimizer_state_bytes, zero_model_states
from perfkit.memory.saved_tensors import SavedTensorMeter
from perfkit.models import tiny_gpt2

__all__ = ["CheckpointFiles", "CheckpointSavings", "EmptyCacheTiming", "SequentialCheck", "SizingRatios",
           "ZeroRuleRow", "advised_zero_stage", "checkpoint_file_sizes", "checkpoint_sequential_check",
           "checkpointing_savings", "largest_model_for_stage", "sizing_ratios", "time_emptied_cache",
           "zero_rule_rows"]

VOCAB = 1024  # the tiny GPT-2's vocabulary (perfkit.models.tiny_gpt2's default)


def _saved_bytes(model: nn.Module, ids: torch.Tensor) -> int:
    """Bytes autograd keeps for backward in one forward of ``model`` on ``ids`` (B, T)."""
    with SavedTensorMeter(model) as meter:
        loss = model(input_ids=ids, labels=ids).loss
    del loss
    return meter.report().activation_bytes


# --- 1 and 3: the sizing rule (Adam 2x, activations 4x) and the "memory efficiency" metric ---


@dataclass(frozen=True)
class SizingRatios:
    """A tiny GPT-2's memory, counted: fp32 weights, model states, saved activations per batch."""

    seq: int
    params: int
    weight_bytes: int       # fp32 weights
    adam_bytes: int         # AdamW's state after its first step
    activation_bytes: dict[int, int]  # batch -> bytes saved for backward

    @property
    def adam_ratio(self) -> float:
        """AdamW state over fp32 weights (2 moments of 4 bytes against 4: 2, plus step counters)."""
        return self.adam_bytes / self.weight_bytes

    @property
    def state_bytes(self) -> int:
        """Model states: weights, gradients (same size) and AdamW's state."""
        return 2 * self.weight_bytes + self.adam_bytes

    def activation_ratio(self, batch: int) -> float:
        """Saved activations at ``batch`` over the weights."""
        return self.activation_bytes[batch] / self.weight_bytes

    def growth(self) -> float:
        """The activation/weight ratio at the largest batch over the smallest."""
        b = sorted(self.activation_bytes)
        return self.activation_ratio(b[-1]) / self.activation_ratio(b[0])

    def input_metric(self, batch: int) -> float:
        """``batch x seq x 4 / (model states + activations)``: the advised "memory efficiency"."""
        return 4 * batch * self.seq / (self.state_bytes + self.activation_bytes[batch])


def sizing_ratios(batches: Sequence[int], seq: int = 64, n_embd: int = 64, n_layer: int = 2,
                  n_head: int = 2, seed: int = 0) -> SizingRatios:
    """Count a seeded tiny GPT-2's weights, AdamW state and saved activations at each batch.

    Raises:
        TypeError, ValueError: for empty ``batches`` or sizes that are not ints >= 1.
    """
    batches = [check_int("batches entries", b, 1) for b in check_items("batches", batches)]
    check_int("seq", seq, 1)
    torch.manual_seed(seed)
    model = tiny_gpt2(block_size=seq, n_embd=n_embd, n_layer=n_layer, n_head=n_head)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (batches[0], seq))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()  # Adam creates its state at the first step
    saved = {b: _saved_bytes(model, torch.randint(0, VOCAB, (b, seq))) for b in batches}
    count = count_parameters(model)
    return SizingRatios(seq, count.total, count.total_bytes, optimizer_state_bytes(opt), saved)


# --- 2: "save as .pt.gz to compress" --------------------------------------------------------


@dataclass(frozen=True)
class CheckpointFiles:
    """Sizes of one state dict saved three ways, and the first bytes of the ``.pt.gz`` one."""

    plain: int      # bytes: torch.save to ckpt.pt
    named_gz: int   # bytes: torch.save to ckpt.pt.gz
    real_gz: int    # bytes: torch.save into gzip.open(...)
    magic: bytes    # the .pt.gz file's first two bytes
    round_trips: bool  # the gzip stream loads back equal tensors

    @property
    def name_ratio(self) -> float:
        return self.named_gz / self.plain

    @property
    def gzip_ratio(self) -> float:
        return self.real_gz / self.plain

    @property
    def format(self) -> str:
        """``"zip"`` (torch.save's archive), ``"gzip"`` or ``"other"``, from the magic bytes."""
        return {b"PK": "zip", bytes([31, 139]): "gzip"}.get(self.magic, "other")


def checkpoint_file_sizes(state: dict[str, torch.Tensor]) -> CheckpointFiles:
    """Save ``state`` as ``ckpt.pt``, as ``ckpt.pt.gz`` and into a real gzip stream; measure each.

    Raises:
        TypeError: if ``state`` is not a dict of tensors.
    """
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise TypeError(f"state must be a dict of tensors (a state_dict), got {type(state).__name__}")
    with tempfile.TemporaryDirectory() as tmp:
        plain, named, real = Path(tmp, "ckpt.pt"), Path(tmp, "ckpt.pt.gz"), Path(tmp, "real.pt.gz")
        torch.save(state, plain)
        torch.save(state, named)
        with gzip.open(real, "wb") as f:
            torch.save(state, f)
        with gzip.open(real, "rb") as f:
            back = torch.load(f)
        same = set(back) == set(state) and all(torch.equal(back[k], v) for k, v in state.items())
        return CheckpointFiles(plain.stat().st_size, named.stat().st_size, real.stat().st_size,
                               named.read_bytes()[:2], same)


# --- 6: "checkpointing reduces memory by up to 80 %" ----------------------------------------


@dataclass(frozen=True)
class CheckpointSavings:
    """Saved activations of a GPT-2 with and without a checkpoint per block, counted and modelled."""

    plain: int          # bytes saved for backward without checkpointing
    checkpointed: int   # ... with a checkpoint per block
    state_bytes: int    # fp32 weights and two Adam moments: no gradients between steps (set_to_none)
    model_plain: int    # module 04's op-by-op count, without ...
    model_checkpointed: int  # ... and with checkpointing

    @property
    def activations_saved(self) -> float:
        """Share of the activations checkpointing saved (measured)."""
        return 1 - self.checkpointed / self.plain

    @property
    def model_saved(self) -> float:
        """Share of the activations the op-by-op model says it saves."""
        return 1 - self.model_checkpointed / self.model_plain

    @property
    def step_saved(self) -> float:
        """Share of the step's memory (model states + activations) saved."""
        return (self.plain - self.checkpointed) / (self.state_bytes + self.plain)


def checkpointing_savings(batch: int, seq: int = 64, n_layer: int = 4, n_embd: int = 64,
                          n_head: int = 2) -> CheckpointSavings:
    """Count the bytes a seeded GPT-2 keeps for backward with and without per-block checkpoints.

    Raises:
        ValueError: for sizes that are not ints >= 1.
    """
    for name, v in (("batch", batch), ("seq", seq), ("n_layer", n_layer)):
        check_int(name, v, 1)
    ids = torch.randint(0, VOCAB, (batch, seq))
    saved = {}
    for on in (False, True):
        torch.manual_seed(0)
        model = tiny_gpt2(block_size=seq, n_embd=n_embd, n_layer=n_layer, n_head=n_head)
        if on:
            checkpoint_blocks(model.transformer.h)
        saved[on] = _saved_bytes(model, ids)
    modelled = [gpt2_saved_activation_bytes(batch, seq, n_embd, n_layer, n_head, VOCAB, checkpointing=c).total
                for c in (False, True)]
    # resident from the end of forward into backward, where both peaks lie: the weights and Adam's two
    # moments; zero_grad(set_to_none=True), PyTorch's default since 2.0, leaves no gradient until backward
    return CheckpointSavings(saved[False], saved[True], 3 * count_parameters(model).total_bytes, *modelled)


# --- 7: checkpoint_sequential as guides write it --------------------------------------------


@dataclass(frozen=True)
class SequentialCheck:
    """The guides' call (its error, or ``None`` if it ran) and the correct call against plain."""

    as_written_error: str | None
    max_grad_diff: float  # max |gradient difference|, checkpointed against plain
    kept_plain: int       # bytes kept for backward
    kept_checkpointed: int

    @property
    def runs_as_written(self) -> bool:
        return self.as_written_error is None


def checkpoint_sequential_check(width: int = 256, depth: int = 8, rows: int = 512,
                                segments: int = 2) -> SequentialCheck:
    """Try ``checkpoint_sequential(custom_forward, chunks=..., module=..., inputs=...)`` as guides
    write it, then the real signature against the plain model (gradients, bytes kept).

    Raises:
        ValueError: for sizes that are not ints >= 1.
    """
    from torch.utils.checkpoint import checkpoint_sequential

    for name, v in (("width", width), ("depth", depth), ("rows", rows), ("segments", segments)):
        check_int(name, v, 1)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)])
    x = torch.randn(rows, width, requires_grad=True)  # (rows, width)
    try:
        checkpoint_sequential(lambda *a: model(*a), chunks=segments, module=model, inputs=x)  # as written
        error = None
    except TypeError as e:
        error = f"TypeError: {e}"
    grads, kept = {}, {}
    for ckpt in (False, True):
        model.zero_grad()
        with SavedTensorMeter(model, inputs=[x]) as meter:
            out = checkpoint_sequential(model, segments, x, use_reentrant=False) if ckpt else model(x)
        out.square().mean().backward()
        kept[ckpt] = meter.report().activation_bytes
        grads[ckpt] = torch.cat([p.grad.flatten() for p in model.parameters()])
    return SequentialCheck(error, float((grads[False] - grads[True]).abs().max()), kept[False], kept[True])


# --- 11: "empty the cache before each micro-batch" ------------------------------------------


@dataclass(frozen=True)
class EmptyCacheTiming:
    """Accumulation steps timed in alternation, plain and with freed memory handed back first."""

    plain: timing.Measurement
    emptied: timing.Measurement
    how: str  # "empty_cache()" or "malloc_trim(0)"

    def speedup(self) -> stats.Estimate:
        """Plain time over emptied time (> 1: emptying is faster), over paired rounds."""
        return stats.median_ratio(self.plain.times_s, self.emptied.times_s)


def time_emptied_cache(micro: int = 4, batch: int = 4, seq: int = 64, repeat: int = 5,
                       device: torch.device | str | None = None) -> EmptyCacheTiming:
    """Time a tiny GPT-2's accumulation step over ``micro`` micro-batches, with and without
    ``torch.cuda.empty_cache()`` (CPU: glibc's ``malloc_trim(0)``) before each, interleaved in
    balanced orders (``repeat`` rounded up to whole cycles: each first in half the rounds).

    Raises:
        ValueError: for sizes that are not ints >= 1.
    """
    for name, v in (("micro", micro), ("batch", batch), ("seq", seq), ("repeat", repeat)):
        check_int(name, v, 1)
    dev = timing.resolve_device(device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    model = tiny_gpt2(block_size=seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [torch.randint(0, VOCAB, (batch, seq), device=dev) for _ in range(micro)]  # (B, T) each

    def step(empty: bool):
        def run() -> None:
            for ids in batches:
                if empty:  # hand freed blocks back: the next micro-batch must get them again
                    torch.cuda.empty_cache() if cuda else trim_heap()
                (model(input_ids=ids, labels=ids).loss / micro).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    plain, emptied = timing.interleaved_balanced([step(False), step(True)], warmup=1, repeat=repeat,
                                                 device=dev)
    return EmptyCacheTiming(plain, emptied, "empty_cache()" if cuda else "malloc_trim(0)")


# --- 18: "ZeRO stage by model size" ---------------------------------------------------------


def advised_zero_stage(billions: float) -> int:
    """The advice as a function: stage 1 below 1 B parameters, 2 for 1-10 B, 3 above."""
    check_real("billions", billions, 0, lo_open=True)
    return 1 if billions < 1 else 2 if billions <= 10 else 3


# width over depth of the GPT-3 / LLaMA shapes (GPT-3 13B: 5140 wide, 40 layers; LLaMA 13B: 5120, 40)
ASPECT = 128


def activation_gb(billions: float, tokens: int) -> float:
    """GB (1e9 bytes) of activations one rank keeps for backward over a micro-batch of ``tokens``
    tokens, without recomputation, in 16-bit: Korthikanti et al. 2022's ``34 h`` bytes per token
    per layer (their ``5 a s`` term for the attention scores left out: a fused attention kernel
    keeps none). The shape comes from the size: ``12 L h^2`` parameters with ``h = 128 L``
    (:data:`ASPECT`); 13 B gives 40 layers 5,171 wide, 14.5 GB for 2,048 tokens.

    Raises:
        TypeError, ValueError: for ``billions`` not > 0 or ``tokens`` not an int >= 0.
    """
    check_real("billions", billions, 0, lo_open=True)
    check_int("tokens", tokens, 0)
    layers = (billions * 1e9 / (12 * ASPECT ** 2)) ** (1 / 3)
    return 34 * ASPECT * layers * layers * tokens / 1e9


@dataclass(frozen=True)
class ZeroRuleRow:
    """One model size: the advised stage, the lowest stage whose model states (plus
    ``activations_gb``, the activations a rank keeps) fit, and whether the advice is wrong (its
    stage does not fit where another does, or it is stage 3, with 1.5x the communication, where
    stage 1 or 2 fits). Where no stage fits, stage 3 (the least memory) is the right one to
    advise, and the run needs more GPUs, recomputation or offload besides. ``headroom_gb``: the
    card's memory less the model states and activations a rank holds at the lowest stage that fits
    (where none fits, at stage 3: then below the reserve :func:`zero_rule_rows` asked for, or
    negative)."""

    billions: float
    n_gpus: int
    advised: int
    lowest_fitting: int | None  # None: no stage fits, more GPUs needed
    activations_gb: float = 0.0  # per rank, counted beside the model states
    headroom_gb: float = 0.0  # the card less what a rank holds at the lowest fitting stage (none fits: at 3)

    @property
    def rule_wrong(self) -> bool:
        low = self.lowest_fitting
        if low is None:  # nothing fits: the rule is wrong only if it did not ask for the least memory
            return self.advised != 3
        return self.advised < low or (self.advised == 3 and low < 3)


def zero_rule_rows(sizes_b: Sequence[float], gpu_gb: float = 80, n_gpus: int = 8,
                   tokens: int = 0, reserve_gb: float = 0.0) -> list[ZeroRuleRow]:
    """The advice against the mixed-precision Adam model states per rank, plus the activations of
    a micro-batch of ``tokens`` tokens per rank (:func:`activation_gb`; 0: model states only): a
    stage fits where both fit ``gpu_gb`` with at least ``reserve_gb`` to spare (what neither
    counts: the CUDA context, the communication library's buffers, gathered weights, the
    allocator's fragmentation).

    Raises:
        TypeError, ValueError: for empty ``sizes_b``, a size or ``gpu_gb`` not > 0, ``n_gpus`` < 1
            or ``tokens`` < 0, or a ``reserve_gb`` not in [0, ``gpu_gb``).
    """
    check_real("gpu_gb", gpu_gb, 0, lo_open=True)
    check_real("reserve_gb", reserve_gb, 0, gpu_gb, hi_open=True)
    check_int("n_gpus", n_gpus, 1)
    check_int("tokens", tokens, 0)
    rows = []
    for b in check_items("sizes_b", sizes_b):
        act = activation_gb(b, tokens)
        room = [gpu_gb - zero_model_states(b * 1e9, n_gpus, s).total_gb - act for s in range(4)]
        fits = [s for s in range(4) if room[s] >= reserve_gb]
        rows.append(ZeroRuleRow(b, n_gpus, advised_zero_stage(b), fits[0] if fits else None, act,
                                room[fits[0] if fits else 3]))
    return rows


def largest_model_for_stage(stage: int, gpu_gb: float = 80, n_gpus: int = 8) -> float:
    """Billions of parameters whose model states just fit ``gpu_gb`` at ``stage``, by bisection
    over :func:`perfkit.memory.zero_model_states` (the formula is not inverted by hand).

    Raises:
        ValueError: for ``stage`` outside 0-3, ``gpu_gb`` not > 0 or ``n_gpus`` < 1.
    """
    check_int("stage", stage, 0, 3)
    check_real("gpu_gb", gpu_gb, 0, lo_open=True)
    check_int("n_gpus", n_gpus, 1)
    lo, hi = 0.0, 1e5  # billions
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if zero_model_states(mid * 1e9, n_gpus, stage).total_gb <= gpu_gb else (lo, mid)
    return lo
