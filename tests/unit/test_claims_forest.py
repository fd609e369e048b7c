"""viz.plot_claims_forest: each speed claim's measured figure and interval against the range
the advice promises (notebook 09's summary figure)."""

import math

import matplotlib.pyplot as plt
import pytest

from perfkit import viz
from perfkit.verdict import Claim, Prediction, assess

SPEED = Claim(statement="s", figure="speedup", low=1.4, partly=1.0, unit="x")
COUNT = Claim(statement="c", figure="buckets", low=1)


def test_one_row_per_claim_in_the_unit_with_its_interval_and_promise():
    verdicts = {"amp": assess(SPEED, 0.2, (0.18, 0.22)), "compile": assess(SPEED, 1.5, (1.45, 1.6)),
                "count": assess(COUNT, 3),
                "exact": assess(Claim("e", "ratio", low=0.9, high=1.1, unit="x"), 1.0),
                "a/a": assess(SPEED, 1.04, (0.9, 1.2), gpu_only=True, not_judged="both ran the same code")}
    fig = viz.plot_claims_forest(verdicts)
    ax = fig.axes[0]
    # no count row, and no row whose figure says nothing about the advice (not judged)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["amp", "compile", "exact"]
    bands = [(p.get_x(), p.get_x() + p.get_width()) for p in ax.patches]
    assert bands[0][0] == pytest.approx(1.4) and bands[2] == (pytest.approx(0.9), pytest.approx(1.1))
    segments = [tuple(line.get_xdata()) for line in ax.lines if len(line.get_xdata()) == 2
                and line.get_linestyle() == "-"]
    intervals = [x for x in segments if x[0] != x[1]]
    assert (0.18, 0.22) in intervals and (1.45, 1.6) in intervals
    assert len(intervals) == 2  # none for an exact figure
    caps = sorted(x[0] for x in segments if x[0] == x[1])  # each interval capped at both ends
    assert caps == [0.18, 0.22, 1.45, 1.6]
    points = sorted(line.get_xdata()[0] for line in ax.lines if line.get_marker() == "o")
    assert points == [0.2, 1.0, 1.5]
    assert ax.get_xscale() == "log" and ax.get_xlim()[0] < 0.18 and ax.get_xlim()[1] > 1.6
    plt.close(fig)


def test_no_effect_ticks_only_on_rows_whose_claim_names_one():
    """A speedup's no-effect value (partly=1) is ticked on its own row; a ratio promised as a
    multiple (Adam's state at 2x the weights, no no-effect value) gets no tick (planted: one
    dashed line at 1x across every row, which read 1x as no effect for Adam's row too)."""
    adam = Claim("Adam needs 2x", "state / weights", low=1.98, high=2.02, unit="x", timed=False)
    fig = viz.plot_claims_forest({"amp": assess(SPEED, 0.2, (0.18, 0.22)), "adam": assess(adam, 2.0)})
    ax = fig.axes[0]
    ticks = [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.lines
             if line.get_linestyle() == "--"]
    assert ticks == [((1.0, 1.0), (pytest.approx(-0.4), pytest.approx(0.4)))]  # row 0 (amp) only
    plt.close(fig)


@pytest.mark.parametrize("verdicts, unit, exc, match", [
    ({}, "x", ValueError, "verdicts"),
    ({"a": "holds"}, "x", TypeError, "ClaimVerdict"),
    ({"a": assess(COUNT, 3)}, "x", ValueError, "unit 'x'"),
    ({"a": assess(SPEED, math.inf)}, "x", ValueError, "finite"),
    ({"a": assess(SPEED, 1.5)}, 3, TypeError, "unit must be"),
])
def test_bad_input_is_refused(verdicts, unit, exc, match):
    with pytest.raises(exc, match=match):
        viz.plot_claims_forest(verdicts, unit)


