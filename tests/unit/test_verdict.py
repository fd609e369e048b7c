"""Verdicts are computed from the measurement: held, missed (by how much, which side), inconclusive."""

import math

import pytest

from perfkit import stats
from perfkit.verdict import Prediction, context, judge

BOUND = Prediction("checkpointing's step time over the plain step", "one extra forward",
                   low=1.0, high=1.34, unit="x")
POINT = Prediction("hidden fraction", "pipeline model", value=0.8, rel_tol=0.1, physical=(0, 1))


def test_inside_the_bound_holds():
    v = judge(BOUND, 1.2, spread=(1.15, 1.25))
    assert v.outcome == "held" and v.held and v.direction == "inside"
    assert "1.20x (spread 1.15x to 1.25x)" in v.text and "held" in v.text  # one precision


@pytest.mark.parametrize("measured,direction,by", [(1.53, "above", "14% above 1.34x"),
                                                   (0.9, "below", "10% below 1x")])
def test_a_miss_says_which_side_and_by_how_much(measured, direction, by):
    v = judge(BOUND, measured, explain={"above": "ABOVE-REASON", "below": "BELOW-REASON"})
    assert v.outcome == "missed" and v.direction == direction
    assert by in v.text
    # the explanation is chosen by what was measured, not fixed in advance
    assert (f"{direction.upper()}-REASON" in v.text
            and ("BELOW" if direction == "above" else "ABOVE") + "-REASON" not in v.text)


def test_a_spread_across_the_bound_with_the_figure_inside_is_inconclusive():
    v = judge(BOUND, 1.30, spread=(1.20, 1.45), explain={"held": "HELD-REASON", "inconclusive": "NOISY",
                                                         "above": "ABOVE-REASON"})
    assert v.outcome == "inconclusive" and "NOISY" in v.text
    # the reason is measured: the edge crossed, the distance from it, the interval's reach
    assert "across the edge 1.34x" in v.text and "lies 0.04 from it" in v.text
    assert "reaches 0.11 above it" in v.text  # a distance between ratios: no "x"
    # the section's own cause for the side the figure lies on, labelled; not the other side's
    assert ("The point estimate lies inside the predicted range, its interval reaching past the range's "
            "edge: HELD-REASON") in v.text
    assert "ABOVE-REASON" not in v.text
    assert "other edge" not in v.text  # one edge crossed: one named
    # an interval across both edges names both, the far one too (naming only the nearer one
    # would call a 0.032 crossing 0.002)
    band = Prediction("ratio", "m", low=0.963, high=1.01, unit="x")
    both = judge(band, 0.972, spread=(0.961, 1.042)).text
    assert "across the edge 0.963x" in both and "reaches 0.002 below it" in both
    assert "and across the other edge, 1.01x, too, by 0.032" in both
    # the same median with a tight spread is a verdict
    assert judge(BOUND, 1.30, spread=(1.29, 1.31)).outcome == "held"
    assert judge(BOUND, 1.50, spread=(1.40, 1.60)).outcome == "missed"


@pytest.mark.parametrize("measured", [-1.56, 1.7, math.nan, math.inf])
def test_a_figure_outside_its_physical_range_is_disturbed_never_inconclusive(measured):
    v = judge(POINT, measured, explain={"disturbed": "DISTURBED-REASON", "inconclusive": "NO"})
    assert v.outcome == "disturbed" and v.direction == ""
    assert "disturbed" in v.text and "DISTURBED-REASON" in v.text and "NO" not in v.text.split()
    assert "cores" in v.text  # what was measured of the machine is named


def test_point_prediction_uses_its_tolerance():
    assert judge(POINT, 0.75).held and judge(POINT, 0.87).held
    assert judge(POINT, 0.70).direction == "below" and judge(POINT, 0.9).direction == "above"


