"""Checks for lab 08 (the online softmax update; the log-sum-exp merge; causal tiles).

Each check takes the namespace left by the student's notebook and raises AssertionError
with a hint. Used by `make grade` and by tests/labs/test_labs.py. Everything runs in float64
against attention computed from the whole score matrix
(:func:`perfkit.compute.flash.reference_attention`); Q3's matmul FLOPs are counted with
PyTorch's ``FlopCounterMode`` and Q3 runs with the reference Q1, so a wrong Q1 does not
fail it twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from perfkit.compute.flash import flash_flops, reference_attention
from tools.grade import require

INF = math.inf
F64 = torch.float64


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    """Every entry within ``tol`` (a NaN anywhere is not close: NaN compares False)."""
    return bool(((a - b).abs() <= tol).all())


def _start(rows: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.full((rows,), -INF, dtype=F64), torch.zeros(rows, dtype=F64),
            torch.zeros(rows, d, dtype=F64))


def _run_tiles(f: Callable, s: torch.Tensor, v: torch.Tensor, tile: int) -> tuple:
    m, total, o = _start(s.shape[0], v.shape[1])
    for j in range(0, s.shape[1], tile):
        got = f(m, total, o, s[:, j:j + tile], v[j:j + tile])
        assert isinstance(got, tuple) and len(got) == 3, (
            f"online_softmax_update must return a tuple (m, total, o), got {type(got).__name__}")
        m, total, o = got
    return m, total, o


def _softmax(s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def check_online_softmax_update(ns: dict) -> None:
    f = require(ns, "online_softmax_update")
    g = torch.Generator().manual_seed(0)
    v = torch.randn(48, 5, generator=g, dtype=F64)
    s = torch.randn(4, 48, generator=g, dtype=F64) * 2
    m, total, o = _run_tiles(f, s, v, 48)  # one tile from the start
    want_o, want_lse = _softmax(s, v)
    assert _close(o / total[:, None], want_o, 1e-10), (
        "one tile from the start (m = -inf, total = 0, o = 0) gives the wrong output: m must "
        "become the row maximum, total the sum of exp(s - m) and o the sum of exp(s - m) * v")
    big = torch.randn(4, 48, generator=g, dtype=F64) * 5 + 1000  # exp(1000) overflows float64
    _, big_total, big_o = _run_tiles(f, big, v, 16)
    assert torch.isfinite(big_o).all() and torch.isfinite(big_total).all(), (
        "scores near 1000 overflow: exp(1000) is inf in float64; subtract the running maximum "
        "before exp")
    # later tiles bring larger maxima: what was summed must be rescaled by exp(m_old - m_new)
    rising = s + torch.linspace(0, 12, 48, dtype=F64)
    m, total, o = _run_tiles(f, rising, v, 16)
    want_o, want_lse = _softmax(rising, v)
    assert _close(m + torch.log(total), want_lse, 1e-10), (
        "over three tiles whose maxima grow, m + log(total) is not the log-sum-exp: after a "
        "tile with a larger maximum, the old total must be multiplied by exp(m_old - m_new) "
        "(a stale max was kept)")
    assert _close(o / total[:, None], want_o, 1e-10), (
        "over three tiles whose maxima grow, total is right but o is not: o was summed under the "
        "old maximum too and must be rescaled by exp(m_old - m_new) like total")
    assert _close(big_o / big_total[:, None], _softmax(big, v)[0], 1e-9), (
        "scores near 1000 give the wrong output (the stale-max check above passed)")
    masked = s.clone()
    masked[1, :16] = -INF  # row 1 sees nothing in the first tile
    masked[2, :] = -INF  # row 2 sees no key at all
    m, total, o = _run_tiles(f, masked, v, 16)
    assert not torch.isnan(o).any() and not torch.isnan(total).any(), (
        "a row whose scores so far are all -inf gave NaN: its m is -inf and exp(-inf - (-inf)) "
        "is NaN; shift such rows by 0 instead of by m")
    assert total[2] == 0 and (o[2] == 0).all(), "a row with every key masked must keep total = 0, o = 0"
    assert _close(o[:2] / total[:2, None], _softmax(masked[:2], v)[0], 1e-10), (
        "a row masked in the first tile gives the wrong output once its keys appear")


def check_merge_partials(ns: dict) -> None:
    f = require(ns, "merge_partials")
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(6, 8, generator=g, dtype=F64) for _ in range(3))
    a, b = reference_attention(q, k[:3], v[:3]), reference_attention(q, k[3:], v[3:])
    got = f(*a, *b)
    assert isinstance(got, tuple) and len(got) == 2, "merge_partials must return (o, lse)"
    whole, whole_lse = reference_attention(q, k, v)
    assert _close(got[1], whole_lse, 1e-10), (
        "lse is not log(exp(lse_a) + exp(lse_b)): the merged log-sum-exp counts each side's "
        "keys once")
    assert _close(got[0], whole, 1e-10), (
        "o is not exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b: each side's normalised output "
        "is weighted by its share of the merged sum")
    q, k, v = (torch.randn(6, 8, generator=g, dtype=F64) * 20 for _ in range(3))
    a, b = reference_attention(q, k[:3], v[:3]), reference_attention(q, k[3:], v[3:])
    o, lse = f(*a, *b)
    whole, whole_lse = reference_attention(q, k, v)
    assert torch.isfinite(lse).all() and torch.isfinite(o).all(), (
        f"log-sum-exps up to {whole_lse.max().item():.0f} overflow: exp(x) is inf in float64 "
        "above x = 709; shift by the larger lse first (lse = m + log(exp(lse_a - m) + exp(lse_b - m)))")
    assert _close(o, whole, 1e-8) and _close(lse, whole_lse, 1e-8), "large logits: wrong merge"
    empty = (torch.zeros(6, 8, dtype=F64), torch.full((6,), -INF, dtype=F64))
    o, lse = f(*a, *empty)
    assert _close(o, a[0], 1e-12) and torch.equal(lse, a[1]), (
        "merging with a side that saw no key (lse = -inf, o = 0) must return the other side "
        "unchanged")
    o, lse = f(*empty, *empty)
    assert not torch.isnan(o).any() and not torch.isnan(lse).any(), (
        "two sides that saw no key (lse = -inf on both) gave NaN: -inf - (-inf) is NaN; return "
        "o = 0 and lse = -inf for such rows")
    assert (o == 0).all() and (lse == -INF).all(), "no key on either side: o = 0, lse = -inf"


def _reference_update(m, total, o, s, v):
    """The solution's Q1 (what perfkit.compute.flash does per tile)."""
    m_new = torch.maximum(m, s.amax(-1))
    shift = torch.where(m_new == -INF, 0.0, m_new)
    p = torch.exp(s - shift[:, None])
    alpha = torch.exp(m - shift)
    return m_new, alpha * total + p.sum(-1), alpha[:, None] * o + p @ v


