"""The latency-bandwidth ("alpha-beta", Hockney) model of a message: ``t(n) = alpha + n / bw``.

:func:`fit_alpha_beta` fits it to a sweep of :func:`perfkit.comm.collectives.sweep` with
relative-error weights, so small and large messages count alike; :func:`ring_allreduce_time`
predicts a ring all-reduce from one point-to-point step's fit.

Usage::

    fit = fit_alpha_beta([p.nbytes for p in points], [p.time_s for p in points])
    print(fit.alpha_s, fit.bandwidth, ring_allreduce_time(1 << 20, 4, fit))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from perfkit._checks import check_int, check_items, check_real, check_type

__all__ = ["UNRESOLVED_BANDWIDTH", "AlphaBeta", "fit_alpha_beta", "ring_allreduce_time"]

# fit_alpha_beta reports 1e18 B/s when the times do not grow with size (its slope clamped):
# a bandwidth at or above this is no measurement (a loaded machine's flat sweep)
UNRESOLVED_BANDWIDTH = 1e15


@dataclass(frozen=True)
class AlphaBeta:
    """``t(n) = alpha_s + n / bandwidth``: start-up latency (s) and bandwidth (bytes/s)."""

    alpha_s: float
    bandwidth: float

    def __post_init__(self) -> None:
        check_real("alpha_s", self.alpha_s, 0)
        check_real("bandwidth", self.bandwidth, 0, lo_open=True)

    def predict(self, nbytes: float) -> float:
        """Predicted seconds for an ``nbytes`` message (a finite number >= 0)."""
        return self.alpha_s + check_real("nbytes", nbytes, 0) / self.bandwidth

    @property
    def half_bandwidth_bytes(self) -> float:
        """Message size that reaches half the asymptotic bandwidth (``alpha * bandwidth``)."""
        return self.alpha_s * self.bandwidth


HUBER_LOG = math.log(1.25)
"""Log-ratio beyond which a point's residual counts linearly in :func:`fit_alpha_beta` (25 %)."""


def fit_alpha_beta(nbytes: Sequence[float], times_s: Sequence[float]) -> AlphaBeta:
    """Fit ``t = alpha + beta * n`` on the *logarithms* of the times, robustly.

    Sizes span five orders of magnitude; an ordinary fit would be decided by the largest
    messages alone and give a meaningless alpha. On logarithms every point counts by its
    ratio, and a model twice too slow costs what a model twice too fast costs. (The relative
    error ``f / t - 1``, weighted least squares' usual answer, does not: it charges a model
    twice too slow 1 and one twice too fast 0.25.) And one message that ran far off the
    others (a 4x fast one, say) must not move the line off them all, so the loss is Huber's:
    squares within :data:`HUBER_LOG` (25 %), absolute values beyond. The relative-error
    solution starts a Gauss-Newton search; both coefficients are kept positive.

    Args:
        nbytes: message sizes in bytes (finite, >= 0; at least two distinct).
        times_s: measured seconds, same length, all finite and > 0.

    Returns:
        An :class:`AlphaBeta`.

    Raises:
        TypeError: if either is not a list of numbers.
        ValueError: for mismatched lengths, fewer than two distinct sizes, a size that is
            negative, NaN or inf, or times that are not finite and > 0.
    """
    nbytes, times_s = check_items("nbytes", nbytes), check_items("times_s", times_s)
    for i, v in enumerate(nbytes):
        check_real(f"nbytes[{i}]", v, 0)
    if any(isinstance(t, bool) or not isinstance(t, int | float) for t in times_s):
        raise TypeError(f"times_s must hold numbers, got {times_s!r}")
    if len(nbytes) != len(times_s):
        raise ValueError(f"nbytes and times_s differ in length: {len(nbytes)} vs {len(times_s)}")
    if len(set(nbytes)) < 2:
        raise ValueError("nbytes needs at least two distinct sizes to fit alpha and beta")
    if any(t <= 0 or not math.isfinite(t) for t in times_s):
        raise ValueError("times_s must all be finite and > 0")
    n = torch.tensor(nbytes, dtype=torch.float64)
    t = torch.tensor(times_s, dtype=torch.float64)
    a = torch.stack([1 / t, n / t], dim=1)  # rows: (1, n) / t
    sol = torch.linalg.lstsq(a, torch.ones_like(t).unsqueeze(1)).solution.squeeze(1)
    alpha, beta = float(sol[0]), float(sol[1])
    if beta <= 0:  # latency-only data: no measurable bandwidth term (>= UNRESOLVED_BANDWIDTH)
        beta = 1e-18
    if alpha <= 0:  # refit bandwidth alone through the origin
        alpha = 0.0
        beta = float(((n / t) @ torch.ones_like(t)) / ((n / t) @ (n / t)))
    if alpha > 0 and beta > 1e-18:  # both terms resolved: the same line, on logarithms
        alpha, beta = _log_fit(n, t, alpha, beta)
    return AlphaBeta(alpha_s=alpha, bandwidth=1.0 / beta)


def _log_fit(n: torch.Tensor, t: torch.Tensor, alpha: float, beta: float,
             steps: int = 60) -> tuple[float, float]:
    """Gauss-Newton on Huber's loss of ``log(alpha + beta n) - log t`` (quadratic within
    :data:`HUBER_LOG`, linear beyond), from a positive start: each step reweighted, halved
    until the loss falls and kept positive."""
    logt = torch.log(t)

    def resid(a: float, b: float) -> torch.Tensor:
        return torch.log(a + b * n) - logt

    def loss(a: float, b: float) -> float:
        r = resid(a, b).abs()
        return float(torch.where(r <= HUBER_LOG, r * r / 2, HUBER_LOG * r - HUBER_LOG ** 2 / 2).sum())

    best = loss(alpha, beta)
    for _ in range(steps):
        f, r = alpha + beta * n, resid(alpha, beta)
        w = torch.where(r.abs() <= HUBER_LOG, torch.ones_like(r), HUBER_LOG / r.abs()).sqrt()
        jac = torch.stack([1 / f, n / f], dim=1) * w.unsqueeze(1)  # d log f / d(alpha, beta), weighted
        step = torch.linalg.lstsq(jac, (-r * w).unsqueeze(1)).solution.squeeze(1)
        for _ in range(30):
            a, b = alpha + float(step[0]), beta + float(step[1])
            if a > 0 and b > 0 and (now := loss(a, b)) < best:
                break
            step = step / 2
        else:
            break  # no step lowers the loss: converged
        converged = best - now <= 1e-12 * best
        alpha, beta, best = a, b, now
        if converged:
            break
    return alpha, beta


def ring_allreduce_time(nbytes: float, world_size: int, link: AlphaBeta) -> float:
    """Ring all-reduce time: ``2(n-1)`` steps, each one message of ``nbytes / n`` bytes.

    ``link`` describes one point-to-point step (from a 2-rank fit: a 2-rank ring does two
    steps of half the buffer, so ``link.alpha_s = fit.alpha_s / 2`` and the bandwidth is
    the same). Returns seconds.

    Raises:
        TypeError, ValueError: for ``nbytes`` not a finite number >= 0, ``world_size`` not
            an int >= 1, or ``link`` not an :class:`AlphaBeta`.
    """
    check_real("nbytes", nbytes, 0)
    check_int("world_size", world_size, 1)
    check_type("link", link, AlphaBeta)
    if world_size == 1:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * link.predict(nbytes / world_size)
