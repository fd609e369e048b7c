"""Ring all-reduce from point-to-point messages (Patarasuk and Yuan, 2009).

A reduce-scatter then an all-gather over ``isend``/``irecv``: ``2(n-1)`` steps, each moving
``1/n`` of the data, so every rank sends ``2(n-1)/n`` of the buffer, the all-reduce busbw
factor. The teaching version of what NCCL and gloo do inside ``dist.all_reduce``.

Its rate, read from a sweep: the alpha-beta fit (:func:`perfkit.comm.fit_alpha_beta`) weighs
every size's log-time alike, so with most sizes latency-bound its bandwidth can lie below the
rate the largest message reached. :func:`fit_below_text` says so where the largest size beat the
fit's line; :func:`measured_rate_text` holds an ``n``-process fit against the ring's rate from
the 2-process largest message, not from the 2-process fit.

Usage (inside a worker started by :func:`perfkit.dist.launch`)::

    t = torch.ones(1001)
    ring_all_reduce(t)          # in place: t == world_size everywhere
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.comm.alpha_beta import UNRESOLVED_BANDWIDTH, AlphaBeta
from perfkit.comm.collectives import CollectivePoint
from perfkit.units import si

__all__ = ["fit_below_text", "held_by_text", "measured_rate_text", "ring_all_reduce"]


def ring_all_reduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place with a ring of ``isend``/``irecv``.

    The flat tensor is split into ``n`` chunks with ``tensor_split`` (sizes may differ
    by one element, so any ``numel`` works). Reduce-scatter: at step ``s`` rank ``r``
    sends chunk ``(r - s) % n`` to its right neighbour and adds the chunk
    ``(r - s - 1) % n`` arriving from its left; after ``n - 1`` steps it holds the full
    sum of chunk ``(r + 1) % n``. All-gather: ``n - 1`` more steps pass the finished
    chunks around the ring. Each rank sends ``2 (n-1)/n`` of the buffer in total, the
    all-reduce busbw factor.

    Warning:
        Collective: every rank of ``group`` must call it with a tensor of the same shape
        and dtype, or the ring deadlocks until the process group's timeout.

    Args:
        tensor: a contiguous tensor, modified in place.
        group: process group (default: WORLD).

    Returns:
        ``tensor``, now holding the sum over ranks.

    Raises:
        ValueError: if ``tensor`` is not contiguous.
        TypeError: if ``tensor`` is not a tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous (call .contiguous() first)")
    n = dist.get_world_size(group)
    if n == 1:
        return tensor
    rank = dist.get_rank(group)
    peer = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    right, left = peer((rank + 1) % n), peer((rank - 1) % n)
    chunks = tensor.view(-1).tensor_split(n)  # views into tensor, sizes differ by <= 1
    buf = torch.empty_like(chunks[0])  # the largest chunk is the first

    def exchange(send_idx: int, recv_idx: int) -> torch.Tensor:
        out = buf[: chunks[recv_idx].numel()]
        reqs = []
        # both sides know every chunk's size, so empty chunks are skipped symmetrically
        if chunks[send_idx].numel():
            reqs.append(dist.isend(chunks[send_idx], right, group=group))
        if out.numel():
            reqs.append(dist.irecv(out, left, group=group))
        for req in reqs:
            req.wait()
        return out

    for s in range(n - 1):  # reduce-scatter
        recv_idx = (rank - s - 1) % n
        chunks[recv_idx].add_(exchange((rank - s) % n, recv_idx))
    for s in range(n - 1):  # all-gather
        recv_idx = (rank - s) % n
        chunks[recv_idx].copy_(exchange((rank + 1 - s) % n, recv_idx))
    return tensor


def fit_below_text(points: Sequence[CollectivePoint], fit: AlphaBeta, below: float = 0.9) -> str:
    """A sentence (starting with a space) where the largest size ran in under ``below`` times the
    time ``fit``'s line gives it (the other side of :func:`busbw_fall_text`): it moved its bytes
    faster than the fit's bandwidth, which a log-time fit (every size's log-time weighed alike)
    sets mostly from the many small sizes; a model built on that bandwidth charges large messages
    more than they took. ``""`` otherwise, and where the fit has no bandwidth term.

    Raises:
        TypeError, ValueError: for no points, one that is not a CollectivePoint, a ``fit`` that is
            not an AlphaBeta, or ``below`` outside (0, 1].
    """
    pts = sorted((check_type("points[i]", p, CollectivePoint) for p in check_items("points", points)),
                 key=lambda p: p.nbytes)
    check_type("fit", fit, AlphaBeta)
    check_real("below", below, 0, 1, lo_open=True)
    if fit.bandwidth >= UNRESOLVED_BANDWIDTH:
        return ""
    last, line = pts[-1], fit.predict(pts[-1].nbytes)
    if last.time_s >= below * line:
        return ""
    cross = fit.alpha_s * fit.bandwidth  # B: below it the line's latency term dominates
    under = sum(p.nbytes <= cross for p in pts)
    rate = last.nbytes / last.time_s  # B/s, algbw
    head = (f" Its largest size, {si(last.nbytes, 'B')}, took {si(last.time_s, 's')}, "
            f"{last.time_s / line:.2f}x the line's {si(line, 's')}: it moved {si(rate, 'B/s')} (algbw), ")
    if rate <= fit.bandwidth:  # the line's intercept, not its bandwidth, overcharges it
        return head + (f"under the fit's {si(fit.bandwidth, 'B/s')}, so the time the line charges beyond the "
                       "bytes' comes from its intercept, fitted across all sizes: a model built on the line "
                       "charges this size more time than it took here.")
    return head + ("faster than the fit's bandwidth. The fit weighs every size's log-time alike, and "
                   f"{under} of its {len(pts)} sizes lie at or below its crossover ({si(cross, 'B')}), where "
                   "the bandwidth barely sets the time: its bandwidth is not the large messages' rate, and a "
                   "model built on it charges them more time than they took here.")


def measured_rate_text(points2: Sequence[CollectivePoint], n: int, fit: AlphaBeta) -> str:
    """A clause (starting ". ") on the ring's algbw on ``n`` processes from the 2-process sweep's largest
    message (``n / (2(n-1))`` of its algbw), against the ``n`` processes' own ``fit``: a log-time fit's
    bandwidth can lie below the large messages' rate, so faster bytes than a 2-process fit's need not be
    faster than the 2 processes measured.

    Raises:
        TypeError, ValueError: for no points, one that is not a CollectivePoint, ``n`` below 2, or a
            ``fit`` that is not an AlphaBeta.
    """
    check_int("n", n, 2)
    check_type("fit", fit, AlphaBeta)
    last = max((check_type("points2[i]", p, CollectivePoint) for p in check_items("points2", points2)),
               key=lambda p: p.nbytes)
    rate = last.nbytes / last.time_s * n / (2 * (n - 1))  # B/s: 2(n-1)/n of S per link at 2 processes' rate
    x = fit.bandwidth / rate
    near = (f"about that ({x:.2f}x): the bytes ran no faster than the 2 processes measured, only faster "
            "than their log-time fit's line, which weighs each small size as much as a large one")
    off = f"{x:.2f}x that, so even against the measured rate the bytes' time " + (
        "fell, and this run does not measure why" if x > 1 else "grew, as the core stretch would make it")
    return (f". But the 2-process fit's bandwidth is not the 2 processes' large-message rate: their "
            f"{si(last.nbytes, 'B')} moved {si(last.nbytes / last.time_s, 'B/s')} (algbw), which gives the "
            f"ring {si(rate, 'B/s')} on {n} processes, and the {n} processes' fitted bandwidth is "
            + (near if 1 / 1.1 <= x <= 1.1 else off) + ".")


def held_by_text(ratios: Sequence[float], stretch: float, band: tuple[float, float]) -> str:
    """The lead sentence of a held verdict on sizes' ``ratios`` to the plain ring model, judged on
    their median against a ``band`` that holds both the plain model (1x) and the one stretched by
    ``stretch``: the verdict says the ring model holds to within the band, not which of the two does
    (:func:`~perfkit.comm.ring_regime_text` says where the median lies, by its own rule).

    Raises:
        TypeError, ValueError: for no ratios, or a ratio or a stretch that is not a number > 0.
    """
    ratios = [check_real("ratios item", x, 0, lo_open=True) for x in check_items("ratios", ratios)]
    check_real("stretch", stretch, 0, lo_open=True)
    return (f"The band {band[0]:.2f}x to {band[1]:.2f}x holds the plain model (1x) as well as the stretched "
            f"one ({stretch:.2f}x): held says the ring model is right to within it, not which of the two is.")
