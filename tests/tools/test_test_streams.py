"""tools.test_streams: the two pytest streams of `make test` cover the suite once, and a
failing or stuck stream fails the whole run."""

import sys
from pathlib import Path

import pytest

from tools import test_streams

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_folder_runs_in_exactly_one_stream():
    cmds = test_streams.commands([])
    side, rest, alone = cmds["labs+notebooks"], cmds["rest"], cmds["alone"]
    folders = [p for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py"))]
    assert folders and "tests/diagnose" in alone  # the planted-cause tests need an unloaded machine
    for f in folders:
        rel = f.relative_to(ROOT).as_posix()
        where = [rel in side, "tests" in rest and f"--ignore={rel}" not in rest, rel in alone]
        assert sum(where) == 1, f"{rel}: in (side, rest, alone) {where}"
    # lab 06's grading runs alone, once, in its own process: deselected from the side stream
    lab06 = cmds["alone: lab 06"]
    for t in test_streams.ALONE_TESTS:
        assert f"--deselect={t}" in side and t in lab06 and t not in alone and "lab06_capstone" in t
    # planted: tests/diagnose and tests/labs in one process (its modules' `from conftest import`
    # then found tests/labs' conftest, and the whole part failed to collect)
    assert not any(a.startswith("tests/labs") for a in alone)
    assert not any(a.startswith("tests/diagnose") for a in lab06)
    # the four reports do not overwrite each other
    assert len({a for c in cmds.values() for a in c if a.startswith("--junitxml")}) == 4


def _fake(monkeypatch, tmp_path, codes):
    """Each part a tiny Python program: ``codes`` for the side stream, the rest, and the parts run
    alone (one code for all of them, or one each)."""
    monkeypatch.setattr(test_streams, "REPORTS", tmp_path)
    names = ("labs+notebooks", "rest", *test_streams.ALONE_PARTS)
    codes = list(codes) + [codes[-1]] * (len(names) - len(codes))
    monkeypatch.setattr(test_streams, "commands", lambda extra: {
        name: [sys.executable, "-c", code] for name, code in zip(names, codes, strict=True)})


@pytest.mark.parametrize("codes, want", [
    (("print('side ok')", "pass", "pass"), 0),
    (("import sys; sys.exit(1)", "pass", "pass"), 1),   # planted: only the live stream's code counted
    (("pass", "import sys; sys.exit(3)", "pass"), 1),
    (("pass", "pass", "import sys; sys.exit(1)"), 1),   # planted: the tests run alone not counted
    (("pass", "pass", "pass", "import sys; sys.exit(1)"), 1),   # planted: only the first part alone counted
])
def test_the_run_fails_when_either_stream_fails(monkeypatch, tmp_path, capsys, codes, want):
    _fake(monkeypatch, tmp_path, codes)
    assert test_streams.main([]) == want
    if want == 0:
        assert "side ok" in capsys.readouterr().out  # the side stream's log is shown


def test_a_stream_past_the_timeout_is_killed(monkeypatch, tmp_path):
    _fake(monkeypatch, tmp_path, ("import time; time.sleep(60)", "pass", "pass"))
    assert test_streams.main(["--timeout-s", "2"]) == 2
    _fake(monkeypatch, tmp_path, ("pass", "pass", "import time; time.sleep(60)"))
    assert test_streams.main(["--timeout-s", "2"]) == 2  # the time left after the streams binds it too


def test_the_tests_run_alone_exist():
    """A renamed test would be deselected from the side stream and missing from alone."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *test_streams.ALONE_TESTS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    collected = {line.strip() for line in out.stdout.splitlines()}
    assert set(test_streams.ALONE_TESTS) <= collected, out.stdout[-2000:]
