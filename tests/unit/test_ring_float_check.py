"""The ring's float check against dist.all_reduce: an identity on 2 ranks, a test from 3 on."""

from __future__ import annotations

import pytest
import torch

from perfkit.jobs.collectives import order_bound


def test_the_float_bound_is_zero_on_two_ranks_and_holds_two_orders_of_three():
    """Old: the ring check compared floats with no bound of its own (notebook 02 printed the
    2-rank error, 0 by commutativity, as if it tested the summation order); the record now
    carries the rounding bound two correct orders can differ by, 0 where only one addition runs."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(100_000, generator=g) for _ in range(3))
    assert torch.equal(a + b, b + a) and order_bound(2, 5.0) == 0.0  # one addition: the same bits
    diff = ((a + b) + c - ((c + b) + a)).abs()
    bound = torch.tensor([order_bound(3, float(s)) for s in (a.abs() + b.abs() + c.abs())])
    assert diff.max() > 0  # on 3 ranks the order shows in the last bits
    assert bool((diff <= bound).all())
    assert order_bound(3, 1.0) == pytest.approx(4 * torch.finfo(torch.float32).eps / 2, rel=1e-6)
    with pytest.raises(ValueError, match="abs_sum"):
        order_bound(3, -1.0)
