"""Job: collective sweeps and perfkit's ring all-reduce against gloo's, configured by JSON.

Run by :func:`perfkit.dist.launch`::

    launch("perfkit.jobs.collectives", 2, ["--config", json.dumps(
        {"sweep": {"ops": ["all_reduce"], "sizes": [1024, 1 << 20]},
         "ring": {"sizes": [7, 1000]}})])

Tasks (keys of the config; rank 0's result holds every task's output):

* ``sweep``: :func:`perfkit.comm.sweep` -> list of :class:`CollectivePoint` dicts.
* ``ring``: :func:`perfkit.comm.ring_all_reduce` against ``dist.all_reduce``
  (:func:`against_all_reduce`).
* ``isolated``: ``{"op", "sizes", "gap_s", "repeat", "stagger_s"}``: :func:`perfkit.comm.isolated_times`
  -> ``{"op", "sizes", "times_s"}`` (every call, one list per size). ``op`` may also be a list,
  one collective per size (an all-reduce of a dense buffer against an all-gather of a payload).

Lab 02's grader runs a student's all-reduce through ``tools.labs.ring_check`` instead.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from perfkit import comm
from perfkit import dist as pdist
from perfkit._checks import check_int, check_real
from perfkit.timing import interleaved


def against_all_reduce(fn: Callable[[torch.Tensor], Any], sizes: Sequence[int],
                       repeat: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """Compare ``fn(t)`` (an in-place sum over ranks) with ``dist.all_reduce`` per size.

    Integer-valued fp32 data makes every summation order exact, so ``int_exact`` must be
    ``True``; random normal data checks the float path against ``float_bound``, the most two
    summation orders can differ by rounding (:func:`compare_case`). On 2 ranks each element is
    one addition ``a + b``, correctly rounded and commutative, so any correct all-reduce gives
    the same bits: the float check can fail there only for a wrong sum, which the integer
    check catches too; from 3 ranks on the order matters. With
    ``repeat > 0`` both are also timed, in alternation: seconds per call of the slowest rank
    in every repetition (``times_s`` for ``fn``, ``ref_times_s`` for ``dist.all_reduce``;
    repetition ``i`` of the two is a pair taken back to back), their medians, and ``ratios``
    (each repetition's ``fn`` time over ``dist.all_reduce``'s).

    Args:
        fn: an all-reduce that sums its tensor argument in place over the default group.
        sizes: element counts to compare at.
        repeat: timed (fn, all_reduce) pairs per size; 0 skips timing.
        seed: seeds the data (each rank and size draws its own).

    Returns:
        One record per size: ``numel``, ``int_exact``, ``float_max_abs_err``, ``in_place``
        and, when timed, ``times_s``, ``ref_times_s``, their medians ``time_s`` and
        ``ref_time_s``, ``ratios`` and ``calls_per_repetition``.

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    out = []
    for numel in sizes:
        rec, got, want, _ = compare_case(fn, numel, seed)
        if repeat:
            rec.update(_time_against_all_reduce(fn, got, want, repeat))
        out.append(rec)
    return out


def compare_case(fn: Callable[[torch.Tensor], Any], numel: int, seed: int = 0,
                 watch: Callable[[], AbstractContextManager[Any]] = nullcontext,
                 ) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, Any]:
    """One size of the comparison of ``fn`` with ``dist.all_reduce``, on integers (exact in
    any order of summation) and on floats.

    Args:
        fn, seed: as for :func:`against_all_reduce`.
        numel: the element count.
        watch: a context manager factory entered around ``fn``'s integer call only (a lab's
            grader records what that call sent and called).

    Returns:
        ``(record, got, want, seen)``: ``numel``, ``int_exact``, ``float_max_abs_err``,
        ``float_bound`` (:func:`order_bound` of the largest element's sum of absolute values
        over the ranks), ``in_place``; the integer result and reference;
        what ``watch`` yielded.

    Warning:
        Collective: every rank must call it with the same arguments.
    """
    g = torch.Generator().manual_seed(seed * 1000 + dist.get_rank() * 7919 + numel)
    x = torch.randint(-100, 100, (numel,), generator=g).float()
    want, got = x.clone(), x.clone()
    dist.all_reduce(want)
    with watch() as seen:
        ret = fn(got)
    xf = torch.randn(numel, generator=g)
    wantf, gotf = xf.clone(), xf.clone()
    absf = xf.abs()
    dist.all_reduce(absf)  # each element's sum of |x| over the ranks: the rounding bound's scale
    dist.all_reduce(wantf)
    fn(gotf)
    rec = {"numel": numel, "int_exact": bool(torch.equal(got, want)),
           "float_max_abs_err": float((gotf - wantf).abs().max()) if numel else 0.0,
           "float_bound": order_bound(dist.get_world_size(), float(absf.max())) if numel else 0.0,
           "in_place": ret is None or ret is got}
    return rec, got, want, seen


