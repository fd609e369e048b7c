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
