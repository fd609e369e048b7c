"""perfkit.compute.intensity: a step's counted FLOPs and bytes, and where it sits on the roofline."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from perfkit.compute.intensity import (
    NEAR_ROOF,
    OpCount,
    OpRecord,
    count_ops,
    count_phases,
    roofline_s,
    step_roofline,
)
from perfkit.hw import MachineLimits
from perfkit.stats import exact, median_interval

N = 64
LIMITS = MachineLimits(device="cpu", name="test", matmul_flops={"float32": 1e11},
                       copy_bytes_per_s=1e10)  # ridge point 10 FLOP/byte


def test_matmul_counts_its_flops_and_minimum_bytes():
    a, b = torch.randn(N, N), torch.randn(N, N)
    c = count_ops(lambda: a @ b)
    assert (c.flops, c.bytes, c.ops) == (2 * N**3, 3 * N * N * 4, 1)
    assert c.intensity == pytest.approx(N / 6)  # roofline.matmul_intensity's square fp32 value


def test_bytes_follow_what_each_operator_reads_and_writes():
    a = torch.randn(N, N)
    assert count_ops(lambda: a.add_(1)) == OpCount(0, 2 * N * N * 4, 1)  # in place: read + write
    assert count_ops(lambda: a @ a).bytes == 2 * N * N * 4  # one tensor passed twice is read once
    assert count_ops(lambda: a.view(-1).t()) == OpCount(0, 0, 0)  # views move nothing
    row = torch.randn(N)
    # a broadcast row is read once (N values), not N times
    assert count_ops(lambda: a + row.expand(N, N)).bytes == (N * N + N + N * N) * 4
    # two operators, each reading its input and writing its output: no reuse between them
    assert count_ops(lambda: (a * 2).relu()) == OpCount(0, 4 * N * N * 4, 2)


def test_a_training_step_counts_forward_and_backward():
    lin = torch.nn.Linear(N, N, bias=False)
    x = torch.randn(8, N, requires_grad=True)  # so the backward computes both gradients
    c = count_ops(lambda: lin(x).sum().backward())
    assert c.flops == 3 * 2 * 8 * N * N  # forward, and two matmuls in the backward
    assert c.ops >= 4 and c.bytes > 0


def test_roofline_names_the_lower_roof_and_how_near_the_step_runs():
    mem = OpCount(flops=10**9, bytes=10**9, ops=100)   # intensity 1 < ridge 10
    r = step_roofline(mem, exact(1 / 9e9 * 10**9), LIMITS)  # 9 GFLOP/s of a 10 GFLOP/s memory roof
    assert (r.roof, r.ridge, r.attainable) == ("memory", 10.0, 1e10)
    assert r.of_roof.value == pytest.approx(0.9) and r.mfu.value == pytest.approx(0.09)
    assert r.bound == "memory"
    slow = step_roofline(mem, exact(1.0), LIMITS)  # 1 GFLOP/s: 10 % of the roof
    assert slow.bound == "neither" and slow.roof == "memory"
    comp = step_roofline(OpCount(10**12, 10**10, 5), exact(12.5), LIMITS)  # intensity 100, 80 GFLOP/s
    assert (comp.roof, comp.bound) == ("compute", "compute") and comp.mfu.value == pytest.approx(0.8)


def test_bound_follows_the_whole_interval():
    count = OpCount(10**9, 10**9, 10)  # attainable 1e10: a 0.1 s step is the roof itself
    straddle = median_interval([0.1, 0.1, 0.4, 0.4, 0.4, 0.1])
    r = step_roofline(count, straddle, LIMITS)
    assert r.of_roof.low < NEAR_ROOF < r.of_roof.high and r.bound == "undecided"
    assert r.of_roof.low == pytest.approx(1e9 / straddle.high / 1e10)  # slower step, lower rate


def test_bad_arguments():
    with pytest.raises(TypeError, match="fn must be"):
        count_ops(3)
    with pytest.raises(ValueError, match="count must have FLOPs and bytes"):
        step_roofline(OpCount(0, 10, 1), exact(1.0), LIMITS)
    with pytest.raises(TypeError, match="step_s must be"):
        step_roofline(OpCount(1, 1, 1), 1.0, LIMITS)
    with pytest.raises(ValueError, match="step_s.low"):
        step_roofline(OpCount(1, 1, 1), exact(0.0), LIMITS)
    with pytest.raises(TypeError, match="limits must be"):
        step_roofline(OpCount(1, 1, 1), exact(1.0), {"float32": 1e11})


def test_cpu_attention_and_disguised_views_are_counted_right():
    q = torch.randn(1, 2, 8, 4)  # (B, H, T, D)
    att = count_ops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert att.flops == 2 * (2 * 1 * 2 * 8 * 8 * 4)  # Q K^T and P V, whichever kernel the CPU picks
    a = torch.randn(N, N)
    assert count_ops(lambda: torch.ops.aten._unsafe_view(a, (-1,))) == OpCount(0, 0, 0)  # shares a's storage
    assert count_ops(lambda: a.clone()) == OpCount(0, 2 * N * N * 4, 1)  # a real copy still counts


def test_count_phases_labels_each_op_with_the_phase_it_ran_in():
    lin = torch.nn.Linear(N, N, bias=False)
    x = torch.randn(8, N, requires_grad=True)

    def run(mon):
        with mon.phase("forward"):
            loss = lin(x).sum()
        with mon.phase("backward"):
            loss.backward()
            with mon.phase("inner"):
                x.grad.mul_(2)
            x.grad.add_(1)  # back in "backward" once "inner" closes
        mon.step(samples=8)
        return (x * 3).sum()  # outside every phase

    ph = count_phases(run)
    assert set(ph) == {"forward", "backward", "inner", "other"}
    flops = {k: sum(r.flops for r in v) for k, v in ph.items()}
    assert flops == {"forward": 2 * 8 * N * N, "backward": 2 * 2 * 8 * N * N, "inner": 0, "other": 0}
    assert [r.name for r in ph["inner"]] == ["mul_.Tensor"]
    assert ph["backward"][-1].name == "add_.Tensor" and len(ph["other"]) == 2
    assert all(isinstance(r, OpRecord) for v in ph.values() for r in v)
    x.grad = lin.weight.grad = None  # the same run again, counted whole: the split loses and adds no op
    total = count_ops(lambda: run(_Unlabelled()))
    assert (total.ops, total.flops) == (sum(map(len, ph.values())), sum(flops.values()))


class _Unlabelled:
    """A monitor whose phases label nothing."""

    def phase(self, name):
        return contextlib.nullcontext()

    def step(self, samples=0):
        pass


def test_roofline_s_puts_each_op_on_its_own_roof():
    mem = OpRecord("add", 10**8, 10**9)     # 1 GFLOP/s-worth: memory-bound, 0.1 s at 10 GB/s
    comp = OpRecord("mm", 10**10, 10**8)    # compute-bound, 0.1 s at 100 GFLOP/s
    assert roofline_s([mem], LIMITS) == pytest.approx(0.1)
    assert roofline_s([comp], LIMITS) == pytest.approx(0.1)
    # per op, not of the sums: max(0.101 s of FLOPs, 0.11 s of bytes) would give 0.11 s
    assert roofline_s([mem, comp], LIMITS) == pytest.approx(0.2)
    assert roofline_s([], LIMITS) == 0.0
    bf16 = MachineLimits(device="cpu", name="t", matmul_flops={"float32": 1e11, "bfloat16": 1e12},
                         copy_bytes_per_s=1e10)
    assert roofline_s([comp], bf16, "bfloat16") == pytest.approx(0.01)
    # on one of two threads, the matmul ceiling measured on one thread; the bandwidth stays
    two = MachineLimits(device="cpu", name="t", matmul_flops={"float32": 1e11}, copy_bytes_per_s=1e10,
                        threads=2, one_thread_flops={"float32": 5e10})
    assert roofline_s([comp], two, threads=1) == pytest.approx(0.2)
    assert roofline_s([comp], two) == roofline_s([comp], two, threads=2) == pytest.approx(0.1)
    assert roofline_s([mem], two, threads=1) == pytest.approx(0.1)
    with pytest.raises(TypeError, match=r"ops\[0\] must be"):
        roofline_s([(1, 2)], LIMITS)
    with pytest.raises(ValueError, match="bfloat16"):
        roofline_s([comp], LIMITS, "bfloat16")
    with pytest.raises(TypeError, match="run must be"):
        count_phases(None)


def test_roofline_s_serves_from_the_cache_what_fits_in_half_of_it():
    lim = MachineLimits(device="cpu", name="t", matmul_flops={"float32": 1e11}, copy_bytes_per_s=1e10,
                        cache_bytes_per_s=1e11, llc_bytes=2 * 10**9)
    fits, spills = OpRecord("add", 0, 10**9), OpRecord("add", 0, 10**9 + 1)
    assert roofline_s([fits], lim) == pytest.approx(0.01)          # 1 GB at 100 GB/s
    assert roofline_s([spills], lim) == pytest.approx(0.1)         # DRAM's 10 GB/s
    assert roofline_s([fits], lim, cache=False) == pytest.approx(0.1)
    assert roofline_s([fits], LIMITS) == pytest.approx(0.1)        # no cache figure measured
    with pytest.raises(TypeError, match="cache must be"):
        roofline_s([fits], lim, cache="yes")


@pytest.mark.parametrize("causal", [True, False])
def test_cpu_fused_attention_is_counted_as_counted_flops_counts_it(causal):
    """count_ops and counted_flops (the HFU's counter) give the CPU's fused attention one
    figure: a causal mask's unmasked entries only. Planted: the whole square for a causal
    mask (what count_ops counted before), twice the causal figure at T = 128."""
    from perfkit.compute.flops import counted_flops

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 32, requires_grad=True) for _ in range(3))

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()

    ours, theirs = count_ops(step).flops, counted_flops(step)
    assert ours == theirs > 0
    full = count_ops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward()).flops
    # (T + 1) / (2 T) of the square is kept under a causal mask: 129/256 at T = 128
    want = full * 129 / 256 if causal else full  # forward and backward each rounded
    assert abs(ours - want) <= 1