def order_bound(n: int, abs_sum: float) -> float:
    """The most two summation orders of ``n`` fp32 addends can differ by rounding, where the
    addends' absolute values sum to ``abs_sum``: ``2 gamma abs_sum``, ``gamma = (n - 1) u /
    (1 - (n - 1) u)`` with ``u`` fp32's unit roundoff (Higham's bound for recursive summation
    holds each order within ``gamma abs_sum`` of the exact sum); 0 for ``n <= 2``, where every
    order is one correctly rounded, commutative addition and gives the same bits.

    Raises:
        TypeError, ValueError: for ``n`` not an int >= 1 or ``abs_sum`` not a real >= 0.
    """
    check_int("n", n, 1)
    check_real("abs_sum", abs_sum, 0)
    if n <= 2:
        return 0.0
    u = torch.finfo(torch.float32).eps / 2
    return 2 * (n - 1) * u / (1 - (n - 1) * u) * abs_sum


def _time_against_all_reduce(fn: Callable[[torch.Tensor], Any], got: torch.Tensor,
                             want: torch.Tensor, repeat: int) -> dict[str, Any]:
    """``fn`` and ``dist.all_reduce`` timed in alternation (fn, ref, fn, ref, ...).

    Timed one after the other, a load change on a shared machine between the two runs
    would decide their ratio; alternating gives every repetition a (fn, ref) pair taken
    under the same load. Calls shorter than about a millisecond are batched (the same
    count on every rank). Returns the slowest rank's seconds per call in every repetition
    (``times_s``, ``ref_times_s``), their medians (``time_s``, ``ref_time_s``) and every
    repetition's ``ratios`` (fn over ref).
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
    times, ref_times = ts.tolist()
    # statistics.median averages the middle two of an even count, as perfkit.stats does
    # (torch's median takes the lower one)
    return {"time_s": statistics.median(times), "ref_time_s": statistics.median(ref_times),
            "times_s": times, "ref_times_s": ref_times,
            "ratios": (ts[0] / ts[1]).tolist(), "calls_per_repetition": number}


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
    if "isolated" in cfg:
        c = cfg["isolated"]
        op = c.get("op", "all_reduce")
        ops = op if isinstance(op, list) else [op] * len(c["sizes"])  # one op per size
        if len(ops) != len(c["sizes"]):
            raise ValueError(f"isolated.op must be one op or one per size, got {len(ops)} for "
                             f"{len(c['sizes'])} sizes")
        result["isolated"] = {"op": op, "sizes": list(c["sizes"]), "times_s": [comm.isolated_times(
            o, [size], gap_s=c.get("gap_s", 1e-3), repeat=c.get("repeat", 30),
            stagger_s=c.get("stagger_s", 0.0))[0] for o, size in zip(ops, c["sizes"], strict=True)]}
    if "ring" in cfg:
        r = cfg["ring"]
        result["ring"] = against_all_reduce(comm.ring_all_reduce, r["sizes"], r.get("repeat", 0))
    return result


def main(argv: Sequence[str] | None = None) -> None:
    pdist.worker_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
