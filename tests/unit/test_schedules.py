"""Pipeline schedules as data and their simulator: exact bubbles, peak activations, deadlocks, errors.

With unit costs the simulated bubble must equal the textbook share exactly:
(p - 1)/(m + p - 1) for GPipe and 1F1B, (p - 1)/(v m + p - 1) for interleaved 1F1B (each
chunk costs 1/v), (p - 1)/(3 m + p - 1) for ZB-H1 with F = I = W.
"""

from __future__ import annotations

import pytest

from perfkit.parallel.schedules import (
    Action,
    Schedule,
    dependencies,
    gpipe,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
    parse_actions,
    zb_h1,
)
from perfkit.parallel.simulate import (
    DEFAULT_COSTS,
    DeadlockError,
    bubble_formula,
    execution_order,
    peak_in_flight,
    play,
    simulate,
    split_costs,
    stage_costs,
    timeline_from,
    validate,
)

SIZES = [(p, m) for p in (1, 2, 3, 4, 5) for m in (1, 2, 4, 8, 13)]


@pytest.mark.parametrize("p,m", SIZES)
def test_gpipe_and_1f1b_bubble_exact(p, m):
    f = bubble_formula("gpipe", p, m)
    for costs in ({"F": 1, "B": 1}, {"F": 1, "B": 2}):
        tl = simulate(gpipe(p, m), costs)
        assert tl.bubble_share == pytest.approx(f, abs=1e-12)
        assert tl.peak_in_flight == (m,) * p          # GPipe holds every micro-batch
        if m >= p:
            tl = simulate(one_f_one_b(p, m), costs)
            assert tl.bubble_share == pytest.approx(f, abs=1e-12)
            assert tl.peak_in_flight == tuple(p - r for r in range(p))   # at most p


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 4, 3), (2, 8, 2), (4, 4, 2), (4, 8, 2),
                                   (4, 8, 3), (3, 6, 4)])
def test_interleaved_bubble_exact(p, m, v):
    s = interleaved_1f1b(p, m, v)
    validate(s)
    assert s.n_stages == p * v and all(len(row) == 2 * m * v for row in s.ranks)
    for tb in (1, 2):
        tl = simulate(s, {"F": 1 / v, "B": tb / v})
        assert tl.bubble_share == pytest.approx(bubble_formula("interleaved", p, m, v), abs=1e-12)
    # a smaller bubble than 1F1B for the same work, for more activations held on rank 0
    assert bubble_formula("interleaved", p, m, v) < bubble_formula("1f1b", p, m)
    assert simulate(s).peak_in_flight[0] > p


def test_interleaved_with_v1_is_1f1b():
    assert interleaved_1f1b(3, 6, 1).ranks == one_f_one_b(3, 6).ranks


@pytest.mark.parametrize("p,m", [(p, m) for p, m in SIZES if m >= p])
def test_zb_h1_exact(p, m):
    s = zb_h1(p, m)
    validate(s)
    tl = simulate(s, {"F": 1, "I": 1, "W": 1})
    assert tl.bubble_share == pytest.approx(bubble_formula("zb_h1", p, m), abs=1e-12)
    assert tl.peak_in_flight == (p,) * p               # 1F1B's peak, on every rank
    # a third of 1F1B's idle slots: (p-1) against 3(p-1) with B = I + W
    one = simulate(one_f_one_b(p, m), {"F": 1, "B": 2})
    assert one.makespan - tl.makespan == pytest.approx(2 * (p - 1))


def test_uneven_stages_from_layer_times_move_the_bubble_off_the_formula():
    stages = stage_costs([0.01, 0.03, 0.03, 0.02], [2, 2])
    assert stages == pytest.approx([0.04, 0.05])
    cost = split_costs(stages)
    # F a third of the stage, B two thirds (DEFAULT_COSTS), each stage its own
    assert cost(Action("F", 1, 0)) == pytest.approx(0.05 / 3)
    assert cost(Action("B", 0, 2)) == pytest.approx(0.08 / 3)
    assert DEFAULT_COSTS["F"] * 2 == DEFAULT_COSTS["B"]
    # equal stages give the formula; a 25 % heavier last stage a larger bubble, which the
    # formula, assuming equal stages, does not show
    even = simulate(one_f_one_b(2, 4), split_costs([0.05, 0.05])).bubble_share
    assert even == pytest.approx(bubble_formula("1f1b", 2, 4))
    uneven = simulate(one_f_one_b(2, 4), cost).bubble_share
    tl = simulate(one_f_one_b(2, 4), cost)
    assert [tl.busy(r) for r in range(2)] == pytest.approx([0.16, 0.20])   # 4 micro-batches x stage
    assert uneven == pytest.approx(1 - 0.36 / (2 * tl.makespan)) and uneven > even
    assert split_costs([1.0], {"F": 1, "B": 1})(Action("B", 0, 0)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="sizes add up to 3 layers, but layer_s holds 4"):
        stage_costs([0.01, 0.03, 0.03, 0.02], [2, 1])
    with pytest.raises(ValueError, match="shares F \\+ B"):
        split_costs([1.0], {"F": 0, "B": 0})


