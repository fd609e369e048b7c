"""Bounds judged as bounds, and explanations that name what decided.

A bound (``low``/``high``) claims that no measurement crosses it: a figure beyond it is
missed even where its interval reaches back (or where it has too few samples for one); a
figure inside it is held only when its whole interval is (else inconclusive). A tolerance
(``value`` ± ``rel_tol``) is missed only when its whole interval lies outside. Every
inconclusive verdict names the number that decided (too few samples, the interval's reach
and width) and the section's own cause for the side the figure lies on. Planted wrong rules
(a crossed bound called inconclusive, an inside one held on its point alone, the old rule
that dropped the cause) are run through the same checks and must fail them.
"""

import dataclasses
import os
import random
import re

import pytest

from perfkit import stats
from perfkit.advice import Claim, assess
from perfkit.verdict import Prediction, Verdict, context, judge

AMDAHL = Prediction("the ddp fix's speedup", "Amdahl: 1 / (1 - share)", high=1.81, unit="x")
FLOOR = Prediction("the prefetcher's speedup", "no slower than serial", low=1.0, unit="x")
BUBBLE = Prediction("bubble share", "(p - 1) / (m + p - 1)", value=0.2, rel_tol=0.15, physical=(0, 1))
# an upper bound (Amdahl) beside a floor the model only expects (a fix may slow a step), and a
# model's range whose two ends are expectations: a soft edge is judged as a tolerance's
FIX = Prediction("a fix's speedup", "Amdahl, and no slower", low=1.0, high=1.41, soft=("low",), unit="x")
RANGE = Prediction("batch 32 over 16", "a fitted model's range", low=1.02, high=1.08, soft=("low", "high"),
                   unit="x")
WHY = {"above": "ABOVE: find_unused_parameters walks the graph, which the share left out",
       "below": "BELOW-CAUSE", "held": "HELD-CAUSE", "inconclusive": "OWN-SENTENCE"}


def est(value, low, high, n=7):
    return stats.Estimate(value, low, high, 0.9, n, f"median of {n} paired ratios")


# (prediction, estimate, outcome, direction): the bound rule, case by case
BOUND_CASES = [
    (AMDAHL, est(2.14, 1.70, 2.60), "missed", "above"),      # crossed; the interval reaches back
    (AMDAHL, est(2.14, 1.90, 2.60), "missed", "above"),      # crossed; the interval beyond too
    (AMDAHL, est(1.60, 1.50, 1.90), "inconclusive", ""),     # inside; the interval reaches across
    (AMDAHL, est(1.60, 1.50, 1.70), "held", "inside"),
    (FLOOR, est(0.97, 0.90, 1.04), "missed", "below"),       # a lower bound crossed
    (FLOOR, est(1.02, 0.98, 1.10), "inconclusive", ""),
    (BUBBLE, est(0.237, 0.20, 0.30), "inconclusive", ""),    # a tolerance: the interval decides
    (BUBBLE, est(0.26, 0.24, 0.30), "missed", "above"),
    (BUBBLE, est(0.21, 0.19, 0.22), "held", "inside"),
    (FIX, est(0.82, 0.42, 1.82), "inconclusive", ""),       # a soft floor crossed; the interval reaches back
    (FIX, est(0.82, 0.70, 0.95), "missed", "below"),        # ... and wholly below it
    (FIX, est(1.60, 1.20, 2.00), "missed", "above"),        # its hard edge crossed, reaching back: missed
    (RANGE, est(1.015, 0.95, 1.06), "inconclusive", ""),    # a model's range: the interval decides
    (RANGE, est(1.10, 1.09, 1.12), "missed", "above"),
]


def mismatches(rule) -> list[str]:
    """The BOUND_CASES a verdict ``rule`` (judge's signature) gets wrong."""
    return [f"{p.what} {e.value}: {v.outcome}/{v.direction}, want {o}/{d}"
            for p, e, o, d in BOUND_CASES if ((v := rule(p, e)).outcome, v.direction) != (o, d)]


