"""perfkit.compress.fused: the compiled one-pass kernels agree with the eager ones; paths and
fallbacks are chosen as documented. (Speed is measured in benchmarks/compression.py.)"""

import math

import pytest
import torch

from perfkit.compress import QSGD, Sign, fused

SIZES = [1, 7, 8, 1000, 3 * fused.DITHER_POOL + 17]  # tiny, partial bytes, tiled dither pool


@pytest.mark.parametrize("n", SIZES)
def test_qsgd_fused_codes_match_eager(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    eager, comp = QSGD(seed=3, fused=False), QSGD(seed=3, fused=True)
    ce, cf = eager.compress(x), comp.compress(x)
    diff = (ce.tensors[0].int() - cf.tensors[0].int()).abs()
    # same dither, same expression: a code may differ by one only where x * s + u lands on
    # an integer and the two kernels round the product differently in the last bit
    assert int(diff.max()) <= 1 and int((diff > 0).sum()) <= max(1, n // 10_000)
    assert torch.equal(ce.tensors[1], cf.tensors[1])
    de, df = eager.decompress(ce), comp.decompress(ce)
    torch.testing.assert_close(df, de, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n", SIZES)
def test_sign_fused_bits_match_eager(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    x[::5] = 0.0  # zero counts as positive on both paths
    ce, cf = Sign(fused=False).compress(x), Sign(fused=True).compress(x)
    assert torch.equal(ce.tensors[0], cf.tensors[0]) and cf.tensors[0].numel() == math.ceil(n / 8)
    torch.testing.assert_close(cf.tensors[1], ce.tensors[1], rtol=1e-5, atol=0)
    sc = cf.tensors[1]
    assert torch.equal(Sign(fused=True).decompress(cf), torch.where(x >= 0, sc, -sc))


def test_fused_qsgd_is_unbiased():
    x0 = torch.randn(512, generator=torch.Generator().manual_seed(0))
    x = x0.repeat(200)  # longer than the dither pool, so the pool is tiled
    q = QSGD(seed=1, fused=True)
    acc = torch.zeros(512)
    for _ in range(40):
        c = q.compress(x)
        acc += q.decompress(c).view(200, 512).mean(0)
    err = float((acc / 40 - x0).abs().max()) / float(c.tensors[1])
    assert err < 0.05, f"fused QSGD's mean is {err:.3f} of a level off: biased rounding"


def test_fused_paths_handle_bf16_and_nonfinite_input():
    x = torch.randn(4096).bfloat16()
    q = QSGD(fused=True)
    y = q.decompress(q.compress(x))
    assert y.dtype == torch.bfloat16 and float((y.float() - x.float()).abs().max()) < 0.05
    bad = torch.randn(4096)
    bad[17] = float("nan")
    for comp in (QSGD(fused=True), Sign(fused=True)):
        with pytest.raises(ValueError, match="NaN or inf"):
            comp.compress(bad)


def test_default_fuses_only_large_tensors(monkeypatch):
    small, large = torch.empty(fused.FUSED_MIN_NUMEL - 1), torch.empty(fused.FUSED_MIN_NUMEL)
    assert not fused.use_fused(None, small) and fused.use_fused(None, large)
    assert fused.use_fused(True, small) and not fused.use_fused(False, large)
    monkeypatch.setenv("PERFKIT_FUSED", "0")
    assert not fused.use_fused(None, large) and fused.use_fused(True, small)
    for bad in ("yes", 1):
        with pytest.raises(TypeError, match="fused"):
            fused.use_fused(bad, small)
        with pytest.raises(TypeError, match="fused"):
            QSGD(fused=bad)


def test_a_failed_compile_falls_back_to_eager_once_and_fused_true_says_why(monkeypatch):
    def no_compiler(*args):
        raise OSError("no C++ compiler")

    monkeypatch.setattr(fused, "_broken", {})
    monkeypatch.setattr(fused, "_QSGD_ENCODE", no_compiler)
    x = torch.randn(fused.FUSED_MIN_NUMEL)
    with pytest.raises(RuntimeError, match="fused=True, but torch.compile failed on cpu"):
        QSGD(fused=True).compress(x)
    with pytest.warns(UserWarning, match="torch.compile failed on cpu"):
        c = QSGD(seed=2).compress(x)  # the default: warn, record, answer eagerly
    assert torch.equal(c.tensors[0], QSGD(seed=2, fused=False).compress(x).tensors[0])
    assert not fused.use_fused(None, x)  # recorded: no second attempt, no second warning
    with pytest.raises(RuntimeError, match="OSError: no C"):
        fused.use_fused(True, x)


def test_pool_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="pool must hold"):
        fused.qsgd_encode(torch.randn(100), torch.rand(50), 1.0)


@pytest.mark.parametrize("n", [1, 7, 8, 1001, 4096])
def test_pack_bits_lays_out_bit_planes_and_unpack_inverts_it(n):
    bits = torch.rand(n, generator=torch.Generator().manual_seed(n)) > 0.5
    packed = fused.pack_bits(bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(n / 8)
    m = n // 8
    for j in range(min(m, 3)):  # byte j: values j, j + m, ..., j + 7m in bits 0..7
        assert int(packed[j]) == sum(1 << k for k in range(8) if bits[j + k * m])
    if n % 8:  # the tail: the last n % 8 values in bits 0.. of the last byte
        assert int(packed[-1]) == sum(1 << i for i, b in enumerate(bits[8 * m:]) if b)
    assert torch.equal(fused.unpack_bits(packed, n), bits)
