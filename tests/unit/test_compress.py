"""perfkit.compress: exact wire bytes, top-k selection, unbiased QSGD, error feedback;
perfkit.viz.comm's compression plots."""

import math

import pytest
import torch

from perfkit.compress import QSGD, Compressor, ErrorFeedback, RandomK, Sign, TopK

ALL = [Compressor(), TopK(0.01), TopK(0.1, "sampled"), RandomK(0.05), QSGD(), Sign(),
       ErrorFeedback(TopK(0.01)), ErrorFeedback(Sign())]


@pytest.mark.parametrize("comp", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [(1,), (7,), (33, 5), (1003,)])
def test_round_trip_shape_dtype(comp, shape):
    x = torch.randn(shape)
    y = comp.decompress(comp.compress(x))
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("n", [1, 9, 1000, 4097])
def test_wire_bytes_are_exact(n):
    x = torch.randn(n)
    k = math.ceil(0.01 * n)
    assert Compressor().compress(x).wire_bytes == 4 * n
    assert TopK(0.01).compress(x).wire_bytes == 8 * k  # fp32 value + int32 index
    assert TopK(0.01, "sampled").compress(x).wire_bytes == 8 * k
    assert RandomK(0.01).compress(x).wire_bytes == 4 * k + 8  # values + the seed
    assert QSGD().compress(x).wire_bytes == n + 4  # int8 + fp32 scale
    assert Sign().compress(x).wire_bytes == math.ceil(n / 8) + 4  # bits + fp32 scale


def test_topk_keeps_exactly_the_k_largest_magnitudes():
    x = torch.randn(10_000)
    c = TopK(0.01).compress(x)
    vals, idx = c.tensors
    assert vals.numel() == 100 and idx.dtype == torch.int32
    assert torch.equal(vals, x[idx.long()])
    assert vals.abs().min() >= x.abs().sort(descending=True).values[99]
    y = TopK(0.01).decompress(c)
    assert int((y != 0).sum()) == 100 and torch.equal(y[idx.long()], vals)


@pytest.mark.parametrize("seed", range(5))
def test_sampled_topk_selects_the_same_set_as_exact(seed):
    # the sampled threshold only shortlists candidates; if it overshoots, the exact path
    # runs, so the result is the exact top-k either way (ties aside)
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(seed)) ** 3
    exact = set(TopK(0.01).compress(x).tensors[1].tolist())
    sampled = set(TopK(0.01, "sampled", seed=seed).compress(x).tensors[1].tolist())
    assert sampled == exact


def test_randomk_shared_seed_picks_the_same_coordinates_on_every_rank():
    a, b = RandomK(0.1, seed=3), RandomK(0.1, seed=3)
    x, z = torch.randn(500), torch.randn(500)
    ca, cb = a.compress(x), b.compress(z)
    assert ca.meta == cb.meta
    ya, yb = a.decompress(ca), b.decompress(cb)
    assert torch.equal(ya != 0, yb != 0) and int((ya != 0).sum()) == 50
    assert RandomK(0.1, seed=4).compress(x).meta != ca.meta


def test_qsgd_is_unbiased_and_deterministic_rounding_would_not_be():
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(256, generator=gen)
    x = x0.repeat(300)  # 76,800 values: longer than the dither pool, so it is tiled
    q = QSGD(seed=1)
    acc = torch.zeros(256)
    calls = 40
    for _ in range(calls):
        c = q.compress(x)
        acc += q.decompress(c).view(300, 256).mean(0)
    level = float(c.tensors[1])  # one quantisation step, 1 / s
    err = float((acc / calls - x0).abs().max()) / level
    # per value ~12,000 draws, std <= 0.5 / sqrt(12,000) level; 0.05 is > 9 std
    assert err < 0.05, f"mean error {err:.3f} of a level: stochastic rounding is biased"
    nearest = torch.round(x0 / level) * level  # what round-to-nearest would give
    assert float((nearest - x0).abs().max()) / level > 0.3
    codes = c.tensors[0]
    assert codes.dtype == torch.uint8 and 1 <= int(codes.min()) and int(codes.max()) <= 255
    assert level == pytest.approx(float(x0.abs().max()) / 126.99, rel=1e-6)


def test_qsgd_error_is_below_one_level():
    x = torch.randn(100_000)
    q = QSGD()
    c = q.compress(x)
    assert float((q.decompress(c) - x).abs().max()) <= float(c.tensors[1]) * 1.0001


def test_sign_bit_packing_round_trips_every_byte_pattern():
    import itertools

    pattern = torch.tensor(list(itertools.product([1.0, -1.0], repeat=8))).reshape(-1)
    for n in (2048, 2045):  # whole bytes, and a last byte padded with zeros
        x = pattern[:n] * torch.rand(n).add_(0.5)
        c = Sign().compress(x)
        assert c.tensors[0].numel() == math.ceil(n / 8)
        assert torch.equal(Sign().decompress(c) > 0, x >= 0)