def test_latency_delays_cross_rank_only():
    base = simulate(gpipe(2, 2), {"F": 1, "B": 1})
    late = simulate(gpipe(2, 2), {"F": 1, "B": 1}, latency=0.5)
    assert late.makespan == pytest.approx(base.makespan + 2 * 0.5)   # one hop each way
    assert simulate(gpipe(1, 3), latency=5).makespan == pytest.approx(9)   # no hop at p=1


def test_costs_callable_and_text_grid():
    tl = simulate(one_f_one_b(2, 2), lambda a: 1.0 if a.kind == "F" else 2.0)
    assert tl.text().splitlines()[1].startswith("rank 1: .  F0 B0 B0 F1 B1 B1")
    assert "F0:2" in simulate(interleaved_1f1b(2, 2, 2)).text()
    assert str(one_f_one_b(2, 2)).splitlines()[1] == "rank 0: F0.0 F0.1 B0.0 B0.1"


def test_peak_in_flight_counts_w_not_i():
    row = parse_actions(["F0.0", "F0.1", "I0.0", "I0.1", "W0.0", "W0.1"])
    assert peak_in_flight(row) == 2
    assert peak_in_flight(parse_actions(["F0.0", "B0.0", "F0.1", "B0.1"])) == 1


def test_planted_deadlock_named():
    # rank 1 runs micro-batch 1 first; rank 0 waits at B0.0 for rank 1's B1.0 before it sends F0.1
    bad = Schedule("bad", 2, 2, 2, (
        parse_actions(["F0.0", "B0.0", "F0.1", "B0.1"]),
        parse_actions(["F1.1", "F1.0", "B1.0", "B1.1"])))
    with pytest.raises(DeadlockError) as e:
        validate(bad)
    assert e.value.waits == {0: (Action("B", 0, 0), Action("B", 1, 0), 1),
                             1: (Action("F", 1, 1), Action("F", 0, 1), 0)}
    assert "rank 0 waits at B0.0 for B1.0 (rank 1)" in str(e.value)
    with pytest.raises(DeadlockError):
        simulate(bad)


def test_blocking_sends_hang_plain_1f1b():
    # rank 0 blocks sending F0.1 until rank 1 reaches F1.1; rank 1 blocks sending B1.0's
    # gradient until rank 0 reaches B0.0: with blocking send/recv 1F1B needs paired exchanges
    s = one_f_one_b(2, 2)
    validate(s)
    with pytest.raises(DeadlockError) as e:
        validate(s, blocking_sends=True)
    assert e.value.waits == {0: (Action("F", 0, 1), Action("F", 1, 1), 1),
                             1: (Action("B", 1, 0), Action("B", 0, 0), 0)}
    assert "rank 0 blocks sending F0.1's output until rank 1 reaches F1.1" in str(e.value)
    # GPipe's order meets every send with its receive, so it runs as with isend; every
    # schedule that alternates forwards and backwards needs paired exchanges (Megatron's
    # send_forward_recv_backward), so each hangs with plain blocking sends
    assert sorted(play(gpipe(3, 4), blocking_sends=True)) == sorted(play(gpipe(3, 4)))
    for name, v in (("1f1b", 1), ("zb_h1", 1), ("interleaved", 2)):
        with pytest.raises(DeadlockError):
            validate(make_schedule(name, 2, 4, v), blocking_sends=True)


