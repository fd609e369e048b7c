"""What the capstone says about its whole gain: the slow job's runs behind the direct ratio,
the seams read as every arrow is, the waterfall's legend and the time to the target against
the same two runs' tokens/s (hand-made runs, as in test_capstone)."""

import math
from dataclasses import replace

import pytest

from perfkit.stats import Estimate
from perfkit.viz.capstone import (
    ceiling_text,
    headline_rate,
    plot_time_to_target,
    plot_waterfall,
    seams_text,
    tally_text,
    target_context,
    target_text,
    total_text,
)
from tests.unit.test_capstone import AGAIN, play_all


def test_the_direct_ratio_names_the_slow_runs_and_their_drift():
    # the slow job's repeat reads 1.25x slower: its two runs are 1.25x apart, as a round would say
    loop, total = play_all(True, {(): 1.25})
    AGAIN.clear()
    assert total.slow_runs_tps == (pytest.approx(250), pytest.approx(200))
    assert total.slow_tps == pytest.approx(225) and total.slow_apart == pytest.approx(1.25)
    said = total_text(total)
    assert "Slow job 225 (mean of its runs before and after the rounds: 250 and 200, 1.25x apart" in said
    assert "the machine's speed moved between the runs" in said
    steady = replace(total, slow_runs_tps=(250.0, 240.0), slow_tps=245.0)
    assert "250 and 240" in total_text(steady) and "apart" not in total_text(steady)
    quick = replace(total, slow_runs_tps=(250.0,), slow_tps=250.0)
    assert "mean of its runs" not in total_text(quick) and quick.slow_apart == 1.0


def test_the_direct_ratio_is_set_against_every_run_of_the_slow_job():
    # the run the reader saw: 34,031 tokens/s over the slow job's round-1 repeat, 6,586, is 5.17x,
    # below the direct gain's printed interval (5.25x to 8.52x), and nothing said so
    loop, total = play_all(True, {(): 1.25})
    AGAIN.clear()
    assert len(total.every_slow_tps) == 3 and total.every_slow_tps[0] == pytest.approx(250)
    assert "times in all" not in total_text(replace(total, every_slow_tps=total.slow_runs_tps))
    seen = replace(total, direct=Estimate(6.75, 5.25, 8.52, 0.9, 16, "m"), fixed_tps=34031.0,
                   slow_runs_tps=(5294.0, 4782.0), every_slow_tps=(5294.0, 6586.0, 5621.0, 4782.0))
    said = total_text(seen)
    assert "ran 4 times in all (5,294, 6,586, 5,621, 4,782 tokens/s" in said
    assert "6.43x, 5.17x, 6.05x, 7.12x; 1 of these lies outside this" in said
    inside = replace(seen, every_slow_tps=(5294.0, 5621.0, 4782.0))
    assert "each lies inside this" in total_text(inside) and "outside" not in total_text(inside)


def test_seams_read_as_every_arrow_second_over_first():
    loop, total = play_all(True, {})
    seams = (("the slow job", 100.0, 110.0), ("sync", 200.0, 220.0), ("data", 300.0, 300.0))
    said = seams_text(replace(total, seams=seams))
    # 100 -> 110 and 200 -> 220 read as 1.1x each, as "5,462 -> 41,205: 7.54x" reads: 1.21x, not 0.826x
    assert "multiply to 1.21x, the direct gain over the product" in said and "0.826" not in said
    assert math.prod(b / a for _, a, b in seams) == pytest.approx(1.21)