def crossed_is_inconclusive(p, e, **kw):
    """A planted wrong rule: the old one, where an interval across a crossed bound was inconclusive."""
    v = judge(p, e, **kw)
    lo, hi = p.bounds()
    if v.outcome == "missed" and p.is_bound and e.low <= (hi if v.direction == "above" else lo) <= e.high:
        return dataclasses.replace(v, outcome="inconclusive", direction="")
    return v


def inside_is_held_on_its_point(p, e, **kw):
    """A planted wrong rule: a bound's figure inside it held whatever its interval, which calls
    an interval of -0.43 to 1.40 around a bound of 0.25 'held'."""
    v = judge(p, e, **kw)
    lo, hi = p.bounds()
    if v.outcome == "inconclusive" and p.is_bound and lo <= e.value <= hi:
        return dataclasses.replace(v, outcome="held", direction="inside")
    return v


def soft_as_hard(p, e, **kw):
    """A planted wrong rule: every edge of a bound judged hard, a model's expectation included."""
    return judge(dataclasses.replace(p, soft=()), e, **kw)


def test_a_rule_that_treats_soft_edges_as_bounds_fails_the_check():
    assert mismatches(soft_as_hard) == ["a fix's speedup 0.82: missed/below, want inconclusive/",
                                        "batch 32 over 16 1.015: missed/below, want inconclusive/"]


def test_soft_edges_are_named_and_checked():
    assert FIX.describe() == "between 1x and 1.41x (1x expected, not a bound; 1.41x a bound)"
    assert RANGE.describe() == "between 1.02x and 1.08x (a model's expected range, not a bound)"
    with pytest.raises(ValueError, match="soft"):
        Prediction("x", "m", low=1.0, soft=("high",))
    with pytest.raises(ValueError, match="soft"):
        Prediction("x", "m", low=1.0, soft=("lower",))


def test_a_rule_that_holds_an_inside_bound_on_its_point_fails_the_check():
    assert mismatches(inside_is_held_on_its_point) == [
        "the ddp fix's speedup 1.6: held/inside, want inconclusive/",
        "the prefetcher's speedup 1.02: held/inside, want inconclusive/"]


def test_the_rule_on_bounds_and_tolerances():
    assert mismatches(judge) == []


def test_a_rule_that_calls_a_crossed_bound_inconclusive_fails_the_check():
    assert mismatches(crossed_is_inconclusive) == [
        "the ddp fix's speedup 2.14: inconclusive/, want missed/above",
        "the prefetcher's speedup 0.97: inconclusive/, want missed/below",
        "a fix's speedup 1.6: inconclusive/, want missed/above"]


def test_a_crossed_bound_names_the_crossing_and_the_term_it_left_out():
    v = judge(AMDAHL, est(2.14, 1.70, 2.60), explain=WHY)
    assert "missed: 2.14x is 18% above 1.81x" in v.text
    assert "reaches back across the bound by 0.11," in v.text and "no measurement crosses it" in v.text
    assert WHY["above"] in v.text and "BELOW-CAUSE" not in v.text and "OWN-SENTENCE" not in v.text


def test_an_inconclusive_verdict_keeps_the_cause_of_the_side_the_figure_lies_on():
    v = judge(BUBBLE, est(0.237, 0.20, 0.30), explain=WHY)
    assert v.outcome == "inconclusive"
    assert "OWN-SENTENCE" in v.text
    assert ("The point estimate lies above the predicted range, its interval reaching into the range: "
            f"{WHY['above']}") in v.text
    assert "BELOW-CAUSE" not in v.text and "HELD-CAUSE" not in v.text
    below = judge(BUBBLE, est(0.165, 0.10, 0.18), explain=WHY)
    assert below.outcome == "inconclusive"
    assert ("The point estimate lies below the predicted range, its interval reaching into the range: "
            "BELOW-CAUSE") in below.text

    def old_rule(p, e, explain):   # planted: only the "inconclusive" key's sentence survives
        v = judge(p, e)
        return dataclasses.replace(v, text=v.text + " " + explain["inconclusive"])

    assert WHY["above"] not in old_rule(BUBBLE, est(0.237, 0.20, 0.30), WHY).text


