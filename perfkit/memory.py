"""Where training memory goes: model states (ZeRO's formulas), saved activations, parameters.

Model states follow Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models* (SC 2020), section 3: with ``Ψ`` parameters, ``N`` data-parallel
ranks and ``K`` bytes of optimizer state per parameter, mixed-precision Adam holds
``(2 + 2 + K) Ψ`` bytes per rank (fp16 parameters, fp16 gradients, fp32 master copy,
momentum and variance: ``K = 12``). ZeRO stage 1 shards the optimizer state, stage 2 also
the gradients, stage 3 also the parameters. Activations are measured exactly by
:class:`SavedTensorMeter` (what autograd saves for backward) and predicted for the
transformers GPT-2 block by :func:`gpt2_saved_activation_bytes`.

Usage::

    from perfkit.memory import zero_model_states
    print(zero_model_states(7.5e9, world_size=64, stage=1).total_gb)   # 31.40625
    with SavedTensorMeter(model) as meter: loss = model(x).sum()
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "RECIPES",
    "ActivationEstimate",
    "CheckpointedBlock",
    "ModelStateBytes",
    "ParamCount",
    "SavedTensorMeter",
    "SavedTensorReport",
    "StateRecipe",
    "StepAnatomy",
    "checkpoint_blocks",
    "count_parameters",
    "gpt2_num_params",
    "gpt2_saved_activation_bytes",
    "gpt2_step_memory",
    "measure_step_anatomy",
    "optimizer_state_bytes",
    "peak_rss_bytes",
    "reset_peak_rss",
    "rss_bytes",
    "trim_heap",
    "zero_model_states",
    "zero_table",
]

GB = 1e9  # the ZeRO paper's GB are decimal


# --- model states: the ZeRO formulas ---------------------------------------------------


@dataclass(frozen=True)
class StateRecipe:
    """Bytes per parameter of each model state: weights, gradients and optimizer state (K)."""

    name: str
    param_bytes: float
    grad_bytes: float
    optimizer_bytes: float

    def __post_init__(self) -> None:
        for k in ("param_bytes", "grad_bytes", "optimizer_bytes"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")


RECIPES: dict[str, StateRecipe] = {
    # fp16/bf16 weights and grads; fp32 master weights, momentum, variance (the paper's K=12)
    "mixed_adam": StateRecipe("mixed_adam", 2, 2, 12),
    # everything fp32: Adam keeps momentum and variance only
    "fp32_adam": StateRecipe("fp32_adam", 4, 4, 8),
    # fp16/bf16 weights and grads; fp32 master weights and momentum
    "mixed_sgd_momentum": StateRecipe("mixed_sgd_momentum", 2, 2, 8),
    "fp32_sgd_momentum": StateRecipe("fp32_sgd_momentum", 4, 4, 4),
    "fp32_sgd": StateRecipe("fp32_sgd", 4, 4, 0),
}


def _recipe(recipe: str | StateRecipe) -> StateRecipe:
    if isinstance(recipe, StateRecipe):
        return recipe
    if recipe not in RECIPES:
        raise ValueError(
            f"recipe must be a StateRecipe or one of {sorted(RECIPES)}, got {recipe!r}")
    return RECIPES[recipe]


@dataclass(frozen=True)
class ModelStateBytes:
    """Model-state bytes held by *one* rank at a ZeRO stage (parameters, grads, optimizer)."""

    num_params: float
    world_size: int
    stage: int
    recipe: StateRecipe
    params: float  # bytes
    grads: float  # bytes
    optimizer: float  # bytes

    @property
    def total(self) -> float:
        """Bytes per rank."""
        return self.params + self.grads + self.optimizer

    @property
    def total_gb(self) -> float:
        """Bytes per rank in decimal GB, the unit of the ZeRO paper."""
        return self.total / GB


def zero_model_states(
    num_params: float, world_size: int = 1, stage: int = 0,
    recipe: str | StateRecipe = "mixed_adam",
) -> ModelStateBytes:
    """Per-rank model-state bytes at ZeRO ``stage`` (ZeRO paper, section 3 and Figure 1).

    With ``Ψ = num_params``, ``N = world_size`` and the recipe's bytes per parameter
    ``P`` (weights), ``G`` (gradients), ``K`` (optimizer state)::

        stage 0 (plain data parallel):  P Ψ + G Ψ + K Ψ
        stage 1 (P_os, optimizer state): P Ψ + G Ψ + K Ψ / N
        stage 2 (P_os+g, + gradients):   P Ψ + (G + K) Ψ / N
        stage 3 (P_os+g+p, + weights):   (P + G + K) Ψ / N

    Args:
        num_params: Ψ, the number of parameters (> 0; a float allows 7.5e9).
        world_size: N, data-parallel ranks (>= 1).
        stage: 0, 1, 2 or 3.
        recipe: a :data:`RECIPES` name or a :class:`StateRecipe`.

    Returns:
        A :class:`ModelStateBytes` for one rank.

    Raises:
        ValueError: for ``num_params <= 0``, ``world_size < 1``, a stage outside 0-3 or an
            unknown recipe name.
    """
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    r = _recipe(recipe)
    n = float(world_size)
    psi = float(num_params)
    return ModelStateBytes(
        num_params=psi, world_size=world_size, stage=stage, recipe=r,
        params=r.param_bytes * psi / (n if stage >= 3 else 1.0),
        grads=r.grad_bytes * psi / (n if stage >= 2 else 1.0),
        optimizer=r.optimizer_bytes * psi / (n if stage >= 1 else 1.0),
    )


def zero_table(num_params: float, world_size: int,
               recipe: str | StateRecipe = "mixed_adam") -> list[ModelStateBytes]:
    """Stages 0-3 side by side (the ZeRO paper's Figure 1 is ``zero_table(7.5e9, 64)``)."""
    return [zero_model_states(num_params, world_size, s, recipe) for s in range(4)]


# --- parameters and optimizer state, counted from live objects -------------------------


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    return (str(t.device), t.untyped_storage().data_ptr())


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):  # tensors without a plain storage
        return t.numel() * t.element_size()


