"""perfkit.comm.peak_busbw_text: the verdict's size and the table's peak, each named with its share."""

import pytest

from perfkit.comm import CollectivePoint, peak_busbw_text


def point(nbytes, busbw):
    return CollectivePoint("all_reduce", nbytes, 2, 1e-3, busbw, busbw)


def test_the_sentence_names_the_peak_the_table_shows_beside_the_size_the_verdict_judges():
    """Notebook 02 said the peak (0.12 at 16.8 MB) was the verdict, which judged 67.1 MB (0.0976)."""
    pts = [point(4_190_000, 1.2e9), point(16_800_000, 1.7e9), point(67_100_000, 1.376e9)]
    said = peak_busbw_text(pts, pts[-1], 14.1e9, 0.25)
    assert said == (" The sweep's peak busbw, 1.7 GB/s at 16.8 MB (the table's), is 0.12 of that rate, "
                    "1.2x the judged size's, at or below the expected 0.25; the verdict judges 67.1 MB, the "
                    "largest size, the model's bandwidth-bound end.")
    assert "above the expected 0.1" in peak_busbw_text(pts, pts[-1], 14.1e9, 0.1)
    assert peak_busbw_text(pts[:2], pts[1], 14.1e9, 0.25) == (
        " The judged size, 16.8 MB, is also the sweep's peak busbw.")
    with pytest.raises(ValueError, match="bytes_per_s"):
        peak_busbw_text(pts, pts[-1], 0.0, 0.25)
