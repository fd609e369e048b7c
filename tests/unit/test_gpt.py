"""perfkit.parallel.gpt: the plain GPT that tensor and pipeline parallelism split."""

import pytest
import torch
from torch import nn

from perfkit.parallel.gpt import GPT, GPTConfig, gpt_loss, split_layers

CFG = GPTConfig(vocab_size=50, block_size=12, n_embd=16, n_layer=3, n_head=4)


def test_same_seed_same_model_and_loss_near_log_vocab():
    torch.manual_seed(1)
    a = GPT(CFG)
    torch.manual_seed(1)
    b = GPT(CFG)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    idx = torch.randint(0, 50, (3, 12))
    loss = gpt_loss(a(idx), idx)
    # small init: the logits are near zero, so the loss is near log(V)
    assert abs(loss.item() - torch.log(torch.tensor(50.0)).item()) < 0.2


def test_is_causal_a_later_token_does_not_change_earlier_logits():
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    idx = torch.randint(0, 50, (1, 12))
    other = idx.clone()
    other[0, 7] = (other[0, 7] + 1) % 50
    a, b = m(idx), m(other)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_layers_in_stages_compute_the_whole_model():
    torch.manual_seed(0)
    m = GPT(CFG)
    stages = split_layers(m.layers(), [1, 2, 2])
    idx = torch.randint(0, 50, (2, 12))
    x = idx
    for s in stages:
        x = s(x)
    assert torch.allclose(x, m(idx))
    assert [len(s) for s in stages] == [1, 2, 2]


def test_attention_heads_follow_the_projection_width():
    # a head-split attention (half the heads' q/k/v rows) runs with n_head / 2 heads
    torch.manual_seed(0)
    attn = GPT(CFG).blocks[0].attn
    half = 8
    for name in ("q", "k", "v"):
        lin = getattr(attn, name)
        new = nn.Linear(16, half)
        new.weight.data, new.bias.data = lin.weight[:half].clone(), lin.bias[:half].clone()
        setattr(attn, name, new)
    p = nn.Linear(half, 16)
    attn.proj = p
    assert attn(torch.randn(2, 5, 16)).shape == (2, 5, 16)


@pytest.mark.parametrize("kw, match", [
    (dict(n_head=3), "multiple of n_head"), (dict(dropout=1.0), "dropout"),
    (dict(n_layer=0), "n_layer"), (dict(vocab_size=2.0), "vocab_size")])
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**kw)


def test_bad_inputs():
    m = GPT(CFG)
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="add up"):
        split_layers(m.layers(), [2, 2])
    with pytest.raises(ValueError, match="sizes"):
        split_layers(m.layers(), [0, 5])
    with pytest.raises(ValueError, match="agree"):
        gpt_loss(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="GPTConfig"):
        GPT({"n_embd": 16})
