"""perfkit.compress: exact wire bytes and counts, top-k selection, unbiased QSGD, error
feedback (alone and inside the DDP hook, against residuals computed by hand);
perfkit.viz.comm's compression plots."""

import math
from decimal import ROUND_CEILING, Decimal

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from perfkit.compress import (
    QSGD,
    Compressor,
    ErrorFeedback,
    HookState,
    RandomK,
    Sign,
    TopK,
    compression_hook,
)
from perfkit.estimate import Estimate

ALL = [Compressor(), TopK(0.01), TopK(0.1, "sampled"), RandomK(0.05), QSGD(), Sign(),
       ErrorFeedback(TopK(0.01)), ErrorFeedback(Sign())]


@pytest.mark.parametrize("comp", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [(1,), (7,), (33, 5), (1003,)])
def test_round_trip_shape_dtype(comp, shape):
    x = torch.randn(shape)
    y = comp.decompress(comp.compress(x))
    assert y.shape == x.shape and y.dtype == x.dtype


def _exact_k(ratio: float, n: int) -> int:
    """ceil(ratio * n) in decimal arithmetic on the ratio as written, clamped to [1, n]."""
    k = int((Decimal(repr(ratio)) * n).to_integral_value(rounding=ROUND_CEILING))
    return min(n, max(1, k))


@pytest.mark.parametrize("n", [1, 9, 1000, 4097])
def test_wire_bytes_are_exact(n):
    x = torch.randn(n)
    k = _exact_k(0.01, n)
    assert Compressor().compress(x).wire_bytes == 4 * n
    assert TopK(0.01).compress(x).wire_bytes == 8 * k  # fp32 value + int32 index
    assert TopK(0.01, "sampled").compress(x).wire_bytes == 8 * k
    assert RandomK(0.01).compress(x).wire_bytes == 4 * k + 8  # values + the seed
    assert QSGD().compress(x).wire_bytes == n + 4  # int8 + fp32 scale
    assert Sign().compress(x).wire_bytes == math.ceil(n / 8) + 4  # bits + fp32 scale


def test_k_is_exact_for_decimal_ratios():
    # 0.07 is stored as 0.07000000000000000666..., so the binary product 0.07 * 100 is
    # 7.000000000000001 and a float ceil keeps 8 of 100 values where 7 % means 7
    assert TopK(0.07).k(100) == RandomK(0.07).k(100) == 7
    assert TopK(0.29).k(100) == 29 and TopK(0.1).k(30) == 3  # 0.1 * 30 = 3.0000000000000004
    ratios = [float(f"{i}e-3") for i in range(1, 1001)] + [float(f"{i}e-4") for i in range(1, 200)]
    sizes = [1, 7, 30, 100, 1000, 3000, 7919, 65_536, 10**6]
    wrong = [(r, n) for r in ratios for n in sizes
             if not TopK(r).k(n) == RandomK(r).k(n) == _exact_k(r, n)]
    assert not wrong, f"{len(wrong)} of {len(ratios) * len(sizes)} counts differ: {wrong[:5]}"
    for r, n in [(0.07, 100), (0.29, 100), (0.001, 7919)]:  # what compress keeps, too
        x = torch.randn(n)
        assert TopK(r).compress(x).tensors[0].numel() == _exact_k(r, n)
        assert TopK(r, "sampled").compress(x).tensors[0].numel() == _exact_k(r, n)
        assert RandomK(r).compress(x).tensors[0].numel() == _exact_k(r, n)


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


def test_error_feedback_around_the_identity_sends_everything():
    # the identity's payload is a view of the residual; updating the residual in place
    # used to zero the payload, so "dense + EF" sent zeros
    ef = ErrorFeedback(Compressor())
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        g = torch.randn(5, 7, generator=gen)
        assert torch.equal(ef.decompress(ef.compress(g, key="w")), g)
        assert not ef.residuals["w"].any()
    parts = ef.compress_parts(g.reshape(-1), ["a", "b"], [30, 5])
    assert torch.equal(ef.decompress(parts).view(5, 7), g)
    assert not ef.residuals["a"].any() and ef.residuals["b"].shape == (5,)


