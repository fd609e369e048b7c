"""perfkit.memory.activations: the GPT-2 activation and step-memory model, activation checkpointing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perfkit.memory import SavedTensorMeter, count_parameters
from perfkit.memory import activations as A
from perfkit.models import tiny_gpt2

# --- the GPT-2 activation model against the meter ------------------------------------------

SHAPES = [dict(batch=3, seq_len=24, n_embd=32, n_head=2, n_layer=3, vocab_size=100),
          dict(batch=2, seq_len=16, n_embd=48, n_head=4, n_layer=2, vocab_size=64)]


def _gpt2(shape, attention, dtype=torch.float32):
    m = tiny_gpt2(vocab_size=shape["vocab_size"], block_size=64, n_embd=shape["n_embd"],
                  n_layer=shape["n_layer"], n_head=shape["n_head"])
    m.config._attn_implementation = attention
    return m.to(dtype).train()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpt2_model_equals_meter(shape, attention, dtype):
    torch.manual_seed(0)
    m = _gpt2(shape, attention, dtype)
    x = torch.randint(0, shape["vocab_size"], (shape["batch"], shape["seq_len"]))
    with SavedTensorMeter(m) as meter:
        loss = m(input_ids=x, labels=x).loss
    pred = A.gpt2_saved_activation_bytes(**shape, attention=attention,
                                         dtype_bytes=torch.finfo(dtype).bits // 8)
    assert meter.report().activation_bytes == pred.total
    assert pred.total == shape["n_layer"] * pred.per_layer + pred.outside_layers
    loss.backward()


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_gpt2_model_equals_meter_with_checkpointing(attention):
    shape = SHAPES[0]
    m = _gpt2(shape, attention)
    enable = getattr(m, "activation_checkpointing_enable", None) or m.gradient_checkpointing_enable
    enable()
    x = torch.randint(0, shape["vocab_size"], (shape["batch"], shape["seq_len"]))
    with SavedTensorMeter(m) as meter:
        loss = m(input_ids=x, labels=x).loss
    pred = A.gpt2_saved_activation_bytes(**shape, attention=attention, checkpointing=True)
    assert meter.report().activation_bytes == pred.total
    full = A.gpt2_saved_activation_bytes(**shape, attention=attention)
    # the backward's peak: the block inputs, the ids (and eager's mask) and one whole block; the
    # final LayerNorm's tensors, the log-softmax and the labels are freed before any block is reached
    b, t = shape["batch"], shape["seq_len"]
    kept = pred.outside_layers - (full.outside_layers - 8 * (b * t + t))  # ids (+ eager's mask)
    peak = pred.total + pred.recompute_peak
    # the rebuilt block's LayerNorm 1 saves the checkpointed input's own storage: not counted twice
    assert peak == max(pred.total, shape["n_layer"] * pred.per_layer + kept + full.per_layer - pred.per_layer)
    assert pred.recompute_peak != full.per_layer  # not the whole block on top of the forward's total
    assert pred.total < full.total
    loss.backward()


def test_gpt2_model_errors():
    kw = SHAPES[0]
    with pytest.raises(ValueError, match="attention"):
        A.gpt2_saved_activation_bytes(**kw, attention="flash")
    with pytest.raises(ValueError, match="dtype_bytes"):
        A.gpt2_saved_activation_bytes(**kw, dtype_bytes=3)
    with pytest.raises(ValueError, match="seq_len"):
        A.gpt2_saved_activation_bytes(**(kw | {"seq_len": 0}))


# --- parameters and one step's memory, predicted --------------------------------------------


@pytest.mark.parametrize("c,layers,vocab,pos", [(8, 1, 100, 16), (48, 3, 1024, 64)])
def test_gpt2_num_params_matches_transformers(c, layers, vocab, pos):
    m = tiny_gpt2(vocab_size=vocab, block_size=pos, n_embd=c, n_layer=layers, n_head=2)
    assert A.gpt2_num_params(c, layers, vocab, pos) == count_parameters(m).total
    with pytest.raises(ValueError, match="n_layer"):
        A.gpt2_num_params(c, 0, vocab, pos)


def test_gpt2_step_memory_parts():
    fp32 = A.gpt2_step_memory(64, 2, 2, 1024, 8, 64)
    psi = A.gpt2_num_params(64, 2, 1024, 64)
    assert (fp32["parameters"], fp32["gradients"], fp32["optimizer state"]) == (
        4 * psi, 4 * psi, 8 * psi)
    assert fp32["activations"] == A.gpt2_saved_activation_bytes(8, 64, 64, 2, 2, 1024).total
    assert fp32["recompute"] == 0
    ck = A.gpt2_step_memory(64, 2, 2, 1024, 8, 64, checkpointing=True)
    block = A.gpt2_saved_activation_bytes(8, 64, 64, 2, 2, 1024).per_layer
    assert 0 < ck["recompute"] < block  # one block, less the log-softmax freed before it
    mixed = A.gpt2_step_memory(64, 2, 2, 1024, 8, 64, "mixed", checkpointing=True)
    assert mixed["optimizer state"] == 12 * psi
    # in 16 bits a block is smaller than the fp32 log-softmax freed first: no peak above the forward's
    assert mixed["recompute"] == 0
    assert mixed["activations"] < fp32["activations"]
    with pytest.raises(ValueError, match="precision"):
        A.gpt2_step_memory(64, 2, 2, 1024, 8, 64, "fp8")


# --- activation checkpointing ---------------------------------------------------------------


def test_checkpoint_blocks_keeps_only_block_inputs_and_same_gradients():
    shape = SHAPES[1]
    ref, ck = _gpt2(shape, "sdpa"), _gpt2(shape, "sdpa")
    ck.load_state_dict(ref.state_dict())
    A.checkpoint_blocks(ck.transformer.h)
    A.checkpoint_blocks(ck.transformer.h)  # idempotent: no double wrapping
    assert all(isinstance(b, A.CheckpointedBlock) and not isinstance(b.block, A.CheckpointedBlock)
               for b in ck.transformer.h)
    x = torch.randint(0, shape["vocab_size"], (shape["batch"], shape["seq_len"]))
    with SavedTensorMeter(ck) as meter:
        loss = ck(input_ids=x, labels=x).loss
    pred = A.gpt2_saved_activation_bytes(**shape, attention="sdpa", checkpointing=True)
    assert meter.report().activation_bytes == pred.total
    loss.backward()
    ref(input_ids=x, labels=x).loss.backward()
    for p, q in zip(ref.parameters(), ck.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7)
    with pytest.raises(TypeError, match="ModuleList"):
        A.checkpoint_blocks([nn.Linear(2, 2)])
