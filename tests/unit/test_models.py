"""perfkit.models: the workloads are real (loss goes down), deterministic and checked."""

import time

import pytest
import torch

from perfkit import models
from perfkit.models import (
    DigitsDataset,
    SmallCNN,
    TokenBlockDataset,
    digits_data,
    digits_workload,
    encode_corpus,
    gpt2_workload,
    text_corpus,
    tiny_gpt2,
    train_bpe_tokenizer,
    train_steps,
)

SMALL_TEXT = 150_000  # bytes of stdlib source: enough for a 400-token vocabulary


pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_bpe_tokenizer(400, SMALL_TEXT, cache_dir=tmp_path_factory.mktemp("tok"))


def test_digits_data_shapes_and_range():
    x, y = digits_data()
    assert x.shape == (1797, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (1797,) and y.dtype == torch.int64
    assert 0.0 <= x.min() and x.max() <= 1.0 and set(y.tolist()) == set(range(10))


def test_digits_dataset_decodes_to_the_same_images():
    x, y = digits_data()
    ds = DigitsDataset()
    img, label = ds[123]
    assert torch.equal(img, x[123]) and label == y[123]


def test_cost_ms_adds_at_least_that_much_time_per_sample():
    ds = DigitsDataset(cost_ms=5.0)
    t = time.perf_counter()
    for i in range(4):
        ds[i]
    assert time.perf_counter() - t >= 4 * 5e-3  # a lower bound only: busy-wait never ends early


@pytest.mark.parametrize("bad", [-1, 1e6, "1"])
def test_bad_cost_is_rejected(bad):
    with pytest.raises(ValueError, match="cost_ms"):
        DigitsDataset(cost_ms=bad)


def test_small_cnn_output_shape():
    assert SmallCNN()(torch.zeros(5, 1, 8, 8)).shape == (5, 10)


def test_digits_workload_trains_and_is_deterministic():
    losses = train_steps(digits_workload(batch_size=64, seed=1), steps=40)
    again = train_steps(digits_workload(batch_size=64, seed=1), steps=40)
    assert losses == again  # fixed seed: identical losses
    assert sum(losses[-5:]) / 5 < 0.5 * losses[0], losses


def test_text_corpus_is_deterministic_and_capped():
    a, b = text_corpus(50_000), text_corpus(50_000)
    assert a == b
    assert len(a.encode()) <= 50_000 + 1_000  # joins add one newline per file
    assert "def " in a and "import " in a


def test_text_corpus_rejects_bad_size():
    with pytest.raises(ValueError, match="max_bytes"):
        text_corpus(0)


def test_tokenizer_roundtrip_special_token_and_cache(tmp_path):
    tok = train_bpe_tokenizer(400, SMALL_TEXT, cache_dir=tmp_path)
    assert tok.get_vocab_size() == 400 and tok.token_to_id("<|endoftext|>") == 0
    src = "def f(x):\n    return x + 1\n"
    assert tok.decode(tok.encode(src).ids) == src
    assert len(list(tmp_path.iterdir())) == 1
    cached = train_bpe_tokenizer(400, SMALL_TEXT, cache_dir=tmp_path)
    assert cached.encode(src).ids == tok.encode(src).ids
    assert len(list(tmp_path.iterdir())) == 1, "second call should reuse the cached file"


def test_tokenizer_rejects_tiny_vocab(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe_tokenizer(100, SMALL_TEXT, cache_dir=tmp_path)


@pytest.mark.parametrize("slow", [False, True])
def test_token_blocks_are_shifted_by_one(tokenizer, slow):
    ds = TokenBlockDataset(text_corpus(SMALL_TEXT), tokenizer, block_size=32,
                           tokenize_per_sample=slow)
    x, y = ds[3]
    assert x.shape == y.shape == (32,) and x.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])
    assert int(x.max()) < 400


def test_fast_blocks_tile_the_encoded_corpus(tokenizer):
    text = text_corpus(SMALL_TEXT)
    ids = encode_corpus(tokenizer, text)
    ds = TokenBlockDataset(text, tokenizer, block_size=16)
    assert len(ds) == (len(ids) - 1) // 16
    assert torch.equal(ds[2][0], ids[32:48])


