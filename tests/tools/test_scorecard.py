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
