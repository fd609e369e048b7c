"""make course's scorecard: every outcome of the one rule counted, and chance misses stated."""

from tools.run_course import NotebookRun, scorecard


def _v(outcome, level=0.9):
    return {"outcome": outcome, "level": level, "text": f"**{outcome}** text"}


def test_scorecard_counts_every_outcome_and_the_misses_chance_gives():
    runs = [NotebookRun("00_a", "ok", 1.0, verdicts=[_v("held")] * 38 + [_v("missed"), _v("disturbed")]),
            NotebookRun("01_b", "ok", 1.0, verdicts=[_v("inconclusive"), _v("held", None)])]
    text = scorecard(runs)
    assert "00_a                         38 / 40  1 missed, 0 inconclusive, 1 disturbed" in text
    assert "39 / 42  1 missed, 1 inconclusive, 1 disturbed" in text
    # 41 verdicts judged on 90% intervals: up to 41 x 5% = 2.0 misses by chance alone
    assert "41 at 90%" in text and "up to 2.0 of them missed" in text
    assert "[disturbed] disturbed text" in text and "[held]" not in text


def test_a_run_without_intervals_claims_no_chance_misses():
    assert "chance" not in scorecard([NotebookRun("00_a", "ok", 1.0, verdicts=[_v("held", None)])])


def test_a_level_built_as_a_product_counts_with_the_level_it_equals():
    # (0.9 ** (1/3)) ** 3 is 0.8999999999999999: one level, not "1 at 90%, 2 at 90%"
    runs = [NotebookRun("00_a", "ok", 1.0, verdicts=[_v("held"), _v("held", (0.9 ** (1 / 3)) ** 3)])]
    assert "2 at 90%" in scorecard(runs)


def test_held_verdicts_are_counted_by_what_their_prediction_could_test():
    from dataclasses import asdict

    from perfkit.verdict import Prediction

    def held(**kw):
        return {**_v("held"), "prediction": asdict(Prediction("x", "m", **kw))}

    window, floor = held(value=1.0, rel_tol=0.1), held(low=1.0)
    ceiling, exact = held(high=2.0, soft=("high",)), held(value=3.0, rel_tol=0.0)
    stored = held(value=1.0, rel_tol=0.2, measured_here=False)
    # a record goes through JSON: tuples come back as lists
    listed = {**floor, "prediction": {**floor["prediction"], "physical": [0.0, None], "soft": []}}
    partial = {**_v("held"), "prediction": {"what": "x"}}  # not a whole prediction: not counted
    runs = [NotebookRun("00_a", "ok", 1.0, verdicts=[window, floor, listed, ceiling, exact, stored,
                                                     {**window, "outcome": "missed"}, _v("held"), partial])]
    text = scorecard(runs)
    # counted once each, held only, in the kinds' order; a record without a prediction is not counted
    assert "held, by what the prediction could test" in text
    assert ": 1 test, 2 floors, 1 ceiling, 1 exact check, 1 stored run (" in text
    # the wrong rule that counts every held verdict as a test would print "7 tests"
    assert "7 tests" not in text


def test_a_prediction_with_both_edges_clipped_to_one_value_is_an_exact_check():
    from perfkit.verdict import Prediction

    assert Prediction("x", "m", low=0.0, physical=(None, 0.0)).kind() == "exact check"
    assert Prediction("x", "m", low=0.0, high=1.0, soft=("low", "high")).kind() == "test"
    assert Prediction("x", "m", high=1.0).kind() == "ceiling"
