"""Models of compressed data-parallel SGD: predicted error and a one-process simulation.

* :func:`gaussian_error`: the relative error each compressor is predicted to leave on
  i.i.d. Gaussian values, the yardstick that measured gradients are held to.
* :func:`simulate_dp_training`: data-parallel SGD of softmax regression on the digits,
  every worker simulated in one process, to compare convergence with and without
  compression and error feedback (as in Karimireddy et al., 2019, and Deep Gradient
  Compression, Lin et al., 2018) in milliseconds instead of a torchrun job.

Usage::

    base = simulate_dp_training(None, steps=100)  # loss per step, nats
    ef = simulate_dp_training(lambda: ErrorFeedback(TopK(0.01)), steps=100)
    pred = gaussian_error("topk", 0.01, grad.numel())  # relative error, Gaussian model
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch.nn import functional as nn_functional

from perfkit._checks import check_int, check_real, check_seed
from perfkit.compress.codecs import QSGD, Compressor

__all__ = ["gaussian_error", "simulate_dp_training"]


@functools.cache
def _digits_design() -> tuple[torch.Tensor, torch.Tensor]:
    """Digits as a design matrix with a bias column (N, 65) and one-hot labels (N, 10);
    cached: loading them through scikit-learn takes longer than a simulated run."""
    from perfkit.models import digits_data

    x, y = digits_data()
    x = torch.cat([x.reshape(len(x), -1), torch.ones(len(x), 1)], 1)
    return x, nn_functional.one_hot(y, 10).float()


def simulate_dp_training(make: Callable[[], Compressor] | None, steps: int = 100,
                         workers: int = 2, batch: int = 32, lr: float = 0.5, seed: int = 0
                         ) -> list[float]:
    """Data-parallel SGD of softmax regression on the digits, simulated in one process.

    Each of ``workers`` simulated ranks computes the gradient of its share of the batch,
    compresses it with its own compressor (``make()`` is called once per worker, so error
    feedback keeps one residual per worker, as on real ranks), and the decompressed
    gradients are averaged. It shows convergence with and without compression in
    milliseconds; the real thing runs under torchrun in ``perfkit.jobs.compression``.

    Args:
        make: factory of one worker's compressor; ``None`` means no compression.
        steps, workers, batch, lr, seed: the run (``batch`` samples per worker).

    Returns:
        The global batch's loss at every step (before the update), in nats.

    Raises:
        TypeError: ``make`` is neither ``None`` nor callable, or returns something other
            than a :class:`~perfkit.compress.Compressor`; an argument of the wrong type.
        ValueError: ``steps``, ``workers`` or ``batch`` below 1, ``lr`` not finite and
            > 0, ``seed`` outside [0, 2**63).
    """
    if make is not None and not callable(make):
        raise TypeError(f"make must be None or a callable returning a Compressor, got {make!r}")
    for name, v in (("steps", steps), ("workers", workers), ("batch", batch)):
        check_int(name, v, 1)
    check_real("lr", lr, 0, lo_open=True)
    x, onehot = _digits_design()
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    w = torch.zeros(65, 10)  # weights and bias: 650 parameters
    comps = [make() for _ in range(workers)] if make is not None else None
    for c in comps or ():
        if not isinstance(c, Compressor):
            raise TypeError(f"make must return a perfkit.compress.Compressor, got {c!r}")
    losses = []
    for _ in range(steps):
        idx = torch.randint(len(x), (workers, batch), generator=g)  # (workers, batch)
        xb, yb = x[idx], onehot[idx]  # (workers, batch, 65), (workers, batch, 10)
        logits = xb @ w  # (workers, batch, 10)
        losses.append(float(-(yb * logits.log_softmax(-1)).sum(-1).mean()))
        # softmax regression's gradient in closed form: X^T (softmax - onehot) / batch
        grads = xb.transpose(1, 2) @ (logits.softmax(-1) - yb) / batch  # (workers, 65, 10)
        if comps is not None:
            grads = torch.stack([c.decompress(c.compress(gr)) for c, gr in zip(comps, grads,
                                                                                strict=True)])
        w -= lr * grads.mean(0)
    return losses


def gaussian_error(method: str, ratio: float = 1.0, numel: int = 1 << 20) -> float:
    """Relative error ``||x - decompress(compress(x))|| / ||x||`` predicted for i.i.d.
    Gaussian ``x`` of ``numel`` values: the model that measured gradients are held to.

    * ``topk``: keeping ``|x| > z`` with ``z = Phi^-1(1 - ratio/2)`` keeps the energy
      ``2 (z phi(z) + 1 - Phi(z))`` of the total 1;
    * ``randomk``: keeps a ``ratio`` share of the energy on average;
    * ``sign``: ``1 - E|x|^2 / E[x^2] = 1 - 2/pi`` is lost, whatever the size;
    * ``qsgd``: one step is ``max|x| / (127 - 0.01)`` (the codec's own scale) with ``max|x|``
      the median of the largest of ``numel`` Gaussian magnitudes, ``Phi^-1((1 + 2^(-1/numel)) / 2)``
      (3.97 at 10^4 values; the asymptote ``sqrt(2 ln numel)``, 4.29 there, overstates it);
      stochastic rounding of a uniform fraction has variance ``step^2 / 6`` on average.

    Raises:
        TypeError: ``method`` not a str, ``ratio`` not a number, ``numel`` not an int.
        ValueError: for an unknown ``method``, a ``ratio`` outside (0, 1], ``numel < 2``.
    """
    from statistics import NormalDist

    if not isinstance(method, str):
        raise TypeError(f"method must be 'topk', 'randomk', 'sign' or 'qsgd', got {method!r}")
    check_real("ratio", ratio, 0, 1, lo_open=True)
    check_int("numel", numel, 2)
    nd = NormalDist()
    if method == "topk":
        if ratio == 1:
            return 0.0
        z = nd.inv_cdf(1 - ratio / 2)
        return math.sqrt(max(0.0, 1 - 2 * (z * nd.pdf(z) + 1 - nd.cdf(z))))
    if method == "randomk":
        return math.sqrt(1 - ratio)
    if method == "sign":
        return math.sqrt(1 - 2 / math.pi)
    if method == "qsgd":
        tail = -math.expm1(math.log(0.5) / numel)  # P(|x| > m) at which P(all numel below m) = 1/2
        return nd.inv_cdf(1 - tail / 2) / (QSGD.levels - 0.01) / math.sqrt(6)
    raise ValueError(f"method must be 'topk', 'randomk', 'sign' or 'qsgd', got {method!r}")