def test_time_to_target_is_held_against_the_same_two_runs():
    loop, total = play_all(True, {(): 1.25})  # direct 2000 / 225 = 8.89x; this pair 2000 / 250 = 8x
    AGAIN.clear()
    pair = Estimate(8.0, 7.0, 9.0, 0.9, 6, "m")
    said = target_text(4.0, 1.6, pair, total)  # 6.4x over the runs
    assert "so tokens/s over the runs to the target 6.40x, against 8.00x in the same two runs'" in said
    assert "puts it 0.80x from those steps' ratio" in said and "the data's preparation" in said
    # the direct ratio's slow side is the mean of two runs: named, with how far it puts it
    assert "The direct ratio, 8.89x, has another baseline" in said and "250 and 200 tokens/s" in said
    assert "1.11x from this pair's" in said
    # each run over its whole run against its own measured steps: the slow one 1.25x faster over its run
    runs = target_text(4.0, 1.6, pair, total, (250.0, 200.0))
    assert "the slow run made 1.25x the tokens/s of its measured steps, the fixed run 1.00x its own" in runs
    assert "so the slow run's steps outside the window (warm-up included) took less on average" in runs
    assert "puts it 0.80x" not in runs and "fixed run's steps outside" not in runs
    assert "outside the window" not in target_text(4.0, 1.6, pair, total, (200.0, 250.0))  # 0.8x, 0.64x
    close = target_text(4.0, 2.0, pair, replace(total, slow_runs_tps=(250.0,), direct=pair))
    assert "puts it" not in close and "baseline" not in close  # 8.0x against 8.0x, one slow run
    with pytest.raises(TypeError, match="pair"):
        target_text(4.0, 1.6, 8.0, total)
    with pytest.raises(ValueError, match="tt_gain"):
        target_text(0.0, 1.6, pair, total)


def test_the_headline_rate_sets_the_runs_to_the_target_beside_the_direct_figure():
    # as run: the headline read "9.00x measured directly" while the same pair's whole runs to the
    # target gave 5.99x, printed only in section 4
    loop, total = play_all(True, {(): 1.25})  # direct 2000 / 225 = 8.89x
    AGAIN.clear()
    said = headline_rate(total, {"slow": (4.0, 1000), "fixed": (1.0, 1600)})  # 6.40x over the runs
    assert "8.89x measured directly in the runs' measured steps" in said
    assert "to the target (the data's preparation and every step counted, one run a side) 6.40x" in said
    assert "0.72x the direct figure" in said and "not their mean" not in said
    near = headline_rate(total, {"slow": (1.0, 225), "fixed": (1.0, 2000)})
    assert "within a twentieth of the direct figure" in near
    for reach in (None, {}, {"slow": None, "fixed": (1.0, 2000)}):
        assert "to the target" not in headline_rate(total, reach) and "8.89x" in headline_rate(total, reach)
    assert "the mean of two slow runs 1.25x apart" in said
    with pytest.raises(ValueError, match="slow seconds"):
        headline_rate(total, {"slow": (0.0, 1000), "fixed": (1.0, 1600)})


def test_the_waterfall_legend_names_its_colours_below_the_bars():
    fig = plot_waterfall([("a", 2.0), ("b", 1.05)], total=2.1, unresolved=["b"])
    leg = fig.axes[0].get_legend()
    labels = [t.get_text() for t in leg.get_texts()]
    assert labels == ["a gain: interval above 1x, or its bound's parts fell past the steps' spread",
                      "applied, not credited: interval holds 1x, its bound's parts within the steps' spread",
                      "total, measured directly"]
    fig.canvas.draw()
    box, axes = leg.get_window_extent(), fig.axes[0].get_window_extent()
    assert box.y1 < axes.y0  # below the axes: it covers no bar
    plain = [t.get_text() for t in plot_waterfall([("a", 2.0), ("b", 0.8)]).axes[0].get_legend().get_texts()]
    assert plain == ["faster", "slower", "total"]  # no intervals given: no claim about them


def test_the_waterfall_axis_ends_near_its_tallest_bar():
    # a 6.12x total (log2 2.61) ended at 16x: a tick past the limits widened the axis
    ax = plot_waterfall([("a", 1.69), ("b", 1.93), ("c", 1.12), ("d", 1.67)], total=6.12).axes[0]
    assert ax.get_ylim()[1] < 4.0 and max(ax.get_yticks()) <= ax.get_ylim()[1]


def test_the_loss_curve_names_its_loss():
    fig = plot_time_to_target({"slow": ([1.0, 2.0], [6.0, 5.0])}, 5.2, ylabel="mean loss, last 4096 tokens")
    assert fig.axes[0].get_ylabel() == "mean loss, last 4096 tokens"
    with pytest.raises(TypeError, match="ylabel"):
        plot_time_to_target({"slow": ([1.0, 2.0], [6.0, 5.0])}, 5.2, ylabel=3)


