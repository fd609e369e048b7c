"""perfkit.memory.experiments: notebook 04's GPT-2 variants, saved-bytes meter runs and timed steps."""

from __future__ import annotations

import pytest
import torch

from perfkit.memory import CheckpointedBlock, gpt2_saved_activation_bytes
from perfkit.memory.experiments import (
    CHECKPOINTING,
    blocks_forward,
    gpt2_variant,
    measure_saved,
    train_step,
)

MODEL = dict(vocab_size=128, block_size=16, n_embd=32, n_layer=2, n_head=2)
B, T = 2, 16


@pytest.fixture
def ids():
    return torch.randint(0, MODEL["vocab_size"], (B, T), generator=torch.Generator().manual_seed(1))


def test_variants_share_weights_and_differ_in_checkpointing():
    plain, per_block, switch = (gpt2_variant(MODEL, checkpointing=k) for k in CHECKPOINTING)
    for a, b, c in zip(plain.parameters(), per_block.parameters(), switch.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)  # a wrong seed would draw other weights
    assert not any(isinstance(b, CheckpointedBlock) for b in plain.transformer.h)
    assert all(isinstance(b, CheckpointedBlock) for b in per_block.transformer.h)
    on = next(a for a in ("is_activation_checkpointing", "is_gradient_checkpointing") if hasattr(plain, a))
    assert getattr(switch, on) and not getattr(plain, on)  # transformers' own switch, renamed in v5
    other = gpt2_variant(MODEL, seed=1)
    assert not torch.equal(next(other.parameters()), next(plain.parameters()))


def test_transformers_switch_is_asked_for_the_non_reentrant_checkpoint(monkeypatch):
    # named, not left to the version's default: transformers 4.x defaulted to the reentrant one
    from transformers import GPT2LMHeadModel

    name = next(a for a in ("activation_checkpointing_enable", "gradient_checkpointing_enable")
                if hasattr(GPT2LMHeadModel, a))
    real, asked = getattr(GPT2LMHeadModel, name), []

    def enable(self, kwargs=None, **rest):
        asked.append(kwargs)
        return real(self, kwargs, **rest)
    monkeypatch.setattr(GPT2LMHeadModel, name, enable)
    gpt2_variant(MODEL, checkpointing=CHECKPOINTING[2])
    assert asked == [{"use_reentrant": False}]


def test_variant_options():
    m = gpt2_variant(MODEL, seq=64, attention="eager", dtype=torch.bfloat16)
    assert m.config.n_positions == 64  # raised to the sequence
    assert m.config._attn_implementation == "eager"
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16}
    assert m.training
    assert gpt2_variant(MODEL, seq=8).config.n_positions == MODEL["block_size"]  # never lowered


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_measure_saved_equals_the_count(ids, attention):
    r = measure_saved(gpt2_variant(MODEL, attention=attention), ids)
    want = gpt2_saved_activation_bytes(B, T, MODEL["n_embd"], MODEL["n_layer"], MODEL["n_head"],
                                       MODEL["vocab_size"], attention).total
    assert r.activation_bytes == want


def test_measure_saved_with_checkpointing_needs_the_backward(ids):
    want = gpt2_saved_activation_bytes(B, T, MODEL["n_embd"], MODEL["n_layer"], MODEL["n_head"],
                                       MODEL["vocab_size"], checkpointing=True).total
    full = measure_saved(gpt2_variant(MODEL), ids, backward=True).activation_bytes
    for kind in CHECKPOINTING[1:]:
        m = gpt2_variant(MODEL, checkpointing=kind)
        assert measure_saved(m, ids, backward=True).activation_bytes == want < full
        assert m.transformer.wte.weight.grad is not None  # the backward ran


def test_measure_saved_autocast_keeps_bfloat16(ids):
    plain = measure_saved(gpt2_variant(MODEL), ids)
    auto = measure_saved(gpt2_variant(MODEL), ids, autocast=True)
    assert set(plain.activation_bytes_by_dtype) == {"float32", "int64"}
    assert auto.activation_bytes_by_dtype["bfloat16"] > 0
    assert auto.activation_bytes < plain.activation_bytes


def test_train_step_resets_gradients(ids):
    m = gpt2_variant(MODEL)
    step = train_step(m, ids)
    step()
    first = [p.grad.clone() for p in m.parameters()]
    step()  # a step that accumulated would double every gradient
    ref = gpt2_variant(MODEL)
    ref(input_ids=ids, labels=ids).loss.backward()
    for g1, p, r in zip(first, m.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, g1) and torch.allclose(p.grad, r.grad)


def test_blocks_forward_runs_only_the_blocks_on_their_plain_inputs(ids):
    m = gpt2_variant(MODEL)
    want = m.transformer.wte(ids) + m.transformer.wpe(torch.arange(T))  # block 0's input (B, T, C)
    run = blocks_forward(m, ids)
    seen, heads = [], []
    hooks = [b.register_forward_pre_hook(lambda mod, args: seen.append(args[0])) for b in m.transformer.h]
    hooks.append(m.lm_head.register_forward_hook(lambda *a: heads.append(1)))
    run()
    for h in hooks:
        h.remove()
    assert len(seen) == MODEL["n_layer"] and not heads  # every block once, no head, no loss
    assert torch.allclose(seen[0], want) and all(s.requires_grad for s in seen)
    assert all(p.grad is None for p in m.parameters())  # it records, it does not run backward


def test_bad_arguments(ids):
    m = gpt2_variant(MODEL)
    with pytest.raises(ValueError, match="checkpointing must be one of"):
        gpt2_variant(MODEL, checkpointing="all")
    with pytest.raises(TypeError, match="model_kw"):
        gpt2_variant([("n_embd", 32)])
    with pytest.raises(TypeError, match="dtype"):
        gpt2_variant(MODEL, dtype="bf16")
    with pytest.raises(TypeError, match="ids must hold integer"):
        measure_saved(m, ids.float())
    with pytest.raises(ValueError, match="ids must be 2-D"):
        train_step(m, ids[0])
    with pytest.raises(TypeError, match="model must be"):
        blocks_forward(lambda: None, ids)
