"""perfkit.memory.lora (LoRA's models, steps and Amdahl bound) and perfkit.viz.zero (notebook
05's tables and sentences), on hand-made records where the expected figures are known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from perfkit.memory import lora as plora
from perfkit.memory import zero_model_states
from perfkit.timing import Measurement
from perfkit.viz import zero as vzero

MODEL = dict(n_embd=32, n_layer=2, n_head=2)


def test_gpt2_pair_shares_initial_weights_and_trains_only_adapters():
    full, lora = plora.gpt2_pair(MODEL, rank=4, vocab_size=64, block_size=16)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    n_trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert n_trainable == 2 * 4 * 4 * 32   # r (C + 3C) per block
    w_full = full.transformer.h[0].attn.c_attn.weight
    w_lora = lora.base_model.model.transformer.h[0].attn.c_attn.base_layer.weight
    assert torch.equal(w_full, w_lora)


def test_frozen_twin_gets_no_weight_gradient_but_reaches_every_block():
    full, _ = plora.gpt2_pair(MODEL, rank=4, vocab_size=64, block_size=16)
    twin = plora.frozen_twin(full)
    ids = torch.randint(0, 64, (2, 16))
    plora.forward_backward(twin, ids)()
    assert all(b.attn.c_attn.bias.grad is not None for b in twin.transformer.h)   # backward reached block 0
    assert all(p.grad is None for n, p in twin.named_parameters() if not n.endswith("c_attn.bias"))
    assert all(p.requires_grad for p in full.parameters())   # the original is untouched


def test_adamw_trainer_steps_only_trainable_parameters():
    _, lora = plora.gpt2_pair(MODEL, rank=4, vocab_size=64, block_size=16)
    step, opt = plora.adamw_trainer(lora, torch.randint(0, 64, (2, 16)))
    before = {n: p.detach().clone() for n, p in lora.named_parameters()}
    step()
    changed = {n for n, p in lora.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_B" in n or "lora_A" in n for n in changed)
    assert sum(len(g["params"]) for g in opt.param_groups) == sum(p.requires_grad for p in lora.parameters())
    with pytest.raises((TypeError, ValueError), match="ids"):
        plora.adamw_trainer(lora, torch.zeros(16, dtype=torch.long))


def test_amdahl_parts_and_bound():
    m = lambda ts: Measurement(tuple(ts), 0)   # noqa: E731
    parts = plora.amdahl_parts(m([10.0, 10.0, 10.0]), m([8.0, 8.0, 8.0]), m([5.0, 5.0, 5.0]))
    assert parts == {"forward + input-gradient backward": 5.0, "weight gradients": 3.0, "optimizer step": 2.0}
    # drifting rounds: the parts still add up to the step's median (medians of per-round
    # differences would give 5 + 5 + 5 = 15 here, more than the 14 s step)
    drift = plora.amdahl_parts(m([10.0, 14.0, 30.0]), m([8.0, 9.0, 25.0]), m([5.0, 2.0, 20.0]))
    assert drift == {"forward + input-gradient backward": 5.0, "weight gradients": 4.0, "optimizer step": 5.0}
    assert sum(drift.values()) == 14.0
    # removes 3 s of weight gradients and 90 % of the 2 s optimizer step: 1 - 4.8 / 10
    assert plora.lora_bound(parts, 10.0, 0.1) == pytest.approx(0.52)
    assert plora.lora_bound({**parts, "weight gradients": -1.0}, 10.0, 0.1) == pytest.approx(0.82)
    with pytest.raises(ValueError, match="trainable_ratio"):
        plora.lora_bound(parts, 10.0, 1.5)
    with pytest.raises(ValueError, match="step_s"):
        plora.lora_bound(parts, 0.0, 0.1)


def variant(calls, sent, states=None, step_s=0.01, state_bytes=800, rss=None):
    return SimpleNamespace(calls=calls, sent_bytes=sent, model_states=states, step_s=step_s,
                           state_bytes=state_bytes, peak_rss_bytes=rss, max_rel_diff_vs_adamw=1e-7)


def test_bytes_lines_and_calls_sentence():
    ddp = variant({"all_reduce": 2}, {"all_reduce": 4e6})
    tz = variant({"all_reduce": 2, "broadcast": 10}, {"all_reduce": 4e6, "broadcast": 2e6})
    text = vzero.bytes_lines({"ddp_adamw": ddp, "torch_zero": tz})
    assert text.startswith("  torch_zero: 1.500x ddp_adamw's bytes per step")
    assert "12 collective calls" in text
    assert "12 collective calls per step where DDP + AdamW makes 2" in vzero.calls_sentence(tz, ddp)
    assert "no more collective calls" in vzero.calls_sentence(ddp, tz)
    assert vzero.sent_bytes(variant(None, None)) == 0.0 and vzero.calls_per_step(variant(None, None)) == 0


def test_tables_have_one_row_per_variant():
    f = zero_model_states(100, 2, 1, "fp32_adam")
    states = {"params": int(f.params), "grads": int(f.grads), "optimizer": int(f.optimizer)}
    cmp = SimpleNamespace(variants={"zero1": variant({}, {}, states)}, total_state_bytes=1600)
    rows = vzero.stage_table(cmp, {"zero1": 1}, {"zero1": f}).splitlines()
    assert len(rows) == 3 and rows[2].endswith("| 1.0000 |")
    rows = vzero.optimizer_table(cmp).splitlines()
    assert len(rows) == 3 and "| 50.0% | - |" in rows[2]
