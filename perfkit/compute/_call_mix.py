"""Operator calls split by what they do: views (metadata only) and kernels, the calls a
per-call cost model charges (:func:`call_mix`). Re-exported by
:mod:`perfkit.compute.attention_cost`, whose notebook counts the tiled attention's calls.

Usage::

    mix = call_mix(lambda: torch.ones(4).view(2, 2) + 1)
    print(mix.views, mix.kernels, mix.total)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from perfkit._checks import check_callable

__all__ = ["CallMix", "call_mix"]


@dataclass(frozen=True)
class CallMix:
    """The operator calls PyTorch dispatched while a function ran, by what each did.

    Attributes:
        views: calls that returned an alias of an input and wrote nothing (``view``,
            ``expand``, ``slice``, ``transpose``, ``_unsafe_view``): metadata only, no kernel
            and no allocation.
        kernels: every other call: one that computes, fills, copies or writes in place.
    """

    views: int
    kernels: int

    @property
    def total(self) -> int:
        """Every call, views and kernels."""
        return self.views + self.kernels


def call_mix(fn: Callable[[], object]) -> CallMix:
    """Count the ATen calls ``fn`` dispatches (a ``TorchDispatchMode``), split into views and
    kernels (:class:`CallMix`): a model of per-call fixed costs that charges a view like a
    matmul charges every call alike, though a view launches no kernel.

    Raises:
        TypeError: for an ``fn`` that is not callable.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    check_callable("fn", fn)

    class _Mix(TorchDispatchMode):
        views = kernels = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            alias = (isinstance(out, torch.Tensor) and not func._schema.is_mutable
                     and out.untyped_storage().data_ptr() in inputs)
            if alias:
                self.views += 1
            else:
                self.kernels += 1
            return out

    with _Mix() as mix:
        fn()
    return CallMix(mix.views, mix.kernels)
