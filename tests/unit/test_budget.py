"""perfkit.compute.budget: the batch search's trials by hand, the CPU budget probe, the GPU OOM probe."""

import pytest
import torch

from perfkit.compute import budget


def test_largest_batch_doubles_then_bisects():
    r = budget.largest_batch(lambda b: b <= 37)
    assert r.best == 37
    assert [b for b, _ in r.trials] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert budget.largest_batch(lambda b: b <= 5, start=3).best == 5
    assert budget.largest_batch(lambda b: False, start=3).best == 0
    assert budget.largest_batch(lambda b: True, limit=100).best == 100
    with pytest.raises(ValueError, match="start"):
        budget.largest_batch(lambda b: True, start=10, limit=5)
    with pytest.raises(TypeError, match="fits"):
        budget.largest_batch(None)


def test_budget_probe_by_hand():
    model = torch.nn.Linear(10, 10, bias=False)  # 100 fp32 parameters
    # states: 100 * (4 param + 4 grad + 8 Adam) = 1600 B; a Linear saves its (b, 10) input
    probe = budget.BudgetProbe(model, lambda b: model(torch.randn(b, 10)).sum(), 2000)
    r = budget.largest_batch(probe)
    assert r.best == 10  # 1600 + 40 * b <= 2000
    assert probe.bytes[10] == 2000 and probe.bytes[16] == 2240
    with pytest.raises(ValueError, match="budget_bytes"):
        budget.BudgetProbe(model, lambda b: None, 0)


def test_oom_probe_refuses_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU refusal")
    with pytest.raises(ValueError, match="CUDA"):
        budget.OOMProbe(lambda b: None, device="cpu")


@pytest.mark.gpu
def test_oom_probe_survives_out_of_memory():
    total = torch.cuda.get_device_properties(0).total_memory
    mib = 1 << 20
    probe = budget.OOMProbe(lambda b: torch.empty(b * mib, dtype=torch.uint8, device="cuda").fill_(1),
                            budget_bytes=10 * mib)
    assert budget.largest_batch(probe).best == 10
    # far beyond the device: a real OOM, caught, and the memory is usable afterwards
    huge = budget.OOMProbe(lambda b: torch.empty(b * total, dtype=torch.uint8, device="cuda"))
    assert huge(4) is False and huge(1) is False and huge.bytes == {}
    torch.empty(mib, device="cuda")  # the allocator still works after the OOMs
    assert torch.cuda.memory_allocated() < total // 2
