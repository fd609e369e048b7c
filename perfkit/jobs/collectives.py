"""Worker: collective sweeps and all-reduce correctness checks, configured by JSON.

Run by :func:`perfkit.dist.launch`::

    launch("perfkit.workers.collectives", 2, ["--config", json.dumps(
        {"sweep": {"ops": ["all_reduce"], "sizes": [1024, 1 << 20]},
         "ring": {"sizes": [7, 1000]}})])

Tasks (keys of the config; rank 0's result holds every task's output):

* ``sweep``: :func:`perfkit.comm.sweep` -> list of :class:`CollectivePoint` dicts.
* ``ring``: :func:`perfkit.comm.ring_all_reduce` against ``dist.all_reduce``.
* ``impl``: the same check for a user's function, shipped as a cloudpickle file
  (``{"impl": {"path": ".../fn.pkl", "sizes": [...]}}``); see :func:`check_allreduce`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from perfkit import comm
from perfkit import dist as pdist
from perfkit.timing import interleaved

COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
               "all_gather", "all_gather_into_tensor", "all_gather_single", "broadcast", "reduce")


def _elems(x: Any) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else sum(_elems(t) for t in x) if isinstance(
        x, (list, tuple)) else 0


@contextlib.contextmanager
def record_collectives() -> Iterator[list[tuple[str, int]]]:
    """Record every collective called through ``torch.distributed``'s module: (name, elements of
    its largest tensor argument). How a check sees *which* collectives an implementation ran
    and how much data they moved, whatever it returns."""
    calls: list[tuple[str, int]] = []
    saved = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def wrap(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kw: Any) -> Any:
            calls.append((name, max([_elems(a) for a in (*args, *kw.values())] or [0])))
            return f(*args, **kw)
        return recorded

    for name, f in saved.items():
        setattr(dist, name, wrap(name, f))
    try:
        yield calls
    finally:
        for name, f in saved.items():
            setattr(dist, name, f)


@contextlib.contextmanager
def _traffic() -> Iterator[list[tuple[str, int, int]]]:
    """Record every ``dist.isend/irecv/send/recv`` call made through the module: (op, peer,
    elements). How a check sees *who* an all-reduce implementation talks to."""
    calls: list[tuple[str, int, int]] = []
    saved = {name: getattr(dist, name) for name in ("isend", "irecv", "send", "recv")}

    def wrap(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        key = "dst" if name in ("isend", "send") else "src"

        def recorded(tensor: torch.Tensor, *args: Any, **kw: Any) -> Any:
            peer = kw.get(key, args[0] if args else None)
            calls.append((name, -1 if peer is None else int(peer), tensor.numel()))
            return f(tensor, *args, **kw)
        return recorded

    for name, f in saved.items():
        setattr(dist, name, wrap(name, f))
    try:
        yield calls
    finally:
        for name, f in saved.items():
            setattr(dist, name, f)


def check_allreduce(fn: Callable[[torch.Tensor], Any], sizes: Sequence[int],
                    repeat: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """Compare ``fn(t)`` (an in-place sum over ranks) with ``dist.all_reduce`` per size.

    Integer-valued fp32 data makes every summation order exact, so ``int_exact`` must be
    ``True``; random normal data checks the float path with a tolerance. The integer run's
    point-to-point calls are recorded: ``sent_to``, ``recv_from`` (peer ranks) and
    ``sent_elems``. With
    ``repeat > 0`` both are also timed, in alternation (median seconds of the slowest rank,
    and ``ratios``: every repetition's ``fn`` time over ``dist.all_reduce``'s).

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    rank = dist.get_rank()
    out = []
    for numel in sizes:
        g = torch.Generator().manual_seed(seed * 1000 + rank * 7919 + numel)
        x = torch.randint(-100, 100, (numel,), generator=g).float()
        want = x.clone()
        dist.all_reduce(want)
        got = x.clone()
        with _traffic() as calls:
            ret = fn(got)
        xf = torch.randn(numel, generator=g)
        wantf = xf.clone()
        dist.all_reduce(wantf)
        gotf = xf.clone()
        fn(gotf)
        rec: dict[str, Any] = {
            "numel": numel,
            "int_exact": bool(torch.equal(got, want)),
            "float_max_abs_err": float((gotf - wantf).abs().max()) if numel else 0.0,
            "in_place": ret is None or ret is got,
            # who this rank sent to and received from, and how many elements it sent
            "sent_to": sorted({p for op, p, _ in calls if op in ("isend", "send")}),
            "recv_from": sorted({p for op, p, _ in calls if op in ("irecv", "recv")}),
            "sent_elems": sum(k for op, _, k in calls if op in ("isend", "send")),
        }
        if repeat:
            rec.update(_time_against_all_reduce(fn, got, want, repeat))
        out.append(rec)
    return out


def _time_against_all_reduce(fn: Callable[[torch.Tensor], Any], got: torch.Tensor,
                             want: torch.Tensor, repeat: int) -> dict[str, Any]:
    """``fn`` and ``dist.all_reduce`` timed in alternation (fn, ref, fn, ref, ...).

    Timed one after the other, a load change on a shared machine between the two runs
    would decide their ratio; alternating gives every repetition a (fn, ref) pair taken
    under the same load. Calls shorter than about a millisecond are batched (the same
    count on every rank). Returns the slowest rank's medians ``time_s`` and ``ref_time_s``
    and every repetition's ``ratios`` (fn over ref, from the slowest rank's times).
    """
    number = max(1, min(16, (1 << 18) // max(4 * got.numel(), 1)))  # up to 16 calls below 256 kB

    def batch(f: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(number):
                f()
        return run

    ms = interleaved([batch(lambda: fn(got)), batch(lambda: dist.all_reduce(want))],
                     warmup=1, repeat=repeat)
    ts = torch.tensor([m.times_s for m in ms], dtype=torch.float64) / number  # (2, repeat) s
    dist.all_reduce(ts, op=dist.ReduceOp.MAX)  # the slower rank decides each repetition
    ratios = (ts[0] / ts[1]).tolist()
    return {"time_s": float(ts[0].median()), "ref_time_s": float(ts[1].median()),
            "ratios": ratios, "calls_per_repetition": number}


def _load_pickled(path: str) -> Callable[..., Any]:
    import cloudpickle

    with open(path, "rb") as f:
        return cloudpickle.load(f)


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the tasks in ``cfg`` (see the module docstring); return this rank's results.

    Warning:
        Collective: every rank must call it with the same ``cfg``.
    """
    result: dict[str, Any] = {"world_size": dist.get_world_size(),
                              "backend": dist.get_backend()}
    if "sweep" in cfg:
        s = cfg["sweep"]
        pts = comm.sweep(s.get("ops", list(comm.OPS)), s["sizes"], repeat=s.get("repeat", 5))
        result["sweep"] = [asdict(pt) for pt in pts]
    if "ring" in cfg:
        r = cfg["ring"]
        result["ring"] = check_allreduce(comm.ring_all_reduce, r["sizes"], r.get("repeat", 0))
    if "impl" in cfg:
        i = cfg["impl"]
        result["impl"] = check_allreduce(_load_pickled(i["path"]), i["sizes"],
                                         i.get("repeat", 0))
    return result


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