def test_error_feedback_parts_keep_their_residuals_in_any_layout():
    ef = ErrorFeedback(TopK(0.5))
    a, b = torch.tensor([4.0, 1.5]), torch.tensor([-3.0, 0.5, 2.0])
    ef.compress_parts(torch.cat([a, b]), ["a", "b"], [2, 3])  # keeps 4, -3, 2 (k = 3)
    assert ef.residuals["a"].tolist() == [0.0, 1.5]
    assert ef.residuals["b"].tolist() == [0.0, 0.5, 0.0]
    # the same parts the other way round, as in DDP's rebuilt buckets: the residuals follow
    # their keys; b + res_b = [-3, 1, 2], a + res_a = [4, 3]: keeps -3, 4, 3
    c = ef.compress_parts(torch.cat([b, a]), ["b", "a"], [3, 2])
    assert ef.decompress(c).tolist() == [-3.0, 0.0, 0.0, 4.0, 3.0]
    assert ef.residuals["b"].tolist() == [0.0, 1.0, 2.0] and ef.residuals["a"].tolist() == [0, 0]
    ef.compress_parts(torch.zeros(3), ["b"], [3])  # b alone, keeps 2 and 1
    assert ef.residuals["b"].tolist() == [0.0, 0.0, 0.0]
    ef.compress(torch.tensor([1.0, 3.0]), key="a")  # a alone, from its last residual
    assert ef.residuals["a"].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="numels must sum"):
        ef.compress_parts(torch.zeros(4), ["a", "b"], [2, 3])
    with pytest.raises(ValueError, match="keys must be distinct"):
        ef.compress_parts(torch.zeros(4), ["a", "a"], [2, 2])


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


@pytest.mark.parametrize(("ratio", "exc"), [(0, ValueError), (0.0, ValueError),
                                            (-0.1, ValueError), (1.5, ValueError),
                                            (float("nan"), ValueError), (True, ValueError),
                                            ("0.1", TypeError)])
def test_ratio_outside_0_1_is_refused(ratio, exc):
    with pytest.raises(exc, match="ratio"):
        TopK(ratio)
    with pytest.raises(exc, match="ratio"):
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


def test_compression_plots():
    import matplotlib.pyplot as plt

    from perfkit.viz import comm as vcomm

    rows = [{"name": "topk", "wire_ratio": 0.02, "rel_error": 0.9, "predicted": 0.95},
            {"name": "sign", "wire_ratio": 1 / 32, "rel_error": 0.6}]
    fig = vcomm.plot_compression_tradeoff(rows)  # the legend names both markers, not only the methods
    legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"measured (every method)", "Gaussian model"} <= legend
    # the marker key is drawn in a colour no method takes (grey is the 8th method's, C7)
    key = [h for h, t in zip(fig.axes[0].get_legend().legend_handles, fig.axes[0].get_legend().get_texts(),
                             strict=True) if t.get_text() == "measured (every method)"][0]
    assert tuple(key.get_facecolor()[0][:3]) == (0.0, 0.0, 0.0)
    plt.close(fig)
    res = {m: {"final_loss": 0.1, "wire_bytes_ratio": 0.5, "step_s": 0.01}
           for m in ("none", "topk_1pct_ef")}
    fig = vcomm.plot_method_comparison(res)  # log panels draw points: a bar on a log axis has no length
    assert not fig.axes[0].patches and not fig.axes[1].patches and fig.axes[0].collections
    plt.close(fig)
    # with paired ratios the step panel draws them, intervals and all, not the two medians
    est = Estimate(1.3, 1.2, 1.4, 0.9, 30, "median of 30 paired ratios")
    fig = vcomm.plot_method_comparison(res, step_ratios={"topk_1pct_ef": est})
    widths = [p.get_width() for p in fig.axes[2].patches]
    assert widths == [1.0, 1.3] and "paired" in fig.axes[2].get_xlabel()
    plt.close(fig)
    with pytest.raises(ValueError, match="not in results"):
        vcomm.plot_method_comparison(res, step_ratios={"sign": est})
    plt.close(vcomm.plot_kernel_shares({"qsgd eager": 0.27, "qsgd fused": 0.57},
                                       {"qsgd eager": 0.25, "qsgd fused": 0.39}))
    # a path judged on a range draws that range, not the point 8 / b the verdict does not use
    fig = vcomm.plot_kernel_shares({"qsgd eager": 0.27, "qsgd fused": (0.421, 0.632)},
                                   {"qsgd eager": 0.25, "qsgd fused": 0.24})
    grey = fig.axes[0].patches[:2]
    assert [round(b.get_y(), 1) for b in grey] == [0.0, 42.1] and round(grey[1].get_height(), 1) == 21.1
    plt.close(fig)
    with pytest.raises(ValueError, match="same non-empty keys"):
        vcomm.plot_kernel_shares({"qsgd eager": 0.27}, {"qsgd fused": 0.39})


