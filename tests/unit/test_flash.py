"""FlashAttention-2 in PyTorch (perfkit.compute.flash) against float64 attention: forward,
the three gradients, causal tile skipping (counted by torch's FLOP counter), saved bytes
(counted by SavedTensorMeter), all-masked rows and the log-sum-exp merge."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perfkit.compute import flash as fl
from perfkit.memory.saved_tensors import SavedTensorMeter


def _qkv(shape, dtype=torch.float32, seed=0, k_len=None, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    kshape = (*shape[:-2], k_len or shape[-2], shape[-1])
    return [(torch.randn(s, generator=g, dtype=torch.float64) * spread).to(dtype)
            .requires_grad_() for s in (shape, kshape, kshape)]


def _grads(out, inputs, g):
    return torch.autograd.grad(out, inputs, g)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t,tile", [(1, 16), (37, 16), (64, 16), (100, 32), (33, 1)])
def test_fp32_forward_and_grads_equal_float64(causal, t, tile):
    q, k, v = _qkv((2, 3, t, 8), spread=2.0)  # spread: maxima move from tile to tile
    out = fl.flash_attention(q, k, v, causal=causal, tile=tile)
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = fl.reference_attention(qd, kd, vd, causal)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    assert out.dtype == torch.float32
    assert (out.double() - ref).abs().max() <= 1e-5
    # gradients reach ~13 here: fp32 sums of T terms keep them to ~1e-6 of their largest
    # (measured worst 9.9e-7 of it, AVX-512), a tile's lost rescale would be off by O(1)
    for a, b in zip(_grads(out, (q, k, v), g), _grads(ref, (qd, kd, vd), g.double())):
        assert (a.double() - b).abs().max() <= 4e-6 * max(1.0, float(b.abs().max()))


def test_cross_attention_lengths_and_fp64_exact():
    q, k, v = _qkv((1, 2, 19, 4), torch.float64, k_len=45)
    out = fl.flash_attention(q, k, v, tile=8)
    ref, _ = fl.reference_attention(q, k, v)
    assert (out - ref).abs().max() <= 1e-12
    assert torch.autograd.gradcheck(lambda a, b, c: fl.flash_attention(a, b, c, True, 4),
                                    [x.detach()[..., :6, :].clone().requires_grad_()
                                     for x in (q, k, v)])


def test_bf16_within_its_rounding():
    q, k, v = _qkv((1, 2, 70, 16), torch.bfloat16)
    out = fl.flash_attention(q, k, v, causal=True, tile=16)
    ref, _ = fl.reference_attention(q, k, v, True)
    assert out.dtype == torch.bfloat16
    assert (out.double() - ref).abs().max() <= 2e-2  # bf16 keeps 8 bits: 2^-8 of |O| <= ~4
    dq, dk, dv = _grads(out, (q, k, v), torch.ones_like(out))
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref_g = _grads(fl.reference_attention(qd, kd, vd, True)[0], (qd, kd, vd),
                   torch.ones_like(ref))
    for a, b in zip((dq, dk, dv), ref_g):
        assert (a.double() - b).abs().max() <= 0.05 * b.abs().max() + 0.02


def test_large_logits_do_not_overflow():
    # scores of order 1e3: exp overflows even float64 (above 709) without the max shift
    q, k, v = _qkv((1, 1, 40, 4), torch.float64, spread=30.0)
    out = fl.flash_attention(q, k, v, tile=8)
    ref, lse = fl.reference_attention(q, k, v)
    assert lse.max() > 710
    assert torch.isfinite(out).all() and (out - ref).abs().max() <= 1e-9 * ref.abs().max()


def test_all_masked_rows_give_zero_output_and_no_nan():
    q, k, v = _qkv((1, 2, 40, 8), torch.float64)
    # queries at positions 0..39, keys at 20..59: rows 0..19 see no key at all
    o, lse = fl.attention_forward_tiles(q, k, v, 0.3, True, 16, q_start=0, k_start=20)
    ro, rl = fl.reference_attention(q, k, v, True, 0.3, q_start=0, k_start=20)
    assert torch.isinf(lse[..., :20]).all() and (lse[..., :20] < 0).all()
    assert (o[..., :20, :] == 0).all() and not torch.isnan(o).any()
    assert (o - ro).abs().max() <= 1e-12 and (lse[..., 20:] - rl[..., 20:]).abs().max() <= 1e-12
    do = torch.randn_like(o)
    delta = (do * o).sum(-1)
    grads = fl.attention_backward_tiles(q, k, v, do, lse, delta, 0.3, True, 16, 0, 20)
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads[0][..., :20, :] == 0).all()  # a query that saw nothing has no gradient


def test_merge_of_two_key_halves_equals_whole():
    q, k, v = _qkv((2, 2, 24, 8), torch.float64, k_len=30, spread=20.0)
    scale = 1.0
    oa, la = fl.attention_forward_tiles(q, k[..., :13, :], v[..., :13, :], scale, tile=8)
    ob, lb = fl.attention_forward_tiles(q, k[..., 13:, :], v[..., 13:, :], scale, tile=8)
    o, lse = fl.merge_partials(oa, la, ob, lb)
    ro, rl = fl.reference_attention(q, k, v, scale=scale)
    assert (lse - rl).abs().max() <= 1e-9 and (o - ro).abs().max() <= 1e-9
    assert torch.isfinite(lse).all()  # logits ~ 1e3: an unshifted exp is inf
    inf = torch.full((1, 3), -math.inf, dtype=torch.float64)
    om, lm = fl.merge_partials(torch.zeros(1, 3, 2), inf, torch.ones(1, 3, 2), inf)
    assert (om == 0).all() and torch.isinf(lm).all()
    half = torch.full((1, 3), 0.5, dtype=torch.float64)
    om, lm = fl.merge_partials(torch.zeros(1, 3, 2), inf, torch.ones(1, 3, 2), half)
    assert (om == 1).all() and (lm == 0.5).all()  # one side empty: the other side unchanged


@pytest.mark.parametrize("causal", [False, True])
def test_flop_counts_are_what_runs(causal):
    q, k, v = _qkv((1, 2, 100, 8))
    with FlopCounterMode(display=False) as fwd:
        out = fl.flash_attention(q, k, v, causal=causal, tile=16)
    with FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    want = fl.flash_flops(1, 2, 100, 8, causal, 16)
    assert fwd.get_total_flops() == want.forward and bwd.get_total_flops() == want.backward
    n = 7  # ceil(100 / 16) tiles per side
    assert want.tiles == (n * (n + 1) // 2 if causal else n * n)  # above-diagonal skipped
    full = fl.flash_flops(1, 1, 128, 8, False, 16)
    assert full.forward == full.eager_forward == 4 * 128 * 128 * 8
    assert full.recompute_ratio == pytest.approx(10 / 8)
    assert fl.flash_flops(1, 1, 128, 8, True, 16).forward == 4 * (8 * 9 // 2) * 16 * 16 * 8
    for t, tile, c in ((1, 4, True), (37, 8, True), (64, 16, True), (100, 32, False)):
        pairs = fl.tile_pairs(t, t, tile, c)  # the closed form counts the tiles that run
        f = fl.flash_flops(1, 1, t, 1, c, tile)
        assert f.tiles == len(pairs)
        assert f.forward == 4 * sum((i1 - i0) * (j1 - j0) for i0, i1, j0, j1, _ in pairs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_saved_bytes_exact_and_terms(dtype):
    lens, flash, eager = [32, 48, 64, 96], [], []
    for t in lens:
        q, k, v = _qkv((2, 3, t, 8), dtype)
        for fn, sink in ((fl.flash_attention, flash), (fl.eager_attention, eager)):
            with SavedTensorMeter(inputs=[q, k, v]) as meter:
                fn(q, k, v, True)
            sink.append(meter.report().activation_bytes)
        assert flash[-1] == fl.flash_saved_bytes(2, 3, t, 8, dtype)
        assert eager[-1] == fl.eager_saved_bytes(2, 3, t, dtype, causal=True)
    size = torch.empty((), dtype=dtype).element_size()
    assert fl.length_terms(lens, eager)[0] == pytest.approx(2 * 3 * size + 1)  # + the mask
    assert fl.length_terms(lens, flash)[0] == pytest.approx(0, abs=1e-6)


def test_bad_arguments():
    q, k, v = _qkv((1, 1, 8, 4))
    for tile in (0, 3, 12, -4):
        with pytest.raises(ValueError, match="tile"):
            fl.flash_attention(q, k, v, tile=tile)
    with pytest.raises(ValueError, match="tile"):
        fl.flash_attention(q, k, v, tile=True)
    with pytest.raises(ValueError, match="q, k, v"):
        fl.flash_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="q, k, v"):
        fl.flash_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="q, k, v"):
        fl.flash_attention(q, k, v.double())
    with pytest.raises(TypeError, match="q"):
        fl.flash_attention(q.detach().numpy(), k, v)
    with pytest.raises(TypeError, match="causal"):
        fl.flash_attention(q, k, v, causal=1)
    with pytest.raises(ValueError, match="seq_len"):
        fl.flash_flops(1, 1, 0, 4)
    with pytest.raises(ValueError, match="seq_lens"):
        fl.length_terms([1, 2], [3.0, 4.0])


def test_errors_against_float64_sees_a_wrong_kernel(monkeypatch):
    q, k, v = _qkv((1, 2, 37, 8))
    errs = fl.errors_against_float64(q, k, v, causal=True, tile=16)
    assert set(errs) == {"O", "dQ", "dK", "dV"} and max(errs.values()) <= 1e-5
    # a backward that forgets the 1/sqrt(D) scale on dQ must show up in dQ only
    real = fl.attention_backward_tiles

    def unscaled(*a, **kw):
        dq, dk, dv = real(*a, **kw)
        return dq * 2, dk, dv

    monkeypatch.setattr(fl, "attention_backward_tiles", unscaled)
    bad = fl.errors_against_float64(q, k, v, causal=True, tile=16)
    assert bad["dQ"] > 1e-2 and bad["dK"] <= 1e-5
