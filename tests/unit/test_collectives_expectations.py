"""Notebook 02's per-collective copy expectation, its fits table, and the ring verdict's range."""

import pytest

from perfkit import comm
from perfkit.comm import AlphaBeta, CollectivePoint, fit_quality, ring_allreduce_time, ring_check

SIZES = [1 << p for p in range(10, 27, 2)]


def _sweep(op, alpha, bw, tweak=None):
    out = []
    for s in SIZES:
        t = (alpha + s / bw) * (tweak or {}).get(s, 1.0)
        out.append(CollectivePoint(op, s, 2, t, s / t, s / t * comm.bus_factor(op, 2), 0.9 * t, 1.2 * t))
    return out


def test_loopback_copy_share_counts_each_collectives_own_copies():
    # the old notebook held every collective against a quarter; a 2-rank broadcast copies each byte twice
    assert comm.loopback_copy_share("all_reduce", 2) == pytest.approx(0.25)
    assert comm.loopback_copy_share("all_gather", 2) == pytest.approx(0.25)
    assert comm.loopback_copy_share("broadcast", 2) == pytest.approx(0.5)
    assert comm.loopback_copy_share("reduce_scatter", 2) == pytest.approx(0.125)  # gloo: all-reduce bytes
    assert comm.loopback_copy_share("all_reduce", 3) == pytest.approx(1 / 6)
    assert comm.loopback_copy_share("broadcast", 3) == pytest.approx(0.25)


def test_fits_table_holds_each_collective_against_its_own_expectation():
    # notebook 02's run: broadcast's busbw reached 0.29 of the buffer rate, above a quarter, below a half
    by_op = {"all_reduce": _sweep("all_reduce", 292e-6, 1.18e9, {1 << 12: 1.8}),
             "broadcast": _sweep("broadcast", 167e-6, 4.1e9, {1 << 26: 1.6})}
    fits = {op: comm.fit_alpha_beta([p.nbytes for p in ps], [p.time_s for p in ps])
            for op, ps in by_op.items()}
    q = {op: fit_quality(ps, fits[op]) for op, ps in by_op.items()}
    table = comm.fits_table(q, by_op, fits, 13.9e9)
    rows = {line.split(" | ")[0].strip(): line.split(" | ") for line in table.splitlines()[2:4]}
    assert rows["broadcast"][6].strip().startswith("0.28 (<= 0.5: below)")  # above a quarter
    assert rows["all_reduce"][6].strip().endswith("(<= 0.25: below)")
    assert "Every collective's peak busbw lies below its own expectation." in table
    assert "16.4 kB < 4.1 kB [1]" in table and "[1] all_reduce: 16.4 kB took" in table  # the inversion's note
    low = comm.fits_table(q, by_op, fits, 6e9)  # a slower copy: broadcast's 4.1 GB/s is above a half of it
    assert "Above its own expectation: broadcast;" in low


def test_ring_regime_is_judged_on_the_sizes_own_spread_with_soft_edges():
    from perfkit.verdict import Prediction, judge

    fit2, link = AlphaBeta(2e-4, 1e18), AlphaBeta(1e-4, 1e18)  # every size latency-bound, stretch 1.5
    ratios = [4.93, 4.90, 4.56, 4.54, 3.55]
    model = [ring_allreduce_time(s, 3, link) for s in SIZES[:5]]
    pts = [CollectivePoint("all_reduce", s, 3, r * m, 1.0, 1.0, 0.9 * r * m, 1.1 * r * m)
           for s, r, m in zip(SIZES, ratios, model, strict=False)]
    rc = ring_check(pts, fit2, cores=2)
    est = rc.regime(True)
    # the old range was the medians of each size's p10 and p90 (4.1x to 5.0x here), a home-made statistic
    assert (est.low, est.high) == (pytest.approx(3.55), pytest.approx(4.93))
    band = Prediction("ratio", "ring x 1.5 within 2x", low=0.75, high=3.0, unit="x", soft=("low", "high"))
    assert judge(band, est).outcome == "missed"  # every size lies above 3x
    straddle = ring_check(pts[:2] + [CollectivePoint("all_reduce", SIZES[2], 3, 2 * rc.model_s[2], 1, 1)],
                          fit2, cores=2).regime(True)
    assert judge(band, straddle).outcome == "inconclusive"  # a soft edge inside the sizes' spread


def test_fit_below_text_does_not_call_a_rate_under_the_fits_bandwidth_faster():
    # a QUICK run's reduce-scatter: 1.05 MB in 1.89 ms (554 MB/s), 0.83x the line, its bandwidth 595 MB/s;
    # the old text said "554 MB/s (algbw), faster than the fit's bandwidth"
    fit = AlphaBeta(511e-6, 595e6)
    pts = [CollectivePoint("reduce_scatter", s, 2, fit.predict(s), 1.0, 1.0) for s in SIZES[:5]]
    pts.append(CollectivePoint("reduce_scatter", 1 << 20, 2, 1.89e-3, 1.0, 1.0))
    said = comm.fit_below_text(pts, fit)
    assert "it moved 555 MB/s (algbw), under the fit's 595 MB/s" in said
    assert "faster than the fit's bandwidth" not in said