def test_dependencies():
    assert dependencies(one_f_one_b(3, 3), Action("B", 1, 0)) == [Action("F", 1, 0), Action("B", 2, 0)]
    assert dependencies(zb_h1(3, 3), Action("I", 1, 0)) == [Action("F", 1, 0), Action("I", 2, 0)]
    assert dependencies(zb_h1(3, 3), Action("W", 1, 0)) == [Action("I", 1, 0)]
    assert dependencies(gpipe(3, 3), Action("F", 0, 2)) == []


def test_valid_orders_not_flagged():
    for s in (gpipe(3, 5), one_f_one_b(3, 5), interleaved_1f1b(2, 4, 2), zb_h1(3, 3)):
        assert len(execution_order(s)) == sum(map(len, s.ranks))


@pytest.mark.parametrize("rows,match", [
    ((["F0.0", "B0.0"], ["F1.0"]), "stage 1, micro-batch 0: has F"),
    ((["F0.0", "B0.0", "B0.0"], ["F1.0", "B1.0"]), "appears twice"),
    ((["B0.0", "F0.0"], ["F1.0", "B1.0"]), "comes before F0.0"),
    ((["F0.0", "B0.0"], ["F1.0", "B1.0", "F0.0"]), "belongs to rank 0"),
    ((["F0.0", "B0.0", "F0.5"], ["F1.0", "B1.0"]), "out of range"),
    ((["F0.0", "I0.0", "B0.0"], ["F1.0", "B1.0"]), "mixed"),
    ((["F0.0", "I0.0", "W0.0"], ["F1.0", "I1.0"]), "stage 1, micro-batch 0"),
])
def test_validate_structure(rows, match):
    s = Schedule("x", 2, 2, 1, tuple(parse_actions(r) for r in rows))
    with pytest.raises(ValueError, match=match):
        validate(s)


def test_measured_timeline():
    s = one_f_one_b(2, 2)
    rows = [[(a.kind, a.stage, a.mb, 10.0 + i, 10.5 + i) for i, a in enumerate(r)] for r in s.ranks]
    tl = timeline_from(s, rows)
    assert tl.makespan == pytest.approx(3.5) and tl.busy(0) == pytest.approx(2.0)
    assert tl.bubble_share == pytest.approx(1 - 4 / 7)
    with pytest.raises(ValueError, match="differ"):
        timeline_from(s, [rows[1], rows[0]])
    with pytest.raises(ValueError, match="one list per rank"):
        timeline_from(s, rows[:1])