def test_open_bounds_and_descriptions():
    at_least = Prediction("speedup", "Amdahl", low=1.0, unit="x")
    assert at_least.describe() == "at least 1x" and judge(at_least, 5.0).held
    assert Prediction("t", "m", high=2.0).describe() == "at most 2"
    assert POINT.describe() == "0.8 ± 10%"


def test_record_is_json_ready():
    import json

    rec = json.loads(json.dumps(judge(BOUND, 1.5).record()))
    assert rec["outcome"] == "missed" and rec["prediction"]["high"] == 1.34


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(what="", model="m", value=1.0, rel_tol=0.1), ValueError, "what and model"),
    (dict(what="w", model="m"), ValueError, "value .* or a bound"),
    (dict(what="w", model="m", value=1.0), ValueError, "rel_tol"),
    (dict(what="w", model="m", value=1.0, rel_tol=-0.1), ValueError, "rel_tol"),
    (dict(what="w", model="m", low=2.0, high=1.0), ValueError, "low"),
    (dict(what="w", model="m", low=math.nan), TypeError, "low"),
    (dict(what="w", model="m", high="3"), TypeError, "high"),
])
def test_bad_predictions_are_rejected(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Prediction(**kwargs)


def test_bad_judge_arguments_are_rejected():
    with pytest.raises(TypeError, match="prediction"):
        judge("p", 1.0)
    with pytest.raises(TypeError, match="measured"):
        judge(BOUND, "1.0")
    with pytest.raises(ValueError, match="spread"):
        judge(BOUND, 1.0, spread=(2.0, 1.0))
    with pytest.raises(ValueError, match="explain"):
        judge(BOUND, 1.0, explain={"faster": "x"})


def test_show_verdict_displays_markdown_and_records_the_outcome(monkeypatch):
    import IPython.display

    from perfkit import viz

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    assert viz.show_verdict(judge(BOUND, 1.5)) is None  # a cell ending with it shows it once
    (bundle,) = shown
    assert bundle[viz.VERDICT_MIME]["outcome"] == "missed"
    assert "1.5x" in bundle["text/markdown"] and "**" not in bundle["text/plain"]
    with pytest.raises(TypeError, match="verdict"):
        viz.show_verdict("held")


def test_a_bound_this_run_made_unfalsifiable_is_shown_as_context_not_recorded(monkeypatch):
    import IPython.display

    from perfkit import viz

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    # "at most 1" for a share that cannot exceed 1 (a bound computed from the run that
    # reached the limit): no verdict, no record, and the text says it is context
    viz.verdict(Prediction("hidden share", "at most the cover", high=1.0, physical=(None, 1.0)), 0.4)
    (bundle,) = shown
    assert viz.VERDICT_MIME not in bundle and bundle["text/plain"].startswith("[context]")
    # the same bound below the limit is a prediction, judged and recorded
    viz.verdict(Prediction("hidden share", "at most the cover", high=0.9, physical=(None, 1.0)), 0.4)
    assert shown[1][viz.VERDICT_MIME]["outcome"] == "held"


def test_large_numbers_read_with_si_prefixes():
    p = Prediction("bytes", "count", value=12_976_644, rel_tol=0.01, unit=" B")
    assert p.describe() == "13 MB ± 1%"
    assert "Measured:** 13 MB" in judge(p, 12_976_756).text


# --- claims: the advice's promise, judged by the measurement --------------------------------

from perfkit.verdict import Claim, ClaimVerdict, assess  # noqa: E402

SPEEDUP = Claim("mixed precision gives a 40-60% speedup", "bf16 step speedup", low=1.4, high=1.6,
                partly=1.0, unit="x")


@pytest.mark.parametrize("measured,status", [(1.5, "holds"), (1.2, "holds partly"),
                                             (0.8, "does not hold here"), (1.7, "does not hold here")])
def test_a_claim_is_judged_by_the_zone_of_the_measurement(measured, status):
    reasons = {s: f"REASON-{s}" for s in ("holds", "holds partly", "does not hold here")}
    v = assess(SPEEDUP, measured, reasons=reasons)
    assert isinstance(v, ClaimVerdict) and v.status == status
    assert f"REASON-{status}" in v.text and sum("REASON-" in p for p in v.text.split()) == 1


def test_a_spread_across_the_no_effect_value_is_inconclusive():
    assert assess(SPEEDUP, 1.05, spread=(0.95, 1.45)).status == "inconclusive"
    # wholly below the promise: on either side of 1x the promise fails, and the label says so
    assert assess(SPEEDUP, 1.05, spread=(0.95, 1.15)).status == "does not hold here"
    assert assess(SPEEDUP, 1.05, spread=(1.01, 1.10)).status == "holds partly"
    # a median inside the promise holds only if the spread stays inside it too
    assert assess(SPEEDUP, 1.5, spread=(1.45, 1.55)).status == "holds"
    wide = assess(SPEEDUP, 1.5, spread=(1.2, 1.55),
                  reasons={"holds": "WHY-HOLDS", "holds partly": "WHY-PARTLY"})
    assert wide.status == "holds partly" and "WHY-HOLDS" in wide.text and "WHY-PARTLY" not in wide.text
    # without a no-effect value, the promised range's edges decide
    exact = Claim("Adam needs 2x the model", "state over weights", low=1.9, high=2.1)
    assert assess(exact, 2.0, spread=(1.8, 2.05)).status == "inconclusive"
    assert assess(exact, 2.0).status == "holds"
    assert "promises exactly 0;" in assess(Claim("a rule", "sizes it gets wrong", low=0, high=0), 2).text


def test_a_gpu_only_claim_names_its_cpu_analogue():
    v = assess(SPEEDUP, 0.8, spread=(0.7, 0.9), gpu_only=True)
    assert v.status == "GPU only" and "analogue" in v.text and "does not hold here" in v.text


def test_a_gpu_only_claim_without_analogue_names_no_zone():
    # a flag the CPU ignores: the same loop timed twice, 1.12x by noise, must not read "holds"
    v = assess(SPEEDUP, 1.12, spread=(1.04, 1.3), gpu_only=True, reasons={"holds": "faster"},
               not_judged="the flag is ignored without a GPU")
    assert v.status == "GPU only" and "Not judged: the flag is ignored without a GPU" in v.text
    for word in ("holds", "does not hold", "inconclusive", "analogue", "faster"):
        assert word not in v.text, word
    with pytest.raises(ValueError, match="not_judged"):
        assess(SPEEDUP, 1.0, not_judged="ignored")  # only for GPU-only advice
    with pytest.raises(ValueError, match="not_judged"):
        assess(SPEEDUP, 1.0, gpu_only=True, not_judged=" ")


def test_claims_reject_bad_arguments():
    with pytest.raises(ValueError, match="promised range"):
        Claim("advice", "figure")
    with pytest.raises(ValueError, match="partly"):
        Claim("advice", "figure", low=1, high=2, partly=1.5)
    with pytest.raises(ValueError, match="statement"):
        Claim("", "figure", low=1)
    with pytest.raises(TypeError, match="claim"):
        assess("advice", 1.0)
    with pytest.raises(TypeError, match="measured"):
        assess(SPEEDUP, "1.0")
    with pytest.raises(ValueError, match="spread"):
        assess(SPEEDUP, 1.0, spread=(2, 1))
    with pytest.raises(ValueError, match="reasons"):
        assess(SPEEDUP, 1.0, reasons={"held": "x"})
    assert assess(SPEEDUP, math.nan).status == "inconclusive"
    with pytest.raises(ValueError, match="Estimate"):
        assess(SPEEDUP, stats.median_ratio([2, 2.1, 2.2], [1, 1, 1]), spread=(1, 2))


def test_the_claims_table_and_headlines_come_from_the_verdicts(monkeypatch):
    from perfkit import viz

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))
    v = assess(SPEEDUP, 1.2, spread=(1.1, 1.3))
    assert viz.show_claim(v) is None and viz.CLAIM_MIME in shown[-1]
    viz.show_claims_table({"mixed precision": v})
    assert "holds partly" in shown[-1]["text/html"] and "<th>typical statement</th>" in shown[-1]["text/html"]
    assert viz.claims_table_rows({"mp": v}) == [
        ("mp", SPEEDUP.statement, "bf16 step speedup: 1.2x (spread 1.1x to 1.3x)", "holds partly")]
    assert viz.claims_headlines({"mp": v}) == {"mp": "holds partly (1.2x (spread 1.1x to 1.3x))"}
    with pytest.raises(ValueError, match="non-empty"):
        viz.show_claims_table({})
    with pytest.raises(TypeError, match="ClaimVerdict"):
        viz.claims_headlines({"mp": "holds"})
    with pytest.raises(TypeError, match="ClaimVerdict"):
        viz.show_claim("holds")


