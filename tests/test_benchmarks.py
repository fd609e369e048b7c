"""benchmarks/: every script imports against the current perfkit (a refactor that moves a
name breaks them silently otherwise), and the cheapest one runs end to end in QUICK mode.
Their speed targets are checked by running them, not here."""

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_benchmark_imports(path):
    ns = runpy.run_path(str(path), run_name="benchmark_import_check")  # main() does not run
    assert callable(ns.get("main")), f"{path.name} has no main()"


def test_collectives_benchmark_runs_quick():
    env = {**os.environ, "PERFKIT_QUICK": "1"}
    out = subprocess.run([sys.executable, "benchmarks/collectives.py"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    res = json.loads(out)
    assert set(res["ops"]) == {"all_reduce", "reduce_scatter", "all_gather", "broadcast"}
    for op, r in res["ops"].items():
        assert r["bandwidth_GBps"] > 0 and r["peak_busbw_GBps"] > 0, op
        assert len(r["points"]) == len(res["config"]["sizes_bytes"]), op
    assert all(r["ring_over_all_reduce"] > 0 for r in res["ring"])
