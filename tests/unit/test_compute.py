"""perfkit.compute: FLOP formulas by hand, MFU, precision steps, fusion bytes, batch search.

No test asserts on wall-clock speed (the machine is shared); timings are only checked for
being consistent with the work they report.
"""

import math

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from perfkit import compute, hw
from perfkit.models import tiny_gpt2
from perfkit.timing import Measurement
from perfkit.viz import compute as vc


@pytest.fixture(scope="module")
def limits():
    return hw.MachineLimits(device="cpu", name="test", copy_bytes_per_s=2e10,
                            matmul_flops={"float32": 1e11, "bfloat16": 4e11})


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


# --- comparisons and compile ----------------------------------------------------------------


def test_speedup_from_measurements_by_hand():
    s = compute.Speedup(Measurement((4.0, 6.0, 8.0), 0), Measurement((2.0, 2.0, 4.0), 0))
    assert s.ratio == pytest.approx(3.0)
    assert s.pair_ratios == (2.0, 3.0, 2.0)
    assert s.low == pytest.approx(2.0) and s.high == pytest.approx(2.8)


def test_compare_restores_threads_and_checks_them():
    before = torch.get_num_threads()
    s = compute.compare(lambda: None, lambda: None, warmup=0, repeat=3, threads=1)
    assert s.baseline.n == s.candidate.n == 3
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        compute.compare(lambda: None, lambda: None, threads=0)


def test_compile_record_break_even_by_hand():
    rec = compute.CompileRecord(1.0, Measurement((0.003,), 0), Measurement((0.001,), 0))
    assert rec.speedup == pytest.approx(3.0)
    assert rec.break_even_calls == pytest.approx(500.0)  # 1 s / 2 ms saved per call
    slower = compute.CompileRecord(1.0, Measurement((0.001,), 0), Measurement((0.002,), 0))
    assert slower.break_even_calls == math.inf


def test_measure_compile_with_the_tracing_backend():
    # backend="eager" traces with dynamo but generates no code: the plumbing, in seconds
    x = torch.randn(256)
    f = lambda: torch.sin(x) * 2  # noqa: E731
    rec = compute.measure_compile(f, torch.compile(lambda: torch.sin(x) * 2, backend="eager"),
                                  warmup=1, repeat=3)
    assert rec.eager.n == rec.compiled.n == 3 and rec.compile_s > 0


def test_graph_breaks_found_and_fixed():
    def broken(x):
        if x.sum().item() > 0:  # data-dependent Python branch: a graph break
            return x * 2
        return x - 1

    def fixed(x):
        return torch.where(x.sum() > 0, x * 2, x - 1)

    x = torch.randn(8)
    r = compute.graph_breaks(broken, x)
    assert r.breaks == 1 and r.graphs == 2 and "item" in r.reasons[0]
    assert compute.graph_breaks(fixed, x) == compute.GraphReport(1, 0, [])
    with pytest.raises(TypeError, match="fn"):
        compute.graph_breaks(3)


# --- bytes: fusion and attention ----------------------------------------------------------------


def test_elementwise_chain_bytes_by_hand():
    # ops reading 1, 1, 1 and 2 tensors, each writing 1: (2 + 2 + 2 + 3) * 1000 * 4 bytes;
    # fused: 2 inputs read + 1 output written
    b = compute.elementwise_chain_bytes([1, 1, 1, 2], numel=1000, bytes_per_element=4, inputs=2)
    assert (b.eager, b.fused, b.kernels) == (36_000, 12_000, 4)
    assert b.ratio == pytest.approx(3.0)
    with pytest.raises(ValueError, match="reads_per_op"):
        compute.elementwise_chain_bytes([], 10)
    with pytest.raises(ValueError, match="numel"):
        compute.elementwise_chain_bytes([1], 0)


def test_attention_bytes_and_saved_activations():
    assert compute.attention_matrix_bytes(2, 3, 4, 4) == 2 * 3 * 4 * 4 * 4
    x = torch.randn(1000, requires_grad=True)
    # x * 2 saves nothing (the other operand is a Python scalar); exp saves its fp32 output
    assert compute.activation_bytes(lambda: (x * 2).exp(), inputs=[x]) == 4000


def test_attention_sweep_sdpa_saves_less_than_the_matrix():
    def naive(q, k, v):
        t = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5  # (B, H, T, T)
        att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        return att.softmax(-1) @ v

    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    pts = compute.attention_sweep({"naive": naive, "sdpa": sdpa}, [64], batch=2, heads=2,
                                  head_dim=8, repeat=2)
    by = {p.impl: p for p in pts}
    matrix = compute.attention_matrix_bytes(2, 2, 64, 4)
    assert by["naive"].saved_bytes >= matrix  # softmax's output, (B, H, T, T)
    assert by["sdpa"].saved_bytes < matrix / 4  # output + log-sum-exp only
    assert all(p.seconds > 0 for p in pts)


# --- shapes -------------------------------------------------------------------------------------


def test_pad_to_multiple():
    assert compute.pad_to_multiple(50257, 64) == 50304
    assert compute.pad_to_multiple(64, 64) == 64 and compute.pad_to_multiple(1) == 64
    with pytest.raises(ValueError, match="multiple"):
        compute.pad_to_multiple(10, 0)


