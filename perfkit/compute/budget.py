"""The largest batch that fits a memory budget: double the batch, then bisect.

The search is the one PyTorch Lightning's batch-size finder runs in its ``binsearch``
mode: double until a batch does not fit, then bisect between the last two. Whether a
batch fits is asked of a probe: :class:`BudgetProbe` counts a step's bytes on a CPU (model
states plus the activations autograd saves), :class:`OOMProbe` runs the step on a GPU and
survives the out-of-memory error.

Usage::

    probe = BudgetProbe(model, lambda b: model(x[:b]).sum(), budget_bytes=2**30)
    search = largest_batch(probe)                   # about 2 log2(best) trials
    print(search.best, probe.bytes[search.best])
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from perfkit._checks import check_callable, check_int, check_real, check_type
from perfkit.compute.kernels import activation_bytes
from perfkit.timing import resolve_device

__all__ = ["BatchSearch", "BudgetProbe", "OOMProbe", "largest_batch"]


@dataclass(frozen=True)
class BatchSearch:
    """Result of :func:`largest_batch`: the best batch and every ``(batch, fits)`` tried."""

    best: int
    trials: list[tuple[int, bool]]


def largest_batch(fits: Callable[[int], bool], start: int = 1, limit: int = 1 << 16) -> BatchSearch:
    """Largest batch ``b <= limit`` with ``fits(b)``: double from ``start``, then bisect.

    Assumes memory grows with the batch (if ``b`` fits, every smaller batch fits), so it
    needs about ``2 log2(best)`` trials. ``best`` is 0 when not even ``start`` fits.

    Raises:
        ValueError: if ``start`` or ``limit`` is not a positive int or ``start > limit``.
        TypeError: if ``fits`` is not callable.
    """
    if not callable(fits):
        raise TypeError(f"fits must be callable, got {type(fits).__name__}")
    check_int("start", start, 1)
    check_int("limit", limit, 1)
    if start > limit:
        raise ValueError(f"start must be <= limit, got start={start}, limit={limit}")
    trials: list[tuple[int, bool]] = []

    def probe(b: int) -> bool:
        ok = bool(fits(b))
        trials.append((b, ok))
        return ok

    good, bad = 0, None
    b = start
    while b <= limit:  # doubling phase: find a batch that does not fit
        if not probe(b):
            bad = b
            break
        good, b = b, b * 2
    if bad is None:
        if good == limit:
            return BatchSearch(good, trials)
        bad = limit + 1  # limit itself was skipped by the doubling: bisect up to it
    lo = max(good, start - 1)
    while bad - lo > 1:  # invariant: lo fits (or is below start), bad does not
        mid = (lo + bad) // 2
        lo, bad = (mid, bad) if probe(mid) else (lo, mid)
    return BatchSearch(lo if lo >= start else 0, trials)


class BudgetProbe:
    """CPU: does a training step at batch ``b`` fit ``budget_bytes``? (``fits`` for search)

    The step's memory is modelled as model states (parameters, gradients and
    ``state_bytes_per_param`` of optimizer state, from the live parameters) plus the
    activations autograd saves, measured exactly by running the forward pass at that batch
    (:func:`activation_bytes`). A CPU process does not fail at a memory limit the way a GPU
    does (it swaps, or the OS kills it), so the budget is applied to this count instead.

    Attributes:
        bytes: batch -> counted bytes, for every batch probed.
    """

    def __init__(self, model: nn.Module, forward: Callable[[int], torch.Tensor], budget_bytes: int,
                 state_bytes_per_param: int = 8) -> None:
        """Args:
            model: the module trained (its parameters are the model states).
            forward: ``forward(b)`` runs the forward pass on a batch of ``b`` and returns the loss.
            budget_bytes: the memory the step may use.
            state_bytes_per_param: optimizer bytes per parameter (Adam in fp32: 8).

        Raises:
            TypeError: if ``model`` is not a module or ``forward`` is not callable.
            ValueError: for a non-positive budget, or state bytes that are not a finite
                number >= 0.
        """
        check_type("model", model, nn.Module)
        check_callable("forward", forward)
        check_int("budget_bytes", budget_bytes, 1)
        check_real("state_bytes_per_param", state_bytes_per_param, 0)
        self.model, self.forward, self.budget_bytes = model, forward, budget_bytes
        params = [p for p in model.parameters() if p.requires_grad]
        self.state_bytes = sum(p.numel() * (2 * p.element_size() + state_bytes_per_param)
                               for p in params)
        self.bytes: dict[int, int] = {}

    def __call__(self, batch: int) -> bool:
        self.bytes[batch] = self.state_bytes + activation_bytes(lambda: self.forward(batch),
                                                                self.model)
        return self.bytes[batch] <= self.budget_bytes


class OOMProbe:
    """GPU: run ``step(b)`` and report whether it fit, surviving out-of-memory errors.

    An OOM raises ``torch.OutOfMemoryError`` from inside the step; the tensors it had
    allocated are only freed once the exception (and its traceback, which references the
    step's frames) is gone. So the probe leaves the ``except`` block first, then collects
    garbage and returns cached blocks to the driver before the next trial. With
    ``budget_bytes`` a batch that ran but peaked above the budget counts as not fitting.

    Attributes:
        bytes: batch -> peak bytes the step allocated above what was alive before it (absent
            for batches that OOMed).
    """

    def __init__(self, step: Callable[[int], object], budget_bytes: int | None = None,
                 device: torch.device | str | None = None) -> None:
        """Args:
            step: ``step(b)`` runs a full training step at batch ``b`` (and zeroes the
                gradients with ``set_to_none=True`` so trials do not accumulate memory).
            budget_bytes: optional cap below the device's capacity.
            device: a CUDA device; default the current one.

        Raises:
            TypeError: if ``step`` is not callable.
            ValueError: if the device is not CUDA, or ``budget_bytes`` is not an int >= 1.
        """
        check_callable("step", step)
        if budget_bytes is not None:
            check_int("budget_bytes", budget_bytes, 1)
        dev = resolve_device(device or "cuda")
        if dev.type != "cuda":
            raise ValueError(f"OOMProbe needs a CUDA device, got {str(dev)!r}; use BudgetProbe on CPU")
        self.step, self.budget_bytes, self.device = step, budget_bytes, dev
        self.bytes: dict[int, int] = {}

    def __call__(self, batch: int) -> bool:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)  # tensors alive before: not the step's
        oom = False
        try:
            self.step(batch)
            torch.cuda.synchronize(self.device)  # an asynchronous OOM surfaces here at the latest
        except torch.OutOfMemoryError:
            oom = True
        gc.collect()  # after the except block: the traceback no longer pins the step's tensors
        torch.cuda.empty_cache()
        if oom:
            return False
        self.bytes[batch] = torch.cuda.max_memory_allocated(self.device) - before
        return self.budget_bytes is None or self.bytes[batch] <= self.budget_bytes
