"""Shared by the per-wing bad-input tests (``test_inputs_*.py``): each lists CASES, tuples
``(id, call, exception, regex)`` whose id starts with the public name it exercises."""

from __future__ import annotations

from types import ModuleType


def duplicate_ids(cases: list[tuple]) -> list[str]:
    """Case ids that occur more than once."""
    ids = [c[0] for c in cases]
    return sorted({i for i in ids if ids.count(i) > 1})


def uncovered(module: ModuleType, cases: list[tuple], exempt: set[str] = frozenset()) -> list[str]:
    """Public callables of ``module`` (its ``__all__``) that no case exercises, other than
    the ``exempt`` records perfkit returns."""
    callables = {n for n in module.__all__ if callable(getattr(module, n))}
    covered = {c[0].split(".")[0].split(" ")[0] for c in cases}
    return sorted(callables - covered - set(exempt))
