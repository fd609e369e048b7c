"""The grader survives what students hand in: missing files, syntax errors, hangs."""

import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tools.grade import checks_for, grade

ROOT = Path(__file__).resolve().parents[2]

CHECKS = '''
from tools.grade import require

def check_add(ns):
    assert require(ns, "add")(2, 3) == 5, "add(2, 3) should be 5"

def check_loop(ns):
    require(ns, "spin")()

QUESTIONS = {"q1_add": check_add, "q2_spin": check_loop}
TIMEOUT_S = {"q1_add": 5, "q2_spin": 2}
'''


def write_lab(tmp_path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    path = tmp_path / "lab99_demo.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "checks_lab99.py").write_text(CHECKS)
    return path


def test_passing_lab(tmp_path):
    nb = write_lab(tmp_path, "def add(a, b):\n    return a + b", "def spin():\n    return 1")
    report = grade(nb, tmp_path / "checks_lab99.py")
    assert report.score == 2, report.format()


def test_a_hanging_answer_times_out_and_the_rest_is_graded(tmp_path):
    nb = write_lab(tmp_path, "def add(a, b):\n    return a + b",
                   "def spin():\n    while True:\n        pass")
    # The question's own alarm (2 s) must stop the spin, not the run's deadline (60 s for the
    # cells + 7 s for the questions): the report tells the two apart, so no wall-clock bound
    # is needed, and a broken alarm fails here after 67 s instead of hanging.
    report = grade(nb, tmp_path / "checks_lab99.py", load_timeout_s=60)
    assert report.error == "", report.format()  # the deadline did not stop the worker
    kinds = {q.name: q.kind for q in report.questions}
    assert kinds == {"q1_add": "passed", "q2_spin": "timeout"}, report.format()
    spin = report.questions[1]
    assert spin.message == "took longer than 2 s" and spin.seconds >= 1.9, report.format()
    assert "score: 1/2" in report.format()


def test_a_hang_in_c_code_is_killed_by_the_overall_deadline(tmp_path):
    # time.sleep in a cell is interrupted by the alarm; a blocked C call is not, so the
    # parent's deadline must kill the worker. Simulate with a tiny load budget: the deadline
    # is 1 + 5 + 2 = 8 s, the cell sleeps 60 s; a run not cut short finishes the sleep.
    nb = write_lab(tmp_path, "import time\ntime.sleep(60)")
    t0 = time.monotonic()
    report = grade(nb, tmp_path / "checks_lab99.py", load_timeout_s=1)
    assert time.monotonic() - t0 < 55, "the worker was not killed before the cell's sleep ended"
    assert "time limit" in report.error and report.score == 0
    assert {q.kind for q in report.questions} == {"timeout"}, report.format()


def test_syntax_error_is_reported_and_other_cells_still_run(tmp_path):
    nb = write_lab(tmp_path, "def add(a, b)\n    return a + b", "def spin():\n    return 1")
    report = grade(nb, tmp_path / "checks_lab99.py")
    assert any("syntax error" in e for e in report.cell_errors), report.format()
    kinds = {q.name: q.kind for q in report.questions}
    assert kinds == {"q1_add": "AssertionError", "q2_spin": "passed"}, report.format()
    assert "add is not defined" in report.questions[0].message


def test_missing_notebook_and_unknown_lab(tmp_path):
    report = grade(tmp_path / "lab99_demo.ipynb", _checks(tmp_path))
    assert "no notebook at" in report.error and report.score == 0
    assert len(report.questions) == 2
    with pytest.raises(ValueError, match="labNN_"):
        checks_for(Path("homework.ipynb"))


def _checks(tmp_path):
    (tmp_path / "checks_lab99.py").write_text(CHECKS)
    return tmp_path / "checks_lab99.py"


def test_cli_prints_a_score_and_never_a_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tools.grade", str(tmp_path / "lab00_nope.ipynb"),
                          "--json", str(tmp_path / "r.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "no notebook at" in out.stdout and "score: 0/" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert json.loads((tmp_path / "r.json").read_text())["error"]


def test_launch_checked_turns_launch_failures_into_hints(monkeypatch):
    from perfkit import dist
    from tools.grade import launch_checked, pickled

    def raising(exc):
        def launch(*args, **kwargs):
            raise exc
        return launch

    cases = [(dist.LaunchTimeout("late", ""), AssertionError,
              "on 2 processes the ring did not finish in 120 s: look at the sends"),
             (dist.WorkerError("x", 1, "Traceback\nValueError: bad", "", 1), AssertionError,
              "a rank raised:\nTraceback\nValueError: bad"),
             (dist.WorkerError("x", 0, "NotImplementedError()", "", 1), NotImplementedError,
              "ring_all_reduce is not implemented")]
    for exc, kind, message in cases:
        monkeypatch.setattr(dist, "launch", raising(exc))
        with pytest.raises(kind) as info:
            launch_checked("tools.labs.ring_check", 2, {}, 120, "the ring",
                           "look at the sends", impl_name="ring_all_reduce")
        assert message in str(info.value)
    with pickled(len) as path:  # a picklable object round-trips through the file
        import cloudpickle
        with open(path, "rb") as fh:
            assert cloudpickle.load(fh) is len
    assert not Path(path).exists()


def test_one_run_grades_the_solution_and_its_mutants_as_two_runs_would(tmp_path):
    from tools.grade import grade_mutants, grade_with_mutants

    nb = write_lab(tmp_path, "def add(a, b):\n    return a + b", "def spin():\n    return 1")
    checks = tmp_path / "checks_lab99.py"
    # a check that leaves a mark in the namespace: the mutants must not see it
    checks.write_text(CHECKS.replace('def check_loop(ns):\n    require(ns, "spin")()',
                                    'def check_loop(ns):\n    require(ns, "spin")()\n'
                                    '    ns["add"] = lambda a, b: a - b'))  # wrong, after q1
    mutants = tmp_path / "mutants_lab99.py"
    mutants.write_text(
        "from tools.grade import Mutant\n"
        "MUTANTS = [Mutant('q1_add', 'subtracts', 'def add(a, b):\\n    return a - b', 'should be 5'),\n"
        "           Mutant('q1_add', 'left as the checks left it', 'pass', 'should be 5')]\n")
    report, results = grade_with_mutants(nb, mutants, checks)
    alone = grade(nb, checks)
    assert [(q.name, q.kind) for q in report.questions] == [(q.name, q.kind) for q in alone.questions]
    assert all(q.passed for q in report.questions) and not report.error
    apart = grade_mutants(nb, mutants, checks)
    assert [(r.kind, r.caught) for r in results] == [(r.kind, r.caught) for r in apart]
    # the second "mutant" changes nothing: it passes, since it sees the cells' add, not the
    # wrong one q2's check left behind
    assert [r.caught for r in results] == [True, False]
