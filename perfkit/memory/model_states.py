"""Model states: ZeRO's formulas, and parameters and optimizer state counted from storages.

Model states follow Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models* (SC 2020), section 3: with ``Ψ`` parameters, ``N`` data-parallel
ranks and ``K`` bytes of optimizer state per parameter, mixed-precision Adam holds
``(2 + 2 + K) Ψ`` bytes per rank (fp16 parameters, fp16 gradients, fp32 master copy,
momentum and variance: ``K = 12``). ZeRO stage 1 shards the optimizer state, stage 2 also
the gradients, stage 3 also the parameters. Activations are measured exactly by
:class:`~perfkit.memory.saved_tensors.SavedTensorMeter`; :mod:`perfkit.memory.activations`
predicts them for the transformers GPT-2 block, :mod:`perfkit.memory.anatomy` measures a step.

Usage::

    from perfkit.memory.model_states import zero_model_states
    print(zero_model_states(7.5e9, world_size=64, stage=1).total_gb)   # 31.40625
    print(count_parameters(model).trainable, optimizer_state_bytes(opt))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from perfkit._checks import check_int, check_real

__all__ = [
    "RECIPES",
    "ModelStateBytes",
    "ParamCount",
    "StateRecipe",
    "LiveModelStates",
    "count_parameters",
    "live_model_states",
    "optimizer_state_bytes",
    "storage_bytes",
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
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {self.name!r}")
        for k in ("param_bytes", "grad_bytes", "optimizer_bytes"):
            check_real(k, getattr(self, k), 0)


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
    if not isinstance(recipe, str) or recipe not in RECIPES:  # a list is not even hashable
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
        TypeError, ValueError: for a ``num_params`` that is not a finite number > 0, a
            ``world_size`` not an int >= 1, a ``stage`` not an int in 0-3 or an unknown
            recipe.
    """
    check_real("num_params", num_params, 0, lo_open=True)
    check_int("world_size", world_size, 1)
    check_int("stage", stage, 0, 3)
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


def storage_key(t: torch.Tensor) -> tuple[str, int]:
    """``t``'s storage as ``(device, address)``: views of one storage share it, so bytes are counted once."""
    return (str(t.device), t.untyped_storage().data_ptr())


def tensor_nbytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s whole storage (a view holds all of it alive), or of its elements when it has none."""
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
                seen.setdefault(storage_key(v), tensor_nbytes(v))
    return sum(seen.values())


def storage_bytes(tensors: Iterable[torch.Tensor | None],
                  seen: set[tuple[str, int]] | None = None) -> int:
    """Bytes of the distinct storages under ``tensors`` (views of one buffer count once,
    the whole buffer, padding included); storages already in ``seen`` are skipped and
    the new ones added to it. ``None`` entries are skipped, and so are tensors that own no
    memory (``holds_no_bytes``: the marker ZeRO-2/3 leave as ``p.grad``).

    Raises:
        TypeError: for an item that is neither a tensor nor ``None``.
    """
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors must hold tensors or None, got {type(t).__name__}")
        if getattr(t, "holds_no_bytes", False):  # perfkit.parallel.ShardedGradient
            continue
        key = storage_key(t)
        if key not in seen and t.numel():
            seen.add(key)
            total += tensor_nbytes(t)
    return total


@dataclass(frozen=True)
class LiveModelStates:
    """Model-state bytes alive on one rank, counted from storages (compare with
    :func:`zero_model_states`)."""

    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        """Bytes."""
        return self.params + self.grads + self.optimizer


def live_model_states(params: Iterable[torch.Tensor | None], grads: Iterable[torch.Tensor | None],
                      optimizer_state: Iterable[torch.Tensor | None]) -> LiveModelStates:
    """Bytes of distinct storages holding parameters, gradients and optimizer state.

    A storage is counted once, in the first category that holds it (parameters first).
    Call it where all three are alive: after backward, before the step, from the second
    step on (optimizers allocate their state at the first step).

    Raises:
        TypeError: for an item that is neither a tensor nor ``None``.
    """
    seen: set[tuple[str, int]] = set()
    return LiveModelStates(storage_bytes(params, seen), storage_bytes(grads, seen),
                           storage_bytes(optimizer_state, seen))
