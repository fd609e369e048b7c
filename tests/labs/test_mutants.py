"""Every lab question rejects plausible wrong answers, with a message that names the mistake.

``tools/labs/mutants_labNN.py`` lists, for every graded question, at least three wrong
answers a student could hand in (``tools.grade.Mutant``). One grading run per lab executes
the solution's cells, then each mutant against its question's check: the check must fail
(an AssertionError, or a timeout for an answer that never returns) with a message matching
the mutant's ``expect`` pattern. The solution itself passing is tested in test_labs.py.
"""

from pathlib import Path

import pytest

from tools.grade import load_checks, load_mutants

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "tools" / "labs"  # checks and mutants
SOLUTIONS = sorted((ROOT / "solutions").glob("lab*.ipynb"))
MIN_MUTANTS = 3


def mutants_file(solution: Path) -> Path:
    return LABS / f"mutants_{solution.name.split('_', 1)[0]}.py"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_every_question_has_mutants(solution):
    path = mutants_file(solution)
    assert path.exists(), f"no {path.name}: write wrong answers for every question"
    questions = load_checks(LABS / f"checks_{solution.name.split('_', 1)[0]}.py").QUESTIONS
    counts = {q: 0 for q in questions}
    for m in load_mutants(path):
        counts[m.question] += 1
    few = {q: n for q, n in counts.items() if n < MIN_MUTANTS}
    assert not few, f"questions with fewer than {MIN_MUTANTS} mutants: {few}"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_every_mutant_fails_its_question_naming_the_mistake(solution, imitate, graded_solution):
    path = mutants_file(solution)
    if not path.exists():
        pytest.skip(f"no {path.name}")
    report, results = graded_solution(solution)  # one grading run with test_labs
    assert not report.error, report.format()
    missed = [f"{r.mutant.question} / {r.mutant.mistake}: {r.kind}: {r.message[:300]!r} "
              f"(expected a failure matching {r.mutant.expect!r})"
              for r in results if not r.caught]
    assert not missed, "mutants not caught:\n" + "\n".join(missed)