@dataclass(frozen=True)
class ParamCount:
    """Parameter totals of a module (shared/tied parameters counted once)."""

    total: int
    trainable: int
    total_bytes: int
    trainable_bytes: int

    @property
    def trainable_fraction(self) -> float:
        """Trainable over all parameters (LoRA's headline number)."""
        return self.trainable / self.total if self.total else 0.0


def count_parameters(module: nn.Module) -> ParamCount:
    """Count a module's parameters and those with ``requires_grad``.

    Raises:
        TypeError: if ``module`` is not an ``nn.Module``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    params = list(module.parameters())  # parameters() already de-duplicates tied weights
    train = [p for p in params if p.requires_grad]
    return ParamCount(
        total=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in train),
        total_bytes=sum(p.numel() * p.element_size() for p in params),
        trainable_bytes=sum(p.numel() * p.element_size() for p in train),
    )


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (unique storages; step counters too).

    Raises:
        TypeError: if ``optimizer`` has no ``state`` mapping.
    """
    state = getattr(optimizer, "state", None)
    if not hasattr(state, "values"):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    seen: dict[tuple[str, int], int] = {}
    for s in state.values():
        for v in s.values():
            if isinstance(v, torch.Tensor):
                seen.setdefault(_storage_key(v), _nbytes(v))
    return sum(seen.values())


# --- activations: what autograd saves for backward -------------------------------------


@dataclass(frozen=True)
class SavedTensorReport:
    """Bytes autograd saved for backward, by unique storage.

    Attributes:
        activation_bytes: storages that are neither parameters/buffers nor given inputs.
        parameter_bytes: parameter and buffer storages that ops saved (e.g. a Linear's
            weight); they exist anyway, so they are not extra memory.
        input_bytes: storages of the tensors passed as ``inputs``.
        n_packed: how many times autograd saved a tensor (views of one storage included).
        n_storages: distinct storages among them.
        activation_bytes_by_dtype: ``activation_bytes`` split by dtype name.
    """

    activation_bytes: int
    parameter_bytes: int
    input_bytes: int
    n_packed: int
    n_storages: int
    activation_bytes_by_dtype: dict[str, int] = field(default_factory=dict)


