"""Every lab's checks pass on its solution and fail on the blank lab for the right reason.

A blank question must fail with NotImplementedError (the student has not answered) or an
AssertionError (a check caught a wrong answer); any other error means a check depends on
something unrelated (a demo cell, a missing import) and would confuse students.
"""

from pathlib import Path

import pytest

from tools.grade import grade

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("lab*.ipynb"))


def test_every_lab_has_checks_and_a_blank():
    assert SOLUTIONS, "no labs in solutions/"
    for sol in SOLUTIONS:
        prefix = sol.name.split("_", 1)[0]
        assert (ROOT / "tools" / "labs" / f"checks_{prefix}.py").exists(), f"no checks for {sol.name}"
        assert (ROOT / "labs" / sol.name).exists(), f"labs/{sol.name} missing: run `make labs`"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_checks_pass_on_the_solution(solution, imitate, graded_solution):
    report, _ = graded_solution(solution)  # one grading run with test_mutants
    assert not report.error, report.format()
    assert report.questions and all(q.passed for q in report.questions), report.format()


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_checks_fail_on_the_blank_lab_for_the_expected_reason(solution):
    report = grade(ROOT / "labs" / solution.name)
    assert not report.error, report.format()
    for q in report.questions:
        assert q.kind in ("NotImplementedError", "AssertionError"), (
            f"{q.name} failed on the blank lab with {q.kind}: {q.message}\n{report.format()}")


def test_lab04_drops_only_a_reference_too_slow_to_set_the_bar():
    """The speed check times the references the probe keeps: dropping the faster one would
    lower the bar (planted: [1.0, 3.0] must keep fp32, [3.0, 1.0] bf16)."""
    from tools.labs.checks_lab04 import DROP_SLOWER, _contenders

    assert _contenders([1.0, 3.0]) == [0] and _contenders([3.0, 1.0]) == [1]
    assert _contenders([1.0, 1.5]) == [0, 1] and _contenders([1.0, DROP_SLOWER]) == [0, 1]
    assert _contenders([0.2, 0.2]) == [0, 1]
