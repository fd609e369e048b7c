"""Measured memory of one training step: the process's (peak) RSS and the step's anatomy.

Follows PyTorch's memory tooling (``torch.cuda.max_memory_allocated`` and the allocator
snapshots of https://pytorch.org/memory_viz) on a GPU; on the CPU, Linux's peak resident
set size (``VmHWM``, reset through ``/proc/self/clear_refs``) after glibc's ``malloc_trim``.
:func:`measure_step_anatomy` splits one step into the model states and saved activations
counted by :mod:`perfkit.memory.model_states` and compares them with that measured peak.

Usage::

    from perfkit.memory.anatomy import measure_step_anatomy
    a = measure_step_anatomy(model, lambda: model(input_ids=x, labels=x).loss, optimizer)
    print(a.accounted, a.peak, a.peak_source)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from perfkit._checks import check_callable, check_type
from perfkit.memory.model_states import (
    count_parameters,
    optimizer_state_bytes,
    storage_key,
    tensor_nbytes,
)

# the step's grads are counted per unique storage, exactly as perfkit.memory counts state
from perfkit.memory.saved_tensors import SavedTensorMeter

__all__ = [
    "StepAnatomy",
    "measure_step_anatomy",
    "peak_rss_bytes",
    "reset_peak_rss",
    "rss_bytes",
    "steady_peak_text",
    "trim_heap",
]


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
        activations: bytes saved for backward by the forward pass
            (:class:`perfkit.memory.SavedTensorMeter`).
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
        TypeError: if ``model`` is not a module, ``compute_loss`` is not callable or does not
            return a tensor, ``optimizer`` has no ``zero_grad`` and ``step``, or
            ``snapshot_path`` is not a path.
    """
    check_type("model", model, nn.Module)
    check_callable("compute_loss", compute_loss)
    if not all(callable(getattr(optimizer, a, None)) for a in ("zero_grad", "step")):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    check_type("snapshot_path", snapshot_path, (str, os.PathLike), optional=True)
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
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"compute_loss must return the loss tensor, got {type(loss).__name__}")
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
    grads = {storage_key(p.grad): tensor_nbytes(p.grad) for p in model.parameters()
             if p.grad is not None and not getattr(p.grad, "holds_no_bytes", False)}
    return StepAnatomy(
        params=count_parameters(model).total_bytes, grads=sum(grads.values()),
        optimizer_state=optimizer_state_bytes(optimizer),
        activations=meter.report().activation_bytes, peak=peak,
        peak_source="cuda_allocator" if cuda else "rss",
        snapshot_path=snapshot_path if cuda else None,
    )


def steady_peak_text(first: StepAnatomy, steady: StepAnatomy) -> str:
    """A line on a second training step's peak against the first's (notebook 04).

    ``first`` is a fresh optimizer's first step, whose state is allocated at its ``step()``;
    ``steady`` the same optimizer's next step, which holds that state from its start, so its
    peak above the parameters is its own peak plus the state. The line names the rise and sets it
    against the state: a rise beyond the state is pages this run does not split by tensor; a rise
    short of it says the two peaks need not fall at the same moment of the step.

    Raises:
        TypeError: for an argument that is not a :class:`StepAnatomy`.
    """
    check_type("first", first, StepAnatomy)
    check_type("steady", steady, StepAnatomy)
    state = steady.optimizer_state
    above = steady.peak + state  # bytes above the parameters
    head = (f"second step (the same AdamW, its {state / 1e6:.2f} MB of state held from the start): peak "
            f"{steady.peak / 1e6:.2f} MB above its start, {above / 1e6:.2f} MB above the parameters (the "
            f"state included), {above / first.peak:.2f}x the first step's peak")
    unsplit = "this run does not split either peak by tensor (a GPU's snapshot would)."
    if above <= first.peak:
        return (head + ": not above it, though it holds the state throughout; the peak counts pages, not "
                "tensors, and " + unsplit)
    rise = above - first.peak
    said = (head + f": {rise / 1e6:.2f} MB higher; the state it holds from the start lives through forward "
            "and backward")
    if rise > state:
        return (said + ", and the rest of the difference is pages this run does not split by tensor (a GPU's "
                "snapshot would).")
    return said + (f", though the rise is {rise / state:.0%} of that state's {state / 1e6:.2f} MB: the two "
                   "peaks need not fall at the same moment of the step (the first step's may come as AdamW "
                   "allocates its state), and " + unsplit)