class SavedTensorMeter:
    """Count the exact bytes autograd keeps for backward while the context is open.

    Every tensor an op saves for backward passes through the pack hook of
    ``torch.autograd.graph.saved_tensors_hooks``. Views share storage (``q``, ``k``, ``v``
    are slices of one projection), so bytes are counted per *unique storage*, at the
    storage's full size, which is what stays allocated. Parameters and inputs are saved
    too (a matmul keeps its weight); they are reported apart from activations.

    Inside the context the meter holds a reference to each saved storage so that
    addresses cannot be reused and double counted; leaving the context drops them.
    An inner ``saved_tensors_hooks`` (non-reentrant checkpointing, ``save_on_cpu``)
    takes precedence over this one for the tensors saved inside it, which is what
    makes checkpointed activations disappear from the count.

    Example::

        with SavedTensorMeter(model) as meter:
            loss = model(x).sum()
        print(meter.report().activation_bytes)
        loss.backward()
    """

    def __init__(self, params: nn.Module | Iterable[torch.Tensor] | None = None,
                 inputs: Iterable[torch.Tensor] = ()) -> None:
        """Args:
            params: a module (its parameters and buffers) or tensors to report as
                parameters; ``None`` reports everything as activations or inputs.
            inputs: tensors to report as inputs (e.g. the batch).

        Raises:
            TypeError: if ``params`` or ``inputs`` holds something other than tensors.
        """
        if isinstance(params, nn.Module):
            tensors = [*params.parameters(), *params.buffers()]
        else:
            tensors = list(params or [])
        self._param_keys = {_storage_key(_tensor(t, "params")) for t in tensors}
        self._input_keys = {_storage_key(_tensor(t, "inputs")) for t in inputs}
        self._saved: dict[tuple[str, int], tuple[torch.UntypedStorage, str]] = {}
        self._n_packed = 0
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        self._n_packed += 1
        key = _storage_key(t)
        if key not in self._saved:
            self._saved[key] = (t.untyped_storage(), str(t.dtype).removeprefix("torch."))
        return t

    def __enter__(self) -> SavedTensorMeter:
        self._saved.clear()
        self._n_packed = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._hooks is not None
        self._hooks.__exit__(*exc)
        self._hooks = None
        self._report = self._make_report()
        self._saved.clear()  # drop the storage references; the graph keeps what it needs

    def _make_report(self) -> SavedTensorReport:
        act = par = inp = 0
        by_dtype: dict[str, int] = {}
        for key, (storage, dtype) in self._saved.items():
            n = storage.nbytes()
            if key in self._param_keys:
                par += n
            elif key in self._input_keys:
                inp += n
            else:
                act += n
                by_dtype[dtype] = by_dtype.get(dtype, 0) + n
        return SavedTensorReport(act, par, inp, self._n_packed, len(self._saved), by_dtype)

    def report(self) -> SavedTensorReport:
        """The counts so far (inside the context) or of the whole context (after it)."""
        return self._make_report() if self._hooks is not None else self._report


