"""Ring attention's bookkeeping without processes: how the sequence is split (contiguous,
zig-zag), the per-rank work counted in tile FLOPs against the imbalance formulas, bytes
sent, memory and the longest sequence; bad arguments. The ring itself runs in
tests/distributed/test_context_parallel.py."""

import pytest
import torch

from perfkit.parallel import context as cp
from perfkit.parallel import context_model as cm


def test_segments_contiguous_and_zigzag():
    assert cp.segments(12, 1, 3, "contiguous") == [(4, 4)]
    assert cp.segments(16, 0, 4, "zigzag") == [(0, 2), (14, 2)]
    assert cp.segments(16, 3, 4, "zigzag") == [(6, 2), (8, 2)]
    covered = sorted(s for r in range(4) for s in cp.segments(24, r, 4, "zigzag"))
    assert covered == [(3 * i, 3) for i in range(8)]  # every chunk once


def test_shard_then_unshard_is_identity():
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    for split in cp.SPLITS:
        parts = [cp.shard_sequence(x, r, 3, split) for r in range(3)]
        assert all(p.shape == (2, 8, 3) for p in parts)
        assert torch.equal(cp.unshard_sequence(parts, split), x)
    zig = cp.shard_sequence(x, 0, 3, "zigzag")
    assert torch.equal(zig[:, 4:], x[:, 20:])  # rank 0's second chunk is the last one


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_imbalance_formulas(world):
    t = 2 * world * 64
    half = cm.ring_work(t, world, "contiguous", tile=16, diagonal="half")
    full = cm.ring_work(t, world, "contiguous", tile=16, diagonal="full")
    assert cm.imbalance(half) == pytest.approx((2 * world - 1) / world)
    assert cm.imbalance(full) == pytest.approx(2 * world / (world + 1))
    assert cm.contiguous_imbalance(world, "half") == pytest.approx(cm.imbalance(half))
    tiles = cm.ring_work(t, world, "contiguous", tile=16)
    assert cm.imbalance(full) < cm.imbalance(tiles) < cm.imbalance(half)
    for d in cm.DIAGONALS:
        assert cm.imbalance(cm.ring_work(t, world, "zigzag", tile=16, diagonal=d)) == 1.0
    # every scheme does the whole causal attention between them (tile skipping aside)
    assert sum(half) == 4 * t * t // 2
    nc = cm.ring_work(t, world, "zigzag", causal=False)
    assert nc == [4 * t * t // world] * world


def test_ring_work_counts_the_kernel_tiles():
    # P=1 contiguous is plain causal FlashAttention: the same tiles flash_flops counts
    from perfkit.compute.flash import flash_flops

    assert cm.ring_work(100, 1, "contiguous", tile=16, head_dim=8) == [
        flash_flops(1, 1, 100, 8, True, 16).forward]


def test_transfers_alone_count_backwards_two_blocks_as_one_exchange_posted_together():
    # P = 2: forward one K/V block; backward K/V and dK/dV waited for together, then dK/dV alone
    assert cm.ring_transfers_s(2, 1e-3, 1.5e-3) == pytest.approx(2e-3 + 1.5e-3)
    assert cm.ring_transfers_s(2, 1e-3, 1.5e-3) < (3 * 2 - 2) * 1e-3   # not four exchanges in a row
    assert cm.ring_transfers_s(4, 1e-3, 2e-3) == pytest.approx(4e-3 + 3 * 2e-3)
    assert cm.ring_transfers_s(1, 1e-3, 2e-3) == 0.0   # one process sends nothing


def test_bytes_memory_and_longest_sequence():
    b = cm.ring_bytes(1, 2, 64, 8, 4)
    block = 2 * 2 * 16 * 8  # K and V values a rank holds
    assert b.forward == 3 * block * 4 and b.backward == 3 * block * 4 + 4 * block * 4
    assert cm.ring_bytes(1, 2, 64, 8, 4, torch.bfloat16).backward == 3 * block * 2 + 4 * block * 4
    assert cm.ring_bytes(1, 2, 64, 8, 1).forward == 0
    one = cm.ring_memory_bytes(1, 8, 4096, 64, 4)
    assert one == 8 * 1024 * (8 * 64 * 4 + 4)
    longest = [cm.longest_sequence(2**26, p, heads=8, head_dim=64) for p in (2, 4, 8)]
    assert longest[1] == pytest.approx(2 * longest[0], rel=0.01)  # linear in P
    assert longest[2] == pytest.approx(2 * longest[1], rel=0.01)
    for p, t in zip((2, 4, 8), longest):
        assert t % (2 * p) == 0
        assert cm.ring_memory_bytes(1, 8, t, 64, p) <= 2**26
        assert cm.ring_memory_bytes(1, 8, t + 2 * p, 64, p) > 2**26
    assert cm.longest_sequence(10, 2) == 0
    # training: backward's peak adds dO and dQ, and K, V, dK, dV in hand and arriving: 14 D per row
    assert cm.ring_memory_bytes(1, 8, 4096, 64, 4, training=True) == 8 * 1024 * (14 * 64 * 4 + 8)
    assert cm.ring_memory_bytes(1, 8, 4096, 64, 1, training=True) == 8 * 4096 * (8 * 64 * 4 + 8)
    assert cm.ring_memory_bytes(1, 8, 4096, 64, 1) == 8 * 4096 * (4 * 64 * 4 + 4)
    trains = [cm.longest_sequence(2**26, p, heads=8, head_dim=64, training=True) for p in (1, 2, 4)]
    assert trains[2] == pytest.approx(2 * trains[1], rel=0.01)          # linear from P = 2
    assert trains[1] / trains[0] == pytest.approx(2 * 8 / 14, rel=0.01)  # P = 1 has no blocks in flight
    assert trains[1] < longest[0]                                       # training fits less than forward
    with pytest.raises(TypeError, match="training must be a bool"):
        cm.ring_memory_bytes(1, 8, 64, 64, 2, training=1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible by 8"):
        cp.segments(20, 0, 4, "zigzag")
    with pytest.raises(ValueError, match="divisible by 3"):
        cp.segments(20, 0, 3, "contiguous")
    with pytest.raises(ValueError, match="split"):
        cp.segments(24, 0, 3, "striped")
    with pytest.raises(ValueError, match="rank"):
        cp.segments(24, 3, 3, "contiguous")
    with pytest.raises(ValueError, match="tile"):
        cm.ring_work(64, 2, "zigzag", tile=6)
    with pytest.raises(ValueError, match="diagonal"):
        cm.ring_work(64, 2, "zigzag", diagonal="quarter")
    with pytest.raises(ValueError, match="work"):
        cm.imbalance([0, 0])
    q = torch.zeros(1, 1, 8, 4)
    with pytest.raises(ValueError, match="tile"):
        cp.ring_attention(q, q, q, tile=3)
    with pytest.raises(ValueError, match="q, k, v"):
        cp.ring_attention(q, q[..., :2], q)
    with pytest.raises(ValueError, match="split"):
        cp.ring_attention(q, q, q, split="random")
    with pytest.raises(ValueError, match="timeout_s"):
        cp.ring_attention(q, q, q, timeout_s=0)
    with pytest.raises(TypeError, match="stats"):
        cp.ring_attention(q, q, q, stats={})


def test_timed_imbalance():
    est = cm.timed_imbalance([[1.0, 1.1, 0.9, 1.0], [3.0, 3.2, 2.9, 3.0]])
    assert est.value == pytest.approx(3.0 * 2 / 4.0)  # medians 1.0 and 3.0
    assert est.low <= est.value <= est.high and est.n == 4
    assert cm.timed_imbalance([[2.0, 2.0], [2.0, 2.0]]).value == 1.0
    with pytest.raises(ValueError):
        cm.timed_imbalance([[1.0, 2.0], [1.0]])


def test_imbalance_noise_note_sets_the_ranks_medians_beside_the_round_figure():
    from perfkit.estimate import Estimate

    # two ranks of equal work whose rounds alternate which one is slower: every round's max over
    # mean is above 1, the ranks' medians equal
    ranks = [[1.0, 1.2, 1.0, 1.3, 1.0, 1.25, 1.0, 1.15], [1.2, 1.0, 1.3, 1.0, 1.25, 1.0, 1.15, 1.0]]
    timed = cm.timed_imbalance(ranks)
    assert timed.low > 1.0
    note = cm.imbalance_noise_note(ranks, timed, 1.0)
    # the old cell printed the round figure alone, its interval above the counted 1.000x without comment
    assert "at least 1 by construction" in note and "give 1.000x, against 1.000x counted" in note
    assert note.endswith(f"the round figure's {timed.label} lying above 1.000x does not by itself show more "
                         "imbalance than counted.")
    assert "does not by itself" not in cm.imbalance_noise_note(ranks, timed, 1.5)
    with pytest.raises(TypeError):
        cm.imbalance_noise_note(ranks, 1.1, 1.0)
    with pytest.raises(ValueError):
        cm.imbalance_noise_note([], Estimate(1.0, 1.0, 1.0, None, 1, "exact"), 1.0)


def test_waits_after_ready_leave_out_the_time_a_neighbour_had_not_sent():
    from perfkit.parallel import waits_after_ready

    # rank 0 posts at 0 and waits from 1 to 5; rank 1 was late: it posted at 4, so 1 s of
    # rank 0's 4 s wait was the transfer; rank 1 waited 4.5 -> 5, everyone's data long sent
    waits = [[(0.0, 1.0, 5.0)], [(4.0, 4.5, 5.0)]]
    assert waits_after_ready(waits) == pytest.approx([1.0, 0.5])
    # three ranks: each wait counts from its later neighbour's post; a wait over before the
    # neighbours sent (cannot happen) counts 0, never below
    three = [[(0.0, 1.0, 2.0), (3.0, 3.5, 4.0)],
             [(0.5, 1.0, 2.0), (3.8, 3.9, 4.0)],
             [(1.5, 1.6, 2.0), (2.0, 3.0, 3.2)]]
    assert waits_after_ready(three) == pytest.approx([0.5 + 0.2, 0.5 + 0.1, 0.4 + 0.0])
    with pytest.raises(ValueError, match="same number of waits"):
        waits_after_ready([[(0.0, 1.0, 2.0)], []])
    with pytest.raises(ValueError, match="posted, entered, left"):
        waits_after_ready([[(0.0, 1.0)], [(0.0, 1.0)]])


def test_split_cost_note_sets_what_the_even_split_cost_beside_what_it_bought():
    # the zig-zag split's ranks summed more compute than the contiguous split's for the same tiles,
    # and its busier rank gained far less than the imbalances alone suggest: the note says both
    got = cm.split_cost_note([[72.9e-3] * 3, [163e-3] * 3], [[152e-3] * 3, [132e-3] * 3], 2048)
    assert got.startswith(" For the same tile FLOPs the zigzag split's ranks' median compute sums to 284 ms, "
                          "1.20x the contiguous split's 236 ms; its busier rank's median, 152 ms, is 0.93x")
    assert "shortened the busier rank by 7%, though the zigzag split spent more compute time in all" in got
    slower = cm.split_cost_note([[0.1] * 3, [0.2] * 3], [[0.21] * 3, [0.2] * 3], 384)
    assert slower.startswith(" For 0.976x the tile FLOPs") and "did not shorten the busier rank" in slower
    even = cm.split_cost_note([[0.1] * 3, [0.2] * 3], [[0.15] * 3, [0.15] * 3], 2048)
    assert even.endswith("shortened the busier rank by 25%.")
