"""Job: several experiment jobs in one torchrun run (one start-up, not three).

Starting a job costs seconds (every process imports torch), so notebooks batch their
experiments::

    launch("perfkit.jobs.suite", 2, ["--config", json.dumps(
        {"collectives": {"ring": {"sizes": [7]}},
         "data_parallel": {"compare": {"repeat": 3}}})])

Each key names a module of :mod:`perfkit.jobs` with a ``run(cfg)`` function; rank 0's
result maps each key to that module's result, in the order given.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from perfkit import dist as pdist

JOBS = ("collectives", "data_parallel", "compression")


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run each named job's ``run`` with its own config.

    Warning:
        Collective: every rank must call it with the same ``cfg``.

    Raises:
        ValueError: for a key that is not in :data:`JOBS`.
    """
    unknown = set(cfg) - set(JOBS)
    if unknown:
        raise ValueError(f"unknown jobs {sorted(unknown)}; known: {JOBS}")
    return {name: importlib.import_module(f"perfkit.jobs.{name}").run(sub)
            for name, sub in cfg.items()}


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
