"""Checks for lab 02 (ring all-reduce, top-k, top-k with error feedback).

Q1 runs the student's ``ring_all_reduce`` on 2 and 3 real torchrun processes through
``perfkit.dist.launch`` and ``tools.labs.ring_check`` and compares it with
``dist.all_reduce`` on sizes divisible by neither 2 nor 3; it also records whose code did
the work, so an answer that calls perfkit's own ring (``perfkit.comm``) or a collective
fails. The function reaches the workers as a cloudpickle file: cloudpickle copies a
function defined in a notebook (a module that workers cannot import) *by value*, with the
modules it uses (``torch``, ``torch.distributed``) by reference, so the workers rebuild
exactly the student's code without importing the notebook or re-running its cells. A blank
answer first fails in-process, on a one-process group, with its own NotImplementedError.

Q2 checks that exactly ``k`` values are sent and that they are the largest magnitudes
(against ``torch.topk``); Q3 that error feedback conserves the gradient (sent + residual
== sum of the inputs, to 1e-5) and that simulated 2-worker training with it converges.
Used by ``make grade`` and tests/labs/.
"""

from __future__ import annotations

import math
import types

import torch

from tools.grade import launch_checked, pickled, require, time_limit
from tools.labs.record import record_library
from tools.labs.ring_check import LIBRARY

RING_SIZES = [1, 2, 5, 7, 1001, 4099]  # fewer elements than processes; not divisible by 2 or 3
FORBIDDEN = {"all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
             "all_gather", "all_gather_into_tensor", "all_gather_single", "broadcast"}


def _names(code: types.CodeType) -> set[str]:
    """Every global or attribute name used by ``code`` and the functions nested in it."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _not_the_library(ran: list[str] | set[str], where: str) -> None:
    """Fail when the answer ran ``perfkit.comm`` functions: the lab grades the student's ring."""
    assert not ran, (
        f"{where} ring_all_reduce ran perfkit's own {sorted(ran)}: the lab grades your ring, "
        "not the library's. Write the reduce-scatter and all-gather phases yourself with "
        "dist.isend/dist.irecv; do not call perfkit.comm")


def _one_process(fn) -> None:
    """Call ``fn`` on a one-process gloo group: a blank answer raises NotImplementedError
    here, before any worker starts; any other error is the student's bug; an answer that
    hands the work to perfkit's ring fails here too."""
    import torch.distributed as tdist

    own = not tdist.is_initialized()
    if own:
        tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.arange(5.0)
        with time_limit(10, "ring_all_reduce on one process (5 elements) did not return "
                        "within 10 s: with world_size 1 there is nothing to send; does each "
                        "phase loop n - 1 = 0 times?"), record_library(LIBRARY) as ran:
            out = fn(t)
    except NotImplementedError:
        raise
    except Exception as e:
        raise AssertionError(f"ring_all_reduce raised on a single process: {e!r}. With one "
                             "process there is nothing to exchange: return the tensor") from e
    finally:
        if own:
            tdist.destroy_process_group()
    _not_the_library(ran, "on one process,")
    assert out is t or out is None, "ring_all_reduce must work in place and return its tensor"
    assert torch.equal(t, torch.arange(5.0)), "with one process the tensor must not change"


# A correct ring on 2-3 processes finishes in about 5 s idle and 10-20 s under load (torch
# import included), so the launch's limit is a few times the loaded time. A deadlocked ring
# (chunk indices that wait for a message nobody sends) ends sooner: each rank gives the call
# itself ring_check.CALL_LIMIT_S once every rank has joined.
RING_LAUNCH_S = 60


