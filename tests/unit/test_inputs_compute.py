"""perfkit.compute refuses bad arguments: each public function and class raises ``TypeError``
(wrong type) or ``ValueError`` (wrong value) with a message naming the argument and what is
allowed, before anything is compiled, allocated or timed.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered
from torch import nn

from perfkit import compute
from perfkit.compute import (
    BudgetProbe,
    CompileRecord,
    GPTShape,
    OOMProbe,
    Speedup,
    StepBench,
    activation_bytes,
    attention_matrix_bytes,
    attention_sweep,
    compare,
    elementwise_chain_bytes,
    gpt2_shape,
    gpt_train_flops,
    graph_breaks,
    largest_batch,
    make_train_step,
    matmul_shape_sweep,
    measure_compile,
    mfu,
    pad_to_multiple,
    precision_dtype,
)
from perfkit.compute import claims_precision as cp
from perfkit.compute import claims_speed as cs
from perfkit.compute import claims_ultra as cu
from perfkit.compute.intensity import OpCount, count_ops, step_roofline
from perfkit.hw import MachineLimits
from perfkit.stats import Estimate, median_interval
from perfkit.timing import Measurement

NAN, INF = math.nan, math.inf
NOOP = lambda: None  # noqa: E731
LIN = nn.Linear(2, 2)
LOSS = lambda m, b: m(b).sum()  # noqa: E731
LIMITS = MachineLimits("cpu", "test", {"float32": 1e11, "bfloat16": 4e11}, 2e10)
M = Measurement((1.0, 2.0), 0)
OPS = OpCount(1000, 4000, 3)
STEP_S = median_interval([1.0, 1.1, 0.9])
SDPA = {"sdpa": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v)}


class Optimizer:
    """Enough of an optimizer for cases that fail before it is used (a real one costs a
    second of lazy imports on its first construction)."""

    def zero_grad(self, set_to_none=True):
        pass

    def step(self):
        pass


def bench(**kw):
    return StepBench(lambda: LIN, lambda b: torch.ones(b, 2), LOSS, lambda b: 12 * b, 1, LIMITS,
                     **kw)


CASES = [  # (id, call, exception, regex on the message)
    # model FLOPs and MFU
    ("gpt_train_flops.n_params zero", lambda: gpt_train_flops(0, 1, 1, 1, 1), ValueError,
     "n_params must be an int >= 1"),
    ("gpt_train_flops.n_params float", lambda: gpt_train_flops(1.5, 1, 1, 1, 1), ValueError,
     "n_params"),
    ("gpt_train_flops.n_layer bool", lambda: gpt_train_flops(10, True, 1, 1, 1), ValueError,
     "n_layer"),
    ("gpt_train_flops.tokens str", lambda: gpt_train_flops(10, 1, 1, 1, "8"), TypeError,
     "tokens"),
    ("GPTShape.n_params", lambda: GPTShape(-10, 1, 8, 4), ValueError,
     "n_params must be an int >= 1"),
    ("GPTShape.seq_len bool", lambda: GPTShape(10, 1, 8, True), ValueError, "seq_len"),
    ("GPTShape.train_flops batch", lambda: GPTShape(10, 1, 8, 4).train_flops(0), ValueError,
     "batch must be an int >= 1"),
    ("GPTShape.train_flops batch str", lambda: GPTShape(10, 1, 8, 4).train_flops("8"),
     TypeError, "batch"),
    ("gpt2_shape.model", lambda: gpt2_shape(LIN), TypeError,
     "model must be a transformers GPT-2"),
    ("gpt2_shape.seq_len", lambda: gpt2_shape(LIN, 0), ValueError, "seq_len must be an int >= 1"),
    ("precision_dtype.precision", lambda: precision_dtype("fp8"), ValueError,
     "precision must be one of 'fp32', 'bf16', 'fp16'"),
    ("precision_dtype.precision list", lambda: precision_dtype(["fp32"]), ValueError,
     "precision"),
    ("precision_dtype.precision None", lambda: precision_dtype(None), ValueError, "precision"),
    ("mfu.flops_per_step nan", lambda: mfu(NAN, 1.0, 1e9), ValueError,
     "flops_per_step must be a finite number > 0"),
    ("mfu.flops_per_step inf", lambda: mfu(INF, 1.0, 1e9), ValueError, "flops_per_step"),
    ("mfu.flops_per_step bool", lambda: mfu(True, 1.0, 1e9), ValueError, "flops_per_step"),
    ("mfu.step_s zero", lambda: mfu(1e9, 0.0, 1e9), ValueError, "step_s must be a finite"),
    ("mfu.step_s inf", lambda: mfu(1e9, INF, 1e9), ValueError, "step_s"),
    ("mfu.step_s str", lambda: mfu(1e9, "1", 1e9), TypeError, "step_s"),
    ("mfu.peak nan", lambda: mfu(1e9, 1.0, NAN), ValueError, "peak must be a finite number > 0"),
    ("mfu.peak inf", lambda: mfu(1e9, 1.0, INF), ValueError, "peak"),
    ("mfu.peak zero", lambda: mfu(1e9, 1.0, 0), ValueError, "peak"),
    ("mfu.peak str", lambda: mfu(1e9, 1.0, "1e12"), TypeError, "peak"),
    ("mfu.peak None", lambda: mfu(1e9, 1.0, None), TypeError, "peak"),
    ("mfu.dtype", lambda: mfu(1e9, 1.0, LIMITS, "int8"), ValueError, "dtype must be one of"),
    ("make_train_step.precision", lambda: make_train_step(LIN, Optimizer(), LOSS, "fp8"),
     ValueError, "precision must be one of"),
    ("make_train_step.model", lambda: make_train_step(3, Optimizer(), LOSS), TypeError,
     "model must be a Module"),
    ("make_train_step.model without parameters",
     lambda: make_train_step(nn.ReLU(), Optimizer(), LOSS), ValueError,
     "model must have parameters"),
    ("make_train_step.optimizer", lambda: make_train_step(LIN, 3, LOSS), TypeError,
     "optimizer must be a torch.optim.Optimizer"),
    ("make_train_step.loss_fn", lambda: make_train_step(LIN, Optimizer(), 3), TypeError,
     "loss_fn must be a callable"),
    ("compare.baseline", lambda: compare(3, NOOP), TypeError, "baseline must be a callable"),
    ("compare.candidate", lambda: compare(NOOP, None), TypeError, "candidate"),
    ("compare.threads zero", lambda: compare(NOOP, NOOP, threads=0), ValueError,
     "threads must be an int >= 1"),
    ("compare.threads bool", lambda: compare(NOOP, NOOP, threads=True), ValueError, "threads"),
    ("compare.warmup", lambda: compare(NOOP, NOOP, warmup=-1), ValueError, "warmup"),
    ("compare.repeat", lambda: compare(NOOP, NOOP, repeat=0), ValueError, "repeat"),
    ("Speedup.baseline", lambda: Speedup(1.0, M), TypeError,
     "baseline must be a Measurement"),
    ("Speedup.candidate", lambda: Speedup(M, [2.0]), TypeError, "candidate"),
    # the largest batch in a budget
    ("largest_batch.fits", lambda: largest_batch(3), TypeError, "fits must be callable"),
    ("largest_batch.start zero", lambda: largest_batch(bool, start=0), ValueError,
     "start must be an int >= 1"),
    ("largest_batch.start bool", lambda: largest_batch(bool, start=True), ValueError, "start"),
    ("largest_batch.limit inf", lambda: largest_batch(bool, limit=INF), ValueError, "limit"),
    ("largest_batch.limit below start", lambda: largest_batch(bool, start=8, limit=4),
     ValueError, "start must be <= limit"),
    ("BudgetProbe.model", lambda: BudgetProbe(3, NOOP, 100), TypeError, "model must be a Module"),
    ("BudgetProbe.forward", lambda: BudgetProbe(LIN, 3, 100), TypeError,
     "forward must be a callable"),
    ("BudgetProbe.budget_bytes zero", lambda: BudgetProbe(LIN, NOOP, 0), ValueError,
     "budget_bytes must be an int >= 1"),
    ("BudgetProbe.budget_bytes nan", lambda: BudgetProbe(LIN, NOOP, NAN), ValueError,
     "budget_bytes"),
    ("BudgetProbe.state_bytes_per_param negative", lambda: BudgetProbe(LIN, NOOP, 100, -1),
     ValueError, "state_bytes_per_param must be a finite number >= 0"),
    ("BudgetProbe.state_bytes_per_param nan", lambda: BudgetProbe(LIN, NOOP, 100, NAN),
     ValueError, "state_bytes_per_param"),
    ("BudgetProbe.state_bytes_per_param str", lambda: BudgetProbe(LIN, NOOP, 100, "8"),
     TypeError, "state_bytes_per_param"),
    ("OOMProbe.step", lambda: OOMProbe(3), TypeError, "step must be a callable"),
    ("OOMProbe.budget_bytes", lambda: OOMProbe(NOOP, 0), ValueError,
     "budget_bytes must be an int >= 1"),
    ("OOMProbe.device", lambda: OOMProbe(NOOP, device="cpu"), ValueError,
     "OOMProbe needs a CUDA device"),
    # torch.compile
    ("CompileRecord.compile_s", lambda: CompileRecord(NAN, M, M), ValueError,
     "compile_s must be a finite number"),
    ("CompileRecord.eager", lambda: CompileRecord(1.0, 1, M), TypeError,
     "eager must be a Measurement"),
    ("CompileRecord.fx_cache_hits", lambda: CompileRecord(1.0, M, M, -1), ValueError,
     "fx_cache_hits"),
    ("cold_compile_cost.name", lambda: compute.cold_compile_cost("", None), TypeError, "name must be"),
    ("cold_compile_cost.record", lambda: compute.cold_compile_cost("chain", 1.0), TypeError, "record"),
    ("measure_compile.eager_fn", lambda: measure_compile(3, NOOP), TypeError,
     "eager_fn must be a callable"),
    ("measure_compile.compiled_fn", lambda: measure_compile(NOOP, None), TypeError,
     "compiled_fn"),
    ("measure_compile.warmup", lambda: measure_compile(NOOP, NOOP, warmup=-1), ValueError,
     "warmup must be an int >= 0"),
    ("measure_compile.repeat", lambda: measure_compile(NOOP, NOOP, repeat=0), ValueError,
     "repeat"),
    ("measure_compile.device", lambda: measure_compile(NOOP, NOOP, device="bogus"), ValueError,
     "device"),
    ("graph_breaks.fn", lambda: graph_breaks(3), TypeError, "fn must be callable"),
    # kernels and shapes
    ("elementwise_chain_bytes.reads_per_op empty", lambda: elementwise_chain_bytes([], 10),
     ValueError, "reads_per_op must hold at least one"),
    ("elementwise_chain_bytes.reads_per_op int", lambda: elementwise_chain_bytes(3, 10),
     TypeError, "reads_per_op must be a list"),
    ("elementwise_chain_bytes.reads_per_op str", lambda: elementwise_chain_bytes("12", 10),
     TypeError, "reads_per_op"),
    ("elementwise_chain_bytes.reads_per_op zero", lambda: elementwise_chain_bytes([1, 0], 10),
     ValueError, "reads_per_op entries must be an int >= 1"),
    ("elementwise_chain_bytes.numel bool", lambda: elementwise_chain_bytes([1], True),
     ValueError, "numel"),
    ("elementwise_chain_bytes.bytes_per_element",
     lambda: elementwise_chain_bytes([1], 10, bytes_per_element=0), ValueError,
     "bytes_per_element"),
    ("elementwise_chain_bytes.inputs", lambda: elementwise_chain_bytes([1], 10, inputs=0),
     ValueError, "inputs"),
    ("attention_matrix_bytes.heads", lambda: attention_matrix_bytes(1, 0, 8), ValueError,
     "heads must be an int >= 1"),
    ("attention_matrix_bytes.batch bool", lambda: attention_matrix_bytes(True, 1, 8),
     ValueError, "batch"),
    ("attention_matrix_bytes.seq_len float", lambda: attention_matrix_bytes(1, 1, 8.0),
     ValueError, "seq_len"),
    ("activation_bytes.fn", lambda: activation_bytes(3), TypeError, "fn must be a callable"),
    ("activation_bytes.params", lambda: activation_bytes(NOOP, 3), TypeError,
     "params must be None, a tensor"),
    ("activation_bytes.inputs", lambda: activation_bytes(NOOP, None, [1.0]), TypeError,
     "inputs must hold tensors"),
    ("attention_sweep.impls list", lambda: attention_sweep([NOOP], [8]), TypeError,
     "impls must be a dict"),
    ("attention_sweep.impls empty", lambda: attention_sweep({}, [8]), ValueError,
     "impls must hold at least one"),
    ("attention_sweep.impls item", lambda: attention_sweep({"a": 3}, [8]), TypeError,
     r"impls\['a'\] must be a callable"),
    ("attention_sweep.seq_lens int", lambda: attention_sweep(SDPA, 8), TypeError,
     "seq_lens must be a list"),
    ("attention_sweep.seq_lens empty", lambda: attention_sweep(SDPA, []), ValueError,
     "seq_lens must hold at least one"),
    ("attention_sweep.seq_lens zero", lambda: attention_sweep(SDPA, [8, 0]), ValueError,
     "seq_len must be an int >= 1"),
    ("attention_sweep.batch", lambda: attention_sweep(SDPA, [8], batch=0), ValueError, "batch"),
    ("attention_sweep.head_dim", lambda: attention_sweep(SDPA, [8], head_dim=True), ValueError,
     "head_dim"),
    ("attention_sweep.repeat", lambda: attention_sweep(SDPA, [8], repeat=0), ValueError,
     "repeat"),
    ("attention_sweep.dtype", lambda: attention_sweep(SDPA, [8], dtype="int8"), ValueError,
     "dtype must be one of"),
    ("attention_sweep.dtype list", lambda: attention_sweep(SDPA, [8], dtype=["float32"]),
     ValueError, "dtype"),
    ("attention_sweep.device", lambda: attention_sweep(SDPA, [8], device="bogus"), ValueError,
     "device"),
    ("pad_to_multiple.n", lambda: pad_to_multiple(0), ValueError, "n must be an int >= 1"),
    ("pad_to_multiple.n bool", lambda: pad_to_multiple(True), ValueError, "n must be"),
    ("pad_to_multiple.multiple", lambda: pad_to_multiple(10, 0), ValueError, "multiple"),
    ("pad_to_multiple.multiple float", lambda: pad_to_multiple(10, 1.5), ValueError, "multiple"),
    ("matmul_shape_sweep.shapes empty", lambda: matmul_shape_sweep([]), ValueError,
     "shapes must hold at least one"),
    ("matmul_shape_sweep.shapes int", lambda: matmul_shape_sweep(3), TypeError,
     "shapes must be a list"),
    ("matmul_shape_sweep.shapes pair", lambda: matmul_shape_sweep([(2, 2, 2), (1, 2)]),
     TypeError, r"shapes\[1\] must be an \(m, n, k\) tuple"),
    ("matmul_shape_sweep.shapes zero", lambda: matmul_shape_sweep([(2, 2, 0)]), ValueError,
     "k must be an int >= 1"),
    ("matmul_shape_sweep.shapes float", lambda: matmul_shape_sweep([(2.0, 2, 2)]), ValueError,
     "m must be"),
    ("matmul_shape_sweep.repeat", lambda: matmul_shape_sweep([(2, 2, 2)], repeat=0),
     ValueError, "repeat"),
    ("matmul_shape_sweep.target_s inf", lambda: matmul_shape_sweep([(2, 2, 2)], target_s=INF),
     ValueError, "target_s must be a finite number > 0"),
    ("matmul_shape_sweep.target_s nan", lambda: matmul_shape_sweep([(2, 2, 2)], target_s=NAN),
     ValueError, "target_s"),
    ("matmul_shape_sweep.target_s zero", lambda: matmul_shape_sweep([(2, 2, 2)], target_s=0),
     ValueError, "target_s"),
    ("matmul_shape_sweep.dtype", lambda: matmul_shape_sweep([(2, 2, 2)], "int8"), ValueError,
     "dtype"),
    ("matmul_shape_sweep.device", lambda: matmul_shape_sweep([(2, 2, 2)], device="bogus"),
     ValueError, "device"),
    # throughput
    ("StepBench.make_model", lambda: StepBench(3, NOOP, LOSS, NOOP, 1, LIMITS), TypeError,
     "make_model must be callable"),
    ("StepBench.tokens_per_sample", lambda: StepBench(NOOP, NOOP, LOSS, NOOP, 0, LIMITS),
     ValueError, "tokens_per_sample must be an int >= 1"),
    ("StepBench.tokens_per_sample bool", lambda: StepBench(NOOP, NOOP, LOSS, NOOP, True, LIMITS),
     ValueError, "tokens_per_sample"),
    ("StepBench.limits", lambda: StepBench(NOOP, NOOP, LOSS, NOOP, 1, None), TypeError,
     "limits must be a MachineLimits"),
    ("StepBench.warmup", lambda: bench(warmup=-1), ValueError, "warmup must be an int >= 0"),
    ("StepBench.repeat", lambda: bench(repeat=0), ValueError, "repeat must be an int >= 1"),
    ("StepBench.lr nan", lambda: bench(lr=NAN), ValueError, "lr must be a finite number > 0"),
    ("StepBench.lr negative", lambda: bench(lr=-1e-3), ValueError, "lr"),
    ("StepBench.compile_backend", lambda: bench(compile_backend=3), TypeError,
     "compile_backend must be a torch.compile backend name"),
    ("StepBench.compile_backend empty", lambda: bench(compile_backend=""), TypeError,
     "compile_backend"),
    ("StepBench.device", lambda: bench(device="bogus"), ValueError, "device"),
    ("StepBench.gpt2 limits", lambda: StepBench.gpt2(None), TypeError,
     "limits must be a MachineLimits"),
    ("StepBench.gpt2 seq_len", lambda: StepBench.gpt2(LIMITS, seq_len=0), ValueError,
     "seq_len must be an int >= 1"),
    ("StepBench.gpt2 n_head", lambda: StepBench.gpt2(LIMITS, n_embd=64, n_head=3), ValueError,
     "n_embd must be a multiple of n_head"),
    ("StepBench.measure precision", lambda: bench().measure("fp8", False, 2), ValueError,
     "precision must be one of"),
    ("StepBench.measure batch", lambda: bench().measure("fp32", False, 0), ValueError,
     "batch must be an int >= 1"),
    ("StepBench.measure batch bool", lambda: bench().measure("fp32", False, True), ValueError,
     "batch"),
    ("StepBench.measure_all str", lambda: bench().measure_all("fp32"), TypeError,
     "settings must be a list"),
    ("StepBench.measure_all empty", lambda: bench().measure_all([]), ValueError,
     "settings must hold at least one"),
    ("StepBench.measure_all pair", lambda: bench().measure_all([("fp32", False)]), TypeError,
     r"settings\[0\] must be a \(precision, compiled, batch\) tuple"),
    # claims_speed (notebook 09's speed claims)
    ("speedup_estimate.baseline", lambda: cs.speedup_estimate([1.0, 2.0], M), TypeError,
     "baseline must be a Measurement"),
    ("speedup_estimate.candidate", lambda: cs.speedup_estimate(M, 1.0), TypeError,
     "candidate must be a Measurement"),
    ("speedup_estimate.rounds", lambda: cs.speedup_estimate(M, Measurement((1.0,), 0)), ValueError,
     "same number"),
    ("mlp_step.act", lambda: cs.mlp_step(torch.relu), TypeError, "act must be a Module"),
    ("mlp_step.rows", lambda: cs.mlp_step(nn.ReLU(), rows=0), ValueError, "rows must be an int >= 1"),
    ("mlp_step.width float", lambda: cs.mlp_step(nn.ReLU(), width=8.0), ValueError, "width"),
    ("time_activations.rows", lambda: cs.time_activations(rows=0), ValueError,
     "rows must be an int >= 1"),
    ("time_activations.op_repeat", lambda: cs.time_activations(8, 8, op_repeat=0), ValueError,
     "op_repeat"),
    ("time_activations.target_s", lambda: cs.time_activations(8, 8, target_s=NAN), ValueError,
     "target_s"),
    ("time_grouped_conv.groups", lambda: cs.time_grouped_conv(channels=6, groups=4), ValueError,
     r"channels \(6\) must be a multiple of groups \(4\)"),
    ("time_grouped_conv.batch", lambda: cs.time_grouped_conv(batch=0), ValueError, "batch"),
    ("time_compile.features", lambda: cs.time_compile(features=-1), ValueError,
     "features must be an int >= 1"),
    ("time_compile.repeat bool", lambda: cs.time_compile(repeat=True), ValueError, "repeat"),
    ("channels_last_check.ids", lambda: cs.channels_last_check(LIN, [[1]]),
     TypeError, "ids must be a tensor"),
    ("channels_last_check.make_transformer str",
     lambda: cs.channels_last_check("gpt2", torch.ones(1, 2, dtype=torch.long)), TypeError,
     "make_transformer must be a callable"),
    ("channels_last_check.repeat",
     lambda: cs.channels_last_check(NOOP, torch.ones(1, 2, dtype=torch.long), repeat=0),
     ValueError, "repeat"),
    ("time_thread_counts.step", lambda: cs.time_thread_counts(3, [1]), TypeError,
     "step must be a callable"),
    ("time_thread_counts.counts empty", lambda: cs.time_thread_counts(NOOP, []), ValueError,
     "counts must hold at least one"),
    ("time_thread_counts.counts zero", lambda: cs.time_thread_counts(NOOP, [1, 0]), ValueError,
     "counts entries must be an int >= 1"),
    # claims_precision
    ("time_precision_step.batch", lambda: cp.time_precision_step(batch=0), ValueError,
     "batch must be an int >= 1"),
    ("time_precision_step.seq", lambda: cp.time_precision_step(seq=1.5), ValueError, "seq"),
    ("time_precision_step.device", lambda: cp.time_precision_step(device="bogus"), ValueError,
     "device"),
    ("autocast_activation_ratio.batch", lambda: cp.autocast_activation_ratio(batch=0), ValueError,
     "batch must be an int >= 1"),
    ("autocast_activation_ratio.seq", lambda: cp.autocast_activation_ratio(seq=0), ValueError,
     "seq must be an int >= 1"),
    ("autocast_activation_ratio.model_kw", lambda: cp.autocast_activation_ratio(model_kw=[4]),
     TypeError, "model_kw must be a dict or None"),
    ("gradient_flush.batch", lambda: cp.gradient_flush(batch=-1), ValueError, "batch"),
    ("gradient_flush.seq", lambda: cp.gradient_flush(seq="64"), TypeError, "seq"),
    ("predicted_skips.init_scale", lambda: cp.predicted_skips(0.0, 1.0), ValueError,
     "init_scale must be a finite number > 0"),
    ("predicted_skips.max_abs_grad", lambda: cp.predicted_skips(2.0**16, INF), ValueError,
     "max_abs_grad"),
    ("scaler_first_update.init_scale", lambda: cp.scaler_first_update(NAN), ValueError,
     "init_scale"),
    ("scaler_first_update.max_steps", lambda: cp.scaler_first_update(1.0, max_steps=0), ValueError,
     "max_steps must be an int >= 1"),
    ("scaler_first_update.batch", lambda: cp.scaler_first_update(1.0, batch=0), ValueError,
     "batch"),
    ("kdim_attention_check.heads", lambda: cp.kdim_attention_check(embed=10, heads=4), ValueError,
     r"embed \(10\) must be a multiple of heads \(4\)"),
    ("kdim_attention_check.seq", lambda: cp.kdim_attention_check(seq=0), ValueError, "seq"),
    # claims_ultra
    ("Setting.attention", lambda: cu.Setting(attention="flash"), ValueError,
     "attention must be one of"),
    ("Setting.activation", lambda: cu.Setting(activation="relu"), ValueError,
     "activation must be one of"),
    ("Setting.precision", lambda: cu.Setting(precision="fp16"), ValueError,
     "precision must be one of 'fp32', 'bf16'"),
    ("Setting.workers", lambda: cu.Setting(workers=-1), ValueError, "workers must be an int >= 0"),
    ("Setting.accumulate", lambda: cu.Setting(accumulate=0), ValueError,
     "accumulate must be an int >= 1"),
    ("Setting.compiled", lambda: cu.Setting(compiled="yes"), TypeError, "compiled must be a bool"),
    ("switches.workers", lambda: cu.switches(workers=0), ValueError, "workers must be an int >= 1"),
    ("switches.accumulate", lambda: cu.switches(accumulate=2.0), ValueError, "accumulate"),
    ("setting_step.setting", lambda: cu.setting_step({"accumulate": 2}), TypeError,
     "setting must be a Setting"),
    ("setting_step.samples", lambda: cu.setting_step(cu.Setting(accumulate=4), samples=6),
     ValueError, r"samples \(6\) must be a multiple of accumulate \(4\)"),
    ("setting_step.seq", lambda: cu.setting_step(cu.Setting(), seq=0), ValueError, "seq"),
    ("time_switches.repeat", lambda: cu.time_switches(repeat=0), ValueError, "repeat"),
    ("time_switches.workers", lambda: cu.time_switches(workers=0), ValueError, "workers"),
    ("time_ultra.alone", lambda: cu.time_ultra(None), TypeError, "alone must be a SwitchTiming"),
    # intensity
    ("count_ops.fn", lambda: count_ops(3), TypeError, "fn must be a callable"),
    ("step_roofline.count", lambda: step_roofline((1, 2), STEP_S, LIMITS), TypeError,
     "count must be an OpCount"),
    ("step_roofline.count zero", lambda: step_roofline(OpCount(0, 0, 0), STEP_S, LIMITS),
     ValueError, "count must have FLOPs and bytes > 0"),
    ("step_roofline.step_s", lambda: step_roofline(OPS, 1.0, LIMITS), TypeError,
     "step_s must be an Estimate"),
    ("step_roofline.limits", lambda: step_roofline(OPS, STEP_S, None), TypeError,
     "limits must be a MachineLimits"),
    ("step_roofline.step_s zero",
     lambda: step_roofline(OPS, Estimate(0.0, 0.0, 0.0, None, 1, "x"), LIMITS), ValueError,
     "step_s"),

]

# Records perfkit returns; PRECISIONS is a constant.
RECORDS = {"AttentionPoint", "BatchSearch", "ChainBytes", "GraphReport", "ShapePoint",
           "ThroughputPoint", "OpCount", "StepRoofline", "ActivationTiming", "AttentionKeep",
           "ChannelsLastCheck", "CompileTiming", "ConvTiming", "GradientFlush", "PrecisionTiming",
           "SwitchTiming", "ThreadTiming", "UltraTiming"}


@pytest.mark.timeout(10)  # a target_s of inf or NaN used to calibrate for ever
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(compute, CASES, RECORDS)
    assert not missing, f"no bad-input case for {missing}"
