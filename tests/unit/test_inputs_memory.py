"""perfkit.memory refuses bad arguments: each public function and class raises ``TypeError``
(wrong type) or ``ValueError`` (wrong value) with a message naming the argument and what is
allowed, instead of returning a byte count for a model that cannot exist.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered
from torch import nn

from perfkit import memory
from perfkit.memory import (
    CheckpointedBlock,
    SavedTensorMeter,
    StateRecipe,
    checkpoint_blocks,
    count_parameters,
    gpt2_num_params,
    gpt2_saved_activation_bytes,
    gpt2_step_memory,
    lora,
    measure_step_anatomy,
    optimizer_state_bytes,
    zero_model_states,
    zero_table,
)
from perfkit.memory import claims as mc
from perfkit.memory import experiments as mx
from perfkit.timing import Measurement

NAN, INF = math.nan, math.inf
GPT = dict(batch=2, seq_len=8, n_embd=8, n_layer=1, n_head=2, vocab_size=16)
STEP = dict(n_embd=8, n_layer=1, n_head=2, vocab_size=16, batch=2, seq_len=8)
LIN = nn.Linear(2, 2)
IDS = torch.zeros(2, 8, dtype=torch.long)
MS = Measurement((1.0, 2.0), 0)
PARTS = {"weight gradients": 1.0, "optimizer step": 1.0}


class Optimizer:
    """Enough of an optimizer for cases that fail before it is used."""

    state: dict = {}

    def zero_grad(self, set_to_none=True):
        pass

    def step(self):
        pass


CASES = [  # (id, call, exception, regex on the message)
    # storage_bytes, live_model_states
    ("storage_bytes.tensors item", lambda: memory.storage_bytes([torch.zeros(2), 3]), TypeError,
     "tensors must hold tensors or None, got int"),
    ("live_model_states.grads item", lambda: memory.live_model_states([], ["g"], []), TypeError,
     "tensors must hold tensors or None, got str"),
    # StateRecipe, zero_model_states, zero_table
    ("StateRecipe.name", lambda: StateRecipe(3, 2, 2, 12), TypeError, "name must be a str"),
    ("StateRecipe.param_bytes negative", lambda: StateRecipe("x", -1, 2, 12), ValueError,
     "param_bytes must be a finite number >= 0"),
    ("StateRecipe.grad_bytes nan", lambda: StateRecipe("x", 2, NAN, 12), ValueError,
     "grad_bytes"),
    ("StateRecipe.optimizer_bytes inf", lambda: StateRecipe("x", 2, 2, INF), ValueError,
     "optimizer_bytes"),
    ("StateRecipe.optimizer_bytes str", lambda: StateRecipe("x", 2, 2, "12"), TypeError,
     "optimizer_bytes"),
    ("zero_model_states.num_params zero", lambda: zero_model_states(0), ValueError,
     "num_params must be a finite number > 0"),
    ("zero_model_states.num_params nan", lambda: zero_model_states(NAN), ValueError,
     "num_params"),
    ("zero_model_states.num_params inf", lambda: zero_model_states(INF), ValueError,
     "num_params"),
    ("zero_model_states.num_params bool", lambda: zero_model_states(True), ValueError,
     "num_params"),
    ("zero_model_states.num_params str", lambda: zero_model_states("7.5e9"), TypeError,
     "num_params"),
    ("zero_model_states.world_size zero", lambda: zero_model_states(1e9, 0), ValueError,
     "world_size must be an int >= 1"),
    ("zero_model_states.world_size bool", lambda: zero_model_states(1e9, True), ValueError,
     "world_size"),
    ("zero_model_states.world_size float", lambda: zero_model_states(1e9, 64.0), ValueError,
     "world_size"),
    ("zero_model_states.stage four", lambda: zero_model_states(1e9, 8, 4), ValueError,
     r"stage must be an int in \[0, 3\]"),
    ("zero_model_states.stage negative", lambda: zero_model_states(1e9, 8, -1), ValueError,
     "stage"),
    ("zero_model_states.stage bool", lambda: zero_model_states(1e9, 8, True), ValueError,
     "stage"),
    ("zero_model_states.stage float", lambda: zero_model_states(1e9, 8, 1.0), ValueError,
     "stage"),
    ("zero_model_states.stage str", lambda: zero_model_states(1e9, 8, "1"), TypeError, "stage"),
    ("zero_model_states.recipe", lambda: zero_model_states(1e9, recipe="adam"), ValueError,
     "recipe must be a StateRecipe or one of"),
    ("zero_model_states.recipe list", lambda: zero_model_states(1e9, recipe=["mixed_adam"]),
     ValueError, "recipe"),
    ("zero_table.num_params", lambda: zero_table(-1, 8), ValueError, "num_params"),
    ("zero_table.world_size", lambda: zero_table(1e9, 0), ValueError, "world_size"),
    ("zero_table.recipe", lambda: zero_table(1e9, 8, 3), ValueError, "recipe"),
    # counting live objects
    ("count_parameters.module", lambda: count_parameters([LIN]), TypeError,
     "module must be a torch.nn.Module"),
    ("optimizer_state_bytes.optimizer", lambda: optimizer_state_bytes(3), TypeError,
     "optimizer must be a torch.optim.Optimizer"),
    ("SavedTensorMeter.params int", lambda: SavedTensorMeter(3), TypeError,
     "params must be None, a tensor or an iterable of tensors"),
    ("SavedTensorMeter.params item", lambda: SavedTensorMeter([torch.ones(1), 3]), TypeError,
     "params must hold tensors"),
    ("SavedTensorMeter.inputs int", lambda: SavedTensorMeter(None, 3), TypeError,
     "inputs must be None, a tensor"),
    ("SavedTensorMeter.inputs item", lambda: SavedTensorMeter(None, [1.0]), TypeError,
     "inputs must hold tensors"),
    ("SavedTensorMeter.report before entering", lambda: SavedTensorMeter().report(),
     RuntimeError, r"report\(\) before `with SavedTensorMeter"),
    # the GPT-2 model
    ("gpt2_saved_activation_bytes.batch bool",
     lambda: gpt2_saved_activation_bytes(**GPT | {"batch": True}), ValueError,
     "batch must be an int >= 1"),
    ("gpt2_saved_activation_bytes.seq_len zero",
     lambda: gpt2_saved_activation_bytes(**GPT | {"seq_len": 0}), ValueError, "seq_len"),
    ("gpt2_saved_activation_bytes.n_embd float",
     lambda: gpt2_saved_activation_bytes(**GPT | {"n_embd": 8.0}), ValueError, "n_embd"),
    ("gpt2_saved_activation_bytes.vocab_size str",
     lambda: gpt2_saved_activation_bytes(**GPT | {"vocab_size": "16"}), TypeError,
     "vocab_size"),
    ("gpt2_saved_activation_bytes.attention",
     lambda: gpt2_saved_activation_bytes(**GPT, attention="flash"), ValueError,
     "attention must be one of 'eager', 'sdpa'"),
    ("gpt2_saved_activation_bytes.attention list",
     lambda: gpt2_saved_activation_bytes(**GPT, attention=["sdpa"]), ValueError, "attention"),
    ("gpt2_saved_activation_bytes.dtype_bytes",
     lambda: gpt2_saved_activation_bytes(**GPT, dtype_bytes=3), ValueError,
     "dtype_bytes must be one of 1, 2, 4, 8"),
    ("gpt2_saved_activation_bytes.dtype_bytes float",
     lambda: gpt2_saved_activation_bytes(**GPT, dtype_bytes=4.0), ValueError,
     "dtype_bytes must be an int"),
    ("gpt2_saved_activation_bytes.dtype_bytes bool",
     lambda: gpt2_saved_activation_bytes(**GPT, dtype_bytes=True), ValueError, "dtype_bytes"),
    ("recompute_flop_share.seq_len", lambda: memory.recompute_flop_share(8, 1, 16, 0), ValueError, "seq_len"),
    ("flop_rule_text.share", lambda: memory.flop_rule_text(None, None, 0.0), ValueError, "share"),
    ("checkpoint_cost_text.medians", lambda: memory.checkpoint_cost_text(None, None, 0.0), ValueError,
     "medians"),
    ("steady_peak_text.first", lambda: memory.steady_peak_text(None, None), TypeError, "first"),
    ("gpt2_num_params.n_embd", lambda: gpt2_num_params(0, 1, 16, 8), ValueError,
     "n_embd must be an int >= 1"),
    ("gpt2_num_params.n_layer bool", lambda: gpt2_num_params(8, True, 16, 8), ValueError,
     "n_layer"),
    ("gpt2_num_params.n_positions", lambda: gpt2_num_params(8, 1, 16, -1), ValueError,
     "n_positions"),
    ("gpt2_step_memory.precision", lambda: gpt2_step_memory(**STEP, precision="bf16"),
     ValueError, "precision must be one of 'fp32', 'mixed'"),
    ("gpt2_step_memory.precision list", lambda: gpt2_step_memory(**STEP, precision=["fp32"]),
     ValueError, "precision"),
    ("gpt2_step_memory.seq_len", lambda: gpt2_step_memory(**STEP | {"seq_len": 0}), ValueError,
     "seq_len must be an int >= 1"),
    ("gpt2_step_memory.attention", lambda: gpt2_step_memory(**STEP, attention="flash"),
     ValueError, "attention"),
    # checkpointing
    ("CheckpointedBlock.block int", lambda: CheckpointedBlock(3), TypeError,
     "block must be a Module"),
    ("CheckpointedBlock.block function", lambda: CheckpointedBlock(lambda x: x), TypeError,
     "block must be a Module"),
    ("checkpoint_blocks.blocks", lambda: checkpoint_blocks([LIN]), TypeError,
     "blocks must be an nn.ModuleList"),
    # one step, measured: every case fails before the step runs
    ("measure_step_anatomy.model", lambda: measure_step_anatomy(3, lambda: None, Optimizer()),
     TypeError, "model must be a Module"),
    ("measure_step_anatomy.compute_loss", lambda: measure_step_anatomy(LIN, None, Optimizer()),
     TypeError, "compute_loss must be a callable"),
    ("measure_step_anatomy.optimizer", lambda: measure_step_anatomy(LIN, lambda: None, None),
     TypeError, "optimizer must be a torch.optim.Optimizer"),
    ("measure_step_anatomy.snapshot_path",
     lambda: measure_step_anatomy(LIN, lambda: None, Optimizer(), snapshot_path=3), TypeError,
     "snapshot_path must be a str or PathLike or None"),
    ("measure_step_anatomy.compute_loss result",
     lambda: measure_step_anatomy(LIN, lambda: 1.0, Optimizer()), TypeError,
     "compute_loss must return the loss tensor"),
    # claims (notebook 09's memory claims)
    ("sizing_ratios.batches empty", lambda: mc.sizing_ratios([]), ValueError,
     "batches must hold at least one"),
    ("sizing_ratios.batches zero", lambda: mc.sizing_ratios([1, 0]), ValueError,
     "batches entries must be an int >= 1"),
    ("sizing_ratios.seq", lambda: mc.sizing_ratios([1], seq=0), ValueError, "seq"),
    ("checkpoint_file_sizes.state", lambda: mc.checkpoint_file_sizes([torch.ones(2)]), TypeError,
     "state must be a dict of tensors"),
    ("checkpointing_savings.batch", lambda: mc.checkpointing_savings(0), ValueError,
     "batch must be an int >= 1"),
    ("checkpointing_savings.n_layer", lambda: mc.checkpointing_savings(2, n_layer=1.5), ValueError,
     "n_layer"),
    ("checkpoint_sequential_check.segments", lambda: mc.checkpoint_sequential_check(segments=0),
     ValueError, "segments must be an int >= 1"),
    ("checkpoint_sequential_check.width", lambda: mc.checkpoint_sequential_check(width="8"),
     TypeError, "width"),
    ("time_emptied_cache.micro", lambda: mc.time_emptied_cache(micro=0), ValueError,
     "micro must be an int >= 1"),
    ("time_emptied_cache.device", lambda: mc.time_emptied_cache(device="bogus"), ValueError,
     "device"),
    ("advised_zero_stage.billions", lambda: mc.advised_zero_stage(0), ValueError,
     "billions must be a finite number > 0"),
    ("advised_zero_stage.billions nan", lambda: mc.advised_zero_stage(NAN), ValueError, "billions"),
    ("zero_rule_rows.sizes_b", lambda: mc.zero_rule_rows(7.0), TypeError,
     "sizes_b must be a list"),
    ("zero_rule_rows.gpu_gb", lambda: mc.zero_rule_rows([7.0], gpu_gb=0), ValueError, "gpu_gb"),
    ("zero_rule_rows.n_gpus", lambda: mc.zero_rule_rows([7.0], n_gpus=0), ValueError, "n_gpus"),
    ("largest_model_for_stage.stage", lambda: mc.largest_model_for_stage(4), ValueError,
     r"stage must be an int in \[0, 3\]"),
    ("largest_model_for_stage.gpu_gb", lambda: mc.largest_model_for_stage(1, gpu_gb=INF),
     ValueError, "gpu_gb"),
    # experiments (notebook 04's builders)
    ("gpt2_variant.model_kw", lambda: mx.gpt2_variant([("n_embd", 8)]), TypeError,
     "model_kw must be a Mapping"),
    ("gpt2_variant.dtype", lambda: mx.gpt2_variant({}, dtype="bf16"), TypeError,
     "dtype must be a dtype"),
    ("gpt2_variant.checkpointing", lambda: mx.gpt2_variant({}, checkpointing="all"), ValueError,
     "checkpointing must be one of"),
    ("measure_saved.model", lambda: mx.measure_saved(None, IDS), TypeError,
     "model must be a Module"),
    ("measure_saved.ids", lambda: mx.measure_saved(LIN, IDS.float()), TypeError,
     "ids must hold integer token ids"),
    ("train_step.model", lambda: mx.train_step("gpt2", IDS), TypeError, "model must be a Module"),
    ("train_step.ids", lambda: mx.train_step(LIN, torch.zeros(8, dtype=torch.long)), ValueError,
     "ids must be 2-D"),
    ("blocks_forward.model", lambda: mx.blocks_forward(3, IDS), TypeError,
     "model must be a Module"),
    ("blocks_forward.ids", lambda: mx.blocks_forward(LIN, [[1, 2]]), TypeError,
     "ids must be a torch.Tensor"),
    # lora (notebook 05)
    ("gpt2_pair.model_kw", lambda: lora.gpt2_pair(None, 4), TypeError,
     "model_kw must be a Mapping"),
    ("gpt2_pair.rank", lambda: lora.gpt2_pair({}, 0), ValueError, "rank must be an int >= 1"),
    ("gpt2_pair.targets", lambda: lora.gpt2_pair({}, 4, targets=[]), ValueError,
     "targets must hold at least one"),
    ("adamw_trainer.model", lambda: lora.adamw_trainer(None, IDS), TypeError,
     "model must be a Module"),
    ("adamw_trainer.ids", lambda: lora.adamw_trainer(LIN, IDS[0]), ValueError, "ids must be 2-D"),
    ("adamw_trainer.lr", lambda: lora.adamw_trainer(LIN, IDS, lr=0.0), ValueError,
     "lr must be a finite number > 0"),
    ("forward_backward.model", lambda: lora.forward_backward("m", IDS), TypeError,
     "model must be a Module"),
    ("forward_backward.ids", lambda: lora.forward_backward(LIN, "ids"), TypeError,
     "ids must be a torch.Tensor"),
    ("frozen_twin.model", lambda: lora.frozen_twin(LIN), TypeError,
     r"model must be a GPT-2 module \(with transformer.h\)"),
    ("amdahl_parts.step", lambda: lora.amdahl_parts([1.0], MS, MS), TypeError,
     "step must be a Measurement"),
    ("amdahl_parts.frozen rounds", lambda: lora.amdahl_parts(MS, MS, Measurement((1.0,), 0)),
     ValueError, "same number of rounds"),
    ("lora_bound.parts", lambda: lora.lora_bound([1.0, 2.0], 1.0, 0.1), TypeError,
     "parts must be a Mapping"),
    ("lora_bound.parts keys", lambda: lora.lora_bound({"optimizer step": 1.0}, 1.0, 0.1),
     ValueError, "parts must hold 'weight gradients'"),
    ("lora_bound.step_s nan", lambda: lora.lora_bound(PARTS, NAN, 0.1), ValueError,
     "step_s must be a finite number > 0"),
    ("lora_bound.trainable_ratio str", lambda: lora.lora_bound(PARTS, 1.0, "0.1"), TypeError,
     "trainable_ratio"),

]

# Public names without a case: the RSS helpers take no arguments; the rest are records
# perfkit returns. RECIPES is a constant.
NO_ARGUMENTS = {"peak_rss_bytes", "reset_peak_rss", "rss_bytes", "trim_heap"}
RECORDS = {"ActivationEstimate", "LiveModelStates", "ModelStateBytes", "ParamCount", "SavedTensorReport",
           "StepAnatomy", "CheckpointFiles", "CheckpointSavings", "EmptyCacheTiming", "SequentialCheck",
           "SizingRatios", "ZeroRuleRow"}


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(memory, CASES, NO_ARGUMENTS | RECORDS)
    assert not missing, f"no bad-input case for {missing}"