@pytest.mark.parametrize("call,exc,match", [
    (lambda: one_f_one_b(4, 3), ValueError, "n_micro >= n_ranks"),
    (lambda: zb_h1(4, 2), ValueError, "n_micro >= n_ranks"),
    (lambda: interleaved_1f1b(4, 6, 2), ValueError, "multiple of n_ranks"),
    (lambda: interleaved_1f1b(2, 4, 0), ValueError, "n_virtual"),
    (lambda: make_schedule("1f1b", 2, 4, n_virtual=2), ValueError, "n_virtual must be 1"),
    (lambda: make_schedule("pipedream", 2, 4), ValueError, "name"),
    (lambda: gpipe(0, 4), ValueError, "n_ranks"),
    (lambda: gpipe(2, True), ValueError, "n_micro"),
    (lambda: Action("X", 0, 0), ValueError, "kind"),
    (lambda: Action("F", -1, 0), ValueError, "stage"),
    (lambda: Schedule("x", 2, 3, 1, ((), ())), ValueError, "multiple of n_ranks"),
    (lambda: Schedule("x", 2, 2, 1, ((),)), ValueError, "one list per rank"),
    (lambda: Schedule("x", 1, 1, 1, (("F0.0",),)), TypeError, "Actions"),
    (lambda: simulate(gpipe(2, 2), {"F": -1}), ValueError, "costs"),
    (lambda: simulate(gpipe(2, 2), {"X": 1}), ValueError, "costs key"),
    (lambda: simulate(gpipe(2, 2), latency=float("nan")), ValueError, "latency"),
    (lambda: simulate("gpipe"), TypeError, "Schedule"),
    (lambda: validate(None), TypeError, "Schedule"),
    (lambda: parse_actions(["F0"]), ValueError, "F0.1"),
    (lambda: bubble_formula("1f1b", 0, 4), ValueError, "n_ranks"),
    (lambda: simulate(gpipe(1, 1)).text(dt=0), ValueError, "dt"),
    (lambda: simulate(gpipe(1, 3000)).text(dt=0.5), ValueError, "2000"),
])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_zb_step_note_names_the_terms_that_decided_and_whether_the_gain_showed():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_step_note

    def est(v, lo, hi):
        return Estimate(v, lo, hi, 0.9, 12, "paired ratios")

    got = zb_step_note(est(0.995, 0.950, 1.033), est(1.09, 1.04, 1.13), est(0.913, 0.898, 0.931), 0.882,
                       (10.1, 12.6, 6.9), est(0.711, 0.662, 0.748), 0.484)
    assert got.startswith("The predicted gain did not appear: ZB-H1's step 0.995x of 1F1B's, its interval")
    # the old note left unsaid that the interval, holding 1x, also lies wholly above the model's figure
    assert ("its interval 0.950x to 1.033x holds 1x, and lies wholly above the model's 0.882x: the step "
            "shows neither a gain nor the one the model gave.") in got
    assert "busy time per stage 1.09x (its interval 1.04x to 1.13x wholly above the model's 1x)" in got
    # the factor is the bubble's on the step, (1 - share) over (1 - share), not an idle time
    assert "idle part" not in got
    assert ("bubble factor (1 - 1F1B's share) / (1 - ZB-H1's) 0.913x (its interval 0.898x to 0.931x wholly "
            "above the model's 0.882x): 1.09x and 1.04x") in got
    assert "the busy time moving the step more" in got
    assert "F : I : W = 1 : 1.25 : 0.68" in got and \
        "(F + I - W), is 1.56x (p - 1) F at the measured F" in got   # per F, labelled so
    assert ("bubble share fell to 0.711x of 1F1B's (its interval 0.662x to 0.748x wholly below 1x and wholly "
            "above the model's 0.484x)") in got
    won = zb_step_note(est(0.86, 0.80, 0.90), est(1.0, 0.97, 1.03), est(0.86, 0.84, 0.90), 0.882, (1, 1, 1))
    assert won.startswith("ZB-H1 shortened the step") and "the bubble factor moving" in won
    with pytest.raises(ValueError, match="three times"):
        zb_step_note(est(1, 0.9, 1.1), est(1, 0.9, 1.1), est(1, 0.9, 1.1), 0.9, (1, 1))


def test_zb_step_note_says_when_the_interval_holds_both_no_gain_and_the_model_s():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_step_note

    def est(v, lo, hi):
        return Estimate(v, lo, hi, 0.96, 12, "paired ratios")

    got = zb_step_note(est(0.986, 0.891, 1.072), est(1.08, 1.03, 1.15), est(0.92, 0.88, 0.96), 0.905,
                       (1, 1.05, 0.62))
    # the old note said "the predicted gain did not appear", though the interval holds the model's 0.905x too
    assert "did not appear" not in got
    assert got.startswith("This run tells no gain from the predicted one: ZB-H1's step 0.986x of 1F1B's, its "
                          "interval 0.891x to 1.072x holds both 1x and the model's 0.905x. Measured,")


def test_between_note_reads_the_residual_from_its_interval_not_its_point():
    from perfkit.estimate import Estimate
    from perfkit.parallel import between_note

    # the old clause keyed on the point (0.0103 >= 0): time between actions the interval does not show
    holds = between_note(Estimate(0.0103, -0.0189, 0.0410, 0.96, 12, "median of 12 steps"))
    assert holds.startswith(": its interval holds 0, so this run shows neither")
    assert between_note(Estimate(0.00127, 0.00115, 0.00157, 0.96, 15, "m")).startswith(": time between")
    assert between_note(Estimate(-0.02, -0.03, -0.01, 0.96, 15, "m")).startswith(": steps that idled less")
    assert between_note(Estimate(0.01, 0.01, 0.01, None, 1, "exact")).startswith(": no interval")
    with pytest.raises(TypeError):
        between_note(0.01)


def test_zb_step_side_is_tested_at_the_digits_it_prints():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_side, zb_step_note

    def est(v, lo, hi):
        return Estimate(v, lo, hi, 0.9, 30, "paired ratios")

    near = est(0.96782, 0.91878, 0.99976)   # 3 digits print its upper end as 1.00x
    assert zb_side(near) == ("below", "0.9188x to 0.9998x")
    got = zb_step_note(near, est(1.07, 1.0, 1.1), est(0.908, 0.9, 0.92), 0.880, (1, 1.02, 0.58))
    assert got.startswith("ZB-H1 shortened the step: 0.968x, its interval 0.9188x to 0.9998x below 1x")
    assert "holds 1x" not in got
    assert zb_side(est(0.995, 0.950, 1.033)) == ("", "0.950x to 1.033x")
    assert zb_side(est(1.02, 1.00002, 1.04)) == ("above", "1.00002x to 1.04000x")
    assert zb_side(est(1.0, 0.9999999, 1.0000001)) == ("", "0.9999999x to 1.0000001x")
    assert zb_side(Estimate(1.0, 1.0, 1.0, None, 1, "exact")) == ("", "")


