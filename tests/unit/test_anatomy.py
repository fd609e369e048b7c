"""perfkit.memory.anatomy: process RSS helpers and one training step's measured memory."""

from __future__ import annotations

import pytest
import torch

from perfkit.memory import anatomy, count_parameters, gpt2_saved_activation_bytes
from perfkit.models import tiny_gpt2


def test_measure_step_anatomy_cpu():
    torch.manual_seed(0)
    m = tiny_gpt2(vocab_size=128, block_size=32, n_embd=32, n_layer=2, n_head=2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, 128, (4, 32))
    a = anatomy.measure_step_anatomy(m, lambda: m(input_ids=x, labels=x).loss, opt)
    n = count_parameters(m)
    assert a.params == n.total_bytes
    assert a.grads == n.total_bytes
    assert a.optimizer_state == 2 * n.total_bytes + 4 * len(list(m.parameters()))
    pred = gpt2_saved_activation_bytes(4, 32, 32, 2, 2, 128)
    assert a.activations == pred.total
    assert a.peak_source == "rss" and a.snapshot_path is None
    assert a.accounted == a.params + a.grads + a.optimizer_state + a.activations
    with pytest.raises(TypeError, match="compute_loss"):
        anatomy.measure_step_anatomy(m, None, opt)


def test_rss_helpers():
    before = anatomy.rss_bytes()
    assert before > 0
    if anatomy.reset_peak_rss():
        x = torch.ones(16_000_000)  # 64 MB, touched
        assert anatomy.peak_rss_bytes() >= before + 50_000_000
        del x
    assert anatomy.peak_rss_bytes() >= anatomy.rss_bytes() - 4096 * 16


@pytest.mark.gpu
def test_measure_step_anatomy_cuda_allocator_and_snapshot(tmp_path):
    torch.manual_seed(0)
    m = tiny_gpt2(vocab_size=128, block_size=32, n_embd=32, n_layer=2, n_head=2).cuda()
    x = torch.randint(0, 128, (4, 32), device="cuda")
    step = lambda: m(input_ids=x, labels=x).loss
    anatomy.measure_step_anatomy(m, step, torch.optim.AdamW(m.parameters()))  # warm-up
    snap = str(tmp_path / "snap.pickle")
    a = anatomy.measure_step_anatomy(m, step, torch.optim.AdamW(m.parameters()), snapshot_path=snap)
    assert a.peak_source == "cuda_allocator" and a.snapshot_path == snap
    assert (tmp_path / "snap.pickle").stat().st_size > 0
    # the allocator saw at least the activations live at once, and the new model states
    assert a.peak >= max(a.activations, a.grads + a.optimizer_state)