def test_token_blocks_reject_bad_block_size(tokenizer):
    with pytest.raises(ValueError, match="block_size"):
        TokenBlockDataset("abc", tokenizer, block_size=1)


def test_tiny_gpt2_has_eos_in_vocab_and_gives_a_loss():
    m = tiny_gpt2(vocab_size=400, block_size=16)
    assert m.config.eos_token_id == m.config.bos_token_id == 0
    x = torch.randint(0, 400, (2, 16))
    loss = m(input_ids=x, labels=x).loss
    assert abs(loss.item() - torch.log(torch.tensor(400.0)).item()) < 1.0  # ~uniform at init


def test_tiny_gpt2_attention_and_activation_change_the_kernels_not_the_function():
    B, T, H = 2, 48, 2  # T differs from head_dim (32), so (B, H, T, T) is not q's shape
    x = torch.randint(0, 400, (B, T))
    loss, shapes = {}, {}
    for attn, act in (("sdpa", "gelu_new"), ("eager", "gelu_new"), ("sdpa", "gelu_pytorch_tanh")):
        torch.manual_seed(0)
        m = tiny_gpt2(vocab_size=400, block_size=T, n_embd=64, n_layer=2, n_head=H,
                      attention=attn, activation=act)
        saved = shapes[attn, act] = []

        def pack(t, saved=saved):
            saved.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss[attn, act] = m(input_ids=x, labels=x).loss.item()
    # the same function (same seed, same weights), within fp32 rounding
    assert loss["eager", "gelu_new"] == pytest.approx(loss["sdpa", "gelu_new"], abs=1e-5)
    assert loss["sdpa", "gelu_pytorch_tanh"] == pytest.approx(loss["sdpa", "gelu_new"], abs=1e-5)
    # eager attention keeps the softmax's (B, H, T, T) output for backward; fused attention does not
    assert (B, H, T, T) in shapes["eager", "gelu_new"]
    assert (B, H, T, T) not in shapes["sdpa", "gelu_new"]
    # gelu_new saves the intermediates of its elementwise ops, the fused GELU only its input
    assert len(shapes["sdpa", "gelu_pytorch_tanh"]) < len(shapes["sdpa", "gelu_new"])


def test_gpt2_workload_trains(monkeypatch, tmp_path):
    # keep the tokenizer cache of this test out of build/
    monkeypatch.setattr(models, "train_bpe_tokenizer",
                        lambda v, b: train_bpe_tokenizer(v, b, cache_dir=tmp_path))
    wl = gpt2_workload(batch_size=8, block_size=32, vocab_size=400, max_bytes=SMALL_TEXT)
    losses = train_steps(wl, steps=40)
    assert sum(losses[-5:]) / 5 < losses[0] - 0.5, losses  # ~6.0 -> ~5.1 measured
    # the loss is next-token cross-entropy: x[t] predicts y[t] = x[t + 1] (the dataset's shift);
    # passing the shifted y as transformers' labels (it shifts again) scores x[t + 2]
    x, y = next(iter(wl.loader))
    logits = wl.model(input_ids=x).logits  # (B, T, V)
    want = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), y[:, :-1].flatten())
    skip = torch.nn.functional.cross_entropy(logits[:, :-2].flatten(0, 1), y[:, 1:-1].flatten())
    got = wl.loss_fn(wl.model, (x, y))
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, skip, atol=1e-3)


def test_train_steps_calls_monitor_phases_in_order():
    calls = []

    class Recorder:
        def phase(self, name):
            calls.append(name)
            return torch.autograd.profiler.record_function(name)

        def step(self, samples, tokens):
            calls.append(("step", samples, tokens))

    train_steps(digits_workload(batch_size=8), steps=2, monitor=Recorder())
    assert calls == ["data", "forward", "backward", "optimizer", ("step", 8, 8)] * 2


def test_bad_loader_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        digits_workload(batch_size=0)
    with pytest.raises(ValueError, match="num_workers"):
        digits_workload(num_workers=-1)
    with pytest.raises(ValueError, match="exceeds the dataset"):
        digits_workload(batch_size=5000)
    with pytest.raises(ValueError, match="steps"):
        train_steps(digits_workload(), steps=0)