def test_band_side_reads_the_point_against_the_band_as_printed():
    from perfkit.estimate import Estimate
    from perfkit.parallel import band_side

    step = Estimate(0.989, 0.945, 1.027, 0.96, 12, "paired ratios")   # inconclusive: interval across 0.958x
    assert band_side(step, 0.784, 0.958) == "its point 0.989x lies above the band 0.784x to 0.958x"
    assert band_side(step, 0.95, 1.05).startswith("its point 0.989x lies inside the band")
    assert " below the band " in band_side(Estimate(0.70, 0.65, 0.8, 0.9, 30, "r"), 0.784, 0.958)
    assert " on an edge of the band " in band_side(Estimate(0.9581, 0.94, 0.97, 0.9, 30, "r"), 0.784, 0.9579)


def test_zb_split_step_feeds_the_model_the_measured_split():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_split_step, zb_step_note

    stages = [0.03, 0.032]
    alike = zb_split_step(stages, (1, 1, 1), 2, 4)   # F = I = W: the default split
    ideal = (1 - simulate(one_f_one_b(2, 4), split_costs(stages)).bubble_share) / (
        1 - simulate(zb_h1(2, 4), split_costs(stages)).bubble_share)
    assert alike == pytest.approx(ideal)
    cheap_w = zb_split_step(stages, (1, 1.02, 0.58), 2, 4)
    assert alike < cheap_w < 1   # a cheaper W fills less of the drain: a smaller gain
    e = Estimate(0.96782, 0.91878, 0.99976, 0.9, 30, "paired ratios")
    note = zb_step_note(e, e, e, alike, (1, 1.02, 0.58), split_step=cheap_w)
    assert f"the model would have predicted {cheap_w:.3f}x, not the recorded {alike:.3f}x" in note
    with pytest.raises(ValueError, match="three times"):
        zb_split_step(stages, (1, 1), 2, 4)


def test_fb_split_note_says_when_the_split_cannot_move_the_share():
    from perfkit.parallel import fb_split_note

    even = [0.024, 0.024]
    planned = simulate(one_f_one_b(2, 4), split_costs(even)).bubble_share
    note = fb_split_note(even, (1, 1.79), planned, 2, 4)
    assert f"gives the prediction's {planned:.3f} again" in note and "explains none of the gap" in note
    uneven = [0.04, 0.02]   # the slower stage first: F : B moves the share
    planned = simulate(one_f_one_b(2, 4), split_costs(uneven)).bubble_share
    moved = simulate(one_f_one_b(2, 4), split_costs(uneven, {"F": 1, "B": 1})).bubble_share
    assert f"{moved:.3f}" != f"{planned:.3f}"
    assert fb_split_note(uneven, (1, 1), planned, 2, 4).endswith(
        f"gives {moved:.3f}, {moved - planned:+.3f} from the prediction.")


def test_zb_step_note_sets_the_unsplit_forward_beside_1f1b_s():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_step_note

    e = Estimate(0.996, 0.976, 1.023, 0.9, 12, "paired ratios")
    fiw = (0.0100, 0.0105, 0.0061)
    assert "Per action" not in zb_step_note(e, e, e, 0.868, fiw)
    got = zb_step_note(e, e, e, 0.868, fiw, f_b=(0.0088, 0.0158))
    assert "ZB-H1's F, which it does not split, ran 1.14x 1F1B's (10 ms against 8.8 ms" in got
    assert "I + W 1.05x 1F1B's B (16.6 ms against 15.8 ms)" in got
    assert "of the 2 ms more per micro-batch, the forward carries 60%" in got
    split = zb_step_note(e, e, e, 0.868, fiw, f_b=(0.0102, 0.0140))
    assert "the split backward carries all, the forward having run faster" in split