def test_the_thread_spreads_name_the_steadiest_count_and_test_no_premise():
    # one thread 19 %, two 21 %, four 14 %: the old line said "one thread was the steadier, as expected"
    said = viz.claims.thread_spread_text({1: 0.19, 2: 0.21, 4: 0.14}, 18)
    assert "spread over their median, 19% with 1 thread, 21% with 2 threads, 14% with 4 threads;" in said
    assert "4 threads were the steadiest here, not one" in said and "as the premise expects" not in said
    assert "spreads from 18 rounds each carry no interval" in said
    assert "ran on one thread all the same" in said
    one = viz.claims.thread_spread_text({1: 0.10, 2: 0.21}, 18)
    assert "one thread was the steadiest here" in one and "all the same" not in one
    with pytest.raises(ValueError, match="spread must"):
        viz.claims.thread_spread_text({2: 0.1, 4: 0.2}, 18)
    with pytest.raises(ValueError, match="rounds"):
        viz.claims.thread_spread_text({1: 0.1, 2: 0.2}, 0)


def test_the_control_says_what_it_resolves_and_why_identical_loops_part():
    from perfkit.data.claims import PinTiming
    from perfkit.stats import Estimate
    from perfkit.timing import Measurement

    # identical loops 3 % apart in both orders, with no position effect: not the position's
    aa = PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.03,) * 10, 0), "cpu")
    said = viz.claims.control_order_text(aa)
    # each order's median printed to four digits: at two, one order once read "1.00x" beside "above 1x"
    assert "both orders' medians read below 1x (0.9709x and 0.9709x), so the 2.9% between identical" in said
    assert "position (0.0%)" in said
    lines = viz.claims.control_text(aa, 0.05)
    assert lines.startswith("identical loops read 0.971x over 10 rounds, their interval reaching 2.9% "
                            "from 1x: under the 5%")
    # the reach is that loop's noise at its rounds, not the error of the other designs
    assert "so this loop's own noise at 10 rounds alone cannot push" in lines
    assert "It is not the error of the other designs below" in lines
    assert "an interval within 2.9% of the edge that decides it" in lines
    # the reach is one loop's paired noise within one run: it said nothing of separate runs or orders
    assert "That 2.9% is the paired noise of one single-process loop at 10 rounds within one run" in lines
    assert "could push" in viz.claims.control_text(aa, 0.02)
    # the design was predicted to keep within 2 %: a reach of 2.9 % missed that, and the sentence says so
    # (it used to say only "under the 5%", a looser criterion than the prediction's)
    missed = viz.claims.control_text(aa, 0.05, target=0.02)
    assert ("2.9% from 1x: past the 2% the design was predicted to keep (how far the interval reaches "
            "against what the design aimed for, not the verdict above, which judges the figure, 0.971x, with "
            "its interval); under the 5%") in missed
    assert "of the edge below" not in missed  # the reach against the edge is the clause that follows
    assert "missed" not in missed  # a reach past the aim is not the A/A prediction's verdict
    assert "(copies A and B: the same unpinned loop" in said and "A first" in said
    assert "pageable first" not in said
    assert "within the 3% the design was predicted to keep; under" in viz.claims.control_text(aa, 0.05, 0.03)
    compiled, gelu = Estimate(0.978, 0.967, 0.987, 0.9, 16, "m"), Estimate(0.9, 0.88, 0.92, 0.9, 16, "m")
    assert viz.claims.control_gap_text(aa, compiled, 1.0) == (
        "lies 1.3% below 1x, within the A/A control's 2.9%: not asserted")
    assert viz.claims.control_gap_text(aa, gelu, 0.957) == (
        "lies 3.9% below 0.957x, beyond the A/A control's 2.9%")
    assert viz.claims.control_gap_text(aa, compiled, 0.98) == "holds 0.98x"
    gpu = PinTiming(aa.pageable, aa.pinned, "cuda")
    assert "no A/A control ran" in viz.claims.control_gap_text(gpu, gelu, 0.957)
    with pytest.raises(ValueError, match="no control"):
        viz.claims.control_text(gpu, 0.05)
    with pytest.raises(ValueError, match="edge"):
        viz.claims.control_text(aa, 0)
    with pytest.raises(TypeError, match="pin must be"):
        viz.claims.control_gap_text(0.97, gelu, 1.0)
    with pytest.raises(TypeError, match="est must be"):
        viz.claims.control_gap_text(aa, 0.97, 1.0)