def test_sign_packs_bits_and_scales_by_mean_magnitude():
    x = torch.tensor([1.0, -2.0, 3.0, -4.0, 0.5, -0.5, 2.0, 1.0, -1.0, 5.0])
    c = Sign().compress(x)
    assert c.tensors[0].dtype == torch.uint8 and c.tensors[0].numel() == 2
    assert float(c.tensors[1]) == pytest.approx(float(x.abs().mean()))
    assert torch.equal(Sign().decompress(c), torch.sign(x) * x.abs().mean())


@pytest.mark.parametrize("inner", [TopK(0.05), RandomK(0.05), QSGD(), Sign()],
                         ids=lambda c: c.name)
def test_error_feedback_conserves_the_gradient(inner):
    ef = ErrorFeedback(inner)
    gen = torch.Generator().manual_seed(0)
    total_in, total_sent = torch.zeros(300), torch.zeros(300)
    for _ in range(20):
        g = torch.randn(300, generator=gen)
        total_in += g
        total_sent += ef.decompress(ef.compress(g, key="w"))
    assert torch.allclose(total_sent + ef.residuals["w"], total_in, atol=1e-4)


def test_error_feedback_keeps_one_residual_per_key():
    ef = ErrorFeedback(TopK(0.5))
    ef.compress(torch.tensor([1.0, 2.0]), key="a")
    ef.compress(torch.tensor([3.0, -1.0, 0.5]), key="b")
    assert ef.residuals["a"].tolist() == [1.0, 0.0]
    assert ef.residuals["b"].tolist() == [0.0, 0.0, 0.5]  # k = ceil(1.5) = 2 kept
    assert ef.name == "topk_50pct_ef"


@pytest.mark.parametrize("comp", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_are_refused(comp, bad):
    x = torch.randn(100)
    x[37] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        comp.compress(x)


def test_large_finite_values_are_not_mistaken_for_inf():
    x = torch.full((10,), 3e38)  # the sum overflows fp32; every value is finite
    assert QSGD().compress(x).wire_bytes == 14


@pytest.mark.parametrize("ratio", [0, 0.0, -0.1, 1.5, float("nan"), True, "0.1"])
def test_ratio_outside_0_1_is_refused(ratio):
    with pytest.raises(ValueError, match="ratio"):
        TopK(ratio)
    with pytest.raises(ValueError, match="ratio"):
        RandomK(ratio)


def test_other_bad_input():
    with pytest.raises(TypeError, match="floating"):
        TopK(0.1).compress(torch.arange(10))
    with pytest.raises(TypeError, match="Tensor"):
        Sign().compress([1.0, 2.0])
    with pytest.raises(ValueError, match="method"):
        TopK(0.1, method="approx")
    with pytest.raises(TypeError, match="inner"):
        ErrorFeedback("topk")
    with pytest.raises(TypeError, match="inner"):
        ErrorFeedback(ErrorFeedback(Sign()))
    assert TopK(1.0).compress(torch.randn(10)).tensors[0].numel() == 10


def test_compression_plots_and_widget_extremes():
    import matplotlib.pyplot as plt

    from perfkit.viz import comm as vcomm

    spec = vcomm.compression_widget(torch.randn(5000), steps=10)
    for kw in spec.extremes():
        fig = spec.fn(**kw)
        assert "error" in fig.axes[0].get_title()
        plt.close(fig)
    rows = [{"name": "topk", "wire_ratio": 0.02, "rel_error": 0.9, "predicted": 0.95},
            {"name": "sign", "wire_ratio": 1 / 32, "rel_error": 0.6}]
    plt.close(vcomm.plot_compression_tradeoff(rows))
    plt.close(vcomm.plot_convergence({"a": [2.0, 1.0, 0.5], "b": [2.0, 1.5, 1.0]}, smooth=2))
    res = {m: {"final_loss": 0.1, "wire_bytes_ratio": 0.5, "step_s": 0.01}
           for m in ("none", "topk_1pct_ef")}
    plt.close(vcomm.plot_method_comparison(res))
    plt.close(vcomm.plot_kernel_shares({"qsgd eager": 0.27, "qsgd fused": 0.57},
                                       {"qsgd eager": 0.25, "qsgd fused": 0.39}))
    with pytest.raises(ValueError, match="same non-empty keys"):
        vcomm.plot_kernel_shares({"qsgd eager": 0.27}, {"qsgd fused": 0.39})
    with pytest.raises(TypeError, match="grad"):
        vcomm.compression_widget([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="smooth"):
        vcomm.plot_convergence({"a": [1.0]}, smooth=0)