# --- the DDP hook, on a 1-process gloo group: DDP rebuilds its buckets there too -------


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _net() -> nn.Module:
    torch.manual_seed(0)  # parameters of 640, 64, 2112, 33, 165 and 5 values
    return nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 33), nn.Tanh(),
                         nn.Linear(33, 5))


def _hooked(net: nn.Module, state: HookState, cap_mb: float) -> tuple[DDP, list]:
    """DDP around ``net`` with perfkit's hook, recording each step's bucket layouts."""
    ddp = DDP(net, bucket_cap_mb=cap_mb)
    layouts: list[list[list[nn.Parameter]]] = []  # step -> bucket -> parameters in order

    def hook(st, bucket):
        if bucket.index() == 0:
            layouts.append([])
        layouts[-1].append(bucket.parameters())
        return compression_hook(st, bucket)
    ddp.register_comm_hook(state, hook)
    return ddp, layouts


@pytest.mark.parametrize("cap_mb", [25, 0.004], ids=["one_bucket", "several_buckets"])
def test_hook_error_feedback_follows_each_parameter_when_ddp_rebuilds_buckets(
        one_rank_group, cap_mb):
    net = _net()
    ef = ErrorFeedback(TopK(0.1))
    ddp, layouts = _hooked(net, HookState(ef), cap_mb)
    by_hand = TopK(0.1)  # the same selection, applied to residuals kept per parameter here
    res = {p: torch.zeros(p.numel()) for p in net.parameters()}
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        x = torch.randn(16, 10, generator=gen)
        own = dict(zip(res, torch.autograd.grad(net(x).square().mean(), list(res)),
                       strict=True))  # each parameter's gradient, without DDP
        ddp.zero_grad()
        ddp(x).square().mean().backward()
        for params in layouts[step]:
            numels = [p.numel() for p in params]
            corrected = torch.cat([own[p].reshape(-1) + res[p] for p in params])  # bucket order
            sent = by_hand.decompress(by_hand.compress(corrected)).split(numels)
            for p, s in zip(params, sent, strict=True):
                # 1 rank: the gradient DDP leaves is what this rank sent
                torch.testing.assert_close(p.grad.reshape(-1), s, rtol=0, atol=1e-6,
                                           msg=lambda m, p=p, i=step: f"step {i}, {tuple(p.shape)}: {m}")
                res[p] = own[p].reshape(-1) + res[p] - s  # own gradient + residual - sent
                torch.testing.assert_close(ef.residuals[p], res[p], rtol=0, atol=1e-6)
    # the layouts really changed after step 0: same bucket index (and, for one bucket, the
    # same size), other parameters at each offset
    order = [[[tuple(p.shape) for p in b] for b in layout] for layout in layouts]
    assert order[0] != order[1] == order[2]
    assert (len(order[1]) == 1) == (cap_mb == 25)