def test_a_verdict_is_weighed_by_the_control_only_where_its_reach_changes_the_outcome(capsys):
    from perfkit.data.claims import PinTiming
    from perfkit.stats import Estimate
    from perfkit.timing import Measurement
    from perfkit.verdict import Prediction

    aa = PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.03,) * 10, 0), "cpu")  # reach 2.9 %
    faster = Prediction("speedup", "m", low=1.0, unit="x")
    near = Estimate(1.02, 1.01, 1.03, 0.9, 16, "m")   # held, but within the control's reach of 1x
    far = Estimate(1.2, 1.15, 1.25, 0.9, 16, "m")     # held, far beyond it
    said = viz.claims.weighed_text(aa, faster, near)
    assert said.startswith("weighed by the A/A control's 2.9%") and "would be inconclusive, not held" in said
    assert viz.claims.weighed_text(aa, faster, far) == ""
    gpu = PinTiming(aa.pageable, aa.pinned, "cuda")  # no control: nothing to weigh by
    assert viz.claims.weighed_text(gpu, faster, near) == ""
    viz.claims.weighed_verdict(aa, faster, near)
    assert "would be inconclusive" in capsys.readouterr().out
    with pytest.raises(TypeError, match="control must be a PinTiming"):
        viz.claims.weighed_text(0.03, faster, near)
    with pytest.raises(TypeError, match="measured must be an Estimate"):
        viz.claims.weighed_verdict(aa, faster, 1.02)


def test_a_verdict_undecided_on_no_effect_yet_wholly_outside_its_promise_does_not_hold():
    from perfkit.stats import Estimate

    # GELU as measured: promise at least 1.05x, 0.949x (0.943x to 0.967x), 3.3 % from 1x within the A/A
    # control's 4.0 %: undecided on 1x, yet the whole interval lies 7.9 % below the promise, so on either
    # side of 1x the promise fails: the label once said inconclusive while its text said refuted
    gelu = assess(Claim("GELU", "speedup", low=1.05, partly=1.0, unit="x"),
                  Estimate(0.949, 0.943, 0.967, 0.9, 16, "m"), error=0.04)
    assert gelu.status == "does not hold here" and gelu.refuted
    assert gelu.text.startswith("**Verdict on the advice: does not hold here.**")
    assert "lies 7.9% below the promise (at least 1.05x), beyond the 4.0%" in gelu.text
    assert "on either side the promise does not hold here" in gelu.text and "inconclusive" not in gelu.text
    head = viz.claims.claims_headlines({"g": gelu})["g"]
    assert head.startswith("does not hold here, whatever its side of no effect, which this run cannot tell")
    assert "its side of no effect undecided" in viz.claims.claims_table_rows({"g": gelu})[0][2]
    # a figure above 1x there lies where the advice would hold partly: said as where the figure lies
    up = assess(Claim("GELU", "speedup", low=1.05, partly=1.0, unit="x"),
                Estimate(1.005, 0.99, 1.006, 0.9, 16, "m"), reasons={"holds partly": "Why."}, error=0.004)
    assert up.status == "does not hold here"
    assert "The figure lies where the advice holds partly: Why." in up.text
    near = assess(Claim("GELU", "speedup", low=1.05, partly=1.0, unit="x"),
                  Estimate(1.0, 0.99, 1.03, 0.9, 16, "m"), error=0.04)  # 1.9 % below: within the control's
    assert near.status == "inconclusive" and not near.refuted and "refuted" not in near.text
    # the A/A figure shown under pin_memory's GPU-only verdict is not the advice's measurement: said
    aa = assess(SPEED, 1.02, (1.0, 1.04), gpu_only=True, not_judged="both ran the same code")
    assert viz.claims.claims_headlines({"p": aa})["p"] == (
        "GPU only (not judged: its figure, 1.02x (spread 1.00x to 1.04x), says nothing about the advice "
        "here)")


def test_a_side_decided_by_the_control_reachs_last_digits_says_so():
    from perfkit.stats import Estimate

    # DataLoader workers as measured: the interval's top 1.0044563x lies 4.33749 % below the promise
    # 1.05x, the A/A control's reach 4.33683 %: refuted by 0.00066 points, which "4.3% beyond 4.3%" hid
    claim = Claim("workers", "speedup", low=1.05, partly=1.0, unit="x")
    dl = assess(claim, Estimate(0.98, 0.96, 1.0044563, 0.9, 16, "m"), error=0.0433683)
    assert dl.status == "does not hold here" and dl.refuted and dl.thin
    assert "lies 4.3375% below the promise (at least 1.05x), beyond the 4.3368%" in dl.text
    assert "the rule's call, not a finding" in dl.text
    assert "margin under a tenth" in viz.claims.claims_headlines({"d": dl})["d"]
    assert "a tenth of the A/A control's reach" in viz.claims.claims_table_rows({"d": dl})[0][2]
    # GELU as measured: the top 0.9566x lies just beyond the 4.3368 % reach from 1x: does not hold, said thin
    gelu = assess(claim, Estimate(0.943, 0.934, 0.95662, 0.9, 16, "m"), error=0.0433683)
    assert gelu.status == "does not hold here" and gelu.thin
    assert "lies 4.338% from 1x, beyond the 4.337% an A/A control read" in gelu.text
    # a side set with room to spare says nothing more
    far = assess(claim, Estimate(0.9, 0.88, 0.92, 0.9, 16, "m"), error=0.0433683)
    assert not far.thin and "A/A" not in far.text