def test_a_small_miss_is_shown_with_the_digits_that_differ():
    # 11.8 +- 50 % ends at 17.7; 17.72 rounds to "17.7" and "0%": the text must show the gap
    p = Prediction(what="eager chain time", model="bytes", value=11.8, rel_tol=0.5, unit=" ms")
    v = judge(p, 17.72)
    assert v.outcome == "missed" and v.direction == "above"
    assert "17.72 ms is 0.11% above 17.7 ms" in v.text, v.text
    assert "0% above" not in v.text


def test_plot_claims_draws_one_bar_per_status_as_long_as_its_count():
    from perfkit import viz

    c = Claim(statement="s", figure="speedup", low=1.4, partly=1.0, unit="x")
    verdicts = {"a": assess(c, 1.5, (1.45, 1.55)), "b": assess(c, 1.6, (1.5, 1.7)),
                "c": assess(c, 0.5, (0.4, 0.6))}
    fig = viz.plot_claims(verdicts)
    widths = {t.get_text(): b.get_width()
              for t, b in zip(fig.axes[0].get_yticklabels(), fig.axes[0].patches)}
    assert widths == {"holds": 2, "holds partly": 0, "does not hold here": 1,
                      "inconclusive": 0, "GPU only": 0}
    with pytest.raises((TypeError, ValueError)):
        viz.plot_claims({})


