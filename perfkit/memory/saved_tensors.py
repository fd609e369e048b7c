"""What autograd saves for backward, counted exactly: :class:`SavedTensorMeter`.

Every tensor an op saves for backward passes through the pack hook of
``torch.autograd.graph.saved_tensors_hooks``; the meter counts each unique storage once,
so views (``q``, ``k``, ``v`` sliced from one projection) are not counted three times.

Usage::

    with SavedTensorMeter(model) as meter:
        loss = model(x).sum()
    print(meter.report().activation_bytes)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from perfkit.memory.model_states import storage_key

__all__ = ["SavedTensorMeter", "SavedTensorReport"]


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
        parameter_copy_bytes: of ``activation_bytes``, the storages that are copies of a
            parameter in another dtype: the bfloat16 weights ``torch.autocast`` casts (and
            caches) for its matmuls, which a matmul saves as it saves its weight. They are
            not activations, but unlike the parameters they exist only for this pass.
    """

    activation_bytes: int
    parameter_bytes: int
    input_bytes: int
    n_packed: int
    n_storages: int
    activation_bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    parameter_copy_bytes: int = 0


class SavedTensorMeter:
    """Count the exact bytes autograd keeps for backward while the context is open.

    Every tensor an op saves for backward passes through the pack hook of
    ``torch.autograd.graph.saved_tensors_hooks``. Views share storage (``q``, ``k``, ``v``
    are slices of one projection), so bytes are counted per *unique storage*, at the
    storage's full size, which is what stays allocated. Parameters and inputs are saved
    too (a matmul keeps its weight); they are reported apart from activations. A copy of
    a parameter in another dtype (autocast's bfloat16 weights) is a storage of its own:
    it counts as activation bytes, and ``parameter_copy_bytes`` says how many of them.

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
            tensors = _tensors(params, "params")
        self._param_keys = {storage_key(_tensor(t, "params")) for t in tensors}
        self._by_numel: dict[int, list[torch.Tensor]] = {}  # floating parameters, to spot their copies
        for t in tensors:
            if t.is_floating_point():
                self._by_numel.setdefault(t.numel(), []).append(t)
        self._input_keys = {storage_key(_tensor(t, "inputs")) for t in _tensors(inputs, "inputs")}
        self._report: SavedTensorReport | None = None
        self._saved: dict[tuple[str, int], tuple[torch.UntypedStorage, str, bool]] = {}
        self._n_packed = 0
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        self._n_packed += 1
        key = storage_key(t)
        if key not in self._saved:
            storage = t.untyped_storage()
            copy = key not in self._param_keys and self._is_parameter_copy(t, storage)
            self._saved[key] = (storage, str(t.dtype).removeprefix("torch."), copy)
        return t

    def _is_parameter_copy(self, t: torch.Tensor, storage: torch.UntypedStorage) -> bool:
        """Whether ``storage`` holds, element for element, a parameter cast to ``t``'s dtype
        (autocast's cached weight: the matmul may save it transposed, a view of that storage)."""
        if not t.is_floating_point():
            return False
        n = storage.nbytes() // t.element_size()
        flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (n,))
        with torch.no_grad():
            return any(p.dtype != t.dtype and p.device == t.device
                       and torch.equal(flat, p.detach().reshape(-1).to(t.dtype))
                       for p in self._by_numel.get(n, ()))

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
        act = par = inp = copies = 0
        by_dtype: dict[str, int] = {}
        for key, (storage, dtype, copy) in self._saved.items():
            n = storage.nbytes()
            if key in self._param_keys:
                par += n
            elif key in self._input_keys:
                inp += n
            else:
                act += n
                copies += n if copy else 0
                by_dtype[dtype] = by_dtype.get(dtype, 0) + n
        return SavedTensorReport(act, par, inp, self._n_packed, len(self._saved), by_dtype, copies)

    def report(self) -> SavedTensorReport:
        """The counts so far (inside the context) or of the whole context (after it).

        Raises:
            RuntimeError: before the meter was entered.
        """
        if self._hooks is None and self._report is None:
            raise RuntimeError("SavedTensorMeter.report() before `with SavedTensorMeter(...)`")
        return self._make_report() if self._hooks is not None else self._report


def _tensors(ts: object, name: str) -> list:
    """``ts`` as a list: ``None`` is none, a lone tensor is one (not its rows)."""
    if ts is None or isinstance(ts, torch.Tensor):
        return [] if ts is None else [ts]
    if not isinstance(ts, Iterable):
        raise TypeError(f"{name} must be None, a tensor or an iterable of tensors, got "
                        f"{type(ts).__name__}")
    return list(ts)


def _tensor(t: object, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must hold tensors, got {type(t).__name__}")
    return t