def test_a_roofline_bound_whose_floor_lies_under_the_calls_own_time_is_context():
    from perfkit.stats import Estimate

    # grouped convolution as measured: dense 4.29 ms over the grouped floor 0.5 ms = 8.58x, the grouped
    # call's median 1.5 ms: the floor lies under it (the ceiling raised to its rate), so the bound is at
    # least the medians' ratio 2.86x by construction and cannot fail
    bound = Prediction("groups=8 speedup", "dense time over the grouped call's floor", high=8.58, unit="x")
    grp = Estimate(2.86, 2.8, 2.9, 0.9, 27, "m")
    said = viz.claims.floor_context(bound, grp, (0.0005, 0.0015))
    assert said.startswith("**Context, not a prediction**")
    assert "at least the ratio of the two medians, 2.86x, by construction" in said
    assert viz.claims.floor_context(bound, grp, (0.002, 0.0015)) == ""  # a floor above the time: it can fail
    with pytest.raises(ValueError, match="floor"):
        viz.claims.floor_context(bound, grp, (0.0, 0.0015))


def test_a_verdict_is_weighed_again_by_its_jobs_own_same_layout_gap():
    # DDP's buckets as measured: 500 MB 1.14x (1.05x to 1.22x) over the default, weighed by a 3.9% A/A
    # reach, while 25 MB and 500 MB, the same layout, ran 19.0 and 17.8 ms: a 6.7% gap the verdict ignored
    from perfkit.estimate import Estimate
    from perfkit.viz.claims import same_layout_text

    claim = Claim("s", "step speedup", low=1.05, partly=1.0, unit="x")
    est = Estimate(1.14, 1.05, 1.22, 0.9, 28, "m")
    text = same_layout_text(claim, est, 0.019, 0.0178, 0.039, "25 MB and 500 MB")
    assert "lay 1.07x apart" in text and "6.7%, is wider than the 3.9%" in text
    assert "the rule gives inconclusive, not holds partly" in text
    calm = same_layout_text(claim, est, 0.0179, 0.0178, 0.039, "25 MB and 500 MB")
    assert "no wider than the 3.9%" in calm and "holds partly as well." in calm
    with pytest.raises(ValueError, match="a_s must be a finite time > 0 in seconds"):
        same_layout_text(claim, est, 0.0, 0.0178, 0.039, "x")
    # the gap and the two statuses, shared with order_gap_text
    from perfkit.viz.claims_text import gap_statuses

    gap, base, alt = gap_statuses(claim, est, 0.039, {"a": 0.019, "b": 0.0178}, "time > 0")
    assert gap == pytest.approx(0.019 / 0.0178 - 1) and (base, alt) == ("holds partly", "inconclusive")
    with pytest.raises(ValueError, match="second must be a finite ratio > 0"):
        gap_statuses(claim, est, 0.039, {"first": 1.0, "second": float("nan")}, "ratio > 0")


def test_a_same_layout_gap_between_two_medians_is_not_called_the_jobs_error():
    # DDP's buckets as read: 500 MB 0.999x (0.930x to 1.105x) while 25 MB and 500 MB's medians lay
    # 0.2 % apart; the sentence called that 0.2 % "this job's own error", beside an interval 17.5 % wide
    from perfkit.estimate import Estimate
    from perfkit.viz.claims import same_layout_text

    claim = Claim("s", "step speedup", low=1.05, partly=1.0, unit="x")
    est = Estimate(0.999, 0.930, 1.105, 0.9, 28, "m")
    text = same_layout_text(claim, est, 0.01552, 0.01549, 0.027, "25 and 500")
    assert "this job's own error," not in text and "their median steps, 15.5 and 15.5 ms" in text
    assert text.endswith("it does not bound this job's error, which the judged interval, 18% of its figure "
                         "wide, carries.")