def test_an_inconclusive_verdict_says_a_sentence_its_side_repeats_once():
    """Planted: the inconclusive sentence printed, then again inside the side's cause."""
    why = {**WHY, "inconclusive": "SHARED-PHASES.", "below": "BELOW-CAUSE. SHARED-PHASES."}
    v = judge(BUBBLE, est(0.165, 0.10, 0.18), explain=why)
    assert v.outcome == "inconclusive" and v.text.count("SHARED-PHASES.") == 1
    assert ("The point estimate lies below the predicted range, its interval reaching into the range: "
            "BELOW-CAUSE. SHARED-PHASES.") in v.text
    v = judge(BUBBLE, est(0.237, 0.20, 0.30), explain=why)  # above: its cause lacks the sentence
    assert v.text.count("SHARED-PHASES.") == 1


def test_an_inconclusive_verdict_names_the_numbers_that_decided():
    v = judge(BUBBLE, est(0.237, 0.20, 0.30, n=4 + 3))
    assert "reaches across the edge 0.23" in v.text and "the figure lies 0.007 from it" in v.text
    assert "the interval is 0.1 wide from 7 samples, the predicted range 0.06 wide" in v.text
    assert "only more samples, or less noise, can decide" in v.text


def test_too_few_samples_miss_a_crossed_bound_and_leave_the_rest_inconclusive():
    few = stats.median_ratio([2.2, 2.1, 2.0], [1.0, 1.0, 1.0])
    v = judge(AMDAHL, few, explain=WHY)
    assert v.outcome == "missed" and v.direction == "above" and v.spread is None
    assert "3 samples, fewer than the 5 an interval at this level (90%) needs" in v.text
    assert "Measured:** 2.1x (3 samples: too few for an interval)" in v.text and WHY["above"] in v.text
    inside = judge(AMDAHL, stats.median_ratio([1.2, 1.1, 1.0], [1.0, 1.0, 1.0]), explain=WHY)
    assert inside.outcome == "inconclusive" and "fewer than the 5" in inside.text
    # no interval at 3 samples: the point is all there is, and the text does not invent one
    assert (f"The point estimate lies inside the predicted range, with no interval: {WHY['held']}"
            in inside.text)
    t = judge(BUBBLE, stats.median_interval([0.21, 0.2, 0.22]), explain=WHY)
    assert t.outcome == "inconclusive" and "fewer than the 5" in t.text
    c = assess(Claim("it is 2x faster", "speedup", low=1.8, partly=1.0, unit="x"), few)
    assert c.status == "inconclusive" and "fewer than the 5" in c.text

    def unsampled_bound_inconclusive(p, e):   # planted: the old rule, too few samples first
        v = judge(p, e)
        return dataclasses.replace(v, outcome="inconclusive") if e.needs is not None else v

    assert unsampled_bound_inconclusive(AMDAHL, few).outcome != v.outcome


def test_ties_are_judged_on_the_value_and_never_print_a_zero_width_interval():
    tied = stats.median_interval([1.5] * 6)
    v = judge(AMDAHL, tied)
    assert v.outcome == "held" and "all 6 samples equal 1.5x" in v.text and " to 1.5x" not in v.text


def test_a_busy_machine_is_named_with_its_size_and_the_noise_it_left(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.2, 1.0, 1.0))
    v = judge(BUBBLE, est(0.237, 0.20, 0.30))
    assert "When judged: load average 5.2 on 2 cores, 2.6 runnable tasks per core" in v.text
    assert "this run's own processes included" in v.text   # it does not claim that other jobs ran
    assert "the 90% interval is 42% of the figure wide" in v.text
    wide = judge(BUBBLE, est(0.237, 0.05, 0.90)).text   # an interval wider than the figure
    assert "the 90% interval is 3.6x the figure wide" in wide and "359%" not in wide
    assert "load average" not in judge(BUBBLE, est(0.21, 0.19, 0.22)).text   # held: no excuse
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert "load average" not in judge(BUBBLE, est(0.237, 0.20, 0.30)).text