def test_matmul_shape_sweep_is_consistent():
    pts = compute.matmul_shape_sweep([(8, 16, 4), (32, 32, 32)], "float32", repeat=2,
                                     target_s=0.001)
    assert [(p.m, p.n, p.k, p.dtype) for p in pts] == [(8, 16, 4, "float32"),
                                                       (32, 32, 32, "float32")]
    for p in pts:
        assert p.flops_per_s == pytest.approx(2 * p.m * p.n * p.k / p.seconds)
    with pytest.raises(ValueError, match="dtype"):
        compute.matmul_shape_sweep([(2, 2, 2)], "int8")
    with pytest.raises(ValueError, match="k"):
        compute.matmul_shape_sweep([(2, 2, 0)])


# --- largest batch ------------------------------------------------------------------------------


def test_largest_batch_doubles_then_bisects():
    r = compute.largest_batch(lambda b: b <= 37)
    assert r.best == 37
    assert [b for b, _ in r.trials] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert compute.largest_batch(lambda b: b <= 5, start=3).best == 5
    assert compute.largest_batch(lambda b: False, start=3).best == 0
    assert compute.largest_batch(lambda b: True, limit=100).best == 100
    with pytest.raises(ValueError, match="start"):
        compute.largest_batch(lambda b: True, start=10, limit=5)
    with pytest.raises(TypeError, match="fits"):
        compute.largest_batch(None)


def test_budget_probe_by_hand():
    model = torch.nn.Linear(10, 10, bias=False)  # 100 fp32 parameters
    # states: 100 * (4 param + 4 grad + 8 Adam) = 1600 B; a Linear saves its (b, 10) input
    probe = compute.BudgetProbe(model, lambda b: model(torch.randn(b, 10)).sum(), 2000)
    r = compute.largest_batch(probe)
    assert r.best == 10  # 1600 + 40 * b <= 2000
    assert probe.bytes[10] == 2000 and probe.bytes[16] == 2240
    with pytest.raises(ValueError, match="budget_bytes"):
        compute.BudgetProbe(model, lambda b: None, 0)


def test_oom_probe_refuses_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU refusal")
    with pytest.raises(ValueError, match="CUDA"):
        compute.OOMProbe(lambda b: None, device="cpu")


@pytest.mark.gpu
def test_oom_probe_survives_out_of_memory():
    total = torch.cuda.get_device_properties(0).total_memory
    mib = 1 << 20
    probe = compute.OOMProbe(lambda b: torch.empty(b * mib, dtype=torch.uint8, device="cuda").fill_(1),
                             budget_bytes=10 * mib)
    assert compute.largest_batch(probe).best == 10
    # far beyond the device: a real OOM, caught, and the memory is usable afterwards
    huge = compute.OOMProbe(lambda b: torch.empty(b * total, dtype=torch.uint8, device="cuda"))
    assert huge(4) is False and huge(1) is False and huge.bytes == {}
    torch.empty(mib, device="cuda")  # the allocator still works after the OOMs
    assert torch.cuda.memory_allocated() < total // 2


# --- the widget's bench -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench(limits):
    return compute.StepBench.gpt2(limits, seq_len=16, vocab_size=256, n_embd=32, n_layer=1,
                                  n_head=2, warmup=1, repeat=2, compile_backend="eager",
                                  device="cpu")


def test_step_bench_measures_and_caches(bench, limits):
    p = bench.measure("bf16", False, 4)
    assert bench.measure("bf16", False, 4) is p
    assert p.tokens_per_step == 64 and p.peak_flops == limits.peak_flops("bfloat16")
    assert p.tokens_per_s == pytest.approx(64 / p.step.median_s)
    assert p.flops_per_step == compute.gpt2_shape(bench.make_model(), 16).train_flops(4)
    assert p.mfu == pytest.approx(p.flops_per_step / p.step.median_s / 4e11)
    with pytest.raises(ValueError, match="batch"):
        bench.measure("fp32", False, 0)


def test_compute_widget_sweeps_its_controls(limits):
    # a small MLP bench through the generic constructor: dynamo traces it in about a second
    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))

    bench = compute.StepBench(make_model, lambda b: torch.randn(b, 16),
                              lambda m, x: m(x).square().mean(), lambda b: 6 * 2128 * b, 1,
                              limits, warmup=1, repeat=2, compile_backend="eager", device="cpu")
    spec = vc.compute_widget(bench, batches=(2, 8))
    for kw in spec.extremes():
        fig = spec.fn(**kw)
        title = fig.axes[0].get_title()
        assert f"batch {kw['batch']}" in title and "MFU" in title
        plt.close(fig)
    assert {(p.precision, p.compiled) for p in bench.points} == {
        ("fp32", False), ("bf16", False), ("fp32", True)}
    assert len(bench.points) == 4  # fp32 eager at batch 2 and 8 (the default), bf16, compiled
    with pytest.raises(ValueError, match="batch"):
        vc.compute_widget(bench, batches=(2, 8), batch=3)