def test_zb_step_note_sets_the_drawn_steps_beside_the_judged_busy_time():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_step_note

    e = Estimate(1.05, 0.95, 1.16, 0.9, 12, "paired ratios")
    busy = Estimate(1.13, 1.04, 1.26, 0.9, 12, "paired ratios")
    fiw, fb = (0.0109, 0.0126, 0.0070), (0.0106, 0.0180)
    # the old note gave the drawn steps' split alone, as if it were the judged rounds'
    got = zb_step_note(e, busy, e, 0.884, fiw, f_b=fb, busy_mb=0.0264)
    assert "Those are one step of each schedule, without an interval: the busy time per stage judged" in got
    assert "implies about 3.43 ms more (1.06 ms to 6.86 ms from its interval)" in got
    # the old note printed a coverage, "of which the drawn steps' 1.9 ms cover 55%", which reads above 100 %
    # where unpaired medians exceed the paired estimate: now the two figures side by side, and where one
    # lies against the other's interval
    assert got.endswith("implies about 3.43 ms more (1.06 ms to 6.86 ms from its interval); the drawn steps' "
                        "change is 1.9 ms, inside that interval.")
    over = zb_step_note(e, Estimate(1.077, 1.054, 1.116, 0.96, 12, "paired ratios"), e, 0.884, fiw,
                        f_b=(0.00565, 0.00871), busy_mb=0.0264, steps=12)
    assert "cover" not in over and over.endswith(", above that interval: the two estimates differ, and "
                                                 "neither is a share of the other.")
    assert "without an interval" not in zb_step_note(e, busy, e, 0.884, fiw, f_b=fb)
    flat = Estimate(0.99, 0.95, 1.03, 0.9, 12, "paired ratios")
    assert zb_step_note(e, flat, e, 0.884, fiw, f_b=fb, busy_mb=0.0264).endswith(
        "without an interval; the busy time per stage judged over the rounds is 0.99x of 1F1B's.")


def test_busy_note_says_where_the_drawn_step_lies_against_the_steps_interval():
    from perfkit.estimate import Estimate
    from perfkit.parallel import busy_note

    inside = Estimate(0.0264, 0.0244, 0.0270, 0.9, 12, "median of 12 samples")
    # the old clause compared the steps with the stages timed alone, silent on the step drawn
    got = busy_note(inside, 0.0286, 0.0289)
    assert got.startswith("the actions ran faster in the pipeline than alone; the step drawn below")
    assert got.endswith("28.9 ms per stage and micro-batch, above this interval, so its bars are not the "
                        "steps' typical ones (the action times read below are medians over all the steps)")
    assert busy_note(inside, 0.0262, 0.0262).endswith(
        "26.2 ms per stage and micro-batch, within this interval")
    assert "below this interval" in busy_note(inside, 0.0262, 0.0200)
    with pytest.raises(TypeError):
        busy_note(0.0264, 0.0286, 0.0289)


def test_zb_step_note_says_its_action_times_span_all_steps_and_flags_an_unresolved_factor():
    from perfkit.estimate import Estimate
    from perfkit.parallel import zb_step_note

    e = Estimate(1.01, 0.81, 1.15, 0.9, 12, "paired ratios")
    busy = Estimate(1.10, 0.87, 1.29, 0.9, 12, "paired ratios")      # holds 1x
    idle = Estimate(0.925, 0.898, 0.949, 0.9, 12, "paired ratios")   # above the model's 0.868x
    fiw, fb = (0.0096, 0.0101, 0.0061), (0.0107, 0.0260)
    # the old note called the busy time the larger mover although its interval holds 1x, and
    # labelled medians over all steps as one drawn step's
    got = zb_step_note(e, busy, idle, 0.868, fiw, f_b=fb, busy_mb=0.0244, steps=12)
    assert "the busy time moving the step more on the point figures, though its interval holds" in got
    assert "Per action (medians over the 12 steps of each schedule)" in got
    assert "Those are medians of each schedule's own steps, not paired by round, without an interval" in got
    assert "one step drawn" not in got and "drawn steps" not in got
    one = zb_step_note(e, busy, idle, 0.868, fiw, f_b=fb, busy_mb=0.0244)
    assert "medians over the one step drawn from each schedule" in one
    clear = Estimate(1.10, 1.04, 1.29, 0.9, 12, "paired ratios")
    assert "not resolved" not in zb_step_note(e, clear, idle, 0.868, fiw)
