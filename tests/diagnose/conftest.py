"""Helpers for the ``perfkit diagnose`` tests: run the command as a user would (a fresh
process, one intra-op thread as torchrun sets, a private output folder)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "diagnose"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


class Run:
    """What one ``python -m perfkit diagnose`` run left: exit code, output, report."""

    def __init__(self, proc: subprocess.CompletedProcess, out: Path) -> None:
        self.code, self.stdout, self.stderr, self.out = (proc.returncode, proc.stdout,
                                                         proc.stderr, out)
        path = out / "report.json"
        self.report = json.loads(path.read_text()) if path.exists() else None

    def top(self):
        return self.report["findings"][0] if self.report and self.report["findings"] else None


def run_diagnose(args, out: Path, timeout: float = 240.0, env=None) -> Run:
    """``python -m perfkit diagnose --out OUT ARGS`` from the repository root."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "perfkit", "diagnose", "--out", str(out),
                           *map(str, args)], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    return Run(proc, out)


@pytest.fixture(scope="session")
def diagnose_cmd():
    return run_diagnose