def check_ring(ns: dict) -> None:
    fn = require(ns, "ring_all_reduce")
    _one_process(fn)
    used = _names(fn.__code__) & FORBIDDEN
    assert not used, (f"ring_all_reduce calls {sorted(used)}: build the ring from "
                      "dist.isend/dist.irecv (or send/recv) only")
    with pickled(fn, "ring.pkl") as path:
        cfg = {"impl": {"path": path, "sizes": RING_SIZES}}
        for n in (2, 3):
            res = launch_checked(
                "tools.labs.ring_check", n, cfg, RING_LAUNCH_S, "the ring",
                "a process waits for a message nobody sends. Does every rank do n-1 steps of "
                "each phase, send to (r+1) % n and receive from (r-1) % n, and post isend and "
                "irecv before waiting?", impl_name="ring_all_reduce")
            for rank, r in enumerate(res):
                for rec in r["impl"]:
                    _not_the_library(rec["library"], f"on {n} processes, rank {rank},")
                    assert not rec["collectives"], (
                        f"on {n} processes ring_all_reduce called {rec['collectives']}: build "
                        "the ring from dist.isend/dist.irecv (or send/recv) only")
                    assert rec["in_place"], (
                        "ring_all_reduce must sum in place and return the same tensor")
                    assert rec["int_exact"], (
                        f"on {n} processes, rank {rank}, {rec['numel']} elements: the result "
                        "differs from dist.all_reduce. Check the chunk indices of both phases "
                        "(reduce-scatter: send (r - s) % n, add into (r - s - 1) % n; "
                        "all-gather: send (r + 1 - s) % n, copy into (r - s) % n) and that "
                        "tensor_split's uneven chunks get buffers of their own size")
                    assert rec["float_max_abs_err"] < 1e-4, rec
                    if rec["numel"] < n:
                        continue  # fewer elements than ranks: empty chunks may skip messages
                    ring = ([(rank + 1) % n], [(rank - 1) % n])
                    assert (rec["sent_to"], rec["recv_from"]) == ring, (
                        f"on {n} processes, rank {rank} sent to {rec['sent_to']} and received "
                        f"from {rec['recv_from']}; in a ring it sends only to (r+1) % n = "
                        f"{ring[0][0]} and receives only from (r-1) % n = {ring[1][0]}. Gathering "
                        "to one rank (and sending the sum back) is not a ring: that rank's "
                        "links carry n-1 times the traffic. Call dist.isend/dist.irecv through "
                        "the module (dist.isend(...)), so they can be recorded")
                    bound = 2 * (n - 1) * -(-rec["numel"] // n)  # 2(n-1) chunks of ceil(S/n)
                    assert rec["sent_elems"] <= bound, (
                        f"on {n} processes, rank {rank} sent {rec['sent_elems']} elements for a "
                        f"{rec['numel']}-element all-reduce; a ring sends 2(n-1) chunks of "
                        f"about S/n: at most {bound}. Is a whole buffer sent instead of a chunk?")


def check_topk(ns: dict) -> None:
    comp = require(ns, "topk_compress")
    decomp = require(ns, "topk_decompress")
    g = torch.Generator().manual_seed(0)
    for shape, ratio in (((1000,), 0.01), ((37, 11), 0.1), ((5,), 0.5), ((3, 3), 1.0),
                         ((999,), 1e-4)):
        x = torch.randn(shape, generator=g)
        k = max(1, math.ceil(ratio * x.numel()))
        values, indices = comp(x, ratio)
        assert values.numel() == k and indices.numel() == k, (
            f"topk_compress(x of shape {shape}, ratio={ratio}) sent {values.numel()} values "
            f"and {indices.numel()} indices; exactly k = max(1, ceil(ratio * numel)) = {k}")
        flat = x.reshape(-1)
        want = set(torch.topk(flat.abs(), k).indices.tolist())
        assert set(indices.tolist()) == want, (
            f"shape {shape}, ratio {ratio}: the indices are not those of the {k} largest "
            "magnitudes (|x|, not x)")
        assert torch.equal(values, flat[indices.long()]), (
            "values must be x's entries at the indices, with their signs")
        dense = decomp(values, indices, x.shape)
        assert dense.shape == x.shape, f"topk_decompress returned shape {tuple(dense.shape)}"
        mask = torch.zeros(x.numel(), dtype=torch.bool)
        mask[indices.long()] = True
        assert torch.equal(dense.reshape(-1)[mask], flat[mask]) and not dense.reshape(-1)[
            ~mask].any(), "topk_decompress: values at the indices, zeros everywhere else"
    for bad in (0, 1.5, -0.1):
        try:
            comp(torch.randn(10), bad)
        except ValueError:
            continue
        raise AssertionError(f"topk_compress(x, ratio={bad}) must raise ValueError")
    for v in (float("nan"), float("inf")):
        x = torch.randn(10)
        x[3] = v
        try:
            comp(x, 0.5)
        except ValueError:
            continue
        raise AssertionError(f"topk_compress must raise ValueError for a tensor holding {v}")


def check_error_feedback(ns: dict) -> None:
    cls = require(ns, "TopKWithErrorFeedback")
    decomp = require(ns, "topk_decompress")
    g = torch.Generator().manual_seed(1)
    ef = cls(0.05)
    total, sent = torch.zeros(40, 10), torch.zeros(40, 10)
    for step in range(30):
        grad = torch.randn(40, 10, generator=g)
        total += grad
        values, indices = ef.compress(grad)
        assert values.numel() == 20, (
            f"step {step}: sent {values.numel()} values; ratio 0.05 of 400 is exactly 20")
        sent += decomp(values, indices, grad.shape)
        assert ef.residual is not None and ef.residual.shape == grad.shape, (
            "self.residual must be a tensor of the gradient's shape")
    err = float((sent + ef.residual - total).abs().max())
    assert err < 1e-5, (
        f"after 30 steps, sent + residual differs from the sum of the gradients by {err:.2e}. "
        "Add the gradient to the residual first, compress the residual, then subtract "
        "exactly what was sent")


def check_training(ns: dict) -> None:
    from perfkit import compress
    from perfkit.compress import simulate_dp_training

    cls = require(ns, "TopKWithErrorFeedback")
    comp = require(ns, "topk_compress")
    decomp = require(ns, "topk_decompress")

    class Adapt(compress.Compressor):
        def __init__(self, inner=None):
            super().__init__()
            self.inner = inner

        def compress(self, t):
            v, i = self.inner.compress(t) if self.inner else comp(t, 0.01)
            return compress.Compressed((v, i), t.shape, t.dtype)

        def decompress(self, c, out=None):
            return decomp(c.tensors[0], c.tensors[1], c.shape)

    with time_limit(10, "TopKWithErrorFeedback(0.01).compress on 1,000 values did not return "
                    "within 10 s"):
        cls(0.01).compress(torch.randn(1000))
    steps = 150
    tail = lambda xs: sum(xs[-10:]) / 10  # noqa: E731
    base = tail(simulate_dp_training(None, steps=steps))
    plain = tail(simulate_dp_training(Adapt, steps=steps))
    try:
        ef = tail(simulate_dp_training(lambda: Adapt(cls(0.01)), steps=steps))
    except (ValueError, RuntimeError) as e:
        raise AssertionError(
            f"simulated training with TopKWithErrorFeedback(0.01) diverged ({e}): the residual "
            "grew without bound. Is exactly what was sent subtracted from the residual?") from e
    if not math.isfinite(ef):
        raise AssertionError("simulated training with TopKWithErrorFeedback(0.01) diverged (the "
                             "loss is not finite): is exactly what was sent subtracted?")
    assert ef < 1.2 * base, (
        f"simulated 2-worker training with TopKWithErrorFeedback(0.01) ends at loss {ef:.3f}, "
        f"uncompressed at {base:.3f}: error feedback should get within 20 %. Is the residual "
        "kept between calls (one instance per worker)?")
    assert ef < plain, (f"with error feedback the loss ({ef:.3f}) should be below plain top-k's "
                        f"({plain:.3f})")


QUESTIONS = {"ring_all_reduce": check_ring, "topk_compress": check_topk,
             "TopKWithErrorFeedback": check_error_feedback,
             "TopKWithErrorFeedback_training": check_training}
# top-k and its residual are a few tensor ops (milliseconds): an answer that loops fails fast
TIMEOUT_S = {"ring_all_reduce": 150, "topk_compress": 15, "TopKWithErrorFeedback": 15,
             "TopKWithErrorFeedback_training": 60}