def test_a_measurement_outside_its_own_spread_widens_the_spread():
    # a ratio of medians (1.62) can fall outside the paired ratios' quantiles (1.63-1.87); the
    # text must never print a figure outside its own spread
    v = judge(BOUND, 1.62, spread=(1.63, 1.87))
    assert v.spread == (1.62, 1.87) and "spread 1.62x to 1.87x" in v.text
    c = assess(SPEEDUP, 0.9, spread=(0.95, 1.2))
    assert c.spread == (0.9, 1.2)


def test_busy_names_the_load_only_above_the_core_count(monkeypatch):
    import os

    from perfkit.verdict import busy

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.25, 1.0, 1.0))
    assert busy() == "the machine was busy (load average 5.2 on 2 cores)"
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 9.0, 9.0))  # at the core count: not busy
    assert busy() == ""

    def unavailable():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert busy() == ""


# --- the one rule, on constructed Estimates -------------------------------------------------


def est(value, low, high, level=0.9):
    return stats.Estimate(value, low, high, level, 30, "constructed")


@pytest.mark.parametrize("e,outcome,direction", [
    (est(1.2, 1.1, 1.3), "held", "inside"),           # the whole interval inside
    (est(1.5, 1.4, 1.6), "missed", "above"),          # the whole interval above
    (est(0.9, 0.85, 0.95), "missed", "below"),        # the whole interval below
    (est(1.3, 1.2, 1.4), "inconclusive", ""),         # straddles the upper edge, the figure inside
    (est(1.02, 0.98, 1.1), "inconclusive", ""),       # straddles the lower edge
    (est(1.35, 1.2, 1.4), "missed", "above"),         # the figure past the bound: missed
    (est(1.34, 1.34, 1.34), "held", "inside"),        # no interval: the value alone, on the edge
])
def test_the_one_rule_on_each_outcome(e, outcome, direction):
    v = judge(BOUND, e)
    assert (v.outcome, v.direction) == (outcome, direction), v.text
    assert v.spread is None if e.low == e.high else v.spread == (e.low, e.high)
    if e.low < e.high:
        assert "90% interval" in v.text and v.level == 0.9


