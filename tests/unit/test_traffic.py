"""perfkit.comm.traffic's byte model: what one rank sends, averaged over the ranks."""

import pytest

from perfkit.comm import Traffic, ring_factor


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
def test_broadcast_and_reduce_move_what_an_all_gather_moves(n):
    # a chain of N ranks: N - 1 of them pass the buffer on, the last sends nothing
    assert ring_factor("broadcast", n) == pytest.approx((n - 1) / n)
    assert ring_factor("reduce", n) == pytest.approx((n - 1) / n)
    assert ring_factor("broadcast", n) == ring_factor("all_gather", n)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_reduce_then_shard_broadcasts_is_one_and_a_half_times_ddp(n):
    """torch's ZeroRedundancyOptimizer: DDP's all-reduce, then each shard broadcast by its owner."""
    model_bytes = 4_000_000
    shards = [model_bytes // n] * n   # every rank calls every broadcast, so its counter sees all
    t = Traffic(calls={"all_reduce": 1, "broadcast": n},
                buffer_bytes={"all_reduce": model_bytes, "broadcast": sum(shards)})
    ddp = Traffic(calls={"all_reduce": 1}, buffer_bytes={"all_reduce": model_bytes})
    # 3(N-1)/N against 2(N-1)/N at any N (a broadcast counted as "each rank sends S" gives 2x at N=2)
    assert sum(t.sent_bytes(n).values()) / sum(ddp.sent_bytes(n).values()) == pytest.approx(1.5)


def test_one_process_sends_nothing():
    for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        assert ring_factor(name, 1) == 0.0
