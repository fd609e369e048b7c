"""The tile-size prediction's band: the judged tile's own fitted misses, never another tile's."""

import pytest

from perfkit.compute import attention_cost as ac
from perfkit.compute.flash import flash_flops
from perfkit.estimate import Estimate


def _timed(model, tile, seq_len, miss):
    f = flash_flops(1, 4, seq_len, 32, tile=tile)
    return ac.AttentionTiming("flash", seq_len, tile, (model.flash_s(seq_len, tile) * (1 + miss),),
                              f.forward + f.backward, f.tiles)


MODEL = ac.TileCostModel(2e10, 5e-5, 1e10)
# tile 16 misses by +144% at T = 512; tile 64, the judged one, by at most +12% where it was fitted
MISSES = {(16, 256): -0.14, (16, 512): 1.44, (16, 1024): 0.05, (16, 1536): 0.1,
          (64, 256): 0.12, (64, 512): 0.02, (64, 1024): -0.03, (64, 1536): 0.44}
PTS = [_timed(MODEL, t, n, m) for (t, n), m in MISSES.items()]


def test_tile_band_is_the_judged_tiles_own_largest_fitted_miss():
    # the old band was the largest miss over every tile size: 1.44, tile 16's, borrowed
    assert ac.tile_band(PTS, MODEL, 64) == pytest.approx(0.12)
    assert ac.tile_band(PTS, MODEL, 16) == pytest.approx(1.44)   # the longest length never enters
    with pytest.raises(ValueError, match="tile 128 needs a flash timing at a fitted length"):
        ac.tile_band(PTS, MODEL, 128)
    with pytest.raises(TypeError, match="AttentionTiming"):
        ac.tile_band([1.0], MODEL, 64)


def test_band_note_names_the_tiles_own_band_and_the_others_as_context():
    note = ac.band_note(PTS, MODEL, 64)
    # the old note: "the band is ±144%, set by one point, tile 16's at T = 512"
    assert note == ("the band is ±12%, tile 64's own largest miss at the fitted lengths (at T = 256); over "
                    "every tile size the 6 fitted points lie within -14% to +144%, the largest tile 16's at "
                    "T = 512 (+144%)")
    assert ac.band_note(PTS, MODEL, 16).endswith("lie within -14% to +144%")


def test_tile_miss_note_judges_against_the_own_band_and_puts_the_point_miss_first():
    pred = MODEL.flash_s(1536, 64)
    measured = Estimate(pred * 1.44, pred * 1.42, pred * 1.8, 0.9, 5, "median of 5 samples")
    note = ac.tile_miss_note(PTS, MODEL, 64, measured=measured)
    # the old note called ±144% the band and offered a band without tile 16's point as an aside
    assert note.startswith("The predicted ")
    assert "itself lies below the measured 90% interval" in note and "this one is ±12%." in note
    assert "The band, ±12%, is this tile's own largest miss where the model was fitted." in note
    assert "Without" not in note and "144" not in note
