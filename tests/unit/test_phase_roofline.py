"""perfkit.compute.phase_roofline: backward over forward from each phase's roofline and fixed cost."""

from __future__ import annotations

import pytest
import torch

from perfkit import models, stats
from perfkit.compute.phase_roofline import PhaseModel, backward_over_forward
from perfkit.hw import MachineLimits

MS = 1e-3
LIMITS = MachineLimits(device="cpu", name="test", matmul_flops={"float32": 1e11}, copy_bytes_per_s=1e10)


def model(fixed=(2.0, 1.0), roof=(2.0, 4.0), eta=(0.5, 0.5), flops=(10, 30), rounds=5, **kw):
    """A PhaseModel whose phases take exactly fixed + roof / eta (ms) in every round."""
    t = [(fx + r / e) * MS for fx, r, e in zip(fixed, roof, eta)]
    return PhaseModel(flops[0], flops[1], 4, 6, roof[0] * MS, roof[1] * MS, (t[0],) * rounds,
                      (t[1],) * rounds, (fixed[0] * MS,) * rounds, (fixed[1] * MS,) * rounds, **kw)


def test_the_ends_are_the_ops_at_their_roofs_and_the_roofline_ratio():
    pm = model()  # forward 2 + 2 / 0.5 = 6 ms, backward 1 + 4 / 0.5 = 9 ms
    assert pm.low == pytest.approx((1 + 4) / (2 + 2))       # eta = 1: fixed costs weigh most
    assert pm.high == pytest.approx(4 / 2)                  # eta -> 0: R_b / R_f, not the FLOP ratio
    assert pm.flops_ratio == 3.0
    assert pm.measured.value == pytest.approx(1.5) and pm.low < pm.measured.value < pm.high
    assert pm.reach() == pytest.approx((0.5, 0.5))
    # any shared eta lands between the ends; unequal ones can leave them
    for eta in (1.0, 0.3, 0.05):
        assert pm.low <= model(eta=(eta, eta)).measured.value <= pm.high
    slow_bwd = model(eta=(0.9, 0.1))
    assert slow_bwd.measured.value > slow_bwd.high
    assert "backward's ops reached a smaller" in slow_bwd.explain()["above"]


def test_fixed_costs_heavier_in_the_backward_flip_the_ends():
    pm = model(fixed=(1.0, 5.0), roof=(2.0, 2.0))
    assert (pm.low, pm.high) == pytest.approx((1.0, (5 + 2) / (1 + 2)))


def test_fixed_costs_lose_their_own_roofline_time_and_widen_the_low_end():
    exact_model = model(roof_fixed_fwd_s=0.5 * MS, roof_fixed_bwd_s=0.25 * MS)
    assert exact_model.fixed_fwd.value == pytest.approx(1.5 * MS)
    assert exact_model.fixed_bwd.value == pytest.approx(0.75 * MS)
    assert exact_model.low == pytest.approx((0.75 + 4) / (1.5 + 2))
    ff, fb = (1.0, 2.0, 3.0, 2.0, 2.5), (0.5, 1.0, 1.5, 1.0, 0.8)  # fixed costs that vary (ms)
    noisy = PhaseModel(10, 20, 4, 6, 2 * MS, 4 * MS, (6 * MS,) * 5, (9 * MS,) * 5,
                       tuple(x * MS for x in ff), tuple(x * MS for x in fb))
    f_est, b_est = stats.median_interval([x * MS for x in ff]), stats.median_interval([x * MS for x in fb])
    assert f_est.high > f_est.value and b_est.low < b_est.value
    assert noisy.low == pytest.approx((b_est.low + 4 * MS) / (f_est.high + 2 * MS))


def test_explanations_name_each_phase_split_and_a_beaten_roof():
    held = model().explain()["held"]
    assert held.startswith("Forward 6.00 ms = 2.00 ms fixed + 2.00 ms of roofline at 50% of its speed")
    assert "backward 9.00 ms = 1.00 ms + 4.00 ms at 50%" in held
    assert held.endswith("at 50%.")  # one eta: nothing more to say
    apart = model(eta=(0.2, 0.3)).explain()["held"]  # two etas the verdict held all the same
    assert "1.50x apart, not the one eta the model assumes" in apart
    inside = model(eta=(0.4, 0.5))  # 1.29x, inside the band: a shared eta of 0.91 gives it
    assert inside.low < inside.measured.value < inside.high
    assert "ratio alone cannot tell the phases apart" in inside.explain()["held"]