def test_a_step_gap_within_the_controls_reach_is_not_read_as_the_ops_accounting_for_it():
    # GELU's step 0.926x (0.891x to 0.952x) against the ops' 0.967x, 1.6 % apart, within a 2.7 % reach:
    # the sentence said "the two ops account for the step's difference", which the interval excludes
    from perfkit.data.claims import PinTiming
    from perfkit.estimate import Estimate
    from perfkit.timing import Measurement

    aa = PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.03,) * 10, 0), "cpu")  # reach 2.9 %
    step = Estimate(0.926, 0.891, 0.952, 0.9, 16, "m")
    near = viz.claims.ops_gap_text(aa, step, 0.967)
    assert "account" not in near and near.startswith("The step's interval lies 1.6% below 0.967x, within")
    assert near.endswith("by this interval the step lost more than the two ops cost alone, by less than the "
                         "A/A control's reach.")
    holds = viz.claims.ops_gap_text(aa, step, 0.94)
    assert holds.endswith("the two ops can account for the step's difference.")
    assert viz.claims.ops_gap_text(aa, step, 1.2).endswith("which this run does not break down.")
    with pytest.raises(ValueError, match="what"):
        viz.claims.ops_gap_text(aa, step, 0.967, "")


def test_a_pair_median_outside_both_orders_says_how_far_and_what_the_steps_show():
    # top-k as read: orders' medians 0.822x and 0.809x, the judged pair median 0.681x: the sentence said only
    # that such medians "need not fall between"; now how far, how far apart the orders lie, and the skew
    from perfkit.viz.claims import pair_order_text

    orders = {"all-reduce": 0.822, "top-k": 0.809}
    skewed = [0.82, 0.81, 0.83, 0.3, 0.82, 0.25, 0.81, 0.2]  # a tail of slow top-k steps
    text = pair_order_text(0.681, orders, skewed)
    assert text.startswith("; the judged median of the pairs lies 15.8% below both orders' medians, which "
                           "lie 1.6% apart, so the order does not explain it")
    assert "mean, 0.522x, lies below their median, 0.81x, a tail on that side" in text
    assert "does not say what moved it" in pair_order_text(0.681, orders, [0.8, 0.82, 0.81, 0.83])
    assert pair_order_text(0.815, orders, skewed) == ""
    with pytest.raises(ValueError):
        pair_order_text(0.681, orders, [0.0])
    # top-k as read later: the judged 0.923x above both orders' 0.884x, the steps' geometric mean below their
    # median; the clause once read "lies not above their median, 0.884x, by half that"
    steps = [0.884, 0.70, 0.884, 0.88, 0.89, 0.60, 0.884]
    said = pair_order_text(0.923, {"all-reduce": 0.884, "top-k": 0.8845}, steps)
    assert (": no tail of the per-step ratios on that side explains it (their geometric mean, 0.809x, lies "
            "below their median, 0.884x), so this run does not say what moved it") in said
    assert "lies not" not in said and "by half that" not in said


def test_other_statistics_of_an_undecided_figure_are_named_with_their_side_and_decide_nothing():
    from perfkit.stats import Estimate
    from perfkit.viz.claims import others_side_text

    # top-k as read: the judged 0.923x (0.795x to 1.009x) reaches across 1x; the other statistics of the same
    # steps all lay below 1x, which the verdict once left unsaid beside "rests on one statistic"
    tk = Estimate(0.923, 0.795, 1.009, 0.91, 28, "m")
    said = others_side_text(tk, {"the ratio of the two median steps": 0.718, "the geometric mean": 0.852})
    assert said == ("; every other statistic of these samples lies below 1x (the ratio of the two median "
                    "steps 0.718x, the geometric mean 0.852x), but none carries an interval, so none decides "
                    "the side: the verdict judges its own statistic, whose interval reaches across 1x")
    assert "do not lie on one side of 1x" in others_side_text(tk, {"a": 0.9, "b": 1.1})
    assert others_side_text(Estimate(0.9, 0.8, 0.95, 0.9, 28, "m"), {"a": 0.7}) == ""  # clear of 1x: decided
    assert others_side_text(tk, {}) == ""
    with pytest.raises(ValueError):
        others_side_text(tk, {"a": 0.0})
    with pytest.raises(TypeError):
        others_side_text(0.9, {"a": 0.7})