def test_the_verdicts_are_counted_by_what_bounded_them():
    outcomes = {"sync": "inconclusive", "ddp": "missed (above)", "data": "inconclusive",
                "attention": "context", "batch": "held"}
    by = {"sync": "the diagnosed share", "ddp": "the diagnosed share", "data": "the diagnosed share",
          "batch": "its factor of tokens"}  # attention: context, not judged
    assert tally_text(outcomes, by) == ("against the diagnosed share: 0 held, 1 missed, 2 inconclusive of 3; "
                                        "against its factor of tokens: 1 held, 0 missed, 0 inconclusive of 1")
    assert "1 disturbed" in tally_text({"a": "disturbed"}, {"a": "x"}) and tally_text({}, {}) == "none"


def test_the_tally_says_when_the_shares_went_untested():
    # the run the reader saw: both share rounds inconclusive, the batch round held against its tokens;
    # the planted version tested every judged outcome together, so batch's "held" hid the caveat
    outcomes = {"data": "inconclusive", "sync": "context", "ddp": "inconclusive", "batch": "held"}
    by = {"data": "the diagnosed share", "ddp": "the diagnosed share", "batch": "its factor of tokens"}
    thesis = ("the diagnosed share", "whether the diagnosed shares predict the gains")
    said = tally_text(outcomes, by, thesis)
    assert said.endswith("; no round judged against the diagnosed share held or missed: this run did not "
                         "test whether the diagnosed shares predict the gains")
    assert "did not test" not in tally_text({**outcomes, "ddp": "missed (above)"}, by, thesis)
    none_judged = tally_text({"batch": "held"}, {"batch": "its factor of tokens"}, thesis)
    assert "did not test" in none_judged
    with pytest.raises(TypeError, match="tests"):
        tally_text(outcomes, by, "the diagnosed share")


def test_the_tally_counts_context_rounds_and_says_how_far_the_factor_moved():
    # the run the reader saw: two rounds context, the summary said every round was judged, and the
    # factor that scaled every share moved 1.20 -> 2.01 -> 1.83 -> 1.28 -> 1.55 unremarked
    outcomes = {"data": "inconclusive", "sync": "inconclusive", "ddp": "context, interval holds 1x",
                "attention": "context, interval holds 1x", "batch": "held"}
    by = {"data": "the diagnosed share", "sync": "the diagnosed share", "batch": "its factor of tokens"}
    said = tally_text(outcomes, by, None, [1.20, 2.01, 1.83, 1.28, 1.55])
    assert "2 of the 5 rounds shown as context, not judged (ddp, attention)" in said
    assert "1.20 -> 2.01 -> 1.83 -> 1.28 -> 1.55" in said and "1.67x from its lowest to its highest" in said
    assert "hold only as well as that premise does" in said
    assert "took no longer unprofiled than profiled" in said
    steady = tally_text({"batch": "held"}, {"batch": "x"}, None, [1.2, 1.25])
    assert "within a tenth" in steady and "context" not in steady
    assert tally_text(outcomes, by) == tally_text(outcomes, by, None, None)  # without factors: as before
    with pytest.raises(ValueError, match="factors"):
        tally_text(outcomes, by, None, [])


def test_the_tally_says_a_context_round_measured_slower_and_the_factors_below_1():
    # the run the reader saw: a context round's interval wholly below 1x tallied as "0 missed" with
    # nothing said, and the factor "never taken below 1" listed as 0.97, the dropped fix's 0.67 left out
    outcomes = {"sync": "context, slower", "ddp": "held", "attention": "context, interval holds 1x"}
    by = {"ddp": "the diagnosed share"}
    said = tally_text(outcomes, by, None, [1.11, 0.67, 0.97, 1.85])
    assert "of them, sync measured an interval wholly below 1x" in said
    assert "counted neither as missed nor above" in said and "attention measured" not in said
    assert "never taken below 1" not in said and "1.11 -> 0.67 -> 0.97 -> 1.85" in said
    assert "as 0.67 and 0.97 did" in said and "2.76x from its lowest to its highest" in said
    plain = tally_text({"a": "context, faster", "b": "held"}, {"b": "x"}, None, [1.2, 1.5])
    assert "wholly below" not in plain and "fell below 1" not in plain