def test_a_bound_that_cannot_fail_is_refused_and_printed_as_context():
    loose = Prediction("attention fix speedup", "Amdahl on the whole forward + backward", high=3.46,
                       unit="x", physical=(0, 3.0))
    assert not loose.can_fail() and AMDAHL.can_fail()
    with pytest.raises(ValueError, match="cannot fail"):
        judge(loose, est(1.01, 0.95, 1.08))
    # a range known at this machine's sizes, narrower than the physical one
    assert not AMDAHL.can_fail(within=(0.5, 1.5)) and AMDAHL.can_fail(within=(0.5, 2.0))
    text = context(AMDAHL, est(1.01, 0.95, 1.08), within=(0.5, 1.5))
    assert text.startswith("**Context, not a prediction** (Amdahl: 1 / (1 - share))")
    assert "1.01x (90% interval 0.95x to 1.08x" in text
    assert "The bound cannot fail here: 1.81x lies 0.31x above every value this figure can take" in text
    assert "can fail here: judge it" in context(AMDAHL, 1.2)
    assert "held" not in text and "missed" not in text


def test_the_printed_point_is_inside_its_printed_interval_in_every_verdict():
    rng = random.Random(7)
    pattern = re.compile(r"\*\*Measured:\*\* (\S+?)x \(90% interval (\S+?)x to (\S+?)x")
    for _ in range(300):
        scale = 10 ** rng.uniform(-4, 3)
        low, high = sorted(rng.uniform(0.5, 2.0) * scale for _ in range(2))
        value = rng.choice([low, high, rng.uniform(low, high)])
        p = Prediction("ratio", "model", value=scale, rel_tol=0.3, unit="x")
        m = pattern.search(judge(p, est(value, low, high)).text)
        if low == high:
            continue
        v, lo, hi = (float(g.replace(",", "")) for g in m.groups())
        assert lo <= v <= hi and lo < hi, m.group(0)
        assert (v > lo or value == low) and (v < hi or value == high), m.group(0)


def test_verdict_records_stay_json_ready():
    import json

    v = judge(AMDAHL, stats.median_ratio([2.2, 2.1, 2.0], [1.0, 1.0, 1.0]))
    assert isinstance(v, Verdict) and json.loads(json.dumps(v.record()))["outcome"] == "missed"


def test_a_figure_load_cannot_move_never_names_the_load(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))   # a busy machine
    loss = Prediction("loss with error feedback over without", "nothing is lost", high=1.0, unit="x",
                      timed=False)
    v = judge(loss, est(1.37, 1.24, 1.54))
    assert v.outcome == "missed" and "busy" not in v.text and "load average" not in v.text
    timing = dataclasses.replace(loss, timed=True)
    assert "load average 9.0" in judge(timing, est(1.37, 1.24, 1.54)).text   # a timing names it
    with pytest.raises(TypeError, match="timed must be a bool"):
        Prediction("x", "m", high=1.0, timed="no")


def test_the_measured_figure_prints_the_digits_that_show_its_side_of_an_edge():
    from perfkit.stats import Estimate
    from perfkit.verdict import Prediction, judge

    p = Prediction("fp32 tokens/s over the best other", "flattens", low=0.9, unit="x", soft=("low",))
    text = judge(p, Estimate(0.89973, 0.85, 0.95, 0.9, 15, "median of 15 paired ratios")).text
    # 3 digits printed "0.900x" beside "at least 0.9x", and the reader could not tell its side
    assert "**Measured:** 0.8997x (90% interval" in text
    far = judge(p, Estimate(0.8123, 0.80, 0.83, 0.9, 15, "median of 15 paired ratios")).text
    assert "**Measured:** 0.812x (90% interval" in far  # away from the edge: 3 digits, as before
