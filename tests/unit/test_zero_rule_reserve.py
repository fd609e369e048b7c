"""The ZeRO rule's "fits" (module 09): a stated reserve per rank, and each row's headroom."""

import pytest

from perfkit.memory import claims

GPU = 80 * 2**30 / 1e9  # an "80 GB" card, in the decimal GB zero_model_states counts


def test_a_stage_within_the_reserve_of_the_card_does_not_fit():
    # as run: 30 B at stage 3 held 79.6 of 80 GiB and was called fitting, 0.4 GiB to spare
    bare = {r.billions: r for r in claims.zero_rule_rows([13, 30], GPU, 8, tokens=2048)}
    assert bare[30].lowest_fitting == 3
    assert bare[30].headroom_gb * 1e9 / 2**30 == pytest.approx(0.4, abs=0.05)
    kept = {r.billions: r for r in claims.zero_rule_rows([13, 30], GPU, 8, tokens=2048,
                                                         reserve_gb=4 * 2**30 / 1e9)}
    assert kept[30].lowest_fitting is None and not kept[30].rule_wrong  # none fits: stage 3 is still right
    assert kept[30].headroom_gb == pytest.approx(bare[30].headroom_gb)  # at stage 3, below the reserve
    assert kept[13].lowest_fitting == 2 and kept[13].rule_wrong
    assert kept[13].headroom_gb * 1e9 / 2**30 == pytest.approx(80 - 59.0, abs=0.1)
    with pytest.raises(ValueError, match="reserve_gb"):
        claims.zero_rule_rows([13], GPU, 8, reserve_gb=GPU)