def test_the_waterfall_draws_each_rounds_interval():
    # the planted figure drew every round's ratio with no interval, though 3 of 5 held 1x
    ax = plot_waterfall([("a", 2.0), ("b", 1.5)], total=2.0, intervals=[(1.5, 3.0), (0.8, 2.5)],
                        total_interval=(1.6, 2.6)).axes[0]
    spans = [tuple(line.get_ydata()) for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[-1]]
    assert (pytest.approx(math.log2(1.5)), pytest.approx(math.log2(3.0))) in spans
    assert (pytest.approx(math.log2(2.0 * 0.8)), pytest.approx(math.log2(2.0 * 2.5))) in spans
    assert (pytest.approx(math.log2(1.6)), pytest.approx(math.log2(2.6))) in spans
    assert "its interval, as printed" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_ylim()[1] > math.log2(5.0)  # the highest end is inside the axes
    with pytest.raises(ValueError, match="intervals"):
        plot_waterfall([("a", 2.0)], intervals=[(1.5, 3.0), (1.0, 2.0)])
    with pytest.raises(ValueError, match="total_interval"):
        plot_waterfall([("a", 2.0)], total_interval=(3.0, 1.0))


def test_the_time_to_target_is_context_not_a_verdict():
    # one run a side: a verdict on one ratio could only read inconclusive, so it was a prediction
    # that could not be decided; it is printed as context beside its expected range, no verdict
    pair = Estimate(6.43, 5.1, 8.11, 0.9, 16, "m")
    text = target_context(3.04, 1.59, pair, batch_kept=True)
    assert text.startswith("ℹ️ **Context, not a prediction**") and "No verdict is recorded" in text
    assert "expected between 1x and 8.11x" in text and "at least 5 samples" in text
    assert "lies inside that range" in text and "the larger batch takes fewer" in text
    assert "inconclusive: " not in text and "held" not in text
    assert "lies above its top, 8.11x" in target_context(9.0, 0.8, pair, True)
    assert "fewer than the slow one" in target_context(9.0, 0.8, pair, True)
    below = target_context(0.9, 2.0, pair, True)
    assert "lies below 1x" in below and "at 6.43x the tokens/s" in below
    assert "speed." in target_context(1.5, 1.0, Estimate(1.6, 1.2, 1.9, 0.9, 8, "m"), batch_kept=False)
    assert "is wide" not in target_context(1.5, 1.0, Estimate(1.6, 1.2, 1.9, 0.9, 8, "m"), False)
    with pytest.raises(ValueError):
        target_context(0.0, 1.0, pair, True)
    with pytest.raises(TypeError):
        target_context(1.0, 1.0, 2.0, True)


def test_the_ceiling_is_read_over_the_unprofiled_step_and_the_window():
    # the run the reader saw: 66.1% of a 48.9 ms window is 32.3 ms, more than the 30.1 ms unprofiled
    # step, where the old line applied the share alone (19.9 ms) and called 5.5 ms 27% of it
    text = ceiling_text(0.661, 0.0301, 0.0489, 0.0055, 205e9)
    assert "19.9 ms (as if the profiler stretched every phase alike)" in text and "step 32.3 ms" in text
    assert "5.5 ms, 28% and 17% of those: far from the ceiling by both" in text
    assert "near the ceiling by both" in ceiling_text(0.5, 0.010, 0.012, 0.004, 205e9)
    assert "this run does not say which" in ceiling_text(0.5, 0.010, 0.020, 0.004, 205e9)
    with pytest.raises(ValueError):
        ceiling_text(0.0, 0.01, 0.01, 0.001, 1e9)


def test_the_window_note_says_the_profiler_weighed_alike_when_its_factors_agree():
    from perfkit.profiling.capstone_explain import _window

    # notebook 08's sync round: the window gained 1.50x, the runs 0.96x; the profiled steps took
    # 1.11x the unprofiled median both before and after: the old note said "did not weigh alike"
    before, after = {"step_times_s": [0.030] * 4}, {"step_times_s": [0.020] * 4}
    alike = _window(0.96, before, after, 1.0, 1.11, 1.11)
    assert "within a tenth of each other, so the profiler weighed on the two about alike" in alike
    assert "did not weigh" not in alike
    apart = _window(0.96, before, after, 1.0, 1.11, 1.50)
    assert "did not weigh on the two alike" in apart and "about alike" not in apart