def test_an_estimate_outside_the_physical_range_is_disturbed():
    v = judge(POINT, est(1.2, 1.1, 1.3))
    assert v.outcome == "disturbed" and "load average" in v.text or "cores" in v.text


def test_a_physical_range_open_at_one_end_prints_as_open():
    # a floor with no ceiling printed "0.95x to infx"
    floor = Prediction("ratio", "m", low=1.0, unit="x", physical=(0.95, None))
    v = judge(floor, 0.5)
    assert v.outcome == "disturbed" and "(0.95x and above)" in v.text and "inf" not in v.text
    ceiling = Prediction("share", "m", high=0.5, physical=(None, 1))
    assert "(1 and below)" in judge(ceiling, 1.5).text


def test_an_estimate_carries_its_interval_so_a_second_spread_is_refused():
    with pytest.raises(ValueError, match="Estimate"):
        judge(BOUND, est(1.2, 1.1, 1.3), spread=(1.0, 1.4))


def test_a_verdict_that_did_not_hold_names_a_busy_machine_itself(monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 1.0, 1.0))
    assert "load average 6.0 on 2 cores" in judge(BOUND, 1.5, spread=(1.45, 1.55)).text
    assert "load average" not in judge(BOUND, 1.2, spread=(1.15, 1.25)).text  # held: no excuse
    assert "load average" not in judge(BOUND, 1.5).text  # an exact count: load cannot move it
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert "load average" not in judge(BOUND, 1.5, spread=(1.45, 1.55)).text


def test_a_figure_measured_elsewhere_never_blames_this_machine(monkeypatch):
    # a published run's figure missed a prediction: this machine's load has nothing to do with it
    import dataclasses
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 1.0, 1.0))
    there = dataclasses.replace(BOUND, measured_here=False)
    assert judge(there, 1.5).outcome == "missed"
    # nor does it call the figure measured (planted: the label of a figure measured here)
    assert "**Figure, not measured in this run:** 1.5" in judge(there, 1.5).text
    assert "Measured:" not in judge(there, 1.5).text and "**Measured:** 1.5" in judge(BOUND, 1.5).text
    assert "load average" not in judge(there, 1.5).text
    assert "load average" not in judge(there, 1.5, spread=(1.1, 1.6)).text  # inconclusive too
    physical = dataclasses.replace(there, physical=(0.0, 1.0))
    assert "machine now" not in judge(physical, 2.0).text
    with pytest.raises(TypeError, match="measured_here"):
        dataclasses.replace(BOUND, measured_here="no")


def test_the_printed_point_always_lies_inside_the_printed_interval():
    # a bootstrap of a discrete statistic can leave the point out; the Estimate is widened
    rng = __import__("random").Random(3)
    for _ in range(50):
        n = rng.randint(2, 7)
        a = [rng.uniform(0.5, 2) for _ in range(n)]
        b = [rng.uniform(0.5, 2) for _ in range(n)]
        e = stats.median_ratio(a, b)
        assert e.low <= e.value <= e.high
        v = judge(BOUND, e)
        assert v.spread is None or v.spread[0] <= v.measured <= v.spread[1]


def test_an_interval_across_both_edges_names_the_edge_nearest_the_figure():
    share = Prediction("hidden share", "overlap model", value=0.075, rel_tol=1.0, physical=(-1, 1))
    v = judge(share, est(0.10, -0.31, 0.68))
    assert v.outcome == "inconclusive" and "across the edge 0.15" in v.text and "lies 0.05 from it" in v.text
    assert "reaches 0.53 above it" in v.text  # a lopsided interval: the side past the edge, not a half-width
    # the interval's width from its samples against the predicted range decides: only more samples can
    assert "the interval is 0.99 wide from 30 samples, the predicted range 0.15 wide" in v.text