def test_a_refuted_promise_is_drawn_as_not_holding_ringed_and_named_in_the_legend():
    from perfkit.stats import Estimate

    # compile as measured: 0.985x (0.980x to 0.999x) against at least 1.1x, the control's reach 2.8 %:
    # undecided on 1x, the promise refuted: drawn as not holding, ringed grey for the undecided side
    claim = Claim("compile", "speedup", low=1.1, partly=1.0, unit="x")
    comp = assess(claim, Estimate(0.985, 0.980, 0.999, 0.92, 16, "m"), error=0.028)
    near = assess(claim, Estimate(1.04, 1.0, 1.08, 0.9, 16, "m"), error=0.04)  # 1.8 % from the promise
    assert comp.refuted and comp.status == "does not hold here" and not near.refuted
    assert "on which side of 1x (no effect) the figure lies this run cannot tell" in comp.text
    fig = viz.plot_claims_forest({"compile": comp, "near": near})
    ax = fig.axes[0]
    rings = [line.get_markeredgecolor() for line in ax.lines if line.get_marker() == "o"]
    assert rings[0] == viz.claims._COLOR["inconclusive"] and rings[1] == "white"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "does not hold here,\nside of no effect undecided" in labels
    plt.close(fig)
    plain = viz.plot_claims_forest({"near": near})
    assert not any("refuted" in t.get_text() for t in plain.axes[0].get_legend().get_texts())
    plt.close(plain)


def test_the_forest_keeps_its_1_2_5_tick_labels_beside_a_long_claim_name():
    from perfkit.stats import Estimate

    # the course's forest drew a 170-pixel strip beside a one-line 80-character name: tidy hid every tick
    # label but 2x and 50x, none left in the 0.1x-1x region where six points lay
    speed = dict(low=1.05, partly=1.0, unit="x")
    long = "set_num_threads(min(8, cores)) (on 2 cores: every core; the cap at 8 untested)"
    verdicts = {name: assess(Claim(name, "speedup", **speed), Estimate(m, m * 0.97, m * 1.03, 0.9, 16, "m"))
                for name, m in ((long, 1.39), ("ultra", 0.124), ("activations", 64.0), ("mixed", 0.18))}
    fig = viz.plot_claims_forest(verdicts)
    shown = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_visible()]
    assert {"0.1x", "0.2x", "0.5x", "1x", "2x", "5x", "10x", "20x", "50x"} <= set(shown)
    plt.close(fig)


def test_an_order_gap_wider_than_the_control_is_said_and_weighed():
    from perfkit.stats import Estimate
    from perfkit.viz.claims import order_gap_text

    # top-k as measured: 0.773x (0.726x to 0.844x) against at least 1.05x; orders 0.662x and 0.813x, the A/A
    # control's reach 0.9 %: the verdict was weighed by the reach alone, the 23 % gap between orders unsaid
    claim = Claim("top-k", "speedup", low=1.05, partly=1.0, unit="x")
    est = Estimate(0.773, 0.726, 0.844, 0.91, 28, "m")
    text = order_gap_text(claim, est, 0.662, 0.813, 0.009)
    assert text.startswith("The two orders read 22.8% apart, more than the 0.9% the A/A control read")
    # 22.8 % reaches past 1x (15.6 % above the interval) and short of 1.05x (19.6 %): the label would change
    assert "the rule gives inconclusive, not does not hold here: the label rests on which error" in text
    calm = order_gap_text(claim, est, 0.75, 0.80, 0.009)  # 6.7 %: short of 1x, the label stands
    assert calm.startswith("The two orders read 6.7% apart") and "does not hold here as well." in calm
    assert "no more than" in order_gap_text(claim, est, 0.80, 0.805, 0.009)
    with pytest.raises(ValueError):
        order_gap_text(claim, est, 0.0, 0.8, 0.009)


