"""The profiler's operator table: ranges PyTorch marks are not operators."""

from __future__ import annotations

import pytest

from perfkit.models import digits_workload, train_steps
from perfkit.profiling import ProfileConfig, Profiler


def test_operator_shares_leave_out_the_optimizers_range(tmp_path):
    """Old: the ``Optimizer.step#...`` range was a row of the operator table and its self time
    (the Python around the optimizer's operators) part of the shares' denominator, so notebook
    01's "share of operator self time" counted a range as an operator."""
    wl = digits_workload(batch_size=16, device="cpu")
    cfg = ProfileConfig(wait=0, warmup=1, active=2, trace_dir=tmp_path)
    with Profiler(cfg, name="ranges", device="cpu") as prof:
        train_steps(wl, cfg.total_steps, on_step=prof.step)
    ops = prof.result().top_ops
    assert not [o.name for o in ops if o.name.startswith(("Optimizer.", "ProfilerStep", "phase:"))]
    assert any(o.name.startswith("aten::") for o in ops)
    assert sum(o.share for o in ops) == pytest.approx(1.0)