def _tensor(t: object, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must hold tensors, got {type(t).__name__}")
    return t


# --- activations: the model for transformers' GPT-2 ------------------------------------


@dataclass(frozen=True)
class ActivationEstimate:
    """Predicted bytes saved for backward by a transformers GPT-2 LM forward pass.

    Attributes:
        per_layer: bytes one block saves (with checkpointing: its input only).
        outside_layers: final LayerNorm, log-softmax of the logits, token/position/label
            ids, the attention mask that checkpointed eager blocks keep.
        total: ``n_layer * per_layer + outside_layers``, held from forward to backward.
        recompute_peak: extra bytes while one checkpointed block is recomputed in the
            backward pass (0 without checkpointing).
    """

    per_layer: int
    outside_layers: int
    total: int
    recompute_peak: int


def gpt2_saved_activation_bytes(
    batch: int, seq_len: int, n_embd: int, n_layer: int, n_head: int, vocab_size: int,
    attention: str = "sdpa", dtype_bytes: int = 4, checkpointing: bool = False,
) -> ActivationEstimate:
    """Bytes a transformers ``GPT2LMHeadModel`` saves for backward, counted op by op.

    With ``B, T, C, H, V`` = batch, sequence, width, heads, vocabulary and the element
    size ``d`` of the model's dtype, one block (dropout 0) saves, in elements:

    * LayerNorm 1 and 2: input and output ``4 BTC``, mean and rstd ``4 BT``;
    * the attention output before ``c_proj``: ``BTC``;
    * MLP: ``c_fc`` output, GELU's ``tanh``, ``1 + tanh`` and ``0.5 x`` terms, and the
      GELU output that ``c_proj`` keeps: ``5 x 4BTC = 20 BTC``;
    * attention, ``"eager"``: contiguous copies of q, k, v ``3 BTC`` and the softmax
      probabilities ``B H T^2``; ``"sdpa"`` (PyTorch's CPU flash kernel): the fused
      q/k/v projection ``3 BTC``, copies of q and of the output ``2 BTC`` and the
      log-sum-exp ``BHT`` (always fp32), and no ``T^2`` term.

    Outside the blocks: the final LayerNorm (``2 BTC + 2 BT``), the fp32 log-softmax of
    the logits (``4 BTV`` bytes, transformers upcasts them), int64 token, position and
    label ids (``8 (2BT + T)`` bytes) and a 4-byte scalar. Checkpointing each block keeps
    only its input (``BTC``), plus, with eager attention, the ``(B, 1, T, T)`` additive
    mask passed to every block, and recomputes one block at a time in the backward pass.
    ``tests/unit/test_memory.py`` checks this count against :class:`SavedTensorMeter`.

    Args:
        batch, seq_len, n_embd, n_layer, n_head, vocab_size: model and batch shape (>= 1).
        attention: ``"eager"`` or ``"sdpa"`` (transformers' ``attn_implementation``).
        dtype_bytes: element size of the activations (4 fp32, 2 bf16/fp16).
        checkpointing: one checkpoint per block.

    Returns:
        An :class:`ActivationEstimate` in bytes.

    Raises:
        ValueError: for a non-positive size, an unknown ``attention`` or ``dtype_bytes``.
    """
    dims = dict(batch=batch, seq_len=seq_len, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                vocab_size=vocab_size)
    for k, v in dims.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be a positive int, got {v!r}")
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
    if dtype_bytes not in (1, 2, 4, 8):
        raise ValueError(f"dtype_bytes must be 1, 2, 4 or 8, got {dtype_bytes!r}")
    b, t, c, h, v = batch, seq_len, n_embd, n_head, vocab_size
    btc, bt = b * t * c, b * t
    if attention == "eager":
        full_layer = dtype_bytes * (28 * btc + 4 * bt + b * h * t * t)  # bytes
    else:  # the log-sum-exp is fp32 whatever the dtype
        full_layer = dtype_bytes * (30 * btc + 4 * bt) + 4 * b * h * t
    outside = dtype_bytes * (2 * btc + 2 * bt) + 4 * bt * v + 8 * (2 * bt + t) + 4
    if checkpointing:
        per_layer = dtype_bytes * btc
        if attention == "eager":
            outside += dtype_bytes * b * t * t
        return ActivationEstimate(per_layer, outside, n_layer * per_layer + outside, full_layer)
    return ActivationEstimate(full_layer, outside, n_layer * full_layer + outside, 0)


def gpt2_num_params(n_embd: int, n_layer: int, vocab_size: int, n_positions: int) -> int:
    """Parameters of a transformers GPT-2 LM (LM head tied to the token embedding).

    Per block: two LayerNorms ``4C``, ``c_attn`` ``3C^2 + 3C``, attention ``c_proj``
    ``C^2 + C``, ``c_fc`` ``4C^2 + 4C``, MLP ``c_proj`` ``4C^2 + C``: ``12 C^2 + 13 C``.
    Plus token and position embeddings ``(V + P) C`` and the final LayerNorm ``2C``.

    Raises:
        ValueError: for a non-positive size.
    """
    for k, v in dict(n_embd=n_embd, n_layer=n_layer, vocab_size=vocab_size,
                     n_positions=n_positions).items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be a positive int, got {v!r}")
    c = n_embd
    return n_layer * (12 * c * c + 13 * c) + (vocab_size + n_positions) * c + 2 * c


def gpt2_step_memory(
    n_embd: int, n_layer: int, n_head: int, vocab_size: int, batch: int, seq_len: int,
    precision: str = "fp32", checkpointing: bool = False, attention: str = "sdpa",
) -> dict[str, float]:
    """Predicted bytes of one GPT-2 training step with Adam, by kind (the widget's bar).

    ``precision="fp32"``: fp32 weights, gradients, Adam state and activations
    (:data:`RECIPES` ``fp32_adam``). ``"mixed"``: the ZeRO paper's mixed precision, 16-bit
    weights, gradients and activations with fp32 master weights and Adam state
    (``mixed_adam``). ``torch.autocast`` differs from both (fp32 weights, activations
    partly 16-bit); notebook 04 measures how. The position table is sized to ``seq_len``.

    Returns:
        ``{"parameters", "gradients", "optimizer state", "activations", "recompute"}``
        in bytes; ``recompute`` is the extra peak of one recomputed block (0 without
        checkpointing).

    Raises:
        ValueError: for an unknown ``precision`` or a bad size (see
            :func:`gpt2_saved_activation_bytes`).
    """
    if precision not in ("fp32", "mixed"):
        raise ValueError(f"precision must be 'fp32' or 'mixed', got {precision!r}")
    psi = gpt2_num_params(n_embd, n_layer, vocab_size, seq_len)
    states = zero_model_states(psi, 1, 0, "fp32_adam" if precision == "fp32" else "mixed_adam")
    act = gpt2_saved_activation_bytes(batch, seq_len, n_embd, n_layer, n_head, vocab_size,
                                      attention, 4 if precision == "fp32" else 2,
                                      checkpointing)
    return {"parameters": states.params, "gradients": states.grads,
            "optimizer state": states.optimizer, "activations": float(act.total),
            "recompute": float(act.recompute_peak)}


class CheckpointedBlock(nn.Module):
    """Run ``block`` under ``torch.utils.checkpoint``: keep its inputs, recompute the rest.

    The forward pass saves only what the block receives; the backward pass runs the
    block's forward once more to rebuild its activations, one block at a time.
    """

    def __init__(self, block: nn.Module, use_reentrant: bool = False) -> None:
        super().__init__()
        self.block = block
        self.use_reentrant = use_reentrant

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, *args, use_reentrant=self.use_reentrant, **kwargs)