def test_one_eta_solves_the_ratio_and_says_when_none_in_range_does():
    """The one eta that gives the measured ratio at the medians. Planted: calling every held
    ratio 'one eta would do' when the ratio needs ops faster than their roofs."""
    for eta in (0.2, 0.5, 1.0):
        assert model(eta=(eta, eta)).one_eta() == pytest.approx(eta)
    # forward at its roof, backward at 1.2x its roof: the ratio sits below the at-roof end
    fast = model(eta=(1.0, 1.2))
    assert fast.one_eta() > 1
    held = fast.explain()["held"]
    assert "no one eta in (0, 1] gives the measured ratio" in held and "cannot tell" not in held
    assert model(fixed=(1.0, 1.0), roof=(2.0, 2.0)).one_eta() == float("inf")  # no root: ratio 1 at every eta
    assert "the per-op roofs R or the fixed-cost reading" in model(eta=(0.5, 2.0)).explain()["below"]
    assert "forward's ops reached a smaller" in model(eta=(0.2, 0.9)).explain()["below"]


def test_phase_model_refuses_inconsistent_records():
    with pytest.raises(ValueError, match="bwd_s must hold one time per round"):
        PhaseModel(1, 2, 1, 1, MS, MS, (MS, MS), (MS,), (MS, MS), (MS, MS))
    with pytest.raises(ValueError, match="flops_fwd"):
        PhaseModel(0, 2, 1, 1, MS, MS, (MS,), (MS,), (MS,), (MS,))
    with pytest.raises(ValueError, match="roof_bwd_s"):
        PhaseModel(1, 2, 1, 1, MS, 0.0, (MS,), (MS,), (MS,), (MS,))


def tiny_workload(batch=(4, 16)) -> models.Workload:
    torch.manual_seed(0)
    net = models.tiny_gpt2(vocab_size=64, block_size=16, n_embd=32, n_layer=1, n_head=2)
    ids = torch.randint(0, 64, batch)
    return models.Workload("t", net, [(ids, ids)], torch.optim.AdamW(net.parameters()),
                           lambda m, b: m(input_ids=b[0], labels=b[0]).loss, torch.device("cpu"),
                           batch[-1], batch[0])


def test_a_gpt_counts_twice_the_flops_backward_and_times_both_sizes():
    wl = tiny_workload()
    before = [p.detach().clone() for p in wl.model.parameters()]
    pm = backward_over_forward(wl, LIMITS, rounds=3, warmup=0)
    assert 1.9 < pm.flops_ratio < 2.2 and pm.ops_bwd > pm.ops_fwd
    assert all(len(ts) == 3 for ts in (pm.fwd_s, pm.bwd_s, pm.fixed_fwd_s, pm.fixed_bwd_s))
    # the fixed costs ran 2 of the batch's 64 tokens: a small share of its roofline time
    assert 0 < pm.roof_fixed_fwd_s < pm.roof_fwd_s / 4 and 0 < pm.roof_fixed_bwd_s < pm.roof_bwd_s / 4
    # no optimizer step, no gradient left behind
    assert all(torch.equal(a, p) and p.grad is None for a, p in zip(before, wl.model.parameters()))
    with pytest.raises(ValueError, match="tokens must be <= the batch's length"):
        backward_over_forward(wl, LIMITS, tokens=17)
    with pytest.raises(ValueError, match="rounds must be"):
        backward_over_forward(wl, LIMITS, rounds=1)
    with pytest.raises(ValueError, match="bfloat16"):
        backward_over_forward(wl, LIMITS, dtype="bfloat16")
    with pytest.raises(TypeError, match="wl must be"):
        backward_over_forward(wl.model, LIMITS)
    with pytest.raises(TypeError, match="limits must be"):
        backward_over_forward(wl, {"float32": 1e11})