def test_a_larger_bucket_caps_gain_names_the_buckets_it_comes_from():
    # as measured: a 6.16 MiB gradient, DDP's default 2 all-reduces a step, 25 MB and 500 MB 1 each: the
    # gain is one bucket against two, which 25 MB written out shares, not a cap of 500 MB
    from perfkit.viz.claims import bucket_figure, bucket_source_text

    calls = {0.05: 7, None: 2, 25: 1, 500: 1}
    assert bucket_figure(calls) == ("step speedup of 500 MB buckets over DDP's default, 1 all-reduce a step "
                                    "against 2 (25 MB written out: 1 too)")
    said = bucket_source_text(calls, 6.16)
    assert said.startswith(" This compares 1 all-reduce a step against the default's 2, not a cap of 500 MB")
    assert "6.16 MiB gradient 25 MB written out made 1 too" in said and "not caps of 500 MB-1 GB" in said
    big = {None: 3, 25: 2, 500: 1}  # a gradient past 25 MB: the caps lay out apart
    assert "too" not in bucket_figure(big)
    assert "25 MB written out made 2 here." in bucket_source_text(big, 40.0)
    assert "not a cap" not in bucket_source_text(big, 40.0)
    assert bucket_source_text({None: 1, 25: 1, 500: 1}, 0.5) == ""  # no fewer all-reduces: no gain to source
    with pytest.raises(ValueError, match="calls must map"):
        bucket_figure({None: 2, 500: 1})
    with pytest.raises(ValueError, match="grad_mib"):
        bucket_source_text(calls, 0.0)


def test_identical_work_read_apart_weighs_a_reading_past_the_a_a_reach():
    from perfkit.data.claims import PinTiming
    from perfkit.stats import Estimate
    from perfkit.timing import Measurement

    # as run: the A/A reach 0.6 % called compile's interval, 1.3 % below 1x, "beyond" it, while one
    # model against itself read 2.2 % from 1x and two same-bucket runs 4.6 % apart, unsaid there
    aa = PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.006,) * 10, 0), "cpu")
    compiled = Estimate(0.982, 0.974, 0.987, 0.92, 16, "m")
    said = viz.claims.same_work_text(aa, {"one model against itself": 0.978, "same buckets": 18.4 / 17.6},
                                     compiled, "The compiled step", "eager")
    assert said.startswith("Identical work, read apart in this notebook: the A/A control's interval 0.6% "
                           "from 1x; one model against itself, 2.2%; same buckets, 4.5%: this design's own "
                           "error reaches at least 4.5%, more than the A/A control's reach alone.")
    assert said.endswith("The compiled step's interval lies 1.3% below 1x, within that: this run does not "
                         "show it slower than eager.")
    alone = viz.claims.same_work_text(aa, {}, compiled, "The compiled step", "eager")
    assert "beyond even that: slower than eager" in alone and "more than" not in alone.split(". ")[0]
    held = viz.claims.same_work_text(aa, {}, Estimate(0.99, 0.98, 1.01, 0.9, 16, "m"), "It", "eager")
    assert held.endswith("It's interval holds 1x: it is not shown faster or slower than eager.")
    assert viz.claims.same_work_text(PinTiming(aa.pageable, aa.pinned, "cuda"), {}, compiled, "x", "y") == ""
    with pytest.raises(ValueError, match="readings"):
        viz.claims.same_work_text(aa, {"bad": 0.0}, compiled, "x", "y")


def test_identical_work_with_an_interval_is_read_by_its_reach_as_the_a_a_control_is():
    from perfkit.data.claims import PinTiming
    from perfkit.stats import Estimate
    from perfkit.timing import Measurement

    # as run: claim 10's one model against itself was read by its point, 0.985x (1.6 % apart), while
    # its interval, 0.965x to 1.025x, reaches 3.5 % from 1x, the yardstick the A/A control is read by
    aa = PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.006,) * 10, 0), "cpu")
    compiled = Estimate(0.936, 0.92, 0.95, 0.92, 16, "m")
    said = viz.claims.same_work_text(aa, {"one model": Estimate(0.985, 0.965, 1.025, 0.92, 16, "m")},
                                     compiled, "The compiled step", "eager")
    assert "one model, 3.5%: this design's own error reaches at least 3.5%" in said
    with pytest.raises(ValueError, match="readings"):  # an estimate without an interval is no reading
        viz.claims.same_work_text(aa, {"bad": Estimate(0.98, 0.98, 0.98, None, 1, "m")}, compiled, "x", "y")
