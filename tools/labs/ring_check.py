"""Job: lab 02's graded all-reduce against ``dist.all_reduce``, with whose code did the work.

How lab 02's ``ring_all_reduce`` is graded (``tools/labs/checks_lab02.py``). The student's
function arrives as a cloudpickle file; every rank runs it on integer-valued data (every
summation order is exact, so it must equal ``dist.all_reduce``) and on random data, and
records, during the integer run, the point-to-point messages it sent and received, the
collectives it called and any function of ``perfkit.comm`` that ran: the lab grades the
student's ring, not the library's. Run by :func:`perfkit.dist.launch`::

    launch("tools.labs.ring_check", 2, ["--config", json.dumps(
        {"impl": {"path": ".../ring.pkl", "sizes": [7, 1001]}})], pythonpath=[ROOT])
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from perfkit import dist as pdist
from perfkit.jobs.collectives import compare_case
from tools.labs.record import record_collectives, record_library, record_p2p

LIBRARY = "perfkit.comm"  # perfkit's own ring, sweep and collectives: not the student's work
# Once every rank is in the group (the first dist.all_reduce of each size), a correct ring on
# these few thousand elements returns in milliseconds, and in well under a second on a loaded
# machine. A rank still inside the answer after this long waits for a message nobody sends:
# it reports a hang at once instead of waiting out the launch's limit, which must also cover
# starting the processes and importing torch under load.
CALL_LIMIT_S = 15.0
HANG = "GradingHang"  # the first word of a hang's report: tools.grade.launch_checked reads it


@contextmanager
def _deadline(seconds: float, what: str) -> Iterator[None]:
    """Report a hang and end this rank if the block runs past ``seconds``.

    A rank blocked in gloo's wait cannot be interrupted from Python, so the watchdog thread
    writes the report where the launcher finds a rank's traceback, and exits the process
    (``perfkit.dist``'s exception hook); torchrun then ends the other ranks.
    """
    def expire() -> None:
        err = TimeoutError(f"{HANG}: rank {dist.get_rank()} was still inside it {what}, "
                           f"{seconds:g} s after every rank had joined")
        pdist._excepthook(TimeoutError, err, None)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def check_allreduce(fn: Callable[[torch.Tensor], Any], sizes: Sequence[int],
                    seed: int = 0) -> list[dict[str, Any]]:
    """Compare ``fn(t)`` (an in-place sum over ranks) with ``dist.all_reduce`` per size.

    Args:
        fn: the answer, an all-reduce summing its tensor in place over the default group.
        sizes: element counts to check.
        seed: seeds the data (each rank and size draws its own).

    Returns:
        One record per size: ``numel``, ``int_exact``, ``float_max_abs_err``, ``float_bound``
        (the most two summation orders can differ by, :func:`perfkit.jobs.collectives.order_bound`),
        ``in_place``;
        from the integer run ``sent_to``, ``recv_from`` (peer ranks), ``sent_elems``,
        ``collectives`` (names called through ``torch.distributed``) and ``library`` (the
        ``perfkit.comm`` functions that ran).

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    out = []
    for numel in sizes:
        with _deadline(CALL_LIMIT_S, f"on {numel} element(s)"):
            rec, _, _, (msgs, colls, lib) = compare_case(fn, numel, seed, watch=_watched)
        out.append({
            **rec,
            # who this rank sent to and received from, and how many elements it sent
            "sent_to": sorted({p for op, p, _ in msgs if op in ("isend", "send")}),
            "recv_from": sorted({p for op, p, _ in msgs if op in ("irecv", "recv")}),
            "sent_elems": sum(k for op, _, k in msgs if op in ("isend", "send")),
            "collectives": sorted({name for name, _ in colls}),
            "library": sorted(lib),
        })
    return out


@contextmanager
def _watched() -> Iterator[tuple[list, list, set]]:
    """What the student's call sends and receives, the collectives and perfkit.comm functions it runs."""
    with record_p2p() as msgs, record_collectives() as colls, record_library(LIBRARY) as lib:
        yield msgs, colls, lib


def _load_pickled(path: str) -> Callable[..., Any]:
    import cloudpickle

    with open(path, "rb") as f:
        return cloudpickle.load(f)


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Check the pickled function of ``cfg["impl"]`` (``path``, ``sizes``); this rank's records.

    Warning:
        Collective: every rank must call it with the same ``cfg``.
    """
    i = cfg["impl"]
    return {"world_size": dist.get_world_size(),
            "impl": check_allreduce(_load_pickled(i["path"]), i["sizes"])}


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