def check_tiled_causal_attention(ns: dict) -> None:
    f = require(ns, "tiled_causal_attention")
    had = ns.get("online_softmax_update")
    ns["online_softmax_update"] = _reference_update  # a wrong Q1 must not fail Q3 too
    try:
        g = torch.Generator().manual_seed(2)
        for t, tile in ((50, 16), (64, 16), (1, 8), (37, 64)):
            q, k, v = (torch.randn(t, 8, generator=g, dtype=F64) for _ in range(3))
            with FlopCounterMode(display=False) as counter:
                out = f(q, k, v, tile)
            assert isinstance(out, torch.Tensor) and out.shape == (t, 8), (
                f"tiled_causal_attention on (T={t}, D=8) returned "
                f"{getattr(out, 'shape', type(out).__name__)}, expected a ({t}, 8) tensor")
            want, _ = reference_attention(q, k, v, causal=True)
            if not _close(out, want, 1e-10):
                unscaled, _ = reference_attention(q, k, v, causal=True, scale=1.0)
                # query i seeing keys j < i only: row i is causal row i - 1 (row 0 sees nothing)
                strict, _ = reference_attention(q[1:], k, v, causal=True)
                hint = ("scale the scores by 1/sqrt(D)" if _close(out, unscaled, 1e-8)
                        else "query i sees keys j <= i, itself included (the mask is off by one)"
                        if t > 1 and _close(out[1:], strict, 1e-8)
                        else "a tile that straddles the diagonal must be computed, its keys "
                             "after each query masked with -inf")
                raise AssertionError(f"tiled_causal_attention differs from causal attention at "
                                     f"T={t}, tile={tile} (largest difference "
                                     f"{(out - want).abs().max().item():.2e}): {hint}")
            budget = flash_flops(1, 1, t, 8, causal=True, tile=tile).forward
            assert counter.get_total_flops() <= budget, (
                f"T={t}, tile={tile}: {counter.get_total_flops()} matmul FLOPs, at most {budget} "
                "expected: tiles above the diagonal were computed; a key tile that starts after "
                "the query tile's last row contributes nothing, skip it")
    finally:
        ns["online_softmax_update"] = had


QUESTIONS = {
    "q1_online_softmax_update": check_online_softmax_update,
    "q2_merge_partials": check_merge_partials,
    "q3_tiled_causal_attention": check_tiled_causal_attention,
}
TIMEOUT_S = {"q1_online_softmax_update": 20, "q2_merge_partials": 20,
             "q3_tiled_causal_attention": 30}
