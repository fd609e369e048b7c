"""perfkit.compute: FLOP formulas by hand, MFU, precision steps, interleaved comparisons.

No test asserts on wall-clock speed (the machine is shared); timings are only checked for
being consistent with the work they report.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from perfkit import compute, hw
from perfkit.models import tiny_gpt2
from perfkit.timing import Measurement

# --- FLOPs and MFU ------------------------------------------------------------------------


def test_gpt_train_flops_by_hand():
    # 6 * 1000 params * 10 tokens + 12 * 2 layers * 4 wide * 5 long * 10 tokens
    assert compute.gpt_train_flops(1000, 2, 4, 5, 10) == 60_000 + 4_800
    with pytest.raises(ValueError, match="tokens"):
        compute.gpt_train_flops(1000, 2, 4, 5, 0)
    with pytest.raises(ValueError, match="n_params"):
        compute.gpt_train_flops(1.5, 2, 4, 5, 10)


def test_gpt2_shape_counts_matmul_parameters():
    model = tiny_gpt2(vocab_size=1024, block_size=64, n_embd=64, n_layer=2, n_head=2)
    s = compute.gpt2_shape(model)
    # per layer: ln1 128 + c_attn 64*192+192 + c_proj 64*64+64 + ln2 128
    #            + c_fc 64*256+256 + c_proj 256*64+64 = 49,984
    # two layers + tied wte/lm_head 1024*64 + ln_f 128; the position embedding is excluded
    assert s == compute.GPTShape(2 * 49_984 + 65_536 + 128, 2, 64, 64)
    assert s.train_flops(batch=3) == compute.gpt_train_flops(s.n_params, 2, 64, 64, 3 * 64)
    with pytest.raises(TypeError, match="GPT-2"):
        compute.gpt2_shape(torch.nn.Linear(2, 2))


def test_formula_matches_flop_counter_on_eager_attention():
    # With eager attention every FLOP is an mm/bmm FlopCounterMode sees; the formula drops
    # only elementwise work, so the two agree within 2 %.
    model = tiny_gpt2(vocab_size=512, block_size=32, n_embd=32, n_layer=2, n_head=2)
    model.set_attn_implementation("eager")
    x = torch.randint(0, 512, (2, 32))
    with FlopCounterMode(display=False) as fc:
        model(input_ids=x, labels=x).loss.backward()
    predicted = compute.gpt2_shape(model).train_flops(batch=2)
    assert fc.get_total_flops() == pytest.approx(predicted, rel=0.02)


def test_mfu(limits):
    assert compute.mfu(1e9, 0.01, 1e12) == pytest.approx(0.1)
    assert compute.mfu(4e9, 0.1, limits, "bfloat16") == pytest.approx(0.1)  # 4e10 / 4e11
    assert compute.mfu(4e9, 0.1, limits) == pytest.approx(0.4)
    # on one thread, held against one thread's own ceiling (measured), not a share of all cores'
    one = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 2e10, threads=2, one_thread_flops={"float32": 6e10})
    assert compute.mfu(6e8, 0.01, one, threads=1) == pytest.approx(1.0)
    assert compute.mfu(6e8, 0.01, one) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="step_s"):
        compute.mfu(1e9, 0.0, 1e12)
    with pytest.raises(ValueError, match="precision"):
        compute.precision_dtype("int8")


# --- precision ----------------------------------------------------------------------------


def _mlp_losses(precision, steps=12):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(64, 32)
    y = x[:, :1] * 2 + 1
    step = compute.make_train_step(model, opt, lambda m, b: F.mse_loss(m(b[0]), b[1]), precision)
    return [float(step((x, y))) for _ in range(steps)]


def test_bf16_step_trains_like_fp32():
    fp32, bf16 = _mlp_losses("fp32"), _mlp_losses("bf16")
    assert fp32[-1] < 0.5 * fp32[0] and bf16[-1] < 0.5 * bf16[0]
    assert fp32 != bf16  # autocast did change the arithmetic
    assert max(abs(a - b) / a for a, b in zip(fp32, bf16)) < 0.05


def test_fp16_needs_cuda():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="fp16"):
        compute.make_train_step(model, opt, lambda m, b: m(b).sum(), "fp16")
    with pytest.raises(ValueError, match="precision"):
        compute.make_train_step(model, opt, lambda m, b: m(b).sum(), "fp8")


@pytest.mark.gpu
def test_fp16_with_grad_scaler_trains_on_gpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 1)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(64, 32, device="cuda")
    y = x[:, :1] * 2 + 1
    step = compute.make_train_step(model, opt, lambda m, b: F.mse_loss(m(b[0]), b[1]), "fp16")
    losses = [float(step((x, y))) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]



# --- comparisons ---------------------------------------------------------------------------------


def test_speedup_from_measurements_by_hand():
    s = compute.Speedup(Measurement((4.0, 6.0, 8.0), 0), Measurement((2.0, 2.0, 4.0), 0))
    assert s.pair_ratios == (2.0, 3.0, 2.0)
    assert s.ratio == s.pair_median == 2.0  # the median of the pairs' ratios, not 6 / 2
    from perfkit import stats

    assert s.estimate == stats.median_ratio((4.0, 6.0, 8.0), (2.0, 2.0, 4.0))
    assert s.low == s.ratio == s.high and "fewer than the 5" in str(s)  # 3 pairs: no interval
    five = compute.Speedup(Measurement((4.0, 6.0, 8.0, 5.0, 7.0), 0),
                           Measurement((2.0, 2.0, 4.0, 2.0, 2.0), 0))
    assert five.low <= five.ratio <= five.high and (five.low, five.high) == five.estimate.spread
    assert "93% interval" in str(five)   # [min, max] of 5 covers the median 1 - 2 / 2**5 = 93.75 %


def test_compare_restores_threads_and_checks_them():
    before = torch.get_num_threads()
    s = compute.compare(lambda: None, lambda: None, warmup=0, repeat=3, threads=1)
    assert s.baseline.n == s.candidate.n == 3
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        compute.compare(lambda: None, lambda: None, threads=0)