def checkpoint_blocks(blocks: nn.ModuleList, use_reentrant: bool = False) -> nn.ModuleList:
    """Wrap every module of ``blocks`` in :class:`CheckpointedBlock`, in place.

    Example: ``checkpoint_blocks(gpt2.transformer.h)``.

    Raises:
        TypeError: if ``blocks`` is not an ``nn.ModuleList``.
    """
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError(f"blocks must be an nn.ModuleList, got {type(blocks).__name__}")
    for i, b in enumerate(blocks):
        if not isinstance(b, CheckpointedBlock):
            blocks[i] = CheckpointedBlock(b, use_reentrant)
    return blocks


# --- process memory (CPU): resident set size and its resettable peak -------------------


def trim_heap() -> bool:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``); False elsewhere.

    glibc keeps freed small blocks for reuse; a step that reuses them does not raise the
    RSS. Trimming first makes a peak-RSS measurement see the step's own allocations.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return bool(ctypes.CDLL(name).malloc_trim(0)) if name else False
    except (OSError, AttributeError):
        return False


def _status_bytes(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(rf"^{field_name}:\s+(\d+) kB", f.read(), re.MULTILINE)
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def rss_bytes() -> int:
    """Resident set size of this process in bytes (``psutil`` off Linux)."""
    v = _status_bytes("VmRSS")
    if v is None:
        import psutil

        v = psutil.Process().memory_info().rss
    return v


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux ``/proc/self/clear_refs``); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak resident set size since start or since :func:`reset_peak_rss`, in bytes."""
    v = _status_bytes("VmHWM")
    if v is None:
        import resource

        v = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return v


# --- one training step, measured -------------------------------------------------------


@dataclass(frozen=True)
class StepAnatomy:
    """Bytes of one training step by kind, and the measured peak.

    Attributes:
        params, grads, optimizer_state: model states after the step (unique storages).
        activations: bytes saved for backward by the forward pass (:class:`SavedTensorMeter`).
        peak: the step's measured peak above the memory in use before it: the CUDA
            allocator's ``max_memory_allocated`` on GPU, the process's peak RSS on CPU
            (after :func:`trim_heap`, so reused free blocks do not hide allocations).
        peak_source: ``"cuda_allocator"`` or ``"rss"``.
        snapshot_path: the CUDA memory snapshot written, if any (open it in
            https://pytorch.org/memory_viz).
    """

    params: int
    grads: int
    optimizer_state: int
    activations: int
    peak: int
    peak_source: str
    snapshot_path: str | None = None

    @property
    def accounted(self) -> int:
        """Parameters + gradients + optimizer state + saved activations, in bytes."""
        return self.params + self.grads + self.optimizer_state + self.activations


def measure_step_anatomy(
    model: nn.Module, compute_loss: Callable[[], torch.Tensor],
    optimizer: torch.optim.Optimizer, snapshot_path: str | None = None,
) -> StepAnatomy:
    """Run one step (``zero_grad``, forward, backward, ``step``) and account its bytes.

    Start from a fresh optimizer to see its state being allocated inside the peak.

    Args:
        model: the module whose parameters are trained.
        compute_loss: runs the forward pass and returns a scalar loss.
        optimizer: optimizer over ``model``'s parameters.
        snapshot_path: on CUDA, record the allocator's history during the step and dump
            a snapshot here (a pickle for PyTorch's memory visualizer); ignored on CPU.

    Returns:
        A :class:`StepAnatomy`.

    Raises:
        TypeError: if ``model`` is not a module or ``compute_loss`` is not callable.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(compute_loss):
        raise TypeError(f"compute_loss must be callable, got {type(compute_loss).__name__}")
    cuda = any(p.is_cuda for p in model.parameters())
    optimizer.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if snapshot_path:
            torch.cuda.memory._record_memory_history(max_entries=100_000)
    else:
        import gc

        gc.collect()
        trim_heap()
        base = rss_bytes()
        reset_peak_rss()
    with SavedTensorMeter(model) as meter:
        loss = compute_loss()
    loss.backward()
    optimizer.step()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        if snapshot_path:
            torch.cuda.memory._dump_snapshot(snapshot_path)
            torch.cuda.memory._record_memory_history(enabled=None)
    else:
        peak = peak_rss_bytes() - base
    grads = {_storage_key(p.grad): _nbytes(p.grad) for p in model.parameters()
             if p.grad is not None}
    return StepAnatomy(
        params=count_parameters(model).total_bytes, grads=sum(grads.values()),
        optimizer_state=optimizer_state_bytes(optimizer),
        activations=meter.report().activation_bytes, peak=peak,
        peak_source="cuda_allocator" if cuda else "rss",
        snapshot_path=snapshot_path if cuda else None,
    )
