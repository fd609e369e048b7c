"""BatchCurve judges each batch against its predicted range with its interval, and names the gap."""

from perfkit.compute.batch_curve import BatchCurve

SEQ = 100


def make(times_1, fit_times=(0.1,) * 5):
    """Batches 1 and 2; eta fitted at batch 2, whose roof equals batch 1's doubled: batch 1's range is
    one point, 0.05 s a step (2,000 tokens/s), and its rounds are ``times_1``."""
    n = len(times_1)
    return BatchCurve((1, 2), SEQ, (0.5, 1.0), (0.5, 1.0), (0, 0), (tuple(times_1), tuple(fit_times[:n])),
                      ((0,) * n, (0,) * n), (0.0,) * n, 0.0, (0.0,) * n, 1)


def test_a_point_just_past_the_range_whose_interval_reaches_into_it_is_at_the_edge():
    # the old count judged the point alone: 1,999 tokens/s against a range ending at 2,000 was "outside"
    c = make((0.0495, 0.0498, 0.05003, 0.0502, 0.0505))
    assert round(SEQ / c.step_s(0).value) == 1999
    assert c.placement(0) == "at the edge" and ": at the edge;" in c.lines()[0]
    assert "93% interval 1,980 to 2,020)" in c.lines()[0]


def test_clear_intervals_are_inside_or_outside():
    assert make((0.06, 0.061, 0.062, 0.063, 0.064)).placement(0) == "outside"
    wide = BatchCurve((1, 2), SEQ, (0.5, 1.0), (0.4, 1.0), (0, 0), ((0.05,) * 5, (0.1,) * 5), ((0,) * 5,) * 2,
                      (0.0,) * 5, 0.0, (0.0,) * 5, 1)
    assert wide.placement(0) == "inside"   # no spread: the point, inside a range of two ends


def test_a_miss_names_the_gap_and_the_terms_it_ruled_out():
    c = make((0.06, 0.061, 0.062, 0.063, 0.064))
    below = c.explain(0)["below"]
    assert "took 62.0 ms against 50.0-50.0 ms predicted, 12.0 ms more than its terms add up to" in below
    assert "a cost it does not count" not in below and "already in the prediction" in below


def test_two_run_text_prints_each_ratio_there_over_here_and_names_opposite_moves():
    from perfkit.compute import throughput
    from perfkit.stats import Estimate

    here = Estimate(0.976, 0.949, 0.989, 0.93, 11, "median of 11 paired ratios")
    times = {32: (0.2204, 0.2043), 16: (0.0967, 0.0995)}   # notebook 06's: the old text printed 16's as 1.03x
    said = throughput.two_run_text(0.878, here, 0.9, (32, 16), times)
    assert "batch 32 220.4 ms there, 204.3 ms here (1.08x); batch 16 96.7 ms there, 99.5 ms here (0.97x)" \
        in said
    assert "moved opposite ways between the runs (batch 32 slower there, batch 16 faster there)" in said
