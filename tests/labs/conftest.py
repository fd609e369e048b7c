"""Lab 06's grader measures a baseline (the slow job and the reference solution, several
2-process runs); one file keeps it for the whole test session, so the solution and the
mutants are graded against the same baseline and it is measured once."""

import os

import pytest

BASELINE_ENV = "PERFKIT_LAB06_BASELINE"  # as in checks_lab06.py


@pytest.fixture(scope="session", autouse=True)
def _lab06_baseline(tmp_path_factory):
    before = os.environ.get(BASELINE_ENV)
    os.environ[BASELINE_ENV] = str(tmp_path_factory.mktemp("lab06") / "baseline.json")
    yield
    if before is None:
        os.environ.pop(BASELINE_ENV, None)
    else:
        os.environ[BASELINE_ENV] = before


_GRADED: dict = {}


@pytest.fixture(scope="session")
def graded_solution():
    """``graded_solution(path)``: the solution's report and its mutants' results from one
    grading run (:func:`tools.grade.grade_with_mutants`), shared by test_labs and
    test_mutants: the solution's cells run once per session instead of twice."""
    from pathlib import Path

    from tools.grade import grade_with_mutants

    root = Path(__file__).resolve().parents[2]

    def get(solution: Path):
        if solution not in _GRADED:
            mutants = root / "tools" / "labs" / f"mutants_{solution.name.split('_', 1)[0]}.py"
            _GRADED[solution] = grade_with_mutants(solution, mutants)
        return _GRADED[solution]

    return get