def test_a_claim_that_does_not_hold_names_a_busy_machine(monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 1.0, 1.0))
    assert "load average 6.0" in assess(SPEEDUP, 0.8).text
    assert "load average" not in assess(SPEEDUP, 1.5).text


def test_kinds_text_counts_the_held_verdicts_by_what_their_prediction_could_test():
    from perfkit.verdict import kinds_text

    window = judge(Prediction("w", "m", value=1.0, rel_tol=0.1), 1.0)
    floor = judge(Prediction("f", "m", low=0.0), 5.0)
    ceiling = judge(Prediction("c", "m", high=9.0), 5.0)
    missed = judge(Prediction("w", "m", value=1.0, rel_tol=0.1), 3.0)
    text = kinds_text([window, floor, floor, ceiling, missed])
    # the held ones only, by kind; the wrong rule that calls every held verdict a test says "4 tests"
    assert text.startswith("4 of 5 verdicts held: by what each prediction could test, 1 test, 2 floors, "
                           "1 ceiling;")
    assert kinds_text([missed]) == "0 of 1 verdicts held."
    assert kinds_text([]) == ""
    with pytest.raises(TypeError, match=r"verdicts\[0\]"):
        kinds_text([1.0])


def test_show_verdict_keeps_every_verdict_it_showed_in_order(monkeypatch):
    from perfkit import viz

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a))
    before = len(viz.shown_verdicts())
    v = judge(Prediction("w", "m", value=1.0, rel_tol=0.1), 1.0)
    viz.show_verdict(v)
    assert viz.shown_verdicts()[before:] == (v,) and len(shown) == 1


def test_a_bound_never_prints_past_its_own_edge():
    from perfkit.units import si_bound

    # as run: a lower bound of 10.05 ms printed "at least 10.1 ms", above figures of 10.07 and
    # 10.08 ms it lies below; rounding to the nearest is the wrong implementation this catches
    assert si_bound(10.051, " ms", "low") == "10.05 ms"
    assert si_bound(10.051, " ms", "high") == "10.1 ms"
    assert si_bound(1.0986, "x", "high") == "1.1x" and si_bound(1.0986, "x", "low") == "1.098x"
    # no more than four digits: past them the edge is rounded outward, not printed in full
    assert si_bound(2.090305, "x", "high") == "2.091x" and si_bound(1.47999, "x", "low") == "1.479x"
    p = Prediction("step", "m", low=10.051, unit=" ms")
    assert p.describe() == "at least 10.05 ms"
    both = Prediction("r", "m", low=1.0986, high=1.0986 * 2, unit="x")
    assert both.describe() == "between 1.098x and 2.2x"


def test_a_counted_figure_is_labelled_counted_not_measured():
    bytes_moved = Prediction("bytes per call", "ring: 2 (n - 1) / n of the buffer", value=100.0, rel_tol=0.0,
                             unit="B", timed=False, counted=True)
    v = judge(bytes_moved, 100.0)
    assert "**Counted:** 100 B" in v.text and "Measured" not in v.text and v.held
    assert "**Counted:**" in context(Prediction("calls", "one per bucket", high=1e9, timed=False,
                                                counted=True), 3.0)
    timed = Prediction("step", "model", value=1.0, rel_tol=0.1, unit="s")
    assert "**Measured:**" in judge(timed, 1.0).text and timed.label() == "Measured"
    with pytest.raises(ValueError, match="counted=True"):
        Prediction("bytes", "ring", value=1.0, rel_tol=0.0, counted=True)   # a counted figure is not timed
    with pytest.raises(TypeError, match="counted"):
        Prediction("bytes", "ring", value=1.0, rel_tol=0.0, timed=False, counted=1)  # type: ignore[arg-type]
