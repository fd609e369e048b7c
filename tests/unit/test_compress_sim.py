"""perfkit.compress.simulate: the Gaussian error model against real compressors, and simulated
data-parallel training where error feedback recovers what top-k loses."""

import math

import pytest
import torch

from perfkit.compress import (
    QSGD,
    Compressor,
    ErrorFeedback,
    RandomK,
    Sign,
    TopK,
    gaussian_error,
    simulate_dp_training,
)


def test_gaussian_error_model_matches_gaussian_data():
    x = torch.randn(1 << 18, generator=torch.Generator().manual_seed(0))
    for method, comp, ratio in [("topk", TopK(0.01), 0.01), ("randomk", RandomK(0.1), 0.1),
                                ("sign", Sign(), 1.0), ("qsgd", QSGD(), 1.0)]:
        err = float((comp.decompress(comp.compress(x)) - x).norm() / x.norm())
        assert err == pytest.approx(gaussian_error(method, ratio, x.numel()), rel=0.1), method
    assert gaussian_error("topk", 1.0) == 0.0
    with pytest.raises(ValueError, match="method"):
        gaussian_error("powersgd")
    with pytest.raises(ValueError, match="ratio"):
        gaussian_error("topk", 0)


def test_qsgd_model_takes_the_typical_largest_gaussian_magnitude():
    # QSGD's step is max|x| / 126.99: the model's max is the median of the largest of n
    # Gaussian magnitudes, not the asymptote sqrt(2 ln n), 8 % too high at n = 10^4
    x = torch.randn(400, 10_000, generator=torch.Generator().manual_seed(1))
    typical = float(x.abs().max(dim=1).values.median())
    model_max = gaussian_error("qsgd", 1.0, 10_000) * (QSGD.levels - 0.01) * math.sqrt(6)
    assert model_max == pytest.approx(typical, rel=0.02)
    assert math.sqrt(2 * math.log(10_000)) > 1.05 * typical
    q = QSGD()
    errs = [float((q.decompress(q.compress(r)) - r).norm() / r.norm()) for r in x[:50]]
    assert sorted(errs)[25] == pytest.approx(gaussian_error("qsgd", 1.0, 10_000), rel=0.03)


def test_simulated_training_error_feedback_recovers_convergence():
    base = simulate_dp_training(None, steps=60)
    topk = simulate_dp_training(lambda: TopK(0.01), steps=60)
    ef = simulate_dp_training(lambda: ErrorFeedback(TopK(0.01)), steps=60)
    tail = lambda xs: sum(xs[-10:]) / 10  # noqa: E731
    assert base[0] == topk[0] == ef[0] == pytest.approx(math.log(10))  # zero weights
    assert tail(base) < 0.6 * base[0]
    assert tail(ef) < 1.25 * tail(base) < tail(topk), (tail(base), tail(ef), tail(topk))
    with pytest.raises(ValueError, match="steps"):
        simulate_dp_training(None, steps=0)
    with pytest.raises(ValueError, match="lr"):
        simulate_dp_training(None, lr=0)


def test_simulated_dense_with_error_feedback_is_plain_dense_training():
    # the identity sends everything, so error feedback around it must change nothing; it
    # used to zero its own payload and train on zero gradients (loss stuck at ln 10)
    base = simulate_dp_training(None, steps=40)
    dense = simulate_dp_training(Compressor, steps=40)
    comps = []

    def make():
        comps.append(ErrorFeedback(Compressor()))
        return comps[-1]
    dense_ef = simulate_dp_training(make, steps=40)
    assert dense == pytest.approx(base, rel=0, abs=1e-6)
    assert dense_ef == pytest.approx(base, rel=0, abs=1e-6)
    assert base[-1] < 0.6 * base[0]
    assert len(comps) == 2 and all(not r.any() for c in comps for r in c.residuals.values())