def test_hook_dense_with_error_feedback_trains_like_plain_ddp(one_rank_group):
    losses = {}
    residuals = []
    for method in ("ddp", "dense", "dense_ef"):
        net = _net()
        if method == "ddp":
            ddp = DDP(net)
        else:
            comp = ErrorFeedback(Compressor()) if method == "dense_ef" else Compressor()
            ddp, _ = _hooked(net, HookState(comp), 25)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(2)
        losses[method] = []
        for _ in range(10):
            x = torch.randn(16, 10, generator=gen)
            loss = (ddp(x) - x[:, :5]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[method].append(float(loss))
            if method == "dense_ef":
                residuals.append(max(float(r.abs().max()) for r in comp.residuals.values()))
    assert losses["dense"] == pytest.approx(losses["ddp"], rel=0, abs=1e-6)
    assert losses["dense_ef"] == pytest.approx(losses["ddp"], rel=0, abs=1e-6)
    assert losses["ddp"][-1] < 0.5 * losses["ddp"][0]
    assert residuals == [0.0] * 10


def test_job_counts_torch_hooks_payload_at_the_all_reduce(one_rank_group):
    # the job counts what a torch hook hands to dist.all_reduce, not what a formula says it
    # sends: a hook that all-reduces 3 of the bucket's values counts 12 bytes per step
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from perfkit.jobs.compression import _Counted, _counted_hook, attach

    def three(_, bucket):
        fut = default_hooks._allreduce_fut(None, bucket.buffer()[:3].clone())
        return fut.then(lambda _: bucket.buffer())

    ddp = DDP(_net())
    st = _Counted(None)
    ddp.register_comm_hook(st, _counted_hook(three))
    for _ in range(2):
        ddp(torch.randn(4, 10)).sum().backward()
    dense = 4 * sum(p.numel() for p in ddp.parameters())
    assert (st.wire_bytes, st.dense_bytes) == (2 * 12, 2 * dense)
    ddp = DDP(_net())
    half = attach(ddp, "fp16_hook")
    ddp(torch.randn(4, 10)).sum().backward()
    assert 2 * half.wire_bytes == half.dense_bytes == dense


def test_powersgd_wire_ratio_follows_torchs_rule():
    from perfkit.jobs.compression import powersgd_wire_ratio

    net = _net()  # 10x64, 64x33, 33x5 weights; at rank 1 each sends rows + cols values
    dense = sum(p.numel() for p in net.parameters())
    sent = (64 + 10) + (33 + 64) + (5 + 33) + 64 + 33 + 5  # 33x5: 38 * 2 < 165, still worth it
    assert powersgd_wire_ratio(net, 1, 1, start=0) == pytest.approx(sent / dense)
    assert powersgd_wire_ratio(net, 1, 4, start=2) == pytest.approx((2 + 2 * sent / dense) / 4)
    assert powersgd_wire_ratio(net, 8, 1, start=0) > powersgd_wire_ratio(net, 1, 1, start=0)
    with pytest.raises(ValueError, match="rank"):
        powersgd_wire_ratio(net, 0, 4)


@pytest.mark.parametrize("n", [3, 4, 13])
def test_interleaved_rounds_rotate_so_no_method_runs_twice_in_a_row(n):
    """Every method takes every position equally often, and no method runs last in one round
    and first in the next. Planted: reversing every other round, which ran the first method
    (the uncompressed baseline) twice in a row at every second round's end."""
    from perfkit.jobs.compression import round_order

    rounds = [round_order(n, r) for r in range(2 * n)]
    for pos in range(n):
        assert sorted(o[pos] for o in rounds[:n]) == list(range(n))
    assert all(a[-1] != b[0] for a, b in zip(rounds, rounds[1:]))

    def reversed_every_other(n, r):
        return list(range(n)) if r % 2 == 0 else list(range(n))[::-1]

    old = [reversed_every_other(n, r) for r in range(2 * n)]
    assert any(a[-1] == b[0] for a, b in zip(old, old[1:]))


@pytest.mark.parametrize("n", [3, 4, 13, 14])
def test_interleaved_rounds_follow_every_method_by_every_other_equally_often(n):
    """A step can leave a cost to the next (collectives that end with the processes out of
    step, evicted caches). Over a cycle each method must run right after every other equally
    often, so that cost falls on all alike. Planted: the plain rotation, under which each
    method always followed the same one (the baseline always came after the last method)."""
    from collections import Counter

    from perfkit.jobs.compression import round_order

    cycle = 2 * n if n % 2 else n
    pairs = Counter((a, b) for r in range(cycle) for a, b in zip(round_order(n, r), round_order(n, r)[1:]))
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1
    assert all(round_order(n, r + cycle) == round_order(n, r) for r in range(cycle))
    rotation = Counter((a, b) for r in range(cycle) for o in [[(r + k) % n for k in range(n)]]
                       for a, b in zip(o, o[1:]))
    assert len(rotation) < n * (n - 1)


@pytest.mark.parametrize("n, r, err", [(0, 0, ValueError), (2, -1, ValueError), (2.0, 0, ValueError),
                                       (True, 0, ValueError)])
def test_round_order_refuses_bad_counts_by_name(n, r, err):
    from perfkit.jobs.compression import round_order

    with pytest.raises(err, match="n|r"):
        round_order(n, r)
